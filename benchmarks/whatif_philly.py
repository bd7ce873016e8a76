"""What-if on the full Philly trace: spot plus autoscaling against a fixed on-demand cluster.

The baseline is a fixed cluster of on-demand 8×V100 nodes sized for the trace's peak of whole GPUs
(every job running from its submit time), always on. Variants (each ONE change against that same
baseline, same seed): ``autoscaling`` (the same shapes as on-demand pools that start empty) and
``spot+autoscaling`` (plus a spot pool per shape; preemptible jobs may use it). 30 % of the jobs are
preemptible and checkpoint every 30 min (as in ``philly_replay.py``); spot nodes are interrupted at
0.01 per node-hour with a 2-minute notice. The lower bound prices every GPU-second of the work at
the cheapest eligible catalog price (spot for preemptible jobs when the variant has spot).

    .venv/bin/python benchmarks/whatif_philly.py [--trace ../shared/data/philly/philly.csv] [--limit N]

Prints JSON lines: one per (change, metric), and a final ``table`` line with the markdown table.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.io.traces import load_philly
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.traces.philly import PhillyOptions
from gpufleet.sim.whatif import run_whatif, simulate_baseline

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "philly" / "philly.csv"


def _fmt_s(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--changes", default="autoscaling,spot+autoscaling")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    t0 = time.perf_counter()
    trace = load_philly(
        args.trace,
        PhillyOptions(preemptible_fraction=0.3, checkpoint_interval_s=1800.0, max_jobs=args.limit, seed=args.seed),
    )
    opts = SimOptions(seed=args.seed, spot_hazard_per_node_hour=0.01, cycle_interval_s=10.0)
    catalog = PriceCatalog.load()
    base = simulate_baseline(trace, options=opts, catalog=catalog)
    rows = []
    for change in [c.strip() for c in args.changes.split(",") if c.strip()]:
        t1 = time.perf_counter()
        r = run_whatif(trace, change, options=opts, catalog=catalog, baseline=base)
        d = r.to_dict()
        d["variant_wall_s"] = round(time.perf_counter() - t1, 2)
        rows.append(d)
        for metric in (
            "savings_usd",
            "savings_pct",
            "lower_bound_usd",
            "variant_over_lower_bound",
            "baseline_over_lower_bound",
            "variant_wall_s",
        ):
            print(json.dumps({"benchmark": "whatif_philly", "change": change, "metric": metric, "value": d[metric]}))
        for side in ("baseline", "variant"):
            for metric in (
                "cost_usd",
                "wait_mean_s",
                "wait_p95_s",
                "jct_mean_s",
                "jct_p95_s",
                "utilization",
                "completed",
                "spot_restarts",
            ):
                print(
                    json.dumps(
                        {
                            "benchmark": "whatif_philly",
                            "change": change,
                            "metric": f"{side}.{metric}",
                            "value": d[side][metric],
                        }
                    ),
                    flush=True,
                )
    wall = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"benchmark": "whatif_philly", "metric": "jobs", "value": len(trace.jobs)}))
    print(
        json.dumps(
            {
                "benchmark": "whatif_philly",
                "metric": "baseline_nodes",
                "value": rows[0]["baseline_nodes"] if rows else None,
            }
        )
    )
    print(json.dumps({"benchmark": "whatif_philly", "metric": "total_wall_s", "value": round(wall, 1)}))
    print(json.dumps({"benchmark": "whatif_philly", "metric": "peak_rss_mib", "value": round(peak_mib, 1)}))
    lines = [
        "| run | cost (USD) | savings vs fixed on-demand | cost / lower bound | wait mean (s) | wait p95 (s) "
        "| JCT mean (s) | utilization |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if rows:
        b = rows[0]["baseline"]
        lb0 = rows[0]["baseline_over_lower_bound"]
        lines.append(
            f"| fixed on-demand ({rows[0]['baseline_nodes']} nodes × 8 V100) | {b['cost_usd']:,.0f} | – | "
            f"{lb0:.2f}× | {_fmt_s(b['wait_mean_s'])} | {_fmt_s(b['wait_p95_s'])} | {_fmt_s(b['jct_mean_s'])} | "
            f"{b['utilization']:.1%} |"
        )
    for d in rows:
        v = d["variant"]
        lines.append(
            f"| {d['change']} | {v['cost_usd']:,.0f} | {d['savings_usd']:,.0f} ({d['savings_pct']:.1%}) | "
            f"{d['variant_over_lower_bound']:.2f}× (bound {d['lower_bound_usd']:,.0f}) | {_fmt_s(v['wait_mean_s'])} | "
            f"{_fmt_s(v['wait_p95_s'])} | {_fmt_s(v['jct_mean_s'])} | {v['utilization']:.1%} |"
        )
    print(json.dumps({"benchmark": "whatif_philly", "metric": "table", "value": "\n".join(lines)}))


if __name__ == "__main__":
    main()
