"""Issue 23 (1), reproduced in the simulator: the contention workload of the issue — 8 A100-80GB;
vision quota 4 in cohort ``lab`` with borrowing limit 2, nlp quota 3 in ``lab`` (weight 2), audio
quota 1; 19 one-GPU sleep jobs, preemptible or not, of three classes, arriving over five minutes.

Before (4e1b925): 15 stops, 10 of them of jobs not marked preemptible, vision and nlp reclaiming
from each other within seconds (v-eval-2 stopped 3 times), 2,353 GPU-seconds redone (24 % of what
ran). Now: 3 stops, all of preemptible jobs, none more than twice, 246 GPU-seconds redone (3 %; two
borrowers reclaimed once their 120 s minimum runtime was up), and a reclaim never takes more from a
team than it borrows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gpufleet.model.gpu import MILLI
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import Node
from gpufleet.scheduling.decisions import Decisions
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob

TEAMS = {
    "vision": {"quota": {"*": 4}, "cohort": "lab", "borrowing_limit": 2},
    "nlp": {"quota": {"*": 3}, "cohort": "lab", "weight": 2},
    "audio": {"quota": {"*": 1}},
}
# name, team, submitted at (s), runs for (s), priority class, preemptible
CONTENTION = [
    ("v-train-1", "vision", 0, 600, "normal", False),
    ("v-train-2", "vision", 0, 600, "normal", False),
    ("n-eval-1", "nlp", 0, 240, "normal", False),
    ("v-sweep-1", "vision", 5, 900, "low", True),
    ("v-eval-1", "vision", 5, 240, "normal", False),
    ("v-eval-2", "vision", 6, 240, "normal", False),
    ("v-eval-3", "vision", 7, 240, "normal", False),
    ("a-train-1", "audio", 10, 300, "normal", False),
    ("v-sweep-2", "vision", 12, 900, "low", True),
    ("n-eval-2", "nlp", 30, 240, "normal", False),
    ("n-eval-3", "nlp", 31, 240, "normal", False),
    ("n-ft-1", "nlp", 40, 600, "low", True),
    ("n-ft-2", "nlp", 41, 600, "low", True),
    ("v-eval-4", "vision", 150, 240, "normal", False),
    ("n-eval-4", "nlp", 200, 240, "normal", False),
    ("v-urgent", "vision", 250, 120, "high", False),
    ("a-eval-1", "audio", 260, 120, "normal", False),
    ("n-eval-5", "nlp", 300, 240, "normal", False),
    ("v-sweep-3", "vision", 320, 600, "low", True),
]
MAX_STOPS_PER_JOB = 2


def contention_simulation() -> Simulation:
    """The issue's contention workload on one 8-GPU node, ready to run."""
    trace = Trace(
        "contention",
        [
            TraceJob(
                float(t),
                JobSpec(name=n, team=team, gpu=GpuRequest(1), priority_class=p, preemptible=pre, duration_s=float(s)),
            )
            for n, team, t, s, p, pre in CONTENTION
        ],
    )
    return Simulation(
        trace,
        load_profile({"teams": TEAMS}).build(),
        lambda nd: 29.384,
        nodes=[Node("gpu0", "A100-80GB", 8, 64_000, 524_288)],
        options=SimOptions(cycle_interval_s=1.0),
    )


def _simulate(on_cycle: Callable[[Simulation, Decisions, dict[str, int]], None]) -> Simulation:
    sim = contention_simulation()
    run_cycle = sim.loop.run_cycle

    def observed(now: float) -> Decisions:
        quotas, usage = sim.scheduler.quotas, sim.scheduler.usage
        borrowed = {t: usage.held(t, "A100-80GB") - (quotas.nominal(t, "A100-80GB") or 0) for t in TEAMS}
        d = run_cycle(now)
        on_cycle(sim, d, borrowed)
        return d

    sim.loop.run_cycle = observed  # type: ignore[method-assign]
    sim.run()
    return sim


def test_contention_stops_no_job_that_is_not_preemptible_and_never_thrashes() -> None:
    stops: list[tuple[str, str]] = []  # (victim, why)
    over_reclaimed: list[str] = []

    def on_cycle(sim: Simulation, d: Decisions, borrowed: dict[str, int]) -> None:
        taken: Counter[str] = Counter()
        for p in d.preemptions:
            stops.append((p.victim.job.spec.name, p.reason))
            if p.reason.startswith("quota reclaimed"):
                taken[p.victim.job.team] += MILLI
        # a reclaim takes whole one-GPU jobs: never more of a team than it borrows
        over_reclaimed.extend(f"{team}: {n} of {borrowed[team]}" for team, n in taken.items() if n > borrowed[team])

    sim = _simulate(on_cycle)
    jobs = {j.spec.name: j for j in sim.jobs.values()}
    assert all(j.state.value == "SUCCEEDED" for j in jobs.values())
    stopped_not_preemptible = sorted({v for v, _ in stops if not jobs[v].spec.preemptible})
    assert stopped_not_preemptible == []
    assert [n for n, j in jobs.items() if not j.spec.preemptible and j.preemptions] == []
    per_job = Counter(v for v, _ in stops)
    assert max(per_job.values(), default=0) <= MAX_STOPS_PER_JOB, per_job
    assert over_reclaimed == []
