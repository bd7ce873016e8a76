"""Recommendations: what to change to spend less, each with $ per month, a confidence and the action.

Pure functions over the ledger (what jobs held and cost), GPU telemetry (utilization and memory
samples, one per GPU per job), progress reports and the price catalog, which
:func:`gpufleet.store.usage_repo.recommend_inputs` reads from the store. Jobs' costs come from
:func:`gpufleet.cost.spend.job_costs_usd` with the server's pricing rules (``RecommendInputs.rules``).

Money: a figure measured over the window is scaled to a month (``× 730.5 h / window hours``,
assuming the window's workload repeats; the window starts no earlier than the ledger's first node
interval, so a server 30 minutes old is judged on its 30 minutes) unless the action is about a job
running now (idle GPUs: its current cost rate × a month) or a one-off (early stopping: the forecast
remaining cost).

Rules (each names its threshold in :class:`RecommendConfig`):

============== =================================================================================
kind           when / action / $
============== =================================================================================
idle           a running job's GPUs all < ``idle_util_pct`` (5 %) for the last ``idle_minutes``
               (30): stop it. $ = its cost rate × a month.
underused      a multi-GPU job averaging < ``underused_util_pct`` (30 %): ask for fewer GPUs,
               ``ceil(gpus · util / target_util)``. $ = its window cost × the GPUs given back.
sharing        a one-GPU job averaging < ``underused_util_pct`` whose memory fits a MIG slice or a
               fraction: ask for that slice/fraction. $ = window cost × (1 − share).
gpu_type       a cheaper model whose memory holds the job's peak memory (+ ``memory_headroom``) and
               whose dense tensor throughput ≥ util × the current model's (the job used only that
               part of the GPU, so time to result holds): move. $ = GPU-hours × price difference.
spot           checkpointing, preemptible jobs that ran on on-demand capacity: allow spot.
               $ = their on-demand GPU-hours × (on-demand − spot price).
off_peak       non-urgent jobs (priority ≤ low) that ran outside an off-peak window when the price
               rules give one (``off_peak``): run them in it. $ = that cost × (1 − multiplier).
batch_size     util in [``underused_util_pct``, ``batch_util_pct``) and peak memory < half the GPU:
               double the batch size. $ = window cost × (1 − util / min(2·util, 90 %)).
early_stop     a running job whose reported metric (loss-like: lower is better) improved less than
               ``plateau_rel`` over its last ``plateau_reports`` reports: stop it.
               $ = the forecast remaining cost (one-off).
idle_capacity  a GPU model's nodes whose GPU-hours went unallocated (held by no job) ≥
               ``idle_capacity_pct`` (30 %) of the observed window: run fewer GPUs (the peak held at
               once says how many were never needed) or let the autoscaler remove idle nodes.
               $ = their share of the window's idle cost (the cost report's idle line) × a month.
reserved       a constant baseline of GPUs held (the ``reserved_quantile`` of hourly GPUs held) when
               a reserved discount is given: reserve it. $ = baseline × month × on-demand × discount.
============== =================================================================================

**History caps confidence.** A recommendation is only as sure as the history behind it: its
confidence is at most :func:`history_weight` of the observed window, ``sqrt(min(1, observed / 24 h))``
— full weight from a day of history (one daily cycle of the workload: a night's lull and a day's
peak are both in it), 0.5 at 6 h, 0.2 at 1 h, under 0.04 at 2 minutes, so minutes of history can
never give 50 %+. The square root is the shape of a rate's standard error (it shrinks as
``1/sqrt(hours)``, :func:`gpufleet.cost.forecast.rate_rel_se`). Under ``MIN_HISTORY_S`` (1 h)
observed — where a rate's relative standard error is 100 %, i.e. the figure cannot be told from
zero — a recommendation is flagged ``enough_history = False`` and its action says so: the dollars
are an order of magnitude, not an offer. Every recommendation says what its monthly figure
extrapolates from (``monthly_basis``, ``history_s``).

Each recommendation carries ``whatif``: the change ``gpufleet whatif --change`` replays to back the
figure (``spot``, ``sharing``, ``autoscaling``, ``gpu-type:<model>``), or None when the figure is
direct arithmetic (stopping an idle job).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.forecast import ProgressReport, forecast_job
from gpufleet.cost.ledger import Ledger, UsageSegment
from gpufleet.cost.periods import history_text
from gpufleet.cost.roi import HOURS_PER_MONTH
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import job_costs_usd, spend_report
from gpufleet.errors import CatalogError, InputError
from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.model.node import CapacityType
from gpufleet.model.share import gpus_milli

# Dense FP16/BF16 tensor TFLOPS from NVIDIA's datasheets (SXM parts where there are two); used only
# as ratios ("does a slower GPU keep up with what the job actually used"). V100/P100: FP16 tensor/
# FP16 peak. G1-G3 (openb's anonymous models) are unknown and never suggested.
DENSE_TFLOPS: dict[str, float] = {
    "H200": 989.0,
    "H100-80GB": 989.0,
    "A100-80GB": 312.0,
    "A100-40GB": 312.0,
    "L40S": 362.0,
    "A10G": 70.0,
    "A10": 125.0,
    "L4": 121.0,
    "T4": 65.0,
    "V100-16GB": 125.0,
    "V100-32GB": 125.0,
    "P100": 18.7,
}


FULL_WEIGHT_HISTORY_S = 86400.0  # a day of history: full confidence weight (one daily cycle)
MIN_HISTORY_S = 3600.0  # under an hour: a rate's relative standard error is 100 % → flagged


def history_weight(observed_s: float) -> float:
    """The most confidence ``observed_s`` seconds of history can back (module docstring):
    ``sqrt(min(1, observed_s / FULL_WEIGHT_HISTORY_S))`` — 1 at a day, 0.5 at 6 h, 0.2 at 1 h."""
    return math.sqrt(min(1.0, max(0.0, observed_s) / FULL_WEIGHT_HISTORY_S))


@dataclass(frozen=True, slots=True)
class UtilSample:
    """One telemetry row (``GpuSampleRow``): a GPU's utilization, and a job's memory on it."""

    time: float
    node: str
    gpu_index: int
    job_id: str | None
    utilization_pct: float | None
    memory_used_mib: float
    memory_total_mib: float | None = None


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the recommender needs to know about a job besides its ledger segments."""

    job_id: str
    team: str
    state: str = "RUNNING"
    priority_class: str = "normal"
    preemptible: bool = False
    checkpointing: bool = False
    gpus_per_pod: int = 1
    gpu_milli: int = 1000
    mig_profile: str | None = None
    started_at: float | None = None
    estimated_runtime_s: float | None = None


