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
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from gpufleet.errors import InputError
from gpufleet.sdk.calls import (
    API_PREFIX,
    _anomalies_call,
    _budget_call,
    _budget_path,
    _Call,
    _check_call,
    _headers,
    _job_path,
    _json_any,
    _LineSplitter,
    _list_params,
    _log_continues_at,
    _model,
    _models,
    _nothing,
    _page_call,
    _progress_call,
    _recs_call,
    _RetryPolicy,
    _roi_call,
    _spend_call,
    _submit_call,
    _team_body,
    _team_in,
    _token_call,
    _usage_call,
    input_error_from,
)
from gpufleet.sdk.config import resolve_token, resolve_url
from gpufleet.sdk.errors import ServerUnavailable, WaitTimeout, error_from_response
from gpufleet.wire import (
    AnomalyOut,
    BudgetCheckOut,
    BudgetIn,
    BudgetOut,
    BudgetStatusOut,
    JobEventOut,
    JobForecastOut,
    JobOut,
    JobSubmit,
    NodeOut,
    ProposalApprove,
    ProposalEstimate,
    ProposalIn,
    ProposalOut,
    ProposalReject,
    QueueEntry,
    RecommendationOut,
    RoiOut,
    Role,
    SpendForecastOut,
    TeamIn,
    TeamOut,
    TokenCreated,
    TokenOut,
    UsageReport,
    WhoAmI,
)

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
PAGE_SIZE = 100
_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# A refused connection to a server this client has never reached is most likely a wrong URL or a
# server that is not up: retried this many times (~0.6 s), not the whole policy (~5 s). Once the
# client has had an answer, a refusal is a restart in progress and gets every retry.
NEVER_REACHED_RETRIES = 2


def _tries_left(retries: int, reached: bool, error: BaseException) -> int:
    """The retries a transport error gets (see :data:`NEVER_REACHED_RETRIES`)."""
    if not reached and isinstance(error, httpx.ConnectError):
        return min(retries, NEVER_REACHED_RETRIES)
    return retries


# An MLflow run a job names (the server's gpufleet.integrations.mlflow_sync.RUN_LABEL; the SDK imports nothing of it)
MLFLOW_RUN_LABEL = "mlflow-run-id"
MLFLOW_RUN_ENV = "MLFLOW_RUN_ID"
_MLFLOW_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")  # the server's rule (mlflow_sync.RUN_ID)


