"""The measured effect: once ``effect_window_s`` has passed since the execution, the target's cost
in the window before the execution and in as long after it, from the ledger priced with the
server's pricing rules; and the upkeep that expires pending proposals and measures what is due,
also as a duty of the controller's leader."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from gpufleet.cost.budgets.model import Scope
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.roi import HOURS_PER_MONTH
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import job_costs_usd, spend_report
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import ProposalRow
from gpufleet.wire import PROPOSAL_TARGETS

if TYPE_CHECKING:
    from gpufleet.control.controller import Periodic

DEFAULT_EFFECT_WINDOW_S = 3600.0  # the wire's default for ProposalIn.effect_window_s


# -- the measured effect ----------------------------------------------------------------------------


def _scope_cost(ledger: Ledger, rules: PricingRules | None, scope: Scope, start: float, end: float) -> float:
    rep = spend_report(ledger, start, end, aggregate=scope.aggregates, rules=rules, as_of=end)
    return float(sum((r.exact_usd for r in rep.rows if scope.matches(r.key)), Fraction(0)))


def _target_cost(row: ProposalRow, ledger: Ledger, rules: PricingRules | None, start: float, end: float) -> float:
    kind = PROPOSAL_TARGETS[row.action]
    if kind == "job":
        costs = job_costs_usd(ledger, rules, start, end, as_of=end, exact=True)
        return sum(costs.get(j, 0.0) for j in {row.target, row.result_job_id} if j)
    if kind == "team":
        return _scope_cost(ledger, rules, Scope("team", row.target), start, end)
    sc = (row.change or {}).get("scope") or {}
    return _scope_cost(ledger, rules, Scope(sc["kind"], sc.get("value", ""), sc.get("owner", "")), start, end)


def measure(s: Session, row: ProposalRow, now: float, rules: PricingRules | None) -> bool:
    """Measure an executed proposal's effect once its after-window has passed; True if it did."""
    if row.state != "executed" or row.executed_at is None or row.measured_at is not None:
        return False
    w, t0 = row.effect_window_s, row.executed_at
    if now < t0 + w:
        return False
    ledger = repo.load_ledger(s, t0 - w, t0 + w, now)
    before = _target_cost(row, ledger, rules, t0 - w, t0)
    after = _target_cost(row, ledger, rules, t0, t0 + w)
    row.measured_before_usd = round(before, 6)
    row.measured_after_usd = round(after, 6)
    row.measured_monthly_savings_usd = round((before - after) * 3600.0 / w * HOURS_PER_MONTH, 2)
    row.measured_at = now
    row.measure_note = "" if before or after else "the target cost nothing in either window"
    s.flush()
    return True


def upkeep(db: Database, now: float, rules: PricingRules | None = None) -> int:
    """Expire pending proposals whose time is up and measure the effects that are due; returns how
    many proposals it changed. Cheap when there is nothing to do (one read, no write lock)."""
    with db.session(readonly=True) as s:
        if not repo.proposal_upkeep_due(s, now):
            return 0
    with db.session() as s:
        n = repo.expire_proposals(s, now)
        for row in repo.proposals_to_measure(s, now):
            n += measure(s, row, now, rules)
    return n


def upkeep_duty(db: Database, rules: PricingRules | None = None, interval_s: float = 60.0) -> Periodic:
    """:func:`upkeep` as a duty of the controller's leader (``Controller(periodic=[...])``)."""
    from gpufleet.control.controller import Periodic

    return Periodic("proposals", interval_s, lambda now: upkeep(db, now, rules))
