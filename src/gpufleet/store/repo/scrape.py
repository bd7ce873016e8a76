"""What ``/metrics`` reads from the store at scrape time: aggregate queries, one per family group."""

# Every function takes the session and never commits (like the rest of :mod:`gpufleet.store.repo`).
# They are cheap by design: ``GROUP BY`` counts over jobs, runs and events, the open runs, the node
# rows and the latest telemetry sample per GPU; the money figures go through
# :func:`gpufleet.cost.spend.spend_report` on a ledger from :func:`load_ledger` or
# ``load_ledger(..., by_pod=True)`` (the caller caches them for a few seconds).
#
# Pods. A run of a job is a *pod* in the metrics and in the OpenCost allocation API:
# ``<job_id>-r<run>`` on the server's own GPUs (a node labelled ``gpufleet.io/backend=local``);
# on a Kubernetes cluster the name of the ``batch/v1`` Job the run created (``gf-<job_id>-r<run>``,
# :func:`gpufleet.k8s.adapter.objects.job_name`), whose pods are ``<that>-<suffix>`` — the
# store does not record the pods' generated suffixes.

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from gpufleet.k8s.vocabulary import LABEL_POOL, LABEL_PROVISIONED
from gpufleet.store.convert import gpu_facts_from_json, pod_share_units
from gpufleet.store.models import GpuSampleRow, JobEventRow, JobRow, NodeIntervalRow, NodeRow, RunRow
from gpufleet.store.repo.pods import is_local, pod_name

WAITING_STATES = ("PENDING", "PREEMPTED")


# -- the ledger's start ---------------------------------------------------------


def ledger_start(s: Session) -> float | None:
    """When the store's ledger starts: the first node interval (None: no node ever recorded)."""
    value = s.scalar(select(func.min(NodeIntervalRow.start)))
    return None if value is None else float(value)


# -- running pods ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenPod:
    """What one open (started) run holds on one node now, with that node's current price and shape."""

    job_id: str
    run: int
    pod: str
    team: str
    project: str
    namespace: str
    priority_class: str
    node: str
    gpu_model: str
    capacity_type: str
    gpu_share_units: int  # 1/7000 GPU, all its pods on this node
    cpu_milli: int
    memory_mib: int
    gpus: tuple[int, ...]  # GPU indices it holds on the node
    node_hourly_usd: float
    node_gpu_count: int
    node_cpu_milli: int
    node_memory_mib: int
    started_at: float


def open_pods(s: Session) -> list[OpenPod]:
    """Every started, not ended run, one entry per node of its placement (pods on one node summed),
    with the node's current row (a run on a node the store no longer has is left out)."""
    nodes = {n.name: n for n in s.scalars(select(NodeRow))}
    q = (
        select(RunRow, JobRow)
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.ended_at.is_(None), RunRow.started_at.is_not(None))
        .order_by(RunRow.job_id, RunRow.run)
    )
    out: list[OpenPod] = []
    for run, job in s.execute(q):
        assert run.started_at is not None
        per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in run.placement or [{"node": run.node}]:
            per_node[str(p.get("node", run.node))].append(p)
        for node_name, pods in per_node.items():
            node = nodes.get(node_name)
            if node is None:
                continue
            gpus = sorted({int(g) for p in pods for g in (p.get("gpus") or ())})
            replicas = gpu_facts_from_json(node.gpu_facts).replicas
            out.append(
                OpenPod(
                    job_id=job.id,
                    run=run.run,
                    pod=pod_name(job.id, run.run, job.pods, local=is_local(node.labels)),
                    team=job.team,
                    project=job.project,
                    namespace=job.namespace,
                    priority_class=job.priority_class or "normal",
                    node=node_name,
                    gpu_model=node.gpu_model,
                    capacity_type=node.capacity_type,
                    gpu_share_units=pod_share_units(job, node.gpu_model, replicas) * len(pods),
                    cpu_milli=job.cpu_milli * len(pods),
                    memory_mib=job.memory_mib * len(pods),
                    gpus=tuple(gpus),
                    node_hourly_usd=node.hourly_price_usd,
                    node_gpu_count=node.gpu_count,
                    node_cpu_milli=node.cpu_milli,
                    node_memory_mib=node.memory_mib,
                    started_at=run.started_at,
                )
            )
    return out


