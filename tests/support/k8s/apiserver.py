"""A Kubernetes API server for tests: kmock's ``KubernetesEmulator`` with the API semantics it lacks.

kmock 0.8's emulator stores objects (``kmock.objects``: a history of dict versions per
``(resource, namespace, name)``) and serves list/get/create/merge-PATCH/delete/watch on them, but it
has no resourceVersion, uid or timestamps, no selectors, no PUT, no subresources, no conflict
detection, no graceful deletion, and its watches start "now" (no history). :class:`KubeApiServer`
keeps kmock's storage, HTTP server, discovery endpoints and reaction DSL (so a test can still inject
``server['patch /api/v1/namespaces/ns/pods/p'] << 500``), and answers every request for a *known*
resource itself, from one fallback reaction that outranks kmock's own fallbacks:

- create → 201 with ``metadata.uid``, a cluster-wide monotonic ``resourceVersion``,
  ``creationTimestamp``, ``generation``; ``generateName``; 409 AlreadyExists; name validation (422);
  built-in kinds are also checked against the Kubernetes 1.29 OpenAPI schema (``kubernetes-validate``,
  bad values are 422; unknown fields are a 400 by default (``field_validation="Strict"``, to catch
  typos) or dropped with ``?fieldValidation=Ignore|Warn``, as a real server does by default);
- list/watch with label selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``,
  ``<``, ``>``) and field selectors (per-kind allowed fields; others → 400), ``limit``/``continue``;
- get / PUT / PATCH (merge, strategic merge for built-ins, JSON patch) / DELETE with Status bodies
  (404 NotFound, 409 Conflict on a stale ``resourceVersion`` and on failed delete preconditions);
  no-op writes keep the resourceVersion; ``generation`` moves on spec changes;
- the ``status`` subresource: the main resource ignores ``.status``, ``/status`` changes only it;
- ``pods/binding`` (and the legacy ``bindings`` collection) → ``spec.nodeName`` + ``PodScheduled``;
  409 if already bound or being deleted;
- ``pods/eviction`` (policy/v1 Eviction) → ``DisruptionTarget`` condition + graceful deletion;
  PodDisruptionBudgets (``minAvailable`` / ``maxUnavailable``, ints or percentages) → 429;
- graceful deletion of pods (``deletionTimestamp`` + ``deletionGracePeriodSeconds``; default
  ``spec.terminationGracePeriodSeconds``; unbound or finished pods go at once; a shorter grace
  period overrides a longer one); finalizers hold any object until they are removed; ownerReference
  garbage collection on removal (Background; ``Orphan`` strips the reference; batch/v1 Jobs orphan
  by default, as the real API does); namespace deletion deletes the contents, then the namespace;
- watches from a ``resourceVersion`` (events after it), across namespaces or in one, with
  selectors (an object leaving a selector is sent as DELETED, entering it as ADDED, as the watch
  cache does), ``timeoutSeconds``, ``allowWatchBookmarks`` (one bookmark at the end), and an
  ``ERROR`` event with a 410 Expired Status for a resourceVersion older than the retained history
  (``watch_history`` events; :meth:`KubeApiServer.compact` drops history like an etcd compaction).

Not implemented (answered honestly instead): server-side apply (415), ``dryRun`` (400),
``resourceVersionMatch``/consistent snapshots for paginated lists (pages are key-ordered but not a
snapshot), admission, RBAC, quotas, the scheduler and every controller but the tiny ones above.

State lives on the event loop the server runs on and is not thread-safe: from another thread, go
through HTTP or :meth:`tests.support.k8s.cluster.Cluster.call`. The in-process methods (:meth:`create_object`,
:meth:`read_object`, :meth:`patch_object`, ...) take the same paths as HTTP requests and raise :class:`ApiError`.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import functools
import json
import math
import random
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp.web
import attrs
import jsonschema  # type: ignore[import-untyped]  # no types-jsonschema in the env
import kmock
import kmock._internal.dsl as kmock_dsl  # kmock==0.8 pinned: _handle below replaces its dispatch loop
import kmock._internal.rendering as kmock_rendering
import kubernetes_validate.utils  # type: ignore[import-untyped]
import referencing
from kmock import Response  # type: ignore[attr-defined]  # exported by kmock 0.8, but missing from its __all__

from tests.support.k8s import patching, selectors
from tests.support.k8s.faults import FaultPlan, status_body, verb_of

__all__ = [
    "BINDINGS",
    "BUILTIN_TYPES",
    "CONFIGMAPS",
    "COSTATTRIBUTIONS",
    "COSTBUDGETS",
    "EVENTS",
    "JOBS",
    "LEASES",
    "NAMESPACES",
    "NODECLAIMS",
    "NODEPOOLS",
    "NODES",
    "PODDISRUPTIONBUDGETS",
    "PODS",
    "ApiError",
    "KubeApiServer",
    "ResourceType",
    "ResourceVersionTooOld",
    "WatchEvent",
    "format_time",
    "utcnow",
]

Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 with second precision, as ``metav1.Time`` serialises."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ResourceType:
    """One served resource: its group/version/plural, kind, scope and API behaviour."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    field_selectors: frozenset[str] = frozenset()  # beyond metadata.name and metadata.namespace
    keep_status_on_create: bool = False  # with a status subresource, create drops .status unless set
    custom: bool = False  # a CustomResourceDefinition: no strategic merge patch, no schema at hand
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How API messages name the resource: ``pods``, ``jobs.batch``, ``nodeclaims.karpenter.sh``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def resource(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)


_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

PODS = ResourceType(
    "", "v1", "pods", "Pod", True, frozenset({"status", "binding", "eviction"}), _POD_FIELDS, short_names=("po",)
)
NODES = ResourceType(
    "", "v1", "nodes", "Node", False, frozenset({"status"}), frozenset({"spec.unschedulable"}),
    keep_status_on_create=True, short_names=("no",),
)  # fmt: skip
NAMESPACES = ResourceType(
    "", "v1", "namespaces", "Namespace", False, frozenset({"status"}), frozenset({"status.phase"}), short_names=("ns",)
)
EVENTS = ResourceType("", "v1", "events", "Event", True, frozenset(), _EVENT_FIELDS, short_names=("ev",))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",))
BINDINGS = ResourceType("", "v1", "bindings", "Binding", True)
JOBS = ResourceType("batch", "v1", "jobs", "Job", True, frozenset({"status"}), frozenset({"status.successful"}))
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
PODDISRUPTIONBUDGETS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, frozenset({"status"}), short_names=("pdb",)
)
COSTBUDGETS = ResourceType(
    "gpufleet.io", "v1alpha1", "costbudgets", "CostBudget", True, frozenset({"status"}), custom=True
)
COSTATTRIBUTIONS = ResourceType(
    "gpufleet.io", "v1alpha1", "costattributions", "CostAttribution", True, frozenset({"status"}), custom=True
)
NODECLAIMS = ResourceType("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False, frozenset({"status"}), custom=True)
NODEPOOLS = ResourceType("karpenter.sh", "v1", "nodepools", "NodePool", False, frozenset({"status"}), custom=True)

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    PODS, NODES, NAMESPACES, EVENTS, CONFIGMAPS, BINDINGS, JOBS, LEASES, PODDISRUPTIONBUDGETS,
    COSTBUDGETS, COSTATTRIBUTIONS, NODECLAIMS, NODEPOOLS,
)  # fmt: skip
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Field selector labels that are not plain paths, or read absent fields as something else than "".
_FIELD_ALIASES: dict[tuple[str, str], tuple[str, str]] = {
    ("jobs", "status.successful"): ("status.succeeded", "0"),
    ("pods", "spec.hostNetwork"): ("spec.hostNetwork", "false"),
    ("nodes", "spec.unschedulable"): ("spec.unschedulable", "false"),
}
_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
_NAMESPACE_COLLECTION = re.compile(r"^/apis?/(?:[^/]+/)?[^/]+/namespaces/?$")
# Server-managed metadata: clients cannot set it on create, updates cannot change it.
_SERVER_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
# Pod spec fields an update may change (k8s.io/kubernetes/pkg/apis/core/validation ValidatePodUpdate).
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


