"""The scheduler's families of ``/metrics``: jobs by state, the queue and why it waits, GPUs held
and on hand, queue waits, admissions, preemptions and the work they wasted, spot interruptions and the
autoscaler's decisions.

Read from the store at every scrape (:class:`SchedulerRows`, one session with the other cheap
families); the counters keep their high-water marks in the collector
(:class:`gpufleet.api.metrics.collectors.StoreCollector`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from sqlalchemy.orm import Session

from gpufleet.cost.waste import WastedRun, summarize_waste, waste_cause, waste_gpu_hours
from gpufleet.model.gpu import MILLI
from gpufleet.model.share import milli_gpus
from gpufleet.scheduling.estimate import ROOM_WAITS
from gpufleet.store import repo
from gpufleet.store.repo import scrape

QUEUE_WAIT_BUCKETS = (
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    43200.0,
    86400.0,
)
QUEUE_REASONS = ("quota", "budget", "capacity", "blocked", "room", "new", "other", "no_scheduler")


@dataclass(frozen=True, slots=True)
class SchedulerRows:
    """What the scheduler's families are made of, read in the scrape's session."""

    counts: list[tuple[str, str, int]]  # (state, team, jobs)
    queue: list[Any] | None  # the leader's published queue; None without a leader
    waiting: dict[str, str]  # waiting job → team
    capacity: int  # GPUs on nodes that are not removed
    placements: list[list[dict[str, Any]]]  # of the runs that have not ended
    waits: list[tuple[str, list[int], int, float]]  # per team: cumulative bucket counts, count, sum
    admissions: dict[str, int]
    requeues: list[tuple[str, str, int]]  # (team, reason, runs)
    stopped: list[scrape.StoppedRun]  # the same runs, one each: their preemption waste
    scaled: list[tuple[str, str, int]]  # (pool, action, nodes)

    @classmethod
    def read(cls, s: Session, now: float) -> SchedulerRows:
        counts = repo.job_counts(s)
        leader = repo.leader(s, now)
        return cls(
            counts=counts,
            queue=list(leader.queue) if leader is not None else None,
            waiting=scrape.waiting_teams(s),
            capacity=repo.gpu_capacity(s),
            placements=repo.open_run_placements(s),
            waits=scrape.queue_wait_histogram(s, QUEUE_WAIT_BUCKETS),
            admissions=scrape.admissions_by_team(s),
            requeues=scrape.requeues_by_team(s),
            stopped=scrape.stopped_runs(s),
            scaled=scrape.autoscaled_nodes(s),
        )


def scheduler_families(rows: SchedulerRows, high: Callable[[str, Sequence[str], float], float]) -> Iterator[Metric]:
    """The families, in their exposition order; ``high`` keeps a counter's high-water mark."""
    jobs = GaugeMetricFamily(
        "gpufleet_jobs",
        "Jobs in the store by state (PENDING, ADMITTED, RUNNING, PREEMPTED, SUCCEEDED, FAILED, CANCELLED, "
        "TIMED_OUT) and team",
        labels=("state", "team"),
    )
    for state, team, n in rows.counts:
        jobs.add_metric([state, team], n)
    yield jobs

    ql = GaugeMetricFamily(
        "gpufleet_queue_length",
        "Jobs waiting, by team and reason: quota, budget or capacity (what blocks them), blocked (another "
        "admission check), room (waiting for running jobs to free GPUs), new (no scheduling cycle has "
        "seen it yet), other, no_scheduler (no leader has published a queue)",
        labels=("team", "reason"),
    )
    for (team, reason), n in sorted(_queue_counts(rows.queue, rows.waiting).items()):
        ql.add_metric([team, reason], n)
    yield ql

    allocated = GaugeMetricFamily("gpufleet_gpus_allocated", "GPU-equivalents held by runs that have not ended")
    allocated.add_metric([], sum(_held(p) for p in rows.placements))
    total = GaugeMetricFamily("gpufleet_gpus_capacity", "GPUs on nodes that are not removed")
    total.add_metric([], float(rows.capacity))
    yield allocated
    yield total

    hist = HistogramMetricFamily(
        "gpufleet_queue_wait_seconds",
        "Time from submit to first start of every job that has started, by team",
        labels=("team",),
    )
    for team, cum, n, sum_s in rows.waits:
        buckets = [(_le(b), float(c)) for b, c in zip(QUEUE_WAIT_BUCKETS, cum, strict=True)]
        hist.add_metric([team], [*buckets, ("+Inf", float(n))], sum_s)
    yield hist

    adm = CounterMetricFamily("gpufleet_admissions", "Jobs admitted (placed and bound), by team", labels=("team",))
    for team, n in sorted(rows.admissions.items()):
        adm.add_metric([team], high("admissions", [team], n))
    yield adm
    pre = CounterMetricFamily(
        "gpufleet_preemptions",
        "Runs ended and requeued, by team and reason: priority (preempted for a higher-priority job), "
        "quota_reclaim (its team's borrowed quota reclaimed), spot_interruption (its spot node was taken "
        "back), lost (its node was removed or the run vanished)",
        labels=("team", "reason"),
    )
    spot = CounterMetricFamily(
        "gpufleet_spot_interruptions", "Runs lost with a spot node taken back, by team", labels=("team",)
    )
    spot_by_team: Counter[str] = Counter()
    for team, reason, n in sorted(rows.requeues):
        pre.add_metric([team, reason], high("preemptions", [team, reason], n))
        if reason == "spot_interruption":
            spot_by_team[team] += n
    for team, n in sorted(spot_by_team.items()):
        spot.add_metric([team], high("spot", [team], n))
    yield pre
    yield spot
    yield _waste_family(rows.stopped, high)
    auto = CounterMetricFamily(
        "gpufleet_autoscaler_decisions",
        "Nodes the autoscaler provisioned (action scale_up) and that were since removed (scale_down), by pool",
        labels=("pool", "action"),
    )
    for pool, action, n in rows.scaled:
        auto.add_metric([pool, action], high("autoscaler", [pool, action], n))
    yield auto


