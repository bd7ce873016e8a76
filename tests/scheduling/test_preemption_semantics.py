"""Preemption and reclaim semantics that never thrash (issue 23, items 1-2), one scenario table per rule:

1. a job that is not preemptible is never stopped, so it may only use its team's nominal quota;
2. a reclaim takes preemptible borrowers only, no more than needed, lowest priority, then least
   progress at risk, then youngest first;
3. a run younger than the minimum runtime (reclaim / priority preemption) is not a victim yet, and
   the waiting job says so (and the world runs a cycle when it comes of age);
4. a preemptible job may not borrow the room another cohort member's pending nominal work would
   reclaim at once;
5. a higher-priority job held by its own team's quota preempts its team's lower-priority
   preemptible jobs (only what it needs).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.errors import ConfigError
from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import Node
from gpufleet.scheduling.preemption import (
    PREEMPT_MIN_RUNTIME_WAIT,
    RECLAIM_MIN_RUNTIME_WAIT,
    WITHIN_TEAM_MIN_RUNTIME_WAIT,
    WITHIN_TEAM_WAIT,
)
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob
from tests.scheduling.test_cycle import World, placed, victims, world
from tests.support.builders import cluster, job

LAB = {"cohort": "lab"}


def _run(
    w: World, rid: str, team: str, *, prio: str = "normal", pre: bool = True, gpus: int = 1, at: float = 0.0
) -> Job:
    b = job(rid).team(team).priority(prio).gpus(gpus)
    return w.start((b.preemptible() if pre else b).build(), "n1", now=at)


# -- 1. a job that is not preemptible is never stopped: it may use its nominal quota only ------------------
BORROW = [
    # name, job preemptible, its team, placed?, waiting reason
    ("a preemptible job borrows the cohort's idle quota", True, "vision", True, None),
    (
        "a job that is not preemptible may not borrow",
        False,
        "vision",
        False,
        "quota: a job that is not preemptible may not borrow (vision holds 4 of its 4 A100-80GB GPUs)",
    ),
    ("a team without a quota entry is unchanged", False, "free", True, None),
]


@pytest.mark.parametrize(("name", "pre", "team", "runs", "reason"), BORROW, ids=[b[0] for b in BORROW])
def test_only_preemptible_jobs_borrow(name: str, pre: bool, team: str, runs: bool, reason: str | None) -> None:
    teams = {"vision": {"quota": {"*": 4}, **LAB, "borrowing_limit": 2}, "nlp": {"quota": {"*": 3}, **LAB}}
    w = world(cluster().add("n1", gpus=8), teams=teams)
    for i in range(4):
        _run(w, f"v{i}", "vision", pre=False)
    b = job("new").team(team).at(5)
    d = w.cycle([(b.preemptible() if pre else b).build()], now=10)
    assert placed(d) == (["new"] if runs else [])
    if reason is not None:
        assert d.waiting["new"].reason == reason


RECLAIM_VICTIMS = [
    # name, a's borrowers preemptible, victims of b's job (reclaim in admission; in phase 4)
    ("preemptible borrowers are reclaimed", True, ["a2"]),
    ("borrowers that are not preemptible are never stopped", False, []),
]


@pytest.mark.parametrize(("name", "pre", "expected"), RECLAIM_VICTIMS, ids=[r[0] for r in RECLAIM_VICTIMS])
@pytest.mark.parametrize("where", ["quota check", "no room on a node"])
def test_reclaim_never_stops_a_job_that_is_not_preemptible(
    name: str, pre: bool, expected: list[str], where: str
) -> None:
    """a holds 3 GPUs of a nominal 2 (as the old scheduler let any job borrow); b, within its
    nominal quota, needs one GPU back: from the quota check (cohort quota = the node) or, when the
    cohort's quota exceeds the node, from phase 4 (the reclaim branch of the victim filter)."""
    b_quota = 2 if where == "quota check" else 4
    teams = {"a": {"quota": {"*": 2}, **LAB}, "b": {"quota": {"*": b_quota}, **LAB}}
    w = world(cluster().add("n1", gpus=4), teams=teams)
    for i in range(3):
        _run(w, f"a{i}", "a", pre=pre, at=float(i))
    _run(w, "b0", "b", pre=False)
    d = w.cycle([job("b1").team("b").at(300).build()], now=1000)
    assert victims(d) == expected
    assert all(p.victim.job.spec.preemptible for p in d.preemptions)


