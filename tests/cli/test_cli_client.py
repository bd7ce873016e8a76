"""The API commands of the CLI through Typer's runner: option parsing (scenario tables), exit codes,
JSON output, one-line errors — with the SDK pointed at a fake server (httpx.MockTransport), and one
round trip through the real API."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.jobs import parse_cpu_milli, parse_duration, parse_size_mib
from gpufleet.cli.main import app
from gpufleet.sdk import Client
from gpufleet.wire import JobOut, NodeOut, TeamOut, TokenCreated, UsageReport
from tests.cli.test_sdk import job_json, problem

runner = CliRunner()


class FakeServer:
    """Just enough of the API for the CLI: jobs in memory, fixed answers elsewhere, every request kept."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.final_state = "SUCCEEDED"
        self.fail: httpx.Response | Exception | None = None
        self.factory_args: list[tuple[str | None, str | None]] = []
        self.teams: dict[str, dict[str, Any]] = {
            "alpha": {
                "name": "alpha", "weight": 2.0, "cohort": "research", "borrowing_limit_gpus": None,
                "quota_gpus": {"A100-80GB": 8.0}, "used_gpus": {"A100-80GB": 1.0},
            }
        }  # fmt: skip

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)

    def __call__(self, req: httpx.Request) -> httpx.Response:
        self.requests.append(req)
        if isinstance(self.fail, Exception):
            raise self.fail
        if self.fail is not None:
            return self.fail
        path, method = req.url.path, req.method
        parts = path.strip("/").split("/")
        if (method, path) == ("POST", "/v1/jobs"):
            body = json.loads(req.content)
            job_id = f"j{len(self.jobs) + 1}"
            self.jobs[job_id] = job_json(job_id, command=body["command"], gpus=body.get("gpus", 0))
            return httpx.Response(201, json=self.jobs[job_id])
        if (method, path) == ("GET", "/v1/jobs"):
            items = [j for j in self.jobs.values() if j["state"] in (req.url.params.get_list("state") or [j["state"]])]
            return httpx.Response(200, json={"items": items, "next_cursor": None})
        if parts[:2] == ["v1", "jobs"] and len(parts) >= 3:
            job = self.jobs.get(parts[2])
            if job is None:
                return problem(404, "not_found", f"no job {parts[2]}")
            tail = parts[3] if len(parts) > 3 else ""
            if tail == "cancel":
                job.update(state="CANCELLED")
            elif tail == "events":
                return httpx.Response(
                    200, json=[{"time": "2026-11-12T12:00:00Z", "old": None, "new": "PENDING", "reason": "submitted"}]
                )
            elif tail == "logs":
                return httpx.Response(200, content=b"step 1 [ok]\nstep 2\n")
            elif job["state"] == "PENDING":  # a get: the job ends on the first poll
                job.update(state=self.final_state, exit_code=0 if self.final_state == "SUCCEEDED" else 3)
            return httpx.Response(200, json=job)
        if path == "/v1/queue":
            return httpx.Response(
                200,
                json=[
                    {
                        "job_id": "j1", "name": "n", "team": "alpha", "priority": "normal", "position": 1,
                        "reason": "waiting for 1×A100", "estimated_start": None, "submitted_at": "2026-11-12T12:00:00Z",
                    }
                ],
            )  # fmt: skip
        if path == "/v1/nodes":
            return httpx.Response(
                200,
                json=[
                    {
                        "name": "box", "gpu_model": "A100-80GB", "gpu_count": 8, "cpu_milli": 64000,
                        "memory_mib": 512 * 1024, "pool": "local", "capacity_type": "on_demand", "sharing": "none",
                        "hourly_price_usd": 20.0, "state": "ready", "allocated_gpus": 1.5, "running_jobs": 2,
                    }
                ],
            )  # fmt: skip
        if path == "/v1/teams":
            return httpx.Response(200, json=list(self.teams.values()))
        if parts[:2] == ["v1", "teams"]:
            name = parts[2]
            if method == "PUT":
                self.teams[name] = {"name": name, **json.loads(req.content), "used_gpus": {}}
            if name not in self.teams:
                return problem(404, "not_found", f"no team {name}")
            return httpx.Response(200, json=self.teams[name])
        token = {
            "id": "t1", "name": "ci", "team": "alpha", "role": "member",
            "created_at": "2026-11-12T12:00:00Z", "expires_at": None, "revoked": False,
        }  # fmt: skip
        if (method, path) == ("POST", "/v1/tokens"):
            return httpx.Response(201, json={**token, "token": "tok_SECRET"})
        if (method, path) == ("GET", "/v1/tokens"):
            return httpx.Response(200, json=[token])
        if method == "DELETE":
            return httpx.Response(204)
        if path == "/v1/usage":
            line = {
                "gpu_hours": 12.5, "gpu_cost_usd": "30.00", "cpu_cost_usd": "1.00",
                "memory_cost_usd": "0.50", "total_cost_usd": "31.50",
            }  # fmt: skip
            return httpx.Response(
                200,
                json={
                    "window_start": "2026-11-05T12:00:00Z", "window_end": "2026-11-12T12:00:00Z",
                    "aggregate": ["team"], "rows": [{"key": {"team": "alpha"}, **line}],
                    "idle": {"key": {}, **line}, "totals": {"key": {}, **line},
                },
            )  # fmt: skip
        if path == "/v1/whoami":
            return httpx.Response(200, json={"token_id": "t0", "team": "ops", "role": "admin"})
        return problem(404, "not_found", f"no route {path}")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()

    def make_client(url: str | None, token: str | None) -> Client:
        fake.factory_args.append((url, token))
        c = Client("http://fake", token or "t", transport=httpx.MockTransport(fake), retries=2, backoff=0)
        c._sleep = lambda s: None
        return c

    monkeypatch.setattr(cli_jobs, "make_client", make_client)
    return fake


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def one_error_line(res: Any) -> str:
    err: str = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


