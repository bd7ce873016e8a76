"""Fair-share ordering by progressive filling (shared by ``drf`` and ``decayed``).

Within each effective-priority level (see aging), teams take turns: the team with the smallest
weighted share goes next and its share grows by what its job would add. Within a team, jobs go
by priority then age. The result interleaves teams so a team that has used little gets the
next free GPUs — the fair share is visible in start order.

Two implementations of the same order:

- :func:`progressive_fill` sorts the whole queue (the reference; kept for tests and one-off use);
- :class:`FillIndex` keeps the queue grouped by (team, priority), each group sorted by age, current
  across cycles (arrivals and departures are found by object identity, in C), and
  :meth:`FillIndex.iter_order` yields the same order lazily: a cycle that stops early (nothing else
  can start) pays for the jobs it looked at, not for the queue.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

from gpufleet.model.job import Job
from gpufleet.scheduling.framework import QueueDelta, SortContext, diff_queue
from gpufleet.scheduling.ordering.aging import Aging

# (team, ctx) → current share (already divided by weight); (job, ctx) → share the job adds
ShareFn = Callable[[str, SortContext], float]
IncrementFn = Callable[[Job, SortContext], float]


def progressive_fill(
    jobs: Sequence[Job], ctx: SortContext, aging: Aging, share: ShareFn, increment: IncrementFn
) -> list[Job]:
    now = ctx.now
    levels: dict[int, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
    for j in jobs:
        levels[aging.effective_priority(j, now)][j.team].append(j)
    out: list[Job] = []
    shares: dict[str, float] = {}
    for level in sorted(levels, reverse=True):
        heap: list[tuple[float, float, str, int]] = []
        queues = levels[level]
        for team, q in queues.items():
            q.sort(key=lambda j: (-j.priority, j.submit_time, j.id))
            if team not in shares:
                shares[team] = share(team, ctx)
            heapq.heappush(heap, (shares[team], q[0].submit_time, team, 0))
        while heap:
            s, _, team, pos = heapq.heappop(heap)
            q = queues[team]
            job = q[pos]
            out.append(job)
            s += increment(job, ctx) / ctx.weight(team)
            shares[team] = s
            if pos + 1 < len(q):
                heapq.heappush(heap, (s, q[pos + 1].submit_time, team, pos + 1))
    return out


GroupKey = tuple[str, int]  # (team, priority)
Group = tuple[list[tuple[float, str]], list[Job]]  # sort keys (submit time, id) and the jobs, in that order


class FairShareSort:
    """Base of the progressive-filling queue sorts: the eager :meth:`order` and the lazy,
    incremental :meth:`iter_order` give the same order."""

    name = "fairshare"

    def __init__(self, aging: Aging, share: ShareFn, increment: IncrementFn) -> None:
        self.aging = aging
        self._share = share
        self._increment = increment
        self._index = FillIndex()

    def order(self, jobs: Sequence[Job], ctx: SortContext) -> list[Job]:
        if ctx.priorities_changed:
            self._index = FillIndex()  # its groups may be stale: the next lazy call rebuilds it
        return progressive_fill(jobs, ctx, self.aging, self._share, self._increment)

    def iter_order(self, jobs: Sequence[Job], ctx: SortContext) -> Iterator[Job]:
        if not self._index.sync(jobs, rebuild=ctx.priorities_changed, delta=ctx.queue_delta):
            return iter(self.order(jobs, ctx))
        return self._index.iter_order(ctx, self.aging, self._share, self._increment)


class FillIndex:
    """The pending queue grouped by (team, priority), each group sorted by (submit time, id), kept
    current from one cycle's queue to the next.

    :meth:`sync` diffs the new queue against the last by object identity (set operations in C)
    and inserts or removes only what changed; groups are copied on write, so an order still being
    read from an earlier cycle is not disturbed. Jobs whose priority may have changed (budget
    throttles write ``Job.priority``) need a rebuild: pass ``rebuild=True``."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._objs: dict[int, Job] = {}
        self._where: dict[int, GroupKey] = {}
        self._groups: dict[GroupKey, Group] = {}
        self._version: int | None = None  # the scheduler's queue version synced to (see QueueDelta)

    def __len__(self) -> int:
        return len(self._objs)

    def sync(self, jobs: Sequence[Job], *, rebuild: bool = False, delta: QueueDelta | None = None) -> bool:
        """Bring the index to ``jobs`` (``delta``: their change since the version last synced, when
        the scheduler knows it). False (and the index left empty) if a job is in ``jobs`` twice:
        the caller then orders eagerly."""
        version, self._version = self._version, None
        if rebuild or not self._objs:
            return self._rebuild(jobs, delta)
        if delta is not None and delta.since == version:
            arrived, left = delta.arrived, delta.left
            self._ids.difference_update(map(id, left))
            self._ids.update(map(id, arrived))
        else:
            d = diff_queue(self._ids, self._objs, jobs)
            if d is None:
                self._ids, self._objs, self._where, self._groups = set(), {}, {}, {}
                return False
            self._ids, arrived, left = d
        if not arrived and not left:
            self._version = delta.version if delta is not None else None
            return True
        if len(arrived) + len(left) > len(jobs) // 4 + 16:
            return self._rebuild(jobs, delta)
        groups = self._groups
        copied: set[GroupKey] = set()

        def writable(g: GroupKey) -> Group:
            grp = groups.get(g)
            if grp is None:
                grp = groups[g] = ([], [])
                copied.add(g)
            elif g not in copied:
                grp = groups[g] = (grp[0].copy(), grp[1].copy())
                copied.add(g)
            return grp

        where, objs = self._where, self._objs
        for j in left:
            oid = id(j)
            del objs[oid]
            g = where.pop(oid)
            keys, lst = writable(g)
            i = bisect_left(keys, (j.submit_time, j.id))
            while lst[i] is not j:  # equal keys (a job id twice in a queue's history): find this one
                i += 1
            del keys[i]
            del lst[i]
            if not lst:
                del groups[g]
        for j in arrived:
            oid = id(j)
            objs[oid] = j
            g = (j.team, j.priority)
            where[oid] = g
            keys, lst = writable(g)
            k = (j.submit_time, j.id)
            i = bisect_left(keys, k)
            keys.insert(i, k)
            lst.insert(i, j)
        self._version = delta.version if delta is not None else None
        return True

    def _rebuild(self, jobs: Sequence[Job], delta: QueueDelta | None) -> bool:
        cur = dict(zip(map(id, jobs), jobs, strict=True))
        if len(cur) != len(jobs):
            self._ids, self._objs, self._where, self._groups = set(), {}, {}, {}
            return False
        by: dict[GroupKey, list[Job]] = defaultdict(list)
        where: dict[int, GroupKey] = {}
        for oid, j in cur.items():
            g = (j.team, j.priority)
            by[g].append(j)
            where[oid] = g
        groups: dict[GroupKey, Group] = {}
        for g, lst in by.items():
            lst.sort(key=_age_key)
            groups[g] = ([(j.submit_time, j.id) for j in lst], lst)
        self._ids, self._objs, self._where, self._groups = set(cur), cur, where, groups
        self._version = delta.version if delta is not None else None
        return True

    def iter_order(self, ctx: SortContext, aging: Aging, share: ShareFn, increment: IncrementFn) -> Iterator[Job]:
        """The :func:`progressive_fill` order of the synced queue, lazily. Every team's share is
        read up front (as the eager order reads them before anything is placed), so the order
        does not depend on when it is consumed."""
        groups = {g: grp[1] for g, grp in self._groups.items()}  # a snapshot: groups are copied on write
        shares = {team: share(team, ctx) for team in {g[0] for g in groups}}
        return _fill(groups, shares, ctx, aging, increment, ctx.weight)


