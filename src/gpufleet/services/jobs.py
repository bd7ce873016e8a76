"""Job requests the API hands over whole: submit (owner and budget checks, then the insert, in the
caller's transaction) and cancel. Free of FastAPI; the route checks visibility and renders."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gpufleet.cost.rules import PricingRules
from gpufleet.errors import ConflictError
from gpufleet.model.job import JobState
from gpufleet.services.budgets import check_submission
from gpufleet.services.owners import submit_owner
from gpufleet.services.submit import PreparedSubmit, check_fits_store
from gpufleet.store import repo
from gpufleet.store.models import JobRow
from gpufleet.wire import Role

TERMINAL = frozenset(s.value for s in JobState if s.terminal)
WAITING = frozenset({JobState.PENDING.value, JobState.PREEMPTED.value})  # not holding resources


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
) -> tuple[JobRow, bool]:
    """Submit a prepared job in the transaction of ``s``; returns ``(job, created)``.

    Feasibility first (:func:`~gpufleet.services.submit.check_fits_store`: the cycle's feasibility
    rules against the store's nodes), then owners (a granted priority class, the Unix account it
    runs as, one team on a single-team server), then budgets (the block check, serialized per budget, raising
    :class:`~gpufleet.cost.budget_status.BudgetExceededError`), then the insert (an idempotent replay
    returns the first job with ``created=False``). ``rules``: the server's pricing rules."""
    check_fits_store(s, prepared.fields)  # a job no node could ever hold is refused (422), not queued
    run_as = submit_owner(
        s,
        team=prepared.team,
        priority=priority,
        token_id=token_id,
        role=role,
        run_as_required=run_as_required,
        single_team=single_team,
    )
    check_submission(
        s,
        prepared.fields,
        prepared.team,
        now,
        submitted_by=token_id,
        idempotency_key=idempotency_key,
        rules=rules,  # the server's pricing rules: a block refuses on the figure the bill shows
    )
    return repo.submit_job(
        s,
        {**prepared.fields, "run_as": run_as},
        team=prepared.team,
        submitted_by=token_id,
        idempotency_key=idempotency_key,
        request_sha256=prepared.request_sha256,
        now=now,
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
