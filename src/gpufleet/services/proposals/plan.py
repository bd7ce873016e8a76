"""Planning an action: the checks its execution makes, made the same way when it is proposed (a dry
run: nothing is changed) and when it is approved, and the change it makes (``before``/``after``)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gpufleet.cost.budgets.model import Budget, Throttle
from gpufleet.errors import InputError
from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.job import JobState
from gpufleet.model.share import gpus_milli, milli_gpus
from gpufleet.services import jobs as jobs_service
from gpufleet.services.proposals.actions import JOB_SHAPE_ACTIONS, field_path, visible_budget, visible_job
from gpufleet.services.proposals.common import Actor, NothingToChangeError, TargetStateError
from gpufleet.services.submit import check_fits_store, prepare_submit
from gpufleet.store import repo
from gpufleet.store.models import BudgetRow, JobRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import (
    PROPOSAL_PARAMS,
    PROPOSAL_TARGETS,
    CancelIdleJobParams,
    ChangeBudgetParams,
    ChangeGpuTypeParams,
    ChangeQuotaParams,
    JobSubmit,
    ResizeParams,
    Role,
)

_FIELD_PREFIX = re.compile(r"^field '[^']*': ")
_SHAPE_KEYS = ("pods", "gpus", "gpu_milli", "mig_profile", "gpu_types", "preemptible")


# -- how a change reads ---------------------------------------------------------------------------


def hours_text(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def gpus_text(fields: Mapping[str, Any]) -> str:
    pods = int(fields.get("pods") or 1)
    per = ""
    if fields.get("mig_profile"):
        per = f"a {fields['mig_profile']} MIG slice"
    elif int(fields.get("gpus") or 0) == 1 and int(fields.get("gpu_milli") or MILLI) < MILLI:
        per = f"{int(fields['gpu_milli'])}/1000 of a GPU"
    else:
        n = int(fields.get("gpus") or 0)
        per = f"{n} GPU" + ("" if n == 1 else "s")
    return per if pods == 1 else f"{pods} pods x {per}"


# -- planning an action (the same checks when proposed and when executed) ---------------------------


def _param_fields(action: str) -> frozenset[str]:
    return frozenset(PROPOSAL_PARAMS[action].model_fields)


def _blame(e: InputError, action: str) -> InputError:
    """An error about the changed job: on ``params.<field>`` when one of the action's parameters
    is at fault, else on ``target`` (the job's own request)."""
    field = e.field or ""
    root = re.split(r"[.\[]", field, maxsplit=1)[0]
    message = _FIELD_PREFIX.sub("", e.message, count=1)
    if root in _param_fields(action):
        return InputError(message, field=f"params.{field}")
    if action == "resize" and root == "mig":
        return InputError(message, field="params.gpus")
    return InputError(f"the job's request: {message}", field="target")


def _job_updates(action: str, params: Any) -> dict[str, Any]:
    if isinstance(params, ResizeParams):
        if params.gpus is not None:
            return {"gpus": params.gpus, "gpu_milli": None, "mig": None}
        return {"gpus": 0, "gpu_milli": params.gpu_milli, "mig": None}
    if isinstance(params, ChangeGpuTypeParams):
        return {"gpu_types": list(params.gpu_types)}
    return {"preemptible": True}  # move_to_spot


def _submit_of(job: JobRow, updates: Mapping[str, Any], action: str) -> JobSubmit:
    """The request that submits ``job`` again with ``updates`` (wire names: ``gpus``, ``gpu_milli``,
    ``mig``, ``gpu_types``, ``preemptible``)."""
    if job.mig_profile:
        shape: dict[str, Any] = {"mig": job.mig_profile}
    elif job.gpus == 1 and job.gpu_milli < MILLI:
        shape = {"gpu_milli": job.gpu_milli}
    else:
        shape = {"gpus": job.gpus}
    fields: dict[str, Any] = {
        "command": list(job.command),
        "name": job.name,
        "team": job.team,
        "project": job.project,
        "namespace": job.namespace,
        "experiment": job.experiment,
        "labels": dict(job.labels or {}),
        "priority": job.priority_class,
        "gpu_types": list(job.gpu_types or []),
        "min_gpu_memory_gib": float(job.min_gpu_memory_gib),
        "cpu_milli": job.cpu_milli,
        "memory_mib": job.memory_mib,
        "preemptible": bool(job.preemptible),
        "checkpoint_dir": job.checkpoint_dir,
        "checkpoint_interval_s": job.checkpoint_interval_s,
        "max_runtime_s": job.max_runtime_s,
        "estimated_runtime_s": job.estimated_runtime_s,
        "budget_usd": job.budget_usd,
        "env": dict(job.env or {}),
        "cwd": job.cwd,
        "image": job.image,
        "pods": max(1, job.pods or 1),
        **shape,
        **updates,
    }
    try:
        return JobSubmit.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        raise _blame(
            InputError(str(err["msg"]).removeprefix("Value error, "), field=field_path(err["loc"])), action
        ) from None


def _shape(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: fields.get(k) for k in _SHAPE_KEYS}
    out["gpu_types"] = list(out["gpu_types"] or [])
    out["pods"] = int(out["pods"] or 1)
    out["preemptible"] = bool(out["preemptible"])
    return out


def shape_of_job(job: JobRow) -> dict[str, Any]:
    return {k: getattr(job, k) for k in _SHAPE_KEYS}


def _require_pending(job: JobRow, action: str) -> None:
    if job.state != JobState.PENDING.value or job.cancel_requested:
        state = "being cancelled" if job.cancel_requested else job.state
        verb = {"resize": "resized", "change_gpu_type": "moved to other GPU types", "move_to_spot": "moved to spot"}
        if job.state in jobs_service.TERMINAL:
            raise TargetStateError(f"job {job.id} already ended ({job.state}); nothing to change")
        raise TargetStateError(
            f"job {job.id} is {state}: only a pending job can be {verb[action]} (a running job would have "
            "to be stopped and requeued, losing the work since its last checkpoint; cancel it and submit it "
            "again with the change instead)"
        )


def plan_job_shape(s: Session, job: JobRow, action: str, params: Any, *, team: str, role: Role) -> Any:
    """Validate the changed job as its submit would (``prepare_submit`` for ``team``/``role``, then
    the store's nodes); returns the prepared submit and the before/after of what changes."""
    _require_pending(job, action)
    body = _submit_of(job, _job_updates(action, params), action)
    try:
        prepared = prepare_submit(body, caller_team=team, caller_role=role)
        check_fits_store(s, prepared.fields)
    except InputError as e:
        raise _blame(e, action) from None
    before = _shape({**{k: getattr(job, k) for k in _SHAPE_KEYS}})
    after = _shape(prepared.fields)
    if before == after:
        raise NothingToChangeError(f"job {job.id} already has this shape: {gpus_text(before)}, nothing to change")
    keys = [k for k in _SHAPE_KEYS if before[k] != after[k]]
    return prepared, {"before": {k: before[k] for k in keys}, "after": {k: after[k] for k in keys}}


def plan_idle(s: Session, job: JobRow, params: CancelIdleJobParams, now: float) -> dict[str, Any]:
    if job.state != JobState.RUNNING.value or job.cancel_requested:
        state = "being cancelled" if job.cancel_requested else job.state
        raise TargetStateError(f"job {job.id} is {state}: only a running job can be cancelled for being idle")
    n, mean = repo.job_utilization(s, job.id, now - params.window_s, now)
    if n == 0 or mean is None:
        raise TargetStateError(
            f"no GPU utilization sample of job {job.id} in the last {hours_text(params.window_s)}: "
            "nothing shows it is idle"
        )
    if mean > params.max_utilization_pct:
        raise TargetStateError(
            f"job {job.id} is not idle: its mean GPU utilization over the last {hours_text(params.window_s)} "
            f"is {mean:.1f}% (> {params.max_utilization_pct:g}%)"
        )
    return {
        "before": {"state": job.state, "mean_utilization_pct": round(mean, 2), "samples": n},
        "after": {"state": JobState.CANCELLED.value},
    }


def plan_quota(s: Session, team: str, params: ChangeQuotaParams) -> tuple[dict[str, int], dict[str, Any]]:
    current = repo.team_quotas(s, team)
    new = dict(current)
    for model, gpus in params.quota_gpus.items():
        canon = "*" if model == "*" else canonical_gpu_name(model)
        if canon is None:
            raise InputError(f"unknown GPU model '{model}' (or '*' for any)", field=f"params.quota_gpus.{model}")
        new[canon] = gpus_milli(gpus)
    if new == current:
        raise NothingToChangeError(f"team {team} already has these quotas; nothing to change")

    def in_gpus(q: Mapping[str, int]) -> dict[str, float]:
        return {m: milli_gpus(q[m]) for m in sorted(q)}

    return new, {"before": in_gpus(current), "after": in_gpus(new)}


def _budget_view(b: Budget) -> dict[str, Any]:
    return {"limit_usd": b.limit_usd, "action": b.action, "throttle": b.throttle.to_json()}


def plan_budget(row: BudgetRow, params: ChangeBudgetParams) -> tuple[Budget, dict[str, Any]]:
    b = budgets_repo.budget_of(row)
    changes: dict[str, Any] = {}
    if params.limit_usd is not None:
        changes["limit_usd"] = float(params.limit_usd)
    if params.action is not None:
        changes["action"] = params.action
    try:
        if params.throttle is not None:
            changes["throttle"] = Throttle.from_json(params.throttle.model_dump())
        new = dataclasses.replace(b, **changes)
    except InputError as e:
        field = (e.field or "action").split(".")[0]
        raise InputError(_FIELD_PREFIX.sub("", e.message, count=1), field=f"params.{field}") from None
    before, after = _budget_view(b), _budget_view(new)
    if before == after:
        raise NothingToChangeError(f"budget {row.name} already has this limit and action; nothing to change")
    keys = [k for k in before if before[k] != after[k]]
    scope = b.scope
    change = {
        "before": {k: before[k] for k in keys},
        "after": {k: after[k] for k in keys},
        "scope": {"kind": scope.kind, "value": scope.value, "owner": scope.owner},
    }
    return new, change


# -- what a proposal read when it was planned (compared when it is approved) ------------------------
#
# A proposal sets absolute values ("quota 8", "limit $500"), planned on the state it read. Applied
# after someone changed one of those fields, it would silently undo that change; so the values it
# read are stored (``planned_on``, per field it sets) and compared with the current ones when it is
# approved. Only the fields it sets count: a change elsewhere on the target undoes nothing.

_JOB_FIELDS = {
    "resize": ("gpus", "gpu_milli", "mig_profile"),
    "change_gpu_type": ("gpu_types",),
    "move_to_spot": ("preemptible",),
}
_BUDGET_FIELDS = ("limit_usd", "action", "throttle")


def _plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (lists for tuples, plain dicts), for comparing."""
    return json.loads(json.dumps(value))


def _quota_models(params: ChangeQuotaParams) -> list[str]:
    models = ("*" if m == "*" else canonical_gpu_name(m) for m in params.quota_gpus)
    return [m for m in models if m is not None]  # an unknown model is refused by plan_quota


def job_fields(job: JobRow, action: str) -> dict[str, Any]:
    """The job's values of the fields ``action`` sets (as the change's ``before`` shows them)."""
    shape = _shape(shape_of_job(job))
    return {k: _plain(shape[k]) for k in _JOB_FIELDS.get(action, ())}


def quota_fields(s: Session, team: str, params: ChangeQuotaParams) -> dict[str, Any]:
    """The team's quota, in GPUs, of each model the proposal names (None: it has none)."""
    current = repo.team_quotas(s, team)
    return {f"quota_gpus.{m}": (milli_gpus(current[m]) if m in current else None) for m in _quota_models(params)}


