"""The MCP server: :mod:`gpufleet.agent.tools` as MCP tools and resources (the official ``mcp`` SDK),
over stdio or streamable HTTP.

**Whose token.** Every tool call and resource read is one or more REST API calls through the SDK
with the *caller's* token, so the API's permission checks apply unchanged (a member sees only their
team; another team's job is the API's 404, answered as a tool error):

- stdio: the token the command was started with (``--token``, ``$GPUFLEET_TOKEN``, else the CLI's
  ``<home>/admin.token``) — the process belongs to the person who started it;
- streamable HTTP: the ``Authorization: Bearer <token>`` header of *each* request, passed through
  as it is. A request without one is refused with a 401 before it reaches MCP, and the server holds
  no token of its own (it never falls back to ``$GPUFLEET_TOKEN`` or the admin token).

The header reaches the tools through a context-tier middleware that copies it into a context
variable for the duration of the message (tools run in worker threads, which copy the context).

There is no tool to approve or reject a proposal: ``propose_action`` files one, a person decides.
"""

import contextvars
import dataclasses
import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, cast

from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field
from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet import __version__
from gpufleet.agent import tools
from gpufleet.agent.outputs import (
    AnomalyDiagnosis,
    BudgetPlanCheck,
    Configuration,
    ConfigurationComparison,
    CostAnalysis,
    CostReport,
    JobCostForecast,
    ProposalAnswer,
    Recommendations,
    WhatIfAnswer,
)
from gpufleet.errors import GpufleetError
from gpufleet.wire import ProposalAction, ProposalEstimate

T = TypeVar("T")

