"""Admission checks (phase 2 of the cycle): feasibility verdicts (node constraints and taints
included), check order, custom checks registered by name through the profile, and budget limits
applied inside one cycle (no second pass)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet.cost.budgets.throttle import ThrottleRule, capacity_limits
from gpufleet.errors import InputError, RegistryError
from gpufleet.model.constraints import (
    NodeConstraints,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    node_constraints,
)
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, Job, JobSpec, JobState
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.model.submission import Submission, submission
from gpufleet.scheduling.admission import (
    ADMISSION_CHECKS,
    ADMIT,
    AdmissionContext,
    CapacityLimit,
    Verdict,
    submission_status,
    wait,
)
from gpufleet.scheduling.autoscaler import PoolState
from gpufleet.scheduling.cycle import Scheduler
from gpufleet.scheduling.decisions import ClusterState, Decisions
from gpufleet.scheduling.framework import Code, PolicyContext, SortContext
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.profile import load_profile
from gpufleet.scheduling.snapshot import ClusterSnapshot, PodRequest
from tests.support.builders import cluster, job

try:  # the budget model moved out of budgets.py in the cost split; accept either home
    from gpufleet.cost.budgets.model import Scope, Throttle
except ImportError:  # pragma: no cover
    from gpufleet.cost.budgets.throttle import Scope, Throttle  # type: ignore[attr-defined,no-redef,unused-ignore]


# -- feasibility ---------------------------------------------------------------------------------------
def n(name: str, model: str = "A100-80GB", gpus: int = 8, **kw: Any) -> Node:
    return Node(name, model, gpus, kw.pop("cpu", 64_000), kw.pop("mem", 512_000), **kw)


def spec(**kw: Any) -> JobSpec:
    gpu = GpuRequest(kw.pop("gpus", 1), kw.pop("milli", 1000), kw.pop("mig", None))
    return JobSpec(name="j", gpu=gpu, **kw)


POOL = NodePool("h100", "H100-80GB", 8, 128_000, 1_024_000, max_nodes=4)
SPOT_POOL = NodePool("spot", "L4", 4, 32_000, 128_000, capacity_type=CapacityType.SPOT, max_nodes=4)


@dataclass(frozen=True)
class Feas:
    name: str
    nodes: Sequence[Node]
    pools: Sequence[NodePool]
    spec: JobSpec
    ok: bool
    says: str = ""  # a part of the reason when refused


FEASIBILITY = [
    Feas("fits a node", [n("a")], [], spec(gpus=8), True),
    Feas("too many gpus for every node", [n("a"), n("b", gpus=4)], [], spec(gpus=9), False, "9 GPUs (most: 8)"),
    Feas("a pool has the room", [n("a")], [POOL], spec(gpus=8, gpu_types=frozenset({"H100-80GB"})), True),
    Feas("no node of the type", [n("a")], [], spec(gpu_types=frozenset({"H100-80GB"})), False, "GPU type H100-80GB"),
    Feas("gpu memory", [n("a", "L4", 4)], [], spec(min_gpu_memory_gib=40), False, "40 GiB"),
    Feas("cpu", [n("a", cpu=8_000)], [], spec(cpu_milli=16_000), False, "16000 milli-CPU (most: 8000)"),
    Feas("memory", [n("a", mem=1_000)], [], spec(memory_mib=2_000), False, "2000 MiB"),
    Feas(
        "a fraction needs a shared gpu",
        [n("a", sharing=SharingMode.EXCLUSIVE)],
        [],
        spec(milli=500),
        False,
        "shares GPUs",
    ),
    Feas("mig needs a mig node", [n("a")], [], spec(mig="1g.10gb"), False, "MIG slices '1g.10gb'"),
    Feas("mig node with the profile", [n("a", sharing=SharingMode.MIG)], [], spec(mig="1g.10gb"), True),
    Feas("whole gpus on a mig node only", [n("a", sharing=SharingMode.MIG)], [], spec(gpus=1), False, "MIG mode"),
    Feas(
        "spot only for non-preemptible",
        [n("a", capacity_type=CapacityType.SPOT)],
        [],
        spec(),
        False,
        "may not run on spot",
    ),
    Feas("spot for preemptible", [n("a", capacity_type=CapacityType.SPOT)], [], spec(preemptible=True), True),
    Feas("spot pool for preemptible", [], [SPOT_POOL], spec(preemptible=True), True),
    Feas("cpu-only job on a gpu node", [n("a")], [], spec(gpus=0, cpu_milli=1_000), True),
    Feas("nothing at all", [], [], spec(), False, "no node and no autoscaling pool"),
]


@pytest.mark.parametrize("case", FEASIBILITY, ids=[c.name for c in FEASIBILITY])
def test_feasibility_verdicts(case: Feas) -> None:
    st = submission_status(case.spec, case.nodes, case.pools)
    assert st.ok is case.ok, st.reason
    if not case.ok:
        assert st.code is Code.UNRESOLVABLE and case.says in st.reason


def test_the_cycle_rejects_what_can_never_run_and_keeps_the_reason() -> None:
    snap = cluster().add("n1", gpus=4).snapshot()
    sched = load_profile({}).build()
    big = job("big").gpus(8).build()
    small = job("small").gpus(1).build()
    d = sched.cycle(ClusterState(snap, [big, small], {}), 0.0)
    assert [p.job.id for p in d.placements] == ["small"]
    assert d.waiting["big"].code is Code.UNRESOLVABLE and "8 GPUs (most: 4)" in d.waiting["big"].reason
    assert d.reservation is None  # a job that can never run blocks nobody's backfill


def test_the_cycle_admits_a_job_a_pool_can_hold() -> None:
    snap = cluster().add("n1", gpus=4).snapshot()
    sched = load_profile({"autoscaler": {"enabled": True, "wait_threshold_s": 0}}).build()
    big = job("big").gpus(8).build()
    pools = [PoolState(POOL, live=0, provisioning=0, node_hour_usd=10.0)]
    d = sched.cycle(ClusterState(snap, [big], {}, pools), 0.0)
    assert d.waiting["big"].code is Code.UNSCHEDULABLE
    assert [u.pool for u in d.scale_up] == ["h100"]


def test_submit_path_refuses_only_when_nodes_are_known() -> None:
    from gpufleet.services.submit import check_fits

    fields = {"gpus": 16, "gpu_milli": 1000, "gpu_types": [], "cpu_milli": 0, "memory_mib": 0}
    check_fits(fields, [])  # no node registered yet: nothing to judge by
    check_fits({**fields, "gpus": 8}, [n("a")])
    with pytest.raises(InputError) as e:
        check_fits(fields, [n("a"), n("b", gpus=4)])
    assert e.value.field == "gpus" and "16 GPUs" in str(e.value)
    with pytest.raises(InputError) as e:
        check_fits({**fields, "gpus": 1, "gpu_types": ["H100-80GB"]}, [n("a")])
    assert e.value.field == "gpu_types"
    check_fits({**fields, "gpus": 8, "gpu_types": ["H100-80GB"]}, [n("a")], [POOL])


# -- feasibility with node constraints and taints (issue 22, item 7) -------------------------------------
DEDICATED = Taint("dedicated", "ml", TaintEffect.NO_SCHEDULE)
TOLERATES_ML = Toleration("dedicated", TolerationOperator.EQUAL, "ml", TaintEffect.NO_SCHEDULE)
SOFT = Taint("soft", "", TaintEffect.PREFER_NO_SCHEDULE)


@dataclass(frozen=True)
class Pool:
    """An autoscaling pool of 8 x H100-80GB nodes, made when the case runs."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def make(self) -> NodePool:
        return NodePool(
            self.name, "H100-80GB", 8, 128_000, 1_024_000, max_nodes=4, labels=dict(self.labels), taints=self.taints
        )


