"""Allocation: what the nodes of a ledger cost in a window, attributed to groups of jobs.

:func:`allocate` is the low-level step of :func:`gpufleet.cost.spend.spend_report` — the one
function every figure of money comes from. Nothing else calls it (a test enforces this): budgets,
forecasts, anomalies, ROI and the API all read money through :mod:`gpufleet.cost.spend`, so they
all apply the same pricing rules.

Costs are exact fractions until the end, then rounded to cents with the largest-remainder method,
so the rounded lines add up exactly to the rounded node cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from gpufleet.errors import InputError
from gpufleet.model.gpu import MILLI
from gpufleet.model.node import CapacityType
from gpufleet.model.share import gpu_units

from .ledger import MIB_PER_GIB, SHARE_UNITS, US_PER_HOUR, US_PER_S, Ledger, UsageSegment, exact_price, to_us
from .pricesplit import DEFAULT_UNIT_PRICES, PriceSplit, UnitPrices, split_node_price

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


@dataclass(frozen=True, slots=True)
class CostLine:
    """One row of an allocation. Money in USD rounded to cents; the components add up to the total."""

    key: tuple[str, ...]
    gpu_cost_usd: Decimal
    cpu_cost_usd: Decimal
    memory_cost_usd: Decimal
    total_cost_usd: Decimal
    gpu_seconds: float  # GPU-share-seconds held (idle row: not held)
    # the cost before rounding (a limit is reached when this reaches it, not when a cent rounds up)
    exact_usd: Fraction = field(default=Fraction(0), compare=False)


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
    ws, we = to_us(window_start), max(to_us(window_start), to_us(cut))
    oe = to_us(open_end)

    # 1. Price each interval once (one split per distinct node shape and price) and sum what the
    #    nodes offered in the window: per split, GPU-, CPU- and memory-microseconds and node cost.
    split_of: dict[tuple[Fraction, int, int, int, CapacityType], int] = {}
    splits: list[PriceSplit] = []
    interval_split: list[int] = []
    capacity: dict[int, list[int]] = {}  # split → [gpu units·us, cpu milli·us, mib·us]
    node_cost = Fraction(0)
    for iv in ledger._intervals:
        price = iv.exact_price if iv.exact_price is not None else exact_price(iv.hourly_usd, "hourly_usd")
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
        cap[0] += gpu_units(iv.gpu_count) * dur
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
        s, e = to_us(op.start), oe if iv_end is None else min(oe, iv_end)
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
                key,
                _usd(comps[0]),
                _usd(comps[1]),
                _usd(comps[2]),
                _usd(cents),
                held_units / (SHARE_UNITS * US_PER_S),
                Fraction(sum(r), den),
            )
        )
    totals = CostLine(
        ("__total__",) * len(keyfns),
        _usd(col[0]),
        _usd(col[1]),
        _usd(col[2]),
        _usd(sum(totals_cents)),
        (sum(gpu_us.values()) + idle_units) / (SHARE_UNITS * US_PER_S),
        node_cost,
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
