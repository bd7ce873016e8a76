"""The store's tables (SQLAlchemy 2 typed declarative models).

Everything the control plane needs to recover after a crash lives here: jobs and every transition
(``job_events``), each attempt of a job (``runs``: where, which process, when), nodes, the usage
ledger, teams, quotas and tokens.

Conventions:
- times are UNIX seconds (``Float``/double precision), as everywhere in gpufleet; the API renders
  them as RFC 3339;
- the ledger is append-only: a usage segment is inserted once, when the run it meters ends (what is
  still running is metered from ``runs``); a node interval is inserted when the node is added and its
  ``end`` is set once, when the node goes away;
- JSON columns hold small documents (labels, command, placement).
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Team(Base):
    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)  # fair-share weight
    cohort: Mapped[str | None] = mapped_column(String(63), default=None)
    borrowing_limit_milli: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[float] = mapped_column(Float)
    run_as: Mapped[str | None] = mapped_column(String(32), default=None)  # Unix account of its jobs
    # priority classes its members may use; None: the default grant (up to "normal")
    priority_classes: Mapped[list[Any] | None] = mapped_column(JSON, default=None)


class QuotaRow(Base):
    """A team's nominal quota of one GPU model (``"*"`` = any model), in milli-GPU."""

    __tablename__ = "quotas"

    team: Mapped[str] = mapped_column(ForeignKey("teams.name", ondelete="CASCADE"), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(63), primary_key=True)
    nominal_milli: Mapped[int] = mapped_column(Integer)


class Token(Base):
    """A bearer token, stored as the SHA-256 of its secret (the secret is shown once, at creation)."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(127), default="")
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    role: Mapped[str] = mapped_column(String(16))  # admin | member | viewer | metrics
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, default=None)
    revoked_at: Mapped[float | None] = mapped_column(Float, default=None)
    run_as: Mapped[str | None] = mapped_column(String(32), default=None)  # wins over the team's
    # the person holding it (migration 0011); None: made without one (it cannot approve proposals)
    owner: Mapped[str | None] = mapped_column(String(127), default=None)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("submitted_by", "idempotency_key", name="uq_jobs_idempotency"),
        Index("ix_jobs_state_seq", "state", "seq"),
        Index("ix_jobs_team_seq", "team", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)  # submit order
    id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(255))
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    project: Mapped[str] = mapped_column(String(255), default="")
    namespace: Mapped[str] = mapped_column(String(255), default="default")
    experiment: Mapped[str] = mapped_column(String(255), default="")
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    priority_class: Mapped[str] = mapped_column(String(32), default="normal")
    command: Mapped[list[Any]] = mapped_column(JSON)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cwd: Mapped[str | None] = mapped_column(Text, default=None)
    image: Mapped[str | None] = mapped_column(Text, default=None)  # container image (Kubernetes); None: default
    pods: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # a gang: placed all or nothing
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # GPUs per pod (1 for a fraction or a slice)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=1000)  # per GPU; < 1000 = fraction
    mig_profile: Mapped[str | None] = mapped_column(String(32), default=None)
    gpu_types: Mapped[list[Any]] = mapped_column(JSON, default=list)
    min_gpu_memory_gib: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=False)
    checkpoint_dir: Mapped[str | None] = mapped_column(Text, default=None)
    checkpoint_interval_s: Mapped[float | None] = mapped_column(Float, default=None)
    max_runtime_s: Mapped[float | None] = mapped_column(Float, default=None)
    estimated_runtime_s: Mapped[float | None] = mapped_column(Float, default=None)
    submitted_by: Mapped[str | None] = mapped_column(String(32), default=None)  # token id
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    # runtime state
    state: Mapped[str] = mapped_column(String(16), default="PENDING")
    reason: Mapped[str] = mapped_column(Text, default="submitted")  # of the last transition
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)  # first start
    ended_at: Mapped[float | None] = mapped_column(Float, default=None)
    run: Mapped[int] = mapped_column(Integer, default=0)  # current/last attempt (0: never admitted)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    placement: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{node, gpus, milli, mig_mask}]
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[float] = mapped_column(Float)
    budget_usd: Mapped[float | None] = mapped_column(Float, default=None)  # the job's own cost limit
    # where its pods may run (migration 0013): the PodSpec's nodeSelector, required node affinity and
    # tolerations (gpufleet.model.constraints); NULL: no constraint
    constraints: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    run_as: Mapped[str | None] = mapped_column(String(32), default=None)  # Unix account; None: the server's


class JobEventRow(Base):
    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    old: Mapped[str | None] = mapped_column(String(16), default=None)
    new: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")


class RunRow(Base):
    """One attempt of a job on the backend. ``ended_at`` is NULL while it runs."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_open", "ended_at"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    run: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(255))
    placement: Mapped[list[Any]] = mapped_column(JSON, default=list)
    capacity_type: Mapped[str] = mapped_column(String(16), default="on-demand")
    node_hourly_usd: Mapped[float] = mapped_column(Float, default=0.0)
    pid: Mapped[int | None] = mapped_column(Integer, default=None)
    admitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)  # as the backend measured it
    ended_at: Mapped[float | None] = mapped_column(Float, default=None)
    outcome: Mapped[str | None] = mapped_column(String(16), default=None)  # backend event kind
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    reason: Mapped[str] = mapped_column(Text, default="")
    stop_requested: Mapped[str | None] = mapped_column(Text, default=None)  # why a stop was asked


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(63), default="")
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    pool: Mapped[str] = mapped_column(String(63), default="default")
    capacity_type: Mapped[str] = mapped_column(String(16), default="on-demand")
    sharing: Mapped[str] = mapped_column(String(16), default="shared")
    hourly_price_usd: Mapped[float] = mapped_column(Float, default=0.0)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # the node's GpuSharingFacts (store.convert); NULL: the default (unshared, nvidia.com/gpu)
    gpu_facts: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # the taints that keep pods off it (migration 0013): [{key, value, effect}]; NULL: none
    taints: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    state: Mapped[str] = mapped_column(String(16), default="ready")  # ready | cordoned | removed
    added_at: Mapped[float] = mapped_column(Float)
    removed_at: Mapped[float | None] = mapped_column(Float, default=None)


class NodeIntervalRow(Base):
    """A node existed at ``hourly_usd`` from ``start`` to ``end`` (NULL while it exists)."""

    __tablename__ = "node_intervals"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(255), index=True)
    pool: Mapped[str] = mapped_column(String(63))
    gpu_model: Mapped[str] = mapped_column(String(63))
    gpu_count: Mapped[int] = mapped_column(Integer)
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    capacity_type: Mapped[str] = mapped_column(String(16))
    hourly_usd: Mapped[float] = mapped_column(Float)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float | None] = mapped_column(Float, default=None)


class UsageSegmentRow(Base):
    """What one run of a job held on one node, from ``start`` to ``end``. Inserted once, never updated."""

    __tablename__ = "usage_segments"
    __table_args__ = (
        UniqueConstraint("job_id", "run", "node", name="uq_usage_run_node"),
        Index("ix_usage_time", "start", "end"),
        Index("ix_usage_team", "team"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    run: Mapped[int] = mapped_column(Integer)
    team: Mapped[str] = mapped_column(String(63))
    project: Mapped[str] = mapped_column(String(255), default="")
    namespace: Mapped[str] = mapped_column(String(255), default="default")
    experiment: Mapped[str] = mapped_column(String(255), default="")
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    node: Mapped[str] = mapped_column(String(255))
    pool: Mapped[str] = mapped_column(String(63))
    gpu_model: Mapped[str] = mapped_column(String(63))
    capacity_type: Mapped[str] = mapped_column(String(16))
    gpu_share_units: Mapped[int] = mapped_column(Integer)  # 1/7000 GPU (whole, MIG k/7, milli exact)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    node_hourly_usd: Mapped[float] = mapped_column(Float)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float)
    priority_class: Mapped[str] = mapped_column(String(32), default="normal", server_default="normal")  # multipliers


class GpuSampleRow(Base):
    """GPU telemetry (NVML): one row per GPU per sample; ``job_id`` set for per-job memory rows."""

    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_time", "time"), Index("ix_gpu_samples_job", "job_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(255))
    gpu_index: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str | None] = mapped_column(String(32), default=None)
    utilization_pct: Mapped[float | None] = mapped_column(Float, default=None)
    memory_used_mib: Mapped[float] = mapped_column(Float, default=0.0)
    memory_total_mib: Mapped[float | None] = mapped_column(Float, default=None)
    uuid: Mapped[str | None] = mapped_column(String(96), default=None)  # the GPU's (NVML/DCGM), since 0010
    temperature_c: Mapped[float | None] = mapped_column(Float, default=None)
    power_w: Mapped[float | None] = mapped_column(Float, default=None)


