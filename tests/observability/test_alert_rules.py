"""gpufleet's Prometheus rules (gpufleet/data/prometheus/rules/*.yml): ``promtool check rules`` and
``promtool test rules`` on tests/observability/prometheus/*.test.yml, where each alert has series that fire it and
series that do not; every alert has a severity and summary, description and runbook annotations.

promtool comes with Debian's ``prometheus`` package (``make test`` installs it): without it these
tests fail, saying so, rather than skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpufleet
from tests.support.paths import REPO

RULES_DIR = Path(gpufleet.__file__).parent / "data" / "prometheus" / "rules"
TESTS_DIR = Path(__file__).parent / "prometheus"
SEVERITIES = {"info", "warning", "critical"}


def _promtool() -> str:
    path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        pytest.fail(
            "promtool is not installed: `apt-get install prometheus` (Debian) or `make test`, which installs "
            "it, then run again",
            pytrace=False,
        )
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=300)


def _rule_files() -> list[Path]:
    files = sorted(RULES_DIR.glob("*.yml"))
    assert files, f"no rule files in {RULES_DIR}"
    return files


def _test_files() -> list[Path]:
    return sorted(TESTS_DIR.glob("*.test.yml"))


def _alerts() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in _rule_files():
        for group in yaml.safe_load(f.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["alert"] not in out, f"alert {rule['alert']} defined twice"
                    out[rule["alert"]] = rule
    return out


def test_promtool_check_rules() -> None:
    out = _run("check", "rules", *map(str, _rule_files()))
    assert out.returncode == 0, f"promtool check rules failed:\n{out.stdout}{out.stderr}"


@pytest.mark.parametrize("test_file", _test_files(), ids=lambda f: f.name)
def test_promtool_test_rules(test_file: Path) -> None:
    out = _run("test", "rules", str(test_file))
    assert out.returncode == 0, f"promtool test rules {test_file.name} failed:\n{out.stdout}{out.stderr}"


def test_every_rule_test_loads_the_shipped_rules() -> None:
    shipped = {p.resolve() for p in _rule_files()}
    for f in _test_files():
        loaded = {(f.parent / r).resolve() for r in yaml.safe_load(f.read_text())["rule_files"]}
        assert loaded == shipped, f"{f.name} loads {sorted(map(str, loaded))}, not the shipped rule files"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for f in _test_files():
        for case in yaml.safe_load(f.read_text())["tests"]:
            for t in case.get("alert_rule_test", []):
                (firing if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = set(_alerts())
    assert not alerts - firing, f"alerts no test fires: {sorted(alerts - firing)}"
    assert not alerts - quiet, f"alerts no test shows quiet (exp_alerts: []): {sorted(alerts - quiet)}"
    assert not (firing | quiet) - alerts, f"tests of unknown alerts: {sorted((firing | quiet) - alerts)}"


def test_every_alert_says_what_and_what_to_do() -> None:
    for name, rule in _alerts().items():
        assert name.startswith("Gpufleet"), name
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity not one of {SEVERITIES}"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description", "runbook"):
            assert annotations.get(key, "").strip(), f"{name}: no {key} annotation"


def test_docs_list_every_alert() -> None:
    docs = (REPO / "docs" / "dashboards.md").read_text()
    missing = [name for name in _alerts() if name not in docs]
    assert not missing, f"docs/dashboards.md does not list {missing}"


def test_example_prometheus_config(tmp_path: Path) -> None:
    """data/prometheus/prometheus.yml is a valid configuration once its rule path points at the rules."""
    example = RULES_DIR.parent / "prometheus.yml"
    config = yaml.safe_load(example.read_text())
    assert all(job["honor_labels"] for job in config["scrape_configs"])
    config["rule_files"] = [str(RULES_DIR / "*.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    out = _run("check", "config", str(path))
    assert out.returncode == 0, f"promtool check config {example.name} failed:\n{out.stdout}{out.stderr}"
