"""The store on SQLite and on a real PostgreSQL: migrations, repositories, the ledger from the
database, concurrency contracts (idempotent submission under a race) and the ``db`` CLI."""

from __future__ import annotations

import hashlib
import logging
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import typer
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.backends.base import GpuSample
from gpufleet.cli.db import db_app
from gpufleet.cost.allocation import allocate
from gpufleet.errors import ConflictError, InputError, NotFoundError, StoreError, TransitionError
from gpufleet.model.job import GpuRequest, JobState, PodPlacement
from gpufleet.model.node import CapacityType, GpuSharingFacts, Node, SharingMode
from gpufleet.model.quota import DEFAULT_PRIORITY_GRANT, Quota
from gpufleet.store import Database, repo
from gpufleet.store.convert import (
    gpu_facts_to_json,
    job_from_row,
    job_spec_from_row,
    node_from_row,
    placement_from_json,
    placement_to_json,
)
from gpufleet.store.db import default_db_url, mask_url
from gpufleet.store.models import Base, JobRow, Token

# -- helpers --------------------------------------------------------------------------------------


HEAD = "0013"  # the newest migration


def submit(
    db: Database,
    name: str = "j",
    *,
    team: str = "ml",
    now: float = 0.0,
    key: str | None = None,
    body: str | None = None,
    by: str | None = "tok_a",
    **fields: Any,
) -> tuple[JobRow, bool]:
    with db.session() as s:
        return repo.submit_job(
            s,
            {"name": name, "command": ["python", "train.py"], **fields},
            team=team,
            submitted_by=by,
            idempotency_key=key,
            request_sha256=body,
            now=now,
        )


def move(db: Database, job_id: str, *states: str, now: float = 1.0, **fields: Any) -> JobRow:
    with db.session() as s:
        job = repo.get_job(s, job_id)
        for st_ in states:
            repo.transition(s, job, st_, f"to {st_}", now, **fields)
        return job


def gpu_node(name: str = "n1", *, model: str = "A100-80GB", gpus: int = 8, **kw: Any) -> Node:
    return Node(name=name, gpu_model=model, gpu_count=gpus, cpu_milli=0, memory_mib=0, **kw)


# -- the database handle and migrations -----------------------------------------------------------


def test_migrations_apply_from_empty_and_are_idempotent(empty_db_url: str) -> None:
    db = Database(empty_db_url)
    try:
        assert db.current_revision() is None
        with pytest.raises(StoreError, match="no schema"):
            db.check_schema()
        db.upgrade()
        assert db.current_revision() == db.head_revision() == HEAD
        db.upgrade()  # again: nothing to do
        db.check_schema()
        with db.session() as s:
            assert repo.list_teams(s) == []
    finally:
        db.dispose()