# -- 2. a reclaim takes only what is needed: lowest priority, least progress, youngest ------------------------
ORDER = [
    # name, a's borrowers (id, priority, gpus, started, checkpoint every), b's job gpus, victims
    (
        "lowest priority first",
        [("hi", "normal", 1, 0, None), ("lo", "low", 1, 0, None), ("mid", "normal", 1, 0, None)],
        1,
        ["lo"],
    ),
    (
        "then least progress at risk",
        [("ck", "low", 1, 0, 700), ("long", "low", 1, 0, None), ("short", "low", 1, 500, None)],
        1,
        ["ck"],  # checkpointed at 700: 300 s at risk, against 1000 s and 500 s
    ),
    ("then the youngest run", [("old", "low", 1, 0, 500), ("young", "low", 1, 500, 500)], 1, ["young"]),
    (
        "no victim that turns out not to be needed",
        [("one", "low", 1, 0, None), ("two", "normal", 2, 0, None)],
        2,
        ["two"],  # "one" first frees too little; "two" alone is enough
    ),
]


@pytest.mark.parametrize(("name", "running", "gpus", "expected"), ORDER, ids=[o[0] for o in ORDER])
def test_reclaim_takes_only_what_is_needed(name: str, running: list, gpus: int, expected: list[str]) -> None:
    size = sum(r[2] for r in running)
    teams = {"a": {"quota": {"*": 1}, **LAB}, "b": {"quota": {"*": size - 1}, **LAB}}
    w = world(cluster().add("n1", gpus=size), teams=teams)
    for rid, prio, g, started, ck in running:
        w.start(job(rid).team("a").priority(prio).gpus(g).preemptible(ck).build(), "n1", now=float(started))
    d = w.cycle([job("b0").team("b").gpus(gpus).build()], now=1000)
    assert victims(d) == expected
    assert all(p.reason.startswith("quota reclaimed by team b") for p in d.preemptions)


# -- 3. the minimum runtime ----------------------------------------------------------------------------------
MIN_RUNTIME = [
    # name, profile, victim's start, victims, waiting reason, cycle again at
    ("reclaim: a run of 30 s is too young", {}, 970, [], RECLAIM_MIN_RUNTIME_WAIT, 1090),
    ("reclaim: a run of 130 s is not", {}, 870, ["a1"], "reclaiming quota lent to the cohort", None),
    ("reclaim: a minimum of 0", {"reclaim_min_runtime_s": 0}, 999, ["a1"], "reclaiming quota lent to the cohort", None),
]


@pytest.mark.parametrize(
    ("name", "profile", "start", "expected", "reason", "retry"), MIN_RUNTIME, ids=[m[0] for m in MIN_RUNTIME]
)
def test_reclaim_min_runtime(
    name: str, profile: dict, start: float, expected: list[str], reason: str, retry: float | None
) -> None:
    teams = {"a": {"quota": {"*": 1}, **LAB}, "b": {"quota": {"*": 1}, **LAB}}
    w = world(cluster().add("n1", gpus=2), teams=teams, **profile)
    _run(w, "a0", "a", pre=False)
    _run(w, "a1", "a", at=start)
    d = w.cycle([job("b0").team("b").build()], now=1000)
    assert victims(d) == expected
    assert d.waiting["b0"].reason == reason
    assert d.retry_at == (retry if retry is not None else float("inf"))


PREEMPT_MIN = [
    # name, preempt_min_runtime_s, low job's start, victims, waiting reason, cycle again at
    ("priority: no minimum by default", None, 999, ["low"], "preempting to make room", None),
    ("priority: a run of 10 s of a 60 s minimum", 60, 990, [], PREEMPT_MIN_RUNTIME_WAIT, 1050),
    ("priority: a run of 60 s of a 60 s minimum", 60, 940, ["low"], "preempting to make room", None),
]


@pytest.mark.parametrize(
    ("name", "minimum", "start", "expected", "reason", "retry"), PREEMPT_MIN, ids=[m[0] for m in PREEMPT_MIN]
)
def test_preempt_min_runtime(
    name: str, minimum: float | None, start: float, expected: list[str], reason: str, retry: float | None
) -> None:
    profile = {} if minimum is None else {"preempt_min_runtime_s": minimum}
    w = world(cluster().add("n1", gpus=1), queue_sort="priority", **profile)
    w.start(job("low").priority("low").preemptible().build(), "n1", now=start)
    d = w.cycle([job("high").priority("high").build()], now=1000)
    assert victims(d) == expected
    assert d.waiting["high"].reason == reason
    assert d.retry_at == (retry if retry is not None else float("inf"))


