"""Budget enforcement: the rules every world applies, written once (pure; the world's book stores).

- :func:`evaluate`: a budget's spend in its current period, the thresholds it crossed (each
  recorded once per period), the limit crossing (recorded even when no 100 % threshold alerts,
  because grace counts from it), and whether its action is enforced (over the limit for at least
  ``grace_s``);
- :func:`block_refusal`: would a ``block`` budget refuse a new job? The committed spend (metered
  spend plus the estimated rest of the scope's unfinished jobs) plus the job's estimate must stay
  within the limit; while the budget is in its grace window the job is let in, and the first
  refusal in a period starts that window instead;
- :func:`overrun`: is a running job over its own budget (``JobSpec.budget_usd``)? Its exact cost
  (before rounding to cents) has reached the budget: the loop stops it, and it ends CANCELLED with
  the reason "job budget of $X reached ($Y spent)";
- :class:`BudgetEnforcer`: the loop's :class:`~gpufleet.loop.world.BudgetPolicy` — evaluation on its
  timer, the throttles in force, jobs over their own ``budget_usd`` to stop, refusals at submit.

A world supplies a :class:`BudgetBook`: the simulator's keeps alerts in memory over its ledger
(:class:`LedgerBook`, whose :meth:`~LedgerBook.job_spend` is what a job was charged), the server's
is the SQL store (``services/budgets.py``: the store's ledger). Spend always comes from the one
priced-spend path (:func:`gpufleet.cost.spend.scope_spend_usd`, :func:`~gpufleet.cost.spend.job_costs_usd`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.cost.budgets.model import Budget, Scope
from gpufleet.cost.budgets.status import (
    LIMIT_PERCENT,
    BudgetExceededError,
    BudgetStatus,
    budget_status,
    check_block,
    enforcing,
    limit_severity,
    stretch_ended,
)
from gpufleet.cost.budgets.throttle import ThrottleRule
from gpufleet.cost.job_estimate import estimate_for, usd_per_gpu_hour
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.periods import Period
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import job_costs_usd, scope_spend_usd
from gpufleet.model.job import Job, StopKind, StopReason

if TYPE_CHECKING:
    from gpufleet.loop.world import WorldLoop


@dataclass(frozen=True, slots=True)
class Overrun:
    """A running job whose own budget is spent: stopped like a cancel, it ends CANCELLED."""

    job_id: str
    budget_usd: float
    spent_usd: float

    @property
    def reason(self) -> str:
        """The words of the stop (the job's CANCELLED transition says them)."""
        spent = f"{self.spent_usd:,.4f}" if self.spent_usd < 1 else f"{self.spent_usd:,.2f}"
        return f"job budget of ${self.budget_usd:,.2f} reached (${spent} spent)"

    @property
    def stop(self) -> StopReason:
        return StopReason(StopKind.BUDGET, self.reason)


def overrun(job_id: str, budget_usd: float | None, spent_usd: float) -> Overrun | None:
    """The rule, in every world: a job with its own budget whose exact cost so far has reached it
    (not when a cent rounds up) is over it; None: it runs on."""
    if budget_usd is None or spent_usd < budget_usd:
        return None
    return Overrun(job_id, budget_usd, spent_usd)


@dataclass(slots=True)
class BudgetTick:
    throttles: list[ThrottleRule] = field(default_factory=list)
    overruns: list[Overrun] = field(default_factory=list)


class BudgetBook(Protocol):
    """Where a world keeps what the budget rules read and write: priced spend and alerts (once each)."""

    def spend(self, scope: Scope, period: Period, now: float) -> float:
        """The scope's priced spend in ``period`` up to ``now`` (running jobs metered to now)."""
        ...

    def over_since(self, budget: Budget, period: Period) -> float | None:
        """Since when the budget has been over its limit in the period (None: it is not)."""
        ...

    def set_over_since(self, budget: Budget, period: Period, since: float | None) -> None:
        """Start (``since``) or end (None) the over-the-limit stretch of a period whose limit
        crossing is recorded (:meth:`record`); nothing when it is not."""
        ...

    def record(
        self,
        budget: Budget,
        period: Period,
        threshold: float,
        severity: str,
        spend_usd: float,
        now: float,
        *,
        limit_only: bool = False,
    ) -> bool:
        """Record a crossing once per (budget, period, threshold); True if it is new. ``limit_only``:
        the limit crossing of a budget nobody asked to be told about at 100 % (not notified)."""
        ...


@dataclass(slots=True)
class Evaluation:
    budget: Budget
    status: BudgetStatus
    new_alerts: list[float] = field(default_factory=list)  # thresholds that fired now
    enforcing: bool = False


def evaluate(book: BudgetBook, budget: Budget, now: float) -> Evaluation:
    period = budget.period_at(now)
    spend = book.spend(budget.scope, period, now)
    status = budget_status(budget, period, spend, now)
    ev = Evaluation(budget, status)
    if now < period.start or now >= period.end:  # a custom period not yet open, or over
        return ev
    for th in status.crossed:
        if book.record(budget, period, th.percent, th.severity, spend, now):
            ev.new_alerts.append(th.percent)
    if status.over and budget.action != "alert" and all(t.percent != LIMIT_PERCENT for t in budget.thresholds):
        book.record(budget, period, LIMIT_PERCENT, limit_severity(budget), spend, now, limit_only=True)
    # the stretch over the limit is judged again on every read of the spend: it starts again when
    # the spend passes the limit after a raise (grace counts from now), and a throttle's ends when
    # the spend is back under it
    since = book.over_since(budget, period)
    if since is None and status.over and budget.action != "alert":
        book.set_over_since(budget, period, now)
        since = book.over_since(budget, period)
    elif since is not None and stretch_ended(budget, status.over):
        book.set_over_since(budget, period, None)
        since = None
    ev.enforcing = enforcing(budget, since, now, over=status.over)
    return ev


def block_refusal(
    book: BudgetBook,
    budgets: Iterable[Budget],
    job_cost_usd: float,
    now: float,
    committed: Callable[[Budget, Period], float],
) -> BudgetExceededError | None:
    """The first ``block`` budget among ``budgets`` (those covering the job) that refuses a job
    estimated at ``job_cost_usd``, as its error; None: the job may queue."""
    for budget in budgets:
        if budget.action != "block" or not budget.enabled:
            continue
        period = budget.period_at(now)
        if not period.start <= now < period.end:
            continue
        total = committed(budget, period)
        since = book.over_since(budget, period)
        in_grace = since is not None and budget.grace_s > 0 and now - since < budget.grace_s
        if check_block(budget, total, job_cost_usd, in_grace=in_grace).fits:
            continue
        if since is None and budget.grace_s > 0:
            spent = book.spend(budget.scope, period, now)
            if not book.record(budget, period, LIMIT_PERCENT, limit_severity(budget), spent, now, limit_only=True):
                book.set_over_since(budget, period, now)  # crossed before, then its limit was raised
            continue  # the grace window starts now: this job is the first one in it
        return BudgetExceededError(budget, total, job_cost_usd)
    return None


def loop_price(loop: WorldLoop, gpu_types: Sequence[str]) -> float:
    """The price of a GPU-hour for estimates, from the nodes the loop knows."""
    return usd_per_gpu_hour(
        ((ns.node.gpu_model, ns.node.gpu_count, ns.hourly_usd) for ns in loop.cluster.live_nodes()), gpu_types
    )


def next_tick(last: float, interval_s: float) -> float:
    """The earliest time ``t`` at which a timer that last fired at ``last`` is due again
    (``t - last >= interval_s``, the test every budget timer makes), so that a driver that advances to
    it finds the timer due (``last + interval_s`` may fall an ulp short)."""
    t = last + interval_s
    while t - last < interval_s:
        t = math.nextafter(t, math.inf)
    return t


class BudgetEnforcer:
    """The loop's budget policy over a world's :class:`BudgetBook`."""

    def __init__(self, book: LedgerBook, *, interval_s: float = 10.0) -> None:
        self.book = book
        self.interval_s = interval_s
        self._last = -math.inf
        self.blocked: list[dict[str, Any]] = []  # what was refused (the simulator reports it)

    def due(self, now: float) -> bool:
        return now - self._last >= self.interval_s

    def next_due(self) -> float:
        return next_tick(self._last, self.interval_s)

    def tick(self, now: float, loop: WorldLoop) -> BudgetTick:
        self._last = now
        out = BudgetTick()
        for b in self.book.budgets():
            if not b.enabled:
                continue
            ev = evaluate(self.book, b, now)
            if ev.enforcing and b.action == "throttle":
                out.throttles.append(ThrottleRule(b.name, b.scope, b.throttle))
        out.overruns = job_overruns((ar.job for ar in loop.active.values()), lambda j: self.book.job_spend(j, now))
        return out

    def refuse(self, job: Job, now: float, loop: WorldLoop) -> str | None:
        covering = [b for b in self.book.budgets() if b.action == "block" and b.enabled and b.covers_job(job)]
        if not covering:
            return None
        prices: dict[tuple[str, ...], float] = {}

        def price_of(j: Job) -> float:
            types = tuple(sorted(j.spec.gpu_types))
            if types not in prices:
                prices[types] = loop_price(loop, types)
            return prices[types]

        cost = estimate_for(job, price_of(job), now).cost_usd
        unfinished = list(loop.unfinished())

        def committed(b: Budget, period: Period) -> float:
            return self.book.committed(b.scope, period, now, (j for j in unfinished if b.covers_job(j)), price_of)

        err = block_refusal(self.book, covering, cost, now, committed)
        if err is None:
            return None
        self.blocked.append(
            {
                "job_id": job.id,
                "time": now,
                "team": job.team,
                "budget": err.budget.name,
                "limit_usd": err.budget.limit_usd,
                "committed_usd": round(err.committed_usd, 2),
                "job_cost_usd": round(err.job_cost_usd, 2),
            }
        )
        return f"budget_exceeded: {err.message}"


def job_overruns(running: Iterable[Job], spent_of: Callable[[Job], float]) -> list[Overrun]:
    """The running jobs over their own budget (:func:`overrun`), by the world's spend of each one
    that has a budget (``spent_of``: what the job was charged so far, exactly)."""
    out = []
    for job in running:
        budget = job.spec.budget_usd
        if budget is None:
            continue
        over = overrun(job.id, budget, spent_of(job))
        if over is not None:
            out.append(over)
    return out


class LedgerBook:
    """The simulator's book: budgets given up front, spend from an in-memory ledger, alerts kept."""

    def __init__(self, budgets: Sequence[Budget], ledger: Ledger, rules: PricingRules | None = None) -> None:
        self._budgets = list(budgets)
        self.ledger = ledger
        self.rules = rules
        self.alerts: list[dict[str, Any]] = []
        self._recorded: dict[tuple[str, float, float], float] = {}
        # (budget, period start) → since when over its limit, once a stretch ended or started again
        # (absent: since the limit crossing was recorded)
        self._over_since: dict[tuple[str, float], float | None] = {}

    def budgets(self) -> Sequence[Budget]:
        return self._budgets

    def spend(self, scope: Scope, period: Period, now: float) -> float:
        if now <= period.start:
            return 0.0
        return scope_spend_usd(self.ledger, self.rules, scope, period.start, period.end, as_of=now)

    def job_spend(self, job: Job, now: float) -> float:
        """What ``job`` was charged so far over all its runs (running ones metered to ``now``),
        exactly: the server's :func:`gpufleet.services.budgets.job_spend` on the in-memory ledger."""
        start = job.first_start_time if job.first_start_time is not None else job.submit_time
        if now <= start:
            return 0.0
        return job_costs_usd(self.ledger, self.rules, start, now, as_of=now, exact=True).get(job.id, 0.0)

    def committed(
        self, scope: Scope, period: Period, now: float, unfinished: Iterable[Job], price_of: Callable[[Job], float]
    ) -> float:
        return self.spend(scope, period, now) + sum(estimate_for(j, price_of(j), now).cost_usd for j in unfinished)

    def over_since(self, budget: Budget, period: Period) -> float | None:
        key = (budget.id, period.start)
        if key in self._over_since:
            return self._over_since[key]
        return self._recorded.get((budget.id, period.start, LIMIT_PERCENT))

    def set_over_since(self, budget: Budget, period: Period, since: float | None) -> None:
        if (budget.id, period.start, LIMIT_PERCENT) in self._recorded:
            self._over_since[(budget.id, period.start)] = since

    def record(
        self,
        budget: Budget,
        period: Period,
        threshold: float,
        severity: str,
        spend_usd: float,
        now: float,
        *,
        limit_only: bool = False,
    ) -> bool:
        key = (budget.id, period.start, threshold)
        if key in self._recorded:
            return False
        self._recorded[key] = now
        if not limit_only:
            self.alerts.append(
                {
                    "time": now,
                    "budget": budget.name,
                    "threshold": threshold,
                    "severity": severity,
                    "spend_usd": round(spend_usd, 2),
                    "limit_usd": budget.limit_usd,
                }
            )
        return True
