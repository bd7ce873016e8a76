"""MLflow: a job that names an MLflow run gets its cost logged to that run when it ends.

A job names a run with the label ``mlflow-run-id`` (``gpufleet submit --mlflow-run RUN_ID``, the SDK's
``submit(mlflow_run=...)``), or with ``MLFLOW_RUN_ID`` in its environment, which the submit path turns
into that label (:func:`mlflow_labels`). When the job has ended, the leader's duty
(:class:`MlflowSync`, registered in :func:`gpufleet.server.host.build_server`) logs to the run:

- metrics ``gpufleet.cost_usd`` (what the ledger charged the job, with the server's pricing rules, in
  cents: ``/v1/usage?aggregate=job`` over the job's own span), ``gpufleet.cost_usd_exact`` (the same
  before rounding: what a job budget is compared with; a report over a longer window may round the
  job's line a cent the other way), ``gpufleet.gpu_hours`` (GPU-equivalent hours held) and
  ``gpufleet.run_seconds`` (wall time it held resources, over all its runs);
- tags ``gpufleet.job_id``, ``gpufleet.job_name``, ``gpufleet.team``, ``gpufleet.project``,
  ``gpufleet.experiment``, ``gpufleet.cost_center`` (the label ``cost-center``) and ``gpufleet.state``;
- ROI, when the run has the ROI metric (``mlflow.roi_metric``, default ``accuracy``; a job's label
  ``mlflow-roi-metric: val_loss:min`` overrides it) with two values or more: ``gpufleet.improvement``
  (last − first value of its history, by step; first − last for a metric to minimise) and
  ``gpufleet.improvement_per_usd`` (that per dollar of ``gpufleet.cost_usd_exact``; not logged for a
  job that cost nothing), with the tag ``gpufleet.roi_metric`` (``accuracy:max``).

**Where.** The tracking server is ``mlflow.tracking_uri``, unless the job names its own
``MLFLOW_TRACKING_URI``; with neither, the job is left alone. The server connects with *its own*
MLflow credentials (``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` in its
environment: MLflow's client sends them to whatever URI it is given), so a job's own URI is used only
when it is ``mlflow.tracking_uri`` itself or lies under an entry an admin listed in
``mlflow.job_tracking_uris`` (empty by default). URIs are compared parsed, never as strings: same
scheme, same host, same port (the scheme's default when absent) and the entry's path as a prefix in
whole segments (:mod:`gpufleet.integrations.mlflow_uris`); a job URI with a user name or password, a
query, a fragment, a ``.``/``..`` segment, a backslash or a space is never allowed, and an http(s)
entry must name a host.
A job whose URI is not allowed is not logged anywhere: an ``mlflow_skipped`` event names the setting.

**Whose run.** The server writes to a run only for the team that owns it: **the run's experiment
must carry the tag** ``gpufleet.team`` **whose value is the job's team** (exactly;
``MlflowClient().set_experiment_tag(experiment_id, "gpufleet.team", "vision")``, once per
experiment). The run is read (``runs/get``, then ``experiments/get``) before anything is written; a
run whose experiment has no such tag, or another team's, gets nothing, and the job an
``mlflow_skipped`` event saying so (without naming the other team). The run's own ``gpufleet.team``
tag grants nothing: the server writes it itself, and anyone who may write to a run may set it, while
the experiment is the unit MLflow's permissions are given on, so a team that cannot edit another
team's experiment cannot make the server write into that team's runs.

**Exactly once.** Success is recorded as a job event whose reason starts with ``mlflow_logged`` (its
``old`` and ``new`` are the job's final state, so anything that replays states is unaffected); a job
with such an event is never logged again, after a restart or on another leader. A crash between the
MLflow write and the event is caught by the run's tag ``gpufleet.job_id``: the run already holds
this job's figures, so only the event is written. A job that cannot be logged (its URI is not
allowed, its run is not its team's, or it still fails ``give_up_after_s`` after it ended) gets an
``mlflow_skipped`` event.

**Never in the scheduler's way.** Each pass runs on a thread of its own (the periodic duty only
starts it), MLflow's own HTTP retries are turned off (``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``) and its
requests time out after ``request_timeout_s``; a failure (an unreachable server, a bad URI, a run that
does not exist, MLflow not installed) is logged and retried with exponential back-off
(``retry_min_s`` doubling up to ``retry_max_s``). ``mlflow`` is an optional extra, imported only here
and only when a job names a run.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.clock import Clock, WallClock
from gpufleet.cost.spend import spend_report
from gpufleet.errors import InputError
from gpufleet.integrations.mlflow_uris import allowed_uri, is_file_store, redact_uri, uri_allowed, uri_key_or_none
from gpufleet.store import repo
from gpufleet.store.repo.jobs import TERMINAL_STATES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from gpufleet.cost.rules import PricingRules
    from gpufleet.server.settings import MlflowSettings
    from gpufleet.store.db import Database

log = logging.getLogger(__name__)

RUN_LABEL = "mlflow-run-id"  # the job label naming the run (a valid label key: wire.py, Kubernetes)
ROI_METRIC_LABEL = "mlflow-roi-metric"  # per job: "<metric>" or "<metric>:max" / "<metric>:min"
RUN_ID_ENV = "MLFLOW_RUN_ID"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# MLflow run ids are 32 hex digits (UUID4); accept what other tracking servers use, nothing that is not an id.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

LOGGED = "mlflow_logged"  # the reason prefix of the job event that records a successful log
SKIPPED = "mlflow_skipped"  # ... and of one that records giving up

METRIC_COST = "gpufleet.cost_usd"
METRIC_COST_EXACT = "gpufleet.cost_usd_exact"
METRIC_GPU_HOURS = "gpufleet.gpu_hours"
METRIC_RUN_SECONDS = "gpufleet.run_seconds"
METRIC_IMPROVEMENT = "gpufleet.improvement"
METRIC_IMPROVEMENT_PER_USD = "gpufleet.improvement_per_usd"
TAG_JOB_ID = "gpufleet.job_id"
TAG_TEAM = "gpufleet.team"  # on a run: the job's team (written); on an experiment: the team that owns its runs (read)

EVENT_ID_SLACK = 1000  # job events this far below the newest seen are looked at again (late commits)
MAX_JOBS_PER_PASS = 100
_IN_CHUNK = 500
_MAX_TAG = 5000  # MLflow's limit on a tag value is 5000-8000 characters depending on the store


# -- the submit side ------------------------------------------------------------------------------


def check_run_id(value: str, field: str) -> str:
    """``value`` stripped if it is an MLflow run id, else :class:`InputError` naming ``field``."""
    v = value.strip()
    if not RUN_ID.fullmatch(v):
        raise InputError(
            f"{value[:80]!r} is not an MLflow run id (1-128 letters, digits, '-' or '_', e.g. 32 hex digits)",
            field=field,
        )
    return v


def mlflow_labels(labels: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The labels of a submission, with ``mlflow-run-id`` set from ``MLFLOW_RUN_ID`` in its ``env``
    when the labels do not name the run themselves. Both given and different, or a value that is not
    a run id, is an :class:`InputError` naming the field."""
    out = dict(labels)
    from_env = (env.get(RUN_ID_ENV) or "").strip()
    given = out.get(RUN_LABEL)
    if given is not None:
        out[RUN_LABEL] = check_run_id(given, f"labels[{RUN_LABEL}]")
        if from_env and check_run_id(from_env, f"env[{RUN_ID_ENV}]") != out[RUN_LABEL]:
            raise InputError(
                f"names MLflow run {out[RUN_LABEL]!r} but the env's {RUN_ID_ENV} is {from_env[:80]!r}",
                field=f"labels[{RUN_LABEL}]",
            )
    elif from_env:
        out[RUN_LABEL] = check_run_id(from_env, f"env[{RUN_ID_ENV}]")
    return out