@dataclass(frozen=True, slots=True)
class OffPeak:
    """An off-peak price window from the pricing rules: hours ``[start_hour, end_hour)`` in UTC offset
    ``utc_offset_h`` (wraps over midnight), billed at ``multiplier`` × the list price."""

    start_hour: int
    end_hour: int
    multiplier: float
    utc_offset_h: float = 0.0

    def contains(self, t: float) -> bool:
        h = (t / 3600.0 + self.utc_offset_h) % 24.0
        if self.start_hour <= self.end_hour:
            return self.start_hour <= h < self.end_hour
        return h >= self.start_hour or h < self.end_hour


@dataclass(frozen=True, slots=True)
class RecommendConfig:
    idle_util_pct: float = 5.0
    idle_minutes: float = 30.0
    underused_util_pct: float = 30.0
    target_util_pct: float = 70.0
    batch_util_pct: float = 60.0
    memory_headroom: float = 0.10
    plateau_reports: int = 5
    plateau_rel: float = 0.01
    reserved_quantile: float = 0.10
    reserved_discount: float | None = None  # e.g. 0.4 for 40 % off on-demand; None: no reserved advice
    idle_capacity_pct: float = 30.0
    off_peak: OffPeak | None = None


@dataclass(frozen=True, slots=True)
class Recommendation:
    id: str
    kind: str
    target: str  # "job:<id>", "team:<name>", "cluster"
    team: str
    action: str
    monthly_savings_usd: float
    confidence: float  # 0..1
    evidence: Mapping[str, float | str]
    whatif: str | None = None
    history_s: float = 0.0  # the observed window the figure stands on (seconds)
    enough_history: bool = True  # False: under MIN_HISTORY_S observed, the figure is an order of magnitude
    monthly_basis: str = ""  # what the monthly figure extrapolates from, in words

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "team": self.team,
            "action": self.action,
            "monthly_savings_usd": self.monthly_savings_usd,
            "confidence": self.confidence,
            "evidence": dict(self.evidence),
            "whatif": self.whatif,
            "history_s": self.history_s,
            "enough_history": self.enough_history,
            "monthly_basis": self.monthly_basis,
        }


