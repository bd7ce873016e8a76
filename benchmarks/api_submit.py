"""API submit throughput and latency, and the controller's cycle time with a long queue.

Starts a real ``gpufleet up`` (8 declared GPUs, local backend) on SQLite and on a throwaway
PostgreSQL, fills the GPUs with 8 long jobs, then drives ``POST /v1/jobs`` from ``--clients``
concurrent clients (asyncio, keep-alive connections, one Idempotency-Key per submit) for
``--duration`` seconds after a warm-up. The submitted jobs queue behind the running ones, so the
controller keeps scheduling a growing queue while the API takes submits — as on a busy server.

Then it tops the queue up to ``--queued`` jobs and reads the leader's cycle time from its
heartbeat (``controllers.last_cycle_ms``: ordering, quotas, placement attempts for every queued
job; ``info.last_step_ms``: the whole step including the store sync and the queue publication).

The load generator runs on the same machine as the server (2 cores here): its CPU use is part of
what the server competes with. PostgreSQL runs with its default durability (fsync on,
synchronous_commit on). Prints JSON.

    python benchmarks/api_submit.py [--stores sqlite,postgresql] [--clients 64] [--duration 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.pg import running_postgres
from tests.support.serverproc import ServerProcess

TARGET_SUBMITS_PER_S = 500
TARGET_P99_MS = 100.0
TARGET_CYCLE_MS = 100.0

JOB = {"command": ["sleep", "60"], "gpus": 1, "estimated_runtime_s": 60}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


async def drive(
    url: str, token: str, clients: int, duration: float, warmup: float, rate: float | None = None
) -> dict[str, Any]:
    """``clients`` keep-alive connections, each submitting back to back (closed loop: the
    throughput the server sustains), or, with ``rate``, on a fixed schedule of ``rate`` submits/s
    spread over the clients (open loop: latency at that load). Open-loop latency is measured from
    each request's *scheduled* time, so a server that falls behind is charged for the backlog
    (no coordinated omission).

    A minimal HTTP/1.1 client on asyncio streams (requests prebuilt, responses read by
    Content-Length), so the load generator costs little CPU on the same 2 cores: httpx's AsyncClient
    saturated at ~160 requests/s here even against a trivial FastAPI app.
    """
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    payload = json.dumps(JOB).encode()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    t_measure = time.perf_counter() + warmup
    t_end = t_measure + duration

    interval = clients / rate if rate else 0.0

    async def client(k: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        due = time.perf_counter() + (interval * k / clients)
        try:
            while (t0 := time.perf_counter()) < t_end:
                if interval:
                    if due > t0:
                        await asyncio.sleep(due - t0)
                    t0, due = due, due + interval
                head = (
                    f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nIdempotency-Key: {uuid.uuid4().hex}\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n"
                )
                writer.write(head.encode() + payload)
                raw = await reader.readuntil(b"\r\n\r\n")
                status = raw[9:12].decode()
                length = 0
                for line in raw.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                if t0 >= t_measure:
                    if status == "201":
                        latencies.append((time.perf_counter() - t0) * 1000)
                    else:
                        errors[status] = errors.get(status, 0) + 1
        finally:
            writer.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    return {
        "mode": f"open loop at {rate:g}/s" if rate else "closed loop",
        "clients": clients,
        "duration_s": duration,
        "submits": len(latencies),
        "submits_per_s": round(len(latencies) / duration, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies, default=float("nan")), 2),
        "errors": errors,
    }


def fill(server: ServerProcess, target_queued: int) -> int:
    """Top the queue up to ``target_queued`` pending jobs (bulk, 16 concurrent submitters)."""
    with server.client() as c:
        queued = len(c.queue())
    missing = max(0, target_queued - queued)

    async def run() -> None:
        sem = asyncio.Semaphore(16)
        headers = {"Authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60.0) as http:

            async def one() -> None:
                async with sem:
                    r = await http.post("/v1/jobs", json=JOB)
                    r.raise_for_status()

            await asyncio.gather(*(one() for _ in range(missing)))

    asyncio.run(run())
    return missing


def cycle_times(server: ServerProcess, samples: int) -> dict[str, Any]:
    """Read the leader's heartbeat until ``samples`` distinct cycles were seen."""
    from gpufleet.store.db import Database
    from gpufleet.store.models import ControllerRow

    db = Database(server.db or f"sqlite:///{server.home / 'gpufleet.db'}")
    seen: dict[int, tuple[float, float, int]] = {}
    deadline = time.monotonic() + 120
    try:
        while len(seen) < samples and time.monotonic() < deadline:
            with db.session() as s:
                for row in s.query(ControllerRow).filter(ControllerRow.is_leader.is_(True)):
                    info = row.info or {}
                    if row.last_cycle_ms is not None and info.get("pending", 0) > 0:
                        seen[int(info.get("cycles", 0))] = (
                            float(row.last_cycle_ms),
                            float(info.get("last_step_ms", 0.0)),
                            int(info["pending"]),
                        )
            time.sleep(0.5)
    finally:
        db.dispose()
    cycles = [v[0] for v in seen.values()]
    steps = [v[1] for v in seen.values()]
    return {
        "queued": max((v[2] for v in seen.values()), default=0),
        "cycles_sampled": len(cycles),
        "cycle_ms_p50": round(statistics.median(cycles), 2) if cycles else None,
        "cycle_ms_max": round(max(cycles), 2) if cycles else None,
        "step_ms_p50": round(statistics.median(steps), 2) if steps else None,
        "step_ms_max": round(max(steps), 2) if steps else None,
    }