def needs(gpus: int = 1, **kw: Any) -> Submission:
    return submission("j", ["true"], gpu=GpuRequest(gpus), **kw)


def selects(**labels: str) -> NodeConstraints:
    return node_constraints(labels)


def tolerates(*t: Toleration) -> NodeConstraints:
    return node_constraints(tolerations=t)


def affinity(*reqs: NodeSelectorRequirement) -> NodeConstraints:
    return node_constraints(required_terms=[NodeSelectorTerm(reqs)])


def pinned(node: str) -> NodeConstraints:
    return node_constraints(
        required_terms=[NodeSelectorTerm((), (NodeSelectorRequirement("metadata.name", SelectorOperator.IN, (node,)),))]
    )


@dataclass(frozen=True)
class Placed:
    name: str
    nodes: Sequence[Node]
    pools: Sequence[Pool]
    job: Submission
    field: str | None  # the field the refusal names; None: the job can run
    says: str = ""  # a part of the reason


CONSTRAINED = [
    Placed(
        "selector matches no node and no pool",
        [n("a", labels={"gpu": "a100"})],
        [Pool("p", {"gpu": "h200"})],
        needs(constraints=selects(gpu="h100")),
        "constraints.nodeSelector",
        "no node or pool matches the job's node selector {gpu: h100}",
    ),
    Placed(
        "selector matches a pool only",
        [n("a", labels={"gpu": "a100"})],
        [Pool("p", {"gpu": "h100"})],
        needs(constraints=selects(gpu="h100")),
        None,
    ),
    Placed(
        "selector matches only a node too small for the job",
        [n("small", gpus=4, labels={"gpu": "a100"}), n("big")],
        [],
        needs(8, constraints=selects(gpu="a100")),
        "constraints.nodeSelector",
        "no node or pool that matches the job's node selector {gpu: a100} could ever hold the job "
        "(no node or pool has 8 GPUs (most: 4))",
    ),
    Placed(
        "required affinity matches nothing",
        [n("a", labels={"zone": "a"})],
        [Pool("p", {"zone": "c"})],
        needs(constraints=affinity(NodeSelectorRequirement("zone", SelectorOperator.IN, ("b",)))),
        "constraints.affinity",
        "no node or pool meets the job's required node affinity (zone In [b])",
    ),
    Placed(
        "a job pinned to a node by name grows no pool",
        [n("a", gpus=4)],
        [Pool("p")],
        needs(8, constraints=pinned("a")),
        "constraints.affinity",
        "could ever hold the job (no node or pool has 8 GPUs (most: 4))",
    ),
    Placed(
        "every node that fits is tainted, not tolerated",
        [n("a", taints=(DEDICATED,)), n("small", gpus=1)],
        [],
        needs(8),
        "constraints.tolerations",
        "every node and pool that fits the job has a taint it does not tolerate (dedicated=ml:NoSchedule)",
    ),
    Placed(
        "every node that fits is tainted, tolerated",
        [n("a", taints=(DEDICATED,)), n("small", gpus=1)],
        [],
        needs(8, constraints=tolerates(TOLERATES_ML)),
        None,
    ),
    Placed(
        "the only pool is tainted, not tolerated",
        [n("small", gpus=1)],
        [Pool("p", taints=(DEDICATED,))],
        needs(8),
        "constraints.tolerations",
        "(dedicated=ml:NoSchedule)",
    ),
    Placed(
        "the only pool is tainted, tolerated",
        [],
        [Pool("p", taints=(DEDICATED,))],
        needs(8, constraints=tolerates(TOLERATES_ML)),
        None,
    ),
    Placed("an untainted node that fits is enough", [n("a", taints=(DEDICATED,)), n("b")], [], needs(8), None),
    Placed("a PreferNoSchedule taint keeps no job off", [n("a", taints=(SOFT,))], [], needs(8), None),
    Placed(
        "the node the selector matches is tainted",
        [n("a", labels={"gpu": "h100"}, taints=(DEDICATED,)), n("b")],
        [],
        needs(constraints=selects(gpu="h100")),
        "constraints.tolerations",
        "every node and pool that fits the job and matches the job's node selector {gpu: h100} has a taint",
    ),
    Placed("no constraint, no taint: as before", [n("a")], [Pool("p")], needs(8), None),
    Placed(
        "no constraint, too many GPUs: as before",
        [n("a")],
        [],
        needs(9),
        "gpus",
        "no node or pool has 9 GPUs (most: 8)",
    ),
    Placed(
        "what the job asks of a node comes first",
        [n("a", labels={"gpu": "a100"})],
        [],
        needs(9, constraints=selects(gpu="h100")),
        "gpus",
        "9 GPUs (most: 8)",
    ),
]


