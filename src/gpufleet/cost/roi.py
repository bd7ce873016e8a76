"""The ROI report: actual spend against a fixed on-demand cluster sized for the peak, lever by lever.

Notation over the window ``[start, end)`` of ``T`` hours, from the ledger (segments clipped to it):

- segment ``i``: GPU share ``g_i`` (GPU-equivalents held), ``d_i`` hours, on GPU model ``m_i``;
- node interval ``j``: ``G_j`` GPUs for ``h_j`` hours of model ``m_j``, capacity type ``c_j``, costing
  ``cost_j = hourly_usd_j · h_j`` (what the ledger bills);
- ``p_od(m)``, ``p_spot(m)``: the catalog's on-demand and spot $ per GPU-hour (a model the catalog
  cannot price is priced at its nodes' own per-GPU price); ``p_ref = p_od(reference)``, the reference
  model being the most expensive model in use (a fixed, homogeneous cluster has to fit every job);
- ``P``: the **peak** of whole GPUs demanded at once, ``max_t Σ_{i running at t} ceil(g_i)`` (a
  cluster without sharing gives every pod whole GPUs).

**Observed window**: ``[start, end)`` is clipped to what the ledger saw — it starts no earlier than
the first node interval — so a server 20 minutes old is judged on 20 minutes, not on 30 days. Under
``MIN_HOURS`` (24 h) observed, the report says there is too little history to judge and gives no
savings percentage, annual projection or payback: the counterfactual sizes a fixed cluster for the
peak, and a window shorter than a day has not seen a day's peak and lull (over 53 s, one node's
idle minute against one job's peak reads "−700 %"). The dollars over the window stay: they are
what happened.

**Counterfactual** ``C0 = P · T · p_ref``: the same work on a fixed cluster of ``P`` on-demand whole
GPUs of the reference model, on for the whole (observed) window ``T``.

**Actual** ``A``: what the nodes cost (``spend_report(...).node_cost_exact_usd``, idle included).

With ``F``, the fleet's **peak** of GPUs (``max_t Σ_{j existing at t} G_j``), the **levers** are a
waterfall from ``C0`` to ``A``, each step priced as below, so the parts add up to the total savings
``S = C0 − A`` exactly (no interaction term). A lever that was not in use is exactly 0:

1. ``sharing = max(0, P − F) · T · p_ref`` — at its peak the fleet ran more whole-GPU demand than it
   has GPUs: the capacity fractions and MIG slices saved (only possible with sharing).
2. ``headroom = min(0, P − F) · T · p_ref`` (≤ 0) — the fleet at its peak had more GPUs than the
   peak demand: capacity a peak-sized cluster would not pay for.
3. ``autoscaling = (F · T − Σ_j G_j·h_j) · p_ref`` — GPU-hours the fleet did not run compared with
   keeping its own peak size on all window: what scaling nodes with demand saved (0 on a fixed
   server).
4. ``right_sizing = Σ_j G_j·h_j · (p_ref − p_od(m_j))`` — nodes of cheaper GPU models than the reference.
5. ``spot = Σ_{j spot} G_j·h_j · (p_od(m_j) − p_spot(m_j))`` — spot capacity at the catalog's spot price.
6. ``off_peak = Σ_{j GPU node} (G_j·h_j · p_list(m_j, c_j) − cost_j)`` — nodes billed below the
   catalog's list price for their capacity type (``p_spot`` for spot, else ``p_od``): how off-peak
   windows, reserved and negotiated prices show up in the ledger (a price change is a new node
   interval). Negative when nodes cost more than list.
7. ``other = − Σ_{j CPU-only} cost_j`` — CPU-only nodes, which the GPU counterfactual does not have.

Savings % = ``S / C0``; projected annual savings = ``S · 8766 / T`` (a Julian year of hours);
payback = ``platform_cost_usd / (monthly savings − platform_cost_usd_per_month)`` months (None when
the savings do not cover the running cost). The table shows the levers in use (non-zero).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.spend import spend_report
from gpufleet.errors import CatalogError, InputError
from gpufleet.model.node import CapacityType

HOURS_PER_YEAR = 8766.0  # 365.25 days
HOURS_PER_MONTH = HOURS_PER_YEAR / 12
LEVERS = ("sharing", "headroom", "autoscaling", "right_sizing", "spot", "off_peak", "other")
MIN_HOURS = 24.0  # less observed history than this: too little to judge


@dataclass(frozen=True, slots=True)
class RoiReport:
    window_start: float
    window_end: float
    hours: float
    reference_gpu: str
    reference_usd_per_gpu_hour: float
    peak_gpus: int  # whole GPUs demanded at once (P)
    fleet_peak_gpus: int  # GPUs of the nodes that existed at once, at most (F)
    used_gpu_hours: float  # Σ g_i d_i
    node_gpu_hours: float  # Σ G_j h_j
    counterfactual_usd: float  # C0
    actual_usd: float  # A
    savings_usd: float  # C0 − A
    savings_pct: float | None
    levers_usd: dict[str, float]  # add up to savings_usd
    projected_annual_savings_usd: float | None  # None: too little history to judge
    platform_cost_usd: float
    platform_cost_usd_per_month: float
    payback_months: float | None
    assumptions: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "window_start": self.window_start,
            "window_end": self.window_end,
            "hours": self.hours,
            "reference_gpu": self.reference_gpu,
            "reference_usd_per_gpu_hour": self.reference_usd_per_gpu_hour,
            "peak_gpus": self.peak_gpus,
            "fleet_peak_gpus": self.fleet_peak_gpus,
            "used_gpu_hours": self.used_gpu_hours,
            "node_gpu_hours": self.node_gpu_hours,
            "counterfactual_usd": self.counterfactual_usd,
            "actual_usd": self.actual_usd,
            "savings_usd": self.savings_usd,
            "savings_pct": self.savings_pct,
            "levers_usd": dict(self.levers_usd),
            "projected_annual_savings_usd": self.projected_annual_savings_usd,
            "platform_cost_usd": self.platform_cost_usd,
            "platform_cost_usd_per_month": self.platform_cost_usd_per_month,
            "payback_months": self.payback_months,
            "assumptions": list(self.assumptions),
            "enough_history": self.projected_annual_savings_usd is not None,
        }


def _pricer(catalog: PriceCatalog, assumptions: list[str]) -> Callable[[str, CapacityType, float | None], float]:
    cache: dict[tuple[str, CapacityType], float | None] = {}

    def price(model: str, cap: CapacityType, fallback: float | None) -> float:
        key = (model, CapacityType.ON_DEMAND if cap is CapacityType.RESERVED else cap)
        if key not in cache:
            try:
                cache[key] = catalog.gpu_hour_usd(model, key[1])
            except CatalogError:
                cache[key] = None
                assumptions.append(f"no catalog {key[1]} price for {model}: its nodes' own price is used")
        got = cache[key]
        if got is not None:
            return got
        return 0.0 if fallback is None else fallback

    return price


def roi_report(
    ledger: Ledger,
    catalog: PriceCatalog,
    start: float,
    end: float,
    *,
    as_of: float | None = None,
    platform_cost_usd: float = 0.0,
    platform_cost_usd_per_month: float = 0.0,
    reference_gpu: str | None = None,
    min_hours: float = MIN_HOURS,
) -> RoiReport:
    """The ROI of ``[start, end)`` (see the module docstring for every figure's definition);
    ``min_hours``: the observed history below which it is too little to judge."""
    if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
        raise InputError(f"bad window [{start}, {end}]", field="window")
    if platform_cost_usd < 0 or platform_cost_usd_per_month < 0:
        raise InputError("platform costs must be >= 0", field="platform_cost_usd")
    cut = end if as_of is None else min(end, as_of)
    assumptions: list[str] = []
    every = ledger.node_intervals(as_of=cut)
    first = min((iv.start for iv in every), default=cut)
    if first > start:
        assumptions.append(
            f"observed window: the ledger starts {(first - start) / 3600.0:,.1f} h after the window's start; "
            "counterfactual and savings cover what was observed"
        )
        start = min(first, cut)
    hours = max(0.0, cut - start) / 3600.0
    if hours < min_hours:
        assumptions.append(
            f"too little history to judge: {hours:,.1f} h observed (at least {min_hours:g} h for a projection "
            "or payback)"
        )
    price = _pricer(catalog, assumptions)

    # node intervals, clipped
    ivs = [iv for iv in every if iv.end > start and iv.start < cut]
    own_gpu_price: dict[str, float] = {}
    for iv in ivs:
        if iv.gpu_count > 0:
            own_gpu_price.setdefault(iv.gpu_model, iv.hourly_usd / iv.gpu_count)
    models = sorted(own_gpu_price)
    segs = [s for s in ledger.segments(as_of=cut) if s.end > start and s.start < cut and s.gpu_share > 0]
    models = sorted(set(models) | {s.gpu_model for s in segs if s.gpu_model})
    if reference_gpu is None:
        ref = max(models, key=lambda m: (price(m, CapacityType.ON_DEMAND, own_gpu_price.get(m)), m), default="")
    else:
        ref = reference_gpu
    p_ref = price(ref, CapacityType.ON_DEMAND, own_gpu_price.get(ref)) if ref else 0.0
    if ref:
        assumptions.append(f"reference GPU {ref} at ${p_ref:.4f}/GPU-hour on-demand (the most expensive in use)")

    # segments: peak of whole GPUs (P), used GPU-hours
    if segs:
        s0 = np.array([max(s.start, start) for s in segs])
        s1 = np.array([min(s.end, cut) for s in segs])
        g = np.array([float(s.gpu_share) for s in segs])
        whole = np.ceil(g - 1e-12)
        d = (s1 - s0) / 3600.0
        times = np.concatenate([s0, s1])
        deltas = np.concatenate([whole, -whole])
        order = np.lexsort((deltas, times))  # ends (negative) before starts at the same instant
        peak = round(float(np.max(np.cumsum(deltas[order]), initial=0.0)))
        used_gh = float(np.dot(g, d))
    else:
        peak, used_gh = 0, 0.0

    if ivs:  # the fleet's peak of GPUs at once (F)
        t = np.array([max(iv.start, start) for iv in ivs] + [min(iv.end, cut) for iv in ivs])
        w = np.array([float(iv.gpu_count) for iv in ivs] + [-float(iv.gpu_count) for iv in ivs])
        fleet_peak = round(float(np.max(np.cumsum(w[np.lexsort((w, t))]), initial=0.0)))
    else:
        fleet_peak = 0
    node_gh = 0.0
    right_sizing = spot = off_peak = other = 0.0
    for iv in ivs:
        h = (min(iv.end, cut) - max(iv.start, start)) / 3600.0
        cost = iv.hourly_usd * h
        if iv.gpu_count <= 0:
            other -= cost
            continue
        gh = iv.gpu_count * h
        node_gh += gh
        own = iv.hourly_usd / iv.gpu_count
        p_od = price(iv.gpu_model, CapacityType.ON_DEMAND, own)
        right_sizing += gh * (p_ref - p_od)
        if iv.capacity_type is CapacityType.SPOT:
            p_sp = price(iv.gpu_model, CapacityType.SPOT, own)
            spot += gh * (p_od - p_sp)
            p_list = p_sp
        else:
            p_list = p_od
        off_peak += gh * p_list - cost

    sharing = max(0, peak - fleet_peak) * hours * p_ref
    headroom = min(0, peak - fleet_peak) * hours * p_ref
    autoscaling = (fleet_peak * hours - node_gh) * p_ref
    c0 = peak * hours * p_ref
    actual = float(spend_report(ledger, start, max(start, cut), as_of=cut).node_cost_exact_usd)
    levers = {
        "sharing": sharing,
        "headroom": headroom,
        "autoscaling": autoscaling,
        "right_sizing": right_sizing,
        "spot": spot,
        "off_peak": off_peak,
        "other": other,
    }
    savings = c0 - actual
    # the waterfall adds up by construction; float rounding is pushed into "other" visibly small
    drift = savings - sum(levers.values())
    if abs(drift) > 1e-6 * max(1.0, abs(c0)):
        assumptions.append(f"levers differ from the savings by ${drift:.6f} (float rounding), added to 'other'")
    levers["other"] += drift
    annual: float | None = None
    payback: float | None = None
    if hours >= min_hours:
        annual = savings * HOURS_PER_YEAR / hours
        net = annual / 12 - platform_cost_usd_per_month
        payback = (platform_cost_usd / net if platform_cost_usd > 0 else 0.0) if net > 0 else None
    return RoiReport(
        start,
        cut,
        hours,
        ref,
        p_ref,
        peak,
        fleet_peak,
        used_gh,
        node_gh,
        c0,
        actual,
        savings,
        savings / c0 if c0 > 0 and hours >= min_hours else None,
        levers,
        annual,
        platform_cost_usd,
        platform_cost_usd_per_month,
        payback,
        tuple(dict.fromkeys(assumptions)),
    )


def format_roi(report: Mapping[str, Any], fmt: str = "table") -> str:
    """The ROI report (as :meth:`RoiReport.to_dict` or the API's ``RoiOut`` dump) as text: ``json``,
    ``csv`` (lever,usd) or an aligned table with each lever's share of the savings."""
    if fmt == "json":
        return json.dumps(report, indent=2, default=str) + "\n"
    levers: Mapping[str, float] = report["levers_usd"]
    if fmt == "csv":
        return "lever,usd\n" + "".join(f"{k},{v:.2f}\n" for k, v in levers.items())
    savings = float(report["savings_usd"])
    pct = report.get("savings_pct")
    payback = report.get("payback_months")
    lines = [
        f"ROI {report['window_start']} → {report['window_end']} ({float(report['hours']):,.1f} h)",
        f"  counterfactual: {report['peak_gpus']} on-demand {report['reference_gpu']} GPUs always on "
        f"(peak demand; the fleet peaked at {report.get('fleet_peak_gpus', '?')})",
        f"  at ${float(report['reference_usd_per_gpu_hour']):.4f}/GPU-h = ${float(report['counterfactual_usd']):,.2f}",
        f"  actual spend:   ${float(report['actual_usd']):,.2f}",
        f"  savings:        ${savings:,.2f}"
        + (
            f" ({float(pct):.1%})"
            if pct is not None
            else " (not enough history for a percentage)"
            if not report.get("enough_history", True)
            else ""
        ),
        "",
        f"  {'lever':<14}{'USD':>16}{'share':>9}",
    ]
    in_use = {k: v for k, v in levers.items() if abs(v) >= 0.005}
    for name, usd in in_use.items():
        share = f"{usd / savings:.1%}" if abs(savings) >= 0.005 else "–"
        lines.append(f"  {name:<14}{usd:>16,.2f}{share:>9}")
    if not in_use:
        lines.append("  (no lever in use)")
    lines.append(f"  {'total':<14}{sum(levers.values()):>16,.2f}")
    annual = report.get("projected_annual_savings_usd")
    if annual is None:
        lines += ["", "  projected annual savings and payback: too little history to judge"]
    else:
        lines += [
            "",
            f"  projected annual savings: ${float(annual):,.2f}",
            "  payback: "
            + (
                "immediate (no platform cost)"
                if payback == 0
                else f"{float(payback):.1f} months"
                if payback is not None
                else "never (savings do not cover the platform's running cost)"
            ),
        ]
    lines += [f"  note: {a}" for a in report.get("assumptions", [])]
    return "\n".join(lines) + "\n"


class _RoiClient(Protocol):
    def roi(
        self, window: str = ..., platform_cost_usd: float = ..., platform_cost_usd_per_month: float = ...
    ) -> Any: ...


def render_cli(
    client: _RoiClient,
    *,
    window: str = "30d",
    by: Sequence[str] | None = None,
    team: str | None = None,
    fmt: str = "table",
    platform_cost_usd: float = 0.0,
    platform_cost_usd_per_month: float = 0.0,
) -> str:
    """What ``gpufleet cost --roi`` prints: fetch ``GET /v1/roi`` through the SDK client and format it.
    The ROI report is the cluster's: ``by`` and ``team`` do not split it (a note says so)."""
    out = client.roi(window, platform_cost_usd, platform_cost_usd_per_month)
    data = out.model_dump(mode="json") if hasattr(out, "model_dump") else dict(out)
    if (team or (by and list(by) != ["team"])) and fmt not in ("json", "csv"):
        data.setdefault("assumptions", []).append("the ROI report covers the whole cluster (--by/--team ignored)")
    return format_roi(data, fmt)
