"""Plans: ``check_budget_for_plan`` (would a run fit the team's budgets, and what would fit) and
``forecast_job_cost`` (what a job will cost)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.agent.outputs import BudgetLine, BudgetPlanCheck, JobCostForecast, PlanKind, PlanOption
from gpufleet.agent.tools.common import duration, hours_text, rounded, significant, usd
from gpufleet.agent.tools.pricing import canonical_gpu, catalog_price, node_prices, spot_ratio
from gpufleet.errors import InputError

if TYPE_CHECKING:
    from gpufleet.cost.catalog import PriceCatalog
    from gpufleet.sdk import Client


# --------------------------------------------------------------------------------- check_budget_for_plan


def check_budget_for_plan(
    client: Client,
    catalog: PriceCatalog,
    team: str | None,
    gpus: int,
    hours: float,
    gpu_type: str | None = None,
    spot: bool = False,
    min_gpu_memory_gib: float = 0.0,
) -> BudgetPlanCheck:
    """Would ``gpus`` GPUs for ``hours`` fit the team's budgets, and what would fit?

    The forecast and each budget's remainder are ``POST /v1/budgets/check`` (a job that is not
    submitted). Options: fewer GPUs and a shorter run (when over: the largest that fits, re-checked
    with the endpoint), a cheaper GPU type (runtime scaled by dense FP16 TFLOPS — a compute-bound
    assumption; the cluster's own price when it has that model, the catalog's otherwise) and spot
    (the catalog's spot/on-demand ratio for the model; lost work on interruptions not priced)."""
    from gpufleet.cost.recommend import DENSE_TFLOPS
    from gpufleet.model.gpu import GPU_MODELS

    if gpus < 1 or hours <= 0:
        raise InputError("gpus must be >= 1 and hours > 0", field="gpus" if gpus < 1 else "hours")
    model = canonical_gpu(gpu_type, "gpu_type") if gpu_type else None

    def check(g: int, h: float, types: Sequence[str]) -> Any:
        return client.check_budget(
            command=["true"],
            name="mcp-plan",
            team=team,
            gpus=g,
            gpu_types=list(types),
            estimated_runtime_s=h * 3600.0,
            preemptible=spot,
        )

    base = check(gpus, hours, [model] if model else [])
    price = base.usd_per_gpu_hour
    nodes = client.nodes()
    od_prices, spot_prices = node_prices(nodes, "on-demand"), node_prices(nodes, "spot")
    if model is None:  # the model whose nodes set the API's price (the dearest the job may use)
        model = next((m for m, p in sorted(od_prices.items()) if abs(p - price) < 1e-6), None)
    lines = [
        BudgetLine(
            name=b.name,
            scope=b.scope,
            action=b.action,
            limit_usd=b.limit_usd,
            committed_usd=b.committed_usd,
            remaining_usd=b.remaining_usd,
            fits=b.fits,
        )
        for b in base.budgets
    ]
    tight = min(base.budgets, key=lambda b: b.remaining_usd - base.job_cost_usd, default=None)
    rem = tight.remaining_usd if tight is not None else None
    forecast = base.job_cost_usd
    over = rounded(forecast - rem) if rem is not None and forecast > rem else None
    notes: list[str] = []

    def option(
        kind: PlanKind,
        description: str,
        g: int,
        m: str | None,
        h: float,
        on_spot: bool,
        cost: float,
        projection: bool,
        basis: str,
    ) -> PlanOption:
        return PlanOption(
            kind=kind,
            description=description,
            gpus=g,
            gpu_type=m,
            hours=significant(h),
            spot=on_spot,
            cost_usd=rounded(cost),
            saving_usd=rounded(forecast - cost),
            fits=None if rem is None else cost <= rem + 1e-9,
            projection=projection,
            basis=basis,
        )

    options: list[PlanOption] = []
    same_type = [model] if model else []
    if over is not None and rem is not None and price > 0:
        g = min(gpus - 1, math.floor(rem / (price * hours) + 1e-9))
        if g >= 1:
            what = (
                f"{_gpus(g)} instead of {gpus} for the same {hours_text(hours)}: {g}/{gpus} of the work in that time "
                f"(the same work on {_gpus(g)} takes {gpus / g:.2g}× as long and costs the same)"
            )
            cost = check(g, hours, same_type).job_cost_usd
            options.append(option("fewer_gpus", what, g, model, hours, spot, cost, False, "POST /v1/budgets/check"))
        h2 = math.floor(rem / (price * gpus) * 100) / 100
        if 0 < h2 < hours:
            what = (
                f"stop after {hours_text(h2)} instead of {hours_text(hours)} (checkpoint; go on when the budget's "
                f"period renews): {h2 / hours:.0%} of the work"
            )
            cost = check(gpus, h2, same_type).job_cost_usd
            options.append(option("shorter", what, gpus, model, h2, spot, cost, False, "POST /v1/budgets/check"))
    tf_cur = DENSE_TFLOPS.get(model) if model else None
    if model is not None and tf_cur is None:
        notes.append(f"no throughput figure for {model}: cheaper GPU types are not compared")
    cheaper: list[PlanOption] = []
    for other, tf in DENSE_TFLOPS.items():
        if tf_cur is None or other == model or GPU_MODELS[other].memory_gib < min_gpu_memory_gib:
            continue
        h_o = hours * tf_cur / tf
        if other in od_prices:
            cost = check(gpus, h_o, [other]).job_cost_usd
            basis, missing = f"POST /v1/budgets/check on the cluster's {other} nodes", ""
        else:
            quoted = catalog_price(catalog, other)
            if quoted is None:
                continue
            cost, basis = gpus * h_o * quoted[0], quoted[1]
            missing = f"; the cluster has no {other} node"
        if cost >= forecast - 0.005:
            continue
        what = (
            f"{gpus}× {other} for about {hours_text(h_o)} ({tf:g} vs {tf_cur:g} dense TFLOPS, "
            f"{GPU_MODELS[other].memory_gib:g} GiB each{missing})"
        )
        basis += "; runtime scaled by dense FP16 TFLOPS (compute-bound)"
        cheaper.append(option("cheaper_gpu", what, gpus, other, h_o, spot, cost, True, basis))
    cheaper.sort(key=lambda o: o.cost_usd)
    options.extend(cheaper[:3])
    if min_gpu_memory_gib <= 0 and cheaper:
        notes.append("GPU memory not checked: pass min_gpu_memory_gib to leave out models too small for the job")

    spot_forecast = None
    if model is not None:
        ratio = spot_prices[model] / od_prices[model] if model in spot_prices and od_prices.get(model) else None
        basis = f"the cluster's {model} spot nodes" if ratio is not None else "the catalog's spot/on-demand ratio"
        if ratio is None:
            ratio = spot_ratio(catalog, model)
        if ratio is not None and not spot:
            where = "" if any(n.capacity_type == "spot" for n in nodes) else "; the cluster has no spot node now"
            what = (
                f"on spot capacity ({ratio:.0%} of on-demand): the job must be preemptible and checkpoint; lost work "
                f"on interruptions is not priced{where}"
            )
            basis = f"forecast × {ratio:.3f} ({basis} for {model})"
            options.append(option("spot", what, gpus, model, hours, True, forecast * ratio, True, basis))
        elif ratio is not None:
            spot_forecast = rounded(forecast * ratio)
            notes.append(
                f"on spot it should cost about {usd(spot_forecast)}; budgets judge the on-demand estimate "
                f"{usd(forecast)} at submit"
            )
    options.sort(key=lambda o: o.cost_usd)

    plan = f"{gpus}× {model or 'GPU'} for {hours_text(hours)} at {usd(price)}/GPU-h"
    if base.price_basis != "cluster":
        plan += f" ({base.price_basis})"
    if tight is None:
        summary = f"Forecast {usd(forecast)} ({plan}); no budget this token can see covers it."
    elif over is not None:
        assert rem is not None
        left = f"{usd(rem)} left of {usd(tight.limit_usd)}" if rem >= 0 else f"already {usd(-rem)} over"
        summary = f"Forecast {usd(forecast)} ({plan}) exceeds budget '{tight.name}' ({left}) by {usd(over)}"
        summary += " — a block budget would refuse the submit." if base.blocked else "."
    else:
        summary = (
            f"Forecast {usd(forecast)} ({plan}) fits budget '{tight.name}': {usd(rem or 0.0)} left, "
            f"{usd((rem or 0.0) - forecast)} after it."
        )
    if base.submit_refused is not None:  # said first: no budget matters if the submit is refused
        summary = f"A real submit would be refused ({base.submit_refused}). " + summary
    if options:
        summary += (
            " Options: "
            + "; ".join(
                f"{_short(o)}: {usd(o.cost_usd)}"
                + (" (fits)" if o.fits else "")
                + (" [projection]" if o.projection else "")
                for o in options
            )
            + "."
        )
    return BudgetPlanCheck(
        summary=summary,
        team=team if team is not None else client.whoami().team,
        gpus=gpus,
        gpu_type=model,
        hours=hours,
        spot=spot,
        forecast_usd=forecast,
        usd_per_gpu_hour=price,
        price_basis=base.price_basis,
        submit_refused=base.submit_refused,
        spot_forecast_usd=spot_forecast,
        fits=base.fits,
        blocked=base.blocked,
        tightest_budget=tight.name if tight else None,
        remaining_usd=rem,
        over_by_usd=over,
        budgets=lines,
        options=options,
        notes=notes,
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _short(o: PlanOption) -> str:
    if o.kind == "fewer_gpus":
        return _gpus(o.gpus)
    if o.kind == "shorter":
        return f"stop after {hours_text(o.hours)}"
    if o.kind == "cheaper_gpu":
        return f"{o.gpus}× {o.gpu_type} (~{hours_text(o.hours)})"
    return "spot"


# ------------------------------------------------------------------------------------- forecast_job_cost


def forecast_job_cost(client: Client, job: str) -> JobCostForecast:
    """``GET /v1/jobs/{id}/forecast`` with the job's name and state, in a sentence."""
    j = client.get(job)
    f = client.forecast(job)
    label = f"Job {j.id}" + (f" ({j.name})" if j.name else "")
    if j.terminal:
        summary = f"{label} is {j.state}: it cost {usd(f.spent_usd)}; nothing more to spend."
    elif f.remaining_usd is None:
        summary = (
            f"{label} is {j.state} and has spent {usd(f.spent_usd)} at {usd(f.cost_rate_usd_per_hour)}/h; its "
            f"remaining cost is unknown: {f.explanation}"
        )
    else:
        hi = usd(f.remaining_usd_high) if f.remaining_usd_high is not None else "no upper bound"
        lo = usd(f.remaining_usd_low or 0.0)
        summary = (
            f"{label} is {j.state} and has spent {usd(f.spent_usd)} at {usd(f.cost_rate_usd_per_hour)}/h; forecast "
            f"{usd(f.remaining_usd)} more over about {duration(f.remaining_s)} ({f.level:.0%} interval {lo} to "
            f"{hi}), about {usd(f.spent_usd + f.remaining_usd)} in all (method: {f.method})."
        )
    return JobCostForecast(summary=summary, name=j.name, team=j.team, state=j.state, **f.model_dump())
