"""HTTP hardening: request heads that never finish (slow-loris) are cut off, a revoked token ends
its open log streams and is refused at once by every API worker, and the MCP server over HTTP
accepts browser requests only from origins it was told about (exact, port included).

In-process apps are served by a real uvicorn in a thread (:class:`Served`: a real socket, real
streaming); the worker-process behaviour is checked on a real ``gpufleet up`` (ServerProcess)."""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from gpufleet.store import repo
from tests.support.api_support import Api, make_api
from tests.support.serverproc import ServerProcess, free_port


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: Any, **config: Any) -> None:
        self.port = free_port()
        cfg = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, **config)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def closed_within(
    sock: socket.socket, seconds: float, trickle: bytes = b"", since: float | None = None
) -> tuple[float, bytes]:
    """Send ``trickle`` one byte every 0.1 s until the server closes the connection: (seconds it
    took since ``since`` — default now —, what the server sent). Fails when it is still open
    ``seconds`` after ``since``."""
    started = time.monotonic() if since is None else since
    received = b""
    sock.setblocking(False)
    i = 0
    while time.monotonic() - started < seconds:
        if i < len(trickle):
            try:
                sock.send(trickle[i : i + 1])
            except OSError:  # reset by the server: closed
                return time.monotonic() - started, received
            i += 1
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            except OSError:
                return time.monotonic() - started, received
            if not data:
                return time.monotonic() - started, received
            received += data
    raise AssertionError(f"the connection is still open after {seconds}s (received {received!r})")


SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 500


# -- slow request heads (slow-loris) ----------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)  # the default log_recheck_s (2 s): a revoked token's stream ends soon after


@pytest.mark.parametrize("impl", ["h11", "httptools"])
def test_a_request_head_not_finished_in_time_is_cut_off_while_others_are_served(api: Api, impl: str) -> None:
    from gpufleet.io.http_timeout import header_timeout_protocol

    with Served(api.client.app, http=header_timeout_protocol(0.6, impl)) as served:
        idle = socket.create_connection(("127.0.0.1", served.port))  # connects and sends nothing
        idle_since = time.monotonic()
        # meanwhile the server answers others at once
        with httpx.Client(base_url=served.url, timeout=5) as c:
            for _ in range(5):
                assert c.get("/healthz").status_code == 200
        took, got = closed_within(idle, 3.0, since=idle_since)
        assert 0.4 < took < 2.0 and got == b""  # nothing was asked: nothing is answered
        slow = socket.create_connection(("127.0.0.1", served.port))  # sends its head a byte at a time
        took, got = closed_within(slow, 3.0, SLOW_HEAD)
        assert 0.4 < took < 2.0
        assert got == b"" or got.startswith(b"HTTP/1.1 408"), got
        # a kept-alive connection whose *second* request head trickles in
        alive = socket.create_connection(("127.0.0.1", served.port))
        alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first:
            first += alive.recv(4096)
        assert first.startswith(b"HTTP/1.1 200")
        took, _ = closed_within(alive, 3.0, SLOW_HEAD)
        assert took < 2.0
        for conn in (idle, slow, alive):
            conn.close()
        # a request that takes longer than the timeout to *answer* is not cut off: only the head is timed
        with httpx.Client(base_url=served.url, timeout=10) as c:
            job = api.submit("alice")["id"]
            with api.db.session() as s:
                for state in ("ADMITTED", "RUNNING"):
                    repo.transition(s, repo.get_job(s, job), state, "test", api.clock.now())
            (api.logs / f"{job}.log").write_bytes(b"hello\n")

            def end_later() -> None:
                time.sleep(1.5)
                with api.db.session() as s:
                    repo.transition(s, repo.get_job(s, job), "SUCCEEDED", "test", api.clock.now())

            t = threading.Thread(target=end_later)
            t.start()
            started = time.monotonic()
            r = c.get(f"/v1/jobs/{job}/logs", params={"follow": "true"}, headers=api.h("alice"))
            t.join()
            assert r.status_code == 200 and r.content == b"hello\n"
            assert time.monotonic() - started > 1.4


