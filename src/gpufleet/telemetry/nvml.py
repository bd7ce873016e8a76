"""All NVML access (``nvidia-ml-py``, imported as ``pynvml``) behind one small guarded class.

The server must run the same on a laptop without a driver, on a box whose driver lacks a call
(utilization is "not supported" on MIG-enabled GPUs, placements need a recent driver), and on a
real multi-GPU server. So every NVML call goes through :meth:`Nvml._call`, which turns any
``NVMLError`` into ``None`` and a debug log line: callers get partial data, never an exception.

:func:`map_nvml_name` is pure (no NVML needed) so the name table is unit-tested on any machine.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from gpufleet.model.gpu import GPU_MODELS, MIG_MEMORY_SLICES
from gpufleet.model.share import MIG_PROFILE_PATTERN

log = logging.getLogger(__name__)

MIB = 1024 * 1024
T = TypeVar("T")

_VENDOR_PREFIXES = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")
_MEM_TOKEN = re.compile(r"^(\d+)GB$", re.IGNORECASE)
_MIG_PROFILE_IN_NAME = re.compile(rf"\bMIG\s+({MIG_PROFILE_PATTERN})\b", re.IGNORECASE)
MEMORY_TOLERANCE = 0.10  # NVML reports a little less than the marketing size (81559 MiB on an "80GB")


def map_nvml_name(nvml_name: str, memory_mib: float = 0.0) -> tuple[str, float]:
    """Map an NVML device name (and its total memory) to ``(model name, memory GiB)``.

    Known models give our canonical name (``"NVIDIA A100-SXM4-80GB"`` → ``"A100-80GB"``); the
    family comes from the name and the variant from a ``NNGB`` token or, failing that, the nearest
    built-in memory size within 10 %. Unknown models keep a cleaned name (vendor prefixes dropped,
    words joined by ``-``: ``"NVIDIA H200"`` → ``"H200"``) and the memory NVML reports.
    """
    tokens = _clean_tokens(nvml_name)
    if not tokens:
        return "unknown", round(memory_mib / 1024, 1)
    family = tokens[0].upper()
    named_gib = next((int(m.group(1)) for t in tokens if (m := _MEM_TOKEN.match(t))), None)
    mem_gib = float(named_gib) if named_gib is not None else memory_mib / 1024
    model = _match_family(family, mem_gib)
    if model is not None:
        return model, GPU_MODELS[model].memory_gib
    return "-".join(tokens), round(mem_gib, 1)


def _clean_tokens(nvml_name: str) -> list[str]:
    """Words of the name without vendor prefixes, split on spaces and dashes."""
    tokens = [t for t in re.split(r"[\s\-]+", nvml_name.strip()) if t]
    while tokens and tokens[0].upper() in _VENDOR_PREFIXES:
        tokens.pop(0)
    return tokens


def _match_family(family: str, mem_gib: float) -> str | None:
    """The built-in model of ``family`` whose memory is nearest ``mem_gib`` (within tolerance)."""
    best: tuple[float, str] | None = None
    for model in GPU_MODELS.values():
        names = {model.name.split("-")[0].upper(), *(a.upper() for a in model.aliases)}
        if family not in names or model.memory_gib <= 0:
            continue
        diff = abs(model.memory_gib - mem_gib)
        if diff <= MEMORY_TOLERANCE * model.memory_gib and (best is None or diff < best[0]):
            best = (diff, model.name)
    return None if best is None else best[1]


def mig_profile_from_name(mig_device_name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB MIG 1g.10gb"`` → ``"1g.10gb"`` ("" if the name has no profile)."""
    m = _MIG_PROFILE_IN_NAME.search(mig_device_name)
    return m.group(1).lower() if m else ""


def placement_mask(start: int, size: int) -> int:
    """Memory-slice bit mask of a MIG placement (bit i = memory slice i)."""
    if size <= 0 or start < 0 or start + size > MIG_MEMORY_SLICES:
        return 0
    return ((1 << size) - 1) << start


@dataclass(frozen=True, slots=True)
class MigDevice:
    uuid: str
    profile: str  # e.g. "1g.10gb"; "" if unknown
    start: int | None  # first memory slice; None if NVML could not say
    size: int | None  # memory slices

    @property
    def mask(self) -> int:
        return 0 if self.start is None or self.size is None else placement_mask(self.start, self.size)


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    index: int
    uuid: str
    nvml_name: str
    model: str  # canonical or cleaned (see map_nvml_name)
    memory_gib: float
    memory_total_mib: float
    mig_enabled: bool
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class NvmlSample:
    time: float
    index: int
    uuid: str
    utilization_pct: float  # 0 when NVML cannot say (e.g. MIG mode)
    memory_used_mib: float
    memory_total_mib: float
    process_memory_mib: dict[int, float] = field(default_factory=dict)  # pid → MiB on this GPU
    temperature_c: float | None = None  # the GPU core's (None: NVML cannot say)
    power_w: float | None = None


