"""Pricing rules: hand-computed scenario tables (time-of-day windows across edges, zones and DST
nights; priority chargeback; reserved commitments used and unused; on-prem amortisation; spot
overrides) and config errors that name the file, line and field."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.report import CostReport
from gpufleet.cost.rules import NodePrice, NodePriceConfig, apply_rules, load_rules, rules_from_setting
from gpufleet.cost.spend import spend_report
from gpufleet.errors import ConfigError
from gpufleet.model.node import CapacityType
from gpufleet.server.settings import load_settings
from tests.support.paths import REPO

OD, SPOT, RES = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVED
NY = ZoneInfo("America/New_York")
UTC_Z = ZoneInfo("UTC")


def at(zone: ZoneInfo, *parts: int) -> float:
    """UNIX seconds of a local wall-clock time (first occurrence when ambiguous)."""
    return datetime(*parts, tzinfo=zone).timestamp()  # type: ignore[misc]


def iv(
    name: str, gpus: int, usd: float, start: float, end: float, cap: CapacityType = OD, model: str = "A100-80GB"
) -> NodeInterval:
    """A GPU-only node (no CPU or memory), so every dollar is a GPU dollar: easy to hand-compute."""
    return NodeInterval(name, "p", model, gpus, 0, 0, cap, usd, start, end)


def seg(job: str, node: NodeInterval, share: Fraction | int, start: float, end: float, *, team: str = "t",
        prio: str = "normal", labels: dict[str, str] | None = None) -> UsageSegment:  # fmt: skip
    return UsageSegment(
        job, team, "", "", "", labels or {}, node.node, node.pool, node.gpu_model, node.capacity_type,
        Fraction(share), 0, 0, node.hourly_usd, start, end, prio,
    )  # fmt: skip


def build(nodes: list[NodeInterval], segs: list[UsageSegment]) -> Ledger:
    led = Ledger()
    for n in nodes:
        led.add_node(n)
    for s in segs:
        led.append(s)
    return led


def report(led: Ledger, start: float, end: float, rules: dict[str, Any] | None, **kw: Any) -> CostReport:
    return spend_report(led, start, end, rules=None if rules is None else load_rules(rules), **kw)


def usd(x: str) -> Decimal:
    return Decimal(x)


OFF_PEAK_NY = {
    "timezone": "America/New_York",
    "windows": [{"name": "off-peak", "start": "22:00", "end": "06:00", "multiplier": 0.5}],
}


# -- time-of-day windows ----------------------------------------------------------------------------

# (name, rules, node $/h, node start, node end, expected node cost)
TOD_NODE_COST = [
    (
        "NY evening 20:00-24:00: 2 h peak + 2 h off-peak at $2",
        OFF_PEAK_NY, 2.0, at(NY, 2026, 11, 10, 20), at(NY, 2026, 11, 11, 0), "6.00",
    ),
    (
        "DST spring-forward night: 22:00 EST..06:00 EDT is 7 real hours (11 h node at $10: 7x5 + 4x10)",
        OFF_PEAK_NY, 10.0, at(NY, 2026, 3, 7, 20), at(NY, 2026, 3, 8, 8), "75.00",
    ),
    (
        "DST fall-back night: 22:00 EDT..06:00 EST is 9 real hours (25 h node at $10: 9x5 + 16x10)",
        OFF_PEAK_NY, 10.0, at(NY, 2026, 10, 31, 12), at(NY, 2026, 11, 1, 12), "205.00",
    ),
    (
        "Asia/Tokyo 00:00-08:00 at 0.5 = 15:00-23:00 UTC; node 12:00-18:00 UTC at $10: 3x10 + 3x5",
        {"timezone": "Asia/Tokyo", "windows": [{"name": "night", "start": "00:00", "end": "08:00", "multiplier": 0.5}]},
        10.0, at(UTC_Z, 2026, 11, 10, 12), at(UTC_Z, 2026, 11, 10, 18), "45.00",
    ),
    (
        "the same window in UTC misses the node: 6 h at $10",
        {"timezone": "UTC", "windows": [{"name": "night", "start": "00:00", "end": "08:00", "multiplier": 0.5}]},
        10.0, at(UTC_Z, 2026, 11, 10, 12), at(UTC_Z, 2026, 11, 10, 18), "60.00",
    ),
    (
        "days: only the occurrence starting Friday 22:00 (Thu 20:00..Sat 08:00 UTC at $4: 28x4 + 8x2)",
        {"windows": [{"name": "fri", "start": "22:00", "end": "06:00", "days": ["fri"], "multiplier": 0.5}]},
        4.0, at(UTC_Z, 2026, 11, 12, 20), at(UTC_Z, 2026, 11, 14, 8), "128.00",
    ),
    (
        "first match wins: peak 09-17 x2 before day 06-22 x1.5 (08-18 at $1: 1.5 + 16 + 1.5)",
        {"windows": [
            {"name": "peak", "start": "09:00", "end": "17:00", "multiplier": 2},
            {"name": "day", "start": "06:00", "end": "22:00", "multiplier": 1.5},
        ]},
        1.0, at(UTC_Z, 2026, 11, 10, 8), at(UTC_Z, 2026, 11, 10, 18), "19.00",
    ),
    (
        "first match wins, the other order: day 06-22 x1.5 hides peak (10 h x 1.5)",
        {"windows": [
            {"name": "day", "start": "06:00", "end": "22:00", "multiplier": 1.5},
            {"name": "peak", "start": "09:00", "end": "17:00", "multiplier": 2},
        ]},
        1.0, at(UTC_Z, 2026, 11, 10, 8), at(UTC_Z, 2026, 11, 10, 18), "15.00",
    ),
    (
        "an end of 24:00 and a free weekend window 00:00-00:00 (all day Sat): Fri 12:00..Sun 12:00 at $1",
        {"windows": [
            {"name": "weekend", "start": "00:00", "end": "00:00", "days": ["sat"], "multiplier": 0},
            {"name": "evening", "start": "18:00", "end": "24:00", "multiplier": 2},
        ]},
        1.0, at(UTC_Z, 2026, 11, 13, 12), at(UTC_Z, 2026, 11, 15, 12), "30.00",  # Fri 6 + 6x2, Sun 12
    ),
    (
        "reserved capacity is not in applies_to by default: 4 h at $3",
        {"windows": [{"name": "all", "start": "00:00", "end": "00:00", "multiplier": 0.5}]},
        3.0, at(UTC_Z, 2026, 11, 10, 0), at(UTC_Z, 2026, 11, 10, 4), "12.00",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "rules", "price", "start", "end", "expected"), TOD_NODE_COST, ids=[c[0] for c in TOD_NODE_COST]
)
def test_time_of_day_node_cost(
    name: str, rules: dict[str, Any], price: float, start: float, end: float, expected: str
) -> None:
    cap = RES if "reserved" in name else OD
    led = build([iv("n", 1, price, start, end, cap)], [])
    rep = report(led, start, end, rules)
    assert rep.totals.total_cost_usd == usd(expected)
    assert rep.idle.total_cost_usd == usd(expected)  # no jobs: all idle


def test_job_spanning_the_off_peak_edge_in_new_york() -> None:
    """Node 1xA100 at $2/h 20:00-24:00 New York; a job 21:30-22:30 local: 0.5 h x $2 + 0.5 h x $1."""
    n = iv("n", 1, 2.0, at(NY, 2026, 11, 10, 20), at(NY, 2026, 11, 11, 0))
    led = build([n], [seg("j", n, 1, at(NY, 2026, 11, 10, 21, 30), at(NY, 2026, 11, 10, 22, 30))])
    rep = report(led, n.start, n.end, OFF_PEAK_NY)
    assert rep.row("t").total_cost_usd == usd("1.50")
    assert rep.idle.total_cost_usd == usd("4.50") and rep.totals.total_cost_usd == usd("6.00")
    # Without rules: 1 h x $2, node 4 h x $2.
    plain = report(led, n.start, n.end, None)
    assert (plain.row("t").total_cost_usd, plain.totals.total_cost_usd) == (usd("2.00"), usd("8.00"))


def test_window_edges_split_the_ledger_exactly() -> None:
    n = iv("n", 2, 3.0, at(NY, 2026, 11, 10, 20), at(NY, 2026, 11, 11, 0))
    led = build([n], [seg("j", n, Fraction(1, 7), at(NY, 2026, 11, 10, 21), at(NY, 2026, 11, 10, 23))])
    priced = apply_rules(led, n.start, n.end, load_rules(OFF_PEAK_NY))
    ivs = priced.ledger.node_intervals()
    assert [(x.start, x.end, x.exact_hourly_usd) for x in ivs] == [
        (n.start, at(NY, 2026, 11, 10, 22), Fraction(3)),
        (at(NY, 2026, 11, 10, 22), n.end, Fraction(3, 2)),
    ]
    assert [(s.start, s.end) for s in priced.ledger.segments()] == [
        (at(NY, 2026, 11, 10, 21), at(NY, 2026, 11, 10, 22)),
        (at(NY, 2026, 11, 10, 22), at(NY, 2026, 11, 10, 23)),
    ]


# -- priority multipliers ---------------------------------------------------------------------------


def test_priority_multipliers_and_the_adjustment_line() -> None:
    """2xA100 at $2/GPU-h for 1 h; an urgent job (x1.5) and a background job (x0.8) hold 1 GPU each:
    held $2 + $2; charged $3.00 + $1.60; adjustment +$0.60; 4.60 − 0.60 + 0 idle = $4.00."""
    t0 = at(UTC_Z, 2026, 11, 10, 0)
    n = iv("n", 2, 4.0, t0, t0 + 3600)
    led = build([n], [seg("u", n, 1, t0, t0 + 3600, team="a", prio="urgent"),
                      seg("b", n, 1, t0, t0 + 3600, team="b", prio="background")])  # fmt: skip
    rules = {"priority_multipliers": {"urgent": 1.5, "background": 0.8}}
    rep = report(led, t0, t0 + 3600, rules)
    assert rep.row("a").total_cost_usd == usd("3.00") and rep.row("a").adjustment_usd == usd("1.00")
    assert rep.row("b").total_cost_usd == usd("1.60") and rep.row("b").adjustment_usd == usd("-0.40")
    assert rep.adjustment.total_cost_usd == usd("0.60")
    assert rep.idle.total_cost_usd == 0 and rep.totals.total_cost_usd == usd("4.00")
    by_prio = report(led, t0, t0 + 3600, rules, aggregate=["priority"])
    assert {r.key: r.total_cost_usd for r in by_prio.rows} == {("background",): usd("1.60"), ("urgent",): usd("3.00")}


def test_priority_multiplier_rounding_keeps_the_cents() -> None:
    """A third of a cent per row: $0.01 held x 1.5 = 1.5 cents → 2 cents; the adjustment is 1 cent."""
    t0 = 0.0
    n = iv("n", 1, 0.01, t0, t0 + 3600)
    led = build([n], [seg("u", n, 1, t0, t0 + 3600, prio="urgent")])
    rep = report(led, t0, t0 + 3600, {"priority_multipliers": {"urgent": 1.5}})
    assert rep.row("t").total_cost_usd == usd("0.02") and rep.adjustment.total_cost_usd == usd("0.01")
    assert rep.totals.total_cost_usd == usd("0.01")


# -- reserved commitments ---------------------------------------------------------------------------

RESERVATION = {"name": "ri", "gpu_model": "A100-80GB", "gpus": 8, "hourly_usd": 16,
               "start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}  # fmt: skip
T10 = at(UTC_Z, 2026, 11, 10, 0)


def test_reserved_commitment_half_used() -> None:
    """8 GPUs committed at $16/h ($2/GPU-h); one reserved 4-GPU node (recorded at $40/h) is present
    for 10 h and a job holds 2 GPUs throughout: node $8/h → $80; job $40; idle on the node $40;
    unused commitment (4 GPUs no node holds) $80; committed $160 = covered $80 + unused $80."""
    n = iv("r1", 4, 40.0, T10, T10 + 10 * 3600, RES)
    led = build([n], [seg("j", n, 2, n.start, n.end)])
    rep = report(led, n.start, n.end, {"reservations": [RESERVATION]})
    assert rep.row("t").total_cost_usd == usd("40.00")
    assert rep.idle.total_cost_usd == usd("40.00")
    assert rep.node_cost_usd == usd("80.00")
    [r] = rep.reservations
    assert (r.committed_usd, r.covered_usd, r.unused_usd) == (usd("160.00"), usd("80.00"), usd("80.00"))
    assert r.committed_gpu_hours == 80.0
    assert rep.reservation_unused.total_cost_usd == usd("80.00")
    assert rep.totals.total_cost_usd == usd("160.00")


def test_reserved_commitment_unused_with_no_node() -> None:
    rep = report(Ledger(), T10, T10 + 3 * 3600, {"reservations": [RESERVATION]})
    assert rep.reservations[0].unused_usd == usd("48.00") and rep.totals.total_cost_usd == usd("48.00")


def test_reserved_nodes_beyond_the_commitment() -> None:
    """Three reserved 4-GPU nodes (12 GPUs, $16/h each recorded) against 8 committed GPUs at
    $16/h: each node is 2/3 covered (16 x 4/12) and 1/3 at its own price (16/3): $32/h for all;
    over 3 h $96 = commitment $48 + the uncovered third of the nodes $48; nothing unused."""
    nodes = [iv(f"r{i}", 4, 16.0, T10, T10 + 3 * 3600, RES) for i in range(3)]
    rep = report(build(nodes, []), T10, T10 + 3 * 3600, {"reservations": [RESERVATION]})
    assert rep.totals.total_cost_usd == usd("96.00") and rep.reservations[0].unused_usd == 0


def test_reservation_starting_mid_window() -> None:
    """The commitment starts at 05:00: the reserved node pays its own $40/h before (5 h = $200),
    the commitment's $8/h after (5 h = $40), and 4 of 8 GPUs are unused after ($8/h x 5 = $40)."""
    res = {**RESERVATION, "start": "2026-11-10T05:00:00Z"}
    n = iv("r1", 4, 40.0, T10, T10 + 10 * 3600, RES)
    rep = report(build([n], []), T10, T10 + 10 * 3600, {"reservations": [res]})
    assert rep.node_cost_usd == usd("240.00") and rep.reservations[0].unused_usd == usd("40.00")
    assert rep.totals.total_cost_usd == usd("280.00")


