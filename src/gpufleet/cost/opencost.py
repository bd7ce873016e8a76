"""OpenCost's view of gpufleet's money, pure: node prices as OpenCost's ``node_*_hourly_cost``, a
pod's hourly rate, and the translation of cost reports into OpenCost's allocation API
(``GET /allocation/compute``).

Nothing here reads the store or the clock: the route (:mod:`gpufleet.api.routes.allocation`) parses
the window, loads the ledger and calls :func:`gpufleet.cost.spend.spend_report`; this module parses
the other parameters and turns the report's rows into OpenCost allocations. Money comes only from
the report, so an allocation's ``totalCost`` is the row ``/v1/usage`` (and ``gpufleet cost``) shows
for the same window and grouping, to the cent; the resource figures (core-hours, byte-hours,
GPU-hours, minutes) are summed from the ledger's usage segments.

Parameters, as OpenCost names them:

- ``aggregate``: comma list of ``cluster``, ``node``, ``namespace``, ``pod``, ``job`` (also
  ``controller``), ``team``, ``project``, ``experiment``, ``label:<key>`` (default ``namespace``);
- ``accumulate``, ``idle``, ``shareIdle``: ``true``/``false``;
- ``step``: a duration (``30m``, ``1h``, ``1d``, ``1w``): one allocation set per step of the window
  (ignored with ``accumulate=true``: one set for the whole window);
- ``filter``: OpenCost's v2 filter language, a subset: ``<field><op><values>`` with fields
  ``cluster``, ``node``, ``namespace``, ``pod``, ``job``/``controllerName``, ``controllerKind``
  (always ``job``), ``team``, ``project``, ``experiment`` and ``label[<key>]``; operators ``:``
  (equals), ``!:``, ``~:`` (contains), ``!~:``, ``<~:`` (starts with), ``!<~:``, ``~>:`` (ends
  with), ``!~>:``; values one or more double-quoted strings separated by commas (any of them for a
  positive operator, none of them for a negated one); conditions joined by ``+`` (and) or ``|`` (or),
  grouped with parentheses (``+`` and ``|`` are not mixed without them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gpufleet.errors import InputError
from gpufleet.k8s.vocabulary import LABEL_JOB  # in a ledger by pod: the job of each segment (store.repo.scrape)
from gpufleet.model.gpu import MILLI
from gpufleet.model.node import CapacityType
from gpufleet.model.share import units_fraction

from .allocation import IDLE_KEY
from .ledger import MIB_PER_GIB, Ledger, UsageSegment
from .pricesplit import split_node_price
from .report import CostReport, ReportLine

CLUSTER = "gpufleet"  # the cluster name allocations carry (gpufleet meters one cluster)
UNALLOCATED = "__unallocated__"  # OpenCost's name for a missing label value
BYTES_PER_MIB = 1024 * 1024
MAX_STEPS = 1000

# -- node prices and pod rates (the metrics) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodePrices:
    """A node's hourly price as OpenCost publishes it: per GPU, per vCPU, per GiB of RAM, total."""

    gpu_usd: float
    cpu_usd: float
    ram_gib_usd: float
    total_usd: float


def node_prices(
    hourly_usd: float, *, gpu_count: int, cpu_milli: int, memory_mib: int, capacity_type: str
) -> NodePrices:
    """The node's price split (:func:`gpufleet.cost.pricesplit.split_node_price`, the rule the
    ledger charges by): ``gpu_usd * gpus + cpu_usd * vcpus + ram_gib_usd * gib == total_usd``."""
    if gpu_count <= 0 and cpu_milli <= 0 and memory_mib <= 0:
        return NodePrices(0.0, 0.0, 0.0, float(hourly_usd))
    sp = split_node_price(
        hourly_usd,
        gpu_count=gpu_count,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        capacity_type=_capacity(capacity_type),
    )
    return NodePrices(
        float(sp.usd_per_gpu_hour), float(sp.usd_per_vcpu_hour), float(sp.usd_per_gib_hour), float(hourly_usd)
    )


