"""``/v1/nodes``: the inventory, with what running jobs hold on each node."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter

from gpufleet.api.auth import Principal
from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.model.gpu import MILLI, gpu_model
from gpufleet.model.job import JobState
from gpufleet.model.share import milli_gpus
from gpufleet.store import repo
from gpufleet.wire import GpuAllocOut, GpuShareOut, NodeOut

router = APIRouter(prefix="/v1", tags=["nodes"])

_ALL_STATES = tuple(s.value for s in JobState)


def _mig_profile(model: str, mask: int, milli: int) -> str | None:
    """The MIG profile a slice's memory mask denotes on ``model`` (``milli`` tells apart profiles of
    equal memory); None when it matches none."""
    found = [p for p in gpu_model(model).mig_profiles if mask in p.masks()]
    return next((p.name for p in found if p.milli == milli), found[0].name if found else None)


def _gpu_map(gpu_count: int, model: str, shares: dict[int, list[GpuShareOut]]) -> list[GpuAllocOut]:
    """Each GPU of a node (and any index a placement names beyond the count) with its shares."""
    out = []
    for i in sorted(set(range(gpu_count)) | set(shares)):
        held = shares.get(i, [])
        named = [
            s.model_copy(update={"mig": _mig_profile(model, s.mig_mask, s.milli)}) if s.mig_mask else s for s in held
        ]
        out.append(GpuAllocOut(index=i, allocated_milli=sum(s.milli for s in held), shares=named))
    return out


@router.get("/nodes", response_model=list[NodeOut], responses=AUTHED, summary="List nodes")
def list_nodes(ctx: Ctx, who: Caller) -> list[NodeOut]:
    """Every node that is not removed (ready or cordoned), with the GPU-equivalents and the number
    of jobs running on it now, and per GPU the jobs holding it — whole, a fraction or a MIG slice
    (three queries, whatever the cluster size). Another team's job is shown without its id or
    team to a token other than admin."""
    with ctx.database.session(readonly=True) as s:
        nodes = repo.list_nodes(s)
        runs = repo.open_runs(s)
        teams = {j.id: j.team for j in repo.jobs_by_id(s, {r.job_id for r in runs}, states=_ALL_STATES).values()}
        held: dict[str, float] = defaultdict(float)
        jobs: dict[str, set[str]] = defaultdict(set)
        per_gpu: dict[str, dict[int, list[GpuShareOut]]] = defaultdict(lambda: defaultdict(list))
        for run in runs:
            share = _share(who, run.job_id, teams.get(run.job_id))
            for pod in run.placement or ():
                node = str(pod.get("node", run.node))
                milli = int(pod.get("milli", MILLI))
                held[node] += milli_gpus(len(pod.get("gpus") or ()) * float(milli))
                jobs[node].add(run.job_id)
                for g in pod.get("gpus") or ():
                    mask = int(pod.get("mig_mask", 0) or 0)
                    per_gpu[node][int(g)].append(share.model_copy(update={"milli": milli, "mig_mask": mask}))
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
                gpus=_gpu_map(n.gpu_count, n.gpu_model, per_gpu.get(n.name, {})),
            )
            for n in nodes
        ]


def _share(who: Principal, job_id: str, team: str | None) -> GpuShareOut:
    """A share of ``job_id``, named only where ``who`` may see the job's team."""
    visible = team is not None and who.sees_team(team)
    return GpuShareOut(job_id=job_id if visible else None, team=team if visible else None, milli=MILLI)
