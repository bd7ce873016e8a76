"""Job commands that talk to a gpufleet server: ``submit``, ``ls``, ``show``, ``logs``, ``cancel``,
``wait``, ``queue``, ``nodes``.

They only parse, call the SDK (:class:`gpufleet.sdk.Client`, built by :func:`make_client` so tests can
swap it) and render. Every command takes ``--url`` and ``--token`` (defaults: ``$GPUFLEET_URL`` /
``$GPUFLEET_TOKEN``, then the local server's home). Errors are one line on stderr; exit codes:

0 ok · 1 the job ended unsuccessfully (``submit --wait``, ``wait``) · 2 bad input (local parsing or a
400/422) · 3 not found · 4 unauthenticated/forbidden · 5 server unavailable · 6 conflict ·
7 ``wait`` timed out · 8 any other error · 130 interrupted (Ctrl-C; it ends ``--watch`` with 0).

``ls``, ``queue`` and ``nodes`` fit their table to the terminal (``--wide``: every column, whole) and
redraw it with ``--watch``; ``wait`` shows the job's state and progress on a terminal.

Start-up stays light: the SDK (httpx, pydantic, the wire models) is imported by :func:`make_client`
and the commands' bodies, not when ``gpufleet`` starts.
"""

import math
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpufleet.cli.common import fail, handle_errors
from gpufleet.cli.progress import interactive, job_progress, watch
from gpufleet.cli.render import (
    EXIT_INPUT,
    EXIT_JOB_FAILED,
    WIDE_HELP,
    bad_option,
    emit_json,
    jobs_table,
    nodes_table,
    note,
    print_job,
    print_table,
    queue_table,
    report_error,
    state_text,
)
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import RenderableType

    from gpufleet.sdk.client import Client
    from gpufleet.wire import JobOut, JobSubmit

ACTIVE_STATES = ("PENDING", "ADMITTED", "RUNNING", "PREEMPTED")
ALL_STATES = (*ACTIVE_STATES, "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")

UrlOpt = Annotated[
    str | None,
    typer.Option("--url", help="server URL (default: $GPUFLEET_URL, <home>/server.json, http://127.0.0.1:8470)"),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", help="API token (default: $GPUFLEET_TOKEN, <home>/admin.token)", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (for machines) instead of a table")]
WideOpt = Annotated[bool, typer.Option("--wide", help=WIDE_HELP)]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="redraw every --interval seconds until Ctrl-C (not with --json)")
]
IntervalOpt = Annotated[float, typer.Option("--interval", min=0.5, help="seconds between two redraws of --watch")]


def make_client(url: str | None, token: str | None) -> "Client":
    """The SDK client every command uses (tests replace this function to point it at a fake server).

    A token file readable by others is used, with one warning line on stderr."""
    from gpufleet.sdk.client import Client
    from gpufleet.sdk.config import InsecureTokenFileWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InsecureTokenFileWarning)
        client = Client(url, token)
    for w in caught:
        note(f"[yellow]warning:[/] {w.message}")
    return client