# ------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400), ("45", 45)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == seconds


@pytest.mark.parametrize(
    ("text", "mib"), [("512Mi", 512), ("16Gi", 16384), ("16G", 15259), ("1.5Ti", 1572864), ("100M", 96)]
)
def test_sizes(text: str, mib: int) -> None:
    assert parse_size_mib(text, "--x") == mib


@pytest.mark.parametrize(("text", "milli"), [("4", 4000), ("0.5", 500), ("500m", 500)])
def test_cpu(text: str, milli: int) -> None:
    assert parse_cpu_milli(text, "--x") == milli


BAD_INPUT = [
    # (name, argv, words the one error line must contain)
    ("duration unit", ["submit", "--max-runtime", "2x", "--", "echo"], ["--max-runtime", "'2x'", "90s"]),
    ("zero estimate", ["submit", "--estimate", "0s", "--", "echo"], ["--estimate", "positive"]),
    ("trailing junk", ["submit", "--max-runtime", "1h30", "--", "echo"], ["--max-runtime"]),
    ("size without unit", ["submit", "--memory", "16", "--", "echo"], ["--memory", "no unit"]),
    ("size unknown unit", ["submit", "--memory", "16Zi", "--", "echo"], ["--memory", "not a size"]),
    ("cpu", ["submit", "--cpu", "lots", "--", "echo"], ["--cpu", "'lots'"]),
    ("milli and mig", ["submit", "--gpu-milli", "500", "--mig", "1g.10gb", "--", "echo"], ["--gpu-milli", "--mig"]),
    ("gpus and milli", ["submit", "--gpus", "2", "--gpu-milli", "500", "--", "echo"], ["--gpus", "--gpu-milli"]),
    ("gpus and mig", ["submit", "--gpus", "4", "--mig", "1g.10gb", "--", "echo"], ["--gpus", "--mig"]),
    ("too many gpus", ["submit", "--gpus", "100", "--", "echo"], ["--gpus", "less than or equal to 64"]),
    ("milli range", ["submit", "--gpu-milli", "1000", "--", "echo"], ["--gpu-milli"]),
    ("mig pattern", ["submit", "--mig", "big", "--", "echo"], ["--mig"]),
    ("label", ["submit", "--label", "novalue", "--", "echo"], ["--label", "KEY=VALUE"]),
    ("env name", ["submit", "--env", "1X=2", "--", "echo"], ["--env"]),
    ("priority", ["submit", "--priority", "asap", "--", "echo"], ["--priority", "urgent"]),
    ("team name", ["submit", "--team", "Bad Team", "--", "echo"], ["--team"]),
    ("wait timeout", ["wait", "j1", "--timeout", "soon"], ["--timeout"]),
    ("state", ["ls", "--state", "DONE"], ["--state", "DONE"]),
    ("quota", ["team", "set", "alpha", "--quota", "A100"], ["--quota", "MODEL=GPUS"]),
    ("quota number", ["team", "set", "alpha", "--quota", "A100=lots"], ["--quota", "'lots'"]),
    ("borrowing", ["team", "set", "alpha", "--borrowing-limit", "x"], ["--borrowing-limit"]),
]


