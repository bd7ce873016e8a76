"""Issue 23: ``gpufleet_preemption_waste_gpu_seconds_total{team, cause}`` — the work the stopped runs
did after their last checkpoint (:mod:`gpufleet.cost.waste`, the rule ``simulate`` and what-if report
in GPU-hours), in GPU-seconds (``promtool check metrics`` wants base units), read from the store's
runs at scrape time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.api.metrics.scheduler import _waste_family
from gpufleet.store.repo.scrape import StoppedRun
from tests.observability.test_metrics import SCENARIOS, build, samples, scrape
from tests.support.api_support import make_api

NAME = "gpufleet_preemption_waste_gpu_seconds"
H = 3600.0


def test_waste_counter_on_a_store_with_preempted_and_spot_runs(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    build(api, SCENARIOS[0])
    fams = scrape(api)
    assert fams[NAME].type == "counter"
    got = {(s.labels["team"], s.labels["cause"]): s.value for s in samples(fams, NAME, "_total")}
    # "preempted": 2 GPUs stopped after 1 h for a higher-priority job, no checkpoints → 2 GPU-h;
    # "spot": 1 GPU lost with its spot node after 5 h → 5 GPU-h; the ended and running jobs: nothing
    assert got == {("alpha", "priority"): pytest.approx(2 * H), ("beta", "spot_interruption"): pytest.approx(5 * H)}
    gen.close()


def _run(team: str, outcome: str, stop: str | None, ran_s: float, interval: float | None, gpus: int = 1) -> StoppedRun:
    placement = [{"node": "n", "gpus": list(range(gpus)), "milli": 1000, "mig_mask": 0}]
    return StoppedRun(f"j-{team}-{ran_s}", team, outcome, stop, "on-demand", ran_s, interval, placement)


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([], {}),
        (
            [_run("nlp", "stopped", "preempt: quota reclaimed by team cv (job j9)", 5400.0, 3600.0, 4)],
            {("nlp", "quota_reclaim"): 2 * H},
        ),
        (
            [_run("nlp", "stopped", "preempt: preempted by higher-priority job j2 (high)", 7200.0, 3600.0)],
            {("nlp", "priority"): 0.0},
        ),
        ([_run("nlp", "failed", None, 3600.0, None)], {}),  # a failure retried is no preemption
        ([_run("nlp", "stopped", "cancel: cancelled by request", 3600.0, None)], {}),
        (
            [_run("cv", "lost", None, 1800.0, None, 2), _run("cv", "lost", None, 1800.0, None)],
            {("cv", "lost"): 1.5 * H},
        ),
    ],
    ids=["none", "reclaim-after-checkpoint", "priority-on-a-checkpoint", "retry", "cancel", "lost-twice"],
)
def test_waste_counter_applies_the_rule(runs: list[StoppedRun], expected: dict[tuple[str, str], float]) -> None:
    fam = _waste_family(runs, lambda _n, _l, v: v)
    got = {(s.labels["team"], s.labels["cause"]): s.value for s in fam.samples if s.name == NAME + "_total"}
    assert got == pytest.approx(expected)


def test_waste_counter_never_decreases() -> None:
    """Counters keep their high-water mark (a run's row rewritten must not take waste back)."""
    high: dict[tuple[str, tuple[str, ...]], float] = {}

    def keep(name: str, labels: Sequence[str], v: float) -> float:
        key = (name, tuple(labels))
        high[key] = max(high.get(key, 0.0), v)
        return high[key]

    _waste_family([_run("nlp", "lost", None, 3600.0, None)], keep)
    fam = _waste_family([_run("nlp", "lost", None, 1800.0, None)], keep)
    assert [s.value for s in fam.samples if s.name == NAME + "_total"] == [H]
