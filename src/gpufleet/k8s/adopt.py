"""Adoption: workloads people create on the cluster themselves join gpufleet's queue.

Any pod with ``schedulerName: gpufleet`` that gpufleet did not create (no ``gpufleet.io/job-id``)
becomes part of a gpufleet job — one job per owner (Job, JobSet, PyTorchJob, RayCluster…; a group
of pods is a gang, placed all or nothing) — once all the owner's pods exist. The job is stored like
an API submission, in the team the namespace maps to (or the pod's ``team`` label), with the pods'
requests, their ``team``/``project``/``experiment-id``/``cost-center`` labels for attribution, the
PriorityClass as its priority (``gpufleet-<class>``, else ``normal``) and the pod annotation
``gpufleet.io/cost-limit`` as its own budget, and the pods' ``nodeSelector``, required node affinity
and tolerations as the job's :class:`~gpufleet.model.constraints.NodeConstraints` (Kueue's flavors
inject them, GKE's pods select ``cloud.google.com/gke-accelerator``, GPU nodes are tainted): it is
placed only where the kubelet will admit its pods. The pods are then labelled with the job id; the
Kubernetes backend binds them (instead of creating a Job) when the scheduler places the job.

**Time-sliced and MPS GPUs.** A pod that asks ``nvidia.com/gpu.shared`` (the device plugin's
``renameByDefault``), or whose ``nodeSelector`` picks shared GPUs (``nvidia.com/gpu.replicas`` or
``nvidia.com/gpu.sharing-strategy``, GPU Feature Discovery's labels), asks for replicas: ``k`` of a
GPU shared ``R`` ways is a ``k/R`` fraction (``R`` from the selector, else the smallest among the
nodes it selects: the larger share, which fits on any of them), placed as that fraction and metered
as ``k`` of the replicas of the node it lands on (the job's label ``gpufleet.io/requested-gpu-replicas``
keeps ``k``). Any other ``nvidia.com/gpu: k`` is ``k``
whole GPUs: gpufleet holds and charges whole GPUs for it; on a time-sliced node the device plugin
would give it only ``k`` replicas, so such pods should select unshared nodes.

Idempotent: the owner's uid is the submission's idempotency key, so an owner is adopted once, and
a replacement pod its own controller makes later is labelled with the same job. A pod gpufleet
cannot read, or a namespace that maps to no team, is logged and left alone (never a crash).

The job is submitted through the API's own path (:func:`gpufleet.services.jobs.adopt`): a project
another team owns, or a ``block`` budget that refuses it, leaves the owner's pods waiting unadopted
(logged; tried again at the next pass, so they are adopted once the budget lets them in). Where the
API's rule is about telling a caller, adoption keeps its own: a workload no node could ever hold is
adopted (its queue entry says why it waits), its pods' priority class is taken as it is (the webhook
judges the grant at the door), and it runs as its pods say (no ``run_as``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.cost.rules import PricingRules
from gpufleet.errors import GpufleetError
from gpufleet.k8s.adapter.informer import Informer, wait_filled
from gpufleet.k8s.adapter.pods import Gang, PodFacts, group_gangs, pod_facts
from gpufleet.k8s.vocabulary import (
    KEY_JOB_ID,
    LABEL_ADOPTED_OWNER,
    LABEL_GPU_REPLICAS,
    LABEL_REQUESTED_REPLICAS,
    LABEL_SHARING_STRATEGY,
    PRIORITY_CLASS_PREFIX,
    SCHEDULER_NAME,
    SHARED_GPU_RESOURCE,
)
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest
from gpufleet.model.submission import Submission, submission
from gpufleet.services import jobs as jobs_service
from gpufleet.store import repo
from gpufleet.store.db import Database

log = logging.getLogger(__name__)

ADOPTED_KEY_PREFIX = "k8s-owner:"


@dataclass
class AdoptStats:
    adopted: int = 0  # jobs created
    labelled: int = 0  # pods labelled with their job
    skipped: int = 0  # pods or owners left alone (unreadable, no team, incomplete gang)


def _adoptable(obj: dict[str, Any]) -> PodFacts | None:
    """A pod waiting for gpufleet that it did not make and has not adopted yet; None for the rest."""
    meta = obj.get("metadata", {})
    if (meta.get("annotations") or {}).get(KEY_JOB_ID) or (meta.get("labels") or {}).get(KEY_JOB_ID):
        return None  # gpufleet's own, or already adopted
    if meta.get("deletionTimestamp") or (obj.get("spec") or {}).get("nodeName"):
        return None
    try:
        facts = pod_facts(obj)
    except GpufleetError as e:
        log.warning("not adopting a pod gpufleet cannot read: %s", e)
        return None
    return facts if facts.phase == "Pending" else None


class PodAdopter:
    def __init__(
        self,
        db: Database,
        api_client: Any,
        *,
        team_of_namespace: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.time,
        rules: PricingRules | None = None,
    ) -> None:
        from kubernetes import client

        self.db = db
        self.rules = rules  # the server's pricing rules: a block budget refuses on the figure the bill shows
        self.core: Any = client.CoreV1Api(api_client)
        self.team_of_namespace = dict(team_of_namespace or {})
        self.now = now
        self.sync_timeout_s = 30.0
        # pods with schedulerName gpufleet, narrowed to those still waiting for adoption: listed
        # once, then watched (a pod leaves the cache once adopted, bound or deleted)
        self.cache: Informer[PodFacts] = Informer(
            "pods asking for gpufleet",
            self.core.list_pod_for_all_namespaces,
            _adoptable,
            field_selector=f"spec.schedulerName={SCHEDULER_NAME}",
        )

    def _waiting_pods(self) -> list[PodFacts]:
        """The pods waiting to be adopted, from the informer's cache (listed once, then watched)."""
        wait_filled([self.cache], self.sync_timeout_s, "reading the pods that ask for gpufleet")
        return self.cache.items()

    def close(self) -> None:
        self.cache.stop()

    def adopt(self) -> AdoptStats:
        """One pass: adopt the complete gangs waiting for gpufleet (see the module docstring)."""
        stats = AdoptStats()
        try:
            pods = self._waiting_pods()
        except Exception as e:  # the API server is unreachable: try again next time
            log.warning("adoption: listing pods failed: %s", e)
            return stats
        try:
            gangs = group_gangs(pods)
        except GpufleetError as e:
            log.warning("adoption: %s", e)
            return stats
        for gang in gangs.values():
            try:
                self._adopt(gang, stats)
            except Exception as e:  # one owner's trouble never stops the rest
                log.warning("adoption of %s failed: %s", gang.key, e)
                stats.skipped += 1
        return stats

    def _team(self, gang: Gang) -> str | None:
        first = gang.pods[0]
        return first.team or self.team_of_namespace.get(gang.namespace) or gang.namespace

    def _submission(self, gang: Gang) -> Submission:
        first = gang.pods[0]
        pc = (first.priority_class or "").removeprefix(PRIORITY_CLASS_PREFIX)
        labels = {
            k: v
            for k, v in {
                LABEL_ADOPTED_OWNER: gang.key,
                "cost-center": first.cost_center,
                # the MLflow run the workload logs to: its cost is logged there when it ends (docs/mlflow.md)
                "mlflow-run-id": first.labels.get("mlflow-run-id", ""),
            }.items()
            if v
        }
        gpu = GpuRequest()
        if first.mig_profile is not None:
            gpu = GpuRequest(1, mig_profile=first.mig_profile)
        elif first.gpu_count:
            replicas = self._replicas(first)
            if replicas is None:
                gpu = GpuRequest(first.gpu_count)
            else:
                gpu = first.gpu_request(replicas)
                # metered as k of the replicas of the node it lands on (gpufleet.model.share.landed_units)
                labels[LABEL_REQUESTED_REPLICAS] = str(first.gpu_count)
        return submission(
            f"{gang.owner.kind.lower()}-{gang.owner.name}"[:120],
            [f"(pods of {gang.key})"],
            project=first.project,
            experiment=first.experiment,
            namespace=gang.namespace,
            labels=labels,
            priority_class=pc if pc in PRIORITY_CLASSES else "normal",
            gpu=gpu,
            cpu_milli=first.cpu_milli,
            memory_mib=first.memory_mib,
            budget_usd=first.cost_limit_usd,
            pods=gang.size,
            constraints=first.constraints,  # placed only where its pods' selector, affinity and tolerations allow
        )

    def _replicas(self, pod: PodFacts) -> int | None:
        """How many ways the GPUs this pod asks for are shared (see the module docstring); None for
        whole GPUs. :class:`GpufleetError` when it asks for shared GPUs no node offers yet."""
        selector = pod.node_selector
        wants_shared = pod.gpu_resource == SHARED_GPU_RESOURCE or bool(
            {LABEL_GPU_REPLICAS, LABEL_SHARING_STRATEGY} & selector.keys()
        )
        if not wants_shared:
            return None
        declared = selector.get(LABEL_GPU_REPLICAS, "")
        if declared.isdigit() and int(declared) >= 2:
            return int(declared)
        resp = self.core.list_node(_preload_content=False)
        offered = []
        for node in json.loads(resp.data).get("items", []):
            labels = (node.get("metadata") or {}).get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            value = str(labels.get(LABEL_GPU_REPLICAS, ""))
            if value.isdigit() and int(value) >= 2:
                offered.append(int(value))
        if not offered:
            raise GpufleetError(f"pod {pod.key} asks for shared GPUs, and no node offers them yet")
        return min(offered)

    def _adopt(self, gang: Gang, stats: AdoptStats) -> None:
        if not gang.complete:
            stats.skipped += 1
            return
        team = self._team(gang)
        key = ADOPTED_KEY_PREFIX + (gang.owner.uid or gang.key)
        now = self.now()
        with self.db.session() as s:
            if team is None or repo.find_team(s, team) is None:
                log.warning(
                    "not adopting %s: namespace %s maps to no team (set kubernetes.namespaces)",
                    gang.key,
                    gang.namespace,
                )
                stats.skipped += 1
                return
            row, created = jobs_service.adopt(
                s, self._submission(gang), team=team, idempotency_key=key, now=now, rules=self.rules
            )
            job_id = row.id
        if created:
            stats.adopted += 1
            log.info("adopted %s (%d pods) as job %s of team %s", gang.key, len(gang.pods), job_id, team)
        for pod in gang.pods:
            patch = {"metadata": {"labels": {KEY_JOB_ID: job_id}, "annotations": {KEY_JOB_ID: job_id}}}
            self.core.patch_namespaced_pod(pod.name, pod.namespace, patch, _preload_content=False)
            stats.labelled += 1
