"""Issue 21: a job's own budget (``JobSpec.budget_usd``) in the simulator, as the server enforces it.

The loop stops a running job at the first budget tick that finds its cost at its budget (the rule of
:func:`gpufleet.loop.budgets.overrun`, on the simulator's in-memory ledger); the budget timer is the
loop's own work while such a job runs, so a quiet cluster does not let the job run on to its end.
The JSONL trace format carries the budget (``budget_usd``), validated like every field.
"""

from __future__ import annotations

import pytest

from gpufleet.errors import TraceError
from gpufleet.loop.budgets import next_tick, overrun
from gpufleet.model.job import GpuRequest, JobSpec, StopKind
from gpufleet.model.node import Node
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.traces.base import Trace, TraceJob
from gpufleet.sim.traces.jsonl import iter_jsonl, parse_jsonl


def simulate(*specs: JobSpec, interval_s: float = 60.0) -> tuple[Simulation, dict[str, float]]:
    sim = Simulation(
        Trace("t", [TraceJob(0.0, spec) for spec in specs]),
        load_profile({}).build(),
        lambda n: 4.0 * n.gpu_count,  # $4 a GPU-hour
        nodes=[Node("n1", "A100-80GB", 8, 0, 0)],
        options=SimOptions(budget_interval_s=interval_s),
    )
    result = sim.run()
    return sim, {r.name: r.cost_usd for r in result.records}


def test_a_job_is_stopped_at_its_own_budget_on_a_quiet_cluster() -> None:
    """One 2-GPU job ($8 an hour) of 10 hours with a $3 budget and nothing else happening: it is
    stopped at the first minute tick at or past $3 (22.5 minutes in: the 23rd minute), CANCELLED, its
    stop typed as a budget stop; a job whose budget is never reached runs to its end."""
    capped = JobSpec(name="capped", gpu=GpuRequest(2), duration_s=36000.0, budget_usd=3.0)
    roomy = JobSpec(name="roomy", gpu=GpuRequest(1), duration_s=3600.0, budget_usd=10.0)
    sim, cost = simulate(capped, roomy)
    by_name = {j.spec.name: j for j in sim.jobs.values()}
    job = by_name["capped"]
    assert job.state.value == "CANCELLED"
    assert job.end_time == 23 * 60.0
    assert job.stopped_by is not None and job.stopped_by.kind is StopKind.BUDGET
    assert job.events[-1].reason == job.stopped_by.detail == "job budget of $3.00 reached ($3.07 spent)"
    assert cost["capped"] == pytest.approx(8.0 * 23 / 60, abs=0.01)
    assert by_name["roomy"].state.value == "SUCCEEDED" and by_name["roomy"].stopped_by is None


def test_without_budgets_nothing_changes() -> None:
    """A trace without budgets gets no budget book and no budget timer (its decisions are those of
    before: tools/record_decisions.py)."""
    sim, cost = simulate(JobSpec(name="free", gpu=GpuRequest(2), duration_s=36000.0))
    assert sim.enforcer is None and sim.loop.budgeted == 0
    assert cost == {"free": 80.0}


def test_the_rule_and_the_timer() -> None:
    assert overrun("j", None, 100.0) is None
    assert overrun("j", 5.0, 4.999) is None
    over = overrun("j", 5.0, 5.0)
    assert over is not None and over.stop.kind is StopKind.BUDGET
    assert over.stop.text == "budget: job budget of $5.00 reached ($5.00 spent)"
    small = overrun("j", 0.5, 0.61234)
    assert small is not None and small.reason == "job budget of $0.50 reached ($0.6123 spent)"
    for last in (0.1, 97.3, 1e9 + 0.7, 12345.678):  # a driver that advances to next_tick finds the timer due
        t = next_tick(last, 60.0)
        assert t - last >= 60.0 and t <= last + 60.0 + 1e-6


def test_the_jsonl_trace_carries_a_jobs_budget() -> None:
    trace = parse_jsonl(['{"kind": "job", "submit": 0, "name": "a", "gpus": 1, "budget_usd": 12.5}'])
    assert trace.jobs[0].spec.budget_usd == 12.5
    assert parse_jsonl(list(iter_jsonl(trace))).jobs[0].spec.budget_usd == 12.5  # round trip
    free = parse_jsonl(['{"kind": "job", "submit": 0, "name": "b"}'])
    assert free.jobs[0].spec.budget_usd is None
    assert "budget_usd" not in list(iter_jsonl(free))[1]  # the default is omitted
    for bad in ("0", "-1", '"5"', "true", "2e9"):
        with pytest.raises(TraceError) as e:
            lines = [
                '{"kind": "job", "submit": 0, "name": "a"}',
                f'{{"kind": "job", "submit": 0, "name": "b", "budget_usd": {bad}}}',
            ]
            parse_jsonl(lines, source="t.jsonl")
        assert (e.value.field, e.value.line) == ("budget_usd", 2), bad
