"""The validating admission webhook's decisions: budgets that block also block at the door.

``gpufleet up`` with ``webhook.enabled`` serves an ``admission.k8s.io/v1`` validating webhook
(:mod:`gpufleet.k8s.webhook`); this module decides, without I/O: an AdmissionReview in, the
facts the webhook read from the store and a budget-check callable in, an AdmissionReview response out.

What is judged: the CREATE of a GPU Pod (of any owner, or none) or of a ``batch/v1`` Job (its pod
template, ``parallelism`` pods at once) in a gpufleet namespace — one that maps to a team
(``kubernetes.namespaces``, else a team of the namespace's name; optionally narrowed by
``webhook.namespaces``). Everything else is allowed untouched: UPDATE, DELETE and CONNECT,
subresources, other kinds, pods that ask for no ``nvidia.com/*`` GPU resource, namespaces of no
team, and the pods of a job gpufleet itself created (``gpufleet.io/job-id`` of an unfinished job
of the namespace's team: the API's submit already judged it).

Denied (``allowed: false``, ``status.code`` 403, the message naming what refused it), in order:

1. **priority class** — ``priorityClassName: gpufleet-<class>`` (none: ``normal``, the global
   default) that the namespace's team may not use (``teams.priority_classes``, the grant the API's
   submit checks; :func:`gpufleet.services.owners.granted_classes`);
2. **own cost limit** — annotation ``gpufleet.io/cost-limit`` (dollars) below the workload's
   estimate: its GPU request on the cheapest node kind gpufleet knows that fits it, × the pods
   it runs at once, × ``gpufleet.io/estimated-runtime`` (seconds, or a Go duration such as
   ``2h`` or ``1h30m``). Cheapest, so a denial is certain: even the best placement costs more. No
   runtime (or no node kind that fits): the limit cannot be judged, the workload is allowed with a
   warning saying so;
3. **budgets** — the API's own submit check (:func:`gpufleet.services.budgets.check_submission`,
   called by the webhook through ``check_budget``): every enabled ``block`` budget covering the
   workload's team, namespace, project, experiment or labels, the committed spend plus the
   workload's estimate against the limit, grace windows included; and a project another team owns.
   Budgets that let it in although it takes them past their limit (``alert``, ``throttle``, a block
   budget in its grace window) add a warning.

A pod whose ``team`` label names another existing team than its namespace's is judged as both.
A GPU workload gpufleet cannot read (a malformed ``gpufleet.io/cost-limit`` or
``gpufleet.io/estimated-runtime``, two kinds of GPU resource) is denied, naming the field.

**failurePolicy.** The chart registers the webhook with ``failurePolicy: Fail`` by default, scoped
tightly so that a broken webhook can only hold up what it guards: team namespaces
(``namespaceSelector``), CREATE of pods and Jobs, and — by ``matchConditions`` — only those that
request an ``nvidia.com/`` resource; gpufleet's own pods, system namespaces and every CPU workload
never reach it. A budget that blocks must not be bypassed by a store outage, so when the webhook
cannot read the store it says so itself under ``Fail``: ``allowed: false``, ``status.code`` 500,
``"gpufleet cannot read budgets: ..."`` — the same outcome the API server gives a timeout or an
unreachable webhook, with a message a person can act on. Under ``Ignore`` (``webhook.failure_policy``,
for clusters that prefer availability) the same outage answers ``allowed: true`` with that message
as a warning, as the API server would on a failed call (:func:`store_failure`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpufleet.cost.budgets.model import Scope
from gpufleet.errors import InputError
from gpufleet.k8s.adapter.pods import PodFacts, pod_facts
from gpufleet.k8s.vocabulary import (
    ADMISSION_API,
    ANNOTATION_COST_LIMIT,
    ANNOTATION_ESTIMATED_RUNTIME,
    GPU_RESOURCE,
    GPUFLEET_PREFIX,
    MIG_RESOURCE_PREFIX,
    PRIORITY_CLASS_PREFIX,
    SHARED_GPU_RESOURCE,
)
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.model.share import milli_gpus
from gpufleet.model.submission import Submission, submission
from gpufleet.scheduling.admission import Need, Shape, infeasibility

DEFAULT_CLASS: Final = "normal"  # gpufleet-normal is the cluster's global default (gpufleet k8s policies)
WARNING_MAX: Final = 256  # the API server may truncate longer warnings
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")

FailurePolicy = Literal["Fail", "Ignore"]


class ReviewError(InputError):
    """A body that is not an ``admission.k8s.io/v1`` AdmissionReview request: HTTP 400."""

    code = "invalid_admission_review"


# -- the request --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """What gpufleet reads of an AdmissionReview's ``request``."""

    uid: str
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    group: str  # of the object's kind ("" for the core group)
    version: str
    kind: str
    namespace: str = ""
    name: str = ""
    sub_resource: str = ""
    dry_run: bool = False
    user: str = ""
    object: Mapping[str, Any] | None = None


