"""A self-contained HTML report of one or several simulation results.

The page has no external resources (no scripts, stylesheets, fonts or images to fetch): charts are
inline SVG drawn here. All text from results (names, teams, config) is escaped. Given several
results (a policy comparison), every chart overlays them, one colour per result, with a legend.

Charts: allocated vs idle GPUs, queue length, cluster cost rate (over time); wait time and job
completion time (CDFs, log time axis); cost by team (grouped bars). Each line is downsampled to at
most :data:`MAX_POINTS` points, keeping each bucket's minimum and maximum so peaks survive.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.sim.results import SimResult

FloatArray = npt.NDArray[np.float64]

MAX_POINTS = 2_000  # per line
# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
MAX_TEAMS = 15  # bar chart categories; the rest are summed into "(other)"

_W, _H = 760, 300
_ML, _MR, _MT, _MB = 70, 20, 16, 46  # margins: left, right, top, bottom
_TIME_TICKS = (
    (1.0, "1s"),
    (10.0, "10s"),
    (60.0, "1m"),
    (600.0, "10m"),
    (3_600.0, "1h"),
    (6 * 3_600.0, "6h"),
    (86_400.0, "1d"),
    (7 * 86_400.0, "7d"),
    (30 * 86_400.0, "30d"),
    (365 * 86_400.0, "1y"),
)


@dataclass(frozen=True, slots=True)
class _Line:
    label: str
    color: str
    x: FloatArray
    y: FloatArray
    dashed: bool = False


# --- numbers ---------------------------------------------------------------------------------


def downsample(x: FloatArray, y: FloatArray, max_points: int = MAX_POINTS) -> tuple[FloatArray, FloatArray]:
    """At most ``max_points`` points of ``(x, y)`` in order, keeping each bucket's min and max."""
    n = len(x)
    if n <= max_points:
        return x, y
    # The first and last points always stay; the buckets between give at most 2 points each.
    buckets = max(1, (max_points - 2) // 2)
    edges = np.linspace(1, n - 1, buckets + 1).astype(np.int64)
    keep: list[int] = [0]
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        if hi <= lo:
            continue
        seg = y[lo:hi]
        keep.extend(sorted({lo + int(np.argmin(seg)), lo + int(np.argmax(seg))}))
    keep.append(n - 1)
    idx = np.asarray(keep, dtype=np.int64)
    return x[idx], y[idx]


def _nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _y_axis(data_max: float) -> tuple[list[float], float]:
    """Ticks from 0 and the axis top: the first tick at or above ``data_max`` (1 when no data)."""
    top = data_max if math.isfinite(data_max) and data_max > 0 else 1.0
    ticks = _nice_ticks(0.0, top)
    if len(ticks) > 1 and ticks[-1] < top * (1 - 1e-9):
        ticks.append(ticks[-1] + (ticks[1] - ticks[0]))
    return ticks, max(top, ticks[-1])


def _fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.4g}"


def _fmt_duration(s: float) -> str:
    a = abs(s)
    if a < 60:
        return f"{s:.1f} s"
    if a < 3_600:
        return f"{s / 60:.1f} min"
    if a < 86_400:
        return f"{s / 3_600:.2f} h"
    return f"{s / 86_400:.2f} d"


def _time_unit(span_s: float) -> tuple[float, str]:
    if span_s <= 2 * 3_600:
        return 60.0, "minutes"
    if span_s <= 3 * 86_400:
        return 3_600.0, "hours"
    return 86_400.0, "days"


def _step(t: FloatArray, v: FloatArray, end: float) -> tuple[FloatArray, FloatArray]:
    """A step function (each value holds until the next time) as polyline vertices."""
    if len(t) == 0:
        return t, v
    t_next = np.append(t[1:], max(end, float(t[-1])))
    xs = np.empty(2 * len(t))
    ys = np.empty(2 * len(t))
    xs[0::2], xs[1::2] = t, t_next
    ys[0::2], ys[1::2] = v, v
    return xs, ys


# --- SVG -------------------------------------------------------------------------------------


def _svg_open(title: str) -> list[str]:
    return [
        f'<svg viewBox="0 0 {_W} {_H}" width="100%" role="img" aria-label="{html.escape(title)}">',
        f"<title>{html.escape(title)}</title>",
    ]


def _empty_svg(title: str) -> str:
    parts = _svg_open(title)
    parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" class="muted">no data</text></svg>')
    return "".join(parts)


