"""The series read from the store when Prometheus scrapes.

Every replica answers the same (nothing here is kept in memory but a cache and the high-water marks
below): counters are counts of job events, runs and node rows, and dollars come from the ledger
through :func:`gpufleet.cost.spend.spend_report` with the server's pricing rules, as ``/v1/usage``
(and ``gpufleet cost``) computes them. On Kubernetes the same series come from the same store — the
backend records pods as runs — except the DCGM ones, which the cluster's DCGM exporter publishes.

Cost per scrape: a handful of aggregate queries (``GROUP BY`` over jobs, runs, events; the open
runs; the node rows; the latest telemetry sample per GPU). The money families that read the ledger
(``gpufleet_cost_usd_total``, ``gpufleet_pod_cost_usd``, the budgets) are recomputed at most every
:attr:`StoreCollector.cache_s` seconds (10), the savings (a 30-day ledger and the ROI report) every
:attr:`StoreCollector.savings_cache_s` (300); between recomputations the last figures are served.

Counters derived from the store (``gpufleet_cost_usd_total``, admissions, preemptions, spot
interruptions, autoscaler decisions) are kept monotonic in this process by a high-water mark per
series: a cost row's cents can move one cent down when a later report redistributes rounding
(largest remainder), and a node that comes back under its old name is no longer "removed"; the
counter then holds its highest value instead of going back.

Who sees what (:mod:`gpufleet.api.metrics.audience`): the collectors compute every series, and
record the team behind each pod and budget (:class:`~gpufleet.api.metrics.audience.Owners`) so a
scrape's view can be cut to its reader: :meth:`StoreCollector.collect_owned`,
:meth:`DcgmCollector.collect_for`.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.api.context import ApiContext
from gpufleet.api.metrics.audience import EVERYTHING, Audience, Owners
from gpufleet.cost.budget_status import budget_status, enforcing
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.ledger import SHARE_UNITS
from gpufleet.cost.opencost import node_prices, pod_hourly_usd
from gpufleet.cost.roi import roi_report
from gpufleet.cost.rules import apply_rules
from gpufleet.cost.spend import spend_report
from gpufleet.errors import GpufleetError
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.adapter.objects import CONTAINER_NAME
from gpufleet.scheduling.estimate import ROOM_WAITS
from gpufleet.services.budgets import scope_spend
from gpufleet.store import repo
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.store.repo import scrape

log = logging.getLogger(__name__)

T = TypeVar("T")

COST_LABELS = ("job", "team", "namespace", "project", "gpu_type", "capacity_type")
RATE_LABELS = ("team", "namespace", "project", "gpu_type", "capacity_type")
POD_LABELS = ("namespace", "pod", "gpu_type", "capacity_type")
NODE_LABELS = ("instance", "node", "instance_type", "region", "provider_id", "arch", "uid")  # OpenCost's
CONTAINER_LABELS = ("namespace", "pod", "container", "instance", "node", "uid")  # OpenCost's
DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container")
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
SAVINGS_WINDOW_S = 30 * 86400.0  # the ROI report's default window (/v1/roi)
DCGM_STALE_S = 120.0  # a GPU whose latest sample is older than this is left out
BYTES_PER_MIB = 1024 * 1024

_NODE_HELP = (
    "; instance, node: the node's name; instance_type, region, arch: its node.kubernetes.io/instance-type, "
    "topology.kubernetes.io/region and kubernetes.io/arch labels; provider_id: its gpufleet.io/provider-id label; "
    "uid: empty"
)
_CONTAINER_HELP = (
    "; namespace: the job's; pod: the run (<job>-r<run>, or the Kubernetes Job's name); container: main; "
    "instance, node: the node; uid: empty"
)
_DCGM_HELP = (
    " Labels: gpu (index), UUID (the GPU's; empty for samples stored before migration 0010), device"
    " (nvidia<gpu>), modelName, Hostname (the node), "
    "pod, namespace, container (the run holding the GPU; empty when idle)."
)
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_PROVIDER_ID = "gpufleet.io/provider-id"


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


@dataclass
class _Cached:
    """A value computed at most every ``ttl`` seconds of the context's clock."""

    ttl: float
    at: float = -math.inf
    value: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, now: float, compute: Callable[[], T]) -> T:
        with self.lock:
            if self.value is None or not (0 <= now - self.at < self.ttl):
                self.value = compute()
                self.at = now
            result: T = self.value
            return result


