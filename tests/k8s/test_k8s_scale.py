"""Issue 11's acceptance run, as far as the Kubernetes substrate allows (``tests/k8s``: kmock 0.8
with a real API server's behaviours, a Job controller stand-in, a kubelet stand-in).

The server's world in-process: the :class:`~gpufleet.control.controller.Controller` on its own
thread with the SQLite store, the :class:`~gpufleet.k8s.adapter.backend.KubernetesBackend`
and the :class:`~gpufleet.k8s.adopt.PodAdopter` as the leader's periodic duty (what
``gpufleet up --backend kubernetes`` assembles), on a cluster of ten GPU nodes: four on-demand and
three spot A100 nodes, two L4 nodes time-sliced four ways, one A100 node in MIG mode. 200 jobs:

- API submissions (the API's own path: :func:`~gpufleet.services.submit.prepare_submit` and
  :func:`gpufleet.services.jobs.submit`) of four teams with quotas (three in a cohort, borrowing with
  and without a limit; one with a hard cap), three priorities (low, normal, high), whole GPUs, gangs
  of 2–3 pods, fractions of time-sliced GPUs, MIG slices, preemptible checkpointing jobs, jobs that
  exit non-zero;
- batch/v1 Jobs created on the cluster directly (``schedulerName: gpufleet``,
  ``gpufleet.io/gang-size``), adopted;
- high-priority whole-node jobs that preempt low-priority preemptible ones;
- a spot storm on 30 % of the nodes mid-run, played as Karpenter plays it: the
  ``karpenter.sh/disrupted`` taint, a drain through the Eviction API (SIGTERM → checkpoint), the
  Node objects deleted, what is left on them force-deleted as the pod garbage collector does.

Run times: the Job builder sets no arbitrary pod annotation, so a stand-in for a mutating admission
webhook (the substrate's pod defaulter, wrapped for this test) copies a job's ``KWOK_*`` environment
variables into the kubelet stand-in's ``kwok.gpufleet.io/*`` annotations as each pod is created.

Every pod and node write is recorded in order from inside the API server (every instant of the
API's history, not samples), and replayed for the checks: quotas (gpufleet's own rules,
:meth:`~gpufleet.scheduling.quota.QuotaPolicy.holds`) and node GPU capacity hold after every write;
each job ends as designed; each pod index of each run was bound once; interrupted checkpointing
jobs got SIGTERM, ran again and finished; the ledger's usage segments match the pods' container
run times × their GPU share: to the second (the pods' timestamps are whole seconds) for runs that
end by themselves; within gpufleet's poll lag for stopped, drained and lost runs, whose pods are
deleted the moment they end (gpufleet polls the API; it learns of such an end when it next looks).

What the substrate cannot show: the real scheduler framework, device plugin and kubelet admission
(the kubelet stand-in admits whatever is bound: over-commitment shows only in the replay's check),
Karpenter itself (played here), and the real garbage collectors (the parts needed are played by
:class:`Recorder`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.control.controller import Controller, ControllerConfig, Periodic
from gpufleet.control.leader import FileLeadership
from gpufleet.cost.catalog import PriceCatalog
from gpufleet.cost.ledger import SHARE_UNITS
from gpufleet.io.catalog import load_catalog
from gpufleet.k8s.adapter.backend import KubernetesBackend, KubernetesOptions
from gpufleet.k8s.adapter.objects import job_name
from gpufleet.k8s.adapter.pods import PodFacts
from gpufleet.k8s.adopt import PodAdopter
from gpufleet.k8s.vocabulary import LABEL_ADOPTED_OWNER
from gpufleet.model.job import GpuRequest
from gpufleet.model.quota import Quota
from gpufleet.model.share import landed_units
from gpufleet.scheduling.profile import Profile
from gpufleet.scheduling.quota import QuotaPolicy
from gpufleet.services import jobs as control_jobs
from gpufleet.services.submit import prepare_submit
from gpufleet.store import repo
from gpufleet.store.db import Database
from gpufleet.store.models import JobEventRow, JobRow, RunRow, UsageSegmentRow
from gpufleet.wire import JobSubmit, Role
from tests.support.k8s import apiserver
from tests.support.k8s.cluster import Cluster
from tests.support.k8s.fleetrun import NodeShape, Recorder, pod_units, replay, story
from tests.support.k8s.fleetrun import ended as _ended
from tests.support.k8s.fleetrun import kwok_webhook as _kwok_webhook
from tests.support.k8s.fleetrun import phase as _phase
from tests.support.k8s.jobcontroller import JobController
from tests.support.k8s.kubelet import DURATION_ANNOTATION, KubeletConfig, taint_disrupted

pytestmark = pytest.mark.slow

SEED = 11
TOTAL_JOBS = 200
ADOPTED = 10  # of the 200: Jobs created on the cluster and adopted
GRACE_S = 5.0  # a stop's grace period (the eviction's): the kubelet's checkpoint (0.3 s) fits
RUN_TIMEOUT_S = 300.0  # the run takes ~60 s alone; the full suite beside it on 2 cores slows it a lot
# How late gpufleet may learn of a deleted pod's end, or of a container's start before its pod is
# evicted (it polls the API, it does not watch): at most 2.8 s with the run alone, 6.8 s seen with
# the whole suite beside it on 2 cores (the kubelet stand-in and gpufleet then wait for the CPU).
OBSERVE_LAG_S = 10.0

# team → (nominal GPUs of any type, cohort, borrowing limit in GPUs)
TEAMS: dict[str, tuple[int, str | None, int | None]] = {
    "alpha": (16, "research", 8),  # may borrow 8 from its cohort
    "beta": (12, "research", None),  # may borrow all the cohort leaves idle
    "delta": (8, "research", 4),
    "gamma": (12, None, None),  # no cohort: a hard cap
}
A100: dict[str, Any] = {}  # gpu_node's default: NVIDIA-A100-SXM4-80GB × 8, p4de.24xlarge
NODE_SPECS: dict[str, dict[str, Any]] = {
    "od-1": A100,
    "od-2": A100,
    "od-3": A100,
    "od-4": A100,
    "spot-1": {"capacity_type": "spot"},
    "spot-2": {"capacity_type": "spot"},
    "spot-3": {"capacity_type": "spot"},
    "ts-1": {
        "product": "NVIDIA-L4",
        "gpu_memory_mib": 23034,
        "instance_type": "g6.12xlarge",
        "gpu_count": 4,
        "replicas": 4,
    },
    "ts-2": {
        "product": "NVIDIA-L4",
        "gpu_memory_mib": 23034,
        "instance_type": "g6.12xlarge",
        "gpu_count": 4,
        "replicas": 4,
    },
    "mig-1": {"gpu_count": 2, "mig": {"1g.10gb": 14}},
}
STORM = ("spot-1", "spot-2", "spot-3")  # 30 % of the nodes
WAVE_2 = range(170, 188)  # of the API jobs: high priority, submitted once the spot nodes are busy


# -- the workload -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One job of the run: its name (unique), team, wave, what it asks for, how it should end."""

    name: str
    team: str
    wave: int  # 1: at the start; 2: high-priority whole nodes (preemptors); 3: after the storm
    body: dict[str, Any] = field(default_factory=dict)  # JobSubmit fields (API jobs)
    fails: bool = False
    checkpointing: bool = False
    adopted: dict[str, Any] | None = None  # the batch/v1 Job (adopted jobs)


