"""Money has one path: every figure of dollars comes from :func:`gpufleet.cost.spend.spend_report`.

- a source rule (read with :mod:`ast`, like the wall-clock and layering rules): no module but
  ``cost/spend.py`` calls the low-level :func:`gpufleet.cost.allocation.allocate`;
- a property: a budget scope's spend (the helper budgets use) equals the report's total for the
  same scope and window, to the cent, for random ledgers and pricing rules;
- the example of issue 9: one $4/h node running a 24 h ``urgent`` job under an off-peak window
  (0.5x) and an urgent multiplier (1.5x) is $120.00 on the bill, so it is $120.00 in budgets
  (evaluation, status, the block check) too — not the $96.00 of unpriced allocation.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from gpufleet.cost.budgets.model import Scope, make_budget
from gpufleet.cost.budgets.status import BudgetExceededError
from gpufleet.cost.job_estimate import usd_per_gpu_hour
from gpufleet.cost.ledger import Ledger, NodeInterval, UsageSegment
from gpufleet.cost.periods import period_at
from gpufleet.cost.report import Filters
from gpufleet.cost.rules import PricingRules, load_rules
from gpufleet.cost.spend import job_costs_usd, scope_spend_usd, spend_report
from gpufleet.model.node import CapacityType, Node
from gpufleet.services.budgets import BudgetService, check_submission, committed_spend, scope_spend
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.api_support import T0, Api, make_api
from tests.support.paths import SRC

ALLOCATION = "gpufleet.cost.allocation"

# -- 1. the source rule ------------------------------------------------------------------------------

THE_PATH = "cost/spend.py"  # spend_report allocates; nothing else does
# Known exceptions that may call ``allocate`` directly (file relative to src/gpufleet → why): none.
ALLOWED_ALLOCATE: dict[str, str] = {}


def _module_of(rel: str) -> str:
    return "gpufleet." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _absolute(rel: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = _module_of(rel).split(".")
    base = parts[: len(parts) - node.level + (1 if rel.endswith("__init__.py") else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def allocate_uses(rel: str, tree: ast.Module) -> list[int]:
    """Lines where ``rel`` imports or calls :func:`gpufleet.cost.allocation.allocate` (by any name:
    ``from ...allocation import allocate as a``, ``allocation.allocate(...)``, a package re-export)."""
    fn_names: set[str] = set()  # local names bound to the function
    mod_names: set[str] = set()  # local (dotted) names bound to the module
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(rel, node)
            for alias in node.names:
                if (module == ALLOCATION and alias.name == "allocate") or (
                    module == "gpufleet.cost" and alias.name == "allocate"
                ):
                    fn_names.add(alias.asname or alias.name)
                    lines.append(node.lineno)
                elif module == "gpufleet.cost" and alias.name == "allocation":
                    mod_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ALLOCATION:
                    mod_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        by_name = isinstance(f, ast.Name) and f.id in fn_names
        by_module = isinstance(f, ast.Attribute) and f.attr == "allocate" and ast.unparse(f.value) in mod_names
        if by_name or by_module:
            lines.append(node.lineno)
    return sorted(set(lines))


def _scan() -> dict[str, list[int]]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("cost/allocation.py", THE_PATH):  # where it is defined, and the one caller
            continue
        found = allocate_uses(rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if found:
            out[rel] = found
    return out


def test_only_spend_calls_allocate() -> None:
    bad = [
        f"src/gpufleet/{rel}:{line}" for rel, found in _scan().items() if rel not in ALLOWED_ALLOCATE for line in found
    ]
    assert not bad, "money goes through gpufleet.cost.spend (spend_report and its helpers), never allocate:\n  " + (
        "\n  ".join(bad)
    )


def test_the_one_path_is_spend() -> None:
    tree = ast.parse((SRC / THE_PATH).read_text(encoding="utf-8"))
    assert allocate_uses(THE_PATH, tree), "spend_report is where allocate is called"


def test_the_scanner_sees_every_spelling() -> None:
    src = (
        "from gpufleet.cost.allocation import allocate as alloc\n"
        "from gpufleet.cost import allocation\n"
        "import gpufleet.cost.allocation\n"
        "def f(led, snap):\n"
        "    alloc(led, 0, 1)\n"
        "    allocation.allocate(led, 0, 1)\n"
        "    gpufleet.cost.allocation.allocate(led, 0, 1)\n"
        "    snap.allocate(1)\n"  # a ClusterSnapshot reservation, not money
    )
    assert allocate_uses("cost/x.py", ast.parse(src)) == [1, 5, 6, 7]
    rel = ast.parse("from .allocation import allocate\nallocate(1, 2, 3)\n")
    assert allocate_uses("cost/forecast.py", rel) == [1, 2]
    assert allocate_uses("sim/x.py", ast.parse("from .allocation import allocate\n")) == []  # gpufleet.sim


# -- 2. the property: budget spend == the report, to the cent --------------------------------------

H = 3600.0
DAY0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()  # a Monday
TEAMS = ("a", "b", "c")
PROJECTS = ("p", "q")
PRIOS = ("background", "low", "normal", "high", "urgent")
MULTS = ("0", "0.5", "0.8", "1", "1.25", "1.5", "2", "3")


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    led = Ledger()
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        cpu = draw(st.sampled_from([0, 8000, 32000]))
        mem = draw(st.sampled_from([0, 65536]))
        usd = draw(st.sampled_from([0.5, 1.0, 2.5, 4.0, 12.34, 32.77]))
        cap = draw(st.sampled_from([CapacityType.ON_DEMAND, CapacityType.SPOT]))
        start = DAY0 + draw(st.integers(0, 12)) * H
        end = start + draw(st.integers(6, 60)) * H
        n = NodeInterval(f"n{i}", "pool", "A100-80GB", gpus, cpu, mem, cap, usd, start, end)
        led.add_node(n)
        nodes.append(n)
    for j in range(draw(st.integers(0, 9))):
        n = draw(st.sampled_from(nodes))  # at most a third of a node each, three each: never overbooked
        if sum(1 for s in led.segments() if s.node == n.node) >= 3:
            continue
        a = n.start + draw(st.integers(0, int(n.end - n.start)))
        b = a + draw(st.integers(0, int(n.end - a)))
        share = Fraction(draw(st.integers(0, n.gpu_count * 7 // 3)), 7)
        cpu = draw(st.integers(0, n.cpu_milli // 3000)) * 1000
        mem = draw(st.sampled_from([0, n.memory_mib // 4]))
        labels = {"cc": draw(st.sampled_from(["1", "2"]))} if draw(st.booleans()) else {}
        led.append(
            UsageSegment(
                f"j{j}", draw(st.sampled_from(TEAMS)), draw(st.sampled_from(PROJECTS)), "default", "", labels,
                n.node, n.pool, n.gpu_model, n.capacity_type, share, cpu, mem, n.hourly_usd, a, b,
                draw(st.sampled_from(PRIOS)),
            )
        )  # fmt: skip
    return led


@st.composite
def pricing_rules(draw: st.DrawFn) -> PricingRules | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    windows = []
    for i in range(draw(st.integers(0, 3))):
        a, b = draw(st.integers(0, 23)), draw(st.integers(0, 23))
        w: dict[str, Any] = {
            "name": f"w{i}",
            "start": f"{a:02d}:00",
            "end": f"{b:02d}:{draw(st.sampled_from(['00', '30']))}",
            "multiplier": draw(st.sampled_from(MULTS)),
        }
        if draw(st.booleans()):
            w["days"] = draw(st.lists(st.sampled_from(["mon", "tue", "wed", "thu"]), min_size=1, unique=True))
        windows.append(w)
    prio = draw(st.dictionaries(st.sampled_from(PRIOS), st.sampled_from(MULTS), max_size=4))
    tz = draw(st.sampled_from(["UTC", "America/New_York", "Asia/Tokyo"]))
    return load_rules({"timezone": tz, "windows": windows, "priority_multipliers": prio})


SCOPES = st.sampled_from(
    [
        Scope("all"),
        Scope("team", "a"),
        Scope("team", "b"),
        Scope("project", "p"),
        Scope("project", "p", "a"),
        Scope("label", "cc=1"),
        Scope("label", "cc=2", "b"),
    ]
)


def report_total(led: Ledger, rules: PricingRules | None, scope: Scope, ws: float, we: float, as_of: float) -> Decimal:
    """The report's figure for ``scope``: its rows, shown by the report's own filters."""
    kw: dict[str, Any] = {"rules": rules, "as_of": as_of}
    if scope.kind == "all":
        rep = spend_report(led, ws, we, aggregate=["team"], **kw)
        # every job's charge: what the capacity cost, less what no job held, plus the chargeback
        return (
            rep.totals.total_cost_usd
            - rep.idle.total_cost_usd
            - rep.reservation_unused.total_cost_usd
            + rep.adjustment.total_cost_usd
        )
    if scope.kind == "team":
        rep = spend_report(led, ws, we, aggregate=["team"], filters=Filters(team=scope.value), **kw)
        return sum((r.total_cost_usd for r in rep.rows), Decimal(0))
    if scope.kind == "label":
        key, value = scope.label
        rep = spend_report(
            led,
            ws,
            we,
            aggregate=scope.aggregates,
            filters=Filters(team=scope.owner or None, labels={key: value}),
            **kw,
        )
        return sum((r.total_cost_usd for r in rep.rows), Decimal(0))
    rep = spend_report(led, ws, we, aggregate=scope.aggregates, filters=Filters(team=scope.owner or None), **kw)
    return sum((r.total_cost_usd for r in rep.rows if r.key[-1] == scope.value), Decimal(0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    led=ledgers(),
    rules=pricing_rules(),
    scope=SCOPES,
    ws_h=st.integers(0, 40),
    len_h=st.integers(0, 48),
    as_of_h=st.integers(0, 90),
)
def test_budget_spend_is_the_report_total(
    led: Ledger, rules: PricingRules | None, scope: Scope, ws_h: int, len_h: int, as_of_h: int
) -> None:
    ws = DAY0 + ws_h * H
    we = ws + len_h * H
    as_of = DAY0 + as_of_h * H
    spend = scope_spend_usd(led, rules, scope, ws, we, as_of=as_of)
    expected = report_total(led, rules, scope, ws, we, as_of) if min(we, as_of) > ws else Decimal(0)
    assert Decimal(str(spend)) == expected, (scope, spend, expected)
    # and a job's cost is its report row
    jobs = job_costs_usd(led, rules, ws, we, as_of=as_of)
    if min(we, as_of) > ws:
        rep = spend_report(led, ws, we, aggregate=["job"], rules=rules, as_of=as_of)
        assert jobs == {r.key[0]: float(r.total_cost_usd) for r in rep.rows}


# -- 3. the example: $120.00 on the bill, $120.00 in budgets ---------------------------------------

DAY_START = datetime(2026, 11, 11, tzinfo=UTC).timestamp()  # the job ran this whole (UTC) day
DAY_END = DAY_START + 86400.0
NOW = T0  # 2026-11-12 12:00 UTC, the same month
RULES = load_rules(
    {
        "timezone": "UTC",
        "windows": [{"name": "off-peak", "start": "22:00", "end": "06:00", "multiplier": 0.5}],
        "priority_multipliers": {"urgent": 1.5},
    }
)
# 16 h at $4 + 8 h off-peak at $2 = $80 at the rules' node prices, x 1.5 for urgent = $120;
# unpriced (the recorded $4/h, no multiplier) it would be 24 h x $4 = $96.
PRICED, UNPRICED = 120.0, 96.0


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url, pricing_rules=RULES)


def add_urgent_day(api: Api) -> str:
    """The $4/h node (8 GPUs, nothing else declared) and an urgent job of alpha holding all of it
    for the whole day."""
    with api.db.session() as s:
        repo.upsert_node(s, Node(name="n1", gpu_model="A100-80GB", gpu_count=8), hourly_usd=4.0, now=DAY_START - 3600)
    with api.db.session() as s:
        fields = {"name": "urgent", "command": ["true"], "gpus": 8, "priority_class": "urgent"}
        job, _ = repo.submit_job(
            s, fields, team="alpha", submitted_by=None, idempotency_key=None, request_sha256=None, now=DAY_START
        )
        node = next(n for n in repo.list_nodes(s) if n.name == "n1")
        repo.append_segment(
            s,
            job=job,
            run=1,
            node=node,
            gpu_share_units=8 * 7000,
            cpu_milli=0,
            memory_mib=0,
            node_hourly_usd=4.0,
            capacity_type="on-demand",
            start=DAY_START,
            end=DAY_END,
        )
        s.execute(update(JobRow).where(JobRow.id == job.id).values(state="SUCCEEDED", ended_at=DAY_END))
        return job.id


def budget(api: Api, name: str, scope: str, limit: float, **kw: Any) -> None:
    b = make_budget(id="", name=name, scope=scope, limit_usd=limit, **kw)
    with api.db.session() as s:
        budgets_repo.create_budget(s, b, created_by=None, now=DAY_START)


def test_the_example_is_120_on_the_bill_and_in_budgets(api: Api) -> None:
    add_urgent_day(api)
    budget(api, "cluster", "all", 1000.0)
    budget(api, "alpha", "team:alpha", 1000.0)
    # the bill
    window = "2026-11-11T00:00:00Z,2026-11-12T00:00:00Z"
    usage = api.client.get(f"/v1/usage?window={window}&aggregate=team", headers=api.h("admin")).json()
    assert [(r["key"], r["total_cost_usd"]) for r in usage["rows"]] == [({"team": "alpha"}, "120.00")]
    assert usage["node_cost_usd"] == "80.00" and usage["adjustment"]["total_cost_usd"] == "40.00"
    # the server's budget evaluation, with the rules object /v1/usage prices with
    svc = BudgetService(api.db, api.clock, interval_s=0.0, rules=RULES)
    spends = {ev.budget.name: ev.status.spend_usd for ev in svc.evaluate(NOW)}
    assert spends == {"cluster": PRICED, "alpha": PRICED}
    # the status route
    for name in ("cluster", "alpha"):
        st_ = api.client.get(f"/v1/budgets/{name}/status", headers=api.h("admin")).json()
        assert st_["spend_usd"] == PRICED and st_["committed_usd"] == PRICED
    # without the rules the same store is the unpriced figure the bill does not show
    with api.db.session(readonly=True) as s:
        assert scope_spend(s, Scope("all"), DAY_START, DAY_END, NOW) == UNPRICED
        assert scope_spend(s, Scope("all"), DAY_START, DAY_END, NOW, rules=RULES) == PRICED
        month = period_at("monthly", NOW)
        assert committed_spend(s, Scope("team", "alpha"), month, NOW, rules=RULES).spent_usd == PRICED


def test_the_block_check_at_submit_uses_the_priced_figure(api: Api) -> None:
    add_urgent_day(api)
    # $110 left room for the unpriced $96 plus a $4 job ($0.50 per GPU-hour x 8 GPUs x 1 h), but
    # the bill says $120: the budget is over and the job is refused
    budget(api, "alpha-block", "team:alpha", 110.0, action="block")
    fields = {"name": "next", "command": ["true"], "gpus": 8, "gpu_milli": 1000, "estimated_runtime_s": 3600.0}
    with api.db.session() as s:
        check_submission(s, fields, "alpha", NOW)  # unpriced: 96 + 4 <= 110 (the old, wrong answer)
    with api.db.session() as s, pytest.raises(BudgetExceededError) as err:
        check_submission(s, fields, "alpha", NOW, rules=RULES)
    assert err.value.committed_usd == PRICED and err.value.job_cost_usd == pytest.approx(4.0)
    # the API's feasibility check prices with the server's rules too
    body = {"command": ["true"], "gpus": 8, "team": "alpha", "estimated_runtime_s": 3600}
    chk = api.client.post("/v1/budgets/check", json=body, headers=api.h("alice")).json()
    assert chk["blocked"] is True and chk["budgets"][0]["committed_usd"] == PRICED


def test_one_price_per_gpu_hour_for_estimates() -> None:
    nodes = [("A100-80GB", 8, 32.0), ("L4", 4, 4.0), ("cpu", 0, 1.0)]
    assert usd_per_gpu_hour(nodes, ()) == 4.0  # the dearest GPU-hour anywhere
    assert usd_per_gpu_hour(nodes, ("L4",)) == 1.0  # among the models the job may use
    assert usd_per_gpu_hour(nodes, ("H100-80GB",)) == 4.0  # none fits: any GPU node
    assert usd_per_gpu_hour([("cpu", 0, 1.0)], ()) == 0.0


def test_the_server_gives_its_budgets_the_bills_pricing_rules(tmp_path: Path) -> None:
    """``gpufleet up`` prices budgets (the controller's budget service, the API's block check)
    with the same rules as /v1/usage: not the recorded prices."""
    from gpufleet.server.host import build_server, context_settings
    from gpufleet.server.settings import Settings

    pricing = {
        "windows": [{"name": "off-peak", "start": "22:00", "end": "06:00", "multiplier": 0.5}],
        "priority_multipliers": {"urgent": 1.5},
    }
    settings = Settings(home=tmp_path / "home", gpus="2xA100-80GB", pricing=pricing, jobs_as_server=True)
    server = build_server(settings)
    try:
        rules = server.controller.budgets.rules
        assert rules is not None and rules.has_priority_multipliers
        api_rules = context_settings(settings)["pricing_rules"]
        assert api_rules is not None and api_rules.source == rules.source
        assert rules.priority_multiplier("urgent") == api_rules.priority_multiplier("urgent") == Fraction(3, 2)
    finally:
        server.controller.leadership.release()
        server.db.dispose()
