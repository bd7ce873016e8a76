"""Issue 10, observations 1 and 2: what-if advice backed by the user's reality.

1. ``whatif --change spot --trace synthetic:3 --limit 2000`` said the spot variant cost 17× the
   baseline (utilization 0.018): spot nodes' interruptions, drawn for weeks after the last job,
   kept the simulated world (and its bill) running; the baseline's V100s could not run the jobs
   limited to other models at all.
2. ``whatif --trace history:30d`` replayed "2 on-demand nodes (2× 8× V100)", not the server's one
   node of 8 A100-80GB, at catalog prices rather than the ledger's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.io.traces import TraceOptions, load_trace
from gpufleet.model.node import Node
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.whatif import run_whatif
from gpufleet.store import repo
from gpufleet.store.db import Database

OPTS = SimOptions(seed=1, spot_hazard_per_node_hour=0.01)


@pytest.fixture(scope="module")
def synthetic_3() -> object:
    return load_trace("synthetic:3", TraceOptions(limit=600, preemptible_fraction=0.3, seed=1))


@pytest.mark.parametrize("change", ["spot", "autoscaling", "spot+autoscaling", "sharing"])
def test_a_change_never_costs_more_than_the_fixed_on_demand_cluster(synthetic_3: object, change: str) -> None:
    r = run_whatif(synthetic_3, change, options=OPTS)  # type: ignore[arg-type]
    # the same work in both runs: every job completes on the baseline and on the variant
    assert r.baseline.completed == r.variant.completed == r.jobs
    assert r.variant.cost_usd <= r.baseline.cost_usd * 1.0001
    assert r.lower_bound_usd <= r.variant.cost_usd
    # the bill ends with the work: no month of idle spot nodes after the last job
    assert r.variant.idle_cost_usd < r.variant.cost_usd


def test_spot_alone_saves_and_keeps_on_demand_room_for_jobs_that_may_not_use_spot(synthetic_3: object) -> None:
    r = run_whatif(synthetic_3, "spot", options=OPTS)  # type: ignore[arg-type]
    assert r.savings_pct is not None and r.savings_pct > 0
    assert r.variant.utilization is not None and r.variant.utilization > 0.5 * (r.baseline.utilization or 0)


def test_baseline_has_the_models_the_jobs_are_limited_to(synthetic_3: object) -> None:
    r = run_whatif(synthetic_3, "autoscaling", options=OPTS)  # type: ignore[arg-type]
    base = r.assumptions[0]
    for model in ("A100-80GB", "H100-80GB", "T4", "L4", "V100-16GB"):
        assert model in base
    assert not any("no eligible priced GPU" in a for a in r.assumptions)
    assert r.baseline.never_started == 0


def _server_history(url: str, *, hourly_usd: float) -> None:
    """A server's store: one node of 8 A100-80GB at its own price, three one-GPU jobs that ran."""
    db = Database(url)
    db.upgrade()
    now = time.time()
    with db.session() as s:
        repo.upsert_node(s, Node("gpu-box", "A100-80GB", 8, 64_000, 512 * 1024), hourly_usd=hourly_usd, now=now - 7200)
        for i in range(3):
            row, _ = repo.submit_job(
                s,
                {"name": f"j{i}", "command": ["x"], "gpus": 1, "checkpoint_dir": "/tmp/ck"},
                team="nlp",
                submitted_by=None,
                idempotency_key=None,
                request_sha256=None,
                now=now - 3600 + i,
            )
            place = [{"node": "gpu-box", "gpus": [i], "milli": 1000, "mig_mask": 0}]
            repo.open_run(
                s,
                job_id=row.id,
                run=1,
                node="gpu-box",
                placement=place,
                capacity_type="on-demand",
                node_hourly_usd=hourly_usd,
                now=now - 3500,
            )
            repo.mark_run_started(s, row.id, 1, pid=1, started_at=now - 3500)
            repo.end_run(
                s,
                row.id,
                1,
                outcome="succeeded",
                exit_code=0,
                reason="",
                started_at=now - 3500,
                ended_at=now - 3500 + 600 * (i + 1),
            )
    db.dispose()


@pytest.mark.parametrize("change", ["spot", "spot+autoscaling"])
def test_history_replays_the_servers_own_cluster_at_its_own_prices(tmp_path: Path, change: str) -> None:
    from gpufleet.cli.main import app

    url = f"sqlite:///{tmp_path / 'g.db'}"
    _server_history(url, hourly_usd=29.384)
    res = CliRunner().invoke(app, ["whatif", "--change", change, "--trace", "history:30d", "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["baseline_nodes"] == 1
    assert "1× 8× A100-80GB" in out["assumptions"][0] and "V100" not in out["assumptions"][0]
    assert any("A100-80GB $3.673/GPU-h" in a for a in out["assumptions"])
    assert out["baseline"]["completed"] == out["variant"]["completed"] == 3
    assert out["variant"]["utilization"] > 0
    # the baseline's bill is this node at this price for as long as the replayed work lasted (1800 s),
    # whatever the change (issue 23, item 7: one baseline per history; a variant whose work ends
    # later pays its own delay)
    work = 29.384 * 1800 / 3600
    assert out["baseline"]["cost_usd"] == pytest.approx(work, rel=0.01)
    if change == "spot":  # no job is preemptible: nothing moves to spot, and the result says so
        assert out["variant"]["cost_usd"] == out["baseline"]["cost_usd"]
        assert any("no job is preemptible" in a for a in out["assumptions"])
    else:  # the variant's work ends later (provisioning): the fixed node, always on, is kept on until then
        assert out["baseline_kept_on_usd"] > 0 and any(
            "costs $" in a and "more until then" in a for a in out["assumptions"]
        )
        assert out["variant"]["cost_usd"] <= out["baseline"]["cost_usd"] + out["baseline_kept_on_usd"]
        assert out["savings_usd"] == pytest.approx(
            out["baseline"]["cost_usd"] + out["baseline_kept_on_usd"] - out["variant"]["cost_usd"]
        )
