"""Issue 23, observations 8 and 9: every spend figure says what it counts, and advice knows how much
history stands behind it.

8. Two "cluster spend" figures on one page, unlabelled: the `all` budget counted jobs ($8.85), the
   forecast nodes ($11.12); a budget's projection extrapolated over the calendar month, not over the
   time the server had existed.
9. ``optimize`` and the MCP ``recommend`` offered $7.8k–$20.7k/month at 50–72 % confidence after 1–2
   minutes; the ROI of a 53 s window printed "−700 %"; the early-stop figure ran a preempted job's
   progress rate over wall time (its wait in the queue counted as time it ran at its rate).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cost import recommend as recommend_mod
from gpufleet.cost.budgets.model import make_budget
from gpufleet.cost.budgets.status import budget_status
from gpufleet.cost.catalog import COLUMNS, PriceCatalog
from gpufleet.cost.forecast import ProgressReport
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.periods import Period
from gpufleet.cost.recommend import JobFacts, RecommendInputs, recommend
from gpufleet.cost.roi import format_roi, roi_report
from gpufleet.model.node import CapacityType
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend

H = 3600.0
DAY = 86400.0
CATALOG = (
    ",".join(COLUMNS)
    + """
test,r1,a100x8,A100-80GB,8,80,32.0,12.8,12.8,instance,hand
test,r1,l4x1,L4,1,24,0.8,,,instance,hand
"""
)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)  # a fresh database per test


@pytest.fixture
def catalog() -> PriceCatalog:
    return PriceCatalog.load(io.StringIO(CATALOG), name="hand.csv")


def _seg(job: str, gpus: int, a: float, b: float) -> UsageSegment:
    # one A100 of an 8-GPU $32/h node: $4 per GPU-hour
    return UsageSegment(
        job, "t", "", "default", "", {}, "n1", "p", "A100-80GB", CapacityType.ON_DEMAND, Fraction(gpus), 0, 0,
        32.0, a, b,
    )  # fmt: skip


def _ledger(born: float, now: float, *segs: tuple[str, int, float, float]) -> Ledger:
    led = Ledger()
    led.add_node(NodeInterval("n1", "p", "A100-80GB", 8, 0, 0, CapacityType.ON_DEMAND, 32.0, born, now))
    for job, gpus, a, b in segs:
        led.append(_seg(job, gpus, a, b))
    return led


# -- 8: a projection from the history there is; every spend figure says what it counts ----------------


def test_a_budget_projection_on_a_young_server_extrapolates_from_the_ledgers_start() -> None:
    # a 30-day period 10 days in; the server has existed for 24 minutes and spent $8.85
    period = Period(0.0, 30 * DAY)
    now, born = 10 * DAY, 10 * DAY - 1440.0
    b = make_budget(id="b", name="b", scope="all", limit_usd=100.0)
    old_way = budget_status(b, period, 8.85, now)
    assert old_way.projected_usd == pytest.approx(8.85 * 3)  # the month's 10 days seen: $26.55
    st = budget_status(b, period, 8.85, now, history_start=born)
    # $8.85 over 1,440 s, for the 20 days + 24 min from the ledger's start to the period's end
    assert st.projected_usd == pytest.approx(8.85 / 1440.0 * (20 * DAY + 1440.0))  # $10,628.85
    assert st.projected_from_s == pytest.approx(1440.0)
    # a ledger older than the period changes nothing: the period's own run rate
    assert budget_status(b, period, 8.85, now, history_start=-DAY).projected_usd == pytest.approx(26.55)


def _create_budget(api: Api, **body: Any) -> None:
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text


def test_the_all_budget_and_the_cluster_forecast_say_what_they_count(api: Api) -> None:
    born = T0 - 1440.0  # the server is 24 minutes old
    add_node(api.db, born)  # 8 GPUs at $8/h: $3.20 over the 24 minutes
    add_spend(api.db, "alpha", 2.00, T0 - 60)  # a job held the whole node 15 minutes: $2.00
    _create_budget(api, name="cluster", scope="all", limit_usd=5000.0)
    st = api.client.get("/v1/budgets/cluster/status", headers=api.h("admin")).json()
    f = api.client.get("/v1/forecast", headers=api.h("admin")).json()
    # two figures, each saying what it counts, and the gap between them is idle
    assert (st["spend_usd"], st["basis"]) == (pytest.approx(2.00), "jobs")
    assert "idle capacity not included" in st["basis_note"]
    assert (f["spent_usd"], f["basis"], f["jobs_spent_usd"]) == (pytest.approx(3.20), "nodes", pytest.approx(2.00))
    assert "$2.00 of the $3.20 was charged to jobs" in f["basis_note"] and "$1.20 idle" in f["basis_note"]
    assert "projected from 24 min of history" in f["projection_note"]
    # the budget projects from the 24 minutes, to the month's end (T0 is 2026-11-12 12:00 UTC)
    to_end = 18 * DAY + 12 * H + 1440.0  # Nov 12 11:36 → Dec 1 00:00
    assert st["projected_usd"] == pytest.approx(round(2.00 / 1440.0 * to_end, 2))  # $2,222.00
    assert st["projected_from_s"] == pytest.approx(1440.0)
    assert "24 min of history" in st["projection_note"]
    team = api.client.get("/v1/forecast?team=alpha", headers=api.h("admin")).json()
    assert team["basis"] == "jobs" and team["jobs_spent_usd"] is None


# -- 9: confidence capped by history, figures that say their window, ROI that waits for a day ------


@pytest.mark.parametrize(
    ("observed_s", "cap"),
    [
        pytest.param(53.0, math.sqrt(53 / DAY), id="53s-under-3pct"),
        pytest.param(120.0, math.sqrt(120 / DAY), id="2min-under-4pct"),
        pytest.param(H, math.sqrt(1 / 24), id="1h-20pct"),
        pytest.param(6 * H, 0.5, id="6h-half"),
        pytest.param(DAY, 1.0, id="a-day-full-weight"),
        pytest.param(7 * DAY, 1.0, id="a-week-full-weight"),
    ],
)
def test_history_weight_anchors(observed_s: float, cap: float) -> None:
    assert recommend_mod.history_weight(observed_s) == pytest.approx(cap)


def test_minutes_of_history_give_no_confident_dollars(catalog: PriceCatalog) -> None:
    now = 30 * DAY
    born = now - 120.0  # two minutes of history; a week asked for
    led = _ledger(born, now, ("small", 1, born, now), ("ckpt", 2, born, now))
    jobs = {"ckpt": JobFacts("ckpt", "t", preemptible=True, checkpointing=True, gpus_per_pod=2)}
    recs = recommend(RecommendInputs(led, now - 7 * DAY, now, jobs=jobs), catalog)
    kinds = {r.kind for r in recs}
    assert {"idle_capacity", "spot"} <= kinds, recs  # 5 of 8 GPUs idle; a checkpointing job on-demand
    for r in recs:
        assert r.confidence <= round(math.sqrt(120 / DAY), 2) == 0.04  # was 0.5 and 0.7
        assert r.history_s == pytest.approx(120.0) and not r.enough_history
        assert "Not enough history to quote: 2 min observed (at least 1 h)" in r.action
    spot = next(r for r in recs if r.kind == "spot")
    # 2 on-demand GPUs × 2 min × ($4 − $1.6), × 730.5 h / (1/30 h)
    assert spot.monthly_savings_usd == pytest.approx(2 * (120 / H) * 2.4 * 730.5 / (120 / H))
    assert spot.monthly_basis == "extrapolated from 2 min of history (× 2.192e+04 to a month)"
    assert spot.to_dict()["enough_history"] is False


def test_a_days_history_keeps_the_rules_confidence(catalog: PriceCatalog) -> None:
    now = 2 * DAY
    led = _ledger(0.0, now, ("ckpt", 2, now - DAY, now))
    jobs = {"ckpt": JobFacts("ckpt", "t", preemptible=True, checkpointing=True, gpus_per_pod=2)}
    spot = next(r for r in recommend(RecommendInputs(led, now - DAY, now, jobs=jobs), catalog) if r.kind == "spot")
    assert spot.confidence == 0.7 and spot.enough_history and "Not enough history" not in spot.action
    assert spot.monthly_basis == "extrapolated from 1 day of history (× 30.44 to a month)"


def test_early_stop_counts_running_time_from_the_ledger(catalog: PriceCatalog) -> None:
    """A job ran 10 minutes, waited 20 preempted, and has run 10 more: 100 steps every 120 s of
    running. Its 1,000 steps left take 1,200 s, at $4/h: $1.3333. Over wall time (its wait counted
    as running at its rate) the rate was 900 steps / 2,280 s and the rest $2.81."""
    now = DAY
    t0 = now - 2400.0
    led = _ledger(0.0, now, ("p", 1, t0, t0 + 600), ("p", 1, t0 + 1800, now))
    losses = [1.0, 0.7, 0.5, 0.42, 0.4, 0.399, 0.3985, 0.3984, 0.3984, 0.3983]
    times = [t0 + 120 * i for i in range(1, 6)] + [t0 + 1800 + 120 * i for i in range(1, 6)]
    pairs = enumerate(zip(times, losses, strict=True))
    reports = [ProgressReport(t, 100.0 * (i + 1), 2000.0, {"loss": v}) for i, (t, v) in pairs]
    jobs = {"p": JobFacts("p", "t", started_at=t0)}
    recs = recommend(RecommendInputs(led, 0.0, now, progress={"p": reports}, jobs=jobs), catalog)
    stop = next(r for r in recs if r.kind == "early_stop")
    assert stop.evidence["remaining_usd"] == pytest.approx(1200 * 4.0 / H)  # $1.3333, not $2.81
    assert stop.monthly_savings_usd == pytest.approx(4.0 / 3)


@pytest.mark.parametrize(
    ("hours", "has_pct"),
    [pytest.param(53 / H, False, id="53s-not-enough"), pytest.param(23.9, False, id="under-a-day"),
     pytest.param(24.0, True, id="a-day")],
)  # fmt: skip
def test_roi_over_a_window_too_short_gives_no_percentage(catalog: PriceCatalog, hours: float, has_pct: bool) -> None:
    """One node of 8 A100 at $32/h, one job on one GPU: the fixed cluster for the peak is one GPU
    at the catalog's $4/h against the whole node's $32/h — "−700.0 %" over any window, which says
    nothing over 53 seconds."""
    end = 100 * DAY
    start = end - hours * H
    led = Ledger()
    led.add_node(NodeInterval("n1", "p", "A100-80GB", 8, 0, 0, CapacityType.ON_DEMAND, 32.0, start, end))
    led.append(_seg("a", 1, start, end))
    r = roi_report(led, catalog, start, end)
    assert r.savings_usd == pytest.approx((4.0 - 32.0) * hours)  # the dollars are what happened
    text = format_roi(r.to_dict())
    savings_line = next(line for line in text.splitlines() if "savings:" in line)
    if has_pct:
        assert r.savings_pct == pytest.approx(-7.0) and "(-700.0%)" in savings_line
    else:
        assert r.savings_pct is None and "%" not in savings_line
        assert "not enough history for a percentage" in savings_line


def test_the_api_flags_recommendations_on_a_young_server(api: Api) -> None:
    born = T0 - 1440.0
    add_node(api.db, born)
    add_spend(api.db, "alpha", 2.00, T0 - 60)  # 15 of 24 minutes on the whole node: 37.5 % idle
    recs = api.client.get("/v1/recommendations?window=7d", headers=api.h("admin")).json()
    idle = next(r for r in recs if r["kind"] == "idle_capacity")
    assert idle["confidence"] == round(math.sqrt(1440 / DAY), 2) == 0.13  # was 0.5
    assert idle["enough_history"] is False and idle["history_s"] == pytest.approx(1440.0)
    assert "24 min of history" in idle["monthly_basis"]


class _Recs:
    """The one SDK call the MCP ``recommend`` tool makes without a job or team."""

    def __init__(self, recs: list[dict[str, Any]]) -> None:
        self._recs = recs

    def recommendations(self, window: str = "7d") -> list[Any]:
        from gpufleet.wire import RecommendationOut

        return [RecommendationOut.model_validate(r) for r in self._recs]


def test_the_mcp_recommend_says_its_figures_stand_on_minutes(catalog: PriceCatalog) -> None:
    from gpufleet.agent.tools.advice import recommend as mcp_recommend

    now = 30 * DAY
    born = now - 120.0
    led = _ledger(born, now, ("small", 1, born, now))
    recs = [r.to_dict() for r in recommend(RecommendInputs(led, now - 7 * DAY, now), catalog)]
    out = mcp_recommend(_Recs(recs), window="7d")  # type: ignore[arg-type]
    assert out.items and all(not r.enough_history and r.history_s == pytest.approx(120.0) for r in out.items)
    assert "Not enough history to quote these as savings: 2m00s observed (at least an hour)" in out.summary
    assert "extrapolated from 2 min of history" in out.summary
