"""Node provisioning through Karpenter: gpufleet's scale-up decisions become ``karpenter.sh/v1``
NodeClaims, its scale-downs delete them.

:class:`KarpenterProvisioner` is the :class:`~gpufleet.backends.base.Provisioner` of the Kubernetes
backend (``KubernetesBackend(..., provisioner=KarpenterProvisioner(api_client, catalog))``):

- :meth:`~KarpenterProvisioner.pools` — each Karpenter NodePool becomes one gpufleet
  :class:`~gpufleet.model.node.NodePool` per (instance type, capacity type) it offers that the price
  catalog prices, named ``<nodepool>_<instance-type>_<capacity-type>`` (a valid label value: the
  name is also the node label ``gpufleet.io/pool`` that Karpenter copies from the claim onto the
  Node, so a node gpufleet finds after a restart lands in the same pool). A pool's taints are the
  NodePool template's ``spec.taints`` that keep pods off (as :func:`.nodes.node_taints` reads a
  Node's: not those gpufleet's pods tolerate; ``startupTaints`` are temporary and left out, as
  Karpenter leaves them out of its own scheduling). The autoscaler then picks the cheapest pool that
  fits (spot pools only for preemptible work; only pools whose taints the job tolerates);
- :meth:`~KarpenterProvisioner.provision` — creates NodeClaims from the NodePool's template with the
  instance type and capacity type pinned (:func:`.objects.node_claim`), never more than the
  NodePool's ``spec.limits`` leave room for, and returns the gpufleet nodes they will become, priced,
  so the loop bills them from the call;
- :meth:`~KarpenterProvisioner.release` — deletes the NodeClaim of a node gpufleet provisioned
  (Karpenter cordons, drains and terminates the node); any other node is left alone;
- :meth:`~KarpenterProvisioner.events` — what the backend's ``poll()`` adds to its own node events:
  ``NODE_REMOVED`` for a claim that went away before its node joined (launch failed, capacity
  unavailable, registration timed out), and for a claim whose node joined under another name.

**One provisioner at a time.** Karpenter's own provisioner launches nodes for every pod whose
``PodScheduled`` condition has reason ``Unschedulable``, whatever its ``schedulerName``
(``IsProvisionable`` in its ``pkg/utils/pod``). With this provisioner configured gpufleet is the
only one that provisions for its pods: it never marks them ``Unschedulable`` (their waits read
``SchedulingGated``, which Karpenter ignores), so Karpenter never launches a node beside gpufleet's
claims. Without it, gpufleet marks a pod ``Unschedulable`` only when capacity is why its job waits,
never for a quota, budget or preemption wait: see :mod:`gpufleet.k8s.adapter.waiting`. The claims
gpufleet makes are ones Karpenter launches and judges as its own (:func:`.objects.node_claim`: no
``minValues`` with the instance type pinned, the NodePool's hash annotations, its labels), and the
pods gpufleet runs carry ``karpenter.sh/do-not-disrupt`` (:func:`.objects.batch_job`; an adopted
pod gets it when its run claims it, unless its owner set a value), so
consolidation, drift and expiry never take a node from under a job; gpufleet gives idle nodes back
itself (:meth:`~KarpenterProvisioner.release`).

**Node names.** A provisioned node is named after its NodeClaim. That is the Node's name where the
cloud provider names nodes after their claims (Karpenter's KWOK provider, and the test substrate).
On AWS the Node is named after the instance's host name instead (``ip-10-0-1-2.ec2.internal``,
recorded as the claim's ``status.nodeName``): then the backend reports the real Node as a new node
(``NODE_ADDED``, the loop takes it from the backend, in the pool of its ``gpufleet.io/pool``
label) and :meth:`~KarpenterProvisioner.events` reports the placeholder named after the claim
``NODE_REMOVED`` in the same poll, so the capacity is billed once, from the call, without a gap.

**Shapes.** The catalog gives an instance type's GPU model, GPU count and price, not its CPU or
memory: those come from :data:`INSTANCE_SHAPES` (the published vCPU and memory of the catalog's
instance types and a few more), else from the NodePool's single-valued ``instance-cpu`` /
``instance-memory`` requirements, else from the AWS size (``<n>xlarge`` = 4n vCPU, 4 GiB per vCPU)
or 4 vCPU and 16 GiB per GPU: lower bounds, so the autoscaler never counts on capacity a node lacks.
What the loop can place on a node is the allocatable estimate of :func:`allocatable`
(Karpenter's own on AWS: VM overhead, kube-reserved, eviction threshold).

**Limits.** A NodePool's ``spec.limits`` (``nvidia.com/gpu``, ``cpu``, ``memory``, ``nodes``) bound
the capacity of all its nodes together, counted as Karpenter counts it: each NodeClaim's capacity
(its ``status.capacity`` once launched, else its instance type's shape), or the NodePool's
``status.resources`` when that is larger. A pool's ``max_nodes`` is the nodes gpufleet already holds
in it (the loop counts them against ``max_nodes``) plus the room the limits leave; a NodePool
without limits allows ``max_nodes_unlimited``. :meth:`~KarpenterProvisioner.provision` re-reads the
limits and usage before creating claims, so pools that share a NodePool never overrun it together.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends.base import BackendEvent, EventKind
from gpufleet.cost.catalog import PriceCatalog, PriceEntry
from gpufleet.errors import BackendError, GpufleetError
from gpufleet.k8s.adapter.api import call_json
from gpufleet.k8s.adapter.nodes import keep_off_taints, quantity_count, quantity_mib, quantity_milli
from gpufleet.k8s.adapter.objects import (
    NodePoolOffer,
    dns_label,
    label_value,
    node_claim,
    nodepool_offer,
)
from gpufleet.k8s.vocabulary import (
    AWS_CATEGORY,
    AWS_CPU,
    AWS_FAMILY,
    AWS_GENERATION,
    AWS_GPU_COUNT,
    AWS_GPU_MANUFACTURER,
    AWS_GPU_MEMORY,
    AWS_GPU_NAME,
    AWS_MEMORY,
    AWS_NODE_CLASS_GROUP,
    AWS_SIZE,
    AZURE_NODE_CLASS_GROUP,
    GPU_RESOURCE,
    KARPENTER_GROUP,
    KARPENTER_VERSION,
    LABEL_ARCH,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_KARPENTER_CAPACITY_TYPE,
    LABEL_KARPENTER_NODEPOOL,
    LABEL_OS,
    LABEL_POOL,
    LABEL_PROVISIONED,
    LABEL_REGION,
    LABEL_ZONE,
)
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode

log = logging.getLogger(__name__)

NODEPOOLS, NODECLAIMS = "nodepools", "nodeclaims"
# On the NodeClaims gpufleet makes (and so their Nodes): LABEL_PROVISIONED "true", and LABEL_POOL the
# gpufleet pool (what node_info reads as the node's pool).

# Karpenter's NodeClass API groups → the catalog's provider.
PROVIDER_OF_NODECLASS = {AWS_NODE_CLASS_GROUP: "aws", AZURE_NODE_CLASS_GROUP: "azure"}


@dataclass(frozen=True, slots=True)
class InstanceShape:
    vcpus: int
    memory_gib: float
    arch: str = "amd64"


# Published vCPU and memory of the catalog's instance types (and of their larger siblings).
INSTANCE_SHAPES: dict[str, InstanceShape] = {
    "p5.48xlarge": InstanceShape(192, 2048),
    "p5e.48xlarge": InstanceShape(192, 2048),
    "p5en.48xlarge": InstanceShape(192, 2048),
    "p4de.24xlarge": InstanceShape(96, 1152),
    "p4d.24xlarge": InstanceShape(96, 1152),
    "p3.2xlarge": InstanceShape(8, 61),
    "p3.8xlarge": InstanceShape(32, 244),
    "p3.16xlarge": InstanceShape(64, 488),
    "g6e.xlarge": InstanceShape(4, 32),
    "g6e.12xlarge": InstanceShape(48, 384),
    "g6e.48xlarge": InstanceShape(192, 1536),
    "g6.xlarge": InstanceShape(4, 16),
    "g6.12xlarge": InstanceShape(48, 192),
    "g6.48xlarge": InstanceShape(192, 768),
    "g5.xlarge": InstanceShape(4, 16),
    "g5.12xlarge": InstanceShape(48, 192),
    "g5.48xlarge": InstanceShape(192, 768),
    "g4dn.xlarge": InstanceShape(4, 16),
    "g4dn.12xlarge": InstanceShape(48, 192),
    "Standard_NC40ads_H100_v5": InstanceShape(40, 320),
    "Standard_NC24ads_A100_v4": InstanceShape(24, 220),
    "Standard_ND96asr_v4": InstanceShape(96, 900),
    "Standard_NV36ads_A10_v5": InstanceShape(36, 440),
    "Standard_NC4as_T4_v3": InstanceShape(4, 28),
    "Standard_NC6s_v3": InstanceShape(6, 112),
}

# Karpenter's AWS requirement keys for an instance type's GPU name (lowercase family).
_AWS_GPU_NAMES = {
    "H100": "h100",
    "H200": "h200",
    "A100": "a100",
    "A10G": "a10g",
    "L40S": "l40s",
    "L4": "l4",
    "T4": "t4",
    "V100": "v100",
    "A10": "a10",
}
_AWS_TYPE = re.compile(r"(?P<family>(?P<category>[a-z]+)(?P<generation>\d+)[a-z-]*)\.(?P<size>[a-z0-9-]+)")
_AWS_ZONE = re.compile(r"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)[a-z]")
_NOT_READY = ("False",)


def allocatable(vcpus: float, memory_mib: float, max_pods: int = 110) -> tuple[int, int]:
    """What the kubelet of a node with this capacity admits (milli-CPU, MiB), as Karpenter estimates
    it on AWS: memory less the VM's overhead (7.5 %), kube-reserved (11 MiB × max pods + 255 MiB)
    and the eviction threshold (100 MiB); CPU less kube-reserved (6 % of the first core, 1 % of the
    second, 0.5 % of the next two, 0.25 % of the rest)."""
    cores = vcpus
    reserved = 0.0
    for share, n in ((0.06, 1.0), (0.01, 1.0), (0.005, 2.0), (0.0025, math.inf)):
        take = min(cores, n)
        reserved += take * share
        cores -= take
        if cores <= 0:
            break
    cpu = math.floor((vcpus - reserved) * 1000)
    memory = math.floor(memory_mib * (1 - 0.075)) - (11 * max_pods + 255) - 100
    return max(0, cpu), max(0, memory)


@dataclass(frozen=True, slots=True)
class _Usage:
    """Capacity a NodePool's claims hold (Karpenter counts limits against capacity)."""

    gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    nodes: int = 0


