"""Job requests the API hands over whole: submit (owner and budget checks, then the insert, in the
caller's transaction) and cancel. Free of FastAPI; the route checks visibility and renders.

Adoption (:mod:`gpufleet.k8s.adopt`) submits the workloads people create on the cluster through the
same path (:func:`adopt`): the team must exist, a project another team owns and a ``block`` budget
refuse it as they refuse an API submit, and the owner's uid is its idempotency key (a replay is
answered with the first job, never checked again). Where the API's rule is about a caller who can
be told, adoption keeps its own (the pods exist already; nobody waits for an answer):

- **fit**: a workload no node could ever hold is adopted, not refused: it waits in the queue, which
  says why (the API refuses it with a 422 instead);
- **priority grants**: its pods' priority class is taken as it is (the webhook judges the grant at
  the door, where the person creating the pods is told; a member's API submit is refused a class
  its team was not granted);
- **account**: it runs as its pods say (no ``run_as``; the API resolves the token's or the team's
  account and may require one).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gpufleet.cost.rules import PricingRules
from gpufleet.errors import ConflictError
from gpufleet.model.job import JobState
from gpufleet.model.submission import Submission
from gpufleet.services.budgets import check_submission
from gpufleet.services.owners import submit_owner
from gpufleet.services.submit import PreparedSubmit, check_fits_store
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.wire import Role

TERMINAL = frozenset(s.value for s in JobState if s.terminal)
WAITING = frozenset({JobState.PENDING.value, JobState.PREEMPTED.value})  # not holding resources


def _cost_fields(job: JobRow) -> dict[str, Any]:
    """The fields of a stored job that its cost estimate reads (the names a submission's have)."""
    keys = ("pods", "gpus", "gpu_milli", "gpu_types", "estimated_runtime_s", "max_runtime_s")
    return {k: getattr(job, k) for k in keys}


def submit(
    s: Session,
    prepared: PreparedSubmit,
    *,
    priority: str,
    token_id: str | None,
    role: Role,
    run_as_required: bool,
    single_team: bool,
    idempotency_key: str | None,
    now: float,
    rules: PricingRules | None = None,
    adopted: bool = False,
    replaces: JobRow | None = None,
) -> tuple[JobRow, bool]:
    """Submit a prepared job in the transaction of ``s``; returns ``(job, created)``.

    Feasibility first (:func:`~gpufleet.services.submit.check_fits_store`: the cycle's feasibility
    rules against the store's nodes), then owners (a granted priority class, the Unix account it
    runs as, one team on a single-team server), then budgets (the block check, serialized per budget, raising
    :class:`~gpufleet.cost.budgets.status.BudgetExceededError`), then the insert (an idempotent replay
    returns the first job with ``created=False``). ``rules``: the server's pricing rules.
    ``adopted``: a workload adoption found (:func:`adopt`; the module docstring says what differs).
    ``replaces``: the job this one replaces (an approved resize or move, already cancelled): a
    replacement that costs no more is not refused by a budget it relieves."""
    sub = prepared.submission
    if not adopted:
        check_fits_store(s, sub)  # a job no node could ever hold is refused (422), not queued
    run_as = submit_owner(
        s,
        team=prepared.team,
        priority=priority,
        token_id=token_id,
        role=Role.ADMIN if adopted else role,  # adopted: no grant check (the webhook's, at the door)
        run_as_required=run_as_required and not adopted,
        single_team=single_team,
    )
    if adopted:
        run_as = None  # its pods run as their own spec says
    fields = sub.fields()
    check_submission(
        s,
        fields,
        prepared.team,
        now,
        submitted_by=token_id,
        idempotency_key=idempotency_key,
        rules=rules,  # the server's pricing rules: a block refuses on the figure the bill shows
        replaces=None if replaces is None else _cost_fields(replaces),
    )
    return repo.submit_job(
        s,
        {**fields, "run_as": run_as},
        team=prepared.team,
        submitted_by=token_id,
        idempotency_key=idempotency_key,
        request_sha256=prepared.request_sha256,
        now=now,
    )


def adopt(
    s: Session,
    sub: Submission,
    *,
    team: str,
    idempotency_key: str,
    now: float,
    rules: PricingRules | None = None,
) -> tuple[JobRow, bool]:
    """Submit a workload adoption found on the cluster (its pods exist already) as team ``team``'s
    job: :func:`submit` for no token, with adoption's differences (module docstring). Raises what
    the API's submit raises for the rules adoption shares (an unknown team, a project another team
    owns, a ``block`` budget's :class:`~gpufleet.cost.budgets.status.BudgetExceededError`)."""
    return submit(
        s,
        PreparedSubmit(team, sub, None),
        priority=sub.priority_class,
        token_id=None,
        role=Role.ADMIN,
        run_as_required=False,
        single_team=False,
        idempotency_key=idempotency_key,
        now=now,
        rules=rules,
        adopted=True,
    )


def cancel(s: Session, job: JobRow, *, by: str, now: float) -> JobRow:
    """Cancel ``job``: a waiting job at once (CANCELLED), an admitted or running one is asked to
    stop (``cancel_requested``; the controller ends it). :class:`ConflictError` if it ended."""
    if job.state in TERMINAL:
        raise ConflictError(f"job {job.id} already ended ({job.state}); nothing to cancel")
    if job.state in WAITING:
        try:
            repo.transition(s, job, JobState.CANCELLED.value, f"cancelled by {by}", now)
            return job
        except ConflictError:  # the controller admitted it meanwhile: ask it to stop instead
            pass
    return repo.request_cancel(s, job.id, now)
