"""What a simulation run produces: one record per job, a time series of samples, and a summary.

The engine fills a :class:`SimResult`; everything here is a pure function of it.

Units: times in seconds of simulated time (from the start of the trace), GPUs in GPU-equivalents
(``count x milli / 1000 x gang_size``, so half a shared GPU is 0.5 and a 1g.10gb slice 1/7), money
in USD.

Time series convention: a :class:`Sample` at time ``t`` holds until the next sample (a step
function), and the last sample holds until ``makespan``. Time-weighted figures (utilization,
cluster cost) integrate that step function, so they are exact when the engine samples at every
change and approximate when it samples on a timer.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.cost.waste import WastedRun, summarize_waste
from gpufleet.errors import InputError

FloatArray = npt.NDArray[np.float64]

# Terminal states, as spelled by :class:`gpufleet.model.JobState`.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
TIMED_OUT = "TIMED_OUT"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's outcome."""

    job_id: str
    name: str
    team: str
    project: str
    gpus: float  # GPU-equivalents held while running (count x milli / 1000 x gang_size)
    submit: float
    start: float | None  # first start; None if it never ran
    end: float | None  # when it reached a terminal state; None if it never did
    state: str  # a JobState value
    wait_s: float | None  # first start - submit; None if it never ran
    jct_s: float | None  # end - submit (job completion time); None if it never ended
    gpu_seconds: float  # GPU-equivalent seconds allocated, over all runs
    cost_usd: float  # cost attributed to the job
    preemptions: int = 0
    restarts: int = 0
    lost_work_s: float = 0.0  # work thrown away by preemptions (seconds)
    capacity_type: str = ""  # of the last run ("on-demand", "spot", "reserved"; "" if it never ran)
    spot_restarts: int = 0  # restarts caused by spot interruptions
    # GPU-hours its stopped runs did after their last checkpoint (redone; gpufleet.cost.waste)
    waste_gpu_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment; holds until the next sample."""

    time: float
    allocated_gpus: float  # GPU-equivalents held by jobs
    total_gpus: float  # GPUs of the nodes that exist (provisioning ones included)
    idle_gpus: float  # total - allocated
    queue_length: int  # jobs waiting
    running_jobs: int
    cost_rate_usd_per_hour: float  # what the nodes cost per hour at this moment
    nodes: int


def _quantiles(values: FloatArray) -> dict[str, float | None]:
    if values.size == 0:
        return {"mean": None, "median": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"mean": float(values.mean()), "median": float(p50), "p95": float(p95), "p99": float(p99)}


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(slots=True)
class SimResult:
    name: str  # the run's label (e.g. the policy)
    records: list[JobRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # in time order
    config: dict[str, Any] = field(default_factory=dict)  # JSON-serializable description of the run
    makespan: float = 0.0  # time of the last event (seconds)
    events_processed: int = 0
    wasted: list[WastedRun] = field(default_factory=list)  # each stopped run's preemption waste

    def sample_intervals(self) -> FloatArray:
        """How long each sample held (seconds): to the next sample, the last one to ``makespan``."""
        if not self.samples:
            return np.zeros(0)
        t = np.fromiter((s.time for s in self.samples), dtype=np.float64, count=len(self.samples))
        end = max(self.makespan, float(t[-1]))
        return np.diff(np.append(t, end)).clip(min=0.0)

    def summary(self) -> dict[str, Any]:
        """Headline figures (None where undefined, e.g. no job ever started).

        - ``wait_*``: over jobs that started; ``jct_*``: over jobs that ended (any terminal state).
        - ``utilization``: allocated GPU-seconds / existing GPU-seconds, integrated over the samples.
        - ``cluster_cost_usd``: what the nodes cost, the integral of the cost rate over the samples;
          ``job_cost_usd``: the sum of the costs attributed to jobs; ``idle_cost_usd``: the rest.
          ``total_cost_usd`` is the cluster cost when there are samples, else the job cost.
        - ``cost_per_gpu_hour_usd``: total cost / GPU-hours allocated to jobs (what a useful GPU-hour
          really cost, idle time included).
        - ``waste_*``: preemption waste, the GPU-hours stopped runs did after their last checkpoint
          (redone), in total and by cause, and its share of ``gpu_hours``; ``max_stops_per_job``:
          the most runs of one job stopped (:func:`gpufleet.cost.waste.summarize_waste`).
        """
        recs = self.records
        n = len(recs)
        states = [r.state for r in recs]
        wait = np.array([r.wait_s for r in recs if r.wait_s is not None], dtype=np.float64)
        jct = np.array([r.jct_s for r in recs if r.jct_s is not None], dtype=np.float64)
        gpu_seconds = float(np.sum(np.fromiter((r.gpu_seconds for r in recs), np.float64, count=n)))
        job_cost = float(np.sum(np.fromiter((r.cost_usd for r in recs), np.float64, count=n)))

        dt = self.sample_intervals()
        utilization: float | None = None
        mean_allocated: float | None = None
        mean_total: float | None = None
        cluster_cost: float | None = None
        peak_queue: int | None = None
        if self.samples and dt.sum() > 0:
            alloc = np.fromiter((s.allocated_gpus for s in self.samples), np.float64, count=len(dt))
            total = np.fromiter((s.total_gpus for s in self.samples), np.float64, count=len(dt))
            rate = np.fromiter((s.cost_rate_usd_per_hour for s in self.samples), np.float64, count=len(dt))
            span = float(dt.sum())
            total_gs = float(np.dot(total, dt))
            utilization = float(np.dot(alloc, dt)) / total_gs if total_gs > 0 else None
            mean_allocated = float(np.dot(alloc, dt)) / span
            mean_total = total_gs / span
            cluster_cost = float(np.dot(rate, dt)) / 3600.0
        if self.samples:
            peak_queue = max(s.queue_length for s in self.samples)
        total_cost = cluster_cost if cluster_cost is not None else job_cost
        gpu_hours = gpu_seconds / 3600.0
        w, j = _quantiles(wait), _quantiles(jct)
        return {
            "name": self.name,
            "jobs": n,
            "completed": states.count(SUCCEEDED),
            "failed": states.count(FAILED),
            "cancelled": states.count(CANCELLED),
            "timed_out": states.count(TIMED_OUT),
            "unfinished": sum(1 for r in recs if r.end is None),
            "never_started": sum(1 for r in recs if r.start is None),
            "wait_mean_s": w["mean"],
            "wait_median_s": w["median"],
            "wait_p95_s": w["p95"],
            "wait_p99_s": w["p99"],
            "jct_mean_s": j["mean"],
            "jct_median_s": j["median"],
            "jct_p95_s": j["p95"],
            "jct_p99_s": j["p99"],
            "utilization": utilization,
            "mean_allocated_gpus": mean_allocated,
            "mean_total_gpus": mean_total,
            "peak_queue_length": peak_queue,
            "gpu_hours": gpu_hours,
            "job_cost_usd": job_cost,
            "cluster_cost_usd": cluster_cost,
            "idle_cost_usd": None if cluster_cost is None else cluster_cost - job_cost,
            "total_cost_usd": total_cost,
            "cost_per_gpu_hour_usd": total_cost / gpu_hours if gpu_hours > 0 else None,
            "preemptions": sum(r.preemptions for r in recs),
            "restarts": sum(r.restarts for r in recs),
            "spot_restarts": sum(r.spot_restarts for r in recs),
            "lost_work_s": float(sum(r.lost_work_s for r in recs)),
            **summarize_waste(self.wasted, gpu_hours).flat(),
            "makespan_s": self.makespan,
            "events_processed": self.events_processed,
        }

    def cost_by_team(self) -> dict[str, float]:
        """Attributed cost (USD) per team, largest first."""
        out: dict[str, float] = {}
        for r in self.records:
            out[r.team] = out.get(r.team, 0.0) + r.cost_usd
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def csv_tables(self) -> dict[str, str]:
        """``jobs.csv`` and ``timeseries.csv`` as text (file name → CSV); empty cell = None.
        :func:`gpufleet.io.results.write_csv` writes them."""
        out: dict[str, str] = {}
        for name, cls, rows in (
            ("jobs.csv", JobRecord, self.records),
            ("timeseries.csv", Sample, self.samples),
        ):
            names = [f.name for f in fields(cls)]
            buf = io.StringIO(newline="")
            writer = csv.writer(buf)
            writer.writerow(names)
            for row in rows:
                writer.writerow(["" if (v := getattr(row, k)) is None else v for k in names])
            out[name] = buf.getvalue()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "makespan": self.makespan,
            "events_processed": self.events_processed,
            "summary": {k: _clean(v) for k, v in self.summary().items()},
            "records": [{k: _clean(v) for k, v in asdict(r).items()} for r in self.records],
            "samples": [{k: _clean(v) for k, v in asdict(s).items()} for s in self.samples],
            "wasted": [{k: _clean(v) for k, v in asdict(w).items()} for w in self.wasted],
        }

    def to_json_text(self) -> str:
        """The whole result (summary included) as one JSON document (:func:`gpufleet.io.results.write_json`)."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False, default=str) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimResult:
        """Inverse of :meth:`to_dict` (the summary is recomputed, not read)."""
        return cls(
            name=str(data["name"]),
            records=[JobRecord(**r) for r in data.get("records", [])],
            samples=[Sample(**s) for s in data.get("samples", [])],
            wasted=[WastedRun(**w) for w in data.get("wasted", [])],
            config=dict(data.get("config", {})),
            makespan=float(data.get("makespan", 0.0)),
            events_processed=int(data.get("events_processed", 0)),
        )

    @classmethod
    def from_json_text(cls, text: str, *, source: str = "<json>") -> SimResult:
        """Read what :meth:`to_json_text` wrote; a malformed document raises :class:`InputError`."""
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", source=source, line=exc.lineno) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"not a gpufleet result: {exc}", source=source) from None
