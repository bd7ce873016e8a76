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

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"  # team / token names (DNS-label-like)
PriorityClass = Literal["background", "low", "normal", "high", "urgent"]


class Role(StrEnum):
    ADMIN = "admin"  # everything: teams, quotas, tokens, every team's jobs
    MEMBER = "member"  # submit; read and cancel its own team's jobs; read nodes, queue, usage
    VIEWER = "viewer"  # read its own team's jobs, nodes, queue, usage


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class JobSubmit(_Wire):
    """A job to run. Exactly one GPU shape: ``gpus`` whole GPUs, or ``gpu_milli`` thousandths of
    one shared GPU, or one ``mig`` slice; or none of them (a CPU-only job)."""

    command: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=1024)]
    name: Annotated[str, Field(max_length=255)] = ""
    team: Annotated[str | None, Field(pattern=NAME)] = None  # default: the token's team
    project: Annotated[str, Field(max_length=255)] = ""
    namespace: Annotated[str, Field(max_length=255)] = "default"
    experiment: Annotated[str, Field(max_length=255)] = ""
    labels: Annotated[dict[Annotated[str, Field(max_length=63)], Annotated[str, Field(max_length=255)]], Field(
        max_length=64
    )] = Field(default_factory=dict)
    priority: PriorityClass = "normal"
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_milli: Annotated[int | None, Field(ge=1, le=999)] = None
    mig: Annotated[str | None, Field(pattern=r"^[1-7]g\.[0-9]+gb$")] = None
    gpu_types: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=16)] = Field(
        default_factory=list
    )
    min_gpu_memory_gib: Annotated[float, Field(ge=0, le=4096)] = 0.0
    cpu_milli: Annotated[int, Field(ge=0, le=1_024_000)] = 0
    memory_mib: Annotated[int, Field(ge=0, le=64 * 1024 * 1024)] = 0
    preemptible: bool = False
    checkpoint_dir: Annotated[str | None, Field(max_length=4096)] = None
    max_runtime_s: Annotated[float | None, Field(gt=0, le=366 * 86400)] = None
    estimated_runtime_s: Annotated[float | None, Field(gt=0, le=366 * 86400)] = None
    budget_usd: Annotated[float | None, Field(gt=0, le=1e9)] = None  # stop the job when its cost reaches this
    env: Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=255)], Annotated[
        str, Field(max_length=32768)
    ]], Field(max_length=256)] = Field(default_factory=dict)
    cwd: Annotated[str | None, Field(max_length=4096)] = None

    @model_validator(mode="after")
    def _one_gpu_shape(self) -> JobSubmit:
        if self.gpu_milli is not None and self.mig is not None:
            raise ValueError("ask for either gpu_milli (a fraction of a shared GPU) or mig (a MIG slice), not both")
        if (self.gpu_milli is not None or self.mig is not None) and self.gpus not in (0, 1):
            raise ValueError("a fractional or MIG request is for one GPU: leave gpus at 0 or 1")
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
    estimated_start: datetime | None  # None: unknown (no runtime estimates ahead of it)
    submitted_at: datetime


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


class TeamIn(_Wire):
    weight: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    cohort: Annotated[str | None, Field(pattern=NAME)] = None
    borrowing_limit_gpus: Annotated[float | None, Field(ge=0, le=1e6)] = None
    quota_gpus: Annotated[dict[Annotated[str, Field(max_length=63)], Annotated[float, Field(ge=0, le=1e6)]], Field(
        max_length=64
    )] = Field(default_factory=dict)  # GPU model (or "*") → GPUs


class TeamOut(_Out):
    name: str
    weight: float
    cohort: str | None
    borrowing_limit_gpus: float | None
    quota_gpus: dict[str, float]
    used_gpus: dict[str, float]  # GPU model → GPUs held by running jobs now


class TokenCreate(_Wire):
    team: Annotated[str, Field(pattern=NAME)]
    role: Role = Role.MEMBER
    name: Annotated[str, Field(max_length=127)] = ""
    expires_in_days: Annotated[float | None, Field(gt=0, le=3650)] = None


class TokenOut(_Out):
    id: str
    name: str
    team: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked: bool


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
    (info/warning/critical). ``channels``: ``{"type": "webhook"|"slack"|"email"|"pagerduty", ...}``."""

    name: Annotated[str, Field(pattern=NAME)]
    scope: Annotated[str, Field(min_length=3, max_length=300)]
    limit_usd: Annotated[float, Field(gt=0, le=1e12)]
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
    channels: list[dict[str, object]]  # secrets (password, routing_key) shown as "***"
    enabled: bool
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
    projected_usd: float  # period-end spend at the period's run rate so far
    remaining_usd: float
    days_left: float
    thresholds_crossed: list[float]
    enforcing: bool  # throttle/block in force (over the limit for at least grace_s)
    alerts: list[BudgetAlertOut]


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


# -- insights: progress, forecasts, anomalies, recommendations, ROI (cost management §4–5) --------


class ProgressIn(_Wire):
    """A running job's progress (``POST /v1/jobs/{id}/progress``): steps (or epochs) done of the planned
    total, and metrics (e.g. ``{"loss": 0.31}``) for plateau checks. The server stamps the time."""

    step: Annotated[float | None, Field(ge=0, le=1e15)] = None
    total_steps: Annotated[float | None, Field(gt=0, le=1e15)] = None
    metrics: Annotated[
        dict[Annotated[str, Field(max_length=63)], Annotated[float, Field(allow_inf_nan=False)]], Field(max_length=32)
    ] = Field(default_factory=dict)


class JobForecastOut(_Out):
    """What a running job will still cost (``method``: progress | estimate | none), with an interval."""

    job_id: str
    method: str
    spent_usd: float
    cost_rate_usd_per_hour: float
    fraction_done: float | None
    remaining_s: float | None
    remaining_s_low: float | None
    remaining_s_high: float | None
    remaining_usd: float | None
    remaining_usd_low: float | None
    remaining_usd_high: float | None
    level: float
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
    history_days: int
    method: str


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


class RoiOut(_Out):
    """Actual spend against a fixed on-demand cluster sized for the peak; levers add up to the savings."""

    window_start: datetime
    window_end: datetime
    hours: float
    reference_gpu: str
    reference_usd_per_gpu_hour: float
    peak_gpus: int
    used_gpu_hours: float
    node_gpu_hours: float
    counterfactual_usd: float
    actual_usd: float
    savings_usd: float
    savings_pct: float | None
    levers_usd: dict[str, float]
    projected_annual_savings_usd: float
    platform_cost_usd: float
    platform_cost_usd_per_month: float
    payback_months: float | None
    assumptions: list[str]
