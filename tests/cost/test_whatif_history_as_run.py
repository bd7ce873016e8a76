"""Issue 23, item 7: a what-if on history is what the server did.

The newcomer's server shared its GPUs (fractions, MIG slices) and the ledger billed $10.33 for the
jobs' span, but ``whatif --trace history`` replayed every request as a whole GPU: its baseline cost
$14.00; the autoscaling what-if showed another baseline ($15.22) for the same history (the baseline
was billed to the variant's end); spot on a one-node server saved $0.00 with no note why.

Here the store holds a history built the way the server records it (nodes with their ledger
intervals, jobs, their runs) and the figures are checked against hand arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gpufleet.model.node import Node, SharingMode
from gpufleet.services.whatif import history_nodes, history_trace
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.history import HistoryJob, trace_from_history
from gpufleet.sim.whatif import run_whatif
from gpufleet.store import repo
from gpufleet.store.db import Database

OPTS = SimOptions(seed=1, spot_hazard_per_node_hour=0.01)
T0 = 1_700_000_000.0  # the first job's submit
BOX_USD = 29.384  # 8× A100-80GB, time-sliced (the server's price)
MIG_USD = 3.616  # 1× A100-80GB in MIG mode


def _job(
    s: Any, name: str, at: float, runs: Sequence[tuple[float, float]], node: str, pods: int = 1, **fields: Any
) -> None:
    """One job as the server records it: submitted at ``T0 + at``, its runs (offsets from T0) ended."""
    row, _ = repo.submit_job(
        s,
        {"name": name, "command": ["x"], "pods": pods, **fields},
        team="vision",
        submitted_by=None,
        idempotency_key=None,
        request_sha256=None,
        now=T0 + at,
    )
    place = [{"node": node, "gpus": [0], "milli": 1000, "mig_mask": 0}] * pods
    for n, (start, end) in enumerate(runs, 1):
        repo.open_run(
            s,
            job_id=row.id,
            run=n,
            node=node,
            placement=place,
            capacity_type="on-demand",
            node_hourly_usd=BOX_USD,
            now=T0 + start,
        )
        repo.mark_run_started(s, row.id, n, pid=1, started_at=T0 + start)
        outcome = "succeeded" if n == len(runs) else "preempted"
        repo.end_run(s, row.id, n, outcome=outcome, exit_code=0, reason="", started_at=T0 + start, ended_at=T0 + end)


def _shared_history(db: Database) -> None:
    """Half an hour of a server that shares its GPUs; every job runs 1800 s of run time:

    - box (8 GPUs, time-sliced): a 2-GPU job; a gang of 2 pods × 2 GPUs; four half-GPU jobs on
      two GPUs — one of them preempted after 600 s and resumed at once (1800 s in two runs);
    - mig (1 GPU in MIG mode): two 3g.40gb slices.

    All of it fits at once only as the server ran it: as whole GPUs it asks 10 of box's 8 and 2 of
    mig's 1, and a replay that drops the sharing runs twice as long."""
    db.upgrade()
    with db.session() as s:
        repo.upsert_node(
            s,
            Node("box", "A100-80GB", 8, 64_000, 512 * 1024, sharing=SharingMode.SHARED),
            hourly_usd=BOX_USD,
            now=T0 - 3600,
        )
        repo.upsert_node(
            s,
            Node("mig", "A100-80GB", 1, 16_000, 64 * 1024, sharing=SharingMode.MIG),
            hourly_usd=MIG_USD,
            now=T0 - 3600,
        )
        _job(s, "whole", 0, [(0, 1800)], "box", gpus=2)
        _job(s, "gang", 0, [(0, 1800)], "box", pods=2, gpus=2)
        _job(s, "half-0", 0, [(0, 600), (600, 1800)], "box", gpus=1, gpu_milli=500, preemptible=True)
        for i in range(1, 4):
            _job(s, f"half-{i}", 0, [(0, 1800)], "box", gpus=1, gpu_milli=500)
        for i in range(2):
            _job(s, f"slice-{i}", 0, [(0, 1800)], "mig", gpus=1, mig_profile="3g.40gb")


# what the ledger billed from the first submit (T0) to the last run's end (T0 + 1800 s), by hand:
# (29.384 + 3.616) $/h × 0.5 h
RECORDED_USD = 16.50


def _replay(db: Database, change: str) -> Any:
    trace = history_trace(db, T0 - 60, T0 + 3600, name="history:test")
    return run_whatif(trace, change, nodes=history_nodes(db, T0 - 60, T0 + 3600), options=OPTS)