def _field(obj: Mapping[str, Any], key: str, path: str, kind: type, *, required: bool) -> Any:
    where = f"{path}.{key}" if path else key
    value = obj.get(key)
    if value is None:
        if required:
            raise ReviewError("missing", field=where)
        return None
    if not isinstance(value, kind):
        want = "an object" if kind is Mapping else kind.__name__
        raise ReviewError(f"expected {want}, got {type(value).__name__}", field=where)
    return value


def parse_review(body: Any) -> ReviewRequest:
    """The request of an ``admission.k8s.io/v1`` AdmissionReview (a parsed JSON document);
    :class:`ReviewError` naming the field for anything else."""
    if not isinstance(body, Mapping):
        raise ReviewError(f"expected an AdmissionReview object, got {type(body).__name__}")
    api_version = _field(body, "apiVersion", "", str, required=True)
    if api_version != ADMISSION_API:
        raise ReviewError(
            f"'{api_version}' is not supported: gpufleet answers {ADMISSION_API} (set admissionReviewVersions: [v1])",
            field="apiVersion",
        )
    if _field(body, "kind", "", str, required=True) != "AdmissionReview":
        raise ReviewError(f"expected AdmissionReview, got {body['kind']!r}", field="kind")
    req = _field(body, "request", "", Mapping, required=True)
    uid = _field(req, "uid", "request", str, required=True)
    if not uid:
        raise ReviewError("empty", field="request.uid")
    operation = _field(req, "operation", "request", str, required=True)
    if operation not in OPERATIONS:
        known = ", ".join(OPERATIONS)
        raise ReviewError(f"unknown operation {operation!r} (known: {known})", field="request.operation")
    kind = _field(req, "kind", "request", Mapping, required=True)
    group = _field(kind, "group", "request.kind", str, required=False) or ""
    version = _field(kind, "version", "request.kind", str, required=True)
    kind_name = _field(kind, "kind", "request.kind", str, required=True)
    obj = _field(req, "object", "request", Mapping, required=operation == "CREATE")
    user_info = _field(req, "userInfo", "request", Mapping, required=False) or {}
    return ReviewRequest(
        uid=uid,
        operation=operation,
        group=group,
        version=version,
        kind=kind_name,
        namespace=_field(req, "namespace", "request", str, required=False) or "",
        name=_field(req, "name", "request", str, required=False) or "",
        sub_resource=_field(req, "subResource", "request", str, required=False) or "",
        dry_run=bool(_field(req, "dryRun", "request", bool, required=False)),
        user=_field(user_info, "username", "request.userInfo", str, required=False) or "",
        object=obj,
    )


# -- what is judged -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pass:
    """Allowed without looking further (and without reading the store)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A GPU workload gpufleet cannot read: denied if its namespace is gpufleet's."""

    kind: str
    namespace: str
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class Workload:
    """A GPU Pod, or a Job's pod template, to judge."""

    kind: str  # Pod | Job
    namespace: str
    name: str
    pod: PodFacts  # the pod (a Job's: its template's)
    pods: int = 1  # pods running at once (a Job's parallelism, at most its completions)
    runtime_s: float | None = None  # gpufleet.io/estimated-runtime
    max_runtime_s: float | None = None  # activeDeadlineSeconds

    @property
    def what(self) -> str:
        return f"{self.kind.lower()} {self.namespace}/{self.name}"


