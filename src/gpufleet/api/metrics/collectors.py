"""The series read from the store when Prometheus scrapes: :class:`StoreCollector` (``/metrics``).

Each kind of family is built in a module of its own: the scheduler's
(:mod:`~gpufleet.api.metrics.scheduler`), the nodes' and running pods' prices and allocations
(:mod:`~gpufleet.api.metrics.nodes`), the ledger's money and the savings
(:mod:`~gpufleet.api.metrics.cost`); the DCGM series of ``/metrics/dcgm`` are
:mod:`~gpufleet.api.metrics.dcgm`'s. This module reads the store, caches, and keeps the high-water marks.

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
:meth:`~gpufleet.api.metrics.dcgm.DcgmCollector.collect_for`.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.api.context import ApiContext
from gpufleet.api.metrics.audience import Owners
from gpufleet.api.metrics.cost import Money, compute_money, compute_savings, money_families, savings_family
from gpufleet.api.metrics.nodes import node_families, pod_families
from gpufleet.api.metrics.scheduler import SchedulerRows, scheduler_families
from gpufleet.store.repo import scrape

__all__ = ["StoreCollector"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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
            rows = SchedulerRows.read(s, now)
            nodes = scrape.live_nodes(s)
            pods = scrape.open_pods(s)
        owners.pods.update((p.pod, p.team) for p in pods)
        yield from scheduler_families(rows, self._high)
        yield from node_families(nodes)
        yield from pod_families(pods, rules.priority_multiplier if rules is not None else None)

    # -- cached: the ledger and the savings -----------------------------------------------------------

    def _money_families(self, owners: Owners) -> Iterator[Metric]:
        money: Money = self._money.get(self._ctx.clock.now(), functools.partial(compute_money, self._ctx))
        yield from money_families(money, owners, self._high)

    def _savings_family(self) -> Iterator[Metric]:
        levers: dict[str, float] = self._savings.get(
            self._ctx.clock.now(), functools.partial(compute_savings, self._ctx)
        )
        yield from savings_family(levers)
