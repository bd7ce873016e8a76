"""Proposing (a pending proposal stored with the proposer's estimate, after the checks of its
execution made without executing) and reading proposals back."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpufleet.errors import ConflictError
from gpufleet.services.proposals.actions import target_team, typed_params, visible_proposal
from gpufleet.services.proposals.common import Actor, UnsupportedActionError
from gpufleet.services.proposals.plan import dry_run, planned_on
from gpufleet.services.proposals.wire import proposal_out
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.wire import ProposalIn, ProposalOut

DEFAULT_TTL_S = 7 * 86400.0  # a pending proposal expires after a week unless told otherwise


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
    a state it applies to or nothing would change) but nothing is changed. The values it read of
    the fields it sets are stored (``planned_on``): approving it after one of them changed is
    refused (409 ``stale``). With an ``idempotency_key`` a repeated request returns the first
    proposal."""
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
        team = target_team(s, body.action, body.target, who)
        change = dry_run(s, body.action, body.target, params, who, now)
        planned = planned_on(s, body.action, body.target, params, who)
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
            "proposed_by_owner": repo.token_owner(s, who.token_id),
            "idempotency_key": idempotency_key,
            "request_sha256": digest,
            "created_at": now,
            "expires_at": now + (body.expires_in_s or DEFAULT_TTL_S),
            "change": {"proposed": change},
            "planned_on": planned,
            "effect_window_s": body.effect_window_s,
        }
        row, created = repo.insert_proposal(s, values)
        return proposal_out(row, now), created


# -- reading --------------------------------------------------------------------------------------


def get(db: Database, who: Actor, proposal_id: str, *, now: float) -> ProposalOut:
    with db.session(readonly=True) as s:
        return proposal_out(visible_proposal(s, who, proposal_id), now)


def list_visible(
    db: Database, who: Actor, *, now: float, state: str | None = None, limit: int = 100
) -> list[ProposalOut]:
    """Proposals newest first: every one for an admin, the caller's team's otherwise."""
    with db.session(readonly=True) as s:
        rows = repo.list_proposals(s, teams=None if who.is_admin else [who.team], state=state, limit=limit)
        return [proposal_out(r, now) for r in rows]
