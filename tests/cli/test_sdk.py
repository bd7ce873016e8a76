"""The SDK: retries that never duplicate a job, one-line errors, cursors, log streaming, waiting, the
shared home/URL/token conventions — against httpx.MockTransport, then a round trip through the real
API (``create_app`` on a temporary SQLite store)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.errors import (
    AuthError,
    ConfigError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from gpufleet.sdk import (
    ApiError,
    ApiUnavailable,
    AsyncClient,
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerUnavailable,
    Unauthorized,
    WaitTimeout,
    config,
)
from gpufleet.wire import JobSubmit, TeamIn

URL = "http://gpufleet.test"
Handler = Callable[[httpx.Request], httpx.Response]


def job_json(job_id: str = "j1", state: str = "PENDING", **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": job_id,
        "name": "",
        "team": "alpha",
        "project": "",
        "namespace": "default",
        "experiment": "",
        "labels": {},
        "priority": "normal",
        "command": ["python", "train.py"],
        "gpus": 1,
        "gpu_milli": None,
        "mig": None,
        "gpu_types": [],
        "preemptible": False,
        "checkpoint_dir": None,
        "max_runtime_s": None,
        "state": state,
        "reason": "",
        "submitted_at": "2026-11-12T12:00:00Z",
        "started_at": None,
        "ended_at": None,
        "run": 0,
        "restarts": 0,
        "preemptions": 0,
        "exit_code": None,
        "placement": [],
        "cancel_requested": False,
    }
    doc.update(over)
    return doc


def problem(status: int, code: str, detail: str, errors: list[dict[str, str]] | None = None) -> httpx.Response:
    body = {"type": "about:blank", "title": "x", "status": status, "detail": detail, "code": code}
    if errors is not None:
        body["errors"] = errors
    return httpx.Response(status, json=body, headers={"Content-Type": "application/problem+json"})


class Recorder:
    """A MockTransport handler that answers from a list (or a function) and keeps every request."""

    def __init__(self, *answers: httpx.Response | Exception | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer


def client_for(rec: Recorder, **kw: Any) -> tuple[Client, list[float]]:
    kw.setdefault("backoff", 0.0)
    c = Client(URL, "secret", transport=httpx.MockTransport(rec), **kw)
    sleeps: list[float] = []
    c._sleep = sleeps.append  # no real sleeping in tests; keep the delays to check them
    return c, sleeps


# ------------------------------------------------------------------------------------------ retries


def test_submit_retries_503_with_the_same_idempotency_key() -> None:
    rec = Recorder(
        problem(503, "unavailable", "store down"),
        httpx.ConnectError("refused"),
        httpx.Response(201, json=job_json("j7")),
    )
    c, sleeps = client_for(rec)
    job = c.submit(command=["python", "train.py"], gpus=2, labels={"a": "b"})
    assert job.id == "j7"
    assert len(rec.requests) == 3 and len(sleeps) == 2
    keys = {r.headers["Idempotency-Key"] for r in rec.requests}
    assert len(keys) == 1 and len(keys.pop()) == 36  # one uuid4 for every attempt
    body = json.loads(rec.requests[0].content)
    assert body == {"command": ["python", "train.py"], "gpus": 2, "labels": {"a": "b"}}
    assert rec.requests[0].headers["Authorization"] == "Bearer secret"


def test_each_submit_gets_its_own_key_unless_given() -> None:
    rec = Recorder(httpx.Response(201, json=job_json()))
    c, _ = client_for(rec)
    c.submit(command=["a"])
    c.submit(JobSubmit(command=["a"]))
    c.submit(JobSubmit(command=["a"]), idempotency_key="mine", name="override")
    keys = [r.headers["Idempotency-Key"] for r in rec.requests]
    assert keys[0] != keys[1] and keys[2] == "mine"
    assert json.loads(rec.requests[2].content)["name"] == "override"


def test_retry_after_is_honoured_and_backoff_grows() -> None:
    rec = Recorder(
        httpx.Response(429, headers={"Retry-After": "2"}),
        httpx.Response(502, text="<html>bad gateway</html>"),
        httpx.Response(504),
        httpx.Response(200, json=[]),
    )
    c, sleeps = client_for(rec, backoff=0.1)
    assert c.nodes() == []
    assert sleeps[0] == 2.0
    assert 0.1 <= sleeps[1] <= 0.2 and 0.2 <= sleeps[2] <= 0.4  # 2× per try, jitter in [50%, 100%]


def test_connection_errors_become_server_unavailable_after_all_tries() -> None:
    """A server this client has had an answer from (a restart in progress) gets every retry."""
    rec = Recorder(httpx.Response(200, json=job_json()), httpx.ConnectError("connection refused"))
    c, sleeps = client_for(rec, retries=5)
    c.get("j1")
    with pytest.raises(ServerUnavailable) as ei:
        c.get("j1")
    assert len(rec.requests) == 1 + 6 and len(sleeps) == 5
    msg = str(ei.value)
    assert URL in msg and "gpufleet up" in msg and "\n" not in msg
    assert isinstance(ei.value, GpufleetError)


def test_a_server_never_reached_is_reported_after_two_retries() -> None:
    """Issue 23 (11): an unreachable server took 7 s to report (6 tries with back-off). A refused
    connection to a server this client never reached is a wrong URL or a server not up: 3 tries."""
    rec = Recorder(httpx.ConnectError("connection refused"))
    c, sleeps = client_for(rec, retries=5)
    with pytest.raises(ServerUnavailable) as ei:
        c.get("j1")
    assert len(rec.requests) == 3 and len(sleeps) == 2
    assert "after 3 attempts" in str(ei.value)


def test_timeouts_are_retried_too() -> None:
    rec = Recorder(httpx.ReadTimeout("slow"), httpx.Response(200, json=job_json()))
    c, _ = client_for(rec)
    assert c.cancel("j1").id == "j1"
    assert [r.url.path for r in rec.requests] == ["/v1/jobs/j1/cancel"] * 2


def test_503_after_all_retries_is_api_unavailable() -> None:
    rec = Recorder(problem(503, "unavailable", "the store is not answering"))
    c, _ = client_for(rec, retries=2)
    with pytest.raises(ApiUnavailable) as ei:
        c.teams()
    assert isinstance(ei.value, StoreError) and len(rec.requests) == 3
    assert str(ei.value) == "503 unavailable: the store is not answering"


# ------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "cls", "family"),
    [
        (400, InvalidRequest, InputError),
        (401, Unauthorized, AuthError),
        (403, Forbidden, PermissionDeniedError),
        (404, NotFound, NotFoundError),
        (409, Conflict, ConflictError),
        (500, ApiError, GpufleetError),
    ],
)
def test_status_maps_to_error_family(status: int, cls: type[ApiError], family: type[Exception]) -> None:
    c, _ = client_for(Recorder(problem(status, "some_code", "what happened\nand more")))
    with pytest.raises(cls) as ei:
        c.get("j1")
    assert isinstance(ei.value, family) and type(ei.value) is cls
    assert str(ei.value) == f"{status} some_code: what happened and more"
    assert ei.value.status == status and ei.value.code == "some_code"


def test_validation_problem_is_one_line_naming_the_fields() -> None:
    errors = [
        {"field": "body.gpus", "message": "Input should be less than or equal to 64"},
        {"field": "body.mig", "message": "String should match pattern"},
    ]
    c, _ = client_for(Recorder(problem(422, "invalid_input", "2 fields are invalid", errors)))
    with pytest.raises(InvalidRequest) as ei:
        c.submit(command=["x"])
    assert str(ei.value) == (
        "422 invalid_input: body.gpus: Input should be less than or equal to 64; body.mig: String should match pattern"
    )
    assert ei.value.field == "body.gpus" and [e.field for e in ei.value.errors] == ["body.gpus", "body.mig"]


def test_non_problem_bodies_still_give_one_line() -> None:
    c, _ = client_for(Recorder(httpx.Response(404, json={"detail": "Not Found"})), retries=0)
    with pytest.raises(NotFound, match=r"^404 not_found: Not Found$"):
        c.get("j1")
    c, _ = client_for(Recorder(httpx.Response(502, text="<html>\n<b>Bad</b> gateway\n</html>")), retries=0)
    with pytest.raises(ApiUnavailable) as ei:
        c.nodes()
    assert "\n" not in str(ei.value) and str(ei.value).startswith("502 bad_gateway: ")


def test_local_validation_fails_before_sending() -> None:
    rec = Recorder(httpx.Response(201, json=job_json()))
    c, _ = client_for(rec)
    with pytest.raises(InputError, match=r"gpus: Input should be less than or equal to 64"):
        c.submit(command=["x"], gpus=65)
    with pytest.raises(InputError, match="not both"):
        c.submit(command=["x"], gpu_milli=500, mig="1g.10gb")
    with pytest.raises(InputError, match="role"):
        c.create_token("alpha", "owner")
    assert rec.requests == []


def test_response_that_does_not_match_the_wire_models() -> None:
    c, _ = client_for(Recorder(httpx.Response(200, json={"id": "j1"})))
    with pytest.raises(GpufleetError, match=r"GET /v1/jobs/j1: the server's answer does not match"):
        c.get("j1")


# ------------------------------------------------------------------------------------ jobs and pages


def test_list_follows_cursors_and_sends_filters() -> None:
    pages = {
        None: {"items": [job_json(f"a{i}") for i in range(3)], "next_cursor": "c1"},
        "c1": {"items": [job_json(f"b{i}") for i in range(3)], "next_cursor": "c2"},
        "c2": {"items": [job_json("c0")], "next_cursor": None},
    }

    def answer(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=pages[req.url.params.get("cursor")])

    rec = Recorder(answer)
    c, _ = client_for(rec)
    jobs = list(c.iter_jobs(team="alpha", state=["pending", "RUNNING"], labels={"exp": "7"}, page_size=3))
    assert [j.id for j in jobs] == ["a0", "a1", "a2", "b0", "b1", "b2", "c0"]
    q = rec.requests[0].url.params
    assert q.get_list("state") == ["PENDING", "RUNNING"] and q["team"] == "alpha" and q["label"] == "exp=7"
    assert [r.url.params.get("cursor") for r in rec.requests] == [None, "c1", "c2"]

    rec.requests.clear()
    assert [j.id for j in c.list(state="FAILED", limit=4)] == ["a0", "a1", "a2", "b0"]
    assert len(rec.requests) == 2  # stops fetching once it has enough
    rec.requests.clear()
    assert len(c.list(limit=3)) == 3 and len(rec.requests) == 1
    assert rec.requests[0].url.params["limit"] == "3"  # asks for no more than it needs


def test_wait_polls_until_terminal_and_times_out() -> None:
    rec = Recorder(
        httpx.Response(200, json=job_json(state="PENDING")),
        httpx.Response(200, json=job_json(state="RUNNING")),
        httpx.Response(200, json=job_json(state="SUCCEEDED", exit_code=0)),
    )
    c, sleeps = client_for(rec)
    job = c.wait("j1", poll_interval=0.25)
    assert job.state == "SUCCEEDED" and job.terminal and sleeps == [0.25, 0.25]

    c, _ = client_for(Recorder(httpx.Response(200, json=job_json(state="RUNNING"))))
    with pytest.raises(WaitTimeout, match="j1 is still RUNNING") as ei:
        c.wait("j1", timeout=0)
    assert isinstance(ei.value, TimeoutError)


def _chunks(*parts: bytes, fail_with: Exception | None = None) -> Iterator[bytes]:
    yield from parts
    if fail_with is not None:
        raise fail_with


def test_logs_stream_line_by_line() -> None:
    rec = Recorder(lambda req: httpx.Response(200, content=_chunks(b"epoch 1\nep", b"och 2\n", b"done")))
    c, _ = client_for(rec)
    assert list(c.logs("j1", offset=5)) == ["epoch 1\n", "epoch 2\n", "done"]
    assert rec.requests[0].url.params["offset"] == "5" and "follow" not in rec.requests[0].url.params


def test_logs_follow_resumes_after_a_broken_stream_at_the_last_whole_line() -> None:
    rec = Recorder(
        lambda req: httpx.Response(200, content=_chunks(b"line 1\nline 2\npart", fail_with=httpx.ReadError("reset"))),
        lambda req: httpx.Response(200, content=_chunks(b"partial line 3\n")),
    )
    c, _ = client_for(rec)
    assert list(c.logs("j1", follow=True)) == ["line 1\n", "line 2\n", "partial line 3\n"]
    assert [r.url.params["offset"] for r in rec.requests] == ["0", "14"]
    assert rec.requests[1].url.params["follow"] == "true"


def test_logs_of_an_unknown_job_raise_not_found() -> None:
    c, _ = client_for(Recorder(problem(404, "not_found", "no job j9")))
    with pytest.raises(NotFound):
        list(c.logs("j9"))


def test_other_endpoints_paths_and_params() -> None:
    routes: dict[tuple[str, str], Any] = {
        ("GET", "/v1/queue"): [],
        ("GET", "/v1/teams/alpha"): {
            "name": "alpha", "weight": 1, "cohort": None, "borrowing_limit_gpus": None,
            "quota_gpus": {}, "used_gpus": {},
        },
        ("PUT", "/v1/teams/alpha"): {
            "name": "alpha", "weight": 2, "cohort": None, "borrowing_limit_gpus": None,
            "quota_gpus": {"A100": 8}, "used_gpus": {},
        },
        ("DELETE", "/v1/tokens/t1"): None,
        ("GET", "/v1/whoami"): {"token_id": "t0", "team": "ops", "role": "admin"},
        ("GET", "/healthz"): {"status": "ok"},
    }  # fmt: skip

    def answer(req: httpx.Request) -> httpx.Response:
        body = routes[(req.method, req.url.path)]
        return httpx.Response(204) if body is None else httpx.Response(200, json=body)

    rec = Recorder(answer)
    c, _ = client_for(rec)
    assert c.queue("alpha") == [] and rec.requests[-1].url.params["team"] == "alpha"
    assert c.team("alpha").weight == 1
    out = c.set_team("alpha", TeamIn(quota_gpus={"A100": 8}), weight=2)
    assert out.quota_gpus == {"A100": 8}
    assert json.loads(rec.requests[-1].content)["weight"] == 2
    c.revoke_token("t1")
    assert rec.requests[-1].method == "DELETE"
    assert c.whoami().role == "admin"
    assert c.health() == {"status": "ok"} and "Authorization" in rec.requests[-1].headers
    with pytest.raises(InputError, match="not a job id"):
        c.get("../teams")


def test_async_client_retries_with_one_key_and_follows_cursors() -> None:
    seen: list[httpx.Request] = []
    answers = [problem(503, "unavailable", "busy"), httpx.Response(201, json=job_json("j2"))]

    async def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/v1/jobs" and req.method == "GET":
            cursor = req.url.params.get("cursor")
            return httpx.Response(
                200, json={"items": [job_json("p" + (cursor or "0"))], "next_cursor": None if cursor else "1"}
            )
        return answers.pop(0)

    async def main() -> None:
        async with AsyncClient(URL, "t", transport=httpx.MockTransport(handler), backoff=0) as c:
            job = await c.submit(command=["x"])
            assert job.id == "j2"
            assert [j.id for j in await c.list()] == ["p0", "p1"]

    asyncio.run(main())
    posts = [r for r in seen if r.method == "POST"]
    assert len(posts) == 2 and posts[0].headers["Idempotency-Key"] == posts[1].headers["Idempotency-Key"]


# -------------------------------------------------------------------------------------------- config


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    monkeypatch.delenv("GPUFLEET_URL", raising=False)
    monkeypatch.delenv("GPUFLEET_TOKEN", raising=False)
    return tmp_path


def test_url_resolution_order(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.home_dir() == home
    assert config.resolve_url() == "http://127.0.0.1:8470" == config.DEFAULT_URL
    (home / "server.json").write_text(json.dumps({"url": "http://10.0.0.1:9000/"}))
    assert config.resolve_url() == "http://10.0.0.1:9000"
    monkeypatch.setenv("GPUFLEET_URL", "box:8470/v1")
    assert config.resolve_url() == "http://box:8470"
    assert config.resolve_url("https://api.example/") == "https://api.example"
    monkeypatch.delenv("GPUFLEET_URL")
    (home / "server.json").write_text("{nope")
    with pytest.raises(ConfigError, match=r"server.json:1: not valid JSON"):
        config.resolve_url()
    (home / "server.json").write_text("{}")
    with pytest.raises(ConfigError, match="field 'url'"):
        config.resolve_url()


def test_token_resolution_order_and_insecure_file_warning(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.resolve_token() is None
    config.write_private_file(home / "admin.token", "from-file\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.resolve_token() == "from-file"
    monkeypatch.setenv("GPUFLEET_TOKEN", "from-env")
    assert config.resolve_token() == "from-env"
    assert config.resolve_token("explicit") == "explicit"
    monkeypatch.delenv("GPUFLEET_TOKEN")
    if os.name == "posix":
        os.chmod(home / "admin.token", 0o644)
        with pytest.warns(config.InsecureTokenFileWarning, match="chmod 600"):
            assert config.resolve_token() == "from-file"


def test_write_private_file_is_0600_and_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "admin.token"
    config.write_private_file(path, "one")
    config.write_private_file(path, "two")
    assert path.read_text() == "two"
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["admin.token"]  # no temporary left behind


def test_client_picks_up_the_home(home: Path) -> None:
    (home / "server.json").write_text(json.dumps({"url": "http://h:1"}))
    config.write_private_file(home / "admin.token", "tok")
    with Client() as c:
        assert c.url == "http://h:1" and c.token == "tok"


# ------------------------------------------------------------------------------ through the real API


class TestRoundTrip:
    """The SDK against ``create_app`` on a temporary SQLite store (the server's own test set-up)."""

    @pytest.fixture
    def api(self, tmp_path: Path) -> Iterator[Any]:
        api_support = pytest.importorskip("tests.support.api_support")
        yield from api_support.make_api(tmp_path)

    def _client(self, api: Any, who: str) -> Client:
        return Client("http://testserver", api.secrets[who], transport=api.sdk_transport, backoff=0)

    def test_jobs(self, api: Any) -> None:
        with self._client(api, "alice") as alice:
            job = alice.submit(command=["python", "train.py"], gpus=1, labels={"exp": "1"}, idempotency_key="k1")
            again = alice.submit(command=["python", "train.py"], gpus=1, labels={"exp": "1"}, idempotency_key="k1")
            assert again.id == job.id and job.team == "alpha" and job.state == "PENDING"
            other = alice.submit(command=["echo"], name="second")
            assert alice.get(job.id) == alice.get(job.id)
            assert {j.id for j in alice.list()} == {job.id, other.id}
            assert [j.id for j in alice.list(labels={"exp": "1"})] == [job.id]
            assert [j.id for j in alice.iter_jobs(page_size=1)] == [other.id, job.id]
            (api.logs / f"{job.id}.log").write_bytes(b"hello\nworld\n")
            assert list(alice.logs(job.id)) == ["hello\n", "world\n"]
            assert list(alice.logs(job.id, offset=6)) == ["world\n"]
            cancelled = alice.cancel(job.id)
            assert cancelled.state == "CANCELLED" and alice.wait(job.id, timeout=1).state == "CANCELLED"
            assert [e.new for e in alice.events(job.id)][-1] == "CANCELLED"
            assert isinstance(alice.queue(), list) and isinstance(alice.nodes(), list)
            me = alice.whoami()
            assert (me.team, me.role) == ("alpha", "member")
            assert alice.health()
            report = alice.usage("7d", ["team", "project"])
            assert report.aggregate == ["team", "project"]
            with pytest.raises(NotFound):
                alice.get("no-such-job")
            with pytest.raises(InvalidRequest) as ei:  # bypass local validation: the server says 422
                alice.submit(JobSubmit.model_construct(command=["x"], gpus=100))
            assert str(ei.value).startswith("422 invalid_input: ") and "gpus" in str(ei.value)
            assert "\n" not in str(ei.value)
            with pytest.raises(Forbidden):
                alice.set_team("alpha", weight=3)

    def test_admin(self, api: Any) -> None:
        with self._client(api, "admin") as admin:
            team = admin.set_team("gamma", quota_gpus={"A100-80GB": 8, "*": 2}, weight=2)
            assert team.quota_gpus == {"A100-80GB": 8, "*": 2} and team.weight == 2
            assert "gamma" in {t.name for t in admin.teams()}
            created = admin.create_token("gamma", "viewer", "ci", 30)
            assert created.token and created.role == "viewer"
            assert created.id in {t.id for t in admin.tokens()}
            with Client("http://testserver", created.token, transport=api.sdk_transport) as viewer:
                assert viewer.whoami().team == "gamma"
                admin.revoke_token(created.id)
        with Client("http://testserver", "not-a-token", transport=api.sdk_transport) as nobody:
            with pytest.raises(Unauthorized) as ei:
                nobody.whoami()
            assert str(ei.value).startswith("401 ")


def test_a_budget_refusal_is_a_conflict_with_the_budget_checks_exit_code() -> None:
    """A 402 from a ``block`` budget was "other error" (exit 8) while ``budget check`` exits 6 for the
    same condition (issue 10, observation 7): it is a :class:`BudgetExceeded`, a conflict."""
    from gpufleet.cli.render import EXIT_CONFLICT, exit_code_for
    from gpufleet.sdk import BudgetExceeded
    from gpufleet.sdk.errors import error_from_response

    body = {
        "type": "about:blank",
        "title": "Payment Required",
        "status": 402,
        "code": "budget_exceeded",
        "detail": "budget 'alpha-cap' would be exceeded",
    }
    err = error_from_response(httpx.Response(402, json=body, headers={"content-type": "application/problem+json"}))
    assert isinstance(err, BudgetExceeded) and isinstance(err, ConflictError)
    assert exit_code_for(err) == EXIT_CONFLICT == 6
    assert "alpha-cap" in str(err)


WAIT_BAR = [
    # name, the job as the last poll saw it, (total, completed) the bar shows
    ("running against its estimate", {"state": "RUNNING", "estimated_runtime_s": 100.0}, "part"),
    ("succeeded: full", {"state": "SUCCEEDED", "run_seconds": 98.0}, "full"),
    ("failed: full (it ended)", {"state": "FAILED", "reason": "exit 1"}, "full"),
    ("pending: no bar yet", {"state": "PENDING"}, "none"),
]


@pytest.mark.parametrize(("name", "over", "want"), WAIT_BAR, ids=[w[0] for w in WAIT_BAR])
def test_the_wait_bar_ends_full(name: str, over: dict[str, Any], want: str) -> None:
    """Issue 23 (11): ``gpufleet wait``'s bar ended at 0 % when the job finished."""
    from datetime import UTC, datetime, timedelta

    from gpufleet.cli.progress import _job_line
    from gpufleet.wire import JobOut

    started = (datetime.now(UTC) - timedelta(seconds=40)).isoformat()
    job = JobOut.model_validate({**job_json("j1"), "started_at": started, **over})
    _desc, total, completed, _detail = _job_line(job)
    if want == "full":
        assert total is not None and completed == total
    elif want == "part":
        assert total == 100.0 and 30.0 <= completed < 100.0
    else:
        assert total is None