def _axes(
    parts: list[str],
    xticks: Sequence[tuple[float, str]],
    yticks: Sequence[tuple[float, str]],
    sx: Callable[[float], float],
    sy: Callable[[float], float],
    x_label: str,
    y_label: str,
) -> None:
    x0, x1, y0, y1 = _ML, _W - _MR, _H - _MB, _MT
    for v, label in yticks:
        y = sy(v)
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{html.escape(label)}</text>')
    for v, label in xticks:
        x = sx(v)
        parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}" class="axis"/>')
        parts.append(f'<text x="{x:.1f}" y="{y0 + 17}" text-anchor="middle">{html.escape(label)}</text>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="axis"/>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="axis"/>')
    parts.append(
        f'<text x="{(x0 + x1) / 2}" y="{_H - 8}" text-anchor="middle" class="label">{html.escape(x_label)}</text>'
    )
    parts.append(
        f'<text transform="translate(14 {(y0 + y1) / 2}) rotate(-90)" text-anchor="middle" '
        f'class="label">{html.escape(y_label)}</text>'
    )


def _line_chart(
    title: str,
    lines: Sequence[_Line],
    x_label: str,
    y_label: str,
    *,
    log_x: bool = False,
    y_max: float | None = None,
    x_fmt: Callable[[float], str] = _fmt_num,
) -> str:
    lines = [ln for ln in lines if len(ln.x) > 0]
    if not lines:
        return _empty_svg(title)
    xs = np.concatenate([ln.x for ln in lines])
    ys = np.concatenate([ln.y for ln in lines])
    if log_x:
        xs = np.log10(np.maximum(xs, 1.0))
    x_lo, x_hi = float(xs.min()), float(xs.max())
    if x_hi <= x_lo:
        x_hi = x_lo + 1.0
    y_ticks_v, y_hi = _y_axis(y_max if y_max is not None else float(ys.max()))
    pw, ph = _W - _ML - _MR, _H - _MT - _MB

    def sx(v: float) -> float:
        return _ML + (v - x_lo) / (x_hi - x_lo) * pw

    def sy(v: float) -> float:
        return _H - _MB - v / y_hi * ph

    if log_x:
        xticks = [(math.log10(v), lab) for v, lab in _TIME_TICKS if x_lo <= math.log10(v) <= x_hi + 1e-9]
    else:
        xticks = [(v, x_fmt(v)) for v in _nice_ticks(x_lo, x_hi, 6)]
    parts = _svg_open(title)
    _axes(parts, xticks, [(v, _fmt_num(v)) for v in y_ticks_v], sx, sy, x_label, y_label)
    for ln in lines:
        lx = np.log10(np.maximum(ln.x, 1.0)) if log_x else ln.x
        dx, dy = downsample(lx, ln.y)
        px = _ML + (dx - x_lo) / (x_hi - x_lo) * pw
        py = _H - _MB - dy / y_hi * ph
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px.tolist(), py.tolist(), strict=True))
        dash = ' stroke-dasharray="5 4"' if ln.dashed else ""
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{ln.color}" stroke-width="1.6"{dash}>'
            f"<title>{html.escape(ln.label)}</title></polyline>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bar_chart(title: str, categories: list[str], groups: list[tuple[str, str, list[float]]], y_label: str) -> str:
    if not categories or not groups:
        return _empty_svg(title)
    y_ticks_v, y_hi = _y_axis(max((max(vals, default=0.0) for _, _, vals in groups), default=0.0))
    pw, ph = _W - _ML - _MR, _H - _MT - _MB

    def sy(v: float) -> float:
        return _H - _MB - v / y_hi * ph

    slot = pw / len(categories)
    bar = slot * 0.8 / len(groups)
    xticks = [(i + 0.5, c if len(c) <= 14 else c[:13] + "…") for i, c in enumerate(categories)]
    parts = _svg_open(title)
    _axes(
        parts,
        xticks,
        [(v, _fmt_num(v)) for v in y_ticks_v],
        lambda v: _ML + v * slot,
        sy,
        "team",
        y_label,
    )
    for g, (label, color, vals) in enumerate(groups):
        for i, v in enumerate(vals):
            x = _ML + i * slot + slot * 0.1 + g * bar
            y = sy(v)
            tip = f"{label} — {categories[i]}: ${v:,.2f}"
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar - 1, 1):.1f}" height="{_H - _MB - y:.1f}" '
                f'fill="{color}"><title>{html.escape(tip)}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)


