"""Scraping the DCGM exporters: all at once, off the caller's thread, one deadline per round.

Why: the backend's ``telemetry()`` runs inside the leader's step. It read the exporters one after
another with a 2 s timeout each, so three silent exporters cost 6 s of the step, and one that
trickled bytes was never cut (httpx's read timeout restarts with every byte). A
:class:`DcgmScraper` reads them on its own daemon thread, every ``interval_s``, all concurrently;
one deadline (``deadline_s``) bounds the whole round, whatever each exporter does: refuses,
accepts and never answers, or answers a byte at a time. A body over ``max_body_bytes`` is an error
for that exporter (it is not read to its end). The step only calls :meth:`DcgmScraper.latest`,
which returns at once with the last samples of each exporter younger than ``stale_after_s``
(by default 3 × the interval + the deadline: two rounds missed): older telemetry is missing, not
current. A sample's age counts from when its exporter's answer arrived.

Each exporter's last error is kept (:meth:`DcgmScraper.errors`) and logged once when it changes,
not every round. Nothing here raises into the caller: a failed round is logged and the next one
runs. Parsing (:func:`~gpufleet.k8s.adapter.dcgm.parse_dcgm`) happens after the round's network
part, so a large body being parsed does not eat into the other exporters' deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from gpufleet.backends.base import GpuSample
from gpufleet.errors import GpufleetError, InputError
from gpufleet.k8s.adapter.dcgm import parse_dcgm

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024  # a real exporter's /metrics is some hundred KiB on an 8-GPU node

Parse = Callable[[str, float, str], list[GpuSample]]


def _parse(text: str, now: float, source: str) -> list[GpuSample]:
    return parse_dcgm(text, now, source=source)


@dataclass(frozen=True, slots=True)
class _Scrape:
    """One exporter's last good scrape."""

    samples: tuple[GpuSample, ...]
    at: float  # monotonic seconds: when the exporter's answer arrived


class _TooLarge(Exception):
    pass


