"""``gpufleet simulate``: replay a trace through the real scheduler and report.

The simulator, the trace readers and the price catalog are imported when the command runs, not when
``gpufleet`` starts (every other command would pay for them)."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.progress import interactive, progress_bar
from gpufleet.cli.render import Col, humanize_duration, make_table, money, note


@handle_errors
def simulate(
    trace: Annotated[
        str, typer.Option(help="openb[:variant] | philly:PATH | synthetic[:seed] | FILE.jsonl|.csv")
    ] = "openb",
    profile: Annotated[Path | None, typer.Option(help="scheduler profile YAML")] = None,
    cluster: Annotated[Path | None, typer.Option(help="cluster YAML (nodes and pools)")] = None,
    placement: Annotated[str | None, typer.Option(help="placement policy (overrides the profile)")] = None,
    queue: Annotated[str | None, typer.Option(help="queue sort: fifo|priority|drf|decayed")] = None,
    backfill: Annotated[str | None, typer.Option(help="easy|greedy|strict")] = None,
    autoscale: Annotated[bool | None, typer.Option("--autoscale/--no-autoscale", help="autoscaler on/off")] = None,
    spot_hazard: Annotated[float, typer.Option(help="spot interruptions per spot node-hour")] = 0.0,
    failure_prob: Annotated[float, typer.Option(help="chance a run fails")] = 0.0,
    preemptible: Annotated[float, typer.Option(help="philly: fraction of preemptible, checkpointing jobs")] = 0.0,
    elastic: Annotated[
        bool, typer.Option(help="the trace's nodes become autoscaled pools that start empty (implies --autoscale)")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="only the first N jobs", min=1)] = None,
    seed: Annotated[int, typer.Option()] = 0,
    report: Annotated[Path | None, typer.Option(help="write a self-contained HTML report here")] = None,
    out: Annotated[Path | None, typer.Option(help="write jobs.csv, timeseries.csv and result.json here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Replay a trace with queueing, quotas, fair share, preemption, backfill, spot and autoscaling.

    A progress bar with an ETA (jobs ended of the trace's) is shown on a terminal, never with --json."""
    from gpufleet.io.catalog import load_catalog
    from gpufleet.io.results import write_csv, write_json
    from gpufleet.io.traces import TraceOptions, load_trace
    from gpufleet.scheduling.profile import Profile, load_profile
    from gpufleet.sim.clusterspec import load_cluster
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.report import render_html
    from gpufleet.sim.runner import run_simulation

    prof = load_profile(profile) if profile else Profile()
    overrides: dict[str, object] = {}
    if placement:
        overrides["placement"] = [{"name": p.strip()} for p in placement.split(",")]
    if queue:
        overrides["queue_sort"] = queue
    if backfill:
        overrides["backfill"] = backfill
    if autoscale is not None or elastic:
        overrides["autoscaler"] = {**prof.autoscaler.model_dump(), "enabled": bool(autoscale or elastic)}
    if overrides:
        prof = load_profile({**prof.model_dump(), **overrides}, source="command line")
    tr = load_trace(trace, TraceOptions(limit=limit, preemptible_fraction=preemptible, seed=seed))
    spec = load_cluster(cluster) if cluster else None
    if not as_json:
        note(f"simulating [bold]{escape(tr.name)}[/]: {len(tr.jobs):,} jobs …")
    with progress_bar("simulating", enabled=interactive(as_json)) as progress:
        opts = SimOptions(
            seed=seed, spot_hazard_per_node_hour=spot_hazard, failure_prob=failure_prob, progress=progress
        )
        result = run_simulation(tr, prof, cluster=spec, options=opts, catalog=load_catalog(), elastic=elastic)
    summary = result.summary()
    if report:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(render_html(result), encoding="utf-8")
    if out:
        write_csv(result, out)
        write_json(result, out / "result.json")
    if as_json:
        print(json.dumps(summary, default=str))
        return
    rows: list[list[str]] = []
    for k, v in summary.items():
        if isinstance(v, dict):
            rows += [[f"{k}.{kk}", _fmt(vv, kk)] for kk, vv in v.items()]
        else:
            rows.append([k, _fmt(v, k)])
    title = [tr.name, f"{prof.queue_sort} / {'+'.join(p.name for p in prof.placement)} / backfill {prof.backfill}"]
    console.print(make_table(["METRIC", Col("VALUE", justify="right")], rows, title=title))
    if report:
        note(f"report: {report}")


def _fmt(v: object, key: str = "") -> str:
    """A summary value in human units: durations (``*_s``) as ``34m44s``, money (``*_usd``) as
    ``$1,298.00``, utilization as a percentage; counts with thousands separators."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if key.endswith("_s"):
        return f"{v:.1f}s" if abs(v) < 60 else humanize_duration(v)
    if key.endswith("_usd"):
        return money(v)
    if key == "utilization" or key.endswith("_share"):
        return f"{v:.1%}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return f"{v:,}"
