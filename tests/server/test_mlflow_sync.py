"""MLflow: a job that names an MLflow run gets its cost, GPU-hours and improvement per dollar logged
to that run when it ends (gpufleet.integrations.mlflow_sync), exactly once, without ever blocking the
scheduler.

A real world: the controller with the local backend (real processes), the API's real submit path,
the ledger, and MLflow's own client on a local file store in the test's folder. The run is read
back with MLflow's client and compared with the ledger (``/v1/usage`` and the job-budget figure).
Skipped only when mlflow (the optional extra ``gpufleet[mlflow]``; mlflow-skinny suffices) is not
installed; the submit-side tests need no MLflow.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.context import ApiContext
from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.local import LocalBackend
from gpufleet.clock import WallClock
from gpufleet.control.controller import Controller, ControllerConfig
from gpufleet.control.leader import FileLeadership
from gpufleet.cost.rules import PricingRules, rules_from_setting
from gpufleet.errors import InputError
from gpufleet.integrations.mlflow_sync import (
    LOGGED,
    METRIC_COST,
    METRIC_COST_EXACT,
    METRIC_GPU_HOURS,
    METRIC_IMPROVEMENT,
    METRIC_IMPROVEMENT_PER_USD,
    METRIC_RUN_SECONDS,
    RUN_LABEL,
    SKIPPED,
    MlflowSync,
    improvement,
    mlflow_labels,
    roi_of,
)
from gpufleet.integrations.mlflow_uris import redact_uri
from gpufleet.sdk.client import with_mlflow_run
from gpufleet.server.settings import MlflowSettings, Settings, load_settings
from gpufleet.services.budgets import job_spend
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import UsageSegmentRow

SINGLE_USER = AccountPolicy(jobs_as_server=True)  # CI runs as root: jobs run as the test's own user
NODE_USD_PER_HOUR = 7200.0  # 2 GPUs: one GPU-second costs $1, so a short job costs dollars, not cents
PRICING = {"priority_multipliers": {"high": 1.5}}  # the bill's rules: the logged cost must follow them
RUN_A = "0123456789abcdef0123456789abcdef"


# -- MLflow -----------------------------------------------------------------------------------------


@dataclass
class Tracking:
    uri: str
    client: Any  # mlflow.tracking.MlflowClient
    experiment_id: str

    def run(self, **history: list[float]) -> str:
        """A run with these metric histories (one value per step)."""
        run_id: str = self.client.create_run(self.experiment_id).info.run_id
        for name, values in history.items():
            for step, value in enumerate(values):
                self.client.log_metric(run_id, name, value, step=step)
        return run_id

    def metrics(self, run_id: str) -> dict[str, float]:
        return dict(self.client.get_run(run_id).data.metrics)

    def tags(self, run_id: str) -> dict[str, str]:
        return {k: v for k, v in self.client.get_run(run_id).data.tags.items() if k.startswith("gpufleet.")}

    def history(self, run_id: str, name: str) -> list[float]:
        return [m.value for m in self.client.get_metric_history(run_id, name)]


def make_tracking(folder: Path, monkeypatch: pytest.MonkeyPatch, team: str = "vision") -> Tracking:
    """A tracking store whose experiment belongs to ``team`` (the experiment tag gpufleet.team: the
    server writes only into a run whose experiment names the job's team)."""
    mlflow_tracking = pytest.importorskip(
        "mlflow.tracking", reason="mlflow is an optional extra: pip install 'gpufleet[mlflow]'"
    )
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for it; the server sets it itself
    for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0"), ("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")):
        monkeypatch.setenv(name, value)  # what MlflowSync sets in a server (the test process keeps its own)
    uri = folder.as_uri()
    client = mlflow_tracking.MlflowClient(tracking_uri=uri)
    return Tracking(uri, client, client.create_experiment("gpufleet-test", tags={"gpufleet.team": team}))


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tracking:
    return make_tracking(tmp_path / "mlruns", monkeypatch)


# -- the world: controller + local backend + the API's submit path --------------------------------


@dataclass
class Fleet:
    tmp: Path
    db: Database
    ctl: Controller
    api: TestClient
    token: str
    rules: PricingRules | None

    def submit(self, expect: int = 201, **body: Any) -> Any:
        body.setdefault("command", ["sleep", "0.4"])
        body.setdefault("gpus", 1)
        r = self.api.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == expect, r.text
        return r.json()

    def get(self, path: str) -> Any:
        r = self.api.get(path, headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == 200, r.text
        return r.json()

    def run(self, **body: Any) -> str:
        """Submit a job and tick the controller until it ended; its id."""
        job_id: str = self.submit(**body)["id"]
        self.until(lambda: self.state(job_id) in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"))
        return job_id

    def until(self, cond: Callable[[], bool], timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.ctl.tick()
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError("condition not reached")

    def state(self, job_id: str) -> str:
        with self.db.session() as s:
            return repo.get_job(s, job_id).state

    def sync(self, **settings: Any) -> MlflowSync:
        return MlflowSync(self.db, MlflowSettings(**settings), rules=self.rules)

    def mlflow_events(self, job_id: str) -> list[dict[str, Any]]:
        return [e for e in self.get(f"/v1/jobs/{job_id}/events") if e["reason"].startswith(("mlflow_",))]

    def usage_row(self, job_id: str, window: str = "1h") -> dict[str, Any]:
        rep = self.get(f"/v1/usage?window={window}&aggregate=job")
        rows = [r for r in rep["rows"] if r["key"] == {"job": job_id}]
        assert len(rows) == 1, rep["rows"]
        return rows[0]  # type: ignore[no-any-return]

    def span(self, job_id: str) -> str:
        """The usage window ``start,end`` (UNIX seconds) that holds exactly the job's usage."""
        with self.db.session() as s:
            segs = s.query(UsageSegmentRow).filter_by(job_id=job_id).all()
            return f"{min(g.start for g in segs)!r},{max(g.end for g in segs)!r}"

    def exact_cost(self, job_id: str) -> float:
        """What a job budget compares with its limit: the ledger's charge before rounding."""
        with self.db.session() as s:
            return job_spend(s, repo.get_job(s, job_id), time.time(), rules=self.rules)


@contextlib.contextmanager
def make_fleet(tmp: Path, db: Database) -> Iterator[Fleet]:
    backend = LocalBackend(tmp / "home", gpus="2xA100-80GB", use_nvml=False, policy=SINGLE_USER, job_root=tmp / "jobs")
    cfg = ControllerConfig(
        poll_interval_s=0.05, cycle_interval_s=0.2, grace_s=2.0, node_price_usd_per_hour=NODE_USD_PER_HOUR
    )
    ctl = Controller(db, backend, config=cfg, leadership=FileLeadership(tmp / "leader.lock"))
    rules = rules_from_setting(PRICING)
    with db.session() as s:
        repo.ensure_team(s, "vision", time.time())
        _, secret = repo.create_token(s, team="vision", role="admin", name="admin", now=time.time())
    (tmp / "logs").mkdir(exist_ok=True)
    app = create_app(
        ApiContext(database=db, logs_dir=tmp / "logs", clock=WallClock(), wake=ctl.wake, pricing_rules=rules)
    )
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield Fleet(tmp, db, ctl, client, secret, rules)
    finally:
        for job_id, ar in list(ctl.active.items()):  # leave nothing running
            backend.stop(job_id, ar.run, "test over", 0.0)
        ctl.leadership.release()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    db = Database(f"sqlite:///{tmp_path / 'g.db'}")
    db.upgrade()
    with make_fleet(tmp_path, db) as f:
        yield f
    db.dispose()


def check_logged(fleet: Fleet, tracking: Tracking, job_id: str, run_id: str) -> dict[str, float]:
    """The run holds the ledger's figures for the job: the bill to the cent, the exact charge; its metrics."""
    metrics = tracking.metrics(run_id)
    billed = fleet.usage_row(job_id, fleet.span(job_id))["total_cost_usd"]  # /v1/usage over the job's span
    assert Decimal(billed) > 0 and Decimal(repr(metrics[METRIC_COST])) == Decimal(billed)
    assert metrics[METRIC_COST_EXACT] == pytest.approx(fleet.exact_cost(job_id), abs=1e-9)  # the job-budget figure
    row = fleet.usage_row(job_id)  # a longer window: the job's line may round a cent (x multiplier) the other way
    assert abs(Decimal(repr(metrics[METRIC_COST_EXACT])) - Decimal(row["total_cost_usd"])) < Decimal("0.02")
    assert metrics[METRIC_GPU_HOURS] == pytest.approx(row["gpu_hours"], abs=1e-6)
    # one GPU: GPU-hours are the run time (the ledger meters whole microseconds)
    assert metrics[METRIC_GPU_HOURS] * 3600.0 == pytest.approx(metrics[METRIC_RUN_SECONDS], abs=1e-5)
    assert 0.3 <= metrics[METRIC_RUN_SECONDS] < 10.0
    return metrics


# -- the sync ------------------------------------------------------------------------------------


def test_an_ended_job_is_logged_to_its_run_exactly_once(fleet: Fleet, tracking: Tracking) -> None:
    """The run named by MLFLOW_RUN_ID in the job's env gets the ledger's cost (with the bill's
    pricing rules: priority high is charged 1.5x), GPU-hours, run time, the job's team, project and
    experiment, and accuracy's improvement per dollar; a second pass and a restarted sync log nothing."""
    run_id = tracking.run(accuracy=[0.6, 0.75, 0.9])
    job = fleet.submit(
        env={"MLFLOW_RUN_ID": run_id},
        project="resnet",
        experiment="lr-sweep-3",
        priority="high",
        labels={"cost-center": "cc-42"},
    )
    assert job["labels"][RUN_LABEL] == run_id  # the submit path turned the env into the label
    job_id = job["id"]
    fleet.until(lambda: fleet.state(job_id) == "SUCCEEDED")

    sync = fleet.sync(tracking_uri=tracking.uri)
    assert sync.sync_once().logged == [job_id]

    metrics = check_logged(fleet, tracking, job_id, run_id)
    cost = metrics[METRIC_COST_EXACT]
    with fleet.db.session() as s:  # the multiplier is in it: 1.5 x what the node time cost
        held = job_spend(s, repo.get_job(s, job_id), time.time(), rules=None)
    assert cost == pytest.approx(1.5 * held, rel=1e-9)
    assert metrics[METRIC_IMPROVEMENT] == pytest.approx(0.3)
    assert metrics[METRIC_IMPROVEMENT_PER_USD] == pytest.approx(0.3 / cost)
    assert tracking.tags(run_id) == {
        "gpufleet.job_id": job_id,
        "gpufleet.job_name": job["name"],
        "gpufleet.team": "vision",
        "gpufleet.project": "resnet",
        "gpufleet.experiment": "lr-sweep-3",
        "gpufleet.cost_center": "cc-42",
        "gpufleet.state": "SUCCEEDED",
        "gpufleet.roi_metric": "accuracy:max",
    }
    (event,) = fleet.mlflow_events(job_id)
    assert event["reason"].startswith(f"{LOGGED}: run {run_id}") and event["old"] == event["new"] == "SUCCEEDED"
    assert fleet.get(f"/v1/jobs/{job_id}")["state"] == "SUCCEEDED"

    # exactly once: the same sync again, and a new one (a restarted server) on the same store
    assert sync.sync_once().logged == []
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == []
    assert tracking.history(run_id, METRIC_COST_EXACT) == [cost]
    assert len(fleet.mlflow_events(job_id)) == 1


def test_a_crash_between_the_mlflow_write_and_the_event_logs_nothing_twice(
    fleet: Fleet, tracking: Tracking, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run already holds this job's figures (tag gpufleet.job_id): the next sync writes the
    event only."""
    run_id = tracking.run(accuracy=[0.5, 0.7])
    job_id = fleet.run(labels={RUN_LABEL: run_id})
    first = fleet.sync(tracking_uri=tracking.uri)

    def store_down(*args: Any) -> None:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(first, "_record", store_down)
    stats = first.sync_once()
    assert stats.failed == [job_id] and first.retrying[job_id].attempts == 1
    assert METRIC_COST in tracking.metrics(run_id) and fleet.mlflow_events(job_id) == []

    restarted = fleet.sync(tracking_uri=tracking.uri)
    assert restarted.sync_once().logged == [job_id]
    assert len(tracking.history(run_id, METRIC_COST)) == 1
    assert len(fleet.mlflow_events(job_id)) == 1


def test_an_unreachable_or_bad_tracking_uri_is_retried_later_and_harms_nothing(
    fleet: Fleet, tracking: Tracking
) -> None:
    """A job whose tracking server does not answer fails, is retried with back-off (and given up,
    with an event, once too old); the job beside it is logged; nothing raises."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens once closed
    good_run = tracking.run(accuracy=[0.1, 0.2])
    bad = fleet.run(labels={RUN_LABEL: RUN_A}, env={"MLFLOW_TRACKING_URI": dead})
    good = fleet.run(labels={RUN_LABEL: good_run})

    sync = fleet.sync(
        tracking_uri=tracking.uri, job_tracking_uris=[dead], retry_min_s=60.0, retry_max_s=240.0, give_up_after_s=3600.0
    )  # the job's own URI is used only when an admin listed it
    now = time.time()
    stats = sync.sync_once(now)
    assert stats.logged == [good] and stats.failed == [bad]
    retry = sync.retrying[bad]
    assert retry.attempts == 1 and retry.next_at == pytest.approx(now + 60.0) and "MlflowException" in retry.error
    check_logged(fleet, tracking, good, good_run)

    assert sync.sync_once(now + 30).failed == []  # not due yet
    assert sync.sync_once(now + 61).failed == [bad]  # retried, back-off doubled
    assert sync.retrying[bad].next_at == pytest.approx(now + 61 + 120.0)
    assert sync.sync_once(now + 61 + 121).failed == [bad]
    assert sync.retrying[bad].next_at == pytest.approx(now + 61 + 121 + 240.0)  # capped at retry_max_s
    assert fleet.mlflow_events(bad) == []

    stats = sync.sync_once(now + 3600 + 1)  # too old: given up, once, with the reason
    assert stats.skipped == [bad] and bad not in sync.retrying
    (event,) = fleet.mlflow_events(bad)
    assert event["reason"].startswith(f"{SKIPPED}: gave up after 4 attempt(s)")
    assert "127.0.0.1" in event["reason"] or "MlflowException" in event["reason"]
    assert sync.sync_once(now + 7200).skipped == []

    # a tracking URI MLflow cannot use at all: the same, never a crash
    other = fleet.run(labels={RUN_LABEL: tracking.run()})
    broken = fleet.sync(tracking_uri="nosuchscheme://nowhere")
    assert broken.sync_once().failed == [other]
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == [other]  # fixed and restarted
    assert fleet.state(good) == "SUCCEEDED"


def test_a_hanging_tracking_server_never_blocks_the_scheduler(
    fleet: Fleet, tracking: Tracking, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic duty only starts a pass on its own thread: the controller keeps scheduling
    while the tracking server says nothing; the request times out and the job waits for a retry."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts, never answers
        silent_uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        job_id = fleet.run(labels={RUN_LABEL: RUN_A}, env={"MLFLOW_TRACKING_URI": silent_uri})
        sync = fleet.sync(job_tracking_uris=[silent_uri])  # listed by an admin (no job URI is, by default)
        t0 = time.monotonic()
        sync.tick(time.time())
        assert time.monotonic() - t0 < 0.5
        second = fleet.run(command=["true"])  # scheduled and run while the pass waits
        assert fleet.state(second) == "SUCCEEDED" and sync.busy
        sync.tick(time.time())  # a pass still runs: the next tick starts none
        sync.join(30)
    assert sync.retrying[job_id].attempts == 1


def test_a_job_without_a_run_logs_nothing(fleet: Fleet, tracking: Tracking) -> None:
    run_id = tracking.run(accuracy=[0.2, 0.4])
    job_id = fleet.run(env={"OTHER": "x"})
    stats = fleet.sync(tracking_uri=tracking.uri).sync_once()
    assert (stats.logged, stats.failed, stats.skipped) == ([], [], [])
    assert fleet.mlflow_events(job_id) == []
    assert set(tracking.metrics(run_id)) == {"accuracy"} and tracking.tags(run_id) == {}


def test_the_jobs_own_tracking_uri_wins_when_allowed(
    fleet: Fleet, tracking: Tracking, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLFLOW_TRACKING_URI in the job's env beats mlflow.tracking_uri, if it lies under one of
    mlflow.job_tracking_uris (default none: a job makes the server neither write files nor send
    its credentials anywhere)."""
    own = make_tracking(tmp_path / "own-mlruns", monkeypatch)
    run_id = own.run(val_loss=[2.0, 1.5, 0.5])
    allowed = fleet.run(env={"MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": own.uri},
                        labels={"mlflow-roi-metric": "val_loss:min"})  # fmt: skip
    sync = fleet.sync(tracking_uri=tracking.uri, job_tracking_uris=["file://"])
    assert sync.sync_once().logged == [allowed]
    metrics = check_logged(fleet, own, allowed, run_id)
    assert metrics[METRIC_IMPROVEMENT] == pytest.approx(1.5)  # first - last: a loss goes down
    assert own.tags(run_id)["gpufleet.roi_metric"] == "val_loss:min"

    other_run = own.run()
    refused = fleet.run(env={"MLFLOW_RUN_ID": other_run, "MLFLOW_TRACKING_URI": own.uri})
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().skipped == [refused]  # default: none
    (event,) = fleet.mlflow_events(refused)
    assert "is not allowed" in event["reason"]
    assert own.tags(other_run) == {}
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().skipped == []  # once


def test_no_tracking_uri_at_all_leaves_the_job_alone(fleet: Fleet, tracking: Tracking) -> None:
    job_id = fleet.run(labels={RUN_LABEL: tracking.run()})
    stats = fleet.sync().sync_once()
    assert (stats.logged, stats.failed, stats.skipped) == ([], [], [])
    assert fleet.mlflow_events(job_id) == []  # configured later, a restart logs it ...
    late = fleet.sync(tracking_uri=tracking.uri, give_up_after_s=60.0)
    assert late.sync_once(time.time() + 120).logged == []  # ... unless it ended longer ago than give_up_after_s
    assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == [job_id]


def test_on_postgresql_and_sqlite_alike(tmp_path: Path, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store side (the scan, the events, exactly once) on both stores."""
    tracking = make_tracking(tmp_path / "mlruns", monkeypatch)
    with make_fleet(tmp_path, db) as fleet:
        run_id = tracking.run(accuracy=[0.25, 0.5])
        job_id = fleet.run(labels={RUN_LABEL: run_id})
        assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == [job_id]
        check_logged(fleet, tracking, job_id, run_id)
        assert fleet.sync(tracking_uri=tracking.uri).sync_once().logged == []
        assert len(fleet.mlflow_events(job_id)) == 1


def test_gpufleet_up_runs_the_sync_with_the_bills_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_server registers the duty (GPUFLEET_MLFLOW__TRACKING_URI) on the leader, with the
    server's pricing rules; mlflow.enabled: false registers none."""
    from gpufleet.server.host import build_server

    tracking = make_tracking(tmp_path / "mlruns", monkeypatch, team="default")  # the single-user admin's team
    monkeypatch.setenv("GPUFLEET_MLFLOW__TRACKING_URI", tracking.uri)
    monkeypatch.setenv("GPUFLEET_MLFLOW__INTERVAL_S", "0.5")
    settings = load_settings(
        home=tmp_path / "home", gpus="2xA100-80GB", jobs_as_server=True, job_root=tmp_path / "jobs",
        node_price_usd_per_hour=NODE_USD_PER_HOUR, pricing=PRICING, poll_interval_s=0.05,
    )  # fmt: skip
    assert settings.mlflow.tracking_uri == tracking.uri
    server = build_server(settings)
    try:
        (duty,) = [p for p in server.controller.periodic if p.name == "mlflow sync"]
        assert duty.interval_s == 0.5
        sync = duty.run.__self__  # type: ignore[attr-defined]
        assert isinstance(sync, MlflowSync) and sync.rules is server.controller.budgets.rules
        token = (tmp_path / "home" / "admin.token").read_text().strip()
        run_id = tracking.run(accuracy=[0.1, 0.3])
        with TestClient(server.app()) as api:
            r = api.post("/v1/jobs", json={"command": ["sleep", "0.3"], "gpus": 1, "env": {"MLFLOW_RUN_ID": run_id}},
                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            end = time.monotonic() + 20
            while METRIC_COST not in tracking.metrics(run_id) and time.monotonic() < end:
                server.controller.tick()  # the duty runs on the leader's step, its pass on a thread
                time.sleep(0.05)
            sync.join(10)
        assert tracking.tags(run_id)["gpufleet.job_id"] == job_id
        assert tracking.metrics(run_id)[METRIC_COST] > 0
    finally:
        for jid, ar in list(server.controller.active.items()):
            server.controller.backend.stop(jid, ar.run, "test over", 0.0)
        server.controller.leadership.release()
        server.db.dispose()
    off = Settings(home=tmp_path / "home2", gpus="1xA100-80GB", jobs_as_server=True, mlflow={"enabled": False})
    server = build_server(off)
    try:
        assert not [p for p in server.controller.periodic if p.name == "mlflow sync"]
    finally:
        server.controller.leadership.release()
        server.db.dispose()


def test_a_server_without_mlflow_retries_and_says_how_to_install_it(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No MLflow needed: the import fails the way it does where the extra is not installed."""
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.setenv(name, "1")  # MlflowSync sets them when unset: keep this process as it was

    def no_mlflow(uri: str) -> Any:
        raise ModuleNotFoundError("No module named 'mlflow'", name="mlflow")

    job_id = fleet.run(labels={RUN_LABEL: RUN_A})
    sync = MlflowSync(fleet.db, MlflowSettings(tracking_uri="http://mlflow:5000"), client_factory=no_mlflow)
    stats = sync.sync_once()
    assert stats.failed == [job_id] and "pip install 'gpufleet[mlflow]'" in sync.retrying[job_id].error
    assert fleet.mlflow_events(job_id) == [] and fleet.state(job_id) == "SUCCEEDED"


# -- the submit side (no MLflow needed) -----------------------------------------------------------


def test_submit_names_the_run_from_the_env_or_the_label(fleet: Fleet) -> None:
    from_env = fleet.submit(command=["true"], gpus=0, env={"MLFLOW_RUN_ID": f" {RUN_A} "})
    assert from_env["labels"] == {RUN_LABEL: RUN_A}
    both = fleet.submit(command=["true"], gpus=0, env={"MLFLOW_RUN_ID": RUN_A}, labels={RUN_LABEL: RUN_A})
    assert both["labels"] == {RUN_LABEL: RUN_A}
    conflict = fleet.submit(422, command=["true"], env={"MLFLOW_RUN_ID": RUN_A}, labels={RUN_LABEL: "other-run"})
    assert [e["field"] for e in conflict["errors"]] == [f"body.labels[{RUN_LABEL}]"]
    bad = fleet.submit(422, command=["true"], env={"MLFLOW_RUN_ID": "not a run id"})
    assert [e["field"] for e in bad["errors"]] == ["body.env[MLFLOW_RUN_ID]"]
    assert fleet.submit(command=["true"], gpus=0, env={"MLFLOW_RUN_ID": ""})["labels"] == {}


def test_mlflow_labels_rules() -> None:
    assert mlflow_labels({"a": "b"}, {}) == {"a": "b"}
    assert mlflow_labels({}, {"MLFLOW_RUN_ID": RUN_A}) == {RUN_LABEL: RUN_A}
    with pytest.raises(InputError, match="not an MLflow run id"):
        mlflow_labels({RUN_LABEL: "x" * 200}, {})


def test_sdk_and_cli_name_the_run_in_the_label_and_the_env() -> None:
    from gpufleet.cli.jobs import build_spec
    from gpufleet.wire import JobSubmit

    fields = with_mlflow_run(None, {"command": ["python", "train.py"], "labels": {"team-x": "1"}}, RUN_A)
    assert fields["labels"] == {"team-x": "1", RUN_LABEL: RUN_A} and fields["env"] == {"MLFLOW_RUN_ID": RUN_A}
    spec = JobSubmit(command=["python"], env={"A": "1"})
    assert with_mlflow_run(spec, {}, RUN_A)["env"] == {"A": "1", "MLFLOW_RUN_ID": RUN_A}
    assert with_mlflow_run(spec, {}, None) == {}
    with pytest.raises(InputError, match="conflicts"):
        with_mlflow_run(None, {"env": {"MLFLOW_RUN_ID": "other"}}, RUN_A)
    with pytest.raises(InputError, match="not an MLflow run id"):
        with_mlflow_run(None, {}, "a b")

    built = build_spec(["python", "train.py"], mlflow_run=RUN_A, env=["LR=3e-4"])
    assert built.labels == {RUN_LABEL: RUN_A} and built.env == {"LR": "3e-4", "MLFLOW_RUN_ID": RUN_A}


def test_cli_flag_reaches_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpufleet submit --mlflow-run RUN`` sends the label and the env; a bad id is exit 2 naming the flag."""
    from typer.testing import CliRunner

    from gpufleet.cli import jobs as cli_jobs
    from gpufleet.cli.main import app

    sent: list[Any] = []

    class FakeClient:
        def __enter__(self) -> FakeClient:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def submit(self, spec: Any, idempotency_key: str | None = None) -> Any:
            sent.append(spec)
            return type("Job", (), {"id": "job-1"})()

    monkeypatch.setattr(cli_jobs, "make_client", lambda url, token: FakeClient())
    runner = CliRunner()
    out = runner.invoke(app, ["submit", "--mlflow-run", RUN_A, "--", "python", "train.py"])
    assert out.exit_code == 0, out.output
    assert sent[0].labels == {RUN_LABEL: RUN_A} and sent[0].env["MLFLOW_RUN_ID"] == RUN_A
    out = runner.invoke(app, ["submit", "--mlflow-run", "no such id", "--", "python", "train.py"])
    assert out.exit_code == 2 and "--mlflow-run" in out.output


# -- the pieces ------------------------------------------------------------------------------------


def test_improvement_roi_and_redaction() -> None:
    assert improvement([(0, 1, 0.6), (2, 3, 0.9), (1, 2, 0.7)], "max") == pytest.approx(0.3)
    assert improvement([(0, 1, 2.0), (1, 2, 0.5)], "min") == pytest.approx(1.5)
    assert improvement([(0, 1, 0.6)], "max") is None
    assert improvement([(0, 1, float("nan")), (1, 2, 0.6)], "max") is None
    assert roi_of(None, "accuracy", "max") == ("accuracy", "max")
    assert roi_of("val_loss:min", "accuracy", "max") == ("val_loss", "min")
    assert roi_of("f1", "accuracy", "min") == ("f1", "min")
    assert roi_of(None, None, "max") is None
    assert redact_uri("https://bob:s3cret@mlflow.example.com/x?token=abc") == "https://***@mlflow.example.com/x"
    assert redact_uri("file:///tmp/mlruns") == "file:///tmp/mlruns"


def test_settings_block_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_MLFLOW__TRACKING_URI", "http://mlflow:5000")
    monkeypatch.setenv("GPUFLEET_MLFLOW__ROI_METRIC", "val_loss")
    monkeypatch.setenv("GPUFLEET_MLFLOW__ROI_DIRECTION", "min")
    s = load_settings()
    m = s.mlflow
    assert (m.tracking_uri, m.roi_metric, m.roi_direction) == ("http://mlflow:5000", "val_loss", "min")
    assert m.enabled and m.job_tracking_uris == []  # no job names its own tracking server unless an admin lists it
    monkeypatch.setenv("GPUFLEET_MLFLOW__ROI_DIRECTION", "sideways")
    with pytest.raises(Exception, match="roi_direction"):
        load_settings()
