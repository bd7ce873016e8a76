"""Reading logs cannot slow everyone down: a read without ``follow`` sends at most ``log_read_max_bytes``
(``X-Log-Next-Offset`` says where to continue), a sparse log is served from its data only (never
its holes as zeros), follows are limited per token and in total (429 with Retry-After), and an
idle follow costs a stat per poll, not a store query.

``test_list_jobs_p50_with_200_follow_attempts`` measures list-jobs latency on a real server while
200 clients try to follow a running job's log (run it with ``-s`` to see the figures)."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.store import repo
from tests.security.test_http_hardening import Served
from tests.support.api_support import Api, make_api, problem
from tests.support.serverproc import ServerProcess

MiB = 1024 * 1024


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(
        tmp_path,
        log_read_max_bytes=MiB,
        log_follows_per_token=2,
        log_follows_total=3,
        log_recheck_s=0.2,
    )


def _job(api: Api, who: str = "alice", *, running: bool = True) -> str:
    job = api.submit(who)["id"]
    if running:
        with api.db.session() as s:
            for state in ("ADMITTED", "RUNNING"):
                repo.transition(s, repo.get_job(s, job), state, "test", api.clock.now())
    return str(job)


def _end(api: Api, job: str) -> None:
    with api.db.session() as s:
        repo.transition(s, repo.get_job(s, job), "SUCCEEDED", "test", api.clock.now())


# -- bytes per response ---------------------------------------------------------------------------


def test_the_sdk_and_the_cli_read_a_log_longer_than_one_response_whole(api: Api) -> None:
    """``Client.logs`` (and ``gpufleet logs``, which uses it) asks again at ``X-Log-Next-Offset``
    until the whole log is read: a log of 2.5 responses comes back entire, line for line."""
    from gpufleet.sdk import Client

    job = _job(api, running=False)
    lines = [f"line {i:07d} " + "x" * (i % 97) + "\n" for i in range(60_000)]
    data = "".join(lines)
    assert len(data) > 2 * MiB
    (api.logs / f"{job}.log").write_text(data)
    with Client("http://testserver", api.secrets["alice"], transport=api.sdk_transport) as c:
        got = list(c.logs(job))
    assert got == lines


def test_a_long_log_comes_in_capped_pieces_that_the_offset_continues(api: Api) -> None:
    job = _job(api, running=False)
    data = bytes(i % 251 for i in range(5 * MiB // 2))
    (api.logs / f"{job}.log").write_bytes(data)
    got, offset, pieces = b"", 0, 0
    while True:
        r = api.client.get(f"/v1/jobs/{job}/logs", params={"offset": offset}, headers=api.h("alice"))
        assert r.status_code == 200
        assert len(r.content) <= MiB
        assert int(r.headers["X-Log-Size"]) == len(data)
        got += r.content
        pieces += 1
        offset = int(r.headers["X-Log-Next-Offset"])
        if offset == len(data):
            assert "link" not in r.headers
            break
        assert r.headers["link"] == f'</v1/jobs/{job}/logs?offset={offset}>; rel="next"'
    assert got == data and pieces == 3
    # past the end: 416 naming the size; at the end: nothing more
    doc = problem(
        api.client.get(f"/v1/jobs/{job}/logs", params={"offset": len(data) + 1}, headers=api.h("alice")),
        416,
        "offset_out_of_range",
    )
    assert str(len(data)) in doc["detail"]
    at_end = api.client.get(f"/v1/jobs/{job}/logs", params={"offset": len(data)}, headers=api.h("alice"))
    assert at_end.content == b"" and at_end.headers["X-Log-Next-Offset"] == str(len(data))


def test_a_sparse_log_is_served_from_its_data_not_its_holes(api: Api) -> None:
    """The job truncated its own log to 10 TiB (ftruncate on its fd): a read sends the bytes it
    wrote, at once, not 10 TiB of zeros."""
    job = _job(api)
    path = api.logs / f"{job}.log"
    hole = 10 << 40
    with path.open("wb") as f:
        f.write(b"head\n")
        f.truncate(hole)
        f.seek(hole + 1000)
        f.write(b"tail\n")
    size = hole + 1005
    assert os.stat(path).st_blocks * 512 < 64 * 1024  # really sparse on this filesystem
    with Served(api.client.app) as served, httpx.Client(base_url=served.url, timeout=10) as c:
        started = time.monotonic()
        body = b""
        with c.stream("GET", f"/v1/jobs/{job}/logs", headers=api.h("alice")) as r:
            assert r.status_code == 200
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > 2 * MiB or time.monotonic() - started > 5:
                    break  # the old server streams zeros for ever: stop reading
            next_offset = r.headers.get("X-Log-Next-Offset")
        assert body == b"head\ntail\n", f"{len(body)} bytes, {body.count(0)} of them zeros"
        assert next_offset == str(size)
        assert time.monotonic() - started < 2
        # a follow skips the hole too, and ends when the job does
        ender = threading.Timer(0.5, _end, (api, job))
        ender.start()
        r = c.get(f"/v1/jobs/{job}/logs", params={"follow": "true", "offset": 3}, headers=api.h("alice"))
        ender.join()
        assert r.content == b"d\ntail\n"


def test_logs_from_another_source_are_capped_too(tmp_path: Path) -> None:
    class Pods:
        def read(self, job_id: str) -> bytes:
            return b"x" * (3 * MiB)

        def follow(self, *args: Any) -> Iterator[bytes]:
            raise AssertionError("not followed")

    gen = make_api(tmp_path, job_logs=Pods(), log_read_max_bytes=MiB)
    api = next(gen)
    try:
        job = _job(api, running=False)
        r = api.client.get(f"/v1/jobs/{job}/logs", params={"offset": 10}, headers=api.h("alice"))
        assert r.content == b"x" * MiB
        assert r.headers["X-Log-Next-Offset"] == str(10 + MiB) and r.headers["X-Log-Size"] == str(3 * MiB)
    finally:
        gen.close()


# -- concurrent follows -----------------------------------------------------------------------------


class Follow:
    """A follow stream held open (headers received) until closed."""

    def __init__(self, url: str, job: str, secret: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=60.0))
        self.cm = self.client.stream(
            "GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}, headers={"Authorization": f"Bearer {secret}"}
        )
        self.response = self.cm.__enter__()
        if self.response.status_code == 200:
            self.chunks = self.response.iter_bytes()  # kept: a dropped iterator closes the connection
            self.first = next(self.chunks)  # streaming: the server holds its slot
        else:
            self.response.read()

    @property
    def status(self) -> int:
        return self.response.status_code

    def close(self) -> None:
        self.cm.__exit__(None, None, None)
        self.client.close()


def _eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_follows_are_limited_per_token_and_in_total(api: Api) -> None:
    job = _job(api)
    (api.logs / f"{job}.log").write_bytes(b"working\n")
    with Served(api.client.app) as served, ExitStack() as held:
        follows = [Follow(served.url, job, api.secrets["alice"]) for _ in range(2)]
        for f in follows:
            held.callback(f.close)
        assert [f.status for f in follows] == [200, 200]
        third = Follow(served.url, job, api.secrets["alice"])
        held.callback(third.close)
        doc = problem(third.response, 429, "too_many_follows")
        assert "log_follows_per_token" in doc["detail"] and "2" in doc["detail"]
        assert int(third.response.headers["Retry-After"]) > 0
        # reading without follow is not limited
        assert httpx.get(f"{served.url}/v1/jobs/{job}/logs", headers=api.h("alice")).content == b"working\n"
        # another token may follow, up to the total
        other = Follow(served.url, job, api.secrets["admin"])
        held.callback(other.close)
        assert other.status == 200
        over = Follow(served.url, job, api.secrets["vera"])
        held.callback(over.close)
        doc = problem(over.response, 429, "too_many_follows")
        assert "log_follows_total" in doc["detail"] and "3" in doc["detail"]
        # a closed stream frees its slot
        follows[0].close()

        def follows_again() -> bool:
            f = Follow(served.url, job, api.secrets["alice"])
            held.callback(f.close)
            return f.status == 200

        _eventually(follows_again)
        _end(api, job)


def test_an_idle_follow_costs_no_store_query_per_poll(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """log_poll_s 0.02 and log_recheck_s 0.2: over 2 s an idle follow polls the file (a stat) often
    but asks the store about the job and the token about 10 times, not 100."""
    job = _job(api)
    (api.logs / f"{job}.log").write_bytes(b"working\n")
    sessions = [0]
    real = api.db.session

    def counted(*args: Any, **kwargs: Any) -> Any:
        sessions[0] += 1
        return real(*args, **kwargs)

    with Served(api.client.app) as served:
        f = Follow(served.url, job, api.secrets["alice"])
        try:
            monkeypatch.setattr(api.db, "session", counted)
            time.sleep(2.0)
            with (api.logs / f"{job}.log").open("ab") as out:
                out.write(b"more\n")
            assert next(f.chunks) == b"more\n"
        finally:
            monkeypatch.undo()
            _end(api, job)
            f.close()
    assert sessions[0] <= 14, sessions[0]


# -- list-jobs latency under 200 follow attempts (a real server) -------------------------------------


async def _list_jobs_times(url: str, token: str, n: int) -> list[float]:
    """Latencies of ``n`` sequential GET /v1/jobs."""
    times = []
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as c:
        for _ in range(n):
            started = time.perf_counter()
            r = await c.get("/v1/jobs", params={"limit": 50})
            times.append(time.perf_counter() - started)
            assert r.status_code == 200
    return times


async def _follower(url: str, job: str, token: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """Follows the job's log; refused (429), tries again after Retry-After (as the SDK does)."""
    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(30.0, read=None), headers={"Authorization": f"Bearer {token}"}
    ) as c:
        while not stop.is_set():
            wait = 0.5
            try:
                async with c.stream("GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}) as r:
                    counts[str(r.status_code)] = counts.get(str(r.status_code), 0) + 1
                    if r.status_code == 200:
                        async for chunk in r.aiter_bytes():
                            counts["bytes"] = counts.get("bytes", 0) + len(chunk)
                            if stop.is_set():
                                return
                    else:
                        await r.aread()
                        wait = float(r.headers.get("Retry-After", "0.5"))
            except httpx.HTTPError:
                counts["errors"] = counts.get("errors", 0) + 1
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)


