"""The CLI's advice and tables (issue 23, items 10 and 11), through Typer's runner with the SDK
pointed at a real app on a fresh database per test (tests/support/api_support):

- ``forecast`` and ``anomalies`` exist, over ``/v1/forecast``, ``/v1/jobs/{id}/forecast`` and
  ``/v1/anomalies``, with ``--format json|table`` judged before the server is asked;
- ``show`` gives a finished job's cost, attributed from the ledger (``cost --by job``'s figure);
- names are cut only when the terminal is too narrow for them, with one ``…``, between words when
  it can be; ``proposals ls`` never cuts the job id it targets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli import render
from gpufleet.cli.main import app
from gpufleet.sdk import Client
from gpufleet.store import repo
from gpufleet.wire import JobOut
from tests.api.test_api import _cluster
from tests.cli.test_sdk import job_json
from tests.support.api_support import T0, Api, make_api

runner = CliRunner()
W80 = {"COLUMNS": "80"}


@pytest.fixture
def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, dict[str, str]]]:
    """A real app on a fresh database: node n1 ($8/h, 4 GPUs); alpha's job ran 2 GPUs for 3 h and
    succeeded ($12.00); beta's runs 1 GPU (tests/api/test_api._cluster)."""
    for api in make_api(tmp_path):

        def factory(url: str | None, token: str | None, api: Any = api) -> Client:
            return Client("http://testserver", token or api.secrets["admin"], transport=api.sdk_transport)

        monkeypatch.setattr(cli_jobs, "make_client", factory)
        yield api, _cluster(api)


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


Real = tuple[Api, dict[str, str]]


def _finished_job(api: Api) -> str:
    """A job of alpha submitted at T0 that ran 2 GPUs of n1 ($2/GPU-h) for 3 h and succeeded: the
    ledger charges it $12.00. The clock is then T0 + 4 h."""
    job_id: str = api.submit("alice", gpus=2)["id"]
    start, end = T0 + 60, T0 + 60 + 3 * 3600
    with api.db.session() as s:
        node = repo.nodes_named(s, ["n1"])["n1"]
        job = repo.get_job(s, job_id)
        placement = [{"node": "n1", "gpus": [0, 1], "milli": 1000}]
        repo.transition(s, job, "ADMITTED", "placed", start, run=1, placement=placement)
        repo.open_run(s, job_id=job_id, run=1, node="n1", placement=placement, capacity_type="on-demand",
                      node_hourly_usd=8.0, now=start)  # fmt: skip
        repo.transition(s, job, "RUNNING", "started", start, started_at=start)
        repo.end_run(s, job_id, 1, outcome="finished", exit_code=0, reason="ok", started_at=start, ended_at=end)
        repo.append_segment(s, job=job, run=1, node=node, gpu_share_units=2 * 7000, cpu_milli=0, memory_mib=0,
                            node_hourly_usd=8.0, capacity_type="on-demand", start=start, end=end)  # fmt: skip
        repo.transition(s, job, "SUCCEEDED", "exit 0", end)
    api.clock.advance(4 * 3600)
    return job_id


# -- item 10: forecast, anomalies, a finished job's cost ------------------------------------------