class DcgmScraper:
    """The latest GPU samples of each DCGM exporter, scraped in the background (module docstring).

    ``transport`` (an ``httpx.AsyncBaseTransport``) replaces the network in tests; ``now`` gives
    the sample time where the exporter gives none (wall clock, as the backend's ``options.now``);
    ``monotonic`` measures the samples' age. Started by :meth:`start` or the first :meth:`latest`;
    stopped by :meth:`close`, which joins the thread (at most a deadline plus a little).
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        interval_s: float = 10.0,
        deadline_s: float = 2.0,
        stale_after_s: float | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        parse: Parse = _parse,
    ) -> None:
        for name, value in (("interval_s", interval_s), ("deadline_s", deadline_s), ("max_body_bytes", max_body_bytes)):
            if not value > 0:
                raise InputError(f"must be positive, got {value!r}", source="DCGM scraper", field=name)
        self.urls = tuple(dict.fromkeys(urls))  # each once, in order
        self.interval_s = interval_s
        self.deadline_s = deadline_s
        self.stale_after_s = 3 * interval_s + deadline_s if stale_after_s is None else stale_after_s
        self.max_body_bytes = max_body_bytes
        self._transport = transport
        self._now = now
        self._monotonic = monotonic
        self._parse = parse
        self._lock = threading.Lock()  # guards _scrapes, _errors, _thread
        self._scrapes: dict[str, _Scrape] = {}
        self._errors: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._by_hand = False  # scrape_once() was called: latest() starts no thread
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's, once it runs
        self._wake: asyncio.Event | None = None  # set (on that loop) by close(): ends a wait or a round

    # -- what the caller sees ----------------------------------------------------------------------
    def latest(self) -> list[GpuSample]:
        """The last samples of every exporter, younger than ``stale_after_s``, in ``urls`` order.
        Never waits on an exporter. Starts the background thread on first use, unless rounds are
        run by hand (:meth:`scrape_once`)."""
        if not self._by_hand:
            self.start()
        cutoff = self._monotonic() - self.stale_after_s
        with self._lock:
            scrapes = [self._scrapes.get(url) for url in self.urls]
        return [g for s in scrapes if s is not None and s.at >= cutoff for g in s.samples]

    def errors(self) -> dict[str, str]:
        """url → why its last scrape gave nothing (absent: it answered, or has not been tried yet)."""
        with self._lock:
            return dict(self._errors)

    def start(self) -> None:
        """Start scraping in the background (again a no-op; after :meth:`close`, too)."""
        if not self.urls or self._closed.is_set():
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="gpufleet-dcgm-scrape", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and join it. The samples already read stay readable (until stale)."""
        self._closed.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just ended
                loop.call_soon_threadsafe(wake.set)
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.deadline_s + 5.0)
            if thread.is_alive():  # pragma: no cover - a round is bounded by the deadline
                log.warning("DCGM scraper: its thread did not stop within %.1f s", self.deadline_s + 5.0)

    def scrape_once(self) -> None:
        """One round now, on the calling thread (tests; a caller without the background thread):
        from then on :meth:`latest` does not start the thread. Not while the thread runs."""
        self._by_hand = True
        asyncio.run(self._one_round())

    # -- the background thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # pragma: no cover - _main catches per round; this is the last guard
            log.exception("DCGM scraper stopped")

    async def _main(self) -> None:
        wake = asyncio.Event()
        self._wake, self._loop = wake, asyncio.get_running_loop()
        if self._closed.is_set():  # close() came before the loop existed: it could not wake it
            return
        async with self._client() as client:
            while not self._closed.is_set():
                started = self._monotonic()
                try:
                    await self._round(client, wake)
                except Exception:  # never into the caller; the next round tries again
                    log.exception("DCGM scrape round failed")
                delay = max(0.0, self.interval_s - (self._monotonic() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), delay)

    async def _one_round(self) -> None:
        async with self._client() as client:
            await self._round(client, asyncio.Event())

    def _client(self) -> httpx.AsyncClient:
        # per-request timeouts no longer than the round's; the round's deadline is what cuts
        return httpx.AsyncClient(
            transport=self._transport,
            timeout=httpx.Timeout(self.deadline_s),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=max(1, len(self.urls)), max_keepalive_connections=0),
        )

    async def _round(self, client: httpx.AsyncClient, wake: asyncio.Event) -> None:
        """Every exporter at once; whatever has not answered whole by the deadline (or by ``wake``:
        close()) is cut."""
        loop = asyncio.get_running_loop()
        now = self._now()
        end = loop.time() + self.deadline_s
        tasks = {url: asyncio.create_task(self._fetch(client, url)) for url in self.urls}
        woken = asyncio.create_task(wake.wait())
        pending: set[asyncio.Task[Any]] = set(tasks.values())
        while pending and not woken.done():
            left = end - loop.time()
            if left <= 0:
                break
            done, _ = await asyncio.wait({*pending, woken}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
        for t in (*pending, woken):
            t.cancel()
        await asyncio.gather(*pending, woken, return_exceptions=True)
        if self._closed.is_set() and pending:
            for task in tasks.values():
                if not task.cancelled():
                    task.exception()  # retrieved: asyncio logs an exception nobody asked for
            return  # closing: a cut round says nothing about the exporters
        for url, task in tasks.items():
            if task in pending:
                self._failed(url, f"no complete answer within the {self.deadline_s:g} s deadline")
                continue
            exc = task.exception()
            if exc is not None:
                self._failed(url, _describe(exc, self.max_body_bytes))
                continue
            body, arrived = task.result()
            try:
                samples = self._parse(body.decode("utf-8", errors="replace"), now, url)
            except GpufleetError as e:
                self._failed(url, str(e))
                continue
            self._succeeded(url, _Scrape(tuple(samples), arrived))

    async def _fetch(self, client: httpx.AsyncClient, url: str) -> tuple[bytes, float]:
        """The body, and when it had all arrived (monotonic)."""
        async with client.stream("GET", url, headers={"Accept": "text/plain"}) as resp:
            resp.raise_for_status()
            declared = resp.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                raise _TooLarge(f"Content-Length {declared}")
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > self.max_body_bytes:
                    raise _TooLarge(f"over {len(body)} bytes read")
            return bytes(body), self._monotonic()

    # -- bookkeeping -------------------------------------------------------------------------------
    def _failed(self, url: str, message: str) -> None:
        with self._lock:
            changed = self._errors.get(url) != message
            self._errors[url] = message
        if changed:
            log.warning("DCGM exporter %s: %s", url, message)

    def _succeeded(self, url: str, scrape: _Scrape) -> None:
        with self._lock:
            recovered = self._errors.pop(url, None) is not None
            self._scrapes[url] = scrape
        if recovered:
            log.info("DCGM exporter %s: answering again", url)


def _describe(exc: BaseException, max_body_bytes: int) -> str:
    if isinstance(exc, _TooLarge):
        return f"body larger than {max_body_bytes} bytes ({exc}): not read"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


__all__ = ["MAX_BODY_BYTES", "DcgmScraper"]
