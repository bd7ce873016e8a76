"""Issue 10, observations 4 and 7: every figure of a team's money says the same thing.

4. ``/v1/forecast?team=vision`` said ``spent_usd 0.0`` while ``budget show`` said $0.67 for the same
   period: the forecast counted complete days only, so today's spend was nowhere.
7. A budget-blocked submit said "$0.00 left", ``budget check`` "$−8.55 left" and ``budget show``
   "projected $0.47, committed $9.05": three figures for one question.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cost.budgets.status import left_phrase
from tests.support.api_support import T0, Api, make_api
from tests.support.budget_support import add_node, add_spend


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


def _budget(api: Api, **body: Any) -> dict[str, Any]:
    body = {"name": "alpha-cap", "scope": "team:alpha", "limit_usd": 10.0, **body}
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_the_forecast_counts_todays_spend_as_the_budget_does(api: Api) -> None:
    add_node(api.db, T0 - 40 * 86400)
    today_start = T0 - T0 % 86400
    assert T0 - today_start > 3600  # spend today, after midnight
    add_spend(api.db, "alpha", 0.67, T0 - 60)
    _budget(api)
    st = api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("alice")).json()
    f = api.client.get("/v1/forecast?team=alpha", headers=api.h("admin")).json()
    assert st["spend_usd"] == pytest.approx(0.67)
    assert f["spent_usd"] == pytest.approx(st["spend_usd"])  # the same figure, from the same spend path
    assert f["total_usd"] >= f["spent_usd"]
    everyone = api.client.get("/v1/forecast", headers=api.h("admin")).json()
    assert everyone["spent_usd"] >= 0.67  # the cluster's nodes, idle included


def test_the_402_budget_check_and_budget_show_say_the_same_left(api: Api) -> None:
    add_node(api.db, T0 - 40 * 86400)
    add_spend(api.db, "alpha", 18.55, T0 - 60)  # $8.55 over a $10 limit
    _budget(api, action="block")
    refused = api.client.post(
        "/v1/jobs", json={"command": ["x"], "gpus": 1, "estimated_runtime_s": 3600}, headers=api.h("alice")
    )
    assert refused.status_code == 402, refused.text
    check = api.client.post(
        "/v1/budgets/check", json={"command": ["x"], "gpus": 1, "estimated_runtime_s": 3600}, headers=api.h("alice")
    ).json()
    st = api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("alice")).json()
    line = check["budgets"][0]
    assert line["committed_usd"] == st["committed_usd"] == pytest.approx(18.55)
    assert line["remaining_usd"] == st["remaining_usd"] == pytest.approx(-8.55)
    said = left_phrase(st["limit_usd"], st["committed_usd"])
    assert said == "$8.55 over the limit"
    assert said in refused.json()["detail"]
    assert "$0.00 left" not in refused.json()["detail"]
    assert st["projected_usd"] >= st["committed_usd"]  # a projection below what is committed says nothing


def test_cli_budget_show_and_check_print_the_same_phrase(api: Api) -> None:
    from gpufleet.cli import budget as cli_budget
    from gpufleet.wire import BudgetStatusOut

    add_node(api.db, T0 - 40 * 86400)
    add_spend(api.db, "alpha", 18.55, T0 - 60)
    _budget(api, action="block")
    st = BudgetStatusOut.model_validate(api.client.get("/v1/budgets/alpha-cap/status", headers=api.h("alice")).json())
    from rich.console import Console

    out = Console(width=200, record=True)
    old = cli_budget.console
    cli_budget.console = out
    try:
        cli_budget._print_status(st)
    finally:
        cli_budget.console = old
    text = out.export_text()
    assert "$8.55 over the limit" in text and "committed $18.55" in text
    assert not re.search(r"\$-", text)