@dataclass
class Load:
    base_ms: float  # list-jobs p50 without follows (measured before and after them)
    loaded_ms: float  # ... while 200 clients try to follow
    idle_cpu: float  # the server's CPU (cores) before: nothing asked
    server_cpu: float  # ... while the follows are open and nothing else asked
    counts: dict[str, int]


async def _under_follows(url: str, pid: int, job: str, tokens: list[str], admin: str) -> Load:
    import psutil

    server = psutil.Process(pid)

    async def cpu_over(seconds: float) -> float:
        cpu, wall = sum(server.cpu_times()[:2]), time.monotonic()
        await asyncio.sleep(seconds)
        return (sum(server.cpu_times()[:2]) - cpu) / (time.monotonic() - wall)

    idle_cpu = await cpu_over(4.0)  # its controller's polling
    before = await _list_jobs_times(url, admin, 30)
    stop = asyncio.Event()
    counts: dict[str, int] = {}
    tasks = [asyncio.create_task(_follower(url, job, tokens[i % len(tokens)], stop, counts)) for i in range(200)]
    await asyncio.sleep(3.0)  # all 200 have tried
    server_cpu = await cpu_over(4.0)
    loaded = await _list_jobs_times(url, admin, 40)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    for t in tasks:
        t.cancel()
    after = await _list_jobs_times(url, admin, 30)
    return Load(
        statistics.median(before + after) * 1000, statistics.median(loaded) * 1000, idle_cpu, server_cpu, counts
    )


