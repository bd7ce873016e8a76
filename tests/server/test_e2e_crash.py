"""Crash safety: the 200-job run while the server is SIGKILLed five times at random moments and
restarted. Every job ends exactly once (each run of a job creates marker files with noclobber, so a
second run of a job is caught), none is lost, and each job's ledger time matches its process's own
wall time within 1 s."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.store.db import Database
from gpufleet.store.models import UsageSegmentRow
from tests.server.test_e2e_up import TEAMS, mixed_jobs
from tests.support.serverproc import ServerProcess

pytestmark = pytest.mark.slow

# hard quotas (no cohort, so no reclaim preemptions): no job has a legitimate second run here
SETTINGS = {"scheduler": {"queue_sort": "drf", "teams": {t: {"quota": {"*": 2}} for t in TEAMS}}}


def test_sigkill_five_times(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    rng = random.Random(2026)
    server = ServerProcess(tmp_path / "home", settings=SETTINGS).start()
    specs = mixed_jobs(marks, seed=11)
    submitted: dict[str, dict[str, object]] = {}
    errors: list[BaseException] = []

    def submit_all() -> None:
        try:
            with server.client() as c:
                for spec in specs:
                    submitted[c.submit(**spec).id] = spec  # type: ignore[arg-type]
        except BaseException as e:
            errors.append(e)

    submitter = threading.Thread(target=submit_all)
    try:
        submitter.start()
        for _ in range(5):
            time.sleep(rng.uniform(0.5, 5.0))
            server.kill()
            time.sleep(rng.uniform(0.0, 1.5))  # jobs end while nobody watches
            server.start()
        submitter.join(120)
        assert not errors, errors
        assert len(submitted) == 200
        with server.client() as c:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                jobs = c.list(limit=500)
                if len(jobs) == 200 and all(j.terminal for j in jobs):
                    break
                time.sleep(1.0)
            jobs = c.list(limit=500)
        states = Counter(j.state for j in jobs)
        assert states == {"SUCCEEDED": 200}, states

        # exactly once: one run of each job started and ended its command
        starts = Counter(p.name.split(".")[0] for p in marks.glob("*.start"))
        ends = Counter(p.name.split(".")[0] for p in marks.glob("*.end"))
        assert set(starts) == set(submitted) and set(ends) == set(submitted)
        assert max(starts.values()) == 1 and max(ends.values()) == 1, starts.most_common(3)

        # the ledger metered each job's own wall time (within 1 s)
        db = Database(f"sqlite:///{server.home / 'gpufleet.db'}")
        with db.session() as s:
            metered: dict[str, float] = defaultdict(float)
            for seg in s.scalars(select(UsageSegmentRow)):
                metered[seg.job_id] += seg.end - seg.start
        db.dispose()
        worst = 0.0
        for job_id in submitted:
            start = float(next(marks.glob(f"{job_id}.*.start")).read_text())
            end = float(next(marks.glob(f"{job_id}.*.end")).read_text())
            worst = max(worst, abs(metered[job_id] - (end - start)))
        assert worst < 1.0, worst
    finally:
        server.stop()
        server.kill_jobs()
