"""What-if: baseline vs one change, same seed; the lower bound; history as a trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.io.traces import load_philly
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.history import HistoryJob, trace_from_history
from gpufleet.sim.traces.philly import PhillyOptions
from gpufleet.sim.traces.synthetic import SyntheticOptions, generate_synthetic
from gpufleet.sim.whatif import (
    base_shapes,
    parse_change,
    peak_whole_gpus,
    run_whatif,
)
from tests.support.paths import SHARED

PHILLY = SHARED / "data" / "philly" / "philly.csv"
OPTS = SimOptions(seed=1, spot_hazard_per_node_hour=0.01)


def _synthetic() -> object:
    return generate_synthetic(
        SyntheticOptions(
            num_jobs=300,
            seed=4,
            request_mix={"single": 0.6, "multi": 0.3, "fractional": 0.1},
            gpu_type_fraction=0.0,
            preemptible_fraction=0.5,
        )
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spot", {"spot": True}),
        ("spot+autoscaling", {"spot": True, "autoscaling": True}),
        ("gpu-type:a10g", {"gpu_type": "A10G"}),
        ("placement:fgd", {"placement": "fgd"}),
        ("queue:fifo", {"queue": "fifo"}),
    ],
)
def test_parse_change(text: str, expected: dict[str, object]) -> None:
    ch = parse_change(text)
    for k, v in expected.items():
        assert getattr(ch, k) == v


@pytest.mark.parametrize("text", ["", "spotty", "gpu-type:X9", "placement"])
def test_bad_change_names_the_part(text: str) -> None:
    with pytest.raises(InputError):
        parse_change(text)


def test_spot_and_autoscaling_on_a_synthetic_trace() -> None:
    trace = _synthetic()
    r = run_whatif(trace, "spot+autoscaling", options=OPTS)  # type: ignore[arg-type]
    d = r.to_dict()
    assert d["baseline"]["completed"] == d["variant"]["completed"] == 300
    assert r.variant.cost_usd < r.baseline.cost_usd and r.savings_pct is not None and r.savings_pct > 0
    assert 0 < r.lower_bound_usd <= r.variant.cost_usd
    assert r.variant_over_lower_bound is not None and r.variant_over_lower_bound >= 1
    again = run_whatif(trace, "spot+autoscaling", options=OPTS)  # type: ignore[arg-type]
    assert again.to_dict() == d  # same seed, same result


def test_sharing_packs_fractional_jobs() -> None:
    r = run_whatif(_synthetic(), "sharing", options=OPTS)  # type: ignore[arg-type]
    assert r.variant.gpu_hours < r.baseline.gpu_hours  # fractions no longer hold whole GPUs
    assert r.baseline.cost_usd == pytest.approx(r.variant.cost_usd)  # same fixed cluster, always on


def test_history_as_a_trace() -> None:
    jobs = [
        HistoryJob("j2", 1000.0, 600.0, team="b", gpus=2, preemptible=True, checkpoint_interval_s=300.0),
        HistoryJob("j1", 400.0, 60.0, team="a", gpus=1, gpu_milli=500),
        HistoryJob("j3", 1200.0, 7200.0, team="a", gpus=8, pods=2, gpu_types=("a100-80gb",)),
    ]
    tr = trace_from_history(jobs)
    assert [(tj.submit_time, tj.spec.name) for tj in tr.jobs] == [(0.0, "j1"), (600.0, "j2"), (800.0, "j3")]
    assert tr.jobs[0].spec.gpu.milli == 500 and tr.jobs[1].spec.preemptible
    assert tr.jobs[2].spec.gang_size == 2 and tr.jobs[2].spec.gpu_types == frozenset({"A100-80GB"})
    assert peak_whole_gpus(tr) == 16 + 2  # j2 and j3 overlap
    shapes = base_shapes(tr)  # j3 may only use A100-80GB: its own nodes; j1 and j2 the default V100s
    assert [(sh.gpu_model, n) for sh, n in shapes] == [("A100-80GB", 2), ("V100-16GB", 1)]
    r = run_whatif(tr, "gpu-type:A100-80GB", options=OPTS)
    assert r.variant.completed == 3


@pytest.mark.skipif(not PHILLY.exists(), reason="needs ../shared/data/philly/philly.csv")
def test_philly_subset_spot_and_autoscaling() -> None:
    trace = load_philly(PHILLY, PhillyOptions(preemptible_fraction=0.3, max_jobs=3000, seed=1))
    r = run_whatif(trace, "spot+autoscaling", options=OPTS)
    assert r.jobs == 3000 and r.variant.completed == r.baseline.completed == 3000
    assert r.savings_pct is not None and r.savings_pct > 0.5  # a peak-sized fixed cluster idles most of the time
    assert r.lower_bound_usd <= r.variant.cost_usd <= r.baseline.cost_usd
    auto = run_whatif(trace, "autoscaling", options=OPTS)
    assert r.variant.cost_usd < auto.variant.cost_usd  # spot adds savings on top of autoscaling


def test_cli_replays_the_stores_history(tmp_path: Path) -> None:
    """`gpufleet whatif --trace history:30d` reads the jobs the server ran from its store."""
    import json
    import time

    from typer.testing import CliRunner

    from gpufleet.cli.main import app
    from gpufleet.store import repo
    from gpufleet.store.db import Database

    url = f"sqlite:///{tmp_path / 'g.db'}"
    db = Database(url)
    db.upgrade()
    now = time.time()
    with db.session() as s:
        for i in range(3):
            row, _ = repo.submit_job(
                s,
                {"name": f"j{i}", "command": ["x"], "gpus": 1},
                team="nlp",
                submitted_by=None,
                idempotency_key=None,
                request_sha256=None,
                now=now - 3600 + i,
            )
            place = [{"node": "vm", "gpus": [0], "milli": 1000, "mig_mask": 0}]
            repo.open_run(
                s,
                job_id=row.id,
                run=1,
                node="vm",
                placement=place,
                capacity_type="on-demand",
                node_hourly_usd=8.0,
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
    res = CliRunner().invoke(app, ["whatif", "--change", "spot", "--trace", "history:30d", "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["baseline"]["completed"] == 3 and out["variant"]["completed"] == 3
    empty = CliRunner().invoke(
        app, ["whatif", "--change", "spot", "--trace", "history:2020-01-01T00:00:00Z,2020-01-02T00:00:00Z", "--db", url]
    )
    assert empty.exit_code == 2 and "no recorded jobs" in empty.output
