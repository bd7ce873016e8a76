"""The MCP tools' typed inputs and answers.

Every answer starts with ``summary``: one or two sentences a model can quote, computed from the
figures beside it (never the other way round). Money is USD. Figures marked ``projection`` are
estimates of this module's arithmetic (documented in each tool); the others are the API's own.
Money the API states as exact decimal strings (the cost report) is passed through as such.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.wire import JobForecastOut, ProposalOut


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- recommendations (shared by several tools) --------------------------------------------------------


class Recommendation(_Model):
    """A way to spend less, as ``GET /v1/recommendations`` states it."""

    id: str
    kind: str = Field(
        description="idle, underused, sharing, gpu_type, spot, off_peak, batch_size, early_stop, "
        "reserved, idle_capacity"
    )
    target: str = Field(description="job:<id>, team:<name> or cluster:<GPU model>")
    team: str
    action: str = Field(description="what to do, in words")
    monthly_savings_usd: float
    confidence: float = Field(description="0..1")
    evidence: dict[str, float | str]
    whatif: str | None = Field(description="the what-if change that replays the figure (whatif tool)")
    history_s: float = Field(default=0.0, description="seconds of history the figure stands on")
    enough_history: bool = Field(
        default=True, description="False: under an hour observed; the figure is an order of magnitude, not an offer"
    )
    monthly_basis: str = Field(default="", description="what the monthly figure extrapolates from")


class Recommendations(_Model):
    summary: str
    window: str
    job: str | None
    team: str | None
    items: list[Recommendation] = Field(description="largest $/month first")
    total_monthly_savings_usd: float = Field(description="if every one is taken (they may overlap)")


# -- cost_analysis --------------------------------------------------------------------------------------


class WorkloadCost(_Model):
    """One group of jobs (a project, a team, a label value...) over the window."""

    group: str = Field(description="the group's value ('' when its jobs have none)")
    cost_usd: float
    usd_per_day: float = Field(description="cost_usd / the window's days")
    share_of_spend: float = Field(description="0..1 of the scope's job spend")
    gpu_hours: float
    jobs: int
    flagged_jobs: int = Field(description="jobs the recommendations flag as idle or under-using their GPUs")
    flagged_mean_util_pct: float | None = Field(
        description="GPU-hour-weighted mean GPU utilization of the flagged jobs (telemetry); None: none flagged"
    )
    sentence: str


class JobCost(_Model):
    job_id: str
    name: str
    team: str
    state: str
    group: str
    gpus: float = Field(description="GPU-equivalents it asks for (pods × GPUs, or a fraction)")
    cost_usd: float
    usd_per_day: float
    gpu_hours: float


class FlaggedJob(_Model):
    job_id: str
    kind: str
    mean_util_pct: float | None
    monthly_savings_usd: float
    action: str


class CostAnalysis(_Model):
    summary: str
    scope: str = Field(description="'all' or 'team:<name>'")
    group_by: str
    window_start: datetime
    window_end: datetime
    days: float
    spend_usd: float = Field(description="what the scope's jobs cost in the window (the usage report's rows)")
    usd_per_day: float
    fleet_cost_usd: float = Field(description="what the nodes cost in the window (the usage report's total)")
    idle_usd: float = Field(description="GPU capacity no job held (the usage report's idle line): waste")
    idle_usd_per_day: float
    allocated_pct: float | None = Field(
        description="percent of the paid GPU-hours that jobs held (allocation, not measured utilization)"
    )
    groups: list[WorkloadCost] = Field(description="most expensive first")
    top_jobs: list[JobCost] = Field(description="most expensive first")
    flagged: list[FlaggedJob]
    savings_usd_per_month: float = Field(description="the scope's recommendations, added up (they may overlap)")
    notes: list[str]


# -- forecast_job_cost -------------------------------------------------------------------------------------


class _Summary(_Model):
    summary: str


# The forecast's fields are the API's (JobForecastOut); _Summary is listed last so that its field comes
# first (pydantic orders fields base-first along the reversed MRO): every answer starts with summary.
class JobCostForecast(JobForecastOut, _Summary):
    """``GET /v1/jobs/{id}/forecast`` with the job's name and state."""

    name: str
    team: str
    state: str


# -- check_budget_for_plan ---------------------------------------------------------------------------------


class BudgetLine(_Model):
    name: str
    scope: str
    action: str = Field(description="alert | throttle | block")
    limit_usd: float
    committed_usd: float
    remaining_usd: float = Field(description="limit − committed (negative: over)")
    fits: bool


PlanKind = Literal["fewer_gpus", "shorter", "cheaper_gpu", "spot"]


class PlanOption(_Model):
    kind: PlanKind
    description: str
    gpus: int
    gpu_type: str | None
    hours: float
    spot: bool
    cost_usd: float
    saving_usd: float = Field(description="against the plan's forecast")
    fits: bool | None = Field(description="within the tightest budget's remainder (None: no budget covers it)")
    projection: bool = Field(
        description="False: the budget-check endpoint's own estimate; True: this tool's arithmetic"
    )
    basis: str = Field(description="where the figure comes from")


