"""The inference experiment's full run: a real model on this machine's devices (the CPU; CUDA GPUs
when ``torch.cuda.is_available()``), the whole grid (batch 1, 4, 8, 16, 32 × FP32/BF16/INT8 on the
CPU, FP32/FP16/BF16 on CUDA), the cost optimization challenge, two workloads sharing a device, and
replicas against an open-loop request rate. Prints JSON lines and writes them to
``benchmarks/results/inference_cost.jsonl`` with the tables in ``inference_cost.md``.

    .venv/bin/python benchmarks/inference_cost.py [--duration 2] [--device auto] [--no-write]

Needs the ``inference`` extra (torch, scikit-learn). Target on a 2-core machine: under 5 minutes.
A host shared with other work measures lower throughput and a higher p99 than a dedicated one: the
load average is recorded with the results (``environment``) and each row's ``cpu_fraction`` says
how much of its core a configuration got.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def records(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The result as JSON lines: one per grid row, challenge step, sharing run, load point."""
    b = {"benchmark": "inference_cost"}
    out: list[dict[str, Any]] = [
        {**b, "record": "run", "device": doc["device"], "environment": doc["environment"], "model": doc["model"],
         "config": doc["config"], "wall_s": doc["wall_s"]},
    ]
    out += [{**b, "record": "grid", **row} for row in doc["grid"] + doc["device_step_cpu"]]
    out += [{**b, "record": "int8_accuracy", **row} for row in doc["int8"]]
    out += [{**b, "record": "challenge_step", **row} for row in doc["scenario"]["steps"]]
    out.append({**b, "record": "challenge_summary", **doc["scenario"]["summary"]})
    if doc["sharing"]:
        out += [{**b, "record": "sharing", **row} for row in doc["sharing"]["runs"]]
        out.append({**b, "record": "sharing_impact", **doc["sharing"]["impact"]})
    if doc["scaling"]:
        out += [{**b, "record": "scaling", **row} for row in doc["scaling"]["points"]]
        out += [{**b, "record": "replicas_needed", "slo_p99_ms": doc["scaling"]["slo_p99_ms"], **row}
                for row in doc["scaling"]["replicas_needed"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per grid configuration")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved slices per configuration")
    parser.add_argument("--sharing-duration", type=float, default=3.0)
    parser.add_argument("--scaling-duration", type=float, default=3.0)
    parser.add_argument("--slo-ms", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()

    from gpufleet.experiments.inference import report
    from gpufleet.experiments.inference.run import InferenceConfig, run_inference_experiment
    from gpufleet.io.catalog import load_catalog

    cfg = InferenceConfig(
        device=args.device, duration_s=args.duration, rounds=args.rounds, seed=args.seed, sharing=True, scaling=True,
        sharing_duration_s=args.sharing_duration, scaling_duration_s=args.scaling_duration,
        scaling_slo_ms=args.slo_ms,
    )
    started = time.perf_counter()
    res = run_inference_experiment(cfg, load_catalog(), progress=lambda m: print(m, file=sys.stderr, flush=True))
    doc = res.to_dict()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [{"benchmark": "inference_cost", "note": f"{res.device.name}, {when}; {doc['environment'].get('note', '')}",
              "total_wall_s": round(time.perf_counter() - started, 1)}]
    lines += records(doc)
    for line in lines:
        print(json.dumps(line))
    if args.no_write:
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with open(args.out_dir / "inference_cost.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    md = report.markdown(res)
    head = (
        f"<!-- written by benchmarks/inference_cost.py, {when}, "
        f"{round(time.perf_counter() - started)} s in all -->\n"
    )
    (args.out_dir / "inference_cost.md").write_text(head + md, encoding="utf-8")
    print(f"wrote {args.out_dir / 'inference_cost.jsonl'} and {args.out_dir / 'inference_cost.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