@contextlib.contextmanager
def store_url(store: str) -> Iterator[str | None]:
    if store == "sqlite":
        yield None
    else:
        with running_postgres(durable=True) as url:
            yield url


def bench_store(store: str, args: argparse.Namespace) -> dict[str, Any]:
    with store_url(store) as url, tempfile.TemporaryDirectory(prefix=f"gpufleet-bench-{store}-") as tmp:
        settings = {"log_level": "warning", "api_workers": args.api_workers}
        server = ServerProcess(Path(tmp) / "home", gpus="8xA100-80GB", db=url, settings=settings)
        server.start()
        try:
            with server.client() as c:  # hold all 8 GPUs so that every submit queues
                for _ in range(8):
                    c.submit(command=["sleep", "3600"], gpus=1, name="holder")
            out = asyncio.run(drive(server.url, server.token, args.clients, args.duration, args.warmup))
            if args.rate:
                out["at_rate"] = asyncio.run(
                    drive(server.url, server.token, args.clients, args.duration, args.warmup, args.rate)
                )
            out["store"] = store
            out["api_workers"] = args.api_workers
            out["target_submits_per_s"] = TARGET_SUBMITS_PER_S
            out["target_p99_ms"] = TARGET_P99_MS
            if args.queued:
                fill(server, args.queued)
                out["controller"] = cycle_times(server, args.cycle_samples)
                out["controller"]["target_cycle_ms"] = TARGET_CYCLE_MS
            return out
        finally:
            server.stop()
            server.kill_jobs()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stores", default="sqlite,postgresql")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--queued", type=int, default=10_000, help="queue length for the cycle-time check (0: skip)")
    p.add_argument("--cycle-samples", type=int, default=8)
    p.add_argument("--api-workers", type=int, default=2, help="gpufleet up --workers (API processes)")
    p.add_argument("--rate", type=float, default=500.0, help="open-loop submits/s for the latency run (0: skip)")
    args = p.parse_args()
    results = [bench_store(s.strip(), args) for s in args.stores.split(",") if s.strip()]
    print(json.dumps({"benchmark": "api_submit", "results": results}, indent=2))


if __name__ == "__main__":
    main()
