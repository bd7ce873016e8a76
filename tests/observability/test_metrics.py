"""``/metrics`` and ``/metrics/dcgm`` on a store with nodes, jobs (running, ended, preempted,
spot-interrupted), budgets, telemetry samples and a leader's queue: every family with its labels,
dollars equal to the ledger's report to the cent, rates equal to the nodes' price shares, budget
figures equal to ``/v1/budgets/{name}/status``, and counters that never go down. Scrapes send the
admin token (every series); what other readers see is tests/security/test_metrics_auth.py's.

The scenarios are a named table (:data:`SCENARIOS`); :func:`build` writes one into a store through
the repository functions the controller uses (transitions, runs, segments, heartbeats), so what is
scraped is what a real server would have stored. ``tests/api/test_api.py``'s promtool test reuses it."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpufleet.backends.base import GpuSample
from gpufleet.cost.pricesplit import split_node_price
from gpufleet.cost.rules import PricingRules, load_rules
from gpufleet.model.node import CapacityType, Node
from gpufleet.services.budgets import BudgetService
from gpufleet.store import repo
from tests.support.api_support import T0, Api, make_api

H = 3600.0
LOCAL = {"gpufleet.io/backend": "local"}


@dataclass(frozen=True)
class NodeCase:
    node: Node
    usd: float
    added_h: float  # hours relative to T0
    removed_h: float | None = None


@dataclass(frozen=True)
class RunCase:
    node: str
    gpus: tuple[int, ...]
    start_h: float
    end_h: float | None = None  # None: still running
    outcome: str = "succeeded"  # the backend's word for how it ended: succeeded | stopped | lost
    stop: str | None = None  # why a stop was asked ("preempt: ...")


@dataclass(frozen=True)
class JobCase:
    key: str
    team: str
    runs: tuple[RunCase, ...] = ()
    project: str = ""
    namespace: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    priority: str = "normal"
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: tuple[NodeCase, ...]
    jobs: tuple[JobCase, ...]
    budgets: tuple[dict[str, Any], ...] = ()
    samples: tuple[GpuSample, ...] = ()
    queue: tuple[tuple[str, str, str | None], ...] = ()  # (job key, reason, blocked) as the leader publishes
    rules: dict[str, Any] | None = None


GPU_A = NodeCase(
    Node("gpu-a", gpu_model="A100-80GB", gpu_count=4, cpu_milli=32000, memory_mib=262144, pool="local", labels=LOCAL),
    12.0,
    -48,
)
SPOT_1 = NodeCase(
    Node(
        "spot-1",
        gpu_model="L4",
        gpu_count=1,
        cpu_milli=8000,
        memory_mib=32768,
        pool="spot-l4",
        capacity_type=CapacityType.SPOT,
        labels={
            "node.kubernetes.io/instance-type": "g6.2xlarge",
            "topology.kubernetes.io/region": "us-east-1",
            "kubernetes.io/arch": "amd64",
            "gpufleet.io/provisioned": "true",
            "gpufleet.io/pool": "spot-l4",
        },
    ),
    0.5,
    -20,
    -10,
)
OD_2 = NodeCase(
    Node(
        "od-2",
        gpu_model="L4",
        gpu_count=1,
        cpu_milli=8000,
        memory_mib=32768,
        pool="od-l4",
        labels={"gpufleet.io/provisioned": "true", "gpufleet.io/pool": "od-l4"},
    ),
    0.8,
    -5,
)

MIXED_JOBS = (
    JobCase("ended", "alpha", (RunCase("gpu-a", (0, 1), -30, -28),), project="vision", labels={"owner": "ann"}),
    JobCase(
        "running",
        "beta",
        (RunCase("gpu-a", (2,), -2),),
        project="nlp",
        namespace="research",
        cpu_milli=4000,
        memory_mib=16384,
    ),
    JobCase(
        "preempted",
        "alpha",
        (RunCase("gpu-a", (0, 1), -12, -11, "stopped", "preempt: preempted by higher-priority job x (high)"),),
        project="vision",
    ),
    JobCase("spot", "beta", (RunCase("spot-1", (0,), -15, -10, "lost"),), project="nlp"),
    JobCase("od", "beta", (RunCase("od-2", (0,), -4, -3),), project="nlp"),
)
SAMPLES = (
    *(GpuSample(T0 - 30, "gpu-a", i, f"GPU-{i}", 10.0 * (i + 1), 1000.0 * (i + 1), 81920.0, {}) for i in range(3)),
    GpuSample(T0 - 3 * H, "gpu-a", 3, "GPU-3", 99.0, 5.0, 81920.0, {}),  # stale: left out
    GpuSample(T0 - 30, "od-2", 0, "GPU-x", 50.0, 100.0, 24576.0, {}),  # a cluster's GPU: its exporter's
)
BUDGETS = (
    {"name": "alpha-cap", "scope": "team:alpha", "limit_usd": 5.0, "action": "throttle", "throttle": {"max_gpus": 1}},
    {"name": "beta-watch", "scope": "team:beta", "limit_usd": 1000.0},
)
QUEUE = (("preempted", "no node has room", None), ("spot", "quota: beta over nominal", "quota"))

SCENARIOS = [
    Scenario("every kind of job", (GPU_A, SPOT_1, OD_2), MIXED_JOBS, BUDGETS, SAMPLES, QUEUE),
    Scenario(
        "pricing rules: off-peak window and priority multiplier",
        (GPU_A, SPOT_1, OD_2),
        (*MIXED_JOBS[:1], JobCase("urgent", "beta", (RunCase("gpu-a", (3,), -26, -1),), priority="urgent")),
        BUDGETS,
        rules={
            "windows": [{"name": "night", "start": "22:00", "end": "06:00", "multiplier": 0.5}],
            "priority_multipliers": {"urgent": 1.5},
        },
    ),
    Scenario("one node, nothing ran", (GPU_A,), ()),
]


@dataclass
class Built:
    api: Api
    scenario: Scenario
    ids: dict[str, str]  # job key → id


def build(api: Api, sc: Scenario) -> Built:
    """Write ``sc`` into the store of ``api`` (the clock stays at T0)."""
    ids: dict[str, str] = {}
    with api.db.session() as s:
        for nc in sc.nodes:
            repo.upsert_node(s, nc.node, hourly_usd=nc.usd, now=T0 + nc.added_h * H)
        for nc in sc.nodes:
            if nc.removed_h is not None:
                repo.remove_node(s, nc.node.name, T0 + nc.removed_h * H)
    for jc in sc.jobs:
        ids[jc.key] = _job(api, jc, {nc.node.name: nc for nc in sc.nodes})
    if sc.samples:
        with api.db.session() as s:
            repo.record_gpu_samples(s, list(sc.samples))
    if sc.queue:
        queue = [
            {"job": ids[k], "position": i, "reason": why, "estimated_start": None, "blocked": blocked}
            for i, (k, why, blocked) in enumerate(sc.queue, start=1)
        ]
        with api.db.session() as s:
            repo.heartbeat(s, "leader-1", is_leader=True, now=T0, cycle_ms=3.0, queue=queue, info={})
    for body in sc.budgets:
        r = api.client.post("/v1/budgets", json=body, headers=api.h("admin"))
        assert r.status_code == 201, r.text
    if sc.budgets:  # the controller's evaluation: the over-limit budget's action comes into force
        BudgetService(api.db, api.clock, interval_s=0.0, rules=_rules(sc)).run(T0)
    return Built(api, sc, ids)


def _job(api: Api, jc: JobCase, nodes: dict[str, NodeCase]) -> str:
    first = jc.runs[0].start_h if jc.runs else 0.0
    fields = {
        "name": jc.key,
        "command": ["train"],
        "gpus": len(jc.runs[0].gpus) if jc.runs else 1,
        "project": jc.project,
        "namespace": jc.namespace,
        "labels": jc.labels,
        "priority_class": jc.priority,
        "cpu_milli": jc.cpu_milli,
        "memory_mib": jc.memory_mib,
    }
    with api.db.session() as s:
        row, _ = repo.submit_job(
            s,
            fields,
            team=jc.team,
            submitted_by=None,
            idempotency_key=None,
            request_sha256=None,
            now=T0 + (first - 0.25) * H,
        )
        job_id = row.id
    for n, rc in enumerate(jc.runs, start=1):
        nc = nodes[rc.node]
        start = T0 + rc.start_h * H
        placement = [{"node": rc.node, "gpus": list(rc.gpus), "milli": 1000}]
        with api.db.session() as s:
            job = repo.get_job(s, job_id)
            repo.transition(s, job, "ADMITTED", "placed", start, run=n, placement=placement)
            repo.open_run(
                s,
                job_id=job_id,
                run=n,
                node=rc.node,
                placement=placement,
                capacity_type=str(nc.node.capacity_type),
                node_hourly_usd=nc.usd,
                now=start,
            )
            repo.transition(s, job, "RUNNING", "started", start, started_at=job.started_at or start)
            repo.mark_run_started(s, job_id, n, pid=100 + n, started_at=start)
            if rc.stop is not None:
                repo.request_stop(s, job_id, n, rc.stop)
            if rc.end_h is None:
                continue
            end = T0 + rc.end_h * H
            repo.end_run(s, job_id, n, outcome=rc.outcome, exit_code=0, reason="", started_at=start, ended_at=end)
            node_row = next(r for r in repo.list_nodes(s, include_removed=True) if r.name == rc.node)
            repo.append_segment(
                s,
                job=job,
                run=n,
                node=node_row,
                gpu_share_units=7000 * len(rc.gpus),
                cpu_milli=jc.cpu_milli,
                memory_mib=jc.memory_mib,
                node_hourly_usd=nc.usd,
                capacity_type=str(nc.node.capacity_type),
                start=start,
                end=end,
            )
            if rc.outcome == "succeeded":
                repo.transition(s, job, "SUCCEEDED", "exited 0", end)
            else:
                repo.transition(s, job, "PREEMPTED", rc.stop or "lost", end)
                repo.transition(s, job, "PENDING", "requeued", end, placement=[])
    return job_id


def _rules(sc: Scenario) -> PricingRules | None:
    return load_rules(sc.rules) if sc.rules is not None else None


@pytest.fixture(params=SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def built(request: pytest.FixtureRequest, tmp_path: Path, db_url: str) -> Iterator[Built]:
    sc: Scenario = request.param
    gen = make_api(tmp_path, db_url, pricing_rules=_rules(sc))
    api = next(gen)
    api.client.app.state.metrics.store.cache_s = 0.0  # type: ignore[attr-defined]
    yield build(api, sc)
    gen.close()


def scrape(api: Api, path: str = "/metrics", who: str | None = "admin") -> dict[str, Any]:
    """The families of ``path`` as ``who`` sees them: an admin (every series, what Prometheus is
    given) unless told; None: no token (tests/security/test_metrics_auth.py checks the other views)."""
    r = api.client.get(path, headers=api.h(who) if who else {})
    assert r.status_code == 200, r.text
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def samples(families: dict[str, Any], name: str, suffix: str = "") -> list[Sample]:
    fam = families.get(name)
    return [] if fam is None else [s for s in fam.samples if s.name == name + suffix]


# -- every family, its type and labels --------------------------------------------------------------

NODE = ("instance", "node", "instance_type", "region", "provider_id", "arch", "uid")
CONTAINER = ("namespace", "pod", "container", "instance", "node", "uid")
DCGM = ("gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container")
# family (as the parser names it) → (type, label names of its samples)
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpufleet_http_requests": ("counter", ("method", "route", "status")),
    "gpufleet_http_request_duration_seconds": ("histogram", ("method", "route")),
    "gpufleet_job_submits": ("counter", ("team",)),
    "gpufleet_jobs": ("gauge", ("state", "team")),
    "gpufleet_gpus_allocated": ("gauge", ()),
    "gpufleet_gpus_capacity": ("gauge", ()),
    "gpufleet_store_up": ("gauge", ()),
    "gpufleet_cost_usd": ("counter", ("job", "team", "namespace", "project", "gpu_type", "capacity_type")),
    "gpufleet_hourly_cost_rate_usd": ("gauge", ("team", "namespace", "project", "gpu_type", "capacity_type")),
    "gpufleet_pod_cost_usd": ("gauge", ("namespace", "pod", "gpu_type", "capacity_type")),
    "pod_hourly_cost_usd": ("gauge", ("namespace", "pod", "gpu_type", "capacity_type")),
    "gpufleet_total_savings_usd": ("gauge", ("lever",)),
    "gpufleet_budget_percentage": ("gauge", ("budget",)),
    "gpufleet_budget_spend_usd": ("gauge", ("budget",)),
    "gpufleet_budget_limit_usd": ("gauge", ("budget",)),
    "gpufleet_budget_enforcing": ("gauge", ("budget", "action")),
    "node_gpu_hourly_cost": ("gauge", NODE),
    "node_cpu_hourly_cost": ("gauge", NODE),
    "node_ram_hourly_cost": ("gauge", NODE),
    "node_total_hourly_cost": ("gauge", NODE),
    "kubecost_node_is_spot": ("gauge", NODE),
    "container_gpu_allocation": ("gauge", CONTAINER),
    "container_cpu_allocation": ("gauge", CONTAINER),
    "container_memory_allocation_bytes": ("gauge", CONTAINER),
    "gpufleet_queue_length": ("gauge", ("team", "reason")),
    "gpufleet_queue_wait_seconds": ("histogram", ("team",)),
    "gpufleet_admissions": ("counter", ("team",)),
    "gpufleet_preemptions": ("counter", ("team", "reason")),
    "gpufleet_spot_interruptions": ("counter", ("team",)),
    "gpufleet_preemption_waste_gpu_seconds": ("counter", ("team", "cause")),
    "gpufleet_autoscaler_decisions": ("counter", ("pool", "action")),
}
DCGM_FAMILIES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")


def test_every_family_is_there_with_its_labels(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    b = build(api, SCENARIOS[0])
    api.submit("alice")  # a submit through the API: gpufleet_job_submits and the request counters
    api.client.app.state.metrics.observe_cycle(0.004)  # type: ignore[attr-defined]
    fams = scrape(api)
    for name, (kind, labels) in FAMILIES.items():
        assert name in fams, name
        fam = fams[name]
        assert fam.type == kind, (name, fam.type)
        assert fam.samples, name
        for s in fam.samples:
            extra = {"le"} if s.name.endswith("_bucket") else set()
            assert set(s.labels) == set(labels) | extra, (name, s.labels)
    cyc = fams["gpufleet_scheduler_cycle_duration_seconds"]
    assert cyc.type == "histogram" and samples(fams, cyc.name, "_count")[0].value == 1
    dcgm = scrape(api, "/metrics/dcgm")
    for name in DCGM_FAMILIES:
        assert dcgm[name].type == "gauge"
        assert all(set(s.labels) == set(DCGM) for s in dcgm[name].samples), name
    assert not set(dcgm) & set(fams)
    assert b.ids
    gen.close()


def test_cycle_histogram_only_where_cycles_ran(tmp_path: Path) -> None:
    gen = make_api(tmp_path)
    api = next(gen)
    assert "gpufleet_scheduler_cycle_duration_seconds" not in scrape(api)
    api.client.app.state.metrics.observe_cycle(0.02)  # type: ignore[attr-defined]
    api.client.app.state.metrics.observe_cycle(0.3)  # type: ignore[attr-defined]
    fams = scrape(api)
    name = "gpufleet_scheduler_cycle_duration_seconds"
    assert samples(fams, name, "_count")[0].value == 2
    assert samples(fams, name, "_sum")[0].value == pytest.approx(0.32)
    gen.close()


# -- dollars ----------------------------------------------------------------------------------------


def _usage(api: Api, window: str, aggregate: str) -> dict[str, Any]:
    r = api.client.get(f"/v1/usage?window={window}&aggregate={aggregate}", headers=api.h("admin"))
    assert r.status_code == 200, r.text
    return dict(r.json())


def _cents(x: float | str) -> int:
    return round(float(x) * 100)


def test_cost_counter_equals_the_ledger_to_the_cent(built: Built) -> None:
    api = built.api
    fams = scrape(api)
    got = {
        tuple(s.labels[k] for k in FAMILIES["gpufleet_cost_usd"][1]): s.value
        for s in samples(fams, "gpufleet_cost_usd", "_total")
    }
    with api.db.session() as s:
        from gpufleet.store.repo.scrape import ledger_start

        start = ledger_start(s)
    assert start == T0 - 48 * H
    window = f"{start:.0f},{T0:.0f}"
    rep = _usage(api, window, "job,team,namespace,project,gpu_model,capacity_type")
    want = {
        (
            r["key"]["job"],
            r["key"]["team"],
            r["key"]["namespace"],
            r["key"]["project"],
            r["key"]["gpu_model"],
            r["key"]["capacity_type"],
        ): _cents(r["total_cost_usd"])
        for r in rep["rows"]
    }
    assert {k: _cents(v) for k, v in got.items()} == want
    assert sum(_cents(v) for v in got.values()) == sum(want.values())
    # by job, as `gpufleet cost --by job` shows it: each job ran on one GPU model and capacity type here
    by_job = {r["key"]["job"]: _cents(r["total_cost_usd"]) for r in _usage(api, window, "job")["rows"]}
    summed: dict[str, int] = {}
    for k, v in got.items():
        summed[k[0]] = summed.get(k[0], 0) + _cents(v)
    assert summed == by_job
    ran = {jc.key for jc in built.scenario.jobs if jc.runs}
    assert set(summed) == {built.ids[k] for k in ran}


def test_running_pods_cost_and_rates_are_node_price_shares(built: Built) -> None:
    api, sc = built.api, built.scenario
    fams = scrape(api)
    nodes = {nc.node.name: nc for nc in sc.nodes}
    rules = _rules(sc)
    expect_rates: dict[tuple[str, ...], Fraction] = {}
    expect_pods: dict[tuple[str, ...], Fraction] = {}
    for jc in sc.jobs:
        for n, rc in enumerate(jc.runs, start=1):
            if rc.end_h is not None:
                continue
            nd = nodes[rc.node].node
            split = split_node_price(
                nodes[rc.node].usd,
                gpu_count=nd.gpu_count,
                cpu_milli=nd.cpu_milli,
                memory_mib=nd.memory_mib,
                capacity_type=nd.capacity_type,
            )
            usd = (
                split.usd_per_gpu_hour * len(rc.gpus)
                + split.usd_per_vcpu_hour * Fraction(jc.cpu_milli, 1000)
                + split.usd_per_gib_hour * Fraction(jc.memory_mib, 1024)
            ) * (rules.priority_multiplier(jc.priority) if rules is not None else 1)
            cap = str(nd.capacity_type)
            expect_rates[(jc.team, jc.namespace, jc.project, nd.gpu_model, cap)] = usd
            expect_pods[(jc.namespace, f"{built.ids[jc.key]}-r{n}", nd.gpu_model, cap)] = usd
    rates = {
        tuple(s.labels[k] for k in FAMILIES["gpufleet_hourly_cost_rate_usd"][1]): s.value
        for s in samples(fams, "gpufleet_hourly_cost_rate_usd")
    }
    pods = {tuple(s.labels[k] for k in POD4): s.value for s in samples(fams, "pod_hourly_cost_usd")}
    assert rates.keys() == expect_rates.keys() and pods.keys() == expect_pods.keys()
    for k, v in expect_rates.items():
        assert rates[k] == pytest.approx(float(v), rel=1e-12)
    for k, v in expect_pods.items():
        assert pods[k] == pytest.approx(float(v), rel=1e-12)
    # what each running pod has cost since it started: the ledger's report over its run
    for s in samples(fams, "gpufleet_pod_cost_usd"):
        job_id = s.labels["pod"].rsplit("-r", 1)[0]
        with api.db.session() as sess:
            started = repo.get_run(sess, job_id, int(s.labels["pod"].rsplit("-r", 1)[1]))
            assert started is not None and started.started_at is not None
            begin = started.started_at
        rows = _usage(api, f"{begin:.0f},{T0:.0f}", "job")["rows"]
        assert _cents(s.value) == next(_cents(r["total_cost_usd"]) for r in rows if r["key"]["job"] == job_id)
    assert len(samples(fams, "gpufleet_pod_cost_usd")) == len(expect_pods)


POD4 = ("namespace", "pod", "gpu_type", "capacity_type")


def test_node_prices_are_the_price_split(built: Built) -> None:
    fams = scrape(built.api)
    live = [nc for nc in built.scenario.nodes if nc.removed_h is None]
    by = {
        name: {s.labels["node"]: s for s in samples(fams, name)}
        for name in (
            "node_gpu_hourly_cost",
            "node_cpu_hourly_cost",
            "node_ram_hourly_cost",
            "node_total_hourly_cost",
            "kubecost_node_is_spot",
        )
    }
    assert set(by["node_total_hourly_cost"]) == {nc.node.name for nc in live}
    for nc in live:
        nd = nc.node
        gpu, cpu, ram = (
            by[f][nd.name].value for f in ("node_gpu_hourly_cost", "node_cpu_hourly_cost", "node_ram_hourly_cost")
        )
        assert by["node_total_hourly_cost"][nd.name].value == nc.usd
        assert gpu * nd.gpu_count + cpu * nd.cpu_milli / 1000 + ram * nd.memory_mib / 1024 == pytest.approx(nc.usd)
        assert by["kubecost_node_is_spot"][nd.name].value == (1.0 if nd.capacity_type == "spot" else 0.0)
        s = by["node_total_hourly_cost"][nd.name]
        assert s.labels["instance"] == nd.name
        assert s.labels["instance_type"] == nd.labels.get("node.kubernetes.io/instance-type", "")


def test_budgets_equal_their_status(built: Built) -> None:
    api, sc = built.api, built.scenario
    fams = scrape(api)
    pct = {s.labels["budget"]: s.value for s in samples(fams, "gpufleet_budget_percentage")}
    spend = {s.labels["budget"]: s.value for s in samples(fams, "gpufleet_budget_spend_usd")}
    limit = {s.labels["budget"]: s.value for s in samples(fams, "gpufleet_budget_limit_usd")}
    force = {(s.labels["budget"], s.labels["action"]): s.value for s in samples(fams, "gpufleet_budget_enforcing")}
    assert set(pct) == {b["name"] for b in sc.budgets}
    for b in sc.budgets:
        st_ = api.client.get(f"/v1/budgets/{b['name']}/status", headers=api.h("admin")).json()
        assert round(pct[b["name"]], 2) == st_["percent"]
        assert spend[b["name"]] == pytest.approx(st_["spend_usd"], abs=0.005)
        assert limit[b["name"]] == st_["limit_usd"]
        assert force[(b["name"], st_["action"])] == (1.0 if st_["enforcing"] else 0.0)
    if sc.budgets:
        assert force[("alpha-cap", "throttle")] == 1.0 and force[("beta-watch", "alert")] == 0.0


# -- the scheduler's series -------------------------------------------------------------------------


def test_queue_and_scheduler_counters(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    build(api, SCENARIOS[0])
    late = api.submit("alice")["id"]  # submitted after the leader's last publication: "new"
    fams = scrape(api)
    queue = {(s.labels["team"], s.labels["reason"]): s.value for s in samples(fams, "gpufleet_queue_length")}
    assert queue == {("alpha", "room"): 1, ("beta", "quota"): 1, ("alpha", "new"): 1}
    assert late
    adm = {s.labels["team"]: s.value for s in samples(fams, "gpufleet_admissions", "_total")}
    assert adm == {"alpha": 2, "beta": 3}
    pre = {(s.labels["team"], s.labels["reason"]): s.value for s in samples(fams, "gpufleet_preemptions", "_total")}
    assert pre == {("alpha", "priority"): 1, ("beta", "spot_interruption"): 1}
    spot = {s.labels["team"]: s.value for s in samples(fams, "gpufleet_spot_interruptions", "_total")}
    assert spot == {"beta": 1}
    auto = {
        (s.labels["pool"], s.labels["action"]): s.value
        for s in samples(fams, "gpufleet_autoscaler_decisions", "_total")
    }
    assert auto == {("spot-l4", "scale_up"): 1, ("spot-l4", "scale_down"): 1, ("od-l4", "scale_up"): 1}
    # submit → first start: every job here was submitted 15 minutes before its first run
    counts = {s.labels["team"]: s.value for s in samples(fams, "gpufleet_queue_wait_seconds", "_count")}
    sums = {s.labels["team"]: s.value for s in samples(fams, "gpufleet_queue_wait_seconds", "_sum")}
    assert counts == {"alpha": 2, "beta": 3}
    assert sums == {"alpha": pytest.approx(2 * 900.0), "beta": pytest.approx(3 * 900.0)}
    buckets = {
        s.labels["le"]: s.value
        for s in samples(fams, "gpufleet_queue_wait_seconds", "_bucket")
        if s.labels["team"] == "beta"
    }
    assert buckets["600.0"] == 0 and buckets["1800.0"] == 3 and buckets["+Inf"] == 3
    jobs = {(s.labels["state"], s.labels["team"]): s.value for s in samples(fams, "gpufleet_jobs")}
    assert jobs[("RUNNING", "beta")] == 1 and jobs[("PENDING", "alpha")] == 2
    assert samples(fams, "gpufleet_gpus_allocated")[0].value == 1
    assert samples(fams, "gpufleet_gpus_capacity")[0].value == 5  # gpu-a's 4 and od-2's 1
    gen.close()


def test_queue_without_a_leader(tmp_path: Path) -> None:
    gen = make_api(tmp_path)
    api = next(gen)
    api.submit("alice")
    api.submit("bob")
    fams = scrape(api)
    queue = {(s.labels["team"], s.labels["reason"]): s.value for s in samples(fams, "gpufleet_queue_length")}
    assert queue == {("alpha", "no_scheduler"): 1, ("beta", "no_scheduler"): 1}
    gen.close()


# -- DCGM -------------------------------------------------------------------------------------------


def test_dcgm_series_of_the_local_gpus(tmp_path: Path, db_url: str) -> None:
    gen = make_api(tmp_path, db_url)
    api = next(gen)
    b = build(api, SCENARIOS[0])
    fams = scrape(api, "/metrics/dcgm")
    util = {s.labels["gpu"]: s for s in samples(fams, "DCGM_FI_DEV_GPU_UTIL")}
    assert set(util) == {"0", "1", "2"}  # GPU 3's sample is stale; od-2 is a cluster's node
    running = f"{b.ids['running']}-r1"
    for gpu, s in util.items():
        i = int(gpu)
        assert s.value == 10.0 * (i + 1)
        assert s.labels["device"] == f"nvidia{i}" and s.labels["Hostname"] == "gpu-a"
        assert s.labels["modelName"] == "A100-80GB"
        held = i == 2
        assert s.labels["pod"] == (running if held else "")
        assert s.labels["namespace"] == ("research" if held else "")
        assert s.labels["container"] == ("main" if held else "")
    used = {s.labels["gpu"]: s.value for s in samples(fams, "DCGM_FI_DEV_FB_USED")}
    free = {s.labels["gpu"]: s.value for s in samples(fams, "DCGM_FI_DEV_FB_FREE")}
    assert used == {"0": 1000.0, "1": 2000.0, "2": 3000.0}
    assert free == {g: 81920.0 - v for g, v in used.items()}
    assert "DCGM_FI_DEV_GPU_TEMP" not in fams  # not stored yet: not published
    api.clock.advance(600)  # every sample is stale now
    assert scrape(api, "/metrics/dcgm") == {}
    gen.close()


# -- counters never go down -------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(min_value=1.0, max_value=6 * H)),
        st.tuples(st.just("finish"), st.just(0.0)),
        st.tuples(st.just("start"), st.integers(min_value=0, max_value=3).map(float)),
        st.tuples(st.just("preempt"), st.just(0.0)),
    ),
    min_size=1,
    max_size=6,
)


def _counters(fams: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in fams.values():
        if fam.type in ("counter", "histogram"):
            for s in fam.samples:
                if s.name.endswith(("_total", "_count", "_sum", "_bucket")):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _apply(api: Api, op: str, arg: float, running: dict[str, int]) -> None:
    now = api.clock.now()
    if op == "advance":
        api.clock.advance(arg)
        return
    if op == "start":
        gpu = int(arg)
        if any(g == gpu for g in running.values()):
            return
        with api.db.session() as s:
            job, _ = repo.submit_job(
                s,
                {"name": "h", "command": ["x"], "gpus": 1},
                team="alpha",
                submitted_by=None,
                idempotency_key=None,
                request_sha256=None,
                now=now - 60,
            )
            placement = [{"node": "gpu-a", "gpus": [gpu], "milli": 1000}]
            repo.transition(s, job, "ADMITTED", "placed", now, run=1, placement=placement)
            repo.open_run(
                s,
                job_id=job.id,
                run=1,
                node="gpu-a",
                placement=placement,
                capacity_type="on-demand",
                node_hourly_usd=12.0,
                now=now,
            )
            repo.transition(s, job, "RUNNING", "started", now, started_at=now)
            repo.mark_run_started(s, job.id, 1, pid=1, started_at=now)
            running[job.id] = gpu
        return
    if not running:
        return
    job_id = sorted(running)[0]
    del running[job_id]
    with api.db.session() as s:
        job = repo.get_job(s, job_id)
        run = repo.get_run(s, job_id, job.run)
        assert run is not None and run.started_at is not None
        outcome = "succeeded" if op == "finish" else "stopped"
        if op == "preempt":
            repo.request_stop(s, job_id, job.run, "preempt: preempted by higher-priority job y (high)")
        repo.end_run(
            s, job_id, job.run, outcome=outcome, exit_code=0, reason="", started_at=run.started_at, ended_at=now
        )
        node = next(r for r in repo.list_nodes(s) if r.name == "gpu-a")
        repo.append_segment(
            s,
            job=job,
            run=job.run,
            node=node,
            gpu_share_units=7000,
            cpu_milli=0,
            memory_mib=0,
            node_hourly_usd=12.0,
            capacity_type="on-demand",
            start=run.started_at,
            end=now,
        )
        if op == "finish":
            repo.transition(s, job, "SUCCEEDED", "exited 0", now)
        else:
            repo.transition(s, job, "PREEMPTED", "preempted", now)
            repo.transition(s, job, "PENDING", "requeued", now, placement=[])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_counters_never_decrease(ops: list[tuple[str, float]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gen = make_api(Path(tmp))
        api = next(gen)
        api.client.app.state.metrics.store.cache_s = 0.0  # type: ignore[attr-defined]
        build(api, Scenario("base", (GPU_A,), MIXED_JOBS[:1]))
        running: dict[str, int] = {}
        before = _counters(scrape(api))
        for op, arg in ops:
            _apply(api, op, arg, running)
            after = _counters(scrape(api))
            for key, value in before.items():
                assert key in after, key  # a series never disappears
                assert after[key] >= value - 1e-9, (key, value, after[key])
            before = after
        gen.close()


def test_ended_jobs_keep_their_cost(tmp_path: Path) -> None:
    gen = make_api(tmp_path)
    api = next(gen)
    api.client.app.state.metrics.store.cache_s = 0.0  # type: ignore[attr-defined]
    b = build(api, SCENARIOS[0])
    first = {s.labels["job"]: s.value for s in samples(scrape(api), "gpufleet_cost_usd", "_total")}
    api.clock.advance(30 * 86400)  # a month later: the ended job's dollars are the same
    later = {s.labels["job"]: s.value for s in samples(scrape(api), "gpufleet_cost_usd", "_total")}
    ended = b.ids["ended"]
    assert later[ended] == first[ended] and first[ended] > 0
    assert later[b.ids["running"]] > first[b.ids["running"]]
    assert math.isfinite(sum(later.values()))
    gen.close()


def test_the_server_wires_its_cycles_into_the_metrics(tmp_path: Path) -> None:
    """``Server.app()`` points the controller's cycle hook at the app's metrics: a cycle run by the
    leader in this process shows up in ``gpufleet_scheduler_cycle_duration_seconds``."""
    from fastapi.testclient import TestClient

    from gpufleet.server.host import build_server
    from gpufleet.server.settings import Settings

    settings = Settings(
        home=tmp_path / "home", gpus="1xA100-80GB", node_price_usd_per_hour=8.0, single_user=False, jobs_as_server=True
    )
    server = build_server(settings)
    try:
        app = server.app()
        with server.db.session() as s:  # two GPUs on a one-GPU server: it waits, nothing is launched
            repo.submit_job(
                s, {"name": "big", "command": ["x"], "gpus": 2}, team="default", submitted_by=None,
                idempotency_key=None, request_sha256=None, now=server.controller.clock.now(),
            )  # fmt: skip
        with TestClient(app) as client:
            assert "gpufleet_scheduler_cycle_duration_seconds" not in client.get("/metrics").text
            server.controller.tick()
            assert server.controller.stats.cycles >= 1
            fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        count = samples(fams, "gpufleet_scheduler_cycle_duration_seconds", "_count")
        assert count and count[0].value == server.controller.stats.cycles
    finally:
        server.controller.stop()
        server.db.dispose()
