"""Full-featured replay of the Philly trace (all 82,247 jobs) through the real scheduler.

Everything on: DRF fair share between the 15 virtual clusters (teams) with nominal GPU quotas in
one cohort (borrowing and reclaim), priority classes with aging, preemption, EASY backfill with
noisy runtime estimates, 30 % preemptible jobs that checkpoint every 30 min, spot nodes with
interruptions (0.01 per node-hour, 2-minute notice), autoscaled spot and on-demand pools, and the
per-second ledger with exact attribution to every job. Prints JSON lines.

    .venv/bin/python benchmarks/philly_replay.py [--trace ../shared/data/philly/philly.csv] [--limit N]

Targets (2-core machine): < 25 s wall, < 1 GB peak memory.

The fixed-cluster case (``--fixed``): ``gpufleet simulate --trace philly:PATH --limit N
--no-autoscale`` — the default profile on the trace's default cluster with no autoscaling, so the
queue grows to most of the trace and a cycle's cost shows whether it grows with the queue. Each
point runs in its own process (wall seconds and that process's peak RSS) and reports a digest of
the per-job start times, so two versions can be checked for identical decisions:

    .venv/bin/python benchmarks/philly_replay.py --fixed --limit 5000
    .venv/bin/python benchmarks/philly_replay.py --fixed-scaling 10000,20000,40000,82247
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.io.traces import load_philly
from gpufleet.scheduling.profile import load_profile
from gpufleet.sim.engine import SimOptions
from gpufleet.sim.runner import default_cluster, run_simulation
from gpufleet.sim.traces.philly import PhillyOptions

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "philly" / "philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--fixed", action="store_true", help="the fixed-cluster case (no autoscaling), one point")
    parser.add_argument(
        "--fixed-scaling", default="", help="the fixed-cluster case at these job counts, e.g. 10000,20000,40000,82247"
    )
    parser.add_argument("--point-timeout", type=float, default=1800.0, help="seconds per fixed-cluster point")
    args = parser.parse_args()
    if args.fixed or args.fixed_scaling:
        points = [int(x) for x in args.fixed_scaling.split(",") if x.strip()] or [args.limit or 0]
        for n in points:
            row = fixed_point(args.trace, n or None, args.point_timeout)
            print(json.dumps({"benchmark": "philly_fixed", **row}), flush=True)
        return

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
    demand: dict[str, float] = {}  # milli-GPU-seconds
    for tj in trace.jobs:
        demand[tj.spec.team] = demand.get(tj.spec.team, 0) + tj.spec.total_gpu_milli * (tj.spec.duration_s or 0)
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
        ("waste_gpu_hours", round(s["waste_gpu_hours"], 1), "GPU-h"),  # work redone after stops
        ("waste_share", round(s["waste_share"], 5), "ratio"),  # of the GPU-hours allocated
        ("max_stops_per_job", s["max_stops_per_job"], "count"),
        ("spot_restarts", s["spot_restarts"], "count"),
        ("cluster_cost_usd", round(result.config["cluster_cost_usd"], 2), "USD"),
        ("idle_cost_usd", round(result.config["idle_cost_usd"], 2), "USD"),
    ]
    for metric, value, unit in rows:
        print(json.dumps({"benchmark": "philly_replay", "metric": metric, "value": value, "unit": unit}), flush=True)


def fixed_point(trace: Path, limit: int | None, timeout_s: float) -> dict[str, object]:
    """One fixed-cluster run through the CLI in a child process: wall seconds, the child's peak RSS,
    and a digest of (job id, start time) over all jobs (equal digests: the same decisions)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "gpufleet.cli.main", "simulate", "--trace", f"philly:{trace}"]
        cmd += [*(["--limit", str(limit)] if limit else []), "--no-autoscale", "--json", "--out", str(out)]
        with open(Path(tmp) / "stdout", "wb") as so:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=so, stderr=subprocess.DEVNULL)
            deadline = t0 + timeout_s
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = -9
                    return {"jobs": limit, "timed_out": True, "wall_s": round(time.perf_counter() - t0, 1)}
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
        rss = round(usage.ru_maxrss / 1024, 1)
        row: dict[str, object] = {"jobs": limit, "wall_s": round(wall, 2), "peak_rss_mib": rss}
        if proc.returncode != 0:
            return {**row, "error": f"exit {proc.returncode}"}
        summary = json.loads((Path(tmp) / "stdout").read_text().strip().splitlines()[-1])
        digest = hashlib.sha256()
        with open(out / "jobs.csv", newline="") as f:
            for r in csv.DictReader(f):
                digest.update(f"{r['job_id']},{r['start']}\n".encode())
        row.update(
            jobs=summary.get("jobs", limit),
            completed=summary.get("completed"),
            events_processed=summary.get("events_processed"),
            starts_sha256=digest.hexdigest()[:16],
        )
        return row


if __name__ == "__main__":
    main()
