"""The SDK's errors: RFC 9457 problem documents as exceptions a caller can catch by kind."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from gpufleet.errors import (
    AuthError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from gpufleet.wire import (
    Problem,
)

# ---------------------------------------------------------------------------------------------- errors


class ServerUnavailable(GpufleetError):
    """The server could not be reached (connection refused, DNS, timeouts) after every retry."""

    code = "server_unavailable"

    def __init__(self, url: str, cause: BaseException | None = None, attempts: int = 1) -> None:
        self.url = url
        self.attempts = attempts
        why = f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else ""
        if cause is not None and not why:
            why = f" ({type(cause).__name__})"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"cannot reach the gpufleet server at {url}{tries}{why} — is `gpufleet up` running?")


class WaitTimeout(GpufleetError, TimeoutError):
    """:meth:`Client.wait` gave up before the job reached a terminal state."""

    code = "wait_timeout"

    def __init__(self, job_id: str, timeout: float, state: str) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.state = state
        super().__init__(f"job {job_id} is still {state} after waiting {timeout:g}s")


class ResponseError(GpufleetError):
    """The server answered with something that does not match the API (a version skew or a proxy)."""

    code = "bad_response"


class ApiError(GpufleetError):
    """An error answer of the API, built from its RFC 9457 problem document.

    ``str(err)`` is one line: ``"<status> <code>: <field>: <message>; ..."`` or
    ``"<status> <code>: <detail>"``. Catch the subclasses (or the matching :mod:`gpufleet.errors`
    families they also derive from) to react to one kind of failure.
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.status = problem.status
        self.code = problem.code  # instance attribute shadows the class-level family code
        self.title = problem.title
        self.detail = problem.detail
        self.errors = list(problem.errors)
        if self.errors:
            what = "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in self.errors)
        else:
            what = problem.detail or problem.title
        line = " ".join(f"{problem.status} {problem.code}: {what}".split())
        # Not super().__init__: some families (InputError) take other arguments; the message is ours.
        GpufleetError.__init__(self, line)


class InvalidRequest(ApiError, InputError):
    """400 / 422: the request was refused as bad input (see ``errors`` for the fields at fault)."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem)
        self.source = None
        self.line = None
        self.field = problem.errors[0].field if problem.errors else None


class Unauthorized(ApiError, AuthError):
    """401: no token, or a token that is unknown, expired or revoked."""


class Forbidden(ApiError, PermissionDeniedError):
    """403: the token's role or team does not allow this."""


class NotFound(ApiError, NotFoundError):
    """404: no such job, team or token (or one the caller may not see)."""


class Conflict(ApiError, ConflictError):
    """409: the request conflicts with stored state (e.g. an idempotency key reused for another job)."""


class BudgetExceeded(ApiError, ConflictError):
    """402: a ``block`` budget refuses the job (its estimate would take the committed spend past the
    limit): the same condition ``gpufleet budget check`` reports, with the same exit code (6)."""


class ApiUnavailable(ApiError, StoreError):
    """502 / 503 / 504 after every retry: the server is up but cannot serve (store down, overloaded)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    402: BudgetExceeded,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
    502: ApiUnavailable,
    503: ApiUnavailable,
    504: ApiUnavailable,
}


def problem_from_response(resp: httpx.Response) -> Problem:
    """The response's problem document, or one made up from whatever the body says (a proxy's HTML page,
    FastAPI's default ``{"detail": ...}``) so the caller always gets one clear line."""
    status = resp.status_code
    reason = resp.reason_phrase or "error"
    fallback_code = "_".join(reason.lower().split()) or f"http_{status}"
    try:
        body: Any = resp.json()
    except ValueError:
        text = " ".join(resp.text.split())[:200] if resp.content else ""
        return Problem(title=reason, status=status, detail=text or reason, code=fallback_code)
    if isinstance(body, dict):
        try:
            return Problem.model_validate({**body, "status": body.get("status", status)})
        except ValidationError:
            pass
        detail = body.get("detail", body.get("message", reason))
        if not isinstance(detail, str):
            detail = str(detail)
        return Problem(title=reason, status=status, detail=detail, code=str(body.get("code") or fallback_code))
    return Problem(title=reason, status=status, detail=str(body)[:200], code=fallback_code)


def error_from_response(resp: httpx.Response) -> ApiError:
    problem = problem_from_response(resp)
    cls = _BY_STATUS.get(resp.status_code, ApiError)
    return cls(problem)