def load_pynvml() -> ModuleType | None:
    """The ``pynvml`` module, or None if the package is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module


class Nvml:
    """One NVML session: initialised once, shut down by :meth:`close`.

    ``available`` is False when the package or the driver is missing; every method then returns
    empty results. ``lib`` may be injected (tests, or a stub) instead of the real ``pynvml``.
    """

    def __init__(self, lib: ModuleType | None = None, *, enabled: bool = True) -> None:
        self._lib = (lib or load_pynvml()) if enabled else None
        self.available = False
        self.reason = "NVML disabled" if not enabled else ""
        if self._lib is None:
            self.reason = self.reason or "nvidia-ml-py (pynvml) is not installed"
            return
        try:
            self._lib.nvmlInit()
        except Exception as e:  # NVMLError (no driver / library) or OSError from ctypes
            self.reason = f"NVML unavailable: {e}"
            log.info("%s; GPUs must be declared", self.reason)
            return
        self.available = True

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self.available and self._lib is not None:
            self._call(self._lib.nvmlShutdown)
        self.available = False

    def _call(self, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)`` with any NVML error (unsupported call, lost GPU, ...) turned into None."""
        try:
            return fn(*args)
        except Exception as e:  # pynvml raises NVMLError subclasses; ctypes may raise others
            log.debug("NVML %s failed: %s", getattr(fn, "__name__", fn), e)
            return None

    def _handles(self) -> list[tuple[int, Any]]:
        if not self.available or self._lib is None:
            return []
        count = self._call(self._lib.nvmlDeviceGetCount) or 0
        out = []
        for i in range(count):
            h = self._call(self._lib.nvmlDeviceGetHandleByIndex, i)
            if h is not None:
                out.append((i, h))
        return out

    def gpus(self) -> list[NvmlGpu]:
        """Every GPU NVML sees, with model, memory, MIG mode and MIG devices."""
        return [self._gpu(i, h) for i, h in self._handles()]

    def _gpu(self, index: int, handle: Any) -> NvmlGpu:
        assert self._lib is not None
        name = _text(self._call(self._lib.nvmlDeviceGetName, handle)) or "unknown"
        uuid = _text(self._call(self._lib.nvmlDeviceGetUUID, handle)) or f"GPU-index-{index}"
        mem = self._call(self._lib.nvmlDeviceGetMemoryInfo, handle)
        total_mib = float(mem.total) / MIB if mem is not None else 0.0
        model, mem_gib = map_nvml_name(name, total_mib)
        mode = self._call(self._lib.nvmlDeviceGetMigMode, handle)
        mig = bool(mode is not None and mode[0] == getattr(self._lib, "NVML_DEVICE_MIG_ENABLE", 1))
        migs = self._mig_devices(handle) if mig else ()
        return NvmlGpu(index, uuid, name, model, mem_gib, total_mib, mig, migs)

    def _mig_devices(self, handle: Any) -> tuple[MigDevice, ...]:
        """The MIG devices of a MIG-enabled GPU with their placements (None where unknown)."""
        assert self._lib is not None
        lib = self._lib
        out = []
        for j in range(self._call(lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mh = self._call(lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
            if mh is None:
                continue  # no MIG device at this index
            uuid = _text(self._call(lib.nvmlDeviceGetUUID, mh))
            if not uuid:
                continue
            profile = mig_profile_from_name(_text(self._call(lib.nvmlDeviceGetName, mh)))
            start = size = None
            gi_id = self._call(lib.nvmlDeviceGetGpuInstanceId, mh)
            gi = None if gi_id is None else self._call(lib.nvmlDeviceGetGpuInstanceById, handle, gi_id)
            info = None if gi is None else self._call(lib.nvmlGpuInstanceGetInfo, gi)
            if info is not None:
                start, size = int(info.placement.start), int(info.placement.size)
            out.append(MigDevice(uuid, profile, start, size))
        return tuple(out)

    def samples(self) -> list[NvmlSample]:
        """Utilization, memory and per-process memory of every GPU (MIG devices folded in)."""
        out = []
        now = time.time()
        for i, h in self._handles():
            assert self._lib is not None
            uuid = _text(self._call(self._lib.nvmlDeviceGetUUID, h)) or f"GPU-index-{i}"
            util = self._call(self._lib.nvmlDeviceGetUtilizationRates, h)
            mem = self._call(self._lib.nvmlDeviceGetMemoryInfo, h)
            procs = self._processes(h)
            temp = self._optional("nvmlDeviceGetTemperature", h, 0)  # sensor 0: NVML_TEMPERATURE_GPU
            milliwatts = self._optional("nvmlDeviceGetPowerUsage", h)
            for mh in self._mig_handles(h):
                for pid, mib in self._processes(mh).items():
                    procs[pid] = procs.get(pid, 0.0) + mib
            out.append(
                NvmlSample(
                    time=now,
                    index=i,
                    uuid=uuid,
                    utilization_pct=float(util.gpu) if util is not None else 0.0,
                    memory_used_mib=float(mem.used) / MIB if mem is not None else 0.0,
                    memory_total_mib=float(mem.total) / MIB if mem is not None else 0.0,
                    process_memory_mib=procs,
                    temperature_c=float(temp) if temp is not None else None,
                    power_w=float(milliwatts) / 1000.0 if milliwatts is not None else None,
                )
            )
        return out

    def _optional(self, name: str, *args: Any) -> Any:
        """An NVML reading some GPUs or bindings do not offer (a sensor): None when it is absent."""
        fn = getattr(self._lib, name, None)
        return None if fn is None else self._call(fn, *args)

    def _mig_handles(self, handle: Any) -> list[Any]:
        assert self._lib is not None
        mode = self._call(self._lib.nvmlDeviceGetMigMode, handle)
        if mode is None or mode[0] != getattr(self._lib, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        n = self._call(self._lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        handles = (self._call(self._lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, j) for j in range(n))
        return [mh for mh in handles if mh is not None]

    def _processes(self, handle: Any) -> dict[int, float]:
        """pid → MiB of the compute processes on one device (MiB 0 where NVML hides it)."""
        assert self._lib is not None
        procs = self._call(self._lib.nvmlDeviceGetComputeRunningProcesses, handle) or []
        out: dict[int, float] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out[int(p.pid)] = out.get(int(p.pid), 0.0) + (float(used) / MIB if used else 0.0)
        return out


def _text(value: object) -> str:
    """NVML strings are ``bytes`` in old bindings and ``str`` in new ones."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
