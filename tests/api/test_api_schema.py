"""Property-based run over the OpenAPI document (schemathesis) against the ASGI app with an admin
token and with a member token: no answer is a 5xx, and answers conform to the documented schemas,
status codes and content types (a member's 403s and 404s included)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from gpufleet.api.app import create_app
from gpufleet.api.context import ApiContext
from gpufleet.clock import SimClock
from gpufleet.store import repo
from gpufleet.store.db import Database
from tests.support.api_support import T0

# Built at import: schemathesis reads the document when the tests are collected.
_DIR = Path(tempfile.mkdtemp(prefix="gpufleet-schema-"))
_DB = Database(f"sqlite:///{_DIR / 'gpufleet.db'}")
atexit.register(shutil.rmtree, _DIR, True)
atexit.register(_DB.dispose)  # runs first (LIFO): close connections, then remove the files
_DB.upgrade()
with _DB.session() as _s:
    _, ADMIN_SECRET = repo.create_token(_s, team="ops", role="admin", name="schemathesis", now=T0)
    _, MEMBER_SECRET = repo.create_token(_s, team="alpha", role="member", name="schemathesis-member", now=T0)
(_DIR / "logs").mkdir()
APP = create_app(ApiContext(database=_DB, logs_dir=_DIR / "logs", clock=SimClock(T0)))

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
# Valid and invalid inputs alike: an invalid one must get a 4xx problem, never a 5xx.
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])

# Not negative_data_rejection: pydantic's lax mode accepts e.g. ``false`` for a float and FastAPI
# takes the last of repeated scalar query parameters, which that check reports as accepted
# "schema-violating" requests.
CHECKS: list[Any] = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN_SECRET}"}, checks=CHECKS)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_for_a_member(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {MEMBER_SECRET}"}, checks=CHECKS)
