"""``gpufleet cost``: what GPUs cost, by any dimension, from the API (with the server's pricing
rules); and ``gpufleet cost update-prices``: merge prices into the catalog (a CSV, or AWS).

Thin like the other API commands: parse, one SDK call, render. ``--format`` picks a table for
people (``table``: GPU-hours and totals; ``detailed``: GPU/CPU/memory columns and the priority
adjustment), ``json`` (the wire model) or ``csv`` (one line per row and per summary line, with a
``kind`` column) for machines; both machine formats go to stdout alone.
"""

import csv
import importlib
import io
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.cli import jobs
from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.jobs import TokenOpt, UrlOpt
from gpufleet.cli.render import (
    EXIT_INPUT,
    Col,
    Row,
    bad_option,
    emit_json,
    make_table,
    money,
    note,
    window_title,
)

if TYPE_CHECKING:
    from rich.table import Table

    from gpufleet.sdk.client import Client
    from gpufleet.wire import CostLineOut, UsageReport

FORMATS = ("table", "detailed", "json", "csv")
_DURATION = re.compile(r"^\d+(\.\d+)?[mhdw]$")

cost_app = typer.Typer(
    help="Cost by team, project, label, ... over a window (pricing rules of the server apply).",
    invoke_without_command=True,
    no_args_is_help=False,
)


def parse_by(text: str) -> list[str]:
    """``team,project`` → names, checked against the dimensions (exit 2 naming ``--by``)."""
    from gpufleet.cost.report import DIMENSIONS

    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise bad_option("--by", "name at least one dimension (e.g. team)")
    for name in names:
        if name not in DIMENSIONS and not (name.startswith("label:") and len(name) > len("label:")):
            raise bad_option("--by", f"unknown dimension {name!r} (known: {', '.join(DIMENSIONS)}, label:<key>)")
    if len(set(names)) != len(names):
        raise bad_option("--by", f"a dimension is given twice in {text!r}")
    return names


def parse_labels(items: list[str] | None) -> list[str]:
    """``k=v`` items, checked (exit 2 naming ``--label``); passed on as given."""
    out = []
    for item in items or []:
        key, eq, _ = item.partition("=")
        if not eq or not key.strip():
            raise bad_option("--label", f"{item!r} is not KEY=VALUE")
        out.append(item)
    return out


def choose_window(last: str | None, window: str | None) -> str:
    if last is not None and window is not None:
        raise bad_option("--last", "give --last or --window, not both")
    if last is not None:
        if not _DURATION.match(last.strip().lower()):
            raise bad_option("--last", f"{last!r} is not a duration such as 90m, 24h, 30d or 2w")
        return last.strip().lower()
    return window if window is not None else "30d"


def fetch_report(
    client: "Client", window: str, by: list[str], spread_idle: bool, team: str | None, labels: list[str]
) -> "UsageReport":
    """``GET /v1/usage`` with the filters."""
    return client.usage(window, by, spread_idle, team=team, labels=labels)


