"""A ``batch/v1`` Job controller stand-in for the test substrate, talking HTTP to it like the real
one talks to its API server (through the official client, in a thread).

It follows kube-controller-manager's Job controller (``pkg/controller/job``: ``job_controller.go``,
``tracking_utils.go``, ``pod_failure_policy.go``) for the cases gpufleet meets: one sync per Job and
poll instead of informers and work queues, the same decisions.

**Pods.** ``parallelism`` pods at a time, fewer once ``completions`` are near: an ``Indexed`` Job
makes the lowest indexes neither succeeded nor active (name ``<job>-<index>-<5 chars>``, hostname
``<job>-<index>``, the ``batch.kubernetes.io/job-completion-index`` annotation and label, env
``JOB_COMPLETION_INDEX``); a non-indexed Job makes anonymous pods (``<job>-<5 chars>``). Every pod
carries ``batch.kubernetes.io/job-name`` and ``batch.kubernetes.io/controller-uid``, a controller
``ownerReference`` to the Job and — with ``tracking_finalizers`` (the default, as the real
controller since Kubernetes 1.26) — the ``batch.kubernetes.io/job-tracking`` finalizer.

**Replacements** (``restartPolicy: Never``): a pod that failed or was deleted is replaced while the
Job runs. ``podReplacementPolicy`` ``TerminatingOrFailed`` (the default without a
``podFailurePolicy``) replaces a pod as soon as it is terminating; ``Failed`` (implied by a
``podFailurePolicy``) only once it has failed — a terminating pod still holds its place.

**Counting** (the job-tracking finalizers): a pod's finalizer is removed once the pod is counted:
succeeded, or failed — phase ``Failed``, or, under ``TerminatingOrFailed``, deleted before it
succeeded. Its uid goes to ``status.uncountedTerminatedPods`` first, then the finalizer is removed,
then ``status.succeeded``/``status.failed`` (and ``completedIndexes``) take it over. A failure is
counted unless the ``podFailurePolicy`` says ``Ignore`` (e.g. on ``DisruptionTarget``: an eviction,
a preemption); ``FailJob`` fails the Job; more counted failures than ``backoffLimit`` (default 6)
fail it too. Failed pods are kept (only their finalizer goes): nothing here deletes them.

**Ends.** A failing Job (``FailureTarget``, reason ``BackoffLimitExceeded`` or ``PodFailurePolicy``)
has its active pods deleted and becomes ``Failed`` once none is terminating and all are counted;
a succeeding one (``SuccessCriteriaMet``) becomes ``Complete`` the same way. A finished Job makes
no pods, even when its pods are deleted afterwards, and its pods lose their finalizers.

**Orphans and deleted Jobs.** A pod whose controller Job is gone (deleted, or its reference removed
by an ``Orphan`` deletion) or finished loses its finalizer whatever its phase
(``syncOrphanPod``); so does every pod of a Job being deleted (``canRemoveFinalizer``). A pod
controlled by something else is left alone.

**Deadline.** A Job whose ``activeDeadlineSeconds`` have passed since its ``startTime`` (its first
sync) fails as ``pastActiveDeadline`` makes it: ``FailureTarget`` (``DeadlineExceeded``), its active
pods deleted (their grace: SIGTERM first), then ``Failed`` once none is terminating.

Not modelled: ``suspend``, ``backoffLimitPerIndex``, ``successPolicy``,
``completions``-less work queues beyond "one success ends it", surplus-pod deletion, and the
exponential back-off before replacing a failed pod (``pod_failure_backoff_s``: the real 10 s,
doubled per failure, is 0 here unless a test asks for it).

``created`` counts the pods made per Job (``namespace/name``), for tests.
"""

from __future__ import annotations

import calendar
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
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"

Obj = dict[str, Any]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _past_active_deadline(spec: Obj, status: Obj) -> bool:
    """``pastActiveDeadline``: ``activeDeadlineSeconds`` have passed since the Job's ``startTime``
    (set at its first sync; a Job not started yet, or suspended, has no deadline running)."""
    deadline, start = spec.get("activeDeadlineSeconds"), status.get("startTime")
    if deadline is None or not start or spec.get("suspend"):
        return False
    started = calendar.timegm(time.strptime(str(start), "%Y-%m-%dT%H:%M:%SZ"))
    return time.time() - started >= int(deadline)


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _terminal(pod: Obj) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _tracked(pod: Obj) -> bool:
    return TRACKING in (pod["metadata"].get("finalizers") or [])


