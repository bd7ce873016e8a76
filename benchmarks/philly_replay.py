"""Full-featured replay of the Philly trace (all 82,247 jobs) through the real scheduler.

Everything on: DRF fair share between the 15 virtual clusters (teams) with nominal GPU quotas in
one cohort (borrowing and reclaim), priority classes with aging, preemption, EASY backfill with
noisy runtime estimates, 30 % preemptible jobs that checkpoint every 30 min, spot nodes with
interruptions (0.01 per node-hour, 2-minute notice), autoscaled spot and on-demand pools, and the
per-second ledger with exact attribution to every job. Prints JSON lines.

    .venv/bin/python benchmarks/philly_replay.py [--trace ../shared/data/philly/philly.csv] [--limit N]

Targets (2-core machine): < 30 s wall, < 2 GB peak memory (issue #2).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections import Counter
from pathlib import Path

from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.runner import default_cluster, run_simulation
from gpufleet.sim.traces.philly import PhillyOptions, load_philly

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "philly" / "philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()

    t0 = time.perf_counter()
    trace = load_philly(
        args.trace,
        PhillyOptions(
            preemptible_fraction=0.3,
            checkpoint_interval_s=1800.0,
            runtime_estimate="noisy",
            estimate_never_under=True,
            max_jobs=args.limit,
            seed=1,
        ),
    )
    load_s = time.perf_counter() - t0
    cluster = default_cluster(trace)
    max_gpus = sum(g.count * g.gpus for g in cluster.nodes) + sum(p.max_nodes * p.gpus for p in cluster.pools)
    # nominal quotas: each team's share of the cluster's largest size by its share of GPU-seconds;
    # teams borrow each other's idle quota within the cohort and get it back by reclaim
    demand: Counter[str] = Counter()
    for tj in trace.jobs:
        demand[tj.spec.team] += tj.spec.total_gpu_milli * (tj.spec.duration_s or 0)
    total = sum(demand.values()) or 1
    teams = {
        team: {"quota": {"*": max(1, round(max_gpus * d / total))}, "cohort": "philly", "weight": 1.0}
        for team, d in demand.items()
    }
    profile = load_profile(
        {
            "queue_sort": "drf",
            "placement": "bestfit",
            "backfill": "easy",
            "preemption": True,
            "autoscaler": {"enabled": True},
            "teams": teams,
        }
    )
    t1 = time.perf_counter()
    result = run_simulation(
        trace,
        profile,
        cluster=cluster,
        options=SimOptions(seed=1, spot_hazard_per_node_hour=0.01, cycle_interval_s=10.0),
    )
    sim_s = time.perf_counter() - t1
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    s = result.summary()
    rows = [
        ("jobs", len(trace.jobs), "jobs"),
        ("load_wall_s", round(load_s, 3), "s"),
        ("replay_wall_s", round(sim_s, 3), "s"),
        ("total_wall_s", round(load_s + sim_s, 3), "s"),
        ("peak_rss_mib", round(peak_mib, 1), "MiB"),
        ("events_processed", result.events_processed, "events"),
        ("completed", s["completed"], "jobs"),
        ("wait_mean_s", round(s["wait_mean_s"] or 0, 1), "s"),
        ("wait_p95_s", round(s["wait_p95_s"] or 0, 1), "s"),
        ("jct_median_s", round(s["jct_median_s"] or 0, 1), "s"),
        ("utilization", round(s["utilization"], 4), "ratio"),
        ("preemptions", s["preemptions"], "count"),
        ("spot_restarts", s["spot_restarts"], "count"),
        ("cluster_cost_usd", round(result.config["cluster_cost_usd"], 2), "USD"),
        ("idle_cost_usd", round(result.config["idle_cost_usd"], 2), "USD"),
    ]
    for metric, value, unit in rows:
        print(json.dumps({"benchmark": "philly_replay", "metric": metric, "value": value, "unit": unit}), flush=True)


if __name__ == "__main__":
    main()
