"""Placement policies: named scenario tables on tiny clusters, and a no-over-allocation property."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, WorkloadClass
from gpufleet.scheduling.placement import commit, place_one
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, PodRequest

# A small FGD target workload: half 1-GPU pods, half half-GPU pods.
WORKLOAD = [
    WorkloadClass(cpu_milli=4000, memory_mib=1024, gpu_count=1, gpu_milli=1000, gpu_types=frozenset(), weight=0.5),
    WorkloadClass(cpu_milli=2000, memory_mib=1024, gpu_count=1, gpu_milli=500, gpu_types=frozenset(), weight=0.5),
]


@dataclass
class NodeB:
    """Builder: ``node("a").gpus(4, "T4").cpu(32).used([1000, 500])``."""

    name: str
    n_gpus: int = 0
    model: str = ""
    cores: int = 32
    mem_gib: int = 256
    gpu_used: list[int] = field(default_factory=list)
    cpu_used: int = 0
    spot: bool = False
    price: float = 1.0
    sharing: SharingMode = SharingMode.SHARED

    def gpus(self, n: int, model: str = "T4") -> NodeB:
        self.n_gpus, self.model = n, model
        return self

    def cpu(self, cores: int, used: int = 0) -> NodeB:
        self.cores, self.cpu_used = cores, used
        return self

    def used(self, milli: list[int]) -> NodeB:
        self.gpu_used = milli
        return self

    def cost(self, usd: float, spot: bool = False) -> NodeB:
        self.price, self.spot = usd, spot
        return self

    def mig(self) -> NodeB:
        self.sharing = SharingMode.MIG
        return self


def node(name: str) -> NodeB:
    return NodeB(name)


def build(*nodes: NodeB) -> ClusterSnapshot:
    snap = ClusterSnapshot(max_gpus=8, capacity=8)
    for b in nodes:
        n = Node(
            name=b.name,
            gpu_model=b.model,
            gpu_count=b.n_gpus,
            cpu_milli=b.cores * 1000,
            memory_mib=b.mem_gib * 1024,
            capacity_type=CapacityType.SPOT if b.spot else CapacityType.ON_DEMAND,
            sharing=b.sharing,
        )
        i = snap.add_node(n, gpu_hour_usd=b.price)
        for g, m in enumerate(b.gpu_used):
            if m:
                snap.allocate(Assignment(i, (g,), m, 0, 0))
        if b.cpu_used:
            snap.allocate(Assignment(i, (), 0, b.cpu_used * 1000, 0))
    return snap


def pod(
    snap: ClusterSnapshot,
    gpus: int = 0,
    milli: int = 1000,
    cpu: int = 1,
    types: tuple[str, ...] = (),
    mig: str | None = None,
    preemptible: bool = False,
) -> PodRequest:
    gpu = GpuRequest(count=gpus, milli=milli, mig_profile=mig) if gpus else GpuRequest()
    spec = JobSpec(
        name="p", gpu=gpu, cpu_milli=cpu * 1000, memory_mib=1024, gpu_types=frozenset(types), preemptible=preemptible
    )
    return snap.pod(spec)


def policy(name: str) -> object:
    return PLACEMENT.get(name)(PolicyContext(workload=WORKLOAD, seed=1))


@dataclass(frozen=True)
class Case:
    id: str
    policy: str
    nodes: tuple[NodeB, ...]
    request: dict[str, object]
    node: str | None  # expected node name (None: unschedulable)
    gpus: tuple[int, ...] | None = None  # expected GPUs (None: don't check)


CASES = [
    Case("firstfit/lowest-index", "firstfit", (node("a").gpus(2), node("b").gpus(2)), {"gpus": 1}, "a", (0,)),
    Case(
        "bestfit/tightest-gpu",
        "bestfit",
        (node("a").gpus(4), node("b").gpus(4).used([1000, 1000, 1000])),
        {"gpus": 1},
        "b",
        (3,),
    ),
    Case(
        "bestfit/fraction-on-fullest-gpu",
        "bestfit",
        (node("a").gpus(2).used([0, 600]),),
        {"gpus": 1, "milli": 300},
        "a",
        (1,),
    ),
    Case("spread/emptiest", "spread", (node("a").gpus(4).used([1000]), node("b").gpus(4)), {"gpus": 1}, "b"),
    Case(
        "spread/fraction-on-emptiest-gpu",
        "spread",
        (node("a").gpus(2).used([0, 600]),),
        {"gpus": 1, "milli": 300},
        "a",
        (0,),
    ),
    Case(
        "packing/shared-gpu-first",
        "packing",
        (node("a").gpus(2), node("b").gpus(2).used([500])),
        {"gpus": 1, "milli": 500},
        "b",
        (0,),
    ),
    Case(
        "packing/used-node-before-free-node",
        "packing",
        (node("a").gpus(4), node("b").gpus(4).used([1000])),
        {"gpus": 2},
        "b",
        (1, 2),
    ),
    Case("dotprod/least-aligned", "dotprod", (node("a").gpus(8), node("b").gpus(8).used([1000] * 6)), {"gpus": 1}, "b"),
    Case(
        "fgd/keep-whole-gpus-whole",
        "fgd",
        (node("a").gpus(2).used([500]), node("b").gpus(2)),
        {"gpus": 1, "milli": 500},
        "a",
        (0,),
    ),
    Case(
        "fgd/fraction-fills-the-hole", "fgd", (node("a").gpus(2).used([500, 0]),), {"gpus": 1, "milli": 500}, "a", (0,)
    ),
    Case(
        "fgd/whole-gpu-avoids-fragmenting",
        "fgd",
        (node("a").gpus(2).used([500]), node("b").gpus(2)),
        {"gpus": 1},
        "a",
        (1,),
    ),
    Case(
        "fgd-cpu/cpu-pod-to-gpu-exhausted-node",
        "fgd-cpu",
        (node("a").gpus(2), node("b").gpus(2).used([1000, 1000])),
        {"cpu": 4},
        "b",
        (),
    ),
    Case("cost/cheapest", "cost", (node("a").gpus(2).cost(3.0), node("b").gpus(2).cost(1.0)), {"gpus": 1}, "b"),
    Case(
        "cost/no-spot-for-non-preemptible",
        "cost",
        (node("a").gpus(2).cost(3.0), node("b").gpus(2).cost(1.0, spot=True)),
        {"gpus": 1},
        "a",
    ),
    Case(
        "cost/spot-for-preemptible",
        "cost",
        (node("a").gpus(2).cost(3.0), node("b").gpus(2).cost(1.0, spot=True)),
        {"gpus": 1, "preemptible": True},
        "b",
    ),
    Case(
        "bestfit/gpu-type-constraint",
        "bestfit",
        (node("a").gpus(1, "T4"), node("b").gpus(1, "V100-16GB")),
        {"gpus": 1, "types": ("V100M16",)},
        "b",
        (0,),
    ),
    Case(
        "bestfit/multi-gpu-needs-enough-whole",
        "bestfit",
        (node("a").gpus(4).used([500, 500, 0, 0]), node("b").gpus(4).used([1000])),
        {"gpus": 3},
        "b",
        (1, 2, 3),
    ),
    Case("bestfit/cpu-only", "bestfit", (node("a").cpu(8, used=6), node("b").cpu(8)), {"cpu": 2}, "a", ()),
    Case("fgd/unschedulable", "fgd", (node("a").gpus(1).used([800]),), {"gpus": 1, "milli": 500}, None),
    Case(
        "bestfit/mig-slice",
        "bestfit",
        (node("a").gpus(1, "A100-40GB").mig(), node("b").gpus(1)),
        {"gpus": 1, "mig": "1g.5gb"},
        "a",
        (0,),
    ),
    Case(
        "fgd/mig-slice",
        "fgd",
        (node("a").gpus(1, "A100-40GB").mig(), node("b").gpus(1)),
        {"gpus": 1, "mig": "1g.5gb"},
        "a",
        (0,),
    ),
    Case("clustering/cpu-only-anywhere", "clustering", (node("a").gpus(2), node("b").gpus(2)), {"cpu": 1}, "a"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scenarios(case: Case) -> None:
    snap = build(*case.nodes)
    req = pod(snap, **case.request)  # type: ignore[arg-type]
    a = place_one(snap, policy(case.policy), req)  # type: ignore[arg-type]
    if case.node is None:
        assert a is None
        return
    assert a is not None
    assert snap.names[a.node] == case.node
    if case.gpus is not None:
        assert a.gpus == case.gpus


def test_every_registered_policy_places_a_pod() -> None:
    for name in PLACEMENT.names():
        if name == "combine":
            continue
        snap = build(node("a").gpus(2), node("b").gpus(2).used([300]))
        a = place_one(snap, policy(name), pod(snap, gpus=1, milli=500))  # type: ignore[arg-type]
        assert a is not None, name


def test_clustering_groups_same_affinity() -> None:
    snap = build(node("a").gpus(4), node("b").gpus(4))
    plugin = policy("clustering")
    share = pod(snap, gpus=1, milli=300)
    whole = pod(snap, gpus=1)
    a = place_one(snap, plugin, share)  # type: ignore[arg-type]
    assert a is not None
    commit(snap, plugin, share, a)  # type: ignore[arg-type]
    b = place_one(snap, plugin, whole)  # type: ignore[arg-type]
    assert b is not None and b.node != a.node  # a node of its own affinity (empty) beats a share node
    c = place_one(snap, plugin, share)  # type: ignore[arg-type]
    assert c is not None and c.node == a.node


def test_tie_rank_breaks_ties() -> None:
    snap = build(node("a").gpus(2), node("b").gpus(2), node("c").gpus(2))
    a = place_one(snap, policy("bestfit"), pod(snap, gpus=1), tie_rank=np.array([2, 0, 1]))  # type: ignore[arg-type]
    assert a is not None and snap.names[a.node] == "b"


def test_combine_weights_and_gpu_selection() -> None:
    snap = build(node("a").gpus(4), node("b").gpus(4).used([1000, 1000, 1000]))
    ctx = PolicyContext(workload=WORKLOAD, params={"plugins": [("spread", 1), ("bestfit", 3)]})
    a = place_one(snap, PLACEMENT.get("combine")(ctx), pod(snap, gpus=1))
    assert a is not None and snap.names[a.node] == "b"
    ctx = PolicyContext(workload=WORKLOAD, params={"plugins": [("spread", 3), ("bestfit", 1)]})
    a = place_one(snap, PLACEMENT.get("combine")(ctx), pod(snap, gpus=1))
    assert a is not None and snap.names[a.node] == "a"


def test_fgd_cache_sees_releases() -> None:
    snap = build(node("a").gpus(2), node("b").gpus(2))
    plugin = policy("fgd")
    req = pod(snap, gpus=1, milli=500)
    a = place_one(snap, plugin, req)  # type: ignore[arg-type]
    assert a is not None
    snap.allocate(a)
    b = place_one(snap, plugin, req)  # type: ignore[arg-type]
    assert b is not None and b.node == a.node  # fills the half-used GPU
    snap.release(a)
    c = place_one(snap, plugin, req)  # type: ignore[arg-type]
    assert c is not None and c.node == a.node and c.gpus == a.gpus


shapes = st.tuples(
    st.integers(0, 4),  # GPUs
    st.sampled_from([1000, 1000, 500, 250, 700, 100]),  # milli (fractional only when 1 GPU)
    st.integers(0, 16),  # cores
)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(
        ["firstfit", "bestfit", "spread", "random", "dotprod", "packing", "clustering", "fgd", "fgd-cpu", "cost"]
    ),
    pods=st.lists(shapes, min_size=1, max_size=60),
)
def test_never_over_allocates(name: str, pods: list[tuple[int, int, int]]) -> None:
    snap = build(
        node("a").gpus(8).cpu(64), node("b").gpus(4).cpu(16), node("c").gpus(2, "V100-16GB").cpu(8), node("d").cpu(32)
    )
    plugin = policy(name)
    for gpus, milli, cores in pods:
        m = milli if gpus == 1 else 1000
        req = pod(snap, gpus=gpus, milli=m, cpu=cores)
        a = place_one(snap, plugin, req)  # type: ignore[arg-type]
        if a is not None:
            commit(snap, plugin, req, a)  # type: ignore[arg-type]
        n = snap.n
        assert (snap.gpu_free[:n] >= 0).all() and (snap.cpu_free[:n] >= 0).all() and (snap.mem_free[:n] >= 0).all()
        assert (snap.gpu_free[:n] <= 1000).all()
