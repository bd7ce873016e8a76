"""The local backend on a real NVIDIA GPU: ``gpufleet up`` with NVML discovery, three real jobs,
and the telemetry the controller recorded for each. Prints JSON (and writes it to ``--out``).

Jobs (PyTorch, run by the server as real processes):

- ``whole``: one whole GPU, a 4 GiB tensor and matrix multiplications for ``--seconds``;
- ``half``: ``gpu_milli=500`` (MPS/time-sliced share: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50``),
  a 2 GiB tensor and lighter work (on a one-GPU machine it waits for ``whole``: 1000 + 500 milli
  do not fit one GPU);
- ``cpu``: no GPU (``CUDA_VISIBLE_DEVICES=""``): torch must see no device.

Checks what only a real driver shows: the NVML inventory (model, memory, MIG mode), the
``CUDA_VISIBLE_DEVICES`` UUID each job got and the device torch saw, and per-job GPU memory and
utilization samples from NVML in the store. Needs a machine with an NVIDIA driver and PyTorch.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.serverproc import ServerProcess

TORCH_JOB = """
import os, time, torch
gib, seconds, heavy = float(os.environ["GIB"]), float(os.environ["SECONDS_"]), os.environ["HEAVY"] == "1"
print("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"), flush=True)
print("MPS=" + os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "<unset>"), flush=True)
print("devices=%d" % torch.cuda.device_count(), flush=True)
if torch.cuda.device_count():
    print("device=" + torch.cuda.get_device_name(0), flush=True)
    hold = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    n = 8192 if heavy else 2048
    a = torch.randn(n, n, device="cuda")
    end = time.time() + seconds
    while time.time() < end:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        if not heavy:
            time.sleep(0.05)
print("done", flush=True)
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--gpus", default=None, help="declare GPUs instead of NVML (a dry run without a driver)")
    args = p.parse_args()
    out: dict[str, Any] = {"benchmark": "gpu_local"}
    with tempfile.TemporaryDirectory(prefix="gpufleet-gpu-") as tmp:
        server = ServerProcess(
            Path(tmp) / "home", gpus=args.gpus, settings={"telemetry_interval_s": 1.0, "log_level": "info"}
        ).start()
        try:
            with server.client() as c:
                out["nodes"] = [n.model_dump() for n in c.nodes()]
                env = {"SECONDS_": str(args.seconds)}
                py = [sys.executable, "-c", TORCH_JOB]
                jobs = {
                    "whole": c.submit(command=py, gpus=1, name="whole", env={**env, "GIB": "4", "HEAVY": "1"}),
                    "half": c.submit(
                        command=py, gpu_milli=500, name="half", env={**env, "GIB": "2", "HEAVY": "0"}
                    ),
                    "cpu": c.submit(command=py, name="cpu", env={**env, "GIB": "0", "HEAVY": "0"}),
                }
                done = {k: c.wait(j.id, timeout=args.seconds + 120) for k, j in jobs.items()}
                time.sleep(1.5)
                out["jobs"] = {
                    k: {
                        "state": j.state,
                        "placement": [pl.model_dump() for pl in j.placement] or None,
                        "log": [ln.rstrip() for ln in c.logs(j.id) if not ln.startswith("===")],
                    }
                    for k, j in done.items()
                }
            from gpufleet.store import repo
            from gpufleet.store.db import Database

            db = Database(f"sqlite:///{server.home / 'gpufleet.db'}")
            with db.session() as s:
                for k, j in jobs.items():
                    out["jobs"][k]["telemetry"] = repo.job_gpu_stats(s, j.id)
                from sqlalchemy import func, select

                from gpufleet.store.models import GpuSampleRow

                out["gpu_samples"] = s.scalar(select(func.count()).select_from(GpuSampleRow))
                out["max_gpu_utilization_pct"] = s.scalar(select(func.max(GpuSampleRow.utilization_pct)))
            db.dispose()
        finally:
            server.stop()
            server.kill_jobs()
            log_text = server.server_log()
            out["server_log_tail"] = log_text[-1500:]
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