class _HighWater:
    """Per series, the highest value served: counters never go back in this process."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, tuple[str, ...]], float] = {}
        self._lock = threading.Lock()

    def __call__(self, family: str, labels: Sequence[str], value: float) -> float:
        key = (family, tuple(labels))
        with self._lock:
            top = max(value, self._seen.get(key, -math.inf))
            self._seen[key] = top
            return top


@functools.lru_cache(maxsize=1)
def _catalog() -> PriceCatalog:
    return load_catalog()


@dataclass(frozen=True, slots=True)
class _Money:
    """The families that read the ledger (cached)."""

    cost: list[tuple[tuple[str, ...], float]]  # COST_LABELS values → dollars
    pod_cost: list[tuple[tuple[str, ...], float]]  # POD_LABELS values → dollars
    budgets: list[tuple[str, str, float, float, float, bool]]  # name, action, spend, limit, percent, enforcing
    pod_teams: dict[str, str]  # pod → team, of pod_cost's pods
    budget_teams: dict[str, str]  # budget name → owning team ("": none)


class StoreCollector(Collector):
    """The families of ``/metrics`` computed from the store at scrape time (module docstring)."""

    def __init__(self, ctx: ApiContext, *, cache_s: float = 10.0, savings_cache_s: float = 300.0) -> None:
        self._ctx = ctx
        self._money = _Cached(cache_s)
        self._savings = _Cached(savings_cache_s)
        self._high = _HighWater()

    @property
    def cache_s(self) -> float:
        return self._money.ttl

    @cache_s.setter
    def cache_s(self, value: float) -> None:
        self._money.ttl = value

    @property
    def savings_cache_s(self) -> float:
        return self._savings.ttl

    @savings_cache_s.setter
    def savings_cache_s(self, value: float) -> None:
        self._savings.ttl = value

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape time; nothing to describe up front (no store query on register)

    def collect(self) -> Iterable[Metric]:
        yield from self._collect(Owners())

    def collect_owned(self) -> tuple[list[Metric], Owners]:
        """Every family, and the teams behind their pods and budgets (for a reader's view)."""
        owners = Owners()
        return list(self._collect(owners)), owners

    @property
    def high_water(self) -> Callable[[str, Sequence[str], float], float]:
        """The high-water marks (counters summed for a reader's view keep theirs here too)."""
        return self._high

    def _collect(self, owners: Owners) -> Iterator[Metric]:
        up = GaugeMetricFamily("gpufleet_store_up", "1 if the store answered this scrape, else 0")
        try:
            families = list(self._cheap(owners))
        except Exception:  # a scrape must not fail because the store is down: say so instead
            log.warning("metrics: the store did not answer", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield from families
        yield up
        yield from self._guarded("cost and budgets", lambda: self._money_families(owners))
        yield from self._guarded("savings", self._savings_family)

    def _guarded(self, what: str, families: Callable[[], Iterable[Metric]]) -> Iterator[Metric]:
        try:
            got = list(families())
        except Exception:
            log.warning("metrics: %s could not be computed", what, exc_info=True)
            return
        yield from got

    # -- every scrape ---------------------------------------------------------------------------------

    def _cheap(self, owners: Owners) -> Iterator[Metric]:
        ctx = self._ctx
        now = ctx.clock.now()
        rules = ctx.pricing_rules
        with ctx.database.session(readonly=True) as s:
            counts = repo.job_counts(s)
            leader = repo.leader(s, now)
            queue = list(leader.queue) if leader is not None else None
            waiting = scrape.waiting_teams(s)
            capacity = repo.gpu_capacity(s)
            placements = repo.open_run_placements(s)
            waits = scrape.queue_wait_histogram(s, QUEUE_WAIT_BUCKETS)
            admissions = scrape.admissions_by_team(s)
            requeues = scrape.requeues_by_team(s)
            scaled = scrape.autoscaled_nodes(s)
            nodes = scrape.live_nodes(s)
            pods = scrape.open_pods(s)
        owners.pods.update((p.pod, p.team) for p in pods)

        jobs = GaugeMetricFamily(
            "gpufleet_jobs",
            "Jobs in the store by state (PENDING, ADMITTED, RUNNING, PREEMPTED, SUCCEEDED, FAILED, CANCELLED, "
            "TIMED_OUT) and team",
            labels=("state", "team"),
        )
        for state, team, n in counts:
            jobs.add_metric([state, team], n)
        yield jobs

        ql = GaugeMetricFamily(
            "gpufleet_queue_length",
            "Jobs waiting, by team and reason: quota, budget or capacity (what blocks them), blocked (another "
            "admission check), room (waiting for running jobs to free GPUs), new (no scheduling cycle has "
            "seen it yet), other, no_scheduler (no leader has published a queue)",
            labels=("team", "reason"),
        )
        for (team, reason), n in sorted(_queue_counts(queue, waiting).items()):
            ql.add_metric([team, reason], n)
        yield ql

        allocated = GaugeMetricFamily("gpufleet_gpus_allocated", "GPU-equivalents held by runs that have not ended")
        allocated.add_metric([], sum(_held(p) for p in placements))
        total = GaugeMetricFamily("gpufleet_gpus_capacity", "GPUs on nodes that are not removed")
        total.add_metric([], float(capacity))
        yield allocated
        yield total

        hist = HistogramMetricFamily(
            "gpufleet_queue_wait_seconds",
            "Time from submit to first start of every job that has started, by team",
            labels=("team",),
        )
        for team, cum, n, sum_s in waits:
            buckets = [(_le(b), float(c)) for b, c in zip(QUEUE_WAIT_BUCKETS, cum, strict=True)]
            hist.add_metric([team], [*buckets, ("+Inf", float(n))], sum_s)
        yield hist

        adm = CounterMetricFamily("gpufleet_admissions", "Jobs admitted (placed and bound), by team", labels=("team",))
        for team, n in sorted(admissions.items()):
            adm.add_metric([team], self._high("admissions", [team], n))
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
        for team, reason, n in sorted(requeues):
            pre.add_metric([team, reason], self._high("preemptions", [team, reason], n))
            if reason == "spot_interruption":
                spot_by_team[team] += n
        for team, n in sorted(spot_by_team.items()):
            spot.add_metric([team], self._high("spot", [team], n))
        yield pre
        yield spot
        auto = CounterMetricFamily(
            "gpufleet_autoscaler_decisions",
            "Nodes the autoscaler provisioned (action scale_up) and that were since removed (scale_down), by pool",
            labels=("pool", "action"),
        )
        for pool, action, n in scaled:
            auto.add_metric([pool, action], self._high("autoscaler", [pool, action], n))
        yield auto

        yield from _node_families(nodes)
        yield from _pod_families(pods, rules.priority_multiplier if rules is not None else None)

    # -- cached: the ledger ---------------------------------------------------------------------------

    def _money_families(self, owners: Owners) -> Iterator[Metric]:
        money: _Money = self._money.get(self._ctx.clock.now(), self._compute_money)
        for name, team in money.pod_teams.items():
            owners.pods.setdefault(name, team)
        owners.budgets.update(money.budget_teams)
        cost = CounterMetricFamily(
            "gpufleet_cost_usd",
            "Dollars charged to each job since the ledger began (the ledger's all-time report by job, with "
            "the server's pricing rules, as gpufleet cost shows it), by job (id), team, namespace, project, "
            "gpu_type (GPU model of the nodes it ran on) and capacity_type (on-demand, spot, reserved); "
            "ended jobs keep their final value",
            labels=COST_LABELS,
        )
        for labels, usd in money.cost:
            cost.add_metric(list(labels), self._high("cost", labels, usd))
        yield cost
        pod = GaugeMetricFamily(
            "gpufleet_pod_cost_usd",
            "Dollars each running pod (a run of a job: <job>-r<run> on the server, the Kubernetes Job name on "
            "a cluster) has cost since it started, by namespace, pod, gpu_type and capacity_type",
            labels=POD_LABELS,
        )
        for labels, usd in money.pod_cost:
            pod.add_metric(list(labels), usd)
        yield pod
        pct = GaugeMetricFamily(
            "gpufleet_budget_percentage",
            "Spend of each enabled budget in its current period as a percentage of its limit, by budget (name)",
            labels=("budget",),
        )
        spend = GaugeMetricFamily(
            "gpufleet_budget_spend_usd",
            "Dollars spent in each enabled budget's current period, by budget (name)",
            labels=("budget",),
        )
        limit = GaugeMetricFamily(
            "gpufleet_budget_limit_usd",
            "Each enabled budget's limit per period in dollars, by budget (name)",
            labels=("budget",),
        )
        force = GaugeMetricFamily(
            "gpufleet_budget_enforcing",
            "1 while a budget's action is in force (over its limit past its grace period), else 0, by budget "
            "(name) and action (alert: never in force, throttle, block)",
            labels=("budget", "action"),
        )
        for name, action, spent, lim, percent, in_force in money.budgets:
            pct.add_metric([name], percent)
            spend.add_metric([name], spent)
            limit.add_metric([name], lim)
            force.add_metric([name, action], 1.0 if in_force else 0.0)
        yield from (pct, spend, limit, force)

    def _compute_money(self) -> _Money:
        ctx = self._ctx
        now = ctx.clock.now()
        rules = ctx.pricing_rules
        cost: list[tuple[tuple[str, ...], float]] = []
        pod_cost: list[tuple[tuple[str, ...], float]] = []
        budgets: list[tuple[str, str, float, float, float, bool]] = []
        budget_teams: dict[str, str] = {}
        with ctx.database.session(readonly=True) as s:
            start = scrape.ledger_start(s)
            if start is not None and now > start:
                ledger = repo.load_ledger(s, start, now, now)
                rep = spend_report(
                    ledger,
                    start,
                    now,
                    aggregate=("job", "team", "namespace", "project", "gpu_model", "capacity_type"),
                    rules=rules,
                    as_of=now,
                )
                cost = [(tuple(r.key), float(r.total_cost_usd)) for r in rep.rows]
            pods = scrape.open_pods(s)
            pod_teams = {p.pod: p.team for p in pods}
            first = min((p.started_at for p in pods), default=None)
            if first is not None and now > first:
                pod_ledger = repo.load_ledger(s, first, now, now, by_pod=True, open_only=True)
                rep = spend_report(
                    pod_ledger,
                    first,
                    now,
                    aggregate=("namespace", "job_id", "gpu_model", "capacity_type"),
                    rules=rules,
                    as_of=now,
                )
                names = {p.pod for p in pods}
                pod_cost = [(tuple(r.key), float(r.total_cost_usd)) for r in rep.rows if r.key[1] in names]
            for row in budgets_repo.list_budgets(s, enabled_only=True):
                b = budgets_repo.budget_of(row)
                budget_teams[b.name] = budgets_repo.scope_of(row).team or ""
                period = b.period_at(now)
                spent = scope_spend(s, b.scope, period.start, period.end, now, rules=rules)
                status = budget_status(b, period, spent, now)
                in_force = enforcing(b, budgets_repo.over_since(s, b.id, period.start), now)
                budgets.append((b.name, b.action, status.spend_usd, b.limit_usd, status.percent, in_force))
        return _Money(cost, pod_cost, budgets, pod_teams, budget_teams)

    # -- cached: the savings --------------------------------------------------------------------------

    def _savings_family(self) -> Iterator[Metric]:
        levers: dict[str, float] = self._savings.get(self._ctx.clock.now(), self._compute_savings)
        fam = GaugeMetricFamily(
            "gpufleet_total_savings_usd",
            "Dollars saved against a fixed on-demand cluster sized for the peak over the last 30 days (clipped "
            "to the observed history), by lever: sharing, headroom, autoscaling, right_sizing, spot, off_peak, "
            "other (the ROI report's waterfall; the levers add up to the total savings)",
            labels=("lever",),
        )
        for lever, usd in levers.items():
            fam.add_metric([lever], usd)
        yield fam

    def _compute_savings(self) -> dict[str, float]:
        ctx = self._ctx
        now = ctx.clock.now()
        start = now - SAVINGS_WINDOW_S
        with ctx.database.session(readonly=True) as s:
            if scrape.ledger_start(s) is None:
                return {}
            ledger = repo.load_ledger(s, start, now, now)
        end = max(now, start + 1e-6)
        if ctx.pricing_rules is not None:
            ledger = apply_rules(ledger, start, end, ctx.pricing_rules, as_of=now).ledger
        try:
            report = roi_report(ledger, _catalog(), start, end, as_of=now)
        except GpufleetError as e:
            log.info("metrics: no savings figures: %s", e)
            return {}
        return {k: round(float(v), 4) + 0.0 for k, v in report.levers_usd.items()}  # float noise off; no -0.0


def _le(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{bound:.1f}"


def _held(placement: Any) -> float:
    """GPU-equivalents of one run's placement JSON ``[{node, gpus, milli, mig_mask}]``."""
    total = 0.0
    for pod in placement or ():
        total += len(pod.get("gpus") or ()) * float(pod.get("milli", 1000)) / 1000.0
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


def _node_labels(row: Any) -> list[str]:
    labels = row.labels or {}
    return [
        row.name,
        row.name,
        str(labels.get(LABEL_INSTANCE_TYPE, "")),
        str(labels.get(LABEL_REGION, "")),
        str(labels.get(LABEL_PROVIDER_ID, "")),
        str(labels.get(LABEL_ARCH, "")),
        "",
    ]


def _node_families(nodes: Sequence[Any]) -> Iterator[Metric]:
    """OpenCost's node price series (labels as OpenCost's cost model publishes them)."""
    gpu = GaugeMetricFamily(
        "node_gpu_hourly_cost",
        "node_gpu_hourly_cost hourly cost for each gpu on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    cpu = GaugeMetricFamily(
        "node_cpu_hourly_cost",
        "node_cpu_hourly_cost hourly cost for each cpu on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    ram = GaugeMetricFamily(
        "node_ram_hourly_cost",
        "node_ram_hourly_cost hourly cost for each gb of ram on this node" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    total = GaugeMetricFamily(
        "node_total_hourly_cost", "node_total_hourly_cost Total node cost per hour" + _NODE_HELP, labels=NODE_LABELS
    )
    spot = GaugeMetricFamily(
        "kubecost_node_is_spot",
        "kubecost_node_is_spot Cloud provider info about node preemptibility (1: spot capacity, 0: on-demand or "
        "reserved)" + _NODE_HELP,
        labels=NODE_LABELS,
    )
    for row in nodes:
        labels = _node_labels(row)
        p = node_prices(
            row.hourly_price_usd,
            gpu_count=row.gpu_count,
            cpu_milli=row.cpu_milli,
            memory_mib=row.memory_mib,
            capacity_type=row.capacity_type,
        )
        gpu.add_metric(labels, p.gpu_usd)
        cpu.add_metric(labels, p.cpu_usd)
        ram.add_metric(labels, p.ram_gib_usd)
        total.add_metric(labels, p.total_usd)
        spot.add_metric(labels, 1.0 if row.capacity_type == "spot" else 0.0)
    yield from (gpu, cpu, ram, total, spot)


def _pod_families(pods: Sequence[scrape.OpenPod], multiplier: Callable[[str], Fraction] | None) -> Iterator[Metric]:
    """Running pods: their hourly rates (by pod, and summed by team/namespace/project/GPU/capacity)
    and OpenCost's container allocations."""
    rate = GaugeMetricFamily(
        "gpufleet_hourly_cost_rate_usd",
        "Dollars per hour the running jobs cost now (their share of their nodes' price split, priority "
        "multipliers applied), by team, namespace, project, gpu_type and capacity_type",
        labels=RATE_LABELS,
    )
    pod_rate = GaugeMetricFamily(
        "pod_hourly_cost_usd",
        "Dollars per hour each running pod costs now, by namespace, pod, gpu_type and capacity_type",
        labels=POD_LABELS,
    )
    gpu = GaugeMetricFamily(
        "container_gpu_allocation",
        "container_gpu_allocation GPU used (GPU-equivalents held)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    cpu = GaugeMetricFamily(
        "container_cpu_allocation",
        "container_cpu_allocation Percent of a single CPU used in a minute (cores requested)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    mem = GaugeMetricFamily(
        "container_memory_allocation_bytes",
        "container_memory_allocation_bytes Bytes of RAM used (requested)" + _CONTAINER_HELP,
        labels=CONTAINER_LABELS,
    )
    by_group: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    by_pod: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    for p in pods:
        usd = pod_hourly_usd(
            gpu_share_units=p.gpu_share_units,
            cpu_milli=p.cpu_milli,
            memory_mib=p.memory_mib,
            node_hourly_usd=p.node_hourly_usd,
            node_gpu_count=p.node_gpu_count,
            node_cpu_milli=p.node_cpu_milli,
            node_memory_mib=p.node_memory_mib,
            capacity_type=p.capacity_type,
            multiplier=multiplier(p.priority_class) if multiplier is not None else 1,
        )
        by_group[(p.team, p.namespace, p.project, p.gpu_model, p.capacity_type)] += usd
        by_pod[(p.namespace, p.pod, p.gpu_model, p.capacity_type)] += usd
        labels = [p.namespace, p.pod, CONTAINER_NAME, p.node, p.node, ""]
        gpu.add_metric(labels, p.gpu_share_units / SHARE_UNITS)
        cpu.add_metric(labels, p.cpu_milli / 1000.0)
        mem.add_metric(labels, float(p.memory_mib * BYTES_PER_MIB))
    for key, usd in sorted(by_group.items()):
        rate.add_metric(list(key), float(usd))
    for key, usd in sorted(by_pod.items()):
        pod_rate.add_metric(list(key), float(usd))
    yield from (rate, pod_rate, gpu, cpu, mem)


class DcgmCollector(Collector):
    """``/metrics/dcgm``: the DCGM exporter's series for the local backend's GPUs, from the latest
    stored telemetry sample of each GPU (GPUs without a sample in the last :data:`DCGM_STALE_S`
    seconds are left out). Labels as the exporter's: ``gpu`` (index), ``UUID``, ``device``
    (``nvidia<index>``), ``modelName``, ``Hostname`` (the node), and ``pod``/``namespace``/
    ``container`` of the run holding the GPU (empty when idle; one series per pod when pods share a
    GPU, as the exporter does). On a Kubernetes cluster the DCGM exporter publishes these itself.

    Temperature (``DCGM_FI_DEV_GPU_TEMP``) and power (``DCGM_FI_DEV_POWER_USAGE``) are published for
    samples that have them (NVML's sensors; samples stored before migration 0010 have neither, and
    an empty ``UUID``)."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self.collect_for(EVERYTHING)

    def collect_for(self, audience: Audience) -> Iterator[Metric]:
        """The series as ``audience`` sees them: a pod it may not see is left out of a GPU's labels
        (the GPU then reads as idle, one series), as are all pods for an anonymous scrape."""
        now = self._ctx.clock.now()
        try:
            with self._ctx.database.session(readonly=True) as s:
                readings = scrape.latest_gpu_samples(s, now - DCGM_STALE_S)
                pods = scrape.open_pods(s)
        except Exception:
            log.warning("metrics: the store did not answer (DCGM series)", exc_info=True)
            return
        holders: dict[tuple[str, int], list[tuple[str, str]]] = defaultdict(list)
        for p in pods:
            if not audience.sees(p.team):
                continue
            for g in p.gpus:
                holders[(p.node, g)].append((p.namespace, p.pod))
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)." + _DCGM_HELP, labels=DCGM_LABELS)
        used = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)." + _DCGM_HELP, labels=DCGM_LABELS
        )
        free = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)." + _DCGM_HELP, labels=DCGM_LABELS
        )
        temp = GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)." + _DCGM_HELP, labels=DCGM_LABELS)
        power = GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)." + _DCGM_HELP, labels=DCGM_LABELS)
        for r in readings:
            for namespace, pod in holders.get((r.node, r.gpu_index)) or [("", "")]:
                labels = [
                    str(r.gpu_index),
                    r.uuid,
                    f"nvidia{r.gpu_index}",
                    r.gpu_model,
                    r.node,
                    pod,
                    namespace,
                    CONTAINER_NAME if pod else "",
                ]
                if r.utilization_pct is not None:
                    util.add_metric(labels, r.utilization_pct)
                used.add_metric(labels, r.memory_used_mib)
                if r.memory_total_mib is not None:
                    free.add_metric(labels, max(0.0, r.memory_total_mib - r.memory_used_mib))
                if r.temperature_c is not None:
                    temp.add_metric(labels, r.temperature_c)
                if r.power_w is not None:
                    power.add_metric(labels, r.power_w)
        for fam in (util, used, free, temp, power):
            if fam.samples:
                yield fam
