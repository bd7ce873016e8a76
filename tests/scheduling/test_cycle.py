"""Scenario tables for the scheduling cycle: ordering, quotas, preemption, backfill, gangs, MIG."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.model.gpu import MILLI
from gpufleet.model.job import Job, JobState
from gpufleet.model.quota import Quota
from gpufleet.scheduling.cycle import Scheduler
from gpufleet.scheduling.decisions import ClusterState, Decisions
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.profile import load_profile
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.snapshot import ClusterSnapshot
from tests.support.builders import cluster, job


@dataclass
class World:
    snap: ClusterSnapshot
    sched: Scheduler
    running: dict[str, RunningJob] = field(default_factory=dict)

    def start(self, j: Job, node: str, now: float = 0.0) -> Job:
        """Put ``j`` on ``node`` as if it had been scheduled there earlier."""
        pod = self.snap.pod(j.spec)
        a = self.snap.assignment(self.snap.index[node], pod)
        assert a is not None, f"{j.id} does not fit on {node}"
        self.snap.allocate(a)
        self.sched.account(j, (a,), self.snap, now, +1)
        j.transition(JobState.ADMITTED, now, "test")
        j.transition(JobState.RUNNING, now, "test")
        j.start_time = j.first_start_time = now
        t = self.snap.gpu_types[int(self.snap.gpu_type[a.node])] if j.spec.gpu.count else ""
        self.running[j.id] = RunningJob(j, (a,), t)
        return j

    def cycle(self, pending: list[Job], now: float = 0.0) -> Decisions:
        return self.sched.cycle(ClusterState(self.snap, pending, self.running), now)


def world(c: object, **profile: object) -> World:
    return World(c.snapshot(), load_profile(profile).build())  # type: ignore[attr-defined]


def placed(d: Decisions) -> list[str]:
    return [p.job.id for p in d.placements]


def victims(d: Decisions) -> list[str]:
    return sorted(p.victim.job.id for p in d.preemptions)


# -- ordering -----------------------------------------------------------------------------------------
ORDERING = [
    # name, queue sort, pending jobs (id, team, priority, submit), running (id, team, gpus), free GPUs → placed
    ("fifo takes the oldest", "fifo", [("b", "t2", "high", 5), ("a", "t1", "normal", 1)], [], ["a"]),
    ("priority takes the higher class", "priority", [("a", "t1", "normal", 1), ("b", "t2", "high", 5)], [], ["b"]),
    (
        "drf favours the team holding less",
        "drf",
        [("a", "t1", "normal", 1), ("b", "t2", "normal", 5)],
        [("r1", "t1", 4)],
        ["b"],
    ),
    (
        "decayed favours the team that used less",
        "decayed",
        [("a", "t1", "normal", 1), ("b", "t2", "normal", 5)],
        [("r1", "t1", 4)],
        ["b"],
    ),
]


@pytest.mark.parametrize(("name", "sort", "pending", "running", "expected"), ORDERING, ids=[s[0] for s in ORDERING])
def test_ordering(name: str, sort: str, pending: list, running: list, expected: list[str]) -> None:
    w = world(cluster().add("n1", gpus=5), queue_sort=sort, preemption=False, backfill="strict")
    for rid, team, gpus in running:
        w.start(job(rid).team(team).gpus(gpus).build(), "n1", now=-3600)
    # fill the node so exactly one GPU is free
    used = sum(g for _, _, g in running)
    if used < 4:
        w.start(job("filler").team("other").gpus(4 - used).build(), "n1")
    jobs = [job(i).team(t).priority(p).at(s).build() for i, t, p, s in pending]
    assert placed(w.cycle(jobs, now=10)) == expected


def test_drf_interleaves_teams_in_start_order() -> None:
    w = world(cluster().add("n1", gpus=8), queue_sort="drf")
    jobs = [job(f"a{i}").team("a").at(i).build() for i in range(6)] + [
        job(f"b{i}").team("b").at(10 + i).build() for i in range(6)
    ]
    order = placed(w.cycle(jobs, now=100))
    assert order[:4] == ["a0", "b0", "a1", "b1"]
    assert len(order) == 8


def test_aging_lets_an_old_low_priority_job_overtake() -> None:
    w = world(cluster().add("n1", gpus=1), queue_sort="priority", aging={"interval_s": 60, "boost": 100})
    old = job("old").priority("low").at(0).build()  # 50 + 100 x 10 intervals
    new = job("new").priority("high").at(590).build()  # 500
    assert placed(w.cycle([new, old], now=600)) == ["old"]


# -- quotas ---------------------------------------------------------------------------------------------
def test_quota_caps_a_team() -> None:
    w = world(cluster().add("n1", gpus=8), teams={"a": {"quota": {"*": 2}}})
    jobs = [job(f"a{i}").team("a").at(i).build() for i in range(4)]
    d = w.cycle(jobs)
    assert placed(d) == ["a0", "a1"]
    assert "quota" in d.waiting["a2"].reason


def test_quota_per_gpu_type() -> None:
    c = cluster().add("a100", "A100-80GB", gpus=4).add("t4", "T4", gpus=4)
    w = world(c, teams={"a": {"quota": {"T4": 4}}})
    d = w.cycle([job(f"a{i}").team("a").gpus(2).at(i).build() for i in range(3)])
    assert placed(d) == ["a0", "a1"]
    assert all(w.snap.names[p.assignments[0].node] == "t4" for p in d.placements)


def test_cohort_borrowing_and_reclaim() -> None:
    teams = {
        "a": {"quota": {"*": 2}, "cohort": "lab"},
        "b": {"quota": {"*": 2}, "cohort": "lab"},
    }
    w = world(cluster().add("n1", gpus=4), teams=teams)
    # a borrows b's idle quota (only preemptible jobs may borrow: what is borrowed can be reclaimed)
    d = w.cycle([job(f"a{i}").team("a").preemptible().at(i).build() for i in range(4)])
    assert placed(d) == ["a0", "a1", "a2", "a3"]
    for p in d.placements:
        w.running[p.job.id] = RunningJob(p.job, p.assignments, "A100-80GB")
        p.job.transition(JobState.ADMITTED, 0, "t")
        p.job.transition(JobState.RUNNING, 0, "t")
        p.job.start_time = 0
    # b comes back for its nominal quota: a's borrowed jobs are reclaimed (once past the minimum runtime)
    d = w.cycle([job("b0").team("b").at(10).build(), job("b1").team("b").at(11).build()], now=200)
    assert len(d.preemptions) == 2
    assert all(p.victim.job.team == "a" and "reclaimed" in p.reason for p in d.preemptions)


def test_borrowing_limit() -> None:
    teams = {"a": {"quota": {"*": 1}, "cohort": "lab", "borrowing_limit": 1}, "b": {"quota": {"*": 6}, "cohort": "lab"}}
    w = world(cluster().add("n1", gpus=8), teams=teams)
    assert len(placed(w.cycle([job(f"a{i}").team("a").preemptible().at(i).build() for i in range(4)]))) == 2


# -- preemption -----------------------------------------------------------------------------------------
PREEMPTION = [
    # name, running (id, priority, preemptible, checkpoint_s, gpus, started), new (priority, gpus), victims
    ("lower priority preemptible job is preempted", [("low", "low", True, None, 8, 0)], ("high", 4), ["low"]),
    ("non-preemptible jobs are never victims", [("low", "low", False, None, 8, 0)], ("high", 4), []),
    ("equal priority is never preempted", [("n", "high", True, None, 8, 0)], ("high", 4), []),
    (
        "fewest victims",
        [("s1", "low", True, None, 2, 0), ("s2", "low", True, None, 2, 0), ("big", "low", True, None, 4, 0)],
        ("high", 4),
        ["big"],
    ),
    (
        "least work lost since checkpoint",
        [("ckpt", "low", True, 100, 4, 0), ("nockpt", "low", True, None, 4, 0)],
        ("high", 4),
        ["ckpt"],
    ),
]


@pytest.mark.parametrize(("name", "running", "new", "expected"), PREEMPTION, ids=[s[0] for s in PREEMPTION])
def test_preemption(name: str, running: list, new: tuple, expected: list[str]) -> None:
    w = world(cluster().add("n1", gpus=8), queue_sort="priority")
    for rid, prio, pre, ck, gpus, t in running:
        b = job(rid).priority(prio).gpus(gpus)
        if pre:
            b = b.preemptible(ck)
        w.start(b.build(), "n1", now=t)
    d = w.cycle([job("new").priority(new[0]).gpus(new[1]).at(900).build()], now=1000)
    assert victims(d) == expected
    if expected:
        assert "new" in w.sched.nominated


GRANT = ("background", "low", "normal")  # the default grant of a team on a server
EVERY_CLASS = (*GRANT, "high", "urgent")
# Across teams: a victim within its team's nominal quota is only taken by a strictly higher class
# that its team was granted too; a team beyond its quota (or without one) has no such guarantee.
CROSS_TEAM = [
    # name, victim team's quota (GPUs, None: no quota) and grant, running (id, team, priority), new, victims
    (
        "within quota: a class its team may not use takes nothing",
        (1, GRANT),
        [("v", "b", "normal")],
        ("a", "urgent"),
        [],
    ),
    ("within quota: a class its team may use too", (1, EVERY_CLASS), [("v", "b", "normal")], ("a", "urgent"), ["v"]),
    ("within quota: never an equal class", (1, EVERY_CLASS), [("v", "b", "urgent")], ("a", "urgent"), []),
    (
        "beyond its quota: a borrowed job goes",
        (1, GRANT),
        [("v1", "b", "normal"), ("v2", "b", "normal")],
        ("a", "urgent"),
        ["v1"],
    ),
    ("a team without a quota has no guarantee", (None, GRANT), [("v", "b", "normal")], ("a", "urgent"), ["v"]),
    ("its own team's lower class", (1, GRANT), [("v", "a", "normal")], ("a", "urgent"), ["v"]),
]


@pytest.mark.parametrize(("name", "quota", "running", "new", "expected"), CROSS_TEAM, ids=[s[0] for s in CROSS_TEAM])
def test_preemption_across_teams(name: str, quota: tuple, running: list, new: tuple, expected: list[str]) -> None:
    gpus = len(running)
    w = world(cluster().add("n1", gpus=gpus), queue_sort="priority")
    nominal, grant = quota
    teams = [Quota("a", {"*": 8 * MILLI}, priority_classes=GRANT)]
    if nominal is not None:
        teams.append(Quota("b", {"*": nominal * MILLI}, priority_classes=grant))
    w.sched.quotas = QuotaPolicy(teams)
    for rid, team, prio in running:
        w.start(job(rid).team(team).priority(prio).preemptible().gpus(1).build(), "n1")
    d = w.cycle([job("new").team(new[0]).priority(new[1]).gpus(1).at(900).build()], now=1000)
    assert victims(d) == expected


def test_preemption_never_takes_more_than_a_team_borrows() -> None:
    """b borrows one GPU beyond its quota of one; a job that needs both of b's GPUs would take b's
    guaranteed one too: refused (it was taken before, by a class b may not use)."""
    w = world(cluster().add("n1", gpus=2), queue_sort="priority")
    w.sched.quotas = QuotaPolicy([Quota("a", {"*": 2 * MILLI}), Quota("b", {"*": MILLI}, priority_classes=GRANT)])
    for rid in ("v1", "v2"):
        w.start(job(rid).team("b").priority("low").preemptible().build(), "n1")
    d = w.cycle([job("new").team("a").priority("urgent").gpus(2).at(900).build()], now=1000)
    assert victims(d) == []
    # granted the class itself, b is outranked fairly: both go
    w.sched.quotas = QuotaPolicy([Quota("a", {"*": 2 * MILLI}), Quota("b", {"*": MILLI}, priority_classes=EVERY_CLASS)])
    d = w.cycle([job("new").team("a").priority("urgent").gpus(2).at(900).build()], now=1000)
    assert victims(d) == ["v1", "v2"]


def test_no_preemption_cycle() -> None:
    w = world(cluster().add("n1", gpus=1), queue_sort="priority")
    low = w.start(job("low").priority("low").preemptible().build(), "n1")
    w.sched.graph.add("low", "high")  # pretend 'low' once preempted 'high'
    d = w.cycle([job("high").priority("high").at(5).build()], now=10)
    assert d.preemptions == []
    assert low.state is JobState.RUNNING


# -- backfill -----------------------------------------------------------------------------------------------
def _backfill_world(mode: str) -> tuple[World, list[Job]]:
    w = world(cluster().add("n1", gpus=8), queue_sort="fifo", backfill=mode, preemption=False)
    w.start(job("run").gpus(6).runtime(100).build(), "n1")  # ends at 100
    head = job("head").gpus(4).runtime(50).at(1).build()  # blocked until 100
    short = job("short").gpus(2).runtime(50).at(2).build()  # ends at 60 < 100: fine
    long = job("long").gpus(2).runtime(500).at(3).build()  # would delay the head
    return w, [head, short, long]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("easy", ["short"]), ("greedy", ["short"]), ("strict", [])],
)
def test_backfill_modes(mode: str, expected: list[str]) -> None:
    w, jobs = _backfill_world(mode)
    d = w.cycle(jobs, now=10)
    assert placed(d) == expected
    if mode == "easy":
        assert d.reservation == ("head", 100.0)


def test_greedy_lets_long_jobs_delay_the_head() -> None:
    w, (head, _, long) = _backfill_world("greedy")
    assert placed(w.cycle([head, long], now=10)) == ["long"]
    w2, (head2, _, long2) = _backfill_world("easy")
    assert placed(w2.cycle([head2, long2], now=10)) == []


def test_easy_backfill_uses_other_nodes_freely() -> None:
    w = world(cluster().add("n1", gpus=8).add("n2", gpus=2), queue_sort="fifo", backfill="easy", preemption=False)
    w.start(job("run").gpus(6).runtime(100).build(), "n1")
    head = job("head").gpus(4).runtime(50).at(1).build()
    long = job("long").gpus(2).runtime(500).at(3).build()
    d = w.cycle([head, long], now=10)
    assert placed(d) == ["long"]
    assert w.snap.names[d.placements[0].assignments[0].node] == "n2"


# -- gangs, sharing, constraints ---------------------------------------------------------------------------
def test_gang_is_all_or_nothing() -> None:
    w = world(cluster().add("n1", gpus=8).add("n2", gpus=8), preemption=False)
    w.start(job("x").gpus(1).build(), "n2")
    d = w.cycle([job("g").gpus(8).gang(2).build()])
    assert d.placements == []
    assert w.snap.gpu_free[: w.snap.n].sum() == 15 * 1000  # nothing left reserved
    w2 = world(cluster().add("n1", gpus=8).add("n2", gpus=8))
    d2 = w2.cycle([job("g").gpus(8).gang(2).build()])
    assert {a.node for a in d2.placements[0].assignments} == {0, 1}


def test_mig_slices_pack_with_valid_geometry() -> None:
    from gpufleet.model.node import SharingMode

    w = world(cluster().add("m", "A100-80GB", gpus=2, sharing=SharingMode.MIG))
    d = w.cycle([job(f"s{i}").mig("1g.10gb").at(i).build() for i in range(8)])
    gpus = [p.assignments[0].gpus[0] for p in d.placements]
    assert gpus == [0] * 7 + [1]
    # the lone slice on GPU 1 sits at the highest start, so 4g.40gb (start 0 only) still fits;
    # 3g.40gb then has no valid start left (memory slices 4-7 hold the 1g slice)
    d = w.cycle([job("big").mig("4g.40gb").build(), job("big2").mig("3g.40gb").at(1).build()], now=1)
    assert placed(d) == ["big"]
    assert placed(w.cycle([job("two").mig("2g.20gb").build()], now=2)) == ["two"]
    assert w.cycle([job("no").mig("1g.10gb").build()], now=3).placements == []


def test_fractions_share_a_gpu_and_type_constraints_hold() -> None:
    w = world(cluster().add("t4", "T4", gpus=1).add("v100", "V100M32", gpus=1))
    d = w.cycle([job(f"f{i}").milli(500).types("V100M16", "V100M32").at(i).build() for i in range(3)])
    assert placed(d) == ["f0", "f1"]
    assert all(w.snap.names[p.assignments[0].node] == "v100" for p in d.placements)


def test_spot_only_for_preemptible_jobs() -> None:
    w = world(cluster().add("spot", gpus=8, spot=True))
    d = w.cycle([job("od").build(), job("pre").preemptible(600).at(1).build()])
    assert placed(d) == ["pre"]


def test_unreserve_rolls_a_failed_bind_back() -> None:
    w = world(cluster().add("n1", gpus=8), teams={"a": {"quota": {"*": 4}}})
    d = w.cycle([job("a0").team("a").gpus(4).build()])
    free_after = w.snap.free_milli[0]
    assert free_after == 4000 and w.sched.usage.held("a", "A100-80GB") == 4000
    w.sched.unreserve(d.placements[0], w.snap, now=1)  # the backend failed to start it
    assert w.snap.free_milli[0] == 8000 and w.snap.pods[0] == 0
    assert w.sched.usage.held("a", "A100-80GB") == 0
    assert placed(w.cycle([job("a1").team("a").gpus(4).build()], now=2)) == ["a1"]


def test_clustering_policy_observes_reservations_and_releases() -> None:
    w = world(cluster().add("n1", gpus=8).add("n2", gpus=8), placement="clustering")
    d = w.cycle([job(f"x{i}").milli(500).at(i).build() for i in range(3)])
    assert len(d.placements) == 3
    for p in d.placements:
        w.sched.release(p.job, p.assignments, w.snap, now=5)
    assert int(w.snap.free_milli[: w.snap.n].sum()) == 16000


# -- incremental order and early stop: the same decisions as the eager cycle ----------------------------
class _Eager:
    """A queue sort without ``iter_order``: the cycle orders the whole queue and never stops early."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = "eager"

    def order(self, jobs: list[Job], ctx: object) -> list[Job]:
        return self.inner.order(jobs, ctx)  # type: ignore[attr-defined,no-any-return]