def test_the_world_wakes_up_when_the_minimum_runtime_ends() -> None:
    """In a simulation that runs cycles only on events: the high job starts when the low one has
    run its minimum of 300 s (not at once, not when the low job ends an hour later)."""
    spec = JobSpec(name="low", gpu=GpuRequest(1), priority_class="low", preemptible=True, duration_s=3600.0)
    trace = Trace("t", [TraceJob(0.0, spec), TraceJob(10.0, replace(spec, name="high", priority_class="high"))])
    sim = Simulation(
        trace,
        load_profile({"preempt_min_runtime_s": 300}).build(),
        lambda n: 8.0,
        nodes=[Node("n", "A100-80GB", 1, 32_000, 262_144)],
        options=SimOptions(cycle_interval_s=1.0),
    )
    sim.run()
    low, high = sim.jobs["j000001"], sim.jobs["j000002"]
    assert low.preemptions == 1
    assert high.first_start_time == pytest.approx(300.0, abs=2.0)


# -- 4. no thrash: nominal work before borrowing ----------------------------------------------------------------
NO_THRASH = [
    # name, b's running jobs, b's pending jobs (id, gpus), placed, a's borrower waits for
    (
        "b's pending nominal work keeps its room",
        0,
        [("b0", 1), ("b1", 1)],
        ["b0", "b1"],
        "quota: may not borrow what the cohort keeps for other teams' pending jobs within their nominal quota"
        " (they would reclaim it at once): A100-80GB: 2 GPUs kept for pending jobs of b",
    ),
    ("room beyond b's pending work may be borrowed", 0, [("b0", 1)], ["a-borrow", "b0"], None),
    ("b's pending job would itself borrow: nothing kept", 1, [("b0", 2)], ["a-borrow"], None),
    ("b waits for nothing: a borrows", 0, [], ["a-borrow"], None),
]


@pytest.mark.parametrize(("name", "b_runs", "pending", "expected", "reason"), NO_THRASH, ids=[n[0] for n in NO_THRASH])
def test_no_borrowing_that_would_be_reclaimed_at_once(
    name: str, b_runs: int, pending: list, expected: list[str], reason: str | None
) -> None:
    """a (nominal 2) holds 2; b (nominal 2) holds ``b_runs``; a's preemptible job comes first in the
    queue (fifo) and could borrow b's idle quota."""
    teams = {"a": {"quota": {"*": 2}, **LAB}, "b": {"quota": {"*": 2}, **LAB}}
    w = world(cluster().add("n1", gpus=4), teams=teams, queue_sort="fifo")
    for i in range(2):
        _run(w, f"a{i}", "a", pre=False)
    for i in range(b_runs):
        _run(w, f"br{i}", "b", pre=False)
    queue = [job("a-borrow").team("a").preemptible().at(1).build()]
    queue += [job(jid).team("b").gpus(g).at(2 + k).build() for k, (jid, g) in enumerate(pending)]
    d = w.cycle(queue, now=10)
    assert sorted(placed(d)) == sorted(expected)
    if reason is not None:
        assert d.waiting["a-borrow"].reason == reason


# -- 5. priority within a team at its quota ---------------------------------------------------------------------
WITHIN_TEAM = [
    # name, vision's running (id, priority, preemptible, gpus, start), new job (priority, gpus, preemptible),
    # profile, victims, waiting reason
    (
        "an urgent job preempts its team's low job",
        [("t0", "normal", False, 2, 0), ("lo", "low", True, 1, 0), ("lo2", "low", True, 1, 500)],
        ("urgent", 1, False),
        {},
        ["lo2"],  # the youngest of the two low jobs; one is enough
        WITHIN_TEAM_WAIT,
    ),
    (
        "as many as it needs",
        [("t0", "normal", False, 2, 0), ("lo", "low", True, 1, 0), ("lo2", "low", True, 1, 500)],
        ("urgent", 2, False),
        {},
        ["lo", "lo2"],
        WITHIN_TEAM_WAIT,
    ),
    (
        "never a job that is not preemptible",
        [("t0", "normal", False, 2, 0), ("lo", "low", False, 2, 0)],
        ("urgent", 1, False),
        {},
        [],
        "quota: a job that is not preemptible may not borrow (vision holds 4 of its 4 A100-80GB GPUs)",
    ),
    (
        "never an equal class",
        [("t0", "normal", False, 2, 0), ("lo", "urgent", True, 2, 0)],
        ("urgent", 1, False),
        {},
        [],
        "quota: a job that is not preemptible may not borrow (vision holds 4 of its 4 A100-80GB GPUs)",
    ),
    (
        "a preemptible job frees only what keeps it within its borrowing limit",
        [("t0", "normal", False, 4, 0), ("b1", "low", True, 1, 0), ("b2", "low", True, 1, 100)],
        ("urgent", 1, True),
        {},
        ["b2"],
        WITHIN_TEAM_WAIT,
    ),
    (
        "not a run younger than the minimum",
        [("t0", "normal", False, 2, 0), ("lo", "low", True, 2, 990)],
        ("urgent", 1, False),
        {"preempt_min_runtime_s": 60},
        [],
        WITHIN_TEAM_MIN_RUNTIME_WAIT,
    ),
]


