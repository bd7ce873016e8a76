"""``/v1/proposals``: actions an agent proposes (pending until a person decides), approval (which
executes the action through the same service functions as the endpoints that do it by hand),
rejection, and the estimated against the measured effect on cost. See docs/proposals.md."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response

from gpufleet.api.auth import Principal
from gpufleet.api.context import ApiContext
from gpufleet.api.deps import AUTHED, READ_ONE, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.services import proposals as service
from gpufleet.wire import ProposalApprove, ProposalIn, ProposalOut, ProposalReject, ProposalState

router = APIRouter(prefix="/v1/proposals", tags=["proposals"])

ProposalId = Annotated[str, Path(min_length=1, max_length=32)]

_CREATE = {
    **READ_ONE,
    200: {"model": ProposalOut, "description": "A replay: the proposal an earlier request with this key made"},
    409: {
        "description": "The target is not in a state the action applies to (target_state), nothing would "
        "change (nothing_to_change), or an Idempotency-Key reused for another request"
    },
}
_DECIDE = {
    **READ_ONE,
    403: {
        "description": "The token that proposed it (self_approval), a token without an owner approving "
        "(owner_required), another token of the proposer's owner approving (same_person), or a token that "
        "may not perform the action by hand (a viewer; a member for quotas and budgets; another team)"
    },
    409: {
        "description": "Not pending any more: decided, or expired (proposal_not_pending); or, approving, "
        "a field it sets changed since it was planned (stale: it stays pending)"
    },
}


def _actor(who: Principal) -> service.Actor:
    return service.Actor(who.token_id, who.team, who.role)


def _settings(ctx: ApiContext) -> service.ExecSettings:
    return service.ExecSettings(
        rules=ctx.pricing_rules, run_as_required=ctx.run_as_required, single_team=ctx.single_team
    )


@router.post("", status_code=201, response_model=ProposalOut, responses=_CREATE, summary="Propose an action")
def create_proposal(
    body: ProposalIn,
    ctx: Ctx,
    who: Caller,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=255)] = None,
) -> Response:
    """Store a proposed action, pending until a person approves or rejects it; nothing changes
    before. Any token that can see the target may propose (the target is a job id, a team or a
    budget, by action). The action is checked as its execution would check it: bad ``params`` are a
    422 naming ``body.params.<field>``; a target not in a state the action applies to is a 409.
    ``reschedule_off_peak`` is refused (422 on ``body.action``): jobs have no start-after time."""
    with input_at("body"):
        out, created = service.propose(
            ctx.database, body, _actor(who), now=ctx.clock.now(), idempotency_key=idempotency_key
        )
    return Response(out.model_dump_json(), status_code=201 if created else 200, media_type="application/json")


def _upkeep(ctx: ApiContext) -> None:
    service.upkeep(ctx.database, ctx.clock.now(), ctx.pricing_rules)  # expiries, effects now measurable


@router.get("", response_model=list[ProposalOut], responses=AUTHED, summary="List proposals")
def list_proposals(
    ctx: Ctx,
    who: Caller,
    state: Annotated[ProposalState | None, Query(description="only proposals in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ProposalOut]:
    """Proposals newest first: all of them for an admin, the caller's team's otherwise (a proposal
    on a cluster-wide budget is an admin's only)."""
    _upkeep(ctx)
    return service.list_visible(ctx.database, _actor(who), now=ctx.clock.now(), state=state, limit=limit)


@router.get("/{proposal_id}", response_model=ProposalOut, responses=READ_ONE, summary="Get a proposal")
def get_proposal(proposal_id: ProposalId, ctx: Ctx, who: Caller) -> ProposalOut:
    """A proposal with its estimate and, once ``effect_window_s`` has passed since its execution,
    the measured effect (the target's cost before and after)."""
    _upkeep(ctx)
    return service.get(ctx.database, _actor(who), proposal_id, now=ctx.clock.now())


@router.post("/{proposal_id}/approve", response_model=ProposalOut, responses=_DECIDE, summary="Approve and execute")
def approve_proposal(
    proposal_id: ProposalId, ctx: Ctx, who: Caller, body: ProposalApprove | None = None
) -> ProposalOut:
    """Approve a pending proposal and execute its action at once: the answer is ``executed`` with
    what was done, or ``failed`` with why (then nothing of the action was kept). The approver must
    be allowed to perform the action by hand and must be another person: a token with an owner,
    not the proposer's token nor another token of its owner. A proposal whose target changed since
    it was planned, in a field it sets, is refused (409 ``stale``) and stays pending."""
    out = service.approve(
        ctx.database,
        proposal_id,
        _actor(who),
        now=ctx.clock.now(),
        settings=_settings(ctx),
        reason=body.reason if body is not None else "",
    )
    if out.state == "executed" and ctx.wake is not None:
        ctx.wake()  # a replaced or cancelled job: the controller acts now
    return out


@router.post("/{proposal_id}/reject", response_model=ProposalOut, responses=_DECIDE, summary="Reject")
def reject_proposal(proposal_id: ProposalId, body: ProposalReject, ctx: Ctx, who: Caller) -> ProposalOut:
    """Reject a pending proposal (nothing changes); its proposer may withdraw it the same way."""
    return service.reject(ctx.database, proposal_id, _actor(who), reason=body.reason, now=ctx.clock.now())
