"""Rendering for the commands: Rich tables for people (one style, fitted to the terminal), JSON for
machines, and the mapping of every failure to one line on stderr plus a meaningful exit code.

Exit codes — the same for every command (also in ``gpufleet --help`` and the README), so scripts can
tell "the job failed" from "the server is down":

===  ========================================================================================
0    ok (also: Ctrl-C ending ``--watch``)
1    the job ended unsuccessfully (``submit --wait``, ``wait``)
2    bad input: an option, a file, a config or a trace (local parsing, or a 400/422 answer)
3    not found (job, team, token, budget)
4    unauthenticated (401) or forbidden (403)
5    unavailable: the server (cannot connect, or 502/503/504 after retries) or the store
6    conflict (409; a budget that blocks the job: 402, ``budget check``)
7    ``wait`` timed out before the job ended
8    any other error (e.g. a 500 from the server, an unexpected answer)
130  interrupted (Ctrl-C)
===  ========================================================================================

Light to import (every command imports it): the wire models are only named in annotations, and the
SDK's error classes are imported when an error is being reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpufleet.cli.common import EXIT_INTERRUPTED, console, err_console, fail
from gpufleet.errors import (
    AuthError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    RegistryError,
    StoreError,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from gpufleet.wire import (
        CostLineOut,
        JobEventOut,
        JobOut,
        NodeOut,
        QueueEntry,
        TeamOut,
        TokenOut,
        UsageReport,
    )

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_AUTH = 4
EXIT_UNAVAILABLE = 5
EXIT_CONFLICT = 6
EXIT_WAIT_TIMEOUT = 7
EXIT_OTHER = 8

EXIT_CODES_EPILOG = (
    "Exit codes: 0 ok · 1 the job ended unsuccessfully · 2 bad input · 3 not found · "
    "4 unauthenticated/forbidden · 5 server unavailable · 6 conflict · 7 wait timed out · 8 other error · "
    f"{EXIT_INTERRUPTED} interrupted."
)


def exit_code_for(exc: GpufleetError) -> int:
    """The exit code of an error (order matters: the most specific family first)."""
    from gpufleet.sdk.errors import ServerUnavailable, WaitTimeout

    if isinstance(exc, WaitTimeout):
        return EXIT_WAIT_TIMEOUT
    if isinstance(exc, ServerUnavailable | StoreError):
        return EXIT_UNAVAILABLE
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, AuthError | PermissionDeniedError):
        return EXIT_AUTH
    if isinstance(exc, ConflictError):
        return EXIT_CONFLICT
    if isinstance(exc, InputError | RegistryError):  # a RegistryError: an unknown policy name was given
        return EXIT_INPUT
    return EXIT_OTHER


def report_error(exc: GpufleetError) -> int:
    """Print the error as one line on stderr and return its exit code."""
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return exit_code_for(exc)


def bad_option(option: str, message: str) -> typer.Exit:
    """One line naming the option, exit 2."""
    return fail(escape(f"{option}: {message}"), EXIT_INPUT)


def note(message: str) -> None:
    """Chatter for people goes to stderr, so stdout stays clean for ``$(gpufleet ...)``."""
    err_console.print(message, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------- formatting


def emit_json(obj: Any) -> None:
    """Machine output: JSON of wire models (or lists/dicts of them) on stdout, no colours, no wrapping."""
    import pydantic_core

    typer.echo(pydantic_core.to_json(obj, indent=2).decode())


def humanize_duration(seconds: float | None) -> str:
    """``42s``, ``5m09s``, ``2h05m``, ``3d04h``; ``–`` for unknown."""
    if seconds is None or math.isnan(seconds):
        return "–"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _now() -> datetime:
    return datetime.now(UTC)


def ago(when: datetime | None, now: datetime | None = None) -> str:
    if when is None:
        return "–"
    return humanize_duration(((now or _now()) - when).total_seconds()) + " ago"


def until(when: datetime | None, now: datetime | None = None) -> str:
    if when is None:
        return "unknown"
    delta = (when - (now or _now())).total_seconds()
    return "now" if delta <= 0 else "in " + humanize_duration(delta)


def runtime(job: JobOut, now: datetime | None = None) -> float | None:
    """Seconds the job has run: the server's sum over its runs (time queued after a preemption is
    not running time); from a server that does not report it, ended_at/now − started_at."""
    if job.started_at is None:
        return None
    if job.run_seconds is not None:
        return job.run_seconds
    end = job.ended_at or (now or _now())
    return (end - job.started_at).total_seconds()


def gpu_shape(job: JobOut) -> str:
    types = "|".join(job.gpu_types)
    suffix = f" {types}" if types else ""
    if job.mig:
        return f"mig {job.mig}{suffix}"
    if job.gpu_milli:
        from gpufleet.model.share import milli_gpus

        return f"{milli_gpus(job.gpu_milli):g} GPU{suffix}"
    if job.gpus:
        return f"{job.gpus}×{types or 'GPU'}"
    return "–"


_STATE_STYLE = {
    "PENDING": "yellow",
    "ADMITTED": "cyan",
    "RUNNING": "bold cyan",
    "PREEMPTED": "magenta",
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
    "TIMED_OUT": "red",
}


def state_text(state: str) -> str:
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def money(value: str | float) -> str:
    """``$1,234.56`` (``-$3.00`` below zero); a value that is not a number is shown as it is."""
    try:
        v = float(value)
    except ValueError:
        return str(value)
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def gib(mib: float) -> str:
    """Memory in GiB: ``512 GiB``, ``1.5 GiB``."""
    g = mib / 1024
    return f"{g:,.0f} GiB" if g >= 10 or g == int(g) else f"{g:.1f} GiB"


def short_id(value: str, width: int = 12) -> str:
    """An id as it fits a narrow table: whole up to ``width`` characters (the server's job ids are
    12), else its start and end around ``…`` (``--wide`` and ``--json`` show it whole)."""
    return value if len(value) <= width else value[: width - 5] + "…" + value[-4:]


# ------------------------------------------------------------------------------------------------ tables
#
# One style for every table of the CLI (``make_table``): no box, bold headers, two spaces between
# columns, a title on its own lines that never breaks inside a part. A table is fitted to the width
# of the terminal: columns that may give way are shortened (names in the middle, free text at the
# end) down to a minimum, then the least important are left out (a caption says which); GPU models,
# ids, states and numbers are never cut. ``wide=True`` (``--wide``) shows every column untruncated,
# however wide the table gets.

Cut = Literal["", "middle", "end"]
GAP = 2  # spaces between two columns
LAST_RESORT = 4  # the narrowest a cut column gets when the table cannot fit otherwise


@dataclass(frozen=True, slots=True)
class Col:
    """A column: ``cut`` says how its cells are shortened when the table is too wide (``middle``:
    ``train-res…-v2``; ``end``: ``waiting for…``; ``""``: never), not below ``min_width``.
    ``hide`` > 0: the column may be left out when cutting is not enough, the highest first (and
    when all its cells are empty)."""

    header: str
    justify: Literal["left", "right"] = "left"
    cut: Cut = ""
    min_width: int = 0
    hide: int = 0


@dataclass(frozen=True, slots=True)
class Row:
    """A row with a style for all its cells (``bold`` totals, ``dim`` summary lines)."""

    cells: Sequence[str | Text]
    style: str | None = None


def _text(cell: str | Text) -> Text:
    """A cell as Text on one line (a newline in a name or a reason would make its row two lines)."""
    text = cell.copy() if isinstance(cell, Text) else Text.from_markup(cell)
    if "\n" in text.plain:
        text = Text(" ").join(text.split("\n"))
    return text


_LOOSE = " .…"  # not kept next to the ellipsis: a cut shows one mark, never ``python …..``


def _word_end(plain: str, end: int, floor: int) -> int:
    """Where a head of ``plain`` kept up to ``end`` should stop: before the space that starts the
    word it would cut into, if that keeps at least ``floor`` characters (a name is not cut mid-word
    when it can be avoided); else at ``end``."""
    if end >= len(plain) or plain[end] == " " or plain[end - 1] == " ":
        return end
    space = plain.rfind(" ", 0, end)
    return space if space >= floor else end


def cut_text(text: Text, width: int, how: Cut) -> Text:
    """``text`` in at most ``width`` cells: unchanged if it fits, else shortened with one ``…`` — in
    the middle (three quarters of what is kept from the start: ``train-res…-v2``) or at the end;
    between words when that keeps at least half of what would be kept (``waiting for…``, not
    ``waiting fo…``), with no spaces or dots left next to the ``…``."""
    if text.cell_len <= width:
        return text
    if width <= 1:
        return Text("…"[:width])
    plain = text.plain
    if how == "end":
        keep = width - 1
        while keep > 0 and text[:keep].cell_len > keep:  # wide characters take two cells
            keep -= 1
        kept = text[: _word_end(plain, keep, keep // 2)]
        while len(kept) and kept.plain[-1] in _LOOSE:
            kept = kept[: len(kept) - 1]
        return Text.assemble(kept, "…")
    keep = width - 1
    head, tail = keep - keep // 4, keep // 4
    while True:
        h = _word_end(plain, head, head // 2)
        front = text[:h]
        while len(front) and front.plain[-1] in _LOOSE:
            front = front[: len(front) - 1]
        back = text[len(text) - tail :] if tail else Text("")
        while len(back) and back.plain[0] in _LOOSE:
            back = back[1:]
        out = Text.assemble(front, "…", back)
        if out.cell_len <= width or head + tail == 0:
            return out
        if head > tail:
            head -= 1
        else:
            tail -= 1


def title_text(parts: Sequence[str], width: int) -> Text:
    """A title of ``parts`` joined by `` · ``, on as many lines as it takes to stay within ``width``:
    a line breaks between parts, never inside one (a date range stays on one line)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return Text("\n".join(lines), style="table.title", no_wrap=True, overflow="ignore")


