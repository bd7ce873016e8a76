"""The price catalog: the bundled file, look-up rules, and every known problem of the source."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from gpufleet.cost.catalog import COLUMNS, BillingScope, PriceCatalog
from gpufleet.errors import CatalogError
from gpufleet.model import CapacityType, Node, NodePool
from tests.support.paths import REPO, SHARED

HEADER = ",".join(COLUMNS)
SRC = "test-src @abc"


def row(
    *,
    provider: str = "aws",
    region: str = "us-east-1",
    offering: str = "g4dn.xlarge",
    gpu: str = "T4",
    gpu_count: str = "1",
    memory: str = "16",
    on_demand: str = "0.526",
    spot_min: str = "0.1845",
    spot_max: str = "0.2010",
    scope: str = "instance",
    source: str = SRC,
) -> str:
    return ",".join((provider, region, offering, gpu, gpu_count, memory, on_demand, spot_min, spot_max, scope, source))


def write(tmp_path: Path, *rows: str, name: str = "prices.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join((HEADER, *rows)) + "\n")
    return path


# -- the bundled catalog ---------------------------------------------------------------------------


def test_bundled_catalog_loads_clean_even_in_strict_mode() -> None:
    cat = PriceCatalog.load(strict=True)
    assert len(cat.entries) == 20
    assert cat.warnings == ()
    assert {e.provider for e in cat.entries} == {"aws", "gcp", "azure"}
    data = (REPO / "src/gpufleet/data/prices/gpu_prices.csv").read_bytes()
    assert cat.provenance.sha256 == hashlib.sha256(data).hexdigest()
    assert cat.provenance.path.endswith("data/prices/gpu_prices.csv")
    assert any("aws/vms.csv @001367d2" in s for s in cat.provenance.sources)
    # openb's models that the file does not sell are priced by documented assumption
    assumed = " ".join(cat.provenance.assumptions)
    for gpu in ("P100", "V100-32GB", "G1", "G2", "G3"):
        assert f"{gpu} priced as" in assumed


def test_bundled_catalog_matches_shared_reference_data() -> None:
    shared = SHARED / "data" / "prices" / "gpu_prices.csv"
    if not shared.exists():
        pytest.skip("shared reference data not present")
    assert PriceCatalog.load(shared).provenance.sha256 == PriceCatalog.load().provenance.sha256


def test_empty_spot_cells_mean_no_spot_price_not_zero() -> None:
    cat = PriceCatalog.load()
    h100_azure = next(e for e in cat.entries if e.offering == "Standard_NC40ads_H100_v5")
    assert not h100_azure.has_spot
    assert h100_azure.gpu_hour_usd(CapacityType.SPOT) is None
    # spot look-ups skip it instead of calling it free
    spot = cat.quote("H100", CapacityType.SPOT)
    assert spot.entry.offering == "p5.48xlarge"
    assert spot.usd_per_gpu_hour == pytest.approx((20.9934 + 30.3260) / 2 / 8)


# -- look-up rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "capacity", "provider", "expected_usd", "offering"),
    [
        # cheapest instance-scope offering per GPU-hour when no provider is given
        ("H100-80GB", CapacityType.ON_DEMAND, None, 6.98, "Standard_NC40ads_H100_v5"),
        ("A100", CapacityType.ON_DEMAND, None, 27.197 / 8, "Standard_ND96asr_v4"),
        ("T4", CapacityType.ON_DEMAND, None, 0.526, "g4dn.xlarge"),  # tie with azure: aws first
        # spot: mid-point of the zone range
        ("A100-80GB", CapacityType.SPOT, "aws", (5.8394 + 7.8074) / 2 / 8, "p4de.24xlarge"),
        ("T4", CapacityType.SPOT, None, 0.062699, "Standard_NC4as_T4_v3"),
        # reserved has no public price: on-demand as an upper bound
        ("T4", CapacityType.RESERVED, "aws", 0.526, "g4dn.xlarge"),
        # GPU-only rows are used when they are all that matches
        ("L4", CapacityType.ON_DEMAND, "gcp", 0.56004, "L4 x1"),
        ("A100-40GB", CapacityType.ON_DEMAND, "gcp", 23.47126 / 8, "A100 x8"),
        # GPU-only rows are not preferred when instance rows exist (they leave out the host)
        ("L4", CapacityType.ON_DEMAND, None, 0.8048, "g6.xlarge"),
        # openb's models priced through the fallback table
        ("V100M32", CapacityType.ON_DEMAND, "aws", 3.06, "p3.2xlarge"),
        ("P100", CapacityType.ON_DEMAND, "azure", 3.06, "Standard_NC6s_v3"),
        ("G2", CapacityType.ON_DEMAND, None, 0.526, "g4dn.xlarge"),
        ("A10", CapacityType.ON_DEMAND, None, 3.2, "Standard_NV36ads_A10_v5"),
    ],
)
def test_gpu_hour_usd(
    gpu: str, capacity: CapacityType, provider: str | None, expected_usd: float, offering: str
) -> None:
    cat = PriceCatalog.load()
    quote = cat.quote(gpu, capacity, provider=provider)
    assert quote.usd_per_gpu_hour == pytest.approx(expected_usd)
    assert quote.entry.offering == offering
    assert cat.gpu_hour_usd(gpu, capacity, provider) == pytest.approx(expected_usd)


def test_quote_through_a_proxy_says_so() -> None:
    quote = PriceCatalog.load().quote("G3")
    assert quote.proxy_for == "G3"
    assert quote.entry.gpu == "T4"
    assert quote.assumption is not None and "undisclosed" in quote.assumption


def test_spot_estimate_is_configurable() -> None:
    lo = PriceCatalog.load(spot_estimate="min").gpu_hour_usd("H100", CapacityType.SPOT, "aws")
    hi = PriceCatalog.load(spot_estimate="max").gpu_hour_usd("H100", CapacityType.SPOT, "aws")
    assert lo == pytest.approx(20.9934 / 8)
    assert hi == pytest.approx(30.3260 / 8)


def test_node_price_is_its_own_else_catalog_times_gpus() -> None:
    cat = PriceCatalog.load()
    own = Node("n1", "H100-80GB", 8, hourly_price_usd=50.0)
    assert cat.node_hour_usd(own) == 50.0
    node = Node("n2", "H100-80GB", 8)
    assert cat.node_hour_usd(node, provider="aws") == pytest.approx(98.32)
    spot = Node("n3", "T4", 4, capacity_type=CapacityType.SPOT)
    assert cat.node_hour_usd(spot) == pytest.approx(4 * 0.062699)
    pool = NodePool("p", "A100-80GB", 8, 96000, 1 << 20)
    assert cat.pool_node_hour_usd(pool, provider="aws") == pytest.approx(40.96575)
    with pytest.raises(CatalogError, match="no GPUs"):
        cat.node_hour_usd(Node("cpu", "", 0, 8000, 32768))


def test_cheapest_and_offerings() -> None:
    cat = PriceCatalog.load()
    assert cat.cheapest("A100", CapacityType.SPOT).offering == "Standard_ND96asr_v4"
    assert cat.cheapest(None, CapacityType.ON_DEMAND, billing_scope=BillingScope.INSTANCE).gpu == "T4"
    assert cat.cheapest("H100", min_gpus=8).offering == "p5.48xlarge"
    prices = [e.gpu_hour_usd(CapacityType.ON_DEMAND) or 0 for e in cat.offerings("V100")]
    assert prices == sorted(prices)
    with pytest.raises(CatalogError, match=r"no spot offering for L40S.*provider=azure") as exc:
        cat.cheapest("L40S", CapacityType.SPOT, provider="azure")
    assert exc.value.field == "gpu"


def test_unknown_gpu_lookup_names_the_field() -> None:
    with pytest.raises(CatalogError, match="unknown GPU type 'K80'") as exc:
        PriceCatalog.load().gpu_hour_usd("K80")
    assert exc.value.field == "gpu"


# -- known problems of the source: errors ----------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        (row(gpu="K80"), "gpu", "unknown GPU type 'K80'"),
        (row(on_demand="0"), "on_demand_usd_per_hour", "must be > 0"),
        (row(on_demand="-1.5"), "on_demand_usd_per_hour", "must be > 0"),
        (row(on_demand=""), "on_demand_usd_per_hour", "a price is required"),
        (row(on_demand="n/a"), "on_demand_usd_per_hour", "not a number"),
        (row(on_demand="inf"), "on_demand_usd_per_hour", "not a finite number"),
        (row(spot_min="0", spot_max="0"), "spot_usd_per_hour_min", "must be > 0"),
        # implausible GPU counts
        (row(gpu_count="0"), "gpu_count", "implausible GPU count"),
        (row(gpu_count="0.5"), "gpu_count", "implausible GPU count"),
        (row(gpu_count="96"), "gpu_count", "implausible GPU count"),
        (row(gpu_count="-8"), "gpu_count", "implausible GPU count"),
        (row(gpu_count="eight"), "gpu_count", "not a number"),
        # spot above on-demand everywhere: not a spot market
        (row(on_demand="0.526", spot_min="0.6", spot_max="0.7"), "spot_usd_per_hour_min", "above on-demand"),
        (row(spot_min="0.3", spot_max="0.2"), "spot_usd_per_hour_min", "above spot max"),
        (row(memory="40", gpu="T4"), "gpu_memory_gib", "does not match T4"),
        (row(scope="reserved"), "billing_scope", "unknown billing scope"),
        (row(source=""), "source", "empty"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, bad: str, field: str, message: str) -> None:
    path = write(tmp_path, row(offering="ok.xlarge"), bad)
    with pytest.raises(CatalogError, match=message) as exc:
        PriceCatalog.load(path)
    err = exc.value
    assert (err.source, err.line, err.field) == (str(path), 3, field)
    assert f"{path}:3" in str(err) and f"field '{field}'" in str(err)


def test_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("provider,region,offering,gpu\naws,us-east-1,x,T4\n")
    with pytest.raises(CatalogError, match="missing column") as exc:
        PriceCatalog.load(path)
    assert (exc.value.line, exc.value.field) == (1, "gpu_count")


def test_duplicate_offering(tmp_path: Path) -> None:
    path = write(tmp_path, row(), row())
    with pytest.raises(CatalogError, match=r"duplicate offering.*first on line 2") as exc:
        PriceCatalog.load(path)
    assert (exc.value.line, exc.value.field) == (3, "offering")


def test_ragged_row_and_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, row() + ",extra")
    with pytest.raises(CatalogError, match="expected 11 cells") as exc:
        PriceCatalog.load(path)
    assert exc.value.line == 2
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(CatalogError, match="empty catalog"):
        PriceCatalog.load(empty)
    with pytest.raises(CatalogError, match="no offerings"):
        PriceCatalog.load(write(tmp_path, name="header_only.csv"))
    with pytest.raises(CatalogError, match="cannot read"):
        PriceCatalog.load(tmp_path / "absent.csv")


# -- known problems of the source: documented repairs (errors in strict mode) ----------------------


@pytest.mark.parametrize(
    ("bad", "field", "message", "spot"),
    [
        # spot above on-demand in some zones: clamp the max
        (
            row(on_demand="0.526", spot_min="0.2", spot_max="0.9"),
            "spot_usd_per_hour_max",
            "above on-demand",
            (0.2, 0.526),
        ),
        # the spot column equal to on-demand: the source's "no spot price"
        (
            row(on_demand="0.526", spot_min="0.526", spot_max="0.526"),
            "spot_usd_per_hour_min",
            "spot equals on-demand",
            (None, None),
        ),
        # one empty spot cell: use the other bound
        (row(spot_min="", spot_max="0.2"), "spot_usd_per_hour_min", "empty while", (0.2, 0.2)),
        (row(spot_min="0.2", spot_max=""), "spot_usd_per_hour_max", "empty while", (0.2, 0.2)),
        # an odd but possible GPU count is only flagged
        (row(gpu_count="3"), "gpu_count", "not a power of two", (0.1845, 0.2010)),
    ],
)
def test_repairs_are_warnings_and_strict_errors(
    tmp_path: Path, bad: str, field: str, message: str, spot: tuple[float | None, float | None]
) -> None:
    path = write(tmp_path, row(offering="ok.xlarge"), bad)
    cat = PriceCatalog.load(path)
    assert len(cat.warnings) == 1
    w = cat.warnings[0]
    assert (w.source, w.line, w.field) == (str(path), 3, field)
    assert message in w.message and f"{path}:3" in str(w)
    entry = cat.entries[1]
    assert (entry.spot_usd_per_hour_min, entry.spot_usd_per_hour_max) == spot
    with pytest.raises(CatalogError, match=message) as exc:
        PriceCatalog.load(path, strict=True)
    assert (exc.value.source, exc.value.line, exc.value.field) == (str(path), 3, field)


def test_both_spot_cells_empty_is_no_spot_price(tmp_path: Path) -> None:
    cat = PriceCatalog.load(write(tmp_path, row(spot_min="", spot_max="")), strict=True)
    assert cat.warnings == ()
    assert not cat.entries[0].has_spot
    with pytest.raises(CatalogError, match="no spot price for T4"):
        cat.gpu_hour_usd("T4", CapacityType.SPOT)
    assert cat.gpu_hour_usd("T4") == pytest.approx(0.526)


def test_load_from_stream_names_it() -> None:
    data = "\n".join((HEADER, row(), row(offering="bad", gpu="K80"))).encode()
    with pytest.raises(CatalogError) as exc:
        PriceCatalog.load(io.BytesIO(data), name="upload.csv")
    assert str(exc.value).startswith("upload.csv:3, field 'gpu'")
    cat = PriceCatalog.load(io.StringIO("\n".join((HEADER, row()))), name="inline")
    assert cat.provenance.path == "inline"
    assert cat.provenance.sha256 == hashlib.sha256("\n".join((HEADER, row())).encode()).hexdigest()
