"""The simulated cluster as a backend: what a cloud and its machines would do, on a simulated clock.

It implements the same contract as the local process backend (:mod:`gpufleet.backends.base`) plus
node provisioning: runs last their job's remaining work (``duration_s - work_done_s``), end at their
max runtime, or fail at a random point (``failure_prob``); spot nodes are taken back at a hazard
rate per node-hour, with a notice ``spot_notice_s`` before; provisioned nodes join after their pool's
delay. Everything it reports is a :class:`BackendEvent` stamped with the simulated time it happened;
all randomness comes from one seeded generator, so the same seed gives the same run.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from gpufleet.backends.base import (
    BackendEvent,
    Capabilities,
    Capability,
    EventKind,
    GpuSample,
    LaunchRequest,
    Recovered,
    RecoveredState,
    RunHandle,
)
from gpufleet.clock import SimClock
from gpufleet.model.node import CapacityType, Node, NodePool

DEFAULT_RUNTIME_S = 3600.0  # a job that declares no length of work runs this long


class _Kind(IntEnum):
    """Order among events at the same time (smaller first), as a cluster would report them."""

    RUN_END = 0
    NODE_INTERRUPT = 1
    SPOT_NOTICE = 2
    NODE_READY = 3


@dataclass(slots=True)
class _Run:
    job_id: str
    run: int
    nodes: tuple[str, ...]
    started_at: float
    end: float
    outcome: EventKind


@dataclass(slots=True)
class _Node:
    node: Node
    ready: bool = False
    removed: bool = False
    runs: set[tuple[str, int]] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class SimBackendOptions:
    seed: int = 0
    spot_hazard_per_node_hour: float = 0.0
    spot_notice_s: float = 120.0
    failure_prob: float = 0.0


class SimBackend:
    name = "simulated"

    def __init__(
        self,
        clock: SimClock,
        nodes: Sequence[Node] = (),
        pools: Sequence[NodePool] = (),
        options: SimBackendOptions | None = None,
    ) -> None:
        self.clock = clock
        self.options = options or SimBackendOptions()
        self.rng = np.random.default_rng(self.options.seed)
        self._pools = {p.name: p for p in pools}
        self._pool_counter = {p.name: 0 for p in pools}
        self._static = list(nodes)
        self.nodes: dict[str, _Node] = {}
        self._runs: dict[tuple[str, int], _Run] = {}
        self._heap: list[tuple[float, int, int, object]] = []
        # job id → seconds of work, for jobs whose launch does not carry it (a store without the field)
        self.durations: dict[str, float] = {}
        self._seq = 0
        supported = {
            Capability.FRACTIONAL,
            Capability.MIG,
            Capability.SPOT,
            Capability.PREEMPTION,
            Capability.MULTI_NODE,
        }
        missing = {Capability.RUN_AS: "simulated runs have no accounts"}
        if any(p.max_nodes > 0 for p in pools):
            supported.add(Capability.AUTOSCALING)
        else:
            missing[Capability.AUTOSCALING] = "no pool may grow"
        self.capabilities = Capabilities(frozenset(supported), missing)

    # -- events ------------------------------------------------------------------------------------
    def _push(self, t: float, kind: _Kind, payload: object) -> None:
        heapq.heappush(self._heap, (t, int(kind), self._seq, payload))
        self._seq += 1

    def next_time(self) -> float:
        """When the next event happens (inf: none is due)."""
        while self._heap:
            t, kind, _, payload = self._heap[0]
            if kind == _Kind.RUN_END:
                assert isinstance(payload, tuple)
                r = self._runs.get(payload[:2])
                if r is None or r.end != t:
                    heapq.heappop(self._heap)  # a run stopped earlier
                    continue
            return t
        return float("inf")

    def adding(self) -> bool:
        """Is a node on its way (provisioned, not yet ready)? The only event that can give waiting
        jobs room when nothing runs: a spot interruption or notice only takes capacity away."""
        return any(not sn.ready and not sn.removed for sn in self.nodes.values())

    def poll(self) -> list[BackendEvent]:
        now = self.clock.now()
        out: list[BackendEvent] = []
        while self._heap and self._heap[0][0] <= now:
            t, kind, _, payload = heapq.heappop(self._heap)
            if kind == _Kind.RUN_END:
                assert isinstance(payload, tuple)
                r = self._runs.get(payload[:2])
                if r is None or r.end != t:
                    continue
                self._drop(r)
                reason = "run failed" if r.outcome is EventKind.FAILED else ""
                exit_code = 0 if r.outcome is EventKind.SUCCEEDED else 1
                out.append(
                    BackendEvent(
                        r.outcome,
                        t,
                        job_id=r.job_id,
                        run=r.run,
                        exit_code=exit_code,
                        reason=reason,
                        started_at=r.started_at,
                        ended_at=t,
                    )
                )
            else:
                assert isinstance(payload, str)
                sn = self.nodes.get(payload)
                if sn is None or sn.removed:
                    continue
                if kind == _Kind.NODE_READY:
                    self._ready(sn, t)
                    out.append(BackendEvent(EventKind.NODE_ADDED, t, node=payload))
                elif kind == _Kind.SPOT_NOTICE:
                    out.append(BackendEvent(EventKind.NODE_INTERRUPTED, t, node=payload, reason="spot notice"))
                else:
                    self._take(sn)
                    out.append(
                        BackendEvent(
                            EventKind.NODE_REMOVED, t, node=payload, reason=f"spot interruption of node {payload}"
                        )
                    )
        return out

    # -- nodes -------------------------------------------------------------------------------------
    def inventory(self) -> list[Node]:
        """The nodes there from the start: static ones and the pools' initial nodes (all ready)."""
        out = []
        for node in self._static:
            out.append(node)
        for pool in self._pools.values():
            for _ in range(pool.initial_nodes or pool.min_nodes):
                out.append(self._new_node(pool.name))
        now = self.clock.now()
        for node in out:
            if node.name not in self.nodes:
                self.nodes[node.name] = _Node(node)
            self._ready(self.nodes[node.name], now)
        return out

    def pools(self) -> list[NodePool]:
        return list(self._pools.values())

    def _new_node(self, pool: str) -> Node:
        k = self._pool_counter[pool]
        self._pool_counter[pool] = k + 1
        return self._pools[pool].make_node(k)

    def provision(self, pool: str, count: int, now: float) -> list[Node]:
        out = []
        delay = self._pools[pool].provisioning_delay_s
        for _ in range(count):
            node = self._new_node(pool)
            self.nodes[node.name] = _Node(node)
            self._push(now + delay, _Kind.NODE_READY, node.name)
            out.append(node)
        return out

    def release(self, node: str, now: float) -> None:
        sn = self.nodes.get(node)
        if sn is not None and not sn.removed:
            self._take(sn)

    def _ready(self, sn: _Node, now: float) -> None:
        if sn.ready:
            return
        sn.ready = True
        hazard = self.options.spot_hazard_per_node_hour
        if sn.node.capacity_type is CapacityType.SPOT and hazard > 0:
            t = now + float(self.rng.exponential(3600.0 / hazard))
            self._push(max(now, t - self.options.spot_notice_s), _Kind.SPOT_NOTICE, sn.node.name)
            self._push(t, _Kind.NODE_INTERRUPT, sn.node.name)

    def _take(self, sn: _Node) -> None:
        """The node is gone: what ran only on it is gone with it (the loop requeues it); a run with
        pods on other nodes runs on there until the loop stops it (as on a real cluster)."""
        sn.removed = True
        for key in list(sn.runs):
            r = self._runs.get(key)
            if r is None:
                continue
            if any(n != sn.node.name and (o := self.nodes.get(n)) is not None and not o.removed for n in r.nodes):
                sn.runs.discard(key)
                continue
            self._drop(r)

    # -- runs --------------------------------------------------------------------------------------
    def launch(self, req: LaunchRequest) -> RunHandle:
        key = (req.job_id, req.run)
        now = self.clock.now()
        if key in self._runs:
            r = self._runs[key]
            return RunHandle(req.job_id, req.run, 0, r.started_at, "")
        duration = req.duration_s if req.duration_s is not None else self.durations.get(req.job_id, DEFAULT_RUNTIME_S)
        end, outcome = now + max(0.0, duration - req.work_done_s), EventKind.SUCCEEDED
        if req.max_runtime_s is not None:
            limit = now + max(0.0, req.max_runtime_s - req.work_done_s)
            if limit < end:
                end, outcome = limit, EventKind.TIMED_OUT
        if self.options.failure_prob > 0 and self.rng.random() < self.options.failure_prob:
            fail_at = now + (end - now) * float(self.rng.random())
            if fail_at < end:
                end, outcome = fail_at, EventKind.FAILED
        nodes = tuple(dict.fromkeys(p.node for p in req.placement))
        r = _Run(req.job_id, req.run, nodes, now, end, outcome)
        self._runs[key] = r
        for n in nodes:
            self.nodes[n].runs.add(key)
        self._push(end, _Kind.RUN_END, key)
        return RunHandle(req.job_id, req.run, 0, now, "")

    def stop(self, job_id: str, run: int, reason: str, grace_s: float = 30.0) -> None:
        """Stopped at once (a simulated job checkpoints instantly on the signal if it checkpoints)."""
        r = self._runs.get((job_id, run))
        if r is None:
            return
        now = self.clock.now()
        r.end, r.outcome = now, EventKind.STOPPED
        self._push(now, _Kind.RUN_END, (job_id, run))

    def _drop(self, r: _Run) -> None:
        self._runs.pop((r.job_id, r.run), None)
        for n in r.nodes:
            sn = self.nodes.get(n)
            if sn is not None:
                sn.runs.discard((r.job_id, r.run))

    def recover(self, job_id: str, run: int) -> Recovered:
        r = self._runs.get((job_id, run))
        if r is None:
            return Recovered(RecoveredState.ABSENT)
        return Recovered(RecoveredState.RUNNING, RunHandle(job_id, run, 0, r.started_at, ""))

    def telemetry(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        return None
