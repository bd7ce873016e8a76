"""``gpufleet optimize`` (recommendations from the server), ``gpufleet whatif`` (a local replay with one
change) and the ROI renderer ``gpufleet cost --roi`` uses (:func:`render_roi`, :func:`roi_command`).

The simulator and the cost engine are imported when a command runs, not when ``gpufleet`` starts."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.cli import jobs
from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.jobs import JsonOpt, TokenOpt, UrlOpt
from gpufleet.cli.progress import interactive, progress_bar
from gpufleet.cli.render import Col, bad_option, emit_json, humanize_duration, make_table, money, note

if TYPE_CHECKING:
    from rich.table import Table

    from gpufleet.model.node import Node
    from gpufleet.scheduling.profile import Profile
    from gpufleet.sim.traces.base import Trace
    from gpufleet.wire import RecommendationOut, RoiOut


def recommendations_table(recs: "list[RecommendationOut]") -> "Table":
    cols = [
        Col("KIND"),
        Col("TARGET", cut="middle", min_width=10),
        Col("$/MONTH", justify="right"),
        Col("CONF.", justify="right"),
        Col("ACTION", cut="end", min_width=16),
        Col("WHAT-IF", cut="end", min_width=10),
    ]
    rows = [
        [
            escape(r.kind),
            escape(r.target),
            money(r.monthly_savings_usd),
            f"{r.confidence:.0%}",
            escape(r.action),
            escape(r.whatif or "–"),
        ]
        for r in recs
    ]
    return make_table(cols, rows, title="recommendations (largest $/month first)")


@handle_errors
def optimize(
    window: Annotated[str, typer.Option("--window", help="7d, 24h, month, or START,END (RFC 3339)")] = "7d",
    reserved_discount: Annotated[
        float | None, typer.Option("--reserved-discount", help="reserved price = (1 − this) × on-demand", min=0, max=1)
    ] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Ways to spend less: idle and underused GPUs, cheaper GPU types, sharing, spot, off-peak, batch
    size, early stopping, reserved capacity — each with $/month, confidence, the action and its what-if."""
    with jobs.make_client(url, token) as client:
        recs = client.recommendations(window, reserved_discount)
    if as_json:
        emit_json(recs)
    elif not recs:
        console.print("nothing to recommend in this window")
    else:
        console.print(recommendations_table(recs))
        total = sum(r.monthly_savings_usd for r in recs)
        console.print(f"up to {money(total)}/month if every recommendation is taken (they may overlap)")
        if not all(r.enough_history for r in recs):
            console.print("[dim]note: not enough history (under an hour): the figures are orders of magnitude[/]")


ROI_FORMATS = ("table", "json", "csv")


def render_roi(report: "RoiOut", fmt: str = "table") -> str:
    """The ROI report as text (``table``, ``json`` or ``csv``)."""
    from gpufleet.cost.roi import format_roi

    return format_roi(report.model_dump(mode="json"), fmt)


