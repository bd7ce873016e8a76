"""Grafana dashboards for gpufleet's ``/metrics``, as code.

The shipped JSON (``gpufleet/data/grafana/dashboards/*.json``) is this module's output, checked in:
``python -m gpufleet.dashboards`` rewrites it, ``python -m gpufleet.dashboards --check`` fails when
it differs (tests/test_dashboards.py does the same), ``--docs`` prints the panel tables of
docs/dashboards.md.

Every dashboard has a ``${datasource}`` variable (any Prometheus), schemaVersion 39 and a fixed uid
(``gpufleet-…``), so links and provisioning survive a rebuild.

Series and their labels (gpufleet's ``/metrics``, scraped with ``honor_labels: true`` so that its
``job``, ``namespace`` and ``pod`` labels stay theirs):

- gpufleet's own: ``gpufleet_cost_usd_total{job, team, namespace, project, gpu_type, capacity_type}``
  (dollars, a counter), ``gpufleet_hourly_cost_rate_usd{team, namespace, project, gpu_type,
  capacity_type}``, ``gpufleet_pod_cost_usd`` / ``pod_hourly_cost_usd{namespace, pod,
  gpu_type, capacity_type}``, ``gpufleet_total_savings_usd{lever}``, ``gpufleet_budget_*{budget}``,
  the scheduler's (queue, admissions, preemptions, spot interruptions, autoscaler decisions);
- OpenCost's names (``node_*_hourly_cost``, ``kubecost_node_is_spot``, ``container_*_allocation``);
- the DCGM exporter's names (``DCGM_FI_DEV_*{gpu, UUID, modelName, Hostname, namespace, pod}``).

Several gpufleet replicas (PostgreSQL) each expose the same store-derived series (costs, budgets,
queue, scheduler counters, OpenCost's and DCGM's names): queries collapse them with
``max by (<the metric's own labels>)`` before they add anything up. Only the cycle-duration histogram
and the HTTP counters are per process, and are summed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

DASHBOARD_DIR = Path(__file__).parent / "data" / "grafana" / "dashboards"
SCHEMA_VERSION = 39
DS: JSON = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24

# -- the labels that make a series unique (replicas collapsed with max by these) ---------------------
COST = "job, team, namespace, project, gpu_type, capacity_type"
RATE = "team, namespace, project, gpu_type, capacity_type"
POD = "namespace, pod, gpu_type, capacity_type"
GPU = "Hostname, gpu, UUID, modelName, namespace, pod"
CONTAINER = "namespace, pod, container, node"

HELD = 'pod!=""'  # DCGM series of a GPU a pod holds (the exporter leaves pod empty otherwise)
UNDERUSED_PCT = 30  # a GPU workload under this utilization is underused (highlighted red)

# thresholds: red under 30 %, then green
UTIL_STEPS: list[JSON] = [{"color": "red", "value": None}, {"color": "green", "value": UNDERUSED_PCT}]
BUDGET_STEPS: list[JSON] = [
    {"color": "green", "value": None},
    {"color": "blue", "value": 50},
    {"color": "orange", "value": 80},
    {"color": "red", "value": 100},
]
NEUTRAL_STEPS: list[JSON] = [{"color": "text", "value": None}]
ALERTING_STEPS: list[JSON] = [{"color": "green", "value": None}, {"color": "red", "value": 1}]


def sel(metric: str, *matchers: str) -> str:
    """``metric{m1, m2}`` (empty matchers dropped)."""
    ms = [m for m in matchers if m]
    return f"{metric}{{{', '.join(ms)}}}" if ms else metric


def dedup(labels: str, expr: str) -> str:
    """One series per label set, whichever replica exposed it."""
    return f"max by ({labels}) ({expr})"


# -- queries and panels ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Q:
    """One Prometheus query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False  # tables, pies, bar gauges: the value now
    table: bool = False  # format "table" (one frame, one row per series)
    interval: str = ""  # the query's minimum step (e.g. "1d" for daily bars)


def _targets(queries: Sequence[Q]) -> list[JSON]:
    out: list[JSON] = []
    for i, q in enumerate(queries):
        t: JSON = {
            "datasource": DS,
            "editorMode": "code",
            "expr": q.expr,
            "format": "table" if q.table else "time_series",
            "instant": q.instant,
            "legendFormat": q.legend or "__auto",
            "range": not q.instant,
            "refId": chr(ord("A") + i),
        }
        if q.interval:
            t["interval"] = q.interval
        out.append(t)
    return out


def _thresholds(steps: list[JSON] | None) -> JSON:
    return {"mode": "absolute", "steps": steps or [{"color": "green", "value": None}]}


def _defaults(
    unit: str,
    steps: list[JSON] | None,
    *,
    min_: float | None = None,
    max_: float | None = None,
    decimals: int | None = None,
    no_value: str | None = None,
    color_mode: str = "palette-classic",
) -> JSON:
    d: JSON = {"color": {"mode": color_mode}, "mappings": [], "thresholds": _thresholds(steps), "unit": unit}
    if min_ is not None:
        d["min"] = min_
    if max_ is not None:
        d["max"] = max_
    if decimals is not None:
        d["decimals"] = decimals
    if no_value is not None:
        d["noValue"] = no_value
    return d


@dataclass
class Panel:
    """A panel before placement: the board gives it an id and a grid position."""

    body: JSON
    w: int
    h: int


def _panel(
    kind: str,
    title: str,
    description: str,
    queries: Sequence[Q],
    field_config: JSON,
    options: JSON,
    *,
    w: int,
    h: int,
    transformations: list[JSON] | None = None,
    interval: str = "",
) -> Panel:
    body: JSON = {
        "datasource": DS,
        "description": description,
        "fieldConfig": field_config,
        "options": options,
        "targets": _targets(queries),
        "title": title,
        "type": kind,
    }
    if transformations:
        body["transformations"] = transformations
    if interval:
        body["interval"] = interval
    return Panel(body, w, h)


def _legend(mode: str = "list", placement: str = "bottom", calcs: Iterable[str] = ()) -> JSON:
    return {"calcs": list(calcs), "displayMode": mode, "placement": placement, "showLegend": True}