def _give(widths: dict[int, int], floors: dict[int, int], excess: int) -> int:
    """Take ``excess`` cells, one at a time, from the column furthest above its floor; what is left."""
    while excess > 0:
        room = [i for i in floors if widths[i] > floors[i]]
        if not room:
            break
        widest = max(room, key=lambda i: (widths[i] - floors[i], i))
        widths[widest] -= 1
        excess -= 1
    return excess


def _fit(cols: Sequence[Col], rows: Sequence[list[Text]], width: int) -> tuple[list[int], list[int]]:
    """Which columns to show and how wide, for a table at most ``width`` cells wide.

    In order, only as far as the table is too wide: free text (``end``) gives way down to its
    minimum; then the least important columns are left out; only then are names (``middle``) cut —
    a name is cut when the terminal is too narrow for it, not to keep a column of dates."""
    natural = [max([len(c.header), *(cells[i].cell_len for cells in rows)]) for i, c in enumerate(cols)]
    visible = [i for i, c in enumerate(cols) if not c.hide or any(cells[i].plain.strip() for cells in rows)]
    while True:
        widths = {i: natural[i] for i in visible}
        excess = sum(widths.values()) + GAP * (len(visible) - 1) - width
        floors = {i: max(len(cols[i].header), cols[i].min_width) for i in visible if cols[i].cut}
        excess = _give(widths, {i: f for i, f in floors.items() if cols[i].cut == "end"}, excess)
        hideable = [i for i in visible if cols[i].hide > 0]
        if excess > 0 and hideable:
            visible.remove(max(hideable, key=lambda i: (cols[i].hide, i)))
            continue
        excess = _give(widths, floors, excess)
        if excess > 0:  # last resort: cut columns below their minimum, not others
            for i in sorted(floors, key=lambda i: widths[i], reverse=True):
                give = min(excess, max(0, widths[i] - min(LAST_RESORT, widths[i])))
                widths[i] -= give
                excess -= give
        return visible, [widths[i] for i in visible]


