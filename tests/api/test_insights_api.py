"""The insights endpoints through HTTP: progress and forecasts, spend forecast, anomalies,
recommendations and ROI; and the SDK methods over the same app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.model.node import CapacityType, Node
from gpufleet.store import repo
from tests.support.api_support import T0, Api, make_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


def _running(api: Api) -> str:
    """Node n1 (4x A100-80GB, $8/h) since T0-10h; bob's job runs 1 GPU since T0-2h (submitted at T0-2h)."""
    b = api.submit("bob", gpus=1)["id"]
    with api.db.session() as s:
        repo.get_job(s, b).submitted_at = T0 - 2 * 3600
        repo.upsert_node(
            s,
            Node("n1", gpu_model="A100-80GB", gpu_count=4, capacity_type=CapacityType.ON_DEMAND),
            hourly_usd=8.0,
            now=T0 - 10 * 3600,
        )
        job = repo.get_job(s, b)
        placement = [{"node": "n1", "gpus": [2], "milli": 1000}]
        repo.transition(s, job, "ADMITTED", "placed", T0 - 2 * 3600, run=1, placement=placement)
        repo.open_run(
            s,
            job_id=b,
            run=1,
            node="n1",
            placement=placement,
            capacity_type="on-demand",
            node_hourly_usd=8.0,
            now=T0 - 2 * 3600,
        )
        repo.mark_run_started(s, b, 1, pid=1, started_at=T0 - 2 * 3600)
        repo.transition(s, job, "RUNNING", "started", T0 - 2 * 3600, started_at=T0 - 2 * 3600)
    return b


def test_progress_and_forecast(api: Api) -> None:
    b = _running(api)
    api.clock.advance(0)
    r = api.client.post(f"/v1/jobs/{b}/progress", json={"step": 0, "total_steps": 1000}, headers=api.h("bob"))
    assert r.status_code == 201, r.text
    api.clock.advance(600)
    r = api.client.post(
        f"/v1/jobs/{b}/progress",
        json={"step": 500, "total_steps": 1000, "metrics": {"loss": 0.4}},
        headers=api.h("bob"),
    )
    f = r.json()
    assert r.status_code == 201 and f["method"] == "progress"
    assert f["fraction_done"] == pytest.approx(0.5) and f["remaining_s"] == pytest.approx(600)
    assert f["cost_rate_usd_per_hour"] == pytest.approx(2.0, rel=5e-3)  # 1 of 4 GPUs of an $8/h node (cents)
    assert f["remaining_usd"] == pytest.approx(600 / 3600 * 2.0, rel=5e-3)
    assert api.client.get(f"/v1/jobs/{b}/forecast", headers=api.h("admin")).json()["job_id"] == b
    # other teams see the same 404 as for a missing job; viewers cannot report
    assert api.client.get(f"/v1/jobs/{b}/forecast", headers=api.h("alice")).status_code == 404
    assert api.client.post(f"/v1/jobs/{b}/progress", json={"step": 1}, headers=api.h("vera")).status_code == 403
    bad = api.client.post(f"/v1/jobs/{b}/progress", json={"step": -1}, headers=api.h("bob"))
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"


def test_spend_forecast_anomalies_recommendations_roi(api: Api) -> None:
    _running(api)
    f = api.client.get("/v1/forecast?period=month", headers=api.h("admin"))
    assert f.status_code == 200, f.text
    body = f.json()
    assert body["scope"] == "all" and body["total_usd"] >= body["spent_usd"] >= 0
    assert api.client.get("/v1/forecast", headers=api.h("bob")).json()["scope"] == "team:beta"
    a = api.client.get("/v1/anomalies?days=7", headers=api.h("admin"))
    assert a.status_code == 200 and a.json() == []
    recs = api.client.get("/v1/recommendations?window=24h", headers=api.h("admin"))
    assert recs.status_code == 200 and isinstance(recs.json(), list)
    roi = api.client.get("/v1/roi?window=24h&platform_cost_usd=100", headers=api.h("vera"))
    assert roi.status_code == 200, roi.text
    d = roi.json()
    assert d["peak_gpus"] == 1 and d["actual_usd"] == pytest.approx(80.0)
    assert sum(d["levers_usd"].values()) == pytest.approx(d["savings_usd"])
    bad = api.client.get("/v1/roi?window=nonsense", headers=api.h("admin"))
    assert bad.status_code == 422


def test_sdk_methods(api: Api) -> None:
    from gpufleet.sdk.client import Client

    b = _running(api)
    with Client("http://testserver", api.secrets["bob"], transport=api.sdk_transport) as c:  # type: ignore[attr-defined]
        f = c.report_progress(b, step=10, total_steps=100)
        assert f.job_id == b
        assert c.forecast(b).job_id == b
        assert c.forecast_spend().scope == "team:beta"
        assert c.anomalies(days=3) == []
        assert isinstance(c.recommendations("24h"), list)
        assert c.roi("24h").hours == pytest.approx(10)  # of the 24 h asked, the ledger observed 10


def test_roi_prices_the_servers_pricing_rules(tmp_path: Path) -> None:
    """With a server-wide 0.5x time-of-day window, ROI's actual cost halves and the off-peak lever
    carries exactly the difference."""
    from contextlib import contextmanager

    from gpufleet.cost.rules import load_rules

    rules = load_rules(
        {"timezone": "UTC", "windows": [{"name": "all", "start": "00:00", "end": "00:00", "multiplier": 0.5}]}
    )
    results = []
    for ctx_args in ({}, {"pricing_rules": rules}):
        with contextmanager(make_api)(tmp_path / str(len(results)), **ctx_args) as api:
            _running(api)
            r = api.client.get("/v1/roi?window=24h", headers=api.h("admin"))
            assert r.status_code == 200, r.text
            results.append(r.json())
    plain, priced = results
    assert plain["actual_usd"] == pytest.approx(80.0) and priced["actual_usd"] == pytest.approx(40.0)
    assert priced["levers_usd"]["off_peak"] - plain["levers_usd"]["off_peak"] == pytest.approx(40.0)
    assert sum(priced["levers_usd"].values()) == pytest.approx(priced["savings_usd"])