def _age_key(j: Job) -> tuple[float, str]:
    return (j.submit_time, j.id)


def _fill(
    groups: dict[GroupKey, list[Job]],
    shares: dict[str, float],
    ctx: SortContext,
    aging: Aging,
    increment: IncrementFn,
    weight: Callable[[str], float],
) -> Iterator[Job]:
    now = ctx.now
    eff = aging.effective_priority
    pos = dict.fromkeys(groups, 0)
    # groups by the effective priority of their next job (older jobs of a group rank at least as
    # high as younger ones, so a group's next job carries its highest level)
    gheap = [(-eff(lst[0], now), -g[1], g) for g, lst in groups.items()]
    heapq.heapify(gheap)
    while gheap:
        level = -gheap[0][0]
        # each team's queue at this level: its groups' runs at the level, higher priority first
        # (the heap gives a level's groups by priority, highest first)
        cursors: dict[str, list[GroupKey]] = {}
        while gheap and gheap[0][0] == -level:
            g = heapq.heappop(gheap)[2]
            cursors.setdefault(g[0], []).append(g)
        heap = [(shares[team], groups[mine[0]][pos[mine[0]]].submit_time, team) for team, mine in cursors.items()]
        heapq.heapify(heap)
        while heap:
            s, _, team = heapq.heappop(heap)
            mine = cursors[team]
            g = mine[0]
            lst = groups[g]
            p = pos[g]
            job = lst[p]
            yield job
            s += increment(job, ctx) / weight(team)
            shares[team] = s
            p += 1
            pos[g] = p
            if p < len(lst):
                lv = eff(lst[p], now)
                if lv != level:
                    del mine[0]  # this group's run at the level is over: it comes back at its next level
                    heapq.heappush(gheap, (-lv, -g[1], g))
            else:
                del mine[0]
            if mine:
                g = mine[0]
                heapq.heappush(heap, (s, groups[g][pos[g]].submit_time, team))