def make_table(
    columns: Sequence[Col | str],
    rows: Iterable[Sequence[str | Text] | Row],
    *,
    title: str | Sequence[str] | None = None,
    wide: bool = False,
    width: int | None = None,
) -> Table:
    """The CLI's table: ``columns`` (a :class:`Col`, or a header for a plain left-aligned column),
    ``rows`` of cells (Rich markup strings or :class:`~rich.text.Text`), ``title`` (parts, kept
    whole) — fitted to ``width`` (default: the terminal's) unless ``wide``."""
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    given = [r if isinstance(r, Row) else Row(r) for r in rows]
    body = [[_text(c) for c in r.cells] for r in given]
    width = width or console.width
    if wide:
        visible = list(range(len(cols)))
        widths: list[int | None] = [None] * len(cols)
    else:
        visible, fitted = _fit(cols, body, width)
        widths = list(fitted)
    parts = [title] if isinstance(title, str) else list(title or [])
    table = Table(
        title=title_text(parts, width) if parts else None,
        title_justify="left",
        header_style="bold",
        box=None,
        pad_edge=False,
        show_edge=False,
        padding=(0, GAP // 2),
    )
    for i, w in zip(visible, widths, strict=True):
        c = cols[i]
        table.add_column(c.header, justify=c.justify, no_wrap=True, overflow="ellipsis", max_width=w)
    for r, cells in zip(given, body, strict=True):
        shown = [cells[i] for i in visible]
        if not wide:
            shown = [
                cut_text(cell, w or cell.cell_len, cols[i].cut or "end")
                for cell, i, w in zip(shown, visible, widths, strict=True)
            ]
        table.add_row(*shown, style=r.style)
    hidden = [
        c.header for i, c in enumerate(cols) if i not in visible and any(cells[i].plain.strip() for cells in body)
    ]
    if hidden:
        table.caption = Text(f"not shown at this width: {', '.join(hidden)} (--wide shows every column)", style="dim")
        table.caption_justify = "left"
    return table


def print_table(table: RenderableType, *, wide: bool = False, out: Console | None = None) -> None:
    """Print a table; with ``wide`` on a console wider than the terminal if the table needs it (a
    terminal then wraps its lines — what ``--wide`` asks for — and a pipe gets whole lines)."""
    out = out or console
    if wide:
        need = out.measure(table, options=out.options.update_width(10_000)).maximum
        if need > out.width:
            saved = out._width
            out.width = need
            try:
                out.print(table)
            finally:
                out._width = saved
            return
    out.print(table)


WIDE_HELP = "show every column, untruncated (the table may be wider than the terminal)"


def jobs_table(jobs: Iterable[JobOut], *, wide: bool = False, width: int | None = None) -> Table:
    now = _now()
    cols = [
        Col("ID"),
        Col("NAME", cut="middle", min_width=10),
        Col("TEAM", cut="middle", min_width=6),
        Col("STATE"),
        Col("GPU"),
        Col("PRIORITY", hide=2),
        Col("SUBMITTED", justify="right", hide=3),
        Col("RUNTIME", justify="right"),
        Col("REASON", cut="end", min_width=12, hide=4),
    ]
    rows = []
    for j in jobs:
        rows.append(
            [
                escape(j.id if wide else short_id(j.id)),
                escape(j.name or " ".join(j.command)),  # the table cuts it, with one ellipsis
                escape(j.team),
                state_text(j.state),
                gpu_shape(j),
                j.priority,
                ago(j.submitted_at, now),
                humanize_duration(runtime(j, now)),
                escape(j.reason),
            ]
        )
    return make_table(cols, rows, wide=wide, width=width)


def print_job(job: JobOut, events: Sequence[JobEventOut], *, cost_usd: float | None = None) -> None:
    """A job for people; ``cost_usd``: what the ledger attributed to it (so far, if it has not ended)."""
    now = _now()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str]] = [
        ("id", job.id),
        ("name", escape(job.name) or "–"),
        ("state", state_text(job.state) + (f" ({escape(job.reason)})" if job.reason else "")),
        ("team", job.team + (f" / {escape(job.project)}" if job.project else "")),
        ("command", escape(" ".join(job.command))),
        ("gpu", gpu_shape(job)),
        ("priority", job.priority + (" · preemptible" if job.preemptible else "")),
        ("submitted", f"{job.submitted_at:%Y-%m-%d %H:%M:%S %Z} ({ago(job.submitted_at, now)})"),
        ("runtime", humanize_duration(runtime(job, now))),
    ]
    if cost_usd is not None:
        rows.append(("cost", money(cost_usd) + ("" if job.terminal else " so far")))
    if job.cpu_milli or job.memory_mib:
        rows.append(("requests", f"{job.cpu_milli / 1000:g} CPU · {job.memory_mib / 1024:g} GiB memory"))
    if job.max_runtime_s:
        rows.append(("max runtime", humanize_duration(job.max_runtime_s)))
    if job.estimated_runtime_s:
        rows.append(("estimated runtime", humanize_duration(job.estimated_runtime_s)))
    if job.budget_usd is not None:
        rows.append(("job budget", money(job.budget_usd)))
    if job.placement:
        rows.append(("placement", ", ".join(f"{p.node} gpu{p.gpus}" for p in job.placement)))
    if job.exit_code is not None:
        rows.append(("exit code", str(job.exit_code)))
    if job.restarts or job.preemptions:
        rows.append(("restarts", f"{job.restarts} (preempted {job.preemptions}×)"))
    if job.checkpoint_dir:
        rows.append(("checkpoints", escape(job.checkpoint_dir)))
    if job.labels:
        rows.append(("labels", escape(", ".join(f"{k}={v}" for k, v in sorted(job.labels.items())))))
    if job.cancel_requested and not job.terminal:
        rows.append(("cancel", "requested"))
    for k, v in rows:
        grid.add_row(k, v)
    console.print(grid)
    if events:
        t = make_table(
            ["TIME", "FROM", "TO", Col("REASON", cut="end", min_width=12)],
            [[f"{e.time:%Y-%m-%d %H:%M:%S}", e.old or "–", state_text(e.new), escape(e.reason)] for e in events],
            title="events",
        )
        console.print()
        console.print(t)


