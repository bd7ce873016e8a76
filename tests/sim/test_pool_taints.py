"""Pools carry taints (issue 22, item 7 follow-up): a cluster file's pools (and node groups) accept
``taints`` as a Node's ``spec.taints`` (key, value, effect), bad ones refused naming the field; the
nodes a pool makes carry them, so in a simulation a job that does not tolerate them is refused at
submit when only such a pool could hold it, and one that does runs there."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpufleet.errors import InputError
from gpufleet.model.constraints import Taint, TaintEffect, Toleration, TolerationOperator, node_constraints
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.clusterspec import load_cluster
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob

DEDICATED = Taint("dedicated", "ml", TaintEffect.NO_SCHEDULE)
POOL: dict[str, Any] = {
    "name": "ml",
    "gpu_model": "A100-80GB",
    "gpus": 8,
    "cpu": 96,
    "memory_gib": 1024,
    "max_nodes": 2,
}
SPEC = JobSpec(name="j", gpu=GpuRequest(8), duration_s=600.0, estimated_runtime_s=600.0)


def test_a_pools_taints_are_parsed_and_its_nodes_carry_them() -> None:
    taints = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}, {"key": "gpu", "effect": "NoExecute"}]
    group = {"count": 1, "gpu_model": "L4", "gpus": 1, "cpu": 8, "memory_gib": 32, "taints": taints[1:]}
    nodes, pools = load_cluster({"nodes": [group], "pools": [{**POOL, "taints": taints}]}).build()
    want = (DEDICATED, Taint("gpu", "", TaintEffect.NO_EXECUTE))
    assert pools[0].taints == want and pools[0].make_node(0).taints == want
    assert nodes[0].taints == want[1:]
    assert load_cluster({"pools": [POOL]}).build()[1][0].taints == ()  # none by default


@pytest.mark.parametrize(
    ("taints", "field", "says"),
    [
        ([{"key": "dedicated", "effect": "Sometimes"}], "pools.0.taints.0.effect", "not one of NoSchedule"),
        ([{"effect": "NoSchedule"}], "pools.0.taints.0.key", "missing"),
        (
            [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": 3, "effect": "NoSchedule"}],
            "pools.0.taints.1.value",
            "string",
        ),
        (["dedicated=ml:NoSchedule"], "pools.0.taints.0", "expected an object"),
        ("dedicated", "pools.0.taints", "tuple"),
    ],
    ids=["bad-effect", "no-key", "value-not-a-string", "a-string-not-an-object", "not-a-list"],
)
def test_a_bad_taint_is_refused_naming_the_field(taints: Any, field: str, says: str) -> None:
    with pytest.raises(InputError) as e:
        load_cluster({"pools": [{**POOL, "taints": taints}]}, source="cluster.yaml")
    assert e.value.field == field and e.value.source == "cluster.yaml" and says in str(e.value)


def test_in_a_simulation_only_jobs_that_tolerate_a_pools_taints_use_it() -> None:
    _, pools = load_cluster(
        {"pools": [{**POOL, "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}]}
    ).build()
    ml = Toleration("dedicated", TolerationOperator.EQUAL, "ml", TaintEffect.NO_SCHEDULE)
    tolerant = replace(SPEC, name="tolerant", constraints=node_constraints(tolerations=[ml]))
    sim = Simulation(
        Trace("t", [TraceJob(0, tolerant), TraceJob(0, replace(SPEC, name="plain"))]),
        load_profile({"autoscaler": {"enabled": True, "wait_threshold_s": 0}}).build(),
        lambda n: 8.0,
        pools=pools,
        options=SimOptions(),
    )
    sim.run()
    by_name = {j.spec.name: j for j in sim.jobs.values()}
    assert by_name["tolerant"].state.value == "SUCCEEDED"
    plain = by_name["plain"]
    assert plain.state.value == "FAILED"
    reason = " ".join(e.reason for e in plain.events)
    assert "has a taint it does not tolerate (dedicated=ml:NoSchedule)" in reason, reason
    assert {sn.node.pool for sn in sim.cluster.nodes.values()} == {"ml"}
    assert all(sn.node.taints == (DEDICATED,) for sn in sim.cluster.nodes.values())
