"""openb loaders: packaged files, both layouts, canonical GPU names, bad rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.errors import TraceError
from gpufleet.io.traces import load_openb_nodes, load_openb_pods, load_openb_trace

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def test_packaged_gpu_node_list() -> None:
    nodes = load_openb_nodes()
    assert len(nodes) == 1213
    assert nodes.total_gpus == 6212
    assert {"V100-16GB", "V100-32GB", "T4", "G2"} <= set(nodes.model)


def test_packaged_default_pods_and_trace() -> None:
    pods = load_openb_pods()
    assert len(pods) == 8152
    assert int((pods.num_gpu == 0).sum()) == 1088
    trace = load_openb_trace("default")
    assert len(trace) == 8152 and len(trace.nodes) == 1213
    job = trace.jobs[0].spec
    assert job.duration_s is not None and job.duration_s >= 0


def test_multigpu_five_column_layout() -> None:
    pods = load_openb_pods(trace="multigpu20")
    assert len(pods) == 8324
    assert all(s == () for s in pods.gpu_spec)
    assert np.isnan(pods.creation_time).all()
    spec = pods.spec(0)
    assert spec.duration_s is None and spec.team == "openb"


def test_gpu_spec_is_canonicalized_to_match_node_types() -> None:
    pods = load_openb_pods(trace="gpuspec20")
    nodes = load_openb_nodes()
    constrained = [s for s in pods.gpu_spec if s]
    assert constrained
    node_types = set(nodes.model)
    assert all(set(s) <= node_types for s in constrained)
    assert any("V100-32GB" in s for s in constrained)


@pytest.mark.parametrize(
    ("row", "line", "field"),
    [
        ("p0,abc,1,1,1000,,LS,Running,0,1,0", 2, "cpu_milli"),
        ("p0,1000,1,2,500,,LS,Running,0,1,0", 2, "num_gpu"),
        ("p0,1000,1,1,1500,,LS,Running,0,1,0", 2, "gpu_milli"),
        ("p0,1000,1,0,500,,LS,Running,0,1,0", 2, "gpu_milli"),
        ("p0,1000,1,1,1000,,LS,Running,10,5,0", 2, "deletion_time"),
        ("p0,1000,1,1,1000,,LS,Running,x,5,0", 2, "creation_time"),
        ("p0,-5,1,1,1000,,LS,Running,0,5,0", 2, "cpu_milli"),
    ],
)
def test_bad_pod_rows_name_file_line_and_field(tmp_path: Path, row: str, line: int, field: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert err.value.line == line and err.value.field == field and err.value.source == str(path)
    assert str(path) in str(err.value)


def test_bad_header_and_column_count(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert err.value.line == 1
    path.write_text(HEADER + "p0,1000,1\n")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert err.value.line == 2


def test_bad_node_rows(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,T4\nn0,1000,1024,2,T4\n")
    with pytest.raises(TraceError) as err:
        load_openb_nodes(path)
    assert err.value.line == 3 and err.value.field == "sn"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n")
    with pytest.raises(TraceError) as err:
        load_openb_nodes(path)
    assert err.value.field == "model"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not found"):
        load_openb_pods(tmp_path / "nope.csv")
