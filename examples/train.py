#!/usr/bin/env python3
"""A small real training job for gpufleet: logistic regression by mini-batch SGD (numpy only).

It shows what a preemptible job must do to lose no work:

- resume from ``$GPUFLEET_CHECKPOINT_DIR`` (or ``--checkpoint-dir``) when a checkpoint exists;
- checkpoint every ``--checkpoint-every`` steps and when asked to stop (SIGTERM);
- save step, weights and the RNG state together, atomically (``np.savez`` to a temporary file,
  fsync, then ``os.replace``), so a crash mid-save leaves the previous checkpoint intact.

Because the data is generated from ``--seed`` and the mini-batch RNG state is part of the
checkpoint, the final weights are bit-identical whether or not the run was interrupted.

On SIGTERM the script finishes the current step, checkpoints and exits with code 143 (128 +
SIGTERM), the shell convention for "terminated": a non-zero code makes clear the work is not done
(gpufleet reports the run as STOPPED anyway, since it asked for the stop).

Usage: ``python examples/train.py --steps 500 --checkpoint-every 50 --output result.json``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

EXIT_TERMINATED = 143
CHECKPOINT = "train-checkpoint.npz"


def make_data(seed: int, n: int = 2048, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic, linearly separable-ish classification problem."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    true_w = rng.normal(size=dim)
    logits = x @ true_w + 0.5 * rng.normal(size=n)
    y = (logits > 0).astype(np.float64)
    return x, y


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
    """Mean logistic loss with L2 regularisation, and its gradient."""
    z = x @ w
    p = 1.0 / (1.0 + np.exp(-z))
    eps = 1e-12
    loss = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)) + 0.5 * l2 * float(w @ w)
    grad = x.T @ (p - y) / len(y) + l2 * w
    return float(loss), grad


def save_checkpoint(path: Path, step: int, w: np.ndarray, rng: np.random.Generator) -> None:
    """Atomically replace the checkpoint with (step, weights, RNG state)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, step=np.int64(step), w=w, rng=np.array(json.dumps(rng.bit_generator.state)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, dim: int) -> tuple[int, np.ndarray, np.random.Generator] | None:
    """(step, weights, rng) from a checkpoint, or None if there is none."""
    if not path.exists():
        return None
    with np.load(path) as data:
        step = int(data["step"])
        w = np.array(data["w"], dtype=np.float64)
        state = json.loads(str(data["rng"]))
    if w.shape != (dim,):
        raise SystemExit(f"checkpoint {path} has weights of shape {w.shape}, expected ({dim},)")
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return step, w, rng


class StopFlag:
    """Set by SIGTERM; the loop checks it between steps (a step is never half done)."""

    def __init__(self) -> None:
        self.set = False
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.set = True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--l2", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--checkpoint-dir", default=os.environ.get("GPUFLEET_CHECKPOINT_DIR"))
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds, to make a run take a while")
    p.add_argument("--output", type=Path, default=None, help="write the JSON result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopFlag()
    x, y = make_data(args.seed)
    ckpt = Path(args.checkpoint_dir) / CHECKPOINT if args.checkpoint_dir else None
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
    loaded = load_checkpoint(ckpt, x.shape[1]) if ckpt is not None else None
    if loaded is None:
        step, w, rng = 0, np.zeros(x.shape[1]), np.random.default_rng(args.seed + 1)
    else:
        step, w, rng = loaded
        print(f"resumed from step {step} ({ckpt})", flush=True)
    resumed_from = step
    while step < args.steps:
        batch = rng.integers(0, len(y), size=args.batch_size)
        loss, grad = loss_and_grad(w, x[batch], y[batch], args.l2)
        w = w - args.lr * grad
        step += 1
        if step % 10 == 0 or step == args.steps:
            print(f"step {step} loss {loss:.6f}", flush=True)
        if ckpt is not None and (step % args.checkpoint_every == 0 or stop.set):
            save_checkpoint(ckpt, step, w, rng)
        if stop.set:
            print(f"SIGTERM: checkpointed at step {step}, exiting {EXIT_TERMINATED}", flush=True)
            return EXIT_TERMINATED
        if args.sleep_per_step > 0:
            time.sleep(args.sleep_per_step)
    final_loss, _ = loss_and_grad(w, x, y, args.l2)
    result: dict[str, Any] = {
        "final_loss": final_loss,
        "weights_sha256": hashlib.sha256(w.tobytes()).hexdigest(),
        "steps": step,
        "resumed_from": resumed_from,
    }
    if ckpt is not None:
        save_checkpoint(ckpt, step, w, rng)
    if args.output is not None:
        tmp = args.output.with_name(f".{args.output.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, args.output)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
