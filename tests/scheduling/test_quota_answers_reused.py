"""Issue 24 (the Philly replay 8× slower after issue 23's quota semantics): with every pending job
held by its quota, a cycle asked the quota check once per job and each answer scanned the cohort's
running jobs — 1.6 M answers over a 10,000-job replay. The check now gives a job the answer a like
job got earlier in the same cycle when nothing was chosen since (:meth:`QuotaCheck.admit`). That
must change no decision: the same random contended workloads replayed with and without reuse
start, stop and place every job identically."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import Node
from gpufleet.scheduling.admission import QuotaCheck
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob

TEAMS: dict[str, dict[str, Any]] = {
    "vision": {"quota": {"*": 6}, "cohort": "lab", "borrowing_limit": 4},
    "nlp": {"quota": {"*": 4}, "cohort": "lab"},
    "speech": {"quota": {"*": 3}, "cohort": "lab", "borrowing_limit": 1},
    "audio": {"quota": {"*": 3}},
}

job_rows = st.lists(
    st.tuples(
        st.sampled_from(sorted(TEAMS)),
        st.integers(0, 600),  # submitted at
        st.integers(30, 900),  # runs for
        st.sampled_from(("low", "normal", "high")),
        st.booleans(),  # preemptible
        st.sampled_from((1, 1, 1, 2, 4)),  # GPUs
        st.sampled_from((1, 1, 1, 2)),  # pods
    ),
    min_size=5,
    max_size=60,
)


def _replay(rows: list[tuple[str, int, int, str, bool, int, int]]) -> list[object]:
    trace = Trace(
        "contended",
        [
            TraceJob(
                float(t),
                JobSpec(
                    name=f"j{i}",
                    team=team,
                    gpu=GpuRequest(gpus),
                    gang_size=pods,
                    priority_class=prio,
                    preemptible=pre,
                    duration_s=float(run),
                    checkpoint_interval_s=60.0 if pre else None,
                ),
            )
            for i, (team, t, run, prio, pre, gpus, pods) in enumerate(sorted(rows, key=lambda r: r[1]))
        ],
    )
    profile = load_profile({"teams": TEAMS, "reclaim_min_runtime_s": 60}).build()
    nodes = [Node(f"gpu{i}", "A100-80GB", 8, 64_000, 524_288) for i in range(2)]
    sim = Simulation(trace, profile, lambda nd: 29.384, nodes=nodes, options=SimOptions(cycle_interval_s=5.0))
    result = sim.run()
    records = sorted(
        (r.name, r.state, r.start, r.end, r.preemptions, r.restarts, r.gpu_seconds, r.lost_work_s)
        for r in result.records
    )
    return [*records, *(repr(w) for w in result.wasted)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=job_rows)
def test_reused_quota_answers_change_no_decision(rows: list[tuple[str, int, int, str, bool, int, int]]) -> None:
    reused = _replay(rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(QuotaCheck, "admit", QuotaCheck._admit)  # every job asks afresh
        fresh = _replay(rows)
    assert reused == fresh
