"""Wire models of the REST API ``/v1`` — shared by the server (``api/``) and the SDK (``sdk/``).

Pydantic v2 only (no FastAPI import), so the SDK installs nothing heavy. Times on the wire are
RFC 3339 (``datetime`` with a time zone); the store keeps UNIX seconds.

Routes (all under ``/v1``; bearer token in ``Authorization``):

==========================================  =====================================================
``POST   /jobs``                            submit (``Idempotency-Key`` header) → 201 JobOut
                                            (200 with the same job when the key was seen before)
``GET    /jobs``                            list → JobPage (``team``, ``state`` (repeatable),
                                            ``project``, ``label=k=v``, ``cursor``, ``limit``)
``GET    /jobs/{id}``                       → JobOut
``POST   /jobs/{id}/cancel``                → JobOut (202 while a running job is being stopped)
``GET    /jobs/{id}/events``                → list[JobEventOut]
``GET    /jobs/{id}/logs``                  text/plain stream (``follow=true``, ``offset=N``)
``GET    /queue``                           → list[QueueEntry] (``team``)
``GET    /nodes``                           → list[NodeOut]
``GET    /teams`` / ``PUT /teams/{name}``   → list[TeamOut] / TeamOut (admin)
``GET    /teams/{name}``                    → TeamOut
``POST   /tokens`` / ``GET /tokens``        → TokenCreated / list[TokenOut] (admin)
``DELETE /tokens/{id}``                     revoke (admin)
``GET    /usage``                           → UsageReport (``window``, ``aggregate``, ``spread_idle``,
                                            ``team``, ``label=k=v`` (repeatable); pricing rules
                                            of the server's settings apply)
``GET    /whoami``                          → WhoAmI
``GET    /healthz`` ``/readyz`` ``/metrics`` (no auth; at the root, not under ``/v1``)
==========================================  =====================================================

Errors are RFC 9457 problem documents (:class:`Problem`, ``application/problem+json``).
"""

from __future__ import annotations

import posixpath
import unicodedata
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

NAME = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"  # team / token names (DNS-label-like)
PriorityClass = Literal["background", "low", "normal", "high", "urgent"]
# A team's default grant of priority classes (members may submit with these; admins with any).
DEFAULT_PRIORITY_CLASSES: tuple[str, ...] = ("background", "low", "normal")
RUN_AS = r"^[a-z_][a-z0-9_-]{0,31}$"  # a POSIX user name (the Unix account jobs run as)
# the person holding a token: a login or an e-mail address (compared without regard to case)
OWNER = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,126}$"

# -- text and numbers a client may send ----------------------------------------------------------
#
# Input text never carries control characters: C0 (U+0000-U+001F), DEL, C1 (U+0080-U+009F) and the
# bidirectional controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) are refused with a 422
# naming the field. ``Printable`` (names, labels, GPU types, project/namespace/experiment) is
# stricter still: printable characters only (``str.isprintable``: no format characters, no line or
# paragraph separators). ``SafeText`` (command arguments, environment values) allows TAB, LF and
# CR (multi-line ``sh -c`` and ``python -c`` scripts are common) and nothing else of the kind: a NUL
# byte cannot reach ``execve``, an escape sequence cannot drive a terminal that shows the job.
# ``AbsPath`` (``cwd``, ``checkpoint_dir``) is an absolute POSIX path with no ``..`` component,
# normalized (``//`` and ``.`` removed). Numbers are strict: ``true`` is not 1 and ``"2"`` is not 2
# (an integer is still a valid float).

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc" or ch in _BIDI


def _bad_char(ch: str, index: int) -> ValueError:
    return ValueError(f"contains the control character U+{ord(ch):04X} at index {index}")


def _no_controls(allow_tab: bool) -> AfterValidator:
    def check(v: str) -> str:
        for i, ch in enumerate(v):
            if _is_control(ch) and not (allow_tab and ch in "\t\n\r"):
                raise _bad_char(ch, i)
        return v

    return AfterValidator(check)


def _printable(v: str) -> str:
    for i, ch in enumerate(v):
        if not ch.isprintable():
            if _is_control(ch):
                raise _bad_char(ch, i)
            raise ValueError(f"contains the non-printable character U+{ord(ch):04X} at index {i}")
    return v


