"""Admission: the checks phase 2 of the cycle runs for each job before it is placed.

An :class:`AdmissionCheck` looks at one job (and its pod request) and returns a :class:`Verdict`:

- admit (``Code.SUCCESS``), possibly with a NARROWED pod request (fewer GPU types, spot only);
- wait (``Code.UNSCHEDULABLE``): the job stays queued this cycle, with the reason;
- reject (``Code.UNRESOLVABLE``): the job can never run as asked; it stays queued with the reason
  (the simulator fails it at the end; the API refuses such a submission up front, see
  :func:`submission_status`).

Checks are registered by name in :data:`ADMISSION_CHECKS`; the cycle runs the ones its
:class:`~gpufleet.scheduling.cycle.CycleConfig` lists, in order (default
``("feasibility", "quota", "budget")``), and stops at the first that does not admit. A check may
also prepare once per cycle (:meth:`AdmissionCheck.start`, before the queue is ordered).

Built-ins:

- ``feasibility``: could the job ever fit one node of the cluster or an empty node of one of its
  autoscaling pools (GPU type, GPU memory, sharing mode, GPU count, CPU, memory, spot), one its node
  selector and required node affinity match, without a taint it does not tolerate? If not it is
  rejected with what is missing. Pure and shared with the submit path (:func:`submission_status`).
- ``quota``: Kueue-style quotas with cohorts (:class:`~gpufleet.scheduling.quota.QuotaPolicy`):
  narrows the GPU types to those the team may use now; when none is left it tries to reclaim
  quota lent to the cohort and waits.
- ``budget``: the :class:`CapacityLimit` s in :attr:`ClusterState.limits` (budget throttles, built by
  ``gpufleet.cost.budgets.capacity_limits``) narrow capacity inside the one cycle: a lower effective
  priority (applied before the queue is ordered, and undone when no limit covers a job any more), a
  cap on the GPUs a scope holds at once (what runs plus what this cycle already admitted), and
  spot-only (the pod is narrowed to spot nodes; jobs that may not run on spot wait).

The scheduling package knows nothing of budgets: a :class:`CapacityLimit` is a neutral description
(who imposes it, which jobs it covers, what it does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpufleet.model.constraints import (
    NO_CONSTRAINTS,
    NodeConstraints,
    NodeSelectorRequirement,
    Taint,
    matches,
    untolerated,
)
from gpufleet.model.gpu import MILLI, canonical_gpu_name, gpu_model
from gpufleet.model.job import Job, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.framework import SUCCESS, Code, PolicyContext, Registry, Status, WaitKind
from gpufleet.scheduling.preemption import WITHIN_TEAM_WAIT, Deferred
from gpufleet.scheduling.quota import NominalReservations, QuotaPolicy
from gpufleet.scheduling.snapshot import CAPACITY_CODE, SHARING_CODE, BoolArray, ClusterSnapshot, PodRequest

if TYPE_CHECKING:
    from gpufleet.scheduling.autoscaler import PoolState
    from gpufleet.scheduling.cycle import Scheduler
    from gpufleet.scheduling.decisions import ClusterState, Decisions

DEFAULT_CHECKS: tuple[str, ...] = ("feasibility", "quota", "budget")


# -- the extension point ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check says about one job.

    ``pod``: a narrowed request the job must be placed with (None: unchanged). Narrowing only ever
    removes options (types, capacity kinds), never adds. ``within_nominal``: per GPU-type index,
    whether the job stays within its team's nominal quota (the quota check sets it; preemption
    reads it to decide whether the job may reclaim)."""

    status: Status = SUCCESS
    pod: PodRequest | None = None
    within_nominal: BoolArray | None = None

    @property
    def ok(self) -> bool:
        return self.status.ok


ADMIT = Verdict()


def wait(reason: str, kind: WaitKind = WaitKind.OTHER) -> Verdict:
    return Verdict(Status(Code.UNSCHEDULABLE, reason, kind))


def reject(reason: str, kind: WaitKind = WaitKind.OTHER) -> Verdict:
    return Verdict(Status(Code.UNRESOLVABLE, reason, kind))


@dataclass(slots=True)
class AdmissionContext:
    """What a check may look at in one cycle: the scheduler (quotas, usage, preemption), the state
    the cycle reads, the time, the decisions so far and the victims chosen (in this cycle, or before
    and still stopping)."""

    scheduler: Scheduler
    state: ClusterState
    now: float
    out: Decisions
    gone: set[str] = field(default_factory=set)
    priorities_changed: bool = False  # a check wrote ``Job.priority`` (orderings that index the queue rebuild)


