"""Proposals (issue 14): an agent proposes an action, a person approves it, the action is executed
through the same service functions the API uses, and its real effect on cost is measured afterwards.

A proposal is stored ``pending`` with the proposer's estimate (dollars a month, confidence, basis)
and changes nothing until a person decides it:

- **approve** — the approver must be allowed to perform the action themselves (the checks of the
  endpoint that does it by hand) and must not be the token that proposed it. The action is executed
  at once, in the approval's transaction, inside a SAVEPOINT: it either happens whole and the
  proposal turns ``executed`` with what was done, or nothing of it is kept and the proposal turns
  ``failed`` with the reason (the job ended meanwhile, a budget blocks the replacement...).
- **reject** — by anyone who could approve it, or by the proposer (a withdrawal): ``rejected``.
- a pending proposal past its ``expires_at`` turns ``expired``.

Actions and how they execute (``params`` are the wire's :data:`~gpufleet.wire.PROPOSAL_PARAMS`):

- ``resize``, ``change_gpu_type``, ``move_to_spot`` — a **pending** job's GPU shape, allowed GPU
  models, or preemptibility (which lets it run on spot capacity). The controller holds pending
  jobs in memory and never re-reads a changed row, so a job is not edited in place: it is
  *replaced* — cancelled (:func:`gpufleet.control.jobs.cancel`) and submitted again with the change
  (:func:`gpufleet.control.jobs.submit`: feasibility, owners, budgets, as ``POST /v1/jobs`` does),
  in one transaction. The replacement keeps everything else (command, account, priority, labels...)
  and queues as a new submission; ``result_job_id`` names it. A running job is refused with the
  reason: changing it would mean stopping it and losing the work since its last checkpoint.
- ``cancel_idle_job`` — a running job whose mean GPU utilization over the last ``window_s`` is at
  most ``max_utilization_pct`` (checked when proposed and again when approved) is asked to stop,
  as ``POST /v1/jobs/{id}/cancel`` does.
- ``change_quota`` — a team's GPU quotas (the models named; the others stay), as
  ``PUT /v1/teams/{name}`` stores them (admins only).
- ``change_budget`` — a budget's limit, action and/or throttle, as ``PUT /v1/budgets/{ref}``
  stores them (admins only).
- ``reschedule_off_peak`` — refused (422 naming ``action``): jobs have no start-after time that
  the scheduler honours, so holding a job until a time cannot be done honestly.

Effect. Once ``effect_window_s`` has passed since the execution, :func:`upkeep` measures the
target's cost in the window before the execution and in as long after it, from the ledger priced
with the server's pricing rules (a job: its cost and its replacement's; a team: its jobs'; a
budget: its scope's), and stores both with the difference as dollars a month. It runs when
proposals are read (``GET /v1/proposals``) and as a controller duty (:func:`upkeep_duty`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gpufleet.control import jobs as jobs_service
from gpufleet.control.submit import check_fits_store, prepare_submit
from gpufleet.cost.budget_model import Budget, Scope, Throttle
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.roi import HOURS_PER_MONTH
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import job_costs_usd, spend_report
from gpufleet.errors import ConflictError, GpufleetError, InputError, NotFoundError, PermissionDeniedError, StoreError
from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.job import JobState
from gpufleet.store import budgets_repo, repo
from gpufleet.store.db import Database
from gpufleet.store.models import BudgetRow, JobRow, ProposalRow
from gpufleet.wire import (
    PROPOSAL_PARAMS,
    PROPOSAL_TARGETS,
    CancelIdleJobParams,
    ChangeBudgetParams,
    ChangeGpuTypeParams,
    ChangeQuotaParams,
    JobSubmit,
    ProposalEffectOut,
    ProposalEstimate,
    ProposalIn,
    ProposalOut,
    ResizeParams,
    Role,
)

if TYPE_CHECKING:
    from gpufleet.control.controller import Periodic

DEFAULT_EFFECT_WINDOW_S = 3600.0  # the wire's default for ProposalIn.effect_window_s
DEFAULT_TTL_S = 7 * 86400.0  # a pending proposal expires after a week unless told otherwise
JOB_SHAPE_ACTIONS = frozenset({"resize", "change_gpu_type", "move_to_spot"})
_FIELD_PREFIX = re.compile(r"^field '[^']*': ")
_SHAPE_KEYS = ("pods", "gpus", "gpu_milli", "mig_profile", "gpu_types", "preemptible")


# -- errors (stable codes) ------------------------------------------------------------------------


class UnsupportedActionError(InputError):
    code = "unsupported_action"


class SelfApprovalError(PermissionDeniedError):
    code = "self_approval"


class ProposalDecidedError(ConflictError):
    """The proposal is not pending (decided, or expired)."""

    code = "proposal_not_pending"


class NothingToChangeError(ConflictError):
    code = "nothing_to_change"


class TargetStateError(ConflictError):
    """The target is not in a state the action applies to (a job that is not pending, not idle...)."""

    code = "target_state"


# -- who and how ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Actor:
    """Who calls: a token's id, team and role (the API's principal, without FastAPI)."""

    token_id: str
    team: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def sees_team(self, team: str | None) -> bool:
        return self.is_admin or (team is not None and team == self.team)


@dataclass(frozen=True, slots=True)
class ExecSettings:
    """What executing an action needs from the server: its pricing rules (budget checks of a
    replacement job, the measured effect) and the shared-server submit settings."""

    rules: PricingRules | None = None
    run_as_required: bool = False
    single_team: bool = False


@dataclass(frozen=True, slots=True)
class _Done:
    message: str
    change: dict[str, Any]
    job_id: str | None = None  # a replacement job


def _hours(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _gpus_text(fields: Mapping[str, Any]) -> str:
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


# -- params and targets ---------------------------------------------------------------------------


def typed_params(action: str, params: Mapping[str, Any]) -> Any:
    """The action's parameter model (errors are :class:`InputError` naming ``params.<field>``)."""
    model = PROPOSAL_PARAMS.get(action)
    if model is None:
        raise InputError(f"unknown action '{action}' (known: {', '.join(PROPOSAL_PARAMS)})", field="action")
    try:
        return model.model_validate(dict(params))
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(str(err["msg"]).removeprefix("Value error, "), field=_loc(("params", *err["loc"]))) from None


