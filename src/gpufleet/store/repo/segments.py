"""Persists usage segments (the ledger's usage side) and loads the ledger of a window."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.cost.ledger import Ledger, LedgerError, NodeInterval, UsageSegment
from gpufleet.errors import InputError
from gpufleet.k8s.vocabulary import LABEL_JOB
from gpufleet.model.node import CapacityType
from gpufleet.model.share import requested_replicas, units_fraction
from gpufleet.store.convert import gpu_facts_from_json, pod_share_units
from gpufleet.store.models import JobRow, NodeIntervalRow, NodeRow, RunRow, UsageSegmentRow
from gpufleet.store.repo.pods import is_local, pod_name

log = logging.getLogger(__name__)


def append_segment(
    s: Session,
    *,
    job: JobRow,
    run: int,
    node: NodeRow,
    gpu_share_units: int,
    cpu_milli: int,
    memory_mib: int,
    node_hourly_usd: float,
    capacity_type: str,
    start: float,
    end: float,
) -> UsageSegmentRow:
    """Record what run ``run`` of ``job`` held on ``node`` (shares in 1/7000 GPU). Inserted once:
    a second call for the same (job, run, node) returns the first row unchanged."""
    if end < start or gpu_share_units < 0 or cpu_milli < 0 or memory_mib < 0:
        raise InputError(f"bad usage segment for job {job.id}: [{start}, {end}], share {gpu_share_units}")

    def existing() -> UsageSegmentRow | None:
        return s.scalar(
            select(UsageSegmentRow).where(
                UsageSegmentRow.job_id == job.id, UsageSegmentRow.run == run, UsageSegmentRow.node == node.name
            )
        )

    found = existing()
    if found is not None:
        return found
    row = UsageSegmentRow(
        job_id=job.id,
        run=run,
        team=job.team,
        project=job.project,
        namespace=job.namespace,
        experiment=job.experiment,
        labels=dict(job.labels or {}),
        node=node.name,
        pool=node.pool,
        gpu_model=node.gpu_model,
        capacity_type=str(capacity_type),
        gpu_share_units=gpu_share_units,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_hourly_usd=node_hourly_usd,
        start=start,
        end=end,
        priority_class=job.priority_class,
    )
    try:
        with s.begin_nested():
            s.add(row)
            s.flush()
    except IntegrityError:
        found = existing()
        if found is None:
            raise
        return found
    return row


class _Seg:
    """A usage record to clip into the node's intervals (stored segment or open run)."""

    __slots__ = (
        "cpu_milli",
        "end",
        "experiment",
        "job_id",
        "labels",
        "memory_mib",
        "namespace",
        "node",
        "priority_class",
        "project",
        "share_units",
        "start",
        "team",
    )

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    job_id: str
    team: str
    project: str
    namespace: str
    experiment: str
    labels: dict[str, str]
    node: str
    share_units: int | Callable[[str], int]  # or a function of the node's GPU model (open runs)
    cpu_milli: int
    memory_mib: int
    start: float
    end: float
    priority_class: str


