"""Issue 21: an adopted pod that asks for replicas of a time-sliced GPU is metered by the share it
holds on the node it lands on (``k`` replicas of a GPU that node shares ``R`` ways = ``k/R``), not by
the share on the node its selector matched with the fewest replicas.

The pod is adopted on the Kubernetes test substrate (``tests/k8s``), whose nodes are translated as
the Kubernetes backend translates them (:func:`~gpufleet.k8s.adapter.nodes.node_info`);
the world loop places and meters the job (a simulated backend stands in for the binding, so the
node it lands on is the test's choice).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpufleet.clock import SimClock
from gpufleet.k8s.adapter.nodes import node_info
from gpufleet.k8s.adopt import PodAdopter
from gpufleet.loop.state import MemoryState
from gpufleet.loop.world import WorldLoop
from gpufleet.model.node import Node
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.backend import SimBackend
from gpufleet.store import repo
from gpufleet.store.convert import job_from_row, pod_share_units
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow
from tests.support.k8s.cluster import Cluster

NS = "vision"
EIGHTH = 7000 // 8  # 1/8 GPU in share units (1/7000 GPU)
QUARTER = 7000 // 4


@pytest.fixture
def adopted(k8s_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[JobRow, dict[str, Node]]]:
    """A pod asking one replica, selecting time-sliced GPUs: both the 4-way and the 8-way node match."""
    api = k8s_cluster.api_client()
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name, replicas in (("l4-ts4", 4), ("l4-ts8", 8)):
        k8s_cluster.add_gpu_node(
            name, product="NVIDIA-L4", gpu_count=4, gpu_memory_mib=23034, replicas=replicas, instance_type="g6.12xlarge"
        )
    core.create_namespaced_pod(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer", "namespace": NS},
            "spec": {
                "schedulerName": "gpufleet",
                "restartPolicy": "Never",
                "nodeSelector": {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
                "containers": [
                    {"name": "main", "image": "acme/infer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    )
    db = Database(f"sqlite:///{tmp_path / 'store.db'}")
    db.upgrade()
    with db.session() as s:
        repo.upsert_team(s, NS, now=time.time())
    assert PodAdopter(db, api).adopt().adopted == 1
    with db.session(readonly=True) as s:
        (row,) = s.query(JobRow).all()
        s.expunge(row)
    nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
    translated = {info.node.name: info.node for info in (node_info(n) for n in nodes) if info is not None}
    yield row, translated
    db.dispose()
    api.close()  # type: ignore[no-untyped-call]


def _metered_units(row: JobRow, node: Node) -> int:
    """What the world loop meters for the job when it lands on ``node`` (the only node it has)."""
    clock = SimClock()
    backend = SimBackend(clock, [node])
    loop = WorldLoop(MemoryState(), backend, load_profile({}).build(), lambda n: 10.0)
    for n in backend.inventory():
        loop.add_node(n, 0.0)
    state = loop.state
    assert isinstance(state, MemoryState)
    job = job_from_row(row)
    job.spec = dataclasses.replace(job.spec, duration_s=60.0)  # the simulated run's length
    state.submit(job)
    loop.step(0.0)
    assert job.id in loop.active, loop.pending
    (share,) = loop.active[job.id].shares
    assert share.node == node.name
    return share.gpu_units


@pytest.mark.parametrize(("node", "units"), [("l4-ts8", EIGHTH), ("l4-ts4", QUARTER)])
def test_an_adopted_replica_is_metered_by_the_node_it_lands_on(
    adopted: tuple[JobRow, dict[str, Node]], node: str, units: int
) -> None:
    row, nodes = adopted
    assert (row.gpus, row.gpu_milli) == (1, 250)  # placed as the larger share: it fits either node
    assert _metered_units(row, nodes[node]) == units, f"one replica on {node} is {units} units"
    # the store's view of an open run (reports, the metrics' open pods) agrees with the loop's
    assert pod_share_units(row, nodes[node].gpu_model, nodes[node].gpu_facts.replicas) == units
