"""GPU-share arithmetic (:mod:`gpufleet.model.share`): MIG profile names, time-sliced replicas
(``k`` of ``R``), milli-GPU, share units (1/7000 GPU) and exact fractions.

A scenario table pins each conversion on the shapes gpufleet meets; hypothesis checks the round
trips are exact wherever the target form can hold the value, and that the places that ask, place
and meter a share (the Kubernetes pod translation, the Job builder, the ledger) agree with it.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.cost.ledger import gpu_share
from gpufleet.k8s.adapter.nodes import node_info
from gpufleet.k8s.adapter.objects import gpu_resources
from gpufleet.k8s.adapter.pods import OwnerRef, PodFacts
from gpufleet.k8s.vocabulary import (
    GPU_RESOURCE,
    LABEL_ADOPTED_OWNER,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_REQUESTED_REPLICAS,
    SHARED_GPU_RESOURCE,
)
from gpufleet.loop.cluster import ClusterView
from gpufleet.loop.metering import run_shares
from gpufleet.model.gpu import GPU_MODELS, MIG_COMPUTE_SLICES, MILLI, GpuModel, MigProfile
from gpufleet.model.job import GpuRequest, Job, JobSpec, PodPlacement
from gpufleet.model.node import GpuSharingFacts, Node
from gpufleet.model.share import (
    MIG_PROFILE_PATTERN,
    SHARE_UNITS,
    MigName,
    fraction_units,
    landed_units,
    mig_milli,
    mig_share,
    mig_slices,
    mig_slices_per_gpu,
    mig_units,
    milli_replicas,
    milli_units,
    parse_mig_profile,
    replicas_milli,
    request_share,
    request_units,
    requested_replicas,
    units_fraction,
)

PROFILES = [(m, p) for m in GPU_MODELS.values() for p in m.mig_profiles]
ADOPTED = {LABEL_ADOPTED_OWNER: "vision/Pod/infer"}


def _adopted(k: int) -> dict[str, str]:
    return {**ADOPTED, LABEL_REQUESTED_REPLICAS: str(k)}


def _node(replicas: int) -> int:
    """A node's replicas per GPU (``GpuSharingFacts.replicas``)."""
    return replicas


def _pod(k: int, resource: str = GPU_RESOURCE) -> PodFacts:
    return PodFacts("ns", "p", "uid", OwnerRef("Pod", "p"), "Pending", None, "gpufleet", resource, k)


# -- the scenario table -----------------------------------------------------------------------------

MIG_NAMES = {
    "1g.10gb": MigName(1, 10),
    "1g.10gb+me": MigName(1, 10),
    "3g.71gb": MigName(3, 71),
    "7g.80gb": MigName(7, 80),
    "2g.x": MigName(2, None),  # only <k>g. is needed to count the slices
    "0g.5gb": None,
    "8g.80gb": None,  # a GPU has 7 compute slices
    "1c.3g.20gb": None,  # a compute-instance profile: not a GPU-instance name
    "MIG 1g.10gb": None,
    "": None,
}


@pytest.mark.parametrize("name", MIG_NAMES)
def test_mig_profile_names(name: str) -> None:
    assert parse_mig_profile(name) == MIG_NAMES[name]
    assert mig_slices(name) == (None if MIG_NAMES[name] is None else MIG_NAMES[name].slices)


