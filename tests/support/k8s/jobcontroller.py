"""A ``batch/v1`` Job controller stand-in for the test substrate, talking HTTP to it like the real
one talks to its API server (through the official client, in a thread).

What it does, as kube-controller-manager's Job controller does for the cases gpufleet uses:

- for each Job, one pod per completion index ``0 … parallelism-1`` (``completionMode: Indexed``, or
  index 0 alone for a non-indexed Job of parallelism 1), from ``spec.template`` with the labels
  ``batch.kubernetes.io/job-name``, ``batch.kubernetes.io/controller-uid``,
  ``batch.kubernetes.io/job-completion-index`` (and the annotation of the same name), a controller
  ``ownerReference`` to the Job and a name ``<job>-<index>-<5 chars>``;
- a pod of an index that is gone, or failed with condition ``DisruptionTarget`` (eviction,
  preemption: ``podFailurePolicy`` ``Ignore``), is replaced while the Job exists and the index has
  not succeeded — so a backend that preempts must delete the Job, or the work starts again;
- ``status.succeeded`` / ``status.failed`` / ``status.completedIndexes`` and a ``Complete``
  condition; an index counted as succeeded is never started again, and a finished Job makes no
  pods, even when its pods are deleted afterwards (the real controller's job-tracking finalizers).

- with ``tracking_finalizers`` (as the real controller since Kubernetes 1.26), every pod it makes
  carries the ``batch.kubernetes.io/job-tracking`` finalizer: a finished or deleted pod stays (phase
  and all, ``deletionTimestamp`` set) until the controller has counted it and removed the finalizer;
  a pod whose Job is gone has its finalizer removed once it is terminal or was never bound.

``created`` counts the pods made per Job, for tests.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING = "batch.kubernetes.io/job-tracking"


class JobController:
    def __init__(
        self, api_client: kubernetes.client.ApiClient, interval_s: float = 0.05, *, tracking_finalizers: bool = False
    ) -> None:
        self.tracking_finalizers = tracking_finalizers
        self.core: Any = kubernetes.client.CoreV1Api(api_client)
        self.batch: Any = kubernetes.client.BatchV1Api(api_client)
        self.interval_s = interval_s
        self.created: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-controller", daemon=True)

    def start(self) -> JobController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = call(*args, _preload_content=False, **kwargs)
        return dict(json.loads(resp.data))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # recorded for the test to fail on
                self.errors.append(e)
            self._stop.wait(self.interval_s)

    def sync(self) -> None:
        jobs = self._json(self.batch.list_job_for_all_namespaces).get("items", [])
        pods = self._json(self.core.list_pod_for_all_namespaces, label_selector="batch.kubernetes.io/controller-uid")
        by_uid: dict[str, list[dict[str, Any]]] = {}
        for p in pods.get("items", []):
            uid = p["metadata"].get("labels", {}).get("batch.kubernetes.io/controller-uid", "")
            by_uid.setdefault(uid, []).append(p)
        for job in jobs:
            self._sync_job(job, by_uid.get(job["metadata"]["uid"], []))
        if self.tracking_finalizers:
            live_jobs = {j["metadata"]["uid"] for j in jobs if not j["metadata"].get("deletionTimestamp")}
            for uid, owned in by_uid.items():
                for p in owned:
                    if self._countable(p, orphan=uid not in live_jobs):
                        self._release(p)

    @staticmethod
    def _countable(pod: dict[str, Any], *, orphan: bool) -> bool:
        """Counted, so its tracking finalizer may go: terminal, or deleted before it ever ran."""
        if TRACKING not in (pod["metadata"].get("finalizers") or []):
            return False
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return True
        unbound = not (pod.get("spec") or {}).get("nodeName")
        return unbound and (orphan or bool(pod["metadata"].get("deletionTimestamp")))

    def _release(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != TRACKING]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}}
        try:
            self.core.patch_namespaced_pod(meta["name"], meta["namespace"], patch, _preload_content=False)
        except ApiException as e:
            if e.status not in (404, 409):  # gone, or changed since the list: the next sync retries
                raise

    def _sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = job["metadata"], job.get("spec", {})
        if meta.get("deletionTimestamp"):
            return
        n = int(spec.get("parallelism", 1) or 1)
        status = job.get("status") or {}
        if any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            return  # finished: pods deleted afterwards (a drain, the garbage collector) are not replaced
        # indexes counted before their pods went away (the real controller's job-tracking finalizers)
        succeeded: set[int] = {int(i) for i in str(status.get("completedIndexes") or "").split(",") if i.isdigit()}
        failed = 0
        live: set[int] = set()
        for p in pods:
            idx = int(p["metadata"].get("annotations", {}).get(INDEX, "0"))
            phase = p.get("status", {}).get("phase", "Pending")
            disrupted = any(
                c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
            if phase == "Succeeded":
                succeeded.add(idx)
            elif phase == "Failed" and not disrupted:
                failed += 1
            elif not (phase == "Failed" or p["metadata"].get("deletionTimestamp")):
                live.add(idx)
        done = failed > int(spec.get("backoffLimit", 6) or 0) or len(succeeded) >= n
        if not done:
            for idx in range(n):
                if idx not in succeeded and idx not in live:
                    self._create_pod(job, idx)
        self._status(job, succeeded, failed, n)

    def _create_pod(self, job: dict[str, Any], idx: int) -> None:
        meta = job["metadata"]
        template = job["spec"]["template"]
        tmeta = dict(template.get("metadata", {}))
        labels = {
            **tmeta.get("labels", {}),
            "batch.kubernetes.io/job-name": meta["name"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
            INDEX: str(idx),
        }
        annotations = {**tmeta.get("annotations", {}), INDEX: str(idx)}
        name = f"{meta['name']}-{idx}-{secrets.token_hex(3)[:5]}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                **({"finalizers": [TRACKING]} if self.tracking_finalizers else {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        try:
            self.core.create_namespaced_pod(meta["namespace"], body, _preload_content=False)
            self.created[f"{meta['namespace']}/{meta['name']}"] += 1
        except ApiException as e:
            if e.status not in (404, 409):  # the namespace or Job went away, or a name collision
                raise

    def _status(self, job: dict[str, Any], done_indexes: set[int], failed: int, n: int) -> None:
        succeeded = len(done_indexes)
        status = dict(job.get("status", {}))
        indexes = ",".join(str(i) for i in sorted(done_indexes))
        if (status.get("succeeded", 0), status.get("failed", 0), status.get("completedIndexes") or "") == (
            succeeded,
            failed,
            indexes,
        ):
            return
        status["succeeded"], status["failed"] = succeeded, failed
        if indexes:
            status["completedIndexes"] = indexes
        if succeeded >= n:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": now}]
        meta = job["metadata"]
        try:
            self.batch.patch_namespaced_job_status(
                meta["name"], meta["namespace"], {"status": status}, _preload_content=False
            )
        except ApiException as e:
            if e.status != 404:
                raise
