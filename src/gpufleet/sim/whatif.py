"""What-if: replay a workload with ONE change and report the cost, wait and JCT difference.

Both runs — the **baseline** and the **variant** — are simulated the same way (same trace, seed,
scheduler profile, spot hazard, price catalog); only the change differs.

**Baseline**: a fixed on-demand cluster, always on, no sharing — except for a cluster's own history
(``trace.as_run``): there the baseline is what the cluster did, the requests as they ran (fractions,
MIG slices, time-sliced shares) on each node's own sharing mode, and it is shown beside what the
ledger billed for those nodes over the same span (``recorded_cost_usd``; a replay "as is" is meant to
land within :data:`REPLAY_TOLERANCE` of it). Its nodes are the trace's nodes
(openb, JSONL with nodes), the ``cluster`` given (for ``history``: the server's own nodes), or — for
traces without nodes (Philly, synthetic) — 8-GPU nodes of each model the jobs need (``V100-16GB``,
the default cluster's, for jobs that may use it; else the cheapest on-demand model a job may use),
as many as the **peak** of whole GPUs demanded of that model at once if every job ran from its
submit time (the cluster "sized for the peak" of the ROI report). Without sharing, fractional and
MIG requests ask for one whole GPU (and MIG nodes are plain shared nodes).

**Changes** (``--change``; join several with ``+``, e.g. ``spot+autoscaling``):

- ``autoscaling``: each node shape becomes an on-demand pool that starts empty, up to the baseline's
  node count, with a provisioning delay; the autoscaler adds nodes for blocked jobs and removes
  idle ones.
- ``spot``: preemptible (checkpointing) jobs may use spot capacity. Alone: the cluster keeps its
  size, with ``k = round(N × s)`` of its N nodes spot (s = the preemptible jobs' share of the
  GPU-seconds), replaced when interrupted, but never so many that the largest job that may not use
  spot no longer fits the on-demand nodes left (:func:`on_demand_floor`). With ``autoscaling``: a
  spot pool per shape beside the on-demand one, each up to N nodes (the autoscaler takes the cheapest pool that fits).
- ``sharing``: fractional and MIG requests as submitted, on the nodes' own sharing modes; on a
  cluster with no MIG-mode node a MIG request asks for its fraction of a GPU (time-sliced).
- ``gpu-type:<MODEL>``: every node shape gets that GPU model (jobs that asked for a model ask for
  it; durations unchanged — there is no speed model).
- ``placement:<policy>`` / ``queue:<sort>``: another placement policy or queue order.

**Lower bound** of the variant: every GPU-second of the trace's work (``Σ GPUs × duration``) at
the cheapest eligible price — the cheapest model among the variant's node models that the job may
use and whose memory fits, on spot when the variant has spot and the job is preemptible, else
on-demand. No queueing, no idle, no lost work: no schedule can cost less.

**Prices**: the catalog's, except for nodes with their own price (a server's ledger, ``history``):
they keep it on on-demand capacity, and their spot capacity costs it times the catalog's spot
discount for the model (:func:`spot_ratio`). The baseline's figure is its own run, so every change
over the same trace shows the same baseline. The comparison is over one horizon, the later end
(:func:`tail_usd`): a variant whose work ends sooner keeps its always-on nodes on (and an autoscaled
node up at its end until its idle TTL) to the baseline's end; when the variant's work ends later, the
baseline's fixed cluster, always on, costs ``baseline_kept_on_usd`` more until then, and the savings
are ``baseline + baseline_kept_on − variant`` (said in the assumptions).

A change that cannot save anything says why in the result's assumptions (no preemptible work, no spot
price, no node that can be spot, a cluster the change leaves as it is), never a bare $0.00.

A cluster's own history is replayed as a trace (:mod:`gpufleet.sim.history`). This module does no
I/O: it receives the trace, nodes and price catalog (without a catalog it takes the bundled one
through :meth:`PriceCatalog.load`, the compatibility shim over :mod:`gpufleet.io.catalog`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import CatalogError, InputError
from gpufleet.model.gpu import MILLI, canonical_gpu_name, gpu_model
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.profile import Profile, load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.results import SimResult
from gpufleet.sim.runner import workload_of
from gpufleet.sim.traces.base import Trace, TraceJob

DEFAULT_SHAPE = ("V100-16GB", 8, 64_000, 512 * 1024)  # the default cluster's node (runner.default_cluster)
SIMPLE_CHANGES = ("autoscaling", "spot", "sharing")
PARAM_CHANGES = ("gpu-type", "placement", "queue")
PROVISIONING_DELAY_S = 120.0
# how far a history's baseline, replayed as it ran, may land from what the ledger billed: the replay
# starts each job as soon as it fits (the server's admission and start-up waits are not replayed),
# and keeps every node of the span on from the first submit (a node added midway was billed less)
REPLAY_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Change:
    """One change (or several joined with ``+``): ``autoscaling``, ``spot``, ``sharing``,
    ``gpu_type``, ``placement``, ``queue``."""

    autoscaling: bool = False
    spot: bool = False
    sharing: bool = False
    gpu_type: str | None = None
    placement: str | None = None
    queue: str | None = None
    text: str = ""


def parse_change(text: str) -> Change:
    """``spot``, ``autoscaling``, ``sharing``, ``gpu-type:A10G``, ``placement:fgd``, ``queue:fifo``,
    or several joined with ``+``. Errors name the part."""
    kw: dict[str, Any] = {}
    parts = [p.strip() for p in text.split("+") if p.strip()]
    if not parts:
        raise InputError("name a change (spot, autoscaling, sharing, gpu-type:M, placement:P, queue:Q)", field="change")
    for i, part in enumerate(parts):
        name, _, arg = part.partition(":")
        name = name.strip().lower()
        if name in SIMPLE_CHANGES and not arg:
            kw[name] = True
        elif name == "gpu-type" and arg:
            canon = canonical_gpu_name(arg)
            if canon is None:
                raise InputError(f"unknown GPU model '{arg}'", field=f"change[{i}]")
            kw["gpu_type"] = canon
        elif name in ("placement", "queue") and arg:
            kw[name] = arg.strip()
        else:
            raise InputError(
                f"unknown change '{part}' (spot, autoscaling, sharing, gpu-type:MODEL, placement:POLICY, queue:SORT)",
                field=f"change[{i}]",
            )
    return Change(**kw, text="+".join(parts))


@dataclass(frozen=True, slots=True)
class Shape:
    gpu_model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    sharing: SharingMode = SharingMode.SHARED
    hourly_usd: float | None = None  # the node's own on-demand price (a server's ledger); None: the catalog's


@dataclass(frozen=True, slots=True)
class RunFigures:
    name: str
    cost_usd: float
    idle_cost_usd: float
    gpu_hours: float
    completed: int
    never_started: int
    wait_mean_s: float | None
    wait_p95_s: float | None
    jct_mean_s: float | None
    jct_median_s: float | None
    jct_p95_s: float | None
    utilization: float | None
    spot_restarts: int
    lost_work_s: float
    # preemption waste (GPU-hours redone, gpufleet.cost.waste), its share of gpu_hours, by cause
    waste_gpu_hours: float = 0.0
    waste_share: float | None = None
    waste_priority_gpu_hours: float = 0.0
    waste_quota_reclaim_gpu_hours: float = 0.0
    waste_spot_interruption_gpu_hours: float = 0.0
    waste_lost_gpu_hours: float = 0.0

    @classmethod
    def of(cls, result: SimResult, extra_idle_usd: float = 0.0) -> RunFigures:
        """The figures of a run; ``extra_idle_usd``: what its nodes cost after its last job, up to the
        comparison's horizon (idle by definition)."""
        s = result.summary()
        return cls(
            result.name,
            float(result.config.get("cluster_cost_usd", s["total_cost_usd"] or 0.0)) + extra_idle_usd,
            float(result.config.get("idle_cost_usd", s["idle_cost_usd"] or 0.0)) + extra_idle_usd,
            float(s["gpu_hours"]),
            int(s["completed"]),
            int(s["never_started"]),
            s["wait_mean_s"],
            s["wait_p95_s"],
            s["jct_mean_s"],
            s["jct_median_s"],
            s["jct_p95_s"],
            s["utilization"],
            int(s["spot_restarts"]),
            float(s["lost_work_s"]),
            float(s["waste_gpu_hours"]),
            s["waste_share"],
            float(s["waste_priority_gpu_hours"]),
            float(s["waste_quota_reclaim_gpu_hours"]),
            float(s["waste_spot_interruption_gpu_hours"]),
            float(s["waste_lost_gpu_hours"]),
        )