class ControllerRow(Base):
    """Each replica's heartbeat; the leader also publishes the queue it last computed."""

    __tablename__ = "controllers"

    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    is_leader: Mapped[bool] = mapped_column(Boolean, default=False)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)
    last_cycle_ms: Mapped[float | None] = mapped_column(Float, default=None)
    queue: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{job, position, reason, estimated_start}]
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class JobProgressRow(Base):
    """Progress a running job reports (SDK or progress file): steps, and metrics for plateau checks."""

    __tablename__ = "job_progress"
    __table_args__ = (Index("ix_job_progress_job", "job_id", "time"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    step: Mapped[float | None] = mapped_column(Float, default=None)
    total_steps: Mapped[float | None] = mapped_column(Float, default=None)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # e.g. {"loss": 0.31}


class BudgetRow(Base):
    """A spending limit on a scope for each period, with thresholds, channels and an enforcement action.

    scope_kind: ``all`` | ``team`` | ``project`` | ``namespace`` | ``experiment`` | ``label``
    (scope_value ``key=value``); period: ``monthly`` | ``weekly`` | ``custom`` (period_start/end);
    action: ``alert`` | ``throttle`` (``throttle`` JSON: priority, max_gpus, spot_only) | ``block``.
    """

    __tablename__ = "budgets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(127), unique=True)
    scope_kind: Mapped[str] = mapped_column(String(16))
    scope_value: Mapped[str] = mapped_column(String(255), default="")
    period: Mapped[str] = mapped_column(String(16), default="monthly")
    period_start: Mapped[float | None] = mapped_column(Float, default=None)  # custom periods
    period_end: Mapped[float | None] = mapped_column(Float, default=None)
    timezone: Mapped[str] = mapped_column(String(63), default="UTC")
    limit_usd: Mapped[float] = mapped_column(Float)
    thresholds: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{"percent": 50, "severity": "info"}, ...]
    action: Mapped[str] = mapped_column(String(16), default="alert")
    throttle: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    grace_s: Mapped[float] = mapped_column(Float, default=0.0)  # block/throttle only after this long over
    channels: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{"type": "webhook", "url": ...}, ...]
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # daily cost-anomaly alerts for the scope (migration 0003): opt-in, threshold in percent above
    # the baseline and a dollar floor on the increase
    anomaly_alerts: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    anomaly_threshold_pct: Mapped[float] = mapped_column(Float, default=20.0, server_default="20")
    anomaly_floor_usd: Mapped[float] = mapped_column(Float, default=50.0, server_default="50")
    # the team the budget belongs to (migration 0005): its scope's team for ``team:X``, the owner of
    # a project/namespace/experiment/label scope (only its jobs count; its members see the budget);
    # NULL for ``all`` and for unowned scopes stored before 0005 (every team's jobs, admins only)
    team: Mapped[str | None] = mapped_column(String(63), default=None)
    created_by: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class BudgetAlertRow(Base):
    """One threshold crossing of one budget in one period: unique, so it fires exactly once."""

    __tablename__ = "budget_alerts"
    __table_args__ = (UniqueConstraint("budget_id", "period_start", "threshold", name="uq_budget_alert_once"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    budget_id: Mapped[str] = mapped_column(ForeignKey("budgets.id", ondelete="CASCADE"))
    period_start: Mapped[float] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)  # percent; -1 for an anomaly (one per budget and day)
    severity: Mapped[str] = mapped_column(String(16), default="warning")
    kind: Mapped[str] = mapped_column(String(32), default="threshold")  # threshold | anomaly | job-limit
    fired_at: Mapped[float] = mapped_column(Float)
    spend_usd: Mapped[float] = mapped_column(Float)
    limit_usd: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class NotificationRow(Base):
    """The outbox: one delivery of one alert to one channel, retried until sent or given up."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("alert_id", "channel_index", name="uq_notification_once"),
        Index("ix_notifications_due", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("budget_alerts.id", ondelete="CASCADE"))
    channel_index: Mapped[int] = mapped_column(Integer)
    channel: Mapped[dict[str, Any]] = mapped_column(JSON)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | sent | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    last_error: Mapped[str] = mapped_column(Text, default="")
    sent_at: Mapped[float | None] = mapped_column(Float, default=None)


class ProposalRow(Base):
    """An action an agent proposed (migration 0009): pending until a person approves it (then it is
    executed at once: ``executed`` or ``failed``) or rejects it, or it expires. After the execution
    the target's cost over ``effect_window_s`` before and after is measured from the ledger."""

    __tablename__ = "proposals"
    __table_args__ = (
        UniqueConstraint("proposed_by", "idempotency_key", name="uq_proposals_idempotency"),
        Index("ix_proposals_state", "state", "seq"),
        Index("ix_proposals_team", "team", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)  # the order they came in
    id: Mapped[str] = mapped_column(String(32), unique=True)
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(255))  # a job id, a team, a budget (name or id)
    team: Mapped[str | None] = mapped_column(String(63), default=None)  # the target's; NULL: admins only
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    rationale: Mapped[str] = mapped_column(Text, default="")
    # the proposer's estimate
    est_monthly_savings_usd: Mapped[float | None] = mapped_column(Float, default=None)
    est_confidence: Mapped[float | None] = mapped_column(Float, default=None)
    est_basis: Mapped[str] = mapped_column(Text, default="")
    # pending | executed | failed | rejected | expired
    state: Mapped[str] = mapped_column(String(16), default="pending")
    proposed_by: Mapped[str] = mapped_column(String(32))  # token id
    proposed_by_owner: Mapped[str | None] = mapped_column(String(127), default=None)  # its owner (0011)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    decided_by: Mapped[str | None] = mapped_column(String(32), default=None)  # token id
    decided_by_owner: Mapped[str | None] = mapped_column(String(127), default=None)  # its owner (0011)
    decided_at: Mapped[float | None] = mapped_column(Float, default=None)
    reason: Mapped[str] = mapped_column(Text, default="")  # the decider's words
    executed_at: Mapped[float | None] = mapped_column(Float, default=None)
    result: Mapped[str] = mapped_column(Text, default="")  # what the execution did, or why it failed
    result_job_id: Mapped[str | None] = mapped_column(String(32), default=None)  # a replacement job
    change: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # {"before": {...}, "after": {...}}
    # what it read when it was planned, per field it sets (0011; None: made before); compared when approved
    planned_on: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # the measured effect: the target's cost in the window before and after the execution
    effect_window_s: Mapped[float] = mapped_column(Float)
    measured_before_usd: Mapped[float | None] = mapped_column(Float, default=None)
    measured_after_usd: Mapped[float | None] = mapped_column(Float, default=None)
    measured_monthly_savings_usd: Mapped[float | None] = mapped_column(Float, default=None)
    measured_at: Mapped[float | None] = mapped_column(Float, default=None)
    measure_note: Mapped[str] = mapped_column(Text, default="")
