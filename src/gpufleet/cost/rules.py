"""Pricing rules: time-of-day tariffs, priority chargeback, reserved commitments, on-prem and spot
price overrides — loaded from YAML, validated, and applied to a ledger before :func:`allocate`.

Why a transformation of the ledger and not rules inside ``allocate``: every rule but one changes
what a *node* costs for a stretch of time. Splitting the node intervals (and the segments on them)
at the rule's edges and giving each piece its exact price lets the one pricing function
(:func:`~gpufleet.cost.pricesplit.split_node_price`) and the one allocation (:func:`allocate`) stay as
they are, so conservation (attributed + idle = what the nodes cost) holds by the same code that
the ledger tests prove. The one rule that does not change what a node costs — the priority
multiplier, a chargeback policy on what a *job* is charged — is a post-pass in
:mod:`gpufleet.cost.spend` that reports the difference on its own line.

The rules (documented for users in ``docs/pricing.md``):

- **Node price** (the base): a per-node override (``nodes:``: a plain ``hourly_usd`` or an on-prem
  amortisation) wins; else, for a spot node, a per-GPU-model spot override
  (``spot_usd_per_gpu_hour:``) × its GPUs; else the price recorded on the ledger (the node's own
  or the catalog's).
- **Reserved commitments** (``reservations:``): a reservation costs ``hourly_usd`` for every hour
  of ``[start, end)``, used or not. Reserved nodes (capacity type ``reserved``) of its GPU model
  are covered by it: while the nodes present hold P GPUs and the active commitments G GPUs at H $/h
  in all, a covered node of n GPUs costs ``H / G × n`` per hour when P ≤ G (the commitment's price
  per GPU), and the commitment that no node holds, ``H × (1 − P / G)``, is *unused commitment*
  reported per reservation (in proportion to their hourly prices). When P > G, the commitment
  covers the fraction G / P of every such node and the rest is billed at the node's base price.
  Either way, covered node cost + unused commitment = the commitment's cost, exactly.
- **Time-of-day windows** (``windows:``), evaluated in the named ``timezone`` (DST-correct: the
  window edges are local wall-clock times, so a 22:00–06:00 window is 7 real hours on the night
  clocks go forward and 9 on the night they go back). A window with ``end`` ≤ ``start`` wraps
  midnight; ``days`` name the local weekday on which an occurrence *starts*. At any instant the
  first window in the list that contains it sets the multiplier; no window: 1. A window multiplies
  the node's base price (a time-of-use tariff) for nodes whose capacity type is in ``applies_to``
  (default on-demand and spot), except nodes with a per-node override (a fixed amortised price)
  and reserved nodes covered by a commitment (a fixed price by contract). A local time that does
  not exist (the skipped hour of a spring-forward night) is read with the offset before the change;
  an ambiguous one (the repeated hour) as its first occurrence.
- **Priority multipliers** (``priority_multipliers:``): see :mod:`gpufleet.cost.spend`.

All prices are exact (``Fraction``) from the decimals written in the file.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.config import read_yaml_text
from gpufleet.errors import ConfigError
from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.model.node import CapacityType

from .ledger import US_PER_HOUR, Ledger, NodeInterval, UsageSegment, to_us

HOURS_PER_YEAR = 8760  # 365 days: the amortisation year (documented in docs/pricing.md)
HOURS_PER_MONTH = Fraction(HOURS_PER_YEAR, 12)  # 730
DAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
SECTION = "pricing"  # a rules file may hold the rules at its top level or under this key

Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
PriorityName = Literal["background", "low", "normal", "high", "urgent"]
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$|^24:00$")
_Name = Annotated[str, Field(min_length=1, max_length=63)]
_Money = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]


# -- the file's schema ----------------------------------------------------------------------------


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _clock_time(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):  # YAML 1.1 reads 22:00 as 1320 (base 60)
        raise ValueError('write times in quotes, e.g. "22:00" (unquoted, YAML reads 22:00 as a number)')
    if not isinstance(v, str) or not _HHMM.match(v):
        raise ValueError(f'expected a time "HH:MM" (00:00..23:59, or 24:00 for an end), got {v!r}')
    return v


class WindowConfig(_Cfg):
    """A time-of-day window: ``[start, end)`` local time, wrapping midnight when ``end`` ≤ ``start``."""

    name: _Name
    start: str
    end: str
    days: list[Day] | None = None  # local weekday an occurrence starts on; None: every day
    multiplier: Annotated[Decimal, Field(ge=0, le=1000, allow_inf_nan=False)]

    _check_times = field_validator("start", "end", mode="before")(_clock_time)

    @field_validator("start")
    @classmethod
    def _not_24(cls, v: str) -> str:
        if v == "24:00":
            raise ValueError('a window starts at 00:00..23:59 ("24:00" is only an end)')
        return v


class ReservationConfig(_Cfg):
    """A commitment: ``gpus`` GPUs of ``gpu_model`` at ``hourly_usd`` for all of them, used or not."""

    name: _Name
    gpu_model: str
    gpus: Annotated[int, Field(gt=0, le=1_000_000)]
    hourly_usd: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]
    start: datetime | date  # a date: local midnight in the rules' time zone
    end: datetime | date | None = None  # None: open-ended

    @field_validator("gpu_model")
    @classmethod
    def _model(cls, v: str) -> str:
        return _canonical(v)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _date(cls, v: Any) -> Any:
        if isinstance(v, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v.strip()):
            return date.fromisoformat(v.strip())  # a bare date, not a naive midnight
        return v

    @field_validator("start", "end")
    @classmethod
    def _aware(cls, v: datetime | date | None) -> datetime | date | None:
        if isinstance(v, datetime) and v.tzinfo is None:
            raise ValueError("a time needs a zone (e.g. 2026-01-01T00:00:00Z), or give a date")
        return v


class NodePriceConfig(_Cfg):
    """A node's own price: ``hourly_usd``, or an on-prem server's amortisation plus power and ops."""

    hourly_usd: _Money | None = None
    purchase_usd: _Money | None = None
    lifetime_years: Annotated[Decimal, Field(gt=0, le=100, allow_inf_nan=False)] | None = None
    power_kw: _Money = Decimal(0)  # average draw of the server
    pue: Annotated[Decimal, Field(ge=1, le=10, allow_inf_nan=False)] = Decimal(1)  # data-centre overhead
    usd_per_kwh: _Money = Decimal(0)
    ops_usd_per_month: _Money = Decimal(0)  # rack, support contract, staff share

    @model_validator(mode="after")
    def _one_form(self) -> NodePriceConfig:
        amortised = self.purchase_usd is not None or self.lifetime_years is not None
        if self.hourly_usd is not None and (amortised or self.power_kw or self.ops_usd_per_month):
            raise ValueError("give either hourly_usd or an on-prem breakdown (purchase_usd, lifetime_years, ...)")
        if self.hourly_usd is None and (self.purchase_usd is None or self.lifetime_years is None):
            raise ValueError("an on-prem price needs purchase_usd and lifetime_years (or give hourly_usd)")
        return self


class PricingConfig(_Cfg):
    """The rules file (see the module docstring and docs/pricing.md)."""

    timezone: str = "UTC"
    applies_to: list[CapacityType] = Field(default_factory=lambda: [CapacityType.ON_DEMAND, CapacityType.SPOT])
    windows: Annotated[list[WindowConfig], Field(max_length=64)] = Field(default_factory=list)
    priority_multipliers: dict[PriorityName, Annotated[Decimal, Field(ge=0, le=1000, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    reservations: list[ReservationConfig] = Field(default_factory=list)
    nodes: dict[Annotated[str, Field(min_length=1)], NodePriceConfig] = Field(default_factory=dict)
    spot_usd_per_gpu_hour: dict[str, Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {v!r} (an IANA name such as America/New_York or UTC)") from None
        return v

    @field_validator("spot_usd_per_gpu_hour")
    @classmethod
    def _spot_models(cls, v: dict[str, Decimal]) -> dict[str, Decimal]:
        return {_canonical(k): p for k, p in v.items()}

    @model_validator(mode="after")
    def _unique(self) -> PricingConfig:
        for what, names in (
            ("window", [w.name for w in self.windows]),
            ("reservation", [r.name for r in self.reservations]),
        ):
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"{what} name {sorted(dup)[0]!r} is used twice")
        for r in self.reservations:
            if r.end is not None and _as_utc(r.end) <= _as_utc(r.start):
                raise ValueError(f"reservation {r.name!r}: end must be after start")
        return self


def _as_utc(v: datetime | date) -> datetime:
    """For ordering checks only: a date as its UTC midnight."""
    return v if isinstance(v, datetime) else datetime.combine(v, time(0), tzinfo=UTC)


def _canonical(name: str) -> str:
    canon = canonical_gpu_name(name)
    if canon is None:
        raise ValueError(f"unknown GPU type {name!r} (known: {', '.join(GPU_MODELS)})")
    return canon


# -- compiled rules -------------------------------------------------------------------------------


def _fr(d: Decimal) -> Fraction:
    return Fraction(d)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    name: str
    start: time
    end: time | None  # None: 24:00
    days: frozenset[int] | None  # weekday numbers (Monday 0); None: every day
    multiplier: Fraction


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    gpu_model: str
    gpus: int
    hourly_usd: Fraction
    start: float  # UNIX seconds
    end: float  # math.inf: open-ended


@dataclass(frozen=True, slots=True)
class NodePrice:
    """A node's own hourly price, with where it comes from (the parts add up to ``hourly_usd``)."""

    hourly_usd: Fraction
    breakdown: Mapping[str, Fraction]  # e.g. amortisation, power, ops; or hourly

    @classmethod
    def from_config(cls, c: NodePriceConfig) -> NodePrice:
        """Amortisation = purchase / (lifetime × 8760 h); power = kW × PUE × $/kWh;
        ops = $/month × 12 / 8760 h."""
        if c.hourly_usd is not None:
            return cls(_fr(c.hourly_usd), {"hourly": _fr(c.hourly_usd)})
        assert c.purchase_usd is not None and c.lifetime_years is not None
        parts = {
            "amortisation": _fr(c.purchase_usd) / (_fr(c.lifetime_years) * HOURS_PER_YEAR),
            "power": _fr(c.power_kw) * _fr(c.pue) * _fr(c.usd_per_kwh),
            "ops": _fr(c.ops_usd_per_month) / HOURS_PER_MONTH,
        }
        return cls(sum(parts.values(), Fraction(0)), parts)


