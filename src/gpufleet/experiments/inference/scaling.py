"""Scaling with demand: N replicas against a request rate.

**Measured** (:func:`run_scaling`): an open-loop load generator in this process sends requests at
Poisson arrival times (seeded) for ``duration_s``; N replica processes (one core each on the CPU,
or sharing the GPU on CUDA) take them from one shared queue, batch whatever has arrived (up to
``max_batch``), run the model and report when each request was answered. A request's latency is
answer time − its *scheduled* arrival time, so a generator that falls behind or a queue that
grows shows up as latency (no coordinated omission). Requests still unanswered ``drain_s`` after
the last arrival count as missed (latency +∞: a p99 with more than 1 % missed is reported as
``null``). Measured replica counts are limited to the device units at hand (cores; on CUDA N
replicas share one GPU).

**Modelled** (:func:`simulate`): for replica counts the machine cannot hold, a discrete-event
queue with the same policy (one FIFO queue, N servers, each taking up to ``max_batch`` waiting
requests when free) whose service times are drawn from the *measured* closed-loop batch latencies
of the same precision (a batch of k requests takes a latency sampled at the smallest measured
batch size ≥ k). It leaves out the dispatch overhead (queues between processes) of the measured
runs; comparing both at the measured N shows how much that is. Results are labelled ``measured``
or ``modelled``.

**Replicas needed** at a rate: the smallest N whose modelled p99 meets the SLO; where that N was
measured and missed the SLO, the smallest measured N that met it instead (basis ``measured``), or
no number when none did (the basis says "more than" the largest measured N and what the model
said); and never fewer than at a lower rate. The model is a lower bound: it has no dispatch cost.
Cost at that rate = N × $ per replica-hour / rate (the replicas are billed whether busy or not).

While the replicas serve, the load generator (this process) is pinned to the cores no replica
uses, when there are any, so that it does not take turns with a replica on its core.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import math
import os
import queue
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufleet.experiments.inference.measure import DeviceInfo, Serve, WorkerPool, units_label
from gpufleet.experiments.inference.model import Precision, TrainedModel
from gpufleet.experiments.inference.pricing import DevicePrice, usd_per_1k


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else round(x, nd)


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> np.ndarray:
    """Arrival times (s from 0) of a Poisson process of ``rate`` per second over ``duration_s``."""
    rng = np.random.default_rng(seed)
    n = max(1, int(rate * duration_s * 1.2) + 20)
    t = np.cumsum(rng.exponential(1.0 / rate, size=n))
    while t[-1] < duration_s:  # pragma: no cover - 20 % headroom almost always suffices
        t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate, size=n))])
    return t[t < duration_s]


def latency_summary(latencies_s: Sequence[float], missed: int) -> dict[str, float | None]:
    """p50/p99/max in ms over answered and missed requests (a missed one is +∞)."""
    total = len(latencies_s) + missed
    if total == 0:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    arr = np.sort(np.asarray(latencies_s, dtype=np.float64))

    def pct(q: float) -> float | None:
        rank = math.ceil(q / 100.0 * total) - 1  # nearest-rank: a missed request is above every answer
        return None if rank >= len(arr) else float(arr[max(rank, 0)]) * 1000.0

    return {"p50_ms": _r(pct(50)), "p99_ms": _r(pct(99)), "max_ms": None if missed else _r(float(arr[-1]) * 1000.0)}


@dataclass(slots=True)
class LoadPoint:
    """N replicas at one offered rate."""

    source: str  # "measured" or "modelled"
    replicas: int
    rate: float  # offered requests per second
    requests: int
    answered: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_batch: float | None
    utilization: float | None  # busy share of the replicas' time
    meets_slo: bool
    price: DevicePrice

    @property
    def usd_per_1k(self) -> float | None:
        return usd_per_1k(self.price.usd_per_hour, self.rate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "replicas": self.replicas,
            "rate_per_s": _r(self.rate, 1),
            "requests": self.requests,
            "answered": self.answered,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "mean_batch": _r(self.mean_batch, 2),
            "utilization": _r(self.utilization, 3),
            "meets_slo": self.meets_slo,
            "usd_per_hour": self.price.usd_per_hour,
            "usd_per_1k": _r(self.usd_per_1k, 8),
        }


@dataclass(slots=True)
class ScalingResult:
    precision: Precision
    max_batch: int
    slo_p99_ms: float
    replica_price: DevicePrice
    points: list[LoadPoint]
    needed: dict[float, int | None]  # rate → replicas needed (None: no N found that meets the SLO)
    needed_basis: dict[float, str] = field(default_factory=dict)  # rate → "modelled" or "measured"
    more_than: dict[float, int] = field(default_factory=dict)  # rate → the largest N measured, none of which met it
    notes: list[str] = field(default_factory=list)

    def _usd(self, replicas: int) -> float | None:
        return self.replica_price.times(replicas, "").usd_per_hour

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "max_batch": self.max_batch,
            "slo_p99_ms": self.slo_p99_ms,
            "replica_usd_per_hour": self.replica_price.usd_per_hour,
            "replica_unit": self.replica_price.unit,
            "points": [p.to_dict() for p in self.points],
            "replicas_needed": [
                {
                    "rate_per_s": _r(rate, 1),
                    "replicas": n,
                    "basis": self.needed_basis.get(rate, "modelled"),
                    "more_than": self.more_than.get(rate),
                    "usd_per_1k": None if n is None else _r(usd_per_1k(self._usd(n), rate), 8),
                }
                for rate, n in self.needed.items()
            ],
            "notes": self.notes,
        }


# -- the model ------------------------------------------------------------------------------------


def simulate(
    arrivals: np.ndarray,
    replicas: int,
    service_s: Mapping[int, Sequence[float]],
    max_batch: int,
    seed: int,
) -> tuple[list[float], float, float]:
    """(latencies in s, mean batch size, utilization) of N greedy-batching servers on one FIFO
    queue, service times drawn from ``service_s`` (measured batch latencies by batch size)."""
    sizes = sorted(b for b, v in service_s.items() if len(v))
    if not sizes:
        raise ValueError("no measured service times")
    samples = {b: np.asarray(service_s[b], dtype=np.float64) for b in sizes}
    rng = np.random.default_rng(seed)
    free = [0.0] * replicas  # heap of the times the servers are next free
    heapq.heapify(free)
    lat: list[float] = []
    busy = 0.0
    n = len(arrivals)
    i = 0
    batches = 0
    arr = arrivals.tolist()
    while i < n:
        f = heapq.heappop(free)
        start = max(f, arr[i])
        j = min(bisect.bisect_right(arr, start, lo=i), i + max_batch, n)  # arrived by start, at most max_batch
        j = max(j, i + 1)
        k = j - i
        size = next((b for b in sizes if b >= k), sizes[-1])
        s = float(samples[size][int(rng.integers(len(samples[size])))])
        if size < k:  # more than the largest measured batch: scale linearly (pessimistic)
            s *= k / size
        done = start + s
        lat.extend(done - a for a in arr[i:j])
        busy += s
        batches += 1
        heapq.heappush(free, done)
        i = j
    span = max(max(free), arr[-1]) - arr[0] if n else 0.0
    return lat, n / max(batches, 1), busy / (replicas * span) if span > 0 else 0.0


def modelled_point(
    rate: float,
    replicas: int,
    service_s: Mapping[int, Sequence[float]],
    max_batch: int,
    slo_ms: float,
    price: DevicePrice,
    *,
    duration_s: float = 20.0,
    seed: int = 0,
) -> LoadPoint:
    arrivals = poisson_arrivals(rate, duration_s, seed)
    lat, mean_batch, util = simulate(arrivals, replicas, service_s, max_batch, seed)
    cut = int(len(lat) * 0.05)  # drop the first 5 % (an empty system at t=0 is not steady state)
    summ = latency_summary(lat[cut:], 0)
    p99 = summ["p99_ms"]
    return LoadPoint(
        "modelled",
        replicas,
        rate,
        len(arrivals),
        len(arrivals),
        summ["p50_ms"],
        p99,
        summ["max_ms"],
        mean_batch,
        util,
        p99 is not None and p99 <= slo_ms,
        price,
    )


def replicas_needed(
    rate: float,
    service_s: Mapping[int, Sequence[float]],
    max_batch: int,
    slo_ms: float,
    unit_price: DevicePrice,
    *,
    max_replicas: int = 64,
    seed: int = 0,
    duration_s: float = 20.0,
) -> tuple[int | None, list[LoadPoint]]:
    """The smallest N ≤ ``max_replicas`` whose modelled p99 meets the SLO, and the points tried
    around it (N−1 and N)."""
    tried: dict[int, LoadPoint] = {}

    def point(n: int) -> LoadPoint:
        if n not in tried:
            tried[n] = modelled_point(
                rate,
                n,
                service_s,
                max_batch,
                slo_ms,
                unit_price.times(n, f"{n} replicas"),
                duration_s=duration_s,
                seed=seed,
            )
        return tried[n]

    # a lower bound from capacity: N ≥ rate × (service time of one full batch) / max_batch
    sizes = sorted(b for b, v in service_s.items() if len(v))
    full = next((b for b in sizes if b >= max_batch), sizes[-1])
    per_replica = min(max_batch, full) / float(np.mean(service_s[full]))
    lo = max(1, math.floor(rate / per_replica))
    n = lo
    while n <= max_replicas and not point(n).meets_slo:
        n = n + 1 if n < lo + 4 else n * 2  # step up, then double
    if n > max_replicas:
        return None, [point(lo)]
    # n meets; find the smallest between the last failure and n
    lo_fail = max((m for m, p in tried.items() if not p.meets_slo and m < n), default=0)
    while n - lo_fail > 1:
        mid = (n + lo_fail) // 2
        if point(mid).meets_slo:
            n = mid
        else:
            lo_fail = mid
    return n, [point(m) for m in (n - 1, n) if m >= 1]


# -- measured -------------------------------------------------------------------------------------


def measured_point(
    pool: Any,
    replicas: int,
    rate: float,
    *,
    duration_s: float,
    seed: int,
    slo_ms: float,
    price: DevicePrice,
    drain_s: float = 2.0,
) -> LoadPoint:
    """Offer ``rate`` to the ``replicas`` serving workers of ``pool`` (a :class:`~.measure.WorkerPool`
    already serving) for ``duration_s``; collect the answers."""
    with pool.phase.get_lock():
        pool.phase.value += 1
        phase = int(pool.phase.value)
    rel = poisson_arrivals(rate, duration_s, seed)
    n = len(rel)
    t0 = time.perf_counter() + 0.02
    arrivals = (rel + t0).tolist()
    sent = 0
    while sent < n:
        now = time.perf_counter()
        j = bisect.bisect_right(arrivals, now, lo=sent)
        if j > sent:
            pool.requests.put((phase, list(range(sent, j))))
            sent = j
        else:
            time.sleep(min(arrivals[sent] - now, 0.0005))
    done_at: dict[int, float] = {}
    busy = 0.0
    batches = 0
    deadline = arrivals[-1] + drain_s
    while len(done_at) < n:
        try:
            ph, ids, at, service = pool.served.get(timeout=max(0.01, deadline - time.perf_counter()))
        except queue.Empty:
            break
        if ph != phase:
            continue
        for i in ids:
            done_at[i] = at
        busy += service
        batches += 1
        if time.perf_counter() > deadline:
            break
    with pool.phase.get_lock():
        pool.phase.value += 1  # what is still queued is dropped
    lat = [done_at[i] - arrivals[i] for i in done_at]
    summ = latency_summary(lat, n - len(done_at))
    span = max(done_at.values(), default=arrivals[-1]) - t0
    p99 = summ["p99_ms"]
    return LoadPoint(
        "measured",
        replicas,
        rate,
        n,
        len(done_at),
        summ["p50_ms"],
        p99,
        summ["max_ms"],
        len(done_at) / batches if batches else None,
        busy / (replicas * span) if span > 0 else None,
        p99 is not None and p99 <= slo_ms,
        price,
    )


# -- the whole experiment -------------------------------------------------------------------------


def default_rates(batch1_throughput: float) -> list[float]:
    """A quarter, half, one and two times what one replica serves closed-loop at batch 1."""
    return [round(batch1_throughput * f, -1) for f in (0.25, 0.5, 1.0, 2.0)]


def run_scaling(
    trained: TrainedModel,
    dev: DeviceInfo,
    unit_price: DevicePrice,
    service_s: Mapping[int, Sequence[float]],
    rates: Sequence[float],
    *,
    precision: Precision = "fp32",
    max_batch: int = 8,
    measured_replicas: Sequence[int] = (1,),
    duration_s: float = 2.0,
    slo_ms: float = 25.0,
    seed: int = 0,
    max_replicas: int = 64,
    pool: WorkerPool | None = None,
) -> ScalingResult:
    """Measured points for each N in ``measured_replicas`` × rate, modelled points at the same N
    (to compare) and around the replicas needed at each rate. ``service_s``: measured closed-loop
    batch latencies (s) of ``precision`` on this device, by batch size. ``pool``: workers to use
    (at least max(``measured_replicas``); default: started here)."""
    points: list[LoadPoint] = []
    notes: list[str] = []
    cores = dev.cores or (0,)
    measured = sorted({n for n in measured_replicas if n >= 1})
    if measured:
        with contextlib.ExitStack() as stack:
            if pool is None or pool.size < max(measured):
                pool = stack.enter_context(WorkerPool(trained, max(measured)))
            for n in measured:
                for i in range(n):
                    pool.commands[i].put(Serve(dev.torch_device, (cores[i % len(cores)],), precision, max_batch))
                for i in range(n):
                    pool.expect(i, "ready")
                spare = [c for c in cores if c not in {cores[i % len(cores)] for i in range(n)}]
                old_aff = os.sched_getaffinity(0) if spare and hasattr(os, "sched_setaffinity") else None
                try:
                    if old_aff is not None:
                        os.sched_setaffinity(0, set(spare))
                    for k, rate in enumerate(rates):
                        points.append(
                            measured_point(
                                pool,
                                n,
                                rate,
                                duration_s=duration_s,
                                seed=seed + k,
                                slo_ms=slo_ms,
                                price=unit_price.times(n, units_label(dev, n)),
                            )
                        )
                finally:
                    if old_aff is not None:
                        os.sched_setaffinity(0, old_aff)
                    for _ in range(n):
                        pool.requests.put(None)
                    for i in range(n):
                        pool.expect(i, "ok")
        if dev.kind == "cpu" and max(measured) > len(cores):
            notes.append(f"{max(measured)} replicas on {len(cores)} cores: replicas share cores")
        if dev.kind == "cuda":  # pragma: no cover - needs a GPU
            notes.append("measured replicas share one GPU; the modelled ones have a GPU each")
    for k, rate in enumerate(rates):
        for n in measured:
            points.append(
                modelled_point(
                    rate, n, service_s, max_batch, slo_ms, unit_price.times(n, f"{n} replicas"), seed=seed + k
                )
            )
    needed: dict[float, int | None] = {}
    basis: dict[float, str] = {}
    more_than: dict[float, int] = {}
    for k, rate in enumerate(rates):
        n_needed, around = replicas_needed(
            rate, service_s, max_batch, slo_ms, unit_price, max_replicas=max_replicas, seed=seed + k
        )
        needed[rate], basis[rate] = n_needed, "modelled"
        have = {(p.source, p.replicas, p.rate) for p in points}
        points.extend(p for p in around if (p.source, p.replicas, p.rate) not in have)
        runs = {p.replicas: p for p in points if p.source == "measured" and p.rate == rate}
        if n_needed is not None and n_needed in runs and not runs[n_needed].meets_slo:
            better = [m for m, p in sorted(runs.items()) if m > n_needed and p.meets_slo]
            notes.append(
                f"at {rate:g}/s the model says {n_needed} replica(s) meet the SLO but the measured run of {n_needed} "
                f"did not (p99 {runs[n_needed].p99_ms} ms: dispatch between processes and the host's other load); "
                + (f"{better[0]} measured replicas did" if better else "no measured replica count did")
            )
            if better:
                needed[rate], basis[rate] = better[0], "measured"
            else:
                needed[rate] = None
                more_than[rate] = max(runs)
                basis[rate] = (
                    f"measured: more than {max(runs)} (none of {', '.join(map(str, sorted(runs)))} met it; "
                    f"the model, without the dispatch cost, says {n_needed})"
                )
    floor, floor_rate = 0, 0.0  # more demand never needs fewer replicas: a noisy measured miss at a
    for rate in sorted(needed):  # lower rate carries over to the higher ones
        got = needed[rate]
        if got is not None and got < floor:
            needed[rate], basis[rate] = floor, f"as at {floor_rate:g}/s (more demand needs no fewer)"
        elif got is not None:
            floor, floor_rate = got, rate
    points.sort(key=lambda p: (p.rate, p.replicas, p.source))
    return ScalingResult(precision, max_batch, slo_ms, unit_price, points, needed, basis, more_than, notes)
