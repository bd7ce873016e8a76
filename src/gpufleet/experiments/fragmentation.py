"""The FGD paper's fragmentation experiment (Weng et al., USENIX ATC 2023, §6 / Fig. 9).

Method, as the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator) runs it:

1. the cluster is the openb GPU-node list, every node empty and GPU-sharing;
2. the target workload of fragmentation-aware policies is the trace's *typical pods*: pods grouped
   by (CPU, per-GPU milli, GPU count, GPU-type constraint), most popular first, until 95% of pods are
   covered, popularity renormalized (CPU-only pods included);
3. for seed ``s``, pods are sorted by name and shuffled; creation/deletion times are ignored (no
   departures); the workload is then inflated to ``inflation`` × the cluster's GPU capacity by
   appending clones of uniformly random trace pods, stopping at the first clone that would pass
   the target (the reference compares the clone's *per-GPU* milli, a quirk kept here);
4. pods are placed one by one with :func:`~gpufleet.scheduling.placement.base.place_one`; ties
   between nodes go to the node first in a random node order drawn once per seed (the reference
   prefixes node names with a random permutation and its patched kube-scheduler picks the smallest
   name among the best); a pod that fits nowhere is dropped;
5. after every pod: arrived GPU request (milli, dropped pods included) and allocated milli-GPU.
   The per-seed curve is indexed by arrived request in % of capacity, 0..130, exactly as the
   reference's analysis: bucket = round(arrived %), value = mean allocation % of the pods in the
   bucket (neighbouring buckets when empty). Unallocated = 100 − allocation. Fragmentation (amount
   in % of capacity, ratio in % of idle GPUs, against the typical pods) is measured when a pod
   opens a new bucket, not after every pod (cost).

Pure: no clock, no printing, no files other than the inputs; results are dataclasses.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.errors import InputError
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import GpuRequest
from gpufleet.scheduling import placement as _placement  # noqa: F401  (registers the policies)
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, ScorePlugin, WorkloadClass
from gpufleet.scheduling.placement.base import commit, place_one
from gpufleet.scheduling.placement.fgd import FragModel, _Stats
from gpufleet.scheduling.snapshot import ClusterSnapshot, PodRequest
from gpufleet.sim.traces.openb import OpenbNodes, OpenbPods

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ARRIVED_PCT = np.arange(0, 131)  # the curves' index: arrived GPU request, % of capacity
SEEDS = tuple(range(42, 52))
POPULARITY_THRESHOLD_PCT = 95
DEFAULT_CPU_MILLI = 100  # kube-scheduler's non-zero default CPU request (GetNonzeroRequests)

# Our policy names → the published ``sc_policy`` names.
PUBLISHED_NAMES = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}


# -- workload ---------------------------------------------------------------------------------------
def typical_pods(
    pods: OpenbPods, *, threshold_pct: float = POPULARITY_THRESHOLD_PCT, include_cpu_pods: bool = True
) -> list[WorkloadClass]:
    """The trace's typical pods (the FGD target workload), most popular first, weights sum to 1."""
    counts: dict[tuple[int, int, int, str], int] = {}
    memory: dict[tuple[int, int, int, str], list[int]] = {}
    types: dict[tuple[int, int, int, str], tuple[str, ...]] = {}
    for i in range(len(pods)):
        n = int(pods.num_gpu[i])
        if n == 0 and not include_cpu_pods:
            continue
        cpu = int(pods.cpu_milli[i]) or DEFAULT_CPU_MILLI
        key = (cpu, int(pods.gpu_milli[i]), n, pods.gpu_spec_raw[i])
        counts[key] = counts.get(key, 0) + 1
        memory.setdefault(key, []).append(int(pods.memory_mib[i]))
        types[key] = pods.gpu_spec[i]
    total = sum(counts.values())
    if total == 0:
        return []
    # Most popular first; equal counts: the reference's reverse order of (cpu, milli, count, type).
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    cum = 0
    for key, cnt in ranked:
        if cum >= threshold_pct * total / 100.0:
            break
        chosen.append((key, cnt))
        cum += cnt
    return [
        WorkloadClass(
            cpu_milli=key[0],
            memory_mib=int(np.median(memory[key])),
            gpu_count=key[2],
            gpu_milli=key[1],
            gpu_types=frozenset(types[key]),
            weight=cnt / cum,
        )
        for key, cnt in chosen
    ]