@dataclass(frozen=True)
class PricingRules:
    """Validated, compiled pricing rules. Build with :func:`load_rules` or :func:`compile_rules`."""

    config: PricingConfig
    source: str
    zone: ZoneInfo
    applies_to: frozenset[CapacityType]
    windows: tuple[TimeWindow, ...]
    priority_multipliers: Mapping[str, Fraction]
    reservations: tuple[Reservation, ...]
    node_prices: Mapping[str, NodePrice]
    spot_usd_per_gpu_hour: Mapping[str, Fraction]

    def priority_multiplier(self, priority_class: str) -> Fraction:
        """What a job of ``priority_class`` is charged per dollar of what it holds (default 1)."""
        return self.priority_multipliers.get(priority_class, Fraction(1))

    @property
    def has_priority_multipliers(self) -> bool:
        return any(m != 1 for m in self.priority_multipliers.values())

    def base_price(self, iv: NodeInterval) -> tuple[Fraction, bool]:
        """A node interval's hourly price before windows and reservations, and whether it is a
        per-node override (exempt from windows and reservations)."""
        own = self.node_prices.get(iv.node)
        if own is not None:
            return own.hourly_usd, True
        if iv.capacity_type is CapacityType.SPOT and iv.gpu_count > 0:
            spot = self.spot_usd_per_gpu_hour.get(canonical_gpu_name(iv.gpu_model) or iv.gpu_model)
            if spot is not None:
                return spot * iv.gpu_count, False
        if iv.exact_hourly_usd is not None:
            return Fraction(iv.exact_hourly_usd), False
        return Fraction(repr(float(iv.hourly_usd))), False

    def timeline(self, start: float, end: float) -> list[tuple[float, float, Fraction, str | None]]:
        """``[start, end)`` cut into pieces of one multiplier each: ``(t0, t1, multiplier, window)``.

        Adjacent pieces with the same window are merged."""
        if end <= start:
            return []
        if not self.windows:
            return [(start, end, Fraction(1), None)]
        occ: list[list[tuple[float, float]]] = [[] for _ in self.windows]
        edges = {start, end}
        first = datetime.fromtimestamp(start, self.zone).date() - timedelta(days=1)
        last = datetime.fromtimestamp(end, self.zone).date()
        d = first
        while d <= last:
            for i, w in enumerate(self.windows):
                if w.days is not None and d.weekday() not in w.days:
                    continue
                a = datetime.combine(d, w.start, tzinfo=self.zone).timestamp()
                if w.end is None:
                    end_day, end_t = d + timedelta(days=1), time(0)
                else:
                    end_day = d if w.end > w.start else d + timedelta(days=1)
                    end_t = w.end
                b = datetime.combine(end_day, end_t, tzinfo=self.zone).timestamp()
                if b <= a or b <= start or a >= end:
                    continue
                occ[i].append((a, b))
                edges.update(t for t in (a, b) if start < t < end)
            d += timedelta(days=1)
        starts = [[o[0] for o in lst] for lst in occ]
        cuts = sorted(edges)
        out: list[tuple[float, float, Fraction, str | None]] = []
        for t0, t1 in itertools.pairwise(cuts):
            mid = (t0 + t1) / 2
            mult, name = Fraction(1), None
            for i, w in enumerate(self.windows):
                # One window's occurrences never overlap (each starts on its own local day and
                # lasts at most until the same time the next day), so the candidate is the last
                # one that starts at or before ``mid``.
                k = bisect.bisect_right(starts[i], mid) - 1
                if k >= 0 and occ[i][k][0] <= mid < occ[i][k][1]:
                    mult, name = w.multiplier, w.name
                    break
            if out and out[-1][3] == name and out[-1][2] == mult:
                out[-1] = (out[-1][0], t1, mult, name)
            else:
                out.append((t0, t1, mult, name))
        return out