# ----------------------------------------------------------------------------------------- parsing


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd])", re.IGNORECASE)
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``, ``1.5h`` or bare seconds → seconds (> 0).

    Raises :class:`typer.Exit` (exit 2) with a line naming ``option`` when it is not one."""
    s = text.strip().lower()
    hint = "use e.g. 90s, 30m, 2h, 1d or 1h30m"
    try:
        value = float(s)
    except ValueError:
        pos, value = 0, 0.0
        for m in _DURATION_PART.finditer(s):
            if m.start() != pos:
                break
            value += float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
            pos = m.end()
        if not s or pos != len(s):
            raise bad_option(option, f"{text!r} is not a duration ({hint})") from None
    if not math.isfinite(value) or value <= 0:
        raise bad_option(option, f"{text!r} must be a positive duration ({hint})")
    return value


_SIZE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]i?)?b?$", re.IGNORECASE)
_SIZE_FACTORS = {
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
    "pi": 2**50,
}


def parse_size_mib(text: str, option: str) -> int:
    """``512Mi``, ``16Gi``, ``16G``, ``1.5Ti`` → MiB (rounded up). A bare number is refused: whether
    ``16`` means bytes, MiB or GiB is a guess, and a wrong guess starves or wastes a whole node."""
    m = _SIZE.match(text.strip())
    if not m:
        raise bad_option(option, f"{text!r} is not a size (use e.g. 512Mi, 16Gi or 16G)")
    if not m.group(2):
        raise bad_option(option, f"{text!r} has no unit (use e.g. 512Mi, 16Gi or 16G)")
    n_bytes = float(m.group(1)) * _SIZE_FACTORS[m.group(2).lower()]
    if n_bytes <= 0:
        raise bad_option(option, f"{text!r} must be more than zero")
    return math.ceil(n_bytes / 2**20)


def parse_cpu_milli(text: str, option: str) -> int:
    """``4`` or ``0.5`` cores, or ``500m`` millicores → millicores."""
    s = text.strip().lower()
    try:
        value = float(s[:-1]) / 1000 if s.endswith("m") else float(s)
    except ValueError:
        raise bad_option(option, f"{text!r} is not a CPU amount (use e.g. 4, 0.5 or 500m)") from None
    if not math.isfinite(value) or value <= 0:
        raise bad_option(option, f"{text!r} must be more than zero")
    return max(1, round(value * 1000))


def parse_pairs(items: list[str] | None, option: str, *, sep: str = "=") -> dict[str, str]:
    """``["k=v", ...]`` → dict; a later key wins."""
    out: dict[str, str] = {}
    for item in items or []:
        key, eq, value = item.partition(sep)
        if not eq or not key.strip():
            raise bad_option(option, f"{item!r} is not KEY{sep}VALUE")
        out[key.strip()] = value
    return out


# Where each JobSubmit field comes from on the command line, to name it in error messages.
SUBMIT_OPTIONS = {
    "command": "CMD",
    "name": "--name",
    "team": "--team",
    "project": "--project",
    "labels": "--label",
    "priority": "--priority",
    "gpus": "--gpus",
    "gpu_milli": "--gpu-milli",
    "mig": "--mig",
    "gpu_types": "--gpu-type",
    "cpu_milli": "--cpu",
    "memory_mib": "--memory",
    "preemptible": "--preemptible",
    "checkpoint_dir": "--checkpoint-dir",
    "max_runtime_s": "--max-runtime",
    "estimated_runtime_s": "--estimate",
    "budget_usd": "--budget",
    "env": "--env",
    "cwd": "--cwd",
    "image": "--image",
}


def _validation_line(e: "ValidationError") -> str:
    parts = []
    for err in e.errors():
        loc = err["loc"]
        msg = str(err["msg"]).removeprefix("Value error, ")
        if loc:
            option = SUBMIT_OPTIONS.get(str(loc[0]), str(loc[0]))
            rest = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
            parts.append(f"{option}{rest}: {msg}")
        else:
            parts.append(msg)
    return "; ".join(parts)


def build_spec(
    command: list[str],
    *,
    gpus: int | None = None,
    gpu_milli: int | None = None,
    mig: str | None = None,
    gpu_types: list[str] | None = None,
    priority: str | None = None,
    team: str | None = None,
    project: str | None = None,
    labels: list[str] | None = None,
    preemptible: bool = False,
    checkpoint_dir: str | None = None,
    max_runtime: str | None = None,
    estimate: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    env: list[str] | None = None,
    name: str | None = None,
    cwd: str | None = None,
    budget: float | None = None,
    image: str | None = None,
    mlflow_run: str | None = None,
) -> "JobSubmit":
    """The :class:`JobSubmit` the ``submit`` options describe, validated here so that a mistake is
    reported with the option's name before anything is sent."""
    from typing import get_args

    from pydantic import ValidationError

    from gpufleet.wire import JobSubmit, PriorityClass

    if gpu_milli is not None and mig is not None:
        raise bad_option("--gpu-milli", "conflicts with --mig: ask for a fraction of a shared GPU or a MIG slice")
    if gpus is not None and gpus > 1 and (gpu_milli is not None or mig is not None):
        other = "--gpu-milli" if gpu_milli is not None else "--mig"
        raise bad_option("--gpus", f"{gpus} conflicts with {other}: a fractional or MIG request is for one GPU")
    if priority is not None and priority not in get_args(PriorityClass):
        raise bad_option("--priority", f"{priority!r} is not one of {', '.join(get_args(PriorityClass))}")
    if not command:
        raise bad_option("CMD", "give the command to run after --")
    fields: dict[str, Any] = {"command": command, "cwd": cwd if cwd is not None else os.getcwd()}
    if image is not None:
        fields["image"] = image
    if gpus is not None:
        fields["gpus"] = gpus
    if gpu_milli is not None:
        fields["gpu_milli"] = gpu_milli
    if mig is not None:
        fields["mig"] = mig
    if gpu_types:
        fields["gpu_types"] = gpu_types
    if priority is not None:
        fields["priority"] = priority
    if team is not None:
        fields["team"] = team
    if project is not None:
        fields["project"] = project
    if labels:
        fields["labels"] = parse_pairs(labels, "--label")
    if preemptible:
        fields["preemptible"] = True
    if checkpoint_dir is not None:
        fields["checkpoint_dir"] = checkpoint_dir
    if max_runtime is not None:
        fields["max_runtime_s"] = parse_duration(max_runtime, "--max-runtime")
    if estimate is not None:
        fields["estimated_runtime_s"] = parse_duration(estimate, "--estimate")
    if cpu is not None:
        fields["cpu_milli"] = parse_cpu_milli(cpu, "--cpu")
    if memory is not None:
        fields["memory_mib"] = parse_size_mib(memory, "--memory")
    if env:
        fields["env"] = parse_pairs(env, "--env")
    if name is not None:
        fields["name"] = name
    if budget is not None:
        fields["budget_usd"] = budget
    if mlflow_run is not None:  # the label mlflow-run-id and MLFLOW_RUN_ID in the job's env
        from gpufleet.errors import InputError
        from gpufleet.sdk.client import with_mlflow_run

        try:
            fields = with_mlflow_run(None, fields, mlflow_run)
        except InputError as e:
            raise bad_option("--mlflow-run", str(e).split(": ", 1)[-1]) from None
    try:
        return JobSubmit.model_validate(fields)
    except ValidationError as e:
        raise fail(escape(_validation_line(e)), EXIT_INPUT) from None