@dataclass
class RecommendInputs:
    ledger: Ledger
    start: float
    now: float
    samples: Sequence[UtilSample] = ()
    progress: Mapping[str, Sequence[ProgressReport]] = field(default_factory=dict)
    jobs: Mapping[str, JobFacts] = field(default_factory=dict)
    rules: PricingRules | None = None  # the server's pricing rules: jobs' costs as /v1/usage charges them


@dataclass
class _JobUse:
    team: str
    cost: float = 0.0
    gpu_hours: float = 0.0
    od_gpu_hours: float = 0.0
    held_s: float = 0.0
    models: dict[str, float] = field(default_factory=dict)  # model → GPU-hours
    segments: list[UsageSegment] = field(default_factory=list)


def _rid(kind: str, target: str) -> str:
    return "rec-" + hashlib.sha256(f"{kind}|{target}".encode()).hexdigest()[:12]


def _price(catalog: PriceCatalog, model: str, cap: CapacityType) -> float | None:
    try:
        return catalog.gpu_hour_usd(model, cap)
    except CatalogError:
        return None


def recommend(
    inputs: RecommendInputs, catalog: PriceCatalog, config: RecommendConfig | None = None
) -> list[Recommendation]:
    """All recommendations for the window ``[inputs.start, inputs.now]``, largest $ per month first."""
    cfg = config or RecommendConfig()
    start, now = inputs.start, inputs.now
    if now <= start:
        raise InputError("the window is empty (now <= start)", field="window")
    first = min((iv.start for iv in inputs.ledger.node_intervals(as_of=now)), default=start)
    start = min(max(start, first), now - 1e-6)  # the observed window
    window_h = (now - start) / 3600.0
    to_month = HOURS_PER_MONTH / window_h
    uses = _job_uses(inputs.ledger, inputs.rules, start, now)
    samples_by_job: dict[str, list[UtilSample]] = defaultdict(list)
    for one in inputs.samples:
        if one.job_id is not None and start <= one.time <= now:
            samples_by_job[one.job_id].append(one)
    out: list[Recommendation] = []
    for job_id, use in uses.items():
        facts = inputs.jobs.get(job_id, JobFacts(job_id, use.team, state=""))
        smp = samples_by_job.get(job_id, [])
        rate = use.cost / (use.held_s / 3600.0) if use.held_s > 0 else 0.0
        model = max(use.models, key=lambda m: use.models[m]) if use.models else ""
        out.extend(_telemetry_recs(job_id, use, facts, smp, rate, model, to_month, now, cfg, catalog))
        out.extend(_spot_rec(job_id, use, facts, model, to_month, catalog))
        out.extend(_off_peak_rec(job_id, use, facts, to_month, cfg))
        runs = _runs(inputs.ledger, job_id, now, running=facts.state == "RUNNING")
        out.extend(_early_stop_rec(job_id, use, facts, inputs.progress.get(job_id, ()), rate, now, cfg, runs))
    out.extend(_reserved_recs(inputs.ledger, start, now, cfg, catalog))
    out.extend(_idle_capacity_recs(inputs.ledger, inputs.rules, start, now, cfg, to_month))
    out = [_with_history(r, now - start, to_month) for r in out]
    out.sort(key=lambda r: (-r.monthly_savings_usd, r.kind, r.target))
    return out