def queue_table(entries: Iterable[QueueEntry], *, wide: bool = False, width: int | None = None) -> Table:
    now = _now()
    cols = [
        Col("POS", justify="right"),
        Col("JOB"),
        Col("NAME", cut="middle", min_width=10),
        Col("TEAM", cut="middle", min_width=6),
        Col("PRIORITY", hide=2),
        Col("WAITING", justify="right", hide=1),
        Col("EST. START", justify="right"),
        Col("REASON", cut="end", min_width=16),
    ]
    rows = []
    for q in entries:
        rows.append(
            [
                str(q.position),
                escape(q.job_id if wide else short_id(q.job_id)),
                escape(q.name),
                escape(q.team),
                q.priority,
                humanize_duration((now - q.submitted_at).total_seconds()),
                escape(f"blocked: {q.blocked}") if q.blocked else until(q.estimated_start, now),
                escape(q.reason),
            ]
        )
    return make_table(cols, rows, wide=wide, width=width)


def nodes_table(nodes: Iterable[NodeOut], *, wide: bool = False, width: int | None = None) -> Table:
    cols = [
        Col("NAME", cut="middle", min_width=10),
        Col("GPU"),
        Col("GPUS", justify="right"),
        Col("CPU", justify="right", hide=3),
        Col("MEMORY", justify="right", hide=4),
        Col("POOL", cut="middle", min_width=6, hide=5),
        Col("CAPACITY", hide=6),
        Col("SHARING", hide=7),
        Col("$/H", justify="right"),
        Col("STATE"),
        Col("JOBS", justify="right"),
    ]
    rows = [
        [
            escape(n.name),
            escape(n.gpu_model or "–"),
            f"{n.allocated_gpus:g}/{n.gpu_count}",
            f"{n.cpu_milli / 1000:g}",
            gib(n.memory_mib),
            escape(n.pool),
            n.capacity_type,
            n.sharing,
            money(n.hourly_price_usd),
            n.state,
            str(n.running_jobs),
        ]
        for n in nodes
    ]
    return make_table(cols, rows, wide=wide, width=width)