def _finish(job: "JobOut", as_json: bool) -> None:
    """Report a finished job; exit 1 unless it succeeded."""
    if as_json:
        emit_json(job)
    else:
        extra = f" (exit code {job.exit_code})" if job.exit_code not in (None, 0) else ""
        reason = f": {job.reason}" if job.reason and job.state != "SUCCEEDED" else ""
        note(f"job {job.id} {state_text(job.state)}{extra}{reason}")
    if job.state != "SUCCEEDED":
        raise typer.Exit(EXIT_JOB_FAILED)


POLL_S = 1.0  # how often ``wait`` asks for the job


def _wait(client: "Client", job_id: str, timeout: float | None, *, show: bool = False) -> "JobOut":
    """The job once it has ended (:class:`~gpufleet.sdk.errors.WaitTimeout` after ``timeout``). With
    ``show``, a line on stderr follows it meanwhile: its state, and a bar with an ETA while it runs
    with an estimated (or maximum) runtime."""
    try:
        with job_progress(show) as on_poll:
            if on_poll is None:
                return client.wait(job_id, timeout=timeout, poll_interval=POLL_S)
            return _poll(client, job_id, timeout, on_poll)
    except KeyboardInterrupt:
        note(f"stopped waiting; the job goes on (gpufleet wait {job_id})")
        raise typer.Exit(130) from None


def _poll(client: "Client", job_id: str, timeout: float | None, on_poll: "Callable[[JobOut], None]") -> "JobOut":
    """:meth:`Client.wait <gpufleet.sdk.client.Client.wait>`, telling ``on_poll`` each answer."""
    from gpufleet.sdk.errors import WaitTimeout

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        job = client.get(job_id)
        on_poll(job)
        if job.terminal:
            return job
        left = math.inf if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(job_id, timeout or 0.0, job.state)
        time.sleep(min(POLL_S, left))


def _list_view(
    fetch: "Callable[[], Sequence[Any]]",
    table: "Callable[..., RenderableType]",
    empty: str,
    *,
    watching: bool,
    interval: float,
    as_json: bool,
    wide: bool,
    command: str,
) -> None:
    """What ``ls``, ``queue`` and ``nodes`` share: fetch the items and print them as JSON, as
    ``table(items, wide=...)`` or as the ``empty`` note — once, or redrawn until Ctrl-C with
    ``--watch`` (not with ``--json``)."""

    def render() -> "RenderableType | None":
        items = fetch()
        if as_json:
            emit_json(items)
        elif items:
            return table(items, wide=wide)
        elif watching:
            return empty
        else:
            note(empty)
        return None

    if watching:
        if as_json:
            raise bad_option("--watch", "redraws a table for people; it cannot be combined with --json")
        watch(lambda: render() or "", interval, command)
        return
    view = render()
    if view is not None:
        print_table(view, wide=wide)


