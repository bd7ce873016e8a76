"""The validating admission webhook (docs/admission-webhook.md) over real HTTPS.

A CA and a server certificate are made with ``cryptography``; the webhook is started as ``gpufleet up``
starts it (:class:`gpufleet.k8s.webhook.WebhookServer`, and once as a real ``gpufleet up``) and
called with httpx verifying against the CA. Every scenario gets a fresh store (SQLite and PostgreSQL,
``tests/conftest.py``) holding teams, priced nodes, metered spend and budgets; the AdmissionReviews
are what the API server sends for Pods and ``batch/v1`` Jobs.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import httpx
import pytest
import yaml
from celpy.adapter import json_to_cel
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import update

from gpufleet.clock import SimClock
from gpufleet.cost.budgets.model import make_budget
from gpufleet.k8s.review import (
    NodeKind,
    ReviewRequest,
    Workload,
    cheapest_fit,
    inspect,
    parse_duration,
)
from gpufleet.k8s.webhook import WebhookServer, start_webhook
from gpufleet.model.node import Node, SharingMode
from gpufleet.server.settings import Settings
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobRow, Team
from gpufleet.store.repo import budgets as budgets_repo
from tests.support.paths import REPO
from tests.support.serverproc import ServerProcess, free_port

ROOT = REPO
CHART = ROOT / "deploy" / "helm" / "gpufleet"
HELM = ROOT / "build" / "helm" / "helm"
T0 = dt.datetime(2025, 3, 15, 12, 0, tzinfo=dt.UTC).timestamp()  # mid-month: the spend is in the period


# -- TLS: a CA and a certificate for 127.0.0.1 ------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_tls(folder: Path, *, cn: str = "gpufleet-webhook") -> Tls:
    import ipaddress

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("gpufleet test CA"))
        .issuer_name(_name("gpufleet test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    tls = Tls(folder / "ca.crt", folder / "tls.crt", folder / "tls.key")
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tls


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("webhook-tls"))


# -- AdmissionReviews -----------------------------------------------------------------------------------


def pod(
    namespace: str,
    name: str = "train-0",
    *,
    gpus: int = 1,
    resource: str = "nvidia.com/gpu",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    if gpus:
        resources["limits"] = {resource: str(gpus)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "python:3.11-slim", "resources": resources}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def job(namespace: str, name: str = "train", *, parallelism: int = 2, **kw: Any) -> dict[str, Any]:
    template = pod(namespace, name, **kw)
    del template["metadata"]["name"], template["metadata"]["namespace"]
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": template},
    }


_UIDS = iter(range(1, 1_000_000))


def review(obj: dict[str, Any], operation: str = "CREATE", *, dry_run: bool = False) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    resource = {"Pod": "pods", "Job": "jobs"}[obj["kind"]]
    request: dict[str, Any] = {
        "uid": f"705ab4f5-6393-11e8-b7cc-{next(_UIDS):012d}",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": obj if operation == "UPDATE" else None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# -- the store: teams, priced nodes, spend, budgets ------------------------------------------------------


def add_node(db: Database, name: str, model: str, gpus: int, usd: float, now: float) -> None:
    with db.session() as s:
        repo.upsert_node(s, Node(name=name, gpu_model=model, gpu_count=gpus), hourly_usd=usd, now=now)


def add_spend(db: Database, team: str, usd: float, *, namespace: str = "default", end: float = T0 - 600) -> None:
    """A finished job of ``team`` in ``namespace`` that cost ``usd`` on a dear node gone since."""
    node_usd = 36_000.0  # $1 every 0.1 s: the spend fits in the minutes before T0
    gone = f"gone-{team}"
    add_node(db, gone, "A100-80GB", 8, node_usd, T0 - 86_400)
    start = end - usd * 3600.0 / node_usd
    with db.session() as s:
        fields = {"name": "spent", "command": ["true"], "gpus": 8, "namespace": namespace}
        row, _ = repo.submit_job(
            s, fields, team=team, submitted_by=None, idempotency_key=None, request_sha256=None, now=start
        )
        node = next(n for n in repo.list_nodes(s) if n.name == gone)
        repo.append_segment(
            s, job=row, run=1, node=node, gpu_share_units=8 * 7000, cpu_milli=0, memory_mib=0,
            node_hourly_usd=node_usd, capacity_type="on-demand", start=start, end=end,
        )  # fmt: skip
        s.execute(update(JobRow).where(JobRow.id == row.id).values(state="SUCCEEDED", ended_at=end))
    with db.session() as s:
        repo.remove_node(s, gone, end + 1)  # its price must not price the estimates


def add_budget(db: Database, name: str, scope: str, limit: float, **kw: Any) -> None:
    with db.session() as s:
        budgets_repo.create_budget(
            s, make_budget(id="", name=name, scope=scope, limit_usd=limit, **kw), created_by=None, now=T0 - 86_400
        )


def seed(db: Database) -> None:
    """Teams vision (over its block budget), nlp (namespace nlp-lab, over its namespace budget),
    research (over an alert budget; may use high), audio and speech (no spend); an A100 node at $1
    per GPU-hour and an L4 node at $0.50."""
    with db.session() as s:
        for team in ("vision", "nlp", "research", "audio", "speech"):
            repo.ensure_team(s, team, T0 - 86_400)
    with db.session() as s:
        research = s.get(Team, "research")
        assert research is not None
        research.priority_classes = ["background", "low", "normal", "high"]
    add_node(db, "a100-0", "A100-80GB", 8, 8.0, T0 - 86_400)
    add_node(db, "l4-0", "L4", 4, 2.0, T0 - 86_400)
    add_spend(db, "vision", 1020.0)
    add_spend(db, "nlp", 60.0, namespace="nlp-lab")
    add_spend(db, "research", 50.0)
    add_budget(db, "vision-monthly", "team:vision", 1000.0, action="block")
    add_budget(db, "lab-monthly", "namespace:nlp-lab", 50.0, team="nlp", action="block")
    add_budget(db, "research-alert", "team:research", 10.0, action="alert")
    add_budget(db, "bert-project", "project:bert", 500.0, team="nlp", action="alert")
    add_budget(db, "speech-grace", "team:speech", 0.10, action="block", grace_s=3600.0)


def webhook_settings(tmp: Path, tls: Tls, **webhook: Any) -> Settings:
    return Settings(
        home=tmp / "home",
        kubernetes={"namespaces": {"nlp": "nlp-lab"}},
        webhook={"enabled": True, "host": "127.0.0.1", "port": free_port(), "cert_file": tls.cert,
                 "key_file": tls.key, **webhook},
    )  # fmt: skip


@dataclass
class Hook:
    server: WebhookServer
    tls: Tls
    db: Database
    calls: list[float] = field(default_factory=list)

    def post(self, body: Any, *, raw: bytes | None = None) -> httpx.Response:
        with httpx.Client(verify=self.tls.context(), timeout=30.0) as c:
            t = time.monotonic()
            content = raw if raw is not None else json.dumps(body).encode()
            r = c.post(self.server.url + "/validate", content=content, headers={"Content-Type": "application/json"})
            self.calls.append(time.monotonic() - t)
            return r

    def review(self, obj: dict[str, Any], operation: str = "CREATE", *, dry_run: bool = False) -> dict[str, Any]:
        sent = review(obj, operation, dry_run=dry_run)
        r = self.post(sent)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
        assert out["response"]["uid"] == sent["request"]["uid"]  # echoed
        return dict(out["response"])


@contextmanager
def serving(tmp: Path, tls: Tls, db: Database, **webhook: Any) -> Iterator[Hook]:
    """The webhook started as `gpufleet up` starts it (its clock at T0)."""
    server = WebhookServer(webhook_settings(tmp, tls, **webhook), db, clock=SimClock(T0))
    server.start()
    try:
        yield Hook(server, tls, db)
    finally:
        server.stop()


@pytest.fixture
def hook(tmp_path: Path, tls: Tls, db: Database) -> Iterator[Hook]:
    seed(db)
    with serving(tmp_path, tls, db) as h:
        yield h


# -- the scenarios --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    obj: dict[str, Any] | Callable[[Hook], dict[str, Any]]
    allowed: bool
    message: tuple[str, ...] = ()  # in status.message
    warnings: tuple[str, ...] = ()  # each in one of the warnings
    operation: str = "CREATE"
    no_warnings: bool = False


def _own_pod(h: Hook) -> dict[str, Any]:
    """A pod of a job gpufleet created (its submit judged it): a queued job of vision."""
    with h.db.session() as s:
        row, _ = repo.submit_job(
            s, {"name": "api", "command": ["x"], "gpus": 1}, team="vision", submitted_by=None,
            idempotency_key=None, request_sha256=None, now=T0 - 5,
        )  # fmt: skip
    return pod("vision", "gf-x-r1-0", annotations={"gpufleet.io/job-id": row.id}, labels={"team": "vision"})


RUNTIME, LIMIT = "gpufleet.io/estimated-runtime", "gpufleet.io/cost-limit"
CASES: dict[str, Case] = {
    "blocked team budget": Case(
        pod("vision"),
        False,
        ("budget 'vision-monthly' blocks team vision: $1,020.00 spent of $1,000.00 limit", "this pod would cost"),
    ),
    "blocked namespace budget": Case(
        pod("nlp-lab", "bert-0"),
        False,
        ("budget 'lab-monthly' blocks namespace nlp-lab: $60.00 spent of $50.00 limit",),
    ),
    "alert-only budget: allowed with a warning": Case(
        pod("research"),
        True,
        warnings=("budget 'research-alert' (alert only) for team research: $50.00 spent of $10.00",),
    ),
    "cost limit exceeded": Case(
        pod("audio", gpus=2, annotations={LIMIT: "1.50", RUNTIME: "2h"}),
        False,
        ("pod audio/train-0 would cost about $2.00, over its own cost limit of $1.50", "2 GPUs for 2h", "(4xL4)"),
    ),
    "cost limit within the estimate": Case(
        pod("audio", annotations={LIMIT: "$1", RUNTIME: "3600"}), True, no_warnings=True
    ),
    "cost limit without a runtime: allowed, not checked": Case(
        pod("audio", annotations={LIMIT: "0.01"}),
        True,
        warnings=("$0.01 not checked: no gpufleet.io/estimated-runtime",),
    ),
    "priority class not allowed": Case(
        pod("audio", priority_class="gpufleet-urgent"), False, ("team 'audio' may not use priority class 'urgent'",)
    ),
    "priority class granted": Case(pod("research", priority_class="gpufleet-high"), True),
    "non-GPU pod": Case(pod("vision", gpus=0), True, no_warnings=True),
    "GPU request of 0": Case(pod("vision", gpus=0, resource="nvidia.com/gpu"), True, no_warnings=True),
    "not a gpufleet namespace": Case(pod("sandbox"), True, no_warnings=True),
    "namespace of a team mapped elsewhere": Case(pod("nlp"), True, no_warnings=True),
    "UPDATE": Case(pod("vision"), True, operation="UPDATE", no_warnings=True),
    "DELETE": Case(pod("vision"), True, operation="DELETE", no_warnings=True),
    "a Job whose template is blocked": Case(
        job("vision"), False, ("budget 'vision-monthly' blocks team vision: $1,020.00 spent", "this job would cost")
    ),
    "a Job within its budgets": Case(job("audio", annotations={LIMIT: "100", RUNTIME: "1h"}), True, no_warnings=True),
    "a Job over its own cost limit": Case(
        job("audio", parallelism=4, annotations={LIMIT: "1", RUNTIME: "1h"}),
        False,
        ("job audio/train would cost about $2.00, over its own cost limit of $1.00", "4 GPUs for 1h"),
    ),
    "gpufleet's own pod (judged at submit)": Case(_own_pod, True, no_warnings=True),
    "a label naming another, blocked team": Case(
        pod("audio", labels={"team": "vision"}), False, ("budget 'vision-monthly' blocks team vision",)
    ),
    "a project another team owns": Case(
        pod("audio", labels={"project": "bert"}), False, ("project 'bert' belongs to team 'nlp'",)
    ),
    "unreadable cost limit": Case(
        pod("audio", annotations={LIMIT: "lots"}), False, ("gpufleet cannot read this pod", "not a dollar amount")
    ),
    "unreadable runtime": Case(
        pod("audio", annotations={LIMIT: "5", RUNTIME: "soon"}), False, ("not a duration: 'soon'",)
    ),
    "a MIG slice on no MIG node: cost limit not checked": Case(
        pod("audio", resource="nvidia.com/mig-1g.10gb", annotations={LIMIT: "1", RUNTIME: "1h"}),
        True,
        warnings=("not checked: gpufleet knows no node that fits",),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_scenarios(hook: Hook, name: str) -> None:
    case = CASES[name]
    obj = case.obj(hook) if callable(case.obj) else case.obj
    out = hook.review(obj, case.operation)
    assert out["allowed"] is case.allowed, out
    if case.allowed:
        assert "status" not in out
    else:
        assert out["status"]["code"] == 403 and out["status"]["reason"] == "Forbidden", out
        for text in case.message:
            assert text in out["status"]["message"], out["status"]["message"]
    warnings = out.get("warnings", [])
    for text in case.warnings:
        assert any(text in w for w in warnings), warnings
    if case.no_warnings:
        assert warnings == []


def test_a_dry_run_leaves_no_trace_and_a_real_one_starts_the_grace_window(hook: Hook) -> None:
    """speech's block budget has a grace window: its first over-the-limit workload is let in and
    starts it (as the API's submit does) — but not from a dry run, which must leave the store alone."""
    first = hook.review(pod("speech"), dry_run=True)
    assert first["allowed"] and any("in its grace window" in w for w in first["warnings"])
    with hook.db.session() as s:
        b = budgets_repo.budget_of(next(r for r in budgets_repo.list_budgets(s) if r.name == "speech-grace"))
        assert budgets_repo.over_since(s, b.id, b.period_at(T0).start) is None
    assert hook.review(pod("speech"))["allowed"]
    with hook.db.session() as s:
        assert budgets_repo.over_since(s, b.id, b.period_at(T0).start) == T0


# -- failure: the store cannot be read --------------------------------------------------------------------


def closed_port_db() -> Database:
    return Database(f"postgresql+psycopg://gpufleet@127.0.0.1:{free_port()}/gpufleet")


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_an_unreachable_store_answers_as_the_failure_policy_promises(tmp_path: Path, tls: Tls, policy: str) -> None:
    db = closed_port_db()
    with serving(tmp_path, tls, db, failure_policy=policy) as h:
        out = h.review(pod("vision"))
        if policy == "Fail":  # denied, saying why: the API server shows this to whoever created the pod
            assert out["allowed"] is False
            assert out["status"]["code"] == 500 and out["status"]["reason"] == "InternalError"
            assert out["status"]["message"].startswith("gpufleet cannot read budgets: cannot connect to the store")
            assert "failurePolicy Fail" in out["status"]["message"]
        else:  # let in, with the same words as a warning
            assert out["allowed"] is True and "status" not in out
            assert out["warnings"][0].startswith("gpufleet cannot read budgets: cannot connect to the store")
            assert "admitted unchecked (failurePolicy Ignore)" in out["warnings"][0]
        # what needs no store is answered as always
        for obj, op in ((pod("vision", gpus=0), "CREATE"), (pod("vision"), "UPDATE")):
            out = h.review(obj, op)
            assert out == {"uid": out["uid"], "allowed": True}
    db.dispose()


def test_a_locked_store_answers_within_the_deadline(tmp_path: Path, tls: Tls, sqlite_template: Path) -> None:
    """The store holds a write lock the webhook waits for (SQLite's busy timeout is 10 s): past
    ``deadline_s`` it answers as failurePolicy Fail promises instead of letting the API server time out."""
    path = tmp_path / "locked.db"
    shutil.copyfile(sqlite_template, path)
    db = Database(f"sqlite:///{path}")
    seed(db)
    locker = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        with serving(tmp_path, tls, db, deadline_s=1.0) as h:
            out = h.review(pod("vision"))
            assert out["allowed"] is False and out["status"]["code"] == 500
            message = out["status"]["message"]
            assert message.startswith("gpufleet cannot read budgets: the store did not answer within 1s"), message
            assert h.calls[-1] < 5.0
    finally:
        locker.rollback()
        locker.close()
        db.dispose()


# -- malformed requests: 400, never a crash ----------------------------------------------------------------


def _without(path: str) -> dict[str, Any]:
    doc = review(pod("vision"))
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    del node[last]
    return doc


def _with(path: str, value: Any) -> dict[str, Any]:
    doc = review(pod("vision"))
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value
    return doc


MALFORMED: dict[str, tuple[bytes | Any, str]] = {
    "not JSON": (b"{not json", "the body is not JSON"),
    "empty body": (b"", "the body is not JSON"),
    "a JSON list": ([1, 2], "expected an AdmissionReview object, got list"),
    "admission.k8s.io/v1beta1": (_with("apiVersion", "admission.k8s.io/v1beta1"), "admissionReviewVersions: [v1]"),
    "another kind": (_with("kind", "TokenReview"), "expected AdmissionReview"),
    "no request": (_without("request"), "field 'request': missing"),
    "no uid": (_without("request.uid"), "field 'request.uid': missing"),
    "a numeric uid": (_with("request.uid", 42), "field 'request.uid': expected str, got int"),
    "an unknown operation": (_with("request.operation", "PATCH"), "unknown operation 'PATCH'"),
    "no kind": (_without("request.kind"), "field 'request.kind': missing"),
    "a CREATE without its object": (_without("request.object"), "field 'request.object': missing"),
    "an object that is a string": (_with("request.object", "pod"), "field 'request.object': expected an object"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_bodies_are_400(tmp_path: Path, tls: Tls, name: str) -> None:
    body, detail = MALFORMED[name]
    with serving(tmp_path, tls, closed_port_db()) as h:  # a 400 never needs the store
        r = h.post(body, raw=body if isinstance(body, bytes) else None)
        assert r.status_code == 400, r.text
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["status"] == 400 and problem["code"] == "invalid_admission_review"
        assert problem["detail"].startswith("malformed AdmissionReview: ") and detail in problem["detail"], problem


def test_health_methods_and_tls(tmp_path: Path, tls: Tls) -> None:
    with serving(tmp_path, tls, closed_port_db()) as h:
        with httpx.Client(verify=tls.context()) as c:
            assert c.get(h.server.url + "/healthz").text == "ok\n"
            assert c.get(h.server.url + "/validate").status_code == 405
            assert c.post(h.server.url + "/nowhere", content=b"{}").status_code == 404
        with pytest.raises(httpx.ConnectError), httpx.Client(verify=ssl.create_default_context()) as c:
            c.get(h.server.url + "/healthz")  # a client that does not trust the CA is refused
        with pytest.raises(httpx.HTTPError), httpx.Client(verify=False) as c:
            c.get(h.server.url.replace("https", "http") + "/healthz")  # no plain HTTP


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path, tls: Tls) -> None:
    own = make_tls(tmp_path / "first")
    with serving(tmp_path, own, closed_port_db()) as h:
        with httpx.Client(verify=own.context()) as c:
            assert c.get(h.server.url + "/healthz").status_code == 200
        renewed = make_tls(tmp_path / "renewed", cn="gpufleet-webhook-renewed")
        time.sleep(0.01)
        shutil.copyfile(renewed.cert, own.cert)
        shutil.copyfile(renewed.key, own.key)
        assert h.server.reload_certificate()
        with httpx.Client(verify=renewed.context()) as c:
            assert c.get(h.server.url + "/healthz").status_code == 200
        assert not h.server.reload_certificate()  # unchanged files: nothing to do


def test_settings_need_a_certificate(tmp_path: Path) -> None:
    from gpufleet.errors import ConfigError
    from gpufleet.server.settings import load_settings

    with pytest.raises(ConfigError, match=r"webhook\.cert_file and webhook\.key_file"):
        load_settings(home=tmp_path, webhook={"enabled": True})
    off = load_settings(home=tmp_path)
    assert off.webhook.enabled is False and start_webhook(off, Database("sqlite://")) is None


def test_a_bad_certificate_fails_at_start(tmp_path: Path, tls: Tls) -> None:
    from gpufleet.errors import ConfigError

    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate\n")
    settings = webhook_settings(tmp_path, Tls(tls.ca, bad, tls.key))
    with pytest.raises(ConfigError, match="cannot load the webhook certificate"):
        WebhookServer(settings, Database("sqlite://"))


# -- `gpufleet up` serves it --------------------------------------------------------------------------------


@pytest.mark.slow
def test_gpufleet_up_serves_the_webhook_over_https(tmp_path: Path, tls: Tls) -> None:
    port = free_port()
    server = ServerProcess(
        tmp_path / "home",
        settings={"webhook": {"enabled": True, "port": port, "cert_file": str(tls.cert), "key_file": str(tls.key)}},
    )
    server.start()
    try:
        url = f"https://127.0.0.1:{port}"
        db = Database(f"sqlite:///{tmp_path / 'home' / 'gpufleet.db'}")
        with db.session() as s:
            repo.ensure_team(s, "vision", time.time())
        with db.session() as s:
            budgets_repo.create_budget(
                s, make_budget(id="", name="tiny", scope="team:vision", limit_usd=0.01, action="block"),
                created_by=None, now=time.time(),
            )  # fmt: skip
        db.dispose()
        with httpx.Client(verify=tls.context(), timeout=30.0) as c:
            assert c.get(url + "/healthz").status_code == 200
            sent = review(pod("vision"))
            out = c.post(url + "/validate", json=sent).json()["response"]
            # 1 GPU for the default hour at $4 a GPU-hour (8 GPUs at $32 an hour): over $0.01
            assert out["uid"] == sent["request"]["uid"] and out["allowed"] is False
            assert out["status"]["message"].startswith("budget 'tiny' blocks team vision: $0.00 spent of $0.01 limit")
            assert c.post(url + "/validate", content=b"[]").status_code == 400
    finally:
        server.stop()


# -- the pure parts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5400", 5400.0), ("2h", 7200.0), ("1h30m", 5400.0), ("90m", 5400.0), ("1.5h", 5400.0), ("45s", 45.0),
     (" 2h ", 7200.0), ("1h0m30s", 3630.0), ("500ms", 0.5)],
)  # fmt: skip
def test_runtimes_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "h", "2 h", "2d", "-1h", "0", "1h-5m", "nan", "inf", "2hx"])
def test_bad_runtimes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def _workload(obj: dict[str, Any]) -> Workload:
    req = ReviewRequest("u", "CREATE", "", "v1", "Pod", obj["metadata"]["namespace"], obj["metadata"]["name"],
                        object=obj)  # fmt: skip
    w = inspect(req)
    assert isinstance(w, Workload)
    return w


