"""``gpufleet up``: the API server and the controller in one process.

Start-up: migrate the store, seed the teams of the settings, create the single-user admin token
(``<home>/admin.token``, mode 0600) on first start, build the local backend, start the controller
thread (it competes for leadership), and serve the API with uvicorn until SIGINT/SIGTERM. Stopping
the server never stops jobs: the next start adopts them.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.base import Backend
from gpufleet.backends.local import LocalBackend
from gpufleet.clock import WallClock
from gpufleet.control.controller import Controller, ControllerConfig, Periodic
from gpufleet.control.leader import Leadership
from gpufleet.cost.rules import rules_from_setting
from gpufleet.errors import ConfigError
from gpufleet.io.ports import check_port
from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.job import PRIORITY_CLASSES
from gpufleet.sdk.config import write_private_file
from gpufleet.server.settings import Settings
from gpufleet.services.budgets import BudgetService
from gpufleet.store import repo
from gpufleet.store.db import Database

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpufleet.api.context import JobLogs

log = logging.getLogger(__name__)

ADMIN_TOKEN_FILE = "admin.token"
SERVER_FILE = "server.json"
DEFAULT_TEAM = "default"


@dataclass
class Server:
    settings: Settings
    db: Database
    controller: Controller
    admin_token_path: Path | None
    policy: AccountPolicy  # which Unix accounts jobs run as
    job_logs: JobLogs | None = None  # jobs' output when it is not in <home>/logs (Kubernetes: pod logs)

    def app(self) -> FastAPI:
        from gpufleet.api.app import create_app
        from gpufleet.api.context import ApiContext

        app = create_app(
            ApiContext(
                database=self.db,
                logs_dir=self.settings.log_dir or self.settings.home / "logs",
                job_logs=self.job_logs,
                clock=WallClock(),
                wake=self.controller.wake,
                ready=self.controller.ready,
                **context_settings(self.settings),
            )
        )
        # the controller runs in this process: its scheduling cycles feed the API's metrics
        self.controller.on_cycle = app.state.metrics.observe_cycle
        return app

    def serve(self) -> None:
        """Serve until SIGINT/SIGTERM. With ``api_workers`` > 1 the API runs in that many worker
        processes (uvicorn's supervisor) and this process runs only the controller: the API then
        uses every core instead of sharing one interpreter lock with the scheduler."""
        import uvicorn

        from gpufleet.io.http_timeout import header_timeout_protocol

        workers = self.settings.api_workers
        common: dict[str, Any] = {
            "host": self.settings.host,
            "port": self.settings.port,
            "log_level": self.settings.log_level,
            "access_log": False,
            "timeout_graceful_shutdown": 5,
            # request heads that never finish (slow-loris) are cut off; keep-alive idles 5 s (uvicorn's)
            "http": header_timeout_protocol(self.settings.http_header_timeout_s),
            "timeout_keep_alive": 5,
        }
        check_port(self.settings.host, self.settings.port)
        from gpufleet.k8s.webhook import start_webhook

        webhook = start_webhook(self.settings, self.db)  # the admission webhook (webhook.enabled), on every replica
        self.controller.start()
        try:
            if workers <= 1:
                uvicorn.Server(uvicorn.Config(self.app(), **common)).run()
            else:
                os.environ[SETTINGS_ENV] = self.settings.model_dump_json()
                uvicorn.run(f"{__name__}:worker_app", factory=True, workers=workers, **common)
        finally:
            if webhook is not None:
                webhook.stop()
            self.controller.stop()
            self.db.dispose()


SETTINGS_ENV = "GPUFLEET_WORKER_SETTINGS"


def worker_app() -> FastAPI:
    """The API of one worker process (``api_workers`` > 1): settings from the supervisor, no controller
    (the leader polls the store for new jobs every ``poll_interval_s``)."""
    from gpufleet.api.app import create_app
    from gpufleet.api.context import ApiContext

    settings = Settings.model_validate_json(os.environ[SETTINGS_ENV])
    db = Database(settings.db_url)
    return create_app(
        ApiContext(
            database=db,
            logs_dir=settings.log_dir or settings.home / "logs",
            job_logs=pod_logs(settings) if settings.backend == "kubernetes" else None,
            clock=WallClock(),
            **context_settings(settings),
        )
    )


def context_settings(settings: Settings) -> dict[str, Any]:
    """The API context's settings that come from the server's: pricing and the shared-server rules."""
    # The Unix-account rules are the local backend's: on Kubernetes jobs run in pods, as their images'
    # users, under the namespace's policies, so no job needs an account and any number of teams share it.
    local = settings.backend == "local"
    return {
        "pricing_rules": rules_from_setting(settings.pricing),
        "max_body_bytes": settings.max_body_bytes,
        "min_free_bytes": settings.min_free_bytes,
        # job logs: bytes per read, follows per token and per process; a revocation reaches every worker
        "log_read_max_bytes": settings.log_read_max_bytes,
        "log_follows_per_token": settings.log_follows_per_token,
        "log_follows_total": settings.log_follows_total,
        "revocations_file": settings.home / "revocations",
        "run_as_required": local and not settings.jobs_as_server,
        "single_team": local and os.geteuid() != 0 and not settings.jobs_as_server,
    }


def secure_home(settings: Settings) -> None:
    """Everything the server writes is its own: files 0600, folders 0700 (umask 077 for this
    process and what it starts), ``GPUFLEET_HOME`` itself 0700 and an existing SQLite store 0600
    (homes made by older versions were 0755 with a 0644 store)."""
    os.umask(0o077)
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    if settings.db_url.startswith("sqlite:///"):
        db_file = Path(settings.db_url.removeprefix("sqlite:///"))
        for path in (db_file, db_file.with_name(db_file.name + "-wal"), db_file.with_name(db_file.name + "-shm")):
            if path.exists() and path.stat().st_uid == os.geteuid():
                path.chmod(0o600)


def seed_teams(db: Database, settings: Settings, now: float) -> None:
    """Teams of the settings file: created or updated (the file wins for the teams it names)."""
    with db.session() as s:
        repo.ensure_team(s, DEFAULT_TEAM, now)
        for name, t in settings.scheduler.teams.items():
            quotas = None
            if t.quota is not None:
                quotas = {(k if k == "*" else canonical_gpu_name(k) or k): round(g * MILLI) for k, g in t.quota.items()}
            limit = None if t.borrowing_limit is None else round(t.borrowing_limit * MILLI)
            team = repo.upsert_team(
                s, name, weight=t.weight, cohort=t.cohort, borrowing_limit_milli=limit, quotas_milli=quotas, now=now
            )
            if t.priority_classes is not None:
                team.priority_classes = sorted(set(t.priority_classes), key=PRIORITY_CLASSES.__getitem__)


def _server_account() -> str | None:
    """The person behind the single-user admin token: the account the server runs as."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container): the token has no owner
        return None


def ensure_admin_token(db: Database, home: Path, now: float) -> Path:
    """The single-user admin token: kept while it still authenticates, else created and written
    to ``<home>/admin.token`` readable only by its owner."""
    path = home / ADMIN_TOKEN_FILE
    if path.exists():
        secret = path.read_text().strip()
        with db.session() as s:
            if repo.authenticate(s, secret, now) is not None:
                return path
    with db.session() as s:
        repo.ensure_team(s, DEFAULT_TEAM, now)
        _, secret = repo.create_token(
            s, team=DEFAULT_TEAM, role="admin", name="single-user admin", now=now, owner=_server_account()
        )
    write_private_file(path, secret + "\n")
    return path


def kube_api_client(settings: Settings) -> Any:
    """A client of the cluster's API server: the in-cluster service account, else a kubeconfig."""
    try:
        from kubernetes import client, config

        from gpufleet.k8s.adapter.api import with_deadline
    except ImportError:
        raise ConfigError(
            "backend 'kubernetes' needs the Kubernetes client: pip install 'gpufleet[k8s]'", field="backend"
        ) from None
    k = settings.kubernetes
    try:
        if k.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return with_deadline(client.ApiClient())
        return with_deadline(
            config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(k.kubeconfig) if k.kubeconfig else None, context=k.context
            )
        )
    except Exception as e:  # a missing or bad kubeconfig
        raise ConfigError(f"cannot load the Kubernetes configuration: {e}", field="kubernetes.kubeconfig") from None