def _api_plans(rng: random.Random, count: int) -> list[Plan]:
    teams = sorted(TEAMS)
    plans: list[Plan] = []
    for i in range(count):
        team = teams[i % len(teams)]
        duration = round(rng.uniform(0.5, 2.0), 2)
        env = {"KWOK_DURATION_S": str(duration)}
        body: dict[str, Any] = {"priority": rng.choice(("low", "normal", "normal"))}
        fails = checkpointing = False
        wave = 1 if i < 100 else 3
        kind = i % 10
        if i in WAVE_2:  # urgent work that needs a whole node (or two): preempts low-priority preemptible jobs
            wave = 2
            # 16 GPUs: within alpha's nominal quota (a job that is not preemptible may not borrow, so
            # beta, nominal 12, could never run it: issue 23)
            gang = i % 3 == 0 and team == "alpha"
            body.update(priority="high", gpus=8, pods=2 if gang else 1)
            duration = round(rng.uniform(0.8, 1.5), 2)
            env["KWOK_DURATION_S"] = str(duration)
        elif kind in (0, 1, 2):  # preemptible, checkpointing, long enough to be interrupted
            checkpointing = True
            duration = round(rng.uniform(2.0, 3.0), 2)
            env["KWOK_DURATION_S"] = str(duration)
            body.update(
                priority="low",
                gpus=rng.choice((1, 2, 4)),
                preemptible=True,
                checkpoint_dir="/ckpt",
                checkpoint_interval_s=1.0,
            )
        elif kind == 3:  # a gang
            body.update(gpus=rng.choice((2, 4)), pods=rng.choice((2, 3)))
        elif kind == 4:  # a fraction of a time-sliced GPU
            body.update(gpu_milli=rng.choice((250, 500)))
        elif kind == 5:  # a MIG slice
            body.update(mig="1g.10gb")
        else:
            body.update(gpus=rng.choice((1, 1, 2, 2, 4)))
        if i % 31 == 7:  # designed to fail
            fails = True
            env.update(KWOK_EXIT_CODE="1", KWOK_DURATION_S="0.5")
        body.update(
            command=["python", "train.py"],
            name=f"api-{i:03d}",
            team=team,
            env=env,
            image="ghcr.io/acme/train:1.4",
            estimated_runtime_s=duration,
        )
        plans.append(Plan(f"api-{i:03d}", team, wave, body, fails=fails, checkpointing=checkpointing))
    return plans