def _abs_path(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError("must be an absolute path (starting with /)")
    if ".." in v.split("/"):
        raise ValueError("must not contain '..' components")
    return "/" + posixpath.normpath(v).lstrip("/")


Printable = Annotated[str, AfterValidator(_printable)]
"""Printable text only (names, labels): no control, format or separator characters."""
SafeText = Annotated[str, _no_controls(allow_tab=True)]
"""Free text such as a command argument: no control characters except TAB, LF and CR, no bidi controls."""
NoControls = Annotated[str, _no_controls(allow_tab=False)]
"""Text with no control characters at all (not even TAB) and no bidi controls."""
AbsPath = Annotated[str, _no_controls(allow_tab=False), AfterValidator(_abs_path)]
"""An absolute, normalized POSIX path without ``..`` components."""


class Role(StrEnum):
    ADMIN = "admin"  # everything: teams, quotas, tokens, every team's jobs
    MEMBER = "member"  # submit; read and cancel its own team's jobs; read nodes, queue, usage
    VIEWER = "viewer"  # read its own team's jobs, nodes, queue, usage
    METRICS = "metrics"  # a scraper's: read /metrics and /metrics/dcgm (every team's series), nothing else


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class JobSubmit(_Wire):
    """A job to run. Exactly one GPU shape: ``gpus`` whole GPUs, or ``gpu_milli`` thousandths of
    one shared GPU, or one ``mig`` slice; or none of them (a CPU-only job)."""

    command: Annotated[list[Annotated[SafeText, Field(max_length=4096)]], Field(min_length=1, max_length=1024)]
    name: Annotated[Printable, Field(max_length=255)] = ""
    team: Annotated[str | None, Field(pattern=NAME)] = None  # default: the token's team
    project: Annotated[Printable, Field(max_length=255)] = ""
    namespace: Annotated[Printable, Field(max_length=255)] = "default"
    experiment: Annotated[Printable, Field(max_length=255)] = ""
    labels: Annotated[
        dict[Annotated[Printable, Field(max_length=63)], Annotated[Printable, Field(max_length=255)]],
        Field(max_length=64),
    ] = Field(default_factory=dict)
    priority: PriorityClass = "normal"
    gpus: Annotated[int, Field(strict=True, ge=0, le=64)] = 0
    gpu_milli: Annotated[int | None, Field(strict=True, ge=1, le=999)] = None
    mig: Annotated[str | None, Field(pattern=r"^[1-7]g\.[0-9]+gb$")] = None
    gpu_types: Annotated[list[Annotated[Printable, Field(max_length=63)]], Field(max_length=16)] = Field(
        default_factory=list
    )
    min_gpu_memory_gib: Annotated[float, Field(strict=True, ge=0, le=4096)] = 0.0
    cpu_milli: Annotated[int, Field(strict=True, ge=0, le=1_024_000)] = 0
    memory_mib: Annotated[int, Field(strict=True, ge=0, le=64 * 1024 * 1024)] = 0
    preemptible: bool = Field(default=False, strict=True)
    checkpoint_dir: Annotated[AbsPath | None, Field(max_length=4096)] = None
    # how often the job checkpoints: the work a preemption costs it is accounted from this
    checkpoint_interval_s: Annotated[float | None, Field(strict=True, gt=0, le=366 * 86400)] = None
    max_runtime_s: Annotated[float | None, Field(strict=True, gt=0, le=366 * 86400)] = None
    estimated_runtime_s: Annotated[float | None, Field(strict=True, gt=0, le=366 * 86400)] = None
    budget_usd: Annotated[float | None, Field(strict=True, gt=0, le=1e9)] = None  # stop the job at this cost
    env: Annotated[
        dict[
            Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=255)],
            Annotated[SafeText, Field(max_length=32768)],
        ],
        Field(max_length=256),
    ] = Field(default_factory=dict)
    cwd: Annotated[AbsPath | None, Field(max_length=4096)] = None
    # the container image a Kubernetes backend runs the command in (ignored on the local backend)
    image: Annotated[str | None, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,510}$")] = None
    # pods placed all or nothing, each with the GPUs above (a gang; multi-pod needs a multi-node backend)
    pods: Annotated[int, Field(strict=True, ge=1, le=64)] = 1

    @model_validator(mode="after")
    def _one_gpu_shape(self) -> JobSubmit:
        """Two GPU shapes in one request are refused, naming both fields (``gpus`` 1 with ``mig``
        would otherwise silently become a MIG job: a fraction or a slice is always of one GPU)."""
        shapes = {
            name: value
            for name, value in (("gpus", self.gpus or None), ("gpu_milli", self.gpu_milli), ("mig", self.mig))
            if value is not None
        }
        if len(shapes) > 1:
            hint = "ask for whole GPUs (gpus), a fraction of one shared GPU (gpu_milli) or a MIG slice (mig), not both"
            errors = [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "conflict", f"conflicts with {' and '.join(n for n in shapes if n != name)}: {hint}"
                    ),
                    loc=(name,),
                    input=value,
                )
                for name, value in shapes.items()
            ]
            raise ValidationError.from_exception_data("JobSubmit", errors)
        return self


