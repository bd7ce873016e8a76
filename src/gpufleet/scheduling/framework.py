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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import compress, count, islice
from operator import is_not
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


class WaitKind(StrEnum):
    """Why a job that does not start waits, for whoever acts on it: only ``CAPACITY`` is a wait
    that another node would end (the Kubernetes backend says so to node autoscalers such as
    Karpenter; the others are gpufleet's own decisions, which more nodes would not change):

    - CAPACITY: no node has room now, or none could ever hold the job (no node or pool fits it);
    - QUOTA: its team's quota (or the cohort's) is used up;
    - BUDGET: a budget throttle holds it (a GPU cap, spot only);
    - PREEMPTION: room is being made by preempting other jobs;
    - OTHER: anything else (a check that does not say).
    """

    CAPACITY = "capacity"
    QUOTA = "quota"
    BUDGET = "budget"
    PREEMPTION = "preemption"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: str = ""
    kind: WaitKind = WaitKind.OTHER  # why a job waits (not SUCCESS), as a fact rather than text

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


@dataclass(frozen=True, slots=True)
class QueueDelta:
    """How one cycle's queue differs from the previous cycle's of the same scheduler (by object
    identity): ``arrived`` and ``left`` turn queue version ``since`` into ``version``."""

    since: int
    version: int
    arrived: Sequence[Job]
    left: Sequence[Job]


T = TypeVar("T")


def diff_queue(
    prev_ids: set[int], prev: Mapping[int, T], jobs: Sequence[T]
) -> tuple[set[int], list[T], list[T]] | None:
    """(ids of ``jobs``, jobs that arrived, jobs that left) since ``prev`` (object id → job), found
    with set operations in C; None when a job is in ``jobs`` twice. Arrivals are looked for from
    the end of ``jobs`` (where worlds append them) and the scan stops once all are found."""
    cur = set(map(id, jobs))
    if len(cur) != len(jobs):
        return None
    new = cur - prev_ids
    stayed = len(cur) - len(new)
    left = [prev[i] for i in prev_ids - cur] if stayed < len(prev_ids) else []
    arrived: list[T] = []
    if new:
        need = len(new)
        for j in reversed(jobs):
            if id(j) in new:
                arrived.append(j)
                need -= 1
                if not need:
                    break
    return cur, arrived, left


def aligned_diff(
    prev: Sequence[T], prev_ids: set[int], cur: Sequence[T], max_left: int = 64
) -> tuple[list[T], list[T]] | None:
    """(arrived, left) when ``cur`` is ``prev`` less some elements, order kept, plus new ones at
    the end — how worlds keep their queues (an insertion-ordered mapping) — found by identity
    with C-level scans between departures; None when it is not so (more than ``max_left`` gone,
    or an arrival that was already there: the caller then diffs by sets)."""
    left: list[T] = []
    i = j = 0
    n_prev, n_cur = len(prev), len(cur)
    while i < n_prev and j < n_cur:
        m = next(compress(count(), map(is_not, islice(prev, i, None), islice(cur, j, None))), None)
        if m is None:  # equal until one of them ends
            k = min(n_prev - i, n_cur - j)
            i += k
            j += k
            break
        i += m
        j += m
        left.append(prev[i])  # gone (or moved: then it arrives again at the end)
        i += 1
        if len(left) > max_left:
            return None
    left.extend(prev[i:])
    if len(left) > max_left:
        return None
    arrived = list(cur[j:])
    if arrived:  # an arrival must be new, or one of those gone (moved to the end): not queued twice
        gone = set(map(id, left))
        ids = set(map(id, arrived))
        if len(ids) != len(arrived) or any(x in prev_ids and x not in gone for x in ids):
            return None
    return arrived, left


@dataclass(slots=True)
class SortContext:
    """What ordering may look at: the time, team usage, cluster totals, team weights."""

    now: float
    usage: UsageTracker
    gpu_total_milli: int = 0
    cpu_total_milli: int = 0
    memory_total_mib: int = 0
    weights: Mapping[str, float] = field(default_factory=dict)
    # job priorities may have changed since the last cycle (budget limits write ``Job.priority``):
    # orderings that keep the queue indexed across cycles must rebuild
    priorities_changed: bool = False
    queue_delta: QueueDelta | None = None  # the queue's change since the scheduler's last cycle, if known

    def weight(self, team: str) -> float:
        return self.weights.get(team, 1.0)


class QueueSort(Protocol):
    name: str

    def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
        """The pending jobs in the order the cycle should try them. Deterministic: ties end on
        submit time and job id."""
        ...


class LazyQueueSort(QueueSort, Protocol):
    """A queue sort that can also yield its order lazily (the same order as :meth:`order`), so a
    cycle that stops early pays only for the jobs it looked at. It may keep the queue indexed
    from one cycle to the next: call it with each cycle's whole queue."""

    def iter_order(self, jobs: Sequence[Job], ctx: SortContext) -> Iterator[Job]: ...


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