def test_concurrent_upgrades_migrate_once(empty_db_url: str) -> None:
    """Replicas starting together: the advisory lock (PG) / BEGIN IMMEDIATE (SQLite) serializes."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        db = Database(empty_db_url)
        try:
            barrier.wait()
            db.upgrade()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            db.dispose()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = Database(empty_db_url)
    assert db.current_revision() == HEAD
    db.dispose()


def test_migrated_schema_equals_models(db: Database) -> None:
    with db.engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        diffs = compare_metadata(mc, Base.metadata)
    assert diffs == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql+psycopg://gpf:s3cret@127.0.0.1:1/nowhere", "cannot connect to the store at"),
        ("mysql://gpf:s3cret@localhost/x", "unsupported database URL"),
        ("not a url", "invalid database URL"),
    ],
    ids=["unreachable-pg", "unsupported", "garbage"],
)
def test_bad_url_is_a_store_error_with_masked_password(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message) as err:
        db = Database(url)
        try:
            with db.session():
                pass
        finally:
            db.dispose()
    assert "s3cret" not in str(err.value)
    assert "\n" not in str(err.value)
    if "127.0.0.1" in url:
        assert "gpf:***@127.0.0.1:1/nowhere" in str(err.value)


def test_mask_url_and_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert mask_url("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"
    monkeypatch.setenv("GPUFLEET_DB", "postgresql+psycopg://x@h/db")
    assert default_db_url() == "postgresql+psycopg://x@h/db"
    monkeypatch.delenv("GPUFLEET_DB")
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    assert default_db_url() == f"sqlite:///{tmp_path / 'gpufleet.db'}"
    monkeypatch.delenv("GPUFLEET_HOME")
    assert default_db_url().startswith("sqlite:///") and default_db_url().endswith("gpufleet/gpufleet.db")


def test_session_rolls_back_on_error(db: Database) -> None:
    with pytest.raises(RuntimeError), db.session() as s:
        repo.ensure_team(s, "ghost", 0.0)
        raise RuntimeError("boom")
    with db.session(readonly=True) as s, pytest.raises(NotFoundError):
        repo.get_team(s, "ghost")


# -- teams, quotas, tokens ------------------------------------------------------------------------


def test_teams_and_quotas_round_trip(db: Database) -> None:
    with db.session() as s:
        repo.upsert_team(
            s, "vision", weight=2.0, cohort="research", borrowing_limit_milli=4000,
            quotas_milli={"A100-80GB": 8000, "*": 2000}, now=1.0,
        )  # fmt: skip
        repo.upsert_team(s, "nlp", cohort="research", quotas_milli={"H100-80GB": 4000}, now=1.0)
        repo.ensure_team(s, "adhoc", 2.0)
        repo.ensure_team(s, "vision", 3.0)  # exists: untouched
    with db.session() as s:
        assert [t.name for t in repo.list_teams(s)] == ["adhoc", "nlp", "vision"]
        assert repo.team_quotas(s, "vision") == {"*": 2000, "A100-80GB": 8000}
        grant = DEFAULT_PRIORITY_GRANT  # no grant set: up to "normal"
        assert repo.all_quotas(s) == [
            Quota("adhoc", priority_classes=grant),
            Quota("nlp", {"H100-80GB": 4000}, cohort="research", priority_classes=grant),
            Quota(
                "vision", {"*": 2000, "A100-80GB": 8000}, cohort="research", borrowing_limit_milli=4000, weight=2.0,
                priority_classes=grant,
            ),
        ]  # fmt: skip
        # quotas None: left alone; {}: cleared
        t = repo.upsert_team(s, "vision", weight=3.0, now=5.0)
        assert (t.weight, t.cohort, t.created_at) == (3.0, None, 1.0)
        assert repo.team_quotas(s, "vision") == {"*": 2000, "A100-80GB": 8000}
        repo.upsert_team(s, "vision", quotas_milli={}, now=6.0)
        assert repo.team_quotas(s, "vision") == {}
        with pytest.raises(NotFoundError, match="team 'nobody'"):
            repo.get_team(s, "nobody")
        with pytest.raises(InputError, match="weight"):
            repo.upsert_team(s, "x", weight=0, now=1.0)
        with pytest.raises(InputError, match="quota"):
            repo.upsert_team(s, "x", quotas_milli={"T4": -1}, now=1.0)


def test_tokens(db: Database) -> None:
    with db.session() as s:
        admin, admin_secret = repo.create_token(s, team="ops", role="admin", name="root", now=100.0)
        member, member_secret = repo.create_token(s, team="ml", role="member", expires_at=200.0, now=100.0)
        with pytest.raises(InputError, match="role"):
            repo.create_token(s, team="ml", role="god", now=100.0)
    assert admin_secret.startswith("gpf_") and len(admin_secret) > 40
    assert admin.id.startswith("tok_") and len(admin.id) == 14
    with db.session() as s:
        row = s.scalar(select(Token).where(Token.id == admin.id))
        assert row is not None
        assert row.secret_sha256 == hashlib.sha256(admin_secret.encode()).hexdigest()
        assert admin_secret not in {str(getattr(row, c.key)) for c in Token.__table__.columns}
        auth = repo.authenticate(s, admin_secret, 150.0)
        assert auth is not None and (auth.id, auth.team, auth.role) == (admin.id, "ops", "admin")
        assert repo.authenticate(s, member_secret, 199.0) is not None
        assert repo.authenticate(s, member_secret, 200.0) is None  # expired
        assert repo.authenticate(s, "gpf_wrong", 150.0) is None
        assert [t.id for t in repo.list_tokens(s, team="ml")] == [member.id]
        assert len(repo.list_tokens(s)) == 2
        repo.revoke_token(s, admin.id, 160.0)
        repo.revoke_token(s, admin.id, 170.0)  # again: keeps the first time
        assert repo.authenticate(s, admin_secret, 161.0) is None
        assert repo.list_tokens(s, team="ops")[0].revoked_at == 160.0
        with pytest.raises(NotFoundError):
            repo.revoke_token(s, "tok_nope", 1.0)


# -- jobs -----------------------------------------------------------------------------------------


def test_submit_creates_pending_job_with_event(db: Database) -> None:
    job, created = submit(db, "train", now=10.0, gpus=2, labels={"exp": "a"}, preemptible=True)
    assert created and job.id.startswith("j-") and len(job.id) == 12
    with db.session() as s:
        row = repo.get_job(s, job.id)
        assert (row.state, row.reason, row.submitted_at, row.gpus, row.team) == ("PENDING", "submitted", 10.0, 2, "ml")
        assert row.labels == {"exp": "a"} and row.preemptible is True and row.gpu_milli == 1000
        assert repo.get_team(s, "ml").name == "ml"  # ensured
        events = repo.job_events(s, job.id)
        assert [(e.old, e.new, e.reason, e.time) for e in events] == [(None, "PENDING", "submitted", 10.0)]
        with pytest.raises(NotFoundError, match="j-missing"):
            repo.get_job(s, "j-missing")
        with pytest.raises(InputError, match="bogus"):
            repo.submit_job(
                s, {"name": "x", "command": [], "bogus": 1}, team="ml", submitted_by=None,
                idempotency_key=None, request_sha256=None, now=1.0,
            )  # fmt: skip


@pytest.mark.parametrize(
    ("second_by", "second_body", "outcome"),
    [
        ("tok_a", "h1", "same-job"),
        ("tok_a", "h2", "conflict"),
        ("tok_b", "h2", "new-job"),  # keys are per submitter
    ],
    ids=["same-key-same-body", "same-key-other-body", "other-submitter"],
)
def test_idempotency(db: Database, second_by: str, second_body: str, outcome: str) -> None:
    first, created = submit(db, key="k1", body="h1", by="tok_a")
    assert created
    if outcome == "conflict":
        with pytest.raises(ConflictError, match="Idempotency-Key 'k1' was used for a different request"):
            submit(db, key="k1", body=second_body, by=second_by)
        return
    again, created = submit(db, key="k1", body=second_body, by=second_by)
    assert created is (outcome == "new-job")
    assert (again.id == first.id) is (outcome == "same-job")


def test_concurrent_submissions_with_one_key_make_one_job(db: Database) -> None:
    n = 8
    barrier = threading.Barrier(n)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            barrier.wait()
            job, created = submit(db, key="race", body="same", team="fresh-team")
            with lock:
                results.append((job.id, created))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({job_id for job_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    with db.session() as s:
        jobs, _ = repo.list_jobs(s)
        assert len(jobs) == 1
        assert len(repo.job_events(s, jobs[0].id)) == 1


TRANSITION_SCENARIOS: list[tuple[str, list[str], type[Exception] | None]] = [
    ("run-to-success", ["ADMITTED", "RUNNING", "SUCCEEDED"], None),
    ("preempted-and-requeued", ["ADMITTED", "RUNNING", "PREEMPTED", "PENDING", "ADMITTED"], None),
    ("bind-rolled-back", ["ADMITTED", "PENDING"], None),
    ("cancel-pending", ["CANCELLED"], None),
    ("skip-admission", ["RUNNING"], TransitionError),
    ("leave-terminal", ["CANCELLED", "PENDING"], TransitionError),
    ("unknown-state", ["LIMBO"], TransitionError),
]


@pytest.mark.parametrize(("name", "path", "error"), TRANSITION_SCENARIOS, ids=[s[0] for s in TRANSITION_SCENARIOS])
def test_transitions(db: Database, name: str, path: list[str], error: type[Exception] | None) -> None:
    job, _ = submit(db, now=0.0)
    with db.session() as s:
        row = repo.get_job(s, job.id)
        done: list[str] = []
        for i, state in enumerate(path):
            if error is not None and i == len(path) - 1:
                with pytest.raises(error):
                    repo.transition(s, row, state, "bad", float(i + 1))
                break
            repo.transition(s, row, state, f"step {i}", float(i + 1))
            done.append(state)
    with db.session() as s:
        row = repo.get_job(s, job.id)
        events = repo.job_events(s, job.id)
        assert [e.new for e in events] == ["PENDING", *done]
        assert [e.old for e in events] == [None, *["PENDING", *done][:-1]]
        assert row.state == (done[-1] if done else "PENDING")
        assert (row.ended_at is not None) is JobState(row.state).terminal


def test_transition_sets_fields_and_refuses_stale_state(db: Database) -> None:
    job, _ = submit(db, now=0.0)
    placement = (PodPlacement("n1", (0, 1)),)
    with db.session() as s:
        row = repo.get_job(s, job.id)
        repo.transition(s, row, "ADMITTED", "placed", 5.0, run=1, placement=placement)
        assert row.run == 1 and row.placement == [{"node": "n1", "gpus": [0, 1], "milli": 1000, "mig_mask": 0}]
        with pytest.raises(TypeError):
            repo.transition(s, row, "RUNNING", "x", 6.0, name="renamed")
    stale = job  # detached, still PENDING
    with db.session() as s, pytest.raises(ConflictError, match="changed concurrently"):
        repo.transition(s, stale, "CANCELLED", "late cancel", 7.0)
    with db.session() as s:
        row = repo.get_job(s, job.id)
        assert (row.state, row.run, row.updated_at) == ("ADMITTED", 1, 5.0)
        assert job_from_row(row).placement == placement


def test_request_cancel(db: Database) -> None:
    job, _ = submit(db)
    with db.session() as s:
        assert repo.request_cancel(s, job.id, 3.0).cancel_requested is True
        assert repo.request_cancel(s, job.id, 4.0).updated_at == 4.0  # twice is fine
        assert [j.id for j in repo.changed_since(s, 3.5)] == [job.id]
        repo.transition(s, repo.get_job(s, job.id), "CANCELLED", "user", 5.0)
        with pytest.raises(ConflictError, match="already ended"):
            repo.request_cancel(s, job.id, 6.0)
        with pytest.raises(NotFoundError):
            repo.request_cancel(s, "j-nope", 6.0)


def test_controller_queries(db: Database) -> None:
    a, _ = submit(db, "a", now=1.0)
    b, _ = submit(db, "b", now=2.0)
    c, _ = submit(db, "c", now=3.0)
    move(db, b.id, "ADMITTED", "RUNNING", now=4.0)
    with db.session(readonly=True) as s:
        assert [j.id for j in repo.jobs_after(s, a.seq, ["PENDING"])] == [c.id]
        assert [j.id for j in repo.jobs_after(s, 0, ["PENDING", "RUNNING"])] == [a.id, b.id, c.id]
        assert [j.id for j in repo.jobs_in_states(s, ["RUNNING"])] == [b.id]
        assert [j.id for j in repo.changed_since(s, 2.5)] == [b.id, c.id]


def _make_listing(db: Database) -> list[JobRow]:
    """40 jobs over 3 teams, 2 projects, 2 label keys (one with dots and a slash) and 3 states."""
    jobs = []
    for i in range(40):
        labels = {"app.kubernetes.io/name": f"m{i % 3}"}
        if i % 2:
            labels["exp"] = f"e{i % 4}"
        job, _ = submit(db, f"job{i}", team=f"t{i % 3}", now=float(i), project=f"p{i % 2}", labels=labels)
        if i % 5 == 0:
            move(db, job.id, "ADMITTED", "RUNNING", now=100.0)
        elif i % 7 == 0:
            move(db, job.id, "CANCELLED", now=100.0)
        jobs.append(job)
    with db.session(readonly=True) as s:
        return repo.list_jobs(s, limit=1000)[0]


filters = st.fixed_dictionaries(
    {},
    optional={
        "teams": st.lists(st.sampled_from(["t0", "t1", "t2", "tx"]), max_size=2, unique=True),
        "states": st.lists(st.sampled_from(["PENDING", "RUNNING", "CANCELLED"]), max_size=2, unique=True),
        "project": st.sampled_from(["p0", "p1", "px"]),
        "labels": st.dictionaries(
            st.sampled_from(["app.kubernetes.io/name", "exp"]), st.sampled_from(["m0", "m1", "e1", "e3"]), max_size=2
        ),
    },
)


def test_list_jobs_pages_concatenate_to_the_filtered_list(db: Database) -> None:
    all_jobs = _make_listing(db)
    assert [j.seq for j in all_jobs] == sorted((j.seq for j in all_jobs), reverse=True)

    def expected(f: dict[str, Any]) -> list[str]:
        return [
            j.id
            for j in all_jobs
            if ("teams" not in f or j.team in f["teams"])
            and ("states" not in f or j.state in f["states"])
            and ("project" not in f or j.project == f["project"])
            and all(j.labels.get(k) == v for k, v in f.get("labels", {}).items())
        ]

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(f=filters, limit=st.integers(1, 9))
    def check(f: dict[str, Any], limit: int) -> None:
        got: list[str] = []
        cursor: int | None = None
        with db.session(readonly=True) as s:
            for _ in range(100):
                page, cursor = repo.list_jobs(s, cursor=cursor, limit=limit, **f)
                assert len(page) <= limit
                got += [j.id for j in page]
                if cursor is None:
                    break
                assert len(page) == limit
        assert len(got) == len(set(got))
        assert got == expected(f)

    check()


def test_list_jobs_rejects_bad_limit(db: Database) -> None:
    with db.session() as s, pytest.raises(InputError, match="limit"):
        repo.list_jobs(s, limit=0)


# -- runs -----------------------------------------------------------------------------------------


def test_run_lifecycle(db: Database) -> None:
    job, _ = submit(db, gpus=1)
    pl = placement_to_json((PodPlacement("n1", (3,)),))
    with db.session() as s:
        run = repo.open_run(
            s, job_id=job.id, run=1, node="n1", placement=pl, capacity_type="spot", node_hourly_usd=4.0, now=10.0
        )
        again = repo.open_run(
            s, job_id=job.id, run=1, node="n2", placement=[], capacity_type="spot", node_hourly_usd=9.0, now=11.0
        )
        assert again.node == "n1" and run.admitted_at == 10.0
        assert repo.get_run(s, job.id, 2) is None
    with db.session() as s:
        repo.mark_run_started(s, job.id, 1, pid=4242, started_at=10.5)
        repo.request_stop(s, job.id, 1, "preempted by j-x")
        repo.request_stop(s, job.id, 1, "cancelled")  # the first reason stays
        assert [(r.job_id, r.run, r.pid) for r in repo.open_runs(s)] == [(job.id, 1, 4242)]
    with db.session() as s:
        ended = repo.end_run(
            s, job.id, 1, outcome="stopped", exit_code=None, reason="SIGTERM", started_at=10.5, ended_at=20.0
        )
        assert (ended.outcome, ended.ended_at, ended.stop_requested) == ("stopped", 20.0, "preempted by j-x")
        replay = repo.end_run(
            s, job.id, 1, outcome="failed", exit_code=1, reason="late", started_at=None, ended_at=30.0
        )
        assert (replay.outcome, replay.ended_at) == ("stopped", 20.0)
        assert repo.open_runs(s) == []
        with pytest.raises(NotFoundError):
            repo.mark_run_started(s, job.id, 9, pid=1, started_at=1.0)


# -- nodes ----------------------------------------------------------------------------------------


def test_upsert_node_splits_intervals_on_price_and_shape_changes(db: Database) -> None:
    node = gpu_node(pool="a100", capacity_type=CapacityType.SPOT, sharing=SharingMode.MIG, labels={"zone": "b"})
    with db.session() as s:
        repo.upsert_node(s, node, hourly_usd=8.0, now=0.0)
        repo.upsert_node(s, node, hourly_usd=8.0, now=10.0)  # unchanged: same interval
        repo.upsert_node(s, node, hourly_usd=16.0, now=1800.0)  # price change
        node.gpu_count = 4
        repo.upsert_node(s, node, hourly_usd=16.0, now=2000.0)  # shape change
        spans = [(i.start, i.end, i.hourly_usd, i.gpu_count) for i in repo.node_intervals(s, "n1")]
        assert spans == [(0.0, 1800.0, 8.0, 8), (1800.0, 2000.0, 16.0, 8), (2000.0, None, 16.0, 4)]
        back = node_from_row(repo.list_nodes(s)[0])
        assert back == Node("n1", "A100-80GB", 4, 0, 0, "a100", CapacityType.SPOT, 16.0, SharingMode.MIG, {"zone": "b"})
        repo.remove_node(s, "n1", 3000.0)
        repo.remove_node(s, "n1", 3100.0)  # idempotent
        assert repo.list_nodes(s) == [] and len(repo.list_nodes(s, include_removed=True)) == 1
        assert repo.node_intervals(s, "n1")[-1].end == 3000.0
        repo.upsert_node(s, node, hourly_usd=16.0, now=4000.0)  # comes back
        assert [n.state for n in repo.list_nodes(s)] == ["ready"]
        assert [(i.start, i.end) for i in repo.node_intervals(s, "n1")][-1] == (4000.0, None)
        with pytest.raises(NotFoundError):
            repo.remove_node(s, "ghost", 1.0)


def test_a_nodes_gpu_facts_round_trip(db: Database) -> None:
    """Issue 21: how a node's GPUs are shared is a column of its row (``nodes.gpu_facts``), not labels;
    the default (unshared, nvidia.com/gpu) is stored as NULL."""
    shared = GpuSharingFacts("nvidia.com/gpu.shared", replicas=4, strategy="mps")
    mig = GpuSharingFacts(None, mig_strategy="mixed", mig_profiles=(("1g.10gb", 7), ("3g.40gb", 2)), whole_gpus=1)
    with db.session() as s:
        for name, facts in (("ts", shared), ("mig", mig), ("plain", GpuSharingFacts())):
            repo.upsert_node(s, gpu_node(name, labels={"zone": "b"}, gpu_facts=facts), hourly_usd=1.0, now=0.0)
        rows = {r.name: r for r in repo.list_nodes(s)}
        assert rows["plain"].gpu_facts is None and rows["ts"].labels == {"zone": "b"}
        assert {n: node_from_row(r).gpu_facts for n, r in rows.items()} == {
            "ts": shared,
            "mig": mig,
            "plain": GpuSharingFacts(),
        }


# the labels the Kubernetes node reader used to add to nodes.labels (before migration 0012)
_OLD_LABELS: dict[str, dict[str, str]] = {
    "ts": {
        "node.kubernetes.io/instance-type": "g6.xlarge",
        "gpufleet.io/instance-type": "g6.xlarge",
        "gpufleet.io/gpu-resource": "nvidia.com/gpu",
        "gpufleet.io/gpu-replicas": "4",
        "gpufleet.io/replica-milli": "250",
        "gpufleet.io/sharing-strategy": "time-slicing",
    },
    "mig": {
        "topology.kubernetes.io/region": "us-east-1",
        "gpufleet.io/region": "us-east-1",
        "gpufleet.io/gpu-resource": "nvidia.com/gpu",
        "gpufleet.io/mig-strategy": "mixed",
        "gpufleet.io/mig-profiles": "1g.10gb:7,3g.40gb:2",
        "gpufleet.io/whole-gpus": "1",
    },
    "slices": {"gpufleet.io/mig-strategy": "single", "gpufleet.io/mig-profiles": "1g.5gb:56"},
    "excl": {"gpufleet.io/gpu-resource": "nvidia.com/gpu"},  # an unshared node: the default facts
    "plain": {"zone": "b"},
    "local": {"gpufleet.io/backend": "local", "gpufleet.io/gpu-source": "nvml"},
}


def test_migration_0012_moves_the_invented_labels_into_gpu_facts(empty_db_url: str) -> None:
    """The reader's invented ``gpufleet.io/*`` labels become ``gpu_facts`` (and its copies of the
    instance type and region go); the downgrade puts them back."""
    import sqlalchemy as sa
    from alembic import command

    nodes = sa.table(
        "nodes",
        *(sa.column(c) for c in ("name", "gpu_model", "pool", "capacity_type", "sharing", "state")),
        *(sa.column(c, sa.Integer) for c in ("gpu_count", "cpu_milli", "memory_mib")),
        *(sa.column(c, sa.Float) for c in ("hourly_price_usd", "added_at")),
        sa.column("labels", sa.JSON),
    )
    db = Database(empty_db_url)
    try:
        db.upgrade("0011")
        with db.engine.begin() as conn:
            for name, labels in _OLD_LABELS.items():
                conn.execute(
                    nodes.insert().values(
                        name=name, gpu_model="L4", gpu_count=1, cpu_milli=0, memory_mib=0, pool="p",
                        capacity_type="on-demand", sharing="shared", hourly_price_usd=1.0, state="ready",
                        added_at=0.0, labels=labels,
                    )
                )  # fmt: skip
        db.upgrade()
        with db.session(readonly=True) as s:
            got = {r.name: (r.labels, node_from_row(r).gpu_facts) for r in repo.list_nodes(s)}
        assert got == {
            "ts": (
                {"node.kubernetes.io/instance-type": "g6.xlarge"},
                GpuSharingFacts(replicas=4, strategy="time-slicing"),
            ),
            "mig": (
                {"topology.kubernetes.io/region": "us-east-1"},
                GpuSharingFacts(mig_strategy="mixed", mig_profiles=(("1g.10gb", 7), ("3g.40gb", 2)), whole_gpus=1),
            ),
            "slices": ({}, GpuSharingFacts(None, mig_strategy="single", mig_profiles=(("1g.5gb", 56),))),
            "excl": ({}, GpuSharingFacts()),
            "plain": ({"zone": "b"}, GpuSharingFacts()),
            "local": (_OLD_LABELS["local"], GpuSharingFacts()),
        }
        with db.session(readonly=True) as s:  # what the code writes for these facts is what the migration wrote
            rows = {r.name: r for r in repo.list_nodes(s)}
            for r in rows.values():
                assert r.gpu_facts == gpu_facts_to_json(node_from_row(r).gpu_facts), r.name
        with db.engine.connect() as conn, conn.begin():
            command.downgrade(db._alembic_config(conn), "0011")
        with db.engine.connect() as conn:
            back = {name: labels for name, labels in conn.execute(sa.select(nodes.c.name, nodes.c.labels))}
        # all as they were, but the default's gpu-resource (NULL facts: read the same without the label)
        assert back == {**_OLD_LABELS, "excl": {}}
        db.upgrade()
        db.check_schema()
    finally:
        db.dispose()


# -- the ledger -----------------------------------------------------------------------------------


def _run_job(
    db: Database, name: str, node: str, start: float, end: float | None, *, team: str, pods: int = 1, **fields: Any
) -> JobRow:
    """A job that ran (or still runs, ``end=None``) on ``node``; ends append a usage segment."""
    job, _ = submit(db, name, team=team, **fields)
    with db.session() as s:
        row = repo.get_job(s, job.id)
        pl = [{"node": node, "gpus": [], "milli": 1000, "mig_mask": 0}] * pods
        repo.open_run(
            s, job_id=row.id, run=1, node=node, placement=pl, capacity_type="on-demand", node_hourly_usd=0, now=start
        )
        repo.mark_run_started(s, row.id, 1, pid=1, started_at=start)
        if end is not None:
            repo.end_run(s, row.id, 1, outcome="succeeded", exit_code=0, reason="", started_at=start, ended_at=end)
            node_row = next(n for n in repo.list_nodes(s, include_removed=True) if n.name == node)
            units = pods * fields.get("gpus", 0) * 7000 if not fields.get("mig_profile") else 1000
            if fields.get("gpu_milli", 1000) < 1000:
                units = fields["gpu_milli"] * 7
            seg = dict(
                job=row, run=1, node=node_row, gpu_share_units=units, cpu_milli=0, memory_mib=0,
                node_hourly_usd=node_row.hourly_price_usd, capacity_type="on-demand", start=start, end=end,
            )  # fmt: skip
            first = repo.append_segment(s, **seg)  # type: ignore[arg-type]
            again = repo.append_segment(s, **{**seg, "end": end + 999})  # type: ignore[arg-type]
            assert again.id == first.id and again.end == end  # idempotent
        return row


def test_ledger_from_store_hand_computed(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    """n8: 8 GPUs at $8/h ($1 per GPU-hour); m1: one A100-80GB at $7/h. Window [0, 3600], now 3600.

    | job | team | holds                     | when        | cost  |
    | a   | ml   | 2 whole GPUs on n8         | 0–1800      | $1.00 |
    | b   | ml   | 1 GPU on n8, still running | 1800–now    | $0.50 |
    | c   | cv   | 500 milli-GPU on n8        | 0–3600      | $0.50 |
    | d   | cv   | MIG 1g.10gb on m1 (1/7)    | running     | $1.00 |
    | e   | cv   | 1 GPU on a node never recorded | 0–100   | skipped, warned |
    Idle: n8 $8 − $2 = $6.00; m1 $7 − $1 = $6.00. Total $15.00.
    """
    with db.session() as s:
        repo.upsert_node(s, gpu_node("n8"), hourly_usd=8.0, now=0.0)
        repo.upsert_node(s, gpu_node("m1", gpus=1, sharing=SharingMode.MIG), hourly_usd=7.0, now=0.0)
        repo.upsert_node(s, gpu_node("ghost", gpus=1), hourly_usd=1.0, now=5000.0)
    a = _run_job(db, "a", "n8", 0.0, 1800.0, team="ml", gpus=2)
    b = _run_job(db, "b", "n8", 1800.0, None, team="ml", gpus=1)
    c = _run_job(db, "c", "n8", 0.0, 3600.0, team="cv", gpus=1, gpu_milli=500)
    d = _run_job(db, "d", "m1", 0.0, None, team="cv", gpus=1, mig_profile="1g.10gb", gpu_types=["A100-80GB"])
    _run_job(db, "e", "ghost", 0.0, 100.0, team="cv", gpus=1)
    with db.session(readonly=True) as s, caplog.at_level(logging.WARNING, logger="gpufleet.store.repo"):
        ledger = repo.load_ledger(s, 0.0, 3600.0, now=3600.0)
    assert "outside every recorded interval" in caplog.text
    by_job = allocate(ledger, 0.0, 3600.0, ("job_id",))
    costs = {r.key[0]: r.total_cost_usd for r in by_job.rows}
    assert costs == {a.id: Decimal("1.00"), b.id: Decimal("0.50"), c.id: Decimal("0.50"), d.id: Decimal("1.00")}
    assert by_job.idle.total_cost_usd == Decimal("12.00")
    assert by_job.totals.total_cost_usd == Decimal("15.00")
    by_team = allocate(ledger, 0.0, 3600.0, ("team",))
    assert {r.key[0]: r.total_cost_usd for r in by_team.rows} == {"ml": Decimal("1.50"), "cv": Decimal("1.50")}
    assert sum(r.total_cost_usd for r in by_team.rows) + by_team.idle.total_cost_usd == by_team.totals.total_cost_usd
    # A window in the middle: [900, 2700] → a holds 2 GPUs for 900 s ($0.50), b 1 GPU for 900 s ($0.25).
    with db.session(readonly=True) as s:
        mid = allocate(repo.load_ledger(s, 900.0, 2700.0, now=3600.0), 900.0, 2700.0, ("job_id",))
    assert mid.by_key()[(a.id,)].total_cost_usd == Decimal("0.50")
    assert mid.by_key()[(b.id,)].total_cost_usd == Decimal("0.25")
    assert mid.totals.total_cost_usd == Decimal("7.50")


def test_ledger_bills_each_part_of_a_run_at_its_interval_price(db: Database) -> None:
    """8 GPUs held for an hour; the node's price doubles at 30 min: $4 + $8 = $12, no idle."""
    with db.session() as s:
        repo.upsert_node(s, gpu_node("n8"), hourly_usd=8.0, now=0.0)
    job = _run_job(db, "big", "n8", 0.0, 3600.0, team="ml", gpus=8)
    with db.session() as s:
        repo.upsert_node(s, gpu_node("n8"), hourly_usd=16.0, now=1800.0)
    with db.session(readonly=True) as s:
        alloc = allocate(repo.load_ledger(s, 0.0, 3600.0, now=3600.0), 0.0, 3600.0, ("job_id",))
    assert alloc.by_key()[(job.id,)].total_cost_usd == Decimal("12.00")
    assert alloc.idle.total_cost_usd == Decimal("0.00")


