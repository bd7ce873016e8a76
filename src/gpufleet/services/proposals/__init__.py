"""Proposals (issue 14): an agent proposes an action, a person approves it, the action is executed
through the same service functions the API uses, and its real effect on cost is measured afterwards.

A proposal is stored ``pending`` with the proposer's estimate (dollars a month, confidence, basis)
and changes nothing until a person decides it:

- **approve** — the approver must be allowed to perform the action themselves (the checks of the
  endpoint that does it by hand) and must be *another person*: not the token that proposed it
  (``self_approval``), a token with an ``owner`` (a token without one cannot approve:
  ``owner_required``), and not held by the owner of the proposer's token (``same_person``, owners
  compared without regard to case; a proposer's token without an owner is a person of its own).
  The proposal records both owners. A proposal records the values it read of the fields it sets
  (``planned_on``: ``quota_gpus.<model>``, ``limit_usd``/``action``/``throttle``, the job's
  ``gpus``/``gpu_milli``/``mig_profile``, ``gpu_types`` or ``preemptible``); if one changed since,
  applying its absolute values would undo that change, so the approval is refused (409 ``stale``,
  naming each field with its planned-on and current value) and it stays pending. The action is executed
  at once, in the approval's transaction, inside a SAVEPOINT: it either happens whole and the
  proposal turns ``executed`` with what was done, or nothing of it is kept and the proposal turns
  ``failed`` with the reason (the job ended meanwhile, a budget blocks the replacement...).
- **reject** — by anyone who could approve it, or by the proposer (a withdrawal): ``rejected``.
- a pending proposal past its ``expires_at`` turns ``expired``.

Actions and how they execute (``params`` are the wire's :data:`~gpufleet.wire.PROPOSAL_PARAMS`):

- ``resize``, ``change_gpu_type``, ``move_to_spot`` — a **pending** job's GPU shape, allowed GPU
  models, or preemptibility (which lets it run on spot capacity). The controller holds pending
  jobs in memory and never re-reads a changed row, so a job is not edited in place: it is
  *replaced* — cancelled (:func:`gpufleet.services.jobs.cancel`) and submitted again with the change
  (:func:`gpufleet.services.jobs.submit`: feasibility, owners, budgets, as ``POST /v1/jobs`` does),
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

from gpufleet.services.proposals.actions import JOB_SHAPE_ACTIONS, typed_params
from gpufleet.services.proposals.common import (
    Actor,
    NothingToChangeError,
    OwnerRequiredError,
    ProposalDecidedError,
    SamePersonError,
    SelfApprovalError,
    StaleProposalError,
    TargetStateError,
    UnsupportedActionError,
)
from gpufleet.services.proposals.effect import DEFAULT_EFFECT_WINDOW_S, measure, upkeep, upkeep_duty
from gpufleet.services.proposals.execute import ExecSettings, approve, reject
from gpufleet.services.proposals.propose import DEFAULT_TTL_S, get, list_visible, propose, request_hash
from gpufleet.services.proposals.wire import proposal_out

__all__ = [
    "DEFAULT_EFFECT_WINDOW_S",
    "DEFAULT_TTL_S",
    "JOB_SHAPE_ACTIONS",
    "Actor",
    "ExecSettings",
    "NothingToChangeError",
    "OwnerRequiredError",
    "ProposalDecidedError",
    "SamePersonError",
    "SelfApprovalError",
    "StaleProposalError",
    "TargetStateError",
    "UnsupportedActionError",
    "approve",
    "get",
    "list_visible",
    "measure",
    "proposal_out",
    "propose",
    "reject",
    "request_hash",
    "typed_params",
    "upkeep",
    "upkeep_duty",
]