def pod_logs(settings: Settings) -> JobLogs:
    """Jobs' output on Kubernetes: their pods' logs (:mod:`gpufleet.k8s.adapter.logs`)."""
    from gpufleet.k8s.adapter.logs import PodLogs

    return PodLogs(kube_api_client(settings))


def kubernetes_world(settings: Settings, db: Database) -> tuple[Backend, Leadership, list[Periodic]]:
    """The Kubernetes backend and its Lease leadership for ``backend: kubernetes``: the API server
    from the in-cluster service account, else a kubeconfig (``kubernetes.kubeconfig``/``context``),
    through the official client. Replicas elect one leader with a ``coordination.k8s.io/v1`` Lease."""
    k = settings.kubernetes
    api_client = kube_api_client(settings)
    from kubernetes import client

    from gpufleet.io.catalog import load_catalog
    from gpufleet.k8s.adapter.backend import KubernetesBackend, KubernetesOptions
    from gpufleet.k8s.adapter.lease import LeaseLeadership

    volume = (
        {"name": "gpufleet-checkpoint", "persistentVolumeClaim": {"claimName": k.checkpoint_claim}}
        if k.checkpoint_claim
        else None
    )
    catalog = load_catalog()
    provisioner = None
    if k.karpenter:
        from gpufleet.k8s.adapter.provisioner import KarpenterProvisioner

        provisioner = KarpenterProvisioner(api_client, catalog)
    backend = KubernetesBackend(
        api_client,
        catalog,
        KubernetesOptions(
            namespace_of_team=k.namespaces,
            default_image=k.default_image,
            checkpoint_volume=volume,
            dcgm_urls=tuple(k.dcgm_urls),
            keep_finished_s=k.keep_finished_s,
            keep_failed_s=k.keep_failed_s,
        ),
        provisioner=provisioner,
    )
    identity = settings.replica or f"{socket.gethostname()}-{os.getpid()}"
    d = k.lease_duration_s
    leadership = LeaseLeadership(
        client.CoordinationV1Api(api_client),
        k.lease_namespace,
        k.lease_name,
        identity,
        lease_duration_s=d,
        renew_deadline_s=d * 2 / 3,
        renew_every_s=d / 7,
    )
    from gpufleet.k8s.adapter.fence import Fenced

    backend.fence = Fenced(leadership)  # the backend's writes only while the Lease is surely ours
    log.info(
        "backend: kubernetes at %s; leader election through Lease %s/%s as %s",
        api_client.configuration.host,
        k.lease_namespace,
        k.lease_name,
        identity,
    )
    from gpufleet.k8s.adopt import PodAdopter

    adopter = PodAdopter(
        db,
        api_client,
        team_of_namespace={ns: team for team, ns in k.namespaces.items()},
        rules=rules_from_setting(settings.pricing),  # its block check prices as the bill does
    )
    periodic = [Periodic("adopt pods", k.adopt_interval_s, lambda now: adopter.adopt())]
    return backend, leadership, periodic