class Placement(_Out):
    node: str
    gpus: list[int]
    milli: int
    mig_mask: int = 0


class JobOut(_Out):
    id: str
    name: str
    team: str
    project: str
    namespace: str
    experiment: str
    labels: dict[str, str]
    priority: str
    command: list[str]
    gpus: int
    gpu_milli: int | None
    mig: str | None
    gpu_types: list[str]
    preemptible: bool
    checkpoint_dir: str | None
    max_runtime_s: float | None
    state: str
    reason: str
    submitted_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    run: int
    restarts: int
    preemptions: int
    exit_code: int | None
    placement: list[Placement]
    cancel_requested: bool
    run_as: str | None = None  # the Unix account it runs as (None: the server's own)
    # what it asked for besides GPUs (0: nothing), and what it declared about itself
    cpu_milli: int = 0
    memory_mib: int = 0
    min_gpu_memory_gib: float = 0.0
    estimated_runtime_s: float | None = None
    checkpoint_interval_s: float | None = None
    budget_usd: float | None = None
    image: str | None = None
    pods: int = 1
    # seconds it has spent running, summed over its runs (a run still going counts up to the
    # server's now); time queued — also between a preemption and the next run — is not counted.
    # None: a server that does not report it (clients fall back to ended_at/now − started_at)
    run_seconds: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


class JobPage(_Out):
    items: list[JobOut]
    next_cursor: str | None = None  # pass as ``cursor`` for the next page; None = last page


class JobEventOut(_Out):
    time: datetime
    old: str | None
    new: str
    reason: str


class QueueEntry(_Out):
    job_id: str
    name: str
    team: str
    priority: str
    position: int  # 1 = next to start, in the order of the last scheduling cycle
    reason: str  # why it waits
    # when it should start (see gpufleet.scheduling.estimate); None: blocked (below) or unknown
    # (its start depends on a job with no runtime estimate, or on a node being added)
    estimated_start: datetime | None
    submitted_at: datetime
    # what holds it besides room, in short ("quota", "budget 'nlp'", "capacity"); the reason says
    # more. None: it waits for room or its turn (estimated_start says when)
    blocked: str | None = None


class GpuShareOut(_Out):
    """One running job's hold on one GPU of a node (``GET /v1/nodes``, read-only)."""

    job_id: str | None  # None: another team's job (its id and team are shown to admins and that team only)
    team: str | None
    milli: int  # thousandths of the GPU held (1000: all of it; a MIG slice: its compute share)
    mig: str | None = None  # a MIG slice's profile, e.g. "1g.10gb"
    mig_mask: int = 0  # a MIG slice's memory slices (bit i = slice i of 8)


class GpuAllocOut(_Out):
    """What running jobs hold on one GPU of a node: whole, in fractions or in MIG slices."""

    index: int
    allocated_milli: int  # the shares' sum (1000: the GPU is full)
    shares: list[GpuShareOut] = Field(default_factory=list)


class NodeOut(_Out):
    name: str
    gpu_model: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    pool: str
    capacity_type: str
    sharing: str
    hourly_price_usd: float
    state: str
    allocated_gpus: float  # GPU-equivalents held by running jobs
    running_jobs: int
    gpus: list[GpuAllocOut] = Field(default_factory=list)  # per GPU (index 0..gpu_count-1): who holds what


class TeamIn(_Wire):
    """A team's settings. ``run_as`` (the Unix account its jobs run as) and ``priority_classes``
    (the classes its members may submit with) are left as they are when omitted; ``null`` clears
    them (no account; the default grant, up to ``normal``)."""

    weight: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    cohort: Annotated[str | None, Field(pattern=NAME)] = None
    borrowing_limit_gpus: Annotated[float | None, Field(ge=0, le=1e6)] = None
    quota_gpus: Annotated[
        dict[Annotated[str, Field(max_length=63)], Annotated[float, Field(ge=0, le=1e6)]], Field(max_length=64)
    ] = Field(default_factory=dict)  # GPU model (or "*") → GPUs
    run_as: Annotated[str | None, Field(pattern=RUN_AS)] = None
    priority_classes: Annotated[list[PriorityClass] | None, Field(min_length=1, max_length=5)] = None


