"""gpufleet JSONL traces: reading, writing, round trips and errors that name the place."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import TraceError
from gpufleet.io.traces import dump_jsonl, load_jsonl
from gpufleet.model.gpu import GPU_MODELS
from gpufleet.model.job import PRIORITY_CLASSES, GpuRequest, JobSpec
from gpufleet.model.node import CapacityType, Node, NodePool, SharingMode
from gpufleet.sim.limits import MAX_CPU_MILLI, MAX_MEMORY_MIB, MAX_TIME_S
from gpufleet.sim.traces.base import Trace, TraceJob
from gpufleet.sim.traces.jsonl import iter_jsonl, mig_profile, parse_jsonl
from tests.support.paths import REPO

DOCS = REPO / "docs" / "trace-formats.md"


def test_examples_in_the_docs_parse() -> None:
    lines = [ln for ln in DOCS.read_text(encoding="utf-8").splitlines() if ln.startswith('{"kind"')]
    assert len(lines) == 5
    trace = parse_jsonl(lines, source="docs")
    assert trace.name == "lab"
    assert [j.spec.name for j in trace.jobs] == ["train-llm", "notebook", "serve-small", "etl"]
    train, notebook, serve, etl = (j.spec for j in trace.jobs)
    assert (train.gpu, train.gang_size, train.total_gpu_milli) == (GpuRequest(8), 2, 16_000)
    assert train.preemptible and train.checkpoint_interval_s == 1800.0
    assert notebook.gpu == GpuRequest(1, 500) and notebook.priority_class == "low"
    assert serve.gpu == GpuRequest(1, 143, "1g.10gb") and serve.labels == {"app": "demo"}
    assert etl.gpu == GpuRequest(0) and etl.team == "default"
    assert trace.nodes[0].gpu_count == 8
    assert trace.pools[0].capacity_type is CapacityType.SPOT


def test_gpu_names_are_canonical_and_jobs_sorted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"kind":"cluster","nodes":[{"name":"n","gpu_model":"v100m16","gpu_count":2}]}\n'
        '{"kind":"job","submit":5,"name":"late","gpu_types":["V100M32","T4"]}\n'
        "\n"
        '{"kind":"job","submit":1,"name":"early","gpus":1}\n',
        encoding="utf-8",
    )
    trace = load_jsonl(path)
    assert trace.name == "t" and trace.source == str(path)
    assert trace.nodes == [Node(name="n", gpu_model="V100-16GB", gpu_count=2)]
    assert [j.spec.name for j in trace.jobs] == ["early", "late"]
    assert trace.jobs[1].spec.gpu_types == frozenset({"V100-32GB", "T4"})


def sample_trace() -> Trace:
    jobs = [
        TraceJob(0.0, JobSpec(name="whole", gpu=GpuRequest(4), duration_s=10.0)),
        TraceJob(
            1.5, JobSpec(name="frac", team="t", gpu=GpuRequest(1, 300), preemptible=True, checkpoint_interval_s=60.0)
        ),
        TraceJob(2.0, JobSpec(name="mig", gpu=GpuRequest(1, 143, "1g.10gb"), gpu_types=frozenset({"A100-80GB"}))),
        TraceJob(2.0, JobSpec(name="odd-mig", gpu=GpuRequest(1, 250, "1g.10gb"))),
        TraceJob(3.0, JobSpec(name="cpu", cpu_milli=500, memory_mib=256, labels={"a": "b"}, priority_class="urgent")),
        TraceJob(
            4.0,
            JobSpec(
                name="gang",
                gpu=GpuRequest(8),
                gang_size=4,
                max_runtime_s=7200.0,
                estimated_runtime_s=3600.0,
                min_gpu_memory_gib=40.0,
                project="p",
                namespace="ns",
                experiment="e",
            ),
        ),
    ]
    nodes = [
        Node(
            "a0",
            "A100-80GB",
            8,
            96_000,
            1 << 20,
            capacity_type=CapacityType.SPOT,
            hourly_price_usd=12.5,
            sharing=SharingMode.MIG,
            labels={"zone": "z1"},
        ),
        Node("cpu0", cpu_milli=32_000, memory_mib=65_536, pool="cpu"),
    ]
    pools = [NodePool("h100", "H100-80GB", 8, 192_000, 2 << 20, CapacityType.RESERVED, 80.0, 1, 4, 2, 60.0)]
    return Trace("sample", jobs, nodes, pools)


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    trace = sample_trace()
    path = tmp_path / "out.jsonl"
    dump_jsonl(trace, path)
    back = load_jsonl(path)
    assert (back.name, back.jobs, back.nodes, back.pools) == (trace.name, trace.jobs, trace.nodes, trace.pools)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(trace.jobs)
    assert all(isinstance(json.loads(ln), dict) for ln in lines)
    # Defaults are left out; the MIG share is implied by the profile.
    assert json.loads(lines[3]) == {
        "kind": "job",
        "submit": 2.0,
        "name": "mig",
        "mig": "1g.10gb",
        "gpu_types": ["A100-80GB"],
    }


# name, the offending line, field path (None: the whole line is bad)
BAD_LINES: list[tuple[str, str, str | None]] = [
    ("string number", '{"kind":"job","submit":"1","name":"a"}', "submit"),
    ("boolean count", '{"kind":"job","submit":1,"name":"a","gpus":true}', "gpus"),
    ("float count", '{"kind":"job","submit":1,"name":"a","gpus":1.5}', "gpus"),
    ("negative count", '{"kind":"job","submit":1,"name":"a","gpus":-1}', "gpus"),
    ("unknown field", '{"kind":"job","submit":1,"name":"a","gpu":1}', "gpu"),
    ("missing name", '{"kind":"job","submit":1}', "name"),
    ("empty name", '{"kind":"job","submit":1,"name":""}', "name"),
    ("negative submit", '{"kind":"job","submit":-1,"name":"a"}', "submit"),
    ("NaN", '{"kind":"job","submit":NaN,"name":"a"}', "submit"),
    ("milli out of range", '{"kind":"job","submit":1,"name":"a","gpu_milli":1500}', "gpu_milli"),
    ("fraction of two GPUs", '{"kind":"job","submit":1,"name":"a","gpus":2,"gpu_milli":500}', "gpu_milli"),
    ("MIG on two GPUs", '{"kind":"job","submit":1,"name":"a","gpus":2,"mig":"1g.10gb"}', "mig"),
    ("unknown MIG profile", '{"kind":"job","submit":1,"name":"a","mig":"9g.99gb"}', "mig"),
    ("unknown priority", '{"kind":"job","submit":1,"name":"a","priority":"vip"}', "priority"),
    ("label not a string", '{"kind":"job","submit":1,"name":"a","labels":{"x":1}}', "labels.x"),
    ("gang of zero", '{"kind":"job","submit":1,"name":"a","gang_size":0}', "gang_size"),
    ("zero checkpoint", '{"kind":"job","submit":1,"name":"a","checkpoint_interval_s":0}', "checkpoint_interval_s"),
    ("gpu_types not a list", '{"kind":"job","submit":1,"name":"a","gpu_types":"T4"}', "gpu_types"),
    ("unknown kind", '{"kind":"jobs","submit":1,"name":"a"}', "kind"),
    ("no kind", '{"submit":1,"name":"a"}', "kind"),
    ("cluster after jobs", '{"kind":"cluster","nodes":[]}', "kind"),
    ("not JSON", '{"kind":"job",', None),
    ("not an object", "[1, 2]", None),
]


@pytest.mark.parametrize(("name", "bad", "field"), BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_bad_job_lines_name_file_line_and_field(tmp_path: Path, name: str, bad: str, field: str | None) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"kind":"job","submit":0,"name":"ok"}\n\n' + bad + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as info:
        load_jsonl(path)
    err = info.value
    assert (err.source, err.line, err.field) == (str(path), 3, field)
    assert str(err).startswith(f"{path}:3")
    if field is not None:
        assert f"field '{field}'" in str(err)


BAD_CLUSTERS: list[tuple[str, str, str]] = [
    ("bad capacity type", '{"kind":"cluster","nodes":[{"name":"n","capacity_type":"cheap"}]}', "nodes.0.capacity_type"),
    (
        "negative gpus",
        '{"kind":"cluster","nodes":[{"name":"a"},{"name":"b"},{"name":"c","gpu_count":-1}]}',
        "nodes.2.gpu_count",
    ),
    (
        "pool missing field",
        '{"kind":"cluster","pools":[{"name":"p","gpu_model":"T4","gpus_per_node":1}]}',
        "pools.0.cpu_milli",
    ),
    ("unknown cluster field", '{"kind":"cluster","nodez":[]}', "nodez"),
    ("negative price", '{"kind":"cluster","nodes":[{"name":"n","hourly_price_usd":-1}]}', "nodes.0.hourly_price_usd"),
]


@pytest.mark.parametrize(("name", "bad", "field"), BAD_CLUSTERS, ids=[c[0] for c in BAD_CLUSTERS])
def test_bad_cluster_lines(name: str, bad: str, field: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_jsonl([bad], source="c.jsonl")
    assert (info.value.source, info.value.line, info.value.field) == ("c.jsonl", 1, field)


def test_several_errors_are_all_mentioned() -> None:
    with pytest.raises(TraceError, match=r"and 2 more: team, gpus"):
        parse_jsonl(['{"kind":"job","submit":"x","name":"a","gpus":"2","team":3}'])


# --- property: any job spec survives a round trip ------------------------------------------------

_MIG_NAMES = sorted({p.name for m in GPU_MODELS.values() for p in m.mig_profiles})
_text = st.text(max_size=12)
_seconds = st.floats(min_value=0, max_value=MAX_TIME_S, allow_nan=False, allow_infinity=False)  # sim/limits.py
_positive = st.floats(min_value=1e-3, max_value=MAX_TIME_S, allow_nan=False, allow_infinity=False)


@st.composite
def gpu_requests(draw: st.DrawFn) -> GpuRequest:
    kind = draw(st.sampled_from(["whole", "fraction", "mig", "mig-odd"]))
    if kind == "whole":
        return GpuRequest(draw(st.integers(0, 16)))
    if kind == "fraction":
        return GpuRequest(1, draw(st.integers(1, 999)))
    name = draw(st.sampled_from(_MIG_NAMES))
    profile = mig_profile(name)
    assert profile is not None
    milli = profile.milli if kind == "mig" else draw(st.integers(1, 1000))
    return GpuRequest(1, milli, name)


job_specs = st.builds(
    JobSpec,
    name=st.text(min_size=1, max_size=20),
    team=_text,
    project=_text,
    namespace=_text,
    experiment=_text,
    labels=st.dictionaries(_text, _text, max_size=3),
    priority_class=st.sampled_from(list(PRIORITY_CLASSES)),
    gpu=gpu_requests(),
    gpu_types=st.frozensets(st.sampled_from(list(GPU_MODELS)), max_size=3),
    min_gpu_memory_gib=st.floats(min_value=0, max_value=1e4, allow_nan=False),
    cpu_milli=st.integers(0, MAX_CPU_MILLI),
    memory_mib=st.integers(0, MAX_MEMORY_MIB),
    preemptible=st.booleans(),
    checkpoint_interval_s=st.none() | _positive,
    max_runtime_s=st.none() | _positive,
    estimated_runtime_s=st.none() | _seconds,
    gang_size=st.integers(1, 64),
    duration_s=st.none() | _seconds,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_seconds, job_specs), max_size=8))
def test_any_job_spec_round_trips(jobs: list[tuple[float, JobSpec]]) -> None:
    trace = Trace("prop", [TraceJob(t, spec) for t, spec in jobs])
    back = parse_jsonl(list(iter_jsonl(trace)), source="mem")
    assert back.jobs == trace.jobs
    assert back.name == "prop"


def test_writer_output_is_strict_json() -> None:
    for line in iter_jsonl(sample_trace()):
        assert not re.search(r"NaN|Infinity", line)
        json.loads(line)