@pytest.mark.slow
def test_list_jobs_p50_with_200_follow_attempts(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "home").start()
    try:
        admin = server.token
        h = {"Authorization": f"Bearer {admin}"}
        tokens = []
        for i in range(50):
            r = httpx.post(
                server.url + "/v1/tokens",
                json={"team": "default", "role": "member", "name": f"m{i}"},
                headers=h,
                timeout=30,
            )
            assert r.status_code == 201, r.text
            tokens.append(r.json()["token"])
        # a training job: a line every 2 s (a follow is mostly idle, polling)
        steps = [
            sys.executable,
            "-c",
            "import time\nfor i in range(600):\n print('step', i, 'x' * 60, flush=True)\n time.sleep(2)",
        ]
        body = {"team": "default", "gpus": 1, "command": steps, "name": "steps"}
        job = httpx.post(server.url + "/v1/jobs", json=body, headers=h, timeout=30).json()["id"]
        for i in range(30):  # something to list
            body = {"team": "default", "gpus": 1, "command": ["true"], "name": f"j{i}"}
            assert httpx.post(server.url + "/v1/jobs", json=body, headers=h, timeout=30).status_code == 201
        _eventually(lambda: httpx.get(f"{server.url}/v1/jobs/{job}", headers=h).json()["state"] == "RUNNING", 30)
        assert server.proc is not None
        load = asyncio.run(_under_follows(server.url, server.proc.pid, job, tokens, admin))
        print(
            f"\nlist-jobs p50: {load.base_ms:.1f} ms alone, {load.loaded_ms:.1f} ms with 200 follow attempts; "
            f"server CPU: {load.idle_cpu:.2f} cores idle, {load.server_cpu:.2f} while they follow; {load.counts}"
        )
        assert load.loaded_ms < max(3 * load.base_ms, load.base_ms + 50), load
        assert load.server_cpu - load.idle_cpu < 0.15, load  # open follows of a quiet log cost little
    finally:
        server.stop()
        server.kill_jobs()


def test_ten_readers_of_a_ten_tib_sparse_log_get_its_data_only(tmp_path: Path) -> None:
    """Bytes served for a 10 TiB sparse log to 10 readers in (at most) 10 s: the data, 10 times.
    (Default settings: this figure is comparable with the server before the limits.)"""
    gen = make_api(tmp_path)
    api = next(gen)
    job = _job(api)
    path = api.logs / f"{job}.log"
    with path.open("wb") as f:
        f.write(b"started\n")
        f.truncate(10 << 40)
    total = [0]
    lock = threading.Lock()
    with Served(api.client.app) as served:
        started = time.monotonic()

        def reader() -> None:
            with (
                httpx.Client(base_url=served.url, timeout=15) as c,
                c.stream("GET", f"/v1/jobs/{job}/logs", headers=api.h("alice")) as r,
            ):
                for chunk in r.iter_bytes():
                    with lock:
                        total[0] += len(chunk)
                    if time.monotonic() - started > 10:
                        break

        threads = [threading.Thread(target=reader) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        took = time.monotonic() - started
    gen.close()
    print(f"\n10 readers of a 10 TiB sparse log: {total[0]} bytes in {took:.2f} s")
    assert total[0] == 10 * len(b"started\n")