class TeamOut(_Out):
    name: str
    weight: float
    cohort: str | None
    borrowing_limit_gpus: float | None
    quota_gpus: dict[str, float]
    used_gpus: dict[str, float]  # GPU model → GPUs held by running jobs now
    run_as: str | None = None  # the Unix account its jobs run as (a token's own wins)
    priority_classes: list[str] = Field(default_factory=lambda: list(DEFAULT_PRIORITY_CLASSES))  # granted


class TokenCreate(_Wire):
    team: Annotated[str, Field(pattern=NAME)]
    role: Role = Role.MEMBER
    name: Annotated[str, Field(max_length=127)] = ""
    expires_in_days: Annotated[float | None, Field(gt=0, le=3650)] = None
    run_as: Annotated[str | None, Field(pattern=RUN_AS)] = None  # its own Unix account (wins over the team's)
    # the person holding it: a proposal is approved by another person, never by a token of its proposer's
    # owner, and a token without an owner cannot approve proposals at all
    owner: Annotated[str | None, Field(pattern=OWNER)] = None


class TokenOut(_Out):
    id: str
    name: str
    team: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked: bool
    run_as: str | None = None
    owner: str | None = None  # the person holding it (None: made without one; it cannot approve)


class TokenCreated(TokenOut):
    token: str  # the secret: shown once


class WhoAmI(_Out):
    token_id: str
    team: str
    role: Role


class CostLineOut(_Out):
    key: dict[str, str]  # aggregate field → value
    gpu_hours: float
    gpu_cost_usd: str  # decimal strings: money is exact to the cent
    cpu_cost_usd: str
    memory_cost_usd: str
    total_cost_usd: str
    adjustment_usd: str = "0.00"  # part of the total due to priority multipliers (charged − held)


class ReservationOut(_Out):
    """A reserved commitment over the window: ``committed = covered + unused``."""

    name: str
    gpu_model: str
    gpus: int
    committed_gpu_hours: float
    committed_usd: str
    covered_usd: str  # what the reserved nodes it covered cost
    unused_usd: str  # commitment no node held


class UsageReport(_Out):
    """Costs by ``aggregate``. Column by column, to the cent:
    ``sum(rows) + other − adjustment + idle + reservation_unused == totals``."""

    window_start: datetime
    window_end: datetime
    aggregate: list[str]
    rows: list[CostLineOut]
    idle: CostLineOut
    totals: CostLineOut
    # Added with pricing rules and filters (defaults keep older servers' answers valid).
    other: CostLineOut | None = None  # rows the filters (or the caller's team) leave out
    adjustment: CostLineOut | None = None  # priority multipliers: charged − held
    reservation_unused: CostLineOut | None = None  # reserved commitment no node held
    reservations: list[ReservationOut] = Field(default_factory=list)
    node_cost_usd: str | None = None  # what the nodes cost (totals − unused commitment)
    filters: dict[str, str] = Field(default_factory=dict)  # "team", "label:<key>" → value
    rules: str | None = None  # where the pricing rules came from; None: recorded prices


class FieldError(_Out):
    field: str
    message: str


