"""What a scheduling cycle reads and what it decides (types only).

:class:`ClusterState` is the cycle's input (the snapshot, the queue, the running set, the pools and
the capacity limits in force); :class:`Decisions` its output (placements already reserved in the
snapshot, preemptions, scale-ups and -downs, why each job still waits, the order it considered).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from gpufleet.model.job import Job
from gpufleet.scheduling.admission import CapacityLimit
from gpufleet.scheduling.autoscaler import PoolState, ScaleDown, ScaleUp
from gpufleet.scheduling.framework import Status
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot

__all__ = ["ClusterState", "Decisions", "Placement", "Preemption", "Waiting"]


@dataclass(frozen=True, slots=True)
class Placement:
    job: Job
    assignments: tuple[Assignment, ...]
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class Preemption:
    victim: RunningJob
    preemptor: str
    reason: str


class Waiting(MutableMapping[str, Status]):
    """Job id → why it still waits. When a cycle stops early (no remaining job could start), the
    rest of the queue waits with one shared status, filled in only when the mapping is first read
    (a simulator that never reads it pays nothing). Iteration order: jobs the cycle looked at in
    its order, then the rest in queue order (:attr:`Decisions.order` has the cycle's order)."""

    __slots__ = ("_d", "_rest")

    def __init__(self) -> None:
        self._d: dict[str, Status] = {}
        self._rest: tuple[Sequence[Job], set[str], Status] | None = None

    def wait_rest(self, pending: Sequence[Job], placed: set[str], status: Status) -> None:
        self._rest = (pending, placed, status)

    def _fill(self) -> dict[str, Status]:
        if self._rest is not None:
            pending, placed, status = self._rest
            self._rest = None
            d = self._d
            for j in pending:
                if j.id not in d and j.id not in placed:
                    d[j.id] = status
        return self._d

    def __getitem__(self, key: str) -> Status:
        return self._fill()[key]

    def __setitem__(self, key: str, value: Status) -> None:
        self._fill()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._fill()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fill())

    def __len__(self) -> int:
        return len(self._fill())

    def __contains__(self, key: object) -> bool:
        return key in self._fill()

    def __repr__(self) -> str:
        return f"Waiting({self._fill()!r})"


@dataclass(slots=True)
class Decisions:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    scale_up: list[ScaleUp] = field(default_factory=list)
    scale_down: list[ScaleDown] = field(default_factory=list)
    waiting: Waiting = field(default_factory=Waiting)  # job id → why it still waits
    reservation: tuple[str, float] | None = None  # (job id, shadow time) of the EASY reservation
    # when a waiting job's preemption may go ahead by time alone (its victims reach their minimum
    # runtime): the world runs a cycle then even if nothing else changed (inf: no such wait)
    retry_at: float = math.inf
    _order: list[Job] = field(default_factory=list)
    _order_rest: Iterator[Job] | None = None  # the order past where the cycle stopped, produced when read

    @property
    def order(self) -> list[Job]:
        """The queue in the order this cycle considered it (the jobs past an early stop in the
        order they would have come), computed on first read."""
        if self._order_rest is not None:
            self._order.extend(self._order_rest)
            self._order_rest = None
        return self._order

    @order.setter
    def order(self, jobs: list[Job]) -> None:
        self._order, self._order_rest = jobs, None


@dataclass(slots=True)
class ClusterState:
    """What one cycle reads. The snapshot is the world's cache; the cycle reserves in it."""

    snapshot: ClusterSnapshot
    pending: Sequence[Job]
    running: Mapping[str, RunningJob]
    pools: Sequence[PoolState] = ()
    limits: Sequence[CapacityLimit] = ()  # capacity limits in force (budget throttles), see admission.py