def _adopted_plans(rng: random.Random, count: int) -> list[Plan]:
    plans = []
    for i in range(count):
        team = ("beta", "delta")[i % 2]
        pods = 2 if i % 3 == 0 else 1
        gpus = rng.choice((1, 2))
        duration = round(rng.uniform(0.8, 2.0), 2)
        shared = i % 5 == 1  # one replica of a GPU time-sliced 4 ways, picked by GFD's label
        template_ann = {"gpufleet.io/gang-size": str(pods), DURATION_ANNOTATION: str(duration)}
        spec: dict[str, Any] = {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"team": team, "project": "external"}, "annotations": template_ann},
                "spec": {
                    "schedulerName": "gpufleet",
                    "restartPolicy": "Never",
                    "priorityClassName": "gpufleet-normal",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "main", "image": "acme/ray:2", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                    ],
                },
            },
        }
        if shared:
            pod_spec = spec["template"]["spec"]
            pod_spec["nodeSelector"] = {"nvidia.com/gpu.replicas": "4"}
            pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        if pods > 1:
            spec["completionMode"] = "Indexed"
        name = f"ext-{i:02d}"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": team}, "spec": spec}
        plans.append(Plan(name, team, 1, adopted=job))
    return plans


def workload() -> list[Plan]:
    rng = random.Random(SEED)
    return _api_plans(rng, TOTAL_JOBS - ADOPTED) + _adopted_plans(rng, ADOPTED)


# -- the world ------------------------------------------------------------------------------------------


