"""The cluster snapshot: free capacity of every node as numpy arrays.

The scheduling cycle reads and reserves in a snapshot; the controller binds through the backend
and rolls back on failure. What-if changes return an undo function.

Layout (``N`` nodes, ``G`` = max GPUs per node):

- ``gpu_free[N, G]``: free milli-GPU of each GPU (0 for GPU slots a node does not have);
- ``mig_free[N, G]``: free MIG memory-slice mask of each GPU of a MIG-mode node (0xFF = empty);
- ``cpu_free[N]``, ``mem_free[N]``: free CPU milli-cores and memory MiB;
- static per node: GPU type index, GPU count, GPU memory, sharing mode, capacity type,
  $/GPU-hour, pool, and a ``schedulable`` mask (false while provisioning, draining or gone);
  its labels and taints (``node_labels``, ``node_taints``), and ``share_floor``: one replica of a
  node whose GPUs are advertised as replicas (time-slicing, MPS), else 0.

Where a pod may go besides room (static, cached per pod class and snapshot version):

- its job's :class:`~gpufleet.model.constraints.NodeConstraints`: the node's labels and name meet
  its selector and required node affinity, and it tolerates the node's NoSchedule/NoExecute taints;
  a job with none on untainted nodes costs nothing;
- what the NVIDIA device plugin can allocate (it follows ``Node.gpu_facts``): a node whose GPUs are
  replicas (``replicas`` > 1) serves no whole-GPU pod (the device plugin spreads a pod's replicas
  over the GPUs, so ``replicas`` of them are not one GPU), and a fraction there takes exactly one
  replica of one GPU (MPS refuses more; the Kubernetes backend asks one): it reserves
  ``max(milli, share_floor)``, so no more than ``replicas`` pods share a GPU (exactly so while
  ``1000 % replicas < 1000 // replicas``: every R up to 31 and most beyond; past that the kubelet's
  count of replicas is the limit).

Invariant: nothing is ever over-allocated — ``0 <= free <= capacity`` for every resource; the
:meth:`allocate` and :meth:`release` methods check it and raise :class:`SchedulingError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.errors import SchedulingError
from gpufleet.model.constraints import NodeConstraints, Taint, matches, tolerates_all
from gpufleet.model.gpu import MIG_MEMORY_SLICES, MILLI, canonical_gpu_name, gpu_model
from gpufleet.model.job import GpuRequest, JobSpec, PodPlacement
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.model.share import mig_milli, replicas_milli

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

FULL_MIG_MASK = (1 << MIG_MEMORY_SLICES) - 1
SHARING_CODE = {SharingMode.EXCLUSIVE: 0, SharingMode.SHARED: 1, SharingMode.MIG: 2}
CAPACITY_CODE = {CapacityType.ON_DEMAND: 0, CapacityType.SPOT: 1, CapacityType.RESERVED: 2}


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's demand, in the snapshot's units. Built once per job with :meth:`ClusterSnapshot.pod`."""

    cpu_milli: int
    memory_mib: int
    gpu: GpuRequest
    type_ok: BoolArray  # per snapshot GPU-type index: may this pod use that type?
    min_gpu_memory_gib: float = 0.0
    allow_spot: bool = False
    spot_only: bool = False  # narrowed to spot nodes (a budget throttle); implies allow_spot
    constraints: NodeConstraints | None = None  # the job's; None for none (the common case: cheap to hash)

    @property
    def gpu_count(self) -> int:
        return self.gpu.count

    @property
    def milli(self) -> int:
        return self.gpu.milli


@dataclass(frozen=True, slots=True)
class Assignment:
    """A reservation of one pod on one node (what :meth:`ClusterSnapshot.allocate` took)."""

    node: int
    gpus: tuple[int, ...]
    milli: int  # per GPU (for MIG: what the slice takes off the GPU's free milli, see allocate)
    cpu_milli: int
    memory_mib: int
    mig_mask: int = 0  # memory slices taken on gpus[0] (MIG only)
    mig_compute: int = 0  # compute slices taken on gpus[0] (MIG only)


def _mig_free_milli(used_compute_slices: int) -> int:
    """Free milli-GPU of a MIG GPU with that many compute slices in use (of 7)."""
    return MILLI - mig_milli(used_compute_slices)


