"""What gpufleet asks of the Kubernetes API, as RBAC, and what a rendered chart grants.

- :data:`CALLS` — every Kubernetes client method gpufleet's code uses, by source file, with the
  ``(apiGroup, resource, verb)`` it needs and where (:class:`Scope`). :func:`scan_calls` finds the
  methods in the code itself (every attribute named like a method of a ``kubernetes.client`` API
  class, in every module of ``src/gpufleet``), so a new call that the table (and so the chart's
  RBAC) lacks fails the tests instead of failing in a cluster.
- :func:`client_request` — the HTTP method and path a typed client method sends, read from the
  ``kubernetes`` client's own source; :func:`request_verb` turns one into the RBAC verb, and checks
  the table's typed entries.
- :class:`Authorizer` — RBAC's evaluation of the rendered ClusterRoles/Roles and their bindings for
  the chart's ServiceAccount (rules, resourceNames, subresources, namespaces).
- :func:`rbac_doc_rows` — the table in ``deploy/helm/gpufleet/RBAC.md``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import kubernetes.client

from tests.support.paths import REPO

SRC = REPO / "src" / "gpufleet"
RBAC_DOC = REPO / "deploy" / "helm" / "gpufleet" / "RBAC.md"
USED_API_CLASSES = frozenset({"CoreV1Api", "BatchV1Api", "CustomObjectsApi", "CoordinationV1Api"})


class Scope(Enum):
    CLUSTER = "cluster"  # any namespace (a ClusterRole)
    LEASE = "lease"  # the lease namespace, the Lease kubernetes.leaseName (a Role)
    TEAMS = "teams"  # the team namespaces (Roles; a ClusterRole rule with rbac.secretsClusterWide)


@dataclass(frozen=True, order=True)
class Grant:
    group: str
    resource: str  # "pods", "pods/binding", "costbudgets/status", ...
    verb: str
    scope: Scope = Scope.CLUSTER
    when: str = ""  # a values condition ("karpenter": kubernetes.karpenter true), "" = always

    def key(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)


def _g(group: str, resource: str, verb: str, scope: Scope = Scope.CLUSTER, when: str = "") -> Grant:
    return Grant(group, resource, verb, scope, when)


# (file under src/gpufleet, client method) → what it needs. CustomObjectsApi methods take the group
# and plural as arguments: their entries list every resource the file calls them with.
CALLS: dict[tuple[str, str], frozenset[Grant]] = {
    # the backend's informers (k8s/adapter/informer.py): list once, then watch
    ("k8s/adapter/backend.py", "list_node"): frozenset({_g("", "nodes", "list"), _g("", "nodes", "watch")}),
    ("k8s/adapter/backend.py", "list_pod_for_all_namespaces"): frozenset(
        {_g("", "pods", "list"), _g("", "pods", "watch")}
    ),
    ("k8s/adapter/backend.py", "read_namespaced_pod"): frozenset({_g("", "pods", "get")}),
    ("k8s/adapter/backend.py", "create_namespaced_job"): frozenset({_g("batch", "jobs", "create")}),
    ("k8s/adapter/backend.py", "delete_namespaced_job"): frozenset({_g("batch", "jobs", "delete")}),
    ("k8s/adapter/backend.py", "patch_namespaced_pod"): frozenset({_g("", "pods", "patch")}),
    ("k8s/adapter/backend.py", "delete_namespaced_pod"): frozenset({_g("", "pods", "delete")}),
    ("k8s/adapter/backend.py", "create_namespaced_pod_eviction"): frozenset({_g("", "pods/eviction", "create")}),
    ("k8s/adapter/backend.py", "create_namespaced_pod_binding"): frozenset({_g("", "pods/binding", "create")}),
    ("k8s/adapter/backend.py", "patch_namespaced_pod_status"): frozenset({_g("", "pods/status", "patch")}),
    ("k8s/adapter/logs.py", "list_pod_for_all_namespaces"): frozenset({_g("", "pods", "list")}),
    ("k8s/adapter/logs.py", "read_namespaced_pod_log"): frozenset({_g("", "pods/log", "get")}),
    ("k8s/adapter/lease.py", "read_namespaced_lease"): frozenset(
        {_g("coordination.k8s.io", "leases", "get", Scope.LEASE)}
    ),
    ("k8s/adapter/lease.py", "create_namespaced_lease"): frozenset(
        {_g("coordination.k8s.io", "leases", "create", Scope.LEASE)}
    ),
    ("k8s/adapter/lease.py", "replace_namespaced_lease"): frozenset(
        {_g("coordination.k8s.io", "leases", "update", Scope.LEASE)}
    ),
    ("k8s/adapter/provisioner.py", "list_node"): frozenset({_g("", "nodes", "list")}),
    ("k8s/adapter/provisioner.py", "list_cluster_custom_object"): frozenset(
        {
            _g("karpenter.sh", "nodepools", "list", when="karpenter"),
            _g("karpenter.sh", "nodeclaims", "list", when="karpenter"),
        }
    ),
    ("k8s/adapter/provisioner.py", "create_cluster_custom_object"): frozenset(
        {_g("karpenter.sh", "nodeclaims", "create", when="karpenter")}
    ),
    ("k8s/adapter/provisioner.py", "delete_cluster_custom_object"): frozenset(
        {_g("karpenter.sh", "nodeclaims", "delete", when="karpenter")}
    ),
    ("k8s/adopt.py", "list_pod_for_all_namespaces"): frozenset({_g("", "pods", "list")}),
    ("k8s/adopt.py", "list_node"): frozenset({_g("", "nodes", "list")}),
    ("k8s/adopt.py", "patch_namespaced_pod"): frozenset({_g("", "pods", "patch")}),
    ("k8s/reconcile.py", "list_cluster_custom_object"): frozenset(
        {_g("gpufleet.io", "costbudgets", "list"), _g("gpufleet.io", "costattributions", "list")}
    ),
    ("k8s/reconcile.py", "patch_namespaced_custom_object_status"): frozenset(
        {_g("gpufleet.io", "costbudgets/status", "patch"), _g("gpufleet.io", "costattributions/status", "patch")}
    ),
    ("k8s/reconcile.py", "read_namespaced_secret"): frozenset({_g("", "secrets", "get", Scope.TEAMS)}),
}

# CustomObjectsApi methods: the verb and whether the path ends in a subresource (resource from the table)
_CUSTOM_PATH = re.compile(r"^/apis/\{group\}/\{version\}(/namespaces/\{namespace\})?/\{plural\}(/\{name\}(/(\w+))?)?$")


_API_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*Api")  # CoreV1Api, AppsV1Api, CustomObjectsApi, ... (not ApiClient)


@functools.cache
def api_classes() -> dict[str, type]:
    """The API classes gpufleet uses (any other one in the code fails the tests before its methods matter)."""
    return {n: getattr(kubernetes.client, n) for n in sorted(USED_API_CLASSES)}


@functools.cache
def client_methods() -> dict[str, frozenset[str]]:
    """method name → the used API classes that have it (public request methods only)."""
    out: dict[str, set[str]] = {}
    for cname, cls in api_classes().items():
        for m, fn in vars(cls).items():
            if m.startswith("_") or not callable(fn) or m.endswith(("_with_http_info", "_without_preload_content")):
                continue
            if m == "close":  # the client's connection pool, no request (and a common name)
                continue
            out.setdefault(m, set()).add(cname)
    return {m: frozenset(c) for m, c in out.items()}


@dataclass(frozen=True, order=True)
class Use:
    file: str  # relative to src/gpufleet
    line: int
    name: str  # a client method, or an API class


def scan_calls(src: Path = SRC) -> tuple[list[Use], list[Use]]:
    """(method uses, API class uses) in every module under ``src``: attribute names only (a call,
    or a bound method passed to a helper, as ``call_json(what, self.core.list_node)`` does). A
    method needs an instance of its class: with the classes found, the methods of the used ones
    are all the calls."""
    methods = client_methods()
    calls: list[Use] = []
    uses: list[Use] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute):
                if node.attr in methods:
                    calls.append(Use(rel, node.lineno, node.attr))
                elif _API_CLASS.fullmatch(node.attr):
                    uses.append(Use(rel, node.lineno, node.attr))
    return sorted(calls), sorted(uses)


def client_request(method: str) -> tuple[str, str]:
    """(HTTP method, path template) a typed client method sends, from the client's own source."""
    for cname in sorted(USED_API_CLASSES):
        cls = api_classes()[cname]
        for attr in (f"_{method}_serialize", f"{method}_with_http_info"):
            fn = getattr(cls, attr, None)
            if fn is None:
                continue
            src = inspect.getsource(fn)
            found = re.search(r"method='(\w+)',\s*resource_path='([^']+)'", src) or re.search(
                r"call_api\(\s*'([^']+)',\s*'(\w+)'", src
            )
            if found:
                a, b = found.groups()
                return (a, b) if a.isupper() else (b, a)
    raise LookupError(f"no request found for kubernetes client method {method}")


