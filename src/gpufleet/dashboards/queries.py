"""A dashboard's panels and queries, and running a panel's query outside Grafana: dashboard variables
and Grafana's built-ins expanded into PromQL Prometheus can run (tests/observability/test_prometheus_live.py).
"""

from __future__ import annotations

import re

from gpufleet.dashboards.builder import JSON


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
