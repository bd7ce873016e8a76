"""The usage ledger: the append-only records every figure of money is computed from.

The ledger holds two kinds of record:

- :class:`NodeInterval` — a node existed from ``start`` to ``end`` at ``hourly_usd``: what the
  nodes cost. A price change is a new interval.
- :class:`UsageSegment` — a job held ``gpu_share`` GPUs, ``cpu_milli`` and ``memory_mib`` of one
  node from ``start`` to ``end``. The caller records what the job *holds* (``max(request, usage)``
  per resource, see DESIGN "The rules for money").

Every segment lies inside one interval of its node (record the node first). Running jobs and
nodes are *open*: :meth:`Ledger.open` / :meth:`Ledger.close` and :meth:`Ledger.open_node` /
:meth:`Ledger.close_node`; queries take ``as_of=t`` and treat what is open as ending at ``t``.

Money is never kept here as a running total: :func:`gpufleet.cost.spend.spend_report` computes
it from these records (through :mod:`gpufleet.cost.allocation`).

Units and exactness. Times are seconds (floats) and are metered in whole microseconds (rounded).
GPU shares are kept in units of 1/7000 GPU, which holds whole GPUs, MIG slices (k/7) and
milli-GPU fractions (m/1000) exactly. Prices are read as the decimals they print as
(``Fraction(repr(x))``, :func:`exact_price`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType

from gpufleet.errors import InputError
from gpufleet.model.gpu import gpu_model
from gpufleet.model.job import GpuRequest, Job, PodPlacement
from gpufleet.model.node import CapacityType, Node
from gpufleet.model.share import SHARE_UNITS as SHARE_UNITS  # 7000 share units = one GPU
from gpufleet.model.share import fraction_units, gpu_units, gpus_units, milli_units, request_share, units_fraction

US_PER_S = 1_000_000
US_PER_HOUR = 3600 * US_PER_S
MIB_PER_GIB = 1024


class LedgerError(InputError):
    """A usage record that contradicts the ledger (bad times, shares, or an unknown node)."""

    code = "invalid_ledger_record"


def exact_price(value: Fraction | Decimal | float | int | str, name: str) -> Fraction:
    """A price as the exact decimal it prints as (floats via ``repr``)."""
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            return Fraction(repr(value))
        return Fraction(value)
    except (ValueError, TypeError):
        raise InputError(f"not a finite number: {value!r}", field=name) from None


# -- records --------------------------------------------------------------------------------------


def gpu_share(request: GpuRequest, gpu_model_name: str) -> Fraction:
    """GPU-equivalents one pod with ``request`` holds on a node of ``gpu_model_name``.

    Whole GPUs: the count; a MIG slice: its compute slices / 7 (1g.10gb on an A100-80GB = 1/7);
    a time-sliced/MPS fraction: milli / 1000.
    """
    if request.mig_profile is not None and gpu_model(gpu_model_name).mig_profile(request.mig_profile) is None:
        raise LedgerError(f"{gpu_model_name or 'this node'} has no MIG profile '{request.mig_profile}'", field="mig")
    return request_share(request, gpu_model_name)


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
        if not isinstance(share, Fraction) or fraction_units(share) is None:
            object.__setattr__(self, "gpu_share", units_fraction(_share_units(share)))
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
            self._intervals[idx].exact_price = exact_price(interval.exact_hourly_usd, "exact_hourly_usd")

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
        iv.end, iv.end_us = end, to_us(end)
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
            share = units_fraction(milli_units(len(placement.gpus) * placement.milli))  # what was bound
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
                to_us(start),
                None if end is None else to_us(end),
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
        if units > gpu_units(iv.gpu_count):
            raise LedgerError(
                f"job {job_id}: gpu_share {units_fraction(units)} exceeds node {iv.node}'s {iv.gpu_count} GPUs",
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
            units_fraction(op.share_units),
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
        self._seg_start_us.append(to_us(seg.start))
        self._seg_end_us.append(to_us(seg.end))
        self._seg_units.append(units)


# -- helpers ---------------------------------------------------------------------------------------


def to_us(t: float) -> int:
    return round(t * US_PER_S)


def _share_units(share: Fraction | float | int) -> int:
    """A GPU share in 1/7000 GPU; anything else (e.g. 1/3 GPU) is refused."""
    if isinstance(share, float) and not math.isfinite(share):
        raise LedgerError(f"gpu_share must be finite, got {share}", field="gpu_share")
    units = gpus_units(share) if isinstance(share, float) else fraction_units(share)
    if units is None:
        raise LedgerError(
            f"gpu_share {share} is not a whole number of 1/7000 GPU (whole GPUs, MIG k/7, milli/1000)",
            field="gpu_share",
        )
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
