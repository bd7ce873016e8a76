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
