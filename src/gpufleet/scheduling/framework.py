"""The scheduling framework: extension points, statuses and the policy registries.

One small Protocol per extension point (after kube-scheduler's framework):

- :class:`QueueSort` orders pending jobs;
- Filter is :meth:`ClusterSnapshot.feasible` plus :class:`ScorePlugin` vetoes (score ``-inf``);
- :class:`ScorePlugin` scores candidate nodes for one pod, higher is better; it may also choose
  which GPUs of the chosen node to use (:meth:`ScorePlugin.select`);
- Reserve/Unreserve is :meth:`ClusterSnapshot.allocate` / :meth:`ClusterSnapshot.release`
  (Unreserve of something never reserved raises: it is a bug, not a no-op);
- PostFilter is preemption (``scheduling/preemption.py``).

Policies are registered by name; a registry refuses duplicates and, asked for a missing name,
says which names exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from gpufleet.errors import RegistryError

if TYPE_CHECKING:
    from gpufleet.model.job import Job
    from gpufleet.scheduling.snapshot import (
        Assignment,
        ClusterSnapshot,
        FloatArray,
        IntArray,
        PodRequest,
    )
    from gpufleet.scheduling.usage import UsageTracker


class Code(StrEnum):
    """Closed set of outcomes. What the cycle does next:

    - SUCCESS: the job is reserved and will be bound;
    - UNSCHEDULABLE: does not fit now; try backfill, preemption, scale-up; stays queued;
    - UNRESOLVABLE: can never fit on any node or pool (e.g. no such GPU type); stays queued with
      that reason, and the simulator fails it at the end;
    - ERROR: an internal error; the job stays queued and the error is reported.
    """

    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    UNRESOLVABLE = "unresolvable"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS)


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One kind of pod in the target workload and its share of pods (for FGD)."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_types: frozenset[str]
    weight: float


@dataclass(slots=True)
class PolicyContext:
    """What a policy factory may use to build its policy. Passed in; policies read no globals."""

    workload: Sequence[WorkloadClass] = ()
    seed: int = 0
    params: Mapping[str, object] = field(default_factory=dict)


class ScorePlugin(Protocol):
    name: str

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        """Scores for the feasible ``nodes`` (indices); higher is better; ``-inf`` vetoes a node."""
        ...

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        """The GPUs of ``node`` this pod should take (None: let the snapshot choose by default)."""
        ...


@dataclass(slots=True)
class SortContext:
    """What ordering may look at: the time, team usage, cluster totals, team weights."""

    now: float
    usage: UsageTracker
    gpu_total_milli: int = 0
    cpu_total_milli: int = 0
    memory_total_mib: int = 0
    weights: Mapping[str, float] = field(default_factory=dict)

    def weight(self, team: str) -> float:
        return self.weights.get(team, 1.0)


class QueueSort(Protocol):
    name: str

    def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
        """The pending jobs in the order the cycle should try them. Deterministic: ties end on
        submit time and job id."""
        ...


F = TypeVar("F")


class Registry(Generic[F]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def deco(factory: F) -> F:
            if name in self._items:
                raise RegistryError(f"{self.kind} policy '{name}' is already registered")
            self._items[name] = factory
            return factory

        return deco

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} policy '{name}' (known: {', '.join(sorted(self._items))})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


PlacementFactory = Callable[[PolicyContext], ScorePlugin]
SortFactory = Callable[[PolicyContext], QueueSort]

PLACEMENT: Registry[PlacementFactory] = Registry("placement")
QUEUE_SORT: Registry[SortFactory] = Registry("queue sort")