# the kinds whose monthly figure is not the window scaled to a month
_MONTHLY_BASIS: dict[str, str] = {
    "idle": f"its current cost rate × {HOURS_PER_MONTH:g} h (if it keeps running a month)",
    "early_stop": "one-off: the forecast cost of the rest of its run",
    "reserved": f"the baseline GPUs × {HOURS_PER_MONTH:g} h × on-demand price × discount",
}


def _with_history(r: Recommendation, observed_s: float, to_month: float) -> Recommendation:
    """``r`` with its confidence capped by the history behind it, flagged under ``MIN_HISTORY_S``,
    and its monthly figure's basis in words (module docstring, "History caps confidence")."""
    seen = history_text(observed_s)
    basis = _MONTHLY_BASIS.get(r.kind) or f"extrapolated from {seen} of history (× {to_month:,.4g} to a month)"
    enough = observed_s >= MIN_HISTORY_S
    action = r.action
    if not enough:
        action += (
            f" Not enough history to quote: {seen} observed (at least {history_text(MIN_HISTORY_S)}); "
            "the figure is an order of magnitude."
        )
    return replace(
        r,
        action=action,
        confidence=round(min(r.confidence, history_weight(observed_s)), 2),
        history_s=observed_s,
        enough_history=enough,
        monthly_basis=basis,
    )


def _job_uses(ledger: Ledger, rules: PricingRules | None, start: float, now: float) -> dict[str, _JobUse]:
    # exact, not rounded to cents: a cost rate (and the month it is scaled to) from a rounded cent
    # over a few minutes is not the job's price
    costs = job_costs_usd(ledger, rules, start, now, as_of=now, exact=True)
    uses: dict[str, _JobUse] = {}
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in ledger.segments(as_of=now):
        a, b = max(s.start, start), min(s.end, now)
        if b <= a or s.gpu_share <= 0:
            continue
        u = uses.setdefault(s.job_id, _JobUse(s.team))
        gh = float(s.gpu_share) * (b - a) / 3600.0
        u.gpu_hours += gh
        if s.capacity_type is not CapacityType.SPOT:
            u.od_gpu_hours += gh
        u.models[s.gpu_model] = u.models.get(s.gpu_model, 0.0) + gh
        u.segments.append(s)
        spans[s.job_id].append((a, b))
    for job_id, u in uses.items():
        u.cost = costs.get(job_id, 0.0)
        iv = sorted(spans[job_id])
        held, ca, cb = 0.0, iv[0][0], iv[0][1]
        for a, b in iv[1:]:
            if a > cb:
                held += cb - ca
                ca, cb = a, b
            else:
                cb = max(cb, b)
        u.held_s = held + cb - ca
    return uses


