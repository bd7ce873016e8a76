"""``gpufleet experiment``: reproduce research experiments (mounted by the main CLI).

``gpufleet experiment fragmentation`` runs the FGD paper's fragmentation experiment on openb
traces (see :mod:`gpufleet.sim.experiments.fragmentation`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.errors import GpufleetError
from gpufleet.io.experiments import run_fragmentation
from gpufleet.scheduling import placement as _placement  # noqa: F401  (registers the policies)
from gpufleet.scheduling.framework import PLACEMENT
from gpufleet.sim.experiments.fragmentation import TraceResult

experiment_app = typer.Typer(help="Reproduce research experiments.", no_args_is_help=True)

DEFAULT_POLICIES = ["fgd", "bestfit", "fgd-cpu"]


@experiment_app.callback()
def _group() -> None:
    """Reproduce research experiments."""


CURVE_POINTS = range(0, 131, 10)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


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


def result_json(tr: TraceResult) -> dict[str, object]:
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


def _render(tr: TraceResult, console: Console) -> None:
    for title, unalloc in (("allocated GPUs (%)", False), ("unallocated GPUs (%)", True)):
        table = Table(title=f"{tr.trace}: {title}, median of {len(tr.seeds)} seeds, by arrived GPU request (%)")
        table.add_column("policy")
        for k in CURVE_POINTS:
            table.add_column(str(k), justify="right")
        for name, pr in tr.policies.items():
            curve = pr.median_unallocated_pct if unalloc else pr.median_allocation_pct
            table.add_row(name, *(f"{curve[k]:.2f}" for k in CURVE_POINTS))
        console.print(table)
    table = Table(title=f"{tr.trace}: unallocated GPUs (%) at 100% arrived vs the FGD paper")
    for col in ("policy", "gpufleet", "published", "difference"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, pr in tr.policies.items():
        mine, pub = pr.unallocated_at(100), pr.published_unallocated_at(100)
        table.add_row(
            name,
            f"{mine:.2f}",
            "—" if pub is None else f"{pub:.2f}",
            "—" if pub is None else f"{mine - pub:+.2f}",
        )
    console.print(table)


@experiment_app.command("fragmentation")
def fragmentation(
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help="Placement policy (repeatable).")] = None,
    trace: Annotated[
        list[str] | None,
        typer.Option("--trace", "-t", help="openb pod list: a packaged name (default, gpushare40...) or a CSV path."),
    ] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,43.")] = "42-51",
    published: Annotated[
        Path | None, typer.Option(help="Folder with the paper's analysis_allo_discrete.csv, to compare with.")
    ] = None,
    inflation: Annotated[float, typer.Option(help="Workload inflation (× cluster GPU capacity).")] = 1.3,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per trace, one per line.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Processes (runs are split by trace, policy, seed).")] = 1,
) -> None:
    """The FGD paper's fragmentation experiment: unallocated GPUs as the workload arrives."""
    policies = policy or list(DEFAULT_POLICIES)
    traces = trace or ["default"]
    for p in policies:
        if p not in PLACEMENT:
            raise _fail(f"unknown placement policy '{p}' (known: {', '.join(PLACEMENT.names())})")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if published is not None and not (published / "analysis_allo_discrete.csv").is_file():
        raise _fail(f"{published}: analysis_allo_discrete.csv not found")
    try:
        results = run_fragmentation(
            traces, policies, seed_list, inflation=inflation, published=published, workers=workers
        )
    except GpufleetError as exc:
        raise _fail(exc.message) from None
    if as_json:
        for tr in results:
            typer.echo(json.dumps(result_json(tr)))
        return
    console = Console()
    for tr in results:
        _render(tr, console)