@dataclass(frozen=True, slots=True)
class _Choice:
    """One gpufleet pool: a NodePool with an instance type and capacity type pinned."""

    pool: NodePool
    nodepool: Mapping[str, Any]  # the NodePool object (template for the claims)
    nodepool_name: str
    instance_type: str
    capacity_type: str
    entry: PriceEntry
    vcpus: float
    memory_mib: float  # capacity (what limits count)
    own: int  # gpufleet's claims of this pool, not being deleted (the loop counts them)


@dataclass(slots=True)
class _Snapshot:
    at: float
    pools: list[NodePool] = field(default_factory=list)
    choices: dict[str, _Choice] = field(default_factory=dict)


class KarpenterProvisioner:
    """Grow and shrink a cluster through Karpenter NodeClaims (see the module docstring).

    ``region`` / ``provider`` choose the catalog's prices where the NodePool does not say (the
    provider follows from the NodeClass's API group, the region from AWS zones in the requirements);
    ``cache_ttl_s`` is how long :meth:`pools` answers from its last read; ``provisioning_delay_s`` is
    the pools' expected time from a claim to a ready node; ``max_nodes_unlimited`` bounds a pool of a
    NodePool without limits; ``sharing`` is how the new nodes' GPUs are shared (the device plugin's
    configuration: whole GPUs unless time-slicing is set up).
    """

    def __init__(
        self,
        api_client: Any,
        catalog: PriceCatalog,
        *,
        now: Callable[[], float] = time.time,
        region: str | None = None,
        provider: str | None = None,
        cache_ttl_s: float = 30.0,
        provisioning_delay_s: float = 180.0,
        max_nodes_unlimited: int = 10,
        sharing: SharingMode = SharingMode.EXCLUSIVE,
    ) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.catalog = catalog
        self.now = now
        self.region = region
        self.provider = provider.lower() if provider else None
        self.cache_ttl_s = cache_ttl_s
        self.provisioning_delay_s = provisioning_delay_s
        self.max_nodes_unlimited = max_nodes_unlimited
        self.sharing = sharing
        self._cache: _Snapshot | None = None
        self._pending: dict[str, str] = {}  # claims created, node not joined yet: claim → gpufleet pool

    # -- API ---------------------------------------------------------------------------------------
    def _call(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return call_json(what, call, *args, **kwargs)

    def _list(self, plural: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        data = self._call(
            f"listing {plural}.{KARPENTER_GROUP}",
            self.custom.list_cluster_custom_object,
            KARPENTER_GROUP,
            KARPENTER_VERSION,
            plural,
            **kwargs,
        )
        return [o for o in data.get("items") or [] if isinstance(o, dict)]

    # -- pools -------------------------------------------------------------------------------------
    def pools(self) -> list[NodePool]:
        """The gpufleet pools of the cluster's NodePools (read at most every ``cache_ttl_s``)."""
        now = self.now()
        if self._cache is None or now - self._cache.at >= self.cache_ttl_s:
            self._cache = self._read(now)
        return list(self._cache.pools)

    def _read(self, now: float) -> _Snapshot:
        nodepools = self._list(NODEPOOLS)
        claims = self._list(NODECLAIMS)
        snap = _Snapshot(now)
        for obj in sorted(nodepools, key=lambda o: str((o.get("metadata") or {}).get("name"))):
            name = (obj.get("metadata") or {}).get("name") or "?"
            try:
                choices = self._choices(obj, claims)
            except (GpufleetError, ValueError, TypeError, KeyError, AttributeError) as e:
                log.warning("NodePool %s skipped: %s", name, getattr(e, "message", None) or e)
                continue
            for c in choices:
                if c.pool.name in snap.choices:
                    log.warning("NodePool %s: pool name %s is taken by another NodePool; skipped", name, c.pool.name)
                    continue
                snap.choices[c.pool.name] = c
                snap.pools.append(c.pool)
        return snap

    def _choices(self, obj: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> list[_Choice]:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        offer = nodepool_offer(obj)
        name = offer["name"]
        if meta.get("deletionTimestamp"):
            log.info("NodePool %s is being deleted: no pools from it", name)
            return []
        if spec.get("replicas") is not None:
            log.info("NodePool %s is static (spec.replicas): Karpenter keeps its size, gpufleet does not", name)
            return []
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if isinstance(cond, Mapping) and cond.get("type") == "Ready" and cond.get("status") in _NOT_READY:
                why = cond.get("message") or cond.get("reason")
                log.info("NodePool %s is not Ready (%s): no pools from it", name, why)
                return []
        if not offer["node_class"]:
            log.info("NodePool %s has no nodeClassRef: no pools from it", name)
            return []
        tspec = (spec.get("template") or {}).get("spec") or {}
        reqs: list[Mapping[str, Any]] = list(tspec.get("requirements") or [])
        taints = keep_off_taints(tspec.get("taints"), source=f"nodepool {name}", at="spec.template.spec.taints")
        provider = PROVIDER_OF_NODECLASS.get(str(offer["node_class"].get("group", ""))) or self.provider
        region = self.region or _region_of_zones(offer["zones"])
        mine = [
            c for c in claims if ((c.get("metadata") or {}).get("labels") or {}).get(LABEL_KARPENTER_NODEPOOL) == name
        ]
        usage = self._usage(obj, mine, provider, region)

        out: list[_Choice] = []
        for itype in self._instance_types(offer, provider):
            entry = self._entry(itype, provider, region)
            if entry is None:
                log.debug("NodePool %s: the catalog does not price %s", name, itype)
                continue
            if not _gpu_fits(offer, entry):
                continue
            vcpus, memory_mib = self._shape(itype, entry, reqs)
            props = instance_labels(itype, entry, vcpus, memory_mib)
            if not _requirements_admit(reqs, props):
                continue
            cpu_alloc, mem_alloc = allocatable(vcpus, memory_mib)
            for cap in offer["capacity_types"]:
                try:
                    capacity_type = CapacityType(cap)
                except ValueError:
                    log.debug("NodePool %s: capacity type %r is not one gpufleet knows", name, cap)
                    continue
                price = entry.hourly_usd(capacity_type, self.catalog.spot_estimate)
                if price is None:
                    log.debug("NodePool %s: the catalog has no %s price for %s", name, cap, itype)
                    continue
                pool_name = label_value(f"{name}_{itype}_{cap}")
                own = sum(
                    1
                    for c in mine
                    if ((c.get("metadata") or {}).get("labels") or {}).get(LABEL_POOL) == pool_name
                    and not (c.get("metadata") or {}).get("deletionTimestamp")
                )
                room = _room(offer, usage, entry.gpu_count, vcpus, memory_mib)
                max_nodes = self.max_nodes_unlimited if room is None else own + room
                # what its nodes will carry, so a job's selector or affinity on them (the OS, the
                # architecture, the instance family, a single zone) may grow the pool
                labels = {
                    **props,
                    **({LABEL_ZONE: offer["zones"][0]} if offer["zones"] and len(offer["zones"]) == 1 else {}),
                    **offer["labels"],
                    LABEL_KARPENTER_NODEPOOL: name,
                    LABEL_INSTANCE_TYPE: itype,
                    LABEL_KARPENTER_CAPACITY_TYPE: cap,
                    LABEL_POOL: pool_name,
                    LABEL_PROVISIONED: "true",
                }
                if region:
                    labels[LABEL_REGION] = region
                pool = NodePool(
                    name=pool_name,
                    gpu_model=entry.gpu,
                    gpus_per_node=entry.gpu_count,
                    cpu_milli=cpu_alloc,
                    memory_mib=mem_alloc,
                    capacity_type=capacity_type,
                    hourly_price_usd=price,
                    min_nodes=0,
                    max_nodes=max(0, max_nodes),
                    provisioning_delay_s=self.provisioning_delay_s,
                    sharing=self.sharing,
                    labels=labels,
                    taints=taints,
                )
                out.append(_Choice(pool, obj, name, itype, cap, entry, vcpus, memory_mib, own))
        if not out:
            log.info(
                "NodePool %s offers no instance type the catalog prices (in %s/%s)",
                name,
                provider or "any provider",
                region or "any region",
            )
        return out

    def _instance_types(self, offer: NodePoolOffer, provider: str | None) -> list[str]:
        listed = offer["instance_types"]
        if listed is not None:
            return listed
        if provider is None:  # an open pool of an unknown cloud: the catalog's offerings are not its types
            return []
        excluded = set(offer["excluded_instance_types"])
        return sorted({e.offering for e in self.catalog.entries if e.provider == provider} - excluded)

    def _entry(self, instance_type: str, provider: str | None, region: str | None) -> PriceEntry | None:
        rows = sorted(
            (
                e
                for e in self.catalog.entries
                if e.offering == instance_type and (provider is None or e.provider == provider)
            ),
            key=lambda e: (e.provider, e.region),
        )
        in_region = [e for e in rows if e.region == region]
        if rows and region is not None and not in_region:
            log.debug("no %s price in %s: priced as %s/%s", instance_type, region, rows[0].provider, rows[0].region)
        found = in_region or rows
        return found[0] if found else None

    def _shape(self, instance_type: str, entry: PriceEntry, reqs: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
        """(vCPUs, memory MiB) of the instance type's capacity (see the module docstring)."""
        known = INSTANCE_SHAPES.get(instance_type)
        if known is not None:
            return float(known.vcpus), known.memory_gib * 1024
        cpu = _single(reqs, AWS_CPU)
        mem = _single(reqs, AWS_MEMORY)
        if cpu is not None and mem is not None:
            return cpu, mem
        m = _AWS_TYPE.fullmatch(instance_type)
        if m is not None and m["size"].endswith("xlarge"):
            n = m["size"][: -len("xlarge")]
            vcpus = 4 * (int(n) if n.isdigit() else 1)
            return float(cpu or vcpus), float(mem or vcpus * 4 * 1024)
        return float(cpu or 4 * entry.gpu_count), float(mem or 16 * 1024 * entry.gpu_count)

    def _usage(
        self, obj: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], provider: str | None, region: str | None
    ) -> _Usage:
        name = str((obj.get("metadata") or {}).get("name"))
        gpus = cpu = mem = 0
        for c in claims:
            cap = (c.get("status") or {}).get("capacity") or {}
            src = f"nodeclaim {(c.get('metadata') or {}).get('name')}"
            if cap:
                gpus += quantity_count(cap.get(GPU_RESOURCE, 0), field="status.capacity", source=src)
                cpu += quantity_milli(cap.get("cpu", 0), field="status.capacity.cpu", source=src)
                mem += quantity_mib(cap.get("memory", 0), field="status.capacity.memory", source=src)
                continue
            # not launched yet: its instance type's shape; of several candidates, the largest of each
            reqs = list((c.get("spec") or {}).get("requirements") or [])
            shapes = []
            for itype in _claim_instance_types(c):
                entry = self._entry(itype, provider, region)
                if entry is not None:
                    vcpus, memory_mib = self._shape(itype, entry, reqs)
                    shapes.append((entry.gpu_count, math.ceil(vcpus * 1000), math.ceil(memory_mib)))
            if not shapes:
                log.debug("NodePool %s: %s of an unknown instance type counts as a node only", name, src)
                continue
            gpus += max(g for g, _, _ in shapes)
            cpu += max(c for _, c, _ in shapes)
            mem += max(m for _, _, m in shapes)
        status = (obj.get("status") or {}).get("resources") or {}
        src = f"nodepool {name}"
        if status.get(GPU_RESOURCE) is not None:
            gpus = max(gpus, quantity_count(status[GPU_RESOURCE], field="status.resources", source=src))
        if status.get("cpu") is not None:
            cpu = max(cpu, quantity_milli(status["cpu"], field="status.resources.cpu", source=src))
        if status.get("memory") is not None:
            mem = max(mem, quantity_mib(status["memory"], field="status.resources.memory", source=src))
        nodes = max(len(claims), int((obj.get("status") or {}).get("nodes") or 0))
        return _Usage(gpus, cpu, mem, nodes)

    # -- provision ---------------------------------------------------------------------------------
    def provision(self, pool: str, count: int, now: float) -> list[Node]:
        """Create up to ``count`` NodeClaims for ``pool`` (fewer where the NodePool's limits leave
        less room) and return the nodes they will become, named after the claims."""
        if count <= 0:
            return []
        snap = self._read(self.now())  # fresh limits and usage: pools sharing a NodePool share its room
        self._cache = snap
        choice = snap.choices.get(pool)
        if choice is None:
            log.warning("cannot provision %d node(s) of pool %s: no NodePool offers it now", count, pool)
            return []
        room = choice.pool.max_nodes - choice.own
        if room < count:
            log.warning(
                "pool %s: %d node(s) asked, the limits of NodePool %s leave room for %d",
                pool,
                count,
                choice.nodepool_name,
                max(0, room),
            )
            count = max(0, room)
        nodes: list[Node] = []
        prefix = dns_label(choice.nodepool_name, 50) + "-gf-"
        for _ in range(count):
            body = node_claim(
                choice.nodepool,
                instance_type=choice.instance_type,
                capacity_type=choice.capacity_type,
                labels={LABEL_PROVISIONED: "true", LABEL_POOL: choice.pool.name},
            )
            body["metadata"].pop("name", None)
            body["metadata"]["generateName"] = prefix
            try:
                made = self._call(
                    f"creating a NodeClaim for pool {pool}",
                    self.custom.create_cluster_custom_object,
                    KARPENTER_GROUP,
                    KARPENTER_VERSION,
                    NODECLAIMS,
                    body,
                )
            except BackendError:
                if not nodes:
                    raise
                log.exception("pool %s: %d of %d NodeClaim(s) created", pool, len(nodes), count)
                break
            name = str((made.get("metadata") or {}).get("name") or "")
            if not name:
                raise BackendError(f"creating a NodeClaim for pool {pool}: the API returned no name")
            self._pending[name] = pool
            nodes.append(self._node(name, choice))
            log.info(
                "NodeClaim %s created for pool %s (%s, %s, $%.4f/h)",
                name,
                pool,
                choice.instance_type,
                choice.capacity_type,
                choice.pool.hourly_price_usd or 0.0,
            )
        if nodes and self._cache is not None:
            self._cache.at = -math.inf  # counts changed: the next pools() reads again
        return nodes

    def _node(self, name: str, choice: _Choice) -> Node:
        p = choice.pool
        return Node(
            name=name,
            gpu_model=p.gpu_model,
            gpu_count=p.gpus_per_node,
            cpu_milli=p.cpu_milli,
            memory_mib=p.memory_mib,
            pool=p.name,
            capacity_type=p.capacity_type,
            hourly_price_usd=p.hourly_price_usd,
            sharing=p.sharing,
            labels={**p.labels, LABEL_HOSTNAME: name},
            gpu_facts=p.gpu_facts,
            taints=p.taints,  # the claim's spec.taints (node_claim copies the template's): Karpenter syncs them
        )

    # -- release -----------------------------------------------------------------------------------
    def release(self, node: str, now: float) -> None:
        """Delete the NodeClaim of ``node`` (by the claim's name or its ``status.nodeName``);
        Karpenter drains and terminates the node. A node gpufleet did not provision is never released."""
        claims = self._list(NODECLAIMS, f"{LABEL_PROVISIONED}=true")
        claim = next((c for c in claims if _claim_name(c) == node), None) or next(
            (c for c in claims if (c.get("status") or {}).get("nodeName") == node), None
        )
        if claim is None:
            log.warning("node %s was not provisioned by gpufleet (no NodeClaim of ours names it): not released", node)
            return
        name = _claim_name(claim)
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_cluster_custom_object(
                KARPENTER_GROUP, KARPENTER_VERSION, NODECLAIMS, name, _preload_content=False
            )
        except ApiException as e:
            if e.status != 404:  # gone already: released
                raise BackendError(
                    f"deleting NodeClaim {name} (node {node}): Kubernetes API {e.status} {e.reason}: "
                    f"{(e.body or '')[:300]}"
                ) from None
        except Exception as e:
            raise BackendError(f"deleting NodeClaim {name} (node {node}): Kubernetes API unreachable: {e}") from None
        self._pending.pop(name, None)
        if self._cache is not None:
            self._cache.at = -math.inf
        log.info("NodeClaim %s deleted: node %s given back", name, node)

    # -- for the backend's poll() ------------------------------------------------------------------
    def events(self, live_nodes: Collection[str], now: float) -> list[BackendEvent]:
        """``NODE_REMOVED`` for claims this process made whose node will not join under the claim's
        name: the claim is gone (launch failed, no capacity, registration timed out), or its node
        joined as ``status.nodeName`` (one of ``live_nodes``, which the backend reports
        ``NODE_ADDED`` itself). A claim whose node joined under its own name needs nothing: the
        backend's ``NODE_ADDED`` makes the provisioned node ready. Never raises (logs instead)."""
        if not self._pending:
            return []
        try:
            claims = {_claim_name(c): c for c in self._list(NODECLAIMS, f"{LABEL_PROVISIONED}=true")}
        except BackendError as e:
            log.warning("listing NodeClaims: %s", e)
            return []
        out: list[BackendEvent] = []
        for name in sorted(self._pending):
            if name in live_nodes:  # joined under the claim's name
                del self._pending[name]
                continue
            claim = claims.get(name)
            if claim is None:
                del self._pending[name]
                out.append(
                    BackendEvent(
                        EventKind.NODE_REMOVED,
                        now,
                        node=name,
                        reason=f"NodeClaim {name} was deleted before its node joined",
                    )
                )
                continue
            joined = (claim.get("status") or {}).get("nodeName")
            if joined and joined != name and joined in live_nodes:
                del self._pending[name]
                out.append(
                    BackendEvent(
                        EventKind.NODE_REMOVED, now, node=name, reason=f"NodeClaim {name} joined as node {joined}"
                    )
                )
        return out

    def claims_ready(self) -> list[str]:
        """Names of gpufleet's NodeClaims whose Node (named as the claim, or its ``status.nodeName``)
        exists and is Ready."""
        claims = self._list(NODECLAIMS, f"{LABEL_PROVISIONED}=true")
        if not claims:
            return []
        nodes = self._call("listing nodes", self.core.list_node).get("items") or []
        ready = {
            str((n.get("metadata") or {}).get("name"))
            for n in nodes
            if any(
                isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        }
        out = []
        for c in claims:
            name = _claim_name(c)
            node = (c.get("status") or {}).get("nodeName") or name
            if node in ready:
                out.append(name)
        return sorted(out)


# -- helpers ---------------------------------------------------------------------------------------


def _claim_name(claim: Mapping[str, Any]) -> str:
    return str((claim.get("metadata") or {}).get("name") or "")


def _claim_instance_types(claim: Mapping[str, Any]) -> list[str]:
    """The instance type a claim launched as (its label), else the types its requirements allow."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_INSTANCE_TYPE):
        return [str(labels[LABEL_INSTANCE_TYPE])]
    for r in (claim.get("spec") or {}).get("requirements") or []:
        if r.get("key") == LABEL_INSTANCE_TYPE and r.get("operator") == "In":
            return [str(v) for v in r.get("values") or []]
    return []


def _region_of_zones(zones: Sequence[str] | None) -> str | None:
    """The AWS region of the zones a NodePool allows, when they are all in one."""
    regions = set()
    for z in zones or []:
        m = _AWS_ZONE.fullmatch(z)
        if m is None:
            return None
        regions.add(m["region"])
    return regions.pop() if len(regions) == 1 else None


def _family(model: str) -> str:
    return model.split("-", 1)[0]


def _gpu_fits(offer: NodePoolOffer, entry: PriceEntry) -> bool:
    """Does the NodePool's GPU requirements (model names, counts) admit the offering's GPUs?"""
    models = offer["gpu_models"]
    if models is not None and _family(entry.gpu) not in {_family(m) for m in models}:
        return False
    n = entry.gpu_count
    if offer["gpu_counts"] is not None and n not in offer["gpu_counts"]:
        return False
    if offer["min_gpus"] is not None and n < offer["min_gpus"]:
        return False
    return offer["max_gpus"] is None or n <= offer["max_gpus"]


def instance_labels(instance_type: str, entry: PriceEntry, vcpus: float, memory_mib: float) -> dict[str, str]:
    """Well-known labels a node of the instance type carries, for checking requirements on them."""
    props = {LABEL_OS: "linux"}
    shape = INSTANCE_SHAPES.get(instance_type)
    if shape is not None:
        props[LABEL_ARCH] = shape.arch
    m = _AWS_TYPE.fullmatch(instance_type)
    if entry.provider == "aws" and m is not None:
        props.update(
            {
                AWS_FAMILY: m["family"],
                AWS_CATEGORY: m["category"],
                AWS_GENERATION: m["generation"],
                AWS_SIZE: m["size"],
                AWS_CPU: str(int(vcpus)),
                AWS_MEMORY: str(int(memory_mib)),
                AWS_GPU_COUNT: str(entry.gpu_count),
                AWS_GPU_MANUFACTURER: "nvidia",
                AWS_GPU_MEMORY: str(int(entry.gpu_memory_gib * 1024)),
            }
        )
        gpu_name = _AWS_GPU_NAMES.get(_family(entry.gpu))
        if gpu_name:
            props[AWS_GPU_NAME] = gpu_name
    return props


def _requirements_admit(reqs: Sequence[Mapping[str, Any]], props: Mapping[str, str]) -> bool:
    """Do the requirements on the keys in ``props`` admit their values? (Other keys are Karpenter's
    to resolve; a claim it cannot launch is deleted, and :meth:`KarpenterProvisioner.events` says so.)"""
    for r in reqs:
        key, op = r.get("key"), r.get("operator")
        if key not in props:
            continue
        value = props[str(key)]
        values = [str(v) for v in r.get("values") or []]
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and value in values:
            return False
        if op == "DoesNotExist":
            return False
        if op in ("Gt", "Lt", "Gte", "Lte") and values:
            try:
                x, bound = float(value), float(values[0])
            except ValueError:
                continue
            ok = {"Gt": x > bound, "Lt": x < bound, "Gte": x >= bound, "Lte": x <= bound}[str(op)]
            if not ok:
                return False
    return True


def _single(reqs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    for r in reqs:
        if r.get("key") == key and r.get("operator") == "In" and len(r.get("values") or []) == 1:
            try:
                return float(r["values"][0])
            except ValueError:
                return None
    return None


def _room(offer: NodePoolOffer, usage: _Usage, gpus: int, vcpus: float, memory_mib: float) -> int | None:
    """How many more nodes of this shape the NodePool's limits allow; None: no limits."""
    limits = offer["limits"]
    rooms: list[int] = []
    for limit, used, per_node in (
        (limits["gpus"], usage.gpus, gpus),
        (limits["cpu_milli"], usage.cpu_milli, math.ceil(vcpus * 1000)),
        (limits["memory_mib"], usage.memory_mib, math.ceil(memory_mib)),
        (limits["nodes"], usage.nodes, 1),
    ):
        if limit is None:
            continue
        rooms.append(max(0, limit - used) // per_node if per_node > 0 else max(0, limit - used))
    return min(rooms) if rooms else None


__all__ = ["INSTANCE_SHAPES", "InstanceShape", "KarpenterProvisioner", "allocatable", "instance_labels"]
