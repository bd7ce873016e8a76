"""Issue 22, observation 10: the DCGM exporters were read one after another inside the leader's
step (``httpx.get(url, timeout=2.0)`` each: three silent exporters cost 6 s of the step, and one that
trickled a byte at a time was never cut, as httpx's read timeout restarts with every byte), and on a
time-sliced GPU all its memory went to the one pod the exporter names.

:class:`~gpufleet.k8s.adapter.dcgm_scrape.DcgmScraper` is exercised against real HTTP servers on
127.0.0.1 (ephemeral ports, a thread each): a good exporter, silent ones (they accept the
connection and never answer), a trickling one, a closed port, a huge body. Timings use a short
deadline and margins of a second (the machine is shared). The memory split by share
(:func:`~gpufleet.k8s.adapter.dcgm.split_time_sliced_memory`) is a scenario table. Every test here
failed before (the modules did not exist); the old sequential path's timings are in the report.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from gpufleet.backends.base import GpuSample
from gpufleet.errors import InputError
from gpufleet.k8s.adapter.dcgm import parse_dcgm, split_time_sliced_memory
from gpufleet.k8s.adapter.dcgm_scrape import MAX_BODY_BYTES, DcgmScraper

DEADLINE_S = 2.0  # generous: the good exporter must be read within it on a loaded machine
MARGIN_S = 1.0  # a loaded two-core machine


def _exporter_text(node: str = "gpu-a", used: int = 30000, pod: str = "") -> str:
    """A dcgm-exporter 3.3 scrape of one A100 (gpu-operator: Hostname is the node), trimmed."""
    who = f',container="main",namespace="ml",pod="{pod}"' if pod else ""
    uuid = "GPU-2f5e0c1a-9b7d-4c55-8a3e-1d2c3b4a5f60"
    labels = f'gpu="0",UUID="{uuid}",modelName="NVIDIA A100-SXM4-80GB",Hostname="{node}"'
    return (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}{who}}} 87\n"
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f"DCGM_FI_DEV_FB_USED{{{labels}{who}}} {used}\n"
        "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        f"DCGM_FI_DEV_FB_FREE{{{labels}{who}}} {81920 - used}\n"
    )


# -- loopback exporters ------------------------------------------------------------------------------


class _Good(BaseHTTPRequestHandler):
    body = _exporter_text().encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class RawServer:
    """A listening socket on 127.0.0.1 whose every connection is handed to ``serve`` on a thread."""

    serve: Callable[[socket.socket, threading.Event], None]
    accepted: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    sock: socket.socket = field(default_factory=socket.socket)
    conns: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client went away, or close() closed the socket
            self.serve(conn, self.stop)

    def close(self) -> None:
        self.stop.set()
        for c in [self.sock, *self.conns]:
            c.close()


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accepts, reads the request, never answers."""
    conn.recv(65536)
    stop.wait()


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    """A 200 with a 100 kB body sent a byte every 0.2 s (each byte restarts a read timeout)."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.2):
        conn.sendall(b"#")


def _huge(declared: bool) -> Callable[[socket.socket, threading.Event], None]:
    """A body over the scraper's cap: with its Content-Length, or streamed with none (read to close)."""

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(65536)
        size = 4 * 64 * 1024
        head = f"Content-Length: {size}\r\n" if declared else "Connection: close\r\n"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{head}\r\n".encode())
        chunk = b"# padding\n" * 1024
        for _ in range(size // len(chunk) + 1):
            conn.sendall(chunk)
        conn.close()

    return serve


@pytest.fixture
def servers() -> Iterator[Callable[..., RawServer]]:
    made: list[RawServer] = []

    def make(serve: Callable[[socket.socket, threading.Event], None]) -> RawServer:
        made.append(RawServer(serve))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def good() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Good)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return f"http://127.0.0.1:{port}/metrics"


def _until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _timed_round(scraper: DcgmScraper) -> float:
    t0 = time.monotonic()
    scraper.scrape_once()
    return time.monotonic() - t0


# -- one round, one deadline -------------------------------------------------------------------------


def test_three_silent_exporters_cost_one_deadline_and_the_good_one_is_read(
    servers: Callable[..., RawServer], good: str
) -> None:
    silent = [servers(_silent).url for _ in range(3)]
    scraper = DcgmScraper([*silent, good], deadline_s=DEADLINE_S)
    took = _timed_round(scraper)
    assert DEADLINE_S * 0.9 <= took < DEADLINE_S + MARGIN_S  # not 3 × the deadline (the old loop: 6 s)
    (g,) = scraper.latest()
    assert (g.node, g.utilization_pct, g.memory_used_mib) == ("gpu-a", 87.0, 30000.0)
    errors = scraper.errors()
    assert set(errors) == set(silent) and all("deadline" in m for m in errors.values())
    assert scraper._thread is None  # rounds run by hand: latest() started no thread
    scraper.close()


def test_a_trickling_exporter_is_cut_at_the_deadline(servers: Callable[..., RawServer]) -> None:
    url = servers(_trickle).url
    scraper = DcgmScraper([url], deadline_s=DEADLINE_S)
    took = _timed_round(scraper)
    assert took < DEADLINE_S + MARGIN_S  # the old path read until the body ended: 100000 × 0.2 s
    assert "deadline" in scraper.errors()[url] and scraper.latest() == []
    scraper.close()


