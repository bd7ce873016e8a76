"""Cost attribution: hand-computed scenarios (sharing splits, dimensions, GPU/CPU/memory, idle
spreading, filters, per-day series), the conservation rule to the cent as a property over random
ledgers and random rules (with an independent minute-by-minute oracle for the node cost), and the
``/v1/usage`` API with rules, filters and the new aggregates."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cost.allocation import allocate
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment, gpu_share
from gpufleet.cost.pricesplit import UnitPrices
from gpufleet.cost.report import CostReport, Filters
from gpufleet.cost.rules import apply_rules, load_rules
from gpufleet.cost.spend import daily_costs, spend_report
from gpufleet.errors import InputError
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import CapacityType
from tests.api.test_api import WINDOW, _cluster
from tests.support.api_support import T0, Api, make_api

OD, SPOT, RES = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVED
SIMPLE = UnitPrices(Fraction("0.05"), Fraction("0.01"), Fraction("0.05"), Fraction("0.01"))
H = 3600.0
GIB = 1024


def node(name: str, gpus: int, usd: float, start: float, end: float, *, cap: CapacityType = OD, cpu: int = 0,
         mem: int = 0, model: str = "A100-80GB", pool: str = "p") -> NodeInterval:  # fmt: skip
    return NodeInterval(name, pool, model if gpus else "", gpus, cpu, mem, cap, usd, start, end)


def seg(job: str, n: NodeInterval, share: Fraction | int, start: float, end: float, *, team: str = "t",
        project: str = "", cpu: int = 0, mem: int = 0, prio: str = "normal",
        labels: dict[str, str] | None = None) -> UsageSegment:  # fmt: skip
    return UsageSegment(job, team, project, "default", "", labels or {}, n.node, n.pool, n.gpu_model, n.capacity_type,
                        Fraction(share), cpu, mem, n.hourly_usd, start, end, prio)  # fmt: skip


def build(nodes: list[NodeInterval], segs: list[UsageSegment]) -> Ledger:
    led = Ledger()
    for n in nodes:
        led.add_node(n)
    for s in segs:
        led.append(s)
    return led


def d(x: str) -> Decimal:
    return Decimal(x)


def totals(rep: CostReport) -> dict[tuple[str, ...], str]:
    return {r.key: str(r.total_cost_usd) for r in rep.rows}


# -- hand-computed scenarios -------------------------------------------------------------------------


def test_sharing_splits() -> None:
    """A 1g.10gb MIG slice on a 1xA100-80GB node at $7/h pays 1/7: $1.00 an hour; a 500-milli job on
    a 1xA100-80GB node at $4/h pays half: $2.00; the rest is idle ($6 + $2)."""
    a = node("mig", 1, 7.0, 0, H)
    b = node("ts", 1, 4.0, 0, H)
    slice_share = gpu_share(GpuRequest(count=1, mig_profile="1g.10gb"), "A100-80GB")
    assert slice_share == Fraction(1, 7)
    led = build([a, b], [seg("m", a, slice_share, 0, H, team="mig-team"),
                         seg("f", b, Fraction(500, 1000), 0, H, team="frac-team")])  # fmt: skip
    rep = spend_report(led, 0, H, aggregate=["team"])
    assert totals(rep) == {("frac-team",): "2.00", ("mig-team",): "1.00"}
    assert rep.idle.total_cost_usd == d("8.00") and rep.totals.total_cost_usd == d("11.00")
    assert rep.row("mig-team").gpu_hours == pytest.approx(1 / 7)


def test_gpu_cpu_memory_broken_out() -> None:
    """Node: 2 GPUs, 8 vCPU, 32 GiB at $10/h; CPU $0.05/vCPU-h and memory $0.01/GiB-h → host $0.72/h,
    GPUs (10 − 0.72)/2 = $4.64/h each. A job with 1 GPU, 2 vCPU and 8 GiB for 2 h: GPU $9.28,
    CPU $0.20, memory $0.16, total $9.64."""
    n = node("n", 2, 10.0, 0, 2 * H, cpu=8000, mem=32 * GIB)
    led = build([n], [seg("j", n, 1, 0, 2 * H, cpu=2000, mem=8 * GIB)])
    rep = spend_report(led, 0, 2 * H, aggregate=["job"], unit_prices=SIMPLE)
    r = rep.row("j")
    assert (r.gpu_cost_usd, r.cpu_cost_usd, r.memory_cost_usd, r.total_cost_usd) == (
        d("9.28"), d("0.20"), d("0.16"), d("9.64"),
    )  # fmt: skip
    assert r.gpu_hours == 2.0
    assert rep.totals.total_cost_usd == d("20.00") and rep.idle.total_cost_usd == d("10.36")


def test_dimensions() -> None:
    n = node("n", 4, 8.0, 0, H, pool="gpu-pool", cap=SPOT)
    led = build([n], [
        seg("a", n, 1, 0, H, team="x", project="p1", prio="urgent", labels={"cost-center": "cc-1", "exp": "e1"}),
        seg("b", n, 2, 0, H, team="y", project="p2", labels={"cost-center": "cc-2"}),
    ])  # fmt: skip
    cases: list[tuple[list[str], dict[tuple[str, ...], str]]] = [
        (["cost_center"], {("cc-1",): "2.00", ("cc-2",): "4.00"}),
        (["priority"], {("normal",): "4.00", ("urgent",): "2.00"}),
        (["label:exp"], {("",): "4.00", ("e1",): "2.00"}),
        (["team", "project"], {("x", "p1"): "2.00", ("y", "p2"): "4.00"}),
        (["job"], {("a",): "2.00", ("b",): "4.00"}),
        (["node", "pool", "gpu_model", "capacity_type"], {("n", "gpu-pool", "A100-80GB", "spot"): "6.00"}),
    ]
    for agg, expected in cases:
        assert totals(spend_report(led, 0, H, aggregate=agg)) == expected, agg
    with pytest.raises(InputError, match="unknown aggregate 'colour'"):
        spend_report(led, 0, H, aggregate=["colour"])
    with pytest.raises(InputError, match="twice"):
        spend_report(led, 0, H, aggregate=["cost_center", "label:cost-center"])


def test_idle_spread_in_proportion_to_use() -> None:
    """4xA100 at $8/h for 1 h; team a holds 2 GPUs ($4), b 1 GPU ($2), idle $2 → a $5.33, b $2.67."""
    n = node("n", 4, 8.0, 0, H)
    led = build([n], [seg("a", n, 2, 0, H, team="a"), seg("b", n, 1, 0, H, team="b")])
    rep = spend_report(led, 0, H, spread_idle=True)
    assert totals(rep) == {("a",): "5.33", ("b",): "2.67"} and rep.idle.total_cost_usd == 0
    assert rep.totals.total_cost_usd == d("8.00")


def test_filters_keep_the_cluster_totals() -> None:
    n = node("n", 4, 8.0, 0, H)
    led = build([n], [seg("a", n, 2, 0, H, team="a", labels={"env": "prod"}),
                      seg("b", n, 1, 0, H, team="b", labels={"env": "dev"}),
                      seg("c", n, 1, 0, H, team="a", labels={"env": "dev"})])  # fmt: skip
    rep = spend_report(led, 0, H, aggregate=["job"], filters=Filters(team="a"))
    assert totals(rep) == {("a",): "4.00", ("c",): "2.00"} and rep.other.total_cost_usd == d("2.00")
    rep = spend_report(led, 0, H, aggregate=["team"], filters=Filters(team="a", labels={"env": "dev"}))
    assert totals(rep) == {("a",): "2.00"} and rep.other.total_cost_usd == d("6.00")
    assert rep.totals.total_cost_usd == d("8.00")


def test_no_rules_matches_allocate() -> None:
    n = node("n", 8, 13.37, 0, 5000, cpu=64000, mem=512 * GIB)
    led = build([n], [seg("a", n, Fraction(3, 7), 17, 4000, cpu=3000, mem=5000, team="a"),
                      seg("b", n, Fraction(250, 1000), 100, 4999, team="b")])  # fmt: skip
    rep = spend_report(led, 0, 5000)
    alloc = allocate(led, 0, 5000, ["team"])
    assert [(r.key, r.total_cost_usd, r.gpu_cost_usd) for r in rep.rows] == [
        (r.key, r.total_cost_usd, r.gpu_cost_usd) for r in alloc.rows
    ]
    assert rep.idle.total_cost_usd == alloc.idle.total_cost_usd


def test_open_records_as_of() -> None:
    led = Ledger()
    from gpufleet.model.node import Node

    led.open_node(Node("n", gpu_model="A100-80GB", gpu_count=2), hourly_usd=4.0, start=0)
    led.open(job_id="j", node="n", start=0, gpu_share=1, team="a", priority_class="urgent")
    rules = load_rules({"priority_multipliers": {"urgent": 2}})
    rep = spend_report(led, 0, 10 * H, rules=rules, as_of=H)
    assert rep.window_end == H and totals(rep) == {("a",): "4.00"} and rep.adjustment.total_cost_usd == d("2.00")
    assert rep.totals.total_cost_usd == d("4.00")


def test_daily_costs_in_a_zone_with_a_dst_change() -> None:
    """$1/h from Sat 2026-03-07 00:00 to Tue 03-10 00:00 New York: 24, 23 (clocks go forward), 24."""
    ny = ZoneInfo("America/New_York")
    t0 = datetime(2026, 3, 7, tzinfo=ny).timestamp()
    t1 = datetime(2026, 3, 10, tzinfo=ny).timestamp()
    n = node("n", 1, 1.0, t0, t1)
    led = build([n], [seg("j", n, 1, t0 + 12 * H, t0 + 36 * H, team="a")])
    days = daily_costs(led, t0, t1, aggregate=["team"], tz="America/New_York")
    assert [x.day for x in days] == [date(2026, 3, 7), date(2026, 3, 8), date(2026, 3, 9)]
    assert [str(x.total_usd) for x in days] == ["24.00", "23.00", "24.00"]
    # the job: 12:00 Sat .. 13:00 Sun local (24 real hours): 12 h on Saturday, 12 h on Sunday
    assert [dict(x.by_key) for x in days] == [{("a",): d("12.00")}, {("a",): d("12.00")}, {}]
    assert [str(x.idle_usd) for x in days] == ["12.00", "11.00", "24.00"]
    ruled = daily_costs(led, t0, t1, tz=ny, rules=load_rules({"priority_multipliers": {"normal": 2}}))
    assert [str(x.adjustment_usd) for x in ruled] == ["12.00", "12.00", "0.00"]
    assert [str(x.total_usd) for x in ruled] == ["24.00", "23.00", "24.00"]


# -- conservation to the cent, random ledgers and rules ----------------------------------------------

ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Europe/London"]
BASES = [
    datetime(2026, 3, 7, 18, tzinfo=ZoneInfo("UTC")).timestamp(),  # the US spring-forward night
    datetime(2026, 10, 31, 18, tzinfo=ZoneInfo("UTC")).timestamp(),  # the UK fall-back night follows
]
SHARES = [Fraction(1), Fraction(1, 2), Fraction(1, 7), Fraction(3, 7), Fraction(250, 1000)]
PRICES = [0.37, 1.0, 2.5, 8.0, 13.37, 32.7726]
MULTS = ["0", "0.5", "0.75", "1.25", "2", "1.1"]
CLOCK = st.sampled_from([f"{h:02d}:{m:02d}" for h in (0, *range(3, 24)) for m in (0, 30)])  # no 01/02: DST


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    base = draw(st.sampled_from(BASES))
    minutes = 36 * 60
    nodes: list[NodeInterval] = []
    segs: list[UsageSegment] = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        cap = draw(st.sampled_from([OD, SPOT, RES]))
        a = draw(st.integers(0, minutes - 2))
        b = draw(st.integers(a + 1, minutes))
        cuts = [a, b]
        if b - a > 2 and draw(st.booleans()):  # a price change
            cuts.insert(1, draw(st.integers(a + 1, b - 1)))
        for k in range(len(cuts) - 1):
            n = node(
                f"n{i}",
                gpus,
                draw(st.sampled_from(PRICES)),
                base + cuts[k] * 60,
                base + cuts[k + 1] * 60,
                cap=cap,
                cpu=draw(st.sampled_from([0, 8000])),
                mem=draw(st.sampled_from([0, 64 * GIB])),
            )
            nodes.append(n)
            for j in range(draw(st.integers(0, gpus))):
                s0 = draw(st.integers(cuts[k], cuts[k + 1] - 1))
                s1 = draw(st.integers(s0 + 1, cuts[k + 1]))
                segs.append(
                    seg(
                        f"j{i}{k}{j}",
                        n,
                        draw(st.sampled_from(SHARES)),
                        base + s0 * 60,
                        base + s1 * 60,
                        team=draw(st.sampled_from(["a", "b", "c"])),
                        cpu=min(n.cpu_milli, 1000),
                        mem=min(n.memory_mib, 1024),
                        prio=draw(st.sampled_from(["background", "low", "normal", "high", "urgent"])),
                    )
                )
    windows = [
        {"name": f"w{k}", "start": draw(CLOCK), "end": draw(CLOCK), "multiplier": draw(st.sampled_from(MULTS)),
         **({"days": draw(st.lists(st.sampled_from(["mon", "tue", "wed", "thu", "fri", "sat", "sun"]), min_size=1,
                                   unique=True))} if draw(st.booleans()) else {})}
        for k in range(draw(st.integers(0, 3)))
    ]  # fmt: skip
    rules: dict[str, Any] = {
        "timezone": draw(st.sampled_from(ZONES)),
        "windows": windows,
        "applies_to": draw(st.lists(st.sampled_from(["on-demand", "spot", "reserved"]), unique=True)),
        "priority_multipliers": draw(
            st.dictionaries(st.sampled_from(["background", "low", "normal", "high", "urgent"]),
                            st.sampled_from(["0.8", "1.5", "1", "0.333", "2"]))
        ),
    }  # fmt: skip
    if draw(st.booleans()):
        rules["spot_usd_per_gpu_hour"] = {"A100-80GB": draw(st.sampled_from(["0.9", "1.2345"]))}
    if draw(st.booleans()):
        rules["nodes"] = {"n0": {"hourly_usd": draw(st.sampled_from(["3", "7.77"]))}}
    if draw(st.booleans()):
        rules["reservations"] = [{
            "name": "r", "gpu_model": "A100-80GB", "gpus": draw(st.integers(1, 12)),
            "hourly_usd": draw(st.sampled_from(["1.5", "7", "10.01"])),
            "start": datetime.fromtimestamp(base + draw(st.integers(0, minutes)) * 60, ZoneInfo("UTC")).isoformat(),
        }]  # fmt: skip
    w0 = draw(st.integers(0, minutes - 1))
    w1 = draw(st.integers(w0 + 1, minutes))
    return {
        "nodes": nodes,
        "segs": segs,
        "rules": rules,
        "window": (base + w0 * 60, base + w1 * 60),
        "aggregate": draw(st.sampled_from([["team"], ["job"], ["priority"], ["team", "node"], ["capacity_type"]])),
        "spread": draw(st.booleans()),
        "team": draw(st.sampled_from([None, "a"])),
    }


def _multiplier(rules: dict[str, Any], t: float) -> Fraction:
    """The oracle: the multiplier at instant ``t`` read from local wall-clock time, independently
    of the implementation's occurrence arithmetic (window edges avoid the DST hours 01-02)."""
    zone = ZoneInfo(rules["timezone"])
    local = datetime.fromtimestamp(t, zone)
    minute = local.hour * 60 + local.minute + local.second / 60
    days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    for w in rules["windows"]:
        s = int(w["start"][:2]) * 60 + int(w["start"][3:])
        e = int(w["end"][:2]) * 60 + int(w["end"][3:])
        if e > s:
            inside, started = s <= minute < e, local.date()
        elif minute >= s:
            inside, started = True, local.date()
        else:
            inside, started = minute < e, local.date() - timedelta(days=1)
        if inside and ("days" not in w or days[started.weekday()] in w["days"]):
            return Fraction(w["multiplier"])
    return Fraction(1)