class BudgetPlanCheck(_Model):
    summary: str
    team: str | None
    gpus: int
    gpu_type: str | None
    hours: float
    spot: bool
    forecast_usd: float = Field(
        description="POST /v1/budgets/check: GPUs × hours × the cluster's $/GPU-hour (the catalog's for a GPU "
        "type no node of the cluster has)"
    )
    usd_per_gpu_hour: float
    price_basis: str = Field(description="'cluster', or the catalog offering the GPU-hour was priced from")
    submit_refused: str | None = Field(
        description="why a real submit of this plan would be refused whatever the budgets (no node could "
        "ever run it); null when it would be accepted"
    )
    spot_forecast_usd: float | None = Field(description="projection when spot: forecast × the catalog's spot ratio")
    fits: bool = Field(description="fits every covering budget the caller may see")
    blocked: bool = Field(description="a block budget would refuse the submit now")
    tightest_budget: str | None
    remaining_usd: float | None
    over_by_usd: float | None
    budgets: list[BudgetLine]
    options: list[PlanOption] = Field(description="cheaper ways to run it, cheapest first")
    notes: list[str]


# -- cost_report -------------------------------------------------------------------------------------------


class CostLine(_Model):
    """One line of ``GET /v1/usage``; money as the API's exact decimal strings."""

    key: dict[str, str]
    gpu_hours: float
    gpu_cost_usd: str
    cpu_cost_usd: str
    memory_cost_usd: str
    total_cost_usd: str


class CostReport(_Model):
    summary: str
    window_start: datetime
    window_end: datetime
    aggregate: list[str]
    filters: dict[str, str]
    rows: list[CostLine]
    other: CostLine | None = Field(description="rows the filters (or the caller's team) leave out")
    idle: CostLine
    adjustment: CostLine | None
    reservation_unused: CostLine | None
    totals: CostLine = Field(description="sum(rows) + other − adjustment + idle + reservation_unused, to the cent")
    node_cost_usd: str | None


# -- compare_configurations --------------------------------------------------------------------------------


class Configuration(_In):
    """A way to run the job."""

    gpu_type: Annotated[str, Field(min_length=1, max_length=63, description="a GPU model, e.g. A100-80GB, L4")]
    gpus: Annotated[int, Field(ge=1, le=512)]
    batch_size: Annotated[int | None, Field(ge=1, description="per-GPU batch size (needs the reference's)")] = None
    spot: bool = False
    off_peak: bool = False


class ConfigurationEstimate(_Model):
    gpu_type: str
    gpus: int
    batch_size: int | None
    spot: bool
    off_peak: bool
    hours: float = Field(description="projected wall-clock hours")
    usd_per_gpu_hour: float
    cost_usd: float = Field(description="projected: gpus × hours × usd_per_gpu_hour")
    price_source: str
    vs_reference_pct: float | None = Field(description="cost against the reference's, in percent (−20: 20 % cheaper)")
    notes: list[str]


class Reference(_Model):
    gpu_type: str
    gpus: int
    batch_size: int | None
    hours: float
    source: str = Field(description="where the runtime comes from (a job's measured run time, or stated)")
    cost_usd: float


class ConfigurationComparison(_Model):
    summary: str
    projection: bool = Field(default=True, description="always True: every figure is a projection")
    reference: Reference
    estimates: list[ConfigurationEstimate] = Field(description="cheapest first")
    assumptions: list[str]


# -- whatif ------------------------------------------------------------------------------------------------


class ReplayFigures(_Model):
    cost_usd: float
    idle_cost_usd: float
    gpu_hours: float
    completed: int
    never_started: int
    wait_mean_s: float | None
    wait_p95_s: float | None
    jct_mean_s: float | None
    jct_p95_s: float | None
    utilization: float | None = Field(description="0..1 of the GPU capacity held by jobs")
    spot_restarts: int


class WhatIfAnswer(_Model):
    summary: str
    change: str
    scope: str = Field(description="'all' or 'team:<name>': whose jobs were replayed")
    window_start: datetime
    window_end: datetime
    jobs: int
    baseline_nodes: int
    baseline: ReplayFigures
    variant: ReplayFigures
    savings_usd: float
    savings_pct: float | None
    lower_bound_usd: float = Field(description="no schedule of the variant can cost less")
    method: str
    assumptions: list[str]


# -- diagnose_anomaly --------------------------------------------------------------------------------------


class SpikeJob(_Model):
    job_id: str
    name: str
    team: str
    state: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    share_of_increase: float
    recommendations: list[Recommendation]


class SpikeTeam(_Model):
    team: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    share_of_increase: float


class Spike(_Model):
    day: str = Field(description="YYYY-MM-DD (UTC)")
    scope: str
    spend_usd: float
    baseline_usd: float
    increase_usd: float
    increase_pct: float
    action: str = Field(description="what would bring spend back, as the API states it")
    savings_usd_per_day: float
    message: str
    jobs: list[SpikeJob] = Field(description="the jobs behind the increase, largest first")
    teams: list[SpikeTeam]


class AnomalyDiagnosis(_Model):
    summary: str
    scope: str
    days: int
    threshold: float
    min_increase_usd: float
    anomalies: list[Spike] = Field(description="most recent first")


# -- propose_action ----------------------------------------------------------------------------------------


class ProposalAnswer(_Model):
    summary: str
    id: str
    state: str = Field(description="pending until a person approves (executed | failed) or rejects it")
    proposal: ProposalOut = Field(description="the proposal as POST /v1/proposals returned it")


__all__ = [
    "AnomalyDiagnosis",
    "BudgetLine",
    "BudgetPlanCheck",
    "Configuration",
    "ConfigurationComparison",
    "ConfigurationEstimate",
    "CostAnalysis",
    "CostLine",
    "CostReport",
    "FlaggedJob",
    "JobCost",
    "JobCostForecast",
    "PlanKind",
    "PlanOption",
    "ProposalAnswer",
    "Recommendation",
    "Recommendations",
    "Reference",
    "ReplayFigures",
    "Spike",
    "SpikeJob",
    "SpikeTeam",
    "WhatIfAnswer",
    "WorkloadCost",
]
