"""The one pricing rule: a node's hourly price split over its GPUs, CPU and memory.

:func:`split_node_price` gives the exact unit prices (per GPU-, vCPU- and GiB-hour) that the
allocation (:mod:`gpufleet.cost.allocation`) charges each job for what it holds of a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from gpufleet.errors import InputError
from gpufleet.model.gpu import MILLI
from gpufleet.model.node import CapacityType

from .ledger import MIB_PER_GIB, LedgerError, exact_price


@dataclass(frozen=True, slots=True)
class UnitPrices:
    """CPU and memory unit prices used to split a node's price.

    Defaults are OpenCost's ``configs/default.json`` ("Default prices based on GCP us-central1"):
    CPU 0.031611 $/vCPU-hour, RAM 0.004237 $/GiB-hour, spotCPU 0.006655, spotRAM 0.000892
    (https://github.com/opencost/opencost/blob/develop/configs/default.json, shown on
    https://www.opencost.io/docs/configuration/on-prem). Spot nodes use the spot rates; reserved
    nodes the on-demand ones.
    """

    cpu_usd_per_vcpu_hour: Fraction = Fraction("0.031611")
    memory_usd_per_gib_hour: Fraction = Fraction("0.004237")
    spot_cpu_usd_per_vcpu_hour: Fraction = Fraction("0.006655")
    spot_memory_usd_per_gib_hour: Fraction = Fraction("0.000892")

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            object.__setattr__(self, name, exact_price(value, name))
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {value}", field=name)

    def for_capacity(self, capacity_type: CapacityType) -> tuple[Fraction, Fraction]:
        if capacity_type is CapacityType.SPOT:
            return self.spot_cpu_usd_per_vcpu_hour, self.spot_memory_usd_per_gib_hour
        return self.cpu_usd_per_vcpu_hour, self.memory_usd_per_gib_hour


DEFAULT_UNIT_PRICES = UnitPrices()


@dataclass(frozen=True, slots=True)
class PriceSplit:
    """A node's hourly price split into unit prices (exact).

    Invariant: ``usd_per_gpu_hour * gpus + usd_per_vcpu_hour * vcpus + usd_per_gib_hour * gib``
    equals the node's hourly price exactly.
    """

    usd_per_gpu_hour: Fraction
    usd_per_vcpu_hour: Fraction
    usd_per_gib_hour: Fraction


def split_node_price(
    hourly_usd: Fraction | float | int | str,
    *,
    gpu_count: int,
    cpu_milli: int,
    memory_mib: int,
    capacity_type: CapacityType = CapacityType.ON_DEMAND,
    unit_prices: UnitPrices = DEFAULT_UNIT_PRICES,
) -> PriceSplit:
    """THE pricing rule: split a node's hourly price over its GPUs, CPU and memory.

    - A GPU node: CPU and memory at ``unit_prices``, scaled down together if they would exceed the
      node's price (so they never do); the remainder split evenly over the node's GPUs.
    - A CPU-only node: the whole price split over CPU and memory in proportion to their unit-price
      value (if both unit prices are zero: over whichever of CPU or memory the node has, CPU first).
    - A node with no GPUs, CPU or memory cannot be priced: :class:`LedgerError`.
    """
    price = exact_price(hourly_usd, "hourly_usd")
    if price < 0:
        raise LedgerError(f"a node's price must be >= 0, got {hourly_usd}", field="hourly_usd")
    vcpus = Fraction(cpu_milli, MILLI)
    gib = Fraction(memory_mib, MIB_PER_GIB)
    cpu_rate, mem_rate = unit_prices.for_capacity(capacity_type)
    host = cpu_rate * vcpus + mem_rate * gib  # $/hour of CPU and memory at unit prices
    if gpu_count > 0:
        scale = min(Fraction(1), price / host) if host > 0 else Fraction(1)
        per_gpu = (price - host * scale) / gpu_count
        return PriceSplit(per_gpu, cpu_rate * scale, mem_rate * scale)
    if host > 0:
        scale = price / host
        return PriceSplit(Fraction(0), cpu_rate * scale, mem_rate * scale)
    if vcpus > 0:
        return PriceSplit(Fraction(0), price / vcpus, Fraction(0))
    if gib > 0:
        return PriceSplit(Fraction(0), Fraction(0), price / gib)
    raise LedgerError("a node with no GPUs, CPU or memory cannot be priced", field="gpu_count")
