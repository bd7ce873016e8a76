"""The price catalog's bytes: the packaged ``gpufleet/data/prices/gpu_prices.csv``, a path or an
open stream, handed to :meth:`gpufleet.cost.catalog.PriceCatalog.from_bytes` (which validates)."""

from __future__ import annotations

from importlib import resources
from os import PathLike
from typing import IO

from gpufleet.cost.catalog import BUNDLED_CATALOG, PriceCatalog, SpotEstimate
from gpufleet.errors import CatalogError

CatalogSource = str | PathLike[str] | IO[bytes] | IO[str] | None


def bundled_catalog_bytes() -> bytes:
    """The packaged catalog CSV."""
    return resources.files("gpufleet").joinpath(BUNDLED_CATALOG).read_bytes()


def load_catalog(
    path: CatalogSource = None,
    *,
    strict: bool = False,
    spot_estimate: SpotEstimate = "mid",
    name: str | None = None,
) -> PriceCatalog:
    """Load and validate a catalog from a path or an open stream (``None``: the bundled one).

    ``name`` labels a stream in messages and provenance. With ``strict`` every warning is an
    error. Raises :class:`CatalogError` naming file, line and field.
    """
    if spot_estimate not in ("min", "mid", "max"):
        raise CatalogError(f"spot_estimate must be 'min', 'mid' or 'max', got {spot_estimate!r}")
    if path is None:
        data = bundled_catalog_bytes()
        source = name or f"gpufleet/{BUNDLED_CATALOG}"
    elif isinstance(path, (str, PathLike)):
        source = name or str(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CatalogError(f"cannot read the catalog: {exc.strerror}", source=source) from None
    else:
        raw = path.read()
        data = raw.encode("utf-8") if isinstance(raw, str) else raw
        source = name or str(getattr(path, "name", "<stream>"))
    return PriceCatalog.from_bytes(data, source=source, strict=strict, spot_estimate=spot_estimate)