@pytest.mark.parametrize("case", CONSTRAINED, ids=[c.name for c in CONSTRAINED])
def test_feasibility_with_node_constraints_and_taints(case: Placed) -> None:
    """A job whose selector, affinity or tolerations leave it no node and no pool is UNRESOLVABLE
    (at submit and in the cycle), its reason naming the constraint; what fits is not refused."""
    from gpufleet.services.submit import check_fits

    pools = [p.make() for p in case.pools]
    st = submission_status(case.job.spec(), case.nodes, pools)
    if case.field is None:
        assert st.ok, st.reason
        check_fits(case.job, case.nodes, pools)
        return
    assert st.code is Code.UNRESOLVABLE and case.says in st.reason, st.reason
    with pytest.raises(InputError) as e:
        check_fits(case.job, case.nodes, pools)
    assert e.value.field == case.field and case.says in str(e.value)


def test_the_cycle_rejects_a_job_no_node_matches_until_one_does() -> None:
    """The cycle's check judges constraints too, and judges again once a node is relabelled (its
    verdicts are cached per snapshot version)."""
    snap = cluster().add("n1", gpus=4).snapshot()
    sched = load_profile({}).build()
    spec = dataclasses.replace(job("h").gpus(1).build().spec, constraints=selects(gpu="h100"))
    h = Job("h", spec, 0.0)
    plain = job("plain").gpus(1).build()
    d = sched.cycle(ClusterState(snap, [h, plain], {}), 0.0)
    assert [p.job.id for p in d.placements] == ["plain"]
    assert d.waiting["h"].code is Code.UNRESOLVABLE
    assert "no node or pool matches the job's node selector {gpu: h100}" in d.waiting["h"].reason
    snap.relabel("n1", {"gpu": "h100"}, (DEDICATED,))
    d = sched.cycle(ClusterState(snap, [h], {}), 1.0)
    assert d.waiting["h"].code is Code.UNRESOLVABLE and "(dedicated=ml:NoSchedule)" in d.waiting["h"].reason
    snap.relabel("n1", {"gpu": "h100"}, ())
    d = sched.cycle(ClusterState(snap, [h], {}), 2.0)
    assert [p.job.id for p in d.placements] == ["h"]