# -- what is logged -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFigures:
    """A job's figures from the ledger (all its runs)."""

    cost_usd: float  # charged, with the server's pricing rules, before rounding to cents
    billed_usd: str  # the same in cents, as /v1/usage shows it over the job's span
    gpu_hours: float
    run_seconds: float  # wall time it held resources (the union of its segments: a gang's pods count once)


def job_figures(s: Session, job_id: str, now: float, rules: PricingRules | None) -> JobFigures:
    """What the ledger says ``job_id`` cost: its usage segments priced and allocated like
    ``/v1/usage?aggregate=job`` over a window that holds all of them."""
    spans = sorted(repo.job_segment_spans(s, job_id))
    if not spans:
        return JobFigures(0.0, "0.00", 0.0, 0.0)
    start, end = spans[0][0], max(b for _, b in spans)
    if end <= start:
        return JobFigures(0.0, "0.00", 0.0, 0.0)
    ledger = repo.load_ledger(s, start, end, now)
    cost, billed, gpu_s = 0.0, "0.00", 0.0
    for row in spend_report(ledger, start, end, aggregate=("job",), rules=rules, as_of=end).rows:
        if row.key[0] == job_id:
            cost, billed, gpu_s = float(row.exact_usd), str(row.total_cost_usd), row.gpu_seconds
    metered = sorted((g.start, g.end) for g in ledger.segments(as_of=end) if g.job_id == job_id)
    return JobFigures(cost, billed, gpu_s / 3600.0, _union_seconds(metered) if metered else 0.0)