def _telemetry_recs(
    job_id: str,
    use: _JobUse,
    facts: JobFacts,
    smp: Sequence[UtilSample],
    rate: float,
    model: str,
    to_month: float,
    now: float,
    cfg: RecommendConfig,
    catalog: PriceCatalog,
) -> list[Recommendation]:
    util = np.array([s.utilization_pct for s in smp if s.utilization_pct is not None], dtype=np.float64)
    if util.size == 0:
        return []
    out: list[Recommendation] = []
    target = f"job:{job_id}"
    mean_u = float(util.mean())
    mem = max(s.memory_used_mib for s in smp) / 1024.0  # GiB
    gpus = max(1, round(use.gpu_hours * 3600.0 / use.held_s)) if use.held_s > 0 else facts.gpus_per_pod
    # idle: a running job, every sample of the last idle_minutes below the idle threshold
    recent = [s for s in smp if s.time >= now - cfg.idle_minutes * 60 and s.utilization_pct is not None]
    if facts.state == "RUNNING" and len(recent) >= 2:
        span = max(s.time for s in recent) - min(s.time for s in recent)
        peak = max(float(s.utilization_pct or 0.0) for s in recent)
        if peak < cfg.idle_util_pct and span >= 0.5 * cfg.idle_minutes * 60:
            conf = 0.9 if span >= 0.8 * cfg.idle_minutes * 60 else 0.6
            out.append(
                Recommendation(
                    _rid("idle", target),
                    "idle",
                    target,
                    use.team,
                    f"Stop job {job_id}: its GPUs have been below {cfg.idle_util_pct:g} % utilization for "
                    f"{span / 60:.0f} min (peak {peak:.1f} %).",
                    rate * HOURS_PER_MONTH,
                    conf,
                    {"peak_util_pct": peak, "minutes": span / 60, "cost_usd_per_hour": rate},
                )
            )
            return out  # the other telemetry advice is moot for a job to stop
    gm = GPU_MODELS.get(model)
    gpu_mem = gm.memory_gib if gm is not None and gm.memory_gib else None
    n_conf = min(0.9, 0.4 + 0.05 * util.size)
    if mean_u < cfg.underused_util_pct and facts.mig_profile is None and facts.gpu_milli >= 1000:
        if gpus > 1:
            keep = max(1, math.ceil(gpus * mean_u / cfg.target_util_pct))
            if keep < gpus:
                save = use.cost * (1 - keep / gpus) * to_month
                out.append(
                    Recommendation(
                        _rid("underused", target),
                        "underused",
                        target,
                        use.team,
                        f"Job {job_id} averages {mean_u:.0f} % on {gpus} GPUs: ask for {keep}.",
                        save,
                        round(n_conf * 0.8, 2),
                        {"mean_util_pct": mean_u, "gpus": gpus, "suggested_gpus": keep},
                        "sharing",
                    )
                )
        else:
            share, how = _share_for(mean_u, mem, model, cfg)
            if share < 1:
                out.append(
                    Recommendation(
                        _rid("sharing", target),
                        "sharing",
                        target,
                        use.team,
                        f"Job {job_id} averages {mean_u:.0f} % of one {model or 'GPU'} with {mem:.1f} GiB: "
                        f"run it on {how}.",
                        use.cost * (1 - share) * to_month,
                        round(n_conf * 0.8, 2),
                        {"mean_util_pct": mean_u, "max_memory_gib": mem, "share": share},
                        "sharing",
                    )
                )
    elif mean_u < cfg.batch_util_pct and gpu_mem is not None and mem < 0.5 * gpu_mem:
        new_u = min(2 * mean_u, 90.0)
        out.append(
            Recommendation(
                _rid("batch_size", target),
                "batch_size",
                target,
                use.team,
                f"Job {job_id} averages {mean_u:.0f} % with {mem:.1f} of {gpu_mem:g} GiB used: double the batch size.",
                use.cost * (1 - mean_u / new_u) * to_month,
                0.3,
                {"mean_util_pct": mean_u, "max_memory_gib": mem, "gpu_memory_gib": gpu_mem},
            )
        )
    # a cheaper model that holds the memory and keeps up with what the job used
    p_cur = _price(catalog, model, CapacityType.ON_DEMAND) if model else None
    t_cur = DENSE_TFLOPS.get(model)
    if p_cur is not None and t_cur is not None:
        best: tuple[float, str] | None = None
        for other, tf in DENSE_TFLOPS.items():
            om = GPU_MODELS[other]
            if other == model or om.memory_gib < mem * (1 + cfg.memory_headroom) or tf < t_cur * mean_u / 100.0:
                continue
            p = _price(catalog, other, CapacityType.ON_DEMAND)
            if p is not None and p < p_cur and (best is None or p < best[0]):
                best = (p, other)
        if best is not None:
            p, other = best
            out.append(
                Recommendation(
                    _rid("gpu_type", target),
                    "gpu_type",
                    target,
                    use.team,
                    f"Move job {job_id} from {model} (${p_cur:.2f}/GPU-h) to {other} (${p:.2f}/GPU-h): "
                    f"{mem:.1f} GiB fits its {GPU_MODELS[other].memory_gib:g} GiB and it used {mean_u:.0f} % "
                    f"of {model}'s throughput.",
                    use.gpu_hours * (p_cur - p) * to_month,
                    round(n_conf * 0.7, 2),
                    {"from": model, "to": other, "mean_util_pct": mean_u, "max_memory_gib": mem},
                    f"gpu-type:{other}",
                )
            )
    return out