def test_reservation_date_is_local_midnight() -> None:
    rules = load_rules({"timezone": "America/New_York", "reservations": [{**RESERVATION, "start": "2026-11-10"}]})
    assert rules.reservations[0].start == at(NY, 2026, 11, 10)


# -- on-prem and spot overrides ---------------------------------------------------------------------


def test_on_prem_amortisation_round_numbers() -> None:
    """$262,800 over 3 years = 262800 / 26280 h = $10.00/h; 5 kW x PUE 1.5 x $0.20/kWh = $1.50/h;
    $730/month = $1.00/h: $12.50/h; a day: $300.00."""
    cfg = {"purchase_usd": 262800, "lifetime_years": 3, "power_kw": 5, "pue": 1.5, "usd_per_kwh": 0.2,
           "ops_usd_per_month": 730}  # fmt: skip
    price = NodePrice.from_config(NodePriceConfig.model_validate(cfg))
    assert price.hourly_usd == Fraction(25, 2)
    assert dict(price.breakdown) == {"amortisation": 10, "power": Fraction(3, 2), "ops": 1}
    n = iv("box", 8, 99.0, T10, T10 + 86400)  # the recorded price is replaced
    rep = report(build([n], []), T10, T10 + 86400, {"nodes": {"box": cfg}})
    assert rep.totals.total_cost_usd == usd("300.00")