def _union_seconds(spans: Sequence[tuple[float, float]]) -> float:
    total, cur_a, cur_b = 0.0, spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > cur_b:
            total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + cur_b - cur_a


def roi_of(label: str | None, metric: str | None, direction: str) -> tuple[str, str] | None:
    """(metric, "max"|"min") from a job's ``mlflow-roi-metric`` label, else the settings; None: no ROI."""
    if label:
        name, _, d = label.strip().rpartition(":")
        if name and d in ("max", "min"):
            return name, d
        return label.strip(), direction
    return (metric, direction) if metric else None


def improvement(history: Iterable[tuple[int, int, float]], direction: str) -> float | None:
    """Last − first value of a metric history of ``(step, timestamp_ms, value)`` (order: step, then
    time; first − last when ``direction`` is "min"); None with fewer than two finite values."""
    points = sorted((p for p in history if math.isfinite(p[2])), key=lambda p: (p[0], p[1]))
    if len(points) < 2:
        return None
    delta = points[-1][2] - points[0][2]
    return -delta if direction == "min" else delta


# -- the duty -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Retry:
    attempts: int
    next_at: float
    error: str


@dataclass(slots=True)
class SyncStats:
    """What one pass did (logs and tests)."""

    logged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: int = 0  # jobs whose retry is not due yet


@dataclass(frozen=True, slots=True)
class _Target:
    job_id: str
    run_id: str
    uri: str
    state: str
    ended_at: float
    team: str = ""


class _Refused(Exception):
    """The run may not be written for this job (not its team's): skipped with an event, not retried."""


