"""Daily cost anomalies: a day that spent clearly more than its baseline, and who caused it.

**Baseline.** For day ``t`` the baseline is the rolling mean of the previous ``window`` (7) days times
the day-of-week factor of ``t``'s weekday: ``baseline_t = mean(y[t-7:t]) · f_{weekday(t)}``. The
factor is the median, over the previous ``factor_weeks`` (8) weeks, of ``y_s / mean(y[s-7:s])`` for the
days ``s`` with the same weekday — so a Monday is compared with what Mondays usually are relative to
their week, and a quiet weekend does not make every Monday an anomaly. The median keeps a past spike
out of the factor. With fewer than two earlier same-weekday days the factor is 1. Days before
``min_history_days`` (21) are not judged.

**Anomaly.** Day ``t`` is an anomaly when ``y_t > baseline_t · (1 + threshold)`` (default 20 %) and
``y_t − baseline_t ≥ min_increase_usd`` (a dollar floor, so a 25 % rise on $3 raises nothing).

**Cause.** The same baseline is applied to each job and each team: ``baseline_{k,t} =
mean(y_k[t-7:t]) · f_{weekday(t)}`` with the *total's* factor, so the per-key increases
``y_{k,t} − baseline_{k,t}`` add up exactly to the total increase. The keys with the largest
positive increases are named (until they explain ``explain_share`` of the increase, at most
``top``), and the change that would bring the day back: stop the job (a job with no baseline is new)
or cap the team at its baseline — "saves $Z/day".

For the budgets engineer (alert emission)::

    from gpufleet.cost.anomaly import AnomalyConfig, scan_ledger
    found = scan_ledger(ledger, first_day_start=t0, days=n, config=AnomalyConfig(), as_of=now)
    for a in found:          # a.day, a.message, a.savings_usd_per_day, a.causes (dimension, key, increase)
        emit(kind="anomaly", scope="all", message=a.message, key=a.key)

``scan_ledger`` judges every day in the range (only complete days: end the range before today);
:func:`detect_anomalies` is the pure core over arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import numpy as np
import numpy.typing as npt

from gpufleet.cost.allocation import IDLE_KEY
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import daily_spend_reports
from gpufleet.errors import InputError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class AnomalyConfig:
    threshold: float = 0.20  # fraction above the baseline
    min_increase_usd: float = 50.0  # dollar floor on the increase
    window: int = 7  # days in the rolling baseline
    factor_weeks: int = 8  # weeks of same-weekday history for the day-of-week factor
    min_history_days: int = 21
    top: int = 3  # causes named per dimension
    explain_share: float = 0.8  # name causes until they explain this share of the increase

    def __post_init__(self) -> None:
        if self.threshold < 0:
            raise InputError("threshold must be >= 0", field="threshold")
        if self.min_increase_usd < 0:
            raise InputError("min_increase_usd must be >= 0", field="min_increase_usd")
        if self.window < 1 or self.factor_weeks < 1 or self.top < 1:
            raise InputError("window, factor_weeks and top must be >= 1", field="window")
        if self.min_history_days < self.window:
            raise InputError("min_history_days must be >= window", field="min_history_days")


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Daily spend of one dimension (e.g. ``team``): ``keys`` and ``matrix[days, keys]`` in USD."""

    dimension: str
    keys: Sequence[str]
    matrix: FloatArray


@dataclass(frozen=True, slots=True)
class Cause:
    dimension: str  # "team" | "job_id" | ...
    key: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    share_of_increase: float


@dataclass(frozen=True, slots=True)
class Anomaly:
    day: date
    day_index: int
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    increase_pct: float
    causes: tuple[Cause, ...]
    action: str
    savings_usd_per_day: float
    message: str
    key: str = field(default="")  # stable id: "anomaly:<day>"