def test_open_run_with_two_pods_on_one_node(db: Database) -> None:
    with db.session() as s:
        repo.upsert_node(s, gpu_node("n8"), hourly_usd=8.0, now=0.0)
    job = _run_job(db, "gang", "n8", 0.0, None, team="ml", gpus=2, pods=2)
    with db.session(readonly=True) as s:
        alloc = allocate(repo.load_ledger(s, 0.0, 3600.0, now=1800.0), 0.0, 3600.0, ("job_id",))
    assert alloc.by_key()[(job.id,)].total_cost_usd == Decimal("2.00")  # 4 GPUs x 0.5 h x $1
    assert alloc.totals.total_cost_usd == Decimal("4.00")  # the node until now


# -- telemetry and controllers --------------------------------------------------------------------


def test_gpu_samples_and_job_stats(db: Database) -> None:
    samples = [
        GpuSample(10.0, "n1", 0, "GPU-0", 80.0, 30000.0, 81920.0, {"j-a": 20000.0, "j-b": 10000.0}),
        GpuSample(20.0, "n1", 0, "GPU-0", 40.0, 50000.0, 81920.0, {"j-a": 40000.0}),
        GpuSample(20.0, "n1", 1, "GPU-1", 0.0, 0.0, 81920.0),
    ]
    with db.session() as s:
        assert repo.record_gpu_samples(s, samples) == 6
        repo.record_gpu_samples(s, [])
    with db.session(readonly=True) as s:
        stats = repo.job_gpu_stats(s, "j-a")
        assert stats == {
            "samples": 2,
            "mean_utilization_pct": 60.0,
            "max_memory_mib": 40000.0,
            "first_sample_at": 10.0,
            "last_sample_at": 20.0,
        }
        assert repo.job_gpu_stats(s, "j-none")["samples"] == 0


