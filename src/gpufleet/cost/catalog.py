"""The GPU price catalog: public prices with provenance, validated on load.

A catalog is a CSV with one row per offering (an instance type, or a GPU-only SKU)::

    provider,region,offering,gpu,gpu_count,gpu_memory_gib,on_demand_usd_per_hour,
    spot_usd_per_hour_min,spot_usd_per_hour_max,billing_scope,source

Prices are USD per hour for the whole offering (all ``gpu_count`` GPUs). ``billing_scope`` is
``instance`` (the price includes the host's CPU, memory and disk) or ``gpu_only`` (GCP style: the
host VM is billed separately, so the price is the GPUs' alone). Spot ranges span zones.

Validation (each problem names the file, line and field). Errors stop the load; *repairs* are
applied, recorded on :attr:`PriceCatalog.warnings`, and become errors with ``strict=True``:

==========================================  =======================================================
problem of the source                       handling
==========================================  =======================================================
unknown GPU type                            error (``canonical_gpu_name`` must know it)
on-demand price missing, ≤ 0, not a number  error
GPU count not an integer, ≤ 0 or > 16       error: implausible (no instance has more than 16 GPUs;
                                            a fraction is a partial-GPU VM, a large number is
                                            usually the vCPU count in the wrong column)
GPU count 1..16 but not a power of two      repair-free warning (kept; worth a look)
GPU memory disagrees with the GPU model     error (the row names the wrong model)
both spot cells empty                       not a problem: no spot price known for the offering
                                            (never read as $0); spot look-ups skip it
one spot cell empty                         repair: the other bound is used for both; warning
spot equal to on-demand                     repair: the source copies on-demand into the spot
                                            column when it has no spot price; spot treated as
                                            unknown; warning
spot max above on-demand (min below)        repair: max clamped to on-demand (spot above
                                            on-demand in some zones; nobody buys spot there);
                                            warning
spot min above on-demand                    error (the whole range above on-demand is not a spot
                                            market, it is a wrong column or unit)
spot ≤ 0, min > max                         error
unknown billing scope, empty source         error
duplicate (provider, region, offering)      error
==========================================  =======================================================

Look-up rules (documented here once):

- **$ per GPU-hour** of an offering is its hourly price / ``gpu_count``.
- **Spot estimate**: the catalog's ``spot_estimate`` picks ``"min"``, ``"mid"`` (default) or
  ``"max"`` of the zone range. The default is the mid-point because the minimum is the cheapest
  zone's price, which a scheduler does not reliably land in; the mid-point is a neutral estimate.
- **Reserved** capacity has no public price in the catalog: it is priced at on-demand (an upper
  bound). A reserved node should carry its own ``hourly_price_usd``.
- **No provider given**: the cheapest matching offering, preferring ``instance`` rows (whose price
  covers the whole node) over ``gpu_only`` rows (which leave out the host and would under-price a
  node). ``gpu_only`` rows are used only when they are all that matches (e.g. ``provider="gcp"``).
- **GPU models with no row** (openb's G1/G2/G3, P100, V100-32GB) are priced as a proxy model from
  :data:`FALLBACK_PROXIES`; the quote and the provenance say so.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from gpufleet.errors import CatalogError
from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name
from gpufleet.model.node import CapacityType, Node, NodePool

if TYPE_CHECKING:
    from gpufleet.io.catalog import CatalogSource

COLUMNS: tuple[str, ...] = (
    "provider",
    "region",
    "offering",
    "gpu",
    "gpu_count",
    "gpu_memory_gib",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour_min",
    "spot_usd_per_hour_max",
    "billing_scope",
    "source",
)

BUNDLED_CATALOG = "data/prices/gpu_prices.csv"  # inside the gpufleet package
MAX_PLAUSIBLE_GPUS = 16

SpotEstimate = Literal["min", "mid", "max"]


class BillingScope(StrEnum):
    INSTANCE = "instance"  # the price covers the whole node (GPUs + host)
    GPU_ONLY = "gpu_only"  # the host VM is billed separately


@dataclass(frozen=True, slots=True)
class FallbackProxy:
    """A GPU model the catalog has no row for, priced as ``proxy`` (an assumption)."""

    gpu: str
    proxy: str
    reason: str


# openb's GPU models that the public catalog does not sell. Each is priced as the nearest model
# that it does; these are assumptions, reported in the provenance and on every quote that uses one.
FALLBACK_PROXIES: dict[str, FallbackProxy] = {
    p.gpu: p
    for p in (
        FallbackProxy(
            "P100",
            "V100-16GB",
            "P100 (16 GiB HBM2, Pascal) is priced as its successor V100-16GB, the nearest data-centre "
            "model in the catalog; an upper bound (clouds list P100 below V100)",
        ),
        FallbackProxy(
            "V100-32GB",
            "V100-16GB",
            "V100-32GB is the same chip as V100-16GB with twice the memory; priced as V100-16GB (a lower bound)",
        ),
        FallbackProxy(
            "G1",
            "T4",
            "undisclosed openb model; priced as a T4, the trace's most common disclosed model",
        ),
        FallbackProxy(
            "G2",
            "T4",
            "undisclosed openb model; priced as a T4, the trace's most common disclosed model",
        ),
        FallbackProxy(
            "G3",
            "T4",
            "undisclosed openb model; priced as a T4, the trace's most common disclosed model",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class CatalogWarning:
    """A problem of the source that the loader repaired (or only flagged)."""

    source: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}, field '{self.field}': {self.message}"


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """One offering. Prices are USD per hour for the whole offering (all its GPUs)."""

    provider: str
    region: str
    offering: str
    gpu: str  # canonical model name
    gpu_count: int
    gpu_memory_gib: float
    on_demand_usd_per_hour: float
    spot_usd_per_hour_min: float | None  # None: no spot price known
    spot_usd_per_hour_max: float | None
    billing_scope: BillingScope
    source: str  # the row's own provenance (upstream file and commit)
    line: int  # line in the catalog file

    @property
    def has_spot(self) -> bool:
        return self.spot_usd_per_hour_min is not None

    def hourly_usd(self, capacity_type: CapacityType, spot_estimate: SpotEstimate = "mid") -> float | None:
        """Price of the whole offering per hour; None when it has no spot price and spot is asked."""
        if capacity_type is not CapacityType.SPOT:
            return self.on_demand_usd_per_hour  # reserved: on-demand as an upper bound
        lo, hi = self.spot_usd_per_hour_min, self.spot_usd_per_hour_max
        if lo is None or hi is None:
            return None
        if spot_estimate == "min":
            return lo
        if spot_estimate == "max":
            return hi
        return (lo + hi) / 2

    def gpu_hour_usd(self, capacity_type: CapacityType, spot_estimate: SpotEstimate = "mid") -> float | None:
        """USD per GPU-hour (hourly price / GPU count); None as for :meth:`hourly_usd`."""
        hourly = self.hourly_usd(capacity_type, spot_estimate)
        return None if hourly is None else hourly / self.gpu_count


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a catalog's prices come from."""

    path: str  # file the catalog was read from (or the stream's name)
    sha256: str  # of the file's bytes
    sources: tuple[str, ...]  # distinct ``source`` values of its rows, in file order
    assumptions: tuple[str, ...]  # prices that are not in the file (fallback proxies)


