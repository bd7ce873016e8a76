"""Issue 21: one typed submission (:class:`gpufleet.model.submission.Submission`), built by one
builder for the API, adoption and the webhook, with the job's own budget in it and in the
:class:`~gpufleet.model.job.JobSpec` every world's loop sees (the store's row included)."""

from __future__ import annotations

from typing import Any

from gpufleet.k8s.review import ReviewRequest, Workload, inspect, submission_of, submit_fields
from gpufleet.model.job import GpuRequest
from gpufleet.model.submission import MAX_NAME, Submission, default_name, submission
from gpufleet.services.submit import prepare_submit, spec_of_fields
from gpufleet.store import repo
from gpufleet.store.convert import job_from_row
from gpufleet.store.db import Database
from gpufleet.store.repo.jobs import SUBMIT_FIELDS
from gpufleet.wire import JobSubmit, Role


def test_the_api_builds_a_typed_submission_with_its_budget() -> None:
    body = JobSubmit(command=["python", "train.py"], gpus=2, budget_usd=12.5, gpu_types=["A100-80GB", "a100-80gb"])
    p = prepare_submit(body, caller_team="t", caller_role=Role.MEMBER)
    sub = p.submission
    assert isinstance(sub, Submission)
    assert sub.name == "python train.py" and sub.command == ("python", "train.py")
    assert sub.gpu == GpuRequest(2) and sub.gpu_types == ("A100-80GB",) and sub.budget_usd == 12.5
    # the store's columns, every one a submit may set but the account (resolved at submit)
    assert set(p.fields) == SUBMIT_FIELDS - {"run_as"}
    assert Submission.from_fields(p.fields) == sub  # the columns read back
    spec = sub.spec("t")
    assert spec.budget_usd == 12.5 and spec.team == "t" and spec.gang_size == 1
    assert spec_of_fields(p.fields, "t") == spec


def test_the_builder_normalizes_once_for_every_caller() -> None:
    sub = submission("  ", ["/usr/bin/python3", "-m", "x"], namespace="", labels={"a": 1}, gpu_types=["L4", "L4"])
    assert sub.name == default_name(["/usr/bin/python3", "-m", "x"]) == "python3 -m x"
    assert sub.namespace == "default" and sub.labels == {"a": "1"} and sub.gpu_types == ("L4",)
    assert len(submission("x" * 400).name) == MAX_NAME
    assert submission("a", pods=0).pods == 1


def _workload(obj: dict[str, Any]) -> Workload:
    meta = obj["metadata"]
    w = inspect(ReviewRequest("u", "CREATE", "", "v1", "Pod", meta["namespace"], meta["name"], object=obj))
    assert isinstance(w, Workload)
    return w


def test_the_webhook_builds_its_submission_with_the_same_builder() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0",
            "namespace": "vision",
            "labels": {"project": "p1"},
            "annotations": {"gpufleet.io/cost-limit": "40", "gpufleet.io/estimated-runtime": "2h"},
        },
        "spec": {
            "priorityClassName": "gpufleet-high",
            "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }
    w = _workload(obj)
    sub = submission_of(w, None)
    assert isinstance(sub, Submission)
    assert (sub.name, sub.namespace, sub.project, sub.priority_class) == ("train-0", "vision", "p1", "high")
    assert (sub.gpu, sub.budget_usd, sub.estimated_runtime_s) == (GpuRequest(2), 40.0, 7200.0)
    fields = submit_fields(w, None)  # what the budget check reads: the submission's columns
    assert fields == sub.fields() and fields["budget_usd"] == 40.0 and fields["gpus"] == 2


def test_the_stored_jobs_budget_reaches_the_loops_spec(db: Database) -> None:
    """The server's loop reads jobs from rows: the job's own budget is part of its spec there too."""
    sub = submission("capped", ["x"], gpu=GpuRequest(1), budget_usd=7.25)
    with db.session() as s:
        row, _ = repo.submit_job(
            s, sub.fields(), team="t", submitted_by=None, idempotency_key=None, request_sha256=None, now=1.0
        )
        assert job_from_row(repo.get_job(s, row.id)).spec.budget_usd == 7.25


def test_a_key_without_a_submitter_is_honoured(db: Database) -> None:
    """An adopted workload is submitted with no token: its idempotency key still answers a replay
    with the first job (the unique constraint never matches a NULL submitter)."""
    fields = submission("adopted", ["(pods of x)"]).fields()
    with db.session() as s:
        first, created = repo.submit_job(
            s, fields, team="t", submitted_by=None, idempotency_key="k8s-owner:u1", request_sha256=None, now=1.0
        )
        assert created
    with db.session() as s:
        again, created = repo.submit_job(
            s, fields, team="t", submitted_by=None, idempotency_key="k8s-owner:u1", request_sha256=None, now=2.0
        )
        assert (again.id, created) == (first.id, False)
