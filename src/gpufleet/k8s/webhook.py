"""The validating admission webhook over HTTPS: ``POST /validate`` (an ``admission.k8s.io/v1``
AdmissionReview in, its response out) and ``GET /healthz``.

``gpufleet up`` with ``webhook.enabled`` serves it on its own port (``webhook.port``, 8443) with the
certificate and key of ``webhook.cert_file`` / ``webhook.key_file`` (the chart mounts them from a
Secret at ``/etc/gpufleet/webhook-tls``; a renewed certificate is picked up within a minute, no
restart), in a thread of the server process, on every replica — the leader and the standbys alike:
the webhook reads the store, it does not need the scheduler.

The decisions are :mod:`gpufleet.k8s.review`'s; this module reads what they need from the store
in one transaction per request — the namespace's team and its priority grant, the node kinds and
their prices, the gpufleet job a pod runs — and hands them the API's own budget check
(:func:`gpufleet.services.budgets.check_submission`, the code path of ``POST /v1/jobs``) as the
budget-check callable. Like the API the check is serialized per budget and records the limit
crossing that starts a block budget's grace window when it lets the workload in; a denial and a
``dryRun`` request roll everything back (the registration says ``sideEffects: NoneOnDryRun``).

failurePolicy (see :mod:`gpufleet.k8s.review` and docs/admission-webhook.md): a store that
cannot be read, or that does not answer within ``webhook.deadline_s``, is answered as
``webhook.failure_policy`` promises — ``Fail``: ``allowed: false``, ``status.code`` 500,
``"gpufleet cannot read budgets: ..."``; ``Ignore``: ``allowed: true`` with that warning. A body that
is not an AdmissionReview is an HTTP 400 problem document naming the field; nothing crashes.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
from sqlalchemy.orm import Session

from gpufleet.clock import Clock, WallClock
from gpufleet.cost.budgets.model import Budget
from gpufleet.cost.budgets.status import BudgetExceededError, check_block
from gpufleet.cost.job_estimate import estimate_job_cost
from gpufleet.cost.rules import PricingRules, rules_from_setting
from gpufleet.errors import ConfigError, NotFoundError, PermissionDeniedError, StoreError
from gpufleet.io.ports import check_port
from gpufleet.k8s.review import (
    BudgetAnswer,
    BudgetCheck,
    BudgetFigures,
    DoorFacts,
    FailurePolicy,
    NodeKind,
    Pass,
    ReviewError,
    ReviewRequest,
    TeamGrant,
    Unreadable,
    Verdict,
    Workload,
    allow,
    inspect,
    judge,
    node_kind,
    parse_review,
    review_response,
    store_failure,
)
from gpufleet.model.gpu import MILLI
from gpufleet.model.job import JobState
from gpufleet.model.share import milli_gpus
from gpufleet.server.settings import Settings
from gpufleet.services.budgets import (
    budgets_covering,
    check_submission,
    committed_spend,
    gpu_hour_price,
    scope_spend,
)
from gpufleet.services.owners import granted_classes
from gpufleet.store import repo
from gpufleet.store.convert import node_from_row
from gpufleet.store.db import Database
from gpufleet.store.models import Team
from gpufleet.store.repo import budgets as budgets_repo

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate"
HEALTH_PATH = "/healthz"
MAX_BODY_BYTES = 8 * 1024 * 1024  # an AdmissionReview carries one object (etcd's limit is 1.5 MiB)
CERT_CHECK_S = 60.0  # how often a renewed certificate is looked for
_TERMINAL = frozenset(s.value for s in JobState if s.terminal)


# -- reading the store ----------------------------------------------------------------------------------


class WebhookService:
    """Reviews AdmissionReviews against the store (every method but :meth:`areview` is blocking)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        clock: Clock | None = None,
        rules: PricingRules | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock or WallClock()
        self.rules = rules  # the server's pricing rules: the API prices its block check with the same
        k = settings.kubernetes
        self._team_of_namespace = {ns: team for team, ns in k.namespaces.items()}
        self._mapped_teams = frozenset(k.namespaces)

    @property
    def policy(self) -> FailurePolicy:
        return self.settings.webhook.failure_policy

    # the facts -----------------------------------------------------------------------------------------

    def namespace_team(self, s: Session, namespace: str) -> Team | None:
        """The team a namespace belongs to — ``kubernetes.namespaces``, else the team of its name
        unless that team is mapped to another namespace — or None: not a gpufleet namespace (nor one
        of ``webhook.namespaces``, when set)."""
        allowed = self.settings.webhook.namespaces
        if allowed is not None and namespace not in allowed:
            return None
        name = self._team_of_namespace.get(namespace)
        if name is None and namespace not in self._mapped_teams:
            name = namespace
        return repo.find_team(s, name) if name is not None else None

    def facts(self, s: Session, subject: Workload | Unreadable) -> DoorFacts:
        team = self.namespace_team(s, subject.namespace)
        if team is None:
            return DoorFacts()
        teams = [TeamGrant(team.name, tuple(granted_classes(team)))]
        if isinstance(subject, Unreadable):
            return DoorFacts(tuple(teams))
        label_team = subject.pod.team
        if label_team and label_team != team.name:
            other = repo.find_team(s, label_team)
            if other is not None:
                teams.append(TeamGrant(other.name, tuple(granted_classes(other))))
        kinds: dict[NodeKind, None] = {}
        for row in repo.list_nodes(s):
            kind = node_kind(node_from_row(row))
            if kind is not None:
                kinds[kind] = None
        return DoorFacts(tuple(teams), tuple(kinds), self._admitted_job(s, subject, [t.name for t in teams]))

    def _admitted_job(self, s: Session, w: Workload, teams: list[str]) -> str | None:
        """The id of the unfinished gpufleet job ``w`` runs (gpufleet's own Job and its pods: judged
        when the job was submitted); None otherwise."""
        job_id = w.pod.job_id
        if not job_id:
            return None
        try:
            row = repo.get_job(s, job_id)
        except NotFoundError:
            return None
        return job_id if row.state not in _TERMINAL and row.team in teams else None

    # the budget check: the API's ---------------------------------------------------------------------

    def budget_check(self, s: Session, now: float) -> BudgetCheck:
        """The budget-check callable over ``s``: :func:`check_submission`, and the budgets that let
        the workload in although it takes them past their limit."""

        def check(team: str, fields: Mapping[str, Any]) -> BudgetAnswer:
            try:
                check_submission(s, fields, team, now, rules=self.rules)
            except BudgetExceededError as e:
                return BudgetAnswer(block=self._figures(s, e.budget, now, e.committed_usd, e.job_cost_usd))
            except PermissionDeniedError as e:  # a project another team owns
                return BudgetAnswer(refusal=e.message)
            return BudgetAnswer(over=tuple(self._over(s, team, fields, now)))

        return check

    def _figures(self, s: Session, b: Budget, now: float, committed: float, job_cost: float) -> BudgetFigures:
        period = b.period_at(now)
        spent = scope_spend(s, b.scope, period.start, period.end, now, rules=self.rules)
        return BudgetFigures(b.name, b.scope, b.action, b.period, b.limit_usd, spent, committed, job_cost)

    def _over(self, s: Session, team: str, fields: Mapping[str, Any], now: float) -> list[BudgetFigures]:
        rows = budgets_covering(
            s,
            team=team,
            project=str(fields.get("project", "")),
            namespace=str(fields.get("namespace", "default")),
            experiment=str(fields.get("experiment", "")),
            labels=fields.get("labels") or {},
        )
        if not rows:
            return []
        # the job's estimate as check_submission prices it
        gpus = milli_gpus(
            int(fields.get("pods") or 1) * int(fields.get("gpus", 0)) * int(fields.get("gpu_milli", MILLI))
        )
        price = gpu_hour_price(s, tuple(fields.get("gpu_types") or ()))
        job_cost = estimate_job_cost(
            gpus,
            price,
            estimated_runtime_s=fields.get("estimated_runtime_s"),
            max_runtime_s=fields.get("max_runtime_s"),
        ).cost_usd
        out = []
        for row in rows:
            b = budgets_repo.budget_of(row)
            period = b.period_at(now)
            if not period.start <= now < period.end:
                continue
            committed = committed_spend(s, b.scope, period, now, rules=self.rules)
            if not check_block(b, committed.total_usd, job_cost).fits:
                out.append(
                    BudgetFigures(
                        b.name,
                        b.scope,
                        b.action,
                        b.period,
                        b.limit_usd,
                        committed.spent_usd,
                        committed.total_usd,
                        job_cost,
                    )
                )
        return out

    # a review ------------------------------------------------------------------------------------------

    def judge(self, req: ReviewRequest, subject: Workload | Unreadable) -> Verdict:
        """The verdict on ``subject`` in one transaction, kept only when the workload is let in by a
        request that is not a dry run. Blocking; never raises."""
        try:
            with self.db.session() as s:
                facts = self.facts(s, subject)
                verdict = judge(subject, facts, self.budget_check(s, self.clock.now()))
                if req.dry_run or not verdict.allowed:
                    s.rollback()
                return verdict
        except StoreError as e:
            log.warning(
                "webhook: cannot read the store for %s %s/%s: %s", subject.kind, subject.namespace, subject.name, e
            )
            return store_failure(e.message, self.policy)
        except Exception as e:  # a bug must not crash the webhook: answered as failurePolicy promises
            log.exception("webhook: judging %s %s/%s failed", subject.kind, subject.namespace, subject.name)
            return store_failure(f"{type(e).__name__}: {e}", self.policy, what="gpufleet failed judging this workload")

    async def areview(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON answer to a ``POST /validate`` body."""
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return 400, bad_request(f"the body is not JSON: {e}")
        try:
            req = parse_review(doc)
        except ReviewError as e:
            return 400, bad_request(e.message, e.field)
        subject = inspect(req)
        if isinstance(subject, Pass):
            verdict = allow(subject.reason)
        else:
            deadline = self.settings.webhook.deadline_s
            try:
                with anyio.fail_after(deadline):
                    verdict = await anyio.to_thread.run_sync(self.judge, req, subject, abandon_on_cancel=True)
            except TimeoutError:
                verdict = store_failure(f"the store did not answer within {deadline:g}s", self.policy)
        _log(req, verdict)
        return 200, review_response(req.uid, verdict)


def _log(req: ReviewRequest, v: Verdict) -> None:
    dry = ", dry run" if req.dry_run else ""
    what = f"{req.operation} {req.kind} {req.namespace}/{req.name or '*'} (uid {req.uid}{dry})"
    if not v.allowed:
        log.info("webhook: denied %s [%s]: %s", what, v.reason, v.message)
    else:
        log.debug("webhook: allowed %s [%s]%s", what, v.reason, f": {'; '.join(v.warnings)}" if v.warnings else "")


def bad_request(detail: str, field: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem for a body that is not an AdmissionReview request."""
    doc: dict[str, Any] = {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "code": ReviewError.code,
        "detail": f"malformed AdmissionReview: {detail}",
    }
    if field is not None:
        doc["field"] = field
    return doc


# -- the ASGI app ---------------------------------------------------------------------------------------


def create_webhook_app(service: WebhookService) -> Starlette:
    """The webhook's own ASGI app: ``POST /validate`` and ``GET /healthz``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    async def validate(request: Request) -> Response:
        too_large = JSONResponse(
            {
                "type": "about:blank",
                "title": "Payload Too Large",
                "status": 413,
                "detail": f"the body is larger than {MAX_BODY_BYTES} bytes",
            },
            status_code=413,
            media_type="application/problem+json",
        )
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return too_large
            chunks.append(chunk)
        status, doc = await service.areview(b"".join(chunks))
        media = "application/json" if status == 200 else "application/problem+json"
        return JSONResponse(doc, status_code=status, media_type=media)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return Starlette(
        routes=[Route(VALIDATE_PATH, validate, methods=["POST"]), Route(HEALTH_PATH, healthz, methods=["GET"])]
    )


# -- serving it -------------------------------------------------------------------------------------------


@dataclass
class _CertFiles:
    cert: str
    key: str
    stamp: tuple[float, float] = (0.0, 0.0)

    def current(self) -> tuple[float, float]:
        return os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime


class WebhookServer:
    """The webhook served over HTTPS by uvicorn in a thread of the server process."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        rules: PricingRules | None = None,
        clock: Clock | None = None,
    ) -> None:
        import uvicorn

        from gpufleet.io.http_timeout import header_timeout_protocol

        w = settings.webhook
        if w.cert_file is None or w.key_file is None:
            raise ConfigError("the webhook serves HTTPS: set webhook.cert_file and webhook.key_file", field="webhook")
        self.host = w.host or settings.host
        self.port = w.port
        self.service = WebhookService(db, settings, clock=clock, rules=rules)
        self._files = _CertFiles(str(w.cert_file), str(w.key_file))
        self.config = uvicorn.Config(
            create_webhook_app(self.service),
            host=self.host,
            port=self.port,
            ssl_certfile=self._files.cert,
            ssl_keyfile=self._files.key,
            log_level=settings.log_level,
            access_log=False,
            log_config=None,  # the server process configured logging; a thread must not configure it again
            lifespan="off",
            timeout_graceful_shutdown=2,
            # the API server calls with a deadline; a client whose request head never ends is cut off
            http=cast(Any, header_timeout_protocol(settings.http_header_timeout_s)),  # a partial: called like the class
            timeout_keep_alive=5,
        )
        try:
            self.config.load()  # the TLS context now: a missing or bad certificate fails `gpufleet up` at once
            self._files.stamp = self._files.current()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"cannot load the webhook certificate {w.cert_file} / key {w.key_file}: {e}", field="webhook.cert_file"
            ) from None
        assert self.config.ssl is not None
        self.config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self.server = uvicorn.Server(self.config)
        self._thread: threading.Thread | None = None
        self._reloader: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"https://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve in a daemon thread; returns once it listens (:class:`ConfigError` if it cannot)."""
        check_port(self.host, self.port)
        self._thread = threading.Thread(target=self.server.run, name="gpufleet-webhook", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ConfigError(f"the webhook could not listen on {self.host}:{self.port}", field="webhook.port")
            time.sleep(0.02)
        self._reloader = threading.Thread(target=self._watch_certificate, name="gpufleet-webhook-tls", daemon=True)
        self._reloader.start()
        log.info(
            "admission webhook: %s%s (failurePolicy %s)",
            self.url,
            VALIDATE_PATH,
            self.service.settings.webhook.failure_policy,
        )

    def reload_certificate(self) -> bool:
        """Load the certificate and key again if either file changed (a renewal); True if it did.
        New connections get the new certificate; a broken pair keeps the old one (and is logged)."""
        try:
            stamp = self._files.current()
            if stamp == self._files.stamp:
                return False
            assert self.config.ssl is not None
            self.config.ssl.load_cert_chain(self._files.cert, self._files.key)
        except (OSError, ssl.SSLError) as e:
            log.warning("webhook: keeping the current certificate, the new one does not load: %s", e)
            return False
        self._files.stamp = stamp
        log.info("webhook: certificate %s reloaded", self._files.cert)
        return True

    def _watch_certificate(self) -> None:
        while not self._stop.wait(CERT_CHECK_S):
            self.reload_certificate()

    def stop(self) -> None:
        self._stop.set()
        self.server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def start_webhook(settings: Settings, db: Database) -> WebhookServer | None:
    """The webhook of ``settings``, listening (None when ``webhook.enabled`` is off)."""
    if not settings.webhook.enabled:
        return None
    server = WebhookServer(settings, db, rules=rules_from_setting(settings.pricing))
    server.start()
    return server