def _oracle_node_cost(sc: dict[str, Any]) -> Fraction:
    """What the nodes cost in the window, minute by minute (every edge is on a whole minute)."""
    rules = sc["rules"]
    ws, we = sc["window"]
    applies = set(rules["applies_to"])
    total = Fraction(0)
    for n in sc["nodes"]:
        own = rules.get("nodes", {}).get(n.node)
        if own is not None:
            price, windows = Fraction(own["hourly_usd"]), False
        elif n.capacity_type is SPOT and "spot_usd_per_gpu_hour" in rules:
            price, windows = Fraction(rules["spot_usd_per_gpu_hour"]["A100-80GB"]) * n.gpu_count, True
        else:
            price, windows = Fraction(repr(n.hourly_usd)), True
        windows = windows and str(n.capacity_type) in applies
        t = max(n.start, ws)
        while t < min(n.end, we):
            m = _multiplier(rules, t + 30) if windows else Fraction(1)
            total += price * m / 60
            t += 60
    return total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_conservation_to_the_cent(sc: dict[str, Any]) -> None:
    led = build(sc["nodes"], sc["segs"])
    rules = load_rules(sc["rules"])
    ws, we = sc["window"]
    rep = spend_report(led, ws, we, aggregate=sc["aggregate"], rules=rules, spread_idle=sc["spread"],
                      filters=Filters(team=sc["team"]))  # fmt: skip
    # The rule, column by column, to the cent.
    for col in ("gpu_cost_usd", "cpu_cost_usd", "memory_cost_usd", "total_cost_usd"):
        lhs = (
            sum((getattr(r, col) for r in rep.rows), Decimal(0))
            + getattr(rep.other, col)
            - getattr(rep.adjustment, col)
            + getattr(rep.idle, col)
            + getattr(rep.reservation_unused, col)
        )
        assert lhs == getattr(rep.totals, col), col
    for r in rep.rows:
        assert r.gpu_cost_usd + r.cpu_cost_usd + r.memory_cost_usd == r.total_cost_usd
    # The node cost is the exact cost rounded half up; with no reservation it matches the oracle.
    priced = apply_rules(led, ws, we, rules)
    exact = allocate(priced.ledger, ws, we, ["team"]).node_cost_exact_usd
    assert rep.node_cost_usd == Decimal(math.floor(exact * 100 + Fraction(1, 2))).scaleb(-2)
    covers_reserved = "reservations" in sc["rules"] and any(
        n.capacity_type is RES and n.node not in sc["rules"].get("nodes", {}) for n in sc["nodes"]
    )
    if not covers_reserved:
        assert exact == _oracle_node_cost(sc)
    for r in rep.reservations:  # committed = covered + unused, never negative
        assert r.committed_usd == r.covered_usd + r.unused_usd and r.unused_usd >= 0
    # Without multipliers there is no adjustment; with no rules the report is allocate's.
    if not rules.has_priority_multipliers:
        assert rep.adjustment.total_cost_usd == 0