@handle_errors
def roi_command(
    window: Annotated[str, typer.Option("--window", help="30d, month, or START,END (RFC 3339)")] = "30d",
    platform_cost: Annotated[float, typer.Option("--platform-cost", help="one-time platform cost, USD", min=0)] = 0.0,
    platform_cost_per_month: Annotated[
        float, typer.Option("--platform-cost-per-month", help="running platform cost, USD/month", min=0)
    ] = 0.0,
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv")] = "table",
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Savings against a fixed on-demand cluster sized for the peak, by lever, with payback."""
    if fmt not in ROI_FORMATS:  # judged before the server is asked
        raise bad_option("--format", f"{fmt!r} is not one of {', '.join(ROI_FORMATS)}")
    with jobs.make_client(url, token) as client:
        report = client.roi(window, platform_cost, platform_cost_per_month)
    typer.echo(render_roi(report, fmt), nl=False)


def _history_trace(window: str, db_url: str | None, limit: int | None) -> "tuple[Trace, list[Node]]":
    """The jobs this server ran in ``window`` (``30d``, ``month``, an RFC 3339 pair) as a trace —
    submit times, recorded run times, shapes, teams: the workload a what-if replays — and the
    on-demand nodes that existed then, at the prices the ledger billed: the cluster it replays on."""
    import time

    from gpufleet.api.windows import parse_window
    from gpufleet.services.whatif import history_nodes, history_trace
    from gpufleet.store.db import Database, default_db_url, refuse_url_on_command_line

    w = parse_window(window, time.time(), field="--trace history:WINDOW")
    database = Database(refuse_url_on_command_line(db_url) or default_db_url())
    try:
        trace = history_trace(database, w.start, w.end, name=f"history:{window}", limit=limit)
        return trace, history_nodes(database, w.start, w.end)
    finally:
        database.dispose()


def _history_profile(db_url: str | None, base: "Profile") -> "Profile":
    """``base`` with the teams' quotas, cohorts and weights the store holds: the rules it schedules by."""
    from gpufleet.services.whatif import history_profile
    from gpufleet.store.db import Database, default_db_url, refuse_url_on_command_line

    database = Database(refuse_url_on_command_line(db_url) or default_db_url())
    try:
        return history_profile(database, base)
    finally:
        database.dispose()


@handle_errors
def whatif(
    change: Annotated[
        str,
        typer.Option(
            "--change",
            help="spot | autoscaling | sharing | gpu-type:MODEL | placement:POLICY | queue:SORT (join with +)",
        ),
    ],
    trace: Annotated[
        str,
        typer.Option(
            help="history[:WINDOW] (this server's recorded jobs, e.g. history:30d) | philly:PATH | "
            "synthetic[:seed] | openb[:variant] | FILE.jsonl|.csv"
        ),
    ] = "synthetic",
    db: Annotated[
        str | None,
        typer.Option(help="store to read history from, without a password (default: $GPUFLEET_DB or the server's)"),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="only the first N jobs", min=1)] = None,
    preemptible: Annotated[
        float, typer.Option(help="philly: fraction of preemptible jobs that checkpoint every 30 min", min=0, max=1)
    ] = 0.3,
    spot_hazard: Annotated[float, typer.Option(help="spot interruptions per spot node-hour", min=0)] = 0.01,
    profile: Annotated[Path | None, typer.Option(help="scheduler profile YAML (both runs)")] = None,
    cluster: Annotated[Path | None, typer.Option(help="cluster YAML: the baseline's nodes")] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="the server's settings YAML: a history replay schedules by its scheduler profile, cycle "
            "interval and the store's team quotas (without it: the defaults, as the MCP what-if)",
        ),
    ] = None,
    seed: Annotated[int, typer.Option()] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Replay a trace twice — a fixed on-demand cluster, and the same with ONE change — and report the
    cost, wait and JCT difference and how close the variant gets to the lower bound."""
    from gpufleet.io.catalog import load_catalog
    from gpufleet.io.traces import TraceOptions, load_trace
    from gpufleet.scheduling.profile import Profile, load_profile
    from gpufleet.sim.clusterspec import load_cluster
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.whatif import parse_change, run_whatif

    ch = parse_change(change)
    nodes = load_cluster(cluster).build()[0] if cluster else None
    prof = load_profile(profile) if profile else Profile()
    cycle_s = SimOptions().cycle_interval_s
    if trace == "history" or trace.startswith("history:"):
        tr, observed = _history_trace(trace.partition(":")[2] or "30d", db, limit)
        nodes = nodes or observed or None  # the server's own cluster unless --cluster says otherwise
        if config is not None:
            # a replay of production: the server's rules (its settings file and GPUFLEET_* environment)
            # unless --profile says otherwise, the teams' quotas as the store holds them, its cycle interval
            from gpufleet.server.settings import load_settings

            settings = load_settings(config)
            cycle_s = settings.cycle_interval_s
            prof = _history_profile(db, prof if profile else settings.scheduler)
    else:
        tr = load_trace(trace, TraceOptions(limit=limit, preemptible_fraction=preemptible, seed=seed))
    if not as_json:
        note(f"what-if [bold]{escape(ch.text)}[/] on {escape(tr.name)}: {len(tr.jobs):,} jobs, baseline and variant …")
    with progress_bar("what-if", enabled=interactive(as_json), labels=("baseline", "variant")) as progress:
        result = run_whatif(
            tr,
            ch,
            profile=prof,
            nodes=nodes,
            options=SimOptions(
                seed=seed, spot_hazard_per_node_hour=spot_hazard, progress=progress, cycle_interval_s=cycle_s
            ),
            catalog=load_catalog(),
        )
    d = result.to_dict()
    if as_json:
        typer.echo(json.dumps(d, default=str))
        return
    b, v = d["baseline"], d["variant"]
    rows = []
    for key, label in (
        ("cost_usd", "cost"),
        ("wait_mean_s", "wait mean"),
        ("wait_p95_s", "wait p95"),
        ("jct_mean_s", "JCT mean"),
        ("jct_p95_s", "JCT p95"),
        ("utilization", "utilization"),
        ("completed", "completed"),
        ("waste_gpu_hours", "preemption waste (GPU-h)"),
        ("waste_share", "waste share"),
    ):
        bv, vv = b[key], v[key]
        # cost: over one horizon (the baseline's cluster kept on while the variant runs longer)
        delta = d["delta"]["cost_usd"] if key == "cost_usd" else (None if bv is None or vv is None else vv - bv)
        rows.append([label, _fmt(bv, key), _fmt(vv, key), _fmt(delta, key, signed=True)])
    title = [f"what-if {ch.text}", f"{tr.name} ({len(tr.jobs):,} jobs, seed {seed})"]
    cols: list[Col | str] = ["", *(Col(h, justify="right") for h in ("BASELINE", "VARIANT", "Δ"))]
    console.print(make_table(cols, [[escape(c) for c in r] for r in rows], title=title))
    pct = d["savings_pct"]
    console.print(
        f"savings {money(d['savings_usd'])}"
        + (f" ({pct:.1%})" if pct is not None else "")
        + f"; lower bound {money(d['lower_bound_usd'])} — variant at "
        + (f"{d['variant_over_lower_bound']:.2f}×" if d["variant_over_lower_bound"] else "–")
        + " of it",
        highlight=False,
    )
    for a in d["assumptions"]:
        console.print(f"[dim]note: {escape(a)}[/]")


def _fmt(v: object, key: str = "", *, signed: bool = False) -> str:
    """A what-if figure in human units: money (``*_usd``) as ``$1,234.56``, durations (``*_s``) as
    ``5m09s``, utilization as a percentage; ``signed`` for the Δ column."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    sign = "+" if signed and v > 0 else "-" if signed and v < 0 else ""
    mag = abs(v) if signed else v
    if key.endswith("_usd"):
        return sign + money(mag)
    if key.endswith("_s"):
        return sign + humanize_duration(mag)
    if key in ("utilization", "waste_share"):
        return f"{v:+.1%}" if signed else f"{v:.1%}"
    plus = "+" if signed else ""
    if isinstance(v, float):
        return f"{v:{plus},.3f}" if abs(v) < 10 else f"{v:{plus},.0f}"
    return f"{v:{plus},}"
