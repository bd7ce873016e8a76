"""``/v1/nodes``: the inventory, with what running jobs hold on each node."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter

from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.store import repo
from gpufleet.wire import NodeOut

router = APIRouter(prefix="/v1", tags=["nodes"])


@router.get("/nodes", response_model=list[NodeOut], responses=AUTHED, summary="List nodes")
def list_nodes(ctx: Ctx, who: Caller) -> list[NodeOut]:
    """Every node that is not removed (ready or cordoned), with the GPU-equivalents
    and the number of jobs running on it now (two queries, whatever the cluster size)."""
    with ctx.database.session(readonly=True) as s:
        nodes = repo.list_nodes(s)
        runs = repo.open_runs(s)
        held: dict[str, float] = defaultdict(float)
        jobs: dict[str, set[str]] = defaultdict(set)
        for run in runs:
            for pod in run.placement or ():
                node = str(pod.get("node", run.node))
                held[node] += len(pod.get("gpus") or ()) * float(pod.get("milli", 1000)) / 1000.0
                jobs[node].add(run.job_id)
            if not run.placement:
                jobs[run.node].add(run.job_id)
        return [
            NodeOut(
                name=n.name,
                gpu_model=n.gpu_model,
                gpu_count=n.gpu_count,
                cpu_milli=n.cpu_milli,
                memory_mib=n.memory_mib,
                pool=n.pool,
                capacity_type=n.capacity_type,
                sharing=n.sharing,
                hourly_price_usd=n.hourly_price_usd,
                state=n.state,
                allocated_gpus=round(held.get(n.name, 0.0), 3),
                running_jobs=len(jobs.get(n.name, ())),
            )
            for n in nodes
        ]