def test_the_header_timeout_protocol_survives_the_trip_to_worker_processes() -> None:
    """``api_workers`` > 1: uvicorn pickles its config for each spawned worker."""
    import pickle

    from gpufleet.io.http_timeout import header_timeout_protocol

    proto = header_timeout_protocol(7.5)
    again = pickle.loads(pickle.dumps(proto))
    assert isinstance(again, functools.partial) and again.keywords == {"header_timeout_s": 7.5}
    # A worker unpickles it before it answers the supervisor's health check (5 s): that must not
    # import the whole API (FastAPI, SQLAlchemy...), which takes longer than that on a busy machine.
    code = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('fastapi', 'sqlalchemy', 'starlette')))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(proto), capture_output=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == b"[]", out


# -- revocation: open streams, other worker processes -----------------------------------------------


def _running_job(api: Api, who: str = "alice") -> str:
    job = api.submit(who)["id"]
    with api.db.session() as s:
        for state in ("ADMITTED", "RUNNING"):
            repo.transition(s, repo.get_job(s, job), state, "test", api.clock.now())
    (api.logs / f"{job}.log").write_bytes(b"started\n")
    return str(job)


def _follow_until_it_ends(url: str, job: str, token: str, out: dict[str, Any]) -> None:
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=30.0)) as c,
        c.stream(
            "GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}, headers={"Authorization": f"Bearer {token}"}
        ) as r,
    ):
        out["status"] = r.status_code
        out["body"] = b""
        try:
            for chunk in r.iter_bytes():
                out["body"] += chunk
        except httpx.HTTPError as e:
            out["error"] = e
    out["ended"] = time.monotonic()


@pytest.mark.parametrize("how", ["api", "another replica"])
def test_revoking_a_token_ends_its_open_follow_streams(api: Api, how: str) -> None:
    job = _running_job(api)
    with Served(api.client.app) as served:
        out: dict[str, Any] = {}
        t = threading.Thread(target=_follow_until_it_ends, args=(served.url, job, api.secrets["alice"], out))
        t.start()
        time.sleep(0.5)
        assert out.get("status") == 200 and "ended" not in out  # following
        revoked = time.monotonic()
        if how == "api":
            r = httpx.delete(f"{served.url}/v1/tokens/{api.token_ids['alice']}", headers=api.h("admin"))
            assert r.status_code == 204
        else:  # straight in the shared store: this process's token cache never hears of it
            with api.db.session() as s:
                repo.revoke_token(s, api.token_ids["alice"], api.clock.now())
        t.join(8)
        try:
            assert "ended" in out, "the follow stream of a revoked token is still open"
            assert out["ended"] - revoked < 4.0  # log_recheck_s (2 s) and a poll (at most 1 s)
            assert out["body"].startswith(b"started\n")
        finally:
            with api.db.session() as s:  # lets a stream that did not end finish
                repo.transition(s, repo.get_job(s, job), "SUCCEEDED", "test", api.clock.now())
            t.join(10)


@contextlib.contextmanager
def _server(home: Path, **settings: Any) -> Iterator[ServerProcess]:
    server = ServerProcess(home, settings=settings).start()
    try:
        yield server
    finally:
        server.stop()
        server.kill_jobs()


def _fresh_get(url: str, token: str) -> int:
    """One request on a new connection (the kernel hands each new connection to any worker)."""
    with httpx.Client(timeout=10) as c:
        headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
        return c.get(url + "/v1/whoami", headers=headers).status_code


@pytest.mark.slow
def test_a_revocation_reaches_every_api_worker_at_once(tmp_path: Path) -> None:
    with _server(tmp_path / "home", api_workers=2) as workers:
        _revoke_on_every_worker(workers)


def _revoke_on_every_worker(workers: ServerProcess) -> None:
    admin = {"Authorization": f"Bearer {workers.token}"}
    for _round in range(3):
        r = httpx.post(
            workers.url + "/v1/tokens",
            json={"team": "default", "role": "member", "name": "short"},
            headers=admin,
            timeout=10,
        )
        assert r.status_code == 201, r.text
        token, token_id = r.json()["token"], r.json()["id"]
        assert [_fresh_get(workers.url, token) for _ in range(24)] == [200] * 24  # cached by both workers
        assert httpx.delete(workers.url + f"/v1/tokens/{token_id}", headers=admin, timeout=10).status_code == 204
        assert [_fresh_get(workers.url, token) for _ in range(24)] == [401] * 24