@pytest.mark.parametrize(("argv", "words"), [(a, w) for _, a, w in BAD_INPUT], ids=[n for n, _, _ in BAD_INPUT])
def test_bad_input_exits_2_naming_the_option(server: FakeServer, argv: list[str], words: list[str]) -> None:
    res = run(*argv)
    assert res.exit_code == 2, res.output
    line = one_error_line(res)
    for w in words:
        assert w in line
    assert server.requests == []  # refused before anything was sent


def test_missing_command_is_a_usage_error(server: FakeServer) -> None:
    res = run("submit", "--gpus", "1")
    assert res.exit_code == 2 and server.requests == []


def test_submit_sends_what_the_options_say(server: FakeServer) -> None:
    res = run(
        "submit", "--gpus", "2", "--gpu-type", "A100-80GB", "--gpu-type", "H100", "--max-runtime", "2h",
        "--estimate", "1h30m", "--cpu", "500m", "--memory", "16Gi", "--label", "exp=7", "--label", "k=v=w",
        "--env", "SEED=1", "--preemptible", "--checkpoint-dir", "/ckpt", "--priority", "high", "--name", "n",
        "--team", "alpha", "--project", "p", "--idempotency-key", "key-1", "--",
        "python", "train.py", "--lr", "3e-4",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "j1"
    assert server.body() == {
        "command": ["python", "train.py", "--lr", "3e-4"],
        "cwd": os.getcwd(),
        "gpus": 2,
        "gpu_types": ["A100-80GB", "H100"],
        "max_runtime_s": 7200.0,
        "estimated_runtime_s": 5400.0,
        "cpu_milli": 500,
        "memory_mib": 16384,
        "labels": {"exp": "7", "k": "v=w"},
        "env": {"SEED": "1"},
        "preemptible": True,
        "checkpoint_dir": "/ckpt",
        "priority": "high",
        "name": "n",
        "team": "alpha",
        "project": "p",
    }
    assert server.requests[0].headers["Idempotency-Key"] == "key-1"


def test_submit_without_double_dash_keeps_the_commands_own_options(server: FakeServer) -> None:
    res = run("submit", "--gpu-milli", "250", "--cwd", "/work", "python", "train.py", "--lr", "3")
    assert res.exit_code == 0, res.output
    body = server.body()
    assert body["command"] == ["python", "train.py", "--lr", "3"] and body["gpu_milli"] == 250
    assert body["cwd"] == "/work"


def test_submit_json_and_wait(server: FakeServer) -> None:
    res = run("submit", "--json", "--", "echo", "hi")
    assert res.exit_code == 0, res.output
    assert JobOut.model_validate_json(res.stdout).command == ["echo", "hi"]

    res = run("submit", "--wait", "--", "echo")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "j2" and "SUCCEEDED" in res.stderr

    server.final_state = "FAILED"
    res = run("submit", "--wait", "--json", "--", "false")
    assert res.exit_code == 1
    assert JobOut.model_validate_json(res.stdout).state == "FAILED"


def test_wait_exit_codes(server: FakeServer) -> None:
    run("submit", "--", "echo")
    res = run("wait", "j1", "--timeout", "1m")
    assert res.exit_code == 0, res.output and "SUCCEEDED" in res.stderr
    server.jobs["j1"]["state"] = "TIMED_OUT"
    assert run("wait", "j1").exit_code == 1
    server.jobs["j1"]["state"] = "RUNNING"
    res = run("wait", "j1", "--timeout", "0.001s")
    assert res.exit_code == 7 and "still RUNNING" in one_error_line(res)


# ---------------------------------------------------------------------------------------- exit codes


EXIT_CODES: list[tuple[str, httpx.Response | Exception, int]] = [
    ("422", problem(422, "invalid_input", "bad", [{"field": "query.limit", "message": "too big"}]), 2),
    ("404", problem(404, "not_found", "no job j1"), 3),
    ("401", problem(401, "unauthenticated", "token expired"), 4),
    ("403", problem(403, "forbidden", "admins only"), 4),
    ("409", problem(409, "conflict", "key reused"), 6),
    ("503", problem(503, "unavailable", "store down"), 5),
    ("refused", httpx.ConnectError("connection refused"), 5),
    ("500", problem(500, "internal_error", "boom"), 8),
]


@pytest.mark.parametrize(("answer", "code"), [(a, c) for _, a, c in EXIT_CODES], ids=[n for n, _, _ in EXIT_CODES])
@pytest.mark.parametrize("argv", [["show", "j1"], ["ls"], ["team", "ls"], ["whoami"], ["cancel", "j1"]])
def test_exit_codes(server: FakeServer, argv: list[str], answer: httpx.Response | Exception, code: int) -> None:
    server.fail = answer
    res = run(*argv)
    assert res.exit_code == code, res.output
    line = one_error_line(res)
    if code == 5 and isinstance(answer, Exception):
        assert "http://fake" in line and "gpufleet up" in line
    if code == 2:
        assert "query.limit: too big" in line


def test_cancel_goes_on_past_a_missing_job(server: FakeServer) -> None:
    run("submit", "--", "a")
    run("submit", "--", "b")
    res = run("cancel", "j1", "nope", "j2")
    assert res.exit_code == 3
    assert res.stdout.splitlines() == ["j1 CANCELLED", "j2 CANCELLED"]
    assert "no job nope" in one_error_line(res)


# ------------------------------------------------------------------------------------------- output


def test_ls_filters_and_json(server: FakeServer) -> None:
    run("submit", "--", "a")
    res = run("ls", "--json")
    assert res.exit_code == 0, res.output
    assert [j["id"] for j in json.loads(res.stdout)] == ["j1"]
    assert server.requests[-1].url.params.get_list("state") == ["PENDING", "ADMITTED", "RUNNING", "PREEMPTED"]
    run("ls", "--all", "--team", "alpha", "--limit", "5")
    q = server.requests[-1].url.params
    assert q.get_list("state") == [] and q["team"] == "alpha" and q["limit"] == "5"
    run("ls", "--state", "failed,cancelled", "--state", "RUNNING")
    assert server.requests[-1].url.params.get_list("state") == ["FAILED", "CANCELLED", "RUNNING"]
    res = run("ls")
    assert res.exit_code == 0 and "j1" in res.stdout and "PENDING" in res.stdout


def test_show_logs_queue_nodes(server: FakeServer) -> None:
    run("submit", "--name", "trainer", "--", "python", "train.py")
    res = run("show", "j1", "--json")
    doc = json.loads(res.stdout)
    assert doc["job"]["id"] == "j1" and doc["events"][0]["new"] == "PENDING"
    res = run("show", "j1")
    assert res.exit_code == 0 and "python train.py" in res.stdout and "submitted" in res.stdout
    res = run("logs", "j1", "-f")
    assert res.exit_code == 0 and res.stdout == "step 1 [ok]\nstep 2\n"
    assert server.requests[-1].url.params["follow"] == "true"
    res = run("queue", "--json")
    assert json.loads(res.stdout)[0]["reason"] == "waiting for 1×A100"
    res = run("queue")
    assert res.exit_code == 0 and "waiting for" in res.stdout
    res = run("nodes", "--json")
    assert NodeOut.model_validate(json.loads(res.stdout)[0]).gpu_count == 8
    res = run("nodes")
    assert res.exit_code == 0 and "1.5/8" in res.stdout


def test_team_commands(server: FakeServer) -> None:
    res = run("team", "ls", "--json")
    assert TeamOut.model_validate(json.loads(res.stdout)[0]).name == "alpha"
    res = run("team", "show", "alpha")
    assert res.exit_code == 0 and "A100-80GB=8" in res.stdout
    assert run("team", "show", "nope").exit_code == 3
    # only what is given changes; quotas merge per model, MODEL=- removes one
    res = run("team", "set", "alpha", "--quota", "H100-80GB=4", "--quota", "A100-80GB=-", "--json")
    assert res.exit_code == 0, res.output
    assert server.body() == {
        "weight": 2.0, "cohort": "research", "borrowing_limit_gpus": None, "quota_gpus": {"H100-80GB": 4.0}
    }  # fmt: skip
    res = run("team", "set", "new", "--quota", "*=16", "--weight", "3", "--cohort", "none", "--borrowing-limit", "2")
    assert res.exit_code == 0, res.output
    assert server.body() == {"weight": 3.0, "cohort": None, "borrowing_limit_gpus": 2.0, "quota_gpus": {"*": 16.0}}
    assert "created" in res.stderr


def test_token_usage_whoami(server: FakeServer) -> None:
    res = run("token", "create", "--team", "alpha", "--role", "viewer", "--name", "ci", "--expires-in-days", "30")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "tok_SECRET"  # the secret alone on stdout: TOKEN=$(gpufleet token create ...)
    assert server.body() == {"team": "alpha", "role": "viewer", "name": "ci", "expires_in_days": 30.0}
    res = run("token", "create", "--team", "alpha", "--json")
    assert TokenCreated.model_validate_json(res.stdout).token == "tok_SECRET"
    assert run("token", "create", "--team", "alpha", "--role", "owner").exit_code == 2
    res = run("token", "ls")
    assert res.exit_code == 0 and "t1" in res.stdout and "active" in res.stdout
    res = run("token", "revoke", "t1")
    assert res.exit_code == 0 and server.requests[-1].method == "DELETE"
    res = run("usage", "--window", "week", "--by", "team,project", "--spread-idle", "--json")
    assert UsageReport.model_validate_json(res.stdout).totals.total_cost_usd == "31.50"
    q = server.requests[-1].url.params
    assert (q["window"], q["aggregate"], q["spread_idle"]) == ("week", "team,project", "true")
    res = run("usage")
    assert res.exit_code == 0 and "$31.50" in res.stdout and "(idle)" in res.stdout
    res = run("whoami", "--url", "http://elsewhere:1", "--token", "tk")
    assert res.exit_code == 0 and "admin of team ops" in res.stdout
    assert server.factory_args[-1] == ("http://elsewhere:1", "tk")


def test_help_lists_exit_codes() -> None:
    res = run("--help")
    assert res.exit_code == 0 and "Exit codes" in res.stdout and "server unavailable" in res.stdout


def test_real_factory_warns_about_an_insecure_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.name != "posix":
        pytest.skip("file modes are POSIX")
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    monkeypatch.delenv("GPUFLEET_TOKEN", raising=False)
    monkeypatch.delenv("GPUFLEET_URL", raising=False)
    (tmp_path / "admin.token").write_text("tok")
    os.chmod(tmp_path / "admin.token", 0o644)
    with cli_jobs.make_client(None, None) as c:
        assert c.token == "tok" and c.url == "http://127.0.0.1:8470"
    assert "chmod 600" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the real API


@pytest.fixture
def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    api_support = pytest.importorskip("tests.support.api_support")
    for api in api_support.make_api(tmp_path):

        def factory(url: str | None, token: str | None, api: Any = api) -> Client:
            return Client("http://testserver", token or api.secrets["alice"], transport=api.sdk_transport)

        monkeypatch.setattr(cli_jobs, "make_client", factory)
        yield api


def test_round_trip_through_the_real_api(real: Any) -> None:
    res = run("submit", "--gpus", "1", "--label", "exp=1", "--json", "--", "python", "train.py")
    assert res.exit_code == 0, res.output
    job_id = json.loads(res.stdout)["id"]
    res = run("ls", "--json")
    assert [j["id"] for j in json.loads(res.stdout)] == [job_id]
    res = run("show", job_id)
    assert res.exit_code == 0 and "python train.py" in res.stdout
    res = run("cancel", job_id)
    assert res.exit_code == 0 and "CANCELLED" in res.stdout
    assert run("wait", job_id).exit_code == 1  # cancelled: did not succeed
    res = run("show", "nope")
    assert res.exit_code == 3 and one_error_line(res).startswith("error: 404 ")
    res = run("team", "set", "alpha", "--weight", "2")
    assert res.exit_code == 4  # a member may not change teams
    res = run("team", "set", "gamma", "--quota", "A100-80GB=8", "--json", "--token", real.secrets["admin"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["quota_gpus"] == {"A100-80GB": 8.0}
    res = run("usage", "--json", "--by", "nonsense")
    assert res.exit_code == 2 and "nonsense" in one_error_line(res)