def compile_rules(config: PricingConfig, *, source: str = "pricing rules") -> PricingRules:
    """The rules of a validated config, with exact prices and the zone loaded."""
    zone = ZoneInfo(config.timezone)
    windows = tuple(
        TimeWindow(
            w.name,
            _parse_hhmm(w.start),
            None if w.end == "24:00" else _parse_hhmm(w.end),
            None if w.days is None else frozenset(DAYS.index(d) for d in w.days),
            _fr(w.multiplier),
        )
        for w in config.windows
    )

    def instant(v: datetime | date | None, default: float) -> float:
        if v is None:
            return default
        if isinstance(v, datetime):
            return v.timestamp()
        return datetime.combine(v, time(0), tzinfo=zone).timestamp()

    reservations = tuple(
        Reservation(r.name, r.gpu_model, r.gpus, _fr(r.hourly_usd), instant(r.start, 0.0), instant(r.end, math.inf))
        for r in config.reservations
    )
    return PricingRules(
        config=config,
        source=source,
        zone=zone,
        applies_to=frozenset(config.applies_to),
        windows=windows,
        priority_multipliers={k: _fr(v) for k, v in config.priority_multipliers.items()},
        reservations=reservations,
        node_prices={name: NodePrice.from_config(c) for name, c in config.nodes.items()},
        spot_usd_per_gpu_hour={k: _fr(v) for k, v in config.spot_usd_per_gpu_hour.items()},
    )