def test_heartbeat_and_leader_staleness(db: Database) -> None:
    with db.session() as s:
        repo.heartbeat(s, "r1", is_leader=True, now=100.0, cycle_ms=3.5, queue=[{"job": "j-1", "position": 1}])
        repo.heartbeat(s, "r2", is_leader=False, now=101.0)
    with db.session() as s:
        lead = repo.leader(s, 110.0)
        assert lead is not None and lead.replica == "r1" and lead.queue == [{"job": "j-1", "position": 1}]
        assert repo.leader(s, 115.1) is None  # stale after 15 s
        repo.heartbeat(s, "r1", is_leader=True, now=120.0)  # keeps queue and cycle time
    with db.session() as s:
        lead = repo.leader(s, 121.0)
        assert lead is not None and (lead.heartbeat_at, lead.started_at, lead.last_cycle_ms) == (120.0, 100.0, 3.5)
        assert lead.queue == [{"job": "j-1", "position": 1}]
        assert [c.replica for c in repo.list_controllers(s)] == ["r1", "r2"]


# -- conversions ----------------------------------------------------------------------------------

CONVERT_SCENARIOS: list[tuple[str, dict[str, Any], GpuRequest]] = [
    ("cpu-only", {"gpus": 0}, GpuRequest(count=0)),
    ("two-whole", {"gpus": 2}, GpuRequest(count=2)),
    ("fraction", {"gpus": 1, "gpu_milli": 250}, GpuRequest(count=1, milli=250)),
    ("mig-typed", {"gpus": 1, "mig_profile": "1g.5gb", "gpu_types": ["A100-40GB"]}, GpuRequest(1, 143, "1g.5gb")),
    ("mig-untyped", {"gpus": 1, "mig_profile": "3g.40gb"}, GpuRequest(1, 429, "3g.40gb")),
]