MCP_PATH = "/mcp"
DEFAULT_HTTP_PORT = 8471
ORIGINS_ENV = "GPUFLEET_MCP_ALLOWED_ORIGINS"  # comma-separated origins a browser may call the HTTP server from
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
NAME = "gpufleet"
INSTRUCTIONS = (
    "gpufleet: a cost-aware GPU scheduler. These tools read its REST API with your token, so you see what "
    "the token's team and role may see. Money is USD. Start with cost_analysis or cost_report; "
    "recommend and diagnose_anomaly say what to change; check_budget_for_plan, compare_configurations and "
    "whatif price a change before it is made (figures marked projection are estimates). To act, call "
    "propose_action: it files a pending proposal that a person approves or rejects; nothing changes before."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
Window = Annotated[str, Field(max_length=120, description="7d, 24h, 90m, today, week, month, or START,END (RFC 3339)")]
Team = Annotated[str | None, Field(max_length=63, description="one team (default: every team the token may see)")]

_bearer: contextvars.ContextVar[str | None] = contextvars.ContextVar("gpufleet_mcp_bearer", default=None)


def bearer_token(headers: Any) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if headers is None:
        return None
    value = headers.get("authorization") or ""
    scheme, _, token = str(value).strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _bearer_middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Copy this message's bearer token (HTTP) into the context the tool runs in; None on stdio."""
    reset = _bearer.set(bearer_token(getattr(ctx.request, "headers", None)))
    try:
        return await call_next(ctx)
    finally:
        _bearer.reset(reset)


def parse_origin(value: str) -> str:
    """An origin as a browser sends it — ``scheme://host[:port]``, lower case, the scheme's default
    port left out — from ``value``; a ValueError for anything else (a wildcard, a path, ``null``)."""
    from urllib.parse import urlsplit

    text = value.strip()
    if "*" in text:
        raise ValueError(f"origin '{value}': no wildcards; list each origin exactly, port included")
    try:
        u = urlsplit(text)
        port = u.port
    except ValueError:
        raise ValueError(f"origin '{value}' is not scheme://host[:port]") from None
    if (
        u.scheme not in ("http", "https")
        or not u.hostname
        or u.path not in ("", "/")
        or u.query
        or u.fragment
        or u.username is not None
        or u.password is not None
    ):
        raise ValueError(f"origin '{value}' is not scheme://host[:port] (http or https, nothing after the port)")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    default = 80 if u.scheme == "http" else 443
    return f"{u.scheme}://{host}" + ("" if port is None or port == default else f":{port}")


@dataclass(frozen=True)
class AgentSettings:
    """``url``: the gpufleet API. ``token``: the token of every call over stdio; over HTTP None (each
    request brings its own, and a request without one is refused). ``allowed_origins``: over HTTP,
    the origins (``https://console.example.com``, exact: scheme, host and port) a browser page may
    call the server from, besides the server's own (see :func:`http_app`)."""

    url: str
    transport: Literal["stdio", "http"] = "stdio"
    token: str | None = None
    timeout_s: float = 60.0
    retries: int = 2
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.transport == "http" and self.token is not None:
            raise ValueError("over HTTP each request brings its own token; the server holds none")
        object.__setattr__(self, "allowed_origins", tuple(parse_origin(o) for o in self.allowed_origins))


@functools.lru_cache(maxsize=1)
def _catalog() -> Any:
    from gpufleet.io.catalog import load_catalog

    return load_catalog()


class Calls:
    """Runs a tool function with an SDK client holding the caller's token; gpufleet errors (the API's
    refusals included) become tool errors whose text is the API's one line."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def token(self) -> str:
        token = _bearer.get()
        if self.settings.transport == "http":
            if not token:
                raise ToolError("this request has no 'Authorization: Bearer <gpufleet token>' header")
            return token
        token = token or self.settings.token
        if not token:
            raise ToolError("no gpufleet token: set GPUFLEET_TOKEN (or pass --token) for `gpufleet mcp`")
        return token

    def client(self) -> Any:
        from gpufleet.sdk import Client

        return Client(self.settings.url, self.token(), timeout=self.settings.timeout_s, retries=self.settings.retries)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            with self.client() as client:
                return fn(client, *args, **kwargs)
        except GpufleetError as e:
            raise ToolError(str(e)) from None

    def read(self, fn: Callable[..., Any]) -> str:
        try:
            with self.client() as client:
                return json.dumps(fn(client), indent=1)
        except (GpufleetError, ToolError) as e:
            raise ResourceError(str(e)) from None


def build_server(settings: AgentSettings) -> MCPServer:
    """The MCP server: nine tools, three resources, and no tool that approves anything."""
    calls = Calls(settings)
    mcp: MCPServer = MCPServer(
        NAME,
        title="gpufleet cost tools",
        instructions=INSTRUCTIONS,
        version=__version__,
        middleware=[_bearer_middleware],
        log_level="WARNING",
    )

    @mcp.tool(annotations=READ_ONLY)
    def cost_analysis(
        window: Window = "7d",
        team: Team = None,
        group_by: Annotated[
            str,
            Field(
                max_length=120,
                description="project, team, namespace, experiment, cost_center, priority, "
                "gpu_model, job or label:<key>",
            ),
        ] = "project",
        top: Annotated[int, Field(ge=1, le=50, description="how many of the most expensive jobs to list")] = 5,
    ) -> CostAnalysis:
        """Where the money went: the most expensive workloads (groups of jobs) and jobs, the cluster's GPU
        allocation and idle capacity (waste), and the jobs flagged as under-using their GPUs, with a sentence
        like "project 'training' cost $50.00/day (62 % of the spend) ... at 40 % mean GPU utilization"."""
        return calls.run(tools.cost_analysis, window, team, group_by, top)

    @mcp.tool(annotations=READ_ONLY)
    def recommend(
        job: Annotated[str | None, Field(max_length=64, description="only this job's recommendations")] = None,
        team: Team = None,
        window: Window = "7d",
    ) -> Recommendations:
        """Ways to spend less (idle or underused GPUs, a cheaper GPU type, sharing, spot, off-peak, batch size,
        early stopping, reserved capacity, idle capacity), each with $/month, confidence and the what-if change
        that backs it; largest first."""
        return calls.run(tools.recommend, job, team, window)

    @mcp.tool(annotations=READ_ONLY)
    def forecast_job_cost(
        job: Annotated[str, Field(min_length=1, max_length=64, description="a job id")],
    ) -> JobCostForecast:
        """What a job has spent and will still spend: its cost rate, the remaining cost with an interval, and
        how it was forecast (progress reports, its runtime estimate, or nothing to go on)."""
        return calls.run(tools.forecast_job_cost, job)

    @mcp.tool(annotations=READ_ONLY)
    def check_budget_for_plan(
        gpus: Annotated[int, Field(ge=1, le=512, description="GPUs the planned job would use")],
        hours: Annotated[float, Field(gt=0, le=24 * 366, description="how long it would run")],
        team: Annotated[str | None, Field(max_length=63, description="the team it runs for (default: yours)")] = None,
        gpu_type: Annotated[str | None, Field(max_length=63, description="a GPU model, e.g. A100-80GB")] = None,
        spot: Annotated[bool, Field(description="run it on spot capacity (preemptible, checkpointing)")] = False,
        min_gpu_memory_gib: Annotated[
            float, Field(ge=0, le=4096, description="leave out cheaper GPU types with less memory per GPU")
        ] = 0.0,
    ) -> BudgetPlanCheck:
        """Would a planned job fit the team's budgets? The forecast against each covering budget's remainder
        (the API's budget check, nothing submitted), e.g. "forecast $6.50 exceeds budget 'x' ($5.00 left) by
        $1.50", and cheaper options each with its cost: fewer GPUs, a shorter run, a cheaper GPU type, spot."""
        return calls.run(tools.check_budget_for_plan, _catalog(), team, gpus, hours, gpu_type, spot, min_gpu_memory_gib)

    @mcp.tool(annotations=READ_ONLY)
    def cost_report(
        window: Window = "7d",
        aggregate: Annotated[
            list[str] | None,
            Field(
                min_length=1,
                max_length=8,
                description="group by (default team): team, project, namespace, "
                "experiment, cost_center, job, node, pool, gpu_model, capacity_type, priority, label:<key>",
            ),
        ] = None,
        start: Annotated[str | None, Field(description="RFC 3339 start (with end: replaces window)")] = None,
        end: Annotated[str | None, Field(description="RFC 3339 end")] = None,
        team: Team = None,
        labels: Annotated[
            list[str] | None, Field(max_length=16, description="only jobs with these labels, KEY=VALUE")
        ] = None,
    ) -> CostReport:
        """The cost report (GET /v1/usage) as the API computes it, money in exact decimal strings: cost and
        GPU-hours by the chosen fields, idle capacity, what the filters leave out, and the totals."""
        from datetime import datetime

        def parse(v: str | None, field: str) -> datetime | None:
            if v is None:
                return None
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                raise ToolError(f"{field}: not an RFC 3339 time: {v!r}") from None

        return calls.run(
            tools.cost_report,
            window,
            aggregate or ["team"],
            parse(start, "start"),
            parse(end, "end"),
            team,
            labels or [],
        )

    @mcp.tool(annotations=READ_ONLY)
    def compare_configurations(
        configs: Annotated[list[Configuration], Field(min_length=1, max_length=32)],
        job: Annotated[
            str | None, Field(max_length=64, description="take the reference run from this job (its measured run time)")
        ] = None,
        runtime_hours: Annotated[float | None, Field(gt=0, description="stated runtime of the reference")] = None,
        throughput_per_s: Annotated[float | None, Field(gt=0, description="stated throughput (units/s)")] = None,
        total_work: Annotated[
            float | None, Field(gt=0, description="work units in all (with throughput_per_s)")
        ] = None,
        reference_gpu_type: Annotated[str | None, Field(max_length=63)] = None,
        reference_gpus: Annotated[int | None, Field(ge=1, le=512)] = None,
        reference_batch_size: Annotated[int | None, Field(ge=1)] = None,
        measured_util_pct: Annotated[
            float | None, Field(gt=0, le=100, description="the reference's GPU utilization (for batch sizes)")
        ] = None,
        scaling_efficiency: Annotated[float, Field(gt=0, le=1, description="kept per doubling of GPUs")] = 0.9,
        off_peak_multiplier: Annotated[float | None, Field(gt=0, le=1)] = None,
    ) -> ConfigurationComparison:
        """Estimated time and cost of a job on each configuration (GPU type and count, batch size, spot,
        off-peak), scaled from one reference run: a job's measured run time or a stated runtime/throughput.
        Every figure is a projection; the scaling assumptions are listed in the answer."""
        return calls.run(
            tools.compare_configurations,
            _catalog(),
            configs,
            job=job,
            runtime_hours=runtime_hours,
            throughput_per_s=throughput_per_s,
            total_work=total_work,
            reference_gpu_type=reference_gpu_type,
            reference_gpus=reference_gpus,
            reference_batch_size=reference_batch_size,
            measured_util_pct=measured_util_pct,
            scaling_efficiency=scaling_efficiency,
            off_peak_multiplier=off_peak_multiplier,
        )

    @mcp.tool(annotations=READ_ONLY)
    def whatif(
        change: Annotated[
            str,
            Field(
                max_length=200,
                description="spot | autoscaling | sharing | gpu-type:MODEL | placement:POLICY | "
                "queue:SORT, several joined with +",
            ),
        ],
        window: Window = "7d",
        team: Team = None,
        limit: Annotated[int, Field(ge=1, le=20000, description="replay at most this many jobs (the earliest)")] = 2000,
        spot_hazard: Annotated[float, Field(ge=0, le=10, description="spot interruptions per node-hour")] = 0.01,
    ) -> WhatIfAnswer:
        """Replay the jobs that ran in a window twice — on a fixed on-demand cluster, and with one change — and
        compare cost, waits and jobs done (baseline vs variant, with the lower bound). The what-if engine runs
        in this process on the jobs and nodes the API shows this token."""
        return calls.run(tools.whatif, _catalog(), change, window, team, limit, spot_hazard)

    @mcp.tool(annotations=READ_ONLY)
    def diagnose_anomaly(
        team: Team = None,
        days: Annotated[int, Field(ge=1, le=366, description="complete UTC days to look back")] = 30,
        threshold: Annotated[float, Field(ge=0, le=100, description="a day counts above baseline × (1 + this)")] = 0.2,
        min_increase_usd: Annotated[float, Field(ge=0, description="... and at least this many dollars above")] = 50.0,
    ) -> AnomalyDiagnosis:
        """Days whose spend jumped above the baseline: the jobs and teams behind each spike (with their state
        now and the recommendations about them) and the action that would bring spend back."""
        return calls.run(tools.diagnose_anomaly, team, days, threshold, min_increase_usd)

    @mcp.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )
    )
    def propose_action(
        action: ProposalAction,
        target: Annotated[
            str,
            Field(
                min_length=1,
                max_length=255,
                description="a job id (resize, change_gpu_type, move_to_spot, "
                "reschedule_off_peak, cancel_idle_job), a team (change_quota) or a budget name or id "
                "(change_budget)",
            ),
        ],
        rationale: Annotated[str, Field(min_length=1, max_length=4000, description="why, with the figures")],
        params: Annotated[
            dict[str, Any] | None,
            Field(
                description="resize: {gpus} or {gpu_milli}; change_gpu_type: {gpu_types: [...]}; move_to_spot: {}; "
                "reschedule_off_peak: {start_after}; cancel_idle_job: {max_utilization_pct, window_s}; "
                "change_quota: {quota_gpus: {MODEL: GPUs}}; change_budget: {limit_usd, action, throttle}"
            ),
        ] = None,
        estimate: Annotated[
            ProposalEstimate | None,
            Field(
                description="the expected effect: monthly_savings_usd, confidence 0..1, basis (e.g. a tool's answer)"
            ),
        ] = None,
    ) -> ProposalAnswer:
        """Propose a change to a job, a team's quota or a budget. It is filed as a PENDING proposal and changes
        nothing: a person approves or rejects it through the gpufleet CLI (gpufleet proposals approve|reject)
        or the API. No tool here approves anything."""
        return calls.run(tools.propose_action, action, target, params or {}, rationale, estimate)

    @mcp.resource("gpufleet://queue", name="queue", mime_type="application/json")
    def queue() -> str:
        """The waiting jobs in start order, with why each waits and when it should start (GET /v1/queue)."""
        return calls.read(tools.queue_resource)

    @mcp.resource("gpufleet://budgets", name="budgets", mime_type="application/json")
    def budgets() -> str:
        """The budgets this token may see, each with its status: spend, committed, projection, days left."""
        return calls.read(tools.budgets_resource)

    @mcp.resource("gpufleet://recommendations", name="recommendations", mime_type="application/json")
    def recommendations() -> str:
        """Ways to spend less over the last 7 days, largest $/month first (GET /v1/recommendations)."""
        return calls.read(tools.recommendations_resource)

    return mcp