# ----------------------------------------------------------------------------------------- commands


@handle_errors
def submit(
    command: Annotated[list[str], typer.Argument(help="the command to run, after --", show_default=False)],
    gpus: Annotated[int | None, typer.Option("--gpus", help="whole GPUs", show_default=False)] = None,
    gpu_milli: Annotated[
        int | None, typer.Option("--gpu-milli", help="thousandths of one shared GPU (1-999)", show_default=False)
    ] = None,
    mig: Annotated[str | None, typer.Option("--mig", help="a MIG slice, e.g. 1g.10gb")] = None,
    gpu_type: Annotated[
        list[str] | None, typer.Option("--gpu-type", help="acceptable GPU model (repeatable)", show_default=False)
    ] = None,
    priority: Annotated[
        str | None, typer.Option("--priority", help="background|low|normal|high|urgent", show_default=False)
    ] = None,
    team: Annotated[str | None, typer.Option("--team", help="default: the token's team")] = None,
    project: Annotated[str | None, typer.Option("--project")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="k=v (repeatable)", show_default=False)] = None,
    preemptible: Annotated[bool, typer.Option("--preemptible", help="may be preempted (and run on spot)")] = False,
    checkpoint_dir: Annotated[str | None, typer.Option("--checkpoint-dir", help="kept across restarts")] = None,
    max_runtime: Annotated[str | None, typer.Option("--max-runtime", help="kill after, e.g. 2h")] = None,
    estimate: Annotated[str | None, typer.Option("--estimate", help="expected runtime, e.g. 30m (backfill)")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="USD: stop the job once it has cost this")] = None,
    cpu: Annotated[str | None, typer.Option("--cpu", help="cores, e.g. 4 or 500m")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="e.g. 16Gi, 512Mi")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="K=V (repeatable)", show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", help="working directory (default: the current one)")] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="container image (Kubernetes backend; ignored on a local server)")
    ] = None,
    mlflow_run: Annotated[
        str | None,
        typer.Option("--mlflow-run", help="MLflow run id: the job's cost is logged to it when it ends"),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="wait for the job to end; exit 1 unless it succeeds")] = False,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="resubmitting with the same key returns the same job")
    ] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a job: gpufleet submit --gpus 1 -- python train.py --lr 3e-4

    Prints the job id (or, with --json, the job)."""
    spec = build_spec(
        command,
        gpus=gpus,
        gpu_milli=gpu_milli,
        mig=mig,
        gpu_types=gpu_type,
        priority=priority,
        team=team,
        project=project,
        labels=label,
        preemptible=preemptible,
        checkpoint_dir=checkpoint_dir,
        max_runtime=max_runtime,
        estimate=estimate,
        cpu=cpu,
        memory=memory,
        env=env,
        name=name,
        cwd=cwd,
        budget=budget,
        image=image,
        mlflow_run=mlflow_run,
    )
    with make_client(url, token) as client:
        job = client.submit(spec, idempotency_key=idempotency_key)
        if not wait:
            if as_json:
                emit_json(job)
            else:
                typer.echo(job.id)
            return
        if not as_json:
            typer.echo(job.id)
            note(f"waiting for {job.id} … (Ctrl-C stops waiting, not the job)")
        _finish(_wait(client, job.id, None, show=interactive(as_json)), as_json)


@handle_errors
def ls(
    team: Annotated[str | None, typer.Option("--team")] = None,
    state: Annotated[
        list[str] | None, typer.Option("--state", help="only these states (repeatable or comma-separated)")
    ] = None,
    project: Annotated[str | None, typer.Option("--project")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="k=v (repeatable)", show_default=False)] = None,
    all_states: Annotated[bool, typer.Option("--all", "-a", help="include jobs that have ended")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many jobs")] = 50,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    watching: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, newest first (only those not yet ended unless --all or --state).

    The table fits the terminal: long names are shortened in the middle and the least important
    columns left out (--wide shows them all); --watch redraws it until Ctrl-C."""
    states: list[str] | None = None
    if state:
        states = [s.strip().upper() for item in state for s in item.split(",") if s.strip()]
        unknown = [s for s in states if s not in ALL_STATES]
        if unknown:
            raise bad_option("--state", f"unknown state {unknown[0]!r} (one of {', '.join(ALL_STATES)})")
    elif not all_states:
        states = list(ACTIVE_STATES)
    labels = parse_pairs(label, "--label")
    empty = "no jobs" + ("" if all_states or state else " running or waiting (--all shows ended ones)")
    with make_client(url, token) as client:
        _list_view(
            lambda: client.list(team=team, state=states, project=project, labels=labels or None, limit=limit),
            jobs_table,
            empty,
            watching=watching,
            interval=interval,
            as_json=as_json,
            wide=wide,
            command="gpufleet ls",
        )


