"""``gpufleet cost`` through Typer's runner, with the SDK pointed at a real app (tests/api_support):
formats, filters, rules, one-line errors and exit codes; and ``gpufleet usage`` still works."""

from __future__ import annotations

import csv
import io
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.main import app
from gpufleet.cost.rules import load_rules
from gpufleet.sdk import Client
from tests.api.test_api import WINDOW, _cluster
from tests.support.api_support import Api, make_api

runner = CliRunner()


@pytest.fixture
def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    for api in make_api(tmp_path):

        def factory(url: str | None, token: str | None, api: Any = api) -> Client:
            return Client("http://testserver", token or api.secrets["admin"], transport=api.sdk_transport)

        monkeypatch.setattr(cli_jobs, "make_client", factory)
        _cluster(api)
        yield api


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def one_error_line(res: Any) -> str:
    err: str = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_cost_json_and_table(real: Api) -> None:
    res = run("cost", "--window", WINDOW, "--format", "json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert {r["key"]["team"]: r["total_cost_usd"] for r in rep["rows"]} == {"alpha": "12.00", "beta": "4.00"}
    assert rep["idle"]["total_cost_usd"] == "64.00" and rep["totals"]["total_cost_usd"] == "80.00"
    res = run("cost", "--window", WINDOW)
    assert res.exit_code == 0, res.output
    for words in ("alpha", "$12.00", "(idle)", "$64.00", "total", "$80.00"):
        assert words in res.stdout
    assert "CPU $" not in res.stdout
    res = run("cost", "--window", WINDOW, "--format", "detailed", "--by", "team,project")
    assert res.exit_code == 0 and all(w in res.stdout for w in ("GPU $", "CPU $", "MEMORY $", "GPU-H", "vision"))


def test_cost_csv_with_rules_filters_and_spread(real: Api) -> None:
    real.client.app.state.ctx.pricing_rules = load_rules(  # type: ignore[attr-defined]
        {"windows": [{"name": "night", "start": "00:00", "end": "06:00", "multiplier": 0.5}],
         "priority_multipliers": {"normal": 1.5}})  # fmt: skip
    res = run("cost", "--window", WINDOW, "--format", "csv")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    kinds = {(r["kind"], r["team"]): r["total_cost_usd"] for r in rows}
    assert kinds == {
        ("row", "alpha"): "18.00", ("row", "beta"): "6.00", ("adjustment", ""): "8.00",
        ("idle", ""): "48.00", ("total", ""): "64.00",
    }  # fmt: skip
    res = run("cost", "--window", WINDOW, "--format", "csv", "--team", "alpha", "--by", "job")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["kind"], r["total_cost_usd"]) for r in rows if r["kind"] in ("row", "other")] == [
        ("row", "18.00"), ("other", "6.00")
    ]  # fmt: skip
    res = run("cost", "--window", WINDOW, "--format", "json", "--label", "owner=ann", "--spread-idle")
    rep = json.loads(res.stdout)
    assert [r["total_cost_usd"] for r in rep["rows"]] == ["72.00"]  # (12 + 48 x 12/16) x 1.5
    assert rep["filters"] == {"label:owner": "ann"}


def test_cost_last_and_usage_alias(real: Api) -> None:
    res = run("cost", "--last", "1d", "--format", "json", "--by", "gpu_model")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"][0]["key"] == {"gpu_model": "A100-80GB"}
    res = run("usage", "--window", WINDOW, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["totals"]["total_cost_usd"] == "80.00"


BAD = [
    # (name, argv, words the one error line must contain)
    ("format", ["--format", "xml"], ["--format", "'xml'"]),
    ("both windows", ["--last", "7d", "--window", "today"], ["--last", "not both"]),
    ("last", ["--last", "fortnight"], ["--last", "30d"]),
    ("by", ["--by", "team,colour"], ["--by", "'colour'", "cost_center"]),
    ("by twice", ["--by", "team,team"], ["--by", "twice"]),
    ("label", ["--label", "novalue"], ["--label", "KEY=VALUE"]),
    ("server window", ["--window", "fortnight"], ["window"]),
]


@pytest.mark.parametrize(("name", "argv", "words"), BAD, ids=[c[0] for c in BAD])
def test_cost_bad_input(real: Api, name: str, argv: list[str], words: list[str]) -> None:
    res = run("cost", *argv)
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert all(w in line for w in words), line


def test_cost_forbidden_team_is_exit_4(real: Api) -> None:
    res = run("cost", "--team", "beta", "--token", real.secrets["alice"])
    assert res.exit_code == 4 and "own team" in one_error_line(res)


def test_roi_flag(real: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gpufleet.cost.roi", types.ModuleType("gpufleet.cost.roi"))
    res = run("cost", "--roi")
    assert res.exit_code == 2 and "ROI report not available" in one_error_line(res)
    fake = types.ModuleType("gpufleet.cost.roi")
    seen: dict[str, Any] = {}

    def render_cli(client: Client, **kw: Any) -> str:
        seen.update(kw)
        return "roi report\n"

    fake.render_cli = render_cli  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpufleet.cost.roi", fake)
    res = run("cost", "--roi", "--last", "7d", "--team", "alpha")
    assert res.exit_code == 0 and res.stdout == "roi report\n"
    assert seen == {"window": "7d", "by": ["team"], "team": "alpha", "fmt": "table"}


def test_roi_refuses_an_unknown_format_before_asking_the_server() -> None:
    """Issue 23 (11): ``roi --format xml`` reached the server, then printed a table. The option is
    judged first: against a closed port the error is the option's, not the connection's."""
    res = run("roi", "--format", "xml", "--url", "http://127.0.0.1:9")
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    assert "--format" in line and "'xml'" in line, line