class AdmissionCheck(Protocol):
    name: str

    def start(self, ctx: AdmissionContext) -> None:
        """Once per cycle, before the queue is ordered (e.g. lower effective priorities)."""
        ...

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        """The verdict for ``job`` whose pod request (possibly narrowed by earlier checks) is ``pod``."""
        ...


AdmissionFactory = Callable[[PolicyContext], AdmissionCheck]
ADMISSION_CHECKS: Registry[AdmissionFactory] = Registry("admission check")


def build_checks(names: Iterable[str], ctx: PolicyContext | None = None) -> list[AdmissionCheck]:
    pctx = ctx or PolicyContext()
    return [ADMISSION_CHECKS.get(n)(pctx) for n in names]


# -- capacity limits (budget throttles, in neutral terms) -----------------------------------------------
@dataclass(frozen=True, slots=True)
class CapacityLimit:
    """A limit on what a scope of jobs may use, in force for one cycle.

    - ``source``: who imposes it, as reasons name it (``"budget 'alpha'"``);
    - ``covers``: which jobs it applies to; ``scope``: how reasons name them (``"team:alpha"``);
    - ``priority``: the effective priority covered jobs drop to (never raised);
    - ``max_gpus``: GPUs the covered jobs may hold at once;
    - ``spot_only``: covered jobs start on spot capacity only (jobs that may not run on spot wait).
    """

    source: str
    covers: Callable[[Job], bool]
    scope: str = ""
    priority: int | None = None
    max_gpus: float | None = None
    spot_only: bool = False

    def cap_reason(self, used: float) -> str:
        cap = self.max_gpus or 0.0
        return f"{self.source} throttles {self.scope} to {cap:g} GPUs at once ({used:g} held by its running jobs)"

    def spot_reason(self) -> str:
        return f"{self.source} allows {self.scope} spot capacity only; this job is not preemptible"


def job_gpus(job: Job) -> float:
    return milli_gpus(job.spec.total_gpu_milli)


def effective_priority(job: Job, limits: Sequence[CapacityLimit]) -> int:
    prio = job.spec.priority
    for lim in limits:
        if lim.priority is not None and lim.covers(job):
            prio = min(prio, lim.priority)
    return prio


# -- feasibility ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shape:
    """One kind of node the cluster has or can get (an existing node or an empty pool node)."""

    gpu_model: str  # canonical; "" for CPU-only
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    sharing: SharingMode
    spot: bool


def node_shape(node: Node) -> Shape:
    model = (canonical_gpu_name(node.gpu_model) or node.gpu_model) if node.gpu_count else ""
    return Shape(
        model, node.gpu_count, node.cpu_milli, node.memory_mib, node.sharing, node.capacity_type is CapacityType.SPOT
    )


def pool_shape(pool: NodePool) -> Shape:
    model = (canonical_gpu_name(pool.gpu_model) or pool.gpu_model) if pool.gpus_per_node else ""
    return Shape(
        model,
        pool.gpus_per_node,
        pool.cpu_milli,
        pool.memory_mib,
        pool.sharing,
        pool.capacity_type is CapacityType.SPOT,
    )


_SHARING_OF_CODE = {v: k for k, v in SHARING_CODE.items()}


def _shape_rows(snap: ClusterSnapshot, rows: slice | np.ndarray) -> np.ndarray:
    """One row per node (``rows`` of the snapshot): the columns a :class:`Shape` is made of."""
    return np.stack(
        [
            snap.gpu_type[rows],
            snap.gpu_count[rows],
            snap.cpu_cap[rows],
            snap.mem_cap[rows],
            snap.sharing[rows],
            snap.capacity_type[rows],
        ],
        axis=1,
    )


def _shapes_of(snap: ClusterSnapshot, rows: np.ndarray) -> list[Shape]:
    out = []
    for t, count, cpu, mem, sharing, cap in rows.tolist():
        model = snap.gpu_types[t] if t >= 0 and count > 0 else ""
        out.append(Shape(model, count, cpu, mem, _SHARING_OF_CODE[sharing], cap == CAPACITY_CODE[CapacityType.SPOT]))
    return out


def snapshot_shapes(snap: ClusterSnapshot, start: int = 0, *, without: Sequence[int] = ()) -> list[Shape]:
    """The distinct shapes of the snapshot's nodes from row ``start`` on (every node it holds,
    schedulable or not yet), leaving out the rows ``without``."""
    n = snap.n
    if n <= start:
        return []
    if without:
        keep = np.ones(n - start, dtype=np.bool_)
        keep[[i - start for i in without if i >= start]] = False
        rows = _shape_rows(snap, np.flatnonzero(keep) + start)
    else:
        rows = _shape_rows(snap, slice(start, n))
    return _shapes_of(snap, np.unique(rows, axis=0)) if len(rows) else []


