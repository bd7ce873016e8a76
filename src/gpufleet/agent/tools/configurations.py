"""``compare_configurations``: a job's projected time and cost on other GPU models, counts,
batch sizes, spot and off-peak, scaled from one reference run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpufleet.agent.outputs import Configuration, ConfigurationComparison, ConfigurationEstimate, Reference
from gpufleet.agent.tools.common import duration, hours_text, milli, rounded, significant, usd
from gpufleet.agent.tools.pricing import canonical_gpu, catalog_price, node_prices, spot_ratio
from gpufleet.errors import InputError

if TYPE_CHECKING:
    from gpufleet.cost.catalog import PriceCatalog
    from gpufleet.sdk import Client

MAX_BATCH_UTIL_PCT = 90.0  # as the batch_size recommendation: a bigger batch raises utilization up to this


def parallel_speedup(gpus: int, efficiency: float) -> float:
    """Data-parallel speed-up on ``gpus`` GPUs over one: ``n × e^log2(n)`` (each doubling keeps a
    fraction ``e`` of the ideal gain)."""
    return gpus * efficiency ** math.log2(gpus) if gpus > 1 else 1.0


def compare_configurations(
    client: Client,
    catalog: PriceCatalog,
    configs: Sequence[Configuration],
    *,
    job: str | None = None,
    runtime_hours: float | None = None,
    throughput_per_s: float | None = None,
    total_work: float | None = None,
    reference_gpu_type: str | None = None,
    reference_gpus: int | None = None,
    reference_batch_size: int | None = None,
    measured_util_pct: float | None = None,
    scaling_efficiency: float = 0.9,
    spot_interruptions_per_hour: float = 0.01,
    checkpoint_interval_h: float = 0.5,
    restart_h: float = 0.1,
    off_peak_multiplier: float | None = None,
) -> ConfigurationComparison:
    """Projected time and cost of a job on each configuration, from one reference run: a job's
    measured run time (``job``) or a stated one (``runtime_hours``, or ``total_work`` at
    ``throughput_per_s``) on ``reference_gpus`` × ``reference_gpu_type``.

    T = T_ref × (TFLOPS_ref / TFLOPS) × (S(n_ref) / S(n)) × (u_ref / u) × spot overhead, with S the
    :func:`parallel_speedup`, u the utilization a batch size gives (only with ``measured_util_pct``)
    and the spot overhead ``1 + λ (checkpoint/2 + restart)``. Cost = n × T × $/GPU-hour (the cluster's
    own price for a model it has, else the catalog's; off-peak × the multiplier)."""
    from gpufleet.cost.recommend import DENSE_TFLOPS

    if not configs:
        raise InputError("give at least one configuration", field="configs")
    if not 0 < scaling_efficiency <= 1:
        raise InputError("must be in (0, 1]", field="scaling_efficiency")
    assumptions: list[str] = []
    nodes = client.nodes()
    od_prices, spot_prices = node_prices(nodes, "on-demand"), node_prices(nodes, "spot")

    # -- the reference run
    if job is not None:
        j = client.get(job)
        if j.gpus < 1 or milli(j) < 1000:
            raise InputError(
                f"job {job} asks for a fraction of a GPU; give the reference as runtime_hours", field="job"
            )
        if j.terminal:
            run_s = j.run_seconds or (
                (j.ended_at - j.started_at).total_seconds() if j.ended_at and j.started_at else None
            )
            source = f"job {job}'s measured run time"
        else:
            f = client.forecast(job)
            elapsed = j.run_seconds or 0.0
            run_s = elapsed + f.remaining_s if f.remaining_s is not None else None
            source = f"job {job}: {duration(elapsed)} run so far + the forecast's {duration(f.remaining_s)} left"
        if not run_s:
            raise InputError(f"job {job} has no run time to start from (not started?)", field="job")
        ref_hours = run_s / 3600.0
        placed = {p.node for p in j.placement}
        node_model = next((n.gpu_model for n in nodes if n.name in placed), None)
        ref_type = reference_gpu_type or node_model or (j.gpu_types[0] if j.gpu_types else None)
        ref_gpus = reference_gpus or j.gpus * max(1, j.pods)
        if ref_type is None:
            raise InputError(f"job {job}'s GPU model is unknown; give reference_gpu_type", field="reference_gpu_type")
    else:
        if runtime_hours is None and (throughput_per_s is None or total_work is None):
            raise InputError("give job, runtime_hours, or total_work with throughput_per_s", field="runtime_hours")
        if reference_gpu_type is None or reference_gpus is None:
            raise InputError("a stated runtime needs reference_gpu_type and reference_gpus", field="reference_gpu_type")
        if runtime_hours is not None:
            ref_hours, source = runtime_hours, f"stated runtime {hours_text(runtime_hours)}"
        else:
            assert throughput_per_s is not None and total_work is not None
            if throughput_per_s <= 0:
                raise InputError("must be > 0", field="throughput_per_s")
            ref_hours = total_work / throughput_per_s / 3600.0
            source = f"stated throughput: {total_work:g} units at {throughput_per_s:g}/s"
        ref_type, ref_gpus = reference_gpu_type, reference_gpus
    if ref_hours <= 0:
        raise InputError("the reference runtime must be > 0", field="runtime_hours")
    ref_type = canonical_gpu(ref_type, "reference_gpu_type")
    tf_ref = DENSE_TFLOPS.get(ref_type)
    if tf_ref is None:
        raise InputError(f"no throughput figure for {ref_type}", field="reference_gpu_type")

    # -- prices
    multiplier = off_peak_multiplier
    if multiplier is None and any(c.off_peak for c in configs):
        seen = [r.evidence.get("multiplier") for r in client.recommendations("30d") if r.kind == "off_peak"]
        found = next((float(m) for m in seen if isinstance(m, int | float)), None)
        if found is not None:
            multiplier = found
            assumptions.append(f"off-peak: × {found:g}, the server's pricing rule (from its off_peak recommendations)")
        else:
            multiplier = 1.0
            assumptions.append(
                "off-peak: the API does not publish the pricing rules' off-peak price; priced as on-demand "
                "(pass off_peak_multiplier)"
            )
    elif multiplier is not None:
        assumptions.append(f"off-peak: × {multiplier:g} (given)")

    def price(model: str, spot: bool) -> tuple[float, str]:
        own = (spot_prices if spot else od_prices).get(model)
        if own is not None:
            return own, f"the cluster's {model} {'spot' if spot else 'on-demand'} nodes"
        if spot and model in od_prices:
            ratio = spot_ratio(catalog, model)
            if ratio is not None:
                return od_prices[model] * ratio, f"the cluster's {model} price × the catalog's spot ratio {ratio:.3f}"
        quoted = catalog_price(catalog, model, spot)
        if quoted is None:
            raise InputError(f"no {'spot' if spot else 'on-demand'} price for {model} in the catalog", field="gpu_type")
        return quoted

    ref_price, _ = price(ref_type, False)
    ref_cost = ref_gpus * ref_hours * ref_price
    spot_factor = 1.0 + spot_interruptions_per_hour * (checkpoint_interval_h / 2.0 + restart_h)
    estimates: list[ConfigurationEstimate] = []
    for i, c in enumerate(configs):
        model = canonical_gpu(c.gpu_type, f"configs[{i}].gpu_type")
        tf = DENSE_TFLOPS.get(model)
        if tf is None:
            raise InputError(f"no throughput figure for {model}", field=f"configs[{i}].gpu_type")
        notes: list[str] = []
        hours = (
            ref_hours
            * (tf_ref / tf)
            * (parallel_speedup(ref_gpus, scaling_efficiency) / parallel_speedup(c.gpus, scaling_efficiency))
        )
        if c.batch_size is not None and reference_batch_size is not None and measured_util_pct is not None:
            u_new = measured_util_pct * c.batch_size / reference_batch_size
            u_new = min(max(u_new, 1.0), max(MAX_BATCH_UTIL_PCT, measured_util_pct))
            hours *= measured_util_pct / u_new
            notes.append(
                f"batch {c.batch_size} vs {reference_batch_size}: utilization {measured_util_pct:.0f} → {u_new:.0f} %"
            )
        elif c.batch_size is not None and c.batch_size != reference_batch_size:
            notes.append("batch size not priced: needs reference_batch_size and measured_util_pct")
        if c.spot:
            hours *= spot_factor
        p, src = price(model, c.spot)
        if c.off_peak:
            p *= multiplier if multiplier is not None else 1.0
            src += " × off-peak"
        cost = c.gpus * hours * p
        estimates.append(
            ConfigurationEstimate(
                gpu_type=model,
                gpus=c.gpus,
                batch_size=c.batch_size,
                spot=c.spot,
                off_peak=c.off_peak,
                hours=significant(hours),
                usd_per_gpu_hour=rounded(p),
                cost_usd=rounded(cost),
                price_source=src,
                vs_reference_pct=rounded((cost / ref_cost - 1.0) * 100.0, 2) if ref_cost > 0 else None,
                notes=notes,
            )
        )
    estimates.sort(key=lambda e: (e.cost_usd, e.hours))
    assumptions[:0] = [
        "projections, not measurements: every configuration is scaled from one reference run",
        "GPU type: compute-bound, runtime ∝ 1 / dense FP16 TFLOPS (NVIDIA datasheets); memory not checked",
        f"GPU count: data-parallel, speed-up n × {scaling_efficiency:g}^log2(n) (each doubling keeps "
        f"{scaling_efficiency:.0%} of the ideal gain)",
        "batch size: changes runtime only with measured_util_pct (utilization ∝ batch, up to 90 %)",
        f"spot: {spot_interruptions_per_hour:g} interruptions per hour, each losing half a "
        f"{checkpoint_interval_h:g} h checkpoint interval plus a {restart_h:g} h restart (runtime × {spot_factor:.4f})",
        "prices: the cluster's own nodes where it has the model, else the bundled price catalog",
    ]

    def cfg(e: ConfigurationEstimate) -> str:
        return f"{e.gpus}× {e.gpu_type}" + (" spot" if e.spot else "") + (" off-peak" if e.off_peak else "")

    cheapest, fastest = estimates[0], min(estimates, key=lambda e: (e.hours, e.cost_usd))
    pct = f" ({cheapest.vs_reference_pct:+.0f} % vs the reference)" if cheapest.vs_reference_pct is not None else ""
    summary = (
        f"Reference {ref_gpus}× {ref_type}, {hours_text(ref_hours)} ({source}) ≈ {usd(ref_cost)}. Cheapest: "
        f"{cfg(cheapest)}, about {hours_text(cheapest.hours)} and {usd(cheapest.cost_usd)}{pct}; fastest: "
        f"{cfg(fastest)}, about {hours_text(fastest.hours)} and {usd(fastest.cost_usd)}. Projections: see assumptions."
    )
    return ConfigurationComparison(
        summary=summary,
        reference=Reference(
            gpu_type=ref_type,
            gpus=ref_gpus,
            batch_size=reference_batch_size,
            hours=significant(ref_hours),
            source=source,
            cost_usd=rounded(ref_cost),
        ),
        estimates=estimates,
        assumptions=assumptions,
    )