def _random_world(seed: int, lazy: bool, profile: dict[str, object]) -> list[tuple[object, ...]]:
    """A small world loop: jobs arrive, cycles start what fits, jobs end by their runtime. Returns
    every cycle's decisions (placements with nodes and GPUs, waiting reasons, reservation, order)."""
    import random

    rng = random.Random(seed)
    c = cluster().add("n1", gpus=8).add("n2", gpus=8).add("n3", "V100-16GB", gpus=4).add("sp", gpus=4, spot=True)
    w = world(c, **profile)
    w.sched.lazy_queue_min = 0  # index and order lazily from the first job (the default waits for 64)
    if not lazy:
        w.sched.queue_sort = _Eager(w.sched.queue_sort)  # type: ignore[assignment]
    jobs: list[Job] = []
    for i in range(120):
        b = job(f"j{i:03d}").team(rng.choice("abc")).gpus(rng.choice([1, 1, 1, 2, 4, 8])).at(rng.uniform(0, 4000))
        b = b.priority(rng.choice(["low", "normal", "high"])).runtime(rng.uniform(100, 3000), rng.uniform(100, 3000))
        if rng.random() < 0.2:
            b = b.preemptible(300)
        if rng.random() < 0.1:
            b = b.types("V100-16GB")
        if rng.random() < 0.05:
            b = b.gang(2)
        jobs.append(b.build())
    jobs.sort(key=lambda j: j.submit_time)
    pending: dict[str, Job] = {}
    out: list[tuple[object, ...]] = []
    k = 0
    for step in range(80):
        now = step * 100.0
        while k < len(jobs) and jobs[k].submit_time <= now:
            pending[jobs[k].id] = jobs[k]
            k += 1
        for rid, rj in list(w.running.items()):  # ends
            if rj.job.start_time is not None and now - rj.job.start_time >= (rj.job.spec.duration_s or 0):
                w.sched.release(rj.job, rj.assignments, w.snap, now)
                rj.job.transition(JobState.SUCCEEDED, now, "done")
                del w.running[rid]
        d = w.sched.cycle(ClusterState(w.snap, list(pending.values()), w.running), now)
        for p in d.preemptions:
            rj = w.running.pop(p.victim.job.id)
            w.sched.release(rj.job, rj.assignments, w.snap, now)
            rj.job.transition(JobState.PREEMPTED, now, "p")
            rj.job.transition(JobState.PENDING, now, "p")
            rj.job.start_time = None
            w.sched.job_stopped(rj.job.id)
            pending[rj.job.id] = rj.job
        for p in d.placements:
            j = p.job
            del pending[j.id]
            j.transition(JobState.ADMITTED, now, "t")
            j.transition(JobState.RUNNING, now, "t")
            j.start_time = now
            t = w.snap.gpu_types[int(w.snap.gpu_type[p.assignments[0].node])] if j.spec.gpu.count else ""
            w.running[j.id] = RunningJob(j, p.assignments, t)
        out.append(
            (
                [(p.job.id, p.assignments, p.backfilled) for p in d.placements],
                sorted((v.victim.job.id, v.preemptor) for v in d.preemptions),
                sorted((i, s.code, s.reason) for i, s in d.waiting.items()),
                d.reservation,
                [j.id for j in d.order],
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "profile",
    [
        {"queue_sort": "drf"},
        {"queue_sort": "drf", "backfill": "greedy", "preemption": False},
        {"queue_sort": "drf", "backfill": "strict"},
        {"queue_sort": "decayed", "aging": {"interval_s": 300, "boost": 50}},
        {"queue_sort": "drf", "teams": {t: {"quota": {"*": 6}, "cohort": "x"} for t in "ab"}},
    ],
    ids=["drf-easy", "drf-greedy", "drf-strict", "decayed-aging", "drf-quotas"],
)
def test_lazy_incremental_cycle_decides_as_the_eager_one(seed: int, profile: dict[str, object]) -> None:
    lazy = _random_world(seed, True, profile)
    eager = _random_world(seed, False, profile)
    for i, (a, b) in enumerate(zip(lazy, eager, strict=True)):
        assert a == b, f"cycle {i} differs"


def test_a_full_cluster_stops_the_cycle_early_and_fills_the_rest_lazily() -> None:
    w = world(cluster().add("n1", gpus=2), backfill="easy")
    assert w.sched.lazy_queue_min <= 300
    w.start(job("r").gpus(2).runtime(3600, 3600).build(), "n1")
    queue = [job(f"q{i:03d}").gpus(1).runtime(7200, 7200).at(i).build() for i in range(300)]
    d = w.cycle(queue, now=10)
    assert d._order_rest is not None and len(d._order) < 10  # stopped after a few jobs
    assert d.waiting["q299"].reason == "no node has room" and len(d.waiting) == 300
    assert [j.id for j in d.order] == [j.id for j in queue]  # the whole order, when read


DIFFS = [
    # name, previous queue, this queue (letters are jobs), expected (arrived, left) or None (not aligned)
    ("nothing changed", "abcd", "abcd", ("", "")),
    ("arrivals at the end", "abcd", "abcdef", ("ef", "")),
    ("departures anywhere", "abcdef", "acf", ("", "bde")),
    ("both", "abcdef", "acfxy", ("xy", "bde")),
    ("moved to the end is gone and back", "abcd", "acdb", ("b", "b")),
    ("emptied", "abc", "", ("", "abc")),
    ("a job twice", "abc", "abcb", None),
]


@pytest.mark.parametrize(("name", "prev", "cur", "expected"), DIFFS, ids=[d[0] for d in DIFFS])
def test_queue_diffs_by_identity(name: str, prev: str, cur: str, expected: tuple[str, str] | None) -> None:
    from gpufleet.scheduling.framework import aligned_diff, diff_queue

    objs = {c: job(c).build() for c in "abcdefxy"}
    p, q = [objs[c] for c in prev], [objs[c] for c in cur]
    got = aligned_diff(p, set(map(id, p)), q)
    full = diff_queue(set(map(id, p)), {id(j): j for j in p}, q)
    if expected is None:
        assert got is None and full is None
        return
    assert got is not None and full is not None
    assert ("".join(j.id for j in got[0]), "".join(sorted(j.id for j in got[1]))) == expected
    # the set diff finds the net change (a job moved within the queue did not leave it)
    net_arrived = {j.id for j in got[0]} - {j.id for j in got[1]}
    net_left = {j.id for j in got[1]} - {j.id for j in got[0]}
    assert ({j.id for j in full[1]}, {j.id for j in full[2]}) == (net_arrived, net_left)
