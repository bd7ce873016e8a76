"""A proposal that lowers a job's cost is not refused by the budget it relieves (issue 23, item 10).

A resize proposal replaces a pending job by a smaller one. The replacement used to go through the
submit's ``block`` check on its own, as if it were new work: with the budget already committed past
its limit (the very reason to shrink the job) it was refused with ``budget_exceeded`` and the
proposal failed. The replacement is checked for what it *adds* over the job it replaces: a cheaper
replacement always passes; a dearer one is still refused when the difference does not fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_proposal_approval import _setup, approve, propose
from tests.support.api_support import Api, make_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    for a in make_api(tmp_path):  # a fresh database per test
        _setup(a)
        yield a


def _block_budget(api: Api, limit_usd: float) -> None:
    body = {"name": "alpha-block", "scope": "team:alpha", "limit_usd": limit_usd, "action": "block"}
    r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    ("gpus_before", "gpus_after", "limit_usd", "expected"),
    [
        # 2 GPUs x 10 h is committed past the limit; 1 GPU x 10 h relieves it: executed
        pytest.param(2, 1, 1.0, "executed", id="shrink-over-the-limit"),
        # a cheaper job well inside the limit was never refused
        pytest.param(2, 1, 1e6, "executed", id="shrink-inside-the-limit"),
        # growing past the limit is still refused by the budget
        pytest.param(1, 2, 1.0, "failed", id="grow-over-the-limit"),
    ],
)
def test_a_resize_is_checked_for_what_it_adds(
    api: Api, gpus_before: int, gpus_after: int, limit_usd: float, expected: str
) -> None:
    target = api.submit("alice", gpus=gpus_before, max_runtime_s=36000)["id"]
    _block_budget(api, limit_usd)  # created after the job: the job's estimate is already committed
    p = propose(api, "alice-1", "resize", target, {"gpus": gpus_after})
    r = approve(api, "carol", p["id"])
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["state"] == expected, out["result"]
    job = api.client.get(f"/v1/jobs/{target}", headers=api.h("admin")).json()
    if expected == "executed":
        assert job["state"] == "CANCELLED"
        new = api.client.get(f"/v1/jobs/{out['result_job_id']}", headers=api.h("admin")).json()
        assert new["gpus"] == gpus_after and new["state"] == "PENDING"
    else:
        assert "budget_exceeded" in out["result"]
        assert job["state"] == "PENDING"  # nothing of the action kept