def _share_for(util_pct: float, mem_gib: float, model: str, cfg: RecommendConfig) -> tuple[float, str]:
    """The smallest MIG slice (or else a fraction in tenths) holding the memory and the compute."""
    need_compute = util_pct / cfg.target_util_pct
    gm = GPU_MODELS.get(canonical_gpu_name(model) or "")
    if gm is not None and gm.supports_mig:
        for p in sorted(gm.mig_profiles, key=lambda p: (p.compute_slices, p.memory_gib)):
            share = p.share
            if p.memory_gib >= mem_gib * (1 + cfg.memory_headroom) and share >= need_compute and share < 1:
                return share, f"a MIG slice {p.name}"
    if gm is not None and gm.memory_gib:
        frac = max(need_compute, mem_gib * (1 + cfg.memory_headroom) / gm.memory_gib)
        tenths = math.ceil(frac * 10 - 1e-9) / 10
        if tenths < 1:
            milli = gpus_milli(tenths)
            return tenths, f"a {milli} milli-GPU fraction (gpu_milli={milli})"
    return 1.0, ""


def _spot_rec(
    job_id: str, use: _JobUse, facts: JobFacts, model: str, to_month: float, catalog: PriceCatalog
) -> list[Recommendation]:
    if not (facts.checkpointing and use.od_gpu_hours > 0 and model):
        return []
    p_od = _price(catalog, model, CapacityType.ON_DEMAND)
    p_sp = _price(catalog, model, CapacityType.SPOT)
    if p_od is None or p_sp is None or p_sp >= p_od:
        return []
    target = f"job:{job_id}"
    pre = "" if facts.preemptible else " mark it preemptible and"
    return [
        Recommendation(
            _rid("spot", target),
            "spot",
            target,
            use.team,
            f"Job {job_id} checkpoints but ran {use.od_gpu_hours:.1f} GPU-h on on-demand {model}:{pre} allow spot "
            f"(${p_sp:.2f} vs ${p_od:.2f}/GPU-h).",
            use.od_gpu_hours * (p_od - p_sp) * to_month,
            0.7,
            {"on_demand_gpu_hours": use.od_gpu_hours, "on_demand_usd": p_od, "spot_usd": p_sp},
            "spot",
        )
    ]


def _off_peak_rec(
    job_id: str, use: _JobUse, facts: JobFacts, to_month: float, cfg: RecommendConfig
) -> list[Recommendation]:
    op = cfg.off_peak
    if op is None or PRIORITY_CLASSES.get(facts.priority_class, 100) > PRIORITY_CLASSES["low"] or use.held_s <= 0:
        return []
    peak_s = 0.0
    for s in use.segments:
        # sample the segment hourly (cheap, and enough for hour-granular windows)
        ts = np.arange(s.start, s.end, 600.0)
        inside = np.fromiter((op.contains(float(t)) for t in ts), dtype=bool, count=ts.size)
        peak_s += float((~inside).sum()) * 600.0 if ts.size else 0.0
    frac = min(1.0, peak_s / max(1e-9, sum(s.end - s.start for s in use.segments)))
    if frac <= 0:
        return []
    target = f"job:{job_id}"
    return [
        Recommendation(
            _rid("off_peak", target),
            "off_peak",
            target,
            use.team,
            f"Job {job_id} ({facts.priority_class} priority) ran {frac:.0%} of its time outside the off-peak window "
            f"{op.start_hour:02d}:00–{op.end_hour:02d}:00: schedule it off-peak.",
            use.cost * frac * (1 - op.multiplier) * to_month,
            0.6,
            {"peak_fraction": frac, "multiplier": op.multiplier},
        )
    ]