# --- the page --------------------------------------------------------------------------------


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _arr(values: Sequence[float]) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def _cdf(values: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    v = np.sort(_arr(values))
    if v.size == 0:
        return v, v
    return v, np.arange(1, v.size + 1, dtype=np.float64) / v.size * 100.0


_SUMMARY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "jobs", "int"),
    ("completed", "completed", "int"),
    ("failed", "failed", "int"),
    ("cancelled", "cancelled", "int"),
    ("timed_out", "timed out", "int"),
    ("unfinished", "unfinished", "int"),
    ("wait_mean_s", "wait, mean", "dur"),
    ("wait_median_s", "wait, median", "dur"),
    ("wait_p95_s", "wait, p95", "dur"),
    ("wait_p99_s", "wait, p99", "dur"),
    ("jct_mean_s", "JCT, mean", "dur"),
    ("jct_median_s", "JCT, median", "dur"),
    ("jct_p95_s", "JCT, p95", "dur"),
    ("jct_p99_s", "JCT, p99", "dur"),
    ("utilization", "GPU utilization (allocated / total)", "pct"),
    ("mean_total_gpus", "GPUs in the cluster, mean", "num"),
    ("gpu_hours", "GPU-hours allocated", "num"),
    ("total_cost_usd", "total cost", "usd"),
    ("job_cost_usd", "cost attributed to jobs", "usd"),
    ("idle_cost_usd", "idle cost", "usd"),
    ("cost_per_gpu_hour_usd", "cost per allocated GPU-hour", "usd"),
    ("preemptions", "preemptions", "int"),
    ("spot_restarts", "spot restarts", "int"),
    ("lost_work_s", "work lost to preemption", "dur"),
    ("waste_gpu_hours", "preemption waste, GPU-hours redone", "num"),
    ("waste_share", "preemption waste, share of GPU-hours", "pct"),
    ("waste_priority_gpu_hours", "waste: priority preemptions (GPU-h)", "num"),
    ("waste_quota_reclaim_gpu_hours", "waste: quota reclaims (GPU-h)", "num"),
    ("waste_spot_interruption_gpu_hours", "waste: spot interruptions (GPU-h)", "num"),
    ("waste_lost_gpu_hours", "waste: lost nodes or runs (GPU-h)", "num"),
    ("makespan_s", "makespan", "dur"),
    ("events_processed", "events processed", "int"),
)


