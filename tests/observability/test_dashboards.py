"""The Grafana dashboards shipped in the package (gpufleet/data/grafana/dashboards/*.json) are the
builder's output (gpufleet.dashboards), well formed (schemaVersion 39, stable uids, a ${datasource}
variable every query uses, panels on the grid without overlaps), their PromQL parses (promtool) and
names only series gpufleet's /metrics specifies; the provisioning files and docs/dashboards.md match.

Whether every query returns series on a real server is tests/observability/test_prometheus_live.py's business.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpufleet
from gpufleet import dashboards
from tests.support.paths import REPO

DATA = Path(gpufleet.__file__).parent / "data"
DOCS = REPO / "docs" / "dashboards.md"
UIDS = {
    "gpufleet-gpu-utilization.json": "gpufleet-gpu-utilization",
    "gpufleet-cost-overview.json": "gpufleet-cost-overview",
    "gpufleet-cost-attribution.json": "gpufleet-cost-attribution",
    "gpufleet-savings.json": "gpufleet-savings",
    "gpufleet-budgets.json": "gpufleet-budgets",
    "gpufleet-cluster-queue.json": "gpufleet-cluster-queue",
    "gpufleet-efficiency.json": "gpufleet-efficiency",
}
# the series gpufleet's /metrics (and /metrics/dcgm) expose, and Prometheus' own ALERTS
SPEC_METRICS = {
    "gpufleet_cost_usd_total",
    "gpufleet_hourly_cost_rate_usd",
    "gpufleet_pod_cost_usd",
    "pod_hourly_cost_usd",
    "gpufleet_total_savings_usd",
    "gpufleet_budget_percentage",
    "gpufleet_budget_spend_usd",
    "gpufleet_budget_limit_usd",
    "gpufleet_budget_enforcing",
    "node_gpu_hourly_cost",
    "node_cpu_hourly_cost",
    "node_ram_hourly_cost",
    "node_total_hourly_cost",
    "kubecost_node_is_spot",
    "container_gpu_allocation",
    "container_cpu_allocation",
    "container_memory_allocation_bytes",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "gpufleet_queue_length",
    "gpufleet_queue_wait_seconds_bucket",
    "gpufleet_scheduler_cycle_duration_seconds_bucket",
    "gpufleet_admissions_total",
    "gpufleet_preemptions_total",
    "gpufleet_spot_interruptions_total",
    "gpufleet_autoscaler_decisions_total",
    "gpufleet_jobs",
    "gpufleet_gpus_allocated",
    "gpufleet_gpus_capacity",
    "gpufleet_store_up",
    "gpufleet_http_requests_total",
    "ALERTS",
}
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def _built() -> dict[str, dict[str, Any]]:
    return dashboards.build_all()


def test_shipped_json_is_the_builders_output() -> None:
    bad = dashboards.check()
    assert not bad, f"{bad} differ from gpufleet.dashboards: run `python -m gpufleet.dashboards` and commit the JSON"
    for name, d in _built().items():
        assert json.loads((dashboards.DASHBOARD_DIR / name).read_text()) == d


def test_dashboards_are_well_formed() -> None:
    built = _built()
    assert {name: d["uid"] for name, d in built.items()} == UIDS
    for name, d in built.items():
        assert d["schemaVersion"] == 39 and d["id"] is None and d["title"].startswith("gpufleet / "), name
        assert "gpufleet" in d["tags"], name
        variables = d["templating"]["list"]
        assert variables[0]["name"] == "datasource" and variables[0]["type"] == "datasource", name
        assert variables[0]["query"] == "prometheus", name
        for v in variables[1:]:
            if v["type"] == "query":
                assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, v["name"])
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
        cells: set[tuple[int, int]] = set()
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, (name, p["title"])
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not mine & cells, f"{name}: {p['title']} overlaps another panel"
            cells |= mine
        for p in dashboards.panels(d):
            assert p["title"] and p["description"], (name, p["title"])
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, p["title"])
            assert p["targets"], (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, p["title"])
                assert t["expr"].strip(), (name, p["title"])
                dashboards.expand(t["expr"], dashboards.variable_values(d))  # no unknown variable


def test_queries_name_only_specified_series() -> None:
    """A typo in a metric name would make a panel silently empty: every name a query uses is in the spec."""
    functions_and_keywords = {
        "sum",
        "avg",
        "max",
        "min",
        "count",
        "by",
        "on",
        "and",
        "or",
        "unless",
        "without",
        "group_left",
        "group_right",
        "topk",
        "sort",
        "sort_desc",
        "increase",
        "rate",
        "histogram_quantile",
        "vector",
        "offset",
        "bool",
        "ignoring",
    }
    used: set[str] = set()
    for d in _built().values():
        for _, _, expr in dashboards.panel_queries(d):
            body = re.sub(r'\{[^}]*\}|\[[^]]*\]|"[^"]*"|\$\w+', " ", expr)  # selectors, ranges, strings, variables
            body = re.sub(r"\b(by|on|without|group_left|ignoring)\s*\([^)]*\)", r"\1", body)  # label lists out
            used |= {w for w in IDENT.findall(body) if w not in functions_and_keywords}
        for _, _, expr in dashboards.variable_queries(d):
            used |= {w for w in IDENT.findall(re.sub(r"\{[^}]*\}", " ", expr))} - functions_and_keywords
    labels = {
        "Hostname",
        "namespace",
        "pod",
        "modelName",
        "team",
        "budget",
        "lever",
        "node",
        "state",
        "project",
        "gpu_type",
        "capacity_type",
        "reason",
        "status",
        "le",
    }
    unknown = used - SPEC_METRICS - labels
    assert not unknown, f"queries use names outside the metrics spec: {sorted(unknown)}"


def test_every_specified_series_has_a_panel() -> None:
    exprs = " ".join(e for d in _built().values() for _, _, e in dashboards.panel_queries(d))
    unused = sorted(m for m in SPEC_METRICS if not re.search(rf"\b{m}\b", exprs))
    assert not unused, f"no panel shows {unused}"


def test_underused_gpus_are_highlighted() -> None:
    """Utilization panels of the GPU utilization dashboard colour under 30 % red."""
    d = _built()["gpufleet-gpu-utilization.json"]
    for p in dashboards.panels(d):
        if (
            p["type"] in ("timeseries", "bargauge")
            and p["fieldConfig"]["defaults"]["unit"] == "percent"
            and "GPU_UTIL" in p["targets"][0]["expr"]
        ):
            steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
            assert steps[0]["color"] == "red" and steps[1] == {"color": "green", "value": 30}, p["title"]


def test_budget_alert_panels_use_the_shipped_alert_names() -> None:
    rules = yaml.safe_load((DATA / "prometheus" / "rules" / "gpufleet-alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    d = _built()["gpufleet-budgets.json"]
    patterns = {m for _, _, e in dashboards.panel_queries(d) for m in re.findall(r'alertname=~"([^"]+)"', e)}
    assert patterns
    for pattern in patterns:
        assert [a for a in alerts if re.fullmatch(pattern, a)], f"{pattern} matches no shipped alert"


def test_every_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (variables and Grafana's built-ins substituted) as a recording rule."""
    promtool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if promtool is None:
        pytest.fail("promtool is not installed: `apt-get install prometheus` (Debian) or `make test`", pytrace=False)
    rules: list[dict[str, Any]] = []
    for name, d in _built().items():
        values = dashboards.variable_values(d)
        queries = [*dashboards.panel_queries(d), *dashboards.variable_queries(d)]
        for title, ref, expr in queries:
            rules.append(
                {
                    "record": f"query_{len(rules)}",
                    "expr": dashboards.expand(expr, values),
                    "labels": {"dashboard": name, "panel": title, "ref": ref},
                }
            )
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"a dashboard query does not parse:\n{out.stdout}{out.stderr}"


def test_provisioning_files() -> None:
    prov = DATA / "grafana" / "provisioning"
    boards = yaml.safe_load((prov / "dashboards.yml").read_text())
    assert boards["apiVersion"] == 1
    [provider] = boards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] and provider["folder"] == "gpufleet"
    sources = yaml.safe_load((prov / "datasources.yml").read_text())
    assert sources["apiVersion"] == 1
    assert [s["type"] for s in sources["datasources"]] == ["prometheus"]


def test_docs_describe_every_dashboard_and_panel() -> None:
    docs = DOCS.read_text()
    for name, d in _built().items():
        assert name in docs and d["uid"] in docs and d["title"] in docs, name
        for p in dashboards.panels(d):
            assert f"| {p['title']} |" in docs, f"docs/dashboards.md lacks panel {p['title']!r} of {name}"


def test_builder_cli_check(tmp_path: Path) -> None:
    assert dashboards.main(["--out", str(tmp_path)]) == 0
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "gpufleet-savings.json").write_text("{}\n")
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 1
