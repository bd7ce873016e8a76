"""Settings of the control plane (``gpufleet up``): a YAML file, ``GPUFLEET_*`` environment
variables and command-line flags, validated with pydantic-settings.

Precedence, highest first: command-line flags, environment (``GPUFLEET_PORT=9000``, nested with
``__``: ``GPUFLEET_SCHEDULER__BACKFILL=strict``), the YAML file (``--config``), the defaults. With
no file and no variables gpufleet runs on the embedded defaults: a SQLite store and the local
backend under ``GPUFLEET_HOME`` (the user's data directory).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from gpufleet.config import format_validation_error, read_yaml
from gpufleet.cost.rules import PricingConfig, load_rules
from gpufleet.errors import ConfigError
from gpufleet.integrations.mlflow_uris import allowed_uri  # the sync's own parser
from gpufleet.scheduling.profile import Profile
from gpufleet.sdk.config import DEFAULT_PORT, home_dir
from gpufleet.store.db import WHERE_TO_PUT_A_PASSWORD, read_url_file, url_secrets


class KubernetesSettings(BaseModel):
    """``backend: kubernetes``: where the cluster is and how gpufleet maps onto it."""

    model_config = ConfigDict(extra="forbid")

    kubeconfig: Path | None = None  # None: in-cluster config when running in a pod, else ~/.kube/config
    context: str | None = None
    namespaces: dict[str, str] = Field(default_factory=dict)  # team → namespace (default: the team's name)
    lease_namespace: str = Field("gpufleet-system", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    lease_name: str = Field("gpufleet-scheduler", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    # a standby takes over a silent leader's Lease after this long; the leader steps down after 2/3 of it
    lease_duration_s: float = Field(15.0, ge=3, le=300)
    adopt_interval_s: float = Field(2.0, gt=0, le=300)  # how often pods with schedulerName gpufleet are adopted
    dcgm_urls: list[str] = Field(default_factory=list)  # DCGM exporter /metrics endpoints to scrape
    default_image: str = "python:3.11-slim"
    checkpoint_claim: str | None = None  # a PersistentVolumeClaim mounted for checkpoints
    # scale-ups create Karpenter NodeClaims from the cluster's NodePools; idle nodes' claims are deleted
    karpenter: bool = False
    # an ended run's Job and pods are deleted this long after its end was stored (its logs meanwhile)
    keep_finished_s: float = Field(600.0, ge=0, le=30 * 86400)
    keep_failed_s: float = Field(3600.0, ge=0, le=30 * 86400)  # a run that failed or timed out


class WebhookSettings(BaseModel):
    """``webhook``: the validating admission webhook (docs/admission-webhook.md), served over HTTPS
    on its own port by every replica (``GPUFLEET_WEBHOOK__ENABLED``, ``GPUFLEET_WEBHOOK__CERT_FILE``...)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    host: str | None = None  # None: the server's host
    port: int = Field(8443, ge=1, le=65535)
    cert_file: Path | None = None  # PEM certificate (chain) the API server verifies (the chart's tls.crt)
    key_file: Path | None = None  # its PEM private key (tls.key)
    # What the registration's failurePolicy promises when gpufleet cannot read the store: Fail (deny,
    # status 500, saying why) or Ignore (allow with a warning). Keep it equal to the chart's.
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    namespaces: list[str] | None = None  # judge only these namespaces (None: every namespace of a team)
    # answer within this long (under the registration's timeoutSeconds): a store that does not answer
    # in time is a store gpufleet cannot read
    deadline_s: float = Field(8.0, gt=0, le=29)

    @model_validator(mode="after")
    def _tls(self) -> WebhookSettings:
        if self.enabled and (self.cert_file is None or self.key_file is None):
            raise ValueError("an enabled webhook serves HTTPS: set webhook.cert_file and webhook.key_file")
        return self