class Problem(_Out):
    """RFC 9457 problem details, with a stable ``code`` and the fields at fault."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None
    errors: list[FieldError] = Field(default_factory=list)


# -- budgets (``/v1/budgets``) -----------------------------------------------------------------------
#
# ``POST /budgets`` → 201 BudgetOut (admin); ``GET /budgets`` → list[BudgetOut];
# ``GET|PUT|DELETE /budgets/{id or name}``; ``GET /budgets/{id}/status`` → BudgetStatusOut;
# ``POST /budgets/check`` (a JobSubmit) → BudgetCheckOut. A submission a ``block`` budget refuses is
# a 402 problem with code ``budget_exceeded``.

Severity = Literal["info", "warning", "critical"]


class ThresholdIn(_Wire):
    percent: Annotated[float, Field(gt=0, le=1000)]
    severity: Severity = "warning"


class ThrottleIn(_Wire):
    priority: PriorityClass | None = None  # the class the scope's jobs drop to
    max_gpus: Annotated[float | None, Field(ge=0, le=1e6)] = None  # GPUs the scope may hold at once
    spot_only: bool = False  # start the scope's (preemptible) jobs on spot capacity only


class BudgetIn(_Wire):
    """A budget. ``scope``: ``all``, ``team:<name>``, ``project:<name>``, ``namespace:<name>``,
    ``experiment:<name>`` or ``label:<key>=<value>``. ``thresholds`` default to 50/80/100 %
    (info/warning/critical). ``channels``: ``{"type": "webhook"|"slack"|"email"|"pagerduty", ...}``.
    ``team``: the team the budget belongs to — required for a project, namespace, experiment or
    label scope (only that team's jobs count against it; a project so owned is that team's only);
    implied by ``team:<name>`` (may be given, equal); none for ``all``."""

    name: Annotated[str, Field(pattern=NAME)]
    scope: Annotated[str, Field(min_length=3, max_length=300)]
    limit_usd: Annotated[float, Field(gt=0, le=1e12)]
    team: Annotated[str | None, Field(pattern=NAME)] = None
    period: Literal["monthly", "weekly", "custom"] = "monthly"
    timezone: Annotated[str, Field(max_length=63)] = "UTC"
    period_start: datetime | None = None  # custom periods
    period_end: datetime | None = None
    thresholds: Annotated[list[ThresholdIn] | None, Field(max_length=16)] = None
    action: Literal["alert", "throttle", "block"] = "alert"
    throttle: ThrottleIn | None = None
    grace_s: Annotated[float, Field(ge=0, le=366 * 86400)] = 0.0
    channels: Annotated[list[dict[str, object]], Field(max_length=16)] = Field(default_factory=list)
    enabled: bool = True
    # daily cost-anomaly alerts for the scope: a complete day more than anomaly_threshold_pct % and
    # anomaly_floor_usd dollars above its rolling 7-day baseline alerts the channels once
    anomaly_alerts: bool = False
    anomaly_threshold_pct: Annotated[float, Field(gt=0, le=1e6)] = 20.0
    anomaly_floor_usd: Annotated[float, Field(ge=0, le=1e12)] = 50.0


class ThresholdOut(_Out):
    percent: float
    severity: str


class BudgetOut(_Out):
    id: str
    name: str
    scope: str
    limit_usd: float
    period: str
    timezone: str
    period_start: datetime | None
    period_end: datetime | None
    thresholds: list[ThresholdOut]
    action: str
    throttle: ThrottleIn | None
    grace_s: float
    # admins: each channel, secrets (password, routing_key) shown as "***"; others: only
    # {"type": kind, "target": masked} (URL scheme and host, a***@domain, routing key ***last4)
    channels: list[dict[str, object]]
    enabled: bool
    team: str | None = None  # the team the budget belongs to (None: cluster-wide, or unowned)
    anomaly_alerts: bool = False
    anomaly_threshold_pct: float = 20.0
    anomaly_floor_usd: float = 50.0
    created_at: datetime
    updated_at: datetime


class BudgetAlertOut(_Out):
    threshold: float
    severity: str
    kind: str  # threshold | limit (the limit crossing recorded for grace, without notifications) | anomaly
    fired_at: datetime
    spend_usd: float
    limit_usd: float
    notifications: dict[str, int] = Field(default_factory=dict)  # status → count


class BudgetStatusOut(_Out):
    budget_id: str
    name: str
    scope: str
    action: str
    period_start: datetime
    period_end: datetime
    limit_usd: float
    spend_usd: float  # metered in the period so far
    committed_usd: float  # spend plus the estimated rest of the scope's unfinished jobs
    percent: float
    projected_usd: float  # period-end spend at the period's run rate so far, at least what is committed
    remaining_usd: float  # limit − committed, as the 402 and /v1/budgets/check say it (negative: over)
    days_left: float
    thresholds_crossed: list[float]
    enforcing: bool  # throttle/block in force (over the limit for at least grace_s)
    alerts: list[BudgetAlertOut]
    basis: Literal["jobs", "nodes"] = Field(
        default="jobs", description="what the spend counts: jobs' attributed spend (a budget never counts idle)"
    )
    basis_note: str = Field(default="", description="the basis in words")
    projected_from_s: float = Field(
        default=0.0, description="seconds of history the projection's rate is measured over (the period or the ledger)"
    )
    projection_note: str = Field(default="", description="what the projection extrapolates from, in words")


class BudgetCheckLine(_Out):
    budget_id: str
    name: str
    scope: str
    action: str
    limit_usd: float
    committed_usd: float
    remaining_usd: float
    fits: bool  # committed + this job <= limit


class BudgetCheckOut(_Out):
    job_cost_usd: float
    gpus: float
    runtime_s: float
    runtime_source: str  # estimate | max_runtime | default
    usd_per_gpu_hour: float
    fits: bool  # fits every covering budget (a blocking one that does not fit refuses the submit)
    blocked: bool  # a block budget would refuse it now
    budgets: list[BudgetCheckLine]
    # "cluster" (its nodes' price), or the catalog offering a GPU type no node has was priced from
    price_basis: str = "cluster"
    # why a real submit would be refused whatever the budgets (no node could ever run it: the
    # submit's feasibility rules); null when it would be accepted
    submit_refused: str | None = None


# -- insights: progress, forecasts, anomalies, recommendations, ROI (cost management §4–5) --------


class ProgressIn(_Wire):
    """A running job's progress (``POST /v1/jobs/{id}/progress``): steps (or epochs) done of the planned
    total, and metrics (e.g. ``{"loss": 0.31}``) for plateau checks. The server stamps the time."""

    step: Annotated[float | None, Field(strict=True, ge=0, le=1e15)] = None
    total_steps: Annotated[float | None, Field(strict=True, gt=0, le=1e15)] = None
    metrics: Annotated[
        dict[Annotated[Printable, Field(max_length=63)], Annotated[float, Field(strict=True, allow_inf_nan=False)]],
        Field(max_length=32),
    ] = Field(default_factory=dict)


# The API's form of the engine's gpufleet.cost.forecast.JobForecast (the same fields: money rounded, an
# unbounded high end null); the MCP tool's answer (gpufleet.agent.outputs.JobCostForecast) extends it.
class JobForecastOut(_Out):
    """What a running job will still cost (``method``: progress | estimate | none), with an interval."""

    job_id: str
    method: str = Field(description="progress | estimate | none")
    spent_usd: float
    cost_rate_usd_per_hour: float
    fraction_done: float | None
    remaining_s: float | None
    remaining_s_low: float | None
    remaining_s_high: float | None
    remaining_usd: float | None
    remaining_usd_low: float | None
    remaining_usd_high: float | None
    level: float = Field(description="the interval's level (0.9: 90 %)")
    explanation: str


class SpendForecastOut(_Out):
    """A scope's spend at the end of the period: spent so far + the forecast of the days left."""

    scope: str
    period_start: datetime
    period_end: datetime
    spent_usd: float
    forecast_remaining_usd: float
    total_usd: float
    low_usd: float
    high_usd: float
    level: float
    days_left: int
    trend_usd_per_day: float
    weekday_offsets_usd: list[float]  # Monday..Sunday
    residual_sd_usd: float
    history_days: float = Field(description="how long the ledger has existed, in days (a young server's: a fraction)")
    history_since: datetime | None = Field(default=None, description="when the ledger started")
    method: str = Field(description="trend+weekly | trend | mean (daily models) | rate (a young server's rate so far)")
    rate_usd_per_day: float = Field(default=0.0, description="the spend rate forecast for the rest of the period")
    floor_usd: float = Field(
        default=0.0, description="spent + unfinished jobs' estimated rest: the forecast is never below it"
    )
    basis: Literal["jobs", "nodes"] = Field(
        default="nodes",
        description="what the spend counts: nodes (the cluster: node cost, idle included) or jobs (a team's charges)",
    )
    basis_note: str = Field(default="", description="the basis in words, with the cluster's idle share")
    jobs_spent_usd: float | None = Field(
        default=None, description="the cluster's jobs' charges in the period (what an `all` budget counts)"
    )
    projection_note: str = Field(default="", description="what the forecast extrapolates from, in words")


