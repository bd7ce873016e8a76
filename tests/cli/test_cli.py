"""The CLI through Typer's runner: output, JSON, reports, and one clear line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.support.paths import REPO

runner = CliRunner()


def test_simulate_synthetic_json_and_report(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "synthetic:3",
            "--limit",
            "60",
            "--json",
            "--report",
            str(report),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["jobs"] == 60
    assert report.read_text().startswith("<!DOCTYPE html>") or "<svg" in report.read_text()
    assert (tmp_path / "out" / "jobs.csv").exists()


def test_simulate_table_output() -> None:
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "synthetic",
            "--limit",
            "30",
            "--queue",
            "priority",
            "--placement",
            "fgd,cost",
            "--backfill",
            "strict",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "wait_mean_s" in res.stdout


@pytest.mark.parametrize(
    ("name", "content", "args", "expected"),
    [
        ("unknown queue sort", "queue_sort: nope\n", ["--profile", "{f}"], "field 'queue_sort'"),
        ("bad YAML", "queue_sort: [\n", ["--profile", "{f}"], "not valid YAML"),
        ("bad quota type", "teams: {a: {quota: {B999: 1}}}\n", ["--profile", "{f}"], "teams.a.quota"),
        ("bad trace row", '{"kind": "job", "submit": "soon"}\n', ["--trace", "{f}"], ":1"),
        ("unknown trace", None, ["--trace", "nothing"], "unknown trace"),
        ("unknown placement", None, ["--placement", "magic"], "unknown placement policy 'magic'"),
        ("bad cluster", "nodes: [{count: 1, gpus: 8, cpu: 8, memory_gib: 8}]\n", ["--cluster", "{f}"], "gpu_model"),
    ],
)
def test_bad_input_is_one_clear_line(
    tmp_path: Path, name: str, content: str | None, args: list[str], expected: str
) -> None:
    f = tmp_path / ("in.jsonl" if "trace" in args[0] else "in.yaml")
    if content is not None:
        f.write_text(content)
    res = runner.invoke(app, ["simulate", *[a.format(f=f) for a in args], "--limit", "5"])
    assert res.exit_code == 2, (name, res.output)
    assert expected in res.output.replace("\n", ""), res.output
    assert "Traceback" not in res.output


def test_prices_lists_the_catalog() -> None:
    res = runner.invoke(app, ["prices", "--gpu", "H100-80GB"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "H100" in res.stdout and "sha256" in res.stdout
    assert "T4" not in res.stdout


def test_examples_run() -> None:
    root = REPO / "examples"
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "synthetic:1",
            "--limit",
            "80",
            "--json",
            "--profile",
            str(root / "profile.yaml"),
            "--cluster",
            str(root / "cluster.yaml"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["jobs"] == 80


@pytest.mark.parametrize(
    ("query", "rows", "code"),
    [
        ("A100", {"A100-40GB", "A100-80GB"}, 0),  # a family: both A100 models
        ("a100-80gb", {"A100-80GB"}, 0),  # any spelling of a model
        ("g5", {"A10G"}, 0),  # an offering
        ("H200", set(), 2),  # not in the catalog: an error naming --gpu, not an empty table
        ("G2", set(), 2),
    ],
    ids=["family", "model", "offering", "absent-model", "unknown-name"],
)
def test_prices_filters_by_gpu_and_says_when_nothing_matches(
    query: str, rows: set[str], code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prices --gpu A100`` printed an empty table and exit 0 (issue 10, observation 9)."""
    from gpufleet.cli.common import console

    monkeypatch.setattr(console, "width", 220)  # whole cells, whatever terminal runs the tests
    r = runner.invoke(app, ["prices", "--gpu", query])
    assert r.exit_code == code, r.output
    if code:
        assert "--gpu" in r.output and "A100-80GB" in r.output  # what the catalog does have
    else:
        models = {m for m in ("A10", "A100-40GB", "A100-80GB", "A10G", "H100-80GB", "L4", "T4") if f" {m} " in r.output}
        assert models == rows, r.output


def test_version_and_flags_in_help() -> None:
    """No ``--version``; flags printed ``<bool>`` in help as if they took a value (issue 10, observation 14)."""
    from gpufleet import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == __version__
    for cmd in (["submit", "--help"], ["ls", "--help"], ["simulate", "--help"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0 and "<bool>" not in r.output, r.output
    assert "<int>" in runner.invoke(app, ["submit", "--help"]).output  # options that take a value keep it