class Fleet:
    def __init__(self, cluster: Cluster, tmp: Path, catalog: PriceCatalog) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.core: Any = cast(Any, kubernetes.client.CoreV1Api(self.client))
        self.batch: Any = cast(Any, kubernetes.client.BatchV1Api(self.client))
        for ns in sorted(TEAMS):
            self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name, spec in NODE_SPECS.items():
            cluster.add_gpu_node(name, **spec)
        self.jobs = JobController(self.client, interval_s=0.2).start()
        self.db = Database(f"sqlite:///{tmp / 'store.db'}")
        self.db.upgrade()
        now = time.time()
        with self.db.session() as s:
            repo.ensure_team(s, "default", now)
            for team, (gpus, cohort, limit) in TEAMS.items():
                row = repo.upsert_team(
                    s,
                    team,
                    cohort=cohort,
                    borrowing_limit_milli=None if limit is None else limit * 1000,
                    quotas_milli={"*": gpus * 1000},
                    now=now,
                )
                row.priority_classes = ["low", "normal", "high"]
        self.backend = KubernetesBackend(self.client, catalog, KubernetesOptions())
        adopter = PodAdopter(self.db, self.client)
        self.ctl = Controller(
            self.db,
            self.backend,
            # jobs here run 2-3 s for hours: a borrowed run may be reclaimed once it ran 1 s (the
            # default 120 s is longer than any job of the run, and with it only a node held by one
            # team's low-priority jobs alone could ever be freed for that team's urgent wave — on a
            # loaded CI runner none was, and nothing was preempted)
            Profile(reclaim_min_runtime_s=1.0),
            ControllerConfig(
                poll_interval_s=0.2,
                cycle_interval_s=0.5,
                grace_s=GRACE_S,
                telemetry_interval_s=3600,
                budget_interval_s=3600,
                replica="scale-test",
            ),
            leadership=FileLeadership(tmp / "leader.lock"),
            catalog=catalog,
            periodic=[Periodic("adopt pods", 0.5, lambda now: adopter.adopt())],
        )
        backend = self.backend  # as build_server adds it: waiting pods say why
        self.ctl.periodic.append(
            Periodic("pod conditions", 5.0, lambda now: backend.report_waiting(self.ctl.loop.waiting_statuses))
        )

    def submit(self, plan: Plan) -> str:
        if plan.adopted is not None:
            self.batch.create_namespaced_job(plan.team, plan.adopted, _preload_content=False)
            return ""
        prepared = prepare_submit(JobSubmit(**plan.body), caller_team="default", caller_role=Role.ADMIN)
        with self.db.session() as s:
            row, _ = control_jobs.submit(
                s,
                prepared,
                priority=plan.body["priority"],
                token_id=None,
                role=Role.ADMIN,
                run_as_required=False,
                single_team=False,
                idempotency_key=None,
                now=time.time(),
            )
            job_id = row.id
        self.ctl.wake()
        return job_id

    def rows(self) -> list[JobRow]:
        with self.db.session(readonly=True) as s:
            rows = list(s.query(JobRow).all())
            s.expunge_all()
        return rows

    def pods(self) -> list[dict[str, Any]]:
        resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
        return list(json.loads(resp.data)["items"])

    def running_on(self, nodes: tuple[str, ...]) -> int:
        return sum(1 for p in self.pods() if p["spec"].get("nodeName") in nodes and _phase(p) == "Running")

    def spot_storm(self, nodes: tuple[str, ...], timeout: float = 20.0) -> set[str]:
        """Karpenter on a spot interruption: taint, drain through the Eviction API (the pods' own
        grace), delete the Nodes once drained (what is still bound to them then goes with the pod
        garbage collector, see :class:`Recorder`). Returns the uids of the pods it evicted."""
        for n in nodes:
            taint_disrupted(self.core, n)
        evicted: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            busy = [p for p in self.pods() if p["spec"].get("nodeName") in nodes and not _ended(p)]
            if not busy or time.monotonic() > deadline:
                break
            for p in busy:
                meta = p["metadata"]
                if meta["uid"] in evicted or meta.get("deletionTimestamp"):
                    continue
                body = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                }
                try:
                    self.core.create_namespaced_pod_eviction(
                        meta["name"], meta["namespace"], body, _preload_content=False
                    )
                    evicted.add(meta["uid"])
                except ApiException as e:
                    if e.status != 404:
                        raise
            time.sleep(0.1)
        for n in nodes:
            self.core.delete_node(n)
        return evicted

    def close(self) -> None:
        self.ctl.stop()
        self.jobs.stop()
        self.db.dispose()
        self.client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def fleet(
    k8s_cluster_factory: Callable[..., Cluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Fleet, Recorder]]:
    monkeypatch.setitem(apiserver._DEFAULTERS, "pods", _kwok_webhook(apiserver._DEFAULTERS["pods"]))
    cluster = k8s_cluster_factory(kubelet=KubeletConfig(default_duration_s=1.0, checkpoint_s=0.3), watch_history=5000)
    recorder = Recorder(cluster)
    recorder.start()
    f = Fleet(cluster, tmp_path, load_catalog())
    try:
        yield f, recorder
    finally:
        f.close()
    assert not f.jobs.errors, f.jobs.errors