Subject = Pass | Unreadable | Workload

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds of ``"5400"`` (plain seconds) or a Go duration (``"2h"``, ``"1h30m"``, ``"90m"``,
    ``"1.5h"``); :class:`ValueError` for anything else, zero and negatives included."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pos, seconds = 0, 0.0
        for m in _DURATION_PART.finditer(raw):
            if m.start() != pos:
                break
            seconds += float(m[1]) * _UNIT_S[m[2]]
            pos = m.end()
        if pos != len(raw) or not raw:
            raise ValueError(f"not a duration: {text!r} (seconds, or e.g. '2h', '1h30m', '90m')") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return seconds


def _is_gpu(resource: str) -> bool:
    return resource in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or resource.startswith(MIG_RESOURCE_PREFIX)


def _mentions_gpu(spec: Mapping[str, Any]) -> bool:
    """Does any container of a (possibly malformed) pod spec name a GPU resource?"""
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else []:
            res = c.get("resources") if isinstance(c, Mapping) else None
            for part in ("requests", "limits"):
                amounts = res.get(part) if isinstance(res, Mapping) else None
                if isinstance(amounts, Mapping) and any(_is_gpu(str(k)) for k in amounts):
                    return True
    return False


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seconds(value: Any, fld: str, src: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputError(f"not a positive number of seconds: {value!r}", source=src, field=fld)
    return float(value)


def inspect(req: ReviewRequest) -> Subject:
    """What to judge of ``req``: a :class:`Workload`, an :class:`Unreadable` GPU workload, or a
    :class:`Pass` (see the module docstring for what is let through)."""
    if req.operation != "CREATE":
        return Pass(f"{req.operation} is not judged (gpufleet judges what is created)")
    if req.sub_resource:
        return Pass(f"subresource {req.sub_resource} is not judged")
    obj = req.object or {}
    meta = _map(obj.get("metadata"))
    namespace = str(meta.get("namespace") or req.namespace or "")
    name = str(meta.get("name") or req.name or "")
    if not name:
        name = f"{meta.get('generateName') or ''}*"
    if (req.group, req.kind) == ("", "Pod"):
        kind, spec, pod_meta, owner_meta = "Pod", _map(obj.get("spec")), meta, meta
    elif (req.group, req.kind) == ("batch", "Job"):
        template = _map(_map(obj.get("spec")).get("template"))
        kind, spec, pod_meta, owner_meta = "Job", _map(template.get("spec")), _map(template.get("metadata")), meta
    else:
        return Pass(f"{req.group or 'core'}/{req.kind} is not judged (gpufleet judges Pods and batch/v1 Jobs)")
    if not namespace:
        return Unreadable(kind, "?", name, f"{kind.lower()} ?/{name}: no namespace")
    if not _mentions_gpu(spec):
        return Pass(f"{kind.lower()} {namespace}/{name} asks for no GPU")
    src = f"{kind.lower()} {namespace}/{name}"
    # the pod the workload runs: a Job's template, with the Job's own gpufleet annotations under its own
    annotations = {
        **{k: v for k, v in _map(owner_meta.get("annotations")).items() if k.startswith(GPUFLEET_PREFIX)},
        **_map(pod_meta.get("annotations")),
    }
    pod = {
        "metadata": {**pod_meta, "name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec,
    }
    try:
        facts = pod_facts(pod)
        if facts.gpu_count == 0:
            return Pass(f"{src} asks for no GPU")
        raw = facts.annotations.get(ANNOTATION_ESTIMATED_RUNTIME)
        try:
            runtime = parse_duration(raw) if raw is not None else None
        except ValueError as e:
            at = f"metadata.annotations[{ANNOTATION_ESTIMATED_RUNTIME}]"
            raise InputError(str(e), source=src, field=at) from None
        pods = 1
        max_runtime = _seconds(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", src)
        if kind == "Job":
            job_spec = _map(obj.get("spec"))
            parallelism, completions = job_spec.get("parallelism", 1), job_spec.get("completions")
            for fld, v in (("spec.parallelism", parallelism), ("spec.completions", completions)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    raise InputError(f"not a count: {v!r}", source=src, field=fld)
            pods = 1 if parallelism is None else parallelism
            if completions is not None:
                pods = min(pods, completions)
            if pods == 0:
                return Pass(f"{src} runs no pod yet (parallelism 0); its pods are judged when they are created")
            job_deadline = _seconds(job_spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", src)
            max_runtime = job_deadline if job_deadline is not None else max_runtime
    except InputError as e:
        what = "job's pod template" if kind == "Job" else "pod"
        return Unreadable(kind, namespace, name, f"gpufleet cannot read this {what}: {e.message}")
    return Workload(kind, namespace, name, facts, pods, runtime, max_runtime)


# -- the facts the webhook reads from the store ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TeamGrant:
    """A team and the priority classes its members may use."""

    name: str
    classes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeKind:
    """One kind of node gpufleet knows (its price per hour and what a pod can get of it)."""

    gpu_model: str
    gpu_count: int
    hourly_usd: float
    cpu_milli: int = 0  # 0: unknown
    memory_mib: int = 0
    sharing: SharingMode = SharingMode.EXCLUSIVE
    spot: bool = False
    gpu_resource: str = GPU_RESOURCE
    replicas: int = 1  # time-slicing / MPS replicas per GPU

    @property
    def name(self) -> str:
        return f"{self.gpu_count}x{self.gpu_model}" + (" spot" if self.spot else "")


def node_kind(node: Node) -> NodeKind | None:
    """The kind of a GPU node (None for a node without GPUs)."""
    if not node.gpu_count or not node.gpu_model:
        return None
    return NodeKind(
        gpu_model=node.gpu_model,
        gpu_count=node.gpu_count,
        hourly_usd=float(node.hourly_price_usd or 0.0),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        sharing=node.sharing,
        spot=node.capacity_type is CapacityType.SPOT,
        gpu_resource=node.gpu_facts.resource or GPU_RESOURCE,  # None: slices only (asked by profile)
        replicas=max(1, node.gpu_facts.replicas),
    )


@dataclass(frozen=True, slots=True)
class DoorFacts:
    """What the webhook read for one workload. ``teams``: the namespace's team first, then the team
    the pod's ``team`` label names when it is another existing one; empty: not a gpufleet namespace.
    ``admitted_job``: the id of the unfinished gpufleet job the workload runs."""

    teams: tuple[TeamGrant, ...] = ()
    node_kinds: tuple[NodeKind, ...] = ()
    admitted_job: str | None = None


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """A budget's figures as the check saw them (in the current period)."""

    name: str
    scope: Scope
    action: str
    period: str
    limit_usd: float
    spent_usd: float
    committed_usd: float  # spent plus the estimated rest of its unfinished jobs
    job_cost_usd: float  # this workload's estimate, as the submit check priced it


@dataclass(frozen=True, slots=True)
class BudgetAnswer:
    """What the submit check said: ``block`` (a budget refuses), ``refusal`` (another refusal of the
    check, e.g. a project another team owns), ``over`` (budgets that let the workload in though it
    takes them past their limit)."""

    block: BudgetFigures | None = None
    refusal: str | None = None
    over: tuple[BudgetFigures, ...] = ()


# team, the fields of a submit (a Submission's, gpufleet.model.submission.Submission.fields) → the check's answer
BudgetCheck = Callable[[str, Mapping[str, Any]], BudgetAnswer]


# -- estimates ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Estimate:
    """A workload on the cheapest node kind that fits it."""

    kind: NodeKind
    request: GpuRequest  # one pod's, on that kind
    gpus: float  # GPU-equivalents of all its pods
    usd_per_hour: float
    fitting_models: tuple[str, ...]  # every GPU model a kind that fits has

    def cost(self, runtime_s: float) -> float:
        return self.usd_per_hour * runtime_s / 3600.0


def _request_on(pod: PodFacts, kind: NodeKind) -> GpuRequest | None:
    """The pod's GPU request on a node of ``kind``, None when it cannot get its GPUs there."""
    if pod.mig_profile is None and pod.gpu_resource != kind.gpu_resource:
        return None
    try:
        req = pod.gpu_request(kind.replicas, kind.gpu_model)
    except InputError:
        return None
    need = Need(
        req.count,
        req.milli,
        req.mig_profile,
        frozenset(),
        0.0,
        pod.cpu_milli if kind.cpu_milli else 0,  # a kind of unknown CPU or memory is not ruled out by them
        pod.memory_mib if kind.memory_mib else 0,
        allow_spot=True,
    )
    shape = Shape(kind.gpu_model, kind.gpu_count, kind.cpu_milli, kind.memory_mib, kind.sharing, kind.spot)
    return req if infeasibility(need, [shape]) is None else None


def cheapest_fit(pod: PodFacts, pods: int, kinds: Sequence[NodeKind]) -> Estimate | None:
    """The workload's GPUs priced on the cheapest kind that fits one of its pods (per GPU: the kind's
    whole hourly price over its GPUs, as every gpufleet estimate prices a GPU-hour); None if none fits."""
    best: Estimate | None = None
    models: list[str] = []
    for kind in kinds:
        req = _request_on(pod, kind)
        if req is None:
            continue
        if kind.gpu_model not in models:
            models.append(kind.gpu_model)
        gpus = milli_gpus(pods * req.total_milli)
        usd = gpus * kind.hourly_usd / kind.gpu_count
        if best is None or usd < best.usd_per_hour:
            best = Estimate(kind, req, gpus, usd, ())
    if best is None:
        return None
    return Estimate(best.kind, best.request, best.gpus, best.usd_per_hour, tuple(sorted(models)))


def submission_of(w: Workload, est: Estimate | None) -> Submission:
    """The workload as an API submit would make it (:func:`gpufleet.model.submission.submission`,
    the builder the API and adoption use): what the submit's budget check reads."""
    req = est.request if est is not None else None
    if req is None:
        try:
            req = w.pod.gpu_request()
        except InputError:
            req = GpuRequest(w.pod.gpu_count)  # several MIG slices: priced as whole GPUs (errs high)
    return submission(
        w.name,
        project=w.pod.project,
        namespace=w.namespace,
        experiment=w.pod.experiment,
        labels=w.pod.labels,
        priority_class=gpufleet_class(w.pod.priority_class)[0],
        pods=w.pods,
        gpu=req,
        gpu_types=est.fitting_models if est is not None else (),
        estimated_runtime_s=w.runtime_s,
        max_runtime_s=w.max_runtime_s,
        budget_usd=w.pod.cost_limit_usd,
    )


def submit_fields(w: Workload, est: Estimate | None) -> dict[str, Any]:
    """The workload as the fields of an API submit (:func:`submission_of`, as the store keeps it)."""
    return submission_of(w, est).fields()


# -- the verdict ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    message: str = ""
    code: int = 200  # 403: denied; 500: gpufleet could not judge (failurePolicy Fail)
    warnings: tuple[str, ...] = ()
    reason: str = ""  # short, for logs: budget | cost-limit | priority | unreadable | store | ...


def allow(reason: str, warnings: Sequence[str] = ()) -> Verdict:
    return Verdict(True, warnings=tuple(warnings), reason=reason)


def deny(reason: str, message: str, warnings: Sequence[str] = ()) -> Verdict:
    return Verdict(False, message, 403, tuple(warnings), reason)


def store_failure(problem: str, policy: FailurePolicy, *, what: str = "gpufleet cannot read budgets") -> Verdict:
    """The answer when the store cannot be read (or judging failed otherwise: ``what``), as
    ``policy`` promises (module docstring)."""
    message = f"{what}: {problem}"
    if policy == "Ignore":
        return Verdict(True, warnings=(f"{message}; admitted unchecked (failurePolicy Ignore)",), reason="store")
    return Verdict(
        False, f"{message} (failurePolicy Fail: GPU workloads are refused until it can)", 500, reason="store"
    )


def gpufleet_class(priority_class_name: str | None) -> tuple[str, str | None]:
    """The gpufleet class a ``priorityClassName`` stands for, and a warning for a class that is not
    gpufleet's (scheduled as ``normal``, as adoption does)."""
    if not priority_class_name:
        return DEFAULT_CLASS, None
    cls = priority_class_name.removeprefix(PRIORITY_CLASS_PREFIX)
    if priority_class_name.startswith(PRIORITY_CLASS_PREFIX) and cls in PRIORITY_CLASSES:
        return cls, None
    return DEFAULT_CLASS, (
        f"priority class '{priority_class_name}' is not one of gpufleet's ({PRIORITY_CLASS_PREFIX}<class>): "
        f"gpufleet counts the pod as {DEFAULT_CLASS}"
    )


def scope_phrase(scope: Scope) -> str:
    """``team:vision`` → ``team vision``; ``label:cost-center=42`` → ``label cost-center=42``."""
    return "the whole cluster" if scope.kind == "all" else f"{scope.kind} {scope.value}"


def _usd(v: float) -> str:
    return f"${v:,.2f}"


def block_message(f: BudgetFigures, w: Workload) -> str:
    return (
        f"budget '{f.name}' blocks {scope_phrase(f.scope)}: {_usd(f.spent_usd)} spent of {_usd(f.limit_usd)} limit "
        f"({f.period}); {_usd(f.committed_usd)} committed with running and queued jobs, and this {w.kind.lower()} "
        f"would cost about {_usd(f.job_cost_usd)} more"
    )


_LETS_IN: Final = {"alert": "alert only", "throttle": "throttles, does not block", "block": "in its grace window"}


def over_warning(f: BudgetFigures) -> str:
    return (
        f"budget '{f.name}' ({_LETS_IN.get(f.action, f.action)}) for {scope_phrase(f.scope)}: "
        f"{_usd(f.spent_usd)} spent of {_usd(f.limit_usd)} limit, {_usd(f.committed_usd)} committed; "
        f"this adds about {_usd(f.job_cost_usd)}"
    )


def _runtime_phrase(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m" if seconds >= 60 else f"{seconds:g}s"


def judge(subject: Workload | Unreadable, facts: DoorFacts, check_budget: BudgetCheck) -> Verdict:
    """The verdict on a workload (module docstring). ``check_budget`` is called last, once per
    team the workload is judged as, and only when nothing else denied it."""
    if not facts.teams:
        return allow("namespace")
    if isinstance(subject, Unreadable):
        return deny("unreadable", subject.message)
    w = subject
    if facts.admitted_job is not None:
        return allow("gpufleet-job")
    warnings: list[str] = []
    if len(facts.teams) > 1:
        warnings.append(
            f"label team={facts.teams[1].name} is not namespace {w.namespace}'s team ({facts.teams[0].name}): "
            "judged as both"
        )
    # 1. priority class
    cls, foreign = gpufleet_class(w.pod.priority_class)
    if foreign:
        warnings.append(foreign)
    for team in facts.teams:
        if cls not in team.classes:
            return deny(
                "priority",
                f"team '{team.name}' may not use priority class '{cls}' ({PRIORITY_CLASS_PREFIX}{cls}); allowed: "
                f"{', '.join(team.classes) or 'none'} (an admin grants more with "
                f"`gpufleet team set {team.name} --priority-classes ...`)",
                warnings,
            )
    # 2. the workload's own cost limit
    est = cheapest_fit(w.pod, w.pods, facts.node_kinds)
    limit = w.pod.cost_limit_usd
    if limit is not None:
        if w.runtime_s is None:
            warnings.append(
                f"{ANNOTATION_COST_LIMIT} {_usd(limit)} not checked: no {ANNOTATION_ESTIMATED_RUNTIME} annotation "
                "(seconds, or a duration such as 2h) to estimate the cost from"
            )
        elif est is None:
            warnings.append(f"{ANNOTATION_COST_LIMIT} {_usd(limit)} not checked: gpufleet knows no node that fits")
        else:
            cost = est.cost(w.runtime_s)
            if cost > limit + 0.005:
                gpus = f"{est.gpus:g} GPU" + ("" if est.gpus == 1 else "s")
                return deny(
                    "cost-limit",
                    f"{w.what} would cost about {_usd(cost)}, over its own cost limit of {_usd(limit)} "
                    f"({ANNOTATION_COST_LIMIT}): {gpus} for {_runtime_phrase(w.runtime_s)} at "
                    f"{_usd(est.usd_per_hour)}/hour on the cheapest node kind that fits ({est.kind.name})",
                    warnings,
                )
    # 3. budgets: the API's submit check
    fields = submit_fields(w, est)
    for team in facts.teams:
        answer = check_budget(team.name, fields)
        if answer.refusal is not None:
            return deny("budget", answer.refusal, warnings)
        if answer.block is not None:
            return deny("budget", block_message(answer.block, w), warnings)
        warnings.extend(over_warning(f) for f in answer.over)
    return allow("judged", warnings)


# -- the response -----------------------------------------------------------------------------------------


def _clip(text: str, n: int = WARNING_MAX) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answering request ``uid``."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        reason = "Forbidden" if verdict.code == 403 else "InternalError"
        response["status"] = {"code": verdict.code, "message": verdict.message, "reason": reason}
    if verdict.warnings:
        response["warnings"] = [_clip(w) for w in dict.fromkeys(verdict.warnings)]
    return {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "response": response}
