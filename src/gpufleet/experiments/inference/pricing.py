"""What a device costs per hour, and so what 1,000 inferences cost.

- **A GPU**: the catalog's on-demand $ per GPU-hour for its model
  (:meth:`gpufleet.cost.catalog.PriceCatalog.quote`: the cheapest offering whose price covers the
  whole node, host included). A model the catalog does not price (e.g. H200 in the bundled one)
  stays unpriced unless a price is given (``--usd-per-hour``).
- **The CPU**: priced per vCPU used (the intra-op threads a configuration runs, each pinned to its
  own core). The bundled GPU catalog has no CPU-only rows, so the price is one documented constant,
  :data:`CPU_USD_PER_VCPU_HOUR`: AWS us-east-1 on-demand for the general-purpose m6i family,
  $0.384/h for m6i.2xlarge's 8 vCPU (and $0.096/h for m6i.large's 2) = **$0.048 per vCPU-hour**,
  read from the same public source and commit as the GPU catalog (:data:`CPU_PRICE_SOURCE`). An
  AWS vCPU is one hyperthread; the vCPUs of the machine measured here are its VM's vCPUs.

Cost of 1,000 inferences = $ per hour × hours per 1,000 inferences
= ``usd_per_hour / 3600 / throughput × 1000`` (:func:`usd_per_1k`): the device is billed for the
wall time of the run whether busy or not, so a configuration that serves more per second costs less
per inference.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.errors import CatalogError

CPU_USD_PER_VCPU_HOUR = 0.048
CPU_PRICE_SOURCE = (
    "AWS us-east-1 on-demand m6i: m6i.2xlarge $0.384/h / 8 vCPU = $0.048 per vCPU-hour (m6i.large $0.096/h / 2); "
    "skypilot-catalog catalogs/v7/aws/vms.csv @001367d2, the source and commit of the bundled GPU catalog"
)


@dataclass(frozen=True, slots=True)
class DevicePrice:
    """$ per hour of what one configuration holds (``unit``), or None with ``source`` saying why."""

    usd_per_hour: float | None
    unit: str  # "1 vCPU", "2 vCPU", "1 GPU (T4)"
    source: str

    def times(self, n: int, unit: str) -> DevicePrice:
        """The price of ``n`` of these (e.g. N replicas)."""
        usd = None if self.usd_per_hour is None else self.usd_per_hour * n
        return DevicePrice(usd, unit, self.source)


def cpu_price(vcpus: int, usd_per_vcpu_hour: float | None = None) -> DevicePrice:
    if usd_per_vcpu_hour is None:
        return DevicePrice(vcpus * CPU_USD_PER_VCPU_HOUR, f"{vcpus} vCPU", CPU_PRICE_SOURCE)
    return DevicePrice(vcpus * usd_per_vcpu_hour, f"{vcpus} vCPU", f"given: ${usd_per_vcpu_hour}/vCPU-hour")


def gpu_price(
    catalog: PriceCatalog | None, gpu_model: str | None, usd_per_gpu_hour: float | None = None
) -> DevicePrice:
    """$ per GPU-hour of ``gpu_model`` from the catalog (or the given price)."""
    unit = f"1 GPU ({gpu_model or 'unknown model'})"
    if usd_per_gpu_hour is not None:
        return DevicePrice(usd_per_gpu_hour, unit, f"given: ${usd_per_gpu_hour}/GPU-hour")
    if catalog is None or not gpu_model:
        return DevicePrice(None, unit, "unpriced: no catalog or unknown GPU model")
    try:
        q = catalog.quote(gpu_model)
    except CatalogError as exc:
        return DevicePrice(None, unit, f"unpriced: {exc}")
    e = q.entry
    proxy = f" (priced as {e.gpu}: {q.assumption})" if q.proxy_for else ""
    source = (
        f"catalog on-demand {e.provider} {e.region} {e.offering}: ${e.on_demand_usd_per_hour}/h / {e.gpu_count} GPU"
        f"{proxy}; {e.source}"
    )
    return DevicePrice(q.usd_per_gpu_hour, unit, source)


def usd_per_1k(usd_per_hour: float | None, throughput_per_s: float) -> float | None:
    """$ per 1,000 inferences at ``throughput_per_s`` on a device billed ``usd_per_hour``."""
    if usd_per_hour is None or throughput_per_s <= 0:
        return None
    return usd_per_hour / 3600.0 / throughput_per_s * 1000.0
