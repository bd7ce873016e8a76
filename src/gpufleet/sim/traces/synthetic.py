"""A seeded synthetic workload generator.

The model, each part drawn from one :class:`numpy.random.Generator` seeded with ``options.seed``:

- **Arrivals**: a Poisson process of ``arrival_rate_per_hour`` (exponential gaps); the first job
  arrives after the first gap.
- **Durations**: lognormal with median ``duration_median_s`` and log-sigma ``duration_sigma``,
  clipped to ``[duration_min_s, duration_max_s]``.
- **Requests** (``request_mix`` weights by kind):
  ``single`` one whole GPU; ``multi`` one pod of ``multi_gpu_counts`` GPUs; ``gang`` a multi-node
  gang of ``gang_sizes`` pods of ``gpus_per_node`` GPUs; ``fractional`` ``fractional_milli`` of one
  shared GPU; ``mig`` one MIG slice from ``mig_profiles`` (restricted to the GPU models that have
  the profile); ``cpu`` no GPU.
- **CPU and memory** per pod: ``cpu_milli_per_gpu`` / ``memory_mib_per_gpu`` times the pod's
  GPU-equivalents (a share for fractional and MIG pods; a CPU-only pod counts as one), rounded.
- **Teams** by ``teams`` weights, projects ``<team>-p<k>`` for ``k < projects_per_team``;
  **priority classes** by ``priorities`` weights.
- **Preemption**: a ``preemptible_fraction`` of jobs is preemptible, each with a checkpoint
  interval chosen from ``checkpoint_intervals_s``.
- **GPU-type constraints**: a ``gpu_type_fraction`` of whole/multi/gang/fractional jobs may only
  run on one model chosen from ``gpu_types``.
- **Runtime estimates**: exact, none, or ``duration x LogNormal(ln(estimate_bias), estimate_sigma)``.

Every random quantity is drawn for every job in a fixed order whatever the options, so the same
seed gives the same trace, and changing e.g. the request mix does not move the arrivals.

Sizes and times are bounded by :mod:`gpufleet.sim.limits`: ``num_jobs`` (``MAX_JOBS``), gang sizes,
GPUs per pod, CPU and memory per pod, durations and checkpoint intervals, and the expected span of
the arrivals (``num_jobs / arrival_rate_per_hour``, at most ``MAX_TIME_S``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from gpufleet.errors import InputError
from gpufleet.model.gpu import GPU_MODELS, MILLI
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, JobSpec
from gpufleet.model.share import milli_gpus
from gpufleet.sim.limits import (
    MAX_CPU_MILLI,
    MAX_GANG_SIZE,
    MAX_GPUS_PER_POD,
    MAX_JOBS,
    MAX_MEMORY_MIB,
    MAX_TIME_S,
)
from gpufleet.sim.traces.base import Trace, TraceJob

REQUEST_KINDS = ("single", "multi", "gang", "fractional", "mig", "cpu")
RuntimeEstimate = Literal["exact", "noisy", "none"]


def _default_mix() -> dict[str, float]:
    return {"single": 0.45, "multi": 0.2, "gang": 0.05, "fractional": 0.15, "mig": 0.1, "cpu": 0.05}


def _default_teams() -> dict[str, float]:
    return {"vision": 4.0, "nlp": 3.0, "speech": 2.0, "research": 1.0}


def _default_priorities() -> dict[str, float]:
    return {"low": 2.0, "normal": 6.0, "high": 2.0}


def _mig_models(profile: str) -> frozenset[str]:
    return frozenset(m.name for m in GPU_MODELS.values() if m.mig_profile(profile) is not None)


@dataclass(frozen=True, slots=True)
class SyntheticOptions:
    num_jobs: int = 1_000
    arrival_rate_per_hour: float = 120.0
    duration_median_s: float = 1_800.0
    duration_sigma: float = 1.0
    duration_min_s: float = 60.0
    duration_max_s: float = 7 * 86_400.0
    request_mix: dict[str, float] = field(default_factory=_default_mix)
    multi_gpu_counts: tuple[int, ...] = (2, 4, 8)
    gpus_per_node: int = 8
    gang_sizes: tuple[int, ...] = (2, 4)
    fractional_milli: tuple[int, ...] = (250, 500)
    mig_profiles: tuple[str, ...] = ("1g.10gb", "2g.20gb", "3g.40gb")
    cpu_milli_per_gpu: int = 4_000
    memory_mib_per_gpu: int = 32 * 1024
    teams: dict[str, float] = field(default_factory=_default_teams)
    projects_per_team: int = 3
    priorities: dict[str, float] = field(default_factory=_default_priorities)
    preemptible_fraction: float = 0.3
    checkpoint_intervals_s: tuple[float, ...] = (600.0, 1_800.0, 3_600.0)
    gpu_type_fraction: float = 0.2
    gpu_types: tuple[str, ...] = ("A100-80GB", "H100-80GB", "L4", "T4")
    runtime_estimate: RuntimeEstimate = "exact"
    estimate_bias: float = 2.0
    estimate_sigma: float = 0.75
    seed: int = 0
    name: str | None = None  # None: "synthetic-<seed>"

    def __post_init__(self) -> None:
        def bad(fld: str, msg: str) -> InputError:
            return InputError(msg, field=fld)

        if not 0 <= self.num_jobs <= MAX_JOBS:
            raise bad("num_jobs", f"must be in [0, {MAX_JOBS}]")
        if not (math.isfinite(self.arrival_rate_per_hour) and self.arrival_rate_per_hour > 0):
            raise bad("arrival_rate_per_hour", "must be a finite number > 0")
        if self.num_jobs / self.arrival_rate_per_hour * 3600.0 > MAX_TIME_S:
            raise bad("arrival_rate_per_hour", f"too low: {self.num_jobs} arrivals would span more than 10 years")
        if not 0 < self.duration_median_s <= MAX_TIME_S:
            raise bad("duration_median_s", f"must be in (0, {MAX_TIME_S:.0f}]")
        if not 0 <= self.duration_sigma <= 10:
            raise bad("duration_sigma", "must be in [0, 10]")
        if not 0 <= self.duration_min_s <= self.duration_max_s:
            raise bad("duration_min_s", "must be in [0, duration_max_s]")
        if not self.duration_max_s <= MAX_TIME_S:
            raise bad("duration_max_s", f"must be <= {MAX_TIME_S:.0f} (10 years)")
        if not 0 <= self.seed < 2**63:
            raise bad("seed", "must be in [0, 2**63)")
        _check_weights("request_mix", self.request_mix, REQUEST_KINDS)
        _check_weights("teams", self.teams, None)
        _check_weights("priorities", self.priorities, tuple(PRIORITY_CLASSES))
        if not self.multi_gpu_counts or not all(1 <= c <= MAX_GPUS_PER_POD for c in self.multi_gpu_counts):
            raise bad("multi_gpu_counts", f"must be a non-empty tuple of counts in [1, {MAX_GPUS_PER_POD}]")
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_POD:
            raise bad("gpus_per_node", f"must be in [1, {MAX_GPUS_PER_POD}]")
        if not self.gang_sizes or not all(1 <= g <= MAX_GANG_SIZE for g in self.gang_sizes):
            raise bad("gang_sizes", f"must be a non-empty tuple of sizes in [1, {MAX_GANG_SIZE}]")
        if not self.fractional_milli or not all(0 < m < MILLI for m in self.fractional_milli):
            raise bad("fractional_milli", "must be a non-empty tuple of values in 1..999")
        if not self.mig_profiles:
            raise bad("mig_profiles", "must not be empty")
        for p in self.mig_profiles:
            if not _mig_models(p):
                raise bad("mig_profiles", f"unknown MIG profile '{p}'")
        if self.cpu_milli_per_gpu < 0 or self.memory_mib_per_gpu < 0:
            raise bad("cpu_milli_per_gpu", "CPU and memory per GPU must be >= 0")
        pod_gpus = max(max(self.multi_gpu_counts), self.gpus_per_node)
        if self.cpu_milli_per_gpu * pod_gpus > MAX_CPU_MILLI:
            raise bad("cpu_milli_per_gpu", f"a pod of {pod_gpus} GPUs would ask for over {MAX_CPU_MILLI} milli-CPU")
        if self.memory_mib_per_gpu * pod_gpus > MAX_MEMORY_MIB:
            raise bad("memory_mib_per_gpu", f"a pod of {pod_gpus} GPUs would ask for more than {MAX_MEMORY_MIB} MiB")
        if self.projects_per_team < 1:
            raise bad("projects_per_team", "must be >= 1")
        if not 0 <= self.preemptible_fraction <= 1:
            raise bad("preemptible_fraction", "must be in [0, 1]")
        if not self.checkpoint_intervals_s or not all(0 < c <= MAX_TIME_S for c in self.checkpoint_intervals_s):
            raise bad("checkpoint_intervals_s", f"must be a non-empty tuple of intervals in (0, {MAX_TIME_S:.0f}]")
        if not 0 <= self.gpu_type_fraction <= 1:
            raise bad("gpu_type_fraction", "must be in [0, 1]")
        if self.gpu_type_fraction > 0 and not self.gpu_types:
            raise bad("gpu_types", "must not be empty when gpu_type_fraction > 0")
        if self.runtime_estimate not in ("exact", "noisy", "none"):
            raise bad("runtime_estimate", "must be one of exact, noisy, none")
        if not self.estimate_bias > 0 or not self.estimate_sigma >= 0:
            raise bad("estimate_bias", "estimate_bias must be > 0 and estimate_sigma >= 0")


def _check_weights(name: str, weights: dict[str, float], allowed: tuple[str, ...] | None) -> None:
    if not weights:
        raise InputError("must not be empty", field=name)
    for key, w in weights.items():
        if allowed is not None and key not in allowed:
            raise InputError(f"unknown key '{key}' (known: {', '.join(allowed)})", field=name)
        if not (math.isfinite(w) and w >= 0):
            raise InputError(f"weight of '{key}' must be a finite number >= 0", field=name)
    if sum(weights.values()) <= 0:
        raise InputError("weights must not all be zero", field=name)


def _choose(rng: np.random.Generator, keys: list[str], weights: list[float], n: int) -> npt.NDArray[np.int64]:
    p = np.asarray(weights, dtype=np.float64)
    return rng.choice(len(keys), size=n, p=p / p.sum())


def generate_synthetic(options: SyntheticOptions | None = None) -> Trace:
    """A synthetic :class:`Trace` (jobs only). The same options (seed included) give the same trace."""
    o = options or SyntheticOptions()
    n = o.num_jobs
    rng = np.random.default_rng(o.seed)

    # 1. Draw everything, always in this order and always for every job.
    gaps = rng.exponential(3_600.0 / o.arrival_rate_per_hour, n)
    durations = np.clip(
        rng.lognormal(math.log(o.duration_median_s), o.duration_sigma, n), o.duration_min_s, o.duration_max_s
    )
    kinds = list(o.request_mix)
    kind_idx = _choose(rng, kinds, list(o.request_mix.values()), n)
    multi_idx = rng.integers(len(o.multi_gpu_counts), size=n)
    gang_idx = rng.integers(len(o.gang_sizes), size=n)
    frac_idx = rng.integers(len(o.fractional_milli), size=n)
    mig_idx = rng.integers(len(o.mig_profiles), size=n)
    teams = list(o.teams)
    team_idx = _choose(rng, teams, list(o.teams.values()), n)
    project_idx = rng.integers(o.projects_per_team, size=n)
    prios = list(o.priorities)
    prio_idx = _choose(rng, prios, list(o.priorities.values()), n)
    preemptible = rng.random(n) < o.preemptible_fraction
    ckpt_idx = rng.integers(len(o.checkpoint_intervals_s), size=n)
    typed = rng.random(n) < o.gpu_type_fraction
    type_idx = rng.integers(max(1, len(o.gpu_types)), size=n)
    estimate_factor = rng.lognormal(math.log(o.estimate_bias), o.estimate_sigma, n)

    # 2. Build the jobs (from plain Python lists: faster to index, and no numpy scalars in specs).
    kind_l, multi_l, gang_l, frac_l = (
        kind_idx.tolist(),
        multi_idx.tolist(),
        gang_idx.tolist(),
        frac_idx.tolist(),
    )
    mig_l, team_l, project_l, prio_l = (
        mig_idx.tolist(),
        team_idx.tolist(),
        project_idx.tolist(),
        prio_idx.tolist(),
    )
    pre_l, ckpt_l, typed_l, type_l = (
        preemptible.tolist(),
        ckpt_idx.tolist(),
        typed.tolist(),
        type_idx.tolist(),
    )
    submits = np.cumsum(gaps).tolist()
    durs = durations.tolist()
    if o.runtime_estimate == "exact":
        estimates: list[float | None] = list(durs)
    elif o.runtime_estimate == "noisy":
        estimates = list((durations * estimate_factor).tolist())
    else:
        estimates = [None] * n
    mig_types = {p: _mig_models(p) for p in o.mig_profiles}
    width = len(str(max(n - 1, 0)))
    jobs: list[TraceJob] = []
    for i in range(n):
        kind = kinds[kind_l[i]]
        gang = 1
        gpu_types: frozenset[str] = frozenset()
        if kind == "single":
            req = GpuRequest(count=1)
        elif kind == "multi":
            req = GpuRequest(count=o.multi_gpu_counts[multi_l[i]])
        elif kind == "gang":
            req = GpuRequest(count=o.gpus_per_node)
            gang = o.gang_sizes[gang_l[i]]
        elif kind == "fractional":
            req = GpuRequest(count=1, milli=o.fractional_milli[frac_l[i]])
        elif kind == "mig":
            profile = o.mig_profiles[mig_l[i]]
            milli = next(p.milli for m in GPU_MODELS.values() if (p := m.mig_profile(profile)))
            req = GpuRequest(count=1, milli=milli, mig_profile=profile)
            gpu_types = mig_types[profile]
        else:  # cpu
            req = GpuRequest(count=0)
        if kind in ("single", "multi", "gang", "fractional") and typed_l[i]:
            gpu_types = frozenset({o.gpu_types[type_l[i]]})
        gpu_equiv = milli_gpus(req.total_milli) if req.count else 1.0
        team = teams[team_l[i]]
        is_pre = bool(pre_l[i])
        spec = JobSpec(
            name=f"syn-{i:0{width}d}",
            team=team,
            project=f"{team}-p{project_l[i]}",
            labels={"synthetic/kind": kind},
            priority_class=prios[prio_l[i]],
            gpu=req,
            gpu_types=gpu_types,
            cpu_milli=round(o.cpu_milli_per_gpu * gpu_equiv),
            memory_mib=round(o.memory_mib_per_gpu * gpu_equiv),
            preemptible=is_pre,
            checkpoint_interval_s=o.checkpoint_intervals_s[ckpt_l[i]] if is_pre else None,
            estimated_runtime_s=estimates[i],
            gang_size=gang,
            duration_s=durs[i],
        )
        jobs.append(TraceJob(submits[i], spec))
    name = o.name or f"synthetic-{o.seed}"
    return Trace(name=name, jobs=jobs, source=f"synthetic(seed={o.seed})")
