"""The usage ledger and cost attribution: hand-computed scenarios and conservation properties."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.allocation import Allocation, CostLine, allocate
from gpufleet.cost.ledger import Ledger, LedgerError, NodeInterval, UsageSegment, gpu_share
from gpufleet.cost.pricesplit import UnitPrices, split_node_price
from gpufleet.errors import InputError
from gpufleet.model import CapacityType, GpuRequest, Job, JobSpec, Node, PodPlacement

OD = CapacityType.ON_DEMAND
# Round unit prices for hand computation: $0.05 per vCPU-hour, $0.01 per GiB-hour.
SIMPLE = UnitPrices(Fraction("0.05"), Fraction("0.01"), Fraction("0.05"), Fraction("0.01"))
GIB = 1024


# -- builders --------------------------------------------------------------------------------------


@dataclass
class Job_:
    job_id: str
    node: str
    start: float
    end: float
    share: Fraction = Fraction(0)
    cpu_milli: int = 0
    memory_mib: int = 0
    team: str = "default"
    labels: dict[str, str] = field(default_factory=dict)


def node(
    name: str,
    gpus: int,
    cpu_milli: int,
    memory_mib: int,
    usd: float,
    start: float,
    end: float,
    model: str = "A100-80GB",
    pool: str = "default",
    capacity: CapacityType = OD,
) -> NodeInterval:
    return NodeInterval(name, pool, model if gpus else "", gpus, cpu_milli, memory_mib, capacity, usd, start, end)


def ledger(nodes: list[NodeInterval], jobs: list[Job_]) -> Ledger:
    led = Ledger()
    by_name = {}
    for iv in nodes:
        led.add_node(iv)
        by_name[iv.node] = iv
    for j in jobs:
        iv = by_name[j.node]
        led.append(
            UsageSegment(
                j.job_id,
                j.team,
                "",
                "default",
                "",
                j.labels,
                iv.node,
                iv.pool,
                iv.gpu_model,
                iv.capacity_type,
                j.share,
                j.cpu_milli,
                j.memory_mib,
                iv.hourly_usd,
                j.start,
                j.end,
            )
        )
    return led


def usd(*xs: str) -> tuple[Decimal, ...]:
    return tuple(Decimal(x) for x in xs)


def cost(line: CostLine) -> tuple[Decimal, ...]:
    return (line.gpu_cost_usd, line.cpu_cost_usd, line.memory_cost_usd, line.total_cost_usd)


def assert_adds_up(a: Allocation) -> None:
    for col in ("gpu_cost_usd", "cpu_cost_usd", "memory_cost_usd", "total_cost_usd"):
        assert sum((getattr(r, col) for r in a.rows), Decimal(0)) + getattr(a.idle, col) == getattr(a.totals, col)
    for line in (*a.rows, a.idle, a.totals):
        assert line.gpu_cost_usd + line.cpu_cost_usd + line.memory_cost_usd == line.total_cost_usd


# -- the pricing rule ------------------------------------------------------------------------------


def test_split_gpu_node_cpu_and_memory_at_unit_prices_rest_over_gpus() -> None:
    # 1 GPU, 8 vCPU, 32 GiB at $4/h: CPU 8 x 0.05 = 0.40, memory 32 x 0.01 = 0.32, GPU 3.28
    sp = split_node_price(4.0, gpu_count=1, cpu_milli=8000, memory_mib=32 * GIB, unit_prices=SIMPLE)
    assert sp.usd_per_gpu_hour == Fraction("3.28")
    assert (sp.usd_per_vcpu_hour, sp.usd_per_gib_hour) == (Fraction("0.05"), Fraction("0.01"))


def test_split_default_unit_prices_are_opencosts() -> None:
    # p5.48xlarge: 8 H100, 192 vCPU, 2048 GiB at $98.32/h
    sp = split_node_price(98.32, gpu_count=8, cpu_milli=192_000, memory_mib=2048 * GIB)
    assert sp.usd_per_vcpu_hour == Fraction("0.031611")
    assert sp.usd_per_gib_hour == Fraction("0.004237")
    assert sp.usd_per_gpu_hour == Fraction("10.446664")  # (98.32 - 6.069312 - 8.677376) / 8
    spot = split_node_price(
        30.0, gpu_count=8, cpu_milli=192_000, memory_mib=2048 * GIB, capacity_type=CapacityType.SPOT
    )
    assert (spot.usd_per_vcpu_hour, spot.usd_per_gib_hour) == (Fraction("0.006655"), Fraction("0.000892"))


def test_split_caps_cpu_and_memory_at_the_node_price() -> None:
    # CPU 64 x 0.05 = 3.20 + memory 256 x 0.01 = 2.56 = 5.76 > $1: scaled to fit, GPUs get nothing
    sp = split_node_price(1.0, gpu_count=1, cpu_milli=64_000, memory_mib=256 * GIB, unit_prices=SIMPLE)
    assert sp.usd_per_gpu_hour == 0
    assert sp.usd_per_vcpu_hour * 64 + sp.usd_per_gib_hour * 256 == 1
    assert sp.usd_per_vcpu_hour / sp.usd_per_gib_hour == 5


def test_split_cpu_only_node_in_proportion() -> None:
    # 4 vCPU + 8 GiB at $0.50/h: unit value 0.20 + 0.08; CPU gets 0.5 x 0.20/0.28 = 5/14
    sp = split_node_price(0.5, gpu_count=0, cpu_milli=4000, memory_mib=8 * GIB, unit_prices=SIMPLE)
    assert sp.usd_per_vcpu_hour * 4 == Fraction(5, 14)
    assert sp.usd_per_gib_hour * 8 == Fraction(1, 7)
    with pytest.raises(LedgerError, match="cannot be priced"):
        split_node_price(1.0, gpu_count=0, cpu_milli=0, memory_mib=0)


def test_gpu_share_of_requests() -> None:
    assert gpu_share(GpuRequest(count=1, milli=1000, mig_profile="1g.10gb"), "A100-80GB") == Fraction(1, 7)
    assert gpu_share(GpuRequest(count=1, mig_profile="3g.40gb"), "A100-80GB") == Fraction(3, 7)
    assert gpu_share(GpuRequest(count=1, milli=300), "T4") == Fraction(3, 10)
    assert gpu_share(GpuRequest(count=4), "H100") == 4
    with pytest.raises(LedgerError, match=r"T4 has no MIG profile '1g\.10gb'"):
        gpu_share(GpuRequest(count=1, mig_profile="1g.10gb"), "T4")


# -- hand-computed scenarios -----------------------------------------------------------------------

T4_NODE = node("t4", 1, 4000, 16 * GIB, 1.0, 0, 3600, model="T4")  # GPU 0.64, CPU 0.20, memory 0.16


@dataclass(frozen=True)
class Scenario:
    nodes: list[NodeInterval]
    jobs: list[Job_]
    window: tuple[float, float]
    spread: bool
    rows: dict[tuple[str, ...], tuple[Decimal, ...]]
    idle: tuple[Decimal, ...]
    totals: tuple[Decimal, ...]
    gpu_seconds: dict[tuple[str, ...], float]
    prices: UnitPrices = SIMPLE


SCENARIOS = {
    # A 1g.10gb MIG slice (1/7 of the GPU), 1 vCPU, 4 GiB for an hour on a $4/h A100-80GB node.
    # x: GPU 3.28/7 = 0.468571.. CPU 0.05 memory 0.04 = 0.558571..; idle 3.441428.. → 0.56 + 3.44.
    "mig 1/7": Scenario(
        nodes=[node("a", 1, 8000, 32 * GIB, 4.0, 0, 3600)],
        jobs=[Job_("m1", "a", 0, 3600, Fraction(1, 7), 1000, 4 * GIB, team="x")],
        window=(0, 3600),
        spread=False,
        rows={("x",): usd("0.47", "0.05", "0.04", "0.56")},
        idle=usd("2.81", "0.35", "0.28", "3.44"),
        totals=usd("3.28", "0.40", "0.32", "4.00"),
        gpu_seconds={("x",): 3600 / 7},
    ),
    # Time-sliced fractions on a $1/h T4: a holds 0.3 GPU, 1 vCPU, 2 GiB for 1 h (0.192+0.05+0.02);
    # b holds 0.5 GPU, 2 vCPU, 4 GiB for 30 min (0.16+0.05+0.02); idle 0.508 (0.288+0.10+0.12).
    "fractional": Scenario(
        nodes=[T4_NODE],
        jobs=[
            Job_("f1", "t4", 0, 3600, Fraction(3, 10), 1000, 2 * GIB, team="a"),
            Job_("f2", "t4", 0, 1800, Fraction(1, 2), 2000, 4 * GIB, team="b"),
        ],
        window=(0, 3600),
        spread=False,
        rows={("a",): usd("0.19", "0.05", "0.02", "0.26"), ("b",): usd("0.16", "0.05", "0.02", "0.23")},
        idle=usd("0.29", "0.10", "0.12", "0.51"),
        totals=usd("0.64", "0.20", "0.16", "1.00"),
        gpu_seconds={("a",): 1080.0, ("b",): 900.0},
    ),
    # Same, idle spread per component in proportion to cost: GPU idle 0.288 → a 0.157090.., b 0.130909..;
    # CPU 0.10 and memory 0.12 halved. a = 0.529090.. → 0.53, b = 0.470909.. → 0.47.
    "spread idle": Scenario(
        nodes=[T4_NODE],
        jobs=[
            Job_("f1", "t4", 0, 3600, Fraction(3, 10), 1000, 2 * GIB, team="a"),
            Job_("f2", "t4", 0, 1800, Fraction(1, 2), 2000, 4 * GIB, team="b"),
        ],
        window=(0, 3600),
        spread=True,
        rows={("a",): usd("0.35", "0.10", "0.08", "0.53"), ("b",): usd("0.29", "0.10", "0.08", "0.47")},
        idle=usd("0", "0", "0", "0"),
        totals=usd("0.64", "0.20", "0.16", "1.00"),
        gpu_seconds={("a",): 1080.0, ("b",): 900.0},
    ),
    # Whole GPUs on a p5.48xlarge ($98.32/h) at OpenCost's unit prices: 2 GPUs, 24 vCPU, 256 GiB for 2 h.
    # GPU 2 x 2 x 10.446664 = 41.786656, CPU 1.517328, memory 2.169344 = 45.473328 → 45.47; the
    # largest remainders (.9344, .7328) get the cents, so GPU shows 41.78 (not 41.79).
    "whole gpus": Scenario(
        nodes=[node("h", 8, 192_000, 2048 * GIB, 98.32, 0, 7200, model="H100-80GB")],
        jobs=[Job_("w", "h", 0, 7200, Fraction(2), 24_000, 256 * GIB, team="t")],
        window=(0, 7200),
        spread=False,
        prices=UnitPrices(),
        rows={("t",): usd("41.78", "1.52", "2.17", "45.47")},
        idle=usd("125.36", "10.62", "15.19", "151.17"),
        totals=usd("167.14", "12.14", "17.36", "196.64"),
        gpu_seconds={("t",): 14400.0},
    ),
    # A window [1800, 5400) cuts both jobs on a $1/h T4 living [0, 7200): a holds 0.5 GPU over
    # [0, 3600) → 0.5 h in the window = 0.16; b holds 0.5 GPU over [2700, 7200) → 0.75 h = 0.24.
    "window cuts": Scenario(
        nodes=[node("t4", 1, 4000, 16 * GIB, 1.0, 0, 7200, model="T4")],
        jobs=[
            Job_("a", "t4", 0, 3600, Fraction(1, 2), team="a"),
            Job_("b", "t4", 2700, 7200, Fraction(1, 2), team="b"),
        ],
        window=(1800, 5400),
        spread=False,
        rows={("a",): usd("0.16", "0", "0", "0.16"), ("b",): usd("0.24", "0", "0", "0.24")},
        idle=usd("0.24", "0.20", "0.16", "0.60"),
        totals=usd("0.64", "0.20", "0.16", "1.00"),
        gpu_seconds={("a",): 900.0, ("b",): 1350.0},
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str) -> None:
    sc = SCENARIOS[name]
    led = ledger(sc.nodes, sc.jobs)
    a = allocate(led, *sc.window, ("team",), spread_idle=sc.spread, unit_prices=sc.prices)
    assert {r.key: cost(r) for r in a.rows} == sc.rows
    assert cost(a.idle) == sc.idle
    assert cost(a.totals) == sc.totals
    for key, seconds in sc.gpu_seconds.items():
        assert a.by_key()[key].gpu_seconds == pytest.approx(seconds)
    assert_adds_up(a)


def test_cpu_only_node_and_labels() -> None:
    led = ledger(
        [node("c", 0, 4000, 8 * GIB, 0.5, 0, 3600)],
        [
            Job_("j1", "c", 0, 3600, cpu_milli=2000, memory_mib=4 * GIB, labels={"exp": "e1"}),
            Job_("j2", "c", 0, 3600, cpu_milli=1000),
        ],
    )
    a = allocate(led, 0, 3600, ("label:exp",), unit_prices=SIMPLE)
    # CPU 5/14 $/h for 4 vCPU, memory 1/7 for 8 GiB: j1 = 5/28 + 1/14 = 0.25, j2 = 5/56 = 0.0892..
    assert cost(a.row("e1")) == usd("0", "0.18", "0.07", "0.25")
    assert cost(a.row("")) == usd("0", "0.09", "0", "0.09")
    assert cost(a.idle) == usd("0", "0.09", "0.07", "0.16")
    assert a.totals.total_cost_usd == Decimal("0.50")
    assert_adds_up(a)


def test_open_segments_and_as_of() -> None:
    led = Ledger()
    led.open_node(Node("t4", "T4", 1, 4000, 16 * GIB), hourly_usd=1.0, start=0)
    h = led.open(job_id="j", node="t4", start=0, gpu_share=Fraction(1, 2), team="a")
    assert led.open_count == 1
    # as of 1800 the job has held half a GPU for half an hour: 0.5 x 0.5 x 0.64 = 0.16
    a = allocate(led, 0, 3600, as_of=1800, unit_prices=SIMPLE)
    assert a.window_end == 1800
    assert cost(a.row("a")) == usd("0.16", "0", "0", "0.16")
    assert a.totals.total_cost_usd == Decimal("0.50")
    assert led.segments(as_of=1800)[0].end == 1800
    assert led.segments() == []
    assert led.node_intervals(as_of=1800)[0].end == 1800
    seg = led.close(h, 2700)
    assert (seg.gpu_share, seg.pool, seg.node_hourly_usd, seg.end) == (Fraction(1, 2), "default", 1.0, 2700)
    with pytest.raises(LedgerError, match="not open"):
        led.close(h, 3000)
    led.close_node("t4", 3600)
    a = allocate(led, 0, 3600, unit_prices=SIMPLE)
    assert cost(a.row("a")) == usd("0.24", "0", "0", "0.24")
    assert a.totals.total_cost_usd == Decimal("1.00")


def test_open_pod_from_job_and_placement() -> None:
    led = Ledger()
    led.open_node(Node("a", "A100-80GB", 1, 8000, 32 * GIB, pool="mig"), hourly_usd=4.0, start=0)
    spec = JobSpec(
        "m",
        team="x",
        labels={"exp": "e"},
        gpu=GpuRequest(count=1, mig_profile="1g.10gb"),
        cpu_milli=1000,
        memory_mib=4 * GIB,
    )
    h = led.open_pod(Job("j1", spec, 0.0), PodPlacement("a", (0,), mig_mask=1), start=0)
    seg = led.close(h, 3600)
    assert (seg.gpu_share, seg.team, seg.pool, seg.labels["exp"]) == (Fraction(1, 7), "x", "mig", "e")
    a = allocate(led, 0, 3600, ("team", "label:exp"), unit_prices=SIMPLE, as_of=3600)
    assert cost(a.row("x", "e")) == usd("0.47", "0.05", "0.04", "0.56")


def test_price_change_is_a_new_interval() -> None:
    led = Ledger()
    led.open_node(Node("t4", "T4", 1, 4000, 16 * GIB), hourly_usd=1.0, start=0)
    led.close_node("t4", 3600)
    led.open_node(Node("t4", "T4", 1, 4000, 16 * GIB), hourly_usd=2.0, start=3600)
    led.close_node("t4", 7200)
    assert allocate(led, 0, 7200).totals.total_cost_usd == Decimal("3.00")
    with pytest.raises(LedgerError, match="not inside one recorded interval"):
        led.append(
            UsageSegment("j", "a", "", "", "", {}, "t4", "default", "T4", OD, Fraction(1), 0, 0, 1.0, 1800, 5400)
        )


# -- records that are refused ----------------------------------------------------------------------


def seg(**kw: object) -> UsageSegment:
    base: dict[str, object] = dict(
        job_id="j",
        team="a",
        project="",
        namespace="",
        experiment="",
        labels={},
        node="t4",
        pool="default",
        gpu_model="T4",
        capacity_type=OD,
        gpu_share=Fraction(1),
        cpu_milli=0,
        memory_mib=0,
        node_hourly_usd=1.0,
        start=0.0,
        end=60.0,
    )
    base.update(kw)
    return UsageSegment(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field", "message"),
    [
        (dict(start=100.0, end=50.0), "end", "before start"),
        (dict(gpu_share=Fraction(2)), "gpu_share", "exceeds node t4's 1 GPUs"),
        (dict(gpu_share=Fraction(1, 3)), "gpu_share", "not a whole number of 1/7000 GPU"),
        (dict(gpu_share=Fraction(-1, 2)), "gpu_share", ">= 0"),
        (dict(cpu_milli=8000), "cpu_milli", "exceeds"),
        (dict(memory_mib=1 << 20), "memory_mib", "exceeds"),
        (dict(node="nope"), "node", "unknown node nope"),
        (dict(start=3000.0, end=4000.0), "start", "not inside"),
        (dict(node_hourly_usd=2.0), "node_hourly_usd", "differs from node t4's price"),
        (dict(capacity_type=CapacityType.SPOT), "capacity_type", "differs"),
    ],
)
def test_bad_segments_are_refused(kw: dict[str, object], field: str, message: str) -> None:
    led = ledger([node("t4", 1, 4000, 16 * GIB, 1.0, 0, 3600, model="T4")], [])
    with pytest.raises(LedgerError, match=message) as exc:
        led.append(seg(**kw))
    assert exc.value.field == field
    assert len(led) == 0


def test_bad_nodes_and_windows_are_refused() -> None:
    led = ledger([node("t4", 1, 4000, 16 * GIB, 1.0, 0, 3600, model="T4")], [])
    with pytest.raises(LedgerError, match="overlaps"):
        led.add_node(node("t4", 1, 4000, 16 * GIB, 1.0, 1800, 7200, model="T4"))
    with pytest.raises(LedgerError, match="no GPUs, CPU or memory"):
        node("empty", 0, 0, 0, 1.0, 0, 10)
    with pytest.raises(LedgerError, match="hourly_usd"):
        node("neg", 1, 0, 0, -1.0, 0, 10)
    with pytest.raises(InputError, match="unknown aggregate 'teams'"):
        allocate(led, 0, 10, ("teams",))
    with pytest.raises(InputError, match="bad window"):
        allocate(led, 10, 0)
    led.open_node(Node("n", "T4", 1, 1000, 1024), hourly_usd=1.0, start=0)
    h = led.open(job_id="j", node="n", start=10, gpu_share=1)
    with pytest.raises(LedgerError, match="after its end"):
        led.close_node("n", 5)
    led.close_node("n", 100)
    with pytest.raises(LedgerError, match="after node n's interval ends"):
        led.close(h, 200)


# -- properties ------------------------------------------------------------------------------------

SHARES = [
    Fraction(1, 7),
    Fraction(3, 7),
    Fraction(1, 10),
    Fraction(1, 2),
    Fraction(1),
    Fraction(2),
    Fraction(0),
    Fraction(999, 1000),
]
PRICES = st.sampled_from([0.0, 0.35, 0.526, 1.0, 3.673, 12.29, 40.96575, 98.32])


@st.composite
def ledgers(draw: st.DrawFn) -> tuple[Ledger, list[NodeInterval]]:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cpu = draw(st.sampled_from([0, 1000, 8000, 96_000])) if gpus else draw(st.sampled_from([1000, 8000]))
        mem = draw(st.sampled_from([0, 1024, 65_536, 1 << 20]))
        start = draw(st.integers(0, 5000)) + draw(st.sampled_from([0.0, 0.25, 0.123456]))
        end = start + draw(st.integers(0, 20_000))
        cap = draw(st.sampled_from(list(CapacityType)))
        nodes.append(
            node(f"n{i}", gpus, cpu, mem, draw(PRICES), start, end, model="A100-80GB", pool=f"p{i % 2}", capacity=cap)
        )
    jobs = []
    for k in range(draw(st.integers(0, 25))):
        iv = draw(st.sampled_from(nodes))
        s = draw(st.floats(iv.start, iv.end))
        e = draw(st.floats(s, iv.end))
        share = draw(st.sampled_from([x for x in SHARES if x <= iv.gpu_count]))
        jobs.append(
            Job_(
                f"j{k}",
                iv.node,
                s,
                e,
                share,
                draw(st.integers(0, iv.cpu_milli)),
                draw(st.integers(0, iv.memory_mib)),
                team=draw(st.sampled_from(["a", "b", "c"])),
                labels=draw(st.sampled_from([{}, {"exp": "x"}, {"exp": "y"}])),
            )
        )
    return ledger(nodes, jobs), nodes


def exact_node_cents(nodes: list[NodeInterval], ws: float, we: float) -> int:
    total = Fraction(0)
    for iv in nodes:
        dur = min(round(iv.end * 1e6), round(we * 1e6)) - max(round(iv.start * 1e6), round(ws * 1e6))
        if dur > 0:
            total += Fraction(repr(iv.hourly_usd)) * dur / 3_600_000_000
    return math.floor(total * 100 + Fraction(1, 2))


@settings(max_examples=150, deadline=None)
@given(
    data=ledgers(),
    ws=st.floats(0, 10_000),
    length=st.floats(0, 30_000),
    spread=st.booleans(),
    aggregate=st.sampled_from(
        [("team",), ("label:exp",), ("node",), ("team", "pool"), ("capacity_type",), ("job_id",)]
    ),
)
def test_conservation_to_the_cent(
    data: tuple[Ledger, list[NodeInterval]], ws: float, length: float, spread: bool, aggregate: tuple[str, ...]
) -> None:
    led, nodes = data
    a = allocate(led, ws, ws + length, aggregate, spread_idle=spread)
    assert_adds_up(a)
    assert a.totals.total_cost_usd * 100 == exact_node_cents(nodes, ws, ws + length)


@settings(max_examples=100, deadline=None)
@given(data=ledgers(), ws=st.floats(0, 10_000), length=st.floats(0, 30_000))
def test_totals_do_not_depend_on_grouping(data: tuple[Ledger, list[NodeInterval]], ws: float, length: float) -> None:
    led, _ = data
    results = [
        allocate(led, ws, ws + length, agg)
        for agg in (("team",), ("label:exp",), ("node",), ("job_id",), ("team", "label:exp"))
    ]
    first = results[0]
    for a in results[1:]:
        assert cost(a.totals)[3] == cost(first.totals)[3]
        assert cost(a.idle) == cost(first.idle)
        assert sum(r.total_cost_usd for r in a.rows) == sum(r.total_cost_usd for r in first.rows)
        assert a.node_cost_exact_usd == first.node_cost_exact_usd
        assert sum(r.gpu_seconds for r in a.rows) == pytest.approx(sum(r.gpu_seconds for r in first.rows))


@settings(max_examples=50, deadline=None)
@given(data=ledgers(), cut=st.floats(0, 30_000))
def test_splitting_the_window_splits_the_cost(data: tuple[Ledger, list[NodeInterval]], cut: float) -> None:
    led, _ = data
    whole = allocate(led, 0, 30_000).node_cost_exact_usd
    parts = allocate(led, 0, cut).node_cost_exact_usd + allocate(led, cut, 30_000).node_cost_exact_usd
    assert whole == parts


def test_node_closed_under_a_running_job_cuts_it() -> None:
    led = Ledger()
    led.open_node(Node("t4", "T4", 1, 4000, 16 * GIB), hourly_usd=1.0, start=0)
    led.open(job_id="j", node="t4", start=0, gpu_share=1.0, team="a")  # a float share is accepted
    led.close_node("t4", 1800)
    assert led.segments(as_of=3600)[0].end == 1800
    a = allocate(led, 0, 3600, as_of=3600, unit_prices=SIMPLE)
    assert cost(a.row("a")) == usd("0.32", "0", "0", "0.32")
    assert a.totals.total_cost_usd == Decimal("0.50")
