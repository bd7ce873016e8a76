"""The experiment's tables (one definition for the terminal and Markdown) and its plot.

:func:`tables` gives title, columns and rows of strings; the CLI draws them with Rich and
:func:`markdown` as pipe tables. :func:`plot` draws the challenge's cost per step and the grid's
throughput by batch size: with matplotlib when it is installed (PNG), else as an SVG drawn here.
Nothing here writes files: the caller does.
"""

from __future__ import annotations

import importlib
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from gpufleet.experiments.inference.run import InferenceResult, int8_accuracy_changes


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: list[list[str]]
    right: tuple[int, ...] = ()  # indexes of right-aligned (numeric) columns
    hide: dict[int, int] = field(default_factory=dict)  # column → priority to leave out on a narrow terminal


def usd(x: float | None) -> str:
    return "–" if x is None else f"${x:.2e}"


def num(x: float | None, nd: int = 0) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:,.{nd}f}"


def ms(x: float | None) -> str:
    if x is None or math.isnan(x) or math.isinf(x):
        return "–"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}%"


def acc(a: float | None, change_pp: float | None = None) -> str:
    if a is None:
        return "–"
    return f"{100 * a:.2f}%" + ("" if change_pp is None else f" ({change_pp:+.2f})")


def tables(res: InferenceResult) -> list[Table]:
    out: list[Table] = []
    sc = res.scenario
    out.append(
        Table(
            "Cost optimization challenge: each step on the last kept one ($ per 1,000 inferences)",
            ("STEP", "CONFIG", "INF/S", "P50 MS", "P99 MS", "ACCURACY", "ΔPP", "$/1K", "SAVED", "CUM.", "STATUS"),
            [
                [
                    s.name,
                    s.config,
                    num(s.throughput),
                    ms(s.p50_ms),
                    ms(s.p99_ms),
                    acc(s.accuracy),
                    "–" if s.accuracy_change_pp is None else f"{s.accuracy_change_pp:+.2f}",
                    usd(s.usd_per_1k),
                    pct(s.step_saving_pct),
                    pct(s.cumulative_saving_pct),
                    s.status,
                ]
                for s in sc.steps
            ],
            (2, 3, 4, 5, 6, 7, 8, 9),
            {3: 2, 8: 1},
        )
    )
    out.append(
        Table(
            f"Grid: {res.device.name}",
            ("DEVICE", "BATCH", "PRECISION", "INF/S", "P50 MS", "P99 MS", "ACCURACY", "CPU FRAC", "INF/CPU-S", "$/1K"),
            [
                [
                    m.device,
                    str(m.batch),
                    m.precision.upper(),
                    num(m.throughput),
                    ms(m.p50_ms),
                    ms(m.p99_ms),
                    acc(m.accuracy),
                    num(m.cpu_fraction, 2),
                    num(m.inferences / m.cpu_seconds) if m.cpu_seconds > 0 else "–",
                    usd(m.usd_per_1k),
                ]
                for m in [*res.grid, *res.extra]
            ],
            (1, 3, 4, 5, 6, 7, 8, 9),
            {8: 1},
        )
    )
    changes = int8_accuracy_changes(res.grid)
    if changes:
        out.append(
            Table(
                "INT8 (dynamic quantization) against FP32: held-out accuracy",
                ("BATCH", "FP32", "INT8", "CHANGE (pp)", "SAME PREDICTION AS FP32", "INT8 SPEED ÷ FP32"),
                [
                    [
                        str(c["batch"]),
                        acc(c["fp32_accuracy"]),
                        acc(c["int8_accuracy"]),
                        f"{c['change_pp']:+.2f}",
                        acc(c["agreement_with_fp32"]),
                        "–" if c["throughput_ratio"] is None else f"{c['throughput_ratio']:.2f}×",
                    ]
                    for c in changes
                ],
                (0, 1, 2, 3, 4, 5),
            )
        )
    if res.sharing is not None:
        sh = res.sharing
        imp = sh.impact()
        title = f"Two workloads on one device (batch {sh.batch} {sh.precision.upper()})"
        if imp:
            title += (
                f": shared, each gets {imp['per_workload_throughput_ratio']}× its alone throughput, "
                f"p99 × {imp['p99_ratio']}"
            )
        out.append(
            Table(
                title,
                ("MODE", "PLACEMENT", "TOTAL INF/S", "PER WORKLOAD", "P50 MS", "P99 MS", "CPU FRAC", "BILLED", "$/1K"),
                [
                    [
                        r.mode,
                        r.placement,
                        num(r.aggregate_throughput),
                        " / ".join(num(w["throughput_per_s"]) for w in r.workers),
                        ms(r.p50_ms),
                        ms(r.p99_ms),
                        num(r.cpu_fraction, 2),
                        r.price.unit,
                        usd(r.usd_per_1k),
                    ]
                    for r in sh.runs
                ],
                (2, 4, 5, 6, 8),
            )
        )
    if res.scaling is not None:
        sg = res.scaling
        out.append(
            Table(
                f"Replicas against an open-loop request rate ({sg.precision.upper()}, dynamic batches "
                f"≤ {sg.max_batch}, p99 SLO {sg.slo_p99_ms:g} ms)",
                ("RATE/S", "REPLICAS", "SOURCE", "ANSWERED", "P50 MS", "P99 MS", "MEAN BATCH", "UTIL", "SLO", "$/1K"),
                [
                    [
                        num(p.rate),
                        str(p.replicas),
                        p.source,
                        f"{p.answered}/{p.requests}",
                        ms(p.p50_ms),
                        ms(p.p99_ms),
                        num(p.mean_batch, 2),
                        num(p.utilization, 2),
                        "meets" if p.meets_slo else "misses",
                        usd(p.usd_per_1k),
                    ]
                    for p in sg.points
                ],
                (0, 1, 3, 4, 5, 6, 7, 9),
            )
        )
        needed = sg.to_dict()["replicas_needed"]
        out.append(
            Table(
                f"Replicas needed for p99 ≤ {sg.slo_p99_ms:g} ms",
                ("RATE/S", "REPLICAS", "BASIS", "$/1K AT THAT RATE"),
                [[num(n["rate_per_s"]), _needed(n), n["basis"], usd(n["usd_per_1k"])] for n in needed],
                (0, 1, 3),
            )
        )
    return out


