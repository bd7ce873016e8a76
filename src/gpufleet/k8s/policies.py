"""Cluster policies the team layout implies: PriorityClasses, team Namespaces, ResourceQuotas and
LimitRanges, as plain manifests (``gpufleet k8s policies`` prints them; apply with ``kubectl``).

- **PriorityClasses** ``gpufleet-<class>`` for gpufleet's five classes, in gpufleet's order:
  urgent 1000, high 500, normal 100 (the cluster's global default), low 50, background 10 (the
  values are Kubernetes', chosen above 0 so that gpufleet's lowest class still ranks over pods
  with no class at all). Every one has ``preemptionPolicy: Never``: gpufleet decides preemption
  (quota reclaim, priority, checkpoints, cost) and stops its victims itself; the default scheduler
  must not evict pods on gpufleet's behalf. ``gpufleet-normal`` being the global default gives
  every pod without a ``priorityClassName`` — gpufleet's or not — value 100 and ``Never``.
- **A Namespace per team** (``namespace_of_team``, default: the team's name), labelled with its
  team, holding:
- **a ResourceQuota** on ``requests.nvidia.com/gpu`` — a backstop under gpufleet's own admission:
  the team's nominal GPUs summed over models, plus what it may borrow from its cohort (a quota at
  the nominal alone would make Kubernetes refuse pods that gpufleet admitted on borrowed GPUs),
  rounded up to whole GPUs; plus ``requests.cpu`` / ``requests.memory`` when the team has CPU /
  memory quotas (:class:`TeamLayout`; a server's ``TeamOut`` has none, so they are left out).
  On time-sliced / MPS nodes the device plugin advertises ``replicas`` ``nvidia.com/gpu`` per GPU
  and gpufleet's pods ask for a whole GPU's worth of them, so ``gpu_replicas`` (the largest
  replica count in the cluster) multiplies the quota and the LimitRange's max; MIG slices
  (``nvidia.com/mig-*``) are not counted;
- **a LimitRange** with safe container defaults: CPU and memory *requests* for containers that set
  none (so the quota can count them and the scheduler places them sensibly), no default CPU or
  memory *limits* unless asked (a default limit below what a container requests makes the API
  server refuse the pod), and at most ``max_gpus_per_container`` ``nvidia.com/gpu`` per container
  (the largest node's GPUs). Kubernetes refuses a container with no limit for a resource that has
  a ``max``, so the GPU default is 0 (a container that asks for no GPU gets none).

Pure: teams in (a server's ``TeamOut`` list, or :func:`teams_from_document` of a file), dicts out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from gpufleet.errors import InputError
from gpufleet.wire import NAME

from .crds import DNS_LABEL
from .vocabulary import (
    ANNOTATION_NOMINAL_GPUS,
    ANNOTATION_NOTE,
    CORE_API,
    GPU_RESOURCE,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MANAGER,
    PRIORITY_CLASS_PREFIX,
    SCHEDULING_API,
)

MANAGED_BY: Final = {LABEL_MANAGED_BY: MANAGER}
QUOTA_NAME: Final = "gpufleet-quota"
LIMIT_RANGE_NAME: Final = "gpufleet-defaults"
ANY_GPU: Final = "*"  # gpufleet.model.quota.ANY_GPU
# Kubernetes values of gpufleet's priority classes, highest first (the order is gpufleet's).
PRIORITY_VALUES: Final = {"urgent": 1000, "high": 500, "normal": 100, "low": 50, "background": 10}
GLOBAL_DEFAULT_CLASS: Final = "normal"
_DESCRIPTIONS: Final = {
    "urgent": "gpufleet urgent: incidents and deadlines; runs first",
    "high": "gpufleet high: important work; runs before normal",
    "normal": "gpufleet normal: the default class (also for pods that name none)",
    "low": "gpufleet low: may wait for normal work",
    "background": "gpufleet background: idle capacity only; the first preempted",
}
_NEVER_WHY: Final = (
    " preemptionPolicy Never: gpufleet preempts (quota reclaim, priority, checkpoints, cost) and stops "
    "its victims itself; the default scheduler never evicts pods on gpufleet's behalf."
)
_RESERVED_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease")


def priority_class_name(priority: str) -> str:
    """The PriorityClass of a gpufleet priority class (``normal`` → ``gpufleet-normal``), as pods use it."""
    if priority not in PRIORITY_VALUES:
        raise InputError(f"unknown priority class '{priority}' (known: {', '.join(PRIORITY_VALUES)})", field="priority")
    return f"{PRIORITY_CLASS_PREFIX}{priority}"


class TeamLike(Protocol):
    """What :func:`policies` reads of a team: a :class:`gpufleet.wire.TeamOut` is one, and so is a
    :class:`TeamLayout`. CPU / memory quotas are read as ``quota_cpu_milli`` / ``quota_memory_mib``
    when the object has them."""

    @property
    def name(self) -> str: ...

    @property
    def quota_gpus(self) -> Mapping[str, float]: ...

    @property
    def cohort(self) -> str | None: ...

    @property
    def borrowing_limit_gpus(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class TeamLayout:
    """A team as a file describes it (``quota_gpus``: GPU model or ``*`` → GPUs)."""

    name: str
    quota_gpus: Mapping[str, float] = field(default_factory=dict)
    cohort: str | None = None
    borrowing_limit_gpus: float | None = None
    quota_cpu_milli: int | None = None
    quota_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerDefaults:
    """The LimitRange's container defaults (Kubernetes quantities). Limits are opt-in (see the
    module docstring)."""

    cpu_request: str = "250m"
    memory_request: str = "512Mi"
    cpu_limit: str | None = None
    memory_limit: str | None = None


# -- teams from a file ------------------------------------------------------------------------------------

_TEAM_KEYS: Final = {
    "name": "name",
    "quota_gpus": "quota_gpus",
    "quota": "quota_gpus",  # a scheduling profile's spelling
    "cohort": "cohort",
    "borrowing_limit_gpus": "borrowing_limit_gpus",
    "borrowing_limit": "borrowing_limit_gpus",
    "quota_cpu_milli": "quota_cpu_milli",
    "quota_memory_mib": "quota_memory_mib",
}
_IGNORED_KEYS: Final = frozenset({"weight", "used_gpus", "run_as", "priority_classes"})  # not policy


def teams_from_document(doc: Any, source: str = "teams file") -> list[TeamLayout]:
    """Teams from a parsed YAML/JSON document: a list of team objects (``gpufleet team ls --json``,
    ``GET /v1/teams``), or ``{"teams": ...}`` holding such a list or a map of team name → settings
    (a scheduling profile's ``teams:``). Settings: ``quota_gpus`` (or ``quota``), ``cohort``,
    ``borrowing_limit_gpus`` (or ``borrowing_limit``), ``quota_cpu_milli``, ``quota_memory_mib``;
    ``weight``, ``used_gpus``, ``run_as`` and ``priority_classes`` are ignored, others refused."""
    if isinstance(doc, Mapping) and "teams" in doc:
        doc = doc["teams"]
        if isinstance(doc, Mapping):
            doc = [{"name": k, **(v or {})} if isinstance(v, Mapping) or v is None else v for k, v in doc.items()]
    if not isinstance(doc, list):
        raise InputError("a list of teams, or a map with 'teams'", source=source, field="teams")
    out = [_team(item, f"teams[{i}]", source) for i, item in enumerate(doc)]
    names = [t.name for t in out]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise InputError(f"team '{n}' is listed twice", source=source, field=f"teams[{i}].name")
    return out


def _team(item: Any, where: str, source: str) -> TeamLayout:
    if not isinstance(item, Mapping):
        raise InputError("a team is an object with a name", source=source, field=where)
    fields: dict[str, Any] = {}
    for k, v in item.items():
        if k in _IGNORED_KEYS:
            continue
        if k not in _TEAM_KEYS:
            raise InputError(f"unknown field (known: {', '.join(_TEAM_KEYS)})", source=source, field=f"{where}.{k}")
        fields[_TEAM_KEYS[k]] = v
    name = fields.get("name")
    if not isinstance(name, str) or re.fullmatch(NAME, name) is None:
        raise InputError(f"a team name (lowercase letters, digits, '.', '_', '-'), got {name!r}", source=source,
                         field=f"{where}.name")  # fmt: skip
    quota = fields.get("quota_gpus") or {}
    if not isinstance(quota, Mapping):
        raise InputError("a map of GPU model (or '*') to GPUs", source=source, field=f"{where}.quota_gpus")
    for model, gpus in quota.items():
        if not isinstance(model, str) or not _non_negative(gpus):
            raise InputError(
                f"GPUs are a number >= 0, got {gpus!r}", source=source, field=f"{where}.quota_gpus.{model}"
            )
    cohort = fields.get("cohort")
    if cohort is not None and not isinstance(cohort, str):
        raise InputError("a cohort name", source=source, field=f"{where}.cohort")
    limit = fields.get("borrowing_limit_gpus")
    if limit is not None and not _non_negative(limit):
        raise InputError(f"a number >= 0, got {limit!r}", source=source, field=f"{where}.borrowing_limit_gpus")
    ints: dict[str, int | None] = {}
    for key in ("quota_cpu_milli", "quota_memory_mib"):
        v = fields.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise InputError(f"an integer >= 0, got {v!r}", source=source, field=f"{where}.{key}")
        ints[key] = v
    return TeamLayout(
        name=name,
        quota_gpus={str(k): float(v) for k, v in quota.items()},
        cohort=cohort,
        borrowing_limit_gpus=None if limit is None else float(limit),
        quota_cpu_milli=ints["quota_cpu_milli"],
        quota_memory_mib=ints["quota_memory_mib"],
    )


def _non_negative(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0


# -- namespaces ---------------------------------------------------------------------------------------------


def namespaces_of_teams(
    team_names: Sequence[str], namespace_of_team: Mapping[str, str] | None = None
) -> dict[str, str]:
    """team → its namespace: ``namespace_of_team``'s, else the team's name. Refuses a name that is
    not a namespace name (a team name may hold '.' or '_'), two teams in one namespace, a
    ``kube-`` namespace, and a mapping that names a team not listed (a typo)."""
    given = dict(namespace_of_team or {})
    for team in given:
        if team not in team_names:
            raise InputError(f"names team '{team}', which is not one of the teams", field=f"namespace_of_team.{team}")
    out: dict[str, str] = {}
    owner: dict[str, str] = {}
    for team in team_names:
        ns = given.get(team, team)
        if re.fullmatch(DNS_LABEL, ns) is None:
            hint = "" if team in given else "; map the team to a namespace (--namespace TEAM=NAMESPACE)"
            raise InputError(
                f"'{ns}' is not a namespace name (lowercase letters, digits and '-', 63 at most){hint}",
                field=f"namespace_of_team.{team}",
            )
        if ns in _RESERVED_NAMESPACES or ns.startswith("kube-"):
            raise InputError(f"'{ns}' is a Kubernetes system namespace", field=f"namespace_of_team.{team}")
        if ns in owner:
            raise InputError(f"'{ns}' is team '{owner[ns]}''s namespace already", field=f"namespace_of_team.{team}")
        owner[ns] = team
        out[team] = ns
    return out


def team_of_namespace(namespaces: Mapping[str, str]) -> dict[str, str]:
    """The inverse of :func:`namespaces_of_teams` (namespace → team), what the CR mappings take."""
    return {ns: team for team, ns in namespaces.items()}


# -- quotas ------------------------------------------------------------------------------------------------


def _nominal(team: TeamLike, model: str, exact_models: bool) -> float:
    q = team.quota_gpus
    if exact_models:
        return float(q.get(model, q.get(ANY_GPU, 0.0)))
    return float(q.get(model, 0.0))


def gpu_quota(
    team: TeamLike, teams: Sequence[TeamLike], gpu_models: Sequence[str] | None = None
) -> tuple[float, float]:
    """(nominal GPUs, GPUs it may hold with what it may borrow) of ``team``, over GPU models.

    ``gpu_models``: the cluster's GPU models; then a ``*`` quota counts for each model without its
    own entry, as gpufleet's quotas do. None: the quota's own entries are summed (``*`` as one).
    Borrowing (a team in a cohort): per model, up to its nominal plus ``borrowing_limit_gpus`` (no
    limit: the cohort's whole nominal), never past the cohort's nominal."""
    members = [t for t in teams if team.cohort and t.cohort == team.cohort] or [team]
    if all(t.name != team.name for t in members):
        members.append(team)
    exact = gpu_models is not None
    models = list(gpu_models) if gpu_models is not None else sorted({m for t in members for m in t.quota_gpus})
    nominal = held = 0.0
    for m in models:
        own = _nominal(team, m, exact)
        nominal += own
        if not team.cohort:
            held += own
            continue
        pool = sum(_nominal(t, m, exact) for t in members)
        cap = pool if team.borrowing_limit_gpus is None else min(own + team.borrowing_limit_gpus, pool)
        held += max(own, cap)
    return nominal, held


def _gpus(x: float) -> str:
    return str(max(0, math.ceil(x - 1e-9)))


def _cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


# -- the manifests -------------------------------------------------------------------------------------------


def priority_classes() -> list[dict[str, Any]]:
    """The five ``gpufleet-<class>`` PriorityClasses, highest first."""
    return [
        {
            "apiVersion": SCHEDULING_API,
            "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(cls), "labels": dict(MANAGED_BY)},
            "value": value,
            "globalDefault": cls == GLOBAL_DEFAULT_CLASS,
            "preemptionPolicy": "Never",
            "description": _DESCRIPTIONS[cls] + "." + _NEVER_WHY,
        }
        for cls, value in PRIORITY_VALUES.items()
    ]


def policies(
    teams: Sequence[TeamLike],
    namespace_of_team: Mapping[str, str] | None = None,
    *,
    max_gpus_per_container: int = 8,
    gpu_models: Sequence[str] | None = None,
    gpu_replicas: int = 1,
    defaults: ContainerDefaults | None = None,
) -> list[dict[str, Any]]:
    """The cluster policies of ``teams`` (see the module docstring): the PriorityClasses, then for
    each team (by name) its Namespace, ResourceQuota and LimitRange.

    ``max_gpus_per_container``: the GPUs of the largest node. ``gpu_models``: the cluster's GPU
    models (exact ``*`` quotas, see :func:`gpu_quota`). ``gpu_replicas``: ``nvidia.com/gpu`` per
    physical GPU on time-sliced / MPS nodes (1: none). Raises :class:`InputError` for a team
    layout that makes no valid namespace (:func:`namespaces_of_teams`)."""
    for name, value, high in (
        ("max_gpus_per_container", max_gpus_per_container, 1024),
        ("gpu_replicas", gpu_replicas, 64),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise InputError(f"must be an integer 1..{high}, got {value!r}", field=name)
    d = defaults or ContainerDefaults()
    ordered = sorted(teams, key=lambda t: t.name)
    namespaces = namespaces_of_teams([t.name for t in ordered], namespace_of_team)
    out = priority_classes()
    for team in ordered:
        ns = namespaces[team.name]
        labels = {**MANAGED_BY, LABEL_TEAM: team.name}
        out.append({"apiVersion": CORE_API, "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
        nominal, held = gpu_quota(team, ordered, gpu_models)
        hard: dict[str, str] = {f"requests.{GPU_RESOURCE}": _gpus(held * gpu_replicas)}
        cpu = getattr(team, "quota_cpu_milli", None)
        if isinstance(cpu, int) and not isinstance(cpu, bool):
            hard["requests.cpu"] = _cpu(cpu)
        mem = getattr(team, "quota_memory_mib", None)
        if isinstance(mem, int) and not isinstance(mem, bool):
            hard["requests.memory"] = f"{mem}Mi"
        borrow = "no cohort" if not team.cohort else f"cohort '{team.cohort}'"
        out.append(
            {
                "apiVersion": CORE_API,
                "kind": "ResourceQuota",
                "metadata": {
                    "name": QUOTA_NAME,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {
                        ANNOTATION_NOMINAL_GPUS: f"{nominal:g}",
                        ANNOTATION_NOTE: (
                            f"a backstop under gpufleet's admission: team '{team.name}' holds up to "
                            f"{held:g} GPUs ({nominal:g} nominal, {borrow})"
                            + (f", {gpu_replicas} {GPU_RESOURCE} per GPU (time-slicing)" if gpu_replicas > 1 else "")
                        ),
                    },
                },
                "spec": {"hard": hard},
            }
        )
        default_limits: dict[str, str] = {GPU_RESOURCE: "0"}
        if d.cpu_limit is not None:
            default_limits["cpu"] = d.cpu_limit
        if d.memory_limit is not None:
            default_limits["memory"] = d.memory_limit
        out.append(
            {
                "apiVersion": CORE_API,
                "kind": "LimitRange",
                "metadata": {"name": LIMIT_RANGE_NAME, "namespace": ns, "labels": labels},
                "spec": {
                    "limits": [
                        {
                            "type": "Container",
                            "defaultRequest": {"cpu": d.cpu_request, "memory": d.memory_request, GPU_RESOURCE: "0"},
                            "default": default_limits,
                            "max": {GPU_RESOURCE: str(max_gpus_per_container * gpu_replicas)},
                        }
                    ]
                },
            }
        )
    return out
