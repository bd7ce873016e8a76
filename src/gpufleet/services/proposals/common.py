"""What every part of the proposals service shares: its errors (stable codes) and who calls."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import ConflictError, InputError, PermissionDeniedError
from gpufleet.wire import Role

# -- errors (stable codes) ------------------------------------------------------------------------


class UnsupportedActionError(InputError):
    code = "unsupported_action"


class SelfApprovalError(PermissionDeniedError):
    code = "self_approval"


class SamePersonError(PermissionDeniedError):
    """The approver's token is held by the person who holds the proposer's (another token of theirs)."""

    code = "same_person"


class OwnerRequiredError(PermissionDeniedError):
    """The approver's token has no owner: nothing says it is not the proposer's other token."""

    code = "owner_required"


class StaleProposalError(ConflictError):
    """A field the proposal sets changed since it was planned: applying it would undo that change."""

    code = "stale"

    def __init__(self, message: str, *, fields: dict[str, tuple[object, object]]) -> None:
        super().__init__(message)
        self.fields = fields  # field → (planned-on value, current value)


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


def same_person(a: str, b: str) -> bool:
    """Whether two owners name the same person (without regard to case or surrounding blanks)."""
    return a.strip().casefold() == b.strip().casefold()
