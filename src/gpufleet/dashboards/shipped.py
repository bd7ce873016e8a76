"""The shipped dashboard files (``gpufleet/data/grafana/dashboards/*.json``): every dashboard built,
rendered, written, checked against the files, and the panel tables of docs/dashboards.md;
``python -m gpufleet.dashboards`` runs :func:`main`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.dashboards.budgets import budgets
from gpufleet.dashboards.builder import JSON
from gpufleet.dashboards.cluster_queue import cluster_queue
from gpufleet.dashboards.cost_attribution import cost_attribution
from gpufleet.dashboards.cost_overview import cost_overview
from gpufleet.dashboards.efficiency import efficiency
from gpufleet.dashboards.gpu_utilization import gpu_utilization
from gpufleet.dashboards.queries import panels
from gpufleet.dashboards.savings import savings

DASHBOARD_DIR = Path(__file__).parent.parent / "data" / "grafana" / "dashboards"
DESCRIPTION = "Grafana dashboards for gpufleet's ``/metrics``, as code."  # the package docstring's first line

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
    ap = argparse.ArgumentParser(prog="python -m gpufleet.dashboards", description=DESCRIPTION)
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
