"""Record the simulator's decisions over a fixed set of scenarios, as digests: the proof a refactor
changed no behaviour ("byte-identical decisions").

Each scenario replays a trace with one profile and prints one JSON line: its name, the number of
jobs, and the SHA-256 of every job record (start, end, state, GPU-seconds, cost, preemptions,
restarts, capacity type) and of every sample, in order. Run it on the commit before a change and
after it, and compare::

    python tools/record_decisions.py > before.jsonl      # on the old commit
    python tools/record_decisions.py > after.jsonl
    diff before.jsonl after.jsonl && echo identical

``--quick`` runs the smaller half (seconds); the default set takes about a minute on one core.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import astuple
from typing import Any

# (name, trace, profile overrides, elastic, spot hazard, failure probability, preemptible share, limit)
SCENARIOS: list[tuple[str, str, dict[str, Any], bool, float, float, float, int]] = [
    ("synthetic-1-default", "synthetic:1", {}, False, 0.0, 0.0, 0.0, 400),
    ("synthetic-2-fifo-strict", "synthetic:2", {"queue_sort": "fifo", "backfill": "strict"}, False, 0.0, 0.0, 0.0, 400),
    ("synthetic-3-drf-greedy", "synthetic:3", {"queue_sort": "drf", "backfill": "greedy"}, False, 0.0, 0.0, 0.0, 400),
    ("synthetic-4-failures", "synthetic:4", {}, False, 0.0, 0.05, 0.0, 400),
    ("synthetic-5-elastic-spot", "synthetic:5", {}, True, 0.05, 0.0, 0.0, 400),
    ("openb-default-fgd", "openb", {"placement": [{"name": "fgd"}]}, False, 0.0, 0.0, 0.0, 1500),
    ("openb-default-bestfit", "openb", {"placement": [{"name": "bestfit"}]}, False, 0.0, 0.0, 0.0, 1500),
    ("openb-default-elastic", "openb", {}, True, 0.0, 0.0, 0.0, 1500),
    ("synthetic-6-decayed", "synthetic:6", {"queue_sort": "decayed"}, False, 0.0, 0.0, 0.0, 600),
    ("synthetic-7-priority-spot", "synthetic:7", {"queue_sort": "priority"}, True, 0.2, 0.02, 0.0, 600),
]
QUICK = {"synthetic-1-default", "synthetic-4-failures", "synthetic-5-elastic-spot", "openb-default-fgd"}


def _digest(rows: list[Any]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(astuple(row)).encode())
        h.update(b"\n")
    return h.hexdigest()


def record(
    name: str,
    trace: str,
    overrides: dict[str, Any],
    elastic: bool,
    hazard: float,
    fail: float,
    preemptible: float,
    limit: int,
) -> dict[str, Any]:
    from gpufleet.io.catalog import load_catalog
    from gpufleet.io.traces import TraceOptions, load_trace
    from gpufleet.scheduling.profile import Profile, load_profile
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.runner import run_simulation

    prof = Profile()
    if elastic:
        overrides = {**overrides, "autoscaler": {**prof.autoscaler.model_dump(), "enabled": True}}
    if overrides:
        prof = load_profile({**prof.model_dump(), **overrides}, source=name)
    tr = load_trace(trace, TraceOptions(limit=limit, preemptible_fraction=preemptible, seed=1))
    opts = SimOptions(seed=1, spot_hazard_per_node_hour=hazard, failure_prob=fail)
    result = run_simulation(tr, prof, options=opts, catalog=load_catalog(), elastic=elastic)
    return {
        "scenario": name,
        "jobs": len(result.records),
        "records": _digest(result.records),
        "samples": _digest(result.samples),
        "makespan": round(result.makespan, 6),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="only the small scenarios")
    args = p.parse_args()
    for scenario in SCENARIOS:
        if args.quick and scenario[0] not in QUICK:
            continue
        print(json.dumps(record(*scenario)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