def pod_hourly_usd(
    *,
    gpu_share_units: int,
    cpu_milli: int,
    memory_mib: int,
    node_hourly_usd: float,
    node_gpu_count: int,
    node_cpu_milli: int,
    node_memory_mib: int,
    capacity_type: str,
    multiplier: Fraction | int = 1,
) -> Fraction:
    """What holding ``gpu_share_units`` (1/7000 GPU), ``cpu_milli`` and ``memory_mib`` of a node
    costs an hour at the node's price split, times a priority ``multiplier`` (exact)."""
    if node_gpu_count <= 0 and node_cpu_milli <= 0 and node_memory_mib <= 0:
        return Fraction(0)
    sp = split_node_price(
        node_hourly_usd,
        gpu_count=node_gpu_count,
        cpu_milli=node_cpu_milli,
        memory_mib=node_memory_mib,
        capacity_type=_capacity(capacity_type),
    )
    usd = (
        sp.usd_per_gpu_hour * units_fraction(gpu_share_units)
        + sp.usd_per_vcpu_hour * Fraction(cpu_milli, MILLI)
        + sp.usd_per_gib_hour * Fraction(memory_mib, MIB_PER_GIB)
    )
    return usd * multiplier


def _capacity(value: str) -> CapacityType:
    try:
        return CapacityType(value)
    except ValueError:
        return CapacityType.ON_DEMAND


# -- parameters -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dimension:
    """One ``aggregate`` (or filter) dimension: its OpenCost name and how a ledger row gives it."""

    name: str  # as given: "namespace", "label:team", "cluster"
    kind: str  # cluster | node | namespace | pod | job | team | project | experiment | label
    label: str = ""  # the key, for kind "label"

    def ledger_field(self, by_pod: bool) -> str | None:
        """The report field (None: constant, the cluster)."""
        if self.kind == "cluster":
            return None
        if self.kind == "pod":
            return "job_id"
        if self.kind == "job":
            return f"label:{LABEL_JOB}" if by_pod else "job_id"
        if self.kind == "label":
            return f"label:{self.label}"
        return self.kind


_AGGREGATES = {
    "cluster": "cluster",
    "node": "node",
    "namespace": "namespace",
    "pod": "pod",
    "job": "job",
    "controller": "job",
    "team": "team",
    "project": "project",
    "experiment": "experiment",
}


def parse_aggregate(text: str | None) -> list[Dimension]:
    """``namespace,label:app`` → dimensions; :class:`InputError` naming ``aggregate``."""
    raw = "namespace" if text is None or not text.strip() else text
    out: list[Dimension] = []
    for item in (p.strip() for p in raw.split(",")):
        if item.startswith("label:") and len(item) > len("label:"):
            dim = Dimension(item, "label", item[len("label:") :])
        elif item in _AGGREGATES:
            dim = Dimension(item, _AGGREGATES[item])
        else:
            raise InputError(
                f"unknown aggregate '{item}' (known: {', '.join(_AGGREGATES)}, label:<key>)", field="aggregate"
            )
        if any((d.kind, d.label) == (dim.kind, dim.label) for d in out):
            raise InputError(f"aggregate '{item}' is given twice", field="aggregate")
        out.append(dim)
    return out


def parse_bool(text: str | None, name: str, default: bool = False) -> bool:
    """``true``/``false`` (also ``1``/``0``, any case); :class:`InputError` naming ``name``."""
    if text is None or text.strip() == "":
        return default
    value = text.strip().lower()
    if value in ("true", "1", "t", "yes"):
        return True
    if value in ("false", "0", "f", "no"):
        return False
    raise InputError(f"'{text}' is not a boolean (true or false)", field=name)