def _parse_hhmm(text: str) -> time:
    h, m = text.split(":")
    return time(int(h), int(m))


# -- loading --------------------------------------------------------------------------------------


def load_rules(data: Mapping[str, Any] | str | Path, *, source: str | None = None) -> PricingRules:
    """Rules from a YAML file (a ``str`` or ``Path`` is a path) or a mapping. The file may hold the
    rules at its top level or under ``pricing:``. Errors are :class:`ConfigError` naming the file,
    the line (for a file) and the field."""
    text: str | None = None
    prefix: list[str | int] = []
    if isinstance(data, str | Path):
        source = source or str(data)
        data, text = read_yaml_text(Path(data), source)
        if isinstance(data, dict) and isinstance(data.get(SECTION), dict):
            data, prefix = data[SECTION], [SECTION]
    source = source or "pricing rules"
    if not isinstance(data, Mapping):
        raise ConfigError("pricing rules must be a mapping", source=source)
    try:
        config = PricingConfig.model_validate(dict(data))
    except ValidationError as e:
        raise _config_error(e, source, text, prefix) from None
    return compile_rules(config, source=source)


def rules_from_setting(value: Path | str | PricingConfig | Mapping[str, Any] | None) -> PricingRules | None:
    """The rules a server setting names: a path to a rules file, inline rules, or none."""
    if value is None:
        return None
    if isinstance(value, PricingConfig):
        return compile_rules(value, source="settings: pricing")
    if isinstance(value, Mapping):
        return load_rules(value, source="settings: pricing")
    return load_rules(Path(value))


def _config_error(err: ValidationError, source: str, text: str | None, prefix: list[str | int]) -> ConfigError:
    first = err.errors()[0]
    loc = [p for p in first["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal[", "[key]")))]
    name = ".".join(str(p) for p in loc) or "(root)"
    more = f" (and {len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    line = _yaml_line(text, [*prefix, *loc]) if text is not None else None
    msg = str(first["msg"]).removeprefix("Value error, ")
    return ConfigError(msg + more, source=source, line=line, field=name)


