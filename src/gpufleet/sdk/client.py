"""The Python SDK: a typed client of the REST API ``/v1`` (sync :class:`Client`, async :class:`AsyncClient`).

Both clients speak the wire models of :mod:`gpufleet.wire` (never copies of them) and share everything
but the I/O: each method builds a :class:`_Call` (method, path, query, body, how to parse the answer)
and the client sends it through one retry loop.

Why retries are safe for every method, POST included:

- ``submit`` sends an ``Idempotency-Key`` (a fresh uuid4 per call unless given), the same on every
  attempt, so a retry after a lost response returns the job created by the first attempt instead of
  creating a second one;
- ``cancel`` and token revocation are idempotent on the server; everything else is a read or a PUT.

Retried: connection errors, timeouts, and 429/502/503/504 answers (honouring ``Retry-After``), with
exponential backoff and jitter. After the last try a connection error becomes :class:`ServerUnavailable`
(naming the URL); an error answer becomes an :class:`ApiError` built from its RFC 9457 problem body.
"""

from __future__ import annotations

import asyncio
import builtins
import email.utils
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpufleet import __version__
from gpufleet.errors import (
    AuthError,
    ConflictError,
    GpufleetError,
    InputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from gpufleet.sdk.config import resolve_token, resolve_url
from gpufleet.wire import (
    AnomalyOut,
    BudgetCheckOut,
    BudgetIn,
    BudgetOut,
    BudgetStatusOut,
    JobEventOut,
    JobForecastOut,
    JobOut,
    JobPage,
    JobSubmit,
    NodeOut,
    Problem,
    ProgressIn,
    QueueEntry,
    RecommendationOut,
    RoiOut,
    Role,
    SpendForecastOut,
    TeamIn,
    TeamOut,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UsageReport,
    WhoAmI,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

API_PREFIX = "/v1"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_BACKOFF_S = 10.0  # one sleep never exceeds this (Retry-After is capped at MAX_RETRY_AFTER_S)
MAX_RETRY_AFTER_S = 60.0
PAGE_SIZE = 100
_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_USER_AGENT = f"gpufleet-sdk/{__version__}"


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


class ApiUnavailable(ApiError, StoreError):
    """502 / 503 / 504 after every retry: the server is up but cannot serve (store down, overloaded)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
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


# ------------------------------------------------------------------------------------------------ calls


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One API call, independent of sync or async I/O."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: list[tuple[str, str]] = field(default_factory=list)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def _model(cls: type[M]) -> Callable[[httpx.Response], M]:
    def parse(resp: httpx.Response) -> M:
        try:
            return cls.model_validate_json(resp.content)
        except ValidationError as e:
            raise _bad_response(resp, e) from None

    return parse


def _models(cls: type[M]) -> Callable[[httpx.Response], builtins.list[M]]:
    adapter = TypeAdapter(builtins.list[cls])  # type: ignore[valid-type]

    def parse(resp: httpx.Response) -> builtins.list[M]:
        try:
            items: builtins.list[M] = adapter.validate_json(resp.content)
        except ValidationError as e:
            raise _bad_response(resp, e) from None
        return items

    return parse


def _nothing(resp: httpx.Response) -> None:
    return None


def _json_any(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        return {"status": resp.text.strip() or "ok"}
    return body if isinstance(body, dict) else {"status": body}


def _bad_response(resp: httpx.Response, e: ValidationError) -> ResponseError:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return ResponseError(
        f"{resp.request.method} {resp.request.url.path}: the server's answer does not match this SDK "
        f"({where}: {first['msg']}); are the client and server the same version?"
    )


def _job_path(job_id: str, suffix: str = "") -> str:
    if not job_id or "/" in job_id:
        raise InputError(f"not a job id: {job_id!r}", field="job_id")
    return f"{API_PREFIX}/jobs/{job_id}{suffix}"


def _submit_call(spec: JobSubmit | None, idempotency_key: str | None, fields: Mapping[str, Any]) -> _Call[JobOut]:
    if spec is not None and not isinstance(spec, JobSubmit):
        raise InputError(f"expected a JobSubmit, got {type(spec).__name__}", field="spec")
    try:
        if spec is None:
            job = JobSubmit.model_validate(dict(fields))
        elif fields:
            job = JobSubmit.model_validate({**spec.model_dump(), **fields})
        else:
            job = spec
    except ValidationError as e:
        raise input_error_from(e) from None
    key = idempotency_key or str(uuid.uuid4())
    return _Call(
        "POST",
        f"{API_PREFIX}/jobs",
        _model(JobOut),
        json=job.model_dump(mode="json", exclude_defaults=True),
        headers={"Idempotency-Key": key},
    )


def input_error_from(e: ValidationError) -> InputError:
    """A local validation failure as one line naming the fields (like the server's 422)."""
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return InputError("; ".join(parts))


def _list_params(
    *,
    team: str | None,
    state: str | Sequence[str] | None,
    project: str | None,
    labels: Mapping[str, str] | None,
    limit: int,
    cursor: str | None,
) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = [("limit", str(limit))]
    if team:
        params.append(("team", team))
    if state:
        states = [state] if isinstance(state, str) else list(state)
        params.extend(("state", s.upper()) for s in states)
    if project:
        params.append(("project", project))
    for k, v in (labels or {}).items():
        params.append(("label", f"{k}={v}"))
    if cursor:
        params.append(("cursor", cursor))
    return params


def _page_call(params: list[tuple[str, str]]) -> _Call[JobPage]:
    return _Call("GET", f"{API_PREFIX}/jobs", _model(JobPage), params=params)


def _team_in(team: TeamIn | None, fields: Mapping[str, Any]) -> TeamIn:
    try:
        if team is None:
            return TeamIn.model_validate(dict(fields))
        if fields:
            return TeamIn.model_validate({**team.model_dump(), **fields})
        return team
    except ValidationError as e:
        raise input_error_from(e) from None


def _usage_call(
    window: str,
    aggregate: str | Sequence[str],
    spread_idle: bool,
    team: str | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
) -> _Call[UsageReport]:
    agg = aggregate if isinstance(aggregate, str) else ",".join(aggregate)
    params = [("window", window), ("aggregate", agg), ("spread_idle", "true" if spread_idle else "false")]
    if team is not None:
        params.append(("team", team))
    items = [f"{k}={v}" for k, v in labels.items()] if isinstance(labels, Mapping) else list(labels or ())
    params.extend(("label", item) for item in items)
    return _Call("GET", f"{API_PREFIX}/usage", _model(UsageReport), params=params)


def _token_call(team: str, role: Role | str, name: str, expires_in_days: float | None) -> _Call[TokenCreated]:
    try:
        body = TokenCreate(team=team, role=Role(role), name=name, expires_in_days=expires_in_days)
    except ValueError as e:  # ValidationError is a ValueError; so is an unknown role
        if isinstance(e, ValidationError):
            raise input_error_from(e) from None
        raise InputError(f"unknown role {role!r} (admin, member or viewer)", field="role") from None
    return _Call("POST", f"{API_PREFIX}/tokens", _model(TokenCreated), json=body.model_dump(mode="json"))


class _LineSplitter:
    """Bytes in, complete lines out (newline kept); counts the bytes handed out so a broken stream can
    resume at the byte ``offset`` after the last whole line it delivered."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self._buf = b""

    def feed(self, chunk: bytes) -> list[str]:
        self._buf += chunk
        if b"\n" not in self._buf:
            return []
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for raw in lines:
            self.offset += len(raw) + 1
            out.append(raw.decode("utf-8", errors="replace") + "\n")
        return out

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, b""
        if not rest:
            return []
        self.offset += len(rest)
        return [rest.decode("utf-8", errors="replace")]

    def drop_partial(self) -> None:
        self._buf = b""


# ------------------------------------------------------------------------------------------------ retry


@dataclass
class _RetryPolicy:
    retries: int
    backoff: float

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before try ``attempt + 2``: the server's Retry-After if it gave one, else
        exponential backoff with jitter (so a fleet of clients does not retry in lockstep)."""
        if retry_after:
            parsed = _parse_retry_after(retry_after)
            if parsed is not None:
                return min(parsed, MAX_RETRY_AFTER_S)
        base = min(self.backoff * (2.0**attempt), MAX_BACKOFF_S)
        return base * (0.5 + random.random() / 2)


def _parse_retry_after(value: str) -> float | None:
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _headers(token: str | None) -> dict[str, str]:
    h = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


# ------------------------------------------------------------------------------------------------ sync


class Client:
    """A blocking client of the gpufleet API.

    ``url`` and ``token`` default as in :mod:`gpufleet.sdk.config` (argument > environment > the server's
    home). ``retries`` is the number of retries after the first try. ``transport`` replaces the network
    (``httpx.MockTransport``, a test server's transport).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token)
        self.timeout = timeout
        self._policy = _RetryPolicy(max(0, retries), max(0.0, backoff))
        self._sleep: Callable[[float], None] = time.sleep
        self._http = httpx.Client(base_url=self.url, headers=_headers(self.token), timeout=timeout, transport=transport)

    @property
    def retries(self) -> int:
        return self._policy.retries

    # -- plumbing

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    def _send(self, call: _Call[Any], *, stream: bool = False, timeout: httpx.Timeout | None = None) -> httpx.Response:
        attempt = 0
        while True:
            request = self._http.build_request(
                call.method,
                call.path,
                params=tuple(call.params),
                json=call.json,
                headers=call.headers or None,
                timeout=timeout if timeout is not None else self.timeout,
            )
            try:
                resp = self._http.send(request, stream=stream)
            except _RETRYABLE_TRANSPORT as e:
                if attempt >= self._policy.retries:
                    raise ServerUnavailable(self.url, e, attempt + 1) from None
                self._sleep(self._policy.delay(attempt, None))
                attempt += 1
                continue
            except httpx.TransportError as e:  # a bad URL or proxy: retrying will not help
                raise ServerUnavailable(self.url, e) from None
            if resp.status_code in RETRY_STATUSES and attempt < self._policy.retries:
                retry_after = resp.headers.get("Retry-After")
                resp.close()
                self._sleep(self._policy.delay(attempt, retry_after))
                attempt += 1
                continue
            if resp.status_code >= 400:
                if stream:
                    resp.read()
                    resp.close()
                raise error_from_response(resp)
            return resp

    def _do(self, call: _Call[T]) -> T:
        return call.parse(self._send(call))

    # -- jobs

    def submit(self, spec: JobSubmit | None = None, /, *, idempotency_key: str | None = None, **fields: Any) -> JobOut:
        """Submit a job (a :class:`~gpufleet.wire.JobSubmit`, or its fields as keywords, or both: the
        keywords override). Retries reuse one ``Idempotency-Key``, so at most one job is created."""
        return self._do(_submit_call(spec, idempotency_key, fields))

    def get(self, job_id: str) -> JobOut:
        return self._do(_Call("GET", _job_path(job_id), _model(JobOut)))

    def list(
        self,
        *,
        team: str | None = None,
        state: str | Sequence[str] | None = None,
        project: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int = 100,
    ) -> builtins.list[JobOut]:
        """At most ``limit`` jobs, newest first (following cursors when ``limit`` exceeds a page)."""
        out: builtins.list[JobOut] = []
        if limit <= 0:
            return out
        for job in self.iter_jobs(
            team=team, state=state, project=project, labels=labels, page_size=min(limit, PAGE_SIZE)
        ):
            out.append(job)
            if len(out) >= limit:  # before asking for more: never fetch a page that is not needed
                break
        return out

    def iter_jobs(
        self,
        *,
        team: str | None = None,
        state: str | Sequence[str] | None = None,
        project: str | None = None,
        labels: Mapping[str, str] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[JobOut]:
        """Every matching job, one page at a time (lazily: stop iterating and no more pages are fetched)."""
        cursor: str | None = None
        while True:
            params = _list_params(
                team=team, state=state, project=project, labels=labels, limit=page_size, cursor=cursor
            )
            page = self._do(_page_call(params))
            yield from page.items
            if not page.next_cursor or not page.items:
                return
            cursor = page.next_cursor

    def wait(self, job_id: str, *, timeout: float | None = None, poll_interval: float = 0.5) -> JobOut:
        """Poll until the job is terminal and return it; :class:`WaitTimeout` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.terminal:
                return job
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(job_id, timeout or 0.0, job.state)
                self._sleep(min(poll_interval, left))
            else:
                self._sleep(poll_interval)

    def cancel(self, job_id: str) -> JobOut:
        """Ask to cancel a job (idempotent). A running job comes back still RUNNING with
        ``cancel_requested`` while it is being stopped."""
        return self._do(_Call("POST", _job_path(job_id, "/cancel"), _model(JobOut)))

    def events(self, job_id: str) -> builtins.list[JobEventOut]:
        return self._do(_Call("GET", _job_path(job_id, "/events"), _models(JobEventOut)))

    def logs(self, job_id: str, *, follow: bool = False, offset: int = 0) -> Iterator[str]:
        """The job's output, line by line (newlines kept), streamed as the server sends it.

        ``offset`` is a byte offset into the log. With ``follow`` the stream lasts until the job ends;
        if the connection breaks, it is reopened at the byte after the last whole line delivered.
        """
        path = _job_path(job_id, "/logs")
        splitter = _LineSplitter(offset)
        timeout = httpx.Timeout(self.timeout, read=None) if follow else None
        broken = 0
        while True:
            params = [("offset", str(splitter.offset))] + ([("follow", "true")] if follow else [])
            resp = self._send(_Call("GET", path, _nothing, params=params), stream=True, timeout=timeout)
            try:
                for chunk in resp.iter_bytes():
                    yield from splitter.feed(chunk)
                    broken = 0
            except _RETRYABLE_TRANSPORT as e:
                broken += 1
                if broken > self._policy.retries:
                    raise ServerUnavailable(self.url, e, broken) from None
                splitter.drop_partial()
                self._sleep(self._policy.delay(broken - 1, None))
                continue
            finally:
                resp.close()
            yield from splitter.flush()
            return

    # -- cluster

    def queue(self, team: str | None = None) -> builtins.list[QueueEntry]:
        params = [("team", team)] if team else []
        return self._do(_Call("GET", f"{API_PREFIX}/queue", _models(QueueEntry), params=params))

    def nodes(self) -> builtins.list[NodeOut]:
        return self._do(_Call("GET", f"{API_PREFIX}/nodes", _models(NodeOut)))

    # -- teams and tokens

    def teams(self) -> builtins.list[TeamOut]:
        return self._do(_Call("GET", f"{API_PREFIX}/teams", _models(TeamOut)))

    def team(self, name: str) -> TeamOut:
        return self._do(_Call("GET", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut)))

    def set_team(self, name: str, team: TeamIn | None = None, /, **fields: Any) -> TeamOut:
        """Create or replace a team (admin). Fields not given take :class:`TeamIn`'s defaults."""
        body = _team_in(team, fields).model_dump(mode="json")
        return self._do(_Call("PUT", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut), json=body))

    def create_token(
        self, team: str, role: Role | str = Role.MEMBER, name: str = "", expires_in_days: float | None = None
    ) -> TokenCreated:
        """A new token (admin); its secret (``.token``) is returned this once and never again."""
        return self._do(_token_call(team, role, name, expires_in_days))

    def tokens(self) -> builtins.list[TokenOut]:
        return self._do(_Call("GET", f"{API_PREFIX}/tokens", _models(TokenOut)))

    def revoke_token(self, token_id: str) -> None:
        self._do(_Call("DELETE", f"{API_PREFIX}/tokens/{quote(token_id, safe='')}", _nothing))

    # -- money and identity

    def usage(
        self,
        window: str = "7d",
        aggregate: str | Sequence[str] = "team",
        spread_idle: bool = False,
        *,
        team: str | None = None,
        labels: Mapping[str, str] | Sequence[str] | None = None,
    ) -> UsageReport:
        """Cost and GPU-hours over ``window`` (e.g. ``24h``, ``7d``), grouped by ``aggregate`` fields,
        optionally only for ``team`` and jobs with ``labels`` (``{"k": "v"}`` or ``["k=v"]``)."""
        return self._do(_usage_call(window, aggregate, spread_idle, team, labels))

    costs = usage

    def whoami(self) -> WhoAmI:
        return self._do(_Call("GET", f"{API_PREFIX}/whoami", _model(WhoAmI)))

    def health(self) -> dict[str, Any]:
        """``/healthz`` (no auth): the server process answers."""
        return self._do(_Call("GET", "/healthz", _json_any))

    # -- budgets

    def create_budget(self, budget: BudgetIn | None = None, /, **fields: Any) -> BudgetOut:
        """Create a budget (admin): ``create_budget(name="vision-monthly", scope="team:vision", limit_usd=5000)``."""
        return self._do(_budget_call("POST", f"{API_PREFIX}/budgets", budget, fields))

    def budgets(self) -> builtins.list[BudgetOut]:
        return self._do(_Call("GET", f"{API_PREFIX}/budgets", _models(BudgetOut)))

    def budget(self, ref: str) -> BudgetOut:
        """A budget by id or name."""
        return self._do(_Call("GET", _budget_path(ref), _model(BudgetOut)))

    def update_budget(self, ref: str, budget: BudgetIn | None = None, /, **fields: Any) -> BudgetOut:
        """Replace a budget (admin); fields not given take :class:`BudgetIn`'s defaults."""
        return self._do(_budget_call("PUT", _budget_path(ref), budget, fields))

    def delete_budget(self, ref: str) -> None:
        self._do(_Call("DELETE", _budget_path(ref), _nothing))

    def budget_status(self, ref: str) -> BudgetStatusOut:
        """Spend, percent used, projection, days left and alerts of the current period."""
        return self._do(_Call("GET", _budget_path(ref, "/status"), _model(BudgetStatusOut)))

    def check_budget(self, spec: JobSubmit | None = None, /, **fields: Any) -> BudgetCheckOut:
        """Would this job fit the budgets covering it? (Its estimated cost against what is left.)"""
        return self._do(_check_call(spec, fields))

    # -- insights (cost management): progress, forecasts, anomalies, recommendations, ROI

    def report_progress(
        self,
        job_id: str,
        step: float | None = None,
        total_steps: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> JobForecastOut:
        """Report a running job's progress (steps of total, metrics); returns its cost forecast."""
        return self._do(_progress_call(job_id, step, total_steps, metrics))

    def forecast(self, job_id: str) -> JobForecastOut:
        """A job's remaining cost, with an interval."""
        return self._do(_Call("GET", _job_path(job_id, "/forecast"), _model(JobForecastOut)))

    def forecast_spend(self, team: str | None = None, period: str = "month", level: float = 0.9) -> SpendForecastOut:
        """A scope's (all, or a team's) spend at the end of the month or week."""
        return self._do(_spend_call(team, period, level))

    def anomalies(
        self, days: int = 30, threshold: float = 0.2, min_increase_usd: float = 50.0, team: str | None = None
    ) -> builtins.list[AnomalyOut]:
        """Daily cost anomalies over the last ``days`` complete days, with their causes."""
        return self._do(_anomalies_call(days, threshold, min_increase_usd, team))

    def recommendations(
        self, window: str = "7d", reserved_discount: float | None = None
    ) -> builtins.list[RecommendationOut]:
        """Ways to spend less, largest $ per month first."""
        return self._do(_recs_call(window, reserved_discount))

    def roi(
        self, window: str = "30d", platform_cost_usd: float = 0.0, platform_cost_usd_per_month: float = 0.0
    ) -> RoiOut:
        """Savings against a fixed on-demand cluster sized for the peak, by lever."""
        return self._do(_roi_call(window, platform_cost_usd, platform_cost_usd_per_month))


# ------------------------------------------------------------------------------------------------ async


class AsyncClient:
    """The asyncio twin of :class:`Client`: same arguments, same methods, awaited."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token)
        self.timeout = timeout
        self._policy = _RetryPolicy(max(0, retries), max(0.0, backoff))
        self._sleep: Callable[[float], Any] = asyncio.sleep
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(self.token), timeout=timeout, transport=transport
        )

    @property
    def retries(self) -> int:
        return self._policy.retries

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient(url={self.url!r})"

    async def _send(
        self, call: _Call[Any], *, stream: bool = False, timeout: httpx.Timeout | None = None
    ) -> httpx.Response:
        attempt = 0
        while True:
            request = self._http.build_request(
                call.method,
                call.path,
                params=tuple(call.params),
                json=call.json,
                headers=call.headers or None,
                timeout=timeout if timeout is not None else self.timeout,
            )
            try:
                resp = await self._http.send(request, stream=stream)
            except _RETRYABLE_TRANSPORT as e:
                if attempt >= self._policy.retries:
                    raise ServerUnavailable(self.url, e, attempt + 1) from None
                await self._sleep(self._policy.delay(attempt, None))
                attempt += 1
                continue
            except httpx.TransportError as e:
                raise ServerUnavailable(self.url, e) from None
            if resp.status_code in RETRY_STATUSES and attempt < self._policy.retries:
                retry_after = resp.headers.get("Retry-After")
                await resp.aclose()
                await self._sleep(self._policy.delay(attempt, retry_after))
                attempt += 1
                continue
            if resp.status_code >= 400:
                if stream:
                    await resp.aread()
                    await resp.aclose()
                raise error_from_response(resp)
            return resp

    async def _do(self, call: _Call[T]) -> T:
        return call.parse(await self._send(call))

    async def submit(
        self, spec: JobSubmit | None = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> JobOut:
        return await self._do(_submit_call(spec, idempotency_key, fields))

    async def get(self, job_id: str) -> JobOut:
        return await self._do(_Call("GET", _job_path(job_id), _model(JobOut)))

    async def list(
        self,
        *,
        team: str | None = None,
        state: str | Sequence[str] | None = None,
        project: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int = 100,
    ) -> builtins.list[JobOut]:
        out: builtins.list[JobOut] = []
        if limit <= 0:
            return out
        async for job in self.iter_jobs(
            team=team, state=state, project=project, labels=labels, page_size=min(limit, PAGE_SIZE)
        ):
            out.append(job)
            if len(out) >= limit:  # before asking for more: never fetch a page that is not needed
                break
        return out

    async def iter_jobs(
        self,
        *,
        team: str | None = None,
        state: str | Sequence[str] | None = None,
        project: str | None = None,
        labels: Mapping[str, str] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[JobOut]:
        cursor: str | None = None
        while True:
            params = _list_params(
                team=team, state=state, project=project, labels=labels, limit=page_size, cursor=cursor
            )
            page = await self._do(_page_call(params))
            for job in page.items:
                yield job
            if not page.next_cursor or not page.items:
                return
            cursor = page.next_cursor

    async def wait(self, job_id: str, *, timeout: float | None = None, poll_interval: float = 0.5) -> JobOut:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self.get(job_id)
            if job.terminal:
                return job
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(job_id, timeout or 0.0, job.state)
                await self._sleep(min(poll_interval, left))
            else:
                await self._sleep(poll_interval)

    async def cancel(self, job_id: str) -> JobOut:
        return await self._do(_Call("POST", _job_path(job_id, "/cancel"), _model(JobOut)))

    async def events(self, job_id: str) -> builtins.list[JobEventOut]:
        return await self._do(_Call("GET", _job_path(job_id, "/events"), _models(JobEventOut)))

    async def logs(self, job_id: str, *, follow: bool = False, offset: int = 0) -> AsyncIterator[str]:
        path = _job_path(job_id, "/logs")
        splitter = _LineSplitter(offset)
        timeout = httpx.Timeout(self.timeout, read=None) if follow else None
        broken = 0
        while True:
            params = [("offset", str(splitter.offset))] + ([("follow", "true")] if follow else [])
            resp = await self._send(_Call("GET", path, _nothing, params=params), stream=True, timeout=timeout)
            try:
                async for chunk in resp.aiter_bytes():
                    for line in splitter.feed(chunk):
                        yield line
                    broken = 0
            except _RETRYABLE_TRANSPORT as e:
                broken += 1
                if broken > self._policy.retries:
                    raise ServerUnavailable(self.url, e, broken) from None
                splitter.drop_partial()
                await self._sleep(self._policy.delay(broken - 1, None))
                continue
            finally:
                await resp.aclose()
            for line in splitter.flush():
                yield line
            return

    async def queue(self, team: str | None = None) -> builtins.list[QueueEntry]:
        params = [("team", team)] if team else []
        return await self._do(_Call("GET", f"{API_PREFIX}/queue", _models(QueueEntry), params=params))

    async def nodes(self) -> builtins.list[NodeOut]:
        return await self._do(_Call("GET", f"{API_PREFIX}/nodes", _models(NodeOut)))

    async def teams(self) -> builtins.list[TeamOut]:
        return await self._do(_Call("GET", f"{API_PREFIX}/teams", _models(TeamOut)))

    async def team(self, name: str) -> TeamOut:
        return await self._do(_Call("GET", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut)))

    async def set_team(self, name: str, team: TeamIn | None = None, /, **fields: Any) -> TeamOut:
        body = _team_in(team, fields).model_dump(mode="json")
        return await self._do(_Call("PUT", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut), json=body))

    async def create_token(
        self, team: str, role: Role | str = Role.MEMBER, name: str = "", expires_in_days: float | None = None
    ) -> TokenCreated:
        return await self._do(_token_call(team, role, name, expires_in_days))

    async def tokens(self) -> builtins.list[TokenOut]:
        return await self._do(_Call("GET", f"{API_PREFIX}/tokens", _models(TokenOut)))

    async def revoke_token(self, token_id: str) -> None:
        await self._do(_Call("DELETE", f"{API_PREFIX}/tokens/{quote(token_id, safe='')}", _nothing))

    async def usage(
        self,
        window: str = "7d",
        aggregate: str | Sequence[str] = "team",
        spread_idle: bool = False,
        *,
        team: str | None = None,
        labels: Mapping[str, str] | Sequence[str] | None = None,
    ) -> UsageReport:
        return await self._do(_usage_call(window, aggregate, spread_idle, team, labels))

    costs = usage

    async def whoami(self) -> WhoAmI:
        return await self._do(_Call("GET", f"{API_PREFIX}/whoami", _model(WhoAmI)))

    async def health(self) -> dict[str, Any]:
        return await self._do(_Call("GET", "/healthz", _json_any))

    # -- budgets

    async def create_budget(self, budget: BudgetIn | None = None, /, **fields: Any) -> BudgetOut:
        return await self._do(_budget_call("POST", f"{API_PREFIX}/budgets", budget, fields))

    async def budgets(self) -> builtins.list[BudgetOut]:
        return await self._do(_Call("GET", f"{API_PREFIX}/budgets", _models(BudgetOut)))

    async def budget(self, ref: str) -> BudgetOut:
        return await self._do(_Call("GET", _budget_path(ref), _model(BudgetOut)))

    async def update_budget(self, ref: str, budget: BudgetIn | None = None, /, **fields: Any) -> BudgetOut:
        return await self._do(_budget_call("PUT", _budget_path(ref), budget, fields))

    async def delete_budget(self, ref: str) -> None:
        await self._do(_Call("DELETE", _budget_path(ref), _nothing))

    async def budget_status(self, ref: str) -> BudgetStatusOut:
        return await self._do(_Call("GET", _budget_path(ref, "/status"), _model(BudgetStatusOut)))

    async def check_budget(self, spec: JobSubmit | None = None, /, **fields: Any) -> BudgetCheckOut:
        return await self._do(_check_call(spec, fields))

    # -- insights

    async def report_progress(
        self,
        job_id: str,
        step: float | None = None,
        total_steps: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> JobForecastOut:
        return await self._do(_progress_call(job_id, step, total_steps, metrics))

    async def forecast(self, job_id: str) -> JobForecastOut:
        return await self._do(_Call("GET", _job_path(job_id, "/forecast"), _model(JobForecastOut)))

    async def forecast_spend(
        self, team: str | None = None, period: str = "month", level: float = 0.9
    ) -> SpendForecastOut:
        return await self._do(_spend_call(team, period, level))

    async def anomalies(
        self, days: int = 30, threshold: float = 0.2, min_increase_usd: float = 50.0, team: str | None = None
    ) -> builtins.list[AnomalyOut]:
        return await self._do(_anomalies_call(days, threshold, min_increase_usd, team))

    async def recommendations(
        self, window: str = "7d", reserved_discount: float | None = None
    ) -> builtins.list[RecommendationOut]:
        return await self._do(_recs_call(window, reserved_discount))

    async def roi(
        self, window: str = "30d", platform_cost_usd: float = 0.0, platform_cost_usd_per_month: float = 0.0
    ) -> RoiOut:
        return await self._do(_roi_call(window, platform_cost_usd, platform_cost_usd_per_month))


# ---------------------------------------------------------------------------------------------- budgets


def _budget_path(ref: str, suffix: str = "") -> str:
    return f"{API_PREFIX}/budgets/{quote(ref, safe='')}{suffix}"


def _budget_call(method: str, path: str, budget: BudgetIn | None, fields: Mapping[str, Any]) -> _Call[BudgetOut]:
    try:
        if budget is None:
            body = BudgetIn.model_validate(dict(fields))
        elif fields:
            body = BudgetIn.model_validate({**budget.model_dump(), **fields})
        else:
            body = budget
    except ValidationError as e:
        raise input_error_from(e) from None
    return _Call(method, path, _model(BudgetOut), json=body.model_dump(mode="json", exclude_none=True))


def _check_call(spec: JobSubmit | None, fields: Mapping[str, Any]) -> _Call[BudgetCheckOut]:
    try:
        job = (
            spec
            if spec is not None and not fields
            else JobSubmit.model_validate({**(spec.model_dump() if spec is not None else {}), **fields})
        )
    except ValidationError as e:
        raise input_error_from(e) from None
    body = job.model_dump(mode="json", exclude_defaults=True)
    return _Call("POST", f"{API_PREFIX}/budgets/check", _model(BudgetCheckOut), json=body)


# --------------------------------------------------------------------------------------------- insights


def _progress_call(
    job_id: str, step: float | None, total_steps: float | None, metrics: Mapping[str, float] | None
) -> _Call[JobForecastOut]:
    try:
        body = ProgressIn(step=step, total_steps=total_steps, metrics=dict(metrics or {}))
    except ValidationError as e:
        raise input_error_from(e) from None
    return _Call("POST", _job_path(job_id, "/progress"), _model(JobForecastOut), json=body.model_dump(mode="json"))


def _spend_call(team: str | None, period: str, level: float) -> _Call[SpendForecastOut]:
    params = [("period", period), ("level", str(level))]
    if team:
        params.append(("team", team))
    return _Call("GET", f"{API_PREFIX}/forecast", _model(SpendForecastOut), params=params)


def _anomalies_call(days: int, threshold: float, floor: float, team: str | None) -> _Call[builtins.list[AnomalyOut]]:
    params = [("days", str(days)), ("threshold", str(threshold)), ("min_increase_usd", str(floor))]
    if team:
        params.append(("team", team))
    return _Call("GET", f"{API_PREFIX}/anomalies", _models(AnomalyOut), params=params)


def _recs_call(window: str, reserved_discount: float | None) -> _Call[builtins.list[RecommendationOut]]:
    params = [("window", window)]
    if reserved_discount is not None:
        params.append(("reserved_discount", str(reserved_discount)))
    return _Call("GET", f"{API_PREFIX}/recommendations", _models(RecommendationOut), params=params)


def _roi_call(window: str, platform: float, per_month: float) -> _Call[RoiOut]:
    params = [("window", window), ("platform_cost_usd", str(platform)), ("platform_cost_usd_per_month", str(per_month))]
    return _Call("GET", f"{API_PREFIX}/roi", _model(RoiOut), params=params)