class RequireBearer:
    """ASGI middleware: a request to the MCP endpoint without ``Authorization: Bearer`` gets a 401
    (with ``WWW-Authenticate: Bearer``) and never reaches MCP."""

    def __init__(self, app: ASGIApp, path: str = MCP_PATH) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(self.path):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
            if bearer_token(headers) is None:
                body = json.dumps(
                    {"error": "unauthorized", "detail": "send your gpufleet token: Authorization: Bearer <token>"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="gpufleet"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class CheckOrigin:
    """ASGI middleware: a request carrying an ``Origin`` header (a browser page's) that is not one of
    ``allowed`` exactly gets a 403 and reaches nothing. A request without one (a program) passes."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"origin"), None)
            if origin is not None and origin not in self.allowed:  # exact: browsers send it canonical
                body = json.dumps(
                    {
                        "error": "forbidden",
                        "detail": f"origin {origin!r} may not call this server (allowed: the server's own origin and "
                        f"{ORIGINS_ENV})",
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def own_origins(host: str, port: int) -> frozenset[str]:
    """The server's own origins: ``http://<host>:<port>``, and on a loopback or wildcard address the
    loopback names with this port (never another port: a page served there is another site)."""
    names = {host} if host not in _LOOPBACK and host not in ("0.0.0.0", "::", "") else set()
    if host in _LOOPBACK or host in ("0.0.0.0", "::", ""):
        names |= _LOOPBACK
    return frozenset(parse_origin(f"http://{f'[{n}]' if ':' in n else n}:{port}") for n in names)


def http_app(settings: AgentSettings, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT) -> ASGIApp:
    """The streamable-HTTP ASGI app at :data:`MCP_PATH` (stateless: every request stands alone and
    carries its own token), behind :class:`RequireBearer`.

    DNS rebinding and local pages: a request with an ``Origin`` is served only when that origin is
    exactly the server's own (``http://<host>:<port>``; on a loopback address also its other loopback
    names, same port) or one of ``settings.allowed_origins``; ``http://127.0.0.1:<another port>`` is
    another site. On a loopback ``host`` the ``Host`` header must also name this address and port."""
    allowed = own_origins(host, port) | frozenset(settings.allowed_origins)
    if host in _LOOPBACK:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"],
            allowed_origins=sorted(allowed),
        )
    else:  # any name may reach a public address: the Host is not checked, the Origin is (CheckOrigin)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp_app = build_server(settings).streamable_http_app(
        host=host, stateless_http=True, streamable_http_path=MCP_PATH, transport_security=security
    )
    return CheckOrigin(RequireBearer(mcp_app), allowed)


def serve(settings: AgentSettings, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT) -> None:
    """Run the server until interrupted: stdio, or streamable HTTP on ``host:port`` (browser origins
    besides its own: ``settings.allowed_origins``, else ``$GPUFLEET_MCP_ALLOWED_ORIGINS``, comma-separated)."""
    if settings.transport == "stdio":
        build_server(settings).run("stdio")
        return
    import uvicorn

    if not settings.allowed_origins and os.environ.get(ORIGINS_ENV, "").strip():
        origins = tuple(o for o in os.environ[ORIGINS_ENV].split(",") if o.strip())
        settings = dataclasses.replace(settings, allowed_origins=origins)
    from gpufleet.io.http_timeout import header_timeout_protocol

    # a request head not complete within 10 s (slow-loris) is cut off, as on the API server
    uvicorn.run(
        http_app(settings, host, port),
        host=host,
        port=port,
        log_level="warning",
        http=cast(Any, header_timeout_protocol(10.0)),
    )  # a partial of a protocol class: called like one