def seasonal_baseline(y: FloatArray, window: int = 7, factor_weeks: int = 8) -> tuple[FloatArray, FloatArray]:
    """``(rolling_mean, factor)`` per day (NaN where there are fewer than ``window`` earlier days)."""
    n = y.size
    csum = np.concatenate([[0.0], np.cumsum(y)])
    roll = np.full(n, np.nan)
    idx = np.arange(window, n)
    roll[idx] = (csum[idx] - csum[idx - window]) / window
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(roll > 0, y / roll, np.nan)
    factor = np.ones(n)
    for t in range(n):
        past = t - 7 * np.arange(1, factor_weeks + 1)
        past = past[past >= window]
        vals = ratio[past]
        vals = vals[np.isfinite(vals)]
        if vals.size >= 2:
            factor[t] = float(np.median(vals))
    return roll, factor


def detect_anomalies(
    totals: Sequence[float] | FloatArray,
    breakdowns: Sequence[Breakdown],
    first_day: date,
    config: AnomalyConfig | None = None,
) -> list[Anomaly]:
    """Anomalous days of ``totals`` (day 0 = ``first_day``), with causes from ``breakdowns``."""
    cfg = config or AnomalyConfig()
    y = np.asarray(totals, dtype=np.float64)
    roll, factor = seasonal_baseline(y, cfg.window, cfg.factor_weeks)
    base = roll * factor
    out: list[Anomaly] = []
    for t in range(max(cfg.min_history_days, cfg.window), y.size):
        b = float(base[t])
        if not np.isfinite(b):
            continue
        inc = float(y[t]) - b
        if not (y[t] > b * (1 + cfg.threshold) and inc >= cfg.min_increase_usd):
            continue
        causes: list[Cause] = []
        for bd in breakdowns:
            m = np.asarray(bd.matrix, dtype=np.float64)
            k_base = m[t - cfg.window : t].mean(axis=0) * factor[t]
            k_inc = m[t] - k_base
            order = np.argsort(-k_inc, kind="stable")
            explained = 0.0
            for j in order[: cfg.top]:
                if k_inc[j] <= 0 or bd.keys[j] == IDLE_KEY:
                    continue
                causes.append(
                    Cause(
                        bd.dimension,
                        bd.keys[j],
                        float(m[t, j]),
                        float(k_base[j]),
                        float(k_inc[j]),
                        float(k_inc[j] / inc),
                    )
                )
                explained += float(k_inc[j])
                if explained >= cfg.explain_share * inc:
                    break
        day = first_day.fromordinal(first_day.toordinal() + t)
        action, savings = _action(causes, inc)
        pct = inc / b if b > 0 else float("inf")
        who = "; ".join(
            f"{_label(c.dimension)} {c.key} +${c.increase_usd:,.2f} ({c.share_of_increase:.0%})" for c in causes
        )
        msg = (
            f"{day.isoformat()}: spend ${y[t]:,.2f} is {pct:.0%} above its baseline ${b:,.2f} "
            f"(+${inc:,.2f}). Rose most: {who or 'no single job or team'}. {action}"
        )
        out.append(
            Anomaly(day, t, float(y[t]), b, inc, pct, tuple(causes), action, savings, msg, f"anomaly:{day.isoformat()}")
        )
    return out


def _label(dimension: str) -> str:
    return {"job_id": "job", "team": "team"}.get(dimension, dimension)


def _action(causes: Sequence[Cause], increase: float) -> tuple[str, float]:
    """The change that brings the day back: the top job (stop it / cap it) or else the top team."""
    jobs = [c for c in causes if c.dimension == "job_id"]
    teams = [c for c in causes if c.dimension == "team"]
    if jobs:
        j = jobs[0]
        if j.baseline_usd <= 0.005:
            return f"Stop job {j.key} (new; ${j.spend_usd:,.2f}/day): saves ${j.increase_usd:,.2f}/day.", j.increase_usd
        return (
            f"Cap job {j.key} at its baseline ${j.baseline_usd:,.2f}/day: saves ${j.increase_usd:,.2f}/day.",
            j.increase_usd,
        )
    if teams:
        t = teams[0]
        return (
            f"Cap team {t.key} at its baseline ${t.baseline_usd:,.2f}/day: saves ${t.increase_usd:,.2f}/day.",
            t.increase_usd,
        )
    return f"No single cause; the increase is ${increase:,.2f}/day spread over many jobs.", 0.0