def _fmt_cell(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "dur":
        return _fmt_duration(float(value))
    if kind == "pct":
        return f"{float(value) * 100:.1f}%"
    if kind == "usd":
        return f"${float(value):,.2f}"
    return f"{float(value):,.2f}"


def _summary_table(results: Sequence[SimResult], summaries: list[dict[str, Any]]) -> str:
    head = "".join(
        f'<th scope="col"><span class="swatch" style="background:{_color(i)}"></span>{html.escape(r.name)}</th>'
        for i, r in enumerate(results)
    )
    rows = []
    for key, label, kind in _SUMMARY_ROWS:
        cells = "".join(f"<td>{html.escape(_fmt_cell(s.get(key), kind))}</td>" for s in summaries)
        rows.append(f'<tr><th scope="row">{html.escape(label)}</th>{cells}</tr>')
    return f'<table><thead><tr><th scope="col">metric</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _legend(entries: Sequence[tuple[str, str, bool]]) -> str:
    items = "".join(
        f'<span class="key"><span class="swatch{" dashed" if dashed else ""}" '
        f'style="--c:{color};background:{"transparent" if dashed else color}"></span>{html.escape(label)}</span>'
        for label, color, dashed in entries
    )
    return f'<div class="legend">{items}</div>'


def _figure(title: str, svg: str, legend: str, note: str = "") -> str:
    note_html = f'<p class="muted">{html.escape(note)}</p>' if note else ""
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{legend}{svg}{note_html}</figure>"


def _config_block(results: Sequence[SimResult]) -> str:
    blocks = []
    for r in results:
        if not r.config:
            continue
        rows = "".join(
            f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in r.config.items()
        )
        blocks.append(f"<details><summary>{html.escape(r.name)}</summary><table>{rows}</table></details>")
    if not blocks:
        return ""
    return "<section><h2>Configuration</h2>" + "".join(blocks) + "</section>"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0;
background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
table{border-collapse:collapse;background:#fff;margin:8px 0}
th,td{padding:4px 12px;border-bottom:1px solid #e3e6eb;text-align:right;white-space:nowrap}
th[scope=row],thead th:first-child,details th{text-align:left;font-weight:500}
thead th{border-bottom:2px solid #c9ced6}
figure{background:#fff;border:1px solid #e3e6eb;border-radius:6px;margin:14px 0;padding:12px 14px}
figcaption{font-weight:600;margin-bottom:4px}
svg{display:block;font-size:11px;fill:#4a5262}
svg .grid{stroke:#eceef2}svg .axis{stroke:#8a93a3}svg .label{font-size:12px;fill:#1d2330}
.muted{color:#6b7385;fill:#6b7385}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:2px 0 6px}
.key{display:inline-flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:14px;height:4px;border-radius:2px;margin-right:6px;vertical-align:middle}
.swatch.dashed{border-top:3px dashed var(--c);height:0;border-radius:0}
details{margin:6px 0}
"""


def render_html(result: SimResult | Sequence[SimResult], *, title: str | None = None) -> str:
    """The report as one self-contained HTML page (a string)."""
    results: list[SimResult] = [result] if isinstance(result, SimResult) else list(result)
    summaries = [r.summary() for r in results]
    several = len(results) > 1
    page_title = title or ("gpufleet: " + " vs ".join(r.name for r in results) if results else "gpufleet")
    span = max((max(r.makespan, r.samples[-1].time if r.samples else 0.0) for r in results), default=0.0)
    unit_s, unit = _time_unit(span)

    def series(r: SimResult, get: Callable[[Any], float]) -> tuple[FloatArray, FloatArray]:
        t = _arr([s.time for s in r.samples]) / unit_s
        return _step(t, _arr([get(s) for s in r.samples]), r.makespan / unit_s)

    # 1. GPUs: allocated (solid) and idle (dashed); one colour per result, two when alone.
    gpu_lines: list[_Line] = []
    for i, r in enumerate(results):
        x, y = series(r, lambda s: s.allocated_gpus)
        xi, yi = series(r, lambda s: s.idle_gpus)
        c_alloc, c_idle = (_color(i), _color(i)) if several else (_color(0), _color(1))
        prefix = f"{r.name}: " if several else ""
        gpu_lines.append(_Line(prefix + "allocated", c_alloc, x, y))
        gpu_lines.append(_Line(prefix + "idle", c_idle, xi, yi, dashed=True))
    queue_lines = [_Line(r.name, _color(i), *series(r, lambda s: s.queue_length)) for i, r in enumerate(results)]
    cost_lines = [
        _Line(r.name, _color(i), *series(r, lambda s: s.cost_rate_usd_per_hour)) for i, r in enumerate(results)
    ]
    wait_lines = [
        _Line(r.name, _color(i), *_cdf([j.wait_s for j in r.records if j.wait_s is not None]))
        for i, r in enumerate(results)
    ]
    jct_lines = [
        _Line(r.name, _color(i), *_cdf([j.jct_s for j in r.records if j.jct_s is not None]))
        for i, r in enumerate(results)
    ]

    # Cost by team: the teams with the most cost over all results, the rest as "(other)".
    by_team = [r.cost_by_team() for r in results]
    totals: dict[str, float] = {}
    for d in by_team:
        for team, cost in d.items():
            totals[team] = totals.get(team, 0.0) + cost
    ranked = sorted(totals, key=lambda t: (-totals[t], t))
    shown, rest = ranked[:MAX_TEAMS], ranked[MAX_TEAMS:]
    categories = shown + (["(other)"] if rest else [])
    groups = [
        (
            r.name,
            _color(i),
            [d.get(t, 0.0) for t in shown] + ([sum(d.get(t, 0.0) for t in rest)] if rest else []),
        )
        for i, (r, d) in enumerate(zip(results, by_team, strict=True))
    ]

    run_legend = _legend([(r.name, _color(i), False) for i, r in enumerate(results)])
    gpu_legend = _legend([(ln.label, ln.color, ln.dashed) for ln in gpu_lines])
    time_label = f"time ({unit})"
    figures = [
        _figure(
            "GPUs: allocated vs idle",
            _line_chart("GPUs: allocated vs idle", gpu_lines, time_label, "GPUs"),
            gpu_legend,
        ),
        _figure("Queue length", _line_chart("Queue length", queue_lines, time_label, "jobs waiting"), run_legend),
        _figure(
            "Cluster cost rate",
            _line_chart("Cluster cost rate", cost_lines, time_label, "USD per hour"),
            run_legend,
        ),
        _figure(
            "Wait time (CDF)",
            _line_chart("Wait time (CDF)", wait_lines, "wait (log scale)", "% of started jobs", log_x=True, y_max=100),
            run_legend,
            "Jobs that started; waits under 1 s are drawn at 1 s.",
        ),
        _figure(
            "Job completion time (CDF)",
            _line_chart(
                "Job completion time (CDF)", jct_lines, "JCT (log scale)", "% of ended jobs", log_x=True, y_max=100
            ),
            run_legend,
            "Jobs that ended; times under 1 s are drawn at 1 s.",
        ),
        _figure(
            "Cost by team",
            _bar_chart("Cost by team", categories, groups, "USD attributed"),
            run_legend,
        ),
    ]
    body = (
        f"<h1>{html.escape(page_title)}</h1>"
        f'<p class="muted">{len(results)} run{"s" if several else ""}; simulated time.</p>'
        f"<section><h2>Summary</h2>{_summary_table(results, summaries)}</section>"
        f"<section><h2>Charts</h2>{''.join(figures)}</section>"
        f"{_config_block(results)}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(page_title)}</title><style>{_CSS}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )
