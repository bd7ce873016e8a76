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
``GET    /usage``                           → UsageReport (``window``, ``aggregate``, ``spread_idle``)
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


class UsageReport(_Out):
    window_start: datetime
    window_end: datetime
    aggregate: list[str]
    rows: list[CostLineOut]
    idle: CostLineOut
    totals: CostLineOut


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