_STEP = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_STEP_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def steps(start: float, end: float, step: str | None, accumulate: bool) -> list[tuple[float, float]]:
    """The windows of the sets: the whole window with ``accumulate`` or no ``step``, else
    consecutive ``step``-long windows from ``start`` (the last one cut at ``end``)."""
    if step is not None and step.strip():
        m = _STEP.match(step.strip().lower())
        if m is None:
            raise InputError(f"bad step '{step}': use a duration such as 30m, 1h, 1d or 1w", field="step")
        size = float(m.group(1)) * _STEP_S[m.group(2)]
        if size <= 0:
            raise InputError(f"bad step '{step}': it must be positive", field="step")
        if not accumulate:
            n = math.ceil((end - start) / size) if end > start else 1
            if n > MAX_STEPS:
                raise InputError(f"step '{step}' splits the window into {n} sets, more than {MAX_STEPS}", field="step")
            return [(start + i * size, min(end, start + (i + 1) * size)) for i in range(max(1, n))]
    return [(start, end)]


# -- filters ----------------------------------------------------------------------------------------

_FILTER_FIELDS = {
    "cluster": "cluster",
    "node": "node",
    "namespace": "namespace",
    "pod": "pod",
    "job": "job",
    "controllerName": "job",
    "controllerKind": "controllerKind",
    "team": "team",
    "project": "project",
    "experiment": "experiment",
}
_OPS = ("!<~:", "!~>:", "!~:", "<~:", "~>:", "~:", "!:", ":")


@dataclass(frozen=True, slots=True)
class Condition:
    field: str  # filter field: "namespace", "controllerKind", "label"
    key: str  # label key, else ""
    op: str  # one of _OPS
    values: tuple[str, ...]

    def dimension(self) -> Dimension | None:
        if self.field == "label":
            return Dimension(f"label:{self.key}", "label", self.key)
        if self.field == "controllerKind":
            return None
        return Dimension(self.field, _FILTER_FIELDS[self.field])

    def matches(self, value: str) -> bool:
        negated = self.op.startswith("!")
        op = self.op.lstrip("!")
        test: Callable[[str], bool]
        if op == ":":
            test = value.__eq__
        elif op == "~:":
            test = value.__contains__
        elif op == "<~:":
            test = value.startswith
        else:
            test = value.endswith
        hit = any(test(v) for v in self.values)
        return not hit if negated else hit


@dataclass(frozen=True, slots=True)
class Combined:
    op: str  # "+" (and) or "|" (or)
    parts: tuple[Filter, ...]


Filter = Condition | Combined


def filter_conditions(f: Filter | None) -> list[Condition]:
    if f is None:
        return []
    if isinstance(f, Condition):
        return [f]
    return [c for p in f.parts for c in filter_conditions(p)]


def evaluate(f: Filter | None, row: Mapping[str, str]) -> bool:
    """Does a row (filter field or ``label:<key>`` → value) pass the filter?"""
    if f is None:
        return True
    if isinstance(f, Condition):
        if f.field == "controllerKind":
            return f.matches("job")
        key = f"label:{f.key}" if f.field == "label" else _FILTER_FIELDS[f.field]
        return f.matches(row.get(key, ""))
    results = (evaluate(p, row) for p in f.parts)
    return all(results) if f.op == "+" else any(results)


def parse_filter(text: str | None) -> Filter | None:
    """OpenCost's v2 filter (the subset of the module docstring); :class:`InputError` naming
    ``filter`` and the position of what is wrong."""
    if text is None or not text.strip():
        return None
    parser = _FilterParser(text)
    result = parser.expression()
    parser.skip()
    if parser.pos < len(text):
        parser.fail(f"unexpected '{text[parser.pos]}'")
    return result