@pytest.mark.slow
def test_the_server_cuts_off_slow_request_heads(tmp_path: Path) -> None:
    with _server(tmp_path / "home", api_workers=2, http_header_timeout_s=1.0) as workers:
        _slow_head_on(workers)


def _slow_head_on(workers: ServerProcess) -> None:
    slow = socket.create_connection(("127.0.0.1", workers.port))
    started = time.monotonic()
    done: dict[str, float] = {}

    def others() -> None:
        with httpx.Client(base_url=workers.url, timeout=5) as c:
            while time.monotonic() - started < 1.5:
                assert c.get("/healthz").status_code == 200
                done["served"] = done.get("served", 0) + 1
                time.sleep(0.05)

    t = threading.Thread(target=others)
    t.start()
    took, _ = closed_within(slow, 6.0, SLOW_HEAD)
    t.join()
    slow.close()
    assert took < 3.0
    assert done.get("served", 0) >= 5


# -- MCP over HTTP: Origin and Host ---------------------------------------------------------------

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer gpf_x"}


@contextlib.contextmanager
def _mcp(app: Any) -> Iterator[Callable[[str, str | None], int]]:
    """``post(host, origin)``: the status of an initialize request to ``app`` with that Host and Origin."""
    from fastapi.testclient import TestClient

    with TestClient(app) as c:

        def post(host: str, origin: str | None) -> int:
            headers = {**MCP_HEADERS, "Host": host}
            if origin is not None:
                headers["Origin"] = origin
            return c.post(f"http://{host}/mcp", json=INIT, headers=headers).status_code

        yield post


def test_mcp_over_http_accepts_only_its_own_origin_by_default() -> None:
    pytest.importorskip("mcp")
    from gpufleet.agent.server import AgentSettings, http_app

    with _mcp(http_app(AgentSettings("http://127.0.0.1:1", "http"), "127.0.0.1", 8471)) as post:
        assert post("127.0.0.1:8471", None) == 200  # no Origin: not a browser
        assert post("127.0.0.1:8471", "http://127.0.0.1:8471") == 200
        assert post("localhost:8471", "http://localhost:8471") == 200
        # a page served from another local port (or a rebound DNS name) is refused
        for origin in (
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "http://[::1]:9",
            "https://127.0.0.1:8471",
            "http://evil.example:8471",
            "null",
        ):
            assert post("127.0.0.1:8471", origin) == 403, origin
        assert post("127.0.0.1:9999", None) == 421  # a Host naming another port
        assert post("evil.example:8471", None) == 421  # DNS rebinding: a foreign name for this address


def test_mcp_over_http_accepts_configured_origins_exactly() -> None:
    pytest.importorskip("mcp")
    from gpufleet.agent.server import AgentSettings, http_app

    settings = AgentSettings("http://127.0.0.1:1", "http", allowed_origins=("https://console.example.com",))
    for bind in ("127.0.0.1", "0.0.0.0"):
        with _mcp(http_app(settings, bind, 8471)) as post:
            assert post("127.0.0.1:8471", "https://console.example.com") == 200
            for origin in (
                "https://console.example.com:8443",
                "http://console.example.com",
                "https://console.example.com.evil.example",
                "http://127.0.0.1:8080",
            ):
                assert post("127.0.0.1:8471", origin) == 403, (bind, origin)
    with pytest.raises(ValueError, match="origin"):
        AgentSettings("http://127.0.0.1:1", "http", allowed_origins=("http://127.0.0.1:*",))
    with pytest.raises(ValueError, match="origin"):
        AgentSettings("http://127.0.0.1:1", "http", allowed_origins=("https://x.example/path",))


@pytest.mark.slow
def test_gpufleet_mcp_over_http_refuses_another_local_port(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    port = free_port()
    env = {
        "GPUFLEET_URL": "http://127.0.0.1:1",
        "GPUFLEET_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "GPUFLEET_MCP_ALLOWED_ORIGINS": "https://console.example.com",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)

        def post(origin: str) -> int:
            return httpx.post(
                url,
                content=json.dumps(INIT),
                timeout=10,
                headers={**MCP_HEADERS, "Content-Type": "application/json", "Origin": origin},
            ).status_code

        assert post(f"http://127.0.0.1:{free_port()}") == 403
        assert post(f"http://127.0.0.1:{port}") == 200
        assert post("https://console.example.com") == 200
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
