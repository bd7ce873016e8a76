"""Issue 22, item 7 (follow-up): a job's node constraints in autoscaling and feasibility.

- the autoscaler grows only a pool whose nodes (``NodePool.make_node``: the pool's labels and
  taints) the job's node selector and required affinity match and whose taints it tolerates, the
  cheapest of those;
- feasibility with constraints (:func:`constrained_infeasibility`) is None exactly when some node or
  pool fits the job, matches its constraints and carries no taint it does not tolerate, whichever
  way the places are built (each node on its own, deduplicated by shape and taints, from a snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.constraints import (
    NO_CONSTRAINTS,
    NodeConstraints,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    matches,
    node_constraints,
    tolerates_all,
)
from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.scheduling.admission import Need, infeasibility
from gpufleet.scheduling.autoscaler import PoolState
from gpufleet.scheduling.decisions import ClusterState
from gpufleet.scheduling.framework import Code
from gpufleet.scheduling.profile import load_profile
from tests.support.builders import cluster

NS, NE, PNS = TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE, TaintEffect.PREFER_NO_SCHEDULE
DEDICATED = Taint("dedicated", "ml", NS)
TOLERATES_ML = Toleration("dedicated", TolerationOperator.EQUAL, "ml", NS)


# -- the autoscaler ---------------------------------------------------------------------------------------
PoolDef = tuple[str, float, tuple[Taint, ...]]  # name (also its label "pool"), $/node-hour, taints
A: PoolDef = ("a", 8.0, ())
B: PoolDef = ("b", 16.0, ())


def pool(name: str, node_hour_usd: float, taints: tuple[Taint, ...] = ()) -> PoolState:
    p = NodePool(name, "A100-80GB", 8, 96_000, 1_000_000, max_nodes=4, labels={"pool": name}, taints=taints)
    return PoolState(p, live=0, provisioning=0, node_hour_usd=node_hour_usd)


@dataclass(frozen=True)
class Grow:
    name: str
    pools: list[PoolDef]
    constraints: NodeConstraints
    grown: list[str]  # the pools scaled up for the job


GROW = [
    Grow("no constraint: the cheapest pool", [A, B], NO_CONSTRAINTS, ["a"]),
    Grow(
        "a selector for pool b: b, not the cheaper a",
        [A, B],
        node_constraints({"pool": "b"}),
        ["b"],
    ),
    Grow(
        "required affinity for b",
        [A, B],
        node_constraints(
            required_terms=[NodeSelectorTerm((NodeSelectorRequirement("pool", SelectorOperator.NOT_IN, ("a",)),))]
        ),
        ["b"],
    ),
    Grow(
        "a tainted pool is not grown for a job without the toleration",
        [("a", 8.0, (DEDICATED,)), B],
        NO_CONSTRAINTS,
        ["b"],
    ),
    Grow(
        "a tainted pool the job tolerates: the cheapest again",
        [("a", 8.0, (DEDICATED,)), B],
        node_constraints(tolerations=[TOLERATES_ML]),
        ["a"],
    ),
    Grow(
        "a PreferNoSchedule taint keeps no job off",
        [("a", 8.0, (Taint("soft", "", PNS),)), B],
        NO_CONSTRAINTS,
        ["a"],
    ),
]


@pytest.mark.parametrize("case", GROW, ids=[c.name for c in GROW])
def test_the_autoscaler_grows_only_a_pool_the_job_may_use(case: Grow) -> None:
    snap = cluster().add("small", gpus=1).snapshot()  # too small for the job: it waits for capacity
    sched = load_profile({"autoscaler": {"enabled": True, "wait_threshold_s": 0}}).build()
    job = Job("j", JobSpec(name="j", gpu=GpuRequest(8), constraints=case.constraints), 0.0)
    d = sched.cycle(ClusterState(snap, [job], {}, [pool(*p) for p in case.pools]), 0.0)
    assert [u.pool for u in d.scale_up] == case.grown
    assert d.waiting["j"].code is Code.UNSCHEDULABLE, d.waiting["j"]


def test_no_pool_is_grown_for_a_job_pinned_to_a_node_by_name() -> None:
    snap = cluster().add("small", gpus=1).snapshot()
    sched = load_profile({"autoscaler": {"enabled": True, "wait_threshold_s": 0}}).build()
    name_is_small = NodeSelectorRequirement("metadata.name", SelectorOperator.IN, ("small",))
    c = node_constraints(required_terms=[NodeSelectorTerm((), (name_is_small,))])
    job = Job("j", JobSpec(name="j", gpu=GpuRequest(8), constraints=c), 0.0)
    d = sched.cycle(ClusterState(snap, [job], {}, [pool("a", 8.0)]), 0.0)
    assert d.scale_up == [] and d.waiting["j"].code is Code.UNRESOLVABLE


# -- the property ------------------------------------------------------------------------------------------
TAINTS = [DEDICATED, Taint("gpu", "", NE), Taint("soft", "", PNS)]
TOLERATIONS = [
    TOLERATES_ML,
    Toleration("gpu", TolerationOperator.EXISTS),
    Toleration("", TolerationOperator.EXISTS),
    Toleration("dedicated", TolerationOperator.EQUAL, "other"),
]
REQUIREMENTS = [
    NodeSelectorRequirement("zone", SelectorOperator.IN, ("a",)),
    NodeSelectorRequirement("zone", SelectorOperator.NOT_IN, ("b",)),
    NodeSelectorRequirement("gpu", SelectorOperator.EXISTS),
    NodeSelectorRequirement("gpu", SelectorOperator.DOES_NOT_EXIST),
]
labels_st = st.dictionaries(st.sampled_from(["zone", "gpu"]), st.sampled_from(["a", "b"]), max_size=2)
taints_st = st.lists(st.sampled_from(TAINTS), max_size=2, unique=True).map(tuple)
shape_st = st.tuples(
    st.sampled_from(["A100-80GB", "L4"]),
    st.sampled_from([0, 1, 4, 8]),
    st.sampled_from([SharingMode.SHARED, SharingMode.EXCLUSIVE]),
    st.booleans(),  # spot
)


@st.composite
def nodes_st(draw: st.DrawFn) -> list[Node]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        model, gpus, sharing, spot = draw(shape_st)
        cap = CapacityType.SPOT if spot else CapacityType.ON_DEMAND
        out.append(
            Node(
                f"n{i}",
                model if gpus else "",
                gpus,
                32_000,
                256_000,
                sharing=sharing,
                capacity_type=cap,
                labels=draw(labels_st),
                taints=draw(taints_st),
            )
        )
    return out


@st.composite
def pools_st(draw: st.DrawFn) -> list[NodePool]:
    out = []
    for i in range(draw(st.integers(0, 2))):
        model, gpus, sharing, spot = draw(shape_st)
        cap = CapacityType.SPOT if spot else CapacityType.ON_DEMAND
        out.append(
            NodePool(
                f"p{i}",
                model if gpus else "",
                gpus,
                32_000,
                256_000,
                cap,
                max_nodes=2,
                sharing=sharing,
                labels=draw(labels_st),
                taints=draw(taints_st),
            )
        )
    return out


@st.composite
def constraints_st(draw: st.DrawFn) -> NodeConstraints:
    selector = draw(labels_st)
    terms = [
        NodeSelectorTerm(tuple(t))
        for t in draw(st.lists(st.lists(st.sampled_from(REQUIREMENTS), min_size=1, max_size=2), max_size=2))
    ]
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique=True))
    return node_constraints(selector, terms, tolerations)


need_st = st.builds(
    lambda gpus, types, cpu, spot: Need(gpus[0], gpus[1], None, types, 0.0, cpu, 0, spot),
    st.sampled_from([(0, 1000), (1, 1000), (1, 500), (4, 1000), (8, 1000)]),  # (GPUs, milli-GPU each)
    st.sampled_from([frozenset(), frozenset({"L4"})]),
    st.sampled_from([0, 64_000]),  # 64 cores: more than any node has
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(need=need_st, nodes=nodes_st(), pools=pools_st(), c=constraints_st())
def test_infeasibility_is_none_iff_some_place_fits_matches_and_is_tolerated(
    need: Need, nodes: list[Node], pools: list[NodePool], c: NodeConstraints
) -> None:
    from gpufleet.scheduling.admission import (
        constrained_infeasibility,
        fit_problem,
        places_of,
        pool_place,
        snapshot_places,
    )

    places = places_of(nodes, pools)
    expected = any(
        infeasibility(need, [p.shape]) is None
        and matches(c, p.labels, p.name)
        and tolerates_all(c.tolerations, p.taints)
        for p in places
    )
    why = constrained_infeasibility(need, places, c)
    assert (why is None) is expected, why
    if nodes or pools:
        assert (fit_problem(need, c, nodes, pools) is None) is expected
    # the cheaper ways to build places agree: deduplicated (a job that selects nothing), from a snapshot
    if not c.selects:
        assert (constrained_infeasibility(need, places_of(nodes, pools, each=False), c) is None) is expected
    snap = cluster().snapshot()
    for node in nodes:
        snap.add_node(node)
    from_snap = [*snapshot_places(snap, each=c.selects), *(pool_place(p) for p in pools)]
    assert (constrained_infeasibility(need, from_snap, c) is None) is expected
