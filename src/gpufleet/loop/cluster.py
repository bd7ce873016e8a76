"""The loop's view of the cluster: nodes, their prices, the scheduler's snapshot, pools and what
runs where. Filled from the backend's inventory and node events; never reads the backend itself."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model.gpu import canonical_gpu_name
from gpufleet.model.node import CapacityType, Node, NodePool
from gpufleet.scheduling.admission import Place, Shape, node_shape, pool_place, pool_shape
from gpufleet.scheduling.autoscaler import PoolState
from gpufleet.scheduling.snapshot import ClusterSnapshot


@dataclass(slots=True)
class NodeState:
    node: Node
    index: int  # in the snapshot
    hourly_usd: float
    requested_at: float
    ready_at: float | None = None
    removed_at: float | None = None
    jobs: set[str] = field(default_factory=set)


class ClusterView:
    def __init__(self, max_gpus: int = 8, capacity: int = 256) -> None:
        self.snapshot = ClusterSnapshot(max_gpus=max_gpus, capacity=capacity)
        self.nodes: dict[str, NodeState] = {}
        self.live: dict[str, NodeState] = {}  # requested and not removed
        self.pools: dict[str, NodePool] = {}
        self._pool_price: dict[str, float] = {}
        self._ready_count: dict[str, int] = {}
        self._prov_count: dict[str, int] = {}
        self._idle: set[str] = set()  # ready, schedulable nodes of autoscaled pools running nothing
        self._shapes: Counter[Shape] = Counter()  # kinds of live nodes (feasibility at submit)
        # answers that change only when nodes come, go or become ready: cached per version
        self._version = 0
        self._cached: dict[str, tuple[int, Any]] = {}
        # places (see places()), by "each node on its own": valid while (version, snapshot version) hold
        self._places: dict[bool, tuple[tuple[int, int], list[Place]]] = {}

    # -- pools -------------------------------------------------------------------------------------
    def _memo(self, name: str, compute: Callable[[], Any]) -> Any:
        hit = self._cached.get(name)
        if hit is not None and hit[0] == self._version:
            return hit[1]
        value = compute()
        self._cached[name] = (self._version, value)
        return value

    def shapes(self) -> list[Shape]:
        """The kinds of node the cluster has (live nodes) or can get (autoscaled pools)."""

        def compute() -> list[Shape]:
            out = [shape for shape, k in self._shapes.items() if k > 0]
            return out + [pool_shape(p) for p in self.pools.values() if p.max_nodes > 0]

        return list(self._memo("shapes", compute))

    def tainted(self) -> bool:
        """Does a node (live or gone: no scan) or an autoscaled pool carry a taint? Feasibility then
        judges every job by :meth:`places`."""
        return bool(self.snapshot.tainted) or any(p.taints for p in self.pools.values() if p.max_nodes > 0)

    def places(self, *, each: bool) -> list[Place]:
        """The live nodes and the autoscaled pools as places (for a job's node constraints:
        :func:`~gpufleet.scheduling.admission.constrained_infeasibility`): each node on its own
        (``each``: a job that selects nodes), else one place per distinct shape and taints. A node's
        labels and taints are the snapshot's (a relabelled node's new ones)."""
        snap = self.snapshot
        key = (self._version, snap.version)
        hit = self._places.get(each)
        if hit is not None and hit[0] == key:
            return list(hit[1])
        if each:
            nodes = [
                Place(node_shape(ns.node), snap.node_labels[ns.index], snap.node_taints[ns.index], ns.node.name)
                for ns in self.live.values()
            ]
        else:
            kinds = dict.fromkeys((node_shape(ns.node), snap.node_taints[ns.index]) for ns in self.live.values())
            nodes = [Place(shape, taints=taints) for shape, taints in kinds]
        out = nodes + [pool_place(p) for p in self.pools.values() if p.max_nodes > 0]
        self._places[each] = (key, out)
        return list(out)

    def add_pool(self, pool: NodePool, hourly_usd: float) -> None:
        self.pools[pool.name] = pool
        self._pool_price[pool.name] = hourly_usd
        if pool.gpu_model:  # known before its first node: a job limited to it can ask for one
            self.snapshot.type_index(canonical_gpu_name(pool.gpu_model) or pool.gpu_model)
        self._version += 1
        self._ready_count.setdefault(pool.name, 0)
        self._prov_count.setdefault(pool.name, 0)

    def pool_states(self) -> list[PoolState]:
        def compute() -> list[PoolState]:
            return [
                PoolState(pool, self._ready_count[name], self._prov_count[name], self._pool_price[name])
                for name, pool in self.pools.items()
                if pool.max_nodes > 0
            ]

        return list(self._memo("pool_states", compute))

    def above_min(self) -> bool:
        """Some autoscaled pool has more live nodes than its minimum (scale-down may act)."""
        return bool(
            self._memo(
                "above_min",
                lambda: any(
                    self._ready_count[n] + self._prov_count[n] > p.min_nodes
                    for n, p in self.pools.items()
                    if p.max_nodes > 0
                ),
            )
        )

    def can_grow(self) -> bool:
        """Some autoscaled pool is below its maximum (the autoscaler may still add a node)."""
        return any(
            self._ready_count[n] + self._prov_count[n] < p.max_nodes for n, p in self.pools.items() if p.max_nodes > 0
        )

    # -- nodes -------------------------------------------------------------------------------------
    def request(self, node: Node, hourly_usd: float, now: float) -> NodeState:
        """A node exists (billed from now); schedulable once :meth:`ready`."""
        per_gpu = hourly_usd / node.gpu_count if node.gpu_count else hourly_usd
        idx = self.snapshot.add_node(node, per_gpu, schedulable=False)
        ns = NodeState(node, idx, hourly_usd, requested_at=now)
        self.nodes[node.name] = ns
        self.live[node.name] = ns
        self._shapes[node_shape(node)] += 1
        if node.pool in self._prov_count:
            self._prov_count[node.pool] += 1
        self._version += 1
        return ns

    def ready(self, name: str, now: float) -> None:
        ns = self.nodes[name]
        if ns.ready_at is not None or ns.removed_at is not None:
            return
        ns.ready_at = now
        self.snapshot.schedulable[ns.index] = True
        if ns.node.pool in self._prov_count:
            self._prov_count[ns.node.pool] -= 1
            self._ready_count[ns.node.pool] += 1
        self._version += 1
        self._track(ns)

    def cordon(self, name: str) -> None:
        self.snapshot.schedulable[self.nodes[name].index] = False
        self._idle.discard(name)

    def uncordon(self, name: str) -> None:
        """A cordoned node takes new work again (if it is ready and still there)."""
        ns = self.nodes[name]
        if ns.ready_at is None or ns.removed_at is not None:
            return
        self.snapshot.schedulable[ns.index] = True
        self._version += 1
        self._track(ns)

    def remove(self, name: str, now: float) -> None:
        ns = self.nodes[name]
        ns.removed_at = now
        self.snapshot.schedulable[ns.index] = False
        del self.live[name]
        self._idle.discard(name)
        self._shapes[node_shape(ns.node)] -= 1
        if ns.node.pool in self._prov_count:
            counter = self._ready_count if ns.ready_at is not None else self._prov_count
            counter[ns.node.pool] -= 1
        self._version += 1

    def idle_autoscaled(self) -> bool:
        """Is some ready, schedulable node of an autoscaled pool running nothing?"""
        return bool(self._idle)

    def _track(self, ns: NodeState) -> None:
        pool = self.pools.get(ns.node.pool)
        idle = (
            pool is not None
            and pool.max_nodes > 0
            and not ns.jobs
            and ns.ready_at is not None
            and ns.removed_at is None
            and bool(self.snapshot.schedulable[ns.index])
        )
        if idle:
            self._idle.add(ns.node.name)
        else:
            self._idle.discard(ns.node.name)

    def hold(self, name: str, job_id: str) -> None:
        """A run of ``job_id`` holds resources of node ``name``."""
        ns = self.nodes[name]
        ns.jobs.add(job_id)
        self._idle.discard(name)

    def free(self, name: str, job_id: str) -> None:
        ns = self.nodes.get(name)
        if ns is not None:
            ns.jobs.discard(job_id)
            if not ns.jobs:
                self._track(ns)

    def live_nodes(self) -> Iterable[NodeState]:
        return self.live.values()

    def provisioning(self) -> bool:
        return any(ns.ready_at is None for ns in self.live.values())

    def gpu_model(self, name: str) -> str:
        ns = self.nodes.get(name)
        return ns.node.gpu_model if ns is not None else ""

    def node_replicas(self, name: str) -> int:
        """Replicas per GPU of the node (1: its GPUs are not time-sliced)."""
        ns = self.nodes.get(name)
        return ns.node.gpu_facts.replicas if ns is not None else 1

    def cost_rate_usd_per_hour(self) -> float:
        return sum(ns.hourly_usd for ns in self.live.values())

    def is_spot(self, name: str) -> bool:
        ns = self.nodes.get(name)
        return ns is not None and ns.node.capacity_type is CapacityType.SPOT
