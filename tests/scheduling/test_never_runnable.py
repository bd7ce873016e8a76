"""Jobs that can never run are refused at submit (issue 10, observation 10), not queued forever with
"no node has room" and counted as committed budget spend: the cycle's feasibility rules, applied
to the nodes the store knows, answer a 422 naming the field at fault."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.node import Node
from gpufleet.store import repo
from tests.support.api_support import T0, Api, fields, make_api, problem

HOST = Node("host", "A100-80GB", 8, 32000, 262144)  # 8 whole A100-80GB (not in MIG mode), 32 cores, 256 GiB


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(tmp_path)


def with_host(api: Api) -> None:
    with api.db.session() as s:
        repo.upsert_node(s, HOST, hourly_usd=32.0, now=T0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"mig": "1g.10gb"}, "body.mig"),  # a MIG slice on GPUs not in MIG mode
        ({"gpus": 9}, "body.gpus"),  # more GPUs than any node has
        ({"gpus": 1, "memory_mib": 1000 * 1024}, "body.memory_mib"),  # 1000 GiB on a 256 GiB node
        ({"gpus": 1, "cpu_milli": 64000}, "body.cpu_milli"),  # 64 cores on a 32-core node
        ({"gpus": 1, "gpu_types": ["H100-80GB"]}, "body.gpu_types"),  # a GPU model the cluster lacks
    ],
    ids=["mig-on-whole-gpus", "nine-gpus", "1000Gi", "64-cpus", "absent-gpu-model"],
)
def test_a_job_no_node_could_ever_hold_is_refused(api: Api, body: dict[str, Any], field: str) -> None:
    with_host(api)
    r = api.client.post("/v1/jobs", json={"name": "x", "command": ["true"], **body}, headers=api.h("alice"))
    doc = problem(r, 422, "invalid_input")
    assert field in fields(doc), doc
    assert "no node could ever run this job" in doc["detail"]
    with api.db.session() as s:
        assert repo.job_ids_in_states(s, ["PENDING"]) == []  # nothing queued, nothing committed


def test_what_fits_is_queued_and_nothing_is_judged_before_a_node_is_known(api: Api) -> None:
    assert api.submit("alice", name="early", gpus=9)["state"] == "PENDING"  # no node registered yet
    with_host(api)
    assert api.submit("alice", name="fits", gpus=8, cpu_milli=32000, memory_mib=262144)["state"] == "PENDING"


def test_a_job_shows_what_it_asked_for(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    """Requested CPU and memory appeared in neither ``show`` nor ``show --json`` (issue 10, obs. 12)."""
    from gpufleet.cli.render import print_job
    from gpufleet.wire import JobOut

    job = api.submit(
        "alice",
        name="r",
        gpus=1,
        cpu_milli=4000,
        memory_mib=16384,
        estimated_runtime_s=600.0,
        checkpoint_interval_s=300.0,
        budget_usd=5.0,
    )
    got = api.client.get(f"/v1/jobs/{job['id']}", headers=api.h("alice")).json()
    assert (got["cpu_milli"], got["memory_mib"], got["estimated_runtime_s"]) == (4000, 16384, 600.0)
    assert (got["checkpoint_interval_s"], got["budget_usd"]) == (300.0, 5.0)
    print_job(JobOut.model_validate(got), [])
    text = capsys.readouterr().out
    assert "4 CPU · 16 GiB memory" in text and "job budget" in text and "$5.00" in text


def test_a_job_whose_node_selector_matches_no_node_is_refused_naming_it(api: Api) -> None:
    """Issue 22, item 7: a job's node constraints are judged at submit too (the service the submit
    route calls: the API body has no constraints, an adopted workload's submission has)."""
    from gpufleet.errors import InputError
    from gpufleet.model.constraints import node_constraints
    from gpufleet.model.job import GpuRequest
    from gpufleet.model.submission import submission
    from gpufleet.services.submit import check_fits_store

    with_host(api)
    sub = submission("x", ["true"], gpu=GpuRequest(1), constraints=node_constraints({"gpu": "h100"}))
    with api.db.session(readonly=True) as s, pytest.raises(InputError) as e:
        check_fits_store(s, sub)
    assert e.value.field == "constraints.nodeSelector"
    assert "no node or pool matches the job's node selector {gpu: h100}" in str(e.value)
    fits = submission("y", ["true"], gpu=GpuRequest(1), constraints=node_constraints({"zone": "a"}))
    with api.db.session() as s:
        repo.upsert_node(s, Node("zoned", "A100-80GB", 8, 32000, 262144, labels={"zone": "a"}), hourly_usd=32.0, now=T0)
    with api.db.session(readonly=True) as s:
        check_fits_store(s, fits)


def test_a_job_every_fitting_node_keeps_off_with_a_taint_is_refused(api: Api) -> None:
    """Its pods would never be placed (a job without tolerations tolerates no taint): 422 naming the
    taint, not a job queued for ever."""
    from gpufleet.model.constraints import Taint

    with api.db.session() as s:
        tainted = Node("host", "A100-80GB", 8, 32000, 262144, taints=(Taint("dedicated", "ml"),))
        repo.upsert_node(s, tainted, hourly_usd=32.0, now=T0)
    r = api.client.post("/v1/jobs", json={"name": "x", "command": ["true"], "gpus": 1}, headers=api.h("alice"))
    doc = problem(r, 422, "invalid_input")
    assert "has a taint it does not tolerate (dedicated=ml:NoSchedule)" in doc["detail"], doc
    with api.db.session() as s:
        assert repo.job_ids_in_states(s, ["PENDING"]) == []