def live_nodes(s: Session) -> list[NodeRow]:
    """The nodes that are not removed, by name."""
    return list(s.scalars(select(NodeRow).where(NodeRow.state != "removed").order_by(NodeRow.name)))


# -- the queue and the scheduler's counters -------------------------------------------------------


def waiting_teams(s: Session) -> dict[str, str]:
    """Job id → team of every job waiting (PENDING, or PREEMPTED on its way back to the queue)."""
    q = select(JobRow.id, JobRow.team).where(JobRow.state.in_(WAITING_STATES))
    return {str(i): str(t) for i, t in s.execute(q)}


def queue_wait_histogram(s: Session, buckets: Sequence[float]) -> list[tuple[str, list[int], int, float]]:
    """Submit → first start of every job that has started, by team: ``(team, cumulative counts per
    bucket upper bound, count, sum of seconds)`` — one ``GROUP BY`` with a ``CASE`` per bucket."""
    wait = case((JobRow.started_at >= JobRow.submitted_at, JobRow.started_at - JobRow.submitted_at), else_=0.0)
    cols = [func.sum(case((wait <= b, 1), else_=0)) for b in buckets]
    q = (
        select(JobRow.team, func.count(), func.coalesce(func.sum(wait), 0.0), *cols)
        .where(JobRow.started_at.is_not(None))
        .group_by(JobRow.team)
        .order_by(JobRow.team)
    )
    out = []
    for row in s.execute(q):
        team, n, total, *counts = row
        out.append((str(team), [int(c or 0) for c in counts], int(n), float(total or 0.0)))
    return out


def admissions_by_team(s: Session) -> dict[str, int]:
    """How many times each team's jobs were admitted (``→ ADMITTED`` transitions: a requeued job
    admitted again counts again)."""
    q = (
        select(JobRow.team, func.count())
        .select_from(JobEventRow)
        .join(JobRow, JobRow.id == JobEventRow.job_id)
        .where(JobEventRow.new == "ADMITTED")
        .group_by(JobRow.team)
    )
    return {str(t): int(n) for t, n in s.execute(q)}


# Why a run ended and its job went back to the queue (the world loop's rules, loop/world.py):
# preempted by the scheduler (its stop reason says why), or lost with its node — spot capacity
# taken back, or any other loss (a node removed, a restart that found the run gone).
REQUEUE_REASONS = ("priority", "quota_reclaim", "spot_interruption", "lost")


def requeues_by_team(s: Session) -> list[tuple[str, str, int]]:
    """``(team, reason, runs)`` of the runs that ended for a preemption or were lost (reasons:
    :data:`REQUEUE_REASONS`): one ``GROUP BY`` over the ended runs."""
    reason = case(
        (and_(RunRow.outcome == "lost", RunRow.capacity_type == "spot"), "spot_interruption"),
        (RunRow.stop_requested.like("preempt: quota%"), "quota_reclaim"),
        (RunRow.stop_requested.like("preempt:%"), "priority"),
        else_="lost",
    )
    preempted = and_(RunRow.stop_requested.like("preempt:%"), RunRow.outcome.in_(("stopped", "failed", "lost")))
    q = (
        select(JobRow.team, reason, func.count())
        .select_from(RunRow)
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.ended_at.is_not(None), or_(preempted, RunRow.outcome == "lost"))
        .group_by(JobRow.team, reason)
    )
    return [(str(t), str(r), int(n)) for t, r, n in s.execute(q)]


@dataclass(frozen=True, slots=True)
class StoppedRun:
    """A run counted by :func:`requeues_by_team`, with what its preemption waste is computed from
    (:mod:`gpufleet.cost.waste`)."""

    job_id: str
    team: str
    outcome: str
    stop_requested: str | None
    capacity_type: str
    ran_s: float  # ended - started (0 when it never started)
    checkpoint_interval_s: float | None
    placement: list[Any]