class MlflowSettings(BaseModel):
    """``mlflow``: what jobs that name an MLflow run get logged to it when they end (docs/mlflow.md):
    cost, GPU-hours and improvement per dollar as metrics, team/project/experiment as tags. Needs
    the optional extra (``pip install 'gpufleet[mlflow]'``); ``GPUFLEET_MLFLOW__TRACKING_URI``..."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # sync jobs that name a run (label mlflow-run-id, or MLFLOW_RUN_ID in their env)
    # The tracking server of jobs whose env has no MLFLOW_TRACKING_URI of its own. None: only jobs
    # that name their own are logged.
    tracking_uri: str | None = Field(None, min_length=1, max_length=2048)
    # Tracking servers a job may name with its own MLFLOW_TRACKING_URI, besides tracking_uri: the
    # server connects there with ITS OWN credentials (MLFLOW_TRACKING_TOKEN, _USERNAME/_PASSWORD), so
    # list only servers an admin trusts, e.g. ["https://mlflow.corp/team-a"]. Compared by scheme, host,
    # port and path prefix (whole segments), never as strings; an http(s) entry must name its host.
    # Empty (the default): a job that names a URI of its own is not logged (an mlflow_skipped event).
    job_tracking_uris: list[str] = Field(default_factory=list, max_length=100)
    # ROI: the run's metric whose history (last − first; first − last for "min") is the model's
    # improvement, per dollar. A job's label mlflow-roi-metric (``val_loss:min``) overrides it.
    roi_metric: str | None = Field("accuracy", min_length=1, max_length=250)
    roi_direction: Literal["max", "min"] = "max"
    interval_s: float = Field(15.0, gt=0, le=3600)  # how often ended jobs are looked for
    retry_min_s: float = Field(30.0, gt=0)  # a failed log is retried after this, doubling ...
    retry_max_s: float = Field(1800.0, gt=0)  # ... up to this
    # Jobs that ended longer ago than this are not looked for after a restart, and a log that still
    # fails this long after its job ended is given up (a job event says so).
    give_up_after_s: float = Field(7 * 86400.0, gt=0)
    request_timeout_s: float = Field(10.0, gt=0, le=600)  # one MLflow HTTP request (MLflow's own retries: off)

    @field_validator("job_tracking_uris")
    @classmethod
    def _job_tracking_uris(cls, uris: list[str]) -> list[str]:
        out = [u.strip() for u in uris]
        for u in out:
            allowed_uri(u)  # ValueError naming mlflow.job_tracking_uris and what is wrong
        return out


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUFLEET_", env_nested_delimiter="__", extra="forbid")

    home: Path = Field(default_factory=home_dir)  # store, logs, run state, admin token
    backend: Literal["local", "kubernetes"] = "local"  # this machine's GPUs, or a cluster's
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)  # the admission webhook (HTTPS)
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)  # log jobs' cost to their MLflow runs
    # SQLAlchemy URL; None: db_file's, else sqlite:///<home>/gpufleet.db. A password here comes from
    # $GPUFLEET_DB or a 0600 settings file, never from --db (argv is readable by every account).
    db: str | None = None
    db_file: Path | None = None  # a file (mode 0600, the server's own) holding the store URL
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    # GPUs: None = discover with NVML (none if no driver); or declared, e.g. "8xA100-80GB", "4xH100:mig"
    gpus: str | None = None
    node_name: str | None = None
    node_price_usd_per_hour: float | None = Field(None, ge=0)  # None: from the price catalog
    scheduler: Profile = Field(default_factory=Profile)
    poll_interval_s: float = Field(0.2, gt=0, le=10)  # backend and store polling
    cycle_interval_s: float = Field(2.0, gt=0, le=300)  # a cycle at least this often while jobs wait
    grace_s: float = Field(30.0, ge=0, le=3600)  # SIGTERM → SIGKILL on preemption and cancel
    telemetry_interval_s: float = Field(10.0, gt=0)  # GPU telemetry and jobs' progress files are read this often
    # A run's progress file ($GPUFLEET_PROGRESS_FILE) becomes at most this many rows a look and this
    # many a second sustained (a token bucket of progress_burst); lines in between are thinned, the
    # newest report is always kept, and a job event says so once per run.
    progress_rows_per_look: int = Field(100, ge=1, le=100_000)
    progress_rows_per_s: float = Field(10.0, gt=0, le=100_000)
    progress_burst: int = Field(100, ge=1, le=1_000_000)
    budget_interval_s: float = Field(10.0, gt=0)  # how often budgets are evaluated and their alerts dispatched
    single_user: bool = True  # create an admin token in <home>/admin.token on first start
    # Run jobs that have no Unix account (see `gpufleet team set --run-as`) as the server's own user,
    # root included. Only for a single-user machine (a laptop, `make run`): such jobs can read the
    # store and the admin token. Off: a job runs only as its owner's account (the server must be root).
    jobs_as_server: bool = False
    # Where jobs' own files live (per-team folders of per-job folders holding checkpoints and the
    # progress file, owned by the job's account). None: <home>/jobs for a non-root server (whose
    # jobs run as itself), /var/lib/gpufleet-jobs for root (GPUFLEET_HOME is 0700: jobs cannot enter).
    job_root: Path | None = None
    # Where jobs' output logs go (local backend). None: <home>/logs, beside the store: a separate
    # file system here keeps a job's output from filling the store's (which stops every team).
    log_dir: Path | None = None
    # A run's output kept in its log (local backend): past it, one notice line, and the rest is dropped.
    max_log_bytes: int = Field(1024**3, ge=4096)
    # Processes (and threads) of one run (local backend): the cgroup's pids.max; on a host without
    # the cgroup v2 pids controller, RLIMIT_NPROC of the job's account (all its processes together).
    max_job_pids: int = Field(4096, ge=16, le=4_194_304)
    max_body_bytes: int = Field(1024 * 1024, ge=1024, le=1024 * 1024 * 1024)  # larger requests get a 413
    # /readyz is 503 while the file system of the store (SQLite) or of the job logs has less free (0: no check)
    min_free_bytes: int = Field(256 * 1024 * 1024, ge=0)
    replica: str | None = None  # this replica's name (default: host:pid)
    api_workers: int = Field(1, ge=1, le=64)  # >1: API worker processes; the controller in the main one
    # A connection whose request head (request line and headers) is not complete this long after it
    # opened, or after its previous response, is closed (slow-loris); answers themselves are not timed.
    http_header_timeout_s: float = Field(10.0, gt=0, le=600)
    # Job logs: a read without follow sends at most log_read_max_bytes (X-Log-Next-Offset continues); open
    # follow streams per token and per API process (more: 429 with Retry-After).
    log_read_max_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    log_follows_per_token: int = Field(4, ge=1, le=10_000)
    log_follows_total: int = Field(64, ge=1, le=100_000)
    log_level: str = Field("info", pattern="^(critical|error|warning|info|debug)$")
    # Pricing rules (docs/pricing.md): a path to a rules YAML file, or the rules inline. Checked
    # when the settings load; the server compiles them with gpufleet.cost.rules.rules_from_setting.
    pricing: Path | PricingConfig | None = None

    @field_validator("db")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("sqlite", "postgresql")):
            raise ValueError("db must be a sqlite:/// or postgresql+psycopg:// URL")
        return v

    @field_validator("pricing", mode="before")
    @classmethod
    def _pricing(cls, v: Any) -> Any:
        # A ConfigError naming the rules file (or "settings: pricing"), line and field propagates
        # as is: clearer than pydantic's account of why neither a path nor a mapping matched.
        if isinstance(v, str | Path):
            load_rules(Path(v))
            return Path(v)
        if isinstance(v, Mapping):
            return load_rules(v, source="settings: pricing").config
        return v

    @model_validator(mode="after")
    def _one_store(self) -> Settings:
        if self.db is not None and self.db_file is not None:
            raise ValueError("db and db_file both name the store: give one")
        return self

    @property
    def db_url(self) -> str:
        if self.db:
            return self.db
        if self.db_file is not None:
            return read_url_file(self.db_file)
        return f"sqlite:///{self.home / 'gpufleet.db'}"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("the settings file must be a mapping", source=str(path))
    return data


def load_settings(config: Path | str | None = None, **flags: Any) -> Settings:
    """Settings from flags (``None`` values are ignored), the environment and an optional YAML file."""
    file_data = _read_yaml(Path(config)) if config is not None else {}
    if config is not None and isinstance(file_data.get("db"), str) and url_secrets(file_data["db"]):
        mode = Path(config).stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(
                f"holds the store's password but other accounts can read it (mode {mode:04o}): "
                f"chmod 600 {config}, or {WHERE_TO_PUT_A_PASSWORD}",
                source=str(config),
                field="db",
            )
    source = f"{config} / GPUFLEET_* environment" if config is not None else "GPUFLEET_* environment / flags"

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, InitSettingsSource(settings_cls, file_data))

    given: Mapping[str, Any] = {k: v for k, v in flags.items() if v is not None}
    try:
        s = _FromFile(**given)
    except ValidationError as e:
        raise format_validation_error(e, source) from None
    return Settings.model_construct(**{name: getattr(s, name) for name in Settings.model_fields})