def _loc(parts: Sequence[int | str]) -> str:
    """``("params", "gpu_types", 1)`` → ``params.gpu_types[1]`` (as the API names fields)."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def _job_not_found(job_id: str) -> NotFoundError:
    return NotFoundError(f"no job '{job_id}'")


def _visible_job(s: Session, who: Actor, job_id: str, *, for_update: bool = False) -> JobRow:
    try:
        row = repo.get_job(s, job_id, for_update=for_update)
    except NotFoundError:
        raise _job_not_found(job_id) from None
    if not who.sees_team(row.team):
        raise _job_not_found(job_id)  # another team's job: the same answer as a missing one
    return row


def _visible_budget(s: Session, who: Actor, ref: str, *, for_update: bool = False) -> BudgetRow:
    row = budgets_repo.get_budget(s, ref, for_update=for_update)
    if not (who.is_admin or budgets_repo.scope_of(row).team == who.team):
        raise NotFoundError(f"budget '{ref}' not found")
    return row


def _target_team(s: Session, action: str, target: str, who: Actor) -> str | None:
    """The team the target belongs to (what decides who sees the proposal); a 404 when ``who``
    may not see the target, exactly as the endpoint reading it answers."""
    kind = PROPOSAL_TARGETS[action]
    if kind == "job":
        return _visible_job(s, who, target).team
    if kind == "team":
        if not who.sees_team(target):
            raise NotFoundError(f"no team '{target}'")
        try:
            return repo.get_team(s, target).name
        except NotFoundError:
            raise NotFoundError(f"no team '{target}'") from None
    return budgets_repo.scope_of(_visible_budget(s, who, target)).team


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
            InputError(str(err["msg"]).removeprefix("Value error, "), field=_loc(err["loc"])), action
        ) from None


def _shape(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: fields.get(k) for k in _SHAPE_KEYS}
    out["gpu_types"] = list(out["gpu_types"] or [])
    out["pods"] = int(out["pods"] or 1)
    out["preemptible"] = bool(out["preemptible"])
    return out


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


def _plan_job_shape(s: Session, job: JobRow, action: str, params: Any, *, team: str, role: Role) -> Any:
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
        raise NothingToChangeError(f"job {job.id} already has this shape: {_gpus_text(before)}, nothing to change")
    keys = [k for k in _SHAPE_KEYS if before[k] != after[k]]
    return prepared, {"before": {k: before[k] for k in keys}, "after": {k: after[k] for k in keys}}


def _plan_idle(s: Session, job: JobRow, params: CancelIdleJobParams, now: float) -> dict[str, Any]:
    if job.state != JobState.RUNNING.value or job.cancel_requested:
        state = "being cancelled" if job.cancel_requested else job.state
        raise TargetStateError(f"job {job.id} is {state}: only a running job can be cancelled for being idle")
    n, mean = repo.job_utilization(s, job.id, now - params.window_s, now)
    if n == 0 or mean is None:
        raise TargetStateError(
            f"no GPU utilization sample of job {job.id} in the last {_hours(params.window_s)}: nothing shows it is idle"
        )
    if mean > params.max_utilization_pct:
        raise TargetStateError(
            f"job {job.id} is not idle: its mean GPU utilization over the last {_hours(params.window_s)} "
            f"is {mean:.1f}% (> {params.max_utilization_pct:g}%)"
        )
    return {
        "before": {"state": job.state, "mean_utilization_pct": round(mean, 2), "samples": n},
        "after": {"state": JobState.CANCELLED.value},
    }


def _plan_quota(s: Session, team: str, params: ChangeQuotaParams) -> tuple[dict[str, int], dict[str, Any]]:
    current = repo.team_quotas(s, team)
    new = dict(current)
    for model, gpus in params.quota_gpus.items():
        canon = "*" if model == "*" else canonical_gpu_name(model)
        if canon is None:
            raise InputError(f"unknown GPU model '{model}' (or '*' for any)", field=f"params.quota_gpus.{model}")
        new[canon] = round(gpus * MILLI)
    if new == current:
        raise NothingToChangeError(f"team {team} already has these quotas; nothing to change")

    def in_gpus(q: Mapping[str, int]) -> dict[str, float]:
        return {m: q[m] / MILLI for m in sorted(q)}

    return new, {"before": in_gpus(current), "after": in_gpus(new)}


def _budget_view(b: Budget) -> dict[str, Any]:
    return {"limit_usd": b.limit_usd, "action": b.action, "throttle": b.throttle.to_json()}


def _plan_budget(row: BudgetRow, params: ChangeBudgetParams) -> tuple[Budget, dict[str, Any]]:
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


def _dry_run(s: Session, action: str, target: str, params: Any, who: Actor, now: float) -> dict[str, Any]:
    """The checks of the execution, without executing: the change the action would make."""
    kind = PROPOSAL_TARGETS[action]
    if action in JOB_SHAPE_ACTIONS:
        job = _visible_job(s, who, target)
        # shape rules only here (whoever approves must also be allowed to submit it: checked then)
        return dict(_plan_job_shape(s, job, action, params, team=job.team, role=Role.ADMIN)[1])
    if action == "cancel_idle_job":
        return _plan_idle(s, _visible_job(s, who, target), params, now)
    if kind == "team":
        return _plan_quota(s, target, params)[1]
    return _plan_budget(_visible_budget(s, who, target), params)[1]


# -- proposing ------------------------------------------------------------------------------------


def request_hash(body: ProposalIn) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def propose(
    db: Database, body: ProposalIn, who: Actor, *, now: float, idempotency_key: str | None = None
) -> tuple[ProposalOut, bool]:
    """Store a pending proposal; returns ``(proposal, created)``. Anyone who can see the target may
    propose (a 404 otherwise, as reading it would answer). The action is checked as its execution
    would check it (a 422 naming ``params.<field>`` or ``target``, a 409 when the target is not in
    a state it applies to or nothing would change) but nothing is changed. With an
    ``idempotency_key`` a repeated request returns the first proposal."""
    if body.action == "reschedule_off_peak":
        raise UnsupportedActionError(
            "reschedule_off_peak is not supported: jobs have no start-after time the scheduler honours, "
            "so a job cannot be held until off-peak hours (a person can cancel it and submit it again then)",
            field="action",
        )
    params = typed_params(body.action, body.params)
    digest = request_hash(body)
    with db.session() as s:
        if idempotency_key is not None:
            found = repo.proposal_by_key(s, who.token_id, idempotency_key)
            if found is not None:  # a retry: the first answer, whatever the target became since
                if found.request_sha256 != digest:
                    raise ConflictError(
                        f"Idempotency-Key '{idempotency_key}' was used for a different proposal ({found.id}); "
                        "use a new key"
                    )
                return proposal_out(found, now), False
        team = _target_team(s, body.action, body.target, who)
        change = _dry_run(s, body.action, body.target, params, who, now)
        est = body.estimate
        values: dict[str, Any] = {
            "action": body.action,
            "target": body.target,
            "team": team,
            "params": params.model_dump(mode="json", exclude_none=True),
            "rationale": body.rationale,
            "est_monthly_savings_usd": None if est is None else est.monthly_savings_usd,
            "est_confidence": None if est is None else est.confidence,
            "est_basis": "" if est is None else est.basis,
            "proposed_by": who.token_id,
            "idempotency_key": idempotency_key,
            "request_sha256": digest,
            "created_at": now,
            "expires_at": now + (body.expires_in_s or DEFAULT_TTL_S),
            "change": {"proposed": change},
            "effect_window_s": body.effect_window_s,
        }
        row, created = repo.insert_proposal(s, values)
        return proposal_out(row, now), created


# -- reading --------------------------------------------------------------------------------------


def _visible_proposal(s: Session, who: Actor, proposal_id: str, *, for_update: bool = False) -> ProposalRow:
    try:
        row = repo.get_proposal(s, proposal_id, for_update=for_update)
    except NotFoundError:
        raise NotFoundError(f"no proposal '{proposal_id}'") from None
    if not who.sees_team(row.team):
        raise NotFoundError(f"no proposal '{proposal_id}'")  # another team's: as if there were none
    return row


def get(db: Database, who: Actor, proposal_id: str, *, now: float) -> ProposalOut:
    with db.session(readonly=True) as s:
        return proposal_out(_visible_proposal(s, who, proposal_id), now)


def list_visible(
    db: Database, who: Actor, *, now: float, state: str | None = None, limit: int = 100
) -> list[ProposalOut]:
    """Proposals newest first: every one for an admin, the caller's team's otherwise."""
    with db.session(readonly=True) as s:
        rows = repo.list_proposals(s, teams=None if who.is_admin else [who.team], state=state, limit=limit)
        return [proposal_out(r, now) for r in rows]


# -- deciding -------------------------------------------------------------------------------------


def _authorize(s: Session, row: ProposalRow, who: Actor) -> None:
    """The approver must be allowed to do the action by hand (the endpoint's own checks)."""
    action = row.action
    if PROPOSAL_TARGETS[action] == "job":
        # POST /v1/jobs/{id}/cancel and POST /v1/jobs: a member (or admin) who sees the job's team
        if who.role is Role.VIEWER:
            raise PermissionDeniedError("a viewer token can only read: approving this needs a member or an admin")
        if not who.sees_team(row.team):
            raise PermissionDeniedError(f"only team {row.team}'s members or an admin may approve this")
        return
    # PUT /v1/teams/{name} and PUT /v1/budgets/{ref} are admin-only
    if not who.is_admin:
        what = "a team's quota" if action == "change_quota" else "a budget"
        raise PermissionDeniedError(f"changing {what} needs an admin token: only an admin may approve this")


def _execute(s: Session, row: ProposalRow, who: Actor, now: float, settings: ExecSettings) -> _Done:
    """Do the action (in the caller's SAVEPOINT: on any error nothing of it is kept)."""
    params = typed_params(row.action, row.params or {})
    by = f"proposal {row.id} ({row.action}, approved by {who.token_id})"
    if row.action in JOB_SHAPE_ACTIONS:
        job = _visible_job(s, who, row.target, for_update=True)
        prepared, change = _plan_job_shape(s, job, row.action, params, team=who.team, role=who.role)
        cancelled = jobs_service.cancel(s, job, by=f"{by}: replaced by a new job", now=now)
        if cancelled.state != JobState.CANCELLED.value:
            raise TargetStateError(f"job {job.id} was admitted meanwhile: only a pending job can be replaced")
        new, _ = jobs_service.submit(
            s,
            prepared,
            priority=job.priority_class,
            token_id=job.submitted_by or who.token_id,  # its submitter's token: the same Unix account
            role=who.role,
            run_as_required=settings.run_as_required,
            single_team=settings.single_team,
            idempotency_key=None,
            now=now,
            rules=settings.rules,
        )
        what = {
            "resize": f"with {_gpus_text(prepared.fields)} (was {_gpus_text(_shape_of_job(job))})",
            "change_gpu_type": f"allowed on {', '.join(prepared.fields['gpu_types']) or 'any GPU model'}",
            "move_to_spot": "preemptible (it may run on spot capacity)",
        }[row.action]
        note = ""
        if row.action == "move_to_spot" and not job.checkpoint_dir:
            note = "; it declares no checkpoint_dir, so a preemption restarts it from the beginning"
        return _Done(f"job {job.id} cancelled and replaced by job {new.id}, {what}{note}", change, new.id)
    if row.action == "cancel_idle_job":
        job = _visible_job(s, who, row.target, for_update=True)
        change = _plan_idle(s, job, params, now)
        jobs_service.cancel(s, job, by=by, now=now)
        mean = change["before"]["mean_utilization_pct"]
        return _Done(
            f"job {job.id} asked to stop (mean GPU utilization {mean:g}% over the last "
            f"{_hours(params.window_s)}); the controller stops it and it ends CANCELLED",
            change,
        )
    if row.action == "change_quota":
        team = repo.get_team(s, row.target)
        quotas, change = _plan_quota(s, team.name, params)
        repo.upsert_team(
            s,
            team.name,
            weight=team.weight,
            cohort=team.cohort,
            borrowing_limit_milli=team.borrowing_limit_milli,
            quotas_milli=quotas,
            now=now,
        )
        was = change["before"]
        moves = ", ".join(
            f"{m} {'none' if m not in was else format(was[m], 'g')} → {change['after'][m]:g} GPUs"
            for m in change["after"]
            if was.get(m) != change["after"][m]
        )
        return _Done(f"team {team.name}'s quota: {moves}", change)
    budget_row = _visible_budget(s, who, row.target, for_update=True)
    budget, change = _plan_budget(budget_row, params)
    enabled = budget_row.enabled
    updated = budgets_repo.update_budget(s, budget_row.id, budget, now)
    updated.enabled = enabled
    parts = [f"{k} {change['before'][k]} → {change['after'][k]}" for k in change["before"]]
    return _Done(f"budget {budget_row.name}: {'; '.join(parts)}", change)


def _shape_of_job(job: JobRow) -> dict[str, Any]:
    return {k: getattr(job, k) for k in _SHAPE_KEYS}


def _why(e: GpufleetError) -> str:
    return f"{e.code}: {e.message}"


def _expire_if_due(s: Session, row: ProposalRow, now: float) -> bool:
    if row.state == "pending" and row.expires_at <= now:
        repo.decide_proposal(s, row, "expired", reason="expired before anyone decided it")
        return True
    return False


def _not_pending(row: ProposalRow) -> ProposalDecidedError:
    by = f" by {row.decided_by}" if row.decided_by else ""
    return ProposalDecidedError(f"proposal {row.id} is {row.state}{by}; only a pending proposal can be decided")


def approve(
    db: Database, proposal_id: str, who: Actor, *, now: float, settings: ExecSettings, reason: str = ""
) -> ProposalOut:
    """Approve and execute a pending proposal; returns it ``executed`` or ``failed``.

    404 when ``who`` may not see it; 403 when ``who`` proposed it (an agent never approves its own
    proposal) or may not perform the action by hand; 409 when it is not pending (an approval
    retried by the same token returns the proposal it decided)."""
    expired = False
    with db.session() as s:
        row = _visible_proposal(s, who, proposal_id, for_update=True)
        if _expire_if_due(s, row, now):
            expired = True
        elif row.state in ("executed", "failed") and row.decided_by == who.token_id:
            return proposal_out(row, now)  # a retried approval: what the first one did
        elif row.state != "pending":
            raise _not_pending(row)
        else:
            if row.proposed_by == who.token_id:
                raise SelfApprovalError(
                    "a proposal cannot be approved by the token that proposed it: another person must approve it"
                )
            _authorize(s, row, who)
            decided = {"decided_by": who.token_id, "decided_at": now, "reason": reason}
            change = dict(row.change or {})
            try:
                with s.begin_nested():
                    done = _execute(s, row, who, now, settings)
            except StoreError:
                raise
            except GpufleetError as e:  # the SAVEPOINT is rolled back: nothing of the action is kept
                repo.decide_proposal(s, row, "failed", **decided, result=_why(e))
            else:
                change.update(done.change)
                repo.decide_proposal(
                    s,
                    row,
                    "executed",
                    **decided,
                    executed_at=now,
                    result=done.message,
                    result_job_id=done.job_id,
                    change=change,
                )
            return proposal_out(row, now)
    assert expired
    raise ProposalDecidedError(f"proposal {proposal_id} expired before anyone decided it")


def reject(db: Database, proposal_id: str, who: Actor, *, reason: str, now: float) -> ProposalOut:
    """Reject a pending proposal (nothing is changed). Who could approve it may reject it, and its
    proposer may withdraw it."""
    expired = False
    with db.session() as s:
        row = _visible_proposal(s, who, proposal_id, for_update=True)
        if _expire_if_due(s, row, now):
            expired = True
        elif row.state == "rejected" and row.decided_by == who.token_id:
            return proposal_out(row, now)  # a retried rejection
        elif row.state != "pending":
            raise _not_pending(row)
        else:
            if row.proposed_by != who.token_id:
                _authorize(s, row, who)
            repo.decide_proposal(s, row, "rejected", decided_by=who.token_id, decided_at=now, reason=reason)
            return proposal_out(row, now)
    assert expired
    raise ProposalDecidedError(f"proposal {proposal_id} expired before anyone decided it")


# -- the measured effect ----------------------------------------------------------------------------


def _scope_cost(ledger: Ledger, rules: PricingRules | None, scope: Scope, start: float, end: float) -> float:
    rep = spend_report(ledger, start, end, aggregate=scope.aggregates, rules=rules, as_of=end)
    return float(sum((r.exact_usd for r in rep.rows if scope.matches(r.key)), Fraction(0)))


def _target_cost(row: ProposalRow, ledger: Ledger, rules: PricingRules | None, start: float, end: float) -> float:
    kind = PROPOSAL_TARGETS[row.action]
    if kind == "job":
        costs = job_costs_usd(ledger, rules, start, end, as_of=end, exact=True)
        return sum(costs.get(j, 0.0) for j in {row.target, row.result_job_id} if j)
    if kind == "team":
        return _scope_cost(ledger, rules, Scope("team", row.target), start, end)
    sc = (row.change or {}).get("scope") or {}
    return _scope_cost(ledger, rules, Scope(sc["kind"], sc.get("value", ""), sc.get("owner", "")), start, end)


def measure(s: Session, row: ProposalRow, now: float, rules: PricingRules | None) -> bool:
    """Measure an executed proposal's effect once its after-window has passed; True if it did."""
    if row.state != "executed" or row.executed_at is None or row.measured_at is not None:
        return False
    w, t0 = row.effect_window_s, row.executed_at
    if now < t0 + w:
        return False
    ledger = repo.load_ledger(s, t0 - w, t0 + w, now)
    before = _target_cost(row, ledger, rules, t0 - w, t0)
    after = _target_cost(row, ledger, rules, t0, t0 + w)
    row.measured_before_usd = round(before, 6)
    row.measured_after_usd = round(after, 6)
    row.measured_monthly_savings_usd = round((before - after) * 3600.0 / w * HOURS_PER_MONTH, 2)
    row.measured_at = now
    row.measure_note = "" if before or after else "the target cost nothing in either window"
    s.flush()
    return True


def upkeep(db: Database, now: float, rules: PricingRules | None = None) -> int:
    """Expire pending proposals whose time is up and measure the effects that are due; returns how
    many proposals it changed. Cheap when there is nothing to do (one read, no write lock)."""
    with db.session(readonly=True) as s:
        if not repo.proposal_upkeep_due(s, now):
            return 0
    with db.session() as s:
        n = repo.expire_proposals(s, now)
        for row in repo.proposals_to_measure(s, now):
            n += measure(s, row, now, rules)
    return n


def upkeep_duty(db: Database, rules: PricingRules | None = None, interval_s: float = 60.0) -> Periodic:
    """:func:`upkeep` as a duty of the controller's leader (``Controller(periodic=[...])``)."""
    from gpufleet.control.controller import Periodic

    return Periodic("proposals", interval_s, lambda now: upkeep(db, now, rules))


# -- on the wire ----------------------------------------------------------------------------------


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def proposal_out(row: ProposalRow, now: float | None = None) -> ProposalOut:
    """A proposal on the wire: estimate and measured effect side by side. A pending proposal past
    its expiry reads ``expired`` even before :func:`upkeep` has stored it so."""
    estimate = None
    if row.est_monthly_savings_usd is not None:
        estimate = ProposalEstimate(
            monthly_savings_usd=row.est_monthly_savings_usd,
            confidence=row.est_confidence if row.est_confidence is not None else 0.5,
            basis=row.est_basis,
        )
    measured = None
    w = row.effect_window_s
    if row.measured_at is not None and row.executed_at is not None and row.measured_before_usd is not None:
        after = row.measured_after_usd or 0.0
        measured = ProposalEffectOut(
            window_s=w,
            before_start=_at(row.executed_at - w),
            executed_at=_at(row.executed_at),
            after_end=_at(row.executed_at + w),
            before_usd=row.measured_before_usd,
            after_usd=after,
            before_usd_per_hour=round(row.measured_before_usd * 3600.0 / w, 6),
            after_usd_per_hour=round(after * 3600.0 / w, 6),
            monthly_savings_usd=row.measured_monthly_savings_usd or 0.0,
            measured_at=_at(row.measured_at),
            note=row.measure_note,
        )
    error = None
    if measured is not None and estimate is not None:
        error = round(measured.monthly_savings_usd - estimate.monthly_savings_usd, 2)
    state = row.state
    if state == "pending" and now is not None and row.expires_at <= now:
        state = "expired"
    return ProposalOut(
        id=row.id,
        action=row.action,
        target=row.target,
        team=row.team,
        params=dict(row.params or {}),
        rationale=row.rationale,
        estimate=estimate,
        state=state,
        proposed_by=row.proposed_by,
        created_at=_at(row.created_at),
        expires_at=_at(row.expires_at),
        decided_by=row.decided_by,
        decided_at=_dt(row.decided_at),
        reason=row.reason,
        executed_at=_dt(row.executed_at),
        result=row.result,
        result_job_id=row.result_job_id,
        change=dict(row.change or {}),
        effect_window_s=w,
        effect_due_at=None if row.executed_at is None else _at(row.executed_at + w),
        measured=measured,
        estimate_error_usd=error,
    )