def stopped_runs(s: Session) -> list[StoppedRun]:
    """The runs that ended for a preemption or were lost (the rows :func:`requeues_by_team`
    counts), one row each: few by design (a scheduler that stops many runs is what it shows)."""
    preempted = and_(RunRow.stop_requested.like("preempt:%"), RunRow.outcome.in_(("stopped", "failed", "lost")))
    q = (
        select(
            RunRow.job_id,
            JobRow.team,
            RunRow.outcome,
            RunRow.stop_requested,
            RunRow.capacity_type,
            RunRow.started_at,
            RunRow.ended_at,
            JobRow.checkpoint_interval_s,
            RunRow.placement,
        )
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.ended_at.is_not(None), or_(preempted, RunRow.outcome == "lost"))
    )
    return [
        StoppedRun(
            str(job_id),
            str(team),
            str(outcome or ""),
            stop,
            str(capacity or ""),
            max(0.0, float(ended) - float(started)) if started is not None and ended is not None else 0.0,
            float(interval) if interval is not None else None,
            list(placement or []),
        )
        for job_id, team, outcome, stop, capacity, started, ended, interval, placement in s.execute(q)
    ]


def autoscaled_nodes(s: Session) -> list[tuple[str, str, int]]:
    """``(pool, action, nodes)``: nodes the autoscaler provisioned (label ``gpufleet.io/provisioned``)
    — ``scale_up`` for each one recorded, ``scale_down`` for each one since removed."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for pool, labels, state in s.execute(select(NodeRow.pool, NodeRow.labels, NodeRow.state)):
        labels = labels or {}
        if str(labels.get(LABEL_PROVISIONED, "")).lower() != "true":
            continue
        name = str(labels.get(LABEL_POOL) or pool)
        counts[(name, "scale_up")] += 1
        if state == "removed":
            counts[(name, "scale_down")] += 1
    return [(p, a, n) for (p, a), n in sorted(counts.items())]


# -- GPU telemetry ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuReading:
    """The latest stored sample of one GPU of a local node (DCGM exporter's view of it)."""

    node: str
    gpu_index: int
    gpu_model: str
    time: float
    utilization_pct: float | None
    memory_used_mib: float
    memory_total_mib: float | None
    uuid: str = ""  # "" for samples stored before migration 0010
    temperature_c: float | None = None  # None: not measured
    power_w: float | None = None


def latest_gpu_samples(s: Session, since: float) -> list[GpuReading]:
    """The latest whole-GPU sample (``job_id`` NULL) of each GPU of a local node, taken at or after
    ``since`` (older ones are stale: that GPU is left out)."""
    latest = (
        select(GpuSampleRow.node, GpuSampleRow.gpu_index, func.max(GpuSampleRow.time).label("t"))
        .where(GpuSampleRow.job_id.is_(None), GpuSampleRow.time >= since)
        .group_by(GpuSampleRow.node, GpuSampleRow.gpu_index)
        .subquery()
    )
    q = (
        select(GpuSampleRow, NodeRow.gpu_model, NodeRow.labels)
        .join(
            latest,
            and_(
                GpuSampleRow.node == latest.c.node,
                GpuSampleRow.gpu_index == latest.c.gpu_index,
                GpuSampleRow.time == latest.c.t,
            ),
        )
        .join(NodeRow, NodeRow.name == GpuSampleRow.node)
        .where(GpuSampleRow.job_id.is_(None))
        .order_by(GpuSampleRow.node, GpuSampleRow.gpu_index, GpuSampleRow.id)
    )
    out: dict[tuple[str, int], GpuReading] = {}
    for row, model, labels in s.execute(q):
        if not is_local(labels):
            continue  # a cluster's GPUs: the DCGM exporter there publishes them itself
        out[(row.node, row.gpu_index)] = GpuReading(
            node=row.node,
            gpu_index=row.gpu_index,
            gpu_model=model,
            time=row.time,
            utilization_pct=row.utilization_pct,
            memory_used_mib=row.memory_used_mib,
            memory_total_mib=row.memory_total_mib,
            uuid=row.uuid or "",
            temperature_c=row.temperature_c,
            power_w=row.power_w,
        )
    return [out[k] for k in sorted(out)]
