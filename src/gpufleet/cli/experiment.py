"""``gpufleet experiment``: reproduce research experiments (mounted by the main CLI).

``gpufleet experiment fragmentation`` runs the FGD paper's fragmentation experiment on openb
traces (see :mod:`gpufleet.experiments.fragmentation`). The experiment (numpy, the placement
policies) is imported when the command runs, not when ``gpufleet`` starts.
"""

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.cli.common import console, err_console, fail, handle_errors
from gpufleet.cli.progress import interactive, progress_bar
from gpufleet.cli.render import Col, make_table

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.experiments.fragmentation import TraceResult
    from gpufleet.experiments.inference.model import Precision

experiment_app = typer.Typer(help="Reproduce research experiments (e.g. FGD fragmentation).", no_args_is_help=True)

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
    from gpufleet.io.fragmentation import run_fragmentation
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


# -------------------------------------------------------------------------------------- inference


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise fail(f"{what}: expected integers ≥ 1, got {text!r}")
    return vals


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"{what}: expected comma-separated numbers, got {text!r}") from None
    if not vals or any(not v > 0 for v in vals):
        raise fail(f"{what}: expected numbers > 0, got {text!r}")
    return vals


@experiment_app.command("inference")
@handle_errors
def inference(
    device: Annotated[str, typer.Option(help="auto (CUDA when available, else the CPU), cpu, cuda, cuda:N.")] = "auto",
    batch: Annotated[str, typer.Option(help="Batch sizes, comma-separated.")] = "1,4,8,16,32",
    precision: Annotated[
        str | None,
        typer.Option(
            help="Precisions (fp32, bf16, fp16, int8), comma-separated. Default: CPU fp32,bf16,int8; "
            "CUDA fp32,fp16,bf16."
        ),
    ] = None,
    duration: Annotated[float, typer.Option(min=0.05, help="Seconds measured per configuration.")] = 1.0,
    rounds: Annotated[
        int, typer.Option(min=1, help="Interleaved slices each configuration's time is measured in.")
    ] = 4,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads per configuration (each pinned to a core).")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the data split, the weights and the load generator.")] = 0,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs.")] = 12,
    max_accuracy_drop: Annotated[
        float, typer.Option(min=0.0, help="Challenge: accuracy a step may lose (percentage points) and be kept.")
    ] = 1.0,
    p99_slo_ms: Annotated[
        float | None, typer.Option(help="Challenge: reject a step whose p99 exceeds this (ms).", show_default=False)
    ] = None,
    project_gpu: Annotated[
        list[str] | None,
        typer.Option("--project-gpu", help="GPU type to project by price (repeatable; default T4 and L4)."),
    ] = None,
    sharing: Annotated[bool, typer.Option("--sharing", help="Also: two workloads sharing one device.")] = False,
    scaling: Annotated[bool, typer.Option("--scaling", help="Also: N replicas against an open-loop rate.")] = False,
    full: Annotated[bool, typer.Option("--full", help="Both --sharing and --scaling.")] = False,
    rates: Annotated[
        str | None, typer.Option(help="Scaling: request rates per second (default: ¼, ½, 1, 2 × batch-1 throughput).")
    ] = None,
    replicas: Annotated[
        str | None, typer.Option(help="Scaling: replica counts to measure (default 1..cores, at most 4).")
    ] = None,
    slo_ms: Annotated[float, typer.Option(min=0.001, help="Scaling: the p99 latency SLO (ms).")] = 25.0,
    catalog: Annotated[Path | None, typer.Option(help="Price catalog CSV (default: the bundled one).")] = None,
    usd_per_vcpu_hour: Annotated[
        float | None, typer.Option(help="CPU price per vCPU-hour (default $0.048, AWS m6i).", show_default=False)
    ] = None,
    usd_per_gpu_hour: Annotated[
        float | None,
        typer.Option(help="Price of the measured GPU per hour (default: the catalog's).", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, whatever the terminal's width.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write result.json, table.md and a plot here.")] = None,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="Log each configuration as an MLflow run (e.g. file:///tmp/mlruns).")
    ] = None,
    mlflow_experiment: Annotated[str, typer.Option(help="MLflow experiment name.")] = "gpufleet-inference",
) -> None:
    """A real model served for inference on this machine's devices: throughput, latency, accuracy
    and $ per 1,000 inferences, and the cost optimization challenge (batch 1 FP32 → batch 8 →
    BF16/FP16 → INT8 → another device type). Needs the ``inference`` extra (PyTorch, scikit-learn)."""
    import importlib.util

    missing = [m for m in ("torch", "sklearn") if importlib.util.find_spec(m) is None]
    if missing:
        raise fail(f"needs {' and '.join(missing)}: pip install 'gpufleet[inference]'")
    if mlflow_uri and importlib.util.find_spec("mlflow") is None:
        raise fail("--mlflow-uri needs mlflow: pip install 'gpufleet[mlflow]'")

    from gpufleet.experiments.inference import report
    from gpufleet.experiments.inference.model import PRECISIONS, UnsupportedConfig
    from gpufleet.experiments.inference.run import DEFAULT_PROJECT_GPUS, InferenceConfig, run_inference_experiment
    from gpufleet.io.catalog import load_catalog

    precisions: tuple[Precision, ...] | None = None
    if precision:
        names = [p.strip().lower() for p in precision.split(",") if p.strip()]
        bad = [p for p in names if p not in PRECISIONS]
        if bad or not names:
            raise fail(f"--precision: unknown {', '.join(bad) or precision!r} (known: {', '.join(PRECISIONS)})")
        precisions = tuple(next(k for k in PRECISIONS if k == n) for n in names)  # typed as Precision
    cfg = InferenceConfig(
        device=device,
        batches=_ints(batch, "--batch"),
        precisions=precisions,
        duration_s=duration,
        rounds=rounds,
        threads=threads,
        seed=seed,
        epochs=epochs,
        max_accuracy_drop_pp=max_accuracy_drop,
        p99_slo_ms=p99_slo_ms,
        project_gpus=tuple(project_gpu) if project_gpu else DEFAULT_PROJECT_GPUS,
        usd_per_vcpu_hour=usd_per_vcpu_hour,
        usd_per_gpu_hour=usd_per_gpu_hour,
        sharing=sharing or full,
        scaling=scaling or full,
        scaling_rates=_floats(rates, "--rates") if rates else None,
        scaling_replicas=_ints(replicas, "--replicas") if replicas else None,
        scaling_slo_ms=slo_ms,
    )
    prices = load_catalog(catalog)
    show = interactive(as_json)

    def say(msg: str) -> None:
        if show:
            err_console.print(f"[dim]{msg}[/dim]")

    try:
        res = run_inference_experiment(cfg, prices, progress=say)
    except UnsupportedConfig as exc:
        raise fail(str(exc)) from None
    doc = res.to_dict()
    if mlflow_uri:
        from gpufleet.experiments.inference.tracking import log_runs

        doc["mlflow"] = {
            "uri": mlflow_uri,
            "experiment": mlflow_experiment,
            "run_ids": log_runs(res, mlflow_uri, mlflow_experiment),
        }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        kind, data = report.plot(res)
        doc["files"] = [str(out / n) for n in ("result.json", "table.md", f"plot.{kind}")]
        (out / f"plot.{kind}").write_bytes(data)
        (out / "table.md").write_text(report.markdown(res), encoding="utf-8")
        (out / "result.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(doc))
        return
    for tb in report.tables(res):
        cols = [
            Col(h, justify="right" if i in tb.right else "left", hide=tb.hide.get(i, 0))
            for i, h in enumerate(tb.columns)
        ]
        console.print(make_table(cols, tb.rows, title=tb.title, wide=wide))
        console.print()
    for line in report.notes(res):
        console.print(f"[dim]• {escape(line)}[/dim]")
    if "mlflow" in doc:
        console.print(f"MLflow: {len(doc['mlflow']['run_ids'])} runs in {mlflow_experiment!r} at {mlflow_uri}")
    for f in doc.get("files", []):
        console.print(f"wrote {f}")