def load_ledger(
    s: Session, start: float, end: float, now: float, *, by_pod: bool = False, open_only: bool = False
) -> Ledger:
    """The ledger of the window ``[start, end]`` as of ``now``: node intervals overlapping it (open
    ones end at ``now``), stored segments overlapping it, and every open run that has started as a
    segment ending at ``now``. Pass it to :func:`gpufleet.cost.ledger.allocate` with the same window.

    Each usage record is clipped to the window and split over its node's intervals, taking the
    pool, model, capacity type and price of each interval (a price change during a run bills each
    part at its own price). A part outside every recorded interval (data from before the node was
    recorded) is skipped with a warning, as is a record that contradicts its node.

    ``by_pod``: each record's ``job_id`` is its pod's name (:func:`gpufleet.store.repo.pods.pod_name`)
    and the job id is kept as the label ``gpufleet.io/job``, so a report by ``job_id`` is a report
    by pod, priced the same way (the metrics and OpenCost's allocation API). ``open_only``: only the
    runs still open (no stored segment)."""
    ledger = Ledger()
    intervals = _node_intervals(s, start, end, now, ledger)
    local: dict[str, bool] = {}
    if by_pod:
        local = {name: is_local(labels) for name, labels in s.execute(select(NodeRow.name, NodeRow.labels))}

    def key(job_id: str, run: int, pods: int, node: str) -> str:
        return pod_name(job_id, run, pods, local=local.get(node, True)) if by_pod else job_id

    def labels_of(labels: Any, job_id: str) -> dict[str, str]:
        out = {str(k): str(v) for k, v in (labels or {}).items()}
        if by_pod:
            out[LABEL_JOB] = job_id
        return out

    records: list[_Seg] = []
    if not open_only:  # stored segments overlapping the window
        seg_q = (
            select(UsageSegmentRow, JobRow.pods)
            .join(JobRow, JobRow.id == UsageSegmentRow.job_id, isouter=True)
            .where(UsageSegmentRow.start < end, UsageSegmentRow.end > start)
            .order_by(UsageSegmentRow.id)
        )
        for sr, pods in s.execute(seg_q):
            records.append(
                _Seg(
                    job_id=key(sr.job_id, sr.run, pods or 1, sr.node),
                    team=sr.team,
                    project=sr.project,
                    namespace=sr.namespace,
                    experiment=sr.experiment,
                    labels=labels_of(sr.labels, sr.job_id),
                    node=sr.node,
                    share_units=sr.gpu_share_units,
                    cpu_milli=sr.cpu_milli,
                    memory_mib=sr.memory_mib,
                    start=sr.start,
                    end=sr.end,
                    priority_class=sr.priority_class or "normal",
                )
            )

    # Open runs, metered from their start to now (one record per node of their placement).
    open_q = (
        select(RunRow, JobRow)
        .join(JobRow, JobRow.id == RunRow.job_id)
        .where(RunRow.ended_at.is_(None), RunRow.started_at.is_not(None), RunRow.started_at < end)
        .order_by(RunRow.job_id, RunRow.run)
    )
    node_replicas: dict[str, int] | None = None  # read once an open run's share depends on its node's
    for run, job in s.execute(open_q).all():
        assert run.started_at is not None
        if now <= run.started_at:
            continue
        if node_replicas is None and requested_replicas(job.labels or {}) is not None:
            node_replicas = {
                name: gpu_facts_from_json(facts).replicas
                for name, facts in s.execute(select(NodeRow.name, NodeRow.gpu_facts))
            }
        per_node: dict[str, int] = defaultdict(int)
        for pod in run.placement or [{"node": run.node}]:
            per_node[str(pod.get("node", run.node))] += 1
        for node_name, n in per_node.items():
            records.append(
                _Seg(
                    job_id=key(job.id, run.run, job.pods, node_name),
                    team=job.team,
                    project=job.project,
                    namespace=job.namespace,
                    experiment=job.experiment,
                    labels=labels_of(job.labels, job.id),
                    node=node_name,
                    share_units=_open_share(job, n, (node_replicas or {}).get(node_name, 1)),
                    cpu_milli=job.cpu_milli * n,
                    memory_mib=job.memory_mib * n,
                    start=run.started_at,
                    end=now,
                    priority_class=job.priority_class or "normal",
                )
            )

    for rec in records:
        _add_clipped(ledger, intervals.get(rec.node, []), rec, start, end)
    return ledger


def _node_intervals(s: Session, start: float, end: float, now: float, ledger: Ledger) -> dict[str, list[NodeInterval]]:
    """The node intervals overlapping the window, added to ``ledger``, by node (open ones end at ``now``)."""
    iv_rows = s.scalars(
        select(NodeIntervalRow)
        .where(NodeIntervalRow.start <= end, or_(NodeIntervalRow.end.is_(None), NodeIntervalRow.end >= start))
        .order_by(NodeIntervalRow.node, NodeIntervalRow.start)
    )
    intervals: dict[str, list[NodeInterval]] = defaultdict(list)
    for r in iv_rows:
        iv_end = r.end if r.end is not None else max(now, r.start)
        try:
            iv = NodeInterval(
                r.node,
                r.pool,
                r.gpu_model,
                r.gpu_count,
                r.cpu_milli,
                r.memory_mib,
                CapacityType(r.capacity_type),
                r.hourly_usd,
                r.start,
                iv_end,
            )
            ledger.add_node(iv)
        except (LedgerError, ValueError) as e:
            log.warning("ledger: skipping node interval %s of %s: %s", r.id, r.node, e)
            continue
        intervals[r.node].append(iv)
    return intervals


def _open_share(job: JobRow, pods: int, node_replicas: int) -> Callable[[str], int]:
    return lambda model: pod_share_units(job, model, node_replicas) * pods


def _add_clipped(ledger: Ledger, intervals: Iterable[NodeInterval], rec: _Seg, ws: float, we: float) -> None:
    lo, hi = max(rec.start, ws), min(rec.end, we)
    if hi <= lo:
        return
    covered = 0.0
    for iv in intervals:
        a, b = max(lo, iv.start), min(hi, iv.end)
        if b <= a:
            continue
        units = rec.share_units(iv.gpu_model) if callable(rec.share_units) else rec.share_units
        try:
            ledger.append(
                UsageSegment(
                    rec.job_id,
                    rec.team,
                    rec.project,
                    rec.namespace,
                    rec.experiment,
                    rec.labels,
                    rec.node,
                    iv.pool,
                    iv.gpu_model,
                    iv.capacity_type,
                    units_fraction(units),
                    rec.cpu_milli,
                    rec.memory_mib,
                    iv.hourly_usd,
                    a,
                    b,
                    rec.priority_class,
                )
            )
        except LedgerError as e:
            log.warning("ledger: skipping usage of job %s on %s [%s, %s]: %s", rec.job_id, rec.node, a, b, e)
            continue
        covered += b - a
    if hi - lo - covered > 1e-6:
        log.warning(
            "ledger: %.3f s of job %s on node %s in [%s, %s] lie outside every recorded interval of the node; "
            "not billed",
            hi - lo - covered,
            rec.job_id,
            rec.node,
            lo,
            hi,
        )