@dataclass(frozen=True, slots=True)
class Need:
    """What one pod needs of a node, in names (no snapshot indices): the submit path and the cycle
    share it. ``types``: allowed GPU models (empty: any)."""

    gpu_count: int
    gpu_milli: int
    mig_profile: str | None
    types: frozenset[str]
    min_gpu_memory_gib: float
    cpu_milli: int
    memory_mib: int
    allow_spot: bool
    spot_only: bool = False

    @classmethod
    def of_spec(cls, spec: JobSpec, *, on_demand_only: bool = False) -> Need:
        return cls(
            spec.gpu.count,
            spec.gpu.milli,
            spec.gpu.mig_profile,
            frozenset(canonical_gpu_name(t) or t for t in spec.gpu_types),
            spec.min_gpu_memory_gib,
            spec.cpu_milli,
            spec.memory_mib,
            spec.preemptible and not on_demand_only,
        )


def _most(values: Iterable[float]) -> str:
    v = max(values, default=0)
    return f"{v:g}"


def _narrow(need: Need, shapes: Sequence[Shape]) -> tuple[list[Shape], tuple[str, str] | None]:
    """The shapes that could hold one pod of ``need`` and None, or ``[]`` and why none could
    (:func:`infeasibility`). Every filter is a test of one shape: a shape fits whatever others exist."""
    if not shapes:
        return [], ("the cluster has no node and no autoscaling pool", "gpus")
    cands = list(shapes)
    if need.gpu_count:
        cands = [s for s in cands if s.gpu_count > 0 and s.gpu_model]
        if not cands:
            return [], ("no node or pool has GPUs", "gpus")
        if need.types:
            typed = [s for s in cands if s.gpu_model in need.types]
            if not typed:
                have = sorted({s.gpu_model for s in cands})
                want = ", ".join(sorted(t for t in need.types if t)) or "none"
                return [], (f"no node or pool has GPU type {want} (the cluster has: {', '.join(have)})", "gpu_types")
            cands = typed
        if need.min_gpu_memory_gib > 0:
            roomy = [s for s in cands if (gpu_model(s.gpu_model).memory_gib or 0) >= need.min_gpu_memory_gib]
            if not roomy:
                most = _most(gpu_model(s.gpu_model).memory_gib for s in cands)
                return [], (
                    f"no node or pool has GPUs with {need.min_gpu_memory_gib:g} GiB of memory (largest: {most} GiB)",
                    "min_gpu_memory_gib",
                )
            cands = roomy
        if need.mig_profile is not None:
            prof = need.mig_profile
            mig = [s for s in cands if s.sharing is SharingMode.MIG and gpu_model(s.gpu_model).mig_profile(prof)]
            if not mig:
                return [], (f"no node or pool offers MIG slices '{prof}' (no MIG-mode node with that profile)", "mig")
            cands = mig
        elif need.gpu_milli < MILLI:
            shared = [s for s in cands if s.sharing is SharingMode.SHARED]
            if not shared:
                return [], ("no node or pool shares GPUs, so a fraction of a GPU cannot run", "gpu_milli")
            cands = shared
        else:
            whole = [s for s in cands if s.sharing is not SharingMode.MIG]
            if not whole:
                return [], ("every node and pool with such GPUs is in MIG mode (no whole GPUs)", "gpus")
            cands = whole
            big = [s for s in cands if s.gpu_count >= need.gpu_count]
            if not big:
                most = _most(s.gpu_count for s in cands)
                return [], (f"no node or pool has {need.gpu_count} GPUs (most: {most})", "gpus")
            cands = big
    if need.cpu_milli:
        cpu = [s for s in cands if s.cpu_milli >= need.cpu_milli]
        if not cpu:
            most = _most(s.cpu_milli for s in cands)
            return [], (
                f"no node or pool that fits the GPUs has {need.cpu_milli} milli-CPU (most: {most})",
                "cpu_milli",
            )
        cands = cpu
    if need.memory_mib:
        mem = [s for s in cands if s.memory_mib >= need.memory_mib]
        if not mem:
            most = _most(s.memory_mib for s in cands)
            return [], (
                f"no node or pool that fits the job has {need.memory_mib} MiB of memory (most: {most})",
                "memory_mib",
            )
        cands = mem
    if need.spot_only:
        spot = [s for s in cands if s.spot]
        if not spot:
            return [], (
                "no spot node or pool could ever fit the job, and it may run on spot capacity only",
                "preemptible",
            )
        return spot, None
    if not need.allow_spot:
        steady = [s for s in cands if not s.spot]
        if not steady:
            return [], (
                "only spot nodes or pools could fit the job, and it may not run on spot capacity",
                "preemptible",
            )
        return steady, None
    return cands, None


def infeasibility(need: Need, shapes: Sequence[Shape]) -> tuple[str, str] | None:
    """Why no shape could ever hold one pod of ``need`` — ``(reason, field)`` naming the job field
    at fault — or None when at least one could. Filters in a fixed order (GPU type, GPU memory,
    sharing mode, GPU count, CPU, memory, spot) and names the first requirement nothing meets.
    Resources only: :func:`constrained_infeasibility` adds a job's node constraints and taints."""
    return _narrow(need, shapes)[1]


# -- node constraints ---------------------------------------------------------------------------------
# The submission fields a constraint problem names (the PodSpec's, under Submission.constraints).
SELECTOR_FIELD = "constraints.nodeSelector"
AFFINITY_FIELD = "constraints.affinity"
TOLERATIONS_FIELD = "constraints.tolerations"
_NO_LABELS: Mapping[str, str] = MappingProxyType({})
_TAINTS_SHOWN = 5  # a reason lists at most this many of the taints that keep a job off


@dataclass(frozen=True, slots=True)
class Place:
    """A node, or the node an autoscaling pool would make, as a job's node constraints see it: what
    it holds (``shape``) and where it is (labels, name, taints).

    ``name``: a node's (what a ``matchFields`` requirement reads); "" for a pool, whose nodes are not
    named before they exist (a job pinned to a node by name never grows a pool). A place for jobs that
    select no node (:attr:`NodeConstraints.selects` false) may leave out the labels: such places are
    deduplicated by shape and taints, so a cluster without taints costs one place per shape."""

    shape: Shape
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    taints: tuple[Taint, ...] = ()
    name: str = ""


def node_place(node: Node) -> Place:
    return Place(node_shape(node), node.labels, node.taints, node.name)


def pool_place(pool: NodePool) -> Place:
    """The place of a node ``pool`` would make (:meth:`NodePool.make_node`: the pool's labels and
    taints; its name is not known yet)."""
    return Place(pool_shape(pool), pool.labels, pool.taints)


def places_of(nodes: Iterable[Node], pools: Iterable[NodePool] = (), *, each: bool = True) -> list[Place]:
    """``nodes`` and ``pools`` as places: every node on its own (``each``: for a job that selects
    nodes), else one place per distinct shape and taints (labels and names left out)."""
    if each:
        out = [node_place(n) for n in nodes]
    else:
        out = [Place(shape, taints=taints) for shape, taints in dict.fromkeys((node_shape(n), n.taints) for n in nodes)]
    return out + [pool_place(p) for p in pools]