@dataclass(frozen=True, slots=True)
class WhatIfResult:
    change: str
    trace: str
    jobs: int
    seed: int
    baseline_nodes: int
    baseline: RunFigures
    variant: RunFigures
    lower_bound_usd: float
    assumptions: tuple[str, ...] = ()
    recorded_cost_usd: float | None = None  # history: what the ledger billed (see the module docstring)
    # what the baseline's fixed cluster costs after its own work, until the variant's work ends
    baseline_kept_on_usd: float = 0.0

    @property
    def savings_usd(self) -> float:
        """Over one horizon: the baseline kept on until the variant's work ends, less the variant."""
        return self.baseline.cost_usd + self.baseline_kept_on_usd - self.variant.cost_usd

    @property
    def savings_pct(self) -> float | None:
        whole = self.baseline.cost_usd + self.baseline_kept_on_usd
        return self.savings_usd / whole if whole > 0 else None

    @property
    def variant_over_lower_bound(self) -> float | None:
        """Achieved cost / lower bound (1.0 = as cheap as possible)."""
        return self.variant.cost_usd / self.lower_bound_usd if self.lower_bound_usd > 0 else None

    def to_dict(self) -> dict[str, Any]:
        def fig(f: RunFigures) -> dict[str, Any]:
            return {k: getattr(f, k) for k in f.__dataclass_fields__}

        def delta(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else b - a

        b, v = self.baseline, self.variant
        return {
            "change": self.change,
            "trace": self.trace,
            "jobs": self.jobs,
            "seed": self.seed,
            "baseline_nodes": self.baseline_nodes,
            "baseline": fig(b),
            "variant": fig(v),
            "savings_usd": self.savings_usd,
            "savings_pct": self.savings_pct,
            "baseline_kept_on_usd": self.baseline_kept_on_usd,
            "delta": {
                "cost_usd": v.cost_usd - b.cost_usd - self.baseline_kept_on_usd,
                "wait_mean_s": delta(b.wait_mean_s, v.wait_mean_s),
                "wait_p95_s": delta(b.wait_p95_s, v.wait_p95_s),
                "jct_mean_s": delta(b.jct_mean_s, v.jct_mean_s),
                "jct_p95_s": delta(b.jct_p95_s, v.jct_p95_s),
            },
            "lower_bound_usd": self.lower_bound_usd,
            "variant_over_lower_bound": self.variant_over_lower_bound,
            "baseline_over_lower_bound": b.cost_usd / self.lower_bound_usd if self.lower_bound_usd > 0 else None,
            "assumptions": list(self.assumptions),
            "recorded_cost_usd": self.recorded_cost_usd,
            "baseline_vs_recorded": (b.cost_usd / self.recorded_cost_usd - 1.0 if self.recorded_cost_usd else None),
            "replay_tolerance": REPLAY_TOLERANCE if self.recorded_cost_usd is not None else None,
        }


# -- building the two worlds ----------------------------------------------------------------------


def peak_whole_gpus(trace: Trace | Sequence[TraceJob]) -> int:
    """Peak of whole GPUs demanded at once if every job ran from its submit time (vectorized)."""
    jobs = trace.jobs if isinstance(trace, Trace) else trace
    if not jobs:
        return 0
    s = np.fromiter((tj.submit_time for tj in jobs), np.float64, len(jobs))
    d = np.fromiter((tj.spec.duration_s or 3600.0 for tj in jobs), np.float64, len(jobs))
    g = np.fromiter(
        (tj.spec.gpu.count * tj.spec.gang_size if tj.spec.gpu.count else 0 for tj in jobs),
        np.float64,
        len(jobs),
    )
    t = np.concatenate([s, s + d])
    w = np.concatenate([g, -g])
    order = np.lexsort((w, t))
    return int(np.max(np.cumsum(w[order]), initial=0.0))


def baseline_model(spec: JobSpec, catalog: PriceCatalog | None) -> str:
    """The GPU model a fixed cluster bought for this job would have: the default cluster's
    ``V100-16GB`` when the job may use it, else the cheapest on-demand model it may use (its
    ``gpu_types``, or any model of the catalog) whose memory fits; names break ties."""
    default = DEFAULT_SHAPE[0]

    def fits(m: str) -> bool:
        mem = gpu_model(m).memory_gib
        return not mem or mem >= spec.min_gpu_memory_gib

    if (not spec.gpu_types or default in spec.gpu_types) and fits(default):
        return default
    pool = sorted(spec.gpu_types) if spec.gpu_types else (catalog.models() if catalog is not None else [])
    eligible = [m for m in pool if fits(m)] or sorted(spec.gpu_types) or [default]

    def price(m: str) -> float:
        if catalog is None:
            return math.inf
        try:
            return catalog.gpu_hour_usd(m, CapacityType.ON_DEMAND)
        except CatalogError:
            return math.inf

    return min(eligible, key=lambda m: (price(m), m))


def base_shapes(
    trace: Trace, nodes: Sequence[Node] | None = None, catalog: PriceCatalog | None = None
) -> list[tuple[Shape, int]]:
    """The baseline cluster as (shape, count): the given nodes, the trace's, or — for a trace without
    nodes — 8-GPU nodes of each model its jobs need (:func:`baseline_model`), as many as that model's
    peak of whole GPUs demanded at once."""
    src = list(nodes) if nodes else list(trace.nodes)
    if src:
        counts: Counter[Shape] = Counter(
            Shape(n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib, n.sharing, n.hourly_price_usd) for n in src
        )
        return sorted(counts.items(), key=lambda kv: (kv[0].gpu_model, kv[0].gpus, kv[0].cpu_milli, kv[0].memory_mib))
    default, gpus, cpu, mem = DEFAULT_SHAPE
    by_model: dict[str, list[TraceJob]] = {}
    for tj in trace.jobs:
        model = baseline_model(tj.spec, catalog) if tj.spec.gpu.count else default
        by_model.setdefault(model, []).append(tj)
    need_cpu = max((tj.spec.cpu_milli for tj in trace.jobs), default=0)
    need_mem = max((tj.spec.memory_mib for tj in trace.jobs), default=0)
    shapes = [
        (Shape(model, gpus, max(cpu, need_cpu), max(mem, need_mem)), math.ceil(peak_whole_gpus(jobs) / gpus))
        for model, jobs in sorted(by_model.items())
    ]
    shapes = [(sh, c) for sh, c in shapes if c > 0]
    return shapes or [(Shape(default, gpus, max(cpu, need_cpu), max(mem, need_mem)), 1)]


def _whole(spec: JobSpec) -> JobSpec:
    if spec.gpu.count and (spec.gpu.milli < MILLI or spec.gpu.mig_profile is not None):
        return replace(spec, gpu=GpuRequest(count=1))
    return spec


def _retyped(spec: JobSpec, model: str) -> JobSpec:
    gpu = spec.gpu
    if gpu.mig_profile is not None and gpu_model(model).mig_profile(gpu.mig_profile) is None:
        gpu = GpuRequest(count=1)
    return replace(spec, gpu=gpu, gpu_types=frozenset({model}) if spec.gpu_types else frozenset())


def _as_fraction(spec: JobSpec) -> JobSpec:
    """A MIG request as the fraction of a GPU its slice is (time-sliced on a shared node)."""
    if spec.gpu.mig_profile is None:
        return spec
    return replace(spec, gpu=GpuRequest(count=spec.gpu.count, milli=spec.gpu.milli))


def _trace_for(trace: Trace, change: Change | None, *, mig_nodes: bool = True) -> Trace:
    """The trace one run replays: whole GPUs without sharing; with it (or for a history,
    ``trace.as_run``), requests as submitted — MIG slices as their fraction of a GPU when the run has
    no MIG-mode node (``mig_nodes``)."""
    sharing = trace.as_run or (change is not None and change.sharing)
    gtype = change.gpu_type if change is not None else None
    jobs = []
    for tj in trace.jobs:
        spec = (tj.spec if mig_nodes else _as_fraction(tj.spec)) if sharing else _whole(tj.spec)
        if gtype is not None:
            spec = _retyped(spec, gtype)
        jobs.append(TraceJob(tj.submit_time, spec))
    return Trace(trace.name, jobs, source=trace.source)


def on_demand_floor(trace: Trace, shapes: Sequence[tuple[Shape, int]]) -> dict[str, int]:
    """GPU model → the whole GPUs of the largest job that may not use spot (not preemptible) and may
    run on that model: a spot-only change keeps at least that much on-demand capacity, so work the
    baseline could run is never made impossible by the change."""
    models = {sh.gpu_model for sh, _ in shapes}
    floor = dict.fromkeys(models, 0)
    for tj in trace.jobs:
        sp = tj.spec
        if sp.preemptible or not sp.gpu.count:
            continue
        whole = sp.gpu.count * sp.gang_size
        for m in models if not sp.gpu_types else models & sp.gpu_types:
            floor[m] = max(floor[m], whole)
    return floor


def spot_ratio(catalog: PriceCatalog | None, model: str) -> float | None:
    """The catalog's spot price over its on-demand price for ``model`` (None: not priced)."""
    if catalog is None:
        return None
    try:
        return catalog.gpu_hour_usd(model, CapacityType.SPOT) / catalog.gpu_hour_usd(model, CapacityType.ON_DEMAND)
    except CatalogError:
        return None


def spot_split(
    shapes: Sequence[tuple[Shape, int]],
    spot_share: float,
    floor: Mapping[str, int],
    catalog: PriceCatalog | None = None,
) -> tuple[list[int], list[str]]:
    """How many of each shape's nodes a spot-only change makes spot — ``round(N × s)``, less the
    on-demand room of :func:`on_demand_floor` — and, for a shape that gets none, why (a change that
    saves nothing says so)."""
    ks: list[int] = []
    why: list[str] = []
    for shape, count in shapes:
        keep = math.ceil(floor.get(shape.gpu_model, 0) / shape.gpus) if shape.gpus else 0
        want = round(count * spot_share)
        k = max(0, min(want, count - keep))
        what = f"{count} {shape.gpu_model} node{'s' if count != 1 else ''}"
        if spot_share > 0 and catalog is not None and spot_ratio(catalog, shape.gpu_model) is None:
            k = 0
            why.append(f"spot: the price catalog has no spot price for {shape.gpu_model}; its {what} stay on demand")
        elif spot_share > 0 and k == 0 and want == 0:
            why.append(
                f"spot: none of the {what} becomes spot: the preemptible jobs' {spot_share:.1%} of the GPU-seconds "
                f"is round({count} × {spot_share:.1%}) = 0 nodes"
            )
        elif spot_share > 0 and k == 0:
            why.append(
                f"spot: none of the {what} can be spot: a job that may not use spot needs "
                f"{floor.get(shape.gpu_model, 0)} GPUs on demand, {keep} of the {count} node{'s' if count != 1 else ''}"
                " (a spot node cannot replace it)"
            )
        ks.append(k)
    return ks, why


def _cluster_for(
    shapes: Sequence[tuple[Shape, int]],
    change: Change | None,
    spot_share: float,
    floor: dict[str, int] | None = None,
    catalog: PriceCatalog | None = None,
    *,
    as_run: bool = False,
) -> tuple[list[Node], list[NodePool]]:
    """The nodes and pools of one run. A shape with its own price keeps it on on-demand capacity;
    its spot capacity costs that price times the catalog's spot discount for the model. ``as_run``
    (a history): each node keeps its own sharing mode, as with ``sharing``."""
    nodes: list[Node] = []
    pools: list[NodePool] = []
    ch = change or Change()
    ks = spot_split(shapes, spot_share, floor or {}, catalog)[0] if ch.spot else [0] * len(shapes)
    for i, (shape, count) in enumerate(shapes):
        model = ch.gpu_type or shape.gpu_model
        sharing = (
            shape.sharing
            if ch.sharing or as_run
            else (SharingMode.SHARED if shape.sharing is SharingMode.MIG else shape.sharing)
        )
        if ch.gpu_type and sharing is SharingMode.MIG and not gpu_model(model).supports_mig:
            sharing = SharingMode.SHARED
        base = f"{(model or 'cpu').lower()}-{shape.gpus}g-{i}"
        own = shape.hourly_usd if not ch.gpu_type else None  # another model: the catalog's price
        ratio = spot_ratio(catalog, model) if own is not None else None
        spot_usd = own * ratio if own is not None and ratio is not None else None
        shaped = Shape(model, shape.gpus, shape.cpu_milli, shape.memory_mib, sharing, own)
        if ch.autoscaling:
            pools.append(_pool(base, shaped, CapacityType.ON_DEMAND, 0, count, own))
            if ch.spot:
                pools.append(_pool(base + "-spot", shaped, CapacityType.SPOT, 0, count, spot_usd))
            continue
        k = ks[i]
        for j in range(count - k):
            nodes.append(
                Node(
                    f"{base}-{j:04d}",
                    model,
                    shape.gpus,
                    shape.cpu_milli,
                    shape.memory_mib,
                    pool=base,
                    sharing=sharing,
                    hourly_price_usd=own,
                )
            )
        if k:
            pools.append(_pool(base + "-spot", shaped, CapacityType.SPOT, k, k, spot_usd))
    return nodes, pools


def _pool(name: str, shape: Shape, cap: CapacityType, lo: int, hi: int, hourly_usd: float | None) -> NodePool:
    return NodePool(
        name,
        shape.gpu_model,
        shape.gpus,
        shape.cpu_milli,
        shape.memory_mib,
        cap,
        hourly_price_usd=hourly_usd,
        min_nodes=lo,
        max_nodes=hi,
        provisioning_delay_s=PROVISIONING_DELAY_S,
        sharing=shape.sharing,
    )


def _spot_share(trace: Trace) -> float:
    total = pre = 0.0
    for tj in trace.jobs:
        w = tj.spec.total_gpu_milli * (tj.spec.duration_s or 3600.0)
        total += w
        if tj.spec.preemptible:
            pre += w
    return pre / total if total > 0 else 0.0


def _profile_for(profile: Profile, change: Change | None) -> Profile:
    data = profile.model_dump()
    ch = change or Change()
    data["autoscaler"] = {**data["autoscaler"], "enabled": bool(ch.autoscaling or ch.spot)}
    if ch.placement:
        data["placement"] = [{"name": p.strip()} for p in ch.placement.split(",")]
    if ch.queue:
        data["queue_sort"] = ch.queue
    return load_profile(data, source="what-if change")


def simulate_world(
    trace: Trace,
    profile: Profile,
    nodes: Sequence[Node],
    pools: Sequence[NodePool],
    options: SimOptions,
    catalog: PriceCatalog,
    name: str,
) -> SimResult:
    """One run (what :func:`gpufleet.sim.runner.run_simulation` does, with nodes and pools given)."""
    scheduler = profile.build(workload_of(trace), seed=options.seed)

    def pricer(node: Node) -> float:
        return catalog.node_hour_usd(node)

    sim = Simulation(trace, scheduler, pricer, nodes=list(nodes), pools=list(pools), options=options, name=name)
    return sim.run()


def tail_usd(
    result: SimResult,
    nodes: Sequence[Node],
    pools: Sequence[NodePool],
    catalog: PriceCatalog,
    horizon_s: float,
    idle_ttl_s: float,
) -> float:
    """What a run's nodes cost from its last job's end to ``horizon_s``, the comparison's horizon:
    nodes that are always on (static, and the pools' minimum) the whole way; autoscaled nodes still
    up at the end until the autoscaler would remove them (``idle_ttl_s``) or the horizon."""
    extra = max(0.0, horizon_s - result.makespan)
    if extra <= 0:
        return 0.0
    fixed = sum(catalog.node_hour_usd(n) for n in nodes) + sum(
        p.min_nodes * catalog.pool_node_hour_usd(p) for p in pools if p.min_nodes
    )
    live = [smp for smp in result.samples if smp.time <= result.makespan and smp.nodes > 0]
    at_end = live[-1].cost_rate_usd_per_hour if live else fixed
    scaled = max(0.0, at_end - fixed)
    return round((fixed * extra + scaled * min(extra, idle_ttl_s)) / 3600.0, 2)


def lower_bound_usd(
    trace: Trace,
    models: Sequence[str],
    catalog: PriceCatalog,
    *,
    spot: bool,
    own: Mapping[str, float] | None = None,
) -> tuple[float, list[str]]:
    """Every GPU-second of ``trace`` at the cheapest eligible price (see the module docstring).
    ``own``: GPU model → the cluster's own on-demand $/GPU-hour, which replaces the catalog's (its
    spot price: the catalog's spot discount applied to it)."""
    notes: list[str] = []
    prices: dict[tuple[str, CapacityType], float | None] = {}

    def price(m: str, cap: CapacityType) -> float | None:
        if (m, cap) not in prices:
            mine = (own or {}).get(m)
            ratio = spot_ratio(catalog, m) if mine is not None and cap is CapacityType.SPOT else 1.0
            if mine is not None and ratio is not None:
                prices[(m, cap)] = mine * ratio
            else:
                try:
                    prices[(m, cap)] = catalog.gpu_hour_usd(m, cap)
                except CatalogError:
                    prices[(m, cap)] = None
        return prices[(m, cap)]

    cheapest: dict[tuple[frozenset[str], float, bool], float | None] = {}
    total = 0.0
    for tj in trace.jobs:
        sp = tj.spec
        if not sp.gpu.count:
            continue
        key = (sp.gpu_types, sp.min_gpu_memory_gib, spot and sp.preemptible)
        if key not in cheapest:
            best: float | None = None
            for m in models:
                if sp.gpu_types and m not in sp.gpu_types:
                    continue
                mem = gpu_model(m).memory_gib
                if mem and mem < sp.min_gpu_memory_gib:
                    continue
                caps = [CapacityType.ON_DEMAND] + ([CapacityType.SPOT] if key[2] else [])
                for cap in caps:
                    p = price(m, cap)
                    if p is not None and (best is None or p < best):
                        best = p
            cheapest[key] = best
            note = f"no eligible priced GPU for jobs limited to {sorted(sp.gpu_types) or 'any'}; left out"
            if best is None and note not in notes:
                notes.append(note)
        best = cheapest[key]
        if best is not None:
            total += milli_gpus(sp.total_gpu_milli) * (sp.duration_s or 3600.0) / 3600.0 * best
    return total, notes


def run_whatif(
    trace: Trace,
    change: Change | str,
    *,
    profile: Profile | None = None,
    nodes: Sequence[Node] | None = None,
    options: SimOptions | None = None,
    catalog: PriceCatalog | None = None,
    baseline: SimResult | None = None,
) -> WhatIfResult:
    """Simulate the baseline and the variant with ``change``; report both and the lower bound.

    ``baseline``: a baseline already simulated with the same trace, profile, nodes and options
    (see :func:`simulate_baseline`) to compare several changes against one run."""
    ch = parse_change(change) if isinstance(change, str) else change
    prof = profile or Profile()
    opts = options or SimOptions()
    cat = catalog or PriceCatalog.load()
    shapes = base_shapes(trace, nodes, cat)
    share = _spot_share(trace)
    assumptions = [
        f"baseline: {sum(c for _, c in shapes)} on-demand nodes always on ("
        + ", ".join(f"{c}× {s.gpus}× {s.gpu_model}" for s, c in shapes)
        + ")",
        f"spot interruptions {opts.spot_hazard_per_node_hour:g} per spot node-hour; preemptible share of GPU-seconds "
        f"{share:.1%}",
    ]
    # why the change can save nothing here, if it cannot (shown instead of a bare $0.00)
    why: list[str] = []
    if ch.spot and share == 0:
        why.append("no job is preemptible: spot capacity cannot be used (give the trace preemptible jobs)")
    if ch.gpu_type:
        assumptions.append("gpu-type: durations unchanged (no per-model speed model)")
    floor = on_demand_floor(trace, shapes)
    if ch.spot and not ch.autoscaling and share > 0:
        why.extend(spot_split(shapes, share, floor, cat)[1])
    if ch.sharing and trace.as_run:
        why.append(
            "sharing: the baseline already replays the requests as the cluster ran them (fractions, MIG slices, "
            "time-sliced shares, on each node's own sharing mode): sharing changes nothing"
        )
    b_nodes, b_pools = _cluster_for(shapes, None, share, catalog=cat, as_run=trace.as_run)
    v_nodes, v_pools = _cluster_for(shapes, ch, share, floor, cat, as_run=trace.as_run)
    mig_nodes = any(n.sharing is SharingMode.MIG for n in v_nodes) or any(p.sharing is SharingMode.MIG for p in v_pools)
    b_mig = any(n.sharing is SharingMode.MIG for n in b_nodes)
    if (ch.sharing or trace.as_run) and not mig_nodes and any(tj.spec.gpu.mig_profile for tj in trace.jobs):
        assumptions.append("sharing: no node is in MIG mode; MIG requests run as their fraction of a GPU, time-sliced")
    b_trace, v_trace = _trace_for(trace, None, mig_nodes=b_mig), _trace_for(trace, ch, mig_nodes=mig_nodes)
    b_prof, v_prof = _profile_for(prof, None), _profile_for(prof, ch)
    base = baseline or simulate_world(b_trace, b_prof, b_nodes, b_pools, opts, cat, "baseline")
    var = simulate_world(v_trace, v_prof, v_nodes, v_pools, opts, cat, ch.text)
    # one horizon, the later end; the baseline's figure stays its own run (the same for every
    # change) and what its fixed cluster costs while the variant finishes is kept beside it
    horizon = max(base.makespan, var.makespan)
    b_tail = tail_usd(base, b_nodes, b_pools, cat, horizon, b_prof.autoscaler.idle_ttl_s)
    v_tail = tail_usd(var, v_nodes, v_pools, cat, horizon, v_prof.autoscaler.idle_ttl_s)
    if v_tail:
        assumptions.append(
            f"the variant's work ends before the baseline's: it is billed to the baseline's end "
            f"({horizon / 3600:,.2f} h), always-on nodes the whole way, autoscaled nodes until their idle TTL"
        )
    if b_tail:
        assumptions.append(
            f"the variant's work ends after the baseline's ({horizon / 3600:,.2f} h): the baseline's fixed cluster, "
            f"always on, costs ${b_tail:,.2f} more until then; the savings compare "
            f"${RunFigures.of(base).cost_usd + b_tail:,.2f} with the variant (the baseline shown is its own run)"
        )
    if (
        not why
        and v_nodes == b_nodes
        and v_pools == b_pools
        and [tj.spec for tj in v_trace.jobs] == [tj.spec for tj in b_trace.jobs]
        and not ch.placement
        and not ch.queue
    ):
        why.append(f"{ch.text}: the change leaves this cluster and these jobs as they are, so it cannot save anything")
    assumptions.extend(why)
    recorded = trace.recorded_cost_usd
    if recorded is not None:
        b_usd = RunFigures.of(base).cost_usd
        gap = b_usd / recorded - 1.0 if recorded > 0 else None
        assumptions.append(
            f"recorded ${recorded:,.2f} (the ledger's bill for these nodes from the first job's submit to the last "
            f"run's end), replayed baseline ${b_usd:,.2f}"
            + (
                f" ({gap:+.1%}; a replay as it ran is meant to land within ±{REPLAY_TOLERANCE:.0%})"
                if gap is not None
                else ""
            )
        )
        if gap is not None and abs(gap) > REPLAY_TOLERANCE:
            assumptions.append(
                "the replay differs from the record by more than the tolerance: it starts each job as soon as it fits "
                "(the cluster's own admission, start-up and quota waits are not replayed) and keeps every node of "
                "the span on from the first submit"
            )
    models = sorted({n.gpu_model for n in v_nodes} | {p.gpu_model for p in v_pools} - {""})
    own = {sh.gpu_model: sh.hourly_usd / sh.gpus for sh, _ in shapes if sh.hourly_usd is not None and sh.gpus}
    if own:
        assumptions.append(
            "prices: the cluster's own on-demand prices ("
            + ", ".join(f"{m} ${p:,.3f}/GPU-h" for m, p in sorted(own.items()))
            + "); spot at the catalog's discount for the model"
        )
    lb, notes = lower_bound_usd(v_trace, models, cat, spot=ch.spot, own=None if ch.gpu_type else own)
    return WhatIfResult(
        ch.text,
        trace.name,
        len(trace.jobs),
        opts.seed,
        sum(c for _, c in shapes),
        RunFigures.of(base),
        RunFigures.of(var, v_tail),
        lb,
        tuple(assumptions + notes),
        recorded,
        b_tail,
    )


def simulate_baseline(
    trace: Trace,
    *,
    profile: Profile | None = None,
    nodes: Sequence[Node] | None = None,
    options: SimOptions | None = None,
    catalog: PriceCatalog | None = None,
) -> SimResult:
    """The baseline run of :func:`run_whatif` on its own (fixed on-demand cluster, no sharing)."""
    cat = catalog or PriceCatalog.load()
    b_nodes, b_pools = _cluster_for(base_shapes(trace, nodes, cat), None, 0.0, catalog=cat, as_run=trace.as_run)
    return simulate_world(
        _trace_for(trace, None, mig_nodes=any(n.sharing is SharingMode.MIG for n in b_nodes)),
        _profile_for(profile or Profile(), None),
        b_nodes,
        b_pools,
        options or SimOptions(),
        cat,
        "baseline",
    )