def arrival_order(pods: OpenbPods, total_gpus: int, seed: int, inflation: float) -> IntArray:
    """Pod indices in arrival order: shuffled trace, then clones up to ``inflation`` × capacity."""
    rng = np.random.default_rng(seed)
    by_name = np.array(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
    order = by_name[rng.permutation(len(by_name))]
    per_gpu = pods.gpu_milli
    total_milli = pods.total_gpu_milli
    target = inflation * total_gpus * MILLI
    requested = int(total_milli.sum())
    if inflation <= 0 or len(pods) == 0:
        return order
    if requested > target:  # tune down: drop random pods until under the target
        keep = list(order)
        while requested > target and keep:
            j = int(rng.integers(len(keep)))
            requested -= int(total_milli[keep.pop(j)])
        return np.array(keep, dtype=np.int64)
    clones: list[int] = []
    while True:
        idx = int(by_name[int(rng.integers(len(by_name)))])
        if requested + int(per_gpu[idx]) > target:
            break
        requested += int(total_milli[idx])
        clones.append(idx)
    return np.concatenate([order, np.array(clones, dtype=np.int64)])


# -- one run ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SeedRun:
    """One (trace, policy, seed) run. Curves are indexed by :data:`ARRIVED_PCT` (NaN: no data)."""

    trace: str
    policy: str
    seed: int
    total_gpus: int
    pods: int  # arrived pods (trace + clones)
    failed: int  # pods that fit nowhere
    allocation_pct: FloatArray
    frag_amount_pct: FloatArray
    frag_ratio_pct: FloatArray

    @property
    def unallocated_pct(self) -> FloatArray:
        result: FloatArray = 100.0 - self.allocation_pct
        return result


@dataclass(frozen=True, slots=True)
class Cluster:
    """The experiment's inputs for one trace, precomputed once per process."""

    trace: str
    nodes: OpenbNodes
    pods: OpenbPods
    workload: list[WorkloadClass]


def build_snapshot(nodes: OpenbNodes) -> ClusterSnapshot:
    return ClusterSnapshot.from_nodes(nodes.to_nodes())


def pod_requests(snap: ClusterSnapshot, pods: OpenbPods) -> tuple[list[PodRequest], IntArray]:
    """One :class:`PodRequest` per distinct pod shape and each pod's shape index."""
    shapes: dict[tuple[int, int, int, int, tuple[str, ...]], int] = {}
    reqs: list[PodRequest] = []
    index = np.zeros(len(pods), dtype=np.int64)
    for i in range(len(pods)):
        key = (
            int(pods.cpu_milli[i]),
            int(pods.memory_mib[i]),
            int(pods.num_gpu[i]),
            int(pods.gpu_milli[i]),
            pods.gpu_spec[i],
        )
        k = shapes.get(key)
        if k is None:
            k = shapes[key] = len(reqs)
            n, m, allowed = key[2], key[3], set(key[4])
            type_ok = np.array([not allowed or t in allowed for t in snap.gpu_types] or [not allowed], dtype=np.bool_)
            reqs.append(
                PodRequest(
                    cpu_milli=key[0],
                    memory_mib=key[1],
                    gpu=GpuRequest(count=n, milli=m) if n > 0 else GpuRequest(),
                    type_ok=type_ok,
                )
            )
        index[i] = k
    return reqs, index


def cluster_fragmentation(snap: ClusterSnapshot, model: FragModel) -> tuple[float, float]:
    """(fragmentation milli-GPU, idle milli-GPU) of the whole cluster against ``model``."""
    n = snap.n
    free = snap.gpu_free[:n]
    cnt, small = model.level_stats(free)
    total = free.sum(axis=1)
    st = _Stats(cnt, small, total, snap.cpu_free[:n], snap.gpu_type[:n])
    return float(model.frag(st, model.access(snap)).sum()), float(total.sum())


def discretize(arrived_pct: FloatArray, values: FloatArray) -> FloatArray:
    """The reference analysis: value at k = mean over pods whose round(arrived %) == k (else k±1)."""
    buckets = np.round(arrived_pct)  # numpy rounds half to even, as Python's round does
    out = np.full(len(ARRIVED_PCT), np.nan)
    for k in ARRIVED_PCT:
        sel = values[buckets == k]
        if len(sel) == 0:
            sel = values[(buckets >= k - 1) & (buckets <= k + 1)]
        if len(sel):
            out[k] = round(float(sel.mean()), 2)
    return out


def make_policy(policy: str, workload: Sequence[WorkloadClass], seed: int) -> ScorePlugin:
    return PLACEMENT.get(policy)(PolicyContext(workload=list(workload), seed=seed))


def run_seed(cluster: Cluster, policy: str, seed: int, *, inflation: float = 1.3) -> SeedRun:
    """Run the experiment for one policy and one seed."""
    plugin = make_policy(policy, cluster.workload, seed)
    snap = build_snapshot(cluster.nodes)
    reqs, shape = pod_requests(snap, cluster.pods)
    total_milli = cluster.pods.total_gpu_milli
    order = arrival_order(cluster.pods, cluster.nodes.total_gpus, seed, inflation)
    capacity = cluster.nodes.total_gpus * MILLI
    tie_rank = np.random.default_rng([seed, 1]).permutation(snap.n).astype(np.int64)
    model = FragModel(cluster.workload)

    arrived = np.zeros(len(order), dtype=np.int64)
    used = np.zeros(len(order), dtype=np.int64)
    frag_at = np.full(len(order), np.nan)
    ratio_at = np.full(len(order), np.nan)
    acc_arrived = acc_used = failed = 0
    last_bucket = -1
    for k, i in enumerate(order.tolist()):
        acc_arrived += int(total_milli[i])
        req = reqs[shape[i]]
        a = place_one(snap, plugin, req, tie_rank=tie_rank)
        if a is None:
            failed += 1
        else:
            commit(snap, plugin, req, a)
            acc_used += a.milli * len(a.gpus)
        arrived[k], used[k] = acc_arrived, acc_used
        bucket = int(np.round(100.0 * acc_arrived / capacity))
        if bucket != last_bucket:
            last_bucket = bucket
            frag, idle = cluster_fragmentation(snap, model)
            frag_at[k] = 100.0 * frag / capacity
            ratio_at[k] = 100.0 * frag / idle if idle > 0 else 0.0
    arrived_pct = 100.0 * arrived / capacity
    alloc_pct = np.round(100.0 * used / capacity, 2)
    has_frag = np.isfinite(frag_at)
    return SeedRun(
        trace=cluster.trace,
        policy=policy,
        seed=seed,
        total_gpus=cluster.nodes.total_gpus,
        pods=len(order),
        failed=failed,
        allocation_pct=discretize(arrived_pct, alloc_pct),
        frag_amount_pct=discretize(arrived_pct[has_frag], frag_at[has_frag]),
        frag_ratio_pct=discretize(arrived_pct[has_frag], ratio_at[has_frag]),
    )


# -- many runs ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PolicyResult:
    policy: str
    runs: tuple[SeedRun, ...]
    published_unallocated: FloatArray | None = None  # [seeds, 131] published per-seed curves

    @property
    def median_allocation_pct(self) -> FloatArray:
        result: FloatArray = np.nanmedian(np.stack([r.allocation_pct for r in self.runs]), axis=0)
        return result

    @property
    def median_unallocated_pct(self) -> FloatArray:
        result: FloatArray = 100.0 - self.median_allocation_pct
        return result

    def unallocated_at(self, arrived_pct: int = 100) -> float:
        return float(self.median_unallocated_pct[arrived_pct])

    def published_unallocated_at(self, arrived_pct: int = 100) -> float | None:
        if self.published_unallocated is None:
            return None
        return float(np.nanmedian(self.published_unallocated[:, arrived_pct]))


@dataclass(frozen=True, slots=True)
class TraceResult:
    trace: str
    total_gpus: int
    seeds: tuple[int, ...]
    policies: dict[str, PolicyResult] = field(default_factory=dict)


def make_cluster(trace: str, nodes: OpenbNodes, pods: OpenbPods) -> Cluster:
    """A trace's pods on a node list (:func:`gpufleet.io.fragmentation.load_cluster` reads them)."""
    return Cluster(trace=trace, nodes=nodes, pods=pods, workload=typical_pods(pods))


def parse_published(text: str, trace: str, *, source: str = "analysis_allo_discrete.csv") -> dict[str, FloatArray]:
    """Published per-seed unallocated curves (policy → [seeds, 131]) from the text of
    ``analysis_allo_discrete.csv``, for ``trace`` (short or full name)."""
    want = trace if trace.startswith("openb_pod_list_") else f"openb_pod_list_{trace}"
    rows: dict[str, list[FloatArray]] = {}
    reader = csv.reader(text.splitlines())
    header = next(reader, [])
    try:
        first = header.index("0")
    except ValueError:
        raise InputError("no curve columns (0..130) in header", source=source, line=1) from None
    for lineno, row in enumerate(reader, start=2):
        if not row or row[0] != want or row[2] != "1.3":
            continue
        try:
            values = np.array([float(v) if v else np.nan for v in row[first : first + len(ARRIVED_PCT)]])
        except ValueError:
            raise InputError("bad number in curve", source=source, line=lineno) from None
        rows.setdefault(row[1], []).append(100.0 - values)
    names = {v: k for k, v in PUBLISHED_NAMES.items()}
    return {names.get(k, k): np.stack(v) for k, v in rows.items()}


def _run_task(args: tuple[Cluster, str, int, float]) -> SeedRun:
    cluster, policy, seed, inflation = args
    return run_seed(cluster, policy, seed, inflation=inflation)


def run_experiment(
    clusters: Sequence[Cluster],
    policies: Sequence[str],
    seeds: Sequence[int] = SEEDS,
    *,
    inflation: float = 1.3,
    published: Mapping[str, Mapping[str, FloatArray]] | None = None,
    workers: int = 1,
    progress: Callable[[float, float], None] | None = None,
) -> list[TraceResult]:
    """Run every (cluster, policy, seed); ``workers`` > 1 runs them in that many processes.
    ``published``: trace name → the published curves to compare with (:func:`parse_published`).
    :func:`gpufleet.io.fragmentation.run_fragmentation` loads traces and curves by name and path.
    ``progress(runs done, runs)`` is called after each run (e.g. to draw a progress bar)."""
    for p in policies:
        PLACEMENT.get(p)  # fail early on an unknown name
    tasks = [(c, p, s, inflation) for c in clusters for p in policies for s in seeds]

    def collect(results: Iterable[SeedRun]) -> list[SeedRun]:
        done: list[SeedRun] = []
        for run in results:
            done.append(run)
            if progress is not None:
                progress(len(done), len(tasks))
        return done

    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            runs = collect(pool.map(_run_task, tasks, chunksize=1))
    else:
        runs = collect(map(_run_task, tasks))
    out: list[TraceResult] = []
    for c in clusters:
        pub = published.get(c.trace, {}) if published is not None else {}
        result = TraceResult(trace=c.trace, total_gpus=c.nodes.total_gpus, seeds=tuple(seeds))
        for p in policies:
            mine = tuple(r for r in runs if r.trace == c.trace and r.policy == p)
            result.policies[p] = PolicyResult(policy=p, runs=mine, published_unallocated=pub.get(p))
        out.append(result)
    return out