class MlflowSync:
    """The leader's duty that logs ended jobs to their MLflow runs (see the module's doc).

    :meth:`tick` is the :class:`~gpufleet.control.controller.Periodic` callable: it starts a pass
    on a thread of its own unless one still runs. :meth:`sync_once` is one pass, synchronous.
    ``is_leader`` is asked before each job (a replica that lost leadership stops logging)."""

    def __init__(
        self,
        db: Database,
        settings: MlflowSettings,
        *,
        rules: PricingRules | None = None,
        clock: Clock | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        client_factory: Callable[[str], Any] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.rules = rules
        self.clock = clock or WallClock()
        self.is_leader = is_leader
        self._client_factory = client_factory or self._mlflow_client
        self._allowed = [allowed_uri(u) for u in settings.job_tracking_uris]
        # a job may name the server's own tracking server (exactly: scheme, host, port, path)
        self._own_key = uri_key_or_none(settings.tracking_uri or "")
        self._clients: dict[str, Any] = {}
        self._event_id: int | None = None  # the newest job event the scans have seen
        self._retry: dict[str, _Retry] = {}
        self._checked: dict[str, int] = {}  # jobs the scans have looked at → their final event's id
        self._no_uri_warned = False
        self._missing_warned = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one pass at a time
        self._set_mlflow_defaults()

    # -- scheduling ---------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Start a pass in the background (never blocks the controller's step)."""
        if not self.settings.enabled or self.busy:
            return
        self._thread = threading.Thread(target=self._background, args=(now,), name="gpufleet-mlflow", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A pass :meth:`tick` started is still running."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for a pass :meth:`tick` started (tests, shutdown)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _background(self, now: float) -> None:
        try:
            stats = self.sync_once(now)
        except Exception:  # the store went away: the next tick tries again
            log.exception("mlflow sync pass failed")
            return
        if stats.logged or stats.skipped:
            log.info("mlflow: logged %d job(s), skipped %d", len(stats.logged), len(stats.skipped))

    @property
    def retrying(self) -> Mapping[str, _Retry]:
        """Jobs whose log failed and will be tried again (job id → attempts, next try, last error)."""
        return self._retry

    # -- one pass -----------------------------------------------------------------------------------
    def sync_once(self, now: float | None = None) -> SyncStats:
        """Look for ended jobs that name a run and are not logged yet; log those that are due."""
        with self._lock:
            now = self.clock.now() if now is None else now
            stats = SyncStats()
            if not self.settings.enabled:
                return stats
            self._scan(now)
            due = [j for j, r in self._retry.items() if r.next_at <= now]
            stats.waiting = len(self._retry) - len(due)
            for job_id in sorted(due, key=lambda j: self._retry[j].next_at)[:MAX_JOBS_PER_PASS]:
                if not self.is_leader():
                    break
                self._one(job_id, now, stats)
            return stats

    def _scan(self, now: float) -> None:
        """New candidates: jobs whose move to a final state was recorded since the last scan (by
        event id: an index range, however large the store), that name a run and have no mlflow
        event yet, join the retry set as due now. The first scan looks back ``give_up_after_s``."""
        # moves to a final state only (old != new: not our own events); ids a slower transaction took
        # before the last scan's newest commit are looked at again
        after = None if self._event_id is None else self._event_id - EVENT_ID_SLACK
        with self.db.session(readonly=True) as s:
            events = repo.final_state_events(
                s, TERMINAL_STATES, since=now - self.settings.give_up_after_s, after_id=after
            )
            fresh = {job_id: eid for eid, job_id in events if job_id not in self._checked}
            named: list[str] = []
            ids = list(fresh)
            for i in range(0, len(ids), _IN_CHUNK):
                chunk = ids[i : i + _IN_CHUNK]
                named += [job_id for job_id, labels, env in repo.run_fields(s, chunk) if _names_run(labels, env)]
            recorded = _recorded(s, named)
            newest = max((eid for eid, _ in events), default=None)
            if newest is None and self._event_id is None:
                newest = repo.newest_job_event_id(s)
        self._checked.update(fresh)
        for job_id in named:
            if job_id not in recorded and job_id not in self._retry:
                self._retry[job_id] = _Retry(0, now, "")
        if newest is not None:
            self._event_id = max(self._event_id or 0, newest)
        floor = (self._event_id or 0) - EVENT_ID_SLACK
        for job_id, eid in list(self._checked.items()):  # forget what the next scans cannot see again
            if eid <= floor and job_id not in self._retry:
                del self._checked[job_id]

    def _one(self, job_id: str, now: float, stats: SyncStats) -> None:
        try:
            target = self._target(job_id, now, stats)
            if target is None:
                return
            figures, tags, roi = self._describe(target, now)
            try:
                self._log(target, figures, tags, roi)
            except _Refused as refused:
                self._skip(job_id, target.state, target.ended_at, now, str(refused), stats)
                return
            self._record(
                target,
                now,
                f"{LOGGED}: run {target.run_id} at {redact_uri(target.uri)}: ${figures.billed_usd}"
                f" ({figures.cost_usd:.6f}), {figures.gpu_hours:.6f} GPU-h, {figures.run_seconds:.1f} s",
            )
        except Exception as e:  # anything MLflow or the network throws: retried, never fatal
            self._failed(job_id, now, e, stats)
            return
        self._retry.pop(job_id, None)
        stats.logged.append(job_id)

    def _target(self, job_id: str, now: float, stats: SyncStats) -> _Target | None:
        """The job's run and tracking URI; None (and nothing more to do) when it cannot be logged."""
        with self.db.session(readonly=True) as s:
            row = repo.find_job(s, job_id)
            if row is None:  # deleted meanwhile
                self._retry.pop(job_id, None)
                return None
            labels = {str(k): str(v) for k, v in (row.labels or {}).items()}
            env = {str(k): str(v) for k, v in (row.env or {}).items()}
            state, ended, team = row.state, float(row.ended_at or now), row.team
        run_raw = labels.get(RUN_LABEL) or env.get(RUN_ID_ENV, "")
        if not RUN_ID.fullmatch(run_raw.strip()):
            self._skip(job_id, state, ended, now, f"{run_raw[:80]!r} is not an MLflow run id", stats)
            return None
        own = env.get(TRACKING_URI_ENV, "").strip()
        if own:
            if self._own_key is not None and uri_key_or_none(own) == self._own_key:
                uri = self.settings.tracking_uri or own  # the server's own tracking server, as configured
            elif uri_allowed(own, self._allowed):
                uri = own
            else:
                allowed = ", ".join(redact_uri(u) for u in self.settings.job_tracking_uris)[:500] or "none"
                why = (
                    f"the job's {TRACKING_URI_ENV} {redact_uri(own)} is not allowed (mlflow.job_tracking_uris:"
                    f" {allowed}): the server sends its own MLflow credentials to the tracking server, so"
                    " it logs only to mlflow.tracking_uri and to servers an admin listed in"
                    " mlflow.job_tracking_uris (compared by scheme, host, port and path)"
                )
                self._skip(job_id, state, ended, now, why, stats)
                return None
        elif self.settings.tracking_uri:
            uri = self.settings.tracking_uri
        else:
            if not self._no_uri_warned:
                self._no_uri_warned = True
                log.warning(
                    "mlflow: job %s names run %s but no tracking URI is known (set mlflow.tracking_uri, "
                    "or the job's %s); such jobs are not logged",
                    job_id,
                    run_raw,
                    TRACKING_URI_ENV,
                )
            self._retry.pop(job_id, None)
            return None
        return _Target(job_id, run_raw.strip(), uri, state, ended, team)

    def _describe(self, t: _Target, now: float) -> tuple[JobFigures, dict[str, str], tuple[str, str] | None]:
        with self.db.session(readonly=True) as s:
            row = repo.find_job(s, t.job_id)
            assert row is not None
            figures = job_figures(s, t.job_id, now, self.rules)
            labels = {str(k): str(v) for k, v in (row.labels or {}).items()}
            tags = {
                TAG_JOB_ID: t.job_id,
                "gpufleet.job_name": row.name,
                "gpufleet.team": row.team,
                "gpufleet.project": row.project,
                "gpufleet.experiment": row.experiment,
                "gpufleet.cost_center": labels.get("cost-center", ""),
                "gpufleet.state": t.state,
            }
        roi = roi_of(labels.get(ROI_METRIC_LABEL), self.settings.roi_metric, self.settings.roi_direction)
        return figures, {k: v[:_MAX_TAG] for k, v in tags.items() if v}, roi

    def _log(self, t: _Target, figures: JobFigures, tags: dict[str, str], roi: tuple[str, str] | None) -> None:
        entities = _import("mlflow.entities")
        client = self._client(t.uri)
        run = client.get_run(t.run_id)  # raises for a run that does not exist
        self._check_owner(client, run, t)  # before anything is written: _Refused if not the team's
        if run.data.tags.get(TAG_JOB_ID) == t.job_id and METRIC_COST in run.data.metrics:
            log.info("mlflow: run %s already holds job %s's figures (logged before a restart)", t.run_id, t.job_id)
            return
        values = {
            METRIC_COST: float(figures.billed_usd),
            METRIC_COST_EXACT: figures.cost_usd,
            METRIC_GPU_HOURS: figures.gpu_hours,
            METRIC_RUN_SECONDS: figures.run_seconds,
        }
        if roi is not None:
            name, direction = roi
            history = [(m.step, m.timestamp, m.value) for m in client.get_metric_history(t.run_id, name)]
            gain = improvement(history, direction)
            if gain is not None:
                values[METRIC_IMPROVEMENT] = gain
                if figures.cost_usd > 0:
                    values[METRIC_IMPROVEMENT_PER_USD] = gain / figures.cost_usd
                tags["gpufleet.roi_metric"] = f"{name}:{direction}"
        ts = int(t.ended_at * 1000)
        client.log_batch(
            t.run_id,
            metrics=[entities.Metric(k, float(v), ts, 0) for k, v in values.items()],
            tags=[entities.RunTag(k, v) for k, v in tags.items()],
        )

    @staticmethod
    def _check_owner(client: Any, run: Any, t: _Target) -> None:
        """The run is the job's team's: its experiment carries the tag ``gpufleet.team`` = the team
        (see the module's doc). Else :class:`_Refused`, saying what to set (never the other team)."""
        experiment = client.get_experiment(run.info.experiment_id)
        owner = (getattr(experiment, "tags", None) or {}).get(TAG_TEAM)
        if not t.team or owner is None or str(owner).strip() != t.team:
            raise _Refused(
                f"run {t.run_id} is not team {t.team!r}'s: the server writes to a run only for the team"
                f" its experiment names, and this run's experiment does not carry the tag {TAG_TEAM}={t.team}"
                f" (set it once on the team's experiment: MlflowClient().set_experiment_tag(experiment_id,"
                f" {TAG_TEAM!r}, {t.team!r}))"
            )

    # -- bookkeeping -------------------------------------------------------------------------------
    def _record(self, t: _Target, now: float, reason: str) -> None:
        with self.db.session() as s:
            repo.add_job_note(s, t.job_id, time=now, state=t.state, reason=reason)

    def _skip(self, job_id: str, state: str, ended: float, now: float, why: str, stats: SyncStats) -> None:
        log.warning("mlflow: job %s not logged: %s", job_id, why)
        self._record(_Target(job_id, "", "", state, ended), now, f"{SKIPPED}: {why}")
        self._retry.pop(job_id, None)
        stats.skipped.append(job_id)

    def _failed(self, job_id: str, now: float, e: BaseException, stats: SyncStats) -> None:
        why = _one_line(e)
        if isinstance(e, ImportError):
            why = f"mlflow is not installed ({why}): pip install 'gpufleet[mlflow]'"
        prev = self._retry.get(job_id) or _Retry(0, now, "")
        attempts = prev.attempts + 1
        delay = min(self.settings.retry_max_s, self.settings.retry_min_s * 2 ** min(attempts - 1, 30))
        self._retry[job_id] = _Retry(attempts, now + delay, why)
        stats.failed.append(job_id)
        ended = self._ended_at(job_id)
        if ended is not None and now - ended >= self.settings.give_up_after_s:
            try:
                with self.db.session(readonly=True) as s:
                    state = repo.job_state(s, job_id) or "FAILED"
                self._skip(job_id, state, ended, now, f"gave up after {attempts} attempt(s): {why}", stats)
            except Exception:
                log.exception("mlflow: cannot record giving up on job %s", job_id)
            return
        if isinstance(e, ImportError):  # said once: every job that names a run fails alike
            if self._missing_warned:
                return
            self._missing_warned = True
        log.warning("mlflow: logging job %s failed (attempt %d, next in %.0f s): %s", job_id, attempts, delay, why)

    def _ended_at(self, job_id: str) -> float | None:
        try:
            with self.db.session(readonly=True) as s:
                ended = repo.job_ended_at(s, job_id)
        except Exception:
            return None
        return None if ended is None else float(ended)

    # -- MLflow --------------------------------------------------------------------------------------
    def _client(self, uri: str) -> Any:
        client = self._clients.get(uri)
        if client is None:
            client = self._client_factory(uri)
            if len(self._clients) >= 64:
                self._clients.clear()
            self._clients[uri] = client
        return client

    @staticmethod
    def _mlflow_client(uri: str) -> Any:
        return _import("mlflow.tracking").MlflowClient(tracking_uri=uri)

    def _set_mlflow_defaults(self) -> None:
        """MLflow reads these from the environment only: no retries of its own (ours back off
        instead, off the scheduler's thread), a bounded request time, and its file store (which
        MLflow 3 refuses unless asked) when the server is configured with one. A variable the
        operator set stays as set."""
        st = self.settings
        if not st.enabled:
            return
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, math.ceil(st.request_timeout_s))))
        file_uris = [st.tracking_uri or "", *st.job_tracking_uris]
        if any(u and is_file_store(u) for u in file_uris):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _import(module: str) -> Any:
    """An MLflow module, imported on first use (mlflow is an optional extra: ImportError without it;
    typed ``Any`` so that gpufleet type-checks with or without it installed)."""
    return importlib.import_module(module)


def _names_run(labels: Any, env: Any) -> bool:
    return bool(
        (isinstance(labels, Mapping) and labels.get(RUN_LABEL))
        or (isinstance(env, Mapping) and str(env.get(RUN_ID_ENV) or "").strip())
    )


def _recorded(s: Session, job_ids: Sequence[str]) -> set[str]:
    """Those of ``job_ids`` that already have an mlflow event (logged or skipped)."""
    out: set[str] = set()
    for i in range(0, len(job_ids), _IN_CHUNK):
        chunk = job_ids[i : i + _IN_CHUNK]
        out.update(repo.jobs_with_event_reason(s, chunk, (LOGGED, SKIPPED)))
    return out


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"