@pytest.mark.parametrize(
    ("profile", "model", "slices", "milli", "units", "per_gpu"),
    [
        ("1g.10gb", "A100-80GB", 1, 143, 1000, 7),
        ("1g.20gb", "A100-80GB", 1, 143, 1000, 4),  # two memory slices: four fit
        ("2g.20gb", "H100", 2, 286, 2000, 3),
        ("3g.40gb", "A100-80GB", 3, 429, 3000, 2),
        ("4g.20gb", "A100-40GB", 4, 571, 4000, 1),
        ("7g.141gb", "H200", 7, 1000, 7000, 1),
        ("1g.18gb", "H200", 1, 143, 1000, 7),
        ("2g.99gb", None, 2, 286, 2000, 3),  # a profile no model has: as its name says
        ("5g.50gb", "T4", 5, 714, 5000, 1),
        ("6g.60gb", None, 6, 857, 6000, 1),
    ],
)
def test_mig_scenarios(profile: str, model: str | None, slices: int, milli: int, units: int, per_gpu: int) -> None:
    assert mig_slices(profile, model) == slices
    assert (mig_milli(slices), mig_units(slices), mig_slices_per_gpu(profile, model)) == (milli, units, per_gpu)
    assert mig_share(profile, model) == slices / 7
    assert units_fraction(units) == Fraction(slices, 7)


def test_an_unreadable_mig_name_counts_one_slice_for_telemetry_and_a_whole_gpu_for_money() -> None:
    assert mig_share("junk") == 1 / 7 and mig_slices_per_gpu("junk") == 7
    assert request_units(GpuRequest(1, 143, "junk"), "A100-80GB") == SHARE_UNITS


@pytest.mark.parametrize(
    ("k", "replicas", "milli", "back"),
    [
        (1, 4, 250, 1),
        (1, 8, 125, 1),
        (2, 8, 250, 2),
        (4, 4, 1000, 4),
        (1, 3, 333, 1),  # 1/3 GPU is no whole milli: rounded down, and back to one replica
        (2, 3, 666, 2),
        (3, 2, 1500, 3),
        (1, 1, 1000, 1),
    ],
)
def test_replica_scenarios(k: int, replicas: int, milli: int, back: int) -> None:
    assert replicas_milli(k, replicas) == milli
    assert milli_replicas(milli, replicas) == back


@pytest.mark.parametrize(
    ("req", "model", "units"),
    [
        (GpuRequest(0), "A100-80GB", 0),
        (GpuRequest(4), "H100", 4 * 7000),
        (GpuRequest(1, 300), "T4", 2100),
        (GpuRequest(1, 250), "L4", 1750),
        (GpuRequest(1, 143, "1g.10gb"), "A100-80GB", 1000),
        (GpuRequest(1, 429, "3g.40gb"), "A100-80GB", 3000),
        (GpuRequest(1, 143, "1g.10gb"), "T4", 1000),  # a model without the profile: as the name says
    ],
)
def test_request_scenarios(req: GpuRequest, model: str, units: int) -> None:
    assert request_units(req, model) == units
    assert request_share(req, model) == Fraction(units, 7000)


@pytest.mark.parametrize(
    ("req", "job", "node", "units"),
    [
        (GpuRequest(1, 250), _adopted(1), _node(8), 875),  # issue 21: one replica of an 8-way GPU
        (GpuRequest(1, 250), _adopted(1), _node(4), 1750),
        (GpuRequest(1, 250), _adopted(2), _node(8), 1750),
        (GpuRequest(1, 333), _adopted(1), _node(3), 2331),  # 333 milli: 1/3 rounded down
        (GpuRequest(1), _adopted(4), _node(8), 3500),  # 4 replicas, placed as a GPU of a 4-way node
        (GpuRequest(1, 250), _adopted(1), GpuSharingFacts().replicas, 1750),  # a node not time-sliced: as placed
        (GpuRequest(1, 250), _adopted(1), _node(1), 1750),
        (GpuRequest(1, 250), {LABEL_REQUESTED_REPLICAS: "1"}, _node(8), 1750),  # not adopted: as placed
        (GpuRequest(1, 250), {**ADOPTED, LABEL_REQUESTED_REPLICAS: "x"}, _node(8), 1750),
        (GpuRequest(1, 143, "1g.10gb"), _adopted(1), _node(8), 1000),  # a MIG slice is its slice
        (GpuRequest(0), _adopted(1), _node(8), 0),
    ],
)
def test_landed_scenarios(req: GpuRequest, job: dict[str, str], node: int, units: int) -> None:
    assert landed_units(req, "L4", job, node) == units