class AnomalyCauseOut(_Out):
    dimension: str  # team | job_id
    key: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    share_of_increase: float


class AnomalyOut(_Out):
    key: str
    day: str  # YYYY-MM-DD (UTC)
    scope: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    increase_pct: float
    causes: list[AnomalyCauseOut]
    action: str
    savings_usd_per_day: float
    message: str


class RecommendationOut(_Out):
    id: str
    kind: str
    target: str
    team: str
    action: str
    monthly_savings_usd: float
    confidence: float
    evidence: dict[str, float | str]
    whatif: str | None  # the change `gpufleet whatif --change` replays to back the figure
    history_s: float = Field(default=0.0, description="seconds of history (the observed window) the figure stands on")
    enough_history: bool = Field(
        default=True, description="False: under an hour observed, the figure is an order of magnitude, not an offer"
    )
    monthly_basis: str = Field(default="", description="what the monthly figure extrapolates from, in words")


class RoiOut(_Out):
    """Actual spend against a fixed on-demand cluster sized for the peak; levers add up to the savings."""

    window_start: datetime
    window_end: datetime
    hours: float
    reference_gpu: str
    reference_usd_per_gpu_hour: float
    peak_gpus: int
    fleet_peak_gpus: int
    used_gpu_hours: float
    node_gpu_hours: float
    counterfactual_usd: float
    actual_usd: float
    savings_usd: float
    savings_pct: float | None
    levers_usd: dict[str, float]
    projected_annual_savings_usd: float | None  # None: too little history to judge (< 24 h observed)
    enough_history: bool
    platform_cost_usd: float
    platform_cost_usd_per_month: float
    payback_months: float | None
    assumptions: list[str]