@dataclass(frozen=True, slots=True)
class KeyFilter:
    """Only the ledger rows whose ``dimension`` key passes ``match`` count, in the totals and as
    causes: a budget's scope (``team`` = "vision", ``label:cost-center`` = "42", every row for
    ``all``). Idle capacity is never a row, so a filtered total is attributed spend only.
    ``team``: also only that team's rows (a team-owned project or label scope)."""

    dimension: str
    match: Callable[[str], bool]
    team: str | None = None


def scan_ledger(
    ledger: Ledger,
    *,
    first_day_start: float,
    days: int,
    config: AnomalyConfig | None = None,
    as_of: float | None = None,
    dimensions: Sequence[str] = ("team", "job_id"),
    team: str | None = None,
    where: KeyFilter | None = None,
    first_day: date | None = None,
    rules: PricingRules | None = None,
) -> list[Anomaly]:
    """Anomalies of the ledger's daily spend over ``days`` days from ``first_day_start`` (seconds; the
    start of a day in the wanted time zone). Causes by each of ``dimensions``.

    One :func:`~gpufleet.cost.spend.spend_report` per day (priced with ``rules``, the server's
    pricing rules, as ``/v1/usage`` is) grouped by all dimensions at once; each dimension's matrix
    is a fold of it. Totals are the nodes' cost (idle included) — or, with ``team``, that team's
    attributed spend (and only its rows are causes); ``where`` filters the same way on any
    dimension (a budget's scope) without making it a cause dimension. ``first_day`` is the calendar
    date of day 0 (default: ``first_day_start``'s UTC date — pass it when days start at local
    midnight east of UTC, where that would be the day before).
    """
    if days < 0:
        raise InputError("days must be >= 0", field="days")
    if team is not None and where is not None:
        raise InputError("give team or where, not both", field="team")
    dims = tuple(dimensions)
    if team is not None:
        if "team" not in dims:
            dims = ("team", *dims)
        where = KeyFilter("team", lambda k: k == team)
    group = dims if where is None or where.dimension in dims else (*dims, where.dimension)
    if where is not None and where.team is not None and "team" not in group:
        group = (*group, "team")
    per_dim: list[dict[str, dict[int, float]]] = [{} for _ in dims]
    totals = np.zeros(days)
    f_idx = -1 if where is None else group.index(where.dimension)
    t_idx = -1 if where is None or where.team is None else group.index("team")
    reports = daily_spend_reports(ledger, first_day_start, days, aggregate=group, rules=rules, as_of=as_of)
    for d, rep in enumerate(reports):
        if where is None:
            totals[d] = float(rep.totals.total_cost_usd)
        for row in rep.rows:
            if where is not None and not where.match(row.key[f_idx]):
                continue
            if where is not None and where.team is not None and row.key[t_idx] != where.team:
                continue
            v = float(row.total_cost_usd)
            if where is not None:
                totals[d] += v
            for i in range(len(dims)):
                k = row.key[i]
                per_dim[i].setdefault(k, {})
                per_dim[i][k][d] = per_dim[i][k].get(d, 0.0) + v
    breakdowns = [_breakdown(dim, per_dim[i], days) for i, dim in enumerate(dims)]
    first = first_day if first_day is not None else datetime.fromtimestamp(first_day_start, UTC).date()
    return detect_anomalies(totals, breakdowns, first, config)


def _breakdown(dimension: str, data: Mapping[str, Mapping[int, float]], days: int) -> Breakdown:
    keys = sorted(data)
    m = np.zeros((days, len(keys)))
    for j, k in enumerate(keys):
        for d, v in data[k].items():
            m[d, j] = v
    return Breakdown(dimension, keys, m)