@pytest.mark.parametrize(("name", "fields", "gpu"), CONVERT_SCENARIOS, ids=[c[0] for c in CONVERT_SCENARIOS])
def test_job_spec_from_row(name: str, fields: dict[str, Any], gpu: GpuRequest) -> None:
    values: dict[str, Any] = dict(
        id="j-x", name=name, team="ml", project="p", namespace="default", experiment="", labels={"a": "b"},
        priority_class="high", command=["x"], env={}, gpu_milli=1000, gpu_types=[], min_gpu_memory_gib=0.0,
        cpu_milli=1000, memory_mib=512, preemptible=True, state="RUNNING", submitted_at=5.0, restarts=2,
        preemptions=1, placement=[{"node": "n1", "gpus": [1], "milli": 250, "mig_mask": 0}], updated_at=5.0,
        mig_profile=None,
    )  # fmt: skip
    row = JobRow(**{**values, **fields})
    spec = job_spec_from_row(row)
    assert spec.gpu == gpu and spec.team == "ml" and spec.priority == 500 and spec.labels == {"a": "b"}
    job = job_from_row(row, run_started_at=7.0)
    assert (job.state, job.restarts, job.preemptions, job.submit_time, job.start_time) == (
        JobState.RUNNING, 2, 1, 5.0, 7.0,
    )  # fmt: skip
    assert job.placement == (PodPlacement("n1", (1,), 250),) == placement_from_json(row.placement)


