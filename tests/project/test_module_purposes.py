"""Modules that held two purposes were split (issue 21); these keep the purposes apart.

- ``api/routes/jobs.py`` answers the job resource; reading a job's log (bounded reads, follows,
  sparse files) is ``api/routes/logs.py``.
- ``integrations/mlflow_sync.py`` logs jobs to MLflow; the allow-list of tracking URIs the server may
  send its credentials to is ``integrations/mlflow_uris.py``, which the settings read without loading
  the sync (nor the store and the cost engine it needs).
- ``api/metrics/collectors.py`` reads the store, caches and keeps counters monotonic; each family of
  ``/metrics`` is built by one module by kind (scheduler, nodes, cost) and the DCGM ones by ``dcgm``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from fastapi.routing import APIRoute

from gpufleet.api.routes import jobs, logs
from tests.support.paths import SRC

METRICS = SRC / "api" / "metrics"


def _paths(router: object) -> set[str]:
    return {r.path for r in getattr(router, "routes", ()) if isinstance(r, APIRoute)}


def test_the_log_routes_are_their_own_module() -> None:
    assert _paths(logs.router) == {"/v1/jobs/{job_id}/logs"}
    assert "/v1/jobs/{job_id}/logs" not in _paths(jobs.router)
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/events"} <= _paths(jobs.router)
    assert not hasattr(jobs, "FollowSlots") and hasattr(logs, "FollowSlots")


def test_the_settings_check_tracking_uris_without_loading_the_sync() -> None:
    code = textwrap.dedent(
        """
        import sys
        from gpufleet.server.settings import MlflowSettings
        MlflowSettings(job_tracking_uris=["https://mlflow.corp/team-a"])
        try:
            MlflowSettings(job_tracking_uris=["https://"])
        except ValueError as e:
            assert "mlflow.job_tracking_uris" in str(e) and "names no host" in str(e), e
        else:
            raise AssertionError("an entry without a host was accepted")
        print("gpufleet.integrations.mlflow_sync" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def _families() -> dict[str, set[str]]:
    """Module of api/metrics → the metric families it builds (``*MetricFamily("name", ...)``)."""
    out: dict[str, set[str]] = {}
    for path in sorted(METRICS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id.endswith("MetricFamily")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                out.setdefault(path.stem, set()).add(node.args[0].value)
    return out


def test_each_metric_family_is_built_in_one_module_by_kind() -> None:
    fams = _families()
    seen: dict[str, str] = {}
    for module, names in fams.items():
        for name in names:
            assert name not in seen, f"{name} is built in {seen[name]} and in {module}"
            seen[name] = module
    assert fams["collectors"] == {"gpufleet_store_up"}  # the collector reads, caches and keeps high-water marks
    assert all(n.startswith("DCGM_FI_") for n in fams["dcgm"]) and fams["dcgm"]
    assert not any(n.startswith("DCGM_FI_") for m, names in fams.items() if m != "dcgm" for n in names)
    assert {"gpufleet_jobs", "gpufleet_queue_length", "gpufleet_admissions"} <= fams["scheduler"]
    assert {"node_gpu_hourly_cost", "container_gpu_allocation", "pod_hourly_cost_usd"} <= fams["nodes"]
    assert {"gpufleet_cost_usd", "gpufleet_budget_percentage", "gpufleet_total_savings_usd"} <= fams["cost"]
