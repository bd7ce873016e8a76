"""Placement throughput: the FGD fragmentation experiment on the default openb trace, one seed,
one process, the whole loop (filter, score, select, allocate, metrics). Prints JSON lines.

    .venv/bin/python benchmarks/placement_throughput.py [--policy fgd --policy bestfit] [--seed 42]

Targets (one core): ≥ 2,000 pods/s for fgd and ≥ 20,000 pods/s for bestfit.
"""

from __future__ import annotations

import argparse
import json
import time

from gpufleet.experiments.fragmentation import run_seed
from gpufleet.io.fragmentation import load_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policy", action="append", help="policy (repeatable; default fgd, bestfit)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--trace", default="default")
    parser.add_argument("--repeat", type=int, default=3, help="runs per policy; the best is reported (as timeit)")
    args = parser.parse_args()
    cluster = load_cluster(args.trace)
    for policy in args.policy or ["fgd", "bestfit"]:
        times = []
        for _ in range(max(1, args.repeat)):
            start = time.perf_counter()
            run = run_seed(cluster, policy, args.seed)
            times.append(time.perf_counter() - start)
        elapsed = min(times)
        print(
            json.dumps(
                {
                    "benchmark": "placement_throughput",
                    "metric": f"{policy}_pods_per_s",
                    "value": round(run.pods / elapsed, 1),
                    "unit": "pods/s",
                    "pods": run.pods,
                    "seconds": round(elapsed, 3),
                    "median_pods_per_s": round(run.pods / sorted(times)[len(times) // 2], 1),
                    "trace": cluster.trace,
                    "seed": args.seed,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