def test_the_cheapest_kind_that_fits_prices_the_estimate() -> None:
    kinds = (
        NodeKind("H100-80GB", 8, 80.0),  # $10 per GPU-hour
        NodeKind("A100-80GB", 8, 32.0),  # $4
        NodeKind("L4", 1, 1.0, cpu_milli=4000, memory_mib=16384),  # $1, but one GPU and 4 CPUs
        NodeKind("A100-80GB", 4, 8.0, sharing=SharingMode.SHARED, gpu_resource="nvidia.com/gpu", replicas=4),
        NodeKind("A100-40GB", 8, 16.0, sharing=SharingMode.MIG),
    )
    two = cheapest_fit(_workload(pod("a", gpus=2)).pod, 1, kinds)
    # the time-sliced A100s: 2 replicas of 4 are half a GPU at $2 a GPU-hour, $1 an hour
    assert two is not None and two.kind.replicas == 4 and two.gpus == 0.5 and two.usd_per_hour == pytest.approx(1.0)
    assert two.fitting_models == ("A100-80GB", "H100-80GB")
    eight = cheapest_fit(_workload(pod("a", gpus=8)).pod, 2, kinds[:3])
    assert eight is not None and eight.kind.gpu_model == "A100-80GB" and eight.usd_per_hour == pytest.approx(64.0)
    mig = cheapest_fit(_workload(pod("a", resource="nvidia.com/mig-3g.20gb")).pod, 1, kinds)
    assert mig is not None and mig.kind.sharing is SharingMode.MIG and mig.request.mig_profile == "3g.20gb"
    assert mig.usd_per_hour == pytest.approx(2.0 * 3 / 7, abs=1e-3)
    assert cheapest_fit(_workload(pod("a", gpus=32)).pod, 1, kinds) is None  # 8 GPUs at most (32 replicas: 8 GPUs of 4)