@dataclass(frozen=True, slots=True)
class PriceQuote:
    """A price per GPU-hour and where it came from."""

    gpu: str  # the model asked for (canonical)
    capacity_type: CapacityType
    usd_per_gpu_hour: float
    entry: PriceEntry  # the offering that set the price
    proxy_for: str | None = None  # set when ``gpu`` had no row and ``entry.gpu`` stood in
    assumption: str | None = None


@dataclass(frozen=True, slots=True)
class PriceCatalog:
    entries: tuple[PriceEntry, ...]
    warnings: tuple[CatalogWarning, ...]
    provenance: Provenance
    spot_estimate: SpotEstimate = "mid"
    _by_gpu: dict[str, tuple[PriceEntry, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_gpu: dict[str, list[PriceEntry]] = {}
        for e in self.entries:
            by_gpu.setdefault(e.gpu, []).append(e)
        self._by_gpu.clear()
        self._by_gpu.update({k: tuple(v) for k, v in by_gpu.items()})

    def models(self) -> list[str]:
        """The GPU models the catalog prices, sorted."""
        return sorted(self._by_gpu)

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: CatalogSource = None,
        *,
        strict: bool = False,
        spot_estimate: SpotEstimate = "mid",
        name: str | None = None,
    ) -> PriceCatalog:
        """Load and validate a catalog from a path or an open stream (``None``: the bundled one).

        A compatibility shim: the file reading is :func:`gpufleet.io.catalog.load_catalog` (this
        module does no I/O); call that instead. ``name`` labels a stream in messages and
        provenance. With ``strict`` every warning is an error. Raises :class:`CatalogError`.
        """
        from gpufleet.io.catalog import load_catalog  # layering exception, see tests/project/test_layering.py

        return load_catalog(path, strict=strict, spot_estimate=spot_estimate, name=name)

    @classmethod
    def from_bytes(
        cls, data: bytes, *, source: str, strict: bool = False, spot_estimate: SpotEstimate = "mid"
    ) -> PriceCatalog:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CatalogError(f"not UTF-8 text (byte {exc.start})", source=source) from None
        entries, warnings = _parse(text, source)
        if strict and warnings:
            w = warnings[0]
            more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
            raise CatalogError(f"{w.message} [strict]{more}", source=w.source, line=w.line, field=w.field)
        sources = tuple(dict.fromkeys(e.source for e in entries))
        present = {e.gpu for e in entries}
        assumptions = tuple(
            f"{p.gpu} priced as {p.proxy}: {p.reason}"
            for p in FALLBACK_PROXIES.values()
            if p.gpu not in present and p.proxy in present
        )
        prov = Provenance(source, hashlib.sha256(data).hexdigest(), sources, assumptions)
        return cls(tuple(entries), tuple(warnings), prov, spot_estimate)

    # -- look-ups --------------------------------------------------------------------------------

    def offerings(
        self,
        gpu: str | None = None,
        capacity_type: CapacityType = CapacityType.ON_DEMAND,
        *,
        provider: str | None = None,
        region: str | None = None,
        billing_scope: BillingScope | None = None,
        min_gpus: int = 1,
    ) -> list[PriceEntry]:
        """Offerings that match and have a price for ``capacity_type``, cheapest per GPU-hour first.

        Ties break on (provider, region, offering) so the order is the same every run.
        """
        if gpu is None:
            pool: Iterable[PriceEntry] = self.entries
        else:
            pool = self._by_gpu.get(self._canonical(gpu), ())
        found: list[tuple[float, PriceEntry]] = []
        for e in pool:
            if provider is not None and e.provider != provider.lower():
                continue
            if region is not None and e.region != region:
                continue
            if billing_scope is not None and e.billing_scope is not billing_scope:
                continue
            if e.gpu_count < min_gpus:
                continue
            price = e.gpu_hour_usd(capacity_type, self.spot_estimate)
            if price is not None:
                found.append((price, e))
        found.sort(key=lambda pe: (pe[0], pe[1].provider, pe[1].region, pe[1].offering))
        return [e for _, e in found]

    def cheapest(
        self,
        gpu: str | None = None,
        capacity_type: CapacityType = CapacityType.ON_DEMAND,
        *,
        provider: str | None = None,
        region: str | None = None,
        billing_scope: BillingScope | None = None,
        min_gpus: int = 1,
    ) -> PriceEntry:
        """The cheapest offering per GPU-hour that matches; :class:`CatalogError` when none does."""
        found = self.offerings(
            gpu,
            capacity_type,
            provider=provider,
            region=region,
            billing_scope=billing_scope,
            min_gpus=min_gpus,
        )
        if not found:
            raise CatalogError(
                f"no {capacity_type} offering for {gpu or 'any GPU'}"
                + _filters(provider, region)
                + (f" with >= {min_gpus} GPUs" if min_gpus > 1 else ""),
                source=self.provenance.path,
                field="gpu",
            )
        return found[0]

    def quote(
        self,
        gpu: str,
        capacity_type: CapacityType = CapacityType.ON_DEMAND,
        *,
        provider: str | None = None,
        region: str | None = None,
    ) -> PriceQuote:
        """$ per GPU-hour for ``gpu`` with the offering that set it (rules in the module docstring)."""
        canon = self._canonical(gpu)
        proxy = FALLBACK_PROXIES.get(canon) if canon not in self._by_gpu else None
        priced = proxy.proxy if proxy is not None else canon
        found = self.offerings(priced, capacity_type, provider=provider, region=region)
        if not found:
            raise CatalogError(
                f"no {capacity_type} price for {canon}"
                + (f" (priced as {priced})" if proxy is not None else "")
                + _filters(provider, region),
                source=self.provenance.path,
                field="gpu",
            )
        instance = [e for e in found if e.billing_scope is BillingScope.INSTANCE]
        entry = (instance or found)[0]
        price = entry.gpu_hour_usd(capacity_type, self.spot_estimate)
        assert price is not None  # offerings() keeps only priced entries
        return PriceQuote(
            canon,
            capacity_type,
            price,
            entry,
            proxy_for=canon if proxy is not None else None,
            assumption=proxy.reason if proxy is not None else None,
        )

    def gpu_hour_usd(
        self,
        gpu: str,
        capacity_type: CapacityType = CapacityType.ON_DEMAND,
        provider: str | None = None,
        region: str | None = None,
    ) -> float:
        """USD per GPU-hour of ``gpu`` (see :meth:`quote` for the rules and the offering used)."""
        return self.quote(gpu, capacity_type, provider=provider, region=region).usd_per_gpu_hour

    def node_hour_usd(self, node: Node, *, provider: str | None = None, region: str | None = None) -> float:
        """USD per hour of a whole node: its own ``hourly_price_usd`` if set, else catalog × GPUs.

        A CPU-only node without its own price cannot be priced from a GPU catalog.
        """
        if node.hourly_price_usd is not None:
            return node.hourly_price_usd
        return self._by_gpus(node.name, node.gpu_model, node.gpu_count, node.capacity_type, provider, region)

    def pool_node_hour_usd(self, pool: NodePool, *, provider: str | None = None, region: str | None = None) -> float:
        """USD per hour of one node of ``pool`` (its own price if set, else catalog × GPUs)."""
        if pool.hourly_price_usd is not None:
            return pool.hourly_price_usd
        return self._by_gpus(
            f"pool {pool.name}", pool.gpu_model, pool.gpus_per_node, pool.capacity_type, provider, region
        )

    # -- internals -------------------------------------------------------------------------------

    def _by_gpus(
        self,
        what: str,
        gpu: str,
        gpu_count: int,
        capacity_type: CapacityType,
        provider: str | None,
        region: str | None,
    ) -> float:
        if gpu_count <= 0 or not gpu:
            raise CatalogError(
                f"{what} has no GPUs and no hourly_price_usd; the GPU catalog cannot price it",
                source=self.provenance.path,
                field="hourly_price_usd",
            )
        return self.gpu_hour_usd(gpu, capacity_type, provider, region) * gpu_count

    def _canonical(self, gpu: str) -> str:
        canon = canonical_gpu_name(gpu)
        if canon is None:
            raise CatalogError(
                f"unknown GPU type '{gpu}' (known: {', '.join(GPU_MODELS)})",
                source=self.provenance.path,
                field="gpu",
            )
        return canon


def _filters(provider: str | None, region: str | None) -> str:
    parts = [f"provider={provider}" if provider else "", f"region={region}" if region else ""]
    text = ", ".join(p for p in parts if p)
    return f" ({text})" if text else ""


# -- parsing -------------------------------------------------------------------------------------


def _parse(text: str, source: str) -> tuple[list[PriceEntry], list[CatalogWarning]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or not any(h.strip() for h in header):
        raise CatalogError("empty catalog (no header row)", source=source, line=1)
    names = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise CatalogError(
            f"missing column(s) {', '.join(missing)} (expected {','.join(COLUMNS)})",
            source=source,
            line=1,
            field=missing[0],
        )
    index = {c: names.index(c) for c in COLUMNS}
    entries: list[PriceEntry] = []
    warnings: list[CatalogWarning] = []
    seen: dict[tuple[str, str, str], int] = {}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue  # blank line
        if len(row) != len(names):
            raise CatalogError(f"expected {len(names)} cells, found {len(row)}", source=source, line=line)
        cells = {c: row[i].strip() for c, i in index.items()}
        entry = _parse_row(cells, source, line, warnings)
        key = (entry.provider, entry.region, entry.offering)
        if key in seen:
            raise CatalogError(
                f"duplicate offering {'/'.join(key)} (first on line {seen[key]})",
                source=source,
                line=line,
                field="offering",
            )
        seen[key] = line
        entries.append(entry)
    if not entries:
        raise CatalogError("the catalog has no offerings", source=source)
    return entries, warnings


def _parse_row(cells: dict[str, str], source: str, line: int, warnings: list[CatalogWarning]) -> PriceEntry:
    def fail(fld: str, message: str) -> CatalogError:
        return CatalogError(message, source=source, line=line, field=fld)

    def warn(fld: str, message: str) -> None:
        warnings.append(CatalogWarning(source, line, fld, message))

    def number(fld: str, *, required: bool) -> float | None:
        raw = cells[fld]
        if raw == "":
            if required:
                raise fail(fld, "empty; a price is required")
            return None
        try:
            value = float(raw)
        except ValueError:
            raise fail(fld, f"not a number: {raw!r}") from None
        if not math.isfinite(value):
            raise fail(fld, f"not a finite number: {raw!r}")
        return value

    for fld in ("provider", "region", "offering", "source"):
        if not cells[fld]:
            raise fail(fld, "empty")

    gpu = canonical_gpu_name(cells["gpu"])
    if gpu is None:
        raise fail("gpu", f"unknown GPU type {cells['gpu']!r} (known: {', '.join(GPU_MODELS)})")

    raw_count = cells["gpu_count"]
    try:
        count_f = float(raw_count)
    except ValueError:
        raise fail("gpu_count", f"not a number: {raw_count!r}") from None
    if not math.isfinite(count_f) or count_f != int(count_f) or not 1 <= count_f <= MAX_PLAUSIBLE_GPUS:
        raise fail(
            "gpu_count",
            f"implausible GPU count {raw_count!r}: expected a whole number 1..{MAX_PLAUSIBLE_GPUS} "
            "(a fraction is a partial-GPU VM; a large number is usually the vCPU count)",
        )
    gpu_count = int(count_f)
    if gpu_count & (gpu_count - 1):
        warn("gpu_count", f"unusual GPU count {gpu_count} (not a power of two); kept as is")

    memory = number("gpu_memory_gib", required=True)
    assert memory is not None
    known_memory = GPU_MODELS[gpu].memory_gib
    if memory <= 0:
        raise fail("gpu_memory_gib", f"must be > 0, got {cells['gpu_memory_gib']}")
    if known_memory and memory != known_memory:
        raise fail(
            "gpu_memory_gib",
            f"{memory:g} GiB does not match {gpu} ({known_memory:g} GiB); the row names the wrong model",
        )

    on_demand = number("on_demand_usd_per_hour", required=True)
    assert on_demand is not None
    if on_demand <= 0:
        raise fail("on_demand_usd_per_hour", f"must be > 0, got {cells['on_demand_usd_per_hour']}")

    lo = number("spot_usd_per_hour_min", required=False)
    hi = number("spot_usd_per_hour_max", required=False)
    for fld, v in (("spot_usd_per_hour_min", lo), ("spot_usd_per_hour_max", hi)):
        if v is not None and v <= 0:
            raise fail(fld, f"must be > 0, got {cells[fld]}")
    if (lo is None) != (hi is None):
        empty = "spot_usd_per_hour_min" if lo is None else "spot_usd_per_hour_max"
        other = hi if lo is None else lo
        warn(empty, f"empty while the other spot bound is {other:g}; using {other:g} for both")
        lo = hi = other
    if lo is not None and hi is not None:
        if lo > hi:
            raise fail("spot_usd_per_hour_min", f"spot min {lo:g} is above spot max {hi:g}")
        if lo > on_demand:
            raise fail(
                "spot_usd_per_hour_min",
                f"spot min {lo:g} is above on-demand {on_demand:g}: not a spot price (wrong column or unit?)",
            )
        if lo == on_demand:
            warn(
                "spot_usd_per_hour_min",
                f"spot equals on-demand ({on_demand:g}): the source copies on-demand when it has no "
                "spot price; spot treated as unknown",
            )
            lo = hi = None
        elif hi > on_demand:
            warn(
                "spot_usd_per_hour_max",
                f"spot max {hi:g} is above on-demand {on_demand:g} in some zones; clamped to on-demand",
            )
            hi = on_demand

    try:
        scope = BillingScope(cells["billing_scope"])
    except ValueError:
        raise fail(
            "billing_scope",
            f"unknown billing scope {cells['billing_scope']!r} (expected instance or gpu_only)",
        ) from None

    return PriceEntry(
        provider=cells["provider"].lower(),
        region=cells["region"],
        offering=cells["offering"],
        gpu=gpu,
        gpu_count=gpu_count,
        gpu_memory_gib=memory,
        on_demand_usd_per_hour=on_demand,
        spot_usd_per_hour_min=lo,
        spot_usd_per_hour_max=hi,
        billing_scope=scope,
        source=cells["source"],
        line=line,
    )
