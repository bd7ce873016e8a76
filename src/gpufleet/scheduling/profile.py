"""Scheduler profiles: which policies run, chosen in YAML and validated with clear messages.

Example::

    queue_sort: drf            # fifo | priority | drf | decayed
    placement:                 # one policy, or several combined with weights
      - {name: fgd, weight: 1.0}
      - {name: cost, weight: 0.3}
    backfill: easy             # easy | greedy | strict
    preemption: true
    preempt_min_runtime_s: 0   # a run younger than this is not preempted for priority
    reclaim_min_runtime_s: 120 # ... nor for a quota reclaim (KAI-scheduler's min runtimes)
    aging: {interval_s: 3600, boost: 10}
    fair_share: {half_life_s: 604800}
    max_spot_restarts: 3
    admission: [feasibility, quota, budget]   # admission checks, in order (registered names)
    autoscaler: {enabled: true, wait_threshold_s: 300, queue_threshold: 10, idle_ttl_s: 600}
    teams:
      vision: {weight: 2, quota: {"A100-80GB": 16, "*": 4}, cohort: research, borrowing_limit: 8}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufleet.config import load_model
from gpufleet.model.gpu import canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.model.quota import ANY_GPU, DEFAULT_PRIORITY_GRANT, Quota
from gpufleet.model.share import gpus_milli
from gpufleet.scheduling import ordering as _ordering  # noqa: F401  (registers queue sorts)
from gpufleet.scheduling import placement as _placement  # noqa: F401  (registers placement policies)
from gpufleet.scheduling.admission import ADMISSION_CHECKS, DEFAULT_CHECKS, build_checks
from gpufleet.scheduling.autoscaler import AutoscalerConfig
from gpufleet.scheduling.cycle import CycleConfig, Scheduler
from gpufleet.scheduling.framework import PLACEMENT, QUEUE_SORT, PolicyContext, ScorePlugin, WorkloadClass
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.scheduling.usage import UsageTracker


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlacementEntry(_Strict):
    name: str
    weight: float = Field(1.0, gt=0)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PLACEMENT:
            raise ValueError(f"unknown placement policy '{v}' (known: {', '.join(PLACEMENT.names())})")
        return v


class AgingModel(_Strict):
    interval_s: float = Field(3600.0, gt=0)
    boost: int = Field(10, ge=0)


class FairShareModel(_Strict):
    half_life_s: float = Field(7 * 24 * 3600.0, gt=0)


class AutoscalerModel(_Strict):
    enabled: bool = False
    wait_threshold_s: float = Field(300.0, ge=0)
    queue_threshold: int = Field(10, ge=0)
    idle_ttl_s: float = Field(600.0, ge=0)
    max_new_nodes_per_cycle: int = Field(100, ge=1)


class TeamModel(_Strict):
    weight: float = Field(1.0, gt=0)
    quota: dict[str, float] | None = None  # GPU model (or "*") → GPUs
    cohort: str | None = None
    borrowing_limit: float | None = Field(None, ge=0)  # GPUs
    # priority classes the team may use (None: the default grant, as a team created on the server)
    priority_classes: list[str] | None = None

    @field_validator("priority_classes")
    @classmethod
    def _classes(cls, v: list[str] | None) -> list[str] | None:
        for c in v or ():
            if c not in PRIORITY_CLASSES:
                raise ValueError(f"unknown priority class '{c}' (known: {', '.join(PRIORITY_CLASSES)})")
        return v

    @field_validator("quota")
    @classmethod
    def _types(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return v
        for k, gpus in v.items():
            if k != ANY_GPU and canonical_gpu_name(k) is None:
                raise ValueError(f"unknown GPU model '{k}' in quota")
            if gpus < 0:
                raise ValueError(f"quota for '{k}' must be >= 0")
        return v


class Profile(_Strict):
    queue_sort: str = "drf"
    placement: list[PlacementEntry] = Field(default_factory=lambda: [PlacementEntry(name="bestfit")])
    backfill: Literal["easy", "greedy", "strict"] = "easy"
    preemption: bool = True
    # a run younger than these is not a victim (KAI-scheduler's preemptMinRuntime/reclaimMinRuntime):
    # of priority preemption (higher classes come and go: 0 lets them in at once), of a quota
    # reclaim (a borrower gets some work done before its lender takes the quota back)
    preempt_min_runtime_s: float = Field(0.0, ge=0)
    reclaim_min_runtime_s: float = Field(120.0, ge=0)
    aging: AgingModel = Field(default_factory=AgingModel)
    fair_share: FairShareModel = Field(default_factory=FairShareModel)
    max_spot_restarts: int = Field(3, ge=0)
    autoscaler: AutoscalerModel = Field(default_factory=AutoscalerModel)
    teams: dict[str, TeamModel] = Field(default_factory=dict)
    admission: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECKS))

    @field_validator("admission")
    @classmethod
    def _checks_known(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in ADMISSION_CHECKS:
                raise ValueError(f"unknown admission check '{name}' (known: {', '.join(ADMISSION_CHECKS.names())})")
        if len(set(v)) != len(v):
            raise ValueError("an admission check is listed twice")
        return v

    @field_validator("queue_sort")
    @classmethod
    def _sort_known(cls, v: str) -> str:
        if v not in QUEUE_SORT:
            raise ValueError(f"unknown queue sort '{v}' (known: {', '.join(QUEUE_SORT.names())})")
        return v

    @field_validator("placement", mode="before")
    @classmethod
    def _one_name(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [{"name": v}]
        return v

    def quotas(self) -> list[Quota]:
        out = []
        for team, t in self.teams.items():
            if t.quota is None and t.cohort is None:
                continue
            nominal = {
                (k if k == ANY_GPU else canonical_gpu_name(k) or k): gpus_milli(g) for k, g in (t.quota or {}).items()
            }
            limit = None if t.borrowing_limit is None else gpus_milli(t.borrowing_limit)
            classes = (
                DEFAULT_PRIORITY_GRANT
                if t.priority_classes is None
                else tuple(sorted(set(t.priority_classes), key=PRIORITY_CLASSES.__getitem__))
            )
            out.append(Quota(team, nominal, t.cohort, limit, t.weight, classes))
        return out

    def build(self, workload: Sequence[WorkloadClass] = (), seed: int = 0) -> Scheduler:
        ctx = PolicyContext(
            workload=workload,
            seed=seed,
            params={"aging_interval_s": self.aging.interval_s, "aging_boost": self.aging.boost},
        )
        quota_policy = QuotaPolicy(self.quotas())
        weights = {team: t.weight for team, t in self.teams.items()}
        cfg = CycleConfig(
            backfill=self.backfill,
            preemption=self.preemption,
            preempt_min_runtime_s=self.preempt_min_runtime_s,
            reclaim_min_runtime_s=self.reclaim_min_runtime_s,
            max_spot_restarts=self.max_spot_restarts,
            autoscaler=AutoscalerConfig(**self.autoscaler.model_dump()),
            admission=tuple(self.admission),
        )
        return Scheduler(
            QUEUE_SORT.get(self.queue_sort)(ctx),
            build_placement([(e.name, e.weight) for e in self.placement], ctx),
            cfg,
            quota_policy,
            UsageTracker(self.fair_share.half_life_s),
            weights,
            build_checks(self.admission, ctx),
        )


def build_placement(entries: Sequence[tuple[str, float]], ctx: PolicyContext) -> ScorePlugin:
    """One policy, or a weighted combination of several."""
    if len(entries) == 1:
        return PLACEMENT.get(entries[0][0])(ctx)
    from gpufleet.scheduling.placement.combine import Combined

    return Combined([(PLACEMENT.get(name)(ctx), w) for name, w in entries])


def load_profile(data: Mapping[str, Any] | str | Path | None, source: str = "profile") -> Profile:
    """A profile from a mapping, a YAML file path (settings at the top or under ``scheduler:``), or
    None (defaults). Errors name the file, line and field."""
    if data is None:
        return Profile()
    return load_model(Profile, data, source=source, section="scheduler", what="a profile")