@cost_app.callback(invoke_without_command=True)
@handle_errors
def cost(
    ctx: typer.Context,
    last: Annotated[str | None, typer.Option("--last", help="a duration back from now: 24h, 30d, 2w")] = None,
    window: Annotated[
        str | None,
        typer.Option("--window", help="today, yesterday, week, month, lastmonth, 7d, or START,END (RFC 3339)"),
    ] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="group by (comma-separated): team, project, namespace, experiment, cost_center, job, node, "
            "pool, gpu_model, capacity_type, priority, label:<key>",
        ),
    ] = "team",
    team: Annotated[str | None, typer.Option("--team", help="only this team's rows")] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="only rows with this job label, KEY=VALUE (repeatable)")
    ] = None,
    spread_idle: Annotated[
        bool, typer.Option("--spread-idle", help="charge idle capacity to the rows in proportion to use")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="table, detailed, json or csv")] = "table",
    roi: Annotated[bool, typer.Option("--roi", help="the ROI report instead (cost per result)")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cost over a window (default the last 30 days) by team or any other dimension, with idle
    capacity, priority adjustments and unused reserved commitment on their own lines."""
    if ctx.invoked_subcommand is not None:
        return
    if fmt not in FORMATS:
        raise bad_option("--format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    win = choose_window(last, window)
    names = parse_by(by)
    labels = parse_labels(label)
    if roi:
        _roi(win, names, team, fmt, url, token)
        return
    with jobs.make_client(url, token) as client:
        report = fetch_report(client, win, names, spread_idle, team, labels)
    if fmt == "json":
        emit_json(report)
    elif fmt == "csv":
        typer.echo(report_csv(report), nl=False)
    else:
        console.print(cost_table(report, detailed=fmt == "detailed"))
        if report.reservations:
            console.print(reservations_table(report))


def _roi(window: str, by: list[str], team: str | None, fmt: str, url: str | None, token: str | None) -> None:
    """Hand over to the ROI engine's CLI renderer: ``gpufleet.cost.roi.render_cli(client, *,
    window, by, team, fmt) -> str`` (imported lazily; it may not exist in this build)."""
    try:
        render = importlib.import_module("gpufleet.cost.roi").render_cli
    except (ImportError, AttributeError):
        raise bad_option("--roi", "ROI report not available") from None
    with jobs.make_client(url, token) as client:
        out = render(client, window=window, by=by, team=team, fmt=fmt)
    if out:
        typer.echo(str(out), nl=not str(out).endswith("\n"))


# -- rendering ------------------------------------------------------------------------------------


def _summary_lines(report: "UsageReport") -> "list[tuple[str, CostLineOut]]":
    """The lines below the rows, as (kind, line): shown when they hold money (idle and total always)."""
    out: list[tuple[str, CostLineOut]] = []
    if report.other is not None and (report.filters or _nonzero(report.other)):
        out.append(("other", report.other))
    if report.adjustment is not None and _nonzero(report.adjustment):
        out.append(("adjustment", report.adjustment))
    out.append(("idle", report.idle))
    if report.reservation_unused is not None and (report.reservations or _nonzero(report.reservation_unused)):
        out.append(("reservation_unused", report.reservation_unused))
    out.append(("total", report.totals))
    return out


_LABELS = {
    "other": "(other rows)",
    "adjustment": "(priority adj.)",
    "idle": "(idle)",
    "reservation_unused": "(unused reserved)",
    "total": "total",
}


def _nonzero(line: "CostLineOut") -> bool:
    return Decimal(line.total_cost_usd) != 0


def cost_table(report: "UsageReport", *, detailed: bool = False, width: int | None = None) -> "Table":
    """Rows by the report's dimensions, GPU-hours and money; the summary lines below. The title's
    parts (the window, the filters, the rules) each stay on one line at any terminal width."""
    title = [window_title("cost", report.window_start, report.window_end)]
    if report.filters:
        title.append(", ".join(f"{k}={v}" for k, v in report.filters.items()))
    if report.rules:
        title.append(f"rules: {report.rules}")
    keys = list(report.aggregate)
    money_cols = ["GPU $", "CPU $", "MEMORY $", "ADJ $", "TOTAL $"] if detailed else ["TOTAL $"]
    cols = [
        *(Col(k.upper(), cut="middle", min_width=max(8, len(k))) for k in keys),
        *(Col(c, justify="right") for c in ["GPU-H", *money_cols]),
    ]

    def line_row(line: "CostLineOut", label: str | None = None, style: str | None = None) -> Row:
        cells = [
            (label if i == 0 else "") if label is not None else escape(line.key.get(k) or "–")
            for i, k in enumerate(keys)
        ]
        amounts = [line.gpu_cost_usd, line.cpu_cost_usd, line.memory_cost_usd, line.adjustment_usd]
        values = (
            [*(money(a) for a in amounts), money(line.total_cost_usd)] if detailed else [money(line.total_cost_usd)]
        )
        return Row([*cells, f"{line.gpu_hours:,.1f}", *values], style)

    rows = [line_row(line) for line in report.rows]
    for kind, line in _summary_lines(report):
        sign = "−" if kind == "adjustment" else ""
        rows.append(line_row(line, sign + _LABELS[kind], "bold" if kind == "total" else "dim"))
    return make_table(cols, rows, title=title, width=width)


def reservations_table(report: "UsageReport", *, width: int | None = None) -> "Table":
    cols = [
        Col("NAME", cut="middle", min_width=8),
        Col("GPU"),
        *(Col(c, justify="right") for c in ("GPUS", "GPU-H", "COMMITTED $", "COVERED $", "UNUSED $")),
    ]
    rows = [
        [
            escape(r.name),
            escape(r.gpu_model),
            str(r.gpus),
            f"{r.committed_gpu_hours:,.1f}",
            money(r.committed_usd),
            money(r.covered_usd),
            money(r.unused_usd),
        ]
        for r in report.reservations
    ]
    return make_table(cols, rows, title="reserved commitments", width=width)


CSV_MONEY = ("gpu_cost_usd", "cpu_cost_usd", "memory_cost_usd", "adjustment_usd", "total_cost_usd")


def report_csv(report: "UsageReport") -> str:
    """One CSV line per row and per summary line (``kind``: row, other, adjustment, idle,
    reservation_unused, total); ``sum(row) + other − adjustment + idle + reservation_unused = total``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = list(report.aggregate)
    w.writerow(["kind", *keys, "gpu_hours", *CSV_MONEY])
    lines = [("row", ln) for ln in report.rows]
    for kind, line in _summary_lines(report):
        lines.append((kind, line))
    for kind, line in lines:
        key = [line.key.get(k, "") if kind == "row" else "" for k in keys]
        w.writerow([kind, *key, repr(line.gpu_hours), *(getattr(line, c) for c in CSV_MONEY)])
    return buf.getvalue()