def _early_stop_rec(
    job_id: str,
    use: _JobUse,
    facts: JobFacts,
    reports: Sequence[ProgressReport],
    rate: float,
    now: float,
    cfg: RecommendConfig,
    runs: Sequence[tuple[float, float | None]] | None = None,
) -> list[Recommendation]:
    if facts.state != "RUNNING" or len(reports) < 2 * cfg.plateau_reports:
        return []
    reps = sorted(reports, key=lambda r: r.time)
    names = [m for m in reps[-1].metrics if "loss" in m.lower()]
    for name in names:
        vals = np.array([r.metrics[name] for r in reps if name in r.metrics], dtype=np.float64)
        if vals.size < 2 * cfg.plateau_reports:
            continue
        before, last = float(vals[: -cfg.plateau_reports].min()), float(vals[-cfg.plateau_reports :].min())
        gain = (before - last) / abs(before) if before != 0 else 0.0
        if gain >= cfg.plateau_rel:
            continue
        fc = forecast_job(
            job_id,
            reps,
            spent_usd=use.cost,
            cost_rate_usd_per_hour=rate,
            now=now,
            started_at=facts.started_at,
            estimated_runtime_s=facts.estimated_runtime_s,
            runs=runs,
        )
        if fc.remaining_usd is None or fc.remaining_usd <= 0:
            continue
        target = f"job:{job_id}"
        return [
            Recommendation(
                _rid("early_stop", target),
                "early_stop",
                target,
                use.team,
                f"Stop job {job_id}: {name} improved {gain:.2%} over its last {cfg.plateau_reports} reports "
                f"(best {last:.4g}); the rest of the run would cost ${fc.remaining_usd:,.2f}.",
                fc.remaining_usd,
                0.5,
                {"metric": name, "relative_gain": gain, "remaining_usd": fc.remaining_usd},
            )
        ]
    return []


def _runs(ledger: Ledger, job_id: str, now: float, *, running: bool) -> list[tuple[float, float | None]] | None:
    """The job's runs as the ledger saw them — the union of its segments' spans (a gang's pods
    count once), the last one open while it runs — so its forecast counts *running* time, not the
    wall time since it first started (a preempted job's wait in the queue is neither progress at
    its rate nor time off its estimate). None when the ledger holds none of it."""
    spans = sorted((s.start, s.end) for s in ledger.segments(as_of=now) if s.job_id == job_id)
    if not spans:
        return None
    merged: list[list[float]] = [list(spans[0])]
    for a, b in spans[1:]:
        if a > merged[-1][1]:
            merged.append([a, b])
        else:
            merged[-1][1] = max(merged[-1][1], b)
    out: list[tuple[float, float | None]] = [(a, b) for a, b in merged]
    if running and merged[-1][1] >= now:
        out[-1] = (merged[-1][0], None)
    return out


def _peak(spans: Sequence[tuple[float, float, float]]) -> float:
    """The most of ``w`` held at once over spans ``(a, b, w)`` (ends before starts at one instant)."""
    if not spans:
        return 0.0
    t = np.array([a for a, _, _ in spans] + [b for _, b, _ in spans])
    w = np.array([x for _, _, x in spans] + [-x for _, _, x in spans])
    return float(np.max(np.cumsum(w[np.lexsort((w, t))]), initial=0.0))