class _FilterParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> None:
        raise InputError(
            f'bad filter \'{self.text}\' at position {self.pos}: {why} (supported: <field><op>"value"[,"value"...] '
            f"with fields {', '.join(_FILTER_FIELDS)}, label[<key>]; ops {' '.join(reversed(_OPS))}; "
            "joined by + (and) or | (or), grouped with parentheses)",
            field="filter",
        )

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expression(self) -> Filter:
        parts = [self.factor()]
        joiner = ""
        while self.peek() in ("+", "|"):
            op = self.text[self.pos]
            if joiner and op != joiner:
                self.fail("'+' and '|' are mixed: group them with parentheses")
            joiner = op
            self.pos += 1
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else Combined(joiner, tuple(parts))

    def factor(self) -> Filter:
        if self.peek() == "(":
            self.pos += 1
            inner = self.expression()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.pos += 1
            return inner
        return self.condition()

    def condition(self) -> Condition:
        self.skip()
        m = re.compile(r"[A-Za-z][A-Za-z0-9_-]*").match(self.text, self.pos)
        if m is None:
            self.fail("expected a field name")
            raise AssertionError  # unreachable: fail raises
        name = m.group(0)
        self.pos = m.end()
        key = ""
        if name == "label":
            if self.peek() != "[":
                self.fail("label needs a key: label[<key>]")
            end = self.text.find("]", self.pos)
            if end < 0:
                self.fail("unterminated '['")
            key = self.text[self.pos + 1 : end].strip()
            if not key:
                self.fail("empty label key")
            self.pos = end + 1
        elif name not in _FILTER_FIELDS:
            self.fail(f"unknown field '{name}'")
        self.skip()
        op = next((o for o in _OPS if self.text.startswith(o, self.pos)), None)
        if op is None:
            self.fail(f"expected an operator after '{name}'")
            raise AssertionError
        self.pos += len(op)
        values = [self.string()]
        while self.peek() == ",":
            self.pos += 1
            values.append(self.string())
        return Condition(name, key, op, tuple(values))

    def string(self) -> str:
        if self.peek() != '"':
            self.fail("expected a double-quoted value")
        end = self.text.find('"', self.pos + 1)
        if end < 0:
            self.fail("unterminated string")
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value


# -- allocations ------------------------------------------------------------------------------------


def grouping(aggregate: Sequence[Dimension], flt: Filter | None, *, by_pod: bool) -> list[str]:
    """The report's aggregate: the dimensions' fields, then those the filter needs (the rows are
    filtered, then summed to the aggregate). Never empty (``team`` when only the cluster is asked)."""
    fields: list[str] = []
    for dim in [*aggregate, *(d for c in filter_conditions(flt) if (d := c.dimension()) is not None)]:
        f = dim.ledger_field(by_pod)
        if f is not None and f not in fields:
            fields.append(f)
    return fields or ["team"]


def needs_pods(aggregate: Sequence[Dimension], flt: Filter | None) -> bool:
    """Whether a ledger by pod is needed (``pod`` aggregated or filtered on)."""
    dims = [*aggregate, *(d for c in filter_conditions(flt) if (d := c.dimension()) is not None)]
    return any(d.kind == "pod" for d in dims)


def _row_values(fields: Sequence[str], key: Sequence[str], by_pod: bool) -> dict[str, str]:
    """A report row's key as filter fields (``label:<k>`` for labels) → value."""
    out = {"cluster": CLUSTER}
    for f, v in zip(fields, key, strict=True):
        if f == "job_id":
            out["pod" if by_pod else "job"] = v
        elif f == f"label:{LABEL_JOB}":
            out["job"] = v
        else:
            out[f] = v
    return out


def _dimension_value(dim: Dimension, values: Mapping[str, str]) -> str:
    if dim.kind == "cluster":
        return CLUSTER
    if dim.kind == "label":
        return values.get(f"label:{dim.label}", "")
    return values.get(dim.kind, "")


def _segment_values(seg: UsageSegment, by_pod: bool) -> dict[str, str]:
    out = {
        "cluster": CLUSTER,
        "node": seg.node,
        "namespace": seg.namespace,
        "team": seg.team,
        "project": seg.project,
        "experiment": seg.experiment,
    }
    if by_pod:
        out["pod"] = seg.job_id
        out["job"] = seg.labels.get(LABEL_JOB, "")
    else:
        out["job"] = seg.job_id
    for k, v in seg.labels.items():
        out[f"label:{k}"] = v
    return out