def test_on_prem_amortisation_exact() -> None:
    cfg = NodePriceConfig.model_validate({"purchase_usd": 250000, "lifetime_years": 4, "power_kw": 6.5, "pue": 1.4,
                                          "usd_per_kwh": 0.12, "ops_usd_per_month": 1000})  # fmt: skip
    price = NodePrice.from_config(cfg)
    assert price.hourly_usd == Fraction(250000, 4 * 8760) + Fraction("6.5") * Fraction("1.4") * Fraction(
        "0.12"
    ) + Fraction(1000 * 12, 8760)
    assert round(float(price.hourly_usd), 6) == 9.596566


def test_node_override_and_spot_override() -> None:
    """box: plain $5/h override (not subject to windows); spot 8xA100-80GB recorded at $20/h,
    override $1.25/GPU-h → $10/h; on-demand node unaffected ($3/h). 2 h with a x0.5 window."""
    nodes = [iv("box", 1, 9.0, T10, T10 + 7200), iv("s", 8, 20.0, T10, T10 + 7200, SPOT),
             iv("o", 1, 3.0, T10, T10 + 7200)]  # fmt: skip
    rules = {"nodes": {"box": {"hourly_usd": 5}}, "spot_usd_per_gpu_hour": {"a100-80gb": 1.25},
             "windows": [{"name": "all", "start": "00:00", "end": "00:00", "multiplier": 0.5}]}  # fmt: skip
    rep = report(build(nodes, []), T10, T10 + 7200, rules, aggregate=["node"])
    assert rep.totals.total_cost_usd == usd("10.00") + usd("10.00") + usd("3.00")