def budget_fields(row: BudgetRow, params: ChangeBudgetParams) -> dict[str, Any]:
    """The budget's values of the fields the proposal gives (limit, action, throttle)."""
    view = _budget_view(budgets_repo.budget_of(row))
    return {k: _plain(view[k]) for k in _BUDGET_FIELDS if getattr(params, k) is not None}


def planned_on(s: Session, action: str, target: str, params: Any, who: Actor) -> dict[str, Any]:
    """What the action reads now of the fields it sets: stored with the proposal. (Cancelling an
    idle job sets no value: whether it is still idle is checked again when it is approved.)"""
    if action in JOB_SHAPE_ACTIONS:
        return job_fields(visible_job(s, who, target), action)
    if action == "cancel_idle_job":
        return {}
    if PROPOSAL_TARGETS[action] == "team":
        return quota_fields(s, target, params)
    return budget_fields(visible_budget(s, who, target), params)


def recorded_planned_on(action: str, params: Any, change: Mapping[str, Any] | None) -> dict[str, Any]:
    """``planned_on`` of a proposal stored without it (made before it was recorded), from the
    ``before`` it recorded when proposed: the whole quota map; the budget's and the job's fields
    that were to change."""
    before = ((change or {}).get("proposed") or {}).get("before") or {}
    if action == "change_quota":
        return {f"quota_gpus.{m}": before.get(m) for m in _quota_models(params)}
    keys = _JOB_FIELDS.get(action) or (_BUDGET_FIELDS if action == "change_budget" else ())
    return {k: _plain(before[k]) for k in keys if k in before}


def changed_fields(planned: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``field → (planned-on value, current value)`` of each planned-on field that changed since."""
    return {k: (v, current.get(k)) for k, v in planned.items() if _plain(v) != _plain(current.get(k))}


def value_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def dry_run(s: Session, action: str, target: str, params: Any, who: Actor, now: float) -> dict[str, Any]:
    """The checks of the execution, without executing: the change the action would make."""
    kind = PROPOSAL_TARGETS[action]
    if action in JOB_SHAPE_ACTIONS:
        job = visible_job(s, who, target)
        # shape rules only here (whoever approves must also be allowed to submit it: checked then)
        return dict(plan_job_shape(s, job, action, params, team=job.team, role=Role.ADMIN)[1])
    if action == "cancel_idle_job":
        return plan_idle(s, visible_job(s, who, target), params, now)
    if kind == "team":
        return plan_quota(s, target, params)[1]
    return plan_budget(visible_budget(s, who, target), params)[1]