def with_mlflow_run(spec: JobSubmit | None, fields: Mapping[str, Any], run_id: str | None) -> dict[str, Any]:
    """``fields`` of a submit with the job naming MLflow run ``run_id``: the label ``mlflow-run-id``
    (the server logs the job's cost, GPU-hours and improvement per dollar to that run when it ends)
    and ``MLFLOW_RUN_ID`` in its env (so ``mlflow.start_run()`` in the job resumes that run). The
    labels and env are the keywords', else the spec's, plus those two; a different value already
    there is an :class:`InputError`."""
    out = dict(fields)
    run = (run_id or "").strip()
    if not run:
        return out
    if not _MLFLOW_RUN_ID.fullmatch(run):
        raise InputError(f"{run[:80]!r} is not an MLflow run id (e.g. 32 hex digits)", field="mlflow_run")
    for name, key in (("labels", MLFLOW_RUN_LABEL), ("env", MLFLOW_RUN_ENV)):
        base = out[name] if name in out else (getattr(spec, name) if spec is not None else {})
        merged = dict(base or {})
        if merged.get(key, run) != run:
            raise InputError(f"mlflow_run {run!r} conflicts with {name}[{key}] {merged[key]!r}", field="mlflow_run")
        merged[key] = run
        out[name] = merged
    return out


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
        self._reached = False  # has this client ever had an answer from the server?
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
                if attempt >= _tries_left(self._policy.retries, self._reached, e):
                    raise ServerUnavailable(self.url, e, attempt + 1) from None
                self._sleep(self._policy.delay(attempt, None))
                attempt += 1
                continue
            except httpx.TransportError as e:  # a bad URL or proxy: retrying will not help
                raise ServerUnavailable(self.url, e) from None
            self._reached = True
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

    def submit(
        self,
        spec: JobSubmit | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        mlflow_run: str | None = None,
        **fields: Any,
    ) -> JobOut:
        """Submit a job (a :class:`~gpufleet.wire.JobSubmit`, or its fields as keywords, or both: the
        keywords override). Retries reuse one ``Idempotency-Key``, so at most one job is created.
        ``mlflow_run``: the MLflow run the job logs to (see :func:`with_mlflow_run`)."""
        return self._do(_submit_call(spec, idempotency_key, with_mlflow_run(spec, fields, mlflow_run)))

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
        at: int | None = None  # where a log the server cut continues (else: after the last whole line)
        while True:
            start = splitter.offset if at is None else at
            params = [("offset", str(start))] + ([("follow", "true")] if follow else [])
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
                at = None
                self._sleep(self._policy.delay(broken - 1, None))
                continue
            finally:
                resp.close()
            at = _log_continues_at(resp.headers, follow)
            if at is not None:
                continue
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
        """Create or replace a team (admin). Fields not given take :class:`TeamIn`'s defaults, except
        ``run_as`` (its jobs' Unix account) and ``priority_classes`` (granted to its members), which
        stay as they are unless given (``None`` clears them)."""
        body = _team_body(_team_in(team, fields))
        return self._do(_Call("PUT", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut), json=body))

    def create_token(
        self,
        team: str,
        role: Role | str = Role.MEMBER,
        name: str = "",
        expires_in_days: float | None = None,
        *,
        run_as: str | None = None,
        owner: str | None = None,
    ) -> TokenCreated:
        """A new token (admin); its secret (``.token``) is returned this once and never again.
        ``run_as``: the token's own Unix account for its jobs (wins over the team's). ``owner``:
        the person holding it (a proposal is approved by another person; a token without an owner
        cannot approve one)."""
        return self._do(_token_call(team, role, name, expires_in_days, run_as, owner))

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

    # -- proposals: an agent proposes an action, a person approves it (docs/proposals.md)

    def propose(
        self,
        action: str,
        target: str,
        params: Mapping[str, Any] | None = None,
        rationale: str = "",
        estimate: ProposalEstimate | Mapping[str, Any] | None = None,
        *,
        effect_window_s: float | None = None,
        expires_in_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> ProposalOut:
        """Propose ``action`` on ``target`` (a job id, a team, a budget) with its ``params``, why
        (``rationale``) and the expected effect (``estimate``: ``monthly_savings_usd``,
        ``confidence`` 0..1, ``basis``). It stays pending — nothing changes — until a person
        approves it. Retries reuse one ``Idempotency-Key``, so at most one proposal is made."""
        return self._do(
            _propose_call(action, target, params, rationale, estimate, effect_window_s, expires_in_s, idempotency_key)
        )

    def proposals(self, state: str | None = None, *, limit: int = 100) -> builtins.list[ProposalOut]:
        """Proposals newest first (``state``: pending, executed, failed, rejected, expired)."""
        return self._do(_proposals_call(state, limit))

    def proposal(self, proposal_id: str) -> ProposalOut:
        """A proposal with its estimated and (once measured) real effect on cost."""
        return self._do(_Call("GET", _proposal_path(proposal_id), _model(ProposalOut)))

    def approve(self, proposal_id: str, reason: str = "") -> ProposalOut:
        """Approve a pending proposal: its action is executed at once (``executed``, or ``failed``
        with why). Not with the token that proposed it."""
        return self._do(_decide_call(proposal_id, "approve", _approve_body(reason)))

    def reject(self, proposal_id: str, reason: str) -> ProposalOut:
        """Reject a pending proposal (nothing changes)."""
        return self._do(_decide_call(proposal_id, "reject", _reject_body(reason)))


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
        self._reached = False  # has this client ever had an answer from the server?
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
                if attempt >= _tries_left(self._policy.retries, self._reached, e):
                    raise ServerUnavailable(self.url, e, attempt + 1) from None
                await self._sleep(self._policy.delay(attempt, None))
                attempt += 1
                continue
            except httpx.TransportError as e:
                raise ServerUnavailable(self.url, e) from None
            self._reached = True
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
        self,
        spec: JobSubmit | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        mlflow_run: str | None = None,
        **fields: Any,
    ) -> JobOut:
        return await self._do(_submit_call(spec, idempotency_key, with_mlflow_run(spec, fields, mlflow_run)))

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
        at: int | None = None  # where a log the server cut continues (else: after the last whole line)
        while True:
            start = splitter.offset if at is None else at
            params = [("offset", str(start))] + ([("follow", "true")] if follow else [])
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
                at = None
                await self._sleep(self._policy.delay(broken - 1, None))
                continue
            finally:
                await resp.aclose()
            at = _log_continues_at(resp.headers, follow)
            if at is not None:
                continue
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
        body = _team_body(_team_in(team, fields))
        return await self._do(_Call("PUT", f"{API_PREFIX}/teams/{quote(name, safe='')}", _model(TeamOut), json=body))

    async def create_token(
        self,
        team: str,
        role: Role | str = Role.MEMBER,
        name: str = "",
        expires_in_days: float | None = None,
        *,
        run_as: str | None = None,
        owner: str | None = None,
    ) -> TokenCreated:
        return await self._do(_token_call(team, role, name, expires_in_days, run_as, owner))

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

    # -- proposals

    async def propose(
        self,
        action: str,
        target: str,
        params: Mapping[str, Any] | None = None,
        rationale: str = "",
        estimate: ProposalEstimate | Mapping[str, Any] | None = None,
        *,
        effect_window_s: float | None = None,
        expires_in_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> ProposalOut:
        return await self._do(
            _propose_call(action, target, params, rationale, estimate, effect_window_s, expires_in_s, idempotency_key)
        )

    async def proposals(self, state: str | None = None, *, limit: int = 100) -> builtins.list[ProposalOut]:
        return await self._do(_proposals_call(state, limit))

    async def proposal(self, proposal_id: str) -> ProposalOut:
        return await self._do(_Call("GET", _proposal_path(proposal_id), _model(ProposalOut)))

    async def approve(self, proposal_id: str, reason: str = "") -> ProposalOut:
        return await self._do(_decide_call(proposal_id, "approve", _approve_body(reason)))

    async def reject(self, proposal_id: str, reason: str) -> ProposalOut:
        return await self._do(_decide_call(proposal_id, "reject", _reject_body(reason)))


# ------------------------------------------------------------------------------------------- proposals


def _proposal_path(proposal_id: str, suffix: str = "") -> str:
    if not proposal_id or "/" in proposal_id:
        raise InputError(f"not a proposal id: {proposal_id!r}", field="proposal_id")
    return f"{API_PREFIX}/proposals/{quote(proposal_id, safe='')}{suffix}"


def _propose_call(
    action: str,
    target: str,
    params: Mapping[str, Any] | None,
    rationale: str,
    estimate: ProposalEstimate | Mapping[str, Any] | None,
    effect_window_s: float | None,
    expires_in_s: float | None,
    idempotency_key: str | None,
) -> _Call[ProposalOut]:
    fields: dict[str, Any] = {"action": action, "target": target, "params": dict(params or {})}
    if rationale:
        fields["rationale"] = rationale
    if estimate is not None:
        fields["estimate"] = estimate.model_dump() if isinstance(estimate, ProposalEstimate) else dict(estimate)
    if effect_window_s is not None:
        fields["effect_window_s"] = effect_window_s
    if expires_in_s is not None:
        fields["expires_in_s"] = expires_in_s
    try:
        body = ProposalIn.model_validate(fields)
    except ValidationError as e:
        raise input_error_from(e) from None
    return _Call(
        "POST",
        f"{API_PREFIX}/proposals",
        _model(ProposalOut),
        json=body.model_dump(mode="json", exclude_defaults=True),
        headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())},
    )


def _proposals_call(state: str | None, limit: int) -> _Call[builtins.list[ProposalOut]]:
    params = [("limit", str(limit))] + ([("state", state)] if state else [])
    return _Call("GET", f"{API_PREFIX}/proposals", _models(ProposalOut), params=params)


def _approve_body(reason: str) -> ProposalApprove:
    try:
        return ProposalApprove(reason=reason)
    except ValidationError as e:
        raise input_error_from(e) from None


def _reject_body(reason: str) -> ProposalReject:
    try:
        return ProposalReject(reason=reason)
    except ValidationError as e:
        raise input_error_from(e) from None


def _decide_call(proposal_id: str, verb: str, body: ProposalApprove | ProposalReject) -> _Call[ProposalOut]:
    return _Call("POST", _proposal_path(proposal_id, f"/{verb}"), _model(ProposalOut), json=body.model_dump())