# -- update-prices --------------------------------------------------------------------------------


@cost_app.command("update-prices")
@handle_errors
def update_prices(
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="a CSV of prices in the catalog's columns", show_default=False)
    ] = None,
    aws: Annotated[bool, typer.Option("--aws", help="on-demand prices from the AWS Price List API (boto3)")] = False,
    region: Annotated[str, typer.Option("--region", help="AWS region of the prices (with --aws)")] = "us-east-1",
    catalog: Annotated[
        Path | None, typer.Option("--catalog", help="the catalog to merge into (default: the bundled one)")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="write the merged catalog here (and PATH.provenance.json); default stdout"),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="a repaired row is an error")] = False,
) -> None:
    """Merge prices into the catalog, validated like any catalog, with provenance (sha256, source)."""
    from gpufleet.cost.catalog import PriceCatalog
    from gpufleet.cost.catalog_update import (
        PriceSourceUnavailable,
        aws_pricing_client,
        fetch_aws_prices,
        merge_csv,
    )

    if (csv_path is None) == (not aws):
        raise bad_option("--csv", "give one source: --csv FILE or --aws")
    base = PriceCatalog.load(catalog, strict=False)
    base_data = catalog.read_bytes() if catalog is not None else None
    if csv_path is not None:
        try:
            data = csv_path.read_bytes()
        except OSError as e:
            raise bad_option("--csv", f"cannot read {csv_path}: {e.strerror}") from None
        source = str(csv_path)
    else:
        try:
            data, skipped = fetch_aws_prices(aws_pricing_client(), region)
        except PriceSourceUnavailable as e:
            note(f"[bold red]error:[/] {e}")
            raise typer.Exit(EXIT_INPUT) from None
        source = f"aws-pricing:{region}"
        if skipped:
            note(f"skipped {len(skipped)} instance type(s) with no known GPU model or price: {', '.join(skipped[:8])}")
    update = merge_csv(base, data, source=source, base_data=base_data, strict=strict)
    prov = update.provenance
    for w in update.catalog.warnings:
        note(f"[yellow]warning:[/] {w}")
    note(
        f"merged {source} (sha256 {prov.input_sha256[:12]}) into {prov.base_source}: "
        f"{len(prov.added)} added, {len(prov.updated)} updated, {prov.unchanged} unchanged"
        + (f", spot kept for {len(prov.kept_spot)}" if prov.kept_spot else "")
    )
    if out is None:
        typer.echo(update.csv_text, nl=False)
        return
    out.write_text(update.csv_text)
    side = out.with_name(out.name + ".provenance.json")
    side.write_text(json.dumps(prov.as_dict(), indent=2) + "\n")
    note(f"wrote {out} (sha256 {prov.output_sha256[:12]}) and {side}")
