"""The GPU-share conversions that lived outside :mod:`gpufleet.model.share` until issue 21 (the MIG
fit check of the GPU stack, the snapshot's free milli of a MIG GPU, milli ↔ GPU-equivalents, replicas
↔ GPUs, whole GPUs and floats in share units): each is now one function there, and each gives exactly
what the inline arithmetic it replaced gave (the recorded decisions stay byte-identical).

tests/project/test_layering.py keeps the arithmetic there; tests/scheduling/test_gpu_share.py pins
the conversions that were already home.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.cost.ledger import LedgerError, UsageSegment
from gpufleet.model.gpu import GPU_MODELS, MIG_COMPUTE_SLICES, MILLI, MigProfile, gpu_model
from gpufleet.model.job import GpuRequest
from gpufleet.model.node import CapacityType
from gpufleet.model.share import (
    SHARE_UNITS,
    advertised_gpus,
    gpu_units,
    gpus_milli,
    gpus_units,
    mig_fit_problem,
    mig_milli,
    milli_gpus,
    milli_units,
    replicas_gpus,
    request_units,
    units_fraction,
    whole_gpus,
)


def _profiles(model: str, *names: str) -> list[MigProfile]:
    m = gpu_model(model)
    out = [m.mig_profile(n) for n in names]
    assert all(p is not None for p in out)
    return [p for p in out if p is not None]


# -- MIG ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "names", "problem"),
    [
        ("A100-80GB", ("3g.40gb", "4g.40gb"), None),
        ("A100-80GB", ("1g.10gb",) * 7, None),
        ("A100-80GB", ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"), None),
        ("A100-80GB", ("4g.40gb", "4g.40gb"), "8 compute slices, the GPU has 7"),
        ("A100-80GB", ("1g.10gb",) * 8, "8 compute slices, the GPU has 7"),
        (
            "A100-80GB",
            ("3g.40gb", "3g.40gb", "1g.10gb"),
            "no placement of their memory slices (8, each profile at its allowed offsets)",
        ),
        ("H200", ("7g.141gb",), None),
        ("H100-80GB", (), None),
    ],
)
def test_mig_fit_problem(model: str, names: tuple[str, ...], problem: str | None) -> None:
    """The GPU stack's check of a mig-parted entry (k8s/gpustack/sharing.py), now model.share's."""
    assert mig_fit_problem(_profiles(model, *names)) == problem


@pytest.mark.parametrize("used", range(MIG_COMPUTE_SLICES + 1))
def test_a_mig_gpu_frees_what_its_slices_do_not_take(used: int) -> None:
    """The snapshot's free milli of a MIG GPU with ``used`` compute slices in use: as it computed it."""
    assert MILLI - mig_milli(used) == MILLI - round(MILLI * used / MIG_COMPUTE_SLICES)
    assert MILLI - mig_milli(used) == mig_milli(MIG_COMPUTE_SLICES - used)  # 1000 k / 7 is never a half


def test_every_known_profile_share_is_its_slices_over_seven() -> None:
    """cost/recommend.py weighs a profile by ``MigProfile.share`` (it divided by 7 itself before)."""
    for m in GPU_MODELS.values():
        for p in m.mig_profiles:
            assert p.share == p.compute_slices / MIG_COMPUTE_SLICES and p.milli == mig_milli(p.compute_slices)


# -- milli and GPU-equivalents -------------------------------------------------------------------------


@given(st.integers(0, 2**40))
def test_milli_gpus_is_the_division_it_replaced(milli: int) -> None:
    assert milli_gpus(milli) == milli / 1000.0 == milli / MILLI
    assert milli_gpus(float(milli)) == float(milli) / 1000.0
    assert gpus_milli(milli_gpus(milli)) == milli  # exact round trip for whole milli (below 2**53)


@given(st.floats(0.0, 1e6, allow_nan=False))
def test_gpus_milli_rounds_like_the_quotas_did(gpus: float) -> None:
    assert gpus_milli(gpus) == round(gpus * MILLI)


@pytest.mark.parametrize("tenths", [k / 10 for k in range(1, 10)])
def test_a_recommended_fraction_reads_as_before(tenths: float) -> None:
    """cost/recommend.py truncated ``tenths * 1000``; rounding gives the same milli for every tenth."""
    assert gpus_milli(tenths) == int(tenths * 1000)


@given(st.integers(0, 10**6))
def test_whole_gpus(milli: int) -> None:
    expected = milli // MILLI if milli % MILLI == 0 else None
    assert whole_gpus(milli) == expected


# -- replicas ------------------------------------------------------------------------------------------


@given(st.integers(0, 10**4), st.integers(-1, 64))
def test_replicas_and_gpus(k: int, replicas: int) -> None:
    r = max(1, replicas)
    assert replicas_gpus(k, replicas) == math.ceil(k / r) == -(-k // r)
    assert advertised_gpus(k, replicas) == k // r
    assert advertised_gpus(k, replicas) * r <= k < (advertised_gpus(k, replicas) + 1) * r


# -- share units ---------------------------------------------------------------------------------------


@given(st.integers(0, 1024))
def test_gpu_units_are_whole_gpus_requests(count: int) -> None:
    assert gpu_units(count) == count * 7000 == count * SHARE_UNITS
    if count:
        assert gpu_units(count) == request_units(GpuRequest(count), "A100-80GB")


@given(st.integers(0, 64 * SHARE_UNITS))
def test_a_float_share_reads_back_its_units(units: int) -> None:
    assert gpus_units(float(units_fraction(units))) == units


@pytest.mark.parametrize("share", [1 / 3, 0.0001, math.nan, math.inf, -math.inf])
def test_a_float_share_that_is_no_whole_number_of_units(share: float) -> None:
    assert gpus_units(share) is None


def test_the_ledger_reads_float_shares_through_model_share() -> None:
    """UsageSegment takes a float share when it is a whole number of units, as before, and refuses the rest."""

    def seg(share: float | Fraction) -> UsageSegment:  # a float where a Fraction is typed: the ledger converts it
        return UsageSegment(
            "j", "t", "p", "ns", "e", {}, "n", "pool", "L4", CapacityType.ON_DEMAND, share, 0, 0, 1.0, 0.0, 1.0
        )

    assert seg(0.25).gpu_share == Fraction(1, 4)
    assert seg(milli_gpus(143)).gpu_share == units_fraction(milli_units(143))
    assert seg(Fraction(1, 7)).gpu_share == Fraction(1, 7)
    with pytest.raises(LedgerError, match="not a whole number of 1/7000 GPU"):
        seg(1 / 3)
    with pytest.raises(LedgerError, match="must be finite"):
        seg(math.nan)