def _yaml_line(text: str, path: Sequence[str | int]) -> int | None:
    """The line of the deepest node of ``path`` that the YAML text has (1-based)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None if node is None else node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


# -- application ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReservationPiece:
    """A stretch of a reservation: ``[start, end)`` with the share of it no node held."""

    start: float
    end: float
    unused_fraction: Fraction  # 0..1 of the commitment held by no reserved node


@dataclass(frozen=True, slots=True)
class ReservationCost:
    """A reservation's cost in a window (exact). ``covered = committed − unused`` is what the
    reserved nodes it covered cost."""

    name: str
    gpu_model: str
    gpus: int
    committed_gpu_hours: Fraction
    committed_usd: Fraction
    unused_usd: Fraction


@dataclass(frozen=True)
class PricedLedger:
    """A ledger with the rules' prices: closed records clipped to ``[start, end]``, every node
    interval cut where its price changes. Pass ``ledger`` to :func:`allocate` with the same window."""

    ledger: Ledger
    start: float
    end: float
    rules: PricingRules
    reservation_pieces: Mapping[str, tuple[ReservationPiece, ...]] = field(default_factory=dict)

    def reservation_costs(self, start: float | None = None, end: float | None = None) -> list[ReservationCost]:
        """Each reservation's committed and unused cost within ``[start, end]`` (default: all)."""
        lo = to_us(self.start if start is None else max(start, self.start))
        hi = to_us(self.end if end is None else min(end, self.end))
        out = []
        for r in self.rules.reservations:
            committed_us = 0
            unused = Fraction(0)
            for p in self.reservation_pieces.get(r.name, ()):
                dur = min(to_us(p.end), hi) - max(to_us(p.start), lo)
                if dur <= 0:
                    continue
                committed_us += dur
                unused += r.hourly_usd * p.unused_fraction * dur / US_PER_HOUR
            out.append(
                ReservationCost(
                    r.name,
                    r.gpu_model,
                    r.gpus,
                    Fraction(r.gpus * committed_us, US_PER_HOUR),
                    r.hourly_usd * committed_us / US_PER_HOUR,
                    unused,
                )
            )
        return out


_Piece = tuple[float, float, Fraction]  # (start, end, exact hourly price)


