"""Scenario tables for the simulator: spot interruptions, checkpoints, fall-back to on-demand,
autoscaling up and down, retries, timeouts, backfill in time, and the engine's purity."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob
from tests.support.paths import SRC

SPEC = JobSpec(name="j", gpu=GpuRequest(1), duration_s=3600.0, estimated_runtime_s=3600.0)


def run(
    jobs: list[TraceJob],
    *,
    nodes: list[Node] = (),
    pools: list[NodePool] = (),
    profile: dict | None = None,
    **opts: object,
) -> Simulation:
    sim = Simulation(
        Trace("t", jobs),
        load_profile(profile or {}).build(),
        lambda n: 8.0,
        nodes=list(nodes),
        pools=list(pools),
        options=SimOptions(**opts),
    )  # type: ignore[arg-type]
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def node(name: str, spot: bool = False, gpus: int = 1) -> Node:
    return Node(
        name, "A100-80GB", gpus, 32_000, 262_144, capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND
    )


def test_checkpointing_job_resumes_after_spot_interruption() -> None:
    spec = replace(SPEC, preemptible=True, checkpoint_interval_s=600.0)
    pool = NodePool("od", "A100-80GB", 1, 32_000, 262_144, max_nodes=2, provisioning_delay_s=60)
    sim = run(
        [TraceJob(0, spec)],
        nodes=[node("s", spot=True)],
        pools=[pool],
        profile={"autoscaler": {"enabled": True, "wait_threshold_s": 0}, "max_spot_restarts": 1},
        spot_hazard_per_node_hour=2.0,
        seed=3,
    )
    job = next(iter(sim.jobs.values()))
    assert job.state.value == "SUCCEEDED"
    assert job.spot_restarts == 1 and job.on_demand_only
    # the spot notice lets the job checkpoint: it loses at most the notice window
    assert job.lost_work_s <= 120.0 + 1e-6
    assert any("spot interruption" in e.reason for e in job.events)
    rec = sim.result.records[0]  # type: ignore[attr-defined]
    assert rec.capacity_type == "on-demand"  # fell back after max_spot_restarts


def test_work_since_last_checkpoint_is_lost_on_preemption() -> None:
    low = replace(SPEC, name="low", priority_class="low", preemptible=True, checkpoint_interval_s=1000.0)
    high = replace(SPEC, name="high", priority_class="high", duration_s=100.0)
    sim = run([TraceJob(0, low), TraceJob(2500, high)], nodes=[node("n")])
    lo = sim.jobs["j000001"]
    assert lo.preemptions == 1
    assert lo.lost_work_s == pytest.approx(500.0)  # ran 2500 s, checkpointed at 2000 s
    assert lo.state.value == "SUCCEEDED"
    assert lo.end_time == pytest.approx(2500 + 100 + (3600 - 2000), abs=30)


def test_autoscaler_scales_up_the_cheapest_pool_then_down() -> None:
    cheap = NodePool("cheap", "L4", 1, 32_000, 262_144, hourly_price_usd=1.0, max_nodes=3, provisioning_delay_s=60)
    dear = NodePool("dear", "A100-80GB", 1, 32_000, 262_144, hourly_price_usd=5.0, max_nodes=3, provisioning_delay_s=60)
    jobs = [TraceJob(0, replace(SPEC, name=f"j{i}", duration_s=600.0)) for i in range(3)]
    sim = Simulation(
        Trace("t", jobs),
        load_profile({"autoscaler": {"enabled": True, "wait_threshold_s": 0, "idle_ttl_s": 300}}).build(),
        lambda n: n.hourly_price_usd or 0.0,
        pools=[cheap, dear],
        options=SimOptions(),
    )
    res = sim.run()
    assert all(r.state == "SUCCEEDED" for r in res.records)
    assert {sn.node.pool for sn in sim.cluster.nodes.values()} == {"cheap"}
    assert all(sn.removed_at is not None for sn in sim.cluster.nodes.values())  # scaled back down
    assert max(s.nodes for s in res.samples) == 3


@pytest.mark.parametrize(
    ("name", "spec_change", "opts", "state"),
    [
        ("timeout", {"max_runtime_s": 100.0}, {}, "TIMED_OUT"),
        ("never fits", {"gpu": GpuRequest(4)}, {}, "FAILED"),
        ("always fails", {}, {"failure_prob": 1.0, "max_retries": 2}, "FAILED"),
        ("succeeds", {}, {}, "SUCCEEDED"),
    ],
)
def test_job_outcomes(name: str, spec_change: dict, opts: dict, state: str) -> None:
    sim = run([TraceJob(0, replace(SPEC, **spec_change))], nodes=[node("n")], **opts)
    job = next(iter(sim.jobs.values()))
    assert job.state.value == state, name
    if name == "always fails":
        assert job.restarts == 2


def test_gang_runs_all_or_nothing_over_nodes() -> None:
    gang = replace(SPEC, gpu=GpuRequest(2), gang_size=2)
    sim = run([TraceJob(0, gang)], nodes=[node("a", gpus=2), node("b", gpus=2)])
    job = next(iter(sim.jobs.values()))
    assert job.state.value == "SUCCEEDED"
    assert {seg.node for seg in sim.ledger.segments()} == {"a", "b"}


def test_every_transition_has_a_reason() -> None:
    sim = run([TraceJob(0, SPEC), TraceJob(1, SPEC)], nodes=[node("n")])
    for job in sim.jobs.values():
        assert [e.new.value for e in job.events][:3] == ["PENDING", "ADMITTED", "RUNNING"]
        assert all(e.reason for e in job.events)


def test_engines_never_read_the_wall_clock() -> None:
    root = SRC
    bad = re.compile(r"time\.time\(|time\.sleep\(|datetime\.now\(|datetime\.utcnow\(|perf_counter\(")
    hits = [
        f"{p.relative_to(root)}:{i}"
        for sub in ("scheduling", "cost", "sim")
        for p in (root / sub).rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if bad.search(line)
    ]
    assert hits == []