class ApiError(Exception):
    """An API failure with its HTTP code and ``Status`` body (raised in-process, served over HTTP)."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details else None

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


class ResourceVersionTooOld(Exception):
    """A watch asked for events that were compacted away (served as a 410 Expired ERROR event)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


@functools.cache
def _schema_validator(
    schema_version: str, kind: str, api_version: str, strict: bool
) -> jsonschema.Draft202012Validator | None:
    """kubernetes-validate's check, compiled once per kind (its ``validate`` re-reads ~1 MB of JSON per call)."""
    wanted = kubernetes_validate.utils.major_minor(schema_version)
    versions = [
        v for v in kubernetes_validate.utils.all_versions() if kubernetes_validate.utils.major_minor(v) <= wanted
    ]
    schema_dir = f"v{versions[-1]}-local" + ("-strict" if strict else "")
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kubernetes_validate.utils.schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api}.json", schema_version
        )
    except FileNotFoundError:
        return None  # no schema for this kind: nothing to check
    definitions = kubernetes_validate.utils.schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", schema_version
    )
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _details(rtype: ResourceType, name: str | None, **extra: Any) -> Obj:
    details: Obj = {"kind": rtype.plural}
    if name is not None:
        details["name"] = name
    if rtype.group:
        details["group"] = rtype.group
    details.update(extra)
    return details


def _not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rtype.qualified} "{name}" not found', _details(rtype, name))


def _conflict(rtype: ResourceType, name: str, why: str, *, subresource: str | None = None) -> ApiError:
    what = f"{rtype.qualified}/{subresource}" if subresource else rtype.qualified
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}', _details(rtype, name))


def _stale(rtype: ResourceType, name: str) -> ApiError:
    return _conflict(
        rtype, name, "the object has been modified; please apply your changes to the latest version and try again"
    )


def _invalid(rtype: ResourceType, name: str | None, field: str, why: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{rtype.kind} "{name or ""}" is invalid: {field}: {why}',
        _details(rtype, name, causes=[{"reason": "FieldValueInvalid", "message": why, "field": field}]),
    )


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _success(code: int, rtype: ResourceType | None = None, name: str | None = None, uid: str | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if rtype is not None:
        body["details"] = _details(rtype, name, **({"uid": uid} if uid else {}))
    return body


@dataclass(frozen=True)
class WatchEvent:
    """One write: ``obj`` is the object after it (for DELETED: the last state), ``old`` before it."""

    rv: int
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    rtype: ResourceType
    obj: Obj
    old: Obj | None


@dataclass(frozen=True)
class _Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


@dataclass(frozen=True)
class _Text:
    """A plain-text answer (``pods/log``): bytes, or a stream of them."""

    body: bytes | AsyncIterator[bytes]


def _route(path: str) -> _Route | None:
    """Split a resource URL; ``None`` for discovery and non-Kubernetes paths."""
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    # /api/v1/namespaces/{ns}/{plural}/... is namespaced; /api/v1/namespaces/{ns}[/status] is a Namespace.
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in {"status", "finalize"})
    ):
        namespace, rest = rest[1], rest[2:]
    return _Route(group, version, rest[0], namespace, rest[1] if len(rest) > 1 else None, "/".join(rest[2:]) or None)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in {"true", "1"}


