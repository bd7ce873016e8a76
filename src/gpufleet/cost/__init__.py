"""Cost engine: the price catalog, the one pricing rule, the usage ledger, and the one path of money
(:func:`gpufleet.cost.spend.spend_report`).

Pure logic: no I/O besides reading a catalog file it is given, no wall clock.
"""

from gpufleet.cost.allocation import AGGREGATE_FIELDS, Allocation, CostLine
from gpufleet.cost.catalog import (
    FALLBACK_PROXIES,
    BillingScope,
    CatalogWarning,
    PriceCatalog,
    PriceEntry,
    PriceQuote,
    Provenance,
)
from gpufleet.cost.ledger import Ledger, LedgerError, NodeInterval, SegmentHandle, UsageSegment, gpu_share
from gpufleet.cost.pricesplit import DEFAULT_UNIT_PRICES, PriceSplit, UnitPrices, split_node_price
from gpufleet.cost.report import CostReport, Filters, ReportLine
from gpufleet.cost.spend import job_costs_usd, scope_spend_usd, spend_report

__all__ = [
    "AGGREGATE_FIELDS",
    "DEFAULT_UNIT_PRICES",
    "FALLBACK_PROXIES",
    "Allocation",
    "BillingScope",
    "CatalogWarning",
    "CostLine",
    "CostReport",
    "Filters",
    "Ledger",
    "LedgerError",
    "NodeInterval",
    "PriceCatalog",
    "PriceEntry",
    "PriceQuote",
    "PriceSplit",
    "Provenance",
    "ReportLine",
    "SegmentHandle",
    "UnitPrices",
    "UsageSegment",
    "gpu_share",
    "job_costs_usd",
    "scope_spend_usd",
    "spend_report",
    "split_node_price",
]