def _needed(row: dict[str, Any]) -> str:
    if row["replicas"] is not None:
        return str(row["replicas"])
    return "–" if row.get("more_than") is None else f"> {row['more_than']}"


def notes(res: InferenceResult) -> list[str]:
    """What the tables rest on: prices, projections, the host's load, skipped configurations."""
    lines: list[str] = []
    t = res.trained
    lines.append(
        f"Model: MLP 64-{'-'.join(map(str, t.hidden))}-10, {t.info.get('parameters', 0):,} parameters, trained "
        f"{t.epochs} epochs (seed {t.seed}) in {t.train_seconds:.1f} s on {len(t.data.x_train)} digits; accuracy "
        f"on {len(t.data.x_test)} held-out digits. Data: {t.data.source}."
    )
    prices = {m.price.unit: m.price.source for m in [*res.grid, *res.extra] if m.price is not None}
    for unit, source in prices.items():
        lines.append(f"Price of {unit}: {source}.")
    for s in res.scenario.steps:
        if s.status in ("rejected", "skipped"):
            lines.append(f"Challenge step {s.name} ({s.config}) {s.status}: {s.reason}.")
    for s in res.scenario.steps:
        if s.kind == "projected" and s.reason:
            lines.append(f"{s.name}: {s.reason}. {s.basis or ''}".strip())
    for sk in res.skipped:
        lines.append(f"Skipped {sk['device']} batch {sk['batch']} {sk['precision']}: {sk['reason']}.")
    if res.environment.get("note"):
        lines.append(str(res.environment["note"]).rstrip(".") + ".")
    for extra in (res.sharing.notes if res.sharing else []) + (res.scaling.notes if res.scaling else []):
        lines.append(extra.rstrip(".") + ".")
    lines.extend(res.scenario.notes)
    return lines


def markdown(res: InferenceResult) -> str:
    out = [f"# Inference experiment: {res.device.name}", ""]
    summ = res.scenario.summary()
    if summ:
        out += [
            f"**{summ['baseline']} → {summ['final']}: {summ['saving_pct']:.1f}% cheaper per 1,000 inferences** "
            f"({usd(summ['baseline_usd_per_1k'])} → {usd(summ['final_usd_per_1k'])}), accuracy "
            f"{summ['accuracy_change_pp']:+.2f} pp, p99 {ms(summ['p99_ms']['baseline'])} → "
            f"{ms(summ['p99_ms']['final'])} ms.",
            "",
        ]
    for tb in tables(res):
        out += [f"## {tb.title}", "", _pipe(tb), ""]
    out += ["## Notes", ""] + [f"- {n}" for n in notes(res)] + [""]
    return "\n".join(out)


def _pipe(tb: Table) -> str:
    def cell(x: str) -> str:
        return x.replace("|", "\\|")

    head = "| " + " | ".join(tb.columns) + " |"
    rule = "|" + "|".join("---:" if i in tb.right else "---" for i in range(len(tb.columns))) + "|"
    body = ["| " + " | ".join(cell(c) for c in r) + " |" for r in tb.rows]
    return "\n".join([head, rule, *body])


# -- the plot -------------------------------------------------------------------------------------


def _bars(res: InferenceResult) -> list[tuple[str, float, str]]:
    """(label, $ per 1k, status) of the challenge's priced steps."""
    return [(s.name, s.usd_per_1k, s.status) for s in res.scenario.steps if s.usd_per_1k is not None]


def _lines(res: InferenceResult) -> dict[str, list[tuple[int, float]]]:
    lines: dict[str, list[tuple[int, float]]] = {}
    for m in res.grid:
        lines.setdefault(m.precision.upper(), []).append((m.batch, m.throughput))
    return {k: sorted(v) for k, v in lines.items()}


