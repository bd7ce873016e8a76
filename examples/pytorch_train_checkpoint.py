#!/usr/bin/env python3
"""A PyTorch training job that honours gpufleet's checkpoint directory and SIGTERM, and resumes.

A small MLP learns a two-spirals classification (data generated from ``--seed``: no download). It
runs on the GPU gpufleet gave it (``CUDA_VISIBLE_DEVICES``) or on the CPU, and shows what a
preemptible job does to lose no work:

- **where**: checkpoints go to ``$GPUFLEET_CHECKPOINT_DIR`` (or ``--checkpoint-dir``): the local
  backend sets it to the same folder on every run of the job (``--checkpoint-dir`` at submit, else
  ``<job folder>/checkpoints``); on Kubernetes, the job's ``checkpoint_dir`` on the checkpoint volume;
- **when**: every ``--checkpoint-every`` steps, and when gpufleet asks the job to stop: preemption,
  cancel and max runtime all send SIGTERM to the job's process group, then SIGKILL after the grace
  period (``grace_s``, 30 s by default). The handler only sets a flag; the loop finishes the step it
  is in, checkpoints and exits 143 (128 + SIGTERM);
- **what**: step, model and optimizer state, and every random state the rest of the run depends on
  (torch's and the data shuffler's), saved atomically (``torch.save`` to a temporary file, fsync,
  ``os.replace``): a crash mid-save leaves the previous checkpoint whole. A resumed run therefore
  ends with bit-identical weights (on the CPU, one thread) to one that was never interrupted;
- **progress**: each evaluation is appended to ``$GPUFLEET_PROGRESS_FILE`` (JSON lines: step, total
  steps, loss, accuracy), from which gpufleet forecasts the job's remaining time and cost;
- **MLflow** (optional): with ``MLFLOW_RUN_ID`` set (``gpufleet submit --mlflow-run RUN_ID``) and
  mlflow installed, ``loss`` and ``accuracy`` are logged to that run (``MLFLOW_TRACKING_URI``), so
  that gpufleet logs the job's cost and ``accuracy``'s improvement per dollar to it when it ends.

Usage::

    gpufleet submit --gpus 1 --preemptible --mlflow-run "$RUN_ID" -- \\
        python examples/pytorch_train_checkpoint.py --steps 2000 --output result.json
    python examples/pytorch_train_checkpoint.py --steps 300 --checkpoint-dir /tmp/ckpt   # by hand
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

EXIT_TERMINATED = 143
CHECKPOINT = "checkpoint.pt"


class StopFlag:
    """Set by SIGTERM; the loop looks at it between steps (a step is never half done)."""

    def __init__(self) -> None:
        self.set = False
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.set = True


def make_data(seed: int, n: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved spirals, with noise: not linearly separable, learnable by a small MLP."""
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n // 2, generator=g) * 3 * math.pi + 0.5
    arms = []
    for sign in (1.0, -1.0):
        xy = torch.stack([sign * t * torch.cos(t), sign * t * torch.sin(t)], dim=1) / 10.0
        arms.append(xy + 0.03 * torch.randn(xy.shape, generator=g))
    x = torch.cat(arms)
    y = torch.cat([torch.zeros(n // 2, dtype=torch.long), torch.ones(n // 2, dtype=torch.long)])
    order = torch.randperm(n, generator=g)
    return x[order], y[order]


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically replace the checkpoint: a temporary file, fsync, then ``os.replace``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state


class MlflowLog:
    """Metrics to the MLflow run ``MLFLOW_RUN_ID`` names, when there is one and mlflow is installed."""

    def __init__(self) -> None:
        self.run_id = os.environ.get("MLFLOW_RUN_ID", "").strip()
        self.client: Any = None
        if self.run_id:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError:
                print("MLFLOW_RUN_ID is set but mlflow is not installed: not logging to MLflow", flush=True)
                return
            self.client = MlflowClient()  # MLFLOW_TRACKING_URI

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.client is None:
            return
        try:
            for name, value in metrics.items():
                self.client.log_metric(self.run_id, name, value, step=step)
        except Exception as e:  # the tracking server is down: training goes on
            print(f"mlflow: {type(e).__name__}: {str(e)[:200]}", flush=True)


def report_progress(step: int, total: int, metrics: dict[str, float]) -> None:
    """One JSON line to ``$GPUFLEET_PROGRESS_FILE`` (gpufleet's cost forecast reads it)."""
    path = os.environ.get("GPUFLEET_PROGRESS_FILE")
    if not path:
        return
    line = json.dumps({"time": time.time(), "step": step, "total_steps": total, "metrics": metrics})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return loss, accuracy


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--checkpoint-dir", default=os.environ.get("GPUFLEET_CHECKPOINT_DIR"))
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds, to make a run take a while")
    p.add_argument("--output", type=Path, default=None, help="write the JSON result here")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopFlag()
    torch.set_num_threads(1)  # one thread: reproducible on the CPU, and polite on a shared machine
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    x, y = make_data(args.seed)
    n_train = len(y) * 3 // 4
    x_train, y_train, x_val, y_val = x[:n_train], y[:n_train], x[n_train:], y[n_train:]
    x_train, y_train, x_val, y_val = (t.to(device) for t in (x_train, y_train, x_val, y_val))
    model = make_model(args.seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffler = torch.Generator().manual_seed(args.seed + 1)  # which examples each batch takes
    step, order = 0, torch.randperm(n_train, generator=shuffler)
    ckpt = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        state = load_checkpoint(ckpt)
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            shuffler.set_state(state["shuffler"])
            torch.set_rng_state(state["torch_rng"])
            step, order = int(state["step"]), state["order"]
            restart = os.environ.get("GPUFLEET_RESTART_COUNT", "?")
            print(f"resumed from step {step} ({ckpt}; gpufleet restart count {restart})", flush=True)
    resumed_from = step
    mlflow = MlflowLog()

    def checkpoint() -> None:
        if ckpt is not None:
            save_checkpoint(
                ckpt,
                {
                    "step": step,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "shuffler": shuffler.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "order": order,
                },
            )

    per_epoch = n_train // args.batch_size
    while step < args.steps:
        i = step % per_epoch
        if i == 0 and step > 0:
            order = torch.randperm(n_train, generator=shuffler)
        batch = order[i * args.batch_size : (i + 1) * args.batch_size].to(device)
        loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            val_loss, accuracy = evaluate(model, x_val, y_val)
            metrics = {"loss": val_loss, "accuracy": accuracy}
            print(f"step {step} loss {val_loss:.6f} accuracy {accuracy:.4f}", flush=True)
            report_progress(step, args.steps, metrics)
            mlflow.log(step, metrics)
        if step % args.checkpoint_every == 0 or stop.set:
            checkpoint()
        if stop.set:
            print(f"SIGTERM: checkpointed at step {step}, exiting {EXIT_TERMINATED}", flush=True)
            return EXIT_TERMINATED
        if args.sleep_per_step > 0:
            time.sleep(args.sleep_per_step)
    checkpoint()
    val_loss, accuracy = evaluate(model, x_val, y_val)
    weights = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    result = {
        "steps": step,
        "resumed_from": resumed_from,
        "val_loss": val_loss,
        "accuracy": accuracy,
        "weights_sha256": hashlib.sha256(weights).hexdigest(),
        "device": str(device),
    }
    if args.output is not None:
        tmp = args.output.with_name(f".{args.output.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, args.output)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