def _gpu_map(m: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(m.items())) or "–"


def teams_table(teams: Iterable[TeamOut]) -> Table:
    from gpufleet.wire import DEFAULT_PRIORITY_CLASSES

    teams = list(teams)
    default_grant = list(DEFAULT_PRIORITY_CLASSES)
    # accounts and grants only when some team has them (a laptop's table stays narrow)
    owners = any(team.run_as or team.priority_classes != default_grant for team in teams)
    extra = [Col("RUN AS", cut="middle", min_width=8), Col("PRIORITIES", cut="end", min_width=10)] if owners else []
    cols = [
        Col("NAME", cut="middle", min_width=8),
        Col("WEIGHT", justify="right"),
        Col("COHORT", cut="middle", min_width=6),
        Col("BORROW", justify="right"),
        Col("QUOTA (GPUS)", cut="end", min_width=14),
        Col("USED (GPUS)", cut="end", min_width=14),
        *extra,
    ]
    rows = []
    for team in teams:
        cells = [escape(team.run_as or "–"), ",".join(team.priority_classes)] if owners else []
        rows.append(
            [
                escape(team.name),
                f"{team.weight:g}",
                escape(team.cohort or "–"),
                "–" if team.borrowing_limit_gpus is None else f"{team.borrowing_limit_gpus:g}",
                escape(_gpu_map(team.quota_gpus)),
                escape(_gpu_map(team.used_gpus)),
                *cells,
            ]
        )
    return make_table(cols, rows)


def tokens_table(tokens: Iterable[TokenOut]) -> Table:
    now = _now()
    tokens = list(tokens)
    accounts = any(tok.run_as for tok in tokens)
    owners = any(tok.owner for tok in tokens)
    cols = [
        Col("ID"),
        Col("NAME", cut="middle", min_width=8),
        *([Col("OWNER", cut="middle", min_width=6)] if owners else []),
        Col("TEAM", cut="middle", min_width=6),
        Col("ROLE"),
        *([Col("RUN AS", cut="middle", min_width=8)] if accounts else []),
        Col("CREATED", justify="right"),
        Col("EXPIRES"),
        Col("STATUS"),
    ]
    rows = []
    for tok in tokens:
        expired = tok.expires_at is not None and tok.expires_at <= now
        status = "revoked" if tok.revoked else "expired" if expired else "active"
        rows.append(
            [
                escape(tok.id),
                escape(tok.name) or "–",
                *([escape(tok.owner or "–")] if owners else []),
                escape(tok.team),
                str(tok.role.value),
                *([escape(tok.run_as or "–")] if accounts else []),
                ago(tok.created_at, now),
                "never" if tok.expires_at is None else f"{tok.expires_at:%Y-%m-%d}",
                status,
            ]
        )
    return make_table(cols, rows)


def window_title(kind: str, start: datetime, end: datetime) -> str:
    """``cost 2026-11-05 12:00 → 2026-11-12 12:00 UTC``: one part of a title, never broken."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    return f"{kind} {start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M} UTC"


def usage_table(report: UsageReport) -> Table:
    keys = list(report.aggregate)
    cols = [
        *(Col(k.upper(), cut="middle", min_width=max(8, len(k))) for k in keys),
        *(Col(h, justify="right") for h in ("GPU-H", "GPU $", "CPU $", "MEMORY $", "TOTAL $")),
    ]

    def row(line: CostLineOut, label: str | None = None, style: str | None = None) -> Row:
        cells = [
            label if label is not None and i == 0 else ("" if label is not None else escape(line.key.get(k, "–")))
            for i, k in enumerate(keys)
        ]
        return Row(
            [
                *cells,
                f"{line.gpu_hours:,.1f}",
                money(line.gpu_cost_usd),
                money(line.cpu_cost_usd),
                money(line.memory_cost_usd),
                money(line.total_cost_usd),
            ],
            style,
        )

    rows = [row(line) for line in report.rows]
    if keys:
        rows += [row(report.idle, "(idle)", "dim"), row(report.totals, "total", "bold")]
    return make_table(cols, rows, title=[window_title("usage", report.window_start, report.window_end)])