def test_history_baseline_replays_the_sharing_the_server_used_and_matches_the_ledger(db: Database) -> None:
    _shared_history(db)
    r = _replay(db, "autoscaling")
    assert r.jobs == 8 and r.baseline.completed == 8
    # the recorded figure, beside the baseline, with the tolerance the replay is held to (5 %)
    d = r.to_dict()
    assert d["recorded_cost_usd"] == pytest.approx(RECORDED_USD, abs=0.005)
    assert d["replay_tolerance"] == 0.05 and abs(d["baseline_vs_recorded"]) <= d["replay_tolerance"]
    # all eight jobs together for 1800 s, as on the server: the same $16.50 (not twice it, as whole GPUs)
    assert r.baseline.cost_usd == pytest.approx(RECORDED_USD, rel=0.01)
    note = next(a for a in r.assumptions if a.startswith("recorded "))
    assert f"recorded ${RECORDED_USD:,.2f}" in note and f"replayed baseline ${r.baseline.cost_usd:,.2f}" in note
    assert "MIG requests run as their fraction" not in " ".join(r.assumptions)  # mig stays a MIG node


CHANGES = ["spot", "autoscaling", "spot+autoscaling", "sharing", "gpu-type:H100-80GB", "queue:fifo"]


def test_every_change_over_one_history_shows_the_same_baseline(db: Database) -> None:
    _shared_history(db)
    baselines = {change: _replay(db, change).baseline.cost_usd for change in CHANGES}
    assert set(baselines.values()) == {baselines["spot"]}, baselines
    assert baselines["spot"] == pytest.approx(RECORDED_USD, rel=0.01)


def _one_node(jobs: Sequence[HistoryJob]) -> tuple[Any, list[Node]]:
    trace = trace_from_history(jobs, name="history:one-node")
    return trace, [Node("gpu-box", "A100-80GB", 8, 64_000, 512 * 1024, hourly_price_usd=BOX_USD)]


def _h(i: int, gpus: int, *, preemptible: bool, run_s: float = 1800.0) -> HistoryJob:
    return HistoryJob(
        f"j{i}",
        T0 + i,
        run_s,
        gpus=gpus,
        preemptible=preemptible,
        checkpoint_interval_s=600.0 if preemptible else None,
    )


@pytest.mark.parametrize(
    ("change", "jobs", "why"),
    [
        pytest.param(
            "spot",
            [_h(0, 4, preemptible=True), _h(1, 2, preemptible=True), _h(2, 1, preemptible=False)],
            "none of the 1 A100-80GB node can be spot: a job that may not use spot needs 1 GPUs on demand",
            id="spot-one-node-held-by-a-job-that-may-not-use-spot",
        ),
        pytest.param(
            "spot",
            [_h(0, 1, preemptible=True, run_s=600.0), _h(1, 4, preemptible=False)],
            # 1 GPU × 600 s of 1 × 600 + 4 × 1800 GPU-seconds = 7.7 %: round(1 × 7.7 %) = 0 spot nodes
            "none of the 1 A100-80GB node becomes spot: the preemptible jobs' 7.7% of the GPU-seconds is round(1",
            id="spot-preemptible-share-under-half-a-node",
        ),
        pytest.param(
            "spot",
            [_h(0, 2, preemptible=False)],
            "no job is preemptible",
            id="spot-nothing-preemptible",
        ),
        pytest.param(
            "sharing",
            [_h(0, 2, preemptible=False)],
            "the baseline already replays the requests as the cluster ran them",
            id="sharing-on-history",
        ),
        pytest.param(
            "placement:fgd+queue:fifo+gpu-type:A100-80GB",
            [_h(0, 2, preemptible=False)],
            None,  # a real change of policy: no claim that nothing changed
            id="policy-change-makes-no-claim",
        ),
    ],
)
def test_a_what_if_that_saves_nothing_says_why(change: str, jobs: list[HistoryJob], why: str | None) -> None:
    trace, nodes = _one_node(jobs)
    r = run_whatif(trace, change, nodes=nodes, options=OPTS)
    if why is None:
        assert not any("cannot save" in a or "changes nothing" in a for a in r.assumptions), r.assumptions
        return
    assert r.savings_usd == pytest.approx(0.0, abs=0.005)
    assert any(why in a for a in r.assumptions), r.assumptions