class ClusterSnapshot:
    def __init__(self, max_gpus: int = 8, capacity: int = 64) -> None:
        self.max_gpus = max_gpus
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.gpu_types: list[str] = []  # type index → canonical model name
        self._type_index: dict[str, int] = {}
        self.pools: list[str] = []
        self._pool_index: dict[str, int] = {}
        self.n = 0
        self._version = 0  # bumped when nodes are added (static masks depend on the node set)
        self._static: dict[tuple[object, ...], tuple[int, BoolArray]] = {}
        self.node_labels: list[dict[str, str]] = []  # per node: its labels (what selectors match)
        self.node_taints: list[tuple[Taint, ...]] = []  # per node: the taints that keep pods off
        self._tainted: list[int] = []  # the nodes with a taint: while none, a job without constraints needs no mask
        self._any_replicas = False  # some node's GPUs are replicas (share_floor > 0 somewhere)
        self._placeable: dict[NodeConstraints | None, tuple[int, BoolArray]] = {}
        self._alloc(capacity)

    # -- construction -------------------------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        g = self.max_gpus

        def grow(a: np.ndarray | None, shape: tuple[int, ...], dtype: type, fill: object = 0) -> np.ndarray:
            new: np.ndarray = np.full(shape, fill, dtype=dtype)
            if a is not None:
                new[: a.shape[0], ...] = a
            return new

        old = getattr(self, "gpu_free", None)
        get = (lambda name: getattr(self, name)) if old is not None else (lambda name: None)
        self.gpu_free = grow(get("gpu_free"), (cap, g), np.int64)
        self.mig_free = grow(get("mig_free"), (cap, g), np.int64)
        self.mig_used = grow(get("mig_used"), (cap, g), np.int64)  # compute slices in use (MIG GPUs)
        self.cpu_free = grow(get("cpu_free"), (cap,), np.int64)
        self.mem_free = grow(get("mem_free"), (cap,), np.int64)
        self.cpu_cap = grow(get("cpu_cap"), (cap,), np.int64)
        self.mem_cap = grow(get("mem_cap"), (cap,), np.int64)
        self.gpu_count = grow(get("gpu_count"), (cap,), np.int64)
        self.gpu_type = grow(get("gpu_type"), (cap,), np.int64, -1)
        self.gpu_mem_gib = grow(get("gpu_mem_gib"), (cap,), np.float64)
        self.sharing = grow(get("sharing"), (cap,), np.int64, 1)
        self.capacity_type = grow(get("capacity_type"), (cap,), np.int64)
        self.gpu_hour_usd = grow(get("gpu_hour_usd"), (cap,), np.float64)
        self.pool = grow(get("pool"), (cap,), np.int64)
        self.schedulable = grow(get("schedulable"), (cap,), np.bool_, False)
        # one replica (milli) of a node whose GPUs are advertised as replicas; 0: whole GPUs or free fractions
        self.share_floor = grow(get("share_floor"), (cap,), np.int64)
        # per-node GPU aggregates, kept up to date by allocate/release (see _refresh)
        self.free_milli = grow(get("free_milli"), (cap,), np.int64)
        self.max_gpu_free = grow(get("max_gpu_free"), (cap,), np.int64)
        self.whole_free = grow(get("whole_free"), (cap,), np.int64)
        self.pods = grow(get("pods"), (cap,), np.int64)  # pods holding (possibly zero) resources here
        self._cap = cap

    def type_index(self, model: str) -> int:
        idx = self._type_index.get(model)
        if idx is None:
            idx = len(self.gpu_types)
            self.gpu_types.append(model)
            self._type_index[model] = idx
        return idx

    def pool_index(self, pool: str) -> int:
        idx = self._pool_index.get(pool)
        if idx is None:
            idx = len(self.pools)
            self.pools.append(pool)
            self._pool_index[pool] = idx
        return idx

    def add_node(self, node: Node, gpu_hour_usd: float = 0.0, schedulable: bool = True) -> int:
        """Append a node (empty) and return its index. Names must be unique."""
        if node.name in self.index:
            raise SchedulingError(f"node '{node.name}' is already in the snapshot")
        if node.gpu_count > self.max_gpus:
            raise SchedulingError(f"node '{node.name}' has {node.gpu_count} GPUs; max is {self.max_gpus}")
        if self.n == self._cap:
            self._alloc(self._cap * 2)
        i = self.n
        self.n += 1
        self.names.append(node.name)
        self.index[node.name] = i
        self.gpu_count[i] = node.gpu_count
        self.gpu_free[i, :] = 0
        self.gpu_free[i, : node.gpu_count] = MILLI
        self.mig_free[i, :] = 0
        self.mig_used[i, :] = 0
        self.pods[i] = 0
        if node.sharing is SharingMode.MIG:
            self.mig_free[i, : node.gpu_count] = FULL_MIG_MASK
        self.cpu_free[i] = self.cpu_cap[i] = node.cpu_milli
        self.mem_free[i] = self.mem_cap[i] = node.memory_mib
        model = canonical_gpu_name(node.gpu_model) or node.gpu_model
        self.gpu_type[i] = self.type_index(model) if node.gpu_count > 0 else -1
        self.gpu_mem_gib[i] = gpu_model(node.gpu_model).memory_gib if node.gpu_model else 0.0
        self.sharing[i] = SHARING_CODE[node.sharing]
        self.capacity_type[i] = CAPACITY_CODE[node.capacity_type]
        self.gpu_hour_usd[i] = gpu_hour_usd
        self.pool[i] = self.pool_index(node.pool)
        self.schedulable[i] = schedulable
        replicas = node.gpu_facts.replicas if node.gpu_count else 1
        self.share_floor[i] = replicas_milli(1, replicas) if replicas > 1 else 0
        self._any_replicas = self._any_replicas or replicas > 1
        self.node_labels.append(node.labels)
        self.node_taints.append(node.taints)
        if node.taints:
            self._tainted.append(i)
        self._refresh(i)
        self._version += 1
        return i

    def relabel(self, name: str, labels: dict[str, str], taints: tuple[Taint, ...]) -> None:
        """A known node's labels or taints changed (on Kubernetes: someone tainted or relabelled the
        Node): later placements follow them; what runs there stays (a NoExecute taint's evictions are
        the cluster's)."""
        i = self.index[name]
        self.node_labels[i] = labels
        self.node_taints[i] = taints
        if taints and i not in self._tainted:
            self._tainted.append(i)
        elif not taints and i in self._tainted:
            self._tainted.remove(i)
        self._version += 1  # the cached masks read them

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], prices: Callable[[Node], float] | None = None) -> ClusterSnapshot:
        nodes = list(nodes)
        max_gpus = max([8, *(n.gpu_count for n in nodes)])
        snap = cls(max_gpus=max_gpus, capacity=max(16, len(nodes)))
        for node in nodes:
            snap.add_node(node, prices(node) if prices else 0.0)
        return snap

    # -- views ----------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Moves whenever a node is added, relabelled or retainted: what was computed from the nodes'
        static facts (masks, feasibility verdicts) is stale once it moved."""
        return self._version

    @property
    def tainted(self) -> tuple[int, ...]:
        """The rows of the nodes with a taint (none, on most clusters: a job needs no mask then)."""
        return tuple(self._tainted)

    def gpu_cap_milli(self) -> IntArray:
        return self.gpu_count[: self.n] * MILLI

    def total_gpus(self) -> int:
        return int(self.gpu_count[: self.n][self.schedulable[: self.n]].sum())

    def allocated_milli(self) -> int:
        live = self.schedulable[: self.n]
        cap = int(self.gpu_count[: self.n][live].sum()) * MILLI
        return cap - int(self.gpu_free[: self.n][live].sum())

    def pod(self, spec: JobSpec, *, on_demand_only: bool = False) -> PodRequest:
        """The per-pod request of a job in this snapshot's type indices."""
        type_ok = np.ones(max(1, len(self.gpu_types)), dtype=np.bool_)
        if spec.gpu_types:
            allowed = {canonical_gpu_name(t) or t for t in spec.gpu_types}
            type_ok = np.array([t in allowed for t in self.gpu_types] or [False], dtype=np.bool_)
        return PodRequest(
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            gpu=spec.gpu,
            type_ok=type_ok,
            min_gpu_memory_gib=spec.min_gpu_memory_gib,
            allow_spot=spec.preemptible and not on_demand_only,
            constraints=spec.constraints or None,
        )

    # -- filtering --------------------------------------------------------------------------------
    def feasible(self, pod: PodRequest) -> BoolArray:
        """Mask of nodes where ``pod`` fits now (vectorized Filter over all nodes).

        The static part (GPU type, GPU memory, sharing mode, spot) is cached per pod class; the
        dynamic part reads the per-node aggregates kept by :meth:`allocate` / :meth:`release`.
        """
        n = self.n
        ok: BoolArray = self._static_mask(pod) & self.schedulable[:n]
        ok &= self.cpu_free[:n] >= pod.cpu_milli
        ok &= self.mem_free[:n] >= pod.memory_mib
        g = pod.gpu
        if g.count == 0:
            return ok
        if g.is_mig:
            if ok.any():
                ok &= self._mig_fits(g.mig_profile or "", ok)
            return ok
        if g.is_fractional:
            if self._any_replicas:  # a replica node: one replica at least (module docstring)
                ok &= self.max_gpu_free[:n] >= np.maximum(self.share_floor[:n], g.milli)
            else:
                ok &= self.max_gpu_free[:n] >= g.milli
        else:
            ok &= self.whole_free[:n] >= g.count
        return ok

    def _static_mask(self, pod: PodRequest) -> BoolArray:
        g = pod.gpu
        kind = 0 if g.count == 0 else 1 if g.is_mig else 2 if g.is_fractional else 3
        key = (
            pod.type_ok.tobytes() if g.count else b"",
            pod.allow_spot,
            pod.spot_only,
            pod.min_gpu_memory_gib,
            kind,
            pod.constraints,
        )
        hit = self._static.get(key)
        if hit is not None and hit[0] == self._version:
            return hit[1]
        n = self.n
        ok = np.ones(n, dtype=np.bool_)
        if pod.spot_only:
            ok &= self.capacity_type[:n] == CAPACITY_CODE[CapacityType.SPOT]
        elif not pod.allow_spot:
            ok &= self.capacity_type[:n] != CAPACITY_CODE[CapacityType.SPOT]
        if kind:
            gt = self.gpu_type[:n]
            type_ok = pod.type_ok
            if len(type_ok) < len(self.gpu_types):  # types added after the pod was built: allowed iff no constraint
                type_ok = np.concatenate([type_ok, np.full(len(self.gpu_types) - len(type_ok), bool(type_ok.all()))])
            ok &= (gt >= 0) & type_ok[np.maximum(gt, 0)]
            if pod.min_gpu_memory_gib > 0:
                ok &= self.gpu_mem_gib[:n] >= pod.min_gpu_memory_gib
            sharing = self.sharing[:n]
            if kind == 1:
                ok &= sharing == SHARING_CODE[SharingMode.MIG]
            elif kind == 2:
                ok &= sharing == SHARING_CODE[SharingMode.SHARED]
            else:
                ok &= sharing != SHARING_CODE[SharingMode.MIG]
                if self._any_replicas:  # the device plugin would spread its replicas over GPUs
                    ok &= self.share_floor[:n] == 0
        if pod.constraints is not None or self._tainted:
            ok &= self.placeable(pod.constraints)
        if len(self._static) > 4096:
            self._static.clear()
        self._static[key] = (self._version, ok)
        return ok

    def placeable(self, constraints: NodeConstraints | None) -> BoolArray:
        """Mask of the nodes whose labels, name and taints let a pod of a job with ``constraints``
        (None: none) run there (:mod:`gpufleet.model.constraints`); cached per snapshot version."""
        hit = self._placeable.get(constraints)
        if hit is not None and hit[0] == self._version:
            return hit[1]
        n = self.n
        ok = np.ones(n, dtype=np.bool_)
        tolerations = constraints.tolerations if constraints is not None else ()
        for i in self._tainted:
            ok[i] = tolerates_all(tolerations, self.node_taints[i])
        if constraints is not None and constraints.selects:
            for i in np.flatnonzero(ok).tolist():
                ok[i] = matches(constraints, self.node_labels[i], self.names[i])
        if len(self._placeable) > 1024:
            self._placeable.clear()
        self._placeable[constraints] = (self._version, ok)
        return ok

    def share_milli(self, i: int, pod: PodRequest) -> int:
        """Milli-GPU a fractional ``pod`` reserves on node ``i``: its own, or one replica of a node
        whose GPUs are replicas when that is more (module docstring)."""
        return max(pod.gpu.milli, int(self.share_floor[i]))

    def widen(self, a: Assignment, pod: PodRequest) -> Assignment | None:
        """A placement policy's choice ``a`` for ``pod``, widened to one replica on a node whose GPUs
        are replicas (its GPU kept when it has the room; else the snapshot's own choice); ``a`` as
        it is anywhere else."""
        if not self._any_replicas or not pod.gpu.is_fractional or a.milli >= self.share_floor[a.node]:
            return a
        keep = a.gpus if a.gpus and self.gpu_free[a.node, a.gpus[0]] >= self.share_milli(a.node, pod) else None
        return self.assignment(a.node, pod, keep)

    def static_ok(self, i: int, pod: PodRequest) -> bool:
        """Could ``pod`` ever run on node ``i`` as it is (type, memory, sharing, spot, schedulable)?"""
        return bool(self.schedulable[i] and self._static_mask(pod)[i])

    def _refresh(self, i: int) -> None:
        """Recompute node ``i``'s GPU aggregates from its row."""
        row = self.gpu_free[i, : int(self.gpu_count[i])].tolist()
        self.free_milli[i] = sum(row)
        self.max_gpu_free[i] = max(row, default=0)
        self.whole_free[i] = row.count(MILLI)

    def fits(self, i: int, pod: PodRequest) -> bool:
        """Scalar Filter: does ``pod`` fit on node ``i`` now? (Same rules as :meth:`feasible`.)"""
        if not self.schedulable[i] or self.cpu_free[i] < pod.cpu_milli or self.mem_free[i] < pod.memory_mib:
            return False
        if pod.spot_only:
            if self.capacity_type[i] != CAPACITY_CODE[CapacityType.SPOT]:
                return False
        elif not pod.allow_spot and self.capacity_type[i] == CAPACITY_CODE[CapacityType.SPOT]:
            return False
        if (pod.constraints is not None or self._tainted) and not self.placeable(pod.constraints)[i]:
            return False
        g = pod.gpu
        if g.count == 0:
            return True
        t = int(self.gpu_type[i])
        if t < 0:
            return False
        if t < len(pod.type_ok):
            if not pod.type_ok[t]:
                return False
        elif not pod.type_ok.all():
            return False
        if pod.min_gpu_memory_gib > 0 and self.gpu_mem_gib[i] < pod.min_gpu_memory_gib:
            return False
        mode = int(self.sharing[i])
        if g.is_mig:
            return mode == SHARING_CODE[SharingMode.MIG] and self.mig_slot(i, g.mig_profile or "") is not None
        if mode == SHARING_CODE[SharingMode.MIG]:
            return False
        free = self.gpu_free[i, : int(self.gpu_count[i])]
        if g.is_fractional:
            return mode == SHARING_CODE[SharingMode.SHARED] and bool((free >= self.share_milli(i, pod)).any())
        if self.share_floor[i]:
            return False  # whole GPUs on a node whose GPUs are replicas (module docstring)
        return int((free >= MILLI).sum()) >= g.count

    def _mig_fits(self, profile: str, candidates: BoolArray) -> BoolArray:
        out = np.zeros(self.n, dtype=np.bool_)
        for i in np.flatnonzero(candidates):
            out[i] = self.mig_slot(int(i), profile) is not None
        return out

    def mig_slot(self, node: int, profile: str) -> tuple[int, int] | None:
        """(gpu, mask) of the first valid MIG placement of ``profile`` on ``node``, else None.

        Prefers the GPU with the fewest free slices that fits (packs slices, keeps empty GPUs), and on
        it the highest valid start, which keeps start 0 free for the large profiles that need it.
        """
        model = gpu_model(self.gpu_types[int(self.gpu_type[node])])
        prof = model.mig_profile(profile)
        if prof is None:
            return None
        best: tuple[int, int, int] | None = None
        for gi in range(int(self.gpu_count[node])):
            free_mask = int(self.mig_free[node, gi])
            for m in reversed(prof.masks()):
                if free_mask & m == m:
                    nfree = bin(free_mask).count("1")
                    if best is None or nfree < best[0]:
                        best = (nfree, gi, m)
                    break
        return None if best is None else (best[1], best[2])

    # -- reserve / release ------------------------------------------------------------------------
    def allocate(self, a: Assignment) -> None:
        """Take ``a`` from the node's free capacity. Raises if it does not fit (never over-allocates)."""
        i = a.node
        if self.cpu_free[i] < a.cpu_milli or self.mem_free[i] < a.memory_mib:
            raise SchedulingError(f"over-allocation of CPU/memory on node {self.names[i]}")
        if a.mig_mask:
            gi = a.gpus[0]
            if int(self.mig_free[i, gi]) & a.mig_mask != a.mig_mask:
                raise SchedulingError(f"MIG slices already taken on GPU {gi} of node {self.names[i]}")
            self.mig_free[i, gi] &= ~a.mig_mask
            self.mig_used[i, gi] += a.mig_compute
            self.gpu_free[i, gi] = _mig_free_milli(int(self.mig_used[i, gi]))
        else:
            for gi in a.gpus:
                if gi >= self.gpu_count[i] or self.gpu_free[i, gi] < a.milli:
                    raise SchedulingError(f"over-allocation of GPU {gi} on node {self.names[i]}")
            for gi in a.gpus:
                self.gpu_free[i, gi] -= a.milli
        self.cpu_free[i] -= a.cpu_milli
        self.mem_free[i] -= a.memory_mib
        self.pods[i] += 1
        if a.gpus:
            self._refresh(i)

    def release(self, a: Assignment) -> None:
        """Give ``a`` back. Raises if that would exceed capacity (a double release)."""
        i = a.node
        if self.cpu_free[i] + a.cpu_milli > self.cpu_cap[i] or self.mem_free[i] + a.memory_mib > self.mem_cap[i]:
            raise SchedulingError(f"double release of CPU/memory on node {self.names[i]}")
        if a.mig_mask:
            gi = a.gpus[0]
            if int(self.mig_free[i, gi]) & a.mig_mask:
                raise SchedulingError(f"double release of MIG slices on GPU {gi} of node {self.names[i]}")
            self.mig_free[i, gi] |= a.mig_mask
            self.mig_used[i, gi] -= a.mig_compute
            self.gpu_free[i, gi] = _mig_free_milli(int(self.mig_used[i, gi]))
        else:
            for gi in a.gpus:
                if self.gpu_free[i, gi] + a.milli > MILLI:
                    raise SchedulingError(f"double release of GPU {gi} on node {self.names[i]}")
            for gi in a.gpus:
                self.gpu_free[i, gi] += a.milli
        if self.pods[i] <= 0:
            raise SchedulingError(f"release on node {self.names[i]}, which holds no pod")
        self.cpu_free[i] += a.cpu_milli
        self.mem_free[i] += a.memory_mib
        self.pods[i] -= 1
        if a.gpus:
            self._refresh(i)

    def assignment(self, node: int, pod: PodRequest, gpus: tuple[int, ...] | None = None) -> Assignment | None:
        """A default assignment of ``pod`` on ``node`` (GPU choice: MIG first slot; fractions best fit;
        whole GPUs the lowest free indices), or None if it does not fit."""
        g = pod.gpu
        mig_mask = mig_compute = 0
        milli = g.milli
        if g.count == 0:
            gpus = ()
        elif g.is_mig:
            slot = self.mig_slot(node, g.mig_profile or "")
            if slot is None:
                return None
            gpus, mig_mask = (slot[0],), slot[1]
            prof = gpu_model(self.gpu_types[int(self.gpu_type[node])]).mig_profile(g.mig_profile or "")
            if prof is None:
                return None
            milli, mig_compute = prof.milli, prof.compute_slices
        else:
            if g.is_fractional:
                milli = self.share_milli(node, pod)
            if gpus is not None:
                return Assignment(node, gpus, milli, pod.cpu_milli, pod.memory_mib)
            free = self.gpu_free[node, : int(self.gpu_count[node])]
            if g.is_fractional:
                fits = np.flatnonzero(free >= milli)
                if len(fits) == 0:
                    return None
                gpus = (int(fits[np.argmin(free[fits])]),)
            else:
                whole = np.flatnonzero(free >= MILLI)
                if len(whole) < g.count:
                    return None
                gpus = tuple(int(x) for x in whole[: g.count])
        return Assignment(node, gpus, milli, pod.cpu_milli, pod.memory_mib, mig_mask, mig_compute)

    def placement_of(self, a: Assignment) -> PodPlacement:
        return PodPlacement(self.names[a.node], a.gpus, a.milli, a.mig_mask)

    def assignment_of(self, p: PodPlacement, cpu_milli: int, memory_mib: int) -> Assignment:
        compute = 0
        if p.mig_mask:
            model = gpu_model(self.gpu_types[int(self.gpu_type[self.index[p.node]])])
            compute = next((m.compute_slices for m in model.mig_profiles if m.milli == p.milli), 0)
        return Assignment(self.index[p.node], p.gpus, p.milli, cpu_milli, memory_mib, p.mig_mask, compute)

    def remove(self, assignments: Iterable[Assignment]) -> Callable[[], None]:
        """What-if: release ``assignments`` and return a function that takes them back."""
        done = list(assignments)
        for a in done:
            self.release(a)

        def restore() -> None:
            for a in reversed(done):
                self.allocate(a)

        return restore
