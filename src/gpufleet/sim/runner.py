"""Build and run a simulation (what ``gpufleet simulate`` calls).

Traces are read by :func:`gpufleet.io.traces.load_trace` (``openb[:variant]``, ``philly:<path>``,
``synthetic[:seed]``, a ``.jsonl``/``.csv`` path); this module does no I/O. The cluster comes from
``--cluster`` YAML, else from the trace (openb and JSONL carry nodes), else a default sized for the
trace.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.model.node import CapacityType, Node, NodePool
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.framework import WorkloadClass
from gpufleet.scheduling.profile import Profile
from gpufleet.sim.clusterspec import ClusterSpec, NodeGroup, PoolSpec
from gpufleet.sim.engine import SimOptions, Simulation
from gpufleet.sim.results import SimResult
from gpufleet.sim.traces.base import Trace


def default_cluster(trace: Trace) -> ClusterSpec:
    """A cluster sized for the trace: on-demand V100 nodes for the average load, and autoscaled
    spot and on-demand pools for the peaks."""
    busy = sum(milli_gpus(tj.spec.total_gpu_milli) * (tj.spec.duration_s or 3600) for tj in trace.jobs)
    span = max(1.0, trace.jobs[-1].submit_time - trace.jobs[0].submit_time) if trace.jobs else 1.0
    avg_gpus = busy / span
    static = max(1, math.ceil(avg_gpus * 0.7 / 8))
    burst = max(2, math.ceil(avg_gpus * 1.5 / 8))
    return ClusterSpec(
        nodes=[
            NodeGroup(
                name="od-v100", count=static, pool="od-v100", gpu_model="V100-16GB", gpus=8, cpu=64, memory_gib=512
            )
        ],
        pools=[
            PoolSpec(
                name="spot-v100",
                gpu_model="V100-16GB",
                gpus=8,
                cpu=64,
                memory_gib=512,
                capacity_type=CapacityType.SPOT,
                max_nodes=burst,
            ),
            PoolSpec(
                name="burst-v100",
                gpu_model="V100-16GB",
                gpus=8,
                cpu=64,
                memory_gib=512,
                capacity_type=CapacityType.ON_DEMAND,
                max_nodes=burst,
            ),
        ],
    )


def elastic_pools(nodes: list[Node], spot_share: float = 0.0) -> list[NodePool]:
    """The trace's nodes as autoscaled pools that start empty: one pool per node shape, up to as
    many nodes as the trace has of that shape (what an elastic cloud cluster of the same hardware
    would look like). With ``spot_share`` > 0, a spot pool per shape takes that share of the nodes."""
    shapes: dict[tuple[str, int, int, int], int] = {}
    for n in nodes:
        key = (n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib)
        shapes[key] = shapes.get(key, 0) + 1
    pools = []
    for i, ((model, gpus, cpu, mem), count) in enumerate(sorted(shapes.items())):
        name = f"{(model or 'cpu').lower()}-{gpus}g-{i}"
        spot = round(count * spot_share)
        if count - spot:
            pools.append(
                NodePool(
                    name,
                    model,
                    gpus,
                    cpu,
                    mem,
                    CapacityType.ON_DEMAND,
                    max_nodes=count - spot,
                    provisioning_delay_s=120.0,
                )
            )
        if spot:
            pools.append(
                NodePool(
                    name + "-spot", model, gpus, cpu, mem, CapacityType.SPOT, max_nodes=spot, provisioning_delay_s=120.0
                )
            )
    return pools


def workload_of(trace: Trace) -> list[WorkloadClass]:
    """The target workload (pod kinds and their shares) FGD and friends score against."""
    counts: dict[tuple[int, int, int, int, frozenset[str]], int] = {}
    for tj in trace.jobs:
        s = tj.spec
        key = (s.cpu_milli, s.memory_mib, s.gpu.count, s.gpu.milli, s.gpu_types)
        counts[key] = counts.get(key, 0) + s.gang_size
    total = sum(counts.values()) or 1
    return [WorkloadClass(c, m, n, g, t, k / total) for (c, m, n, g, t), k in counts.items()]


def run_simulation(
    trace: Trace,
    profile: Profile,
    *,
    cluster: ClusterSpec | None = None,
    options: SimOptions | None = None,
    catalog: PriceCatalog | None = None,
    name: str | None = None,
    elastic: bool = False,
) -> SimResult:
    catalog = catalog or PriceCatalog.load()
    if cluster is not None:
        nodes, pools = cluster.build()
    elif elastic and trace.nodes:
        nodes, pools = [], elastic_pools(trace.nodes)
    elif trace.nodes or trace.pools:
        nodes, pools = list(trace.nodes), list(trace.pools)
    else:
        nodes, pools = default_cluster(trace).build()
    if not profile.autoscaler.enabled:
        # without an autoscaler, pools only contribute their initial nodes
        pools = [replace(p, max_nodes=0) if p.initial_nodes == 0 and p.min_nodes == 0 else p for p in pools]
    scheduler = profile.build(workload_of(trace), seed=(options or SimOptions()).seed)

    def pricer(node: Node) -> float:
        return catalog.node_hour_usd(node)

    sim = Simulation(
        trace,
        scheduler,
        pricer,
        nodes=nodes,
        pools=[p for p in pools if _usable(p)],
        options=options or SimOptions(),
        name=name or trace.name,
    )
    result = sim.run()
    result.config.update(
        {
            "trace": trace.name,
            "jobs": len(trace.jobs),
            "profile": profile.model_dump(mode="json"),
            "static_nodes": len(nodes),
            "pools": [p.name for p in pools],
            "price_catalog": catalog.provenance.path if hasattr(catalog, "provenance") else "",
        }
    )
    return result


def _usable(p: NodePool) -> bool:
    return p.max_nodes > 0 or p.initial_nodes > 0 or p.min_nodes > 0