# -- the CLI --------------------------------------------------------------------------------------


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(db_app, name="db")

    @app.callback()
    def main() -> None:  # a group, so "db" is a subcommand
        pass

    return app


def test_cli_db_upgrade_and_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    app = _cli()
    url = f"sqlite:///{tmp_path / 'sub' / 'g.db'}"
    res = runner.invoke(app, ["db", "current", "--db", url])
    assert res.exit_code == 0, res.output
    assert "(empty)" in res.output and "needs 'gpufleet db upgrade'" in res.output
    res = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert res.exit_code == 0, res.output
    assert f"upgraded (empty) → {HEAD}" in " ".join(res.output.split())
    res = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert res.exit_code == 0 and f"already at {HEAD}" in " ".join(res.output.split())
    monkeypatch.setenv("GPUFLEET_DB", url)  # the default store
    res = runner.invoke(app, ["db", "current"])
    assert res.exit_code == 0 and f"{HEAD} (head {HEAD}; up to date)" in " ".join(res.output.split())
    monkeypatch.setenv("GPUFLEET_DB", "postgresql+psycopg://u:pw@127.0.0.1:1/x")  # a password: env, not argv
    res = runner.invoke(app, ["db", "upgrade"])
    assert res.exit_code == 5
    assert "cannot" in res.output and "u:***@" in res.output and ":pw@" not in res.output


