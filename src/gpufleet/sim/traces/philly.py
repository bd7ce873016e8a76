"""Loader for the Philly job trace (Microsoft, Jeon et al., USENIX ATC 2019).

The file is the CSV shipped in the Pollux artifact (``petuum/adaptdl``, branch ``osdi21-artifact``,
``simulator/traces/philly.csv``), one job a row::

    timestamp,duration,num_gpus,gpu_time,cluster
    2017-10-09 07:01:55,66.0,1,66.0,11cb48

- ``timestamp``: submit time, ``YYYY-MM-DD HH:MM:SS``, naive UTC. A job's submit time in the
  :class:`Trace` is seconds since the earliest timestamp in the file (rows are not sorted).
- ``duration``: seconds the job really ran → ``JobSpec.duration_s``.
- ``num_gpus``: whole GPUs (``>= 1``).
- ``gpu_time``: ``duration x num_gpus``; checked to be a number, otherwise unused.
- ``cluster``: the virtual cluster (Philly's unit of quota) → ``JobSpec.team``.

**Multi-node jobs.** A job asking for more GPUs than a node has (``num_gpus > gpus_per_node``)
becomes a gang of ``ceil(num_gpus / gpus_per_node)`` pods placed all-or-nothing. The GPUs are spread
evenly over the pods: each pod asks for ``ceil(num_gpus / pods)`` GPUs. When ``num_gpus`` is not a
multiple of the pod count this over-asks by fewer than ``pods`` GPUs in total (a :class:`JobSpec`
gang has identical pods, so an exact uneven split cannot be expressed); the original count is kept
in the label ``philly/num_gpus`` and the job gets the label ``philly/rounded=true``. In the shipped
file every multi-node job (12, 16, 24, 32, 64, 128 GPUs with 8-GPU nodes) splits exactly: 12 GPUs
become 2 pods of 6.

**What Philly does not record** is filled from :class:`PhillyOptions`: CPU and memory per GPU
(defaults 4 cores and 32 GiB per GPU, a typical 8-GPU server's 32 cores / 256 GiB shared evenly),
the runtime estimate a user would give (exact by default, or a seeded multiplicative lognormal
that models users' overestimates), and which jobs are preemptible with what checkpoint interval
(none by default; a seeded fraction when asked). Random choices use independent numpy streams
spawned from one seed, so e.g. turning on noisy estimates does not change which jobs are
preemptible.

Bad input raises :class:`~gpufleet.errors.TraceError` naming the file, the line and the field.
:func:`parse_philly` parses text; :func:`gpufleet.io.traces.load_philly` reads the file.
Sizes, counts and times are bounded by :mod:`gpufleet.sim.limits` (GPUs and gang size of a job,
number of jobs, durations and the trace's span up to 10 years).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpufleet.errors import InputError, TraceError
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, JobSpec
from gpufleet.sim.limits import MAX_GANG_SIZE, MAX_GPUS_PER_POD, MAX_JOB_GPUS, MAX_JOBS, MAX_TIME_S, time_problem
from gpufleet.sim.traces.base import Trace, TraceJob

if TYPE_CHECKING:
    from _csv import Reader as _CsvReader

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
_TIMESTAMP_LEN = len("2017-10-09 07:01:55")

RuntimeEstimate = Literal["exact", "noisy", "none"]


@dataclass(frozen=True, slots=True)
class PhillyOptions:
    """How Philly rows become :class:`JobSpec`\\s. All randomness is drawn from ``seed``."""

    gpus_per_node: int = 8
    cpu_milli_per_gpu: int = 4_000  # 4 cores per GPU
    memory_mib_per_gpu: int = 32 * 1024  # 32 GiB per GPU
    priority_class: str = "normal"
    gpu_types: frozenset[str] = frozenset()  # allowed GPU models for every job; empty = any
    # Runtime estimate given to the scheduler (backfill):
    # "exact": the true duration; "none": no estimate;
    # "noisy": duration x LogNormal(ln(estimate_bias), estimate_sigma), never below the duration
    #          when ``estimate_never_under`` (users who under-estimate get killed, so they pad).
    runtime_estimate: RuntimeEstimate = "exact"
    estimate_bias: float = 2.0  # median overestimate factor
    estimate_sigma: float = 0.75  # lognormal sigma of the factor
    estimate_never_under: bool = False
    # Preemption: this fraction of jobs (chosen at random) is preemptible and checkpoints every
    # ``checkpoint_interval_s`` seconds (None: preemptible but never checkpoints).
    preemptible_fraction: float = 0.0
    checkpoint_interval_s: float | None = 1_800.0
    max_runtime_factor: float | None = None  # max_runtime_s = duration x factor; None = no limit
    max_jobs: int | None = None  # keep only the N earliest-submitted jobs (ties: file order)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_POD:
            raise InputError(f"must be in [1, {MAX_GPUS_PER_POD}]", field="gpus_per_node")
        if self.cpu_milli_per_gpu < 0:
            raise InputError("must be >= 0", field="cpu_milli_per_gpu")
        if self.memory_mib_per_gpu < 0:
            raise InputError("must be >= 0", field="memory_mib_per_gpu")
        if self.priority_class not in PRIORITY_CLASSES:
            raise InputError(
                f"unknown priority class '{self.priority_class}' (known: {', '.join(PRIORITY_CLASSES)})",
                field="priority_class",
            )
        if self.runtime_estimate not in ("exact", "noisy", "none"):
            raise InputError("must be one of exact, noisy, none", field="runtime_estimate")
        if not self.estimate_bias > 0:
            raise InputError("must be > 0", field="estimate_bias")
        if not self.estimate_sigma >= 0:
            raise InputError("must be >= 0", field="estimate_sigma")
        if not 0.0 <= self.preemptible_fraction <= 1.0:
            raise InputError("must be in [0, 1]", field="preemptible_fraction")
        if self.checkpoint_interval_s is not None and not self.checkpoint_interval_s > 0:
            raise InputError("must be > 0 or None", field="checkpoint_interval_s")
        if self.max_runtime_factor is not None and not self.max_runtime_factor >= 1:
            raise InputError("must be >= 1 or None", field="max_runtime_factor")
        if self.max_jobs is not None and not 0 <= self.max_jobs <= MAX_JOBS:
            raise InputError(f"must be in [0, {MAX_JOBS}] or None", field="max_jobs")


def gang_shape(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """``(pods, gpus_per_pod)`` for a job of ``num_gpus`` whole GPUs on nodes of ``gpus_per_node``.

    ``pods = ceil(num_gpus / gpus_per_node)``; GPUs are spread evenly, ``gpus_per_pod =
    ceil(num_gpus / pods)`` (so ``pods x gpus_per_pod >= num_gpus``, over by fewer than ``pods``).
    """
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    pods = -(-num_gpus // gpus_per_node)
    return pods, -(-num_gpus // pods)


def _parse_time(text: str) -> float:
    """Seconds since the UNIX epoch of a naive-UTC ``YYYY-MM-DD HH:MM:SS``; ValueError if malformed."""
    if len(text) != _TIMESTAMP_LEN or text[10] != " ":
        raise ValueError(text)
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def parse_philly(
    lines: Iterable[str], options: PhillyOptions | None = None, *, name: str = "philly", source: str = "<philly>"
) -> Trace:
    """Parse the lines of a Philly CSV into a :class:`Trace` (jobs only; Philly has no node list).
    ``source`` names the text in errors (:func:`gpufleet.io.traces.load_philly` reads a file).

    Raises :class:`TraceError` (source, line, field) on a missing column, a non-numeric or negative
    duration, a GPU count that is not a positive integer, a malformed timestamp or an empty file.
    """
    opts = options or PhillyOptions()
    times, durations, gpus, teams = _read_rows(csv.reader(lines), source)
    if not times:
        raise TraceError("no jobs (the file has only a header)", source=source)
    return _build(name, source, opts, times, durations, gpus, teams)


def _read_rows(reader: _CsvReader, source: str) -> tuple[list[float], list[float], list[int], list[str]]:
    """Parse and check every row: (epoch seconds, duration s, GPUs, virtual cluster) columns."""
    times: list[float] = []
    durations: list[float] = []
    gpus: list[int] = []
    teams: list[str] = []
    header = next(reader, None)
    if header is None:
        raise TraceError("empty file (expected a header line)", source=source, line=1)
    header = [h.strip() for h in header]
    for col in PHILLY_COLUMNS:
        if col not in header:
            raise TraceError(f"missing column (header has: {', '.join(header)})", source=source, line=1, field=col)
    index = [header.index(c) for c in PHILLY_COLUMNS]
    i_ts, i_dur, i_gpu, i_gt, i_cl = index
    width = max(index) + 1
    for row in reader:
        if not row:
            continue  # blank line
        line = reader.line_num
        if len(row) < width:
            missing = next(c for c, i in zip(PHILLY_COLUMNS, index, strict=True) if i >= len(row))
            raise TraceError(
                f"row has {len(row)} fields, expected {len(header)}", source=source, line=line, field=missing
            )
        cell = row[i_ts]
        try:
            t = _parse_time(cell)
        except ValueError:
            raise TraceError(
                f"bad timestamp {cell!r} (expected YYYY-MM-DD HH:MM:SS)",
                source=source,
                line=line,
                field="timestamp",
            ) from None
        cell = row[i_dur]
        try:
            dur = float(cell)
        except ValueError:
            raise TraceError(f"not a number: {cell!r}", source=source, line=line, field="duration") from None
        problem = time_problem(dur)
        if problem is not None:
            raise TraceError(f"duration {problem}", source=source, line=line, field="duration")
        cell = row[i_gpu]
        try:
            n = int(cell)
        except ValueError:
            raise TraceError(f"not an integer: {cell!r}", source=source, line=line, field="num_gpus") from None
        if n < 1:
            raise TraceError(f"GPU count must be >= 1, got {n}", source=source, line=line, field="num_gpus")
        if n > MAX_JOB_GPUS:
            msg = f"GPU count must be <= {MAX_JOB_GPUS}, got {n}"
            raise TraceError(msg, source=source, line=line, field="num_gpus")
        if len(times) >= MAX_JOBS:
            raise TraceError(f"more than {MAX_JOBS} jobs", source=source, line=line)
        cell = row[i_gt]
        try:
            float(cell)
        except ValueError:
            raise TraceError(f"not a number: {cell!r}", source=source, line=line, field="gpu_time") from None
        team = row[i_cl].strip()
        if not team:
            raise TraceError("empty virtual cluster id", source=source, line=line, field="cluster")
        times.append(t)
        durations.append(dur)
        gpus.append(n)
        teams.append(team)
    return times, durations, gpus, teams


def _build(
    name: str,
    source: str,
    opts: PhillyOptions,
    times: list[float],
    durations: list[float],
    gpus: list[int],
    teams: list[str],
) -> Trace:
    t0 = min(times)
    if max(times) - t0 > MAX_TIME_S:
        raise TraceError(
            f"the trace spans more than {MAX_TIME_S:.0f} s (10 years) of submit times", source=source, field="timestamp"
        )
    if opts.max_jobs is None:
        rows = list(range(len(times)))
    else:
        order = np.argsort(np.asarray(times), kind="stable")[: opts.max_jobs]
        rows = sorted(order.tolist())  # back to file order, so random draws follow the file
    count = len(rows)
    dur = np.asarray([durations[r] for r in rows], dtype=np.float64)

    # Independent streams: each option's draws do not depend on the others being enabled.
    preempt_seq, estimate_seq = np.random.SeedSequence(opts.seed).spawn(2)
    preemptible = np.random.default_rng(preempt_seq).random(count) < opts.preemptible_fraction
    estimates: list[float] | list[None]
    if opts.runtime_estimate == "exact":
        estimates = dur.tolist()
    elif opts.runtime_estimate == "none":
        estimates = [None] * count
    else:
        factor = np.random.default_rng(estimate_seq).lognormal(math.log(opts.estimate_bias), opts.estimate_sigma, count)
        if opts.estimate_never_under:
            factor = np.maximum(factor, 1.0)
        estimates = (dur * factor).tolist()
    factor_max = opts.max_runtime_factor
    max_runtimes: list[float] | list[None] = [None] * count if factor_max is None else (dur * factor_max).tolist()

    # Shared immutable parts: one GpuRequest per pod shape.
    requests: dict[int, tuple[int, GpuRequest]] = {}
    ckpt = opts.checkpoint_interval_s
    jobs: list[TraceJob] = []
    width = len(str(len(times) - 1))
    for i, r in enumerate(rows):
        n = gpus[r]
        shape = requests.get(n)
        if shape is None:
            pods, per_pod = gang_shape(n, opts.gpus_per_node)
            if pods > MAX_GANG_SIZE:
                raise TraceError(
                    f"a job of {n} GPUs needs a gang of {pods} pods of {opts.gpus_per_node} GPUs"
                    f" (at most {MAX_GANG_SIZE} pods)",
                    source=source,
                    field="num_gpus",
                )
            shape = requests[n] = (pods, GpuRequest(count=per_pod))
        pods, req = shape
        labels = {"philly/num_gpus": str(n)}
        if pods * req.count != n:
            labels["philly/rounded"] = "true"
        is_pre = bool(preemptible[i])
        spec = JobSpec(
            name=f"philly-{r:0{width}d}",  # r: 0-based data row of the file
            team=teams[r],
            labels=labels,
            priority_class=opts.priority_class,
            gpu=req,
            gpu_types=opts.gpu_types,
            cpu_milli=req.count * opts.cpu_milli_per_gpu,
            memory_mib=req.count * opts.memory_mib_per_gpu,
            preemptible=is_pre,
            checkpoint_interval_s=ckpt if is_pre else None,
            max_runtime_s=max_runtimes[i],
            estimated_runtime_s=estimates[i],
            gang_size=pods,
            duration_s=durations[r],
        )
        jobs.append(TraceJob(times[r] - t0, spec))
    return Trace(name=name, jobs=jobs, source=source)
