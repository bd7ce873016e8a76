"""Deciding a proposal: approving executes its action at once, in a SAVEPOINT of the approval's
transaction (``executed`` with what was done, or ``failed`` with why and nothing of it kept);
rejecting changes nothing. A pending proposal past its expiry is expired instead of decided."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from gpufleet.cost.rules import PricingRules
from gpufleet.errors import GpufleetError, PermissionDeniedError, StoreError
from gpufleet.model.job import JobState
from gpufleet.services import jobs as jobs_service
from gpufleet.services.proposals.actions import (
    JOB_SHAPE_ACTIONS,
    typed_params,
    visible_budget,
    visible_job,
    visible_proposal,
)
from gpufleet.services.proposals.common import (
    Actor,
    OwnerRequiredError,
    ProposalDecidedError,
    SamePersonError,
    SelfApprovalError,
    StaleProposalError,
    TargetStateError,
    same_person,
)
from gpufleet.services.proposals.plan import (
    budget_fields,
    changed_fields,
    gpus_text,
    hours_text,
    job_fields,
    plan_budget,
    plan_idle,
    plan_job_shape,
    plan_quota,
    quota_fields,
    recorded_planned_on,
    shape_of_job,
    value_text,
)
from gpufleet.services.proposals.wire import proposal_out
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import ProposalRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import PROPOSAL_TARGETS, ProposalOut, Role


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


def _approver_owner(s: Session, row: ProposalRow, who: Actor) -> str:
    """The person approving: another person than the one holding the proposer's token. A token
    without an owner cannot approve (nothing says it is not the proposer's other token); a
    proposer's token without an owner is a person of its own (no other token is theirs)."""
    owner = repo.token_owner(s, who.token_id)
    if owner is None:
        raise OwnerRequiredError(
            f"token {who.token_id} has no owner, so nothing shows it is held by another person than the "
            "proposer: approving needs a token that names its owner (gpufleet token create ... --owner NAME)"
        )
    proposer = row.proposed_by_owner or repo.token_owner(s, row.proposed_by)
    if proposer is not None and same_person(owner, proposer):
        raise SamePersonError(
            f"proposal {row.id} was proposed by {proposer} (token {row.proposed_by}) and token {who.token_id} "
            f"is {owner}'s too: another person must approve it"
        )
    return owner


def _check_fresh(row: ProposalRow, params: Any, current: dict[str, Any]) -> None:
    """Refuse (409 ``stale``) when a field the proposal sets changed since it was planned: applying
    its absolute values would undo that change."""
    planned = row.planned_on
    if planned is None:  # stored before planned-on values were: what it recorded as before
        planned = recorded_planned_on(row.action, params, row.change)
    changed = changed_fields(planned, current)
    if not changed:
        return
    moves = "; ".join(
        f"{field} was {value_text(was)} when it was proposed and is {value_text(now)} now"
        for field, (was, now) in changed.items()
    )
    raise StaleProposalError(
        f"proposal {row.id} is stale: {moves}. Approving it would undo that change; reject it and "
        "propose again from the current state",
        fields=changed,
    )


def _execute(s: Session, row: ProposalRow, who: Actor, now: float, settings: ExecSettings) -> _Done:
    """Do the action (in the caller's SAVEPOINT: on any error nothing of it is kept; a stale
    proposal is refused before anything is done)."""
    params = typed_params(row.action, row.params or {})
    by = f"proposal {row.id} ({row.action}, approved by {who.token_id})"
    if row.action in JOB_SHAPE_ACTIONS:
        job = visible_job(s, who, row.target, for_update=True)
        _check_fresh(row, params, job_fields(job, row.action))
        prepared, change = plan_job_shape(s, job, row.action, params, team=who.team, role=who.role)
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
            replaces=job,  # a cheaper replacement relieves the budget: it is not refused by it
        )
        what = {
            "resize": f"with {gpus_text(prepared.fields)} (was {gpus_text(shape_of_job(job))})",
            "change_gpu_type": f"allowed on {', '.join(prepared.fields['gpu_types']) or 'any GPU model'}",
            "move_to_spot": "preemptible (it may run on spot capacity)",
        }[row.action]
        note = ""
        if row.action == "move_to_spot" and not job.checkpoint_dir:
            note = "; it declares no checkpoint_dir, so a preemption restarts it from the beginning"
        return _Done(f"job {job.id} cancelled and replaced by job {new.id}, {what}{note}", change, new.id)
    if row.action == "cancel_idle_job":
        job = visible_job(s, who, row.target, for_update=True)
        change = plan_idle(s, job, params, now)
        jobs_service.cancel(s, job, by=by, now=now)
        mean = change["before"]["mean_utilization_pct"]
        return _Done(
            f"job {job.id} asked to stop (mean GPU utilization {mean:g}% over the last "
            f"{hours_text(params.window_s)}); the controller stops it and it ends CANCELLED",
            change,
        )
    if row.action == "change_quota":
        team = repo.lock_team(s, row.target)
        _check_fresh(row, params, quota_fields(s, team.name, params))
        quotas, change = plan_quota(s, team.name, params)
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
    budget_row = visible_budget(s, who, row.target, for_update=True)
    _check_fresh(row, params, budget_fields(budget_row, params))
    budget, change = plan_budget(budget_row, params)
    enabled = budget_row.enabled
    updated = budgets_repo.update_budget(s, budget_row.id, budget, now)
    updated.enabled = enabled
    parts = [f"{k} {change['before'][k]} → {change['after'][k]}" for k in change["before"]]
    return _Done(f"budget {budget_row.name}: {'; '.join(parts)}", change)


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
    proposal), may not perform the action by hand, has no owner (``owner_required``) or is held by
    the person holding the proposer's token (``same_person``); 409 when it is not pending (an
    approval retried by the same token returns the proposal it decided) or when a field it sets
    changed since it was planned (``stale``: nothing is done, it stays pending)."""
    expired = False
    with db.session() as s:
        row = visible_proposal(s, who, proposal_id, for_update=True)
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
            owner = _approver_owner(s, row, who)
            decided = {"decided_by": who.token_id, "decided_by_owner": owner, "decided_at": now, "reason": reason}
            change = dict(row.change or {})
            try:
                with s.begin_nested():
                    done = _execute(s, row, who, now, settings)
            except (StoreError, StaleProposalError):
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
        row = visible_proposal(s, who, proposal_id, for_update=True)
        if _expire_if_due(s, row, now):
            expired = True
        elif row.state == "rejected" and row.decided_by == who.token_id:
            return proposal_out(row, now)  # a retried rejection
        elif row.state != "pending":
            raise _not_pending(row)
        else:
            if row.proposed_by != who.token_id:
                _authorize(s, row, who)
            repo.decide_proposal(
                s,
                row,
                "rejected",
                decided_by=who.token_id,
                decided_by_owner=repo.token_owner(s, who.token_id),
                decided_at=now,
                reason=reason,
            )
            return proposal_out(row, now)
    assert expired
    raise ProposalDecidedError(f"proposal {proposal_id} expired before anyone decided it")
