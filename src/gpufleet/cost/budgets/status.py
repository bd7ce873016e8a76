"""Budget status and enforcement verdicts: spend against the limit, thresholds crossed, alert
texts and dedup keys, whether an action is in force, and the block check of a submission.

Pure: the spend comes in (from :mod:`gpufleet.cost.spend`), nothing is read or written here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpufleet.cost.periods import DAY_S, Period, iso
from gpufleet.errors import ConflictError

from .model import Budget, Threshold

LIMIT_PERCENT: Final = 100.0  # the threshold at which a budget is over (grace counts from it)
# The ``threshold`` an anomaly alert is stored under — one value, so the store's unique (budget,
# period start, threshold) makes it exactly once per budget per day (period start = the day's start).
ANOMALY_THRESHOLD: Final = -1.0
ANOMALY_PAYLOAD_KIND: Final = "budget_anomaly"  # the ``kind`` of an anomaly alert's notification payload


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """Where a budget stands at ``now`` in ``period``."""

    period: Period
    now: float
    limit_usd: float
    spend_usd: float  # metered so far in the period (the ledger)
    percent: float  # spend / limit x 100
    projected_usd: float  # period-end spend at the period's run rate so far, never below what is committed
    days_left: float
    remaining_usd: float  # limit - committed (limit - spend without a committed figure); negative when over
    crossed: tuple[Threshold, ...]  # thresholds at or below the spend
    projected_from_s: float = 0.0  # the seconds of history the projection's rate is measured over

    @property
    def over(self) -> bool:
        """At or over the limit, with the cent of tolerance the 100 % threshold has
        (:func:`crossed_thresholds`): the crossing and the verdict must agree."""
        return self.spend_usd + 0.005 >= self.limit_usd


def left_phrase(limit_usd: float, committed_usd: float) -> str:
    """What is left of a budget, said one way everywhere (the 402 of a blocked submit, ``budget
    check``, ``budget show``): ``limit − committed``, or how far over the limit it is."""
    left = limit_usd - committed_usd
    return f"${left:,.2f} left" if left >= -0.005 else f"${-left:,.2f} over the limit"


def budget_status(
    budget: Budget,
    period: Period,
    spend_usd: float,
    now: float,
    committed_usd: float | None = None,
    *,
    history_start: float | None = None,
) -> BudgetStatus:
    """Spend, percent used, projection and thresholds crossed.

    The projection extrapolates the average run rate so far (spend / elapsed) to the period's end:
    simple, explainable, and never below what is already spent — nor below ``committed_usd`` (spent
    plus the estimated rest of running and queued jobs), when given. The rate is measured since the
    period started or since ``history_start`` (the ledger's start), whichever is later: a server 24
    minutes old has spent at its rate for 24 minutes, not since the first of the month (days before
    it existed are not days it spent nothing). Before the period starts (custom periods) it is the
    spend itself; after it ends, the final spend. What is left is ``limit − committed`` (what a
    ``block`` checks against), else ``limit − spend``."""
    since = period.start if history_start is None else min(max(period.start, history_start), period.end)
    elapsed = min(max(now, since), period.end) - since
    projected = spend_usd if elapsed <= 0 else max(spend_usd, spend_usd / elapsed * (period.end - since))
    if committed_usd is not None and period.start <= now < period.end:
        projected = max(projected, committed_usd)
    percent = spend_usd / budget.limit_usd * 100.0
    return BudgetStatus(
        period=period,
        now=now,
        limit_usd=budget.limit_usd,
        spend_usd=spend_usd,
        percent=percent,
        projected_usd=projected,
        days_left=max(0.0, period.end - max(now, period.start)) / DAY_S,
        remaining_usd=budget.limit_usd - (spend_usd if committed_usd is None else committed_usd),
        crossed=crossed_thresholds(budget, spend_usd),
        projected_from_s=max(0.0, elapsed),
    )


def crossed_thresholds(budget: Budget, spend_usd: float) -> tuple[Threshold, ...]:
    """Thresholds reached by ``spend_usd`` (a cent of tolerance: floats must not miss 100 %)."""
    return tuple(t for t in budget.thresholds if spend_usd + 0.005 >= budget.limit_usd * t.percent / 100.0)


def limit_severity(budget: Budget) -> str:
    """The severity of the limit crossing: the 100 % threshold's, else critical."""
    for t in budget.thresholds:
        if t.percent == LIMIT_PERCENT:
            return t.severity
    return "critical"


def alert_message(budget: Budget, threshold: float, spend_usd: float, period: Period) -> str:
    return (
        f"budget '{budget.name}' ({budget.scope}) reached {threshold:g}% of its ${budget.limit_usd:,.2f} "
        f"{budget.period} limit: ${spend_usd:,.2f} spent in the period from {iso(period.start)}"
    )


def dedup_key(budget_id: str, period_start: float, threshold: float) -> str:
    """One key per crossing (budget, period, threshold): receivers drop repeats by it."""
    return f"gpufleet/budget/{budget_id}/{int(period_start)}/{threshold:g}"


def anomaly_dedup_key(budget_id: str, day_start: float) -> str:
    """One key per anomaly alert (budget, day): receivers drop repeats by it."""
    return f"gpufleet/budget/{budget_id}/{int(day_start)}/anomaly"


def enforcing(budget: Budget, over_since: float | None, now: float, *, over: bool) -> bool:
    """Is ``budget``'s action (throttle, block) in force at ``now``? Only once it has been over its
    current limit for ``grace_s`` (``over_since``: since when, without coming back under it; None
    once it is back under or its limit was raised) — judged again on every read of the spend:
    ``over`` is whether the spend read now is at or over the limit as it is now. A throttle is
    lifted as soon as the spend is under the limit (a raised limit, a re-priced ledger). A block
    whose stretch a refused submit started (the committed spend, not the metered one, passed the
    limit) stays in force after its grace while that stretch lasts: it refuses what does not fit."""
    if budget.action == "alert" or not budget.enabled or over_since is None:
        return False
    if budget.action == "throttle" and not over:
        return False
    return now - over_since >= budget.grace_s


def stretch_ended(budget: Budget, over: bool) -> bool:
    """Does an evaluation that finds the spend ``over`` (or not) end the budget's over-the-limit
    stretch? For a throttle, as soon as the spend is back under its limit. A block's stretch may
    have been started by a refused submit with the spend still under the limit (the grace window
    of :func:`gpufleet.loop.budgets.block_refusal`): only a raised limit ends it, or the period."""
    return not over and budget.action == "throttle"


class BudgetExceededError(ConflictError):
    """A submission ``block`` refuses: its estimated cost does not fit in what is left. The API
    answers 402 Payment Required with code ``budget_exceeded``."""

    code = "budget_exceeded"

    def __init__(self, budget: Budget, committed_usd: float, job_cost_usd: float) -> None:
        self.budget = budget
        self.committed_usd = committed_usd
        self.job_cost_usd = job_cost_usd
        super().__init__(
            f"budget '{budget.name}' ({budget.scope}, {budget.period}) blocks this job: limit "
            f"${budget.limit_usd:,.2f}, committed ${committed_usd:,.2f} (spent plus the estimated rest of "
            f"running and queued jobs), {left_phrase(budget.limit_usd, committed_usd)}; this job would cost "
            f"about ${job_cost_usd:,.2f}"
        )


@dataclass(frozen=True, slots=True)
class BlockVerdict:
    budget: Budget
    committed_usd: float
    job_cost_usd: float
    fits: bool

    @property
    def remaining_usd(self) -> float:
        return self.budget.limit_usd - self.committed_usd


def check_block(budget: Budget, committed_usd: float, job_cost_usd: float, *, in_grace: bool = False) -> BlockVerdict:
    """Would ``block`` let a job costing ``job_cost_usd`` in? Only if committed + job <= limit (a
    cent of tolerance for float sums), or while the budget is in its grace window."""
    fits = committed_usd + job_cost_usd <= budget.limit_usd + 0.005 or in_grace
    return BlockVerdict(budget, committed_usd, job_cost_usd, fits)