# -- proposals (``/v1/proposals``): actions an agent proposes and a person approves ---------------
#
# ``POST /proposals`` (``Idempotency-Key`` header) → 201 ProposalOut (200: a replay);
# ``GET /proposals`` (``state``, ``limit``) → list[ProposalOut]; ``GET /proposals/{id}``;
# ``POST /proposals/{id}/approve`` (ProposalApprove, optional) → ProposalOut (``executed`` or
# ``failed``); ``POST /proposals/{id}/reject`` (ProposalReject) → ProposalOut. See docs/proposals.md.

ProposalAction = Literal[
    "resize",
    "change_gpu_type",
    "move_to_spot",
    "reschedule_off_peak",
    "cancel_idle_job",
    "change_quota",
    "change_budget",
]
# pending → executed | failed (approving executes at once, in the same transaction), rejected, expired
ProposalState = Literal["pending", "executed", "failed", "rejected", "expired"]
PROPOSAL_STATES: tuple[str, ...] = ("pending", "executed", "failed", "rejected", "expired")


class ResizeParams(_Wire):
    """A pending job's GPU shape: ``gpus`` whole GPUs per pod, or ``gpu_milli`` thousandths of one shared GPU."""

    gpus: Annotated[int | None, Field(strict=True, ge=1, le=64)] = None
    gpu_milli: Annotated[int | None, Field(strict=True, ge=1, le=999)] = None

    @model_validator(mode="after")
    def _one_shape(self) -> ResizeParams:
        if (self.gpus is None) == (self.gpu_milli is None):
            which = "both given" if self.gpus is not None else "neither given"
            errors = [
                InitErrorDetails(
                    type=PydanticCustomError("shape", f"give exactly one of gpus and gpu_milli ({which})"),
                    loc=(name,),
                    input=getattr(self, name),
                )
                for name in ("gpus", "gpu_milli")
            ]
            raise ValidationError.from_exception_data("ResizeParams", errors)
        return self


class ChangeGpuTypeParams(_Wire):
    """The GPU models a pending job may run on (replacing the ones it allows now)."""

    gpu_types: Annotated[
        list[Annotated[Printable, Field(min_length=1, max_length=63)]], Field(min_length=1, max_length=16)
    ]


class MoveToSpotParams(_Wire):
    """No parameters: the pending job becomes preemptible, so it may run on spot capacity."""


class RescheduleOffPeakParams(_Wire):
    """Hold a pending job until ``start_after`` (refused: jobs have no start-after time; see docs/proposals.md)."""

    start_after: datetime


class CancelIdleJobParams(_Wire):
    """Cancel a running job whose mean GPU utilization over the last ``window_s`` is at most
    ``max_utilization_pct`` (checked when proposed and again when approved)."""

    max_utilization_pct: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 10.0
    window_s: Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)] = 3600.0


_QuotaModel = Annotated[str, Field(min_length=1, max_length=63)]
_QuotaGpus = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class ChangeQuotaParams(_Wire):
    """A team's GPU quotas: GPU model (or ``*``) → GPUs; the models named change, the others stay."""

    quota_gpus: Annotated[dict[_QuotaModel, _QuotaGpus], Field(min_length=1, max_length=64)]


class ChangeBudgetParams(_Wire):
    """A budget's limit and/or enforcement action (``throttle`` says what a throttle does)."""

    limit_usd: Annotated[float | None, Field(gt=0, le=1e12, allow_inf_nan=False)] = None
    action: Literal["alert", "throttle", "block"] | None = None
    throttle: ThrottleIn | None = None

    @model_validator(mode="after")
    def _something(self) -> ChangeBudgetParams:
        if self.limit_usd is None and self.action is None and self.throttle is None:
            errors = [
                InitErrorDetails(
                    type=PydanticCustomError("missing", "give limit_usd, action and/or throttle"),
                    loc=("limit_usd",),
                    input=None,
                )
            ]
            raise ValidationError.from_exception_data("ChangeBudgetParams", errors)
        return self


