"""Preemption end to end: on a one-GPU server, a high-priority job preempts a preemptible training
job (examples/train.py); the training job checkpoints on SIGTERM, goes back to the queue, resumes
from its checkpoint after the high-priority job, and finishes with the same result as a run that
was never interrupted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow

TRAIN = REPO / "examples" / "train.py"
ARGS = ["--steps", "120", "--checkpoint-every", "10", "--sleep-per-step", "0.03", "--seed", "5"]


def test_high_priority_preempts_and_training_resumes(tmp_path: Path) -> None:
    reference = tmp_path / "reference.json"
    subprocess.run(
        [
            sys.executable,
            str(TRAIN),
            *ARGS,
            "--sleep-per-step",
            "0",
            "--checkpoint-dir",
            str(tmp_path / "ref-ckpt"),
            "--output",
            str(reference),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = ServerProcess(tmp_path / "home", gpus="1xA100-80GB").start()
    try:
        with server.client() as c:
            result = tmp_path / "result.json"
            train = c.submit(
                command=[sys.executable, str(TRAIN), *ARGS, "--output", str(result)],
                gpus=1,
                priority="low",
                preemptible=True,
                name="train",
                checkpoint_dir=str(tmp_path / "ckpt"),
            )
            deadline = time.monotonic() + 30
            while not (tmp_path / "ckpt").glob("*.npz") or not any((tmp_path / "ckpt").glob("*.npz")):
                assert time.monotonic() < deadline, "the training job never checkpointed"
                time.sleep(0.1)
            urgent = c.submit(command=["sleep", "1"], gpus=1, priority="urgent", name="urgent")
            done = c.wait(urgent.id, timeout=60)
            assert done.state == "SUCCEEDED"
            final = c.wait(train.id, timeout=90)
            events = [(e.old, e.new, e.reason) for e in c.events(train.id)]
            logs = "".join(c.logs(train.id))
        assert final.state == "SUCCEEDED", events
        assert final.preemptions == 1 and final.restarts == 1 and final.run == 2
        assert any((new == "PREEMPTED" and "urgent" in reason) or new == "PREEMPTED" for _, new, reason in events)
        out = json.loads(result.read_text())
        ref = json.loads(reference.read_text())
        assert out["resumed_from"] > 0  # the second run started from a checkpoint
        assert out["weights_sha256"] == ref["weights_sha256"] and out["final_loss"] == ref["final_loss"]
        assert "run 2 started" in logs
        # the urgent job started while the training job was stopped, not after it
        assert done.started_at is not None and final.ended_at is not None and done.started_at < final.ended_at
    finally:
        server.stop()
        server.kill_jobs()
