"""ROI: a hand-computed ledger where every lever's dollars are known exactly."""

from __future__ import annotations

import io
from fractions import Fraction

import pytest

from gpufleet.cost.catalog import COLUMNS, PriceCatalog
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.roi import HOURS_PER_YEAR, LEVERS, format_roi, render_cli, roi_report
from gpufleet.errors import InputError
from gpufleet.model.node import CapacityType

H = 3600.0
CATALOG = (
    ",".join(COLUMNS)
    + """
test,r1,a100x8,A100-80GB,8,80,32.0,12.8,12.8,instance,hand
test,r1,t4x4,T4,4,16,4.0,,,instance,hand
"""
)
OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT


def _seg(
    job: str, node: str, model: str, cap: CapacityType, share: Fraction, price: float, a: float, b: float
) -> UsageSegment:
    return UsageSegment(job, "t", "", "default", "", {}, node, node, model, cap, share, 0, 0, price, a, b)


def _ledger() -> Ledger:
    """10 hours.
    n1: 8× A100 on-demand at the list price $32/h, all 10 h; job a holds all 8 GPUs.
    n2: 8× A100 spot at the list spot price $12.8/h, first 5 h; job b holds all 8.
    n3: 4× T4 on-demand at $3/h (list $4/h: a discount), 10 h; job c holds half a GPU, job d one GPU.
    n4: a CPU-only node at $0.5/h, 10 h.
    """
    led = Ledger()
    for name, model, gpus, cap, price, end in (
        ("n1", "A100-80GB", 8, OD, 32.0, 10 * H),
        ("n2", "A100-80GB", 8, SPOT, 12.8, 5 * H),
        ("n3", "T4", 4, OD, 3.0, 10 * H),
    ):
        led.add_node(NodeInterval(name, name, model, gpus, 0, 0, cap, price, 0.0, end))
    led.add_node(NodeInterval("n4", "n4", "", 0, 4000, 0, OD, 0.5, 0.0, 10 * H))
    led.append(_seg("a", "n1", "A100-80GB", OD, Fraction(8), 32.0, 0, 10 * H))
    led.append(_seg("b", "n2", "A100-80GB", SPOT, Fraction(8), 12.8, 0, 5 * H))
    led.append(_seg("c", "n3", "T4", OD, Fraction(1, 2), 3.0, 0, 10 * H))
    led.append(_seg("d", "n3", "T4", OD, Fraction(1), 3.0, 0, 10 * H))
    return led


@pytest.fixture
def catalog() -> PriceCatalog:
    return PriceCatalog.load(io.StringIO(CATALOG), name="hand.csv")


def test_every_lever_by_hand(catalog: PriceCatalog) -> None:
    r = roi_report(_ledger(), catalog, 0.0, 10 * H, platform_cost_usd=1000.0, min_hours=1)
    # peak of whole GPUs: 8 (a) + 8 (b) + 1 (c rounded up) + 1 (d) = 18 while b runs
    assert r.peak_gpus == 18 and r.reference_gpu == "A100-80GB" and r.reference_usd_per_gpu_hour == 4.0
    assert r.counterfactual_usd == pytest.approx(18 * 10 * 4.0)  # 720
    assert r.actual_usd == pytest.approx(320 + 64 + 30 + 5)  # 419
    assert r.used_gpu_hours == pytest.approx(80 + 40 + 5 + 10) and r.node_gpu_hours == pytest.approx(160)
    # the fleet peaks at F = 8 + 8 + 4 = 20 GPUs while the spot node exists
    assert r.fleet_peak_gpus == 20
    expected = {
        "sharing": 0.0,  # the peak demand (18 whole GPUs) never exceeded the fleet (20): sharing saved no capacity
        "headroom": (18 - 20) * 10 * 4.0,  # the fleet's peak had 2 GPUs more than the peak demand = −80
        "autoscaling": (20 * 10 - 160) * 4.0,  # the spot node removed after 5 h: 40 GPU-hours not run = 160
        "right_sizing": 40 * (4.0 - 1.0),  # T4 GPU-hours at A100 vs T4 on-demand = 120
        "spot": 40 * (4.0 - 1.6),  # spot GPU-hours × (on-demand − spot) = 96
        "off_peak": 40 * 1.0 - 30.0,  # T4 node billed $10 under list = 10
        "other": -5.0,  # the CPU-only node
    }
    assert set(r.levers_usd) == set(LEVERS)
    for k, v in expected.items():
        assert r.levers_usd[k] == pytest.approx(v), k
    assert r.savings_usd == pytest.approx(720 - 419)
    assert sum(r.levers_usd.values()) == pytest.approx(r.savings_usd)
    assert r.savings_pct == pytest.approx(301 / 720)
    annual = 301 * HOURS_PER_YEAR / 10
    assert r.projected_annual_savings_usd == pytest.approx(annual)
    assert r.payback_months == pytest.approx(1000 / (annual / 12))


def test_payback_never_when_running_cost_exceeds_savings(catalog: PriceCatalog) -> None:
    r = roi_report(
        _ledger(), catalog, 0.0, 10 * H, platform_cost_usd=10.0, platform_cost_usd_per_month=1e9, min_hours=1
    )
    assert r.payback_months is None
    assert roi_report(_ledger(), catalog, 0.0, 10 * H, min_hours=1).payback_months == 0.0


