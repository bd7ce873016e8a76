"""The MCP tools as plain functions over an SDK client: each calls the REST API with the caller's
token (so the API decides what the caller may see), does the arithmetic of its answer and words it.

No MCP import here (:mod:`gpufleet.agent.server` wires these in). Errors are gpufleet errors: the
SDK's :class:`~gpufleet.sdk.ApiError` (the API's own refusal: 403, 404, 422...) or an
:class:`~gpufleet.errors.InputError` for input refused before any call.

The modules, one purpose each (every tool and resource is re-exported here):

- :mod:`~gpufleet.agent.tools.costs`: ``cost_analysis``, ``cost_report``, ``diagnose_anomaly``;
- :mod:`~gpufleet.agent.tools.plans`: ``check_budget_for_plan``, ``forecast_job_cost``;
- :mod:`~gpufleet.agent.tools.configurations`: ``compare_configurations``;
- :mod:`~gpufleet.agent.tools.advice`: ``recommend``, ``whatif``, ``propose_action``;
- :mod:`~gpufleet.agent.tools.resources`: the queue, budgets and recommendations resources;
- :mod:`~gpufleet.agent.tools.pricing`: GPU prices, the cluster's own or the price catalog's;
- :mod:`~gpufleet.agent.tools.common`: wording (money, durations, times), rounding, a job's GPU
  share, the recommendations' job and the team a question is scoped to.
"""

from __future__ import annotations

from gpufleet.agent.tools.advice import CHECKPOINT_INTERVAL_S, TERMINAL_STATES, propose_action, recommend, whatif
from gpufleet.agent.tools.common import duration, gpu_hours_text, hours_text, job_gpus, milli, usd
from gpufleet.agent.tools.configurations import MAX_BATCH_UTIL_PCT, compare_configurations, parallel_speedup
from gpufleet.agent.tools.costs import UTIL_KINDS, cost_analysis, cost_report, diagnose_anomaly
from gpufleet.agent.tools.plans import check_budget_for_plan, forecast_job_cost
from gpufleet.agent.tools.resources import budgets_resource, queue_resource, recommendations_resource

# their names before the split into modules (tests/agent/test_mcp.py reads them)
_milli = milli
_job_gpus = job_gpus

__all__ = [
    "CHECKPOINT_INTERVAL_S",
    "MAX_BATCH_UTIL_PCT",
    "TERMINAL_STATES",
    "UTIL_KINDS",
    "budgets_resource",
    "check_budget_for_plan",
    "compare_configurations",
    "cost_analysis",
    "cost_report",
    "diagnose_anomaly",
    "duration",
    "forecast_job_cost",
    "gpu_hours_text",
    "hours_text",
    "job_gpus",
    "milli",
    "parallel_speedup",
    "propose_action",
    "queue_resource",
    "recommend",
    "recommendations_resource",
    "usd",
    "whatif",
]
