"""What-if on the cluster's own history: load the recorded jobs and the nodes that held them from
the store and hand them, as plain data, to the what-if engine (:mod:`gpufleet.sim.whatif`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gpufleet.errors import InputError
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.profile import Profile, TeamModel
from gpufleet.sim.history import HistoryJob, trace_from_history
from gpufleet.sim.traces.base import Trace
from gpufleet.store import Database, repo
from gpufleet.store.models import NodeIntervalRow


def history_from_store(
    session: Session, start: float, end: float, checkpoint_interval_s: float = 1800.0
) -> list[HistoryJob]:
    """Jobs submitted in ``[start, end)`` that ran, with their summed run time. A job with a
    checkpoint directory is taken to checkpoint every ``checkpoint_interval_s``."""
    return [
        HistoryJob(
            j.id,
            j.submitted_at,
            run_time,
            j.team,
            j.project,
            j.priority_class,
            j.gpus,
            j.gpu_milli,
            j.mig_profile,
            tuple(str(g) for g in (j.gpu_types or [])),
            j.cpu_milli,
            j.memory_mib,
            pods,
            j.preemptible,
            checkpoint_interval_s if j.checkpoint_dir else None,
            {str(k): str(v) for k, v in (j.labels or {}).items()},
        )
        for j, run_time, pods in repo.run_history(session, start, end)
    ]


def recorded_node_cost_usd(session: Session, start: float, end: float) -> float:
    """What the ledger billed from ``start`` to ``end`` for the nodes a history what-if replays
    (:func:`observed_nodes`: on-demand GPU nodes), each second at the price of its interval: the
    figure its baseline — those nodes, the jobs as they ran — should reproduce."""
    total = 0.0
    for iv, _ in repo.node_intervals_between(session, start, end):
        if iv.capacity_type != CapacityType.ON_DEMAND.value or not iv.gpu_count:
            continue
        held = min(end, iv.end if iv.end is not None else end) - max(start, iv.start)
        total += max(0.0, held) * iv.hourly_usd / 3600.0
    return round(total, 2)


def history_trace(database: Database, start: float, end: float, *, name: str, limit: int | None = None) -> Trace:
    """The jobs the store recorded in ``[start, end)`` (the first ``limit``) as a trace named
    ``name``, with what the ledger billed for the replayed nodes from the first job's submit to the
    last run's end (``recorded_cost_usd``); an :class:`InputError` when none ran. The one home of
    a history replay's inputs: every what-if change replays this trace against the same baseline."""
    with database.session(readonly=True) as s:
        jobs = history_from_store(s, start, end)
        if limit is not None:
            jobs = jobs[:limit]
        if not jobs:
            raise InputError(
                f"no recorded jobs ran in {name.removeprefix('history:')} in {database.masked_url}", field="--trace"
            )
        first = min(j.submitted_at for j in jobs)
        last = repo.last_run_end(s, [j.job_id for j in jobs])
        recorded = recorded_node_cost_usd(s, first, last) if last is not None and last > first else None
    return trace_from_history(jobs, name=name, recorded_cost_usd=recorded)


def history_profile(database: Database, base: Profile) -> Profile:
    """The scheduler profile a history replay schedules by: ``base`` (the server's own, from its
    settings) with the teams the store holds — nominal quotas, cohorts, borrowing limits, weights,
    priority grants, the rules the server's loop read (a team the store holds replaces one of
    ``base``'s name). Without them a replay shares the cluster by other rules than the server did."""
    with database.session(readonly=True) as s:
        quotas = repo.all_quotas(s)
    teams = dict(base.teams)
    for q in quotas:
        teams[q.team] = TeamModel(
            weight=q.weight,
            quota={k: milli_gpus(v) for k, v in q.nominal_milli.items()} or None,
            cohort=q.cohort,
            borrowing_limit=None if q.borrowing_limit_milli is None else milli_gpus(q.borrowing_limit_milli),
            priority_classes=list(q.priority_classes) if q.priority_classes is not None else None,
        )
    return base.model_copy(update={"teams": teams})


def observed_nodes(session: Session, start: float, end: float) -> list[Node]:
    """The nodes that existed in ``[start, end)``, each with its last shape and price in the window
    (the ledger's node intervals): the cluster a history what-if replays, at its own prices. Only
    on-demand nodes are kept as the baseline's fixed capacity; spot and CPU-only nodes are left out
    (the baseline is an on-demand GPU cluster)."""
    last: dict[str, tuple[NodeIntervalRow, str | None]] = {}
    for iv, sharing in repo.node_intervals_between(session, start, end):
        last[iv.node] = (iv, sharing)
    out = []
    for name, (iv, mode) in sorted(last.items()):
        if iv.capacity_type != CapacityType.ON_DEMAND.value or not iv.gpu_count:
            continue
        out.append(
            Node(
                name,
                iv.gpu_model,
                iv.gpu_count,
                iv.cpu_milli,
                iv.memory_mib,
                pool=iv.pool,
                hourly_price_usd=iv.hourly_usd,
                sharing=SharingMode(mode) if mode in {m.value for m in SharingMode} else SharingMode.SHARED,
            )
        )
    return out


def history_nodes(database: Database, start: float, end: float) -> list[Node]:
    """:func:`observed_nodes` in their own read-only session."""
    with database.session(readonly=True) as s:
        return observed_nodes(s, start, end)
