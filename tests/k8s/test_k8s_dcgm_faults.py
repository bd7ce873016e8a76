"""Issue 22, observation 10, the parser's part: what dcgm-exporter really prints beyond the happy
path. Its main branch spells the node label ``hostname`` (3.x: ``Hostname``): the parser refused the
whole scrape (silent zero telemetry). DCGM's blank sentinels (a field not supported, not found or
not permitted: ``DCGM_INT64_BLANK`` 0x7ffffffffffffff0 .. +3, ``DCGM_INT32_BLANK`` 0x7ffffff0 .. +3,
``DCGM_FP64_BLANK`` 2**47 .. +3) were read as values. Each case failed before.
"""

from __future__ import annotations

import pytest

from gpufleet.k8s.adapter.dcgm import parse_dcgm

_L = 'gpu="0",UUID="GPU-1",modelName="NVIDIA A100-SXM4-80GB",{host}="node-a"'


def _scrape(host: str = "Hostname", util: str = "37", used: str = "1024", free: str = "80000") -> str:
    labels = _L.format(host=host)
    return (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}\n"
        f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}\n"
        f"DCGM_FI_DEV_FB_FREE{{{labels}}} {free}\n"
    )


@pytest.mark.parametrize("spelling", ["Hostname", "hostname"])
def test_both_spellings_of_the_node_label(spelling: str) -> None:
    (s,) = parse_dcgm(_scrape(spelling), 100.0)
    assert (s.node, s.gpu_index, s.utilization_pct, s.memory_used_mib) == ("node-a", 0, 37.0, 1024.0)


SENTINELS = {
    "int64 blank": "9223372036854775792",
    "int64 not supported": "9223372036854775794",
    "int32 blank": "2147483632",
    "int32 not permitted": "2147483635",
    "fp64 blank": "140737488355328",
    "fp64 not supported": "140737488355330",
}


@pytest.mark.parametrize("case", list(SENTINELS))
def test_a_blank_sentinel_is_missing_not_a_value(case: str) -> None:
    (s,) = parse_dcgm(_scrape(util=SENTINELS[case]), 100.0)
    assert s.utilization_pct == 0.0  # no reading: not 100 % (nor 9e18 %)
    (s,) = parse_dcgm(_scrape(used=SENTINELS[case]), 100.0)
    assert s.memory_used_mib == 0.0 and s.memory_total_mib == 80000.0