def apply_rules(
    ledger: Ledger, start: float, end: float, rules: PricingRules, *, as_of: float | None = None
) -> PricedLedger:
    """The ledger of ``[start, end)`` (as of ``as_of``, like :func:`allocate`) with ``rules``'
    prices: node intervals cut at window, reservation and node edges, each piece at its exact price,
    and the segments cut at the same edges. What is open ends at ``as_of`` (default ``end``)."""
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise ConfigError(f"bad window [{start}, {end}]", field="window_end")
    cut = end if as_of is None else min(end, as_of)
    cut = max(cut, start)
    open_end = end if as_of is None else as_of

    clipped: list[tuple[NodeInterval, NodeInterval]] = []  # (original, clipped)
    for iv in ledger.node_intervals(as_of=open_end):
        a, b = max(iv.start, start), min(iv.end, cut)
        if b > a:  # a zero-length stretch costs nothing and holds no segment of positive length
            clipped.append((iv, replace(iv, start=a, end=b)))

    tod = rules.timeline(start, cut)
    tod_starts = [p[0] for p in tod]
    base: dict[int, tuple[Fraction, bool]] = {i: rules.base_price(orig) for i, (orig, _) in enumerate(clipped)}

    # Reservations: per GPU model, a sweep over the reserved nodes present and the commitments.
    covered: dict[int, list[_Piece]] = {}
    res_pieces: dict[str, list[ReservationPiece]] = {r.name: [] for r in rules.reservations}
    for model in sorted({r.gpu_model for r in rules.reservations}):
        resv = [r for r in rules.reservations if r.gpu_model == model]
        nodes = [
            i
            for i, (_, iv) in enumerate(clipped)
            if iv.capacity_type is CapacityType.RESERVED
            and iv.gpu_count > 0
            and (canonical_gpu_name(iv.gpu_model) or iv.gpu_model) == model
            and not base[i][1]
        ]
        edges = {start, cut}
        for r in resv:
            edges.update(t for t in (r.start, r.end) if start < t < cut)
        for i in nodes:
            edges.update((clipped[i][1].start, clipped[i][1].end))
        cuts = sorted(edges)
        for t0, t1 in itertools.pairwise(cuts):
            if t1 <= t0:
                continue
            active = [r for r in resv if r.start <= t0 and t1 <= r.end]
            if not active:
                continue
            present = [i for i in nodes if clipped[i][1].start <= t0 and t1 <= clipped[i][1].end]
            g = sum(r.gpus for r in active)
            h = sum((r.hourly_usd for r in active), Fraction(0))
            p = sum(clipped[i][1].gpu_count for i in present)
            unused = Fraction(g - p, g) if p < g else Fraction(0)
            for r in active:
                res_pieces[r.name].append(ReservationPiece(t0, t1, unused))
            for i in present:
                n = clipped[i][1].gpu_count
                price = h * n / g if p <= g else h * n / p + (1 - Fraction(g, p)) * base[i][0]
                covered.setdefault(i, []).append((t0, t1, price))

    # Every interval's pieces: reservation-covered stretches as priced above, the rest at the base
    # price times the window multiplier (for the capacity types the windows apply to).
    new = Ledger()
    pieces_of: dict[str, list[tuple[NodeInterval, list[_Piece]]]] = {}
    for i, (orig, iv) in enumerate(clipped):
        price0, own = base[i]
        windows_apply = not own and iv.capacity_type in rules.applies_to
        pieces: list[_Piece] = []
        t = iv.start
        for a, b, price in sorted(covered.get(i, [])):
            if a > t:
                _fill(pieces, t, a, price0, tod if windows_apply else None, tod_starts)
            pieces.append((a, b, price))
            t = b
        if t < iv.end:
            _fill(pieces, t, iv.end, price0, tod if windows_apply else None, tod_starts)
        merged: list[_Piece] = []
        for pc in pieces:
            if merged and merged[-1][2] == pc[2] and merged[-1][1] == pc[0]:
                merged[-1] = (merged[-1][0], pc[1], pc[2])
            else:
                merged.append(pc)
        for a, b, price in merged:
            new.add_node(replace(iv, start=a, end=b, hourly_usd=float(price), exact_hourly_usd=price))
        pieces_of.setdefault(iv.node, []).append((orig, merged))

    for seg in ledger.segments(as_of=open_end):
        a, b = max(seg.start, start), min(seg.end, cut)
        if b <= a:
            continue
        home = [m for orig, m in pieces_of.get(seg.node, ()) if orig.start <= seg.start and seg.end <= orig.end]
        if not home:  # the original ledger guarantees a home; one outside the window has none
            continue
        merged = home[0]
        k = max(0, bisect.bisect_right([pc[0] for pc in merged], a) - 1)
        while k < len(merged) and merged[k][0] < b:
            lo, hi = max(a, merged[k][0]), min(b, merged[k][1])
            if hi > lo:
                new.append(_cut_segment(seg, lo, hi, merged[k][2]))
            k += 1
    return PricedLedger(new, start, cut, rules, {k: tuple(v) for k, v in res_pieces.items()})


def _fill(
    pieces: list[_Piece],
    a: float,
    b: float,
    price: Fraction,
    tod: list[tuple[float, float, Fraction, str | None]] | None,
    tod_starts: list[float],
) -> None:
    """Append ``[a, b)`` at ``price``, times the window multipliers of ``tod`` when given."""
    if tod is None:
        pieces.append((a, b, price))
        return
    k = max(0, bisect.bisect_right(tod_starts, a) - 1)
    while k < len(tod) and tod[k][0] < b:
        lo, hi = max(a, tod[k][0]), min(b, tod[k][1])
        if hi > lo:
            pieces.append((lo, hi, price * tod[k][2]))
        k += 1


def _cut_segment(seg: UsageSegment, start: float, end: float, price: Fraction) -> UsageSegment:
    return replace(seg, start=start, end=end, node_hourly_usd=float(price))


__all__ = [
    "DAYS",
    "HOURS_PER_YEAR",
    "PRIORITY_CLASSES",
    "NodePrice",
    "NodePriceConfig",
    "PricedLedger",
    "PricingConfig",
    "PricingRules",
    "Reservation",
    "ReservationConfig",
    "ReservationCost",
    "ReservationPiece",
    "TimeWindow",
    "WindowConfig",
    "apply_rules",
    "compile_rules",
    "load_rules",
    "rules_from_setting",
]
