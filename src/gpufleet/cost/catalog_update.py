"""Updating the price catalog: merge a CSV of prices into it, or fetch AWS on-demand prices.

Both paths end in the same place: a merged catalog CSV that is loaded back with
:meth:`PriceCatalog.from_bytes`, so every row passes the same validation as any catalog (known GPU
types, positive prices, spot ≤ on-demand, plausible GPU counts; see :mod:`gpufleet.cost.catalog`),
and an :class:`UpdateProvenance` that records what came from where (sha256 of the input, of the
base catalog and of the result).

Merge rule: rows are keyed by ``(provider, region, offering)``; an incoming row replaces the
catalog's row with the same key, others are added, the rest kept. An incoming row with no spot
price keeps the catalog's spot range for that offering (the AWS Price List API has no spot prices)
when that range is still below the new on-demand price; its ``source`` then names both sources.

AWS: :func:`fetch_aws_prices` reads the AWS Price List API (``pricing.get_products``, service
``AmazonEC2``, GPU instances, Linux, shared tenancy, no pre-installed software) through a boto3
client that the caller passes in (tests pass a fake); :func:`aws_pricing_client` makes a real one,
importing boto3 lazily so that nothing else needs it (``pip install 'gpufleet[aws]'``). No network
is used anywhere else.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpufleet.errors import CatalogError, GpufleetError
from gpufleet.model.gpu import GPU_MODELS

from .catalog import COLUMNS, PriceCatalog, PriceEntry


class PriceSourceUnavailable(GpufleetError):
    """A price source cannot be used here (boto3 missing, no credentials, the API refused)."""

    code = "price_source_unavailable"


@dataclass(frozen=True, slots=True)
class UpdateProvenance:
    """What a catalog update merged: input and base files by sha256, and what changed."""

    input_source: str
    input_sha256: str
    base_source: str
    base_sha256: str
    output_sha256: str
    added: tuple[str, ...]  # "provider/region/offering"
    updated: tuple[str, ...]
    unchanged: int
    kept_spot: tuple[str, ...]  # offerings whose spot range was kept from the base catalog

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_source": self.input_source,
            "input_sha256": self.input_sha256,
            "base_source": self.base_source,
            "base_sha256": self.base_sha256,
            "output_sha256": self.output_sha256,
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": self.unchanged,
            "kept_spot": list(self.kept_spot),
        }


@dataclass(frozen=True)
class CatalogUpdate:
    """The merged catalog (validated), its CSV text, and the provenance of the merge."""

    catalog: PriceCatalog
    csv_text: str
    provenance: UpdateProvenance


def merge_csv(
    base: PriceCatalog, data: bytes, *, source: str, base_data: bytes | None = None, strict: bool = False
) -> CatalogUpdate:
    """Merge the catalog CSV ``data`` (named ``source`` in messages) into ``base``.

    ``data`` is validated as a catalog of its own first (errors name ``source``, line and field).
    ``base_data`` are the base catalog's bytes, for its sha256 (default: the one it was loaded
    with). With ``strict`` a repair (see the catalog's table) is an error."""
    incoming = PriceCatalog.from_bytes(data, source=source, strict=strict)
    merged: dict[tuple[str, str, str], PriceEntry] = {_key(e): e for e in base.entries}
    added: list[str] = []
    updated: list[str] = []
    kept_spot: list[str] = []
    sources: dict[tuple[str, str, str], str] = {}
    for e in incoming.entries:
        k = _key(e)
        old = merged.get(k)
        new = e
        if old is not None and not e.has_spot and old.has_spot:
            lo, hi = old.spot_usd_per_hour_min, old.spot_usd_per_hour_max
            assert lo is not None and hi is not None
            if lo < e.on_demand_usd_per_hour:
                new = _with_spot(e, lo, min(hi, e.on_demand_usd_per_hour))
                sources[k] = f"on-demand: {e.source}; spot: {old.source}"
                kept_spot.append("/".join(k))
        if old is None:
            added.append("/".join(k))
        elif _row(old) != _row(new):
            updated.append("/".join(k))
        merged[k] = new
    text = _to_csv(merged.values(), sources)
    out = text.encode()
    name = f"{base.provenance.path} + {source}"
    catalog = PriceCatalog.from_bytes(out, source=name, strict=strict, spot_estimate=base.spot_estimate)
    prov = UpdateProvenance(
        input_source=source,
        input_sha256=hashlib.sha256(data).hexdigest(),
        base_source=base.provenance.path,
        base_sha256=hashlib.sha256(base_data).hexdigest() if base_data is not None else base.provenance.sha256,
        output_sha256=hashlib.sha256(out).hexdigest(),
        added=tuple(added),
        updated=tuple(updated),
        unchanged=len(incoming.entries) - len(added) - len(updated),
        kept_spot=tuple(kept_spot),
    )
    return CatalogUpdate(catalog, text, prov)


def _key(e: PriceEntry) -> tuple[str, str, str]:
    return (e.provider, e.region, e.offering)


def _with_spot(e: PriceEntry, lo: float, hi: float) -> PriceEntry:
    return PriceEntry(
        e.provider,
        e.region,
        e.offering,
        e.gpu,
        e.gpu_count,
        e.gpu_memory_gib,
        e.on_demand_usd_per_hour,
        lo,
        hi,
        e.billing_scope,
        e.source,
        e.line,
    )


def _num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _row(e: PriceEntry, source: str | None = None) -> list[str]:
    return [
        e.provider,
        e.region,
        e.offering,
        e.gpu,
        str(e.gpu_count),
        _num(e.gpu_memory_gib),
        _num(e.on_demand_usd_per_hour),
        _num(e.spot_usd_per_hour_min),
        _num(e.spot_usd_per_hour_max),
        e.billing_scope.value,
        source or e.source,
    ]


def _to_csv(entries: Iterable[PriceEntry], sources: Mapping[tuple[str, str, str], str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for e in sorted(entries, key=_key):
        w.writerow(_row(e, sources.get(_key(e))))
    return buf.getvalue()


# -- AWS Price List API -----------------------------------------------------------------------------

# EC2 instance families with GPUs → the GPU model (one model per family).
AWS_GPU_FAMILIES: dict[str, str] = {
    "p5": "H100-80GB",
    "p5e": "H200",
    "p5en": "H200",
    "p4de": "A100-80GB",
    "p4d": "A100-40GB",
    "p3dn": "V100-32GB",
    "p3": "V100-16GB",
    "g6e": "L40S",
    "g6": "L4",
    "g5": "A10G",
    "g4dn": "T4",
}
AWS_PRICING_ENDPOINT_REGION = "us-east-1"  # the Price List API answers in a few regions only


class PricingClient(Protocol):
    """What :func:`fetch_aws_prices` needs of boto3's ``pricing`` client."""

    def get_products(self, **kwargs: Any) -> Mapping[str, Any]: ...


def aws_pricing_client(endpoint_region: str = AWS_PRICING_ENDPOINT_REGION) -> PricingClient:
    """A boto3 ``pricing`` client; :class:`PriceSourceUnavailable` without boto3 or credentials."""
    try:
        import boto3  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise PriceSourceUnavailable(
            "the AWS price source needs boto3: pip install 'gpufleet[aws]' (no network is needed for anything else)"
        ) from None
    session = boto3.Session()
    if session.get_credentials() is None:
        raise PriceSourceUnavailable(
            "no AWS credentials found (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); "
            "the Price List API needs an identity even for public prices"
        )
    client: PricingClient = session.client("pricing", region_name=endpoint_region)
    return client


def fetch_aws_prices(client: PricingClient, region: str, *, max_pages: int = 200) -> tuple[bytes, list[str]]:
    """On-demand prices of EC2 GPU instances in ``region`` as catalog CSV bytes, and the instance
    types skipped (unknown GPU family, no price). Spot cells are empty: the Price List API has no
    spot prices (a merge keeps the catalog's spot ranges)."""
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "instanceFamily", "Value": "GPU instance"},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    rows: dict[str, list[str]] = {}
    skipped: list[str] = []
    token: str | None = None
    for _ in range(max_pages):
        kwargs: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1"}
        if token:
            kwargs["NextToken"] = token
        try:
            page = client.get_products(**kwargs)
        except Exception as e:  # botocore's errors; boto3 may not be importable to name them
            raise PriceSourceUnavailable(f"the AWS Price List API failed: {e}") from None
        for item in page.get("PriceList", []):
            product = json.loads(item) if isinstance(item, str) else item
            parsed = _aws_row(product, region)
            if isinstance(parsed, str):
                skipped.append(parsed)
            else:
                rows.setdefault(parsed[2], parsed)
        token = page.get("NextToken")
        if not token:
            break
    else:
        raise PriceSourceUnavailable(f"the AWS Price List API returned more than {max_pages} pages")
    if not rows:
        raise PriceSourceUnavailable(f"the AWS Price List API returned no GPU instance prices for {region}")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for offering in sorted(rows):
        w.writerow(rows[offering])
    return buf.getvalue().encode(), sorted(set(skipped))


def _aws_row(product: Mapping[str, Any], region: str) -> list[str] | str:
    attrs = product.get("product", {}).get("attributes", {})
    itype = str(attrs.get("instanceType", ""))
    family = itype.split(".")[0]
    gpu = AWS_GPU_FAMILIES.get(family)
    if gpu is None:
        return itype or "<no instanceType>"
    try:
        count = int(str(attrs.get("gpu", "")).strip())
    except ValueError:
        return itype
    price = None
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if usd is not None and dim.get("unit", "Hrs") in ("Hrs", "Hours"):
                price = str(usd)
    if price is None or float(price) <= 0:
        return itype
    published = product.get("publicationDate", "")
    source = f"AWS Price List API AmazonEC2 {region}" + (f" published {published}" if published else "")
    return [
        "aws",
        region,
        itype,
        gpu,
        str(count),
        str(GPU_MODELS[gpu].memory_gib),
        _num(float(price)),
        "",
        "",
        "instance",
        source,
    ]


__all__ = [
    "AWS_GPU_FAMILIES",
    "CatalogError",
    "CatalogUpdate",
    "PriceSourceUnavailable",
    "PricingClient",
    "UpdateProvenance",
    "aws_pricing_client",
    "fetch_aws_prices",
    "merge_csv",
]