# -- check order and custom checks ----------------------------------------------------------------------
SEEN: list[tuple[str, str]] = []


@dataclass
class Recorder:
    """Admits everything and records (check name, job id)."""

    name: str = "test-recorder"

    def start(self, ctx: AdmissionContext) -> None:
        pass

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        SEEN.append((self.name, job.id))
        return ADMIT


@dataclass
class HoldTeam:
    """Holds the jobs of one team (set through the profile's params)."""

    team: str
    name: str = "test-hold-team"

    def start(self, ctx: AdmissionContext) -> None:
        pass

    def admit(self, job: Job, pod: PodRequest, ctx: AdmissionContext) -> Verdict:
        return wait(f"team {self.team} is on hold") if job.team == self.team else ADMIT


if "test-recorder" not in ADMISSION_CHECKS:
    ADMISSION_CHECKS.register("test-recorder")(lambda ctx: Recorder())
    ADMISSION_CHECKS.register("test-hold-team")(lambda ctx: HoldTeam(str(ctx.params.get("hold_team", "x"))))


ORDER_CASES = [
    # name, admission list, jobs (id, gpus), expected recorder calls
    (
        "recorder after feasibility skips the infeasible job",
        ["feasibility", "test-recorder"],
        [("ok", 1), ("huge", 64)],
        [("test-recorder", "ok")],
    ),
    (
        "recorder first sees every job",
        ["test-recorder", "feasibility"],
        [("ok", 1), ("huge", 64)],
        [("test-recorder", "ok"), ("test-recorder", "huge")],
    ),
    (
        "no checks at all",
        ["test-recorder"],
        [("ok", 1), ("huge", 64)],
        [("test-recorder", "ok"), ("test-recorder", "huge")],
    ),
]


