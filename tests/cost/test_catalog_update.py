"""Catalog updates: merging a CSV (validated like any catalog, with provenance), the AWS Price List
path with an injected fake pricing client (the real API cannot be reached from the tests), and the
``gpufleet cost update-prices`` command."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cost import catalog_update
from gpufleet.cost.catalog import COLUMNS, PriceCatalog
from gpufleet.cost.catalog_update import PriceSourceUnavailable, fetch_aws_prices, merge_csv
from gpufleet.errors import CatalogError
from gpufleet.model.node import CapacityType

runner = CliRunner()
HEADER = ",".join(COLUMNS)
SRC = "test-source 2026-11"


def csv_bytes(*rows: str) -> bytes:
    return ("\n".join([HEADER, *rows]) + "\n").encode()


def test_merge_adds_updates_and_keeps() -> None:
    base = PriceCatalog.load()
    data = csv_bytes(
        f"aws,us-east-1,p4de.24xlarge,A100-80GB,8,80,36.0,5.0,7.0,instance,{SRC}",  # updated
        f"lab,onprem,box-1,A100-80GB,8,80,12.5,,,instance,{SRC}",  # added
    )
    up = merge_csv(base, data, source="new.csv")
    prov = up.provenance
    assert prov.added == ("lab/onprem/box-1",) and prov.updated == ("aws/us-east-1/p4de.24xlarge",)
    assert prov.input_sha256 == hashlib.sha256(data).hexdigest()
    assert prov.base_sha256 == base.provenance.sha256
    assert prov.output_sha256 == hashlib.sha256(up.csv_text.encode()).hexdigest()
    assert len(up.catalog.entries) == len(base.entries) + 1
    p4de = next(e for e in up.catalog.entries if e.offering == "p4de.24xlarge")
    assert (p4de.on_demand_usd_per_hour, p4de.spot_usd_per_hour_min, p4de.source) == (36.0, 5.0, SRC)
    # the merged CSV round-trips through the validating loader unchanged
    again = PriceCatalog.from_bytes(up.csv_text.encode(), source="again")
    assert [e.offering for e in again.entries] == [e.offering for e in up.catalog.entries]


def test_merge_keeps_spot_when_the_new_row_has_none() -> None:
    base = PriceCatalog.load()
    old = next(e for e in base.entries if e.offering == "p4d.24xlarge")
    up = merge_csv(base, csv_bytes(f"aws,us-east-1,p4d.24xlarge,A100-40GB,8,40,30.0,,,instance,{SRC}"), source="x")
    new = next(e for e in up.catalog.entries if e.offering == "p4d.24xlarge")
    assert (new.spot_usd_per_hour_min, new.spot_usd_per_hour_max) == (old.spot_usd_per_hour_min,
                                                                        old.spot_usd_per_hour_max)  # fmt: skip
    assert new.source == f"on-demand: {SRC}; spot: {old.source}"
    assert up.provenance.kept_spot == ("aws/us-east-1/p4d.24xlarge",)
    # below the old spot range: the range is dropped rather than kept above on-demand
    up = merge_csv(base, csv_bytes(f"aws,us-east-1,p4d.24xlarge,A100-40GB,8,40,4.0,,,instance,{SRC}"), source="x")
    assert not next(e for e in up.catalog.entries if e.offering == "p4d.24xlarge").has_spot


BAD_ROWS = [
    ("unknown gpu", f"aws,us-east-1,x1,Z100,8,80,10,,,instance,{SRC}", "gpu", "unknown GPU type"),
    ("spot above on-demand", f"aws,us-east-1,x1,A100-80GB,8,80,10,11,12,instance,{SRC}", "spot_usd_per_hour_min",
     "above on-demand"),
    ("negative price", f"aws,us-east-1,x1,A100-80GB,8,80,-1,,,instance,{SRC}", "on_demand_usd_per_hour", "> 0"),
    ("no source", "aws,us-east-1,x1,A100-80GB,8,80,10,,,instance,", "source", "empty"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "row", "field", "words"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_merge_validates_like_the_catalog(name: str, row: str, field: str, words: str) -> None:
    with pytest.raises(CatalogError) as exc:
        merge_csv(PriceCatalog.load(), csv_bytes(row), source="in.csv")
    assert (exc.value.source, exc.value.line, exc.value.field) == ("in.csv", 2, field)
    assert words in str(exc.value)


# -- AWS ------------------------------------------------------------------------------------------


def product(itype: str, gpus: str, usd: str, unit: str = "Hrs") -> str:
    return json.dumps({
        "product": {"attributes": {"instanceType": itype, "gpu": gpus, "regionCode": "us-west-2"}},
        "publicationDate": "2026-11-01T00:00:00Z",
        "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": unit, "pricePerUnit": {"USD": usd}}}}}},
    })  # fmt: skip


class FakePricing:
    """A stand-in for boto3's pricing client: two pages of products, every call kept."""

    def __init__(self, pages: list[list[str]], error: Exception | None = None) -> None:
        self.pages = pages
        self.calls: list[dict[str, Any]] = []
        self.error = error

    def get_products(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        i = int(kwargs.get("NextToken", "0"))
        page: dict[str, Any] = {"PriceList": self.pages[i]}
        if i + 1 < len(self.pages):
            page["NextToken"] = str(i + 1)
        return page


def test_fetch_aws_prices_with_a_fake_client() -> None:
    fake = FakePricing([
        [product("p4de.24xlarge", "8", "40.9657500000"), product("m5.large", "0", "0.096")],
        [product("g5.xlarge", "1", "1.0060000000"), product("g5.2xlarge", "1", "0")],
    ])  # fmt: skip
    data, skipped = fetch_aws_prices(fake, "us-west-2")
    assert [c.get("NextToken") for c in fake.calls] == [None, "1"]
    assert fake.calls[0]["ServiceCode"] == "AmazonEC2"
    assert {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-west-2"} in fake.calls[0]["Filters"]
    assert skipped == ["g5.2xlarge", "m5.large"]
    cat = PriceCatalog.from_bytes(data, source="aws")
    assert [(e.offering, e.gpu, e.gpu_count, e.on_demand_usd_per_hour, e.has_spot) for e in cat.entries] == [
        ("g5.xlarge", "A10G", 1, 1.006, False),
        ("p4de.24xlarge", "A100-80GB", 8, 40.96575, False),
    ]
    assert cat.entries[0].source == "AWS Price List API AmazonEC2 us-west-2 published 2026-11-01T00:00:00Z"
    up = merge_csv(PriceCatalog.load(), data, source="aws-pricing:us-west-2")
    assert set(up.provenance.added) == {"aws/us-west-2/g5.xlarge", "aws/us-west-2/p4de.24xlarge"}
    assert up.catalog.gpu_hour_usd("A100-80GB", CapacityType.ON_DEMAND, provider="aws", region="us-west-2") == (
        40.96575 / 8
    )


def test_fetch_aws_errors_are_clear() -> None:
    with pytest.raises(PriceSourceUnavailable, match="failed: denied"):
        fetch_aws_prices(FakePricing([[]], error=RuntimeError("denied")), "us-east-1")
    with pytest.raises(PriceSourceUnavailable, match="no GPU instance prices for eu-north-9"):
        fetch_aws_prices(FakePricing([[product("m5.large", "0", "0.1")]]), "eu-north-9")


def test_aws_client_without_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_boto3(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "boto3":
            raise ImportError("no boto3")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_boto3)
    with pytest.raises(PriceSourceUnavailable, match=r"pip install 'gpufleet\[aws\]'"):
        catalog_update.aws_pricing_client()


# -- the command ----------------------------------------------------------------------------------


def test_update_prices_command(tmp_path: Path) -> None:
    src = tmp_path / "prices.csv"
    src.write_bytes(csv_bytes(f"lab,onprem,box-1,H100-80GB,8,80,30,,,instance,{SRC}"))
    out = tmp_path / "catalog.csv"
    res = runner.invoke(app, ["cost", "update-prices", "--csv", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 added, 0 updated" in res.stderr
    assert PriceCatalog.load(out).cheapest("H100-80GB", provider="lab").offering == "box-1"
    prov = json.loads((tmp_path / "catalog.csv.provenance.json").read_text())
    assert prov["input_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest() and prov["added"] == [
        "lab/onprem/box-1"
    ]
    res = runner.invoke(app, ["cost", "update-prices", "--csv", str(src), "--catalog", str(out)])
    assert res.exit_code == 0 and res.stdout.startswith(",".join(COLUMNS)) and "0 added, 0 updated" in res.stderr


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "one source"),
        (["--csv", "x.csv", "--aws"], "one source"),
        (["--csv", "/nonexistent/x.csv"], "cannot read"),
    ],
)
def test_update_prices_bad_input(argv: list[str], words: str) -> None:
    res = runner.invoke(app, ["cost", "update-prices", *argv])
    assert res.exit_code == 2 and words in res.stderr and res.stderr.strip().startswith("error: ")


def test_update_prices_bad_csv_names_the_line(tmp_path: Path) -> None:
    src = tmp_path / "prices.csv"
    src.write_bytes(csv_bytes(f"lab,onprem,box-1,H100-80GB,8,80,30,40,50,instance,{SRC}"))
    res = runner.invoke(app, ["cost", "update-prices", "--csv", str(src)])
    assert res.exit_code == 2 and f"{src}:2, field 'spot_usd_per_hour_min'" in res.stderr


def test_update_prices_aws_without_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> Any:
        raise PriceSourceUnavailable("the AWS price source needs boto3: pip install 'gpufleet[aws]'")

    monkeypatch.setattr(catalog_update, "aws_pricing_client", unavailable)
    res = runner.invoke(app, ["cost", "update-prices", "--aws", "--region", "us-east-1"])
    assert res.exit_code == 2 and "needs boto3" in res.stderr


def test_update_prices_aws_with_a_fake_client(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePricing([[product("p5.48xlarge", "8", "98.32")]])
    monkeypatch.setattr(catalog_update, "aws_pricing_client", lambda: fake)
    res = runner.invoke(app, ["cost", "update-prices", "--aws", "--region", "us-east-1"])
    assert res.exit_code == 0, res.output
    assert "0 added, 1 updated" in res.stderr or "0 added, 0 updated" in res.stderr
    assert "p5.48xlarge,H100-80GB,8,80,98.32" in res.stdout