# -- the run ------------------------------------------------------------------------------------------


def _quota_policy() -> QuotaPolicy:
    return QuotaPolicy(
        Quota(team, {"*": gpus * 1000}, cohort, None if limit is None else limit * 1000)
        for team, (gpus, cohort, limit) in TEAMS.items()
    )


def held_units(q: PodFacts, shape: NodeShape, row: Any) -> int:
    """What a pod holds in the ledger's units: a fraction gpufleet placed on a node whose GPUs are
    replicas holds its reservation (its pod asks one replica; the scheduler kept ``max(milli, 1000 //
    R)`` of the GPU for it: :func:`gpufleet.model.share.landed_units`); any other pod what it asks."""
    if LABEL_ADOPTED_OWNER not in (row.labels or {}) and shape.replicas > 1 and 0 < row.gpu_milli < 1000:
        return landed_units(GpuRequest(1, row.gpu_milli), shape.model, row.labels or {}, shape.replicas)
    return pod_units(q, shape)


def test_two_hundred_jobs_with_preemption_adoption_and_a_spot_storm(
    fleet: tuple[Fleet, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    f, recorder = fleet
    plans = workload()
    assert len(plans) == TOTAL_JOBS
    by_wave: dict[int, list[Plan]] = defaultdict(list)
    for p in plans:
        by_wave[p.wave].append(p)
    t0, t_wall = time.monotonic(), time.time()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - t0:5.1f}s {what}")

    with caplog.at_level(logging.WARNING, logger="gpufleet"):
        f.ctl.start()
        for p in by_wave[1]:
            f.submit(p)
        mark(f"wave 1: {len(by_wave[1])} jobs ({sum(1 for p in by_wave[1] if p.adopted)} Jobs to adopt)")
        # the spot nodes busy with preemptible work, then the urgent wave
        f.cluster.wait_for(lambda: f.running_on(STORM) >= 4, timeout=30, interval=0.2, what="work on the spot nodes")
        for p in by_wave[2]:
            f.submit(p)
        mark(f"wave 2: {len(by_wave[2])} high-priority jobs")
        time.sleep(1.5)
        on_spot = f.running_on(STORM)
        mark(f"spot storm on {', '.join(STORM)} ({on_spot} pods running there)")
        evicted = f.spot_storm(STORM)
        mark(f"spot storm over: {len(evicted)} pods drained, nodes deleted")
        for p in by_wave[3]:
            f.submit(p)
        mark(f"wave 3: {len(by_wave[3])} jobs")

        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            rows = f.rows()
            done = [r for r in rows if r.state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")]
            if len(rows) >= TOTAL_JOBS and len(done) == len(rows):
                break
            if time.monotonic() > deadline:
                mark(f"timed out: {len(rows) - len(done)} of {len(rows)} jobs unfinished")
                break
            time.sleep(0.5)
        mark("all jobs ended")
        wall_s = time.monotonic() - t0
        time.sleep(0.5)  # the last pod deletions land in the record
        f.ctl.stop()
        leftover = [p["metadata"]["name"] for p in f.pods() if not _ended(p)]

    final = {row.name: row for row in f.rows()}
    with f.db.session(readonly=True) as s:
        runs = {
            (x.job_id, x.run): (x.started_at, x.ended_at, x.outcome, x.stop_requested, x.reason)
            for x in s.query(RunRow).all()
        }
        segments: dict[tuple[str, int], list[tuple[str, int, float, float]]] = defaultdict(list)
        for seg in s.query(UsageSegmentRow).all():
            segments[(seg.job_id, seg.run)].append((seg.node, seg.gpu_share_units, seg.start, seg.end))
        events: dict[str, list[tuple[str | None, str, str]]] = defaultdict(list)
        for ev_row in s.query(JobEventRow).order_by(JobEventRow.id).all():
            events[ev_row.job_id].append((ev_row.old, ev_row.new, ev_row.reason))

    # -- each job ended as designed --------------------------------------------------------------------
    adopted_rows = [row for row in final.values() if (row.labels or {}).get(LABEL_ADOPTED_OWNER)]
    planned = {x.name for x in plans}
    extra = [
        f"{row.name} ({row.id}, {row.labels}): {row.state}; events {events[row.id]}"
        for row in final.values()
        if row.name not in planned and row not in adopted_rows
    ]
    assert len(adopted_rows) == ADOPTED and not extra, (
        f"{len(adopted_rows)} adopted jobs: {[row.labels for row in adopted_rows]}; not planned: {extra}"
    )
    wrong = []
    for plan in plans:
        if plan.adopted is not None:
            continue
        row = final[plan.name]
        want = "FAILED" if plan.fails else "SUCCEEDED"
        if row.state != want:
            wrong.append(
                f"{plan.name} ({row.id}): {row.state} ({row.reason}), expected {want}; events {events[row.id]}; "
                f"runs {[(n, v) for (j, n), v in runs.items() if j == row.id]}; "
                f"pods {story(recorder.events, row.id, t_wall)}"
            )
    for row in adopted_rows:
        if row.state != "SUCCEEDED":
            wrong.append(
                f"adopted {row.labels[LABEL_ADOPTED_OWNER]} ({row.id}): {row.state} ({row.reason}); "
                f"events {events[row.id]}; pods {story(recorder.events, row.id, t_wall)}"
            )
    assert not wrong, f"{len(wrong)} jobs did not end as designed:\n" + "\n".join(wrong[:20]) + f"\n{timeline}"

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, "gpufleet logged errors:\n" + "\n".join(r.getMessage() for r in errors[:10])
    assert not recorder.errors, recorder.errors
    assert not leftover, f"pods left behind, not ended: {leftover[:20]}\n" + "\n".join(
        f"{name}: {story(recorder.events, 'j-' + name.split('-')[2], t_wall)}" for name in leftover[:5]
    )

    # -- the record, replayed ----------------------------------------------------------------------
    catalog = load_catalog()
    r = replay(list(recorder.events), _quota_policy(), catalog)
    assert not r.violations, f"{len(r.violations)} violations of quotas or node capacity:\n" + "\n".join(
        r.violations[:20]
    )

    # -- each pod index of each run was bound once; no Job made a pod twice -------------------------------
    by_run: dict[tuple[str, int], list[PodFacts]] = defaultdict(list)
    bound_per_index: Counter[tuple[str, int, int]] = Counter()
    for uid, pod in r.last.items():
        if pod.job_id is not None and pod.run is not None:
            by_run[(pod.job_id, pod.run)].append(pod)
            if uid in r.ever_bound:
                bound_per_index[(pod.job_id, pod.run, pod.completion_index or 0)] += 1
    twice = {k: n for k, n in bound_per_index.items() if n > 1}
    assert not twice, f"pod indexes of a run bound more than once: {twice}"
    id_rows = {row.id: row for row in final.values()}
    # the Job controller makes a pod again for one that is gone before its Job is (a stop's eviction,
    # a drain): such a pod must never be bound, and must be gone at the end (checked above)
    bound_of_job: Counter[str] = Counter()
    for uid in r.ever_bound:
        pod = r.last[uid]
        if "batch.kubernetes.io/job-name" in pod.labels:
            bound_of_job[f"{pod.namespace}/{pod.labels['batch.kubernetes.io/job-name']}"] += 1
    gang_of_job = {
        f"{row.team}/{job_name(row.id, run, row.pods)}": row.pods
        for row in final.values()
        for run in range(1, row.run + 1)
    }
    gang_of_job.update({f"{x.team}/{x.name}": x.adopted["spec"]["parallelism"] for x in plans if x.adopted})
    bound_twice = {k: (n, gang_of_job.get(k)) for k, n in bound_of_job.items() if n > gang_of_job.get(k, 0)}
    assert not bound_twice, f"Jobs with more pods bound than the gang has (bound, gang): {bound_twice}"
    strays = sum(f.jobs.created.values()) - sum(bound_of_job.values())

    # -- interrupted checkpointing jobs got SIGTERM, ran again and finished ---------------------------
    assert f.cluster.kubelet is not None
    sigtermed = {s.uid for s in f.cluster.kubelet.sigterms()}
    preempted_runs = [(j, n) for (j, n), v in runs.items() if (v[3] or "").startswith("preempt") and v[2] == "stopped"]
    storm_runs = sorted(
        {
            (pod.job_id, pod.run)
            for uid, pod in r.last.items()
            if uid in evicted and pod.job_id is not None and pod.run is not None
        }
    )
    resumed = []
    plan_of = {x.name: x for x in plans}
    for job_id, run in [*preempted_runs, *storm_runs]:
        row = id_rows[job_id]
        # a pod that exited 0 before the stop reached it needed no signal
        started = [q for q in by_run[(job_id, run)] if q.started_at is not None and q.phase != "Succeeded"]
        missing = [q.key for q in started if q.uid not in sigtermed]
        assert not missing, (
            f"{row.name} run {run} was interrupted without SIGTERM to {missing}: runs "
            f"{[(n, v) for (j, n), v in runs.items() if j == job_id]}; pods {story(recorder.events, job_id, t_wall)}"
        )
        if row.run == run and row.state == "SUCCEEDED" and all(q.phase == "Succeeded" for q in by_run[(job_id, run)]):
            # the storm listed it running, but its pods exited 0 (no SIGTERM: checked above) before
            # the eviction reached them: its work is done, nothing to run again
            continue
        assert row.run > run, f"{row.name}: no run after the interrupted run {run} ({events[job_id]})"
        later = by_run[(job_id, row.run)]
        designed = plan_of.get(row.name)  # adopted jobs are named after their owner
        want = "Failed" if designed is not None and designed.fails else "Succeeded"  # designed to fail: again
        assert later and all(q.phase == want for q in later), f"{row.name} run {row.run}: {later}"
        resumed.append(row.name)
    assert preempted_runs, f"no job was preempted: the high-priority wave found room without preempting\n{timeline}"
    by_priority = [(j, n) for j, n in preempted_runs if "higher-priority" in (runs[(j, n)][3] or "")]
    not_preemptible = [id_rows[j].name for j, _ in by_priority if not id_rows[j].preemptible]
    assert not not_preemptible, f"jobs preempted for priority that are not preemptible: {not_preemptible}"
    assert storm_runs, "the spot storm interrupted no run"
    sigtermed_runs = {(q.job_id, q.run) for q in r.last.values() if q.uid in sigtermed}
    assert sigtermed_runs & set(storm_runs), "no drained pod got SIGTERM: the storm found nothing running"

    # -- the ledger matches the pods' container run times × GPU share, to the second ----------------
    # A run that ends by itself leaves its pods (Succeeded/Failed) for gpufleet to read: its segments
    # span the containers' start and end to the second. A stopped, drained or collected pod is deleted
    # the moment it ends, so gpufleet (which polls) may learn of its end late, and where it never saw
    # the container running, it meters from the launch: both within its poll lag.
    ledger_bad = []
    lags: list[float] = []
    checked: Counter[str] = Counter()  # runs checked to the second / within the poll lag
    adopted_on_shared = 0
    gpu_s_ledger = gpu_s_pods = 0.0
    for (job_id, run), pods in sorted(by_run.items()):
        ran = [q for q in pods if q.started_at is not None and q.uid in r.ever_bound]
        segs = segments.get((job_id, run), [])
        row = id_rows[job_id]
        outcome = runs[(job_id, run)][2]
        if not ran:
            longest = max((s1 - s0 for _, _, s0, s1 in segs), default=0.0)
            lags.append(longest)
            if longest > OBSERVE_LAG_S:
                ledger_bad.append(f"{row.name} run {run} ({outcome}): no container ran, {longest:.2f} s metered")
            continue
        ends = {q.uid: q.finished_at if q.finished_at is not None else r.deleted_at.get(q.uid) for q in ran}
        if any(e is None for e in ends.values()):
            ledger_bad.append(f"{row.name} run {run}: a pod has no end recorded: {[q.key for q in ran]}")
            continue
        begin = min(q.started_at for q in ran if q.started_at is not None)
        end = max(e for e in ends.values() if e is not None)
        units: Counter[str] = Counter()
        for q in ran:
            units[r.ever_bound[q.uid]] += held_units(q, r.shapes[r.ever_bound[q.uid]], row)
        seg_units = {node: u for node, u, _, _ in segs}
        adopted_on_shared += LABEL_ADOPTED_OWNER in (row.labels or {}) and any(r.shapes[n].replicas > 1 for n in units)
        whole_on_shared = row.gpu_milli == 1000 and any(r.shapes[n].replicas > 1 for n in units)
        held_whole = LABEL_ADOPTED_OWNER in (row.labels or {}) and whole_on_shared
        if held_whole:
            # by design (gpufleet.k8s.adopt): an adopted pod asking nvidia.com/gpu: k without
            # selecting shared GPUs is held and metered as k whole GPUs, wherever it lands
            whole: Counter[str] = Counter()
            for q in ran:
                whole[r.ever_bound[q.uid]] += SHARE_UNITS * row.gpus
            if seg_units != dict(whole):
                ledger_bad.append(f"{row.name} run {run}: whole-GPU ledger shares {seg_units}")
        elif seg_units != dict(units):
            ledger_bad.append(f"{row.name} run {run}: ledger shares {seg_units} != pods' {dict(units)}")
        checked["to_the_second" if outcome in ("succeeded", "failed") else "within_poll_lag"] += 1
        for node, _, s0, s1 in segs:
            slack = 1.0 if outcome in ("succeeded", "failed") else OBSERVE_LAG_S
            if slack > 1.0:
                lags += [begin - s0, s1 - end]
            if not (begin - slack <= s0 <= begin + 1.0 and end - 1.0 <= s1 <= end + slack):
                ledger_bad.append(
                    f"{row.name} run {run} ({outcome}) on {node}: ledger [{s0:.2f}, {s1:.2f}] vs containers "
                    f"[{begin:.2f}, {end:.2f}]"
                )
        if held_whole:
            continue  # held as whole GPUs, not as the replicas its pod was given: not in the GPU-seconds sum
        gpu_s_ledger += sum((s1 - s0) * u for _, u, s0, s1 in segs) / SHARE_UNITS
        gpu_s_pods += (
            sum(
                ((ends[q.uid] or 0) - (q.started_at or 0)) * held_units(q, r.shapes[r.ever_bound[q.uid]], row)
                for q in ran
            )
            / SHARE_UNITS
        )
    assert not ledger_bad, f"{len(ledger_bad)} runs metered unlike their pods:\n" + "\n".join(ledger_bad[:20])

    figures = {
        "jobs": len(final),
        "adopted": len(adopted_rows),
        "failed_by_design": sum(1 for x in plans if x.fails),
        "runs": len(runs),
        "pods_created": r.created,
        "pods_made_again_never_bound": strays,
        "pods_of_deleted_jobs_collected": len(recorder.collected),
        "pods_on_deleted_nodes_collected": len(recorder.orphans),
        "pods_bound": len(r.ever_bound),
        "peak_pods_holding_gpus": r.peak_pods,
        "peak_team_gpus_all_types": {t: m / 1000 for t, m in sorted(r.peak_team_milli.items())},
        "preempted_runs": len(preempted_runs),
        "spot_interrupted_runs": len(storm_runs),
        "interrupted_runs_with_sigterm": len(sigtermed_runs & {*preempted_runs, *storm_runs}),
        "jobs_resumed": len(set(resumed)),
        "sigterms": len(sigtermed),
        "runs_metered": dict(checked),
        "max_poll_lag_s": round(max(lags, default=0.0), 2),
        "adopted_runs_on_time_sliced_nodes": adopted_on_shared,
        "gpu_hours_ledger": round(gpu_s_ledger / 3600, 4),  # of the runs checked
        "gpu_hours_pods": round(gpu_s_pods / 3600, 4),
        "api_writes_replayed": len(recorder.events),
        "wall_s": round(wall_s, 1),
    }
    print("\nscale run:", json.dumps(figures), "\n" + "\n".join(timeline))