def request_verb(http_method: str, has_name: bool, watch: bool = False) -> str:
    """The RBAC verb of a request on a resource (collection if not ``has_name``)."""
    m = http_method.upper()
    if m == "GET":
        return ("watch" if watch else "get") if has_name else ("watch" if watch else "list")
    if m == "POST":
        return "create"
    if m == "PUT":
        return "update"
    if m == "PATCH":
        return "patch"
    if m == "DELETE":
        return "delete" if has_name else "deletecollection"
    raise ValueError(f"no RBAC verb for HTTP {http_method}")


def parse_path(path: str) -> tuple[str, str, str | None, str | None, str | None, bool]:
    """(group, version, namespace, resource plural, name, sub) of an API path; the last is watch.
    Placeholders ``{...}`` are kept as they are."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    watch = bool(rest) and rest[0] == "watch"
    if watch:
        rest = rest[1:]
    namespace = None
    # /namespaces/{ns}/<resource>...: a namespaced resource; /namespaces[/{name}[/status|finalize]]: Namespaces
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return group, version, namespace, f"{resource}/{sub}" if sub and resource else resource, name, watch


def typed_grant(method: str) -> tuple[str, str, str]:
    """(group, resource, verb) of a typed (non-custom-object) client method, from its request."""
    http, path = client_request(method)
    group, _, _, resource, name, watch = parse_path(path)
    assert resource is not None
    return group, resource, request_verb(http, name is not None, watch)


def custom_shape(method: str) -> tuple[str, bool]:
    """(verb, has a subresource) of a CustomObjectsApi method."""
    http, path = client_request(method)
    m = _CUSTOM_PATH.match(path)
    if m is None:
        raise LookupError(f"{method}: unexpected path {path}")
    return request_verb(http, m.group(2) is not None), m.group(4) is not None


# list methods the code hands to an informer (k8s/adapter/informer.py), which calls them with
# watch=True too after its first list: they need list and watch
INFORMED: frozenset[tuple[str, str]] = frozenset(
    {("k8s/adapter/backend.py", "list_node"), ("k8s/adapter/backend.py", "list_pod_for_all_namespaces")}
)


def needed(*, karpenter: bool) -> set[Grant]:
    return {g for gs in CALLS.values() for g in gs if not g.when or (g.when == "karpenter" and karpenter)}


# -- RBAC evaluation -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]

    @classmethod
    def of(cls, r: Mapping[str, Any]) -> Rule:
        return cls(
            frozenset(r.get("apiGroups") or ()),
            frozenset(r.get("resources") or ()),
            frozenset(r.get("verbs") or ()),
            frozenset(r.get("resourceNames") or ()),
        )

    def allows(self, group: str, resource: str, verb: str, name: str | None) -> bool:
        return (
            (group in self.groups or "*" in self.groups)
            and (resource in self.resources or "*" in self.resources)
            and (verb in self.verbs or "*" in self.verbs)
            and (not self.names or (name is not None and name in self.names))
        )

    def triples(self) -> set[tuple[str, str, str]]:
        return {(g, r, v) for g in self.groups for r in self.resources for v in self.verbs}


class Authorizer:
    """RBAC for ``namespace/serviceaccount`` over rendered objects: what its bindings grant."""

    def __init__(self, objects: Iterable[Mapping[str, Any]], namespace: str, service_account: str) -> None:
        objs = list(objects)
        roles = {("ClusterRole", None, o["metadata"]["name"]): o for o in objs if o["kind"] == "ClusterRole"}
        roles |= {("Role", o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs if o["kind"] == "Role"}
        self.cluster: list[Rule] = []
        self.namespaced: dict[str, list[Rule]] = {}
        for b in objs:
            if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if not any(
                s.get("kind") == "ServiceAccount"
                and s.get("name") == service_account
                and s.get("namespace") == namespace
                for s in b.get("subjects") or ()
            ):
                continue
            ref = b["roleRef"]
            bns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
            role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else None, ref["name"]))
            assert role is not None, (
                f"{b['kind']} {b['metadata']['name']} refers to a missing {ref['kind']} {ref['name']}"
            )
            rules = [Rule.of(r) for r in role.get("rules") or ()]
            if bns is None:
                self.cluster.extend(rules)
            else:
                self.namespaced.setdefault(bns, []).extend(rules)

    def allows(self, group: str, resource: str, verb: str, namespace: str | None, name: str | None = None) -> bool:
        rules = self.cluster + (self.namespaced.get(namespace, []) if namespace else [])
        return any(r.allows(group, resource, verb, name) for r in rules)

    def triples(self) -> set[tuple[str, str, str]]:
        """Every (group, resource, verb) granted anywhere."""
        out: set[tuple[str, str, str]] = set()
        for r in [*self.cluster, *(r for rs in self.namespaced.values() for r in rs)]:
            out |= r.triples()
        return out

    def cluster_triples(self) -> set[tuple[str, str, str]]:
        out: set[tuple[str, str, str]] = set()
        for r in self.cluster:
            out |= r.triples()
        return out


# -- RBAC.md ----------------------------------------------------------------------------------------------


def rbac_doc_rows(path: Path = RBAC_DOC) -> list[dict[str, str]]:
    """The rows of the first Markdown table whose header starts with ``apiGroup``."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            if cells and cells[0].lower() == "apigroup":
                header = [c.lower() for c in cells]
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def doc_cell(cell: str) -> list[str]:
    """A cell's values: ``"`get`, `update`"`` → ["get", "update"]; ``"core (`""`)"`` → [""]."""
    if '`""`' in cell:
        return [""]
    return re.findall(r"`([^`]*)`", cell)
