"""Grafana dashboards for gpufleet's ``/metrics``, as code.

The shipped JSON (``gpufleet/data/grafana/dashboards/*.json``) is this module's output, checked in:
``python -m gpufleet.dashboards`` rewrites it, ``python -m gpufleet.dashboards --check`` fails when
it differs (tests/observability/test_dashboards.py does the same), ``--docs`` prints the panel tables of
docs/dashboards.md.

Every dashboard has a ``${datasource}`` variable (any Prometheus), schemaVersion 39 and a fixed uid
(``gpufleet-…``), so links and provisioning survive a rebuild.

The modules:

- :mod:`~gpufleet.dashboards.builder`: queries, panel constructors, variables, units, thresholds and
  the :class:`~gpufleet.dashboards.builder.Board` that lays panels out in rows;
- :mod:`~gpufleet.dashboards.promql`: the series' label sets (replicas collapsed) and the queries
  several dashboards share;
- one module per dashboard: :mod:`~gpufleet.dashboards.gpu_utilization`,
  :mod:`~gpufleet.dashboards.cost_overview`, :mod:`~gpufleet.dashboards.cost_attribution`,
  :mod:`~gpufleet.dashboards.savings`, :mod:`~gpufleet.dashboards.budgets`,
  :mod:`~gpufleet.dashboards.cluster_queue`, :mod:`~gpufleet.dashboards.efficiency`;
- :mod:`~gpufleet.dashboards.queries`: a dashboard's panels and queries, expanded to run outside Grafana;
- :mod:`~gpufleet.dashboards.shipped`: the shipped files (build, write, check, docs tables) and
  :func:`main`.
"""

from __future__ import annotations

from gpufleet.dashboards.queries import BUILTINS, expand, panel_queries, panels, variable_queries, variable_values
from gpufleet.dashboards.shipped import (
    DASHBOARD_DIR,
    DASHBOARDS,
    build_all,
    check,
    docs_tables,
    main,
    render,
    write,
)

__all__ = [
    "BUILTINS",
    "DASHBOARDS",
    "DASHBOARD_DIR",
    "build_all",
    "check",
    "docs_tables",
    "expand",
    "main",
    "panel_queries",
    "panels",
    "render",
    "variable_queries",
    "variable_values",
    "write",
]