def test_a_window_clips_the_ledger(catalog: PriceCatalog) -> None:
    r = roi_report(_ledger(), catalog, 5 * H, 10 * H)  # b and the spot node are gone
    assert r.peak_gpus == 10 and r.levers_usd["spot"] == 0.0
    assert r.counterfactual_usd == pytest.approx(10 * 5 * 4.0)
    assert r.actual_usd == pytest.approx(160 + 15 + 2.5)
    assert sum(r.levers_usd.values()) == pytest.approx(r.savings_usd)


def test_bad_window(catalog: PriceCatalog) -> None:
    with pytest.raises(InputError):
        roi_report(_ledger(), catalog, 10.0, 5.0)


def test_rendering(catalog: PriceCatalog) -> None:
    d = roi_report(_ledger(), catalog, 0.0, 10 * H).to_dict()
    text = format_roi(d)
    assert "counterfactual: 18 on-demand A100-80GB" in text and "spot" in text and "301.00" in text
    assert format_roi(d, "csv").startswith("lever,usd\nsharing,0.00\nheadroom,-80.00\n")
    assert "\n  sharing " not in text  # a lever not in use is not in the table

    class FakeClient:
        def roi(
            self, window: str = "30d", platform_cost_usd: float = 0.0, platform_cost_usd_per_month: float = 0.0
        ) -> dict[str, object]:
            return d

    assert '"savings_usd"' in render_cli(FakeClient(), window="7d", fmt="json")
    assert "--by/--team ignored" in render_cli(FakeClient(), window="7d", team="x")


def test_a_young_fixed_server_is_judged_on_what_was_observed(catalog: PriceCatalog) -> None:
    """Issue 10, observation 3: ``cost --roi --last 30d`` on a 20-minute-old server of 8 A100s compared
    a 30-day counterfactual of 10 GPUs with 20 minutes of spend ("100% savings", "$321,848 projected
    annual savings"), all credited to autoscaling on a fixed server, with an ``other −0.00`` row."""
    now = 30 * 24 * H
    born = now - 20 * 60  # the server started 20 minutes ago
    led = Ledger()
    led.add_node(NodeInterval("box", "box", "A100-80GB", 8, 0, 0, OD, 29.38, born, now))
    # 12 jobs of half a GPU and 4 whole ones: 10 whole GPUs demanded at once, on 8 GPUs thanks to sharing
    for i in range(12):
        led.append(_seg(f"h{i}", "box", "A100-80GB", OD, Fraction(1, 2), 29.38, born, now))
    for i in range(2):
        led.append(_seg(f"w{i}", "box", "A100-80GB", OD, Fraction(1), 29.38, born, now))
    r = roi_report(led, catalog, 0.0, now, as_of=now)
    assert r.hours == pytest.approx(1 / 3)  # the observed 20 minutes, not 30 days
    assert r.window_start == pytest.approx(born)
    assert r.peak_gpus == 14 and r.fleet_peak_gpus == 8
    assert r.actual_usd == pytest.approx(29.38 / 3)
    assert r.counterfactual_usd == pytest.approx(14 / 3 * 4.0)
    assert r.levers_usd["autoscaling"] == 0.0  # a fixed server did not autoscale
    assert r.levers_usd["sharing"] == pytest.approx((14 - 8) / 3 * 4.0)  # sharing fit 14 GPUs of demand on 8
    assert r.levers_usd["spot"] == 0.0 and r.levers_usd["right_sizing"] == 0.0
    assert sum(r.levers_usd.values()) == pytest.approx(r.savings_usd)
    assert r.projected_annual_savings_usd is None and r.payback_months is None
    text = format_roi(r.to_dict())
    assert "too little history to judge" in text
    assert "autoscaling" not in text.split("lever")[1].split("total")[0]  # not a row: it was not in use
    assert "other" not in text.split("lever")[1].split("total")[0]


@pytest.mark.parametrize(
    ("name", "fractions", "expect"),
    [
        ("fixed, whole GPUs only", [Fraction(1)] * 6, {"sharing": 0.0, "autoscaling": 0.0, "headroom": -2 * 48 * 4.0}),
        ("fixed, fractions fit in", [Fraction(1, 2)] * 16, {"sharing": 8 * 48 * 4.0, "autoscaling": 0.0}),
    ],
)
def test_levers_credit_only_what_was_in_use(
    catalog: PriceCatalog, name: str, fractions: list[Fraction], expect: dict[str, float]
) -> None:
    led = Ledger()
    led.add_node(NodeInterval("box", "box", "A100-80GB", 8, 0, 0, OD, 32.0, 0.0, 48 * H))
    for i, f in enumerate(fractions):
        led.append(_seg(f"j{i}", "box", "A100-80GB", OD, f, 32.0, 0.0, 48 * H))
    r = roi_report(led, catalog, 0.0, 48 * H)
    for k, v in expect.items():
        assert r.levers_usd[k] == pytest.approx(v), (name, k)
    assert r.projected_annual_savings_usd is not None  # 48 h: enough history
    assert sum(r.levers_usd.values()) == pytest.approx(r.savings_usd)
