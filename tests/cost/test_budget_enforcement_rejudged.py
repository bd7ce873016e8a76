"""Issue 23, item 5: a budget's enforcement is judged against its current limit.

After an approved raise of nlp's block budget from $2.50 to $5.00 the budget still said
``enforcing`` with $0.73 left (the CLI's "block in force", the console's "blocking"), and a
throttle budget stayed throttled all month because ``over_since`` — the budget's 100 % alert, fired
once per period — was never reset. Wanted: enforcement is re-judged on every change of the limit
and every read of the spend, and the over-the-limit stretch ends when the budget is back under its
limit (and on a limit raise); crossing the limit again starts it again, grace included."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from gpufleet.clock import SimClock
from gpufleet.cost.budgets.model import Budget, Scope, make_budget
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.periods import Period
from gpufleet.loop.budgets import LedgerBook, block_refusal, evaluate
from gpufleet.services.budgets import BudgetService, budget_status_out, evaluate_budget
from gpufleet.store.db import Database
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import T0
from tests.support.budget_support import add_node, add_spend

SPENT = 4.27  # nlp's metered spend when its limit was raised: $0.73 left of $5.00
GRACE = 600.0


def budget(action: str, limit_usd: float, grace_s: float = 0.0, id: str = "") -> Budget:
    return make_budget(
        id=id,
        name="nlp-cap",
        scope="team:alpha",
        limit_usd=limit_usd,
        action=action,
        grace_s=grace_s,
        throttle={"max_gpus": 1} if action == "throttle" else None,
    )


# -- the server: the store, its evaluation, the status every surface reads --------------------------------


@dataclass(frozen=True)
class Raise:
    action: str
    grace_s: float
    before_usd: float
    after_usd: float
    # enforcing as the status says it: over the old limit (after its grace); at once after the
    # change; at the next evaluation; one grace later
    enforcing: tuple[bool, bool, bool, bool]


RAISES = [
    pytest.param(Raise("block", 0.0, 2.50, 5.00, (True, False, False, False)), id="block-raised-above-the-spend"),
    pytest.param(Raise("throttle", 0.0, 2.50, 5.00, (True, False, False, False)), id="throttle-raised-above-the-spend"),
    pytest.param(
        Raise("throttle", GRACE, 2.50, 3.00, (True, False, False, True)),
        id="throttle-raised-but-still-over-gets-its-grace-again",
    ),
    pytest.param(
        Raise("block", GRACE, 2.50, 3.00, (True, False, False, True)),
        id="block-raised-but-still-over-gets-its-grace-again",
    ),
    pytest.param(Raise("throttle", 0.0, 5.00, 4.00, (True, True, True, True)), id="a-lowered-limit-stays-in-force"),
]


@pytest.mark.parametrize("case", RAISES)
def test_enforcement_is_judged_against_the_current_limit(db: Database, case: Raise) -> None:
    add_node(db, T0 - 86400)
    add_spend(db, "alpha", SPENT if case.before_usd < SPENT else case.before_usd + 0.5, T0 - 60)
    with db.session() as s:
        row = budgets_repo.create_budget(s, budget(case.action, case.before_usd, case.grace_s), created_by=None, now=T0)
        bid = row.id
    seen = []

    def look(now: float) -> bool:
        with db.session(readonly=True) as s:
            return budget_status_out(s, budgets_repo.get_budget(s, bid), now, None).enforcing

    def evaluate_at(now: float) -> None:
        with db.session() as s:
            evaluate_budget(s, budgets_repo.budget_of(budgets_repo.get_budget(s, bid)), now)

    evaluate_at(T0)
    evaluate_at(T0 + case.grace_s)
    seen.append(look(T0 + case.grace_s))
    t1 = T0 + case.grace_s + 60
    with db.session() as s:  # what PUT /v1/budgets, an approved proposal and the CostBudget reconciler do
        budgets_repo.update_budget(s, bid, budget(case.action, case.after_usd, case.grace_s, id=bid), t1)
    seen.append(look(t1))
    evaluate_at(t1 + 10)
    seen.append(look(t1 + 10))
    evaluate_at(t1 + 10 + case.grace_s)
    seen.append(look(t1 + 10 + case.grace_s))
    assert tuple(seen) == case.enforcing
    if case.after_usd == 5.00:
        with db.session(readonly=True) as s:
            st = budget_status_out(s, budgets_repo.get_budget(s, bid), t1 + 10, None)
        assert st.remaining_usd == 0.73 and not st.enforcing


def test_a_raised_limit_lifts_the_controllers_throttle_at_its_next_run(db: Database) -> None:
    add_node(db, T0 - 86400)
    add_spend(db, "alpha", SPENT, T0 - 60)
    with db.session() as s:
        bid = budgets_repo.create_budget(s, budget("throttle", 2.50), created_by=None, now=T0).id
    service = BudgetService(db, SimClock(T0))  # no channels: nothing is sent
    service.run(T0)
    assert [t.budget for t in service.throttles] == ["nlp-cap"]
    with db.session() as s:
        budgets_repo.update_budget(s, bid, budget("throttle", 5.00, id=bid), T0 + 5)
    service.run(T0 + 15)
    assert service.throttles == []


# -- the rules themselves, in every world (the simulator's book) ------------------------------------------


class ScriptedBook(LedgerBook):
    """The simulator's book with the spend set by the test (a re-priced ledger can lower it)."""

    def __init__(self, budgets: Sequence[Budget]) -> None:
        super().__init__(budgets, Ledger())
        self.spent = 0.0

    def spend(self, scope: Scope, period: Period, now: float) -> float:
        return self.spent


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            [
                (0.0, 4.0),
                (GRACE, 4.0),
                (GRACE + 10, 2.0),
                (GRACE + 20, 4.0),
                (2 * GRACE + 19, 4.0),
                (2 * GRACE + 20, 4.0),
            ],
            [False, True, False, False, False, True],
            id="back-under-lifts-the-throttle-and-a-new-crossing-waits-its-grace",
        ),
        pytest.param(
            [(0.0, 4.0), (GRACE, 4.0), (GRACE + 10, 4.0)], [False, True, True], id="over-all-along-stays-throttled"
        ),
    ],
)
def test_a_throttle_is_judged_on_every_read_of_the_spend(
    steps: list[tuple[float, float]], expected: list[bool]
) -> None:
    b = budget("throttle", 3.00, GRACE, id="b1")
    book = ScriptedBook([b])
    seen = []
    for dt, spent in steps:
        book.spent = spent
        seen.append(evaluate(book, b, T0 + dt).enforcing)
    assert seen == expected


def test_a_block_raised_after_its_grace_gives_a_new_grace_to_the_next_refusal() -> None:
    """A refused submit starts a block's grace window (its first refusal in the period); once the
    limit is raised and the budget is back under it, the next refusal starts a new one instead of
    letting every job in (the stretch ended: nothing would start it again)."""
    old = budget("block", 2.50, GRACE, id="b1")
    book = ScriptedBook([old])
    book.spent = SPENT
    evaluate(book, old, T0)
    assert evaluate(book, old, T0 + GRACE).enforcing
    new = budget("block", 5.00, GRACE, id="b1")
    book.set_over_since(new, new.period_at(T0), None)  # what the store does on a raise (update_budget)
    assert not evaluate(book, new, T0 + GRACE + 10).enforcing
    t = T0 + GRACE + 20

    def committed(b: Budget, p: Period) -> float:
        return SPENT

    assert block_refusal(book, [new], 1.0, t, committed) is None  # the first refusal: its grace starts
    assert book.over_since(new, new.period_at(t)) == t
    assert block_refusal(book, [new], 1.0, t + GRACE, committed) is not None  # and ends