def _selector_text(selector: Sequence[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in selector) + "}"


def _requirement_text(r: NodeSelectorRequirement) -> str:
    return f"{r.key} {r.operator}" + (f" [{', '.join(r.values)}]" if r.values else "")


def _affinity_text(c: NodeConstraints) -> str:
    terms = [
        " and ".join(_requirement_text(r) for r in (*t.match_expressions, *t.match_fields)) or "(an empty term)"
        for t in c.required_terms
    ]
    return "(" + " or ".join(terms) + ")"


def constrained_infeasibility(
    need: Need, places: Sequence[Place], constraints: NodeConstraints = NO_CONSTRAINTS
) -> tuple[str, str] | None:
    """:func:`infeasibility` with the job's node constraints: why no place could ever hold one pod of
    ``need`` — ``(reason, field)`` — or None when some place fits ``need``, matches the job's node
    selector and required node affinity, and has no NoSchedule/NoExecute taint its tolerations do not
    tolerate (the rules placement applies, :mod:`gpufleet.model.constraints`). In order, so the first
    thing to change is named: the resources over every place (:func:`infeasibility`'s reasons and
    fields, constraints or not); the node selector (:data:`SELECTOR_FIELD`), then the required node
    affinity (:data:`AFFINITY_FIELD`), when no place matches it; the resources among the places that
    match; the taints of the places that fit and match (:data:`TOLERATIONS_FIELD`: a job without
    tolerations tolerates no taint)."""
    fit, why = _narrow(need, list(dict.fromkeys(p.shape for p in places)))
    if why is not None:
        return why
    fits = set(fit)
    cands = list(places)
    what = ""  # how reasons name the places the job's selector and affinity leave
    fld = TOLERATIONS_FIELD
    if constraints.node_selector:
        selector = NodeConstraints(node_selector=constraints.node_selector)
        cands = [p for p in cands if matches(selector, p.labels, p.name)]
        shown = _selector_text(constraints.node_selector)
        if not cands:
            return f"no node or pool matches the job's node selector {shown}", SELECTOR_FIELD
        what, fld = f"matches the job's node selector {shown}", SELECTOR_FIELD
    if constraints.required_terms:
        affinity = NodeConstraints(required_terms=constraints.required_terms)
        cands = [p for p in cands if matches(affinity, p.labels, p.name)]
        shown = _affinity_text(constraints)
        if not cands:
            which = f"no node or pool that {what}" if what else "no node or pool"
            return f"{which} meets the job's required node affinity {shown}", AFFINITY_FIELD
        what = (
            f"{what} and meets its required node affinity {shown}"
            if what
            else f"meets the job's required node affinity {shown}"
        )
        fld = AFFINITY_FIELD
    fitting = [p for p in cands if p.shape in fits]
    if not fitting:
        inner = _narrow(need, list(dict.fromkeys(p.shape for p in cands)))[1]
        detail = f" ({inner[0]})" if inner is not None else ""
        return f"no node or pool that {what} could ever hold the job{detail}", fld
    kept: set[str] = set()
    for p in fitting:
        taint = untolerated(constraints.tolerations, p.taints)
        if taint is None:
            return None
        kept.add(str(taint))
    shown_taints = sorted(kept)
    more = len(shown_taints) - _TAINTS_SHOWN
    listed = ", ".join(shown_taints[:_TAINTS_SHOWN]) + (f" and {more} more" if more > 0 else "")
    where = f"every node and pool that fits the job and {what}" if what else "every node and pool that fits the job"
    return f"{where} has a taint it does not tolerate ({listed})", TOLERATIONS_FIELD


def fit_problem(
    need: Need, constraints: NodeConstraints, nodes: Sequence[Node], pools: Sequence[NodePool] = ()
) -> tuple[str, str] | None:
    """Why no node of ``nodes`` and no empty node of ``pools`` could ever hold one pod of ``need``
    with ``constraints`` — ``(reason, field)`` — or None. Shapes only while neither the job nor any
    node or pool says where it may run (the common case: no place is built)."""
    if constraints or any(n.taints for n in nodes) or any(p.taints for p in pools):
        return constrained_infeasibility(need, places_of(nodes, pools, each=constraints.selects), constraints)
    return infeasibility(need, [*(node_shape(n) for n in nodes), *(pool_shape(p) for p in pools)])


def submission_status(spec: JobSpec, nodes: Sequence[Node], pools: Sequence[NodePool] = ()) -> Status:
    """Could a job of ``spec`` ever run on one of ``nodes`` or an empty node of one of ``pools``
    (its resources, node constraints and the taints it tolerates)? ``SUCCESS``, or ``UNRESOLVABLE``
    with what is missing. The API's submit path and the simulator's submit event apply the same
    rules (:func:`fit_problem`); so does the cycle's ``feasibility`` check."""
    why = fit_problem(Need.of_spec(spec), spec.constraints, nodes, pools)
    return SUCCESS if why is None else Status(Code.UNRESOLVABLE, why[0])


def snapshot_places(snap: ClusterSnapshot, *, each: bool) -> list[Place]:
    """The snapshot's nodes as places (:func:`places_of`'s rules; every node it holds, schedulable
    or not yet): each node on its own with its labels, name and taints, or the distinct shapes of
    the untainted nodes plus one place per distinct shape and taints of the tainted ones."""
    n = snap.n
    if each:
        shapes = _shapes_of(snap, _shape_rows(snap, slice(0, n))) if n else []
        return [Place(shapes[i], snap.node_labels[i], snap.node_taints[i], snap.names[i]) for i in range(n)]
    tainted = snap.tainted
    out = [Place(s) for s in snapshot_shapes(snap, without=tainted)]
    if tainted:
        rows = np.array(tainted, dtype=np.int64)
        shapes = _shapes_of(snap, _shape_rows(snap, rows))
        kinds = dict.fromkeys((s, snap.node_taints[i]) for i, s in zip(tainted, shapes, strict=True))
        out += [Place(shape, taints=taints) for shape, taints in kinds]
    return out


# -- built-in checks -------------------------------------------------------------------------------------
@ADMISSION_CHECKS.register("feasibility")
class FeasibilityCheck:
    """Rejects jobs no node or pool of the cluster could ever hold (verdicts cached per pod shape
    while the node set and the pools stay the same).

    A job without constraints on a cluster without taints (the common case) is judged by the
    distinct shapes alone; a job with constraints, or any job once a node or pool is tainted, by
    places (:func:`constrained_infeasibility`), its verdict cached per pod shape and constraints
    until the snapshot's version or the pools change."""

    name = "feasibility"

    def __init__(self, ctx: PolicyContext | None = None) -> None:
        self._snap: ClusterSnapshot | None = None
        self._rows = 0  # rows of the snapshot read: nodes are only ever appended
        self._node_shapes: set[Shape] = set()
        self._pools: tuple[int, ...] = ()
        self._shapes: list[Shape] = []
        self._cache: dict[tuple[object, ...], Verdict] = {}
        self._stale = True
        self._tainted = False  # some node or pool has a taint: every job is judged by places
        self._placed_at: tuple[int, int, tuple[int, ...]] | None = None  # (snapshot, its version, pools)
        self._places: dict[bool, list[Place]] = {}  # by "each node on its own" (a job that selects)
        self._placed: dict[tuple[object, ...], Verdict] = {}
        self._pool_states: Sequence[PoolState] = ()

    def start(self, ctx: AdmissionContext) -> None:
        self._stale = True  # look at new nodes and pools on the first admit of the cycle

    def _refresh(self, snap: ClusterSnapshot, pools: Sequence[PoolState]) -> None:
        self._stale = False
        changed = False
        if self._snap is not snap or self._rows > snap.n:
            self._node_shapes, self._snap, self._rows, changed = set(), snap, 0, True
        if self._rows < snap.n:
            before = len(self._node_shapes)
            self._node_shapes.update(snapshot_shapes(snap, self._rows))
            self._rows = snap.n
            changed = changed or len(self._node_shapes) != before
        pool_ids = tuple(id(ps.pool) for ps in pools)
        if pool_ids != self._pools:
            self._pools, changed = pool_ids, True
        if changed:
            self._shapes = [*sorted(self._node_shapes, key=repr), *(pool_shape(ps.pool) for ps in pools)]
            self._cache = {}
        self._tainted = bool(snap.tainted) or any(ps.pool.taints for ps in pools)
        placed_at = (id(snap), snap.version, pool_ids)
        if placed_at != self._placed_at:  # labels and taints may have changed: places are built again
            self._placed_at, self._places, self._placed = placed_at, {}, {}
        self._pool_states = pools

    def _place_list(self, snap: ClusterSnapshot, each: bool) -> list[Place]:
        hit = self._places.get(each)
        if hit is None:
            hit = self._places[each] = [
                *snapshot_places(snap, each=each),
                *(pool_place(ps.pool) for ps in self._pool_states),
            ]
        return hit

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        # by the spec's names (a pool may bring a GPU type the snapshot has no index for yet); the
        # pod's spot rules may be narrower than the spec's (on-demand only after spot restarts)
        spec = job.spec
        if self._stale:
            self._refresh(ctx.state.snapshot, ctx.state.pools)
        key: tuple[object, ...] = (spec.gpu_types, pod.gpu, pod.cpu_milli, pod.memory_mib, pod.min_gpu_memory_gib)
        key += (pod.allow_spot, pod.spot_only)
        constraints = pod.constraints
        if constraints is None and not self._tainted:
            hit = self._cache.get(key)
            if hit is None:
                need = dataclasses.replace(Need.of_spec(spec), allow_spot=pod.allow_spot, spot_only=pod.spot_only)
                why = infeasibility(need, self._shapes)
                hit = self._cache[key] = ADMIT if why is None else reject(why[0], WaitKind.CAPACITY)
            return hit
        key += (constraints,)
        hit = self._placed.get(key)
        if hit is None:
            need = dataclasses.replace(Need.of_spec(spec), allow_spot=pod.allow_spot, spot_only=pod.spot_only)
            c = constraints or NO_CONSTRAINTS
            why = constrained_infeasibility(need, self._place_list(ctx.state.snapshot, c.selects), c)
            hit = self._placed[key] = ADMIT if why is None else reject(why[0], WaitKind.CAPACITY)
        return hit


def _above_nominal(job: Job, pod: PodRequest, gpu_types: Sequence[str], quotas: QuotaPolicy) -> str | None:
    """Why a job that is not preemptible can never be admitted by its team's quota: it asks more
    than the team's nominal quota of every GPU type it may use, and only a preemptible job may go
    beyond it (borrow); else None."""
    q = quotas.quotas.get(job.team)
    usable = [t for i, t in enumerate(gpu_types) if i < len(pod.type_ok) and pod.type_ok[i]]
    demand = job.spec.total_gpu_milli
    if q is None or not usable or any(demand <= (q.nominal_for(t) or 0) for t in usable):
        return None
    most = max(q.nominal_for(t) or 0 for t in usable)
    asks = f"quota: asks {milli_gpus(demand):g} GPUs, more than team {job.team}'s nominal quota ({milli_gpus(most):g})"
    if q.cohort:
        return (
            f"{asks}, and a job that is not preemptible may not borrow from cohort '{q.cohort}' (mark it preemptible)"
        )
    return asks


@ADMISSION_CHECKS.register("quota")
class QuotaCheck:
    """Quota admission (Kueue semantics): the GPU types the team may use now — a job that is not
    preemptible only within its team's nominal quota, a preemptible one not into room of the cohort
    kept for another member's pending nominal work (:class:`~gpufleet.scheduling.quota.NominalReservations`);
    none left → reclaim quota lent to the cohort (preempting borrowers), else preempt the team's own
    lower-priority preemptible jobs, and wait."""

    name = "quota"

    def __init__(self, ctx: PolicyContext | None = None) -> None:
        self._kept: NominalReservations | None = None  # made on the cycle's first borrowing
        self._placed: set[str] = set()  # jobs placed in this cycle (seen so far)
        # this cycle's answers by what they depend on (see admit), each with the state it was given in
        self._seen: dict[tuple[object, ...], tuple[tuple[int, ...], Verdict]] = {}

    def start(self, ctx: AdmissionContext) -> None:
        self._kept = None
        self._placed = set()
        self._seen = {}

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        """The answer for ``job`` depends on its team, its demand, whether it is preemptible, its
        priority, its gang size and the GPU types its pod may use — and on the cycle's state: what
        teams hold, the victims and placements chosen so far. A job like one answered before in the
        cycle, with nothing chosen since, gets that answer again (a long queue held by its quota
        asks thousands of times per cycle; each answer scans the cohort's running jobs) — unless
        it is itself a victim of an earlier preemption (the preemption graph then tells jobs apart)."""
        sched = ctx.scheduler
        if not sched.quotas or not job.spec.gpu.count:
            return ADMIT
        key: tuple[object, ...] | None = None
        state = (sched.usage.version, len(ctx.gone), len(ctx.out.placements), len(ctx.out.preemptions))
        if not sched.graph.is_victim(job.id):
            spec = job.spec
            key = (job.team, spec.total_gpu_milli, spec.preemptible, job.priority, spec.gang_size)
            key += (pod.type_ok.tobytes(),)
            seen = self._seen.get(key)
            if seen is not None and seen[0] == state:
                verdict = seen[1]
                if verdict.pod is not None:  # narrowed: the same types, on this job's pod
                    verdict = dataclasses.replace(verdict, pod=dataclasses.replace(pod, type_ok=verdict.pod.type_ok))
                return verdict
        verdict = self._admit(job, pod, ctx)
        if key is not None:
            self._seen[key] = (state, verdict)
        return verdict

    def _admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        sched = ctx.scheduler
        snap = ctx.state.snapshot
        preemptible = job.spec.preemptible
        verdict = sched.quotas.admit(
            job.team, job.spec.total_gpu_milli, snap.gpu_types, sched.usage, may_borrow=preemptible
        )
        type_ok = pod.type_ok & verdict.type_ok[: len(pod.type_ok)]
        reason = verdict.reason
        borrowing = type_ok & ~verdict.within_nominal[: len(type_ok)]
        if borrowing.any() and sched.config.preemption:
            type_ok, why = self._not_into_kept(job, type_ok, borrowing, ctx)
            reason = why or reason
        if not type_ok.any() and not preemptible:
            never = _above_nominal(job, pod, snap.gpu_types, sched.quotas)
            if never is not None:
                return Verdict(Status(Code.UNRESOLVABLE, never, WaitKind.QUOTA), within_nominal=verdict.within_nominal)
        if not type_ok.any():
            args = (snap, job, pod)
            status = sched.try_reclaim(*args, verdict.within_nominal, ctx.state.running, ctx.gone, ctx.out, ctx.now)
            kind = WaitKind.QUOTA
            if status.ok:
                reason = "reclaiming quota lent to the cohort"
            elif isinstance(status, Deferred):
                reason = status.reason
            else:
                own = sched.try_within_team(*args, ctx.state.running, ctx.gone, ctx.out, ctx.now)
                if own.ok or isinstance(own, Deferred):
                    reason, kind = (WITHIN_TEAM_WAIT if own.ok else own.reason), WaitKind.PREEMPTION
            return Verdict(Status(Code.UNSCHEDULABLE, reason, kind), within_nominal=verdict.within_nominal)
        narrowed = None if np.array_equal(type_ok, pod.type_ok) else dataclasses.replace(pod, type_ok=type_ok)
        return Verdict(SUCCESS, narrowed, verdict.within_nominal)

    def _not_into_kept(
        self, job: Job, type_ok: np.ndarray, borrowing: np.ndarray, ctx: AdmissionContext
    ) -> tuple[np.ndarray, str]:
        """``type_ok`` less the types the job would borrow into room its cohort keeps for other
        members' pending nominal work, and why when none is left."""
        sched = ctx.scheduler
        snap = ctx.state.snapshot
        if self._kept is None:
            self._kept = NominalReservations(sched.quotas, sched.usage, snap.gpu_types, ctx.state.pending)
        placements = ctx.out.placements
        if len(self._placed) < len(placements):
            self._placed.update(p.job.id for p in placements)
        type_ok = type_ok.copy()
        whys = []
        demand = job.spec.total_gpu_milli
        for i in np.flatnonzero(borrowing):
            t = snap.gpu_types[i]
            kept, members = self._kept.kept(job.team, t, self._placed)
            if kept and sched.quotas.cohort_unused(job.team, t, sched.usage) - kept < demand:
                type_ok[i] = False
                whys.append(f"{t}: {milli_gpus(kept):g} GPUs kept for pending jobs of {', '.join(members)}")
        why = ""
        if whys and not type_ok.any():
            why = (
                "quota: may not borrow what the cohort keeps for other teams' pending jobs within their "
                f"nominal quota (they would reclaim it at once): {'; '.join(whys)}"
            )
        return type_ok, why


@ADMISSION_CHECKS.register("budget")
class BudgetCheck:
    """The :class:`CapacityLimit` s of :attr:`ClusterState.limits`, applied inside the cycle.

    - priority: before the queue is ordered, every queued and running job's effective priority
      (``Job.priority``, which ordering and preemption read) is its spec's priority lowered by the
      limits covering it; once no limit is in force any more, every job gets its spec's back;
    - max_gpus: a covered job waits when admitting it would take the scope past the cap, counting
      the GPUs its running jobs hold plus those of the jobs this cycle already admitted;
    - spot_only: a covered job that may run on spot is narrowed to spot nodes; others wait.
    """

    name = "budget"

    def __init__(self, ctx: PolicyContext | None = None) -> None:
        self._limits: Sequence[CapacityLimit] = ()
        self._used: list[float] = []  # per limit: GPUs held by covered running jobs at the cycle start
        self._admitted: list[float] = []  # per limit: GPUs of covered jobs admitted in this cycle
        self._lowered = False  # a previous cycle had limits in force (priorities may be lowered)

    def restore_next(self) -> None:
        """Give every job its spec's priority back at the next cycle (even if this check did not
        lower it), flagging those that change for the orderings."""
        self._lowered = True

    def start(self, ctx: AdmissionContext) -> None:
        limits = ctx.state.limits
        self._limits = limits
        if not limits and not self._lowered:
            return
        running = [rj.job for rj in ctx.state.running.values()]
        for job in (*ctx.state.pending, *running):
            prio = effective_priority(job, limits)
            if job.priority != prio:
                job.priority = prio
                ctx.priorities_changed = True
        self._lowered = bool(limits)
        self._used = [
            sum(job_gpus(j) for j in running if lim.covers(j)) if lim.max_gpus is not None else 0.0 for lim in limits
        ]
        self._admitted = [0.0] * len(limits)

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        if not self._limits:
            return ADMIT
        mine = [i for i, lim in enumerate(self._limits) if lim.covers(job)]
        if not mine:
            return ADMIT
        need = job_gpus(job)
        spot = False
        for i in mine:
            lim = self._limits[i]
            if lim.max_gpus is not None and need > lim.max_gpus - self._used[i] - self._admitted[i] + 1e-9:
                return wait(lim.cap_reason(self._used[i]), WaitKind.BUDGET)
            if lim.spot_only:
                if not pod.allow_spot:
                    return wait(lim.spot_reason(), WaitKind.BUDGET)
                spot = True
        for i in mine:
            self._admitted[i] += need
        if spot and not pod.spot_only:
            return Verdict(SUCCESS, dataclasses.replace(pod, spot_only=True))
        return ADMIT
