"""``gpufleet experiment``: reproduce research experiments (mounted by the main CLI).

``gpufleet experiment fragmentation`` runs the FGD paper's fragmentation experiment on openb
traces (see :mod:`gpufleet.sim.experiments.fragmentation`). The experiment (numpy, the placement
policies) is imported when the command runs, not when ``gpufleet`` starts.
"""

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.common import console, fail, handle_errors
from gpufleet.cli.progress import interactive, progress_bar
from gpufleet.cli.render import Col, make_table

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.sim.experiments.fragmentation import TraceResult

experiment_app = typer.Typer(help="Reproduce research experiments.", no_args_is_help=True)

DEFAULT_POLICIES = ["fgd", "bestfit", "fgd-cpu"]


@experiment_app.callback()
def _group() -> None:
    """Reproduce research experiments."""


CURVE_POINTS = range(0, 131, 10)


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,45,50`` (or a mix) → seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"bad --seeds {text!r} (use e.g. 42-51 or 42,43)") from None
    if not seeds:
        raise ValueError("--seeds is empty")
    return seeds


def _num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 2)


def result_json(tr: "TraceResult") -> dict[str, object]:
    policies: dict[str, object] = {}
    for name, pr in tr.policies.items():
        curve = pr.median_unallocated_pct
        pub = pr.published_unallocated_at(100)
        policies[name] = {
            "unallocated_at_100": _num(float(curve[100])),
            "curve": {str(k): _num(float(curve[k])) for k in range(len(curve))},
            "published_unallocated_at_100": None if pub is None else round(pub, 2),
        }
    return {"trace": tr.trace, "total_gpus": tr.total_gpus, "seeds": list(tr.seeds), "policies": policies}


def _render(tr: "TraceResult", out: "Console") -> None:
    """One row per arrived share (0 %, 10 % … 130 % of the cluster's GPUs), one column per policy:
    fits 80 columns for up to eight policies."""
    names = list(tr.policies)
    for what, unalloc in (("allocated GPUs (%)", False), ("unallocated GPUs (%)", True)):
        curves = {
            n: (pr.median_unallocated_pct if unalloc else pr.median_allocation_pct) for n, pr in tr.policies.items()
        }
        rows = [[f"{k}%", *(f"{curves[n][k]:.2f}" for n in names)] for k in CURVE_POINTS]
        title = [f"{tr.trace}: {what}", f"median of {len(tr.seeds)} seeds", "by arrived GPU request (% of capacity)"]
        curve_cols = [Col("ARRIVED", justify="right"), *(Col(n, justify="right") for n in names)]
        out.print(make_table(curve_cols, rows, title=title))
        out.print()
    rows = []  # the unallocated share at 100 % arrived, against the paper's
    for name, pr in tr.policies.items():
        mine, pub = pr.unallocated_at(100), pr.published_unallocated_at(100)
        rows.append(
            [name, f"{mine:.2f}", "–" if pub is None else f"{pub:.2f}", "–" if pub is None else f"{mine - pub:+.2f}"]
        )
    cols: list[Col | str] = ["POLICY", *(Col(h, justify="right") for h in ("GPUFLEET", "PUBLISHED", "DIFFERENCE"))]
    out.print(make_table(cols, rows, title=[f"{tr.trace}: unallocated GPUs (%) at 100% arrived", "vs the FGD paper"]))


@experiment_app.command("fragmentation")
@handle_errors
def fragmentation(
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help="Placement policy (repeatable).")] = None,
    trace: Annotated[
        list[str] | None,
        typer.Option(
            "--trace",
            "-t",
            help="openb pod list (repeatable): a packaged name (default, gpushare40, cpu050...), "
            "openb[:variant] as simulate takes it, or a CSV path.",
        ),
    ] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,43.")] = "42-51",
    published: Annotated[
        Path | None, typer.Option(help="Folder with the paper's analysis_allo_discrete.csv, to compare with.")
    ] = None,
    inflation: Annotated[float, typer.Option(help="Workload inflation (× cluster GPU capacity).")] = 1.3,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per trace, one per line.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Processes (runs are split by trace, policy, seed).")] = 1,
) -> None:
    """The FGD paper's fragmentation experiment: unallocated GPUs as the workload arrives.

    A progress bar with an ETA (runs done of trace × policy × seed) is shown on a terminal, never
    with --json."""
    from gpufleet.io.experiments import run_fragmentation
    from gpufleet.scheduling import placement as _placement  # noqa: F401  (registers the policies)
    from gpufleet.scheduling.framework import PLACEMENT

    policies = policy or list(DEFAULT_POLICIES)
    traces = trace or ["default"]
    for p in policies:
        if p not in PLACEMENT:
            raise fail(f"--policy: unknown placement policy '{p}' (known: {', '.join(PLACEMENT.names())})")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if published is not None and not (published / "analysis_allo_discrete.csv").is_file():
        raise fail(f"--published: {published}/analysis_allo_discrete.csv not found")
    with progress_bar("fragmentation", enabled=interactive(as_json), unit="runs") as progress:
        results = run_fragmentation(
            traces, policies, seed_list, inflation=inflation, published=published, workers=workers, progress=progress
        )
    if as_json:
        for tr in results:
            typer.echo(json.dumps(result_json(tr)))
        return
    for tr in results:
        _render(tr, console)