COLORS = {"baseline": "#4c72b0", "kept": "#55a868", "rejected": "#c44e52", "projected": "#bbbbbb"}
LINE_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]


def plot(res: InferenceResult, *, use_matplotlib: bool = True) -> tuple[str, bytes]:
    """``("png", bytes)`` with matplotlib, else ``("svg", bytes)``."""
    if use_matplotlib:
        try:
            matplotlib = importlib.import_module("matplotlib")
        except ImportError:
            pass
        else:
            matplotlib.use("Agg")
            return "png", _plot_matplotlib(res, importlib.import_module("matplotlib.pyplot"))
    return "svg", svg(res).encode("utf-8")


def _plot_matplotlib(res: InferenceResult, plt: Any) -> bytes:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bars = _bars(res)
    ax1.bar(range(len(bars)), [b[1] for b in bars], color=[COLORS.get(b[2], "#999") for b in bars])
    ax1.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=20, ha="right")
    ax1.set_ylabel("$ per 1,000 inferences")
    ax1.set_title("Challenge: cost per step (green kept, red rejected, grey projected)", fontsize=9)
    for i, line in enumerate(_lines(res).items()):
        name, pts = line
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, color=LINE_COLORS[i % 5])
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch size")
    ax2.set_ylabel("inferences / s")
    ax2.set_title(f"Throughput by batch size: {res.device.name}", fontsize=9)
    ax2.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def svg(res: InferenceResult, width: int = 960, height: int = 400) -> str:
    """The same two panels as an SVG drawn without matplotlib."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    half = width // 2
    parts += _svg_bars(_bars(res), 60, 40, half - 90, height - 130)
    parts += _svg_lines(_lines(res), half + 60, 40, half - 100, height - 110, res.device.name)
    parts.append("</svg>")
    return "\n".join(parts)


def _text(x: float, y: float, s: str, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{escape(s)}</text>'


def _svg_bars(bars: Sequence[tuple[str, float, str]], x0: int, y0: int, w: int, h: int) -> list[str]:
    out = [
        _text(x0 + w / 2, y0 - 18, "Challenge: $ per 1,000 inferences by step", extra='font-weight="bold"'),
        _text(x0 + w / 2, y0 - 5, "green kept · red rejected · grey projected (price only)"),
    ]
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    if not bars:
        return out
    top = max(b[1] for b in bars) * 1.1
    for k in range(5):
        v = top * k / 4
        y = y0 + h - h * k / 4
        out.append(_text(x0 - 4, y + 4, f"{v:.1e}", anchor="end"))
    slot = w / len(bars)
    for i, (label, value, status) in enumerate(bars):
        bh = h * value / top
        x = x0 + i * slot + slot * 0.15
        out.append(
            f'<rect x="{x:.1f}" y="{y0 + h - bh:.1f}" width="{slot * 0.7:.1f}" height="{bh:.1f}" '
            f'fill="{COLORS.get(status, "#999")}"/>'
        )
        cx = x + slot * 0.35
        out.append(_text(cx, y0 + h - bh - 4, f"{value:.2e}"))
        out.append(_text(cx, y0 + h + 14, label, anchor="end", extra=f'transform="rotate(-25 {cx:.1f} {y0 + h + 14})"'))
    return out


def _svg_lines(lines: dict[str, list[tuple[int, float]]], x0: int, y0: int, w: int, h: int, title: str) -> list[str]:
    out = [
        _text(x0 + w / 2, y0 - 18, "Throughput (inferences/s) by batch size", extra='font-weight="bold"'),
        _text(x0 + w / 2, y0 - 5, title),
    ]
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    pts = [p for v in lines.values() for p in v]
    if not pts:
        return out
    bmin, bmax = min(p[0] for p in pts), max(p[0] for p in pts)
    top = max(p[1] for p in pts) * 1.1
    lo, hi = math.log2(bmin), math.log2(bmax)

    def sx(b: int) -> float:
        return x0 + (w * (math.log2(b) - lo) / (hi - lo) if hi > lo else w / 2)

    def sy(v: float) -> float:
        return y0 + h - h * v / top

    for b in sorted({p[0] for p in pts}):
        out.append(_text(sx(b), y0 + h + 14, str(b)))
    out.append(_text(x0 + w / 2, y0 + h + 30, "batch size"))
    for k in range(5):
        v = top * k / 4
        out.append(_text(x0 - 4, sy(v) + 4, f"{v:,.0f}", anchor="end"))
    for i, (name, series) in enumerate(lines.items()):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        path = " ".join(f"{sx(b):.1f},{sy(v):.1f}" for b, v in series)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{sx(b):.1f}" cy="{sy(v):.1f}" r="3" fill="{color}"/>' for b, v in series]
        out.append(f'<rect x="{x0 + 10}" y="{y0 + 8 + 16 * i}" width="12" height="3" fill="{color}"/>')
        out.append(_text(x0 + 28, y0 + 13 + 16 * i, name, anchor="start"))
    return out
