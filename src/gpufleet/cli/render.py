"""Rendering for the commands that talk to the API: Rich tables for people, JSON for machines, and the
mapping of every failure to one line on stderr plus a meaningful exit code.

Exit codes (also in ``gpufleet --help``) — scripts can tell "the job failed" from "the server is down":

==  ==========================================================================
0   ok
1   the job ended unsuccessfully (``submit --wait``, ``wait``)
2   bad input: a local parsing error or a 400/422 answer
3   not found (job, team, token)
4   unauthenticated (401) or forbidden (403)
5   server unavailable (cannot connect, or 502/503/504 after retries)
6   conflict (409)
7   ``wait`` timed out before the job ended
8   any other error (e.g. a 500 from the server, an unexpected answer)
==  ==========================================================================
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

import pydantic_core
import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import console, err_console, fail
from gpufleet.errors import (
    AuthError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from gpufleet.sdk.errors import ServerUnavailable, WaitTimeout
from gpufleet.wire import (
    DEFAULT_PRIORITY_CLASSES,
    CostLineOut,
    JobEventOut,
    JobOut,
    NodeOut,
    QueueEntry,
    TeamOut,
    TokenOut,
    UsageReport,
)

P = ParamSpec("P")
R = TypeVar("R")

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
    "4 unauthenticated/forbidden · 5 server unavailable · 6 conflict · 7 wait timed out · 8 other error."
)


def exit_code_for(exc: GpufleetError) -> int:
    """The exit code of an error (order matters: the most specific family first)."""
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
    if isinstance(exc, InputError):
        return EXIT_INPUT
    return EXIT_OTHER


def report_error(exc: GpufleetError) -> int:
    """Print the error as one line on stderr and return its exit code."""
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return exit_code_for(exc)


def api_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Like :func:`gpufleet.cli.common.handle_errors`, with exit codes that say what went wrong."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GpufleetError as e:
            raise typer.Exit(report_error(e)) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper


def bad_option(option: str, message: str) -> typer.Exit:
    """One line naming the option, exit 2."""
    return fail(escape(f"{option}: {message}"), EXIT_INPUT)


def note(message: str) -> None:
    """Chatter for people goes to stderr, so stdout stays clean for ``$(gpufleet ...)``."""
    err_console.print(message, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------- formatting


def emit_json(obj: Any) -> None:
    """Machine output: JSON of wire models (or lists/dicts of them) on stdout, no colours, no wrapping."""
    typer.echo(pydantic_core.to_json(obj, indent=2).decode())


def humanize_duration(seconds: float | None) -> str:
    """``42s``, ``3m 12s``, ``2h 05m``, ``3d 4h``; ``–`` for unknown."""
    if seconds is None or math.isnan(seconds):
        return "–"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


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
    if job.started_at is None:
        return None
    end = job.ended_at or (now or _now())
    return (end - job.started_at).total_seconds()


def gpu_shape(job: JobOut) -> str:
    types = "|".join(job.gpu_types)
    suffix = f" {types}" if types else ""
    if job.mig:
        return f"mig {job.mig}{suffix}"
    if job.gpu_milli:
        return f"{job.gpu_milli / 1000:g} GPU{suffix}"
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


def money(value: str) -> str:
    try:
        return f"${float(value):,.2f}"
    except ValueError:
        return value


# ------------------------------------------------------------------------------------------------ tables


def _table(title: str | None, columns: Sequence[str]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False, box=None)
    for c in columns:
        t.add_column(c, no_wrap=c in ("ID", "JOB", "STATE"))
    return t


def jobs_table(jobs: Iterable[JobOut]) -> Table:
    now = _now()
    t = _table(None, ["ID", "NAME", "TEAM", "STATE", "GPU", "PRIORITY", "SUBMITTED", "RUNTIME", "REASON"])
    for j in jobs:
        t.add_row(
            j.id,
            escape(j.name or " ".join(j.command)[:30]),
            j.team,
            state_text(j.state),
            gpu_shape(j),
            j.priority,
            ago(j.submitted_at, now),
            humanize_duration(runtime(j, now)),
            escape(j.reason),
        )
    return t


def print_job(job: JobOut, events: Sequence[JobEventOut]) -> None:
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
    if job.cpu_milli or job.memory_mib:
        rows.append(("requests", f"{job.cpu_milli / 1000:g} CPU · {job.memory_mib / 1024:g} GiB memory"))
    if job.max_runtime_s:
        rows.append(("max runtime", humanize_duration(job.max_runtime_s)))
    if job.estimated_runtime_s:
        rows.append(("estimated runtime", humanize_duration(job.estimated_runtime_s)))
    if job.budget_usd is not None:
        rows.append(("job budget", f"${job.budget_usd:,.2f}"))
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
        t = _table("events", ["TIME", "FROM", "TO", "REASON"])
        for e in events:
            t.add_row(f"{e.time:%Y-%m-%d %H:%M:%S}", e.old or "–", state_text(e.new), escape(e.reason))
        console.print()
        console.print(t)


def queue_table(entries: Iterable[QueueEntry]) -> Table:
    now = _now()
    t = _table(None, ["POS", "JOB", "NAME", "TEAM", "PRIORITY", "WAITING", "EST. START", "REASON"])
    for q in entries:
        t.add_row(
            str(q.position),
            q.job_id,
            escape(q.name),
            q.team,
            q.priority,
            humanize_duration((now - q.submitted_at).total_seconds()),
            until(q.estimated_start, now),
            escape(q.reason),
        )
    return t


def nodes_table(nodes: Iterable[NodeOut]) -> Table:
    t = _table(
        None, ["NAME", "GPU", "GPUS USED", "CPU", "MEMORY", "POOL", "CAPACITY", "SHARING", "$/H", "STATE", "JOBS"]
    )
    for n in nodes:
        t.add_row(
            n.name,
            n.gpu_model,
            f"{n.allocated_gpus:g}/{n.gpu_count}",
            f"{n.cpu_milli / 1000:g}",
            f"{n.memory_mib / 1024:.0f}Gi",
            n.pool,
            n.capacity_type,
            n.sharing,
            f"{n.hourly_price_usd:.2f}",
            n.state,
            str(n.running_jobs),
        )
    return t


def _gpu_map(m: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(m.items())) or "–"


def teams_table(teams: Iterable[TeamOut]) -> Table:
    teams = list(teams)
    default_grant = list(DEFAULT_PRIORITY_CLASSES)
    # accounts and grants only when some team has them (a laptop's table stays narrow)
    owners = any(team.run_as or team.priority_classes != default_grant for team in teams)
    extra = ["RUN AS", "PRIORITIES"] if owners else []
    t = _table(None, ["NAME", "WEIGHT", "COHORT", "BORROW LIMIT", "QUOTA (GPUs)", "USED (GPUs)", *extra])
    for team in teams:
        cells = [escape(team.run_as or "–"), ",".join(team.priority_classes)] if owners else []
        t.add_row(
            team.name,
            f"{team.weight:g}",
            team.cohort or "–",
            "–" if team.borrowing_limit_gpus is None else f"{team.borrowing_limit_gpus:g}",
            _gpu_map(team.quota_gpus),
            _gpu_map(team.used_gpus),
            *cells,
        )
    return t


def tokens_table(tokens: Iterable[TokenOut]) -> Table:
    now = _now()
    tokens = list(tokens)
    accounts = any(tok.run_as for tok in tokens)
    t = _table(None, ["ID", "NAME", "TEAM", "ROLE", *(["RUN AS"] if accounts else []), "CREATED", "EXPIRES", "STATUS"])
    for tok in tokens:
        expired = tok.expires_at is not None and tok.expires_at <= now
        status = "revoked" if tok.revoked else "expired" if expired else "active"
        t.add_row(
            tok.id,
            escape(tok.name) or "–",
            tok.team,
            str(tok.role.value),
            *([escape(tok.run_as or "–")] if accounts else []),
            ago(tok.created_at, now),
            "never" if tok.expires_at is None else f"{tok.expires_at:%Y-%m-%d}",
            status,
        )
    return t


def usage_table(report: UsageReport) -> Table:
    start, end = report.window_start.astimezone(UTC), report.window_end.astimezone(UTC)
    title = f"usage {start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M} UTC"
    keys = list(report.aggregate)
    t = _table(title, [*(k.upper() for k in keys), "GPU-H", "GPU $", "CPU $", "MEMORY $", "TOTAL $"])
    for c in t.columns[len(keys) :]:
        c.justify = "right"

    def row(line: CostLineOut, label: str | None = None, style: str | None = None) -> None:
        cells = [
            label if label is not None and i == 0 else ("" if label is not None else line.key.get(k, "–"))
            for i, k in enumerate(keys)
        ]
        t.add_row(
            *cells,
            f"{line.gpu_hours:,.1f}",
            money(line.gpu_cost_usd),
            money(line.cpu_cost_usd),
            money(line.memory_cost_usd),
            money(line.total_cost_usd),
            style=style,
        )

    for line in report.rows:
        row(line)
    if keys:
        row(report.idle, "(idle)", "dim")
        row(report.totals, "total", "bold")
    return t