def _waste_family(stopped: Sequence[scrape.StoppedRun], high: Callable[[str, Sequence[str], float], float]) -> Metric:
    """``gpufleet_preemption_waste_gpu_seconds_total``: the preemption waste of the stopped runs
    (:mod:`gpufleet.cost.waste`, the rule the simulator reports in GPU-hours), by team and cause, in
    GPU-seconds (Prometheus's base unit: ``promtool check metrics`` refuses hours). The store does
    not record a checkpoint taken on a spot notice: such a run counts from its last regular one."""
    fam = CounterMetricFamily(
        "gpufleet_preemption_waste_gpu_seconds",
        "GPU-seconds of work to redo: what runs ended by a preemption or a loss did after their job's last "
        "checkpoint (all of it without checkpoints), by team and cause (the reasons of gpufleet_preemptions)",
        labels=("team", "cause"),
    )
    runs = []
    for r in stopped:
        cause = waste_cause(r.outcome, r.stop_requested, r.capacity_type)
        if cause is not None:
            hours = waste_gpu_hours(_held(r.placement), r.ran_s, r.checkpoint_interval_s)
            runs.append(WastedRun(r.job_id, r.team, cause, hours))
    for (team, cause), hours in sorted(summarize_waste(runs, 0.0).by_team_cause.items()):
        fam.add_metric([team, cause], high("preemption_waste", [team, cause], hours * 3600.0))
    return fam


def queue_reason(entry: dict[str, Any]) -> str:
    """A published queue entry's reason as a label value (:data:`QUEUE_REASONS`): what blocks it
    (``quota``, ``budget``, ``capacity``, ``blocked`` for any other admission check), or, when it
    only waits, ``room`` (for running jobs to free GPUs), ``new`` (no cycle has looked at it yet) or
    ``other``."""
    blocked = str(entry.get("blocked") or "")
    if blocked:
        if blocked == "quota":
            return "quota"
        if blocked.startswith("budget"):
            return "budget"
        if blocked == "capacity":
            return "capacity"
        return "blocked"
    reason = str(entry.get("reason") or "")
    if reason in ROOM_WAITS:
        return "room"
    if reason == "waiting for the next scheduling cycle":
        return "new"
    return "other"


def _le(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{bound:.1f}"


def _held(placement: Any) -> float:
    """GPU-equivalents of one run's placement JSON ``[{node, gpus, milli, mig_mask}]``."""
    total = 0.0
    for pod in placement or ():
        total += milli_gpus(len(pod.get("gpus") or ()) * float(pod.get("milli", MILLI)))
    return total


def _queue_counts(queue: list[Any] | None, waiting: dict[str, str]) -> Counter[tuple[str, str]]:
    """Waiting jobs by (team, reason): the leader's published queue, then the waiting jobs it has not
    published yet (``new``); every waiting job is ``no_scheduler`` without a leader."""
    counts: Counter[tuple[str, str]] = Counter()
    if queue is None:
        for team in waiting.values():
            counts[(team, "no_scheduler")] += 1
        return counts
    seen: set[str] = set()
    for entry in queue:
        if not isinstance(entry, dict):
            continue
        job = str(entry.get("job") or "")
        owner = waiting.get(job)
        if owner is None or job in seen:
            continue
        seen.add(job)
        counts[(owner, queue_reason(entry))] += 1
    for job, team in waiting.items():
        if job not in seen:
            counts[(team, "new")] += 1
    return counts
