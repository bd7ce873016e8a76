"""GPU prices for ``check_budget_for_plan`` and ``compare_configurations``.

Prices: the cluster's own are the API's (``GET /v1/nodes``, ``POST /v1/budgets/check``); a GPU model
or capacity type the cluster does not have is priced from the price catalog — the bundled one that
``gpufleet prices`` shows and the server's recommendations use (the API has no prices endpoint) —
and every such figure is labelled a projection with its basis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.errors import InputError
from gpufleet.wire import NodeOut

if TYPE_CHECKING:
    from gpufleet.cost.catalog import PriceCatalog


def node_prices(nodes: Iterable[NodeOut], capacity_type: str) -> dict[str, float]:
    """$/GPU-hour per GPU model over the cluster's nodes of one capacity type: the dearest, as the API's
    estimates take it (:func:`gpufleet.cost.job_estimate.usd_per_gpu_hour`)."""
    out: dict[str, float] = {}
    for n in nodes:
        if n.gpu_count > 0 and n.capacity_type == capacity_type:
            out[n.gpu_model] = max(out.get(n.gpu_model, 0.0), n.hourly_price_usd / n.gpu_count)
    return out


def canonical_gpu(gpu_type: str, field: str) -> str:
    from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name

    canon = canonical_gpu_name(gpu_type)
    if canon is None:
        raise InputError(f"unknown GPU model '{gpu_type}' (known: {', '.join(GPU_MODELS)})", field=field)
    return canon


def catalog_price(catalog: PriceCatalog, model: str, spot: bool = False) -> tuple[float, str] | None:
    from gpufleet.errors import CatalogError
    from gpufleet.model.node import CapacityType

    try:
        q = catalog.quote(model, CapacityType.SPOT if spot else CapacityType.ON_DEMAND)
    except CatalogError:
        return None
    e = q.entry
    return q.usd_per_gpu_hour, f"catalog {e.provider} {e.region} {e.offering}" + (
        f" (priced as {e.gpu})" if q.proxy_for else ""
    )


def spot_ratio(catalog: PriceCatalog, model: str) -> float | None:
    od, spot = catalog_price(catalog, model), catalog_price(catalog, model, spot=True)
    return None if od is None or spot is None or od[0] <= 0 else spot[0] / od[0]
