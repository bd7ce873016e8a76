"""The actions and their targets: which actions change a job's shape, each action's parameters
(validated as the wire's :data:`~gpufleet.wire.PROPOSAL_PARAMS` models), and the job, team, budget
or proposal named, as the caller may see it (a 404 for what they may not, as reading it answers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gpufleet.errors import InputError, NotFoundError
from gpufleet.services.proposals.common import Actor
from gpufleet.store import repo
from gpufleet.store.models import BudgetRow, JobRow, ProposalRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import PROPOSAL_PARAMS, PROPOSAL_TARGETS

JOB_SHAPE_ACTIONS = frozenset({"resize", "change_gpu_type", "move_to_spot"})


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
        raise InputError(
            str(err["msg"]).removeprefix("Value error, "), field=field_path(("params", *err["loc"]))
        ) from None


def field_path(parts: Sequence[int | str]) -> str:
    """``("params", "gpu_types", 1)`` → ``params.gpu_types[1]`` (as the API names fields)."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def _job_not_found(job_id: str) -> NotFoundError:
    return NotFoundError(f"no job '{job_id}'")


def visible_job(s: Session, who: Actor, job_id: str, *, for_update: bool = False) -> JobRow:
    try:
        row = repo.get_job(s, job_id, for_update=for_update)
    except NotFoundError:
        raise _job_not_found(job_id) from None
    if not who.sees_team(row.team):
        raise _job_not_found(job_id)  # another team's job: the same answer as a missing one
    return row


def visible_budget(s: Session, who: Actor, ref: str, *, for_update: bool = False) -> BudgetRow:
    row = budgets_repo.get_budget(s, ref, for_update=for_update)
    if not (who.is_admin or budgets_repo.scope_of(row).team == who.team):
        raise NotFoundError(f"budget '{ref}' not found")
    return row


def target_team(s: Session, action: str, target: str, who: Actor) -> str | None:
    """The team the target belongs to (what decides who sees the proposal); a 404 when ``who``
    may not see the target, exactly as the endpoint reading it answers."""
    kind = PROPOSAL_TARGETS[action]
    if kind == "job":
        return visible_job(s, who, target).team
    if kind == "team":
        if not who.sees_team(target):
            raise NotFoundError(f"no team '{target}'")
        try:
            return repo.get_team(s, target).name
        except NotFoundError:
            raise NotFoundError(f"no team '{target}'") from None
    return budgets_repo.scope_of(visible_budget(s, who, target)).team


def visible_proposal(s: Session, who: Actor, proposal_id: str, *, for_update: bool = False) -> ProposalRow:
    try:
        row = repo.get_proposal(s, proposal_id, for_update=for_update)
    except NotFoundError:
        raise NotFoundError(f"no proposal '{proposal_id}'") from None
    if not who.sees_team(row.team):
        raise NotFoundError(f"no proposal '{proposal_id}'")  # another team's: as if there were none
    return row
