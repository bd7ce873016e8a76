"""NVML access: the pure name mapping (a table of real NVML names), the no-driver path, and the
backend's use of NVML data (MIG device matching, per-job GPU memory) through a stand-in NVML
library (the only fake here: this machine has no GPU; the processes are real)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.base import BackendEvent, Capability, LaunchRequest
from gpufleet.backends.local import LocalBackend
from gpufleet.errors import BackendError
from gpufleet.model.job import PodPlacement
from gpufleet.model.node import SharingMode
from gpufleet.telemetry.nvml import Nvml, map_nvml_name, mig_profile_from_name, placement_mask

GIB = 1024**3

SINGLE_USER = AccountPolicy(jobs_as_server=True)  # CI runs as root: jobs run as the test's own user


@pytest.mark.parametrize(
    ("nvml_name", "memory_mib", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", 81920, ("A100-80GB", 80)),
        ("NVIDIA A100-SXM4-40GB", 40960, ("A100-40GB", 40)),
        ("NVIDIA A100-PCIE-40GB", 40960, ("A100-40GB", 40)),
        ("NVIDIA A100 80GB PCIe", 81920, ("A100-80GB", 80)),
        ("NVIDIA A100-SXM4", 40536, ("A100-40GB", 40)),  # no size in the name: memory decides
        ("NVIDIA H100 80GB HBM3", 81559, ("H100-80GB", 80)),
        ("NVIDIA H100 PCIe", 81559, ("H100-80GB", 80)),
        ("NVIDIA H100 NVL", 95830, ("H100-NVL", 93.6)),  # 94 GB: not our H100-80GB
        ("NVIDIA H200", 143771, ("H200", 141)),
        ("NVIDIA L40S", 46068, ("L40S", 48)),
        ("NVIDIA A10G", 23028, ("A10G", 24)),
        ("NVIDIA A10", 23028, ("A10", 24)),
        ("NVIDIA L4", 23034, ("L4", 24)),
        ("Tesla T4", 15360, ("T4", 16)),
        ("Tesla V100-SXM2-16GB", 16160, ("V100-16GB", 16)),
        ("Tesla V100-SXM2-32GB", 32510, ("V100-32GB", 32)),
        ("Tesla V100-PCIE-32GB", 32510, ("V100-32GB", 32)),
        ("Tesla P100-PCIE-16GB", 16280, ("P100", 16)),
        ("NVIDIA GeForce RTX 4090", 24564, ("RTX-4090", 24.0)),
        ("", 0, ("unknown", 0)),
    ],
)
def test_map_nvml_name(nvml_name: str, memory_mib: float, expected: tuple[str, float]) -> None:
    assert map_nvml_name(nvml_name, memory_mib) == expected


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
        ("NVIDIA A100-SXM4-80GB", ""),
    ],
)
def test_mig_profile_from_name(name: str, profile: str) -> None:
    assert mig_profile_from_name(name) == profile


def test_placement_mask() -> None:
    assert [placement_mask(0, 1), placement_mask(4, 4), placement_mask(6, 2)] == [0x01, 0xF0, 0xC0]
    assert placement_mask(7, 2) == 0 and placement_mask(0, 0) == 0


# ---- the no-driver path -----------------------------------------------------------------------


def test_nvml_without_driver_is_empty_not_an_error() -> None:
    nvml = Nvml()
    if nvml.available:
        pytest.skip("this machine has an NVIDIA driver")
    assert nvml.gpus() == [] and nvml.samples() == [] and "NVML" in nvml.reason
    nvml.close()


def test_disabled_nvml() -> None:
    nvml = Nvml(enabled=False)
    assert not nvml.available and nvml.gpus() == []


def test_failed_init_is_unavailable() -> None:
    lib = ModuleType("broken_pynvml")

    def init() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    lib.nvmlInit = init  # type: ignore[attr-defined]
    nvml = Nvml(lib)
    assert not nvml.available and "cannot open" in nvml.reason


def test_backend_falls_back_to_declared_gpus(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path, node_name="n", gpus="4xL4", policy=SINGLE_USER, job_root=tmp_path / "jobs")
    [node] = b.inventory()
    assert (node.gpu_model, node.gpu_count, b.gpu_source) == ("L4", 4, "declared")
    if not Nvml().available:
        assert b.telemetry() == []
    b.close()


# ---- a stand-in NVML library --------------------------------------------------------------------


class NVMLError(Exception):
    pass


def fake_pynvml(processes: dict[Any, list[tuple[int, int]]] | None = None) -> ModuleType:
    """Two A100-80GB: GPU 0 whole (55 % busy), GPU 1 in MIG mode with a 1g.10gb at slice 0 and a
    3g.40gb at slices 4-7. ``processes``: device handle → [(pid, bytes)]."""
    procs = processes if processes is not None else {}
    migs = {0: (0, 1, "1g.10gb"), 1: (4, 4, "3g.40gb")}
    lib = ModuleType("fake_pynvml")
    ns: dict[str, Any] = {
        "NVMLError": NVMLError,
        "NVML_DEVICE_MIG_ENABLE": 1,
        "shutdowns": [],
        "nvmlInit": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: ("gpu", i),
    }

    def shutdown() -> None:
        ns["shutdowns"].append(1)

    def name(h: tuple[Any, ...]) -> str | bytes:
        if h[0] == "mig":
            return f"NVIDIA A100-SXM4-80GB MIG {migs[h[2]][2]}"
        return b"NVIDIA A100-SXM4-80GB" if h[1] == 0 else "NVIDIA A100-SXM4-80GB"

    def uuid(h: tuple[Any, ...]) -> str:
        return f"MIG-{h[1]}-{h[2]}" if h[0] == "mig" else f"GPU-{h[1]}"

    def util(h: tuple[Any, ...]) -> SimpleNamespace:
        if h[1] == 1:
            raise NVMLError("Not Supported")
        return SimpleNamespace(gpu=55, memory=10)

    def power(h: tuple[Any, ...]) -> int:
        if h[1] == 1:
            raise NVMLError("Not Supported")
        return 251_500  # milliwatts

    def mig_handle(h: tuple[Any, ...], j: int) -> tuple[Any, ...]:
        if h[1] != 1 or j not in migs:
            raise NVMLError("Not Found")
        return ("mig", 1, j)

    def gi_info(gi: tuple[Any, ...]) -> SimpleNamespace:
        start, size, _ = migs[gi[1]]
        return SimpleNamespace(placement=SimpleNamespace(start=start, size=size))

    ns |= {
        "nvmlShutdown": shutdown,
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetUUID": uuid,
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 * GIB, used=(10 + 5 * h[1]) * GIB, free=0),
        "nvmlDeviceGetUtilizationRates": util,
        "nvmlDeviceGetTemperature": lambda h, sensor: 40 + h[1] if sensor == 0 else 0,
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetMigMode": lambda h: (h[1], h[1]),
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetGpuInstanceId": lambda mh: mh[2],
        "nvmlDeviceGetGpuInstanceById": lambda h, gi_id: ("gi", gi_id),
        "nvmlGpuInstanceGetInfo": gi_info,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [
            SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs.get(h, [])
        ],
    }
    for k, v in ns.items():
        setattr(lib, k, v)
    return lib


def test_nvml_gpus_and_mig_devices() -> None:
    lib = fake_pynvml()
    nvml = Nvml(lib)
    g0, g1 = nvml.gpus()
    assert (g0.uuid, g0.model, g0.memory_gib, g0.mig_enabled, g0.mig_devices) == ("GPU-0", "A100-80GB", 80, False, ())
    assert g1.mig_enabled
    assert [(d.uuid, d.profile, d.mask) for d in g1.mig_devices] == [
        ("MIG-1-0", "1g.10gb", 0x01),
        ("MIG-1-1", "3g.40gb", 0xF0),
    ]
    nvml.close()
    nvml.close()
    assert lib.shutdowns == [1]
    assert nvml.gpus() == []


def test_nvml_samples_fold_mig_processes_and_survive_unsupported_calls() -> None:
    lib = fake_pynvml({("gpu", 0): [(100, GIB)], ("mig", 1, 1): [(200, 2 * GIB)], ("mig", 1, 0): [(200, GIB)]})
    s0, s1 = Nvml(lib).samples()
    assert (s0.utilization_pct, s0.memory_used_mib, s0.memory_total_mib) == (55, 10 * 1024, 80 * 1024)
    assert s0.process_memory_mib == {100: 1024}
    assert s1.utilization_pct == 0  # "not supported" in MIG mode
    assert (s0.temperature_c, s0.power_w, s1.temperature_c, s1.power_w) == (40.0, 251.5, 41.0, None)
    assert s1.process_memory_mib == {200: 3 * 1024}


def test_backend_on_nvml_gpus(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path, node_name="n", nvml_lib=fake_pynvml(), policy=SINGLE_USER, job_root=tmp_path / "jobs")
    [node] = b.inventory()
    assert (node.gpu_model, node.gpu_count, node.sharing, b.gpu_source) == ("A100-80GB", 2, SharingMode.MIG, "nvml")
    assert Capability.MIG in b.capabilities
    b.launch(LaunchRequest("whole", 1, ["env"], (PodPlacement("n", (0,)),)))
    b.launch(LaunchRequest("slice", 1, ["env"], (PodPlacement("n", (1,), milli=429, mig_mask=0xF0),)))
    with pytest.raises(BackendError, match="no MIG device with slice mask 0x02"):
        b.launch(LaunchRequest("missing", 1, ["env"], (PodPlacement("n", (1,), milli=143, mig_mask=0x02),)))
    deadline = time.time() + 5
    events: list[BackendEvent] = []
    while len(events) < 2 and time.time() < deadline:
        events += b.poll()
        time.sleep(0.02)
    assert len(events) == 2
    assert "CUDA_VISIBLE_DEVICES=GPU-0\n" in b.log_path("whole").read_text()
    text = b.log_path("slice").read_text()
    assert "CUDA_VISIBLE_DEVICES=MIG-1-1\n" in text and "GPUFLEET_MIG_PROFILE=3g.40gb\n" in text
    b.close()


def test_telemetry_maps_gpu_processes_to_jobs(tmp_path: Path) -> None:
    """The job's process and its grandchild are found through the shim's session."""
    procs: dict[Any, list[tuple[int, int]]] = {}
    b = LocalBackend(
        tmp_path, node_name="n", nvml_lib=fake_pynvml(procs), policy=SINGLE_USER, job_root=tmp_path / "jobs"
    )
    ready = tmp_path / "grandchild"
    script = f"sleep 5 & echo $! > {ready}; wait"
    h = b.launch(LaunchRequest("train", 1, ["sh", "-c", script], (PodPlacement("n", (0,)),)))
    deadline = time.time() + 5
    while not (ready.exists() and ready.read_text().endswith("\n")) and time.time() < deadline:
        time.sleep(0.01)
    grandchild = int(ready.read_text())
    procs[("gpu", 0)] = [(h.pid, GIB), (grandchild, GIB // 2), (os.getpid(), GIB)]
    s0, s1 = b.telemetry()
    assert s0.job_memory_mib == {"train": 1536}
    assert (s0.node, s0.gpu_index, s0.uuid, s0.utilization_pct) == ("n", 0, "GPU-0", 55)
    assert s1.job_memory_mib == {}
    b.stop("train", 1, "done", grace_s=0.1)
    while not b.poll() and time.time() < deadline:
        time.sleep(0.02)
    b.close()
