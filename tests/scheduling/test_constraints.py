"""Issue 22, observations 7 and 8 (placement): where a job's pods may run.

- the pure model (:mod:`gpufleet.model.constraints`): node selectors, required node affinity, taints
  and tolerations with Kubernetes' semantics, the PodSpec codec and its errors (naming the field);
- the snapshot: a node is feasible for a pod only where its job's constraints match the node's labels
  and name and the job tolerates the node's NoSchedule/NoExecute taints; and only where the NVIDIA
  device plugin can hand out what the pod asks: no whole GPU on a node whose GPUs are replicas, and a
  fraction there holds one replica (at least ``1000 // replicas`` of one GPU: no more than
  ``replicas`` pods per GPU);
- the cycle: jobs that differ only in their constraints are not one shape.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.errors import InputError
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
    constraints_from_dict,
    constraints_to_dict,
    matches,
    node_constraints,
    parse_int64,
    tolerates_all,
)
from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import GpuSharingFacts, Node, SharingMode
from gpufleet.scheduling.decisions import ClusterState
from gpufleet.scheduling.placement.base import place_one
from gpufleet.scheduling.profile import load_profile
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot

In, NotIn, Exists, DoesNotExist, Gt, Lt = (
    SelectorOperator.IN,
    SelectorOperator.NOT_IN,
    SelectorOperator.EXISTS,
    SelectorOperator.DOES_NOT_EXIST,
    SelectorOperator.GT,
    SelectorOperator.LT,
)
NS, NE, PNS = TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE, TaintEffect.PREFER_NO_SCHEDULE
EXISTS, EQUAL = TolerationOperator.EXISTS, TolerationOperator.EQUAL


def req(key: str, op: SelectorOperator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, values)


def term(*exprs: NodeSelectorRequirement, fields: tuple[NodeSelectorRequirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(exprs, fields)


GPU_NODE = {"cloud.google.com/gke-accelerator": "nvidia-l4", "zone": "a", "gpus": "8", "flavor": "spot"}

# -- selectors and required node affinity (PodMatchesNodeSelectorAndAffinityTerms) -------------------
MATCH = [
    ("no constraint matches any node", NO_CONSTRAINTS, True),
    ("selector: every pair", node_constraints({"zone": "a", "flavor": "spot"}), True),
    ("selector: a value that differs", node_constraints({"zone": "b"}), False),
    ("selector: a label the node lacks", node_constraints({"team": "x"}), False),
    ("In", node_constraints(required_terms=[term(req("zone", In, "b", "a"))]), True),
    ("In: a missing label is not in", node_constraints(required_terms=[term(req("team", In, "x"))]), False),
    ("NotIn: a missing label is not in", node_constraints(required_terms=[term(req("team", NotIn, "x"))]), True),
    ("NotIn", node_constraints(required_terms=[term(req("zone", NotIn, "a"))]), False),
    ("Exists", node_constraints(required_terms=[term(req("zone", Exists))]), True),
    ("DoesNotExist", node_constraints(required_terms=[term(req("zone", DoesNotExist))]), False),
    ("Gt reads integers", node_constraints(required_terms=[term(req("gpus", Gt, "7"))]), True),
    ("Gt is strict", node_constraints(required_terms=[term(req("gpus", Gt, "8"))]), False),
    ("Lt", node_constraints(required_terms=[term(req("gpus", Lt, "+9"))]), True),
    ("Gt on a label that is no integer", node_constraints(required_terms=[term(req("zone", Gt, "1"))]), False),
    ("Lt on a missing label", node_constraints(required_terms=[term(req("team", Lt, "1"))]), False),
    ("an empty term matches no node", node_constraints(required_terms=[term()]), False),
    (
        "terms are ORed",
        node_constraints(required_terms=[term(req("zone", In, "b")), term(req("flavor", In, "spot"))]),
        True,
    ),
    (
        "requirements within a term are ANDed",
        node_constraints(required_terms=[term(req("zone", In, "a"), req("flavor", In, "on-demand"))]),
        False,
    ),
    (
        "selector and affinity are ANDed",
        node_constraints({"zone": "b"}, [term(req("zone", Exists))]),
        False,
    ),
    (
        "matchFields: the node's name",
        node_constraints(required_terms=[term(fields=(req("metadata.name", In, "gpu-1"),))]),
        True,
    ),
    (
        "matchFields NotIn",
        node_constraints(required_terms=[term(fields=(req("metadata.name", NotIn, "gpu-1"),))]),
        False,
    ),
    (
        "GKE: the accelerator label",
        node_constraints({"cloud.google.com/gke-accelerator": "nvidia-l4"}),
        True,
    ),
]


@pytest.mark.parametrize(("name", "constraints", "expected"), MATCH, ids=[m[0] for m in MATCH])
def test_matches(name: str, constraints: NodeConstraints, expected: bool) -> None:
    assert matches(constraints, GPU_NODE, "gpu-1") is expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("7", 7), ("+7", 7), ("-7", -7), ("007", 7), (" 7", None), ("7_0", None), ("1e3", None), (str(2**63), None)],
    ids=["plain", "plus", "minus", "leading-zeros", "space", "underscore", "exponent", "overflow"],
)
def test_integers_are_read_as_go_reads_them(text: str, value: int | None) -> None:
    assert parse_int64(text) == value


# -- taints and tolerations (TolerationsTolerateTaint, FindMatchingUntoleratedTaint) -----------------
TOLERATE = [
    ("no taint", [], [], True),
    ("a NoSchedule taint keeps off a pod with no tolerations", [Taint("dedicated", "ml", NS)], [], False),
    ("so does NoExecute", [Taint("dedicated", "ml", NE)], [], False),
    ("PreferNoSchedule is a preference", [Taint("dedicated", "ml", PNS)], [], True),
    ("Exists on the key", [Taint("dedicated", "ml", NS)], [Toleration("dedicated", EXISTS)], True),
    ("Equal: the same value", [Taint("sku", "gpu", NS)], [Toleration("sku", EQUAL, "gpu")], True),
    ("Equal: another value", [Taint("sku", "gpu", NS)], [Toleration("sku", EQUAL, "cpu")], False),
    ("Equal: an empty value", [Taint("nvidia.com/gpu", "", NS)], [Toleration("nvidia.com/gpu")], True),
    ("the effect must match", [Taint("dedicated", "ml", NE)], [Toleration("dedicated", EXISTS, effect=NS)], False),
    ("no effect: every effect", [Taint("dedicated", "ml", NE)], [Toleration("dedicated", EXISTS)], True),
    (
        "an empty key with Exists tolerates everything",
        [Taint("a", "1", NS), Taint("b", "", NE)],
        [Toleration("", EXISTS)],
        True,
    ),
    ("every taint needs a toleration", [Taint("a", "", NS), Taint("b", "", NS)], [Toleration("a", EXISTS)], False),
]


@pytest.mark.parametrize(("name", "taints", "tolerations", "expected"), TOLERATE, ids=[t[0] for t in TOLERATE])
def test_tolerates_all(name: str, taints: list[Taint], tolerations: list[Toleration], expected: bool) -> None:
    assert tolerates_all(tolerations, taints) is expected


# -- the PodSpec codec and bad input ------------------------------------------------------------------
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}}


BAD = [
    (
        "an unknown operator",
        _affinity({"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}),
        f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    (
        "In without values",
        _affinity({"matchExpressions": [{"key": "zone", "operator": "In"}]}),
        f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values",
    ),
    (
        "Gt with a value that is no integer",
        _affinity({}, {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["eight"]}]}),
        f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[1].matchExpressions[0].values",
    ),
    (
        "a node field other than the name",
        _affinity({"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": ["false"]}]}),
        f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchFields[0].key",
    ),
    ("no terms", _affinity(), f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"),
    (
        "a toleration without a key must be Exists",
        {"tolerations": [{"operator": "Equal", "value": "x"}]},
        "spec.tolerations[0].operator",
    ),
    (
        "Exists takes no value",
        {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
        "spec.tolerations[0].value",
    ),
    ("an unknown effect", {"tolerations": [{"key": "a", "effect": "NoRun"}]}, "spec.tolerations[0].effect"),
    (
        "seconds that are no integer",
        {"tolerations": [{"key": "a", "tolerationSeconds": "5"}]},
        "spec.tolerations[0].tolerationSeconds",
    ),
    ("a selector value that is no string", {"nodeSelector": {"gpus": 8}}, "spec.nodeSelector[gpus]"),
    ("tolerations that are no list", {"tolerations": {"key": "a"}}, "spec.tolerations"),
]


@pytest.mark.parametrize(("name", "spec", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_constraints_name_the_field(name: str, spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as e:
        constraints_from_dict(spec, source="pod ns/p")
    assert e.value.field == field and e.value.source == "pod ns/p"


def test_a_pod_spec_round_trips() -> None:
    spec = {
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        **_affinity(
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]},
        ),
        "tolerations": [
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "containers": [{"name": "ignored"}],
    }
    c = constraints_from_dict(spec)
    assert c.node_selector == (("cloud.google.com/gke-accelerator", "nvidia-l4"),)
    assert c.required_terms[1].match_fields == (req("metadata.name", NotIn, "bad-node"),)
    assert c.tolerations[2] == Toleration("node.kubernetes.io/unreachable", EXISTS, "", NE, 300)
    assert constraints_to_dict(c) == {k: v for k, v in spec.items() if k != "containers"}
    assert constraints_from_dict(constraints_to_dict(c)) == c
    assert constraints_from_dict({}) is NO_CONSTRAINTS and not NO_CONSTRAINTS


_KEYS = st.sampled_from(["zone", "team", "gpus", "sku"])
_VALUES = st.sampled_from(["a", "b", "1", "8", "gpu"])
_TAINTS = st.lists(st.builds(Taint, _KEYS, _VALUES, st.sampled_from(list(TaintEffect))), max_size=4)
_TOLERATIONS = st.lists(
    st.one_of(
        st.builds(Toleration, _KEYS, st.just(EXISTS), st.just(""), st.sampled_from([None, NS, NE])),
        st.builds(Toleration, _KEYS, st.just(EQUAL), _VALUES, st.sampled_from([None, NS, NE])),
    ),
    max_size=4,
)


@given(_TAINTS, _TOLERATIONS, _TOLERATIONS)
def test_more_tolerations_never_tolerate_less(
    taints: list[Taint], some: list[Toleration], more: list[Toleration]
) -> None:
    if tolerates_all(some, taints):
        assert tolerates_all(some + more, taints)
    assert tolerates_all([Toleration("", EXISTS)], taints)  # the wildcard
    assert tolerates_all(some, [t for t in taints if t.effect is PNS])  # preferences never keep a pod off


@given(st.dictionaries(_KEYS, _VALUES, max_size=3), st.dictionaries(_KEYS, _VALUES, max_size=4), _TOLERATIONS)
def test_constraints_round_trip_and_a_selector_is_a_term_of_ins(
    selector: dict[str, str], labels: dict[str, str], tolerations: list[Toleration]
) -> None:
    c = node_constraints(selector, tolerations=tolerations)
    assert constraints_from_dict(constraints_to_dict(c)) == c
    as_term = node_constraints(required_terms=[term(*(req(k, In, v) for k, v in selector.items()))]) if selector else c
    assert matches(c, labels, "n") is matches(as_term, labels, "n")


# -- the snapshot -----------------------------------------------------------------------------------------


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    replicas: int = 1,
    sharing: SharingMode = SharingMode.EXCLUSIVE,
) -> Node:
    facts = GpuSharingFacts(replicas=replicas, strategy="time-slicing" if replicas > 1 else None)
    if replicas > 1:
        sharing = SharingMode.SHARED
    node = Node(name, "L4", gpus, 64_000, 256_000, sharing=sharing, labels=labels or {}, gpu_facts=facts)
    if taints:
        node.taints = taints
    return node


def job(name: str, gpu: GpuRequest, constraints: NodeConstraints = NO_CONSTRAINTS, pods: int = 1) -> Job:
    spec = JobSpec(name, gpu=gpu, cpu_milli=1000, memory_mib=1024, gang_size=pods)
    return Job(name, dataclasses.replace(spec, constraints=constraints) if constraints else spec, 0.0)


def cluster() -> list[Node]:
    return [
        gpu_node("plain"),
        gpu_node("zone-b", labels={"zone": "b"}),
        gpu_node("tainted", labels={"zone": "b"}, taints=(Taint("dedicated", "ml", NS),)),
        gpu_node("preferred", labels={"zone": "c"}, taints=(Taint("dedicated", "ml", PNS),)),
        gpu_node("evicting", labels={"zone": "b"}, taints=(Taint("maintenance", "", NE),)),
    ]


ML = Toleration("dedicated", EQUAL, "ml")
PLACE = [
    ("no constraint: untainted nodes", NO_CONSTRAINTS, {"plain", "zone-b", "preferred"}),
    ("a selector", node_constraints({"zone": "b"}), {"zone-b"}),
    ("a selector and the toleration", node_constraints({"zone": "b"}, tolerations=[ML]), {"zone-b", "tainted"}),
    (
        "required affinity on names",
        node_constraints(required_terms=[term(fields=(req("metadata.name", In, "preferred"),))]),
        {"preferred"},
    ),
    (
        "tolerating everything",
        node_constraints(tolerations=[Toleration("", EXISTS)]),
        {"plain", "zone-b", "tainted", "preferred", "evicting"},
    ),
    (
        "NoExecute needs its own toleration",
        node_constraints(tolerations=[Toleration("maintenance", EXISTS, effect=NE)]),
        {"plain", "zone-b", "preferred", "evicting"},
    ),
    ("nothing matches", node_constraints({"zone": "z"}), set()),
]


@pytest.mark.parametrize(("name", "constraints", "nodes"), PLACE, ids=[p[0] for p in PLACE])
@pytest.mark.parametrize("gpu", [GpuRequest(0), GpuRequest(2)], ids=["cpu", "gpus"])
def test_feasible_nodes_honour_the_constraints(
    name: str, constraints: NodeConstraints, nodes: set[str], gpu: GpuRequest
) -> None:
    snap = ClusterSnapshot.from_nodes(cluster())
    pod = snap.pod(job("j", gpu, constraints).spec)
    feasible = {snap.names[i] for i in range(snap.n) if snap.feasible(pod)[i]}
    assert feasible == nodes
    assert {snap.names[i] for i in range(snap.n) if snap.fits(i, pod)} == nodes  # the scalar Filter agrees
    assert {snap.names[i] for i in range(snap.n) if snap.static_ok(i, pod)} == nodes


def test_a_node_added_later_is_judged_too() -> None:
    """The mask is cached per constraints and snapshot version: a new node is looked at."""
    snap = ClusterSnapshot.from_nodes([gpu_node("plain")])
    pod = snap.pod(job("j", GpuRequest(1), node_constraints({"zone": "b"})).spec)
    assert not snap.feasible(pod).any()
    snap.add_node(gpu_node("zone-b", labels={"zone": "b"}))
    snap.add_node(gpu_node("tainted", labels={"zone": "b"}, taints=(Taint("dedicated", "ml", NS),)))
    assert [snap.names[i] for i in range(snap.n) if snap.feasible(pod)[i]] == ["zone-b"]
    unconstrained = snap.pod(job("k", GpuRequest(1)).spec)
    assert [snap.names[i] for i in range(snap.n) if snap.feasible(unconstrained)[i]] == ["plain", "zone-b"]


def test_jobs_that_differ_only_in_constraints_are_placed_each_where_it_may() -> None:
    """The cycle groups jobs by shape: a job that fits nowhere (its selector) must not make an equal
    job without that selector wait, nor the other way round."""
    snap = ClusterSnapshot.from_nodes([gpu_node("plain", gpus=1), gpu_node("zone-b", gpus=1, labels={"zone": "b"})])
    sched = load_profile({}).build()
    jobs = [
        job("nowhere", GpuRequest(1), node_constraints({"zone": "z"})),
        job("in-b", GpuRequest(1), node_constraints({"zone": "b"})),
        job("anywhere", GpuRequest(1)),
    ]
    d = sched.cycle(ClusterState(snap, jobs, {}), 0.0)
    where = {p.job.id: snap.names[p.assignments[0].node] for p in d.placements}
    assert where == {"in-b": "zone-b", "anywhere": "plain"}


# -- what the device plugin can allocate --------------------------------------------------------------


def test_no_whole_gpu_on_a_node_whose_gpus_are_replicas() -> None:
    """The device plugin would spread ``replicas`` replicas over several GPUs: not a whole GPU."""
    snap = ClusterSnapshot.from_nodes([gpu_node("ts4", gpus=2, replicas=4), gpu_node("plain", gpus=2)])
    whole = snap.pod(job("w", GpuRequest(1)).spec)
    ts, plain = snap.index["ts4"], snap.index["plain"]
    assert snap.feasible(whole).tolist() == [False, True]
    assert not snap.fits(ts, whole) and snap.fits(plain, whole)
    assert not snap.static_ok(ts, whole)


@pytest.mark.parametrize(
    ("replicas", "milli", "reserved", "per_gpu"),
    [(4, 100, 250, 4), (4, 250, 250, 4), (4, 600, 600, 1), (3, 100, 333, 3), (8, 125, 125, 8), (2, 900, 900, 1)],
    ids=["small-takes-a-replica", "a-replica", "more-than-a-replica", "thirds", "eighths", "most-of-a-gpu"],
)
def test_a_fraction_on_a_replica_node_takes_a_replica(replicas: int, milli: int, reserved: int, per_gpu: int) -> None:
    snap = ClusterSnapshot.from_nodes([gpu_node("ts", gpus=1, replicas=replicas)])
    pod = snap.pod(job("f", GpuRequest(1, milli)).spec)
    placed: list[Assignment] = []
    while snap.feasible(pod)[0]:
        assert snap.fits(0, pod)
        a = snap.assignment(0, pod)
        assert a is not None and a.milli == reserved
        snap.allocate(a)
        placed.append(a)
    assert len(placed) == per_gpu <= replicas
    assert not snap.fits(0, pod)


def test_a_fraction_on_a_node_of_free_fractions_reserves_what_it_asks() -> None:
    """A shared node whose GPUs are not advertised as replicas (the simulator's) keeps milli as asked."""
    snap = ClusterSnapshot.from_nodes([gpu_node("shared", gpus=1, sharing=SharingMode.SHARED)])
    pod = snap.pod(job("f", GpuRequest(1, 100)).spec)
    a = snap.assignment(0, pod)
    assert a is not None and a.milli == 100


class _FirstGpu:
    """A placement policy that picks GPU 0 with the fraction's own milli (as fractional_choice does)."""

    name = "first-gpu"

    def score(self, snap: ClusterSnapshot, pod: Any, nodes: Any) -> Any:
        import numpy as np

        return np.zeros(len(nodes))

    def select(self, snap: ClusterSnapshot, pod: Any, node: int) -> Assignment | None:
        return Assignment(node, (0,), pod.gpu.milli, pod.cpu_milli, pod.memory_mib)


def test_a_policys_choice_is_widened_to_a_replica() -> None:
    snap = ClusterSnapshot.from_nodes([gpu_node("ts", gpus=2, replicas=4)])
    pod = snap.pod(job("f", GpuRequest(1, 100)).spec)
    first = place_one(snap, _FirstGpu(), pod)
    assert first is not None and (first.gpus, first.milli) == ((0,), 250)
    snap.allocate(first)
    for _ in range(3):
        a = place_one(snap, _FirstGpu(), pod)
        assert a is not None
        snap.allocate(a)
    fifth = place_one(snap, _FirstGpu(), pod)
    assert fifth is not None and (fifth.gpus, fifth.milli) == ((1,), 250)  # GPU 0 holds its 4 replicas


def test_a_gang_of_fractions_on_replica_nodes_counts_replicas() -> None:
    """Five pods of 0.1 GPU do not fit one GPU shared 4 ways; the cycle places none (all or nothing)."""
    snap = ClusterSnapshot.from_nodes([gpu_node("ts", gpus=1, replicas=4)])
    sched = load_profile({}).build()
    d = sched.cycle(
        ClusterState(snap, [job("g5", GpuRequest(1, 100), pods=5), job("g4", GpuRequest(1, 100), pods=4)], {}), 0.0
    )
    assert [p.job.id for p in d.placements] == ["g4"]
    assert all(a.milli == 250 for a in d.placements[0].assignments)


def test_a_node_tainted_later_keeps_off_new_pods() -> None:
    """``relabel``: a taint (or label) put on a known node counts from the next placement on."""
    snap = ClusterSnapshot.from_nodes([gpu_node("n", labels={"zone": "a"})])
    pod = snap.pod(job("j", GpuRequest(1)).spec)
    assert snap.feasible(pod)[0]
    snap.relabel("n", {"zone": "a"}, (Taint("dedicated", "ml", NS),))
    assert not snap.feasible(pod)[0] and not snap.fits(0, pod)
    snap.relabel("n", {"zone": "b"}, ())
    assert snap.feasible(pod)[0]
    selective = snap.pod(job("k", GpuRequest(1), node_constraints({"zone": "a"})).spec)
    assert not snap.feasible(selective)[0]