# -- the API ----------------------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


def test_usage_api_with_rules_filters_and_new_aggregates(api: Api) -> None:
    """The test_api cluster (n1 4xA100 $8/h since 02:00 UTC; alpha 2 GPUs 08:00-11:00, beta 1 GPU
    since 10:00) with off-peak 00:00-06:00 UTC at 0.5 and normal priority charged x1.5:
    nodes 4 h x $4 + 6 h x $8 = $64; alpha $12 → $18, beta $4 → $6; adjustment $8; idle $64 − $16."""
    ids = _cluster(api)
    get = api.client.get
    plain = get(f"/v1/usage?window={WINDOW}", headers=api.h("admin")).json()
    assert plain["rules"] is None and plain["adjustment"]["total_cost_usd"] == "0.00"
    assert plain["node_cost_usd"] == "80.00" and plain["other"]["total_cost_usd"] == "0.00"

    api.client.app.state.ctx.pricing_rules = load_rules(  # type: ignore[attr-defined]
        {"windows": [{"name": "night", "start": "00:00", "end": "06:00", "multiplier": 0.5}],
         "priority_multipliers": {"normal": 1.5}}, source="test rules")  # fmt: skip
    rep = get(f"/v1/usage?window={WINDOW}", headers=api.h("admin")).json()
    rows = {r["key"]["team"]: (r["total_cost_usd"], r["adjustment_usd"]) for r in rep["rows"]}
    assert rows == {"alpha": ("18.00", "6.00"), "beta": ("6.00", "2.00")}
    assert rep["adjustment"]["total_cost_usd"] == "8.00" and rep["idle"]["total_cost_usd"] == "48.00"
    assert rep["totals"]["total_cost_usd"] == "64.00" and rep["rules"] == "test rules"

    by = get(f"/v1/usage?window={WINDOW}&aggregate=priority,cost_center", headers=api.h("admin")).json()
    assert [(r["key"], r["total_cost_usd"]) for r in by["rows"]] == [
        ({"priority": "normal", "cost_center": ""}, "24.00")
    ]
    f = get(f"/v1/usage?window={WINDOW}&aggregate=job&label=owner=ann", headers=api.h("admin")).json()
    assert [(r["key"], r["total_cost_usd"]) for r in f["rows"]] == [({"job": ids["a"]}, "18.00")]
    assert f["filters"] == {"label:owner": "ann"} and f["other"]["total_cost_usd"] == "6.00"
    f = get(f"/v1/usage?window={WINDOW}&team=beta&spread_idle=true", headers=api.h("admin")).json()
    # beta: (4 + 48 x 4/16) x 1.5
    assert [(r["key"], r["total_cost_usd"]) for r in f["rows"]] == [({"team": "beta"}, "24.00")]
    # a member sees its own team, and may not ask for another
    mine = get(f"/v1/usage?window={WINDOW}&aggregate=job", headers=api.h("bob")).json()
    assert [(r["key"], r["total_cost_usd"]) for r in mine["rows"]] == [({"job": ids["b"]}, "6.00")]
    assert get(f"/v1/usage?window={WINDOW}&team=alpha", headers=api.h("bob")).status_code == 403
    bad = get(f"/v1/usage?window={WINDOW}&label=nolabel", headers=api.h("admin"))
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.label[0]"
    bad = get(f"/v1/usage?window={WINDOW}&aggregate=team,colour", headers=api.h("admin"))
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.aggregate[1]"
    assert T0  # the cluster's clock