def build_server(settings: Settings) -> Server:
    home = settings.home
    secure_home(settings)
    now = WallClock().now()
    db = Database(settings.db_url)
    db.upgrade()
    seed_teams(db, settings, now)
    token_path = ensure_admin_token(db, home, now) if settings.single_user else None
    policy = AccountPolicy(jobs_as_server=settings.jobs_as_server)
    leadership: Leadership | None = None
    periodic: list[Periodic] = []
    backend: Backend
    if settings.backend == "kubernetes":
        backend, leadership, periodic = kubernetes_world(settings, db)
    else:
        log.log(logging.WARNING if settings.jobs_as_server else logging.INFO, "%s", policy.describe())
        backend = LocalBackend(
            home,
            node_name=settings.node_name,
            gpus=settings.gpus,
            default_grace_s=settings.grace_s,
            policy=policy,
            job_root=settings.job_root,
            log_dir=settings.log_dir,
            max_log_bytes=settings.max_log_bytes,
            max_job_pids=settings.max_job_pids,
        )
    config = ControllerConfig(
        poll_interval_s=settings.poll_interval_s,
        cycle_interval_s=settings.cycle_interval_s,
        grace_s=settings.grace_s,
        telemetry_interval_s=settings.telemetry_interval_s,
        progress_rows_per_look=settings.progress_rows_per_look,
        progress_rows_per_s=settings.progress_rows_per_s,
        progress_burst=settings.progress_burst,
        budget_interval_s=settings.budget_interval_s,
        node_price_usd_per_hour=settings.node_price_usd_per_hour,
    )
    if settings.replica:
        config.replica = settings.replica
    # one pricing-rules object for the bill (/v1/usage) and the budgets that act on it
    budgets = BudgetService(
        db, WallClock(), interval_s=settings.budget_interval_s, rules=rules_from_setting(settings.pricing)
    )
    controller = Controller(
        db, backend, settings.scheduler, config, budgets=budgets, leadership=leadership, periodic=periodic
    )
    report = getattr(backend, "report_waiting", None)
    if callable(report):  # Kubernetes: waiting pods say why (kubectl get pods; node autoscalers: capacity only)
        controller.periodic.append(
            Periodic("pod conditions", 5.0, lambda now: report(controller.loop.waiting_statuses))
        )
    if settings.backend == "kubernetes":  # CostBudgets and CostAttributions, reconciled by the leader
        from gpufleet.k8s.reconcile import custom_resources_duty

        k8s = settings.kubernetes
        controller.periodic.append(
            custom_resources_duty(db, backend, k8s.namespaces, budgets.rules, settings.budget_interval_s)
        )
    # proposals: expired ones closed, executed ones' measured effect stored (the leader, every minute)
    from gpufleet.services.proposals import upkeep_duty

    controller.periodic.append(upkeep_duty(db, budgets.rules))
    if settings.mlflow.enabled:  # ended jobs that name an MLflow run: their cost logged to it (docs/mlflow.md)
        from gpufleet.integrations.mlflow_sync import MlflowSync

        sync = MlflowSync(db, settings.mlflow, rules=budgets.rules, is_leader=lambda: controller.is_leader)
        controller.periodic.append(Periodic("mlflow sync", settings.mlflow.interval_s, sync.tick))
    write_private_file(home / SERVER_FILE, json.dumps({"url": settings.url}) + "\n")
    job_logs = None
    if settings.backend == "kubernetes":
        from gpufleet.k8s.adapter.logs import PodLogs

        job_logs = PodLogs(getattr(backend, "api_client", None))
    return Server(settings, db, controller, token_path, policy, job_logs)