@dataclass(slots=True)
class _Usage:
    start: float = math.inf
    end: float = -math.inf
    cpu_core_hours: float = 0.0
    ram_byte_hours: float = 0.0
    gpu_hours: float = 0.0

    def add(self, seg: UsageSegment, lo: float, hi: float) -> None:
        hours = (hi - lo) / 3600.0
        self.start = min(self.start, lo)
        self.end = max(self.end, hi)
        self.cpu_core_hours += seg.cpu_milli / MILLI * hours
        self.ram_byte_hours += seg.memory_mib * BYTES_PER_MIB * hours
        self.gpu_hours += float(seg.gpu_share) * hours


@dataclass(slots=True)
class _Money:
    gpu: Decimal = Decimal("0.00")
    cpu: Decimal = Decimal("0.00")
    ram: Decimal = Decimal("0.00")
    total: Decimal = Decimal("0.00")

    def add(self, line: ReportLine) -> None:
        self.gpu += line.gpu_cost_usd
        self.cpu += line.cpu_cost_usd
        self.ram += line.memory_cost_usd
        self.total += line.total_cost_usd


@dataclass(frozen=True, slots=True)
class AllocationQuery:
    aggregate: tuple[Dimension, ...]
    filter: Filter | None = None
    idle: bool = False
    by_pod: bool = False
    team: str | None = None  # only this team's usage (a member's view)


def allocation_set(
    report: CostReport, ledger: Ledger, query: AllocationQuery, *, as_of: float
) -> dict[str, dict[str, Any]]:
    """One OpenCost allocation set: the report's rows (grouped by :func:`grouping`) filtered and
    summed to the aggregate, keyed by name; ``__idle__`` too with ``query.idle``."""
    fields = list(report.aggregate)
    n_fields = len(fields)
    money: dict[tuple[str, ...], _Money] = {}
    for row in report.rows:
        values = _row_values(fields, row.key[:n_fields], query.by_pod)
        if not evaluate(query.filter, values):
            continue
        key = tuple(_dimension_value(d, values) for d in query.aggregate)
        money.setdefault(key, _Money()).add(row)
    start, end = report.window_start, report.window_end
    usage: dict[tuple[str, ...], _Usage] = {k: _Usage() for k in money}
    used = _Usage()
    for seg in ledger.segments(as_of=as_of):
        lo, hi = max(seg.start, start), min(seg.end, end)
        if hi <= lo:
            continue
        used.add(seg, lo, hi)
        if query.team is not None and seg.team != query.team:
            continue
        values = _segment_values(seg, query.by_pod)
        if not evaluate(query.filter, values):
            continue
        u = usage.get(tuple(_dimension_value(d, values) for d in query.aggregate))
        if u is not None:
            u.add(seg, lo, hi)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(money):
        name = "/".join(v if v != "" else UNALLOCATED for v in key)
        out[name] = _allocation(name, _properties(query.aggregate, key), start, end, usage[key], money[key])
    if query.idle:
        idle = _idle_usage(ledger, start, end, used)
        m = _Money()
        m.add(report.idle)
        out[IDLE_KEY] = _allocation(IDLE_KEY, {"cluster": CLUSTER}, start, end, idle, m)
    return out


def _idle_usage(ledger: Ledger, start: float, end: float, used: _Usage) -> _Usage:
    """What the nodes offered in the window and no one held (all teams' use counted)."""
    cap = _Usage()
    for iv in ledger.node_intervals(as_of=end):
        lo, hi = max(iv.start, start), min(iv.end, end)
        if hi <= lo:
            continue
        hours = (hi - lo) / 3600.0
        cap.start = min(cap.start, lo)
        cap.end = max(cap.end, hi)
        cap.cpu_core_hours += iv.cpu_milli / MILLI * hours
        cap.ram_byte_hours += iv.memory_mib * BYTES_PER_MIB * hours
        cap.gpu_hours += iv.gpu_count * hours
    cap.cpu_core_hours = max(0.0, cap.cpu_core_hours - used.cpu_core_hours)
    cap.ram_byte_hours = max(0.0, cap.ram_byte_hours - used.ram_byte_hours)
    cap.gpu_hours = max(0.0, cap.gpu_hours - used.gpu_hours)
    return cap