# -- loading and errors -----------------------------------------------------------------------------

BAD_RULES = [
    # (name, yaml text, line, field, words)
    ("unquoted time", "pricing:\n  windows:\n    - name: x\n      start: 22:00\n      end: '06:00'\n"
     "      multiplier: 0.5\n", 4, "windows.0.start", "quotes"),
    ("unknown zone", "timezone: Mars/Olympus\n", 1, "timezone", "unknown time zone"),
    ("unknown gpu", "spot_usd_per_gpu_hour:\n  Z100: 1.0\n", 1, "spot_usd_per_gpu_hour", "unknown GPU type"),
    ("negative multiplier", "windows:\n  - {name: x, start: '01:00', end: '02:00', multiplier: -1}\n", 2,
     "windows.0.multiplier", "greater than or equal"),
    ("priority class", "priority_multipliers:\n  asap: 2\n", 2, "priority_multipliers.asap", "background"),
    ("both forms", "nodes:\n  box:\n    hourly_usd: 3\n    purchase_usd: 100\n", 2, "nodes.box", "either"),
    ("no lifetime", "nodes:\n  box:\n    purchase_usd: 100\n", 2, "nodes.box", "lifetime_years"),
    ("naive time", "reservations:\n  - {name: r, gpu_model: T4, gpus: 1, hourly_usd: 1,\n"
     "     start: '2026-01-01T00:00:00'}\n", 3, "reservations.0.start", "zone"),
    ("duplicate window", "windows:\n  - {name: a, start: '01:00', end: '02:00', multiplier: 1}\n"
     "  - {name: a, start: '03:00', end: '04:00', multiplier: 1}\n", 1, "(root)", "used twice"),
    ("unknown key", "windwos: []\n", 1, "windwos", "Extra inputs"),
    ("24:00 start", "windows:\n  - {name: a, start: '24:00', end: '02:00', multiplier: 1}\n", 2, "windows.0.start",
     "only an end"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "line", "field", "words"), BAD_RULES, ids=[c[0] for c in BAD_RULES])
def test_bad_rules_name_file_line_and_field(
    tmp_path: Path, name: str, text: str, line: int, field: str, words: str
) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_rules(path)
    err = exc.value
    assert (err.source, err.line, err.field) == (str(path), line, field), str(err)
    assert words in str(err)
    assert str(err).startswith(f"{path}:{line}, field '{field}': ")


def test_example_rules_file_loads() -> None:
    rules = load_rules(REPO / "examples" / "pricing.yaml")
    assert rules.zone.key == "America/New_York" and rules.windows and rules.reservations and rules.node_prices


def test_settings_pricing_field(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("priority_multipliers: {urgent: 1.5}\n")
    s = load_settings(pricing=str(path))
    assert s.pricing == path
    rules = rules_from_setting(s.pricing)
    assert rules is not None and rules.priority_multiplier("urgent") == Fraction(3, 2)
    inline = load_settings(pricing={"timezone": "Europe/Berlin"})
    rules = rules_from_setting(inline.pricing)
    assert rules is not None and rules.zone.key == "Europe/Berlin"
    assert rules_from_setting(load_settings().pricing) is None
    path.write_text("priority_multipliers: {urgent: lots}\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:1, field 'priority_multipliers.urgent'"):
        load_settings(pricing=str(path))
