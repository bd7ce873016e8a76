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