def _properties(aggregate: Sequence[Dimension], key: Sequence[str]) -> dict[str, Any]:
    """OpenCost's properties of an aggregated allocation: the aggregated fields only."""
    out: dict[str, Any] = {"cluster": CLUSTER}
    labels: dict[str, str] = {}
    for dim, v in zip(aggregate, key, strict=True):
        if dim.kind in ("node", "namespace", "pod"):
            out[dim.kind] = v
        elif dim.kind == "job":
            out["controller"] = v
            out["controllerKind"] = "job"
        elif dim.kind in ("team", "project", "experiment"):
            out[dim.kind] = v
            labels[dim.kind] = v
        elif dim.kind == "label" and v != "":
            labels[dim.label] = v
    if labels:
        out["labels"] = labels
    return out


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r(x: float) -> float:
    """OpenCost's response rounding (5 decimals); cents stay exact."""
    return round(x, 5) if math.isfinite(x) else 0.0


def _allocation(name: str, properties: dict[str, Any], ws: float, we: float, u: _Usage, m: _Money) -> dict[str, Any]:
    start, end = (u.start, u.end) if u.end > u.start else (ws, ws)
    hours = (end - start) / 3600.0
    per_hour = (lambda x: x / hours) if hours > 0 else (lambda x: 0.0)
    total = float(m.total)
    return {
        "name": name,
        "properties": properties,
        "window": {"start": _rfc3339(ws), "end": _rfc3339(we)},
        "start": _rfc3339(start),
        "end": _rfc3339(end),
        "minutes": _r(hours * 60.0),
        "cpuCores": _r(per_hour(u.cpu_core_hours)),
        "cpuCoreRequestAverage": _r(per_hour(u.cpu_core_hours)),
        "cpuCoreUsageAverage": 0.0,
        "cpuCoreHours": _r(u.cpu_core_hours),
        "cpuCost": float(m.cpu),
        "cpuCostAdjustment": 0.0,
        "cpuEfficiency": 0.0,
        "gpuCount": _r(per_hour(u.gpu_hours)),
        "gpuHours": _r(u.gpu_hours),
        "gpuCost": float(m.gpu),
        "gpuCostAdjustment": 0.0,
        "networkTransferBytes": 0.0,
        "networkReceiveBytes": 0.0,
        "networkCost": 0.0,
        "networkCrossZoneCost": 0.0,
        "networkCrossRegionCost": 0.0,
        "networkInternetCost": 0.0,
        "networkCostAdjustment": 0.0,
        "loadBalancerCost": 0.0,
        "loadBalancerCostAdjustment": 0.0,
        "pvBytes": 0.0,
        "pvByteHours": 0.0,
        "pvCost": 0.0,
        "pvs": None,
        "pvCostAdjustment": 0.0,
        "ramBytes": _r(per_hour(u.ram_byte_hours)),
        "ramByteRequestAverage": _r(per_hour(u.ram_byte_hours)),
        "ramByteUsageAverage": 0.0,
        "ramByteHours": _r(u.ram_byte_hours),
        "ramCost": float(m.ram),
        "ramCostAdjustment": 0.0,
        "ramEfficiency": 0.0,
        "externalCost": 0.0,
        "sharedCost": 0.0,
        "totalCost": total,
        "totalEfficiency": 0.0,
    }


def response(sets: Iterable[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """OpenCost's envelope: ``{"code": 200, "status": "success", "data": [set, ...]}``."""
    return {"code": 200, "status": "success", "data": list(sets)}
