"""The simulated cluster: nodes coming and going, what runs where, spot interruptions.

Holds the world's snapshot (the scheduler's cache) and the bookkeeping the engine needs; it has
no notion of time beyond the values the engine passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpufleet.model.node import CapacityType, Node, NodePool
from gpufleet.scheduling.autoscaler import PoolState
from gpufleet.scheduling.preemption import RunningJob
from gpufleet.scheduling.snapshot import ClusterSnapshot

NodePricer = Callable[[Node], float]  # node → $ per node-hour


@dataclass(slots=True)
class SimNode:
    node: Node
    index: int  # in the snapshot
    hourly_usd: float
    requested_at: float
    ready_at: float | None = None
    removed_at: float | None = None
    interrupt_at: float | None = None  # spot: when it will be taken back
    jobs: set[str] = field(default_factory=set)


class SimCluster:
    def __init__(self, pricer: NodePricer, max_gpus: int = 8) -> None:
        self.pricer = pricer
        self.snapshot = ClusterSnapshot(max_gpus=max_gpus, capacity=256)
        self.nodes: dict[str, SimNode] = {}
        self.pools: dict[str, NodePool] = {}
        self.pool_counter: dict[str, int] = {}
        self.running: dict[str, RunningJob] = {}
        self.live: dict[str, SimNode] = {}  # requested and not removed
        self._ready_count: dict[str, int] = {}
        self._prov_count: dict[str, int] = {}
        self._pool_price: dict[str, float] = {}

    # -- nodes ---------------------------------------------------------------------------------------
    def add_pool(self, pool: NodePool) -> None:
        self.pools[pool.name] = pool
        self.pool_counter.setdefault(pool.name, 0)
        self._ready_count.setdefault(pool.name, 0)
        self._prov_count.setdefault(pool.name, 0)
        self._pool_price[pool.name] = self.pricer(pool.make_node(0))

    def new_pool_node(self, pool: str) -> Node:
        k = self.pool_counter[pool]
        self.pool_counter[pool] = k + 1
        return self.pools[pool].make_node(k)

    def request(self, node: Node, now: float) -> SimNode:
        """A node is asked for: it is billed from now, schedulable once ready."""
        idx = self.snapshot.add_node(node, 0.0, schedulable=False)
        sn = SimNode(node, idx, self.pricer(node), requested_at=now)
        self.snapshot.gpu_hour_usd[idx] = sn.hourly_usd / node.gpu_count if node.gpu_count else sn.hourly_usd
        self.nodes[node.name] = sn
        self.live[node.name] = sn
        if node.pool in self._prov_count:
            self._prov_count[node.pool] += 1
        return sn

    def ready(self, name: str, now: float) -> None:
        sn = self.nodes[name]
        sn.ready_at = now
        self.snapshot.schedulable[sn.index] = True
        if sn.node.pool in self._prov_count:
            self._prov_count[sn.node.pool] -= 1
            self._ready_count[sn.node.pool] += 1

    def cordon(self, name: str) -> None:
        self.snapshot.schedulable[self.nodes[name].index] = False

    def remove(self, name: str, now: float) -> None:
        sn = self.nodes[name]
        sn.removed_at = now
        self.snapshot.schedulable[sn.index] = False
        del self.live[name]
        if sn.node.pool in self._prov_count:
            counter = self._ready_count if sn.ready_at is not None else self._prov_count
            counter[sn.node.pool] -= 1

    def live_nodes(self) -> Iterable[SimNode]:
        return self.live.values()

    def pool_states(self) -> list[PoolState]:
        return [
            PoolState(pool, self._ready_count[name], self._prov_count[name], self._pool_price[name])
            for name, pool in self.pools.items()
            if pool.max_nodes > 0
        ]

    def cost_rate_usd_per_hour(self) -> float:
        return sum(sn.hourly_usd for sn in self.live_nodes())

    def is_spot(self, name: str) -> bool:
        return self.nodes[name].node.capacity_type is CapacityType.SPOT
