"""What each SDK method sends and how it reads the answer (shared by the sync and async clients),
and the retry policy."""

from __future__ import annotations

import builtins
import email.utils
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpufleet import __version__
from gpufleet.errors import (
    InputError,
)
from gpufleet.sdk.errors import ResponseError
from gpufleet.wire import (
    AnomalyOut,
    BudgetCheckOut,
    BudgetIn,
    BudgetOut,
    JobForecastOut,
    JobOut,
    JobPage,
    JobSubmit,
    ProgressIn,
    RecommendationOut,
    RoiOut,
    Role,
    SpendForecastOut,
    TeamIn,
    TokenCreate,
    TokenCreated,
    UsageReport,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

API_PREFIX = "/v1"
MAX_BACKOFF_S = 10.0  # one sleep never exceeds this (Retry-After is capped at MAX_RETRY_AFTER_S)
MAX_RETRY_AFTER_S = 60.0
_USER_AGENT = f"gpufleet-sdk/{__version__}"


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
            return TeamIn.model_validate({**team.model_dump(exclude=_team_kept(team)), **fields})
        return team
    except ValidationError as e:
        raise input_error_from(e) from None


# TeamIn fields the server leaves as they are when the body omits them (null clears them)
_KEPT_UNLESS_GIVEN = frozenset({"run_as", "priority_classes"})


def _team_kept(team: TeamIn) -> set[str]:
    return set(_KEPT_UNLESS_GIVEN - team.model_fields_set)


def _team_body(team: TeamIn) -> dict[str, Any]:
    """The PUT body: every field, except ``run_as``/``priority_classes`` when not given (kept)."""
    return team.model_dump(mode="json", exclude=_team_kept(team))


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


def _token_call(
    team: str,
    role: Role | str,
    name: str,
    expires_in_days: float | None,
    run_as: str | None = None,
    owner: str | None = None,
) -> _Call[TokenCreated]:
    """``POST /v1/tokens``; ``run_as`` and ``owner`` are sent only when given (a server from before
    they existed still takes a request without them)."""
    try:
        body = TokenCreate(
            team=team, role=Role(role), name=name, expires_in_days=expires_in_days, run_as=run_as, owner=owner
        )
    except ValueError as e:  # ValidationError is a ValueError; so is an unknown role
        if isinstance(e, ValidationError):
            raise input_error_from(e) from None
        raise InputError(f"unknown role {role!r} (admin, member or viewer)", field="role") from None
    unset = {k for k, v in (("run_as", run_as), ("owner", owner)) if v is None}
    json = body.model_dump(mode="json", exclude=unset or None)
    return _Call("POST", f"{API_PREFIX}/tokens", _model(TokenCreated), json=json)


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


def _log_continues_at(headers: Mapping[str, str], follow: bool) -> int | None:
    """Where to ask again after a read without ``follow`` that the server cut at its byte limit
    (``log_read_max_bytes``): its ``X-Log-Next-Offset`` while that is short of ``X-Log-Size``; else None
    (the whole log was sent, or a server without the headers sent it all)."""
    if follow:
        return None
    try:
        nxt, size = int(headers["X-Log-Next-Offset"]), int(headers["X-Log-Size"])
    except (KeyError, ValueError):
        return None
    return nxt if nxt < size else None


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
