"""Budget throttles: what a throttle in force does to one scheduling cycle (pure: no I/O, no clock).

Shared by every world — the controller and the simulator — so a what-if replays exactly the
enforcement production runs. The budget itself is :mod:`gpufleet.cost.budgets.model`; its status
and verdicts :mod:`gpufleet.cost.budgets.status`; job estimates :mod:`gpufleet.cost.job_estimate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.scheduling.admission import CapacityLimit

from .model import Scope, Throttle

# -- throttles --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThrottleRule:
    """A throttle in force: the budget it comes from, its scope and what it does."""

    budget: str
    scope: Scope
    throttle: Throttle


def capacity_limits(rules: Sequence[ThrottleRule]) -> list[CapacityLimit]:
    """The throttles in force as the scheduler's neutral :class:`CapacityLimit` s (for
    :attr:`ClusterState.limits`): the cycle's ``budget`` admission check lowers the scope's priority
    class, caps the GPUs it holds at once, or allows it spot capacity only (never raising a
    priority; jobs no limit covers get their spec's priority back)."""
    return [
        CapacityLimit(
            source=f"budget '{r.budget}'",
            covers=r.scope.covers_job,
            scope=str(r.scope),
            priority=PRIORITY_CLASSES[r.throttle.priority] if r.throttle.priority is not None else None,
            max_gpus=r.throttle.max_gpus,
            spot_only=r.throttle.spot_only,
        )
        for r in rules
    ]