@pytest.mark.parametrize(("name", "checks", "jobs", "expected"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
def test_checks_run_in_order_and_stop_at_the_first_refusal(
    name: str, checks: list[str], jobs: list[tuple[str, int]], expected: list[tuple[str, str]]
) -> None:
    SEEN.clear()
    snap = cluster().add("n1", gpus=8).snapshot()
    sched = load_profile({"admission": checks, "queue_sort": "fifo"}).build()
    pending = [job(i).gpus(g).at(k).build() for k, (i, g) in enumerate(jobs)]
    sched.cycle(ClusterState(snap, pending, {}), 0.0)
    assert expected == SEEN


def test_a_custom_check_registered_by_name_runs_through_the_profile() -> None:
    snap = cluster().add("n1", gpus=8).snapshot()
    sched = load_profile({"admission": ["feasibility", "quota", "budget", "test-hold-team"]}).build()
    a = job("a").team("x").build()
    b = job("b").team("y").build()
    d = sched.cycle(ClusterState(snap, [a, b], {}), 0.0)
    assert [p.job.id for p in d.placements] == ["b"]
    assert d.waiting["a"].code is Code.UNSCHEDULABLE and d.waiting["a"].reason == "team x is on hold"


def test_unknown_or_duplicate_checks_are_refused() -> None:
    with pytest.raises(Exception, match=r"unknown admission check 'nope'.*known: .*budget"):
        load_profile({"admission": ["nope"]})
    with pytest.raises(Exception, match="listed twice"):
        load_profile({"admission": ["quota", "quota"]})
    with pytest.raises(RegistryError):
        ADMISSION_CHECKS.register("quota")(lambda ctx: Recorder())


def test_default_profile_runs_the_three_builtins() -> None:
    sched = load_profile({}).build()
    assert [c.name for c in sched.admission] == ["feasibility", "quota", "budget"]
    plain = Scheduler(load_profile({}).build().queue_sort, load_profile({}).build().placement)
    assert [c.name for c in plain.admission] == ["feasibility", "quota", "budget"]
    assert PolicyContext().params == {}


# -- budget limits inside one cycle ---------------------------------------------------------------------
@dataclass
class World:
    snap: ClusterSnapshot
    sched: Scheduler
    running: dict[str, RunningJob] = field(default_factory=dict)
    sorts: int = 0

    def start(self, j: Job, node: str) -> None:
        pod = self.snap.pod(j.spec)
        a = self.snap.assignment(self.snap.index[node], pod)
        assert a is not None
        self.snap.allocate(a)
        self.sched.account(j, (a,), self.snap, 0.0, +1)
        j.transition(JobState.ADMITTED, 0.0, "t")
        j.transition(JobState.RUNNING, 0.0, "t")
        j.start_time = 0.0
        self.running[j.id] = RunningJob(j, (a,), "A100-80GB")

    def cycle(self, pending: list[Job], limits: Sequence[CapacityLimit] = (), now: float = 10.0) -> Decisions:
        return self.sched.cycle(ClusterState(self.snap, pending, self.running, limits=limits), now)


def world(c: Any, **profile: Any) -> World:
    w = World(c.snapshot(), load_profile(profile).build())
    inner = w.sched.queue_sort

    class Counting:
        name = inner.name

        def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
            w.sorts += 1
            return inner.order(jobs, ctx)

    w.sched.queue_sort = Counting()
    return w


def team_limit(team: str, **kw: Any) -> CapacityLimit:
    return CapacityLimit(f"budget '{team}'", lambda j: j.team == team, f"team:{team}", **kw)


LIMIT_CASES = [
    # name, nodes (name, gpus, spot), running (id, team, gpus, node), pending (id, team, gpus, preemptible),
    # limits, placed (job → node), waiting (job → part of the reason)
    (
        "max_gpus counts what runs",
        [("od", 8, False)],
        [("r", "a", 2, "od")],
        [("a1", "a", 1, False), ("a2", "a", 1, False), ("b1", "b", 1, False)],
        [team_limit("a", max_gpus=3)],
        {"a1": "od", "b1": "od"},
        {"a2": "3 GPUs at once (2 held"},
    ),
    (
        "max_gpus counts what this cycle admitted",
        [("od", 8, False)],
        [],
        [("a1", "a", 2, False), ("a2", "a", 2, False), ("a3", "a", 1, False)],
        [team_limit("a", max_gpus=3)],
        {"a1": "od", "a3": "od"},
        {"a2": "3 GPUs at once (0 held"},
    ),
    (
        "spot only narrows the pod to spot nodes",
        [("od", 2, False), ("sp", 8, True)],
        [],
        [("a1", "a", 1, True), ("b1", "b", 1, False)],
        [team_limit("a", spot_only=True)],
        {"a1": "sp", "b1": "od"},
        {},
    ),
    (
        "without the limit the same job packs on-demand",
        [("od", 2, False), ("sp", 8, True)],
        [],
        [("a1", "a", 1, True), ("b1", "b", 1, False)],
        [],
        {"a1": "od", "b1": "od"},
        {},
    ),
    (
        "spot only holds what may not run on spot",
        [("od", 8, False), ("sp", 8, True)],
        [],
        [("a1", "a", 1, False), ("b1", "b", 1, False)],
        [team_limit("a", spot_only=True)],
        {"b1": "od"},
        {"a1": "spot capacity only; this job is not preemptible"},
    ),
    (
        "spot only with no spot room waits for room",
        [("od", 8, False), ("sp", 1, True)],
        [],
        [("a1", "a", 1, True), ("a2", "a", 1, True)],
        [team_limit("a", spot_only=True)],
        {"a1": "sp"},
        {"a2": "no node has room"},
    ),
    (
        "no limit: nothing changes",
        [("od", 2, False)],
        [],
        [("a1", "a", 1, False), ("a2", "a", 1, False)],
        [],
        {"a1": "od", "a2": "od"},
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "nodes", "running", "pending", "limits", "placed", "waiting"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES]
)
def test_limits_narrow_capacity_in_one_cycle(
    name: str,
    nodes: list[tuple[str, int, bool]],
    running: list[tuple[str, str, int, str]],
    pending: list[tuple[str, str, int, bool]],
    limits: list[CapacityLimit],
    placed: dict[str, str],
    waiting: dict[str, str],
) -> None:
    c = cluster()
    for name_, gpus, spot in nodes:
        c.add(name_, gpus=gpus, spot=spot)
    w = world(c, queue_sort="fifo", preemption=False)
    for rid, team, gpus, node in running:
        w.start(job(rid).team(team).gpus(gpus).build(), node)
    jobs = []
    for k, (jid, team, gpus, pre) in enumerate(pending):
        b = job(jid).team(team).gpus(gpus).at(k)
        jobs.append((b.preemptible() if pre else b).build())
    d = w.cycle(jobs, limits)
    assert {p.job.id: w.snap.names[p.assignments[0].node] for p in d.placements} == placed
    for jid, why in waiting.items():
        assert why in d.waiting[jid].reason, d.waiting[jid]
    assert w.sorts == 1  # one pass: the queue is ordered once
    assert sorted(j.id for j in d.order) == sorted(j.id for j in jobs)  # each job considered once


def test_priority_limit_lowers_before_ordering_and_restores_after() -> None:
    w = world(cluster().add("n1", gpus=1), queue_sort="priority", preemption=False, backfill="strict")
    r = job("r").team("a").gpus(0).build()
    w.start(r, "n1")
    a = job("a").team("a").priority("high").at(0).build()
    b = job("b").team("b").at(1).build()
    d = w.cycle([a, b], [team_limit("a", priority=PRIORITY_CLASSES["low"])])
    assert [p.job.id for p in d.placements] == ["b"]  # a dropped from high to low: b goes first
    assert a.priority == 50 and r.priority == 50 and b.priority == 100
    w.sched.release(d.placements[0].job, d.placements[0].assignments, w.snap, 10.0)
    d = w.cycle([a], [])  # the limit is gone: the spec's priority comes back
    assert a.priority == 500 and r.priority == 100 and [p.job.id for p in d.placements] == ["a"]


# -- budget throttles become limits of the one cycle -------------------------------------------------
def test_throttles_become_limits_of_one_cycle() -> None:
    rule = ThrottleRule("cap", Scope.parse("team:alpha"), Throttle(max_gpus=1, spot_only=True))
    lim = capacity_limits([rule])[0]
    assert lim.source == "budget 'cap'" and lim.scope == "team:alpha" and lim.max_gpus == 1 and lim.spot_only
    c = cluster().add("od", gpus=4).add("sp", gpus=4, spot=True)
    w = world(c, preemption=False)
    jobs = [job(f"a{i}").team("alpha").preemptible().at(i).build() for i in range(3)] + [
        job("plain").team("alpha").at(5).build(),
        job("b").team("beta").at(6).build(),
    ]
    d = w.cycle(jobs, capacity_limits([rule]))
    assert w.sorts == 1  # one pass
    out = [(p.job.id, w.snap.names[p.assignments[0].node]) for p in d.placements]
    out += sorted((k, v.reason) for k, v in d.waiting.items())
    assert ("a0", "sp") in out and ("b", "od") in out
    assert any(k == "a1" and "1 GPUs at once (0 held by its running jobs)" in why for k, why in out)
    assert any(k == "plain" and "1 GPUs at once" in why for k, why in out)  # the cap comes first, as before


def test_limits_do_not_touch_jobs_they_do_not_cover() -> None:
    jobs = [job(f"j{i}").team(t).build() for i, t in zip(range(4), itertools.cycle("ab"), strict=False)]
    lim = team_limit("a", priority=0)
    w = world(cluster().add("n1", gpus=8))
    w.cycle(jobs, [lim])
    assert [j.priority for j in jobs] == [0, 100, 0, 100]


def test_priorities_lowered_then_restored_reorder_an_indexed_queue() -> None:
    """The fair-share index groups jobs by priority across cycles: a limit that lowers priorities,
    and its lifting, must regroup them."""
    snap = cluster().add("n1", gpus=1).snapshot()
    sched = load_profile({"queue_sort": "drf", "backfill": "strict"}).build()
    sched.lazy_queue_min = 0
    queue = [
        job(f"{t}{i}").team(t).priority("high" if t == "a" else "normal").at(i).build() for i in range(3) for t in "ab"
    ]
    blocker = job("blocker").team("c").build()
    state = ClusterState(snap, [blocker], {})
    d = sched.cycle(state, 0.0)
    running = {blocker.id: RunningJob(blocker, d.placements[0].assignments, "A100-80GB")}
    lim = team_limit("a", priority=PRIORITY_CLASSES["low"])
    d = sched.cycle(ClusterState(snap, queue, running, limits=[lim]), 1.0)
    assert [j.id for j in d.order][:3] == ["b0", "b1", "b2"]  # a dropped below b
    rule = ThrottleRule("x", Scope.parse("team:a"), Throttle(priority="low"))
    d = sched.cycle(ClusterState(snap, queue, running, limits=capacity_limits([rule])), 2.0)
    assert [j.id for j in d.order][:3] == ["b0", "b1", "b2"]
    d = sched.cycle(ClusterState(snap, queue, running), 3.0)  # the limit is lifted
    assert [j.id for j in d.order][:3] == ["a0", "a1", "a2"] and queue[0].priority == 500
