"""The builder of Grafana dashboard JSON: queries (:class:`Q`), panel constructors (time series, stats,
gauges, bar gauges, pies, tables, heatmaps, state timelines, scatter plots), template variables, units,
threshold steps and :class:`Board`, which places panels on the grid and renders the dashboard.

Every panel queries the dashboard's ``${datasource}`` (any Prometheus); every dashboard has schemaVersion 39.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

SCHEMA_VERSION = 39
DS: JSON = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24

# units
PCT = "percent"
USD = "currencyUSD"

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
