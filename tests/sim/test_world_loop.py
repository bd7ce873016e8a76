"""The world loop on its own: what it asks of a backend, checked once, up front."""

from __future__ import annotations

import pytest

from gpufleet.backends.base import Capabilities, Capability
from gpufleet.clock import SimClock
from gpufleet.loop.state import MemoryState
from gpufleet.loop.world import WorldLoop
from gpufleet.model.node import Node, NodePool
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.backend import SimBackend

POOL = NodePool("elastic", "A100-80GB", 8, 64000, 512000, max_nodes=4)


@pytest.mark.parametrize(
    ("supported", "provisions", "preempts"),
    [
        ({Capability.AUTOSCALING, Capability.PREEMPTION}, True, True),
        ({Capability.PREEMPTION}, False, True),  # pools the backend cannot grow are never scaled
        ({Capability.AUTOSCALING}, True, False),  # a backend that cannot stop runs: no preemption
    ],
    ids=["everything", "no-autoscaling", "no-preemption"],
)
def test_capabilities_decide_what_the_loop_does(supported: set[Capability], provisions: bool, preempts: bool) -> None:
    backend = SimBackend(SimClock(), [Node("n1", "A100-80GB", 8, 64000, 512000)], [POOL])
    backend.capabilities = Capabilities(frozenset(supported), {c: "test" for c in Capability if c not in supported})
    scheduler = load_profile({"autoscaler": {"enabled": True}}).build()
    loop = WorldLoop(MemoryState(), backend, scheduler, lambda n: 10.0)
    assert (loop.provisioner is not None) is provisions
    assert bool(loop.cluster.pool_states()) is provisions
    assert loop.scheduler.config.preemption is preempts
    assert loop.autoscale_due(0.0) is False  # nothing waits, nothing above its minimum


class _SharedCluster(SimBackend):
    """A simulated cluster whose nodes also run others' pods (another scheduler's)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.others: dict[str, int] = {}

    def foreign_usage(self) -> dict[str, int]:
        return dict(self.others)


def test_gpus_others_use_are_never_given_to_gpufleet_jobs() -> None:
    from gpufleet.model.job import GpuRequest, Job, JobSpec

    clock = SimClock()
    backend = _SharedCluster(clock, [Node("n1", "A100-80GB", 8, 64000, 512000)])
    loop = WorldLoop(MemoryState(), backend, load_profile({}).build(), lambda n: 10.0)
    for node in backend.inventory():
        loop.add_node(node, 0.0)
    backend.others["n1"] = 6  # another scheduler's pods hold 6 of the 8 GPUs
    state = loop.state
    assert isinstance(state, MemoryState)
    job = Job("j1", JobSpec(name="four", gpu=GpuRequest(4), duration_s=60.0, estimated_runtime_s=60.0), 0.0)
    state.submit(job)
    loop.step(0.0)
    assert "j1" in loop.pending and "j1" not in loop.active  # 2 free GPUs: it waits
    snap = loop.cluster.snapshot
    assert int((snap.gpu_free[0, :8] == 0).sum()) == 6
    backend.others["n1"] = 0  # their pods ended
    clock.advance_to(10.0)
    loop.step(10.0)
    assert "j1" in loop.active  # placed on GPUs others no longer use
    placed = {g for p in job.placement for g in p.gpus}
    assert len(placed) == 4


def test_a_cordoned_node_keeps_its_runs_and_takes_no_new_work_until_uncordoned() -> None:
    """Issue 22, observation 1, in the loop: NODE_CORDONED (a cordon, a NoSchedule taint, NotReady)
    stops placements on the node only; NODE_UNCORDONED opens it again. Before, the only way a world
    could say a node took no work was NODE_REMOVED, which ended what ran there."""
    from gpufleet.backends.base import BackendEvent, EventKind
    from gpufleet.model.job import GpuRequest, Job, JobSpec

    clock = SimClock()
    backend = SimBackend(clock, [Node("n1", "A100-80GB", 8, 64000, 512000)])
    loop = WorldLoop(MemoryState(), backend, load_profile({}).build(), lambda n: 10.0)
    for node in backend.inventory():
        loop.add_node(node, 0.0)
    state = loop.state
    assert isinstance(state, MemoryState)

    def job(name: str) -> Job:
        return Job(name, JobSpec(name=name, gpu=GpuRequest(2), duration_s=600.0, estimated_runtime_s=600.0), 0.0)

    state.submit(job("running"))
    loop.step(0.0)
    assert "running" in loop.active
    loop.handle(BackendEvent(EventKind.NODE_CORDONED, 1.0, node="n1", reason="node n1: cordoned"), 1.0)
    state.submit(job("waiting"))
    clock.advance_to(10.0)
    loop.step(10.0)
    assert "running" in loop.active and "waiting" in loop.pending  # kept; nothing new placed
    loop.handle(BackendEvent(EventKind.NODE_UNCORDONED, 11.0, node="n1"), 11.0)
    clock.advance_to(20.0)
    loop.step(20.0)
    assert {"running", "waiting"} <= set(loop.active)


def test_a_gang_that_loses_one_node_holds_its_other_nodes_gpus_until_it_has_stopped() -> None:
    """Issue 22 (chaos run at full size: 3-5 GPU over-commits, jobs with two runs at once): a node of a
    two-node run was removed and the loop ended the run at once, freeing the GPUs its pod on the
    other node still held (on Kubernetes that pod runs on through its grace period); the next job was
    placed beside it. Now the run is stopped — its other pods hold their GPUs until the backend says
    they ended — and then requeued: not a preemption, a spot restart when the lost node was spot."""
    from gpufleet.backends.base import BackendEvent, EventKind
    from gpufleet.model.job import GpuRequest, Job, JobSpec, StopKind
    from gpufleet.model.node import CapacityType

    clock = SimClock()
    nodes = [
        Node("n1", "A100-80GB", 8, 64000, 512000, capacity_type=CapacityType.SPOT),
        Node("n2", "A100-80GB", 8, 64000, 512000),
    ]
    backend = SimBackend(clock, nodes)
    loop = WorldLoop(MemoryState(), backend, load_profile({}).build(), lambda n: 10.0)
    for node in backend.inventory():
        loop.add_node(node, 0.0)
    state = loop.state
    assert isinstance(state, MemoryState)
    spec = JobSpec(name="gang", gpu=GpuRequest(8), gang_size=2, duration_s=600.0, preemptible=True)  # may use spot
    gang = Job("gang", spec, 0.0)
    state.submit(gang)
    loop.step(0.0)
    assert "gang" in loop.active
    # the spot node n1 is gone; n2's pod runs on until stopped
    loop.handle(BackendEvent(EventKind.NODE_REMOVED, 5.0, node="n1", reason="spot interruption of node n1"), 5.0)
    ar = loop.active.get("gang")
    assert ar is not None, "ended at once: its pod on n2 still runs"
    assert ar.stopping is not None and ar.stopping.kind is StopKind.LOST
    state.submit(Job("next", JobSpec(name="next", gpu=GpuRequest(8), duration_s=600.0), 5.0))
    loop.run_cycle(5.0)
    assert "next" not in loop.active, "placed on n2 beside the gang's pod that still runs there"
    clock.advance_to(6.0)
    loop.step(6.0)  # the backend reports the stop; the gang is requeued, n2 is free
    assert "gang" in loop.pending
    assert (gang.preemptions, gang.restarts, gang.spot_restarts) == (0, 1, 1)
    clock.advance_to(7.0)
    loop.step(7.0)
    assert "next" in loop.active
