"""End to end: a real ``gpufleet up`` (8 declared GPUs, SQLite, the local backend with real
processes) and 200 mixed jobs from four teams submitted through the CLI and the SDK.

Checks: all jobs finish; quotas hold at every instant (checked exactly on the runs' own process
intervals, and on samples taken through the API while the jobs run); fair share shows in the start
order; a high-priority job starts before its team's earlier normal jobs.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.store.db import Database
from gpufleet.store.models import RunRow
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow

TEAMS = ("alpha", "beta", "gamma", "delta")
NOMINAL = 2  # GPUs per team, in one cohort of 8
BORROW = 2  # each team may borrow up to 2 more
SETTINGS = {
    "scheduler": {
        "queue_sort": "drf",
        "placement": "bestfit",
        "teams": {t: {"quota": {"*": NOMINAL}, "cohort": "lab", "borrowing_limit": BORROW} for t in TEAMS},
    }
}


def job_command(marks: Path, seconds: float) -> list[str]:
    """Record the process's own start and end; a second run of the same job is caught by noclobber."""
    script = (
        f'set -C; m="{marks}/$GPUFLEET_JOB_ID.$GPUFLEET_RUN"; '
        'date +%s.%N > "$m.start" || exit 3; '
        f"sleep {seconds}; "
        'date +%s.%N > "$m.end"'
    )
    return ["sh", "-c", script]


def mixed_jobs(marks: Path, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    jobs: list[dict[str, object]] = []
    for team in TEAMS:  # team by team: FIFO would start alpha's jobs first
        for i in range(50):
            kind = rng.random()
            spec: dict[str, object] = {"team": team, "name": f"{team}-{i}", "estimated_runtime_s": 1.0}
            if kind < 0.6:
                spec["gpus"] = 1
            elif kind < 0.8:  # a fraction of one GPU (gpus 1 as well would be a conflicting request)
                spec["gpu_milli"] = rng.choice([250, 500])
            else:
                spec["gpus"] = 2
            spec["command"] = job_command(marks, round(rng.uniform(0.2, 0.8), 2))
            jobs.append(spec)
    # the last five alpha jobs are urgent
    for spec in jobs[45:50]:
        spec["priority"] = "high"
    return jobs


def held_gpus(spec: dict[str, object]) -> float:
    milli = spec.get("gpu_milli")
    return (int(milli) / 1000) if milli else float(spec["gpus"])  # type: ignore[arg-type]


def test_200_jobs_four_teams(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    server = ServerProcess(tmp_path / "home", settings=SETTINGS).start()
    sampler_stop = threading.Event()
    samples: list[dict[str, dict[str, float]]] = []
    try:
        with server.client() as admin:
            for t in TEAMS:  # members of each team get their own token
                admin.create_token(t, "member", f"{t}-bot")
            # hold the cluster with one 8-GPU job so that all 200 jobs queue behind it
            blocker = admin.submit(command=["sleep", "3"], gpus=8, name="blocker")
            specs = mixed_jobs(marks)
            cli_specs = [s for i, s in enumerate(specs) if i % 10 == 3]  # 20 through the CLI
            sdk_specs = [s for i, s in enumerate(specs) if i % 10 != 3]

            def via_cli(spec: dict[str, object]) -> str:
                args = ["submit", "--team", str(spec["team"]), "--name", str(spec["name"]), "--estimate", "1s"]
                if spec.get("gpu_milli"):
                    args += ["--gpu-milli", str(spec["gpu_milli"])]
                else:
                    args += ["--gpus", str(spec["gpus"])]
                if spec.get("priority"):
                    args += ["--priority", str(spec["priority"])]
                out = server.cli(*args, "--json", "--", *spec["command"])  # type: ignore[misc]
                return str(json.loads(out.stdout)["id"])

            ids: dict[str, dict[str, object]] = {}
            with ThreadPoolExecutor(4) as pool:
                cli_futures = [pool.submit(via_cli, s) for s in cli_specs]
                for spec in sdk_specs:
                    ids[admin.submit(**spec).id] = spec  # type: ignore[arg-type]
                for f, spec in zip(cli_futures, cli_specs, strict=True):
                    ids[f.result()] = spec
            assert len(ids) == 200

            def sample() -> None:
                while not sampler_stop.is_set():
                    with contextlib.suppress(Exception):  # a sample lost to a busy server is not a failure
                        samples.append({t.name: dict(t.used_gpus) for t in admin.teams()})
                    sampler_stop.wait(0.3)

            threading.Thread(target=sample, daemon=True).start()
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                jobs = admin.list(limit=500)
                if all(j.terminal for j in jobs) and len(jobs) == 201:
                    break
                time.sleep(1.0)
            sampler_stop.set()
            jobs = {j.id: j for j in admin.list(limit=500)}
        states = Counter(j.state for j in jobs.values())
        assert states == {"SUCCEEDED": 201}, states
        assert jobs[blocker.id].state == "SUCCEEDED"

        # quotas held at every instant: replay the runs' own process intervals
        db = Database(f"sqlite:///{server.home / 'gpufleet.db'}")
        with db.session() as s:
            runs = [r for r in s.scalars(select(RunRow)) if r.started_at is not None and r.job_id in ids]
        db.dispose()
        edges: list[tuple[float, int, str, float]] = []
        for r in runs:
            spec = ids[r.job_id]
            edges.append((r.started_at, 1, str(spec["team"]), held_gpus(spec)))  # type: ignore[arg-type]
            edges.append((r.ended_at, 0, str(spec["team"]), -held_gpus(spec)))  # type: ignore[arg-type]
        edges.sort()  # at equal times ends (0) come before starts (1)
        use: dict[str, float] = defaultdict(float)
        for _, _, team, d in edges:
            use[team] += d
            assert use[team] <= NOMINAL + BORROW + 1e-9, f"{team} held {use[team]} GPUs"
            assert sum(use.values()) <= 8 + 1e-9
        for snap in samples:
            for team in TEAMS:
                assert sum(snap.get(team, {}).values()) <= NOMINAL + BORROW + 1e-9
        assert len(samples) >= 5

        # fair share in the start order: FIFO would start alpha's (submitted first) jobs first
        first_runs = sorted((r for r in runs if r.run == 1), key=lambda r: r.started_at)
        normal = [r for r in first_runs if not ids[r.job_id].get("priority")]
        first16 = Counter(str(ids[r.job_id]["team"]) for r in normal[:16])
        # FIFO would give alpha and beta (submitted first) nearly all of the first 16 starts and gamma
        # and delta (submitted last) none; DRF interleaves the teams (alpha, whose urgent jobs ran
        # first, has the largest share and may get few)
        assert sum(1 for t in TEAMS if first16[t] >= 2) >= 3, first16
        assert first16["gamma"] + first16["delta"] >= 4, first16

        # priority: alpha's urgent jobs (submitted last of alpha's) start before most of alpha's normal jobs
        start = {r.job_id: r.started_at for r in first_runs}
        alpha = sorted((j for j in ids if ids[j]["team"] == "alpha"), key=lambda j: start[j])
        urgent_ranks = [alpha.index(j) for j in ids if ids[j].get("priority") == "high"]
        assert max(urgent_ranks) < 15, urgent_ranks
    finally:
        sampler_stop.set()
        server.stop()
        server.kill_jobs()
