"""The custom resources ``CostBudget`` and ``CostAttribution`` (gpufleet.io/v1alpha1), reconciled by the leader.

:class:`CrReconciler` runs every few seconds on the leader (:meth:`CrReconciler.reconcile`, a
``Periodic`` duty of the controller). One pass:

1. lists the CostBudgets of every namespace; for each, reads the Secrets its channels name
   (:func:`~gpufleet.k8s.costbudget.secret_refs`, from the CR's namespace), maps it to a
   :class:`~gpufleet.wire.BudgetIn` (:func:`~gpufleet.k8s.costbudget.budget_in_from_cr`) and makes
   the gpufleet budget :func:`~gpufleet.k8s.costbudget.budget_name` names say the same: created if
   absent, replaced when it differs, through the same functions ``/v1/budgets`` uses
   (:func:`~gpufleet.services.budgets.budget_from_in`, :mod:`gpufleet.store.budgets_repo`); its
   status is computed as ``/v1/budgets/{name}/status`` computes it
   (:func:`~gpufleet.services.budgets.budget_status_out`) and written through the status
   subresource (:func:`~gpufleet.k8s.costbudget.cr_status_from`, a JSON merge patch); then the
   budgets the reconciler owns whose CostBudget is gone are deleted;
2. lists the CostAttributions; for each, prices the ledger over its windows with the server's
   pricing rules, as ``/v1/usage`` does (:func:`~gpufleet.cost.spend.spend_report`, one report per
   window), counts the team's active jobs it covers, and writes
   :func:`~gpufleet.k8s.attribution.attribution_status`.

Failures stay with their object: a bad spec gets ``Ready`` False, reason ``InvalidSpec``
(:func:`~gpufleet.k8s.crread.error_status`) and changes no budget; a Secret that is missing,
or lacks the key, is a bad spec naming the field that refers to it; an API or store error is
logged and counted (:class:`ReconcileStats`) and the next object is reconciled all the same.

Decisions:

- **A CR budget and an API budget are one budget.** The CostBudget ``ml/gpu-month`` *is* the
  gpufleet budget ``ml.gpu-month``: ``gpufleet budget ls`` and ``/v1/budgets`` show it, its
  alerts fire and its enforcement acts as for any budget, and the CR's status shows the same
  figures as ``/v1/budgets/ml.gpu-month/status``.
- **Ownership.** A budget the reconciler creates has ``created_by`` = ``k8s:`` + the first 28
  hex digits of the CR's ``metadata.uid`` (:func:`owner_mark`; API budgets have a token id
  ``tok_...`` or nothing there, and no API call sets or changes it). Only budgets so marked are
  ever updated or deleted by the reconciler; the CR is their source of truth, so an edit made
  through the API to such a budget is undone at the next pass. A CostBudget deleted and created
  again under the same name (another uid) gets a new budget (new id, alert history restarted),
  whether or not a pass ran in between.
- **Adoption: never automatic.** A budget of the same name that the API created (not marked) is
  left as it is: the CR gets ``Ready`` False, reason ``Conflict``, saying so. Adopting it would
  let whoever may write CostBudgets in a namespace rewrite (raise, disable) a budget an admin set
  for that team. To hand such a budget to a CR, an admin deletes it (``gpufleet budget delete
  <ns>.<name>``): the next pass creates the CR's.
- **Updates.** The stored budget is compared field by field with what the CR says (not only
  ``metadata.generation``): a generation bump with the same meaning writes nothing, and a Secret
  rotated under an unchanged CR, or an API edit of an owned budget, is corrected. The generation
  the status was computed from is ``status.observedGeneration``.
- **Deletion.** Only after a complete list of the CostBudgets: an owned budget whose CR is not
  in it is deleted (with its alerts). A CR that is invalid, or in a namespace of no team, still
  protects its budget (left untouched, the last good spec).
- **No churn.** A status is written only when it differs from the CR's current one in something
  other than the clock (``lastUpdated``, and ``windowStart`` of an attribution, move with time
  alone); the patch carries only what changed and ``null`` for what is gone.
- **Active pods and GPUs** of an attribution come from gpufleet's store: its ADMITTED and RUNNING
  jobs of the team that the attribution's selectors cover (namespace, project, experiment,
  labels); pods = their pod count, GPUs = pods x GPUs x the GPU fraction. No pod list per pass.

Needs (RBAC): list costbudgets and costattributions cluster-wide, patch their ``status``, get
Secrets in the team namespaces.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy.orm import Session

from gpufleet.control.controller import Periodic
from gpufleet.cost.budgets.model import DEFAULT_THRESHOLDS, Budget
from gpufleet.cost.ledger import Ledger
from gpufleet.cost.report import CostReport
from gpufleet.cost.rules import PricingRules
from gpufleet.cost.spend import spend_report
from gpufleet.errors import BackendError, ConflictError, GpufleetError, InputError
from gpufleet.k8s.attribution import (
    AttributionCosts,
    AttributionQuery,
    attribution_filters_from_cr,
    attribution_status,
)
from gpufleet.k8s.costbudget import budget_in_from_cr, budget_name, cr_status_from, secret_refs
from gpufleet.k8s.crds import COST_ATTRIBUTION, COST_BUDGET, CrdNames
from gpufleet.k8s.crread import error_status
from gpufleet.k8s.vocabulary import GPUFLEET_GROUP, GPUFLEET_VERSION
from gpufleet.model.share import milli_gpus
from gpufleet.services.budgets import budget_from_in, budget_status_out
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import BudgetRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import BudgetIn, BudgetStatusOut

log = logging.getLogger(__name__)

OWNER_PREFIX: Final = "k8s:"  # BudgetRow.created_by of a budget a CostBudget made (token ids are tok_...)
_UID_DIGITS: Final = 28  # created_by holds 32 characters: the prefix and 28 hex digits of the uid
MERGE_PATCH: Final = "application/merge-patch+json"
LIST_PAGE: Final = 500
ACTIVE_STATES: Final = ("ADMITTED", "RUNNING")
# status fields that move with the clock alone: a status differing only in these is not rewritten
CLOCK_FIELDS: Final = frozenset({"lastUpdated", "windowStart"})

TeamOfNamespace = Callable[[str], str | None] | Mapping[str, str]


@dataclass(slots=True)
class ReconcileStats:
    """What one pass did (and what went wrong: each failure is also logged)."""

    budgets: int = 0  # CostBudgets seen
    attributions: int = 0  # CostAttributions seen
    created: int = 0  # gpufleet budgets created
    updated: int = 0  # ... replaced with what the CR now says
    deleted: int = 0  # ... deleted: their CR is gone (or was created again)
    status_writes: int = 0  # status subresource patches
    status_unchanged: int = 0  # statuses left as they were (nothing but the clock moved)
    invalid: int = 0  # CRs refused: InvalidSpec (a missing Secret included)
    conflicts: int = 0  # CostBudgets whose budget name an API budget holds
    api_errors: int = 0  # failed Kubernetes API calls (lists, Secret reads, status writes)
    errors: int = 0  # other failures (store, bugs) of one object

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class KubeApiFailure(Exception):
    """A Kubernetes API call failed (``status`` 0: no answer)."""

    def __init__(self, what: str, status: int, detail: str) -> None:
        super().__init__(f"{what}: {status or 'no answer'} {detail}".strip())
        self.status = status


def owner_mark(uid: str) -> str:
    """``created_by`` of the budget a CostBudget with ``uid`` owns (fits the column's 32 characters)."""
    return OWNER_PREFIX + uid.replace("-", "")[:_UID_DIGITS]


def is_owned(row: BudgetRow) -> bool:
    """Did the reconciler create this budget (for some CostBudget)?"""
    return (row.created_by or "").startswith(OWNER_PREFIX)


class _TeamMap(Mapping[str, str]):
    """``team_of_namespace`` as the mapping the CR mappings read (``.get``), answers memoized for
    one pass when it is a function."""

    def __init__(self, source: TeamOfNamespace) -> None:
        self._source = source
        self._memo: dict[str, str | None] = {}

    def __getitem__(self, namespace: str) -> str:
        if isinstance(self._source, Mapping):
            return self._source[namespace]
        if namespace not in self._memo:
            self._memo[namespace] = self._source(namespace)
        team = self._memo[namespace]
        if not team:
            raise KeyError(namespace)
        return team

    def __iter__(self) -> Iterator[str]:
        # a function cannot be listed: only its answers so far
        if isinstance(self._source, Mapping):
            return iter(self._source)
        return iter([ns for ns, team in self._memo.items() if team])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def store_team_of_namespace(db: Database, namespace_of_team: Mapping[str, str]) -> Callable[[str], str | None]:
    """namespace → team from the store's teams, each in ``namespace_of_team``'s namespace or else
    the namespace named as the team (as the Kubernetes backend places them); read at each call."""

    def team_of(namespace: str) -> str | None:
        with db.session(readonly=True) as s:
            names = [t.name for t in repo.list_teams(s)]
        return next((t for t in names if namespace_of_team.get(t, t) == namespace), None)

    return team_of


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: changed values, ``None``
    for removed keys, nested objects diffed (lists are replaced whole)."""
    out: dict[str, Any] = {}
    for k, v in new.items():
        o = old.get(k)
        if isinstance(v, Mapping) and isinstance(o, Mapping):
            sub = merge_patch(o, v)
            if sub:
                out[k] = sub
        elif k not in old or o != v:
            out[k] = v
    for k in old:
        if k not in new:
            out[k] = None
    return out


def _without_clock(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in CLOCK_FIELDS}


def _as_stored(b: Budget) -> Budget:
    """``b`` as the store gives it back: no thresholds reads as gpufleet's defaults."""
    return b if b.thresholds else dataclasses.replace(b, thresholds=DEFAULT_THRESHOLDS)


def _generation(meta: Mapping[str, Any]) -> int:
    g = meta.get("generation")
    return g if isinstance(g, int) and not isinstance(g, bool) and g >= 0 else 0


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a CR is, read leniently (its status is written even when the rest is invalid)."""

    names: CrdNames
    namespace: str
    name: str
    uid: str
    generation: int
    previous: Mapping[str, Any] | None

    def __str__(self) -> str:
        return f"{self.names.kind} {self.namespace}/{self.name}"

    @classmethod
    def of(cls, cr: Any, names: CrdNames) -> _Target | None:
        meta = cr.get("metadata") if isinstance(cr, Mapping) else None
        if not isinstance(meta, Mapping):
            return None
        ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (isinstance(ns, str) and ns and isinstance(name, str) and name):
            return None
        status = cr.get("status")
        return cls(
            names,
            ns,
            name,
            uid if isinstance(uid, str) else "",
            _generation(meta),
            status if isinstance(status, Mapping) else None,
        )


class CrReconciler:
    """Reconciles CostBudgets and CostAttributions with gpufleet's budgets and costs (see the module
    docstring). ``api_client``: a ``kubernetes.client.ApiClient``. ``team_of_namespace``: namespace
    → the team that owns it (a mapping, or a function answering None for no team). ``rules``: the
    server's pricing rules, the object ``/v1/usage`` and the budgets price with."""

    def __init__(
        self,
        db: Database,
        api_client: Any,
        *,
        team_of_namespace: TeamOfNamespace,
        rules: PricingRules | None,
        now: Callable[[], float] = time.time,
    ) -> None:
        from kubernetes import client

        self.db = db
        self.team_of_namespace = team_of_namespace
        self.rules = rules
        self.now = now
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.last: ReconcileStats | None = None
        self._missing: set[str] = set()  # kinds whose CRD answered 404 (said once)

    # -- the pass ------------------------------------------------------------------------------------------

    def reconcile(self, now: float | None = None) -> ReconcileStats:
        """One pass over every CostBudget and CostAttribution (``now``: the time the figures are
        computed at; default: ``self.now()``). Never raises for one object or one failed call."""
        t = self.now() if now is None else now
        stats = ReconcileStats()
        teams = _TeamMap(self.team_of_namespace)
        self._budgets(t, teams, stats)
        self._attributions(t, teams, stats)
        self.last = stats
        if stats.api_errors or stats.errors:
            log.warning("custom resources: %s", stats.as_dict())
        return stats

    def _budgets(self, now: float, teams: Mapping[str, str], stats: ReconcileStats) -> None:
        items = self._list_or_none(COST_BUDGET, stats)
        if items is None:  # no budget created, changed or deleted this pass
            return
        keep: set[str] = set()
        for cr in items:
            stats.budgets += 1
            target = _Target.of(cr, COST_BUDGET)
            if target is None:
                stats.errors += 1
                log.error("a CostBudget without namespace or name: %.200r", cr)
                continue
            keep.add(budget_name(target.namespace, target.name))
            try:
                self._budget(cr, target, now, teams, stats)
            except Exception:  # one object never stops the others
                stats.errors += 1
                log.exception("reconciling %s failed", target)
        try:
            self._delete_orphans(keep, stats)
        except Exception:
            stats.errors += 1
            log.exception("deleting the budgets of deleted CostBudgets failed")

    def _attributions(self, now: float, teams: Mapping[str, str], stats: ReconcileStats) -> None:
        items = self._list_or_none(COST_ATTRIBUTION, stats)
        if items is None:
            return
        ledgers: dict[tuple[float, float], Ledger] = {}  # one ledger per window and pass
        for cr in items:
            stats.attributions += 1
            target = _Target.of(cr, COST_ATTRIBUTION)
            if target is None:
                stats.errors += 1
                log.error("a CostAttribution without namespace or name: %.200r", cr)
                continue
            try:
                self._attribution(cr, target, now, teams, ledgers, stats)
            except Exception:
                stats.errors += 1
                log.exception("reconciling %s failed", target)

    # -- CostBudget ----------------------------------------------------------------------------------------

    def _budget(
        self, cr: Mapping[str, Any], target: _Target, now: float, teams: Mapping[str, str], stats: ReconcileStats
    ) -> None:
        at = datetime.fromtimestamp(now, UTC)
        try:
            secrets = self._secrets(target.namespace, secret_refs(cr))
            body = budget_in_from_cr(cr, teams, secrets=secrets)
            status, thresholds = self._apply(body, target, now, stats)
            new = cr_status_from(status, thresholds, generation=target.generation, now=at, previous=target.previous)
        except (GpufleetError, KubeApiFailure) as e:
            new = self._failed(e, target, at, stats)
        self._write_status(target, new, stats)

    def _apply(
        self, body: BudgetIn, target: _Target, now: float, stats: ReconcileStats
    ) -> tuple[BudgetStatusOut, list[float]]:
        """Make the budget say what ``body`` says (see the module docstring); its status."""
        mark = owner_mark(target.uid)
        with self.db.session() as s:
            desired = budget_from_in(body)
            row = repo.budget_named(s, body.name)
            if row is not None and not is_owned(row):
                raise ConflictError(
                    f"budget '{body.name}' exists and was not made from a CostBudget (created through the API): "
                    f"it is left as it is. To manage it from this CostBudget, an admin deletes it "
                    f"(gpufleet budget delete {body.name}); or rename this CostBudget"
                )
            if row is not None and row.created_by != mark:
                # the CostBudget was deleted and created again: a new budget, as if a pass had run between
                log.info("%s is a new object (uid %s): its budget '%s' is made anew", target, target.uid, body.name)
                budgets_repo.delete_budget(s, row.id)
                stats.deleted += 1
                row = None
            if row is None:
                row = budgets_repo.create_budget(s, desired, created_by=mark, now=now)
                stats.created += 1
                log.info("%s: budget '%s' created (%s)", target, body.name, body.scope)
            else:
                wanted = _as_stored(dataclasses.replace(desired, id=row.id))
                if budgets_repo.budget_of(row) != wanted:
                    row = budgets_repo.update_budget(s, row.id, wanted, now)
                    stats.updated += 1
                    log.info("%s: budget '%s' updated (generation %d)", target, body.name, target.generation)
            status = budget_status_out(s, row, now, self.rules)
            thresholds = [t.percent for t in budgets_repo.budget_of(row).thresholds]
        return status, thresholds

    def _delete_orphans(self, keep: set[str], stats: ReconcileStats) -> None:
        with self.db.session() as s:
            for row in budgets_repo.list_budgets(s):
                if is_owned(row) and row.name not in keep:
                    budgets_repo.delete_budget(s, row.id)
                    stats.deleted += 1
                    log.info("budget '%s' deleted: its CostBudget is gone", row.name)

    def _secrets(self, namespace: str, refs: set[tuple[str, str]]) -> dict[str, dict[str, str]]:
        """The decoded data of the Secrets ``refs`` name, in ``namespace``; a missing Secret is
        left out (the mapping then refuses the field that names it)."""
        out: dict[str, dict[str, str]] = {}
        for name in sorted({n for n, _ in refs}):
            try:
                secret = self._json(
                    f"read Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace
                )
            except KubeApiFailure as e:
                if e.status == 404:
                    continue
                raise
            data: dict[str, str] = {}
            for k, v in (secret.get("data") or {}).items():
                try:
                    data[k] = base64.b64decode(v, validate=True).decode("utf-8")
                except (binascii.Error, UnicodeDecodeError, TypeError, ValueError):
                    continue  # not text: as if absent
            for k, v in (secret.get("stringData") or {}).items():  # never returned by a real server
                if isinstance(v, str):
                    data.setdefault(k, v)
            out[name] = data
        return out

    # -- CostAttribution -----------------------------------------------------------------------------------

    def _attribution(
        self,
        cr: Mapping[str, Any],
        target: _Target,
        now: float,
        teams: Mapping[str, str],
        ledgers: dict[tuple[float, float], Ledger],
        stats: ReconcileStats,
    ) -> None:
        at = datetime.fromtimestamp(now, UTC)
        try:
            q = attribution_filters_from_cr(cr, teams)
            reports: dict[str, CostReport] = {}
            for key, window in q.windows(now).items():
                if window not in ledgers:
                    with self.db.session(readonly=True) as s:
                        ledgers[window] = repo.load_ledger(s, window[0], window[1], now)
                reports[key] = spend_report(
                    ledgers[window],
                    window[0],
                    window[1],
                    aggregate=q.aggregate,
                    filters=q.filters,
                    rules=self.rules,
                    as_of=now,
                )
            costs = AttributionCosts(**{k: q.cost(r) for k, r in reports.items()})
            with self.db.session(readonly=True) as s:
                pods, gpus = active_jobs(s, q)
            new = attribution_status(
                q.lines(reports["total"]),
                costs,
                query=q,
                active_pods=pods,
                active_gpus=gpus,
                now=at,
                previous=target.previous,
            )
        except (GpufleetError, KubeApiFailure) as e:
            new = self._failed(e, target, at, stats)
        self._write_status(target, new, stats)

    # -- status --------------------------------------------------------------------------------------------

    def _failed(
        self, e: GpufleetError | KubeApiFailure, target: _Target, at: datetime, stats: ReconcileStats
    ) -> dict[str, Any]:
        """The error status of ``target`` (counted; logged when it is news)."""
        error: GpufleetError
        if isinstance(e, KubeApiFailure):
            stats.api_errors += 1
            error = BackendError(f"Kubernetes API: {e}")
        else:
            error = e
            if isinstance(e, InputError):
                stats.invalid += 1
            elif isinstance(e, ConflictError):
                stats.conflicts += 1
            else:
                stats.errors += 1
        new = error_status(error, generation=target.generation, now=at, previous=target.previous)
        if target.previous is None or _without_clock(new) != _without_clock(target.previous):
            log.warning("%s not reconciled: %s", target, error)
        return new

    def _write_status(self, target: _Target, new: Mapping[str, Any], stats: ReconcileStats) -> None:
        """Patch the status subresource with what changed (nothing when only the clock moved)."""
        new = json.loads(json.dumps(new))  # as the API server will give it back
        old = target.previous or {}
        if target.previous is not None and _without_clock(new) == _without_clock(old):
            stats.status_unchanged += 1
            return
        patch = {"status": merge_patch(old, new)}
        try:
            self._json(
                f"patch {target} status",
                self.custom.patch_namespaced_custom_object_status,
                GPUFLEET_GROUP,
                GPUFLEET_VERSION,
                target.namespace,
                target.names.plural,
                target.name,
                patch,
                _content_type=MERGE_PATCH,
            )
        except KubeApiFailure as e:
            if e.status == 404:  # deleted since the list: nothing to tell it
                log.debug("%s is gone; status not written", target)
                return
            stats.api_errors += 1
            log.warning("cannot write the status of %s: %s", target, e)
            return
        stats.status_writes += 1

    # -- the API ------------------------------------------------------------------------------------------

    def _list_or_none(self, names: CrdNames, stats: ReconcileStats) -> list[Any] | None:
        """:meth:`_list`, or None when it failed (counted and logged). A 404 says the CRD is not
        installed: said once, not counted (no CR can exist; nothing is deleted either)."""
        try:
            items = self._list(names)
        except KubeApiFailure as e:
            if e.status == 404:
                if names.kind not in self._missing:
                    self._missing.add(names.kind)
                    log.warning(
                        "the %s CRD is not installed (gpufleet k8s crds | kubectl apply -f -): %s skipped",
                        names.crd_name,
                        names.plural,
                    )
                return None
            stats.api_errors += 1
            log.warning("cannot list %s: %s", names.plural, e)
            return None
        self._missing.discard(names.kind)
        return items

    def _list(self, names: CrdNames) -> list[Any]:
        """Every object of ``names`` in every namespace (all pages)."""
        items: list[Any] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            page = self._json(
                f"list {names.plural}",
                self.custom.list_cluster_custom_object,
                GPUFLEET_GROUP,
                GPUFLEET_VERSION,
                names.plural,
                **kwargs,
            )
            got = page.get("items")
            items.extend(got if isinstance(got, list) else [])
            meta = page.get("metadata")
            token = meta.get("continue") if isinstance(meta, Mapping) else None
            if not token:
                return items

    @staticmethod
    def _json(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = call(*args, _preload_content=False, **kwargs)
        except ApiException as e:
            raise KubeApiFailure(what, int(e.status or 0), f"{e.reason}: {(e.body or '')[:300]}") from None
        except Exception as e:  # connection refused, TLS, timeouts
            raise KubeApiFailure(what, 0, str(e)[:300]) from None
        try:
            data = json.loads(resp.data)
        except ValueError as e:
            raise KubeApiFailure(what, 0, f"not JSON: {e}") from None
        return data if isinstance(data, dict) else {}


def active_jobs(s: Session, q: AttributionQuery) -> tuple[int, float]:
    """Pods and GPUs that the team's ADMITTED and RUNNING jobs covered by ``q`` hold now."""
    pods = 0
    gpus = 0.0
    for row in repo.team_jobs_matching(s, q.team, ACTIVE_STATES, q.match):
        labels = row.labels or {}
        if any(labels.get(k) is None or str(labels[k]) != v for k, v in q.filters.labels.items()):
            continue
        pods += row.pods
        gpus += milli_gpus(row.pods * row.gpus * row.gpu_milli)
    return pods, gpus


def custom_resources_duty(
    db: Database, backend: Any, namespace_of_team: Mapping[str, str], rules: PricingRules | None, interval_s: float
) -> Periodic:
    """The controller's periodic duty that reconciles the custom resources, for ``backend: kubernetes``
    (``backend``: the :class:`~gpufleet.k8s.adapter.backend.KubernetesBackend`, whose API
    client it uses; teams from the store, in their namespaces as the backend places them)."""
    reconciler = CrReconciler(
        db, backend.api_client, team_of_namespace=store_team_of_namespace(db, namespace_of_team), rules=rules
    )
    return Periodic("k8s-custom-resources", interval_s, reconciler.reconcile)