def test_forecast_prints_the_apis_spend_forecast(real: Real) -> None:
    app_, _ = real
    res = run("forecast", "--format", "json")
    assert res.exit_code == 0, res.output
    api = app_.client.get("/v1/forecast", headers=app_.h("admin")).json()
    assert json.loads(res.stdout) == api
    res = run("forecast", "--team", "alpha", "--period", "week", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["scope"] == "team:alpha"
    res = run("forecast")
    assert res.exit_code == 0, res.output
    assert "total at period end" in res.stdout and render.money(api["total_usd"]) in res.stdout


def test_forecast_of_a_job_shows_its_attributed_spend(real: Real) -> None:
    api, _ = real
    job = _finished_job(api)
    res = run("forecast", "--job", job, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["spent_usd"] == pytest.approx(12.0)
    res = run("forecast", "--job", job)
    assert res.exit_code == 0 and "$12.00" in res.stdout, res.output


def test_anomalies_lists_the_apis_anomalies(real: Real) -> None:
    app_, _ = real
    res = run("anomalies", "--days", "7", "--format", "json")
    assert res.exit_code == 0, res.output
    api = app_.client.get("/v1/anomalies", params={"days": 7}, headers=app_.h("admin")).json()
    assert json.loads(res.stdout) == api
    res = run("anomalies", "--days", "7")
    assert res.exit_code == 0, res.output
    assert "no cost anomalies" in res.stderr or "DAY" in res.stdout


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        pytest.param(["forecast", "--format", "xml"], "--format", id="forecast-format"),
        pytest.param(["anomalies", "--format", "csv"], "--format", id="anomalies-format"),
        pytest.param(["forecast", "--period", "year"], "--period", id="forecast-period"),
        pytest.param(["forecast", "--job", "j-1", "--team", "alpha"], "--job", id="job-and-team"),
    ],
)
def test_bad_options_are_refused_before_the_server_is_asked(
    argv: list[str], option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(url: str | None, token: str | None) -> Client:
        raise AssertionError("the server was asked")

    monkeypatch.setattr(cli_jobs, "make_client", unreachable)
    res = run(*argv)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error: ") and option in err and "\n" not in err, err


def test_show_gives_a_finished_jobs_cost_from_the_ledger(real: Real) -> None:
    api, _ = real
    job = _finished_job(api)
    window = "2026-11-12T12:00:00Z,2026-11-12T16:00:00Z"  # T0 .. T0 + 4 h
    by_job = run("cost", "--window", window, "--by", "job", "--format", "json")
    charged = {r["key"]["job"]: r["total_cost_usd"] for r in json.loads(by_job.stdout)["rows"]}
    assert charged[job] == "12.00"  # what `cost --by job` attributes to it
    res = run("show", job, env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("cost"))
    assert line.split() == ["cost", "$12.00"], line
    res = run("show", job, "--json")
    assert json.loads(res.stdout)["cost_usd"] == pytest.approx(12.0)


# -- item 11: cut only when too narrow, one ellipsis, never an id ---------------------------------


def _job(**fields: Any) -> JobOut:
    base = job_json(
        "j-a1b2c3d4e5",
        name="",
        team="default",
        command=["python", "train.py", "--epochs", "3"],
        gpus=1,
        reason="waiting for 1×GPU: the quota of team default is used up (8 of 8 GPUs in use)",
    )
    return JobOut.model_validate({**base, **fields})


def _rendered(table: Any, width: int) -> str:
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    Console(file=out, width=width).print(table)
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100, 160], ids=["80", "100", "160"])
def test_names_are_whole_when_there_is_room(width: int) -> None:
    """``python …..`` and ``defa…t`` at 80 columns: the command (the name of a job without one) was
    sliced at 30 characters, and names were cut before the columns that may be left out."""
    text = _rendered(render.jobs_table([_job()], width=width), width)
    row = next(ln for ln in text.splitlines() if ln.startswith("j-"))
    assert "python train.py --epochs 3" in row and " default " in row, text


@pytest.mark.parametrize(
    ("text", "width", "how", "expected"),
    [
        pytest.param("waiting for the quota of team vision", 14, "end", "waiting for…", id="end-between-words"),
        pytest.param("python train.py ...", 12, "end", "python…", id="end-no-dots-by-the-mark"),
        pytest.param("python train.py --epochs 30", 14, "middle", "python…30", id="middle-between-words"),
        pytest.param("train-resnet50-imagenet-v2", 13, "middle", "train-res…-v2", id="middle-no-spaces"),
        pytest.param("supercalifragilistic words", 10, "end", "supercali…", id="end-one-long-word"),
    ],
)
def test_a_cut_shows_one_ellipsis_between_words_when_it_can(text: str, width: int, how: Any, expected: str) -> None:
    out = render.cut_text(Text(text), width, how).plain
    assert out == expected and out.count("…") == 1 and len(out) <= width
    assert ".…" not in out and "…." not in out and " …" not in out


def test_proposals_ls_never_cuts_the_job_it_targets(real: Real) -> None:
    api, _ = real
    target = api.submit("alice", gpus=2, name="x" * 40)["id"]
    body = {"action": "resize", "target": target, "params": {"gpus": 1}, "rationale": "half its GPUs idle " * 8}
    r = api.client.post("/v1/proposals", json=body, headers=api.h("alice"))
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    res = run("proposals", "ls", env=W80)
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith(pid))
    assert target in row.split(), res.stdout


def test_budget_check_says_a_plan_is_priced_from_the_catalog_and_would_be_refused(real: Real) -> None:
    """Issue 23, item 4, in the CLI: `budget check` printed the catalog's price for a GPU type no
    node has without saying where the price came from, and never said that a real submit would be
    refused (the API's ``price_basis`` and ``submit_refused``)."""
    out = run("budget", "check", "--gpus", "8", "--gpu-type", "H100", "--estimate", "10h", "--", "x", env=W80)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "priced from catalog" in text  # the catalog offering it was priced from
    assert "a real submit would be refused:" in text and "H100" in text
    ok = run("budget", "check", "--gpus", "1", "--estimate", "1h", "--", "x", env=W80)
    assert "priced from" not in ok.output and "would be refused" not in ok.output