def _int_param(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise _bad_request(f"invalid {name}: {value!r} is not an integer") from None


def _meta(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _condition(obj: Obj, ctype: str) -> Obj | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ctype:
            return condition  # type: ignore[no-any-return]
    return None


def set_condition(obj: Obj, ctype: str, status: str, reason: str | None = None, message: str | None = None) -> None:
    """Upsert ``status.conditions[type=ctype]``; ``lastTransitionTime`` moves only when the status does."""
    conditions: list[Obj] = obj.setdefault("status", {}).setdefault("conditions", [])
    existing = next((c for c in conditions if c.get("type") == ctype), None)
    if existing is None:
        existing = {"type": ctype}
        conditions.append(existing)
    if existing.get("status") != status:
        existing["lastTransitionTime"] = format_time(utcnow())
    existing["status"] = status
    for key, value in (("reason", reason), ("message", message)):
        if value is None:
            existing.pop(key, None)
        else:
            existing[key] = value


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    ready = _condition(dict(pod), "Ready")
    return (pod.get("status") or {}).get("phase") == "Running" and ready is not None and ready.get("status") == "True"


def _quantity(value: Any) -> str:
    return str(value)


def _qos_class(pod: Obj) -> str:
    containers = list((pod.get("spec") or {}).get("containers") or []) + list(
        (pod.get("spec") or {}).get("initContainers") or []
    )
    requests_seen = limits_seen = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = {k: _quantity(v) for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
        limits = {k: _quantity(v) for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")}
        requests_seen |= bool(requests)
        limits_seen |= bool(limits)
        if set(limits) != {"cpu", "memory"} or any(requests.get(k, limits[k]) != limits[k] for k in limits):
            guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_seen or limits_seen else "BestEffort"


def _default_pod(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    # The DefaultTolerationSeconds admission plugin (on by default): tolerate not-ready and
    # unreachable NoExecute taints for 300 s unless the pod says otherwise.
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(
            (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
            and t.get("effect") in (None, "", "NoExecute")
            for t in tolerations
        ):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        resources = container.setdefault("resources", {})
        if resources.get("limits") and not resources.get("requests"):
            resources["requests"] = dict(resources["limits"])  # requests default to limits
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(pod)}


def _default_job(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    uid = _meta(job)["uid"]
    name = _meta(job)["name"]
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        labels = template_meta.setdefault("labels", {})
        for key, value in {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }.items():
            labels.setdefault(key, value)
    template_spec = spec.setdefault("template", {}).setdefault("spec", {})
    template_spec.setdefault("restartPolicy", "Never")
    job["status"] = {}


def _default_namespace(namespace: Obj) -> None:
    meta = _meta(namespace)
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


_DEFAULTERS = {"pods": _default_pod, "jobs": _default_job, "namespaces": _default_namespace}


def _spec_part(obj: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


@attrs.define(kw_only=True)
class KubeApiServer(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with real API server semantics for the resources it knows.

    ``watch_history``: how many write events are kept for watches that resume from a
    resourceVersion (older ones get 410). ``schema_version``: the Kubernetes version whose OpenAPI
    schema validates built-in objects on create/update (``None`` disables it).
    ``field_validation``: what unknown fields in a request without ``?fieldValidation=`` get:
    ``Strict`` (400, the default here, to catch typos) or ``Warn``/``Ignore`` (dropped, as a real
    API server does by default). ``default_watch_timeout_s``: how long a watch without
    ``timeoutSeconds`` stays open.
    """

    watch_history: int = 1000
    schema_version: str | None = "1.29"
    field_validation: str = "Strict"  # when a request has no ?fieldValidation= (the real default is Warn)
    default_watch_timeout_s: float = 1800.0
    # faults a real API server produces (errors with Retry-After, delays, silence), consulted before serving
    faults: FaultPlan = attrs.field(factory=FaultPlan)

    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _rv: int = attrs.field(default=100, init=False)
    _events: deque[WatchEvent] = attrs.field(factory=deque, init=False)
    _compacted_rv: int = attrs.field(default=0, init=False)
    _changed: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _watch_epoch: int = attrs.field(default=0, init=False)  # end_watches() ends the watches of older epochs
    # container logs by pod uid and container name: (when written, the text of one line)
    _logs: dict[tuple[str, str], list[tuple[datetime.datetime, str]]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for rtype in BUILTIN_TYPES:
            self.register(rtype)
        # One reaction serves every known resource URL. `fallback ** 1` ranks it above kmock's own
        # fallbacks (list/fetch/create/... at `fallback`) and below anything a test adds explicitly.
        _ = (self.fallback**1)[self._is_resource_request] << self._serve
        # kmock serves discovery at /api and /apis only; clients (ApisApi, CoreApi) ask for /api/ and /apis/.
        _ = self.fallback["get /apis/"] << self._serve_apis
        _ = self.fallback["get /api/"] << self._serve_api
        for name in SYSTEM_NAMESPACES:
            self.create_object(NAMESPACES, None, {"metadata": {"name": name}})

    # --- registry ---------------------------------------------------------------------------

    def register(self, rtype: ResourceType) -> None:
        """Serve another resource (e.g. a CRD); it also appears in API discovery."""
        self._types[rtype.group, rtype.version, rtype.plural] = rtype
        self.resources[rtype.resource] = kmock.ResourceInfo(
            kind=rtype.kind,
            namespaced=rtype.namespaced,
            singular=rtype.kind.lower(),
            verbs=set(_VERBS) if rtype is not BINDINGS else {"create"},
            shortnames=set(rtype.short_names),
            subresources=set(rtype.subresources),
        )

    def resource_type(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion in the cluster."""
        return self._rv

    # --- storage ------------------------------------------------------------------------------

    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> tuple[kmock.resource, str | None, str]:
        return (rtype.resource, namespace if rtype.namespaced else None, name)

    def _stored(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        key = self._key(rtype, namespace, name)
        if key not in self._objects:
            return None
        entry = self._objects[key]
        return None if entry.deleted else entry.raw

    def peek(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """A copy of the stored object, or ``None``."""
        stored = self._stored(rtype, namespace, name)
        return copy.deepcopy(stored) if stored is not None else None

    def _require(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        stored = self.peek(rtype, namespace, name)
        if stored is None:
            raise _not_found(rtype, name)
        return stored

    def _iter(self, rtype: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        """Live stored objects of one resource (not copies), in (namespace, name) order."""
        wanted = rtype.resource
        found: list[tuple[str, str, Obj]] = []
        for (resource, ns, name), entry in self._objects.items():
            if resource == wanted and not entry.deleted and (namespace is None or ns == namespace):
                found.append((ns or "", name, entry.raw))
        for _, _, obj in sorted(found, key=lambda item: (item[0], item[1])):
            yield obj

    def _commit(
        self, rtype: ResourceType, obj: Obj, kind: Literal["ADDED", "MODIFIED", "DELETED"], old: Obj | None
    ) -> Obj:
        """Give ``obj`` the next resourceVersion, store it (or soft-delete it), log the event."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        key = self._key(rtype, meta.get("namespace"), meta["name"])
        if kind == "DELETED":
            self._objects[key].delete()
        elif key in self._objects:
            self._objects[key].history.append(copy.deepcopy(obj))
        else:
            self._objects[key] = copy.deepcopy(obj)
        self._events.append(WatchEvent(self._rv, kind, rtype, copy.deepcopy(obj), copy.deepcopy(old) if old else None))
        while len(self._events) > self.watch_history:
            self._compacted_rv = self._events.popleft().rv
        self._notify()
        return copy.deepcopy(obj)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def compact(self, resource_version: int | None = None) -> None:
        """Forget watch history up to ``resource_version`` (default: all), like an etcd compaction."""
        upto = self._rv if resource_version is None else resource_version
        while self._events and self._events[0].rv <= upto:
            self._events.popleft()
        self._compacted_rv = max(self._compacted_rv, upto)

    # --- validation ---------------------------------------------------------------------------

    def _check_type_meta(self, rtype: ResourceType, obj: Obj) -> None:
        if obj.get("kind") not in (None, "", rtype.kind):
            raise _bad_request(
                f"the kind {obj['kind']!r} does not match the URL's resource {rtype.qualified} ({rtype.kind})"
            )
        if obj.get("apiVersion") not in (None, "", rtype.api_version):
            raise _bad_request(f"the apiVersion {obj['apiVersion']!r} does not match the URL's {rtype.api_version!r}")
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        if not isinstance(obj.setdefault("metadata", {}), dict):
            raise _bad_request("metadata must be an object")

    def _validate_name(self, rtype: ResourceType, name: str) -> None:
        if rtype is NAMESPACES:
            ok, limit, what = bool(_DNS_LABEL.match(name)), 63, "RFC 1123 label"
        else:
            ok, limit, what = bool(_DNS_SUBDOMAIN.match(name)), 253, "RFC 1123 subdomain"
        if not ok or len(name) > limit:
            raise _invalid(
                rtype, name, "metadata.name",
                f"Invalid value: {name!r}: a lowercase {what} must consist of lower case alphanumeric characters, "
                f"'-' or '.', start and end with an alphanumeric character, at most {limit} characters",
            )  # fmt: skip

    def _validate_schema(self, rtype: ResourceType, obj: Obj, field_validation: str | None) -> None:
        """OpenAPI validation of a built-in object: 422 for bad values; unknown fields are a 400 with
        ``Strict`` and silently dropped with ``Ignore``/``Warn`` (no Warning header is sent)."""
        mode = field_validation or self.field_validation
        if mode not in ("Strict", "Warn", "Ignore"):
            raise _bad_request(f"fieldValidation must be Strict, Warn or Ignore, not {mode!r}")
        if self.schema_version is None or rtype.custom or rtype is BINDINGS:
            return
        validator = _schema_validator(self.schema_version, rtype.kind, rtype.api_version, True)
        if validator is None:
            return
        errors = list(validator.iter_errors(obj))
        unknown = [e for e in errors if e.validator == "additionalProperties" and isinstance(e.instance, dict)]
        name = _meta(obj).get("name")
        if unknown and mode == "Strict":
            where = ", ".join(".".join(str(p) for p in e.absolute_path) or "<root>" for e in unknown)
            why = "; ".join(e.message for e in unknown)
            raise ApiError(
                400, "BadRequest", f"strict decoding error: unknown field in {where}: {why}", _details(rtype, name)
            )
        for error in unknown:  # the same dicts as in obj: drop what the schema does not know
            known = set(error.schema.get("properties") or {}) if isinstance(error.schema, dict) else set()
            for key in [k for k in error.instance if k not in known]:
                del error.instance[key]
        invalid = [e for e in errors if e.validator != "additionalProperties"]
        if invalid:
            best = jsonschema.exceptions.best_match(invalid)
            assert best is not None
            raise _invalid(rtype, name, ".".join(str(p) for p in best.absolute_path) or "<root>", best.message)

    def _require_namespace(self, namespace: str) -> None:
        ns = self._stored(NAMESPACES, None, namespace)
        if ns is None:
            raise _not_found(NAMESPACES, namespace)
        if _meta(ns).get("deletionTimestamp"):
            raise ApiError(
                403, "Forbidden",
                f"unable to create new content in namespace {namespace} because it is being terminated",
                {"name": namespace, "kind": "namespaces"},
            )  # fmt: skip

    # --- in-process API (the HTTP handlers call these) ----------------------------------------

    def read_object(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        return self._require(rtype, namespace, name)

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Copies of the matching objects, in (namespace, name) order."""
        return [copy.deepcopy(obj) for obj in self._matching(rtype, namespace, label_selector, field_selector)]

    def count_objects(
        self, rtype: ResourceType, namespace: str | None = None, field_selector: str | None = None
    ) -> int:
        """How many objects match (no copies: for a benchmark's progress polls)."""
        return len(self._matching(rtype, namespace, None, field_selector))

    def _matching(
        self, rtype: ResourceType, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> list[Obj]:
        """The matching stored objects themselves (not copies: a page copies only what it serves)."""
        labels, fields = self._selectors(rtype, label_selector, field_selector)
        return [
            obj
            for obj in self._iter(rtype, namespace)
            if selectors.match_labels(labels, obj) and selectors.match_fields(fields, obj)
        ]

    def _selectors(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[list[selectors.LabelRequirement], list[selectors.FieldRequirement]]:
        try:
            labels = selectors.parse_label_selector(label_selector)
            fields = selectors.parse_field_selector(field_selector)
        except selectors.SelectorError as e:
            raise _bad_request(f"unable to parse requirement: {e}") from None
        allowed = {"metadata.name", "metadata.namespace"} | rtype.field_selectors
        for requirement in fields:
            if requirement.path not in allowed:
                supported = ", ".join(sorted(allowed))
                raise _bad_request(
                    f'field label not supported: {requirement.path} ("{rtype.kind}" allows: {supported})'
                )
        resolved: list[selectors.FieldRequirement] = []
        for requirement in fields:
            path, default = _FIELD_ALIASES.get((rtype.plural, requirement.path), (requirement.path, ""))
            resolved.append(selectors.FieldRequirement(path, requirement.operator, requirement.value, default))
        return labels, resolved

    def create_object(
        self, rtype: ResourceType, namespace: str | None, body: Any, *, field_validation: str | None = None
    ) -> Obj:
        if not isinstance(body, dict):
            raise _bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        # The API server's order: decode (400), admission (namespace 404/403), validation (422), storage (409).
        self._check_type_meta(rtype, obj)
        meta = obj["metadata"]
        for key in (*_SERVER_METADATA, "resourceVersion", "managedFields", "selfLink"):
            meta.pop(key, None)
        if rtype.namespaced:
            if namespace is None:
                raise ApiError(405, "MethodNotAllowed", f"create {rtype.qualified} needs a namespace in the URL")
            if meta.get("namespace") not in (None, "", namespace):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        self._validate_schema(rtype, obj, field_validation)
        if rtype.namespaced:
            assert namespace is not None
            self._require_namespace(namespace)
        name = meta.get("name")
        if not name:
            base = meta.get("generateName")
            if not base:
                raise _invalid(rtype, None, "metadata.name", "Required value: name or generateName is required")
            base = str(base)[:58]
            while True:
                name = base + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                if self._stored(rtype, namespace, name) is None:
                    break
            meta["name"] = name
        self._validate_name(rtype, name)
        if self._stored(rtype, namespace, name) is not None:
            raise ApiError(409, "AlreadyExists", f'{rtype.qualified} "{name}" already exists', _details(rtype, name))
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(utcnow())
        meta["generation"] = 1
        if rtype.has_status and not rtype.keep_status_on_create:
            obj.pop("status", None)
        if rtype.plural in _DEFAULTERS and not rtype.custom:
            _DEFAULTERS[rtype.plural](obj)
        return self._commit(rtype, obj, "ADDED", None)

    def replace_object(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        field_validation: str | None = None,
    ) -> Obj:
        """PUT: optimistic concurrency on ``metadata.resourceVersion`` (absent = unconditional)."""
        current = self._require(rtype, namespace, name)
        if not isinstance(body, dict):
            raise _bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        self._check_type_meta(rtype, obj)
        meta = obj["metadata"]
        if meta.get("name") not in (None, "", name):
            raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if rtype.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        expected = meta.get("resourceVersion")
        if expected not in (None, "") and expected != _meta(current)["resourceVersion"]:
            raise _stale(rtype, name)
        meta["name"] = name
        if rtype.namespaced:
            meta["namespace"] = namespace
        self._validate_schema(rtype, obj, field_validation)
        return self._update(rtype, current, obj, subresource)

    def patch_object(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: PatchType = "merge",
        *,
        subresource: str | None = None,
        field_validation: str | None = None,
    ) -> Obj:
        """PATCH; a ``metadata.resourceVersion`` in the patch is a precondition (409 if stale)."""
        current = self._require(rtype, namespace, name)
        try:
            if patch_type == "json":
                candidate = patching.apply_json_patch(current, patch)
            elif patch_type == "strategic":
                if rtype.custom:
                    raise ApiError(
                        415, "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types include: "
                        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    )  # fmt: skip
                if not isinstance(patch, dict):
                    raise _bad_request("a strategic merge patch must be a JSON object")
                candidate = patching.apply_strategic_merge_patch(current, patch)
            else:
                if not isinstance(patch, dict):
                    raise _bad_request("a merge patch must be a JSON object")
                candidate = patching.apply_merge_patch(current, patch)
        except patching.PatchError as e:
            raise ApiError(422, "Invalid", str(e), _details(rtype, name)) from None
        if not isinstance(candidate, dict) or not isinstance(candidate.get("metadata"), dict):
            raise ApiError(422, "Invalid", "the patched object is not a Kubernetes object", _details(rtype, name))
        current_rv = _meta(current)["resourceVersion"]
        if candidate["metadata"].get("resourceVersion") not in (None, "", current_rv):
            raise _stale(rtype, name)
        candidate["metadata"]["resourceVersion"] = current_rv
        if candidate["metadata"].get("name") != name:
            raise _bad_request("metadata.name cannot be changed by a patch")
        self._check_type_meta(rtype, candidate)
        self._validate_schema(rtype, candidate, field_validation)
        return self._update(rtype, current, candidate, subresource)

    def _update(self, rtype: ResourceType, current: Obj, candidate: Obj, subresource: str | None) -> Obj:
        cmeta = _meta(current)
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in candidate:
                new["status"] = candidate["status"]
            else:
                new.pop("status", None)
        else:
            new = candidate
            meta = new["metadata"]
            for key in (*_SERVER_METADATA, "name", "namespace"):
                if key in cmeta:
                    meta[key] = cmeta[key]
                else:
                    meta.pop(key, None)
            if rtype.has_status:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            if cmeta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(cmeta.get("finalizers") or [])
                if added:
                    raise _invalid(
                        rtype,
                        cmeta["name"],
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {sorted(added)}",
                    )
            if rtype is PODS:
                self._check_pod_update(current, new)
            if _spec_part(new) != _spec_part(current):
                meta["generation"] = int(cmeta.get("generation") or 1) + 1
        new["metadata"]["resourceVersion"] = cmeta["resourceVersion"]
        if new == current:
            return current  # a no-op write keeps the resourceVersion and sends no event
        committed = self._commit(rtype, new, "MODIFIED", current)
        meta = committed["metadata"]
        if (
            rtype is not NAMESPACES
            and meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and meta.get("deletionGracePeriodSeconds", 0) == 0
        ):
            return self._remove(rtype, committed, "Background")
        return committed

    def _check_pod_update(self, current: Obj, new: Obj) -> None:
        def frozen(pod: Obj) -> Obj:
            spec = copy.deepcopy(pod.get("spec") or {})
            for key in _MUTABLE_POD_SPEC:
                spec.pop(key, None)
            for containers in ("containers", "initContainers"):
                for container in spec.get(containers) or []:
                    container.pop("image", None)
            return spec

        if frozen(current) != frozen(new):
            raise _invalid(
                PODS, _meta(current)["name"], "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                "to existing tolerations), `spec.terminationGracePeriodSeconds`, `spec.schedulingGates` "
                "(use the binding subresource to set spec.nodeName)",
            )  # fmt: skip

    def delete_object(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Mapping[str, Any] | None = None
    ) -> Obj:
        """DELETE: returns the object (still there while graceful/finalizers, else its last state)."""
        options = dict(options or {})
        current = self._require(rtype, namespace, name)
        meta = _meta(current)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") not in (None, "", meta["uid"]):
            raise _conflict(
                rtype,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta['uid']}",
            )
        if preconditions.get("resourceVersion") not in (None, "", meta["resourceVersion"]):
            raise _conflict(
                rtype, name,
                f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}",
            )  # fmt: skip
        propagation = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else ("Orphan" if rtype is JOBS else "Background")
        )
        if propagation not in ("Orphan", "Background", "Foreground"):
            raise _bad_request(f"invalid propagationPolicy {propagation!r}")
        if rtype is NAMESPACES:
            return self._delete_namespace(current)
        grace = self._grace_period(rtype, current, options.get("gracePeriodSeconds"))
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp"):
            if grace < int(meta.get("deletionGracePeriodSeconds") or 0):  # a shorter grace period wins
                shorter = copy.deepcopy(current)
                shorter["metadata"]["deletionTimestamp"] = format_time(utcnow() + datetime.timedelta(seconds=grace))
                shorter["metadata"]["deletionGracePeriodSeconds"] = grace
                current = self._commit(rtype, shorter, "MODIFIED", current)
                if grace == 0 and not finalizers:
                    return self._remove(rtype, current, propagation)
            return current
        if grace == 0 and not finalizers:
            return self._remove(rtype, current, propagation)
        deleting = copy.deepcopy(current)
        deleting["metadata"]["deletionTimestamp"] = format_time(utcnow() + datetime.timedelta(seconds=grace))
        deleting["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._commit(rtype, deleting, "MODIFIED", current)

    def _grace_period(self, rtype: ResourceType, obj: Obj, requested: Any) -> int:
        if rtype is not PODS:
            return 0  # only pods are deleted gracefully
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0  # never ran or already finished: nothing to stop
        grace = int(requested) if requested is not None else int(spec.get("terminationGracePeriodSeconds", 30))
        return max(grace, 1) if grace != 0 else 0  # negative → 1, as the API server does

    def _remove(self, rtype: ResourceType, obj: Obj, propagation: str) -> Obj:
        removed = self._commit(rtype, copy.deepcopy(obj), "DELETED", obj)
        uid = _meta(obj)["uid"]
        if rtype is PODS:  # a deleted pod's logs go with it, as on a node
            for key in [k for k in self._logs if k[0] == uid]:
                del self._logs[key]
        for dtype in list(self._types.values()):
            for dependent in list(self._iter(dtype)):
                refs = _meta(dependent).get("ownerReferences") or []
                if not any(ref.get("uid") == uid for ref in refs):
                    continue
                dmeta = _meta(dependent)
                if propagation == "Orphan":
                    orphaned = copy.deepcopy(dependent)
                    orphaned["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid] or None
                    if orphaned["metadata"]["ownerReferences"] is None:
                        del orphaned["metadata"]["ownerReferences"]
                    self._commit(dtype, orphaned, "MODIFIED", dependent)
                elif not dmeta.get("deletionTimestamp"):
                    self.delete_object(
                        dtype, dmeta.get("namespace"), dmeta["name"], {"propagationPolicy": "Background"}
                    )
        namespace = _meta(obj).get("namespace")
        if namespace:
            self._finalize_namespace(namespace)
        return removed

    def _delete_namespace(self, namespace: Obj) -> Obj:
        name = _meta(namespace)["name"]
        if not _meta(namespace).get("deletionTimestamp"):
            terminating = copy.deepcopy(namespace)
            terminating["metadata"]["deletionTimestamp"] = format_time(utcnow())
            terminating["metadata"]["deletionGracePeriodSeconds"] = 0
            terminating.setdefault("status", {})["phase"] = "Terminating"
            namespace = self._commit(NAMESPACES, terminating, "MODIFIED", namespace)
            for rtype in list(self._types.values()):
                if rtype.namespaced:
                    for obj in list(self._iter(rtype, name)):
                        if not _meta(obj).get("deletionTimestamp"):
                            self.delete_object(rtype, name, _meta(obj)["name"], {"propagationPolicy": "Background"})
            self._finalize_namespace(name)
        return self.peek(NAMESPACES, None, name) or namespace

    def _finalize_namespace(self, name: str) -> None:
        namespace = self._stored(NAMESPACES, None, name)
        if namespace is None or not _meta(namespace).get("deletionTimestamp"):
            return
        if any(next(self._iter(rtype, name), None) is not None for rtype in self._types.values() if rtype.namespaced):
            return
        self._commit(NAMESPACES, copy.deepcopy(namespace), "DELETED", namespace)

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        options: Mapping[str, Any] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return [
            self.delete_object(rtype, _meta(obj).get("namespace"), _meta(obj)["name"], options)
            for obj in self.list_objects(rtype, namespace, label_selector, field_selector)
        ]

    def bind(self, namespace: str, pod_name: str, binding: Any) -> Obj:
        """pods/binding: assign a pod to a node once; sets ``PodScheduled=True`` as the API server does."""
        if not isinstance(binding, dict):
            raise _bad_request("the request body must be a Binding object")
        if binding.get("kind") not in (None, "", "Binding"):
            raise _bad_request(f"expected a Binding, got {binding.get('kind')!r}")
        bmeta = _meta(binding)
        if bmeta.get("name") not in (None, "", pod_name):
            raise _bad_request(f"the name of the Binding ({bmeta['name']}) does not match the pod ({pod_name})")
        pod = self._require(PODS, namespace, pod_name)
        target = binding.get("target") or {}
        node_name = target.get("name")
        if not node_name:
            raise _invalid(BINDINGS, pod_name, "target.name", "Required value")
        if target.get("kind") not in (None, "", "Node"):
            raise _invalid(
                BINDINGS, pod_name, "target.kind", f'Unsupported value: {target["kind"]!r}: supported values: "Node"'
            )
        if _meta(pod).get("deletionTimestamp"):
            raise _conflict(
                PODS, pod_name, f"pod {pod_name} is being deleted, cannot be assigned to a host", subresource="binding"
            )
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise _conflict(
                PODS, pod_name, f'pod {pod_name} is already assigned to node "{assigned}"', subresource="binding"
            )
        if (pod.get("spec") or {}).get("schedulingGates"):
            raise _conflict(
                PODS, pod_name, f"pod {pod_name} has non-empty .spec.schedulingGates", subresource="binding"
            )
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = node_name
        if bmeta.get("annotations"):
            bound["metadata"].setdefault("annotations", {}).update(bmeta["annotations"])
        set_condition(bound, "PodScheduled", "True")
        self._commit(PODS, bound, "MODIFIED", pod)
        return _success(201)

    def evict(self, namespace: str, pod_name: str, eviction: Any) -> Obj:
        """pods/eviction (policy/v1): honours PodDisruptionBudgets (429), then deletes gracefully."""
        if not isinstance(eviction, dict):
            raise _bad_request("the request body must be an Eviction object")
        if eviction.get("kind") not in (None, "", "Eviction"):
            raise _bad_request(f"expected an Eviction, got {eviction.get('kind')!r}")
        emeta = _meta(eviction)
        if emeta.get("name") not in (None, "", pod_name):
            raise _bad_request(f"name in URL does not match name in Eviction object ({emeta['name']} != {pod_name})")
        pod = self._require(PODS, namespace, pod_name)
        options = eviction.get("deleteOptions") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp"):
            self._check_disruption_budgets(pod)
            disrupted = copy.deepcopy(pod)
            set_condition(disrupted, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting")
            self._commit(PODS, disrupted, "MODIFIED", pod)
        self.delete_object(PODS, namespace, pod_name, options)
        return _success(201)

    def _check_disruption_budgets(self, pod: Obj) -> None:
        namespace = _meta(pod)["namespace"]
        for pdb in self._iter(PODDISRUPTIONBUDGETS, namespace):
            spec = pdb.get("spec") or {}
            requirements = selectors.label_selector_from_object(spec.get("selector"))
            if requirements is None or not selectors.match_labels(requirements, pod):
                continue
            covered = [
                p for p in self._iter(PODS, namespace)
                if selectors.match_labels(requirements, p)
                and not _meta(p).get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]  # fmt: skip
            healthy = sum(1 for p in covered if pod_is_ready(p))
            expected = len(covered)
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected)
            elif "maxUnavailable" in spec:
                desired = expected - _scaled(spec["maxUnavailable"], expected)
            else:
                continue
            if pod_is_ready(pod) and healthy - 1 < desired:
                pdb_name = _meta(pdb)["name"]
                why = f"The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently"
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {"causes": [{"reason": "DisruptionBudget", "message": why}]},
                )

    # --- container logs ------------------------------------------------------------------------

    def write_log(self, namespace: str, name: str, container: str, text: str) -> None:
        """Append ``text`` (one or more lines) to a container's log, as its runtime would (the
        kubelet stand-in writes what its containers "print"); followers of the log wake up."""
        pod = self._require(PODS, namespace, name)
        lines = self._logs.setdefault((_meta(pod)["uid"], container), [])
        now = utcnow()
        for line in text.splitlines(keepends=True):
            lines.append((now, line if line.endswith("\n") else line + "\n"))
        self._notify()

    def _log_container(self, pod: Obj, params: Mapping[str, str]) -> str:
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        name = _meta(pod)["name"]
        wanted = params.get("container")
        if wanted:
            if wanted not in names:
                raise _bad_request(f"container {wanted} is not valid for pod {name}")
            return wanted
        if len(names) != 1:
            raise _bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
        return str(names[0])

    @staticmethod
    def _container_state(pod: Obj, container: str) -> str:
        """``waiting``, ``running`` or ``terminated`` (``waiting`` before the kubelet reported it)."""
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") == container:
                state = status.get("state") or {}
                return "running" if "running" in state else "terminated" if "terminated" in state else "waiting"
        return "waiting"

    @staticmethod
    def _log_text(
        lines: list[tuple[datetime.datetime, str]], params: Mapping[str, str], start: int = 0
    ) -> tuple[str, int]:
        """The log from line ``start`` as the query asks (timestamps, sinceSeconds); and the line count."""
        chosen = lines[start:]
        since = _int_param(params, "sinceSeconds")
        if since is not None:
            cutoff = utcnow() - datetime.timedelta(seconds=since)
            chosen = [(t, line) for t, line in chosen if t >= cutoff]
        stamps = _truthy(params.get("timestamps"))
        text = "".join((t.strftime("%Y-%m-%dT%H:%M:%S.%f000Z") + " " if stamps else "") + line for t, line in chosen)
        return text, len(lines)

    def read_log(self, namespace: str, name: str, params: Mapping[str, str]) -> bytes | AsyncIterator[bytes]:
        """``GET pods/{name}/log``: the container's output (``container``, ``follow``, ``tailLines``,
        ``limitBytes``, ``sinceSeconds``, ``timestamps``). A container that has not started is a 400,
        as the real API answers; ``follow`` streams until the container ends or the pod goes away."""
        pod = self._require(PODS, namespace, name)
        container = self._log_container(pod, params)
        if self._container_state(pod, container) == "waiting":
            raise _bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        uid = _meta(pod)["uid"]
        tail = _int_param(params, "tailLines")
        limit = _int_param(params, "limitBytes")
        # a follower keeps the list itself: what the container wrote before its pod was deleted still arrives
        lines = self._logs.setdefault((uid, container), [])
        first = max(0, len(lines) - tail) if tail is not None else 0
        if not _truthy(params.get("follow")):
            text = self._log_text(lines, params, first)[0].encode()
            return text[:limit] if limit is not None else text

        async def follow() -> AsyncIterator[bytes]:
            yield b""  # headers now: a follower's client returns before the first line
            cursor, sent = first, 0
            while True:
                waiter = self._changed
                text, cursor_after = self._log_text(lines, params, cursor)
                cursor = cursor_after
                if text:
                    data = text.encode()
                    if limit is not None:
                        data = data[: max(0, limit - sent)]
                    sent += len(data)
                    if data:
                        yield data
                    if limit is not None and sent >= limit:
                        return
                current = self._stored(PODS, namespace, name)
                if (
                    current is None
                    or _meta(current).get("uid") != uid
                    or self._container_state(current, container) == "terminated"
                    or self._closing
                ):
                    rest = self._log_text(lines, params, cursor)[0].encode()
                    if rest:
                        yield rest  # what was written with the end
                    return
                await waiter.wait()

        return follow()

    # --- watches ------------------------------------------------------------------------------

    async def events_after(
        self, resource_version: int, *, timeout: float | None = None, endable: bool = False
    ) -> AsyncIterator[WatchEvent]:
        """Every write after ``resource_version``, then live ones until ``timeout`` or :meth:`close_watches`
        (or, for a client's watch over HTTP (``endable``), :meth:`end_watches`).

        Raises :class:`ResourceVersionTooOld` when the history after it was compacted away.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        cursor = resource_version
        epoch = self._watch_epoch
        while True:
            if cursor < self._compacted_rv:
                raise ResourceVersionTooOld(cursor, self._compacted_rv + 1)
            waiter = self._changed  # taken before the scan: a write after it wakes us up
            pending: list[WatchEvent] = []
            for event in reversed(self._events):
                if event.rv <= cursor:
                    break
                pending.append(event)
            for event in reversed(pending):
                cursor = event.rv
                yield event
            if self._closing or (endable and self._watch_epoch != epoch):
                return
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return
            if not waiter.is_set():
                try:
                    await asyncio.wait_for(waiter.wait(), timeout=remaining)
                except TimeoutError:
                    return

    def end_watches(self) -> None:
        """End the clients' watches open now (over HTTP; the in-process kubelet and controllers keep
        theirs), as an API server restart or a load balancer's idle timeout does; the server keeps
        serving (clients watch again from their resourceVersion)."""
        self._watch_epoch += 1
        self._notify()

    async def close_watches(self) -> None:
        """End every open watch (call before stopping the HTTP server, or it waits for them)."""
        self._closing = True
        self.faults.clear()  # hung requests end too
        self._notify()
        await asyncio.sleep(0)

    def _visible(
        self,
        obj: Obj,
        namespace: str | None,
        name: str | None,
        labels: list[selectors.LabelRequirement],
        fields: list[selectors.FieldRequirement],
    ) -> bool:
        meta = _meta(obj)
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        if name is not None and meta.get("name") != name:
            return False
        return selectors.match_labels(labels, obj) and selectors.match_fields(fields, obj)

    async def _watch_stream(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None,
        params: Mapping[str, str],
    ) -> AsyncIterator[Any]:
        labels, fields = self._selectors(rtype, params.get("labelSelector"), params.get("fieldSelector"))
        if name is not None:
            fields = [*fields, selectors.FieldRequirement("metadata.name", "=", name)]
        timeout = _int_param(params, "timeoutSeconds")
        since = params.get("resourceVersion") or ""
        if since not in ("", "0") and not since.isdigit():
            raise _bad_request(f"invalid resourceVersion {since!r}")
        bookmarks = _truthy(params.get("allowWatchBookmarks"))

        async def stream() -> AsyncIterator[Any]:
            yield b""  # send the headers now: clients return from the request before the first event
            if since in ("", "0"):
                cursor = self._rv
                for obj in self._iter(rtype, namespace):
                    if self._visible(obj, namespace, None, labels, fields):
                        yield {"type": "ADDED", "object": copy.deepcopy(obj)}
            else:
                cursor = int(since)
            try:
                async for event in self.events_after(
                    cursor, timeout=timeout if timeout is not None else self.default_watch_timeout_s, endable=True
                ):
                    if event.rtype != rtype:
                        continue
                    now_visible = self._visible(event.obj, namespace, None, labels, fields)
                    if event.type == "MODIFIED":
                        was_visible = event.old is not None and self._visible(
                            event.old, namespace, None, labels, fields
                        )
                        kind = (
                            "MODIFIED"
                            if now_visible and was_visible
                            else "ADDED"
                            if now_visible
                            else "DELETED"
                            if was_visible
                            else None
                        )
                    else:
                        kind = event.type if now_visible else None
                    if kind is not None:
                        yield {"type": kind, "object": copy.deepcopy(event.obj)}
            except ResourceVersionTooOld as e:
                yield {"type": "ERROR", "object": ApiError(410, "Expired", str(e)).status()}
                return
            if bookmarks and not self._closing:
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rtype.kind,
                        "apiVersion": rtype.api_version,
                        "metadata": {"resourceVersion": str(self._rv)},
                    },
                }

        return stream()

    # --- HTTP ---------------------------------------------------------------------------------

    def _is_resource_request(self, request: kmock.Request) -> bool:
        return _route(request.url.path) is not None

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8's URL parser raises on the bare /api/v1/namespaces collection (before any reaction
        # could see it): describe that request ourselves, then serve it through the same reactions.
        if not _NAMESPACE_COLLECTION.match(raw_request.path):
            return await super().__call__(raw_request)
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = kmock.Request(
            id=len(self._requests), method=raw_request.method, url=raw_request.url, params=dict(raw_request.query),
            headers=dict(raw_request.headers), body=body, text=body.decode("utf-8", "replace"), data=data,
            resource=NAMESPACES.resource, raw_request=raw_request,
        )  # fmt: skip
        self._requests.append(request)
        try:
            return await self._handle(request)
        except Exception as e:
            if self._errors:
                self._errors[-1].append(e)
            return await self._render_error(e)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # Skip KubernetesEmulator._handle: it merges every create/patch/delete into kmock.objects
        # before any reaction runs. Here the state changes only in _serve, i.e. only when no
        # reaction of the test intercepted the request (a fault injected with `<< 500` stores nothing).
        #
        # kmock 0.8's RawHandler._handle, with one change: whether a reaction sees the request.
        # kmock asks ``request in reaction._source``, which replays the filter over every request
        # served so far (oldest first) to find this one: O(requests) per reaction per request, so
        # a server slows as it serves (at 50,000 requests, most of a benchmark's CPU). For a plain
        # chain of filters over this server (``kmock[...]``, ``kmock.fallback``) the answer is the
        # filters' criteria on this request alone; anything else (slices, unions) asks kmock.
        priorities = [payload.priorities for payload in self._payloads]
        longest = max((len(p) for p in priorities), default=0)
        padded = [tuple(-x for x in p) + (0,) * (longest - len(p)) for p in priorities]
        order = sorted(range(len(padded)), key=lambda i: padded[i])
        for payload in (self._payloads[i] for i in order):
            if not payload._disabled.is_set() and self._sees(payload._source, request):
                try:
                    return await payload(request)
                except kmock_rendering.ReactionMismatchError:  # a mismatch or depletion
                    payload._disabled.set()
                except NotImplementedError:  # matched, but nothing to respond with
                    pass
        raise NotImplementedError("no reaction matches the request (add a fallback: `kmock.fallback << 404`)")

    def _sees(self, view: Any, request: kmock.Request) -> bool:
        criteria = []
        while type(view) is kmock_dsl.Filter:
            criteria.append(view.criteria)
            view = view._source
        if view is self:
            return all(c(request) for c in reversed(criteria))
        return request in view if not criteria else request in view and all(c(request) for c in criteria)

    async def _serve_server_version(self, request: kmock.Request) -> kmock.Payload:
        major, minor = (self.schema_version or "1.29").split(".")[:2]
        return {
            "major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0-gpufleet-kmock",
            "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2024-01-01T00:00:00Z",
            "goVersion": "go1.21", "compiler": "gc", "platform": "linux/amd64",
        }  # fmt: skip

    async def _serve(self, request: kmock.Request) -> Response:
        json_headers = {"Content-Type": "application/json"}
        route = _route(request.url.path)
        if route is not None:
            resource = route.plural + (f"/{route.subresource}" if route.subresource else "")
            verb = verb_of(str(request.method.value), route.name, _truthy(request.params.get("watch")))
            fault = await self.faults.apply(verb, resource, route.namespace, route.name)
            if fault is not None and fault.status is not None:
                headers = dict(json_headers)
                if fault.retry_after_s is not None:
                    headers["Retry-After"] = str(fault.retry_after_s)
                return Response(
                    status=fault.status,
                    payload=status_body(fault.status, fault.message, fault.retry_after_s),
                    headers=headers,
                )
        try:
            code, payload = await self._dispatch(request)
        except ApiError as e:
            return Response(status=e.code, payload=e.status(), headers=json_headers)
        if isinstance(payload, _Text):  # pods/log: plain text, streamed when followed
            return Response(status=code, payload=payload.body, headers={"Content-Type": "text/plain"})
        return Response(status=code, payload=payload, headers=json_headers)

    async def _dispatch(self, request: kmock.Request) -> tuple[int, Any]:
        route = _route(request.url.path)
        assert route is not None  # the reaction's criterion checked it
        rtype = self._types.get((route.group, route.version, route.plural))
        if rtype is None or (route.namespace is not None and not rtype.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        params = request.params
        method = str(request.method.value).upper()
        if _truthy(params.get("dryRun")) or params.get("dryRun") == "All":
            raise _bad_request("dryRun is not supported by this test substrate")
        validation = params.get("fieldValidation") or None
        namespace, name, sub = route.namespace, route.name, route.subresource

        def body() -> Any:
            if not request.body:
                return None
            try:
                return json.loads(request.body)
            except ValueError:
                raise _bad_request("the request body is not valid JSON") from None

        if name is None:
            if method == "GET" and _truthy(params.get("watch")):
                return 200, await self._watch_stream(rtype, namespace, None, params)
            if method == "GET":
                return 200, self._list_page(rtype, namespace, params)
            if method == "POST" and rtype is BINDINGS:
                if namespace is None:
                    raise ApiError(405, "MethodNotAllowed", "bindings are created in a namespace")
                binding = body()
                return 201, self.bind(namespace, str(_meta(binding or {}).get("name") or ""), binding)
            if method == "POST":
                return 201, self.create_object(rtype, namespace, body(), field_validation=validation)
            if method == "DELETE":
                deleted = self.delete_collection(
                    rtype,
                    namespace,
                    self._delete_options(params, body()),
                    params.get("labelSelector"),
                    params.get("fieldSelector"),
                )
                return 200, {
                    "apiVersion": rtype.api_version,
                    "kind": f"{rtype.kind}List",
                    "metadata": {"resourceVersion": str(self._rv)},
                    "items": deleted,
                }
        elif sub is None:
            if method == "GET" and _truthy(params.get("watch")):
                return 200, await self._watch_stream(rtype, namespace, name, params)
            if method == "GET":
                return 200, self.read_object(rtype, namespace, name)
            if method == "PUT":
                return 200, self.replace_object(rtype, namespace, name, body(), field_validation=validation)
            if method == "PATCH":
                return 200, self.patch_object(
                    rtype, namespace, name, body(), self._patch_type(request), field_validation=validation
                )
            if method == "DELETE":
                result = self.delete_object(rtype, namespace, name, self._delete_options(params, body()))
                if self._stored(rtype, namespace, name) is None and rtype is not PODS:
                    return 200, _success(
                        200, rtype, name, _meta(result).get("uid")
                    )  # only pods return the deleted object
                return 200, result
        elif sub == "status" and rtype.has_status:
            if method == "GET":
                return 200, self.read_object(rtype, namespace, name)
            if method == "PUT":
                return 200, self.replace_object(
                    rtype, namespace, name, body(), subresource="status", field_validation=validation
                )
            if method == "PATCH":
                return 200, self.patch_object(
                    rtype,
                    namespace,
                    name,
                    body(),
                    self._patch_type(request),
                    subresource="status",
                    field_validation=validation,
                )
        elif sub == "binding" and rtype is PODS and namespace is not None:
            if method == "POST":
                return 201, self.bind(namespace, name, body())
        elif sub == "eviction" and rtype is PODS and namespace is not None:
            if method == "POST":
                return 201, self.evict(namespace, name, body())
        elif sub == "log" and rtype is PODS and namespace is not None:
            if method == "GET":
                return 200, _Text(self.read_log(namespace, name, params))
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}", {})

    def _patch_type(self, request: kmock.Request) -> PatchType:
        content_type = next((v for k, v in request.headers.items() if k.lower() == "content-type"), "")
        media = content_type.split(";")[0].strip().lower()
        types: dict[str, PatchType] = {
            "application/merge-patch+json": "merge",
            "application/strategic-merge-patch+json": "strategic",
            "application/json-patch+json": "json",
        }
        if media in types:
            return types[media]
        if media.startswith("application/apply-patch"):
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not implemented by this test substrate")
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format ({media or 'no Content-Type'}) - accepted media types "
            "include: application/json-patch+json, application/merge-patch+json, "
            "application/strategic-merge-patch+json",
        )

    def _delete_options(self, params: Mapping[str, str], body: Any) -> Obj:
        options: Obj = dict(body) if isinstance(body, dict) else {}
        grace = _int_param(params, "gracePeriodSeconds")
        if grace is not None and options.get("gracePeriodSeconds") is None:
            options["gracePeriodSeconds"] = grace
        if params.get("propagationPolicy") and not options.get("propagationPolicy"):
            options["propagationPolicy"] = params["propagationPolicy"]
        if params.get("orphanDependents") and options.get("orphanDependents") is None:
            options["orphanDependents"] = _truthy(params["orphanDependents"])
        return options

    def _list_page(self, rtype: ResourceType, namespace: str | None, params: Mapping[str, str]) -> Obj:
        items = self._matching(rtype, namespace, params.get("labelSelector"), params.get("fieldSelector"))
        token = params.get("continue")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))
                start = [after["namespace"], after["name"]]
            except (ValueError, KeyError, TypeError):
                raise _bad_request("invalid continue token") from None
            items = [obj for obj in items if [_meta(obj).get("namespace") or "", _meta(obj)["name"]] > start]
        meta: Obj = {"resourceVersion": str(self._rv)}
        limit = _int_param(params, "limit")
        if limit and limit > 0 and len(items) > limit:
            last = _meta(items[limit - 1])
            cursor = {"namespace": last.get("namespace") or "", "name": last["name"]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        items = [copy.deepcopy(obj) for obj in items]
        return {"apiVersion": rtype.api_version, "kind": f"{rtype.kind}List", "metadata": meta, "items": items}


def _scaled(value: Any, total: int) -> int:
    """An IntOrString budget: an int, or a percentage of ``total`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)
