"""Shared set-up for the budget tests: a priced node in the store, metered spend of a team, and
local receivers for alerts (an HTTP server recording POSTs, an SMTP server)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import update

from gpufleet.model.node import Node
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow

NODE = "n1"
NODE_GPUS = 8
NODE_USD_PER_HOUR = 8.0  # $1 per GPU-hour (no CPU or memory declared: the whole price is the GPUs')


def add_node(db: Database, now: float, name: str = NODE, gpus: int = NODE_GPUS, usd: float = NODE_USD_PER_HOUR) -> None:
    with db.session() as s:
        node = Node(name=name, gpu_model="A100-80GB", gpu_count=gpus)
        repo.upsert_node(s, node, hourly_usd=usd, now=now)


def add_spend(
    db: Database,
    team: str,
    usd: float,
    end: float,
    *,
    labels: dict[str, str] | None = None,
    project: str = "",
    gpus: int = NODE_GPUS,
    node_usd: float = NODE_USD_PER_HOUR,
    node: str = NODE,
) -> str:
    """A finished job of ``team`` that held the whole first node (``gpus`` GPUs at ``node_usd``
    an hour, nothing else declared) until ``end``, for as long as it takes to cost ``usd``."""
    seconds = usd * 3600.0 / node_usd
    start = end - seconds
    with db.session() as s:
        fields = {"name": "spent", "command": ["true"], "gpus": gpus, "project": project, "labels": labels or {}}
        job, _ = repo.submit_job(
            s, fields, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=start
        )
        node_row = next(n for n in repo.list_nodes(s) if n.name == node)
        repo.append_segment(
            s,
            job=job,
            run=1,
            node=node_row,
            gpu_share_units=gpus * 7000,
            cpu_milli=0,
            memory_mib=0,
            node_hourly_usd=node_usd,
            capacity_type="on-demand",
            start=start,
            end=end,
        )
        s.execute(update(JobRow).where(JobRow.id == job.id).values(state="SUCCEEDED", ended_at=end))
        return job.id


@dataclass
class Receiver:
    """A local HTTP endpoint recording every POST; ``fail_first`` answers 500 that many times first."""

    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    fail_first: int = 0
    failures: int = 0


@contextmanager
def http_receiver(fail_first: int = 0) -> Iterator[Receiver]:
    rec = Receiver(url="", fail_first=fail_first)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                if rec.failures < rec.fail_first:
                    rec.failures += 1
                    status = 500
                else:
                    rec.posts.append(json.loads(body))
                    rec.headers.append(dict(self.headers))
                    status = 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Mailbox:
    host: str
    port: int
    messages: list[Any] = field(default_factory=list)


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    with socket.socket() as sock:  # a free port (the controller's readiness probe needs a real one)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    box = Mailbox("127.0.0.1", port)

    class Keep(Message):
        def handle_message(self, message: Any) -> None:
            box.messages.append(message)

    ctl = Controller(Keep(), hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        yield box
    finally:
        ctl.stop()