def _reduce(calc: str = "lastNotNull") -> JSON:
    return {"calcs": [calc], "fields": "", "values": False}


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    unit: str = "short",
    w: int = 12,
    h: int = 8,
    stack: bool = False,
    bars: bool = False,
    steps: list[JSON] | None = None,
    threshold_style: str = "off",
    min_: float | None = None,
    max_: float | None = None,
    interval: str = "",
    overrides: list[JSON] | None = None,
    legend_calcs: Sequence[str] = ("mean", "max", "lastNotNull"),
) -> Panel:
    custom: JSON = {
        "axisBorderShow": False,
        "axisPlacement": "auto",
        "axisSoftMin": 0,
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 80 if bars else (25 if stack else 10),
        "gradientMode": "none",
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "pointSize": 4,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        "thresholdsStyle": {"mode": threshold_style},
    }
    fc = {"defaults": {**_defaults(unit, steps, min_=min_, max_=max_), "custom": custom}, "overrides": overrides or []}
    options = {
        "legend": _legend("table", "bottom", legend_calcs),
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel("timeseries", title, description, queries, fc, options, w=w, h=h, interval=interval)


def stat(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    unit: str = "short",
    w: int = 4,
    h: int = 4,
    steps: list[JSON] | None = None,
    decimals: int | None = None,
    no_value: str | None = None,
    color_mode: str = "value",
    graph: bool = False,
    mappings: list[JSON] | None = None,
) -> Panel:
    defaults = _defaults(unit, steps or NEUTRAL_STEPS, decimals=decimals, no_value=no_value, color_mode="thresholds")
    if mappings:
        defaults["mappings"] = mappings
    options = {
        "colorMode": color_mode,
        "graphMode": "area" if graph else "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": _reduce(),
        "showPercentChange": False,
        "textMode": "auto",
        "wideLayout": True,
    }
    return _panel("stat", title, description, queries, {"defaults": defaults, "overrides": []}, options, w=w, h=h)


def gauge(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    unit: str = "percent",
    w: int = 4,
    h: int = 4,
    steps: list[JSON] | None = None,
    min_: float = 0,
    max_: float = 100,
) -> Panel:
    defaults = _defaults(unit, steps, min_=min_, max_=max_, color_mode="thresholds")
    options = {
        "reduceOptions": _reduce(),
        "showThresholdLabels": False,
        "showThresholdMarkers": True,
        "minVizHeight": 75,
        "minVizWidth": 75,
        "sizing": "auto",
    }
    return _panel("gauge", title, description, queries, {"defaults": defaults, "overrides": []}, options, w=w, h=h)


def bargauge(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    unit: str = "short",
    w: int = 12,
    h: int = 8,
    steps: list[JSON] | None = None,
    min_: float | None = 0,
    max_: float | None = None,
) -> Panel:
    defaults = _defaults(unit, steps, min_=min_, max_=max_, color_mode="thresholds")
    options = {
        "displayMode": "gradient",
        "maxVizHeight": 300,
        "minVizHeight": 16,
        "minVizWidth": 8,
        "namePlacement": "auto",
        "orientation": "horizontal",
        "reduceOptions": _reduce(),
        "showUnfilled": True,
        "sizing": "auto",
        "valueMode": "color",
    }
    return _panel("bargauge", title, description, queries, {"defaults": defaults, "overrides": []}, options, w=w, h=h)


def piechart(
    title: str, description: str, queries: Sequence[Q], *, unit: str = "currencyUSD", w: int = 8, h: int = 8
) -> Panel:
    defaults = _defaults(unit, None)
    options = {
        "displayLabels": ["percent"],
        "legend": {"displayMode": "table", "placement": "right", "showLegend": True, "values": ["value", "percent"]},
        "pieType": "donut",
        "reduceOptions": _reduce(),
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return _panel("piechart", title, description, queries, {"defaults": defaults, "overrides": []}, options, w=w, h=h)


def props_override(name: str, props: list[JSON]) -> JSON:
    return {"matcher": {"id": "byName", "options": name}, "properties": props}


def table(
    title: str,
    description: str,
    columns: Sequence[tuple[Q, str, str, list[JSON] | None]],
    *,
    w: int = 12,
    h: int = 8,
    hide: Sequence[str] = ("Time",),
    sort_by: str = "",
) -> Panel:
    """Instant queries merged into one row per label set; ``columns``: (query, column name, unit,
    threshold steps colouring the cell or None)."""
    queries = [Q(q.expr, q.legend, instant=True, table=True) for q, _, _, _ in columns]
    rename = {f"Value #{chr(ord('A') + i)}": name for i, (_, name, _, _) in enumerate(columns)}
    if len(columns) == 1:
        rename = {"Value": columns[0][1]}
    overrides = []
    for _, name, unit, steps in columns:
        props: list[JSON] = [{"id": "unit", "value": unit}]
        if steps is not None:
            props += [
                {"id": "thresholds", "value": _thresholds(steps)},
                {"id": "custom.cellOptions", "value": {"type": "color-background", "mode": "basic"}},
            ]
        overrides.append(props_override(name, props))
    transformations: list[JSON] = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": dict.fromkeys(hide, True), "renameByName": rename}},
    ]
    options: JSON = {
        "cellHeight": "sm",
        "footer": {"countRows": False, "fields": "", "reducer": ["sum"], "show": False},
        "showHeader": True,
        "sortBy": [{"desc": True, "displayName": sort_by or columns[0][1]}],
    }
    defaults = _defaults("short", None)
    defaults["custom"] = {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}
    fc = {"defaults": defaults, "overrides": overrides}
    return _panel("table", title, description, queries, fc, options, w=w, h=h, transformations=transformations)


def heatmap(
    title: str, description: str, queries: Sequence[Q], *, unit: str, w: int = 12, h: int = 8, scheme: str = "Oranges"
) -> Panel:
    options = {
        "calculate": True,
        "calculation": {"yBuckets": {"mode": "count", "value": "12"}},
        "cellGap": 1,
        "color": {
            "exponent": 0.5,
            "fill": "dark-orange",
            "mode": "scheme",
            "reverse": False,
            "scale": "exponential",
            "scheme": scheme,
            "steps": 64,
        },
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": True},
        "rowsFrame": {"layout": "auto"},
        "showValue": "never",
        "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
    }
    fc = {
        "defaults": {
            "custom": {
                "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                "scaleDistribution": {"type": "linear"},
            }
        },
        "overrides": [],
    }
    return _panel("heatmap", title, description, queries, fc, options, w=w, h=h)


def state_timeline(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    mappings: list[JSON],
    w: int = 12,
    h: int = 8,
    steps: list[JSON] | None = None,
) -> Panel:
    defaults = _defaults("short", steps or ALERTING_STEPS, color_mode="thresholds")
    defaults["mappings"] = mappings
    defaults["custom"] = {
        "fillOpacity": 70,
        "lineWidth": 0,
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
    }
    options = {
        "alignValue": "left",
        "legend": _legend(),
        "mergeValues": True,
        "rowHeight": 0.9,
        "showValue": "never",
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return _panel(
        "state-timeline", title, description, queries, {"defaults": defaults, "overrides": []}, options, w=w, h=h
    )


def xychart(
    title: str, description: str, x: tuple[Q, str, str], y: tuple[Q, str, str], *, w: int = 12, h: int = 10
) -> Panel:
    """A scatter plot: one point per label set, ``x`` and ``y`` as (instant query, name, unit)."""
    queries = [Q(x[0].expr, instant=True, table=True), Q(y[0].expr, instant=True, table=True)]
    transformations: list[JSON] = [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {"excludeByName": {"Time": True}, "renameByName": {"Value #A": x[1], "Value #B": y[1]}},
        },
    ]
    defaults = _defaults(y[2], None)
    defaults["custom"] = {
        "axisPlacement": "auto",
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
        "pointSize": {"fixed": 8},
        "scaleDistribution": {"type": "linear"},
        "show": "points",
    }
    overrides = [
        props_override(x[1], [{"id": "unit", "value": x[2]}, {"id": "min", "value": 0}, {"id": "max", "value": 100}])
    ]
    options = {
        "dims": {"frame": 0, "x": x[1]},
        "legend": _legend(),
        "series": [],
        "seriesMapping": "auto",
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return _panel(
        "xychart",
        title,
        description,
        queries,
        {"defaults": defaults, "overrides": overrides},
        options,
        w=w,
        h=h,
        transformations=transformations,
    )


# -- variables ---------------------------------------------------------------------------------------


def datasource_var() -> JSON:
    return {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
        "type": "datasource",
    }


def query_var(name: str, label: str, metric: str, label_name: str) -> JSON:
    """A multi-value variable of a label's values, "All" = ``.*`` (so ``label=~"$var"`` matches all)."""
    q = f"label_values({metric}, {label_name})"
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DS,
        "definition": q,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 1, "query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def custom_var(name: str, label: str, values: Sequence[str], default: str) -> JSON:
    return {
        "current": {"selected": True, "text": default, "value": default},
        "hide": 0,
        "includeAll": False,
        "label": label,
        "multi": False,
        "name": name,
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "query": ",".join(values),
        "skipUrlSync": False,
        "type": "custom",
    }


# -- a dashboard -------------------------------------------------------------------------------------


@dataclass
class Board:
    uid: str
    title: str
    description: str
    tags: list[str]
    variables: list[JSON] = field(default_factory=list)
    time_from: str = "now-24h"
    _panels: list[JSON] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _line_h: int = 0

    def _newline(self) -> None:
        self._y += self._line_h
        self._x = 0
        self._line_h = 0

    def row(self, title: str) -> None:
        if self._x:
            self._newline()
        self._panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": self._y},
                "id": len(self._panels) + 1,
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self._y += 1

    def add(self, *panels: Panel) -> None:
        for p in panels:
            if self._x + p.w > GRID_WIDTH:
                self._newline()
            body = dict(p.body)
            body["gridPos"] = {"h": p.h, "w": p.w, "x": self._x, "y": self._y}
            body["id"] = len(self._panels) + 1
            self._panels.append(body)
            self._x += p.w
            self._line_h = max(self._line_h, p.h)

    def build(self) -> JSON:
        return {
            "annotations": {
                "list": [
                    {
                        "builtIn": 1,
                        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                        "enable": True,
                        "hide": True,
                        "iconColor": "rgba(0, 211, 255, 1)",
                        "name": "Annotations & Alerts",
                        "type": "dashboard",
                    }
                ]
            },
            "description": self.description,
            "editable": True,
            "fiscalYearStartMonth": 0,
            "graphTooltip": 1,
            "id": None,
            "links": [
                {
                    "asDropdown": True,
                    "icon": "external link",
                    "includeVars": False,
                    "keepTime": True,
                    "tags": ["gpufleet"],
                    "targetBlank": False,
                    "title": "gpufleet dashboards",
                    "tooltip": "",
                    "type": "dashboards",
                    "url": "",
                }
            ],
            "panels": self._panels,
            "refresh": "1m",
            "schemaVersion": SCHEMA_VERSION,
            "tags": ["gpufleet", *self.tags],
            "templating": {"list": [datasource_var(), *self.variables]},
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {},
            "timezone": "",
            "title": self.title,
            "uid": self.uid,
            "version": 1,
            "weekStart": "",
        }


# -- the dashboards ----------------------------------------------------------------------------------

PCT = "percent"
USD = "currencyUSD"


def _util(*matchers: str) -> str:
    """Per-GPU utilization (one series per GPU and pod), replicas collapsed."""
    return dedup(GPU, sel("DCGM_FI_DEV_GPU_UTIL", *matchers))


def _cost_increase(window: str, *matchers: str) -> str:
    return dedup(COST, f"increase({sel('gpufleet_cost_usd_total', *matchers)}[{window}])")


def _rate(*matchers: str) -> str:
    return dedup(RATE, sel("gpufleet_hourly_cost_rate_usd", *matchers))


def _savings(*matchers: str) -> str:
    return dedup("lever", sel("gpufleet_total_savings_usd", *matchers))


def _pod_rate(*matchers: str) -> str:
    return f"sum by (namespace, pod) ({dedup(POD, sel('pod_hourly_cost_usd', *matchers))})"


def _idle_gpu_cost() -> str:
    return "(max(gpufleet_gpus_capacity) - max(gpufleet_gpus_allocated)) * avg(max by (node) (node_gpu_hourly_cost))"


def gpu_utilization() -> JSON:
    b = Board(
        "gpufleet-gpu-utilization",
        "gpufleet / GPU utilization by workload",
        "How hard each workload (pod), namespace and GPU model uses its GPUs (DCGM_FI_DEV_GPU_UTIL). "
        f"Under {UNDERUSED_PCT} % is underused and shown red.",
        ["gpu", "utilization"],
        [
            query_var("node", "Node", "DCGM_FI_DEV_GPU_UTIL", "Hostname"),
            query_var("model", "GPU model", "DCGM_FI_DEV_GPU_UTIL", "modelName"),
            query_var("namespace", "Namespace", "DCGM_FI_DEV_GPU_UTIL", "namespace"),
        ],
        time_from="now-6h",
    )
    m = ('Hostname=~"$node"', 'modelName=~"$model"', 'namespace=~"$namespace"')
    held = (*m, 'pod!=""')
    by_pod = f"avg by (namespace, pod) ({_util(*held)})"
    b.row("Fleet")
    b.add(
        stat(
            "Average GPU utilization",
            "Mean utilization of the selected GPUs now, held or not.",
            [Q(f"avg(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)}))")],
            unit=PCT,
            steps=UTIL_STEPS,
            decimals=0,
            graph=True,
            w=5,
        ),
        stat(
            "GPUs held by a workload",
            "GPUs a pod holds now.",
            [Q(f"count(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *held)}))")],
            no_value="0",
            w=5,
        ),
        stat(
            f"Underused workloads (< {UNDERUSED_PCT} %)",
            f"Pods whose GPUs average under {UNDERUSED_PCT} % utilization now.",
            [Q(f"count({by_pod} < {UNDERUSED_PCT})")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            w=5,
        ),
        stat(
            "Idle held GPUs (< 5 %)",
            "GPUs a pod holds that are under 5 % utilization now "
            "(GpufleetGpuIdleWhileAllocated fires after 30 minutes of this).",
            [Q(f"count(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', *held)}) < 5)")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            w=5,
        ),
        gauge(
            "GPU memory in use",
            "Frame buffer used over total, selected GPUs.",
            [
                Q(
                    f"sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_USED', *m)})) / "
                    f"(sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_USED', *m)})) + "
                    f"sum(max by (Hostname, gpu) ({sel('DCGM_FI_DEV_FB_FREE', *m)}))) * 100"
                )
            ],
            steps=[{"color": "green", "value": None}, {"color": "orange", "value": 90}],
            w=4,
        ),
    )
    b.row("By workload (pod)")
    b.add(
        timeseries(
            "GPU utilization by pod",
            f"Mean utilization of each pod's GPUs; the red band is under {UNDERUSED_PCT} % (underused).",
            [Q(by_pod, "{{namespace}}/{{pod}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
            w=14,
            h=9,
        ),
        bargauge(
            "Utilization by pod now",
            f"Red: under {UNDERUSED_PCT} %.",
            [Q(f"sort({by_pod})", "{{namespace}}/{{pod}}", instant=True)],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
            w=10,
            h=9,
        ),
    )
    b.add(
        table(
            "Workloads now",
            f"Each pod: its GPUs' mean utilization (red under {UNDERUSED_PCT} %), GPUs, "
            "frame buffer used and what it costs per hour.",
            [
                (Q(by_pod), "GPU utilization", PCT, UTIL_STEPS),
                (Q(f"count by (namespace, pod) ({_util(*held)})"), "GPUs", "short", None),
                (
                    Q(f"sum by (namespace, pod) ({dedup(GPU, sel('DCGM_FI_DEV_FB_USED', *held))})"),
                    "GPU memory used",
                    "decmbytes",
                    None,
                ),
                (Q(_pod_rate('namespace=~"$namespace"')), "$/h", USD, None),
            ],
            w=14,
            h=9,
            sort_by="$/h",
        ),
        timeseries(
            "GPU memory used by pod",
            "Frame buffer the pod's GPUs use (DCGM_FI_DEV_FB_USED, MiB).",
            [Q(f"sum by (namespace, pod) ({dedup(GPU, sel('DCGM_FI_DEV_FB_USED', *held))})", "{{namespace}}/{{pod}}")],
            unit="decmbytes",
            w=10,
            h=9,
        ),
    )
    b.row("By namespace and GPU model")
    b.add(
        timeseries(
            "GPU utilization by namespace",
            "Mean utilization of the GPUs each namespace's pods hold.",
            [Q(f"avg by (namespace) ({_util(*held)})", "{{namespace}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
        ),
        timeseries(
            "GPU utilization by GPU model",
            "Mean utilization of each GPU model, held or not.",
            [
                Q(
                    f"avg by (modelName) (max by (Hostname, gpu, modelName) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)}))",
                    "{{modelName}}",
                )
            ],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
        ),
    )
    b.add(
        bargauge(
            "Utilization by namespace now",
            f"Red: under {UNDERUSED_PCT} %.",
            [Q(f"sort(avg by (namespace) ({_util(*held)}))", "{{namespace}}", instant=True)],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
        ),
        bargauge(
            "Utilization by GPU model now",
            f"Red: under {UNDERUSED_PCT} %.",
            [
                Q(
                    f"sort(avg by (modelName) (max by (Hostname, gpu, modelName) ({sel('DCGM_FI_DEV_GPU_UTIL', *m)})))",
                    "{{modelName}}",
                    instant=True,
                )
            ],
            unit=PCT,
            steps=UTIL_STEPS,
            max_=100,
        ),
    )
    return b.build()


def cost_overview() -> JSON:
    b = Board(
        "gpufleet-cost-overview",
        "gpufleet / Cost overview",
        "What the fleet costs: spend over 24 hours, 7 days and the time range, daily and weekly trends, the "
        "burn rate by team, and where each budget stands.",
        ["cost"],
        [query_var("team", "Team", "gpufleet_cost_usd_total", "team")],
        time_from="now-30d",
    )
    t = 'team=~"$team"'
    burn = f"sum({_rate(t)})"
    b.row("Spend")
    b.add(
        stat(
            "Spend, last 24 hours",
            "Dollars gpufleet_cost_usd_total grew by in 24 hours.",
            [Q(f"sum({_cost_increase('24h', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Spend, last 7 days",
            "Dollars over 7 days.",
            [Q(f"sum({_cost_increase('7d', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Spend in the time range",
            "Dollars over the dashboard's time range.",
            [Q(f"sum({_cost_increase('$__range', t)})")],
            unit=USD,
            decimals=2,
            w=4,
        ),
        stat(
            "Burn rate now ($/h)",
            "What running work costs per hour now (gpufleet_hourly_cost_rate_usd).",
            [Q(burn)],
            unit=USD,
            decimals=2,
            graph=True,
            w=4,
        ),
        stat(
            "30-day projection at this rate",
            "The burn rate now, for 720 hours.",
            [Q(f"{burn} * 720")],
            unit=USD,
            decimals=0,
            w=4,
        ),
        stat(
            "Savings to date",
            "gpufleet_total_savings_usd, all levers (see the Savings analysis dashboard).",
            [Q(f"sum({_savings()})")],
            unit=USD,
            decimals=0,
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 0}],
            w=4,
        ),
    )
    b.row("Trend")
    b.add(
        timeseries(
            "Daily spend by team",
            "Dollars per day (one bar a day), by team.",
            [Q(f"sum by (team) ({_cost_increase('$__interval', t)})", "{{team}}", interval="1d")],
            unit=USD,
            stack=True,
            bars=True,
            interval="1d",
            legend_calcs=("sum", "mean"),
        ),
        timeseries(
            "Weekly spend by team",
            "Dollars per week (one bar a week), by team.",
            [Q(f"sum by (team) ({_cost_increase('$__interval', t)})", "{{team}}", interval="7d")],
            unit=USD,
            stack=True,
            bars=True,
            interval="7d",
            legend_calcs=("sum", "mean"),
        ),
    )
    b.add(
        timeseries(
            "Burn rate by team ($/h)",
            "Dollars per hour of the work running, by team.",
            [Q(f"sum by (team) ({_rate(t)})", "{{team}}")],
            unit=USD,
            stack=True,
            w=24,
        ),
    )
    b.row("Budgets")
    b.add(
        bargauge(
            "Budget status",
            "Spend in the budget's period as a percent of its limit: blue past 50 %, "
            "orange past 80 %, red past 100 % (the alert thresholds).",
            [Q("sort_desc(max by (budget) (gpufleet_budget_percentage))", "{{budget}}", instant=True)],
            unit=PCT,
            steps=BUDGET_STEPS,
            max_=120,
        ),
        table(
            "Budgets",
            "Each budget: spend this period, limit, percent and whether its throttle or block is in force.",
            [
                (Q("max by (budget) (gpufleet_budget_spend_usd)"), "Spend", USD, None),
                (Q("max by (budget) (gpufleet_budget_limit_usd)"), "Limit", USD, None),
                (Q("max by (budget) (gpufleet_budget_percentage)"), "Used", PCT, BUDGET_STEPS),
                (Q("max by (budget, action) (gpufleet_budget_enforcing)"), "Enforcing", "bool_yes_no", ALERTING_STEPS),
            ],
            sort_by="Used",
        ),
    )
    return b.build()


def cost_attribution() -> JSON:
    b = Board(
        "gpufleet-cost-attribution",
        "gpufleet / Cost attribution",
        "Who spends: dollars over the time range by namespace, team, project, GPU model and capacity type, "
        "the top jobs and pods, and the OpenCost allocation model's view.",
        ["cost", "attribution"],
        [
            query_var("team", "Team", "gpufleet_cost_usd_total", "team"),
            query_var("namespace", "Namespace", 'gpufleet_cost_usd_total{team=~"$team"}', "namespace"),
            query_var(
                "project", "Project", 'gpufleet_cost_usd_total{team=~"$team", namespace=~"$namespace"}', "project"
            ),
        ],
        time_from="now-7d",
    )
    f = ('team=~"$team"', 'namespace=~"$namespace"', 'project=~"$project"')
    spent = _cost_increase("$__range", *f)

    def pie(title: str, label: str, legend: str) -> Panel:
        return piechart(
            title, f"Dollars over the time range by {label}.", [Q(f"sum by ({label}) ({spent})", legend, instant=True)]
        )

    b.row("Spend over the time range")
    b.add(
        pie("By namespace", "namespace", "{{namespace}}"),
        pie("By team", "team", "{{team}}"),
        pie("By project", "project", "{{project}}"),
    )
    b.add(
        pie("By GPU model", "gpu_type", "{{gpu_type}}"),
        pie("By capacity type (spot / on-demand / reserved)", "capacity_type", "{{capacity_type}}"),
        stat(
            "Spend in the time range",
            "Dollars over the time range, selection only.",
            [Q(f"sum({spent})")],
            unit=USD,
            decimals=2,
            w=8,
            h=8,
        ),
    )
    b.row("Burn rate")
    b.add(
        timeseries(
            "Burn rate by namespace ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (namespace) ({_rate(*f)})", "{{namespace}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
        timeseries(
            "Burn rate by project ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (project) ({_rate(*f)})", "{{project}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
        timeseries(
            "Burn rate by GPU model ($/h)",
            "Dollars per hour of the running work.",
            [Q(f"sum by (gpu_type) ({_rate(*f)})", "{{gpu_type}}")],
            unit=USD,
            stack=True,
            w=8,
        ),
    )
    b.row("Jobs and pods")
    b.add(
        table(
            "Top jobs by spend",
            "The 20 jobs that cost most over the time range.",
            [
                (Q(f"topk(20, sum by (job, team, namespace, project, gpu_type) ({spent}))"), "Spend", USD, None),
            ],
            sort_by="Spend",
        ),
        table(
            "Pods: cost to date and per hour",
            "gpufleet_pod_cost_usd and pod_hourly_cost_usd.",
            [
                (Q(f"sum by (namespace, pod) ({dedup(POD, sel('gpufleet_pod_cost_usd', f[1]))})"), "Cost", USD, None),
                (Q(_pod_rate(f[1])), "$/h", USD, None),
            ],
            sort_by="Cost",
        ),
    )
    b.row("OpenCost allocation model")
    alloc = dedup(CONTAINER, sel("container_gpu_allocation", f[1]))
    cpu = dedup(CONTAINER, sel("container_cpu_allocation", f[1]))
    mem = dedup(CONTAINER, sel("container_memory_allocation_bytes", f[1]))
    b.add(
        timeseries(
            "GPU $/h by namespace (allocation × node GPU price)",
            "OpenCost's model: container_gpu_allocation times node_gpu_hourly_cost of its node.",
            [
                Q(
                    f"sum by (namespace) ({alloc} * on (node) group_left () max by (node) (node_gpu_hourly_cost))",
                    "{{namespace}}",
                )
            ],
            unit=USD,
            stack=True,
        ),
        timeseries(
            "CPU and memory $/h by namespace",
            "container_cpu_allocation × node_cpu_hourly_cost and "
            "container_memory_allocation_bytes (GiB) × node_ram_hourly_cost.",
            [
                Q(
                    f"sum by (namespace) ({cpu} * on (node) group_left () max by (node) (node_cpu_hourly_cost))",
                    "{{namespace}} CPU",
                ),
                Q(
                    f"sum by (namespace) ({mem} / 1073741824 * on (node) group_left () "
                    f"max by (node) (node_ram_hourly_cost))",
                    "{{namespace}} memory",
                ),
            ],
            unit=USD,
            stack=True,
        ),
    )
    return b.build()


def savings() -> JSON:
    b = Board(
        "gpufleet-savings",
        "gpufleet / Savings analysis",
        "What gpufleet saved against a fixed on-demand cluster sized for the peak (gpufleet_total_savings_usd, "
        "lever by lever: spot, sharing, autoscaling, idle removal, …) and the return on it.",
        ["cost", "savings"],
        [],
        time_from="now-30d",
    )
    total = f"sum({_savings()})"
    spend = f"sum({dedup(COST, 'gpufleet_cost_usd_total')})"
    b.row("Savings")
    b.add(
        stat(
            "Total savings",
            "All levers.",
            [Q(total)],
            unit=USD,
            decimals=2,
            graph=True,
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 0}],
            w=6,
        ),
        stat(
            "Savings rate",
            "Savings over what the fixed on-demand cluster would have cost "
            "(savings + spend); both counted over the series' whole history.",
            [Q(f"{total} / ({total} + {spend})")],
            unit="percentunit",
            decimals=1,
            w=6,
        ),
        stat(
            "ROI (saved per dollar spent)",
            "Dollars saved for each dollar spent.",
            [Q(f"{total} / {spend}")],
            unit="none",
            decimals=2,
            w=6,
        ),
        stat(
            "Idle GPU cost now ($/h)",
            "GPUs allocated to no job times the nodes' GPU price: what removing idle capacity would still save.",
            [Q(_idle_gpu_cost())],
            unit=USD,
            decimals=2,
            w=6,
        ),
    )
    levers = [
        ("spot", "Spot"),
        ("sharing", "Sharing (fractions, MIG)"),
        ("autoscaling", "Autoscaling"),
        ("idle_removal", "Idle removal"),
    ]
    b.add(
        *[
            stat(
                f"{title} savings",
                f'gpufleet_total_savings_usd{{lever="{lever}"}} (0 when the lever is not used).',
                [Q(f"sum({_savings(f'lever={json.dumps(lever)}')}) or vector(0)")],
                unit=USD,
                decimals=2,
                w=6,
            )
            for lever, title in levers
        ]
    )
    b.row("By lever")
    b.add(
        bargauge(
            "Savings by lever",
            "Each lever's part; negative levers (e.g. headroom) cost money.",
            [Q(f"sort_desc({_savings()})", "{{lever}}", instant=True)],
            unit=USD,
            min_=None,
        ),
        timeseries(
            "Savings by lever over time", "gpufleet_total_savings_usd by lever.", [Q(_savings(), "{{lever}}")], unit=USD
        ),
    )
    b.add(
        timeseries(
            "Spend and savings",
            "Dollars spent (gpufleet_cost_usd_total) and saved, cumulative.",
            [Q(spend, "spend"), Q(total, "savings")],
            unit=USD,
        ),
        piechart(
            "Burn rate by capacity type",
            "Dollars per hour now on spot, on-demand and reserved capacity.",
            [Q(f"sum by (capacity_type) ({_rate()})", "{{capacity_type}}", instant=True)],
            w=6,
        ),
        stat(
            "Spot share of node cost",
            "Node $/h on spot nodes over all nodes' $/h (node_total_hourly_cost, kubecost_node_is_spot).",
            [
                Q(
                    "sum(max by (node) (node_total_hourly_cost) * on (node) max by (node) (kubecost_node_is_spot))"
                    " / sum(max by (node) (node_total_hourly_cost))"
                )
            ],
            unit="percentunit",
            decimals=1,
            w=6,
            h=8,
        ),
    )
    return b.build()


def budgets() -> JSON:
    b = Board(
        "gpufleet-budgets",
        "gpufleet / Budget alerts",
        "Where each budget stands (percent of its limit, spend against limit, throttles and blocks in force) "
        "and the history of its alerts (the Gpufleet Budget* rules of gpufleet-alerts.yml).",
        ["cost", "budgets", "alerts"],
        [query_var("budget", "Budget", "gpufleet_budget_percentage", "budget")],
        time_from="now-7d",
    )
    bs = 'budget=~"$budget"'
    pct = f"max by (budget) ({sel('gpufleet_budget_percentage', bs)})"
    enforcing = f"max by (budget, action) ({sel('gpufleet_budget_enforcing', bs)})"
    alerts = sel("ALERTS", 'alertname=~"GpufleetBudget.*"', bs)
    red_from_one: list[JSON] = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    b.row("Now")
    b.add(
        stat("Budgets", "Budgets selected.", [Q(f"count({pct})")], w=6),
        stat(
            "Past 80 %",
            "Budgets at 80 % of their limit or more.",
            [Q(f"count({pct} >= 80)")],
            no_value="0",
            steps=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
            w=6,
        ),
        stat(
            "Over the limit",
            "Budgets at 100 % or more.",
            [Q(f"count({pct} >= 100)")],
            no_value="0",
            steps=red_from_one,
            w=6,
        ),
        stat(
            "Throttling or blocking",
            "Budgets whose throttle or block is in force.",
            [Q(f"count({enforcing} == 1)")],
            no_value="0",
            steps=red_from_one,
            w=6,
        ),
    )
    b.add(
        bargauge(
            "Budget utilization",
            "Percent of the limit spent this period: blue past 50 % (info), orange "
            "past 80 % (warning), red past 100 % (critical).",
            [Q(f"sort_desc({pct})", "{{budget}}", instant=True)],
            unit=PCT,
            steps=BUDGET_STEPS,
            max_=120,
        ),
        table(
            "Budgets now",
            "Spend, limit, percent, the budget's enforcement action and whether it is in force.",
            [
                (Q(f"max by (budget) ({sel('gpufleet_budget_spend_usd', bs)})"), "Spend", USD, None),
                (Q(f"max by (budget) ({sel('gpufleet_budget_limit_usd', bs)})"), "Limit", USD, None),
                (Q(pct), "Used", PCT, BUDGET_STEPS),
                (Q(enforcing), "Enforcing", "bool_yes_no", ALERTING_STEPS),
            ],
            sort_by="Used",
        ),
    )
    b.row("History")
    b.add(
        timeseries(
            "Budget utilization history",
            "Percent of the limit; the lines are the 50/80/100 % thresholds.",
            [Q(pct, "{{budget}}")],
            unit=PCT,
            steps=BUDGET_STEPS,
            threshold_style="dashed",
        ),
        timeseries(
            "Spend against limit",
            "Spend this period (solid) and the limit (dashed), per budget.",
            [
                Q(f"max by (budget) ({sel('gpufleet_budget_spend_usd', bs)})", "{{budget}} spend"),
                Q(f"max by (budget) ({sel('gpufleet_budget_limit_usd', bs)})", "{{budget}} limit"),
            ],
            unit=USD,
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": ".* limit$"},
                    "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}],
                }
            ],
        ),
    )
    b.add(
        state_timeline(
            "Throttles and blocks in force",
            "1 while the budget's throttle or block applies.",
            [Q(enforcing, "{{budget}} ({{action}})")],
            mappings=[
                {
                    "options": {
                        "0": {"color": "green", "index": 0, "text": "not enforcing"},
                        "1": {"color": "red", "index": 1, "text": "enforcing"},
                    },
                    "type": "value",
                }
            ],
        ),
        state_timeline(
            "Budget alerts history",
            "The budget alerts over time (pending and firing), from "
            "Prometheus' ALERTS series: load gpufleet-alerts.yml in the Prometheus this reads.",
            [Q(f"max by (alertname, budget, alertstate) ({alerts})", "{{budget}} {{alertname}} ({{alertstate}})")],
            mappings=[{"options": {"1": {"color": "orange", "index": 0, "text": "active"}}, "type": "value"}],
            steps=[{"color": "orange", "value": None}],
        ),
    )
    b.add(
        table(
            "Budget alerts now",
            "Budget alerts pending or firing now.",
            [
                (Q(f"max by (alertname, budget, severity, alertstate) ({alerts})"), "Active", "short", None),
            ],
            w=24,
            h=6,
            hide=("Time", "Active"),
        ),
    )
    return b.build()


def cluster_queue() -> JSON:
    b = Board(
        "gpufleet-cluster-queue",
        "gpufleet / Cluster and queue",
        "The fleet's GPUs (allocation, utilization, memory, temperature, power), spot against on-demand, "
        "and the scheduler (queue, waits, cycle time, admissions, preemptions, spot interruptions, "
        "autoscaler decisions).",
        ["gpu", "scheduler"],
        [
            query_var("node", "Node", "DCGM_FI_DEV_GPU_UTIL", "Hostname"),
            query_var("team", "Team", "gpufleet_jobs", "team"),
        ],
        time_from="now-6h",
    )
    n = 'Hostname=~"$node"'
    t = 'team=~"$team"'
    queue = dedup("team, reason", sel("gpufleet_queue_length", t))
    spot = "max by (node) (kubecost_node_is_spot)"

    def per_gpu(metric: str) -> str:
        return f"max by (Hostname, gpu) ({sel(metric, n)})"

    b.row("Capacity")
    b.add(
        stat(
            "GPUs allocated",
            "GPU-equivalents running jobs hold.",
            [Q("max(gpufleet_gpus_allocated)")],
            decimals=1,
            graph=True,
        ),
        stat("GPU capacity", "GPUs on nodes that are not removed.", [Q("max(gpufleet_gpus_capacity)")]),
        gauge(
            "Allocation",
            "Allocated over capacity.",
            [Q("max(gpufleet_gpus_allocated) / max(gpufleet_gpus_capacity) * 100")],
            steps=[{"color": "red", "value": None}, {"color": "orange", "value": 50}, {"color": "green", "value": 80}],
        ),
        stat("Jobs waiting", "The scheduler's queue now.", [Q(f"sum({queue})")], no_value="0", graph=True),
        stat(
            "Spot share of nodes",
            "Nodes on spot capacity (kubecost_node_is_spot).",
            [Q(f"sum({spot}) / count({spot})")],
            unit="percentunit",
            decimals=0,
        ),
        stat(
            "Store",
            "gpufleet_store_up: whether the database answered the last scrape.",
            [Q("min(gpufleet_store_up)")],
            steps=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
            color_mode="background",
            mappings=[
                {"options": {"0": {"index": 0, "text": "DOWN"}, "1": {"index": 1, "text": "UP"}}, "type": "value"}
            ],
        ),
    )
    b.add(
        timeseries(
            "GPUs allocated and capacity",
            "GPU-equivalents held by jobs against the fleet's GPUs.",
            [
                Q("max(gpufleet_gpus_allocated)", "allocated"),
                Q("max(gpufleet_gpus_capacity)", "capacity"),
            ],
            w=8,
        ),
        piechart(
            "Spot and on-demand nodes",
            "Nodes by capacity type (kubecost_node_is_spot).",
            [
                Q(f"sum({spot})", "spot", instant=True),
                Q(f"sum(1 - {spot})", "on-demand", instant=True),
            ],
            unit="short",
        ),
        piechart(
            "Spot and on-demand spend ($/h)",
            "Burn rate by capacity type.",
            [Q(f"sum by (capacity_type) ({_rate(t)})", "{{capacity_type}}", instant=True)],
        ),
    )
    b.row("GPUs")
    b.add(
        timeseries(
            "GPU utilization per GPU",
            f"DCGM_FI_DEV_GPU_UTIL; the red band is under {UNDERUSED_PCT} %.",
            [Q(per_gpu("DCGM_FI_DEV_GPU_UTIL"), "{{Hostname}} GPU {{gpu}}")],
            unit=PCT,
            steps=UTIL_STEPS,
            threshold_style="line+area",
            min_=0,
            max_=100,
            legend_calcs=("mean", "lastNotNull"),
        ),
        timeseries(
            "GPU memory used per GPU",
            "Frame buffer used over total (DCGM_FI_DEV_FB_USED, _FREE).",
            [
                Q(
                    f"{per_gpu('DCGM_FI_DEV_FB_USED')} / ({per_gpu('DCGM_FI_DEV_FB_USED')} + "
                    f"{per_gpu('DCGM_FI_DEV_FB_FREE')}) * 100",
                    "{{Hostname}} GPU {{gpu}}",
                )
            ],
            unit=PCT,
            min_=0,
            max_=100,
            legend_calcs=("mean", "lastNotNull"),
        ),
    )
    b.add(
        heatmap(
            "GPU temperature",
            "How many GPUs are at each temperature over time (DCGM_FI_DEV_GPU_TEMP).",
            [Q(per_gpu("DCGM_FI_DEV_GPU_TEMP"), "{{Hostname}} GPU {{gpu}}")],
            unit="celsius",
        ),
        timeseries(
            "Power draw by node",
            "Sum of the node's GPUs' DCGM_FI_DEV_POWER_USAGE.",
            [Q(f"sum by (Hostname) ({per_gpu('DCGM_FI_DEV_POWER_USAGE')})", "{{Hostname}}")],
            unit="watt",
        ),
    )
    b.row("Queue and scheduler")
    wait = "rate(" + sel("gpufleet_queue_wait_seconds_bucket", t) + "[$__rate_interval])"
    b.add(
        timeseries(
            "Queue length by team",
            "Jobs waiting, by team.",
            [Q(f"sum by (team) ({queue})", "{{team}}")],
            stack=True,
            w=8,
        ),
        bargauge(
            "Why jobs wait",
            "Waiting jobs by the scheduler's reason.",
            [Q(f"sort_desc(sum by (reason) ({queue}))", "{{reason}}", instant=True)],
            w=8,
        ),
        timeseries(
            "Queue wait by team (p50, p95)",
            "How long admitted jobs waited (gpufleet_queue_wait_seconds); "
            "GpufleetQueueWaitHigh fires when p95 stays over 10 minutes.",
            [
                Q(f"histogram_quantile(0.5, max by (team, le) ({wait}))", "{{team}} p50"),
                Q(f"histogram_quantile(0.95, max by (team, le) ({wait}))", "{{team}} p95"),
            ],
            unit="s",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 600}],
            threshold_style="dashed",
            w=8,
        ),
    )
    cycle = "rate(gpufleet_scheduler_cycle_duration_seconds_bucket[$__rate_interval])"
    b.add(
        timeseries(
            "Scheduling cycle duration (p50, p99)",
            "gpufleet_scheduler_cycle_duration_seconds.",
            [
                Q(f"histogram_quantile(0.5, sum by (le) ({cycle}))", "p50"),
                Q(f"histogram_quantile(0.99, sum by (le) ({cycle}))", "p99"),
            ],
            unit="s",
            w=8,
        ),
        timeseries(
            "Admissions per minute by team",
            "Jobs admitted (started) per minute.",
            [Q(f"max by (team) (rate({sel('gpufleet_admissions_total', t)}[$__rate_interval])) * 60", "{{team}}")],
            unit="short",
            stack=True,
            w=8,
        ),
        timeseries(
            "Preemptions by team and reason",
            "Running jobs stopped to make room, per interval.",
            [
                Q(
                    f"max by (team, reason) (increase({sel('gpufleet_preemptions_total', t)}[$__rate_interval]))",
                    "{{team}}: {{reason}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
    )
    b.add(
        timeseries(
            "Spot interruptions by team",
            "Jobs whose spot capacity was reclaimed, per interval "
            "(GpufleetSpotInterruptionStorm: 5 or more in 15 minutes).",
            [
                Q(
                    f"max by (team) (increase({sel('gpufleet_spot_interruptions_total', t)}[$__rate_interval]))",
                    "{{team}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
        timeseries(
            "Autoscaler decisions by pool and action",
            "Scale-ups, scale-downs and other decisions, per interval.",
            [
                Q(
                    "max by (pool, action) (increase(gpufleet_autoscaler_decisions_total[$__rate_interval]))",
                    "{{pool}}: {{action}}",
                )
            ],
            stack=True,
            bars=True,
            w=8,
        ),
        timeseries(
            "Jobs by state",
            "gpufleet_jobs by state.",
            [Q(f"sum by (state) ({dedup('state, team', sel('gpufleet_jobs', t))})", "{{state}}")],
            w=8,
        ),
    )
    b.add(
        timeseries(
            "API requests by status",
            "gpufleet_http_requests_total per second.",
            [Q("sum by (status) (rate(gpufleet_http_requests_total[$__rate_interval]))", "{{status}}")],
            unit="reqps",
            w=24,
            h=6,
        ),
    )
    return b.build()


def efficiency() -> JSON:
    b = Board(
        "gpufleet-efficiency",
        "gpufleet / Efficiency",
        f"GPU utilization against what it costs. Wasteful: a workload costing at least $min_cost per hour "
        f"whose GPUs average under {UNDERUSED_PCT} % utilization.",
        ["gpu", "cost", "efficiency"],
        [
            query_var("namespace", "Namespace", "pod_hourly_cost_usd", "namespace"),
            custom_var("min_cost", "Wasteful from ($/h)", ["0", "1", "5", "10", "25", "50", "100"], "1"),
        ],
        time_from="now-24h",
    )
    ns = 'namespace=~"$namespace"'
    util_pod = f"avg by (namespace, pod) ({_util(ns, HELD)})"
    cost_pod = _pod_rate(ns)
    wasted = f"{cost_pod} >= $min_cost and on (namespace, pod) ({util_pod} < {UNDERUSED_PCT})"
    held_gpus = f"max by (Hostname, gpu) ({sel('DCGM_FI_DEV_GPU_UTIL', ns, HELD)})"
    burn = f"sum({_rate(ns)})"
    b.row("Waste")
    b.add(
        stat(
            "Wasted spend rate ($/h)",
            f"What the wasteful workloads (≥ $min_cost/h, under {UNDERUSED_PCT} %) cost per hour.",
            [Q(f"sum({wasted})")],
            unit=USD,
            decimals=2,
            no_value="$0",
            steps=[{"color": "green", "value": None}, {"color": "red", "value": 0.01}],
            w=6,
        ),
        stat(
            "Share of spend on underused GPUs",
            f"$/h of pods under {UNDERUSED_PCT} % over all pods' $/h.",
            [Q(f"sum({cost_pod} and on (namespace, pod) ({util_pod} < {UNDERUSED_PCT})) / sum({cost_pod})")],
            unit="percentunit",
            decimals=1,
            no_value="0%",
            steps=[
                {"color": "green", "value": None},
                {"color": "orange", "value": 0.1},
                {"color": "red", "value": 0.3},
            ],
            w=6,
        ),
        stat(
            "Cost per busy GPU-hour",
            "Burn rate over the utilization-weighted GPUs held: what an hour of GPU work really costs.",
            [Q(f"{burn} / (sum({held_gpus}) / 100)")],
            unit=USD,
            decimals=2,
            w=6,
        ),
        stat(
            "Idle capacity cost ($/h)",
            "GPUs allocated to no job times the nodes' GPU price.",
            [Q(_idle_gpu_cost())],
            unit=USD,
            decimals=2,
            w=6,
        ),
    )
    b.add(
        xychart(
            "Utilization against cost per hour",
            "One point per pod: its GPUs' mean utilization (x) and "
            "its $/h (y). Bottom-right is efficient; top-left is wasteful.",
            (Q(util_pod), "GPU utilization", PCT),
            (Q(cost_pod), "$/h", USD),
        ),
        table(
            "Wasteful workloads",
            f"Pods costing at least $min_cost/h whose GPUs average under "
            f"{UNDERUSED_PCT} % utilization, most expensive first.",
            [
                (Q(wasted), "$/h", USD, None),
                (
                    Q(f"{util_pod} < {UNDERUSED_PCT} and on (namespace, pod) ({cost_pod} >= $min_cost)"),
                    "GPU utilization",
                    PCT,
                    UTIL_STEPS,
                ),
            ],
            h=10,
            sort_by="$/h",
        ),
    )
    b.row("Over time")
    b.add(
        timeseries(
            "Utilization and burn rate",
            "Mean utilization of held GPUs (left) against the burn rate (right).",
            [
                Q(f"avg({held_gpus})", "GPU utilization"),
                Q(burn, "burn rate ($/h)"),
            ],
            unit=PCT,
            overrides=[
                props_override(
                    "burn rate ($/h)",
                    [
                        {"id": "unit", "value": USD},
                        {"id": "custom.axisPlacement", "value": "right"},
                    ],
                )
            ],
        ),
        timeseries(
            "GPUs allocated and used",
            "GPUs containers are allocated (container_gpu_allocation) "
            "against the utilization-weighted GPUs in use (DCGM).",
            [
                Q(f"sum({dedup(CONTAINER, sel('container_gpu_allocation', ns))})", "allocated"),
                Q(f"sum({held_gpus}) / 100", "used (utilization-weighted)"),
            ],
        ),
    )
    b.add(
        table(
            "Efficiency by namespace",
            "Each namespace: mean utilization of its GPUs (red under "
            f"{UNDERUSED_PCT} %), $/h, GPUs allocated and the cost of a busy GPU-hour.",
            [
                (Q(f"avg by (namespace) ({_util(ns, HELD)})"), "GPU utilization", PCT, UTIL_STEPS),
                (Q(f"sum by (namespace) ({cost_pod})"), "$/h", USD, None),
                (
                    Q(f"sum by (namespace) ({dedup(CONTAINER, sel('container_gpu_allocation', ns))})"),
                    "GPUs allocated",
                    "short",
                    None,
                ),
                (
                    Q(f"sum by (namespace) ({cost_pod}) / (sum by (namespace) ({_util(ns, HELD)}) / 100)"),
                    "$ per busy GPU-hour",
                    USD,
                    None,
                ),
            ],
            w=24,
            sort_by="$/h",
        ),
    )
    return b.build()


DASHBOARDS: dict[str, Callable[[], JSON]] = {
    "gpufleet-gpu-utilization.json": gpu_utilization,
    "gpufleet-cost-overview.json": cost_overview,
    "gpufleet-cost-attribution.json": cost_attribution,
    "gpufleet-savings.json": savings,
    "gpufleet-budgets.json": budgets,
    "gpufleet-cluster-queue.json": cluster_queue,
    "gpufleet-efficiency.json": efficiency,
}


def build_all() -> dict[str, JSON]:
    """File name → dashboard JSON, every dashboard."""
    return {name: make() for name, make in DASHBOARDS.items()}


def render(dashboard: JSON) -> str:
    """The file's text: stable (insertion order, 2-space indent, trailing newline)."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def panels(dashboard: JSON) -> list[JSON]:
    """The dashboard's panels, rows left out."""
    return [p for p in dashboard["panels"] if p.get("type") != "row"]


# -- running a panel's query outside Grafana ---------------------------------------------------------

# Grafana's built-in variables, as fixed values (override with expand(..., builtins={...}))
BUILTINS: dict[str, str] = {
    "__interval": "1m",
    "__interval_ms": "60000",
    "__rate_interval": "1m",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def variable_values(dashboard: JSON) -> dict[str, str]:
    """Each variable's value as Grafana substitutes it by default: ``.*`` for "All", else the current value."""
    out: dict[str, str] = {}
    for v in dashboard["templating"]["list"]:
        if v["type"] == "datasource":
            continue
        if v.get("includeAll"):
            out[v["name"]] = v.get("allValue") or ".*"
        else:
            out[v["name"]] = str(v["current"]["value"])
    return out


def expand(expr: str, values: dict[str, str], builtins: dict[str, str] | None = None) -> str:
    """``expr`` with dashboard variables (``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``) and Grafana's
    built-ins (``$__rate_interval``, ``$__range``, ...) replaced: PromQL Prometheus can run."""
    known = {**BUILTINS, **(builtins or {}), **values}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in known:
            raise KeyError(f"unknown variable ${name} in {expr!r}")
        return known[name]

    return _VAR.sub(sub, expr)


def panel_queries(dashboard: JSON) -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every panel's query."""
    return [(p["title"], t["refId"], t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]


def variable_queries(dashboard: JSON) -> list[tuple[str, str, str]]:
    """(variable, label, PromQL) of each ``label_values(metric, label)`` variable: the PromQL returns one
    series per value (``count by (label) (metric)``)."""
    out = []
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = _LABEL_VALUES.match(v["definition"])
        if m is None:
            raise ValueError(f"variable {v['name']}: not label_values(metric, label): {v['definition']}")
        out.append((v["name"], m.group(2), f"count by ({m.group(2)}) ({m.group(1)})"))
    return out


def write(out: Path = DASHBOARD_DIR) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, d in build_all().items():
        path = out / name
        path.write_text(render(d), encoding="utf-8")
        written.append(path)
    return written


def check(out: Path = DASHBOARD_DIR) -> list[str]:
    """The files under ``out`` that differ from the builder's output (or are missing or extra)."""
    built = {name: render(d) for name, d in build_all().items()}
    bad = [
        name
        for name, text in built.items()
        if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text
    ]
    bad += sorted(p.name for p in out.glob("*.json") if p.name not in built)
    return bad


def docs_tables() -> str:
    """Markdown: one table of panels per dashboard (pasted into docs/dashboards.md)."""
    lines: list[str] = []
    for name, d in build_all().items():
        ps = panels(d)
        lines += [
            f"### {d['title']}",
            "",
            f"`{name}`, uid `{d['uid']}`, {len(ps)} panels. {d['description']}",
            "",
            "| Panel | Type | What it shows |",
            "|---|---|---|",
        ]
        lines += [f"| {p['title']} | {p['type']} | {p['description']} |" for p in ps]
        lines.append("")
    return "\n".join(lines).replace("$min_cost", "`$min_cost`")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpufleet.dashboards", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DASHBOARD_DIR, help="folder of the JSON files")
    ap.add_argument("--check", action="store_true", help="fail when the files differ from the builder's output")
    ap.add_argument("--docs", action="store_true", help="print the panel tables of docs/dashboards.md")
    args = ap.parse_args(argv)
    if args.docs:
        sys.stdout.write(docs_tables())
        return 0
    if args.check:
        bad = check(args.out)
        for name in bad:
            print(
                f"{args.out / name}: differs from gpufleet.dashboards (run python -m gpufleet.dashboards)",
                file=sys.stderr,
            )
        return 1 if bad else 0
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
