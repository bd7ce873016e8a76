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