@pytest.mark.parametrize(
    ("name", "running", "new", "profile", "expected", "reason"), WITHIN_TEAM, ids=[t[0] for t in WITHIN_TEAM]
)
def test_priority_within_a_team_at_its_quota(
    name: str, running: list, new: tuple, profile: dict, expected: list[str], reason: str
) -> None:
    """vision (nominal 4, borrowing limit 2) in a cohort with nlp (nominal 3, idle: vision may
    borrow up to its limit); an 8-GPU node."""
    teams = {"vision": {"quota": {"*": 4}, **LAB, "borrowing_limit": 2}, "nlp": {"quota": {"*": 3}, **LAB}}
    w = world(cluster().add("n1", gpus=8), teams=teams, **profile)
    for rid, prio, pre, g, started in running:
        _run(w, rid, "vision", prio=prio, pre=pre, gpus=g, at=float(started))
    prio, g, pre = new
    b = job("new").team("vision").priority(prio).gpus(g).at(900)
    d = w.cycle([(b.preemptible() if pre else b).build()], now=1000)
    assert victims(d) == expected
    assert d.waiting["new"].reason == reason
    assert all("of its team" in p.reason and p.victim.job.spec.preemptible for p in d.preemptions)


BAD_SETTINGS = [
    # name, profile, the field the message names
    ("a negative reclaim minimum", {"reclaim_min_runtime_s": -1}, "reclaim_min_runtime_s"),
    ("a minimum that is not a number", {"preempt_min_runtime_s": "soon"}, "preempt_min_runtime_s"),
]


@pytest.mark.parametrize(("name", "profile", "field"), BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_min_runtime_settings_are_checked(name: str, profile: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        load_profile(profile)


NEVER = [
    # name, team, gpus, code, reason
    (
        "more than its nominal quota, in a cohort: never admitted, and says why",
        "vision",
        6,
        "unresolvable",
        "quota: asks 6 GPUs, more than team vision's nominal quota (4), and a job that is not preemptible "
        "may not borrow from cohort 'lab' (mark it preemptible)",
    ),
    (
        "more than its nominal quota, no cohort: a hard cap",
        "solo",
        3,
        "unresolvable",
        "quota: asks 3 GPUs, more than team solo's nominal quota (2)",
    ),
    ("within its nominal quota but held now: it waits", "vision", 2, "unschedulable", None),
]


@pytest.mark.parametrize(("name", "team", "gpus", "code", "reason"), NEVER, ids=[n[0] for n in NEVER])
def test_a_job_that_is_not_preemptible_and_asks_more_than_its_quota_is_never_runnable(
    name: str, team: str, gpus: int, code: str, reason: str | None
) -> None:
    """The 200-job Kubernetes run: a high-priority 16-GPU gang of a team with a nominal quota of 12
    waited PENDING for ever, with a reason that read as a wait ("may not borrow", as if room could
    come). It can never be admitted: the cycle says so (UNRESOLVABLE) and what would let it run."""
    teams = {"vision": {"quota": {"*": 4}, **LAB}, "nlp": {"quota": {"*": 3}, **LAB}, "solo": {"quota": {"*": 2}}}
    w = world(cluster().add("n1", gpus=8), teams=teams)
    for i in range(3):
        _run(w, f"v{i}", "vision", pre=False)
    d = w.cycle([job("big").team(team).gpus(gpus).at(5).build()], now=10)
    assert placed(d) == []
    status = d.waiting["big"]
    assert status.code.value == code, status
    if reason is not None:
        assert status.reason == reason
