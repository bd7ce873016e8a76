"""OpenCost's allocation API (``GET /allocation/compute``, ``/allocation``) against gpufleet's own
report: the same store (tests/observability/test_metrics.py's scenario), several windows and aggregates, each
allocation's dollars equal to ``/v1/usage``'s row to the cent; steps, idle, shared idle, filters,
a member's view, the response's shape, and bad parameters answered 400 naming the parameter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.observability.test_metrics import SCENARIOS, Built, build
from tests.support.api_support import T0, Api, make_api, problem

H = 3600.0


@pytest.fixture
def built(tmp_path: Path, db_url: str) -> Iterator[Built]:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    yield build(api, SCENARIOS[0])
    gen.close()


def _rfc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def alloc(api: Api, who: str = "admin", path: str = "/allocation/compute", **params: str) -> list[dict[str, Any]]:
    r = api.client.get(path, params=params, headers=api.h(who))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["code"] == 200 and doc["status"] == "success"
    return list(doc["data"])


def usage(api: Api, window: str, aggregate: str, who: str = "admin", **extra: str) -> dict[str, Any]:
    r = api.client.get("/v1/usage", params={"window": window, "aggregate": aggregate, **extra}, headers=api.h(who))
    assert r.status_code == 200, r.text
    return dict(r.json())


def cents(x: float | str) -> int:
    return round(float(x) * 100)


def name_of(row: dict[str, Any], names: list[str]) -> str:
    return "/".join(row["key"][n] or "__unallocated__" for n in names)


WINDOWS = [
    "2d",
    "today",
    "24h",
    f"{T0 - 30 * H:.0f},{T0 - 10 * H:.0f}",
    f"{_rfc(T0 - 13 * H)},{_rfc(T0 - 1 * H)}",
]
AGGREGATES = ["namespace", "team", "project", "job", "node", "label:owner", "team,project", "namespace,node"]


@pytest.mark.parametrize("window", WINDOWS)
def test_allocations_equal_the_usage_report_to_the_cent(built: Built, window: str) -> None:
    api = built.api
    for aggregate in AGGREGATES:
        names = aggregate.split(",")
        (got,) = alloc(api, window=window, aggregate=aggregate, accumulate="true")
        rep = usage(api, window, aggregate)
        want = {name_of(r, names): r for r in rep["rows"]}
        assert set(got) == set(want), (window, aggregate)
        for name, a in got.items():
            r = want[name]
            assert a["name"] == name
            assert cents(a["totalCost"]) == cents(r["total_cost_usd"]), (window, aggregate, name)
            assert cents(a["gpuCost"]) == cents(r["gpu_cost_usd"])
            assert cents(a["cpuCost"]) == cents(r["cpu_cost_usd"])
            assert cents(a["ramCost"]) == cents(r["memory_cost_usd"])
            assert a["gpuHours"] == pytest.approx(r["gpu_hours"], abs=1e-5)
            assert a["window"] == {"start": rep["window_start"].replace("+00:00", "Z"), "end": _end(rep)}
        # the cluster: every row together (the rows' sum does not depend on the grouping)
        (cluster,) = alloc(api, window=window, aggregate="cluster", accumulate="true")
        total = sum(cents(r["total_cost_usd"]) for r in rep["rows"])
        if rep["rows"]:
            assert cents(cluster["gpufleet"]["totalCost"]) == total
        else:
            assert cluster == {}


def _end(rep: dict[str, Any]) -> str:
    return str(rep["window_end"]).replace("+00:00", "Z")


def test_idle_and_shared_idle(built: Built) -> None:
    api = built.api
    (got,) = alloc(api, window="2d", aggregate="team", idle="true")
    rep = usage(api, "2d", "team")
    assert cents(got["__idle__"]["totalCost"]) == cents(rep["idle"]["total_cost_usd"])
    assert sum(cents(a["totalCost"]) for a in got.values()) == cents(rep["totals"]["total_cost_usd"])
    assert got["__idle__"]["gpuHours"] > 0
    (shared,) = alloc(api, window="2d", aggregate="team", shareIdle="true")
    spread = usage(api, "2d", "team", spread_idle="true")
    assert {n: cents(a["totalCost"]) for n, a in shared.items()} == {
        r["key"]["team"]: cents(r["total_cost_usd"]) for r in spread["rows"]
    }


def test_steps_are_the_report_of_each_step(built: Built) -> None:
    api = built.api
    sets = alloc(api, window="2d", aggregate="team", step="1d")
    assert len(sets) == 2
    for i, got in enumerate(sets):
        a, b = T0 - 48 * H + i * 24 * H, T0 - 24 * H + i * 24 * H
        rep = usage(api, f"{a:.0f},{b:.0f}", "team")
        assert {n: cents(x["totalCost"]) for n, x in got.items()} == {
            r["key"]["team"]: cents(r["total_cost_usd"]) for r in rep["rows"]
        }
        for x in got.values():
            assert x["window"] == {"start": _rfc(a), "end": _rfc(b)}
    # accumulate: one set for the whole window, whatever the step
    (one,) = alloc(api, window="2d", aggregate="team", step="1d", accumulate="true")
    rep = usage(api, "2d", "team")
    assert {n: cents(x["totalCost"]) for n, x in one.items()} == {
        r["key"]["team"]: cents(r["total_cost_usd"]) for r in rep["rows"]
    }


def test_resources_and_shape(built: Built) -> None:
    api = built.api
    (got,) = alloc(api, path="/allocation", window="2d", aggregate="job")
    running = got[built.ids["running"]]
    for key in (
        "name", "properties", "window", "start", "end", "minutes", "cpuCores", "cpuCoreHours", "cpuCost",
        "gpuCount", "gpuHours", "gpuCost", "ramBytes", "ramByteHours", "ramCost", "pvCost", "networkCost",
        "loadBalancerCost", "sharedCost", "externalCost", "totalCost", "totalEfficiency", "cpuEfficiency",
        "ramEfficiency",
    ):  # fmt: skip
        assert key in running, key
    assert running["properties"] == {"cluster": "gpufleet", "controller": built.ids["running"], "controllerKind": "job"}
    assert running["start"] == _rfc(T0 - 2 * H) and running["end"] == _rfc(T0)
    assert running["minutes"] == 120.0
    assert running["gpuHours"] == 2.0 and running["gpuCount"] == 1.0
    assert running["cpuCoreHours"] == 8.0 and running["cpuCores"] == 4.0
    assert running["ramByteHours"] == 2 * 16384 * 1024 * 1024 and running["ramBytes"] == 16384 * 1024 * 1024
    assert running["pvCost"] == running["networkCost"] == running["sharedCost"] == 0.0
    assert alloc(api, window="2d", aggregate="job") == [got]  # /allocation is /allocation/compute
    (by_label,) = alloc(api, window="2d", aggregate="label:owner")
    assert set(by_label) == {"ann", "__unallocated__"}
    assert by_label["ann"]["properties"] == {"cluster": "gpufleet", "labels": {"owner": "ann"}}


def test_pods_are_runs(built: Built) -> None:
    api = built.api
    (pods,) = alloc(api, window="2d", aggregate="pod")
    local = {f"{built.ids[k]}-r1" for k in ("ended", "running", "preempted")}  # gpu-a: the server's own node
    cluster = {f"gf-{built.ids[k]}-r1" for k in ("spot", "od")}  # a cluster's: the Kubernetes Job's name
    assert set(pods) == local | cluster
    rows = usage(api, "2d", "job")["rows"]
    assert sum(cents(p["totalCost"]) for p in pods.values()) == sum(cents(r["total_cost_usd"]) for r in rows)
    (one,) = alloc(api, window="2d", aggregate="pod", filter=f'pod:"{built.ids["running"]}-r1"')
    assert list(one) == [f"{built.ids['running']}-r1"]
    assert one[f"{built.ids['running']}-r1"]["properties"]["pod"] == f"{built.ids['running']}-r1"


FILTERS = [
    ('namespace:"research"', "job", lambda r: r["namespace"] == "research"),
    ('team:"alpha"+project:"vision"', "job", lambda r: r["team"] == "alpha" and r["project"] == "vision"),
    ('label[owner]:"ann"', "team", lambda r: r["label:owner"] == "ann"),
    ('namespace!:"default"', "team", lambda r: r["namespace"] != "default"),
    ('(team:"alpha"|team:"beta")+node:"gpu-a"', "job", lambda r: r["node"] == "gpu-a"),
    ('node<~:"spot"|node~>:"-2"', "node", lambda r: r["node"] in ("spot-1", "od-2")),
    ('controllerKind:"job"+project~:"lp"', "project", lambda r: r["project"] == "nlp"),
]


@pytest.mark.parametrize(("flt", "aggregate", "keep"), FILTERS, ids=[f[0] for f in FILTERS])
def test_filters(built: Built, flt: str, aggregate: str, keep: Any) -> None:
    api = built.api
    (got,) = alloc(api, window="2d", aggregate=aggregate, filter=flt)
    # the same rows from the report at the finest grouping, filtered, then summed to the aggregate
    fine = "job,team,project,namespace,node,label:owner"
    key = {"job": "job", "team": "team", "node": "node", "project": "project"}[aggregate]
    want: dict[str, int] = {}
    for r in usage(api, "2d", fine)["rows"]:
        if keep(r["key"]):
            want[r["key"][key]] = want.get(r["key"][key], 0) + cents(r["total_cost_usd"])
    assert {n: cents(a["totalCost"]) for n, a in got.items()} == want
    assert want


def test_a_member_sees_its_team(built: Built) -> None:
    api = built.api
    (mine,) = alloc(api, who="alice", window="2d", aggregate="job")
    rep = usage(api, "2d", "job", who="alice")
    assert {n: cents(a["totalCost"]) for n, a in mine.items()} == {
        r["key"]["job"]: cents(r["total_cost_usd"]) for r in rep["rows"]
    }
    assert set(mine) == {built.ids["ended"], built.ids["preempted"]}
    (cluster,) = alloc(api, who="bob", window="2d", aggregate="cluster")
    assert cents(cluster["gpufleet"]["totalCost"]) == sum(
        cents(r["total_cost_usd"]) for r in usage(api, "2d", "job", who="bob")["rows"]
    )
    r = api.client.get("/allocation/compute", params={"window": "2d"})
    problem(r, 401, "unauthenticated")


BAD = [
    ({}, "query.window"),
    ({"window": "3x"}, "query.window"),
    ({"window": "5,1"}, "query.window"),
    ({"window": "2d", "aggregate": "bogus"}, "query.aggregate"),
    ({"window": "2d", "aggregate": "team,team"}, "query.aggregate"),
    ({"window": "2d", "accumulate": "maybe"}, "query.accumulate"),
    ({"window": "2d", "idle": "2"}, "query.idle"),
    ({"window": "2d", "shareIdle": "sure"}, "query.shareIdle"),
    ({"window": "2d", "step": "1y"}, "query.step"),
    ({"window": "2d", "step": "1s"}, "query.step"),
    ({"window": "2d", "filter": 'namespace="x"'}, "query.filter"),
    ({"window": "2d", "filter": 'foo:"x"'}, "query.filter"),
    ({"window": "2d", "filter": 'namespace:"x'}, "query.filter"),
    ({"window": "2d", "filter": 'team:"a"+team:"b"|team:"c"'}, "query.filter"),
    ({"window": "2d", "filter": '(team:"a"'}, "query.filter"),
    ({"window": "2d", "filter": "label:x"}, "query.filter"),
]


@pytest.mark.parametrize(("params", "field"), BAD, ids=[f"{k}" for k, _ in BAD])
def test_bad_parameters_are_400_naming_them(built: Built, params: dict[str, str], field: str) -> None:
    r = built.api.client.get("/allocation/compute", params=params, headers=built.api.h("admin"))
    doc = problem(r, 400, "invalid_parameter")
    assert [e["field"] for e in doc["errors"]] == [field]
    assert field in doc["detail"]
