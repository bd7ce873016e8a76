"""Budgets in the simulator, through the same pure rules as production: a what-if shows which
submissions a budget would have blocked, and throttles change what starts where."""

from __future__ import annotations

import itertools
from dataclasses import replace

from gpufleet.cost.budgets.model import make_budget
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.results import SimResult
from gpufleet.sim.traces.base import Trace, TraceJob

SPEC = JobSpec(name="j", gpu=GpuRequest(1), duration_s=3600.0, estimated_runtime_s=3600.0)


def node(name: str, gpus: int = 4, spot: bool = False) -> Node:
    return Node(name, "A100-80GB", gpus, 0, 0, capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND)


def simulate(
    jobs: list[TraceJob], nodes: list[Node], budgets: list[object], **opts: object
) -> tuple[Simulation, SimResult]:
    sim = Simulation(
        Trace("t", jobs),
        load_profile({}).build(),
        lambda n: 2.0 * n.gpu_count,  # $2 per GPU-hour
        nodes=nodes,
        options=SimOptions(**opts),  # type: ignore[arg-type]
        budgets=budgets,  # type: ignore[arg-type]
    )
    return sim, sim.run()


def test_a_block_budget_cuts_part_of_a_synthetic_trace() -> None:
    jobs = [TraceJob(600.0 * i, replace(SPEC, name=f"a{i}", team="alpha")) for i in range(40)]
    jobs += [TraceJob(600.0 * i + 1, replace(SPEC, name=f"b{i}", team="beta")) for i in range(10)]
    cap = make_budget(id="b1", name="alpha-cap", scope="team:alpha", limit_usd=20.0, action="block")
    sim, result = simulate(jobs, [node("n1", 8)], [cap])
    blocked = result.config["budget_blocked"]
    by_state: dict[str, list[str]] = {}
    for r in result.records:
        by_state.setdefault(f"{r.team}:{r.state}", []).append(r.job_id)
    assert len(by_state["alpha:SUCCEEDED"]) == 10  # $2 each, $20 in all
    assert len(blocked) == len(by_state["alpha:CANCELLED"]) == 30
    assert len(by_state["beta:SUCCEEDED"]) == 10  # another team's work is untouched
    assert {b["budget"] for b in blocked} == {"alpha-cap"} and blocked[0]["job_cost_usd"] == 2.0
    assert sum(r.cost_usd for r in result.records if r.team == "alpha") <= 20.0
    refused = sim.jobs[str(blocked[0]["job_id"])]
    assert refused.events[-1].reason.startswith("budget_exceeded: budget 'alpha-cap'")
    # the alerts a what-if would have sent, once each
    assert [a["threshold"] for a in result.config["budget_alerts"]] == [50.0, 80.0, 100.0]
    # the same run without the budget runs everything: the budget is what made the difference
    _, free = simulate(jobs, [node("n1", 8)], [])
    assert all(r.state == "SUCCEEDED" for r in free.records) and "budget_blocked" not in free.config


def test_spot_only_throttle_moves_the_scope_to_spot() -> None:
    first = TraceJob(0.0, replace(SPEC, name="a0", team="alpha"))
    later = [
        TraceJob(4000.0, replace(SPEC, name="pre", team="alpha", preemptible=True)),
        TraceJob(4000.0, replace(SPEC, name="plain", team="alpha")),
        TraceJob(4000.0, replace(SPEC, name="beta", team="beta", preemptible=True)),
    ]
    th = make_budget(
        id="b2", name="alpha-spot", scope="team:alpha", limit_usd=1.0, action="throttle", throttle={"spot_only": True}
    )
    _sim, result = simulate([first, *later], [node("od", 4), node("sp", 1, spot=True)], [th], horizon_s=20000.0)
    rec = {r.name: r for r in result.records}
    assert rec["a0"].capacity_type == "on-demand"  # before the budget was spent
    assert rec["pre"].capacity_type == "spot" and rec["pre"].state == "SUCCEEDED"
    assert rec["beta"].state == "SUCCEEDED"
    assert rec["plain"].start is None  # non-preemptible work of the scope waits while throttled


def test_gpu_cap_throttle_in_the_simulator() -> None:
    jobs = [TraceJob(0.0, replace(SPEC, name="a0", team="alpha"))]
    jobs += [TraceJob(3700.0 + i, replace(SPEC, name=f"a{i + 1}", team="alpha")) for i in range(4)]
    th = make_budget(
        id="b3", name="alpha-cap", scope="team:alpha", limit_usd=1.0, action="throttle", throttle={"max_gpus": 1}
    )
    _sim, result = simulate(jobs, [node("n1", 8)], [th])
    starts = sorted(r.start for r in result.records if r.start is not None and r.name != "a0")
    assert len(starts) == 4
    assert all(b - a >= 3600.0 - 1e-6 for a, b in itertools.pairwise(starts))  # one at a time
