"""Every error as an RFC 9457 problem document (``application/problem+json``, :class:`wire.Problem`).

Handlers are installed for request validation, every :class:`GpufleetError` (mapped by type to a
status), Starlette's HTTP errors (unknown route, wrong method) and anything unexpected (a 500 whose
traceback goes to the log, never to the client). ``code`` strings are stable: clients branch on them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.errors import (
    AuthError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    TransitionError,
)
from gpufleet.wire import FieldError, Problem

log = logging.getLogger(__name__)

_FIELD_PREFIX = re.compile(r"^field '[^']*': ")  # InputError's own prefix; FieldError names the field

PROBLEM_JSON = "application/problem+json"

# Most specific first: the first matching class gives the status.
_STATUS: tuple[tuple[type[GpufleetError], int], ...] = (
    (InputError, 422),
    (NotFoundError, 404),
    (ConflictError, 409),
    (TransitionError, 409),
    (AuthError, 401),
    (PermissionDeniedError, 403),
    (StoreError, 503),
)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


def problem_response(
    status: int,
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    errors: Sequence[FieldError] = (),
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem document response (the one way this API reports an error)."""
    doc = Problem(
        title=_title(status),
        status=status,
        detail=detail,
        code=code,
        instance=instance,
        errors=list(errors),
    )
    return Response(
        content=doc.model_dump_json(),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def status_of(exc: GpufleetError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


@contextlib.contextmanager
def input_at(location: str) -> Iterator[None]:
    """Prefix the field of any :class:`InputError` raised inside with ``location`` (``body``,
    ``query``, ``path``), so it names the place the same way request validation does."""
    try:
        yield
    except InputError as exc:
        if exc.field and not exc.field.startswith(f"{location}."):
            exc.field = f"{location}.{exc.field}"
        raise


def _loc(parts: Sequence[Any]) -> str:
    """``("body", "gpu_types", 0)`` → ``body.gpu_types[0]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text.isprintable():  # e.g. a map key holding a control character: escaped, never raw
                text = text.encode("unicode_escape").decode("ascii")
            out += f".{text}" if out else text
    return out or "request"


def _validation_errors(exc: RequestValidationError) -> list[FieldError]:
    errors = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        kind = err.get("type", "")
        msg = str(err.get("msg", "invalid value"))
        if kind == "json_invalid":
            ctx = err.get("ctx") or {}
            where = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
            msg = f"malformed JSON{where}: {ctx.get('error', msg)}"
            loc = ["body"]
        elif kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif kind == "missing":
            msg = "required"
        # Drop pydantic's tagged-union/function-name noise so the path reads like the payload.
        loc = [p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))]
        errors.append(FieldError(field=_loc(loc), message=msg))
    return errors


def install(app: FastAPI) -> None:
    """Register the problem handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = _validation_errors(exc)
        if any(e.message.startswith("malformed JSON") for e in errors):
            return problem_response(
                400,
                "malformed_json",
                "the request body is not valid JSON: " + "; ".join(f"{e.field}: {e.message}" for e in errors),
                instance=request.url.path,
                errors=errors,
            )
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
        if len(errors) > 5:
            detail += f"; and {len(errors) - 5} more"
        return problem_response(422, "invalid_input", detail, instance=request.url.path, errors=errors)

    @app.exception_handler(GpufleetError)
    async def _gpufleet(request: Request, exc: GpufleetError) -> Response:
        status = status_of(exc)
        if status == 500:
            log.error("unmapped gpufleet error on %s %s", request.method, request.url.path, exc_info=exc)
        errors: list[FieldError] = []
        if isinstance(exc, InputError) and exc.field:
            errors.append(FieldError(field=exc.field, message=_FIELD_PREFIX.sub("", exc.message, count=1)))
        headers = {"WWW-Authenticate": 'Bearer realm="gpufleet"'} if status == 401 else None
        return problem_response(
            status, exc.code, exc.message, instance=request.url.path, errors=errors, headers=headers
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        errors: list[FieldError] = []
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            code, detail = "malformed_json", "the request body is not valid UTF-8 JSON"
            errors.append(FieldError(field="body", message=detail))
        elif exc.status_code == 413:  # the body limit (api/app.py): the body is the field at fault
            errors.append(FieldError(field="body", message=detail))
        headers = dict(exc.headers or {})
        return problem_response(
            exc.status_code, code, detail, instance=request.url.path, errors=errors, headers=headers or None
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(
            500, "internal_error", "internal server error (logged on the server)", instance=request.url.path
        )


def document_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Make the OpenAPI document say what the server does: error responses are problem documents
    (``application/problem+json`` with the ``Problem`` schema), not FastAPI's default
    ``HTTPValidationError``."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in components["Problem"].pop("$defs", {}).items():
        components.setdefault(name, sub)
    ref = {"$ref": "#/components/schemas/Problem"}
    for item in schema.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            if "requestBody" in op:
                op["responses"].setdefault("400", {"description": "The body is not valid JSON"})
                op["responses"].setdefault(
                    "413", {"description": "The body is larger than the server's limit (setting max_body_bytes)"}
                )
            for status, resp in op["responses"].items():
                if status.isdigit() and int(status) >= 400:
                    resp["content"] = {PROBLEM_JSON: {"schema": ref}}
                    if status == "422":
                        resp["description"] = "Invalid input (each field at fault named in `errors`)"
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    return schema
