"""The shipped dashboards and alert rules against a real Prometheus (Debian's /usr/bin/prometheus).

``test_dashboards_on_a_live_server``: a real ``gpufleet up`` (8 declared A100-80GB at $32/h), two
teams with a few jobs (short ones that finish, one that holds 4 GPUs, a preemptible one an urgent job
preempts, which then waits in the queue), an alert budget past 50 % and a throttle budget past its
limit. A real Prometheus scrapes the server's /metrics every second with the shipped rule files
loaded. Then:

- every query of every dashboard panel (and every ``label_values`` variable), with the dashboard's
  variables at "All" and Grafana's ``$__rate_interval``/``$__interval``/``$__range`` at fixed values,
  returns at least one series through Prometheus' HTTP API (/api/v1/query) — but the spot-interruption
  and autoscaler panels: one server has neither, so their counters (NO_EVENTS_ON_ONE_SERVER) have no
  samples; the test checks the server declares them (# TYPE, in Prometheus' metadata) instead;
- ``sum(gpufleet_cost_usd_total)`` equals the server's own ``/v1/usage`` (the jobs' rows) to the cent
  once the jobs are over;
- the rule files loaded and evaluate without errors (/api/v1/rules).

Telemetry: declared GPUs have no NVML, so nothing samples them. The test writes GPU samples into the
server's SQLite store itself, once a second, as the controller does (``repo.record_gpu_samples`` with
:class:`gpufleet.backends.base.GpuSample`: one row per GPU plus one per job on it) — the rows the DCGM
series (``DCGM_FI_DEV_*``) are made from. Fields a newer ``GpuSample`` may add (temperature, power) are
filled when present.

``test_dashboards_on_reference_series``: the same checks against a static exposition of every series
gpufleet's /metrics is specified to expose (REFERENCE below), served from this process: the dashboards'
queries are right whatever the server exposes today.

Without a token /metrics serves cluster totals only: the scrape sends the admin token
(``authorization``), as a deployment sends its ``metrics`` token. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import gpufleet
from gpufleet import dashboards
from gpufleet.backends.base import GpuSample
from gpufleet.store import repo
from gpufleet.store.db import Database
from tests.support.serverproc import ServerProcess, free_port

pytestmark = pytest.mark.slow

RULES_DIR = Path(gpufleet.__file__).parent / "data" / "prometheus" / "rules"
NODE_USD = 32.0
# gpufleet's own series, and the DCGM exporter's of its local GPUs (on a cluster the DCGM exporter's)
SERVER_PATHS = {"gpufleet": "/metrics", "gpufleet-dcgm": "/metrics/dcgm"}
# what Grafana would put in for its built-ins: windows that hold a few 1 s scrapes
BUILTINS = {
    "__interval": "30s",
    "__interval_ms": "30000",
    "__rate_interval": "30s",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# counters of events a single server with declared GPUs never has (their panels stay empty there)
NO_EVENTS_ON_ONE_SERVER = {
    "gpufleet_spot_interruptions_total": "one server has no spot capacity to lose",
    "gpufleet_autoscaler_decisions_total": "one server has no autoscaler",
}
METRIC_NAME = re.compile(r"\b(gpufleet_\w+|DCGM_FI_\w+|node_\w+_hourly_cost|kubecost_\w+|container_\w+|ALERTS)\b")


def _prometheus_binary() -> str:
    path = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if path is None:
        pytest.fail(
            "prometheus is not installed: `apt-get install prometheus` (Debian) or `make test`, which installs it",
            pytrace=False,
        )
    return path


class Prometheus:
    """A Prometheus on 127.0.0.1 scraping one target every second, with gpufleet's rules loaded."""

    def __init__(self, workdir: Path, target: str, paths: dict[str, str], token: str | None = None) -> None:
        """``paths``: scrape job name → metrics path on ``target``."""
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        scrapes: list[dict[str, Any]] = []
        for job, path in paths.items():
            scrape: dict[str, Any] = {
                "job_name": job,
                "honor_labels": True,  # as docs/dashboards.md says: gpufleet's job/namespace/pod labels stay
                "metrics_path": path,
                "static_configs": [{"targets": [target]}],
            }
            if token:
                scrape["authorization"] = {"type": "Bearer", "credentials": token}
            scrapes.append(scrape)
        self.config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_DIR / "*.yml")],
            "scrape_configs": scrapes,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=f"{self.url}/api/v1/", timeout=10.0)

    def start(self, timeout: float = 30.0) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(self.config))
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                _prometheus_binary(),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/-/ready", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout}s: {self.log()[-3000:]}")

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")

    def stop(self) -> None:
        self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def api(self, path: str, **params: str) -> Any:
        body = (self.http.post(path, data=params) if params else self.http.get(path)).json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series (a scalar result counts as one)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def wait_for(self, expr: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        end = time.monotonic() + timeout
        while True:
            got = self.query(expr)
            if got or time.monotonic() > end:
                return got
            time.sleep(0.5)

    def wait_rules_evaluated(self, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The rule groups once every rule has been evaluated at least once."""
        end = time.monotonic() + timeout
        while True:
            groups: list[dict[str, Any]] = self.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if (rules and all(r["health"] != "unknown" for r in rules)) or time.monotonic() > end:
                return groups


@dataclasses.dataclass
class Result:
    dashboard: str
    panel: str
    ref: str
    expr: str
    series: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dashboard, self.panel, self.ref)


def _all_queries() -> list[tuple[str, str, str, str]]:
    """(dashboard file, panel or variable, refId, runnable PromQL) of every dashboard query."""
    out = []
    for name, board in dashboards.build_all().items():
        values = dashboards.variable_values(board)
        for title, ref, expr in dashboards.panel_queries(board):
            out.append((name, title, ref, dashboards.expand(expr, values, BUILTINS)))
        for var, label, expr in dashboards.variable_queries(board):
            out.append((name, f"variable ${var}", label, dashboards.expand(expr, values, BUILTINS)))
    return out


def _evaluate(prom: Prometheus, retry_s: float = 5.0) -> list[Result]:
    """Every dashboard query's series count; empty ones are retried for ``retry_s`` (a scrape that came
    late must not fail the test)."""
    results = [Result(d, p, r, e, len(prom.query(e))) for d, p, r, e in _all_queries()]
    end = time.monotonic() + retry_s
    while any(r.series == 0 for r in results) and time.monotonic() < end:
        time.sleep(1.0)
        for r in results:
            if r.series == 0:
                r.series = len(prom.query(r.expr))
    return results


def _report(results: list[Result], present: set[str], excused: dict[tuple[str, str, str], str]) -> str:
    lines = [f"{sum(r.series > 0 for r in results)}/{len(results)} dashboard queries return series"]
    for r in results:
        missing = sorted(set(METRIC_NAME.findall(r.expr)) - present)
        if r.series:
            mark, why = "ok   ", ""
        elif r.key in excused:
            mark, why = "empty", f"  (excused: {excused[r.key]})"
        else:
            mark = "EMPTY"
            why = f"  (not scraped: {', '.join(missing)})" if missing else "  (all its series scraped: labels differ?)"
        lines.append(f"  {mark} {r.series:3d}  {r.dashboard} / {r.panel} [{r.ref}]{why}")
    return "\n".join(lines)


def _assert_every_query_returns_series(prom: Prometheus, no_events: dict[str, str] | None = None) -> list[Result]:
    """Every dashboard query returns a series, but for a query whose only series-less metrics are
    counters of events that cannot happen here (``no_events``: metric → why), which the target must
    still declare (# TYPE: Prometheus' metadata). The workload's figures grow with time (budgets cross
    80 % and 100 % as spend accrues): on a loaded machine that takes longer, so the queries are
    evaluated again, for up to a minute, until none is left empty but the excused ones."""
    deadline = time.monotonic() + 60
    while True:
        results = _evaluate(prom)
        present = prom.names()
        declared = set(prom.api("metadata"))
        excused: dict[tuple[str, str, str], str] = {}
        for r in results:
            missing = set(METRIC_NAME.findall(r.expr)) - present
            if not r.series and missing and no_events and missing <= no_events.keys() and missing <= declared:
                excused[r.key] = "; ".join(f"{m} declared, no samples: {no_events[m]}" for m in sorted(missing))
        empty = [r for r in results if r.series == 0 and r.key not in excused]
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(2.0)
    report = _report(results, present, excused)
    print(report)  # the table, also when everything passes (pytest -s)
    assert not empty, f"{len(empty)} queries returned no series:\n{report}\n\nempty queries:\n" + "\n".join(
        f"  {r.dashboard} / {r.panel} [{r.ref}]: {r.expr}" for r in empty
    )
    return results


def _assert_rules_healthy(prom: Prometheus) -> None:
    groups = prom.wait_rules_evaluated()
    names = {g["name"] for g in groups}
    shipped = {g["name"] for f in RULES_DIR.glob("*.yml") for g in yaml.safe_load(f.read_text())["groups"]}
    assert names == shipped, f"rule groups loaded {sorted(names)}, shipped {sorted(shipped)}"
    bad = [(r["name"], r["health"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert not bad, f"rules not healthy: {bad}"


# -- telemetry the test writes for the declared GPUs -------------------------------------------------


class TelemetryWriter(threading.Thread):
    """GPU samples into the server's store once a second, as the controller writes NVML's."""

    def __init__(self, db_url: str, node: str, gpus: int) -> None:
        super().__init__(daemon=True)
        self.db = Database(db_url)
        self.node = node
        self.gpus = gpus
        self.utilization: dict[int, float] = {}  # GPU index → percent (others 0)
        self.holders: dict[int, str] = {}  # GPU index → job id
        self.stopped = threading.Event()
        self.errors: list[BaseException] = []
        fields = {f.name for f in dataclasses.fields(GpuSample)}
        self.extra = {f: 61.0 for f in fields if "temp" in f} | {f: 250.0 for f in fields if "power" in f}

    def samples(self) -> list[GpuSample]:
        now = time.time()
        out = []
        for i in range(self.gpus):
            job = self.holders.get(i)
            used = 30_000.0 if job else 0.0
            out.append(
                GpuSample(
                    time=now,
                    node=self.node,
                    gpu_index=i,
                    uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
                    utilization_pct=self.utilization.get(i, 0.0),
                    memory_used_mib=used,
                    memory_total_mib=81_920.0,
                    job_memory_mib={job: used} if job else {},
                    **self.extra,
                )
            )
        return out

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                with self.db.session() as s:
                    repo.record_gpu_samples(s, self.samples())
            except Exception as e:  # reported by the test, not lost in a thread
                self.errors.append(e)
            self.stopped.wait(1.0)

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        self.db.engine.dispose()


def _wait(cond: Any, timeout: float, what: str, interval: float = 0.25) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# -- the tests ---------------------------------------------------------------------------------------


def test_dashboards_on_a_live_server(tmp_path: Path) -> None:
    _prometheus_binary()
    started = time.monotonic()
    server = ServerProcess(
        tmp_path / "home",
        gpus="8xA100-80GB",
        settings={"node_price_usd_per_hour": NODE_USD, "budget_interval_s": 0.5, "telemetry_interval_s": 60.0},
    ).start()
    prom: Prometheus | None = None
    writer: TelemetryWriter | None = None
    try:
        prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{server.port}", SERVER_PATHS, token=server.token).start()
        with server.client() as c:
            node = c.nodes()[0].name
            writer = TelemetryWriter(f"sqlite:///{server.home / 'gpufleet.db'}", node, 8)
            writer.start()
            for team in ("alpha", "beta"):
                c.set_team(team, priority_classes=["background", "low", "normal", "high", "urgent"])
            # alpha: an alert budget past 50 % soon; beta: a throttle budget past its limit soon
            c.create_budget(name="alpha-monthly", scope="team:alpha", limit_usd=0.05)
            c.create_budget(
                name="beta-cap", scope="team:beta", limit_usd=0.015, action="throttle", throttle={"max_gpus": 8}
            )
            research = {"team": "alpha", "namespace": "research", "project": "llm"}
            vision = {"team": "beta", "namespace": "vision", "project": "detector"}
            short = [c.submit(command=["sleep", "1"], gpus=1, name=f"prep-{i}", **research).id for i in range(2)]
            hold = c.submit(command=["sleep", "600"], gpus=4, name="hold", **research).id
            bulk = c.submit(
                command=["sleep", "600"], gpus=2, name="bulk", priority="low", preemptible=True, **vision
            ).id
            _wait(lambda: c.get(hold).state == "RUNNING" and c.get(bulk).state == "RUNNING", 60, "hold and bulk to run")
            # urgent work needs 4 GPUs: only preempting bulk frees enough; bulk then waits in the queue
            urgent = c.submit(command=["sleep", "600"], gpus=4, name="urgent", priority="urgent", **vision).id
            _wait(lambda: c.get(urgent).state == "RUNNING", 60, "the urgent job to run")
            for j in short:
                assert c.wait(j, timeout=60).state == "SUCCEEDED"
            assert c.get(bulk).preemptions >= 1 and c.get(bulk).state == "PENDING", c.get(bulk)
            # the held GPUs: hold's under 30 % (two under 5 %), urgent's busy
            for job, util in ((hold, (2.0, 2.0, 20.0, 20.0)), (urgent, (90.0, 92.0, 94.0, 96.0))):
                gpus = [g for p in c.get(job).placement for g in p.gpus]
                writer.holders.update(dict.fromkeys(gpus, job))
                writer.utilization.update(zip(gpus, util, strict=True))
            _wait(lambda: c.budget_status("alpha-monthly").percent >= 50, 40, "alpha's budget past 50 %")
            _wait(lambda: c.budget_status("beta-cap").enforcing, 40, "beta's throttle in force")
            time.sleep(3.0)  # a few scrapes and rule evaluations of the state above

            for job in SERVER_PATHS:
                assert prom.wait_for(f'up{{job="{job}"}} == 1'), f"{job} not scraped: {prom.api('targets')}"
            _assert_rules_healthy(prom)
            assert not writer.errors, writer.errors
            _assert_every_query_returns_series(prom, NO_EVENTS_ON_ONE_SERVER)

            # -- the counter adds up to /v1/usage, once the jobs are over ---------------------------
            for j in (hold, urgent, bulk):
                c.cancel(j)
            for j in (hold, urgent, bulk):
                assert c.wait(j, timeout=60).terminal
            usage = c.usage("1h", aggregate="job")
            jobs_usd = sum((Decimal(r.total_cost_usd) for r in usage.rows), Decimal(0))
            assert jobs_usd > Decimal("0.05"), usage

            def counter_usd() -> float | None:
                got = prom.query("sum(gpufleet_cost_usd_total)")
                return float(got[0]["value"][1]) if got else None

            end = time.monotonic() + 25  # the server recomputes the ledger's figures every 10 s
            cent = 0.01 + 1e-9  # per-row cents: the counter's rows and the report's jobs may round a cent apart
            while (got := counter_usd()) is None or abs(got - float(jobs_usd)) > cent:
                if time.monotonic() > end:
                    break
                time.sleep(0.5)
            assert got is not None, "sum(gpufleet_cost_usd_total) returned no series"
            assert got == pytest.approx(float(jobs_usd), abs=cent), (
                f"Prometheus says ${got:.4f}, /v1/usage's jobs ${jobs_usd}"
            )
        print(f"live test: {time.monotonic() - started:.1f}s")
    finally:
        if writer is not None:
            writer.stop()
        if prom is not None:
            prom.stop()
        server.stop()
        server.kill_jobs()


# -- the same dashboards on reference series ----------------------------------------------------------

_A100 = 'gpu_type="A100-80GB"'
_POD1 = 'namespace="research",pod="hold-1"'
_POD2 = 'namespace="vision",pod="urgent-1"'
_GPU = 'device="nvidia{i}",gpu="{i}",UUID="GPU-{host}-{i}",modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}"'


def _dcgm(name: str, values: dict[tuple[str, int], float]) -> str:
    holders = {("node-1", i): _POD1 for i in range(4)} | {("node-2", i): _POD2 for i in range(2)}
    lines = [f"# TYPE {name} gauge"]
    for (host, i), v in values.items():
        pod = holders.get((host, i))
        labels = _GPU.format(host=host, i=i) + (f',{pod},container="main"' if pod else "")
        lines.append(f"{name}{{{labels}}} {v}")
    return "\n".join(lines)


_GPUS = [("node-1", i) for i in range(4)] + [("node-2", i) for i in range(3)]
REFERENCE = "\n".join(
    [
        "# TYPE gpufleet_cost_usd_total counter",
        f'gpufleet_cost_usd_total{{job="j-1",team="alpha",namespace="research",project="llm",{_A100},'
        'capacity_type="on-demand"} 12.5',
        f'gpufleet_cost_usd_total{{job="j-2",team="beta",namespace="vision",project="detector",{_A100},'
        'capacity_type="spot"} 3.25',
        "# TYPE gpufleet_hourly_cost_rate_usd gauge",
        f'gpufleet_hourly_cost_rate_usd{{team="alpha",namespace="research",project="llm",{_A100},'
        'capacity_type="on-demand"} 16',
        f'gpufleet_hourly_cost_rate_usd{{team="beta",namespace="vision",project="detector",{_A100},'
        'capacity_type="spot"} 6',
        "# TYPE gpufleet_pod_cost_usd gauge",
        f'gpufleet_pod_cost_usd{{{_POD1},{_A100},capacity_type="on-demand"}} 12.5',
        f'gpufleet_pod_cost_usd{{{_POD2},{_A100},capacity_type="spot"}} 3.25',
        "# TYPE pod_hourly_cost_usd gauge",
        f'pod_hourly_cost_usd{{{_POD1},{_A100},capacity_type="on-demand"}} 16',
        f'pod_hourly_cost_usd{{{_POD2},{_A100},capacity_type="spot"}} 6',
        "# TYPE gpufleet_total_savings_usd gauge",
        *(
            f'gpufleet_total_savings_usd{{lever="{k}"}} {v}'
            for k, v in {"spot": 40, "sharing": 10, "autoscaling": 0, "idle_removal": 5, "headroom": -3}.items()
        ),
        "# TYPE gpufleet_budget_percentage gauge",
        'gpufleet_budget_percentage{budget="alpha-monthly"} 62.5',
        'gpufleet_budget_percentage{budget="beta-cap"} 130',
        "# TYPE gpufleet_budget_spend_usd gauge",
        'gpufleet_budget_spend_usd{budget="alpha-monthly"} 62.5',
        'gpufleet_budget_spend_usd{budget="beta-cap"} 13',
        "# TYPE gpufleet_budget_limit_usd gauge",
        'gpufleet_budget_limit_usd{budget="alpha-monthly"} 100',
        'gpufleet_budget_limit_usd{budget="beta-cap"} 10',
        "# TYPE gpufleet_budget_enforcing gauge",
        'gpufleet_budget_enforcing{budget="alpha-monthly",action="alert"} 0',
        'gpufleet_budget_enforcing{budget="beta-cap",action="throttle"} 1',
        *(
            f"# TYPE {m} gauge\n"
            f'{m}{{node="node-1",instance="node-1",instance_type="p4de.24xlarge",region="us-east-1"}} {a}\n'
            f'{m}{{node="node-2",instance="node-2",instance_type="p4de.24xlarge",region="us-east-1"}} {b}'
            for m, a, b in (
                ("node_gpu_hourly_cost", 4.0, 1.5),
                ("node_cpu_hourly_cost", 0.03, 0.01),
                ("node_ram_hourly_cost", 0.004, 0.001),
                ("node_total_hourly_cost", 40.0, 14.0),
                ("kubecost_node_is_spot", 0, 1),
            )
        ),
        *(
            f"# TYPE {m} gauge\n"
            f'{m}{{{_POD1},container="main",node="node-1"}} {a}\n'
            f'{m}{{{_POD2},container="main",node="node-2"}} {b}'
            for m, a, b in (
                ("container_gpu_allocation", 4, 2),
                ("container_cpu_allocation", 8, 4),
                ("container_memory_allocation_bytes", 64 * 2**30, 32 * 2**30),
            )
        ),
        _dcgm("DCGM_FI_DEV_GPU_UTIL", dict(zip(_GPUS, (2, 2, 20, 20, 90, 95, 0), strict=True))),
        _dcgm("DCGM_FI_DEV_FB_USED", dict.fromkeys(_GPUS, 30000)),
        _dcgm("DCGM_FI_DEV_FB_FREE", dict.fromkeys(_GPUS, 51920)),
        _dcgm("DCGM_FI_DEV_GPU_TEMP", dict(zip(_GPUS, (40, 41, 45, 47, 70, 72, 35), strict=True))),
        _dcgm("DCGM_FI_DEV_POWER_USAGE", dict(zip(_GPUS, (80, 80, 120, 120, 390, 400, 60), strict=True))),
        "# TYPE gpufleet_queue_length gauge",
        'gpufleet_queue_length{team="beta",reason="capacity"} 1',
        "# TYPE gpufleet_queue_wait_seconds histogram",
        *(
            f'gpufleet_queue_wait_seconds_bucket{{team="alpha",le="{le}"}} {n}'
            for le, n in (("1", 0), ("10", 2), ("60", 3), ("600", 3), ("+Inf", 3))
        ),
        'gpufleet_queue_wait_seconds_sum{team="alpha"} 40',
        'gpufleet_queue_wait_seconds_count{team="alpha"} 3',
        "# TYPE gpufleet_scheduler_cycle_duration_seconds histogram",
        *(
            f'gpufleet_scheduler_cycle_duration_seconds_bucket{{le="{le}"}} {n}'
            for le, n in (("0.01", 50), ("0.1", 90), ("1", 100), ("+Inf", 100))
        ),
        "gpufleet_scheduler_cycle_duration_seconds_sum 2.5",
        "gpufleet_scheduler_cycle_duration_seconds_count 100",
        "# TYPE gpufleet_admissions_total counter",
        'gpufleet_admissions_total{team="alpha"} 3',
        'gpufleet_admissions_total{team="beta"} 2',
        "# TYPE gpufleet_preemptions_total counter",
        'gpufleet_preemptions_total{team="beta",reason="priority"} 1',
        "# TYPE gpufleet_spot_interruptions_total counter",
        'gpufleet_spot_interruptions_total{team="beta"} 2',
        "# TYPE gpufleet_autoscaler_decisions_total counter",
        'gpufleet_autoscaler_decisions_total{pool="default",action="scale_up"} 1',
        "# TYPE gpufleet_jobs gauge",
        'gpufleet_jobs{state="RUNNING",team="alpha"} 1',
        'gpufleet_jobs{state="PENDING",team="beta"} 1',
        "# TYPE gpufleet_gpus_allocated gauge",
        "gpufleet_gpus_allocated 6",
        "# TYPE gpufleet_gpus_capacity gauge",
        "gpufleet_gpus_capacity 12",
        "# TYPE gpufleet_store_up gauge",
        "gpufleet_store_up 1",
        "# TYPE gpufleet_http_requests_total counter",
        'gpufleet_http_requests_total{method="GET",route="/metrics",status="200"} 5',
        "",
    ]
).encode()


@contextlib.contextmanager
def _serve(body: bytes) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_dashboards_on_reference_series(tmp_path: Path) -> None:
    with _serve(REFERENCE) as target:
        prom = Prometheus(tmp_path / "prometheus", target, {"gpufleet": "/metrics"}).start()
        try:
            assert prom.wait_for('up{job="gpufleet"} == 1'), prom.api("targets")
            time.sleep(3.0)  # a few samples of every series (rate windows hold 2 or more)
            _assert_rules_healthy(prom)
            _assert_every_query_returns_series(prom)
            # the budget alerts are pending on these series (ALERTS feeds the Budget alerts dashboard)
            active = {(a["labels"]["alertname"], a["labels"].get("budget")) for a in prom.api("alerts")["alerts"]}
            assert ("GpufleetBudget50Percent", "alpha-monthly") in active, active
            assert ("GpufleetBudget100Percent", "beta-cap") in active, active
            assert ("GpufleetBudgetThrottling", "beta-cap") in active, active
        finally:
            prom.stop()