def _index(pod: Obj) -> int | None:
    value = str((pod["metadata"].get("annotations") or {}).get(INDEX, ""))
    return int(value) if value.isdigit() else None


def _condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _finished(job: Obj) -> bool:
    return _condition(job, "Complete") is not None or _condition(job, "Failed") is not None


def _controller_ref(pod: Obj) -> Obj | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _only_replace_failed(spec: Obj) -> bool:
    """``onlyReplaceFailedPods``: ``podReplacementPolicy: Failed``, which a ``podFailurePolicy`` implies."""
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def _is_failed(pod: Obj, spec: Obj) -> bool:
    """``isPodFailed``: failed, or (replacing terminating pods) deleted before it succeeded."""
    if _phase(pod) == "Failed":
        return True
    if _only_replace_failed(spec):
        return False
    return _deleting(pod) and _phase(pod) != "Succeeded"


def _match_failure_policy(policy: Obj, pod: Obj) -> tuple[str | None, str | None]:
    """``matchPodFailurePolicy``: the action of the first rule a failed pod matches (None: none
    matches, the failure counts) and, for ``FailJob``, the Job's failure message."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for i, rule in enumerate(policy.get("rules") or []):
        action = str(rule.get("action") or "")
        codes = rule.get("onExitCodes")
        if codes:
            values = {int(v) for v in codes.get("values") or []}
            for cs in statuses:
                if codes.get("containerName") and cs.get("name") != codes["containerName"]:
                    continue
                term = (cs.get("state") or {}).get("terminated")
                if term is None:
                    continue
                code = int(term.get("exitCode", 0))
                hit = code in values if codes.get("operator") == "In" else (code != 0 and code not in values)
                if hit:
                    meta = pod["metadata"]
                    return action, (
                        f"Container {cs.get('name')} for pod {meta['namespace']}/{meta['name']} failed with exit "
                        f"code {code} matching {action} rule at index {i}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c.get("type") == pattern.get("type") and c.get("status") == pattern.get("status", "True"):
                    meta = pod["metadata"]
                    return action, (
                        f"Pod {meta['namespace']}/{meta['name']} has condition {c['type']} matching {action} "
                        f"rule at index {i}"
                    )
    return None, None


def _counts(spec: Obj, pod: Obj) -> bool:
    """Whether a failed pod counts against ``backoffLimit`` (``Ignore`` does not)."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return True
    action, _ = _match_failure_policy(policy, pod)
    return action != "Ignore"


def _parse_indexes(text: str) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.update(range(int(lo), int(hi if hi.isdigit() else lo) + 1))
    return out


def _format_indexes(indexes: set[int]) -> str:
    runs: list[str] = []
    for i in sorted(indexes):
        if runs and runs[-1].split("-")[-1] == str(i - 1):
            runs[-1] = f"{runs[-1].split('-')[0]}-{i}"
        else:
            runs.append(str(i))
    return ",".join(runs)


