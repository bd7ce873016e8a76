"""Cost engine: the price catalog, the one pricing rule, the usage ledger and attribution.

Pure logic: no I/O besides reading a catalog file it is given, no wall clock.
"""

from gpufleet.cost.catalog import (
    FALLBACK_PROXIES,
    BillingScope,
    CatalogWarning,
    PriceCatalog,
    PriceEntry,
    PriceQuote,
    Provenance,
)
from gpufleet.cost.ledger import (
    AGGREGATE_FIELDS,
    DEFAULT_UNIT_PRICES,
    Allocation,
    CostLine,
    Ledger,
    LedgerError,
    NodeInterval,
    PriceSplit,
    SegmentHandle,
    UnitPrices,
    UsageSegment,
    allocate,
    gpu_share,
    split_node_price,
)

__all__ = [
    "AGGREGATE_FIELDS",
    "DEFAULT_UNIT_PRICES",
    "FALLBACK_PROXIES",
    "Allocation",
    "BillingScope",
    "CatalogWarning",
    "CostLine",
    "Ledger",
    "LedgerError",
    "NodeInterval",
    "PriceCatalog",
    "PriceEntry",
    "PriceQuote",
    "PriceSplit",
    "Provenance",
    "SegmentHandle",
    "UnitPrices",
    "UsageSegment",
    "allocate",
    "gpu_share",
    "split_node_price",
]
