"""Who sees which series of ``/metrics`` and ``/metrics/dcgm`` (issue 20, point 7), on SQLite and
PostgreSQL, with the two-team store of tests/observability/test_metrics.py (alpha and beta: ended, running,
preempted and spot-interrupted jobs, a budget each, GPU telemetry, a leader's queue):

- no token: cluster totals only — no series carries a job id, a team, a namespace, a project, a pod
  or a budget; the totals are the sums of the full series (budgets are left out: a sum of
  percentages means nothing); the DCGM series name no pod;
- a member or viewer token: its own team's series only (the other team's jobs, pods and budgets
  are absent, as a 404 everywhere else), plus the cluster-wide ones (nodes, HTTP, savings);
- an admin token, or a scraper's ``metrics`` token (what Prometheus is given): every series, as
  before; the metrics token reads nothing else;
- an invalid token, or an ``Authorization`` header that is not a bearer token: 401;
- every view passes ``promtool check metrics``;
- the chart's ServiceMonitor sends the token of ``metrics.serviceMonitor.authorization`` (a Secret).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.test_metrics import FAMILIES, SCENARIOS, Built, build
from tests.support.api_support import Api, make_api, problem

PRIVATE = frozenset({"job", "team", "namespace", "project", "pod", "budget"})
BUDGET_FAMILIES = (
    "gpufleet_budget_percentage",
    "gpufleet_budget_spend_usd",
    "gpufleet_budget_limit_usd",
    "gpufleet_budget_enforcing",
)
# the families summed over teams for an anonymous scrape, and the labels they keep
TOTALS: dict[str, tuple[str, ...]] = {
    "gpufleet_jobs": ("state",),
    "gpufleet_queue_length": ("reason",),
    "gpufleet_admissions": (),
    "gpufleet_preemptions": ("reason",),
    "gpufleet_cost_usd": ("gpu_type", "capacity_type"),
    "gpufleet_hourly_cost_rate_usd": ("gpu_type", "capacity_type"),
    "gpufleet_job_submits": (),
}


@pytest.fixture
def built(tmp_path: Path, db_url: str) -> Iterator[Built]:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    api.client.app.state.metrics.store.cache_s = 0.0  # type: ignore[attr-defined]
    b = build(api, SCENARIOS[0])
    api.submit("alice")
    api.submit("bob")
    yield b
    gen.close()


def _get(api: Api, who: str | None, path: str = "/metrics") -> str:
    r = api.client.get(path, headers=api.h(who) if who else {})
    assert r.status_code == 200, r.text
    return r.text


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _values(fams: dict[str, Any], label: str) -> set[str]:
    return {s.labels[label] for f in fams.values() for s in f.samples if label in s.labels}


def _ids(b: Built, team: str | None = None) -> set[str]:
    return {b.ids[j.key] for j in b.scenario.jobs if team is None or j.team == team}


def _sum_by(fams: dict[str, Any], name: str, keep: tuple[str, ...]) -> dict[tuple[Any, ...], float]:
    out: dict[tuple[Any, ...], float] = defaultdict(float)
    for s in fams[name].samples:
        if s.name.endswith("_created"):
            continue
        out[(s.name, *(s.labels[k] for k in keep))] += s.value
    return dict(out)


def test_anonymous_metrics_are_cluster_totals(built: Built) -> None:
    api = built.api
    text = _get(api, None)
    fams = _families(text)
    for job in _ids(built):
        assert job not in text, job
    for f in fams.values():
        for s in f.samples:
            assert not PRIVATE & set(s.labels), (s.name, s.labels)
    for word in ("alpha-cap", "beta-watch"):
        assert word not in text, word
    values = {v for f in fams.values() for s in f.samples for v in s.labels.values()}
    assert not values & {"alpha", "beta", "research", "vision", "nlp"}, values
    for name in BUDGET_FAMILIES:
        assert name not in fams or not fams[name].samples, name
    # the totals are the full series summed
    full = _families(_get(api, "admin"))
    for name, keep in TOTALS.items():
        got = _sum_by(fams, name, keep)
        want = _sum_by(full, name, keep)
        assert got.keys() == want.keys(), name
        for key, value in want.items():
            assert got[key] == pytest.approx(value), (name, key)
    # what carries no private label is served whole
    for name in ("gpufleet_gpus_capacity", "gpufleet_gpus_allocated", "node_total_hourly_cost", "gpufleet_store_up"):
        assert [(s.labels, s.value) for s in fams[name].samples] == [(s.labels, s.value) for s in full[name].samples]
    # the DCGM series: every GPU, no holder
    dcgm_text = _get(api, None, "/metrics/dcgm")
    dcgm = _families(dcgm_text)
    util = dcgm["DCGM_FI_DEV_GPU_UTIL"].samples
    assert {s.labels["gpu"] for s in util} == {"0", "1", "2"}
    assert all(s.labels["pod"] == s.labels["namespace"] == s.labels["container"] == "" for s in util)
    assert not any(job in dcgm_text for job in _ids(built))


@pytest.mark.parametrize("who", ["alice", "vera"])
def test_a_member_or_viewer_sees_only_its_team(built: Built, who: str) -> None:
    api = built.api
    text = _get(api, who)
    fams = _families(text)
    for job in _ids(built, "beta"):
        assert job not in text, job
    assert _values(fams, "team") == {"alpha"}
    assert _values(fams, "budget") == {"alpha-cap"}
    assert _values(fams, "job") == _ids(built, "alpha")  # their cost series
    assert "beta" not in text and "beta-watch" not in text and "research" not in text
    assert not _values(fams, "pod")  # beta's is the only running pod
    dcgm = _families(_get(api, who, "/metrics/dcgm"))
    util = {s.labels["gpu"]: s.labels for s in dcgm["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert set(util) == {"0", "1", "2"} and util["2"]["pod"] == "" and util["2"]["namespace"] == ""
    # bob (beta) sees his running pod, on its GPU too, and nothing of alpha's
    bob = _get(api, "bob")
    running = f"{built.ids['running']}-r1"
    assert running in bob and not any(job in bob for job in _ids(built, "alpha"))
    assert _values(_families(bob), "team") == {"beta"}
    bob_util = {s.labels["gpu"]: s.labels for s in _families(_get(api, "bob", "/metrics/dcgm"))[
        "DCGM_FI_DEV_GPU_UTIL"].samples}  # fmt: skip
    assert bob_util["2"]["pod"] == running and bob_util["2"]["namespace"] == "research"


def test_an_admin_token_sees_every_series(built: Built) -> None:
    api = built.api
    text = _get(api, "admin")
    fams = _families(text)
    for name, (_kind, labels) in FAMILIES.items():
        if name == "gpufleet_autoscaler_decisions" or not labels:
            continue
        assert fams[name].samples, name
    for job in _ids(built):
        assert job in text
    assert _values(fams, "team") == {"alpha", "beta"}
    assert _values(fams, "budget") == {"alpha-cap", "beta-watch"}
    dcgm = _families(_get(api, "admin", "/metrics/dcgm"))
    held = [s for s in dcgm["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["pod"]]
    assert [s.labels["pod"] for s in held] == [f"{built.ids['running']}-r1"]


def test_a_metrics_token_reads_every_series_and_nothing_else(built: Built) -> None:
    """What Prometheus is given: a token of the ``metrics`` role reads ``/metrics`` and
    ``/metrics/dcgm`` exactly as an admin does, and every other endpoint refuses it (403): a
    leaked scrape token submits, reads and changes nothing."""
    from gpufleet.store import repo

    api = built.api
    with api.db.session() as s:
        _, secret = repo.create_token(s, team="ops", role="metrics", name="prometheus", now=api.clock.now())
    h = {"Authorization": f"Bearer {secret}"}
    for path in ("/metrics", "/metrics/dcgm"):
        r = api.client.get(path, headers=h)
        assert r.status_code == 200, r.text
        admin = _families(_get(api, "admin", path))
        assert set(_families(r.text)) == set(admin)
    text = api.client.get("/metrics", headers=h).text
    assert all(job in text for job in _ids(built))
    assert _values(_families(text), "team") == {"alpha", "beta"}
    job = next(iter(_ids(built, "alpha")))
    for method, path, body in [
        ("GET", "/v1/whoami", None),
        ("GET", "/v1/jobs", None),
        ("GET", f"/v1/jobs/{job}", None),
        ("GET", f"/v1/jobs/{job}/logs", None),
        ("GET", "/v1/usage", None),
        ("GET", "/v1/budgets", None),
        ("GET", "/v1/tokens", None),
        ("GET", "/allocation/compute?window=1d", None),
        ("POST", "/v1/jobs", {"command": ["true"]}),
        ("POST", f"/v1/jobs/{job}/cancel", None),
        ("POST", "/v1/tokens", {"team": "ops", "role": "admin"}),
    ]:
        r = api.client.request(method, path, headers=h, json=body)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert "metrics token" in r.text


@pytest.mark.parametrize("path", ["/metrics", "/metrics/dcgm"])
def test_a_bad_token_is_refused(built: Built, path: str) -> None:
    api = built.api
    for headers in ({"Authorization": "Bearer gpf_not-a-real-token"}, {"Authorization": "Basic dXNlcjpwYXNz"}):
        r = api.client.get(path, headers=headers)
        problem(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"].startswith("Bearer")


def test_every_view_passes_promtool(built: Built) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("GPUFLEET_SKIP_PROMTOOL") == "1":
            pytest.skip("promtool not installed (GPUFLEET_SKIP_PROMTOOL=1)")
        pytest.fail("promtool not found: apt-get install prometheus (make test does), or GPUFLEET_SKIP_PROMTOOL=1")
    for who in (None, "alice", "bob", "admin"):
        text = _get(built.api, who)
        out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (who, out.stdout + out.stderr)


# -- the chart: Prometheus Operator's scrape sends the token ----------------------------------------------------


def test_service_monitor_sends_the_scrape_token() -> None:
    from tests.support.helm.chart import render

    api = ("monitoring.coreos.com/v1",)
    db = {"mode": "external", "external": {"existingSecret": "gpufleet-db", "key": "url"}}
    sm: dict[str, Any] = {"enabled": True, "authorization": {"existingSecret": "prom-gpufleet", "key": "token"}}
    r = render({"database": db, "metrics": {"serviceMonitor": sm}}, api_versions=api)
    assert r.result.ok, r.error
    endpoints = r.one("ServiceMonitor")["spec"]["endpoints"]
    assert [e["path"] for e in endpoints] == ["/metrics", "/metrics/dcgm"]
    for e in endpoints:
        assert e["authorization"] == {"type": "Bearer", "credentials": {"name": "prom-gpufleet", "key": "token"}}
    # without a Secret: no authorization (the scrape gets the totals only)
    r = render({"database": db, "metrics": {"serviceMonitor": {"enabled": True}}}, api_versions=api)
    assert r.result.ok, r.error
    assert all("authorization" not in e for e in r.one("ServiceMonitor")["spec"]["endpoints"])
    # the schema refuses a misspelt field
    bad = {"enabled": True, "authorization": {"secret": "prom-gpufleet"}}
    r = render({"database": db, "metrics": {"serviceMonitor": bad}}, api_versions=api)
    assert not r.result.ok and "authorization" in r.error