class JobController:
    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        interval_s: float = 0.05,
        *,
        tracking_finalizers: bool = True,
        pod_failure_backoff_s: float = 0.0,
    ) -> None:
        self.tracking_finalizers = tracking_finalizers
        self.pod_failure_backoff_s = pod_failure_backoff_s
        self.core: Any = kubernetes.client.CoreV1Api(api_client)
        self.batch: Any = kubernetes.client.BatchV1Api(api_client)
        self.interval_s = interval_s
        self.created: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        self._failures: dict[str, tuple[int, float]] = {}  # job uid -> (failures, last) for the back-off
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-controller", daemon=True)

    def start(self) -> JobController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> Obj:
        resp = call(*args, _preload_content=False, **kwargs)
        return dict(json.loads(resp.data))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except ApiException as e:
                if e.status is None or not (e.status == 429 or e.status >= 500):
                    self.errors.append(e)  # a 4xx is a bug here or in the substrate; a 5xx/429 is retried
            except Exception as e:  # recorded for the test to fail on
                self.errors.append(e)
            self._stop.wait(self.interval_s)

    def sync(self) -> None:
        # pods first, then Jobs: what is known of a Job is never older than what is known of its
        # pods (the other way round, a pod seen failed just after its Job was read, not yet deleted,
        # would get a replacement for a Job already being deleted)
        pods = self._json(self.core.list_pod_for_all_namespaces, label_selector=CONTROLLER_UID).get("items", [])
        jobs = self._json(self.batch.list_job_for_all_namespaces).get("items", [])
        by_uid = {j["metadata"]["uid"]: j for j in jobs}
        owned: dict[str, list[Obj]] = {}
        for p in pods:
            ref = _controller_ref(p)
            if ref is not None and (ref.get("kind") != "Job" or ref.get("apiVersion") != "batch/v1"):
                continue  # controlled by something else: not ours to touch
            job = by_uid.get(str(ref.get("uid"))) if ref is not None else None
            if job is None or _finished(job):
                self._release(p)  # an orphan: syncOrphanPod, whatever its phase
            else:
                owned.setdefault(job["metadata"]["uid"], []).append(p)
        for job in jobs:
            if not _finished(job):
                self._sync_job(job, owned.get(job["metadata"]["uid"], []))

    def _release(self, pod: Obj) -> bool:
        """Remove the tracking finalizer; False if the pod changed since it was read (next sync)."""
        if not _tracked(pod):
            return True
        meta = pod["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != TRACKING]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}}
        try:
            self.core.patch_namespaced_pod(meta["name"], meta["namespace"], patch, _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return True  # gone: as good as removed
            if e.status == 409:
                return False  # changed since the list: the next sync tries again
            raise
        return True

    def _sync_job(self, job: Obj, pods: list[Obj]) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status: Obj = json.loads(json.dumps(job.get("status") or {}))
        old_status = json.loads(json.dumps(status))
        uid = meta["uid"]
        indexed = spec.get("completionMode") == "Indexed"
        parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
        completions = spec.get("completions")
        if completions is None and spec.get("parallelism") is None:
            completions = 1  # the API server's default when both are unset
        backoff_limit = int(spec.get("backoffLimit", 6) if spec.get("backoffLimit") is not None else 6)
        uncounted = status.get("uncountedTerminatedPods") or {}
        unc_succeeded: list[str] = list(uncounted.get("succeeded") or [])
        unc_failed: list[str] = list(uncounted.get("failed") or [])

        def valid(p: Obj) -> bool:
            ix = _index(p)
            return not indexed or (ix is not None and completions is not None and ix < int(completions))

        tracked = [p for p in pods if valid(p) and (_tracked(p) or not self.tracking_finalizers)]
        active = [p for p in pods if not _terminal(p) and not _deleting(p)]
        terminating = [p for p in pods if _deleting(p) and not _terminal(p)]
        new_failed = [p for p in tracked if p["metadata"]["uid"] not in unc_failed and _is_failed(p, spec)]
        if self.tracking_finalizers:
            failed = int(status.get("failed", 0)) + sum(_counts(spec, p) for p in new_failed) + len(unc_failed)
        else:  # before job tracking (< 1.26): counted from the pods that linger
            failed = sum(_counts(spec, p) for p in new_failed)
        done_indexes: set[int] = set()
        if indexed:
            done_indexes = _parse_indexes(str(status.get("completedIndexes") or ""))
            done_indexes |= {ix for p in tracked if _phase(p) == "Succeeded" and (ix := _index(p)) is not None}
            succeeded = len(done_indexes)
        elif self.tracking_finalizers:
            new_ok = [p for p in tracked if _phase(p) == "Succeeded" and p["metadata"]["uid"] not in unc_succeeded]
            succeeded = int(status.get("succeeded", 0)) + len(new_ok) + len(unc_succeeded)
        else:
            succeeded = sum(_phase(p) == "Succeeded" for p in pods)
        if new_failed and self.tracking_finalizers:
            n, _ = self._failures.get(uid, (0, 0.0))
            self._failures[uid] = (n + len(new_failed), time.monotonic())

        # the end, if reached (a FailureTarget/SuccessCriteriaMet written before counts)
        finishing: Obj | None = _condition(job, "FailureTarget") or _condition(job, "SuccessCriteriaMet")
        if finishing is None and spec.get("podFailurePolicy") is not None:
            for p in pods:
                if _is_failed(p, spec):
                    action, message = _match_failure_policy(spec["podFailurePolicy"], p)
                    if action == "FailJob":
                        finishing = {"type": "FailureTarget", "reason": "PodFailurePolicy", "message": message}
                        break
        if finishing is None and failed > backoff_limit:
            finishing = {
                "type": "FailureTarget",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        if finishing is None and _past_active_deadline(spec, status):
            finishing = {
                "type": "FailureTarget",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
            }
        failing = finishing is not None and finishing["type"] == "FailureTarget"

        if failing:  # deleteActivePods: its finalizer stays until it is counted
            for p in active:
                self._delete(p)
            terminating += active
            active = []
        made = 0
        if finishing is None and not failing and not _deleting(job):
            made = self._manage(job, spec, indexed, parallelism, completions, succeeded, active, terminating, pods)
        if finishing is None:
            now_active = len(active)
            if completions is None:
                complete = succeeded > 0 and now_active == 0
            else:
                complete = succeeded >= int(completions) and now_active == 0
            if complete:
                finishing = {"type": "SuccessCriteriaMet", "reason": "", "message": ""}

        # trackJobStatusAndRemoveFinalizers: count, flush, remove finalizers, move the counts
        release: list[Obj] = []
        for p in tracked:
            if not self.tracking_finalizers:
                break
            puid = p["metadata"]["uid"]
            considered_failed = _is_failed(p, spec)
            if not (_deleting(job) or finishing is not None or _phase(p) == "Succeeded" or considered_failed):
                continue
            release.append(p)
            if _phase(p) == "Succeeded" and puid not in unc_failed:
                if not indexed and puid not in unc_succeeded:
                    unc_succeeded.append(puid)
            elif puid not in unc_failed and (_counts(spec, p) if considered_failed else failing):
                unc_failed.append(puid)  # a failing Job counts every pod not yet ended; Ignore counts none
        conditions: list[Obj] = list(status.get("conditions") or [])
        if finishing is not None and not any(c.get("type") == finishing["type"] for c in conditions):
            conditions.append({**finishing, "status": "True", "lastTransitionTime": _now(), "lastProbeTime": _now()})
        status["conditions"] = conditions or None
        if indexed:
            status["completedIndexes"] = _format_indexes(done_indexes) or None
            status["succeeded"] = len(done_indexes)
        status["uncountedTerminatedPods"] = {"succeeded": unc_succeeded or None, "failed": unc_failed or None}
        status["active"] = len(active) + made  # as manageJob counts them: active from their creation
        status["terminating"] = len(terminating)
        status.setdefault("startTime", _now())
        if not self.tracking_finalizers:
            status["succeeded"], status["failed"] = succeeded, failed
            status["uncountedTerminatedPods"] = None
        self._write_status(job, status, old_status)  # the uids first: a crash here recounts nothing
        removed = {p["metadata"]["uid"] for p in release if self._release(p)}
        gone = {p["metadata"]["uid"] for p in pods if not _tracked(p)} | removed
        known = {p["metadata"]["uid"] for p in pods}
        moved_ok = [u for u in unc_succeeded if u in gone or u not in known]
        moved_failed = [u for u in unc_failed if u in gone or u not in known]
        if self.tracking_finalizers and (moved_ok or moved_failed):
            status["succeeded"] = int(status.get("succeeded", 0)) + (0 if indexed else len(moved_ok))
            status["failed"] = int(status.get("failed", 0)) + len(moved_failed)
            unc_succeeded = [u for u in unc_succeeded if u not in moved_ok]
            unc_failed = [u for u in unc_failed if u not in moved_failed]
            status["uncountedTerminatedPods"] = {"succeeded": unc_succeeded or None, "failed": unc_failed or None}
        # enactJobFinished: the final condition once all are counted and none is terminating
        if finishing is not None and not unc_succeeded and not unc_failed and not terminating:
            final = "Failed" if failing else "Complete"
            if not any(c.get("type") == final for c in conditions):
                reason, message = finishing.get("reason", ""), finishing.get("message", "")
                at = _now()
                conditions.append(
                    {"type": final, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}
                )
                status["conditions"] = conditions
                if final == "Complete":
                    status["completionTime"] = _now()
        self._write_status(job, status, old_status)

    def _manage(
        self,
        job: Obj,
        spec: Obj,
        indexed: bool,
        parallelism: int,
        completions: Any,
        succeeded: int,
        active: list[Obj],
        terminating: list[Obj],
        pods: list[Obj],
    ) -> int:
        """``manageJob``: make the pods missing (surplus pods are not deleted here); how many it made."""
        if completions is None:
            want = len(active) if succeeded > 0 else parallelism
        else:
            want = max(0, min(int(completions) - succeeded, parallelism))
        held = len(terminating) if _only_replace_failed(spec) else 0
        diff = want - held - len(active)
        if diff <= 0:
            return 0
        n, last = self._failures.get(job["metadata"]["uid"], (0, 0.0))
        if n and time.monotonic() - last < self.pod_failure_backoff_s * 2 ** (n - 1):
            return 0  # the back-off after a failed pod
        if not indexed:
            return sum(self._create_pod(job, None) for _ in range(diff))
        succeeded_ix = _parse_indexes(str((job.get("status") or {}).get("completedIndexes") or ""))
        succeeded_ix |= {ix for p in pods if _phase(p) == "Succeeded" and (ix := _index(p)) is not None}
        busy = succeeded_ix | {ix for p in active if (ix := _index(p)) is not None}
        pending = [ix for ix in range(int(completions)) if ix not in busy][:diff]
        return sum(self._create_pod(job, ix) for ix in pending)

    def _delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    def _create_pod(self, job: Obj, idx: int | None) -> bool:
        meta = job["metadata"]
        template = job["spec"]["template"]
        tmeta = dict(template.get("metadata") or {})
        labels = {**(tmeta.get("labels") or {}), JOB_NAME: meta["name"], CONTROLLER_UID: meta["uid"]}
        annotations = dict(tmeta.get("annotations") or {})
        pod_spec = json.loads(json.dumps(template["spec"]))
        if idx is None:
            name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
        else:
            labels[INDEX] = annotations[INDEX] = str(idx)
            name = f"{meta['name']}-{idx}-{secrets.token_hex(3)[:5]}"
            pod_spec["hostname"] = f"{meta['name']}-{idx}"
            for c in pod_spec.get("containers") or []:
                env = [e for e in c.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"]
                ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}
                c["env"] = [*env, {"name": "JOB_COMPLETION_INDEX", "valueFrom": ref}]
        finalizers = list(tmeta.get("finalizers") or [])
        if self.tracking_finalizers and TRACKING not in finalizers:
            finalizers.append(TRACKING)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                **({"finalizers": finalizers} if finalizers else {}),
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
            "spec": pod_spec,
        }
        try:
            self.core.create_namespaced_pod(meta["namespace"], body, _preload_content=False)
            self.created[f"{meta['namespace']}/{meta['name']}"] += 1
        except ApiException as e:
            if e.status not in (404, 409):  # the namespace or Job went away, or a name collision
                raise
            return False
        return True

    def _write_status(self, job: Obj, status: Obj, old: Obj) -> None:
        """Write ``status`` when it differs from what was read (``None`` values remove a field; an
        empty ``uncountedTerminatedPods`` is as good as none, so a steady Job costs no write)."""
        current = _clean(status)
        if current == _clean(old):
            return
        if "uncountedTerminatedPods" not in current:
            status["uncountedTerminatedPods"] = None
        meta = job["metadata"]
        try:
            self.batch.patch_namespaced_job_status(
                meta["name"], meta["namespace"], {"status": status}, _preload_content=False
            )
        except ApiException as e:
            if e.status != 404:
                raise
        old.clear()
        old.update(json.loads(json.dumps(current)))


def _clean(status: Obj) -> Obj:
    out = {k: v for k, v in status.items() if v is not None}
    uncounted = {k: v for k, v in (out.pop("uncountedTerminatedPods", None) or {}).items() if v}
    if uncounted:
        out["uncountedTerminatedPods"] = uncounted
    return out
