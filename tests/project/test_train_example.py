"""examples/train.py: a real (numpy) training job whose result is bit-identical whether or not it
was interrupted by SIGTERM and resumed from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

TRAIN = REPO / "examples" / "train.py"
STEPS = "300"


def run_train(tmp: Path, name: str, *extra: str, ckpt: Path | None = None) -> dict[str, Any]:
    out = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k != "GPUFLEET_CHECKPOINT_DIR"}
    if ckpt is not None:
        env["GPUFLEET_CHECKPOINT_DIR"] = str(ckpt)
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "--steps", STEPS, "--output", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_interrupted_and_resumed_run_matches_uninterrupted(tmp_path: Path) -> None:
    plain = run_train(tmp_path, "plain")
    assert plain["steps"] == 300 and plain["resumed_from"] == 0
    assert plain["final_loss"] < 0.69  # it learned something (log 2 is chance)

    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, GPUFLEET_CHECKPOINT_DIR=str(ckpt))
    cmd = [sys.executable, str(TRAIN), "--steps", STEPS, "--checkpoint-every", "25", "--sleep-per-step", "0.005"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # interrupt mid-way, between two periodic checkpoints
        if line.startswith("step 130 "):
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == 143
    assert "SIGTERM: checkpointed at step" in rest
    stopped_at = int(rest.split("checkpointed at step ")[1].split(",")[0])
    assert 130 <= stopped_at < 300

    resumed = run_train(tmp_path, "resumed", ckpt=ckpt)
    assert resumed["resumed_from"] == stopped_at
    assert (resumed["final_loss"], resumed["weights_sha256"], resumed["steps"]) == (
        plain["final_loss"],
        plain["weights_sha256"],
        plain["steps"],
    )


def test_checkpoint_dir_flag_and_finished_run_resumes_at_the_end(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    first = run_train(tmp_path, "first", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "100")
    again = run_train(tmp_path, "again", "--checkpoint-dir", str(ckpt))
    assert again["resumed_from"] == 300 and again["weights_sha256"] == first["weights_sha256"]
    assert not list(ckpt.glob(".*.tmp"))  # atomic saves leave no temporary files
