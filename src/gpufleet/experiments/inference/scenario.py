"""The cost optimization challenge: from batch 1 FP32 to cheaper serving, one step at a time.

Steps, each applied to the last configuration *kept*:

1. **baseline** — batch 1, FP32, on the primary device (CUDA when present, else the CPU);
2. **batch 8** — the same model served in batches of 8;
3. **BF16 / FP16** — half-precision weights and inputs (BF16 on the CPU, FP16 on CUDA);
4. **INT8** — dynamic quantization of the Linear layers (CPU only; skipped on CUDA);
5. **another device type** — on a GPU host, the CPU (measured: its cheapest batch-8 configuration
   within the accuracy budget); on a CPU-only host, GPU types from the catalog, **projected**.

A measured step is **kept** when it costs less per 1,000 inferences than the last kept one, loses at
most ``max_accuracy_drop_pp`` percentage points of held-out accuracy against the baseline, and
(with an SLO) keeps p99 within it; otherwise it is **rejected** and the next step builds on the last
kept configuration. Savings: a step's saving is the last kept cost − its cost (negative: it costs
more); the cumulative saving is baseline cost − the last kept cost, so the kept steps' savings add
up to it exactly.

**Projections** (never kept, never in the cumulative saving) price a GPU the machine does not have
*by price only*: the same throughput as the configuration it is compared with, at the catalog's
$ per GPU-hour. That assumes no speed-up, so it is an upper bound on what the GPU would cost per
inference; each projection also gives the **break-even throughput**, the inferences per second the
GPU must serve to cost the same as the kept configuration. Measure on the GPU to know.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.experiments.inference.measure import Measurement
from gpufleet.experiments.inference.pricing import DevicePrice, usd_per_1k

StepKind = Literal["measured", "projected", "skipped"]
Status = Literal["baseline", "kept", "rejected", "projected", "skipped"]


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else round(x, nd)


@dataclass(slots=True)
class Step:
    name: str  # "baseline", "batch 8", "BF16", "INT8", "→ CPU", "→ T4" (projected)
    device: str
    batch: int | None
    precision: str | None
    kind: StepKind
    status: Status = "skipped"
    reason: str = ""
    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    accuracy: float | None = None
    usd_per_hour: float | None = None
    usd_per_1k: float | None = None
    accuracy_change_pp: float | None = None  # vs the baseline
    step_saving_usd_per_1k: float | None = None  # vs the last kept step (+ = cheaper)
    step_saving_pct: float | None = None
    cumulative_saving_usd_per_1k: float | None = None  # baseline − last kept, after this step
    cumulative_saving_pct: float | None = None
    basis: str | None = None  # projections: how; measured: the price's source
    break_even_throughput: float | None = None  # projections

    @property
    def config(self) -> str:
        """``cpu b8 BF16``, ``T4 b8 BF16``."""
        parts = [self.device]
        if self.batch is not None:
            parts.append(f"b{self.batch}")
        if self.precision is not None:
            parts.append(self.precision.upper())
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "device": self.device,
            "batch": self.batch,
            "precision": self.precision,
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "throughput_per_s": _r(self.throughput, 1),
            "p50_ms": _r(self.p50_ms),
            "p99_ms": _r(self.p99_ms),
            "accuracy": _r(self.accuracy),
            "accuracy_change_pp": _r(self.accuracy_change_pp, 2),
            "usd_per_hour": self.usd_per_hour,
            "usd_per_1k": _r(self.usd_per_1k, 10),
            "step_saving_usd_per_1k": _r(self.step_saving_usd_per_1k, 10),
            "step_saving_pct": _r(self.step_saving_pct, 2),
            "cumulative_saving_usd_per_1k": _r(self.cumulative_saving_usd_per_1k, 10),
            "cumulative_saving_pct": _r(self.cumulative_saving_pct, 2),
            "basis": self.basis,
            "break_even_throughput_per_s": _r(self.break_even_throughput, 1),
        }


@dataclass(slots=True)
class Scenario:
    steps: list[Step]
    max_accuracy_drop_pp: float
    p99_slo_ms: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> Step | None:
        return next((s for s in self.steps if s.status == "baseline"), None)

    @property
    def final(self) -> Step | None:
        """The last kept configuration (the baseline when nothing was kept)."""
        kept = [s for s in self.steps if s.status in ("baseline", "kept")]
        return kept[-1] if kept else None

    def summary(self) -> dict[str, Any]:
        base, fin = self.baseline, self.final
        if base is None or fin is None or base.usd_per_1k is None or fin.usd_per_1k is None:
            return {}
        return {
            "baseline": base.config,
            "final": fin.config,
            "baseline_usd_per_1k": _r(base.usd_per_1k, 10),
            "final_usd_per_1k": _r(fin.usd_per_1k, 10),
            "saving_pct": _r(100.0 * (1 - fin.usd_per_1k / base.usd_per_1k), 2),
            "cost_ratio": _r(fin.usd_per_1k / base.usd_per_1k, 4),
            "accuracy_change_pp": _r(fin.accuracy_change_pp, 2),
            "p99_ms": {"baseline": _r(base.p99_ms), "final": _r(fin.p99_ms)},
            "p50_ms": {"baseline": _r(base.p50_ms), "final": _r(fin.p50_ms)},
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_accuracy_drop_pp": self.max_accuracy_drop_pp,
            "p99_slo_ms": self.p99_slo_ms,
            "steps": [s.to_dict() for s in self.steps],
            "summary": self.summary(),
            "notes": self.notes,
        }


def _from(m: Measurement, name: str) -> Step:
    return Step(
        name,
        m.device,
        m.batch,
        m.precision,
        "measured",
        throughput=m.throughput,
        p50_ms=m.p50_ms,
        p99_ms=m.p99_ms,
        accuracy=m.accuracy,
        usd_per_hour=m.usd_per_hour,
        usd_per_1k=m.usd_per_1k,
        basis=None if m.price is None else m.price.source,
    )


def build_scenario(
    grid: Mapping[tuple[str, int, str], Measurement],
    primary: str,
    *,
    primary_kind: Literal["cpu", "cuda"],
    batch: int = 8,
    cpu_alternatives: Sequence[Measurement] = (),
    projections: Sequence[tuple[str, DevicePrice]] = (),
    max_accuracy_drop_pp: float = 1.0,
    p99_slo_ms: float | None = None,
) -> Scenario:
    """The challenge from measured configurations ``grid`` ((device, batch, precision) → measurement)
    on device ``primary``. ``cpu_alternatives``: CPU measurements for the device step on a GPU host;
    ``projections``: (GPU model, its price) for the device step on a CPU-only host (or besides)."""
    half = "bf16" if primary_kind == "cpu" else "fp16"
    plan: list[tuple[str, int, str]] = [
        ("baseline", 1, "fp32"),
        (f"batch {batch}", batch, "fp32"),
        (half.upper(), batch, half),
        ("INT8", batch, "int8"),
    ]
    steps: list[Step] = []
    notes: list[str] = []
    for name, b, p in plan:
        m = grid.get((primary, b, p))
        if m is not None and m.usd_per_1k is not None:
            steps.append(_from(m, name))
            continue
        if p == "int8" and primary_kind == "cuda":
            why = "int8 dynamic quantization runs on the CPU only (see the device step)"
        elif m is not None:
            why = "unpriced: " + (m.price.source if m.price is not None else "no price")
        else:
            why = f"not measured (batch {b} {p.upper()} not in the grid)"
        steps.append(Step(name, primary, b, p, "skipped", "skipped", why))
    if primary_kind == "cuda":
        ok = [m for m in cpu_alternatives if m.usd_per_1k is not None]
        if ok:
            best = min(ok, key=lambda m: m.usd_per_1k or math.inf)
            steps.append(_from(best, "→ CPU"))
        else:
            steps.append(Step("→ CPU", "cpu", batch, None, "skipped", "skipped", "no CPU configuration measured"))
    _decide(steps, max_accuracy_drop_pp, p99_slo_ms)
    kept = [s for s in steps if s.status in ("baseline", "kept")]
    if kept:
        ref = kept[-1]
        for gpu, price in projections:
            steps.append(_project(ref, gpu, price, kept[0]))
    elif projections:
        notes.append("no baseline measured: nothing to project from")
    return Scenario(steps, max_accuracy_drop_pp, p99_slo_ms, notes)


def _decide(steps: list[Step], max_drop_pp: float, slo_ms: float | None) -> None:
    """Set status, savings and accuracy changes in order (see the module docstring)."""
    base: Step | None = None
    last: Step | None = None
    for s in steps:
        if s.kind != "measured" or s.usd_per_1k is None:
            continue
        if base is None:
            base, last = s, s
            s.status, s.reason = "baseline", "the reference"
            s.accuracy_change_pp = 0.0
            s.step_saving_usd_per_1k = s.step_saving_pct = 0.0
            s.cumulative_saving_usd_per_1k = s.cumulative_saving_pct = 0.0
            continue
        assert last is not None and last.usd_per_1k is not None and base.usd_per_1k is not None
        s.accuracy_change_pp = 100.0 * ((s.accuracy or 0.0) - (base.accuracy or 0.0))
        s.step_saving_usd_per_1k = last.usd_per_1k - s.usd_per_1k
        s.step_saving_pct = 100.0 * s.step_saving_usd_per_1k / last.usd_per_1k
        problems: list[str] = []
        if s.usd_per_1k >= last.usd_per_1k:
            problems.append(f"costs {-s.step_saving_pct:.1f}% more than {last.name}")
        if s.accuracy_change_pp < -max_drop_pp - 1e-9:
            problems.append(f"accuracy {s.accuracy_change_pp:+.2f} pp (budget −{max_drop_pp:g} pp)")
        if slo_ms is not None and (s.p99_ms is None or s.p99_ms > slo_ms):
            problems.append(f"p99 {s.p99_ms:.2f} ms > SLO {slo_ms:g} ms")
        if problems:
            s.status, s.reason = "rejected", "; ".join(problems)
        else:
            s.status, s.reason = "kept", f"{s.step_saving_pct:.1f}% cheaper than {last.name}"
            last = s
        kept_cost = last.usd_per_1k if last.usd_per_1k is not None else base.usd_per_1k
        s.cumulative_saving_usd_per_1k = base.usd_per_1k - kept_cost
        s.cumulative_saving_pct = 100.0 * s.cumulative_saving_usd_per_1k / base.usd_per_1k


def _project(ref: Step, gpu: str, price: DevicePrice, base: Step) -> Step:
    name = f"→ {gpu}"
    if price.usd_per_hour is None or ref.throughput is None or ref.usd_per_1k is None:
        return Step(name, gpu, ref.batch, ref.precision, "projected", "projected", price.source)
    cost = usd_per_1k(price.usd_per_hour, ref.throughput)
    assert cost is not None and base.usd_per_1k is not None
    break_even = price.usd_per_hour * 1000.0 / (3600.0 * ref.usd_per_1k)
    s = Step(
        name,
        gpu,
        ref.batch,
        ref.precision,
        "projected",
        "projected",
        f"price only: {ref.config}'s measured {ref.throughput:,.0f}/s assumed unchanged on a {gpu} at "
        f"${price.usd_per_hour:.4g}/h; it costs the same as {ref.name} at {break_even:,.0f}/s",
        throughput=ref.throughput,
        accuracy=ref.accuracy,
        usd_per_hour=price.usd_per_hour,
        usd_per_1k=cost,
        accuracy_change_pp=ref.accuracy_change_pp,
        basis=f"projected by price only; price: {price.source}",
        break_even_throughput=break_even,
    )
    s.step_saving_usd_per_1k = ref.usd_per_1k - cost
    s.step_saving_pct = 100.0 * s.step_saving_usd_per_1k / ref.usd_per_1k
    s.cumulative_saving_usd_per_1k = base.usd_per_1k - ref.usd_per_1k  # projections are not kept
    s.cumulative_saving_pct = 100.0 * s.cumulative_saving_usd_per_1k / base.usd_per_1k
    return s
