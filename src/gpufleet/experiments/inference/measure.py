"""The devices and the measurement harness: closed-loop runs in this process, and worker processes
for two workloads sharing one device.

**Closed loop** (:func:`measure`): one caller sends a batch, waits for the answer, sends the next,
for ``duration_s`` after a warm-up. The inputs are held-out images, staged on the device in the
configuration's dtype before timing (what is timed is the model call, plus
``torch.cuda.synchronize()`` on CUDA so the time includes the kernels). Each batch's time is the
latency of every request in it (they all wait for the batch). Throughput = inferences / wall time.
CPU fraction = process CPU seconds / (wall seconds × vCPUs the configuration holds): below 1 on
an idle core means time in Python or waiting; on a busy host it is also the share of the core that
the other work left. ``throughput_per_cpu_s`` (inferences per CPU-second) is what one vCPU would
serve with no one else on it. :func:`measure_grid` interleaves the configurations (see there).

**CPU placement**: a CPU configuration of ``threads`` intra-op threads runs pinned
(``os.sched_setaffinity``) to that many cores of this process's affinity set, with
``torch.set_num_threads(threads)``. The default is one thread on one core: on a host shared with
other work (this project's 2-vCPU machines), an OpenMP team larger than the free cores waits on
its slowest member and collapses (measured here: batch 8 FP32 took 3.7 ms with 2 threads against
0.2 ms with 1), and one pinned thread per workload is how CPU inference is served at scale
(one replica per core).

**Sharing** (:func:`run_sharing`): separate worker processes (``spawn``: fork after PyTorch has
started is unsafe), started together behind a barrier. On the CPU, the device is one core:

- ``alone``    one worker, one thread, pinned to core c0;
- ``shared``   two workers, one thread each, both pinned to core c0 (the kernel time-slices them, as
  two processes time-slice one GPU);
- ``one-each`` two workers on cores c0 and c1 (each has a device of its own; only with 2+ cores).

On CUDA the device is GPU 0 (``one-each`` uses GPU 1 when there is one); each worker's host thread
is pinned to its own core when there are enough.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import platform
import queue
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from gpufleet.experiments.inference.model import (
    Precision,
    TrainedModel,
    UnsupportedConfig,
    input_dtype,
    model_from_bytes,
    prepare,
)
from gpufleet.experiments.inference.pricing import DevicePrice, usd_per_1k

DeviceKind = Literal["cpu", "cuda"]
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    kind: DeviceKind
    torch_device: str  # "cpu", "cuda:0"
    name: str  # "AMD EPYC", "NVIDIA H100 80GB HBM3"
    gpu_model: str | None  # the catalog's model name (CUDA), None on the CPU
    cores: tuple[int, ...]  # CPU cores this process may run on
    gpu_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "torch_device": self.torch_device,
            "name": self.name,
            "gpu_model": self.gpu_model,
            "cores": len(self.cores),
            "gpu_count": self.gpu_count,
        }


def available_cores() -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def resolve_device(spec: str = "auto") -> DeviceInfo:
    """``auto`` (CUDA when ``torch.cuda.is_available()``, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    cores = available_cores()
    spec = spec.strip().lower()
    if spec == "auto":
        spec = "cuda" if cuda_available() else "cpu"
    if spec == "cpu":
        return DeviceInfo("cpu", "cpu", f"{cpu_name()} ({len(cores)} vCPU)", None, cores)
    if spec.startswith("cuda"):
        if not cuda_available():
            raise UnsupportedConfig("CUDA was asked for but torch.cuda.is_available() is False")
        index = int(spec.split(":", 1)[1]) if ":" in spec else 0
        count = int(torch.cuda.device_count())
        if not 0 <= index < count:
            raise UnsupportedConfig(f"cuda:{index} does not exist ({count} CUDA device(s))")
        return _cuda_device(index, cores, count)
    raise UnsupportedConfig(f"unknown device {spec!r} (use auto, cpu, cuda or cuda:N)")


def _cuda_device(index: int, cores: tuple[int, ...], count: int) -> DeviceInfo:  # pragma: no cover - needs a GPU
    from gpufleet.telemetry.nvml import map_nvml_name

    name = str(torch.cuda.get_device_name(index))
    mem_mib = float(torch.cuda.get_device_properties(index).total_memory) / MIB
    model, _ = map_nvml_name(name, mem_mib)
    return DeviceInfo("cuda", f"cuda:{index}", name, model, cores, count)


@contextlib.contextmanager
def pinned(cores: Sequence[int] | None, threads: int) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads on ``cores`` (this thread's affinity), then
    restore both."""
    old_threads = torch.get_num_threads()
    old_aff: set[int] | None = None
    if cores and hasattr(os, "sched_setaffinity"):
        old_aff = os.sched_getaffinity(0)
        os.sched_setaffinity(0, set(cores))
    torch.set_num_threads(max(1, threads))
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        if old_aff is not None:
            os.sched_setaffinity(0, old_aff)


# -- statistics -----------------------------------------------------------------------------------


def percentile_ms(latencies_s: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100, linear interpolation) in milliseconds; NaN when empty."""
    if not latencies_s:
        return math.nan
    return float(np.percentile(np.asarray(latencies_s, dtype=np.float64), q)) * 1000.0


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else round(x, nd)


# -- closed loop ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Measurement:
    """One configuration measured closed-loop (and priced)."""

    device: str  # "cpu", "cuda:0"
    device_name: str
    gpu_model: str | None
    batch: int
    precision: Precision
    threads: int
    wall_s: float
    batches: int
    inferences: int
    throughput: float  # inferences per second
    p50_ms: float
    p99_ms: float
    mean_ms: float
    accuracy: float  # held-out, in this precision
    cpu_seconds: float
    cpu_fraction: float  # cpu_seconds / (wall_s × vCPUs held)
    price: DevicePrice | None = None
    latencies_s: list[float] = field(default_factory=list, repr=False)  # per batch; not in to_dict
    agreement: float | None = None  # share of held-out predictions equal to FP32's

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.price.usd_per_hour

    @property
    def usd_per_1k(self) -> float | None:
        return usd_per_1k(self.usd_per_hour, self.throughput)

    @property
    def usd_per_1k_cpu_time(self) -> float | None:
        """$ per 1,000 inferences if the vCPUs were billed only for the CPU time this configuration
        used: its cost on a core of its own at the speed it ran while it ran (CPU only: a GPU is
        billed for the wall time)."""
        if self.usd_per_hour is None or self.device != "cpu" or self.inferences == 0:
            return None
        return self.usd_per_hour / self.threads / 3600.0 * self.cpu_seconds / self.inferences * 1000.0

    @property
    def key(self) -> str:
        return f"{self.device}/b{self.batch}/{self.precision}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_name": self.device_name,
            "gpu_model": self.gpu_model,
            "batch": self.batch,
            "precision": self.precision,
            "threads": self.threads,
            "wall_s": _r(self.wall_s, 3),
            "batches": self.batches,
            "inferences": self.inferences,
            "throughput_per_s": _r(self.throughput, 1),
            "p50_ms": _r(self.p50_ms),
            "p99_ms": _r(self.p99_ms),
            "mean_ms": _r(self.mean_ms),
            "accuracy": _r(self.accuracy, 4),
            "cpu_seconds": _r(self.cpu_seconds, 3),
            "cpu_fraction": _r(self.cpu_fraction, 3),
            "throughput_per_cpu_s": _r(self.inferences / self.cpu_seconds, 1) if self.cpu_seconds > 0 else None,
            "agreement_with_fp32": _r(self.agreement, 4),
            "usd_per_hour": self.usd_per_hour,
            "price_unit": None if self.price is None else self.price.unit,
            "price_source": None if self.price is None else self.price.source,
            "usd_per_1k": _r(self.usd_per_1k, 10),
            "usd_per_1k_cpu_time": _r(self.usd_per_1k_cpu_time, 10),
        }


def staged_batches(x: np.ndarray, batch: int, precision: Precision, device: str) -> list[torch.Tensor]:
    """The held-out images as full batches of ``batch`` (wrapping around), on ``device`` in dtype."""
    n = len(x)
    k = max(1, math.ceil(n / batch))
    idx = np.arange(k * batch) % n
    xs = torch.from_numpy(x[idx]).to(device=device, dtype=input_dtype(precision))
    return [xs[i : i + batch] for i in range(0, len(xs), batch)]


def closed_loop(
    module: nn.Module,
    batches: Sequence[torch.Tensor],
    duration_s: float,
    warmup_s: float,
    *,
    sync: bool,
    min_batches: int = 20,
) -> tuple[list[float], int, float, float]:
    """(per-batch latencies in s, inferences, wall s, process CPU s) of a closed loop."""
    with torch.inference_mode():
        end = time.perf_counter() + warmup_s
        i = 0
        while i < 5 or time.perf_counter() < end:
            module(batches[i % len(batches)])
            i += 1
        if sync:
            torch.cuda.synchronize()
        lat: list[float] = []
        n = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        stop = t0 + duration_s
        i = 0
        e = t0
        while True:
            xb = batches[i % len(batches)]
            i += 1
            s = time.perf_counter()
            module(xb)
            if sync:
                torch.cuda.synchronize()
            e = time.perf_counter()
            lat.append(e - s)
            n += int(xb.shape[0])
            if e >= stop and len(lat) >= min_batches:
                break
        cpu = time.process_time() - cpu0
    return lat, n, e - t0, cpu


def predictions(module: nn.Module, x: torch.Tensor, batch: int) -> torch.Tensor:
    """Predicted classes of ``x`` in batches of ``batch`` (on the CPU)."""
    with torch.inference_mode():
        return torch.cat([module(x[i : i + batch]).argmax(1).cpu() for i in range(0, len(x), batch)])


@dataclass(slots=True)
class _Prepared:
    batch: int
    precision: Precision
    module: nn.Module
    batches: list[torch.Tensor]
    accuracy: float
    agreement: float
    lat: list[float] = field(default_factory=list)
    n: int = 0
    wall: float = 0.0
    cpu: float = 0.0


def measure_grid(
    trained: TrainedModel,
    dev: DeviceInfo,
    configs: Sequence[tuple[int, Precision]],
    *,
    duration_s: float = 1.0,
    warmup_s: float = 0.2,
    threads: int = 1,
    price: DevicePrice | None = None,
    rounds: int = 3,
) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """Measure ``configs`` ((batch, precision)) in this process, **interleaved**: each gets
    ``duration_s`` in ``rounds`` slices taken in turn, so that a change in the host's other load
    during the run falls on every configuration alike instead of on whichever ran then. Returns the
    measurements and the configurations skipped (with the reason)."""
    on_cuda = dev.kind == "cuda"
    held = 1 if on_cuda else max(1, threads)
    cores = dev.cores[:1] if on_cuda else dev.cores[:held]
    rounds = max(1, rounds)
    skipped: list[dict[str, Any]] = []
    prepared: list[_Prepared] = []
    with pinned(cores, held):
        y = torch.from_numpy(trained.data.y_test)
        x32 = torch.from_numpy(trained.data.x_test).to(dev.torch_device)
        modules: dict[str, nn.Module] = {"fp32": prepare(trained.model, "fp32", dev.torch_device)}
        reference = predictions(modules["fp32"], x32, 64)
        for batch, precision in configs:
            try:
                if precision not in modules:
                    modules[precision] = prepare(trained.model, precision, dev.torch_device)
            except UnsupportedConfig as exc:
                skipped.append({"device": dev.torch_device, "batch": batch, "precision": precision, "reason": str(exc)})
                continue
            module = modules[precision]
            x = x32.to(input_dtype(precision))
            pred = predictions(module, x, batch)
            batches = staged_batches(trained.data.x_test, batch, precision, dev.torch_device)
            closed_loop(module, batches, 0.0, warmup_s, sync=on_cuda, min_batches=1)  # warm up
            prepared.append(
                _Prepared(
                    batch,
                    precision,
                    module,
                    batches,
                    float((pred == y).float().mean()),
                    float((pred == reference).float().mean()),
                )
            )
        for _ in range(rounds):
            for c in prepared:
                lat, n, wall, cpu = closed_loop(c.module, c.batches, duration_s / rounds, 0.01, sync=on_cuda)
                c.lat += lat
                c.n += n
                c.wall += wall
                c.cpu += cpu
    out = [
        Measurement(
            dev.torch_device,
            dev.name,
            dev.gpu_model,
            c.batch,
            c.precision,
            held,
            c.wall,
            len(c.lat),
            c.n,
            c.n / c.wall,
            percentile_ms(c.lat, 50),
            percentile_ms(c.lat, 99),
            float(np.mean(c.lat)) * 1000.0,
            c.accuracy,
            c.cpu,
            c.cpu / (c.wall * held),
            price,
            c.lat,
            c.agreement,
        )
        for c in prepared
    ]
    return out, skipped


def measure(
    trained: TrainedModel,
    dev: DeviceInfo,
    batch: int,
    precision: Precision,
    *,
    duration_s: float = 1.0,
    warmup_s: float = 0.2,
    threads: int = 1,
    price: DevicePrice | None = None,
) -> Measurement:
    """Measure one configuration in this process (see the module docstring);
    :class:`UnsupportedConfig` when the device cannot run it."""
    got, skipped = measure_grid(
        trained,
        dev,
        [(batch, precision)],
        duration_s=duration_s,
        warmup_s=warmup_s,
        threads=threads,
        price=price,
        rounds=1,
    )
    if not got:
        raise UnsupportedConfig(skipped[0]["reason"])
    return got[0]


# -- worker processes -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What a worker process needs to rebuild the model and its inputs (picklable)."""

    state: bytes
    hidden: tuple[int, ...]
    x_test: np.ndarray


@dataclass(frozen=True, slots=True)
class Closed:
    """Command: a closed loop of ``batch`` in ``precision`` on ``device``, pinned to ``cores``. The
    worker prepares, answers ``prepared``, and starts at the ``time.perf_counter()`` value it is sent
    next (the same clock in every process on Linux), so that workers run together."""

    device: str
    cores: tuple[int, ...]
    precision: Precision
    batch: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class Serve:
    """Command: serve requests from the pool's request queue (dynamic batching up to ``max_batch``)
    until a ``None`` arrives on it. A request message is ``(phase, [request ids])``; messages of a
    phase other than the pool's current phase are dropped unserved. Each batch served is reported on
    the pool's ``served`` queue as ``(phase, ids, done_at, service_s)``."""

    device: str
    cores: tuple[int, ...]
    precision: Precision
    max_batch: int


class _Worker:
    """The worker process's state: prepared models by (precision, device)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.base = model_from_bytes(spec.state, spec.hidden)
        self.modules: dict[tuple[str, str], nn.Module] = {}

    def module(self, precision: Precision, device: str) -> nn.Module:
        key = (precision, device)
        if key not in self.modules:
            self.modules[key] = prepare(self.base, precision, device)
        return self.modules[key]

    @staticmethod
    def pin(cores: tuple[int, ...]) -> None:
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cores))
        torch.set_num_threads(max(1, len(cores)))

    def closed(self, cmd: Closed, commands: Any, results: Any) -> dict[str, Any]:
        self.pin(cmd.cores)
        module = self.module(cmd.precision, cmd.device)
        batches = staged_batches(self.spec.x_test, cmd.batch, cmd.precision, cmd.device)
        sync = cmd.device.startswith("cuda")
        with torch.inference_mode():
            for i in range(5):
                module(batches[i % len(batches)])
        results.put(("prepared", None))
        start_at = float(commands.get())
        while (wait := start_at - time.perf_counter()) > 0:
            time.sleep(min(wait, 0.05))
        lat, n, wall, cpu = closed_loop(module, batches, cmd.duration_s, 0.05, sync=sync)
        return {"latencies_s": lat, "inferences": n, "wall_s": wall, "cpu_s": cpu}

    def serve(self, cmd: Serve, requests: Any, results: Any, served: Any, phase: Any) -> None:
        self.pin(cmd.cores)
        module = self.module(cmd.precision, cmd.device)
        x_all = torch.from_numpy(self.spec.x_test).to(dtype=input_dtype(cmd.precision))
        n_x = len(x_all)
        sync = cmd.device.startswith("cuda")
        with torch.inference_mode():
            for _ in range(5):
                module(x_all[: cmd.max_batch].to(cmd.device))
        results.put(("ready", None))
        pending: list[int] = []
        cur = -1
        stop = False
        with torch.inference_mode():
            while not stop:
                msg = requests.get()
                if msg is None:
                    break
                now_phase = int(phase.value)
                if cur != now_phase:  # a new phase: what was pending belongs to the old one
                    pending, cur = [], now_phase
                if msg[0] == now_phase:
                    pending.extend(msg[1])
                while len(pending) < cmd.max_batch:  # take whatever else has arrived
                    try:
                        more = requests.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    if more[0] == now_phase:
                        pending.extend(more[1])
                while pending:
                    ids, pending = pending[: cmd.max_batch], pending[cmd.max_batch :]
                    s = time.perf_counter()
                    xb = x_all[torch.tensor([i % n_x for i in ids])].to(cmd.device)
                    module(xb)
                    if sync:
                        torch.cuda.synchronize()
                    e = time.perf_counter()
                    served.put((cur, ids, e, e - s))
                    if int(phase.value) != cur:  # the phase ended: drop the rest
                        pending = []


def _worker_main(spec: ModelSpec, commands: Any, results: Any, requests: Any, served: Any, phase: Any) -> None:
    """A worker process: run commands until ``None``."""
    try:
        worker = _Worker(spec)
        results.put(("started", None))
        while (cmd := commands.get()) is not None:
            if isinstance(cmd, Closed):
                results.put(("ok", worker.closed(cmd, commands, results)))
            elif isinstance(cmd, Serve):
                worker.serve(cmd, requests, results, served, phase)
                results.put(("ok", None))
    except BaseException:  # reported to the parent, which raises
        results.put(("error", traceback.format_exc(limit=8)))


class WorkerPool:
    """``n`` worker processes (``spawn``) holding the trained model, each with its own command and
    result queue, sharing one request queue (for serving). A context manager: closing stops them."""

    def __init__(self, trained: TrainedModel, n: int, *, timeout_s: float = 300.0) -> None:
        ctx = mp.get_context("spawn")
        spec = ModelSpec(trained.state_bytes(), trained.hidden, trained.data.x_test)
        self.timeout_s = timeout_s
        self.requests: Any = ctx.Queue()
        self.served: Any = ctx.Queue()
        self.phase: Any = ctx.Value("i", 0)
        self.commands: list[Any] = [ctx.Queue() for _ in range(n)]
        self.results: list[Any] = [ctx.Queue() for _ in range(n)]
        self.size = n
        self.procs = [
            ctx.Process(target=_worker_main, args=(spec, c, r, self.requests, self.served, self.phase), daemon=True)
            for c, r in zip(self.commands, self.results, strict=True)
        ]
        for p in self.procs:
            p.start()
        try:
            for i in range(n):
                self.expect(i, "started")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, i: int, timeout_s: float | None = None) -> tuple[Any, ...]:
        try:
            msg: tuple[Any, ...] = self.results[i].get(timeout=timeout_s or self.timeout_s)
        except queue.Empty:
            raise RuntimeError(f"worker {i} said nothing within {timeout_s or self.timeout_s:.0f} s") from None
        if msg[0] == "error":
            raise RuntimeError(f"worker {i} failed:\n{msg[1]}")
        return msg

    def expect(self, i: int, what: str) -> Any:
        msg = self.get(i)
        if msg[0] != what:
            raise RuntimeError(f"worker {i}: expected {what!r}, got {msg[0]!r}")
        return msg[1]

    def closed(
        self,
        assignments: Sequence[tuple[int, str, tuple[int, ...]]],
        precision: Precision,
        batch: int,
        duration_s: float,
    ) -> list[dict[str, Any]]:
        """Closed loops on the workers named by ``assignments`` ((worker, device, cores)), started
        together; their results in that order."""
        for i, device, cores in assignments:
            self.commands[i].put(Closed(device, cores, precision, batch, duration_s))
        for i, _, _ in assignments:
            self.expect(i, "prepared")
        start = time.perf_counter() + 0.05
        for i, _, _ in assignments:
            self.commands[i].put(start)
        return [self.expect(i, "ok") for i, _, _ in assignments]

    def close(self) -> None:
        for c in self.commands:
            with contextlib.suppress(Exception):
                c.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# -- sharing --------------------------------------------------------------------------------------


@dataclass(slots=True)
class SharingRun:
    mode: str  # "alone", "shared", "one-each"
    placement: str
    devices_held: int  # device units billed (cores on the CPU, GPUs on CUDA)
    workers: list[dict[str, Any]]  # per worker: throughput, p50, p99
    aggregate_throughput: float
    p50_ms: float  # over all workers' requests
    p99_ms: float
    cpu_fraction: float  # CPU seconds of all workers / (wall × devices held)
    price: DevicePrice

    @property
    def usd_per_1k(self) -> float | None:
        return usd_per_1k(self.price.usd_per_hour, self.aggregate_throughput)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "placement": self.placement,
            "devices_held": self.devices_held,
            "workers": self.workers,
            "aggregate_throughput_per_s": _r(self.aggregate_throughput, 1),
            "p50_ms": _r(self.p50_ms),
            "p99_ms": _r(self.p99_ms),
            "cpu_fraction": _r(self.cpu_fraction, 3),
            "usd_per_hour": self.price.usd_per_hour,
            "price_unit": self.price.unit,
            "usd_per_1k": _r(self.usd_per_1k, 8),
        }


@dataclass(slots=True)
class SharingResult:
    batch: int
    precision: Precision
    runs: list[SharingRun]
    notes: list[str]

    def run(self, mode: str) -> SharingRun | None:
        return next((r for r in self.runs if r.mode == mode), None)

    def impact(self) -> dict[str, float | None]:
        """Per-workload throughput and p99 when shared, relative to alone."""
        alone, shared = self.run("alone"), self.run("shared")
        if alone is None or shared is None or not shared.workers:
            return {}
        per = shared.aggregate_throughput / len(shared.workers)
        return {
            "per_workload_throughput_ratio": _r(per / alone.aggregate_throughput, 3),
            "aggregate_throughput_ratio": _r(shared.aggregate_throughput / alone.aggregate_throughput, 3),
            "p50_ratio": _r(shared.p50_ms / alone.p50_ms, 3),
            "p99_ratio": _r(shared.p99_ms / alone.p99_ms, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "precision": self.precision,
            "runs": [r.to_dict() for r in self.runs],
            "impact": self.impact(),
            "notes": self.notes,
        }


def units_label(dev: DeviceInfo, n: int) -> str:
    return f"{n} vCPU" if dev.kind == "cpu" else f"{n} GPU ({dev.gpu_model or dev.name})"


def run_sharing(
    trained: TrainedModel,
    dev: DeviceInfo,
    unit_price: DevicePrice,
    *,
    batch: int = 8,
    precision: Precision = "fp32",
    duration_s: float = 2.0,
    pool: WorkerPool | None = None,
) -> SharingResult:
    """Two workloads on one device against one alone and one each (see the module docstring).
    ``unit_price`` is one device unit's price (1 vCPU, or 1 GPU); ``pool``: workers to use (at
    least 2; default: two started here)."""
    cores = dev.cores or (0,)
    c0 = cores[0]
    c1 = cores[1] if len(cores) > 1 else None
    notes: list[str] = []

    layouts: list[tuple[str, str, int, list[tuple[int, str, tuple[int, ...]]]]] = []
    if dev.kind == "cpu":
        layouts.append(("alone", f"1 process, 1 thread on core {c0}", 1, [(0, "cpu", (c0,))]))
        layouts.append(
            ("shared", f"2 processes, 1 thread each, both on core {c0}", 1, [(0, "cpu", (c0,)), (1, "cpu", (c0,))])
        )
        if c1 is not None:
            pair: list[tuple[int, str, tuple[int, ...]]] = [(0, "cpu", (c0,)), (1, "cpu", (c1,))]
            layouts.append(("one-each", f"2 processes on cores {c0} and {c1}", 2, pair))
        else:
            notes.append("one-each needs 2 cores; this process may use 1")
    else:  # pragma: no cover - needs a GPU
        d0 = dev.torch_device
        h1 = c1 if c1 is not None else c0
        layouts.append(("alone", f"1 process on {d0} (host thread on core {c0})", 1, [(0, d0, (c0,))]))
        layouts.append(
            (
                "shared",
                f"2 processes on {d0} (time-sliced; host threads on cores {c0}, {h1})",
                1,
                [(0, d0, (c0,)), (1, d0, (h1,))],
            )
        )
        if dev.gpu_count > 1:
            other = "cuda:1" if d0 != "cuda:1" else "cuda:0"
            layouts.append(("one-each", f"2 processes on {d0} and {other}", 2, [(0, d0, (c0,)), (1, other, (h1,))]))
        else:
            notes.append("one-each needs 2 GPUs; this machine has 1")
    runs: list[SharingRun] = []
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(WorkerPool(trained, 2))
        for mode, placement, held, assignments in layouts:
            res = pool.closed(assignments, precision, batch, duration_s)
            all_lat = [x for r in res for x in r["latencies_s"]]
            wall = max(r["wall_s"] for r in res)
            workers = [
                {
                    "throughput_per_s": _r(r["inferences"] / r["wall_s"], 1),
                    "p50_ms": _r(percentile_ms(r["latencies_s"], 50)),
                    "p99_ms": _r(percentile_ms(r["latencies_s"], 99)),
                    "cpu_fraction": _r(r["cpu_s"] / r["wall_s"], 3),
                }
                for r in res
            ]
            runs.append(
                SharingRun(
                    mode,
                    placement,
                    held,
                    workers,
                    sum(r["inferences"] / r["wall_s"] for r in res),
                    percentile_ms(all_lat, 50),
                    percentile_ms(all_lat, 99),
                    sum(r["cpu_s"] for r in res) / (wall * held),
                    unit_price.times(held, units_label(dev, held)),
                )
            )
    return SharingResult(batch, precision, runs, notes)
