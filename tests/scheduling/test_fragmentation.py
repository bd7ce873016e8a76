"""The FGD fragmentation experiment: method details on a subsample, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.cli.experiment import experiment_app, parse_seeds
from gpufleet.experiments.fragmentation import (
    ARRIVED_PCT,
    Cluster,
    arrival_order,
    discretize,
    run_experiment,
    run_seed,
    typical_pods,
)
from gpufleet.io.fragmentation import load_cluster, load_published
from gpufleet.sim.traces.openb import OpenbNodes
from tests.support.paths import SHARED, SRC

PUBLISHED = SHARED / "data" / "fgd"


@pytest.fixture(scope="module")
def default() -> Cluster:
    return load_cluster("default")


@pytest.fixture(scope="module")
def small(default: Cluster) -> Cluster:
    """Every 10th GPU node and every 10th pod: a ~10x smaller copy of the experiment."""
    n = default.nodes
    sel = np.arange(0, len(n), 10)
    nodes = OpenbNodes(
        source=n.source,
        names=[n.names[i] for i in sel],
        cpu_milli=n.cpu_milli[sel],
        memory_mib=n.memory_mib[sel],
        gpu_count=n.gpu_count[sel],
        model=[n.model[i] for i in sel],
    )
    p = default.pods
    k = np.arange(0, len(p), 10)
    from gpufleet.sim.traces.openb import OpenbPods

    pods = OpenbPods(
        source=p.source,
        names=[p.names[i] for i in k],
        cpu_milli=p.cpu_milli[k],
        memory_mib=p.memory_mib[k],
        num_gpu=p.num_gpu[k],
        gpu_milli=p.gpu_milli[k],
        gpu_spec=[p.gpu_spec[i] for i in k],
        gpu_spec_raw=[p.gpu_spec_raw[i] for i in k],
        qos=[p.qos[i] for i in k],
        creation_time=p.creation_time[k],
        deletion_time=p.deletion_time[k],
    )
    return Cluster(trace="default-small", nodes=nodes, pods=pods, workload=typical_pods(pods))


def test_typical_pods_cover_95_percent(default: Cluster) -> None:
    wl = default.workload
    assert abs(sum(w.weight for w in wl) - 1.0) < 1e-9
    weights = [w.weight for w in wl]
    assert weights == sorted(weights, reverse=True)
    assert any(w.gpu_count == 0 for w in wl)  # CPU-only pods are part of the target workload


def test_arrival_order_inflates_to_target(default: Cluster) -> None:
    order = arrival_order(default.pods, default.nodes.total_gpus, 42, 1.3)
    requested = int(default.pods.total_gpu_milli[order].sum())
    target = 1.3 * default.nodes.total_gpus * 1000
    assert requested <= target and requested > target - 1000
    # The trace comes first, shuffled; clones after it.
    assert sorted(order[: len(default.pods)].tolist()) == list(range(len(default.pods)))
    assert not np.array_equal(order[:100], np.arange(100))
    assert np.array_equal(order, arrival_order(default.pods, default.nodes.total_gpus, 42, 1.3))


def test_discretize_matches_reference_analysis() -> None:
    arrived = np.array([0.2, 0.6, 1.4, 3.0])
    values = np.array([1.0, 2.0, 3.0, 4.0])
    out = discretize(arrived, values)
    assert out[0] == 1.0  # round(0.2) = 0
    assert out[1] == 2.5  # round(0.6) = round(1.4) = 1
    assert out[2] == 3.0  # empty bucket: mean over 1..3 = (2 + 3 + 4) / 3
    assert len(out) == len(ARRIVED_PCT)


def test_small_run_is_sane_and_deterministic(small: Cluster) -> None:
    a = run_seed(small, "fgd", 42)
    b = run_seed(small, "fgd", 42)
    assert np.array_equal(a.allocation_pct, b.allocation_pct, equal_nan=True)
    alloc = a.allocation_pct
    assert alloc[10] == pytest.approx(10, abs=1.0)  # nothing fails early
    assert 80 < alloc[100] <= 100 and alloc[130] >= alloc[100] - 0.5
    assert np.all(a.frag_ratio_pct[np.isfinite(a.frag_ratio_pct)] <= 100)
    rb = run_seed(small, "random", 42)
    assert rb.unallocated_pct[100] > a.unallocated_pct[100]  # FGD beats random on the subsample


def test_run_experiment_compares_with_published(small: Cluster) -> None:
    if not (PUBLISHED / "analysis_allo_discrete.csv").is_file():
        pytest.skip("published curves not available")
    (res,) = run_experiment([small], ["bestfit"], seeds=[42, 43], published=None)
    assert res.policies["bestfit"].published_unallocated_at(100) is None
    pub = load_published(PUBLISHED, "default")
    assert pub["fgd"].shape == (10, 131)
    assert float(np.median(pub["fgd"][:, 100])) == pytest.approx(4.77, abs=0.01)
    assert float(np.median(pub["bestfit"][:, 100])) == pytest.approx(7.09, abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "published"), [("fgd", 4.77), ("bestfit", 7.09)])
def test_reproduces_published_default(default: Cluster, policy: str, published: float) -> None:
    (res,) = run_experiment([default], [policy], workers=2)
    assert res.policies[policy].unallocated_at(100) == pytest.approx(published, abs=0.3)


def test_parse_seeds() -> None:
    assert parse_seeds("42-44") == [42, 43, 44]
    assert parse_seeds("42,50") == [42, 50]
    with pytest.raises(ValueError):
        parse_seeds("44-42")


def test_cli_json_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    pods = SRC / "data" / "openb" / "openb_pod_list_default.csv"
    small = tmp_path / "pods.csv"
    small.write_text("".join(pods.read_text().splitlines(keepends=True)[:400]))
    r = runner.invoke(
        experiment_app, ["fragmentation", "--policy", "bestfit", "--trace", str(small), "--seeds", "42", "--json"]
    )
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["trace"] == "pods"
    p = obj["policies"]["bestfit"]
    assert set(p) == {"unallocated_at_100", "curve", "published_unallocated_at_100"}
    assert p["published_unallocated_at_100"] is None and len(p["curve"]) == 131
    r = runner.invoke(experiment_app, ["fragmentation", "--policy", "nope", "--seeds", "42"])
    assert r.exit_code == 2 and "unknown placement policy 'nope'" in r.stderr
    r = runner.invoke(experiment_app, ["fragmentation", "--trace", str(tmp_path / "missing.csv"), "--seeds", "42"])
    assert r.exit_code == 2 and "not found" in r.stderr
    r = runner.invoke(experiment_app, ["fragmentation", "--policy", "bestfit", "--trace", str(small), "--seeds", "42"])
    assert r.exit_code == 0 and "unallocated" in r.stdout
