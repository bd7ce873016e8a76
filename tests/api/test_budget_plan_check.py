"""Issue 23, item 4: a plan is priced for the GPU it asks for, and the budget check says when a real
submit would be refused.

``POST /v1/budgets/check`` and the MCP tool ``check_budget_for_plan`` priced 8 H100 for 10 h at the
cluster's A100 price ($293.84) on a cluster with no H100 node, and never said that the submit would
be refused. The plan must be priced from the catalog for a GPU type no node has (the catalog's H100:
$558.40) and the answer must carry the submit's own feasibility verdict (``check_fits_store``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.agent.tools.plans import check_budget_for_plan
from gpufleet.io.catalog import load_catalog
from gpufleet.sdk import Client
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node

# the newcomer's cluster: one node of 8 A100-80GB at $29.384/h ($3.673 per GPU-hour)
NODE_USD = 29.384
A100_USD = NODE_USD / 8


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    for a in make_api(tmp_path, db_url):
        add_node(a.db, T0 - 86400, usd=NODE_USD)
        a.client.post(
            "/v1/budgets", json={"name": "alpha-cap", "scope": "team:alpha", "limit_usd": 1000.0}, headers=a.h("admin")
        )
        yield a


def catalog_usd(model: str) -> float:
    return load_catalog().quote(model).usd_per_gpu_hour


@dataclass(frozen=True)
class Plan:
    gpus: int
    hours: float
    gpu_types: tuple[str, ...]
    usd_per_gpu_hour: Any  # a number or a callable of nothing (the catalog's, read when run)
    catalog_priced: bool
    refused: str | None  # a phrase of the refusal, None: a submit is accepted


PLANS = [
    pytest.param(
        Plan(8, 10, ("H100",), lambda: catalog_usd("H100-80GB"), True, "no node"), id="h100-the-cluster-lacks"
    ),
    pytest.param(Plan(8, 10, ("A100-80GB",), A100_USD, False, None), id="a100-the-cluster-has"),
    pytest.param(Plan(8, 10, (), A100_USD, False, None), id="any-gpu"),
    pytest.param(
        Plan(2, 1, ("H100", "A100-80GB"), A100_USD, False, None), id="h100-or-a100-runs-on-the-a100s-at-their-price"
    ),
    pytest.param(Plan(16, 1, ("A100-80GB",), A100_USD, False, "no node"), id="more-gpus-than-any-node-has"),
]


@pytest.mark.parametrize("plan", PLANS)
def test_the_budget_check_prices_the_gpu_asked_and_says_a_submit_would_be_refused(api: Api, plan: Plan) -> None:
    body = {
        "command": ["x"],
        "gpus": plan.gpus,
        "gpu_types": list(plan.gpu_types),
        "estimated_runtime_s": plan.hours * 3600,
    }
    r = api.client.post("/v1/budgets/check", json=body, headers=api.h("alice"))
    assert r.status_code == 200, r.text
    out = r.json()
    price = plan.usd_per_gpu_hour() if callable(plan.usd_per_gpu_hour) else plan.usd_per_gpu_hour
    assert out["usd_per_gpu_hour"] == pytest.approx(price, abs=1e-4)
    assert out["job_cost_usd"] == pytest.approx(round(plan.gpus * plan.hours * price, 2), abs=0.005)
    assert (out["price_basis"] != "cluster") == plan.catalog_priced
    if plan.catalog_priced:
        assert out["price_basis"].startswith("catalog ") and "no H100-80GB node" in out["price_basis"]
    submit = api.client.post("/v1/jobs", json=body, headers=api.h("alice"))
    if plan.refused is None:
        assert out["submit_refused"] is None and submit.status_code == 201, submit.text
    else:  # the check says what the submit says
        assert plan.refused in out["submit_refused"] and submit.status_code == 422
        assert out["submit_refused"].split(": ", 1)[1] in submit.text


def test_the_newcomers_h100_plan_costs_the_catalogs_558_40(api: Api) -> None:
    """The issue's figures: 8 H100 for 10 h is $558.40 at the bundled catalog's H100, not $293.84."""
    r = api.client.post(
        "/v1/budgets/check",
        json={"command": ["x"], "gpus": 8, "gpu_types": ["H100"], "estimated_runtime_s": 36000},
        headers=api.h("alice"),
    ).json()
    assert r["job_cost_usd"] == 558.40 and r["job_cost_usd"] != round(8 * 10 * A100_USD, 2) == 293.84
    assert r["submit_refused"] is not None


class Through(httpx.BaseTransport):
    """The SDK's requests handed to the app's test client."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        r = self.api.client.request(
            request.method, request.url.raw_path.decode("ascii"), headers=headers, content=request.read()
        )
        return httpx.Response(r.status_code, headers=list(r.headers.items()), content=r.content)


@pytest.mark.parametrize(
    ("gpu_type", "refused"),
    [pytest.param("H100", True, id="h100-the-cluster-lacks"), pytest.param("A100-80GB", False, id="a100-it-has")],
)
def test_the_mcp_plan_check_prices_the_gpu_asked_and_says_a_submit_would_be_refused(
    api: Api, gpu_type: str, refused: bool
) -> None:
    with Client("http://testserver", api.secrets["alice"], transport=Through(api), retries=0) as client:
        plan = check_budget_for_plan(client, load_catalog(), None, 8, 10.0, gpu_type=gpu_type)
    price = catalog_usd("H100-80GB") if refused else A100_USD
    assert plan.usd_per_gpu_hour == pytest.approx(price, abs=1e-4)
    assert plan.forecast_usd == pytest.approx(round(80 * price, 2), abs=0.005)
    assert (plan.submit_refused is not None) == refused
    assert plan.summary.startswith("A real submit would be refused") == refused
    assert ("no H100-80GB node" in plan.summary) == refused
