"""The usage ledger and cost attribution.

The ledger holds two append-only kinds of record:

- :class:`NodeInterval` — a node existed from ``start`` to ``end`` at ``hourly_usd``: what the
  nodes cost. A price change is a new interval.
- :class:`UsageSegment` — a job held ``gpu_share`` GPUs, ``cpu_milli`` and ``memory_mib`` of one
  node from ``start`` to ``end``. The caller records what the job *holds* (``max(request, usage)``
  per resource, see DESIGN "The rules for money").

Every segment lies inside one interval of its node (record the node first). Running jobs and
nodes are *open*: :meth:`Ledger.open` / :meth:`Ledger.close` and :meth:`Ledger.open_node` /
:meth:`Ledger.close_node`; queries take ``as_of=t`` and treat what is open as ending at ``t``.

All money is computed from these records by :func:`allocate`, never kept as a running total.

Units and exactness. Times are seconds (floats) and are metered in whole microseconds (rounded).
GPU shares are kept in units of 1/7000 GPU, which holds whole GPUs, MIG slices (k/7) and
milli-GPU fractions (m/1000) exactly. Prices are read as the decimals they print as
(``Fraction(repr(x))``). Costs are exact fractions until the end, then rounded to cents with the
largest-remainder method, so the rounded lines add up exactly to the rounded node cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType

from gpufleet.errors import InputError
from gpufleet.model.gpu import MIG_COMPUTE_SLICES, MILLI, gpu_model
from gpufleet.model.job import GpuRequest, Job, PodPlacement
from gpufleet.model.node import CapacityType, Node

SHARE_UNITS = MIG_COMPUTE_SLICES * MILLI  # 7000 share units = one GPU
US_PER_S = 1_000_000
US_PER_HOUR = 3600 * US_PER_S
MIB_PER_GIB = 1024

IDLE_KEY = "__idle__"

# Fields a ledger can be aggregated by, besides "label:<key>".
AGGREGATE_FIELDS: tuple[str, ...] = (
    "job_id",
    "team",
    "project",
    "namespace",
    "experiment",
    "node",
    "pool",
    "gpu_model",
    "capacity_type",
    "priority_class",
)


class LedgerError(InputError):
    """A usage record that contradicts the ledger (bad times, shares, or an unknown node)."""

    code = "invalid_ledger_record"


def _exact(value: Fraction | Decimal | float | int | str, name: str) -> Fraction:
    """A price as the exact decimal it prints as (floats via ``repr``)."""
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            return Fraction(repr(value))
        return Fraction(value)
    except (ValueError, TypeError):
        raise InputError(f"not a finite number: {value!r}", field=name) from None


# -- the one pricing function ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnitPrices:
    """CPU and memory unit prices used to split a node's price.

    Defaults are OpenCost's ``configs/default.json`` ("Default prices based on GCP us-central1"):
    CPU 0.031611 $/vCPU-hour, RAM 0.004237 $/GiB-hour, spotCPU 0.006655, spotRAM 0.000892
    (https://github.com/opencost/opencost/blob/develop/configs/default.json, shown on
    https://www.opencost.io/docs/configuration/on-prem). Spot nodes use the spot rates; reserved
    nodes the on-demand ones.
    """

    cpu_usd_per_vcpu_hour: Fraction = Fraction("0.031611")
    memory_usd_per_gib_hour: Fraction = Fraction("0.004237")
    spot_cpu_usd_per_vcpu_hour: Fraction = Fraction("0.006655")
    spot_memory_usd_per_gib_hour: Fraction = Fraction("0.000892")

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            object.__setattr__(self, name, _exact(value, name))
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {value}", field=name)

    def for_capacity(self, capacity_type: CapacityType) -> tuple[Fraction, Fraction]:
        if capacity_type is CapacityType.SPOT:
            return self.spot_cpu_usd_per_vcpu_hour, self.spot_memory_usd_per_gib_hour
        return self.cpu_usd_per_vcpu_hour, self.memory_usd_per_gib_hour


DEFAULT_UNIT_PRICES = UnitPrices()


@dataclass(frozen=True, slots=True)
class PriceSplit:
    """A node's hourly price split into unit prices (exact).

    Invariant: ``usd_per_gpu_hour * gpus + usd_per_vcpu_hour * vcpus + usd_per_gib_hour * gib``
    equals the node's hourly price exactly.
    """

    usd_per_gpu_hour: Fraction
    usd_per_vcpu_hour: Fraction
    usd_per_gib_hour: Fraction


def split_node_price(
    hourly_usd: Fraction | float | int | str,
    *,
    gpu_count: int,
    cpu_milli: int,
    memory_mib: int,
    capacity_type: CapacityType = CapacityType.ON_DEMAND,
    unit_prices: UnitPrices = DEFAULT_UNIT_PRICES,
) -> PriceSplit:
    """THE pricing rule: split a node's hourly price over its GPUs, CPU and memory.

    - A GPU node: CPU and memory at ``unit_prices``, scaled down together if they would exceed the
      node's price (so they never do); the remainder split evenly over the node's GPUs.
    - A CPU-only node: the whole price split over CPU and memory in proportion to their unit-price
      value (if both unit prices are zero: over whichever of CPU or memory the node has, CPU first).
    - A node with no GPUs, CPU or memory cannot be priced: :class:`LedgerError`.
    """
    price = _exact(hourly_usd, "hourly_usd")
    if price < 0:
        raise LedgerError(f"a node's price must be >= 0, got {hourly_usd}", field="hourly_usd")
    vcpus = Fraction(cpu_milli, MILLI)
    gib = Fraction(memory_mib, MIB_PER_GIB)
    cpu_rate, mem_rate = unit_prices.for_capacity(capacity_type)
    host = cpu_rate * vcpus + mem_rate * gib  # $/hour of CPU and memory at unit prices
    if gpu_count > 0:
        scale = min(Fraction(1), price / host) if host > 0 else Fraction(1)
        per_gpu = (price - host * scale) / gpu_count
        return PriceSplit(per_gpu, cpu_rate * scale, mem_rate * scale)
    if host > 0:
        scale = price / host
        return PriceSplit(Fraction(0), cpu_rate * scale, mem_rate * scale)
    if vcpus > 0:
        return PriceSplit(Fraction(0), price / vcpus, Fraction(0))
    if gib > 0:
        return PriceSplit(Fraction(0), Fraction(0), price / gib)
    raise LedgerError("a node with no GPUs, CPU or memory cannot be priced", field="gpu_count")


# -- records --------------------------------------------------------------------------------------


def gpu_share(request: GpuRequest, gpu_model_name: str) -> Fraction:
    """GPU-equivalents one pod with ``request`` holds on a node of ``gpu_model_name``.

    Whole GPUs: the count; a MIG slice: its compute slices / 7 (1g.10gb on an A100-80GB = 1/7);
    a time-sliced/MPS fraction: milli / 1000.
    """
    if request.mig_profile is not None:
        profile = gpu_model(gpu_model_name).mig_profile(request.mig_profile)
        if profile is None:
            raise LedgerError(
                f"{gpu_model_name or 'this node'} has no MIG profile '{request.mig_profile}'", field="mig"
            )
        return Fraction(profile.compute_slices, MIG_COMPUTE_SLICES) * request.count
    return Fraction(request.count * request.milli, MILLI)


@dataclass(frozen=True, slots=True)
class NodeInterval:
    """A node existed (and cost ``hourly_usd``) from ``start`` to ``end`` seconds."""

    node: str
    pool: str
    gpu_model: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    capacity_type: CapacityType
    hourly_usd: float
    start: float
    end: float
    # The exact price when it is not a decimal a float prints as (set by pricing rules, e.g. a
    # multiplier or an amortised on-prem price); ``hourly_usd`` is then its float approximation.
    exact_hourly_usd: Fraction | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_node(
            self.node, self.gpu_model, self.gpu_count, self.cpu_milli, self.memory_mib, self.hourly_usd, self.start
        )
        _check_times(self.start, self.end, f"node {self.node}")


@dataclass(frozen=True, slots=True)
class UsageSegment:
    """A job held resources of one node from ``start`` to ``end`` seconds.

    ``gpu_share`` is in GPU-equivalents (see :func:`gpu_share`); ``node_hourly_usd`` is the whole
    node's price per hour at the time, as on the node's interval.
    """

    job_id: str
    team: str
    project: str
    namespace: str
    experiment: str
    labels: Mapping[str, str]
    node: str
    pool: str
    gpu_model: str
    capacity_type: CapacityType
    gpu_share: Fraction
    cpu_milli: int
    memory_mib: int
    node_hourly_usd: float
    start: float
    end: float
    priority_class: str = "normal"  # the job's class; pricing rules may apply a chargeback multiplier

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        share = self.gpu_share
        if not isinstance(share, Fraction) or SHARE_UNITS % share.denominator:
            object.__setattr__(self, "gpu_share", Fraction(_share_units(share), SHARE_UNITS))
        elif share < 0:
            raise LedgerError(f"gpu_share must be >= 0, got {share}", field="gpu_share")
        _check_times(self.start, self.end, f"job {self.job_id}")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise LedgerError(f"job {self.job_id}: cpu_milli and memory_mib must be >= 0", field="cpu_milli")

    def __hash__(self) -> int:  # labels are a read-only mapping; hash on the rest
        return hash((self.job_id, self.node, self.start, self.end, self.gpu_share))

    @property
    def gpu_seconds(self) -> float:
        """GPU-share-seconds held."""
        return float(self.gpu_share) * (self.end - self.start)


@dataclass(frozen=True, slots=True)
class SegmentHandle:
    """An open segment (a running job on a node). Close it with :meth:`Ledger.close`."""

    id: int


@dataclass(slots=True)
class _Open:
    job_id: str
    team: str
    project: str
    namespace: str
    experiment: str
    labels: dict[str, str]
    interval: int
    share_units: int
    cpu_milli: int
    memory_mib: int
    start: float
    priority_class: str = "normal"


@dataclass(slots=True)
class _Interval:
    node: str
    pool: str
    gpu_model: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    capacity_type: CapacityType
    hourly_usd: float
    start: float
    end: float | None  # None: open
    start_us: int
    end_us: int | None
    max_segment_end: float  # latest end of a segment inside it (closing may not cut one)
    exact_price: Fraction | None = None  # see NodeInterval.exact_hourly_usd

    def covers(self, start: float, end: float | None) -> bool:
        if start < self.start:
            return False
        if self.end is None:
            return True
        return start <= self.end and (end is None or end <= self.end)

    def record(self, end: float | None) -> NodeInterval:
        """This interval as a record; ``end`` ends it if it is open."""
        stop = self.end if end is None else end
        assert stop is not None
        return NodeInterval(
            self.node,
            self.pool,
            self.gpu_model,
            self.gpu_count,
            self.cpu_milli,
            self.memory_mib,
            self.capacity_type,
            self.hourly_usd,
            self.start,
            stop,
            self.exact_price,
        )


class Ledger:
    """Append-only record of node lifetimes and usage segments (one per world; not thread-safe)."""

    def __init__(self) -> None:
        self._intervals: list[_Interval] = []
        self._by_node: dict[str, list[int]] = {}
        self._open_node: dict[str, int] = {}
        self._segments: list[UsageSegment] = []
        # Columns of the closed segments, kept for allocate() (parallel to _segments).
        self._seg_interval: list[int] = []
        self._seg_start_us: list[int] = []
        self._seg_end_us: list[int] = []
        self._seg_units: list[int] = []
        self._open: dict[int, _Open] = {}
        self._next_handle = 0

    # -- nodes ------------------------------------------------------------------------------------

    def add_node(self, interval: NodeInterval) -> None:
        """Record a node's closed lifetime (intervals of one node may not overlap)."""
        idx = self._add_interval(
            interval.node,
            interval.pool,
            interval.gpu_model,
            interval.gpu_count,
            interval.cpu_milli,
            interval.memory_mib,
            interval.capacity_type,
            interval.hourly_usd,
            interval.start,
            interval.end,
        )
        if interval.exact_hourly_usd is not None:
            self._intervals[idx].exact_price = _exact(interval.exact_hourly_usd, "exact_hourly_usd")

    def open_node(self, node: Node, *, hourly_usd: float, start: float) -> None:
        """A node came up at ``start`` costing ``hourly_usd`` (price it with the catalog's
        ``node_hour_usd``). Close it with :meth:`close_node`."""
        if node.name in self._open_node:
            raise LedgerError(f"node {node.name} is already open", field="node")
        idx = self._add_interval(
            node.name,
            node.pool,
            node.gpu_model,
            node.gpu_count,
            node.cpu_milli,
            node.memory_mib,
            node.capacity_type,
            hourly_usd,
            start,
            None,
        )
        self._open_node[node.name] = idx

    def close_node(self, node: str, end: float) -> NodeInterval:
        """The node went away (or changed price) at ``end``. Segments on it must end by then."""
        idx = self._open_node.get(node)
        if idx is None:
            raise LedgerError(f"node {node} has no open interval", field="node")
        iv = self._intervals[idx]
        _check_times(iv.start, end, f"node {node}")
        if iv.max_segment_end > end:
            raise LedgerError(
                f"node {node}: a segment on it ends at {iv.max_segment_end}, after the node's end {end}",
                field="end",
            )
        for op in self._open.values():
            if op.interval == idx and op.start > end:
                raise LedgerError(
                    f"node {node}: job {op.job_id} started on it at {op.start}, after its end {end}",
                    field="end",
                )
        iv.end, iv.end_us = end, _us(end)
        del self._open_node[node]
        return iv.record(None)

    def node_intervals(self, as_of: float | None = None) -> list[NodeInterval]:
        """Node lifetimes; open ones end at ``as_of`` (and are left out when ``as_of`` is None)."""
        out = []
        for iv in self._intervals:
            if iv.end is not None:
                out.append(iv.record(None))
            elif as_of is not None and as_of >= iv.start:
                out.append(iv.record(as_of))
        return out

    # -- segments ---------------------------------------------------------------------------------

    def append(self, segment: UsageSegment) -> None:
        """Record a closed segment. It must lie inside one interval of its node and match it."""
        idx = self._find_interval(segment.node, segment.start, segment.end, segment.job_id)
        iv = self._intervals[idx]
        units = _share_units(segment.gpu_share)
        self._check_fits(iv, segment.job_id, units, segment.cpu_milli, segment.memory_mib)
        for fld, mine, theirs in (
            ("pool", segment.pool, iv.pool),
            ("gpu_model", segment.gpu_model, iv.gpu_model),
            ("capacity_type", segment.capacity_type, iv.capacity_type),
        ):
            if mine != theirs:
                raise LedgerError(
                    f"job {segment.job_id}: {fld} {mine!r} differs from node {iv.node}'s {theirs!r}",
                    field=fld,
                )
        if not math.isclose(segment.node_hourly_usd, iv.hourly_usd, rel_tol=1e-9, abs_tol=1e-12):
            raise LedgerError(
                f"job {segment.job_id}: node_hourly_usd {segment.node_hourly_usd} differs from node "
                f"{iv.node}'s price {iv.hourly_usd} at that time (record a price change as a new interval)",
                field="node_hourly_usd",
            )
        self._store(segment, idx, units)

    def open(
        self,
        *,
        job_id: str,
        node: str,
        start: float,
        gpu_share: Fraction | float | int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        team: str = "default",
        project: str = "",
        namespace: str = "default",
        experiment: str = "",
        labels: Mapping[str, str] | None = None,
        priority_class: str = "normal",
    ) -> SegmentHandle:
        """A job starts holding resources of ``node`` (pool, model, capacity type and price are
        the node's interval's). Returns the handle to :meth:`close` it with."""
        _check_times(start, start, f"job {job_id}")
        idx = self._find_interval(node, start, None, job_id)
        iv = self._intervals[idx]
        units = _share_units(gpu_share)
        if cpu_milli < 0 or memory_mib < 0:
            raise LedgerError(f"job {job_id}: cpu_milli and memory_mib must be >= 0", field="cpu_milli")
        self._check_fits(iv, job_id, units, cpu_milli, memory_mib)
        handle = SegmentHandle(self._next_handle)
        self._next_handle += 1
        self._open[handle.id] = _Open(
            job_id,
            team,
            project,
            namespace,
            experiment,
            dict(labels or {}),
            idx,
            units,
            cpu_milli,
            memory_mib,
            start,
            priority_class,
        )
        return handle

    def open_pod(self, job: Job, placement: PodPlacement, start: float) -> SegmentHandle:
        """:meth:`open` for one pod of ``job`` placed by ``placement`` (CPU and memory per pod)."""
        model = self._intervals[self._find_interval(placement.node, start, None, job.id)].gpu_model
        spec = job.spec
        if spec.gpu.count == 0:
            share = Fraction(0)
        elif spec.gpu.mig_profile is None and placement.gpus:
            share = Fraction(len(placement.gpus) * placement.milli, MILLI)  # what was bound
        else:
            share = gpu_share(spec.gpu, model)
        return self.open(
            job_id=job.id,
            node=placement.node,
            start=start,
            gpu_share=share,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            team=spec.team,
            project=spec.project,
            namespace=spec.namespace,
            experiment=spec.experiment,
            labels=spec.labels,
            priority_class=spec.priority_class,
        )

    def close(self, handle: SegmentHandle, end: float) -> UsageSegment:
        """The job stopped holding the resources at ``end``; returns the recorded segment."""
        op = self._open.get(handle.id)
        if op is None:
            raise LedgerError(f"segment handle {handle.id} is not open (closed twice?)", field="handle")
        seg = self._materialize(op, end)
        iv = self._intervals[op.interval]
        if not iv.covers(seg.start, seg.end):
            raise LedgerError(
                f"job {op.job_id}: ends at {end}, after node {iv.node}'s interval ends at {iv.end}",
                field="end",
            )
        del self._open[handle.id]
        self._store(seg, op.interval, op.share_units)
        return seg

    def segments(self, as_of: float | None = None) -> list[UsageSegment]:
        """Closed segments, plus open ones ending at ``as_of`` when it is given."""
        out = list(self._segments)
        if as_of is not None:
            for op in self._open.values():
                node_end = self._intervals[op.interval].end  # a node closed under a running job
                end = as_of if node_end is None else min(as_of, node_end)
                if op.start <= end:
                    out.append(self._materialize(op, end))
        return out

    @property
    def open_count(self) -> int:
        return len(self._open)

    def __len__(self) -> int:
        return len(self._segments)

    # -- internals --------------------------------------------------------------------------------

    def _add_interval(
        self,
        node: str,
        pool: str,
        model: str,
        gpus: int,
        cpu: int,
        mem: int,
        capacity_type: CapacityType,
        hourly_usd: float,
        start: float,
        end: float | None,
    ) -> int:
        _check_node(node, model, gpus, cpu, mem, hourly_usd, start)
        if end is not None:
            _check_times(start, end, f"node {node}")
        for other in self._by_node.get(node, ()):
            o = self._intervals[other]
            o_end = math.inf if o.end is None else o.end
            my_end = math.inf if end is None else end
            if start < o_end and o.start < my_end:
                raise LedgerError(
                    f"node {node}: interval [{start}, {end}] overlaps [{o.start}, {o.end}]", field="start"
                )
        idx = len(self._intervals)
        self._intervals.append(
            _Interval(
                node,
                pool,
                model,
                gpus,
                cpu,
                mem,
                CapacityType(capacity_type),
                hourly_usd,
                start,
                end,
                _us(start),
                None if end is None else _us(end),
                -math.inf,
            )
        )
        self._by_node.setdefault(node, []).append(idx)
        return idx

    def _find_interval(self, node: str, start: float, end: float | None, job_id: str) -> int:
        _check_times(start, start if end is None else end, f"job {job_id}")
        for idx in self._by_node.get(node, ()):
            if self._intervals[idx].covers(start, end):
                return idx
        known = self._by_node.get(node)
        if not known:
            raise LedgerError(f"job {job_id}: unknown node {node} (record the node first)", field="node")
        raise LedgerError(
            f"job {job_id}: [{start}, {end}] is not inside one recorded interval of node {node}",
            field="start",
        )

    @staticmethod
    def _check_fits(iv: _Interval, job_id: str, units: int, cpu: int, mem: int) -> None:
        if units > iv.gpu_count * SHARE_UNITS:
            raise LedgerError(
                f"job {job_id}: gpu_share {Fraction(units, SHARE_UNITS)} exceeds node {iv.node}'s {iv.gpu_count} GPUs",
                field="gpu_share",
            )
        if cpu > iv.cpu_milli:
            raise LedgerError(
                f"job {job_id}: cpu_milli {cpu} exceeds node {iv.node}'s {iv.cpu_milli}", field="cpu_milli"
            )
        if mem > iv.memory_mib:
            raise LedgerError(
                f"job {job_id}: memory_mib {mem} exceeds node {iv.node}'s {iv.memory_mib}",
                field="memory_mib",
            )

    def _materialize(self, op: _Open, end: float) -> UsageSegment:
        iv = self._intervals[op.interval]
        return UsageSegment(
            op.job_id,
            op.team,
            op.project,
            op.namespace,
            op.experiment,
            op.labels,
            iv.node,
            iv.pool,
            iv.gpu_model,
            iv.capacity_type,
            Fraction(op.share_units, SHARE_UNITS),
            op.cpu_milli,
            op.memory_mib,
            iv.hourly_usd,
            op.start,
            end,
            op.priority_class,
        )

    def _store(self, seg: UsageSegment, idx: int, units: int) -> None:
        iv = self._intervals[idx]
        iv.max_segment_end = max(iv.max_segment_end, seg.end)
        self._segments.append(seg)
        self._seg_interval.append(idx)
        self._seg_start_us.append(_us(seg.start))
        self._seg_end_us.append(_us(seg.end))
        self._seg_units.append(units)


# -- attribution ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CostLine:
    """One row of an allocation. Money in USD rounded to cents; the components add up to the total."""

    key: tuple[str, ...]
    gpu_cost_usd: Decimal
    cpu_cost_usd: Decimal
    memory_cost_usd: Decimal
    total_cost_usd: Decimal
    gpu_seconds: float  # GPU-share-seconds held (idle row: not held)


@dataclass(frozen=True, slots=True)
class Allocation:
    """Costs of a window by ``aggregate``. ``sum(rows) + idle == totals`` to the cent, column by
    column; ``totals.total_cost_usd`` is the nodes' cost in the window rounded half up to cents and
    ``idle.total_cost_usd`` the idle cost rounded half up (neither depends on the grouping)."""

    aggregate: tuple[str, ...]
    window_start: float
    window_end: float  # effective end: min(window_end, as_of)
    rows: tuple[CostLine, ...]  # sorted by key
    idle: CostLine  # what no one held (zero, or only what could not be spread, when spread)
    totals: CostLine
    node_cost_exact_usd: Fraction = field(repr=False)

    def row(self, *key: str) -> CostLine:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    def by_key(self) -> dict[tuple[str, ...], CostLine]:
        return {r.key: r for r in self.rows}


def allocate(
    ledger: Ledger,
    window_start: float,
    window_end: float,
    aggregate: Sequence[str] = ("team",),
    *,
    as_of: float | None = None,
    spread_idle: bool = False,
    unit_prices: UnitPrices = DEFAULT_UNIT_PRICES,
) -> Allocation:
    """Attribute what the nodes cost in ``[window_start, window_end)`` to the groups of ``aggregate``.

    ``aggregate``: field names from :data:`AGGREGATE_FIELDS` or ``"label:<key>"`` (a missing label
    groups as ``""``). Segments and node intervals are clipped to the window; ``as_of`` (default:
    ``window_end``) ends the window early and ends what is still open. Each group pays, per
    microsecond, its GPU share, CPU and memory at the unit prices of :func:`split_node_price` for the
    node it ran on. What no one held is the idle line; with ``spread_idle`` each idle component
    (GPU, CPU, memory) is spread over the rows in proportion to their cost in that component (a
    component no row used stays idle). Costs are exact until rounded (largest remainder).
    """
    if not (math.isfinite(window_start) and math.isfinite(window_end)) or window_end < window_start:
        raise InputError(f"bad window [{window_start}, {window_end}]", field="window_end")
    keyfns = _key_functions(aggregate)
    cut = window_end if as_of is None else min(window_end, as_of)
    open_end = window_end if as_of is None else as_of
    ws, we = _us(window_start), max(_us(window_start), _us(cut))
    oe = _us(open_end)

    # 1. Price each interval once (one split per distinct node shape and price) and sum what the
    #    nodes offered in the window: per split, GPU-, CPU- and memory-microseconds and node cost.
    split_of: dict[tuple[Fraction, int, int, int, CapacityType], int] = {}
    splits: list[PriceSplit] = []
    interval_split: list[int] = []
    capacity: dict[int, list[int]] = {}  # split → [gpu units·us, cpu milli·us, mib·us]
    node_cost = Fraction(0)
    for iv in ledger._intervals:
        price = iv.exact_price if iv.exact_price is not None else _exact(iv.hourly_usd, "hourly_usd")
        skey = (price, iv.gpu_count, iv.cpu_milli, iv.memory_mib, iv.capacity_type)
        sid = split_of.get(skey)
        if sid is None:
            sid = split_of[skey] = len(splits)
            splits.append(
                split_node_price(
                    price,
                    gpu_count=iv.gpu_count,
                    cpu_milli=iv.cpu_milli,
                    memory_mib=iv.memory_mib,
                    capacity_type=iv.capacity_type,
                    unit_prices=unit_prices,
                )
            )
        interval_split.append(sid)
        end_us = oe if iv.end_us is None else iv.end_us
        dur = min(end_us, we) - max(iv.start_us, ws)
        if dur <= 0:
            continue
        cap = capacity.setdefault(sid, [0, 0, 0])
        cap[0] += iv.gpu_count * SHARE_UNITS * dur
        cap[1] += iv.cpu_milli * dur
        cap[2] += iv.memory_mib * dur
        node_cost += price * dur / US_PER_HOUR

    # 2. Sum what each group held, per split: (key, split) → [gpu units·us, cpu milli·us, mib·us].
    held: dict[tuple[tuple[str, ...], int], list[int]] = {}
    segs = ledger._segments
    starts, ends, units, ivs = ledger._seg_start_us, ledger._seg_end_us, ledger._seg_units, ledger._seg_interval
    for i in range(len(segs)):
        s, e = starts[i], ends[i]
        if e <= ws or s >= we:
            continue
        dur = min(e, we) - max(s, ws)
        if dur <= 0:
            continue
        seg = segs[i]
        _accumulate(
            held, (tuple(f(seg) for f in keyfns), interval_split[ivs[i]]), units[i], seg.cpu_milli, seg.memory_mib, dur
        )
    for op in ledger._open.values():
        iv_end = ledger._intervals[op.interval].end_us  # a node closed under a running job cuts it
        s, e = _us(op.start), oe if iv_end is None else min(oe, iv_end)
        dur = min(e, we) - max(s, ws)
        if dur <= 0:
            continue
        seg = ledger._materialize(op, open_end)
        _accumulate(
            held,
            (tuple(f(seg) for f in keyfns), interval_split[op.interval]),
            op.share_units,
            op.cpu_milli,
            op.memory_mib,
            dur,
        )

    # 3. Exact costs per group and idle per component, as integer numerators over one common
    #    denominator (exact, and fast for many groups: no Fraction per row).
    gpu_div, cpu_div, mem_div = SHARE_UNITS * US_PER_HOUR, MILLI * US_PER_HOUR, MIB_PER_GIB * US_PER_HOUR
    rates = [
        (sp.usd_per_gpu_hour / gpu_div, sp.usd_per_vcpu_hour / cpu_div, sp.usd_per_gib_hour / mem_div) for sp in splits
    ]
    den = 1
    for rate in rates:
        for part in rate:
            den = math.lcm(den, part.denominator)
    irates = [tuple(part.numerator * (den // part.denominator) for part in rate) for rate in rates]
    exact: dict[tuple[str, ...], list[int]] = {}  # key → [gpu, cpu, mem] numerators over ``den``
    used: dict[int, list[int]] = {}
    gpu_us: dict[tuple[str, ...], int] = {}
    for (key, sid), (g, c, m) in held.items():
        kg, kc, km = irates[sid]
        row = exact.get(key)
        if row is None:
            row = exact[key] = [0, 0, 0]
        row[0] += kg * g
        row[1] += kc * c
        row[2] += km * m
        u = used.setdefault(sid, [0, 0, 0])
        u[0] += g
        u[1] += c
        u[2] += m
        gpu_us[key] = gpu_us.get(key, 0) + g
    idle = [0, 0, 0]
    idle_units = 0
    for sid, (cg, cc, cm) in capacity.items():
        kg, kc, km = irates[sid]
        ug, uc, um = used.get(sid, (0, 0, 0))
        idle[0] += kg * (cg - ug)
        idle[1] += kc * (cc - uc)
        idle[2] += km * (cm - um)
        idle_units += cg - ug
    attributed = sum(sum(r) for r in exact.values())
    if Fraction(attributed + sum(idle), den) != node_cost:  # the split's invariant; a bug if it fails
        raise AssertionError(f"ledger conservation broken: {attributed} + {sum(idle)} != {node_cost} x {den}")

    keys = sorted(exact)
    if spread_idle:
        # row[c] += idle[c] * row[c] / base[c] for each component c anyone used; to stay integral,
        # move to the denominator den * B with B = lcm of those bases.
        bases = [sum(r[c] for r in exact.values()) for c in range(3)]
        spread = [bases[c] > 0 and idle[c] != 0 for c in range(3)]
        big = 1
        for c in range(3):
            if spread[c]:
                big = math.lcm(big, bases[c])
        for r in exact.values():
            for c in range(3):
                r[c] = r[c] * big + (idle[c] * r[c] * (big // bases[c]) if spread[c] else 0)
        idle = [0 if spread[c] else idle[c] * big for c in range(3)]
        den *= big

    # 4. Round. The node cost and the idle line are rounded half up on their own (so neither
    #    depends on the grouping); the rows' totals by largest remainder to the difference; then
    #    each line's components by largest remainder to its rounded total.
    lines = [exact[k] for k in keys] + [idle]
    node_cents = _round_cents(node_cost)
    idle_cents = _round_cents(Fraction(sum(idle), den))
    totals_cents = _largest_remainder_int([sum(exact[k]) for k in keys], den, node_cents - idle_cents)
    totals_cents.append(idle_cents)
    rows: list[CostLine] = []
    col = [0, 0, 0]
    for i, (r, cents) in enumerate(zip(lines, totals_cents, strict=True)):
        comps = _largest_remainder_int(r, den, cents)
        for j in range(3):
            col[j] += comps[j]
        is_idle = i == len(keys)
        key = (IDLE_KEY,) * len(keyfns) if is_idle else keys[i]
        held_units = idle_units if is_idle else gpu_us.get(keys[i], 0)
        rows.append(
            CostLine(
                key, _usd(comps[0]), _usd(comps[1]), _usd(comps[2]), _usd(cents), held_units / (SHARE_UNITS * US_PER_S)
            )
        )
    totals = CostLine(
        ("__total__",) * len(keyfns),
        _usd(col[0]),
        _usd(col[1]),
        _usd(col[2]),
        _usd(sum(totals_cents)),
        (sum(gpu_us.values()) + idle_units) / (SHARE_UNITS * US_PER_S),
    )
    return Allocation(
        tuple(aggregate), window_start, max(window_start, cut), tuple(rows[:-1]), rows[-1], totals, node_cost
    )


def _accumulate(
    held: dict[tuple[tuple[str, ...], int], list[int]],
    key: tuple[tuple[str, ...], int],
    units: int,
    cpu: int,
    mem: int,
    dur: int,
) -> None:
    acc = held.get(key)
    if acc is None:
        held[key] = [units * dur, cpu * dur, mem * dur]
    else:
        acc[0] += units * dur
        acc[1] += cpu * dur
        acc[2] += mem * dur


def _key_functions(aggregate: Sequence[str]) -> list[_KeyFn]:
    if isinstance(aggregate, str) or not aggregate:
        raise InputError(f"aggregate must be a non-empty tuple of names, got {aggregate!r}", field="aggregate")
    fns: list[_KeyFn] = []
    for name in aggregate:
        if name.startswith("label:") and len(name) > len("label:"):
            fns.append(_LabelKey(name[len("label:") :]))
        elif name in AGGREGATE_FIELDS:
            fns.append(_FieldKey(name))
        else:
            raise InputError(
                f"unknown aggregate '{name}' (known: {', '.join(AGGREGATE_FIELDS)}, label:<key>)",
                field="aggregate",
            )
    return fns


class _KeyFn:
    __slots__ = ()

    def __call__(self, seg: UsageSegment) -> str:
        raise NotImplementedError


class _FieldKey(_KeyFn):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, seg: UsageSegment) -> str:
        return str(getattr(seg, self.name))


class _LabelKey(_KeyFn):
    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, seg: UsageSegment) -> str:
        return seg.labels.get(self.label, "")


# -- helpers --------------------------------------------------------------------------------------


def _round_cents(x: Fraction) -> int:
    """``x`` dollars in whole cents, half up."""
    return math.floor(x * 100 + Fraction(1, 2))


def _largest_remainder_int(numerators: Sequence[int], den: int, target_cents: int) -> list[int]:
    """Round values given as integer numerators over ``den`` dollars to cents so they sum to
    ``target_cents``: floor each, then give the missing cents to the largest remainders (ties:
    the earlier value)."""
    scaled = [v * 100 for v in numerators]
    floors = [v // den for v in scaled]
    missing = target_cents - sum(floors)
    if not 0 <= missing <= len(scaled):
        raise AssertionError(f"cannot round {numerators}/{den} to {target_cents} cents")
    order = sorted(range(len(scaled)), key=lambda i: (-(scaled[i] - floors[i] * den), i))
    for i in order[:missing]:
        floors[i] += 1
    return floors


def _usd(cents: int) -> Decimal:
    return Decimal(cents).scaleb(-2)


def _us(t: float) -> int:
    return round(t * US_PER_S)


def _share_units(share: Fraction | float | int) -> int:
    """A GPU share in 1/7000 GPU; anything else (e.g. 1/3 GPU) is refused."""
    if isinstance(share, float):
        if not math.isfinite(share):
            raise LedgerError(f"gpu_share must be finite, got {share}", field="gpu_share")
        units_f = share * SHARE_UNITS
        units = round(units_f)
        if abs(units_f - units) > 1e-6:
            raise LedgerError(
                f"gpu_share {share} is not a whole number of 1/7000 GPU (whole GPUs, MIG k/7, milli/1000)",
                field="gpu_share",
            )
    else:
        exact = share if isinstance(share, Fraction) else Fraction(share)
        num, den = exact.numerator, exact.denominator
        if SHARE_UNITS % den:
            raise LedgerError(
                f"gpu_share {share} is not a whole number of 1/7000 GPU (whole GPUs, MIG k/7, milli/1000)",
                field="gpu_share",
            )
        units = num * (SHARE_UNITS // den)
    if units < 0:
        raise LedgerError(f"gpu_share must be >= 0, got {share}", field="gpu_share")
    return units


def _check_times(start: float, end: float, what: str) -> None:
    if not (math.isfinite(start) and math.isfinite(end)):
        raise LedgerError(f"{what}: times must be finite, got [{start}, {end}]", field="start")
    if end < start:
        raise LedgerError(f"{what}: end {end} is before start {start}", field="end")


def _check_node(node: str, model: str, gpus: int, cpu: int, mem: int, hourly_usd: float, start: float) -> None:
    if not node:
        raise LedgerError("a node needs a name", field="node")
    if gpus < 0 or cpu < 0 or mem < 0:
        raise LedgerError(f"node {node}: gpu_count, cpu_milli and memory_mib must be >= 0", field="gpu_count")
    if gpus > 0 and not model:
        raise LedgerError(f"node {node}: a GPU node needs a gpu_model", field="gpu_model")
    if gpus == 0 and cpu == 0 and mem == 0:
        raise LedgerError(f"node {node}: no GPUs, CPU or memory to price", field="gpu_count")
    if not math.isfinite(hourly_usd) or hourly_usd < 0:
        raise LedgerError(f"node {node}: hourly_usd must be a finite number >= 0, got {hourly_usd}", field="hourly_usd")
    if not math.isfinite(start):
        raise LedgerError(f"node {node}: start must be finite", field="start")
