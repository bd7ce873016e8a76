"""Progress for long commands (``simulate``, ``whatif``, ``experiment fragmentation``, ``wait``) and
``--watch`` for ``ls``, ``queue`` and ``nodes``.

Bars go to stderr, and only for a person at a terminal: never under ``--json``, never when stderr is
not a terminal (a pipe, a file, CI), so stdout stays what scripts read. They are fed by real
progress — the engines call a plain ``progress(done, total)`` callable (jobs that ended out of the
trace's, runs done out of all runs) and know nothing of Rich; Rich is imported here, when a bar is
shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from gpufleet.cli.common import console, err_console
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.progress import Progress, TaskID

    from gpufleet.wire import JobOut

ProgressFn = Callable[[float, float], None]
"""``progress(done, total)``: what an engine calls as it goes (no I/O there)."""

REFRESH_S = 0.1  # at most this often a bar is redrawn from the engine's callbacks

_sleep = time.sleep  # tests replace it


def interactive(as_json: bool = False) -> bool:
    """Show bars and live views? Only to a terminal (stderr), and never with ``--json``."""
    return not as_json and err_console.is_terminal


def _bar(*, eta: bool = True) -> Progress:
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}", style="dim"),
        TimeElapsedColumn(),
    ]
    if eta:
        columns += [TextColumn("ETA", style="dim"), TimeRemainingColumn()]
    return Progress(*columns, console=err_console, transient=True)


class RunsProgress:
    """A :data:`ProgressFn` for one bar over ``len(labels)`` runs that each report ``(done, total)``
    from 0 (``whatif`` simulates a baseline, then a variant): a run whose ``done`` goes back down is
    the next one. Redraws at most every :data:`REFRESH_S`."""

    def __init__(self, progress: Progress, task: TaskID, description: str, labels: Sequence[str], unit: str) -> None:
        self.progress, self.task, self.description = progress, task, description
        self.labels, self.unit = list(labels) or [""], unit
        self.run = 0
        self.offset = 0.0  # work of the runs before this one
        self.last_done = 0.0
        self.last_total = 0.0
        self.last_draw = -float("inf")

    def __call__(self, done: float, total: float) -> None:
        first = self.last_draw == -float("inf")
        if done < self.last_done and self.run + 1 < len(self.labels):
            self.run += 1
            self.offset += self.last_total
            first = True
        self.last_done, self.last_total = done, total
        now = time.monotonic()
        if now - self.last_draw < REFRESH_S and done < total and not first:
            return
        self.last_draw = now
        runs_left = len(self.labels) - self.run
        label = self.labels[self.run]
        self.progress.update(
            self.task,
            completed=self.offset + done,
            total=self.offset + total * runs_left,
            description=f"{self.description} {label}".rstrip(),
            detail=f"{done:,.0f}/{total:,.0f} {self.unit}",
            refresh=first or done >= total,  # a run's start and end are drawn however fast it was
        )


@contextmanager
def progress_bar(
    description: str, *, enabled: bool, labels: Sequence[str] = ("",), unit: str = "jobs"
) -> Iterator[ProgressFn | None]:
    """A bar with ETA on stderr while the block runs, fed by the :data:`ProgressFn` it yields (None
    when ``enabled`` is false: pass it on to the engine as is)."""
    if not enabled:
        yield None
        return
    progress = _bar()
    task = progress.add_task(description, total=None, detail="")
    feed = RunsProgress(progress, task, description, labels, unit)
    with progress:
        yield feed


def _job_line(job: JobOut) -> tuple[str, float | None, float, str]:
    """What a bar shows for a job being waited for: (description, total, completed, detail)."""
    from gpufleet.cli.render import humanize_duration, state_text

    desc = f"{job.id} {state_text(job.state)}"
    if job.terminal:  # ended: the bar is full, whatever it showed while the job ran
        took = job.run_seconds
        return desc, 1.0, 1.0, f"ran {humanize_duration(took)}" if took else job.reason[:40]
    if job.state == "RUNNING" and job.started_at is not None:
        elapsed = (datetime.now(job.started_at.tzinfo) - job.started_at).total_seconds()
        expected = job.estimated_runtime_s or job.max_runtime_s
        if expected:
            source = "estimate" if job.estimated_runtime_s else "max runtime"
            return (
                desc,
                expected,
                min(elapsed, expected),
                f"{humanize_duration(elapsed)} of {source} " + (humanize_duration(expected)),
            )
        return desc, None, 0.0, f"running {humanize_duration(elapsed)}"
    return desc, None, 0.0, job.reason[:40]


@contextmanager
def job_progress(enabled: bool) -> Iterator[Callable[[JobOut], None] | None]:
    """While ``wait`` polls: the job's state, and when it runs with an estimated (or maximum) runtime,
    a bar of its run time against it with an ETA. Yields None when not ``enabled``."""
    if not enabled:
        yield None
        return
    progress = _bar()
    task = progress.add_task("waiting", total=None, detail="")

    def update(job: JobOut) -> None:
        desc, total, completed, detail = _job_line(job)
        progress.update(task, description=desc, total=total, completed=completed, detail=detail, refresh=True)

    with progress:
        yield update


def watch(render: Callable[[], RenderableType], interval: float, command: str) -> None:
    """Redraw ``render()`` every ``interval`` seconds until Ctrl-C, which ends it normally (exit 0).

    The first ``render()`` runs before anything is drawn, so its error (a bad token, no server) ends
    the command with its exit code; a later one is shown in place of the table until the next
    redraw succeeds."""
    from rich.console import Group
    from rich.live import Live
    from rich.markup import escape
    from rich.text import Text

    def frame(view: RenderableType) -> Group:
        stamp = datetime.now().astimezone().strftime("%H:%M:%S")
        head = Text(f"every {interval:g}s: {command} · {stamp} · Ctrl-C stops", style="dim")
        return Group(head, view)

    view = render()
    try:
        with Live(frame(view), console=console, auto_refresh=False, redirect_stderr=False) as live:
            while True:
                _sleep(interval)
                try:
                    view = render()
                except GpufleetError as e:
                    view = Text.from_markup(f"[bold red]error:[/] {escape(str(e))} (retrying)")
                live.update(frame(view), refresh=True)
    except KeyboardInterrupt:
        return