# -- the repository facade ------------------------------------------------------------------------


def test_repo_is_a_facade_over_one_module_per_aggregate() -> None:
    """``gpufleet.store.repo`` re-exports every public function of its aggregate modules (the
    same objects: no duplicate definitions), and defines none itself."""
    import importlib
    import inspect
    import pkgutil

    modules = [m.name for m in pkgutil.iter_modules(repo.__path__) if not m.name.startswith("_")]
    assert {"teams", "tokens", "jobs", "runs", "nodes", "segments", "gpu_samples", "controllers"} <= set(modules)
    for name in modules:
        module = importlib.import_module(f"gpufleet.store.repo.{name}")
        assert module.__doc__ and len(module.__doc__.strip().splitlines()) == 1, f"{name}: a one-line docstring"
        for fn_name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not fn_name.startswith("_"):
                assert getattr(repo, fn_name, None) is fn, f"repo.{fn_name} is not re-exported from {name}"
                assert fn_name in repo.__all__
    own = [n for n, f in inspect.getmembers(repo, inspect.isfunction) if f.__module__ == repo.__name__]
    assert own == []


def test_a_runs_end_reads_only_the_nodes_it_ran_on(db: Database) -> None:
    """The leader meters each run's end: it read every node ever recorded to price the run's few
    shares (at 1,000 nodes, ~1,000 rows per run end, seen in benchmarks/k8s_scale.py's recovery)."""
    from sqlalchemy import event

    from gpufleet.control.sqlstate import SqlState
    from gpufleet.loop.metering import Share
    from gpufleet.store.models import NodeRow

    with db.session() as s:
        for i in range(40):
            repo.upsert_node(s, Node(f"n{i:02d}", gpu_model="A100-80GB", gpu_count=8), hourly_usd=8.0, now=0.0)
    row = _run_job(db, "metered", "n07", 0.0, None, team="ml", gpus=1)
    loaded: list[str] = []

    def count(target: NodeRow, _ctx: Any) -> None:
        loaded.append(target.name)

    event.listen(NodeRow, "load", count)
    try:
        with db.session() as s:
            job = repo.get_job(s, row.id)
            SqlState(db)._meter(s, job, 1, (Share("n07", 7000, 0, 0), Share("n07", 7000, 0, 0)), 0.0, 60.0)
    finally:
        event.remove(NodeRow, "load", count)
    assert loaded == ["n07"]
    with db.session(readonly=True) as s:
        assert repo.job_segment_spans(s, row.id) != []