def test_a_refused_port_is_an_error_for_that_exporter_only(closed_port: str, good: str) -> None:
    scraper = DcgmScraper([closed_port, good], deadline_s=DEADLINE_S)
    assert _timed_round(scraper) < DEADLINE_S  # a refusal does not wait for the deadline
    assert "ConnectError" in scraper.errors()[closed_port] and good not in scraper.errors()
    assert len(scraper.latest()) == 1
    scraper.close()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length-over-cap", "streamed-over-cap"])
def test_a_huge_body_is_an_error_not_read_to_its_end(servers: Callable[..., RawServer], declared: bool) -> None:
    url = servers(_huge(declared)).url
    scraper = DcgmScraper([url], deadline_s=5.0, max_body_bytes=64 * 1024)
    scraper.scrape_once()
    assert "larger than 65536 bytes" in scraper.errors()[url] and scraper.latest() == []
    assert DcgmScraper([url]).max_body_bytes == MAX_BODY_BYTES == 16 * 1024 * 1024
    scraper.close()


def test_a_scrape_that_is_not_prometheus_text_is_an_error_naming_the_exporter(good: str) -> None:
    def refuse(text: str, now: float, source: str) -> list[GpuSample]:
        return parse_dcgm("DCGM_FI_DEV_GPU_UTIL{gpu=0} x\n", now, source=source)

    scraper = DcgmScraper([good], parse=refuse)
    scraper.scrape_once()
    assert scraper.errors()[good].startswith(good) and scraper.latest() == []


def test_an_error_is_logged_once_per_change_not_every_round(
    closed_port: str, good: str, caplog: pytest.LogCaptureFixture
) -> None:
    scraper = DcgmScraper([closed_port], deadline_s=DEADLINE_S)
    with caplog.at_level(logging.INFO, logger="gpufleet.k8s.adapter.dcgm_scrape"):
        for _ in range(3):
            scraper.scrape_once()
    mine = [r for r in caplog.records if r.name == "gpufleet.k8s.adapter.dcgm_scrape"]  # (other threads log too)
    assert [r.levelno for r in mine] == [logging.WARNING]
    assert closed_port in mine[0].getMessage()


# -- off the caller's thread -------------------------------------------------------------------------


def test_latest_returns_at_once_while_a_round_is_in_flight(servers: Callable[..., RawServer], good: str) -> None:
    silent = servers(_silent)
    scraper = DcgmScraper([silent.url, good], deadline_s=3.0, interval_s=0.2)
    try:
        t0 = time.monotonic()
        assert scraper.latest() == []  # starts the thread; nothing read yet, and no waiting for it
        assert time.monotonic() - t0 < 0.05
        _until(silent.accepted.is_set)  # the round is waiting on the silent exporter
        t0 = time.monotonic()
        scraper.latest()
        assert time.monotonic() - t0 < 0.05
        _until(lambda: len(scraper.latest()) == 1)  # the round ended (at its deadline): the good one's samples
    finally:
        scraper.close()


def test_close_joins_the_thread_even_in_the_middle_of_a_round(servers: Callable[..., RawServer]) -> None:
    silent = servers(_silent)
    scraper = DcgmScraper([silent.url], deadline_s=30.0)
    scraper.start()
    _until(silent.accepted.is_set)
    thread = scraper._thread
    assert thread is not None and thread.is_alive()
    t0 = time.monotonic()
    scraper.close()
    assert not thread.is_alive() and time.monotonic() - t0 < MARGIN_S  # not the 30 s deadline
    assert scraper.errors() == {}  # a round cut by close says nothing about the exporter
    scraper.start()  # closed: no new thread
    assert scraper._thread is thread


def test_stale_samples_are_dropped(good: str) -> None:
    clock = [1000.0]
    scraper = DcgmScraper([good], interval_s=10.0, deadline_s=2.0, now=lambda: 1.7e9, monotonic=lambda: clock[0])
    scraper.scrape_once()
    assert [g.time for g in scraper.latest()] == [1.7e9]
    clock[0] += 31.9  # younger than 3 intervals + the deadline (two rounds missed)
    assert len(scraper.latest()) == 1
    clock[0] += 0.2
    assert scraper.latest() == []  # stale telemetry is missing, not current
    scraper.close()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        pytest.param({"interval_s": 0.0}, "interval_s", id="interval"),
        pytest.param({"deadline_s": -1.0}, "deadline_s", id="deadline"),
        pytest.param({"max_body_bytes": 0}, "max_body_bytes", id="body-cap"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InputError, match=f"field '{needle}': must be positive"):
        DcgmScraper(["http://127.0.0.1:1/metrics"], **kwargs)