@handle_errors
def show(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Show a job, what it cost (attributed from the ledger) and its state transitions."""
    with make_client(url, token) as client:
        job = client.get(job_id)
        events = client.events(job_id)
        cost_usd = _attributed_cost(client, job)
    if as_json:
        emit_json({"job": job, "events": events, "cost_usd": cost_usd})
    else:
        print_job(job, events, cost_usd=cost_usd)


def _attributed_cost(client: "Client", job: "JobOut") -> float | None:
    """What the ledger charged the job so far (its forecast's ``spent_usd``: the same figure
    ``cost --by job`` shows); None for a job that never started, or a server that cannot say."""
    if job.started_at is None:
        return None
    try:
        return client.forecast(job.id).spent_usd
    except GpufleetError:  # an older server without the route: the job is shown without its cost
        return None


@handle_errors
def logs(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep streaming until the job ends")] = False,
    offset: Annotated[int, typer.Option("--offset", min=0, help="start at this byte")] = 0,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's output (stdout and stderr)."""
    with make_client(url, token) as client:
        for line in client.logs(job_id, follow=follow, offset=offset):
            typer.echo(line, nl=False)


def cancel(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...", help="one or more job ids")],
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel jobs (a running one is stopped; cancelling an ended job changes nothing).

    Goes on past a job it cannot cancel; the exit code is that of the first failure."""
    first_failure = 0
    try:
        client = make_client(url, token)
    except GpufleetError as e:
        raise typer.Exit(report_error(e)) from None
    with client:
        for job_id in job_ids:
            try:
                job = client.cancel(job_id)
            except GpufleetError as e:
                code = report_error(e)
                first_failure = first_failure or code
                continue
            if job.terminal:
                typer.echo(f"{job.id} {job.state}")
            else:
                typer.echo(f"{job.id} cancelling ({job.state.lower()}, being stopped)")
    if first_failure:
        raise typer.Exit(first_failure)


@handle_errors
def wait(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    timeout: Annotated[str | None, typer.Option("--timeout", help="give up after, e.g. 30m (exit 7)")] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Wait for a job to end; exit 0 if it succeeded, 1 otherwise.

    On a terminal (not with --json) a line on stderr shows the job's state meanwhile, and a bar with an
    ETA while it runs with an estimated runtime (submit --estimate) or a --max-runtime."""
    seconds = parse_duration(timeout, "--timeout") if timeout is not None else None
    with make_client(url, token) as client:
        job = _wait(client, job_id, seconds, show=interactive(as_json))
    _finish(job, as_json)


@handle_errors
def queue(
    team: Annotated[str | None, typer.Option("--team")] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    watching: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """The waiting jobs in the order they will start, with why each one waits (--watch: until Ctrl-C)."""
    with make_client(url, token) as client:
        _list_view(
            lambda: client.queue(team),
            queue_table,
            "the queue is empty",
            watching=watching,
            interval=interval,
            as_json=as_json,
            wide=wide,
            command="gpufleet queue",
        )


@handle_errors
def nodes(
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    watching: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """The nodes, their GPUs, what is allocated on them and what they cost (--watch: until Ctrl-C)."""
    with make_client(url, token) as client:
        _list_view(
            client.nodes,
            nodes_table,
            "no nodes",
            watching=watching,
            interval=interval,
            as_json=as_json,
            wide=wide,
            command="gpufleet nodes",
        )


__all__ = [
    "build_spec",
    "make_client",
    "parse_cpu_milli",
    "parse_duration",
    "parse_pairs",
    "parse_size_mib",
]
