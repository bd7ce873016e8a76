"""Shared set-up for the API tests: a fresh SQLite store, an app on it, and a token per role.

``make_api(tmp_path, url)`` takes the store's ``db_url`` (SQLite and PostgreSQL, from conftest.py);
without a URL it makes a SQLite file under ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.context import ApiContext
from gpufleet.clock import SimClock
from gpufleet.store import repo
from gpufleet.store.db import Database

T0 = datetime(2026, 11, 12, 12, 0, tzinfo=UTC).timestamp()

# who → (team, role)
PRINCIPALS: dict[str, tuple[str, str]] = {
    "admin": ("ops", "admin"),
    "alice": ("alpha", "member"),  # member of alpha
    "bob": ("beta", "member"),  # member of beta
    "vera": ("alpha", "viewer"),  # viewer of alpha
}


class Through(httpx.BaseTransport):
    """The SDK's (httpx) requests handed to the app's test client. Starlette's TestClient runs on
    httpx2 when that is installed (the MCP SDK brings it), and an httpx client cannot use an httpx2
    transport directly; through the test client's own request both work."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        r = self.client.request(
            request.method, request.url.raw_path.decode("ascii"), headers=headers, content=request.read()
        )
        return httpx.Response(r.status_code, headers=list(r.headers.items()), content=r.content)


@dataclass
class Api:
    client: TestClient
    db: Database
    clock: SimClock
    logs: Path
    secrets: dict[str, str]
    token_ids: dict[str, str]
    ready: list[bool] = field(default_factory=lambda: [True])
    wakes: list[int] = field(default_factory=lambda: [0])

    @property
    def sdk_transport(self) -> httpx.BaseTransport:
        """A transport for the SDK's ``Client`` that reaches this app."""
        return Through(self.client)

    def h(self, who: str, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secrets[who]}", **extra}

    def submit(self, who: str, key: str | None = None, **body: Any) -> Any:
        body.setdefault("command", ["python", "train.py"])
        headers = self.h(who) if key is None else self.h(who, **{"Idempotency-Key": key})
        r = self.client.post("/v1/jobs", json=body, headers=headers)
        assert r.status_code in (200, 201), r.text
        return r.json()


def make_api(tmp_path: Path, url: str | None = None, **ctx_args: Any) -> Iterator[Api]:
    db = Database(url or f"sqlite:///{tmp_path / 'gpufleet.db'}")
    db.upgrade()
    clock = SimClock(T0)
    secrets, ids = {}, {}
    with db.session() as s:
        for who, (team, role) in PRINCIPALS.items():
            token, secret = repo.create_token(s, team=team, role=role, name=who, now=T0, owner=who)  # people
            secrets[who], ids[who] = secret, token.id
    logs = tmp_path / "logs"
    logs.mkdir()
    ready = [True]
    wakes = [0]

    def wake() -> None:
        wakes[0] += 1

    ctx = ApiContext(
        database=db, logs_dir=logs, clock=clock, wake=wake, ready=lambda: ready[0], log_poll_s=0.02, **ctx_args
    )
    app = create_app(ctx)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, db, clock, logs, secrets, ids, ready, wakes)
    db.dispose()


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The RFC 9457 problem document of ``r``, checked to have ``status`` and ``code``."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    doc: dict[str, Any] = r.json()
    assert doc["status"] == status and doc["code"] == code and doc["title"] and doc["detail"]
    return doc


def fields(doc: dict[str, Any]) -> list[str]:
    """The fields a problem document names."""
    return [e["field"] for e in doc["errors"]]