def test_the_replicas_are_the_node_readers() -> None:
    """The replicas metering divides by are the Kubernetes node reader's typed facts."""
    obj = {
        "metadata": {"name": "ts8", "labels": {LABEL_GPU_PRODUCT: "NVIDIA-L4", LABEL_GPU_REPLICAS: "8"}},
        "status": {"allocatable": {GPU_RESOURCE: "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    info = node_info(obj)
    assert info is not None and info.node.gpu_facts.replicas == 8
    assert landed_units(GpuRequest(1, 250), "L4", _adopted(1), info.node.gpu_facts.replicas) == 875
    assert requested_replicas(_adopted(3)) == 3 and requested_replicas({LABEL_REQUESTED_REPLICAS: "3"}) is None


def test_a_node_label_does_not_set_the_replicas_metered() -> None:
    """Issue 21: a node's sharing is a typed fact, not a label. A label named like the reader's old
    bookkeeping (``gpufleet.io/gpu-replicas``, which an operator may well set on a Node) no longer
    makes the loop meter an adopted pod as 1/8 of an unshared GPU."""
    view = ClusterView()
    view.request(Node("l4", "L4", 1, labels={"gpufleet.io/gpu-replicas": "8"}), 1.0, 0.0)
    view.request(Node("ts8", "L4", 1, gpu_facts=GpuSharingFacts(replicas=8, strategy="time-slicing")), 1.0, 0.0)
    assert (view.node_replicas("l4"), view.node_replicas("ts8"), view.node_replicas("gone")) == (1, 8, 1)
    job = Job("j1", JobSpec(name="a", gpu=GpuRequest(1, 250), labels=_adopted(1), gang_size=2), 0.0)
    placement = [PodPlacement("l4", (0,), 250), PodPlacement("ts8", (0,), 250)]
    shares = run_shares(job, placement, view.gpu_model, "l4", view.node_replicas)
    assert [(s.node, s.gpu_units) for s in shares] == [("l4", 1750), ("ts8", 875)]


def test_the_loop_meters_each_node_by_its_own_replicas() -> None:
    """A gang of adopted pods spread over a 4-way and an 8-way node: each node's share is its own."""
    spec = JobSpec(name="gang", gpu=GpuRequest(1, 250), labels=_adopted(1), gang_size=3)
    job = Job("j1", spec, 0.0)
    placement = [PodPlacement("ts4", (0,), 250), PodPlacement("ts8", (0,), 250), PodPlacement("ts8", (1,), 250)]
    replicas = {"ts4": _node(4), "ts8": _node(8)}
    shares = run_shares(job, placement, lambda n: "L4", "ts4", replicas.__getitem__)
    assert [(s.node, s.gpu_units) for s in shares] == [("ts4", 1750), ("ts8", 2 * 875)]
    assert run_shares(job, placement, lambda n: "L4", "ts4")[1].gpu_units == 2 * 1750  # no node replicas: as placed


# -- invariants ------------------------------------------------------------------------------------


@given(st.integers(0, 64 * MILLI))
def test_milli_units_fraction_round_trip(milli: int) -> None:
    units = milli_units(milli)
    assert units_fraction(units) == Fraction(milli, MILLI)
    assert fraction_units(Fraction(milli, MILLI)) == units


@given(st.integers(1, MIG_COMPUTE_SLICES), st.integers(1, 8))
def test_mig_slices_are_exact_in_units(slices: int, count: int) -> None:
    assert fraction_units(Fraction(slices * count, MIG_COMPUTE_SLICES)) == mig_units(slices) * count
    assert abs(Fraction(mig_milli(slices), MILLI) - Fraction(slices, MIG_COMPUTE_SLICES)) <= Fraction(1, 2 * MILLI)


@given(st.integers(1, 2**20), st.integers(1, 2**20))
def test_fraction_units_is_exact_or_refuses(num: int, den: int) -> None:
    share = Fraction(num, den)
    units = fraction_units(share)
    if SHARE_UNITS % share.denominator:
        assert units is None
    else:
        assert units is not None and units_fraction(units) == share


@given(st.integers(1, 64), st.integers(1, 64))
def test_replicas_round_trip_through_milli(k: int, replicas: int) -> None:
    milli = replicas_milli(k, replicas)
    assert Fraction(milli, MILLI) <= Fraction(k, replicas) < Fraction(milli + 1, MILLI)  # rounded down
    if MILLI * k % replicas == 0:  # representable: exact both ways
        assert Fraction(milli, MILLI) == Fraction(k, replicas)
        assert milli_replicas(milli, replicas) == k
    else:
        assert milli_replicas(milli, replicas) <= k


@given(st.integers(1, MILLI), st.integers(2, 64))
def test_a_fraction_gets_the_fewest_replicas_that_hold_it(milli: int, replicas: int) -> None:
    k = milli_replicas(milli, replicas)
    assert replicas_milli(k, replicas) >= milli  # never less than asked
    assert k == 1 or replicas_milli(k - 1, replicas) < milli  # and no more than needed


@given(st.integers(1, 999), st.integers(2, 64))
def test_the_pod_gpufleet_makes_for_a_fraction_asks_one_replica(milli: int, replicas: int) -> None:
    """Job builder (``gpu_resources``) and pod translation (``PodFacts.gpu_request``) agree: a fraction
    asks exactly one replica (issue 22: MPS refuses more, time-slicing spreads more over GPUs), which
    pod translation reads back as one replica's share (the snapshot reserves at least that much)."""
    (k,) = gpu_resources(GpuRequest(1, milli), replicas=replicas).values()
    assert k == 1
    assert _pod(k).gpu_request(replicas).total_milli == replicas_milli(1, replicas)


@given(st.integers(1, 64), st.integers(1, 64), st.sampled_from([GPU_RESOURCE, SHARED_GPU_RESOURCE]))
def test_an_adopted_pod_is_metered_what_it_holds_on_its_node(k: int, replicas: int, resource: str) -> None:
    """Whatever share it was placed as (any ``R`` its selector matched), an adopted pod asking ``k``
    replicas is metered ``k`` of its node's ``R`` (what ``tests/k8s/test_k8s_scale.py`` checks)."""
    pod = _pod(k, resource)
    try:
        held = pod.gpu_request(replicas, "L4")
    except Exception:  # k replicas of an R-way GPU that is no whole number of GPUs: not placeable
        return
    placed = GpuRequest(1, 500)  # as placed on adoption: the share on the fewest-replica node it selected
    units = landed_units(placed, "L4", _adopted(k), _node(replicas))
    if replicas > 1:
        assert units == request_units(held, "L4") == milli_units(replicas_milli(k, replicas))
    else:
        assert units == request_units(placed, "L4")


@pytest.mark.parametrize(("model", "p"), PROFILES, ids=[f"{m.name}-{p.name}" for m, p in PROFILES])
def test_known_profiles_agree_with_the_geometry(model: GpuModel, p: MigProfile) -> None:
    parsed = parse_mig_profile(p.name)
    assert parsed is not None and parsed.slices == p.compute_slices == mig_slices(p.name, model.name)
    assert mig_milli(p.compute_slices) == p.milli
    assert mig_share(p.name, model.name) == p.share
    assert mig_slices_per_gpu(p.name, model.name) == len(p.starts)
    req = GpuRequest(1, p.milli, p.name)
    assert request_share(req, model.name) == gpu_share(req, model.name) == Fraction(p.compute_slices, 7)


@given(st.integers(1, MIG_COMPUTE_SLICES), st.integers(1, 999), st.booleans())
def test_profile_names_parse_back(slices: int, memory: int, me: bool) -> None:
    name = f"{slices}g.{memory}gb" + ("+me" if me else "")
    assert re.fullmatch(MIG_PROFILE_PATTERN, name)
    assert parse_mig_profile(name) == MigName(slices, memory)