def _idle_capacity_recs(
    ledger: Ledger, rules: PricingRules | None, start: float, now: float, cfg: RecommendConfig, to_month: float
) -> list[Recommendation]:
    """GPU capacity no job held, per GPU model (see the module docstring's ``idle_capacity``)."""
    node_gh: dict[str, float] = defaultdict(float)
    node_spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    model_of: dict[str, str] = {}
    for iv in ledger.node_intervals(as_of=now):
        a, b = max(iv.start, start), min(iv.end, now)
        model_of[iv.node] = iv.gpu_model
        if b <= a or iv.gpu_count <= 0:
            continue
        node_gh[iv.gpu_model] += iv.gpu_count * (b - a) / 3600.0
        node_spans[iv.gpu_model].append((a, b, float(iv.gpu_count)))
    held_gh: dict[str, float] = defaultdict(float)
    held_spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for sg in ledger.segments(as_of=now):
        a, b = max(sg.start, start), min(sg.end, now)
        if b <= a or sg.gpu_share <= 0:
            continue
        model = model_of.get(sg.node, sg.gpu_model)
        held_gh[model] += float(sg.gpu_share) * (b - a) / 3600.0
        held_spans[model].append((a, b, float(math.ceil(sg.gpu_share))))
    idle_gh = {m: max(0.0, node_gh[m] - held_gh[m]) for m in node_gh}
    total_idle_gh = sum(idle_gh.values())
    if total_idle_gh <= 0:
        return []
    idle_usd = float(spend_report(ledger, start, now, rules=rules, as_of=now).idle.total_cost_usd)
    hours = (now - start) / 3600.0
    conf = 0.5 if hours < 24 else 0.7 if hours < 7 * 24 else 0.85
    out = []
    for model in sorted(idle_gh):
        share = idle_gh[model] / node_gh[model] if node_gh[model] > 0 else 0.0
        usd = idle_usd * idle_gh[model] / total_idle_gh
        if share * 100 < cfg.idle_capacity_pct or usd <= 0:
            continue
        fleet = round(_peak(node_spans[model]))
        peak = min(fleet, round(_peak(held_spans[model])))
        spare = fleet - peak
        how = (
            f"run {spare} fewer {model} GPUs (at most {peak} of {fleet} were held at once) or let the autoscaler "
            "remove idle nodes"
            if spare > 0
            else f"let the autoscaler remove idle {model} nodes between jobs (all {fleet} GPUs were held at some point)"
        )
        target = f"cluster:{model}"
        out.append(
            Recommendation(
                _rid("idle_capacity", target),
                "idle_capacity",
                target,
                "",
                f"{share:.0%} of the {model} GPU-hours went unallocated in the last {hours:,.1f} h "
                f"({idle_gh[model]:,.2f} of {node_gh[model]:,.2f} GPU-hours, ${usd:,.2f}): {how}.",
                usd * to_month,
                conf,
                {
                    "idle_gpu_hours": round(idle_gh[model], 4),
                    "node_gpu_hours": round(node_gh[model], 4),
                    "idle_usd": round(usd, 2),
                    "observed_hours": round(hours, 3),
                    "fleet_gpus": fleet,
                    "peak_held_gpus": peak,
                },
                "autoscaling",
            )
        )
    return out


def _reserved_recs(
    ledger: Ledger, start: float, now: float, cfg: RecommendConfig, catalog: PriceCatalog
) -> list[Recommendation]:
    disc = cfg.reserved_discount
    if disc is None or not 0 < disc < 1 or now - start < 24 * 3600:
        return []
    hours = int((now - start) // 3600)
    held: dict[str, np.ndarray] = {}
    for s in ledger.segments(as_of=now):
        a, b = max(s.start, start), min(s.end, start + hours * 3600)
        if b <= a or s.gpu_share <= 0:
            continue
        arr = held.setdefault(s.gpu_model, np.zeros(hours))
        # GPU-seconds per hour bucket, vectorized over the hours the segment touches
        h0, h1 = int((a - start) // 3600), math.ceil((b - start) / 3600)
        edges = start + 3600.0 * np.arange(h0, h1 + 1)
        overlap = np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0, None)
        arr[h0:h1] += float(s.gpu_share) * overlap / 3600.0
    out = []
    for model, arr in sorted(held.items()):
        base = math.floor(float(np.quantile(arr, cfg.reserved_quantile)))
        p = _price(catalog, model, CapacityType.ON_DEMAND)
        if base < 1 or p is None:
            continue
        target = f"cluster:{model}"
        out.append(
            Recommendation(
                _rid("reserved", target),
                "reserved",
                target,
                "",
                f"Reserve {base} {model} GPUs: at least that many were held {1 - cfg.reserved_quantile:.0%} of the "
                f"hours in the window ({disc:.0%} off on-demand).",
                base * HOURS_PER_MONTH * p * disc,
                0.7,
                {"baseline_gpus": base, "on_demand_usd": p, "discount": disc},
            )
        )
    return out
