"""Declared-GPU specs (the ``gpus`` setting): a scenario table of good and bad specs."""

from __future__ import annotations

import pytest

from gpufleet.backends.gpuspec import DeclaredGpus, parse_gpu_spec
from gpufleet.errors import ConfigError, InputError


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(None, DeclaredGpus(), id="none"),
        pytest.param("", DeclaredGpus(), id="empty"),
        pytest.param("  0 ", DeclaredGpus(), id="zero"),
        pytest.param("8xA100-80GB", DeclaredGpus(8, "A100-80GB"), id="count-x-model"),
        pytest.param("A100-80GB", DeclaredGpus(1, "A100-80GB"), id="model-alone-is-one"),
        pytest.param("2 x h100", DeclaredGpus(2, "H100-80GB"), id="spaces-alias-lowercase"),
        pytest.param("4X L4", DeclaredGpus(4, "L4"), id="capital-x"),
        pytest.param("4*T4", DeclaredGpus(4, "T4"), id="star"),
        pytest.param("8xA100-80GB:mig", DeclaredGpus(8, "A100-80GB", mig=True), id="mig"),
        pytest.param("1xH100:MIG", DeclaredGpus(1, "H100-80GB", mig=True), id="mig-uppercase"),
        pytest.param("A100", DeclaredGpus(1, "A100-40GB"), id="alias"),
    ],
)
def test_good_specs(spec: str | None, expected: DeclaredGpus) -> None:
    assert parse_gpu_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "token"),
    [
        pytest.param("8xA100-80G", "'A100-80G'", id="unknown-model"),
        pytest.param("8xRTX 4090", "'RTX 4090'", id="space-in-model"),
        pytest.param("8", "'8'", id="count-without-model"),
        pytest.param("8x", "'8x'", id="x-without-model"),
        pytest.param("0xA100-80GB", "'0'", id="zero-count"),
        pytest.param("100xA100-80GB", "'100'", id="too-many"),
        pytest.param("8xA100-80GB:fast", "':fast'", id="unknown-option"),
        pytest.param("2xL4:mig", "'L4'", id="mig-unsupported"),
        pytest.param("-1xA100", "'-1xA100'", id="negative"),
    ],
)
def test_bad_specs_name_field_and_token(spec: str, token: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_gpu_spec(spec)
    err = info.value
    assert isinstance(err, InputError) and err.field == "gpus"
    assert "field 'gpus'" in str(err) and token in str(err)


def test_field_name_is_configurable() -> None:
    with pytest.raises(ConfigError, match=r"field 'server\.gpus'"):
        parse_gpu_spec("nope", field="server.gpus")


def test_memory_comes_from_the_model() -> None:
    assert parse_gpu_spec("2xA100-80GB").memory_gib == 80
    assert parse_gpu_spec("0").memory_gib == 0
