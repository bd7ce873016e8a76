"""A job's output on Kubernetes: its pods' logs (``pods/log``), for ``GET /v1/jobs/{id}/logs`` and
``gpufleet logs [-f]``.

A job's log is the log of its first pod of each run (index 0 of a gang; ``kubectl logs`` shows the
others), runs in order, each under a header line ``==> run N: pod <namespace>/<name> <==``. Only
pods that still exist have logs: a preempted run's pod is deleted by its eviction, and a finished
Job's pods go when the Job is deleted, so older runs' output lives only in the cluster's log
collection (Loki, CloudWatch, …). A pod whose container has not started yet has no log yet.

:meth:`PodLogs.follow` streams with ``follow=true``: the current run's pod until its container ends,
then the next run's pod when one appears, until the job has ended. A quiet stream is re-opened
after ``read_timeout_s`` (skipping what was already sent) so a follower that went away is noticed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import BackendError, GpufleetError
from gpufleet.k8s.adapter.api import call_json, let_go
from gpufleet.k8s.adapter.pods import pod_facts
from gpufleet.k8s.vocabulary import KEY_JOB_ID

log = logging.getLogger(__name__)

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class LogPod:
    """The pod whose log stands for one run of a job."""

    namespace: str
    name: str
    uid: str
    container: str
    run: int

    @property
    def header(self) -> bytes:
        return f"==> run {self.run}: pod {self.namespace}/{self.name} <==\n".encode()


def log_pods(items: list[dict[str, Any]]) -> list[LogPod]:
    """The first pod of each run among a job's pod objects, runs in order (pure)."""
    best: dict[int, tuple[tuple[int, float, str], LogPod]] = {}
    for obj in items:
        try:
            facts = pod_facts(obj)
        except GpufleetError as e:
            log.warning("no log for a pod gpufleet cannot read: %s", e)
            continue
        containers = (obj.get("spec") or {}).get("containers") or []
        if not containers:
            continue
        run = facts.run or 0
        pod = LogPod(facts.namespace, facts.name, facts.uid, str(containers[0].get("name") or ""), run)
        rank = (facts.completion_index or 0, facts.created_at or 0.0, facts.name)
        if run not in best or rank < best[run][0]:
            best[run] = (rank, pod)
    return [best[run][1] for run in sorted(best)]


class PodLogs:
    """Reads a job's log from its pods through the official client (see the module docstring)."""

    def __init__(self, api_client: Any, *, poll_s: float = 1.0, read_timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.poll_s = poll_s
        self.read_timeout_s = read_timeout_s

    def pods(self, job_id: str) -> list[LogPod]:
        items = call_json(
            f"listing the pods of job {job_id}",
            self.core.list_pod_for_all_namespaces,
            label_selector=f"{KEY_JOB_ID}={job_id}",
        ).get("items", [])
        return log_pods(list(items))

    def _text(self, pod: LogPod) -> bytes | None:
        """The pod's log now; None when it has none (not started, or gone)."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp: Any = self.core.read_namespaced_pod_log(
                pod.name, pod.namespace, container=pod.container, _preload_content=False,
                _request_timeout=(5, self.read_timeout_s),
            )  # fmt: skip
            return bytes(resp.data)
        except ApiException as e:
            if e.status in (400, 404):  # waiting to start, or deleted meanwhile
                return None
            raise BackendError(f"reading the log of pod {pod.namespace}/{pod.name}: {e.status} {e.reason}") from None
        except Exception as e:
            raise BackendError(f"reading the log of pod {pod.namespace}/{pod.name}: {e}") from None

    def read(self, job_id: str) -> bytes:
        """The job's log as it is now: each run's pod that has a log, under its header."""
        out = bytearray()
        for pod in self.pods(job_id):
            text = self._text(pod)
            if text is not None:
                out += pod.header + text
        return bytes(out)

    def follow(
        self, job_id: str, offset: int, running: Callable[[], bool], cancelled: threading.Event
    ) -> Iterator[bytes]:
        """The job's log from byte ``offset`` of :meth:`read`'s view, streamed as the pods write it,
        until the job has ended (``running()`` is False and every pod's stream is drained) or
        ``cancelled`` is set (checked at least every ``read_timeout_s``)."""
        position = 0  # bytes of the view passed (sent or skipped)
        done: set[str] = set()
        while not cancelled.is_set():
            ended = not running()  # judged before the last look at the pods: nothing written is missed
            pending = [p for p in self.pods(job_id) if p.uid not in done]
            progressed = False
            for pod in pending:
                streamed = yield from self._stream(pod, offset, position, cancelled)
                if streamed is None:  # not started yet: later pods wait for it
                    break
                position = streamed
                done.add(pod.uid)
                progressed = True
            if ended and not progressed:
                return
            if not progressed:
                cancelled.wait(self.poll_s)

    def _stream(
        self, pod: LogPod, offset: int, position: int, cancelled: threading.Event
    ) -> Generator[bytes, None, int | None]:
        """Stream one pod's log (its header first); the view's position after it, or None when the
        pod has no log yet. A stream that times out is re-opened, skipping what was already passed."""
        from kubernetes.client.exceptions import ApiException

        consumed = 0  # bytes of this pod's log passed
        header_done = False
        while not cancelled.is_set():
            try:
                resp: Any = self.core.read_namespaced_pod_log(
                    pod.name, pod.namespace, container=pod.container, follow=True, _preload_content=False,
                    _request_timeout=(5, self.read_timeout_s),
                )  # fmt: skip
            except ApiException as e:
                if e.status in (400, 404):
                    return None if not header_done else position
                what = f"following the log of pod {pod.namespace}/{pod.name}"
                raise BackendError(f"{what}: {e.status} {e.reason}") from None
            if not header_done:
                position = yield from _emit(pod.header, offset, position)
                header_done = True
            skip = consumed
            ended = False
            try:
                for chunk in resp.stream(CHUNK):
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                    if not chunk:
                        continue
                    consumed += len(chunk)
                    position = yield from _emit(chunk, offset, position)
                    if cancelled.is_set():
                        break
                else:
                    ended = True
                    return position  # the container ended (or the pod went away): drained
            except Exception as e:  # a read timeout on a quiet log, or a broken connection: re-open
                log.debug("re-opening the log of pod %s/%s: %s", pod.namespace, pod.name, e)
                time.sleep(0.05)
            finally:
                let_go(resp, read_to_end=ended)
        return position


def _emit(data: bytes, offset: int, position: int) -> Generator[bytes, None, int]:
    """Yield the part of ``data`` (at ``position`` of the view) from ``offset`` on; the new position."""
    end = position + len(data)
    if end > offset:
        yield data[max(0, offset - position) :]
    return end