def test_an_http_error_status_is_that_exporters_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "bad":
            return httpx.Response(503, text="busy")
        return httpx.Response(200, text=_exporter_text("gpu-b"))

    scraper = DcgmScraper(["http://bad/metrics", "http://ok/metrics"], transport=httpx.MockTransport(answer))
    scraper.scrape_once()
    assert scraper.errors() == {"http://bad/metrics": "HTTP 503"}
    assert [g.node for g in scraper.latest()] == ["gpu-b"]


# -- time-sliced memory split by share ---------------------------------------------------------------


def _gpu(node: str, index: int, used: float, pods: dict[str, float]) -> GpuSample:
    return GpuSample(1.0, node, index, f"GPU-{node}-{index}", 50.0, used, 81920.0, pods)


SPLIT = [
    pytest.param(
        [_gpu("ts", 0, 30000, {"ml/a": 30000})],
        {"ts": {"ml/a": 1, "ml/b": 1}},
        [{"ml/a": 15000, "ml/b": 15000}],
        id="two-pods-1-to-1",
    ),
    pytest.param(
        [_gpu("ts", 0, 30000, {"ml/b": 30000})],
        {"ts": {"ml/a": 1, "ml/b": 3}},
        [{"ml/a": 7500, "ml/b": 22500}],
        id="two-pods-1-to-3",
    ),
    pytest.param(
        [_gpu("ts", 0, 30000, {"other/x": 30000})],
        {"ts": {"ml/a": 250, "ml/b": 250}},  # milli: only the ratio counts
        [{"ml/a": 15000, "ml/b": 15000}],
        id="exporter-names-a-pod-not-gpufleets",
    ),
    pytest.param(
        [_gpu("ts", 0, 30000, {})],
        {"ts": {"ml/a": 1, "ml/b": 1}},
        [{"ml/a": 15000, "ml/b": 15000}],
        id="exporter-names-none",
    ),
    pytest.param(
        [_gpu("ts", 0, 40000, {"ml/a": 40000}), _gpu("ts", 1, 0, {})],
        {"ts": {"ml/a": 1, "ml/b": 3}},  # which GPU b is on: the device plugin's choice, unknown
        [{"ml/a": 10000, "ml/b": 30000}, {"ml/a": 0, "ml/b": 0}],
        id="unknown-gpu-node-total-by-share",
    ),
    pytest.param(
        [_gpu("ts", 0, 40000, {"ml/a": 20000, "ml/b": 20000}), _gpu("ts", 1, 8000, {"ml/c": 8000})],
        {"ts": {"ml/a": 1, "ml/b": 3, "ml/c": 2}},  # virtual-GPU mode locates a and b on GPU 0
        [{"ml/a": 10000, "ml/b": 30000}, {"ml/c": 8000}],
        id="pods-located-by-virtual-gpus",
    ),
    pytest.param(
        [_gpu("ts", 0, 40000, {"ml/a": 20000, "other/x": 20000})],
        {"ts": {"ml/a": 1, "ml/b": 1}},  # x's share is unknown: the parser's even split stays
        [{"ml/a": 20000, "other/x": 20000}],
        id="located-with-a-foreign-pod",
    ),
    pytest.param(
        [_gpu("whole", 0, 30000, {"ml/a": 30000})],
        {"ts": {"ml/b": 1, "ml/c": 1}},
        [{"ml/a": 30000}],
        id="exclusive-gpu-untouched",
    ),
]


@pytest.mark.parametrize(("samples", "shared", "expected"), SPLIT)
def test_time_sliced_memory_is_split_by_share(
    samples: list[GpuSample], shared: dict[str, dict[str, float]], expected: list[dict[str, float]]
) -> None:
    out = split_time_sliced_memory(samples, shared)
    assert [dict(g.job_memory_mib) for g in out] == [pytest.approx(e) for e in expected]
    assert [(g.node, g.gpu_index, g.memory_used_mib) for g in out] == [
        (g.node, g.gpu_index, g.memory_used_mib) for g in samples
    ]


def test_mig_slices_are_untouched() -> None:
    mig = 'gpu="0",UUID="GPU-0c9d",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"'
    s1 = f'{mig},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",container="main",namespace="ml",pod="infer"'
    s2 = f'{mig},GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",container="nb",namespace="dev",pod="notebook"'
    text = f"DCGM_FI_DEV_FB_USED{{{s1}}} 20000\nDCGM_FI_DEV_FB_USED{{{s2}}} 5000\n" + _exporter_text("ts", 30000, "a")
    parsed = parse_dcgm(text, 1.0)
    out = split_time_sliced_memory(parsed, {"ts": {"ml/a": 1, "ml/b": 1}})
    by = {g.node: dict(g.job_memory_mib) for g in out}
    assert by["mig-node"] == {"ml/infer": 20000, "dev/notebook": 5000}
    assert by["ts"] == {"ml/a": 15000, "ml/b": 15000}


@pytest.mark.parametrize("share", [0, -1, float("nan"), "2"], ids=["zero", "negative", "nan", "text"])
def test_a_bad_share_names_the_node_and_the_pod(share: object) -> None:
    with pytest.raises(InputError, match=r"node ts: pod ml/a: a share must be a positive number") as e:
        split_time_sliced_memory([], {"ts": {"ml/a": share}})  # type: ignore[dict-item]
    assert e.value.field == "share"
