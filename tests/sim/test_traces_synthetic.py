"""The synthetic generator: seeded, shaped as configured."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gpufleet.errors import InputError
from gpufleet.model.gpu import GPU_MODELS, MILLI
from gpufleet.sim.traces.synthetic import SyntheticOptions, generate_synthetic


def test_same_seed_same_trace() -> None:
    opts = SyntheticOptions(num_jobs=500, seed=42, runtime_estimate="noisy")
    a, b = (
        generate_synthetic(opts),
        generate_synthetic(SyntheticOptions(num_jobs=500, seed=42, runtime_estimate="noisy")),
    )
    assert a.jobs == b.jobs
    assert a.name == "synthetic-42"
    c = generate_synthetic(SyntheticOptions(num_jobs=500, seed=43, runtime_estimate="noisy"))
    assert c.jobs != a.jobs


def test_arrivals_are_poisson_at_the_rate() -> None:
    trace = generate_synthetic(SyntheticOptions(num_jobs=5_000, arrival_rate_per_hour=360.0, seed=1))
    t = np.array([j.submit_time for j in trace.jobs])
    assert len(t) == 5_000 and np.all(np.diff(t) >= 0) and t[0] > 0
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(10.0, rel=0.05)  # 3600 / 360
    assert gaps.std() == pytest.approx(10.0, rel=0.1)  # exponential: std = mean


def test_durations_are_lognormal_and_clipped() -> None:
    opts = SyntheticOptions(num_jobs=5_000, duration_median_s=600.0, duration_sigma=1.0, duration_max_s=3_600.0)
    d = np.array([j.spec.duration_s for j in generate_synthetic(opts).jobs], dtype=float)
    assert np.median(d) == pytest.approx(600.0, rel=0.1)
    assert d.min() >= 60.0 and d.max() <= 3_600.0
    assert all(j.spec.estimated_runtime_s == j.spec.duration_s for j in generate_synthetic(opts).jobs)


def test_request_mix_and_shapes() -> None:
    trace = generate_synthetic(SyntheticOptions(num_jobs=4_000, seed=3))
    kinds = Counter(j.spec.labels["synthetic/kind"] for j in trace.jobs)
    assert set(kinds) == {"single", "multi", "gang", "fractional", "mig", "cpu"}
    assert kinds["single"] / 4_000 == pytest.approx(0.45, abs=0.04)
    for j in trace.jobs:
        s, kind = j.spec, j.spec.labels["synthetic/kind"]
        if kind == "single":
            assert (s.gpu.count, s.gpu.milli, s.gang_size) == (1, MILLI, 1)
        elif kind == "multi":
            assert s.gpu.count in (2, 4, 8) and s.gang_size == 1
        elif kind == "gang":
            assert s.gpu.count == 8 and s.gang_size in (2, 4)
        elif kind == "fractional":
            assert s.gpu.is_fractional and s.gpu.milli in (250, 500)
        elif kind == "mig":
            assert s.gpu.is_mig and s.gpu_types
            assert all(GPU_MODELS[t].mig_profile(s.gpu.mig_profile or "") for t in s.gpu_types)
        else:
            assert s.gpu.count == 0 and s.cpu_milli == 4_000
        assert s.team in {"vision", "nlp", "speech", "research"} and s.project.startswith(s.team)
        assert s.priority_class in {"low", "normal", "high"}
        assert s.preemptible == (s.checkpoint_interval_s is not None)


def test_fractions_follow_the_options() -> None:
    opts = SyntheticOptions(
        num_jobs=4_000,
        preemptible_fraction=0.5,
        gpu_type_fraction=1.0,
        gpu_types=("L4",),
        request_mix={"single": 1.0},
        teams={"a": 1.0, "b": 3.0},
        priorities={"high": 1.0},
    )
    trace = generate_synthetic(opts)
    assert sum(j.spec.preemptible for j in trace.jobs) / 4_000 == pytest.approx(0.5, abs=0.03)
    assert all(j.spec.gpu_types == frozenset({"L4"}) for j in trace.jobs)
    assert Counter(j.spec.team for j in trace.jobs)["b"] / 4_000 == pytest.approx(0.75, abs=0.03)
    assert {j.spec.priority_class for j in trace.jobs} == {"high"}


def test_changing_the_mix_does_not_move_arrivals() -> None:
    a = generate_synthetic(SyntheticOptions(num_jobs=300, seed=9))
    b = generate_synthetic(SyntheticOptions(num_jobs=300, seed=9, request_mix={"mig": 1.0}, preemptible_fraction=1.0))
    assert [j.submit_time for j in a.jobs] == [j.submit_time for j in b.jobs]
    assert [j.spec.duration_s for j in a.jobs] == [j.spec.duration_s for j in b.jobs]


def test_zero_jobs() -> None:
    assert len(generate_synthetic(SyntheticOptions(num_jobs=0))) == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_jobs": -1}, "num_jobs"),
        ({"arrival_rate_per_hour": 0.0}, "arrival_rate_per_hour"),
        ({"request_mix": {"huge": 1.0}}, "request_mix"),
        ({"request_mix": {"single": 0.0}}, "request_mix"),
        ({"teams": {}}, "teams"),
        ({"priorities": {"vip": 1.0}}, "priorities"),
        ({"mig_profiles": ("5g.50gb",)}, "mig_profiles"),
        ({"fractional_milli": (1000,)}, "fractional_milli"),
        ({"preemptible_fraction": -0.1}, "preemptible_fraction"),
        ({"gpu_types": (), "gpu_type_fraction": 0.5}, "gpu_types"),
    ],
)
def test_bad_options(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as info:
        SyntheticOptions(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