# -- the chart's webhook templates -----------------------------------------------------------------------------


def _helm(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(HELM), "template", "gf", str(CHART), "--namespace", "gpufleet-system", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


needs_helm = pytest.mark.skipif(not HELM.exists(), reason="no helm at build/helm/helm (tools/get_helm.py builds it)")
needs_chart = pytest.mark.skipif(
    not (CHART / "templates" / "webhook").is_dir(), reason="the chart has no webhook templates yet"
)


def _webhook_objects(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs if "webhook" in d["metadata"]["name"]}


@needs_helm
@needs_chart
@pytest.mark.parametrize("cert_manager", [False, True], ids=["genCA", "cert-manager"])
def test_the_chart_registers_the_webhook(cert_manager: bool) -> None:
    import kubernetes_validate

    extra = ["--api-versions", "cert-manager.io/v1"] if cert_manager else []
    docs = _helm("--set", "webhook.enabled=true", *extra)
    objs = _webhook_objects(docs)
    vwc = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    hooks = vwc["webhooks"]
    assert {h["name"] for h in hooks} == {"pods.gpufleet.io", "jobs.gpufleet.io"}
    for h in hooks:
        assert h["failurePolicy"] == "Fail" and h["sideEffects"] == "NoneOnDryRun"
        assert h["admissionReviewVersions"] == ["v1"] and h["timeoutSeconds"] == 10
        assert h["clientConfig"]["service"]["path"] == "/validate"
        assert h["rules"][0]["operations"] == ["CREATE"]
        assert h["namespaceSelector"]["matchExpressions"][0]["key"] == "gpufleet.io/team"
        assert any("nvidia.com/" in c["expression"] for c in h["matchConditions"])
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gf-gpufleet-webhook")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    if cert_manager:
        assert "cert-manager.io/inject-ca-from" in vwc["metadata"]["annotations"]
        assert "Certificate/gf-gpufleet-webhook" in objs and "Issuer/gf-gpufleet-webhook" in objs
        assert all("caBundle" not in h["clientConfig"] for h in hooks)
    else:
        secret = objs["Secret/gf-gpufleet-webhook-tls"]
        assert secret["type"] == "kubernetes.io/tls" and {"tls.crt", "tls.key", "ca.crt"} <= set(secret["data"])
        assert all(h["clientConfig"]["caBundle"] == secret["data"]["ca.crt"] for h in hooks)
    for version in ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"):
        for d in [vwc, service, *([] if cert_manager else [objs["Secret/gf-gpufleet-webhook-tls"]])]:
            kubernetes_validate.validate(d, version, strict=True)
    # the matchConditions let GPU workloads through to the webhook, and nothing else
    env = celpy.Environment()
    for h in hooks:
        (condition,) = h["matchConditions"]
        program = env.program(env.compile(condition["expression"]))
        make = pod if h["name"].startswith("pods") else job
        for obj, expected in (
            (make("a"), True),
            (make("a", gpus=0), False),
            (make("a", resource="nvidia.com/mig-1g.10gb"), True),
        ):
            assert bool(program.evaluate({"object": json_to_cel(obj)})) is expected, (h["name"], obj)
        init = make("a", gpus=0)
        spec = init["spec"] if "containers" in init["spec"] else init["spec"]["template"]["spec"]
        spec["initContainers"] = [{"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        assert bool(program.evaluate({"object": json_to_cel(init)}))


@needs_helm
@needs_chart
def test_the_chart_without_the_webhook_renders_none_of_it() -> None:
    docs = _helm()
    assert not [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert not _webhook_objects(docs)
