"""Philly loader: the real file, the mapping of rows to specs, options, and bad rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpufleet.errors import InputError, TraceError
from gpufleet.io.traces import load_philly
from gpufleet.sim.traces.philly import PhillyOptions, gang_shape
from tests.support.paths import SHARED

PHILLY = SHARED / "data" / "philly" / "philly.csv"
HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "philly.csv"
    path.write_text(header + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


SMALL = [
    "2017-10-09 07:01:55,66.0,1,66.0,vc-a",
    "2017-10-09 07:00:00,100.0,12,1200.0,vc-b",
    "2017-10-09 08:00:00,5.5,20,110.0,vc-a",
    "2017-10-09 07:00:30,7200.0,8,57600.0,vc-c",
]


@pytest.mark.skipif(not PHILLY.exists(), reason="shared Philly data not present")
def test_real_file_loads_every_row() -> None:
    trace = load_philly(PHILLY)
    assert len(trace) == 82_247  # 82,248 lines with the header
    times = [j.submit_time for j in trace.jobs]
    assert times[0] == 0.0 and times == sorted(times)
    assert len({j.spec.team for j in trace.jobs}) == 15
    shapes = Counter((j.spec.gang_size, j.spec.gpu.count) for j in trace.jobs)
    assert shapes[(16, 8)] == 3  # 128-GPU jobs
    assert shapes[(2, 6)] == 7  # 12-GPU jobs
    # Every split of the shipped file is exact: the GPUs asked for are the GPUs in the row.
    for j in trace.jobs:
        assert j.spec.gang_size * j.spec.gpu.count == int(j.spec.labels["philly/num_gpus"])
        assert "philly/rounded" not in j.spec.labels
        assert j.spec.estimated_runtime_s == j.spec.duration_s


def test_rows_become_specs(tmp_path: Path) -> None:
    trace = load_philly(write(tmp_path, SMALL), PhillyOptions(cpu_milli_per_gpu=2000, memory_mib_per_gpu=1024))
    by_name = {j.spec.name: j for j in trace.jobs}
    assert [j.spec.name for j in trace.jobs] == ["philly-1", "philly-3", "philly-0", "philly-2"]
    first = by_name["philly-0"]
    assert first.submit_time == 115.0  # 07:01:55 - 07:00:00
    assert first.spec.team == "vc-a"
    assert first.spec.duration_s == 66.0
    assert (first.spec.gpu.count, first.spec.gang_size) == (1, 1)
    assert (first.spec.cpu_milli, first.spec.memory_mib) == (2000, 1024)
    twelve = by_name["philly-1"].spec
    assert (twelve.gang_size, twelve.gpu.count, twelve.cpu_milli) == (2, 6, 12000)
    eight = by_name["philly-3"].spec
    assert (eight.gang_size, eight.gpu.count) == (1, 8)
    twenty = by_name["philly-2"].spec  # 3 pods; 7 GPUs each = 21 >= 20, marked
    assert (twenty.gang_size, twenty.gpu.count) == (3, 7)
    assert twenty.labels == {"philly/num_gpus": "20", "philly/rounded": "true"}
    assert all(not j.spec.preemptible and j.spec.checkpoint_interval_s is None for j in trace.jobs)


@pytest.mark.parametrize(
    ("gpus", "per_node", "shape"),
    [(1, 8, (1, 1)), (8, 8, (1, 8)), (9, 8, (2, 5)), (16, 8, (2, 8)), (24, 8, (3, 8)), (20, 8, (3, 7)), (4, 2, (2, 2))],
)
def test_gang_shape(gpus: int, per_node: int, shape: tuple[int, int]) -> None:
    pods, per_pod = gang_shape(gpus, per_node)
    assert (pods, per_pod) == shape
    assert per_pod <= per_node and pods * per_pod - gpus < pods


def test_noisy_estimates_are_seeded_and_independent_of_preemption(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL * 50)
    noisy = PhillyOptions(runtime_estimate="noisy", seed=7)
    a, b = load_philly(path, noisy), load_philly(path, noisy)
    assert [j.spec.estimated_runtime_s for j in a.jobs] == [j.spec.estimated_runtime_s for j in b.jobs]
    c = load_philly(path, PhillyOptions(runtime_estimate="noisy", seed=8))
    assert [j.spec.estimated_runtime_s for j in a.jobs] != [j.spec.estimated_runtime_s for j in c.jobs]
    d = load_philly(path, PhillyOptions(runtime_estimate="noisy", seed=7, preemptible_fraction=0.5))
    assert [j.spec.estimated_runtime_s for j in a.jobs] == [j.spec.estimated_runtime_s for j in d.jobs]
    floor = load_philly(path, PhillyOptions(runtime_estimate="noisy", estimate_never_under=True))
    assert all(j.spec.estimated_runtime_s >= j.spec.duration_s for j in floor.jobs)  # type: ignore[operator]
    none = load_philly(path, PhillyOptions(runtime_estimate="none"))
    assert all(j.spec.estimated_runtime_s is None for j in none.jobs)


def test_preemptible_fraction_and_checkpoints(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL * 250)
    trace = load_philly(path, PhillyOptions(preemptible_fraction=0.4, checkpoint_interval_s=600.0, seed=1))
    pre = [j.spec for j in trace.jobs if j.spec.preemptible]
    assert 0.3 < len(pre) / len(trace) < 0.5
    assert all(s.checkpoint_interval_s == 600.0 for s in pre)
    assert all(j.spec.checkpoint_interval_s is None for j in trace.jobs if not j.spec.preemptible)
    again = load_philly(path, PhillyOptions(preemptible_fraction=0.4, checkpoint_interval_s=600.0, seed=1))
    assert [j.spec.preemptible for j in again.jobs] == [j.spec.preemptible for j in trace.jobs]


def test_max_jobs_keeps_the_earliest(tmp_path: Path) -> None:
    trace = load_philly(write(tmp_path, SMALL), PhillyOptions(max_jobs=2, max_runtime_factor=2.0))
    assert [j.spec.name for j in trace.jobs] == ["philly-1", "philly-3"]
    assert [j.spec.max_runtime_s for j in trace.jobs] == [200.0, 14400.0]


def test_header_columns_may_be_reordered(tmp_path: Path) -> None:
    path = write(tmp_path, ["vc,1,2017-10-09 07:00:00,10,10"], header="cluster,num_gpus,timestamp,duration,gpu_time\n")
    (job,) = load_philly(path).jobs
    assert (job.spec.team, job.spec.gpu.count, job.spec.duration_s) == ("vc", 1, 10.0)


GOOD = "2017-10-09 07:00:00,10.0,1,10.0,vc"

# name, file content after the header (or a whole file for header cases), line, field
BAD_ROWS: list[tuple[str, str, int | None, str | None]] = [
    ("non-numeric duration", f"{GOOD}\n2017-10-09 07:00:00,abc,1,10.0,vc\n", 3, "duration"),
    ("negative duration", "2017-10-09 07:00:00,-5,1,10.0,vc\n", 2, "duration"),
    ("nan duration", "2017-10-09 07:00:00,nan,1,10.0,vc\n", 2, "duration"),
    ("empty duration", "2017-10-09 07:00:00,,1,10.0,vc\n", 2, "duration"),
    ("negative GPUs", f"{GOOD}\n{GOOD}\n2017-10-09 07:00:00,10.0,-2,10.0,vc\n", 4, "num_gpus"),
    ("zero GPUs", "2017-10-09 07:00:00,10.0,0,10.0,vc\n", 2, "num_gpus"),
    ("fractional GPUs", "2017-10-09 07:00:00,10.0,1.5,10.0,vc\n", 2, "num_gpus"),
    ("bad timestamp", "2017-13-09 07:00:00,10.0,1,10.0,vc\n", 2, "timestamp"),
    ("timestamp without time", "2017-10-09,10.0,1,10.0,vc\n", 2, "timestamp"),
    ("timestamp garbage", "yesterday,10.0,1,10.0,vc\n", 2, "timestamp"),
    ("bad gpu_time", "2017-10-09 07:00:00,10.0,1,x,vc\n", 2, "gpu_time"),
    ("empty cluster", "2017-10-09 07:00:00,10.0,1,10.0,\n", 2, "cluster"),
    ("short row", f"{GOOD}\n\n2017-10-09 07:00:00,10.0\n", 4, "num_gpus"),
]

BAD_FILES: list[tuple[str, str, int | None, str | None]] = [
    ("missing column", "timestamp,duration,gpu_time,cluster\n2017-10-09 07:00:00,1,1,vc\n", 1, "num_gpus"),
    ("empty file", "", 1, None),
    ("header only", HEADER, None, None),
]


@pytest.mark.parametrize(("name", "body", "line", "field"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_bad_rows_name_file_line_and_field(
    tmp_path: Path, name: str, body: str, line: int | None, field: str | None
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + body, encoding="utf-8")
    with pytest.raises(TraceError) as info:
        load_philly(path)
    err = info.value
    assert (err.source, err.line, err.field) == (str(path), line, field)
    assert f"{path}:{line}" in str(err) and f"field '{field}'" in str(err)


@pytest.mark.parametrize(("name", "text", "line", "field"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_files(tmp_path: Path, name: str, text: str, line: int | None, field: str | None) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as info:
        load_philly(path)
    assert (info.value.source, info.value.line, info.value.field) == (str(path), line, field)
    assert str(path) in str(info.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_philly(tmp_path / "nope.csv")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"preemptible_fraction": 1.5}, "preemptible_fraction"),
        ({"priority_class": "vip"}, "priority_class"),
        ({"checkpoint_interval_s": 0.0}, "checkpoint_interval_s"),
        ({"estimate_bias": 0.0}, "estimate_bias"),
    ],
)
def test_bad_options(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as info:
        PhillyOptions(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