# Each action's parameters (the ``params`` of a ProposalIn are validated by the action's model).
PROPOSAL_PARAMS: dict[str, type[_Wire]] = {
    "resize": ResizeParams,
    "change_gpu_type": ChangeGpuTypeParams,
    "move_to_spot": MoveToSpotParams,
    "reschedule_off_peak": RescheduleOffPeakParams,
    "cancel_idle_job": CancelIdleJobParams,
    "change_quota": ChangeQuotaParams,
    "change_budget": ChangeBudgetParams,
}
# What each action's ``target`` names.
PROPOSAL_TARGETS: dict[str, str] = {
    "resize": "job",
    "change_gpu_type": "job",
    "move_to_spot": "job",
    "reschedule_off_peak": "job",
    "cancel_idle_job": "job",
    "change_quota": "team",
    "change_budget": "budget",
}


class ProposalEstimate(_Wire):
    """The proposer's estimate of the effect: dollars saved a month (negative: it costs more), how
    sure it is (0..1, as a recommendation's ``confidence``) and what the figure rests on."""

    monthly_savings_usd: Annotated[float, Field(ge=-1e9, le=1e9, allow_inf_nan=False)]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.5
    basis: Annotated[SafeText, Field(max_length=2000)] = ""


class ProposalIn(_Wire):
    """A proposed action. ``params`` are the action's (:data:`PROPOSAL_PARAMS`), errors naming
    ``params.<field>``; ``target`` is a job id, a team name or a budget name/id
    (:data:`PROPOSAL_TARGETS`). ``effect_window_s``: how long before and after the execution the
    target's cost rate is measured; ``expires_in_s``: a pending proposal expires after this long
    (default 7 days)."""

    action: ProposalAction
    target: Annotated[Printable, Field(min_length=1, max_length=255)]
    params: Annotated[dict[str, object], Field(max_length=64)] = Field(default_factory=dict)
    rationale: Annotated[SafeText, Field(max_length=4000)] = ""
    estimate: ProposalEstimate | None = None
    effect_window_s: Annotated[float, Field(gt=0, le=30 * 86400, allow_inf_nan=False)] = 3600.0
    expires_in_s: Annotated[float | None, Field(gt=0, le=90 * 86400, allow_inf_nan=False)] = None

    @model_validator(mode="after")
    def _typed_params(self) -> ProposalIn:
        """``params`` checked against the action's model; its errors are named ``params.<field>``."""
        try:
            PROPOSAL_PARAMS[self.action].model_validate(self.params)
        except ValidationError as e:
            errors = [
                InitErrorDetails(
                    type=PydanticCustomError(str(err["type"]), str(err["msg"]).removeprefix("Value error, ")),
                    loc=("params", *err["loc"]),
                    input=err.get("input"),
                )
                for err in e.errors()
            ]
            raise ValidationError.from_exception_data("ProposalIn", errors) from None
        return self


class ProposalApprove(_Wire):
    reason: Annotated[SafeText, Field(max_length=2000)] = ""


class ProposalReject(_Wire):
    reason: Annotated[SafeText, Field(min_length=1, max_length=2000)]


class ProposalEffectOut(_Out):
    """The measured effect: the target's cost over ``window_s`` before the execution and over as
    long after it (from the ledger, priced as ``/v1/usage`` prices), as rates and as $/month saved."""

    window_s: float
    before_start: datetime
    executed_at: datetime
    after_end: datetime
    before_usd: float
    after_usd: float
    before_usd_per_hour: float
    after_usd_per_hour: float
    monthly_savings_usd: float  # (before − after rate) × hours in a month; negative: it costs more
    measured_at: datetime
    note: str = ""


class ProposalOut(_Out):
    id: str
    action: str
    target: str
    team: str | None  # the target's team (None: a cluster-wide budget; admins only)
    params: dict[str, object]
    rationale: str
    estimate: ProposalEstimate | None
    state: ProposalState
    proposed_by: str  # token id
    created_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    proposed_by_owner: str | None = None  # the person holding the proposer's token (None: no owner)
    decided_by_owner: str | None = None  # the person holding the decider's token
    decided_at: datetime | None = None
    reason: str = ""  # the approver's or rejecter's words
    executed_at: datetime | None = None
    result: str = ""  # what the execution did, or why it failed
    result_job_id: str | None = None  # the job that replaced the target (job shape changes)
    change: dict[str, object] = Field(default_factory=dict)  # {"before": {...}, "after": {...}} of the target
    # what it read when it was planned, per field it sets ("quota_gpus.A100-80GB", "limit_usd", "gpus"...):
    # approving it after one of them changed is refused (409 stale)
    planned_on: dict[str, object] = Field(default_factory=dict)
    effect_window_s: float
    effect_due_at: datetime | None = None  # when the effect can be measured (executed + window)
    measured: ProposalEffectOut | None = None
    # measured − estimated $/month saved (None until both exist)
    estimate_error_usd: float | None = None
