"""One call that runs the inference experiment: train, measure the grid, build the challenge, and
(optionally) the sharing and scaling experiments. No printing: ``progress`` gets one line per
stage for a caller that wants to show it."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

import torch

from gpufleet.cost.catalog import PriceCatalog
from gpufleet.experiments.inference.measure import (
    DeviceInfo,
    Measurement,
    SharingResult,
    WorkerPool,
    measure_grid,
    resolve_device,
    run_sharing,
)
from gpufleet.experiments.inference.model import PRECISIONS, Precision, TrainedModel, UnsupportedConfig, train
from gpufleet.experiments.inference.pricing import DevicePrice, cpu_price, gpu_price
from gpufleet.experiments.inference.scaling import ScalingResult, default_rates, run_scaling
from gpufleet.experiments.inference.scenario import Scenario, build_scenario

DEFAULT_BATCHES = (1, 4, 8, 16, 32)
CPU_PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "int8")
CUDA_PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "bf16")
DEFAULT_PROJECT_GPUS = ("T4", "L4")


@dataclass(frozen=True, slots=True)
class InferenceConfig:
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    batches: tuple[int, ...] = DEFAULT_BATCHES
    precisions: tuple[Precision, ...] | None = None  # None: the device's (CPU: fp32 bf16 int8; CUDA: fp32 fp16 bf16)
    duration_s: float = 1.0  # per configuration
    warmup_s: float = 0.2
    rounds: int = 4  # each configuration's time is taken in this many interleaved slices
    threads: int = 1  # CPU intra-op threads (each pinned to a core; priced per vCPU)
    seed: int = 0
    epochs: int = 12
    scenario_batch: int = 8
    max_accuracy_drop_pp: float = 1.0
    p99_slo_ms: float | None = None  # for the challenge's steps (None: latency does not veto a step)
    project_gpus: tuple[str, ...] = DEFAULT_PROJECT_GPUS
    usd_per_vcpu_hour: float | None = None  # None: the documented m6i price
    usd_per_gpu_hour: float | None = None  # None: the catalog's
    sharing: bool = False
    sharing_batch: int = 8
    sharing_precision: Precision = "fp32"
    sharing_duration_s: float = 2.0
    scaling: bool = False
    scaling_precision: Precision = "fp32"
    scaling_max_batch: int = 8
    scaling_rates: tuple[float, ...] | None = None  # None: ¼, ½, 1 and 2 × one replica's batch-1 throughput
    scaling_replicas: tuple[int, ...] | None = None  # measured N (None: 1..cores, at most 4; CUDA: 1)
    scaling_duration_s: float = 2.0
    scaling_slo_ms: float = 25.0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


@dataclass(slots=True)
class InferenceResult:
    config: InferenceConfig
    device: DeviceInfo
    trained: TrainedModel
    grid: list[Measurement]
    skipped: list[dict[str, Any]]
    scenario: Scenario
    extra: list[Measurement] = field(default_factory=list)  # CPU configurations measured for a GPU host's device step
    sharing: SharingResult | None = None
    scaling: ScalingResult | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        t = self.trained
        return {
            "experiment": "inference",
            "device": self.device.to_dict(),
            "environment": self.environment,
            "config": self.config.to_dict(),
            "model": {
                "dataset": t.data.name,
                "dataset_source": t.data.source,
                "train_examples": len(t.data.x_train),
                "test_examples": len(t.data.x_test),
                "architecture": "MLP 64-" + "-".join(str(h) for h in t.hidden) + "-10 (ReLU)",
                "parameters": t.info.get("parameters"),
                "seed": t.seed,
                "epochs": t.epochs,
                "train_seconds": round(t.train_seconds, 3),
                "train_accuracy": round(t.train_accuracy, 4),
            },
            "grid": [m.to_dict() for m in self.grid],
            "device_step_cpu": [m.to_dict() for m in self.extra],
            "skipped": self.skipped,
            "int8": int8_accuracy_changes(self.grid),
            "scenario": self.scenario.to_dict(),
            "sharing": None if self.sharing is None else self.sharing.to_dict(),
            "scaling": None if self.scaling is None else self.scaling.to_dict(),
            "wall_s": round(self.wall_s, 2),
        }


def int8_accuracy_changes(grid: Sequence[Measurement]) -> list[dict[str, Any]]:
    """INT8's held-out accuracy against FP32's at each batch size measured in both."""
    out = []
    by = {(m.device, m.batch, m.precision): m for m in grid}
    for (dev, b, p), m in sorted(by.items()):
        fp = by.get((dev, b, "fp32"))
        if p != "int8" or fp is None:
            continue
        out.append(
            {
                "device": dev,
                "batch": b,
                "fp32_accuracy": round(fp.accuracy, 4),
                "int8_accuracy": round(m.accuracy, 4),
                "change_pp": round(100.0 * (m.accuracy - fp.accuracy), 2),
                "agreement_with_fp32": None if m.agreement is None else round(m.agreement, 4),
                "throughput_ratio": round(m.throughput / fp.throughput, 3) if fp.throughput else None,
            }
        )
    return out


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def device_price(dev: DeviceInfo, cfg: InferenceConfig, catalog: PriceCatalog | None, vcpus: int) -> DevicePrice:
    if dev.kind == "cpu":
        return cpu_price(vcpus, cfg.usd_per_vcpu_hour)
    return gpu_price(catalog, dev.gpu_model, cfg.usd_per_gpu_hour)  # pragma: no cover - needs a GPU


def run_inference_experiment(
    cfg: InferenceConfig,
    catalog: PriceCatalog | None,
    *,
    progress: Callable[[str], None] | None = None,
) -> InferenceResult:
    """Run the experiment of ``cfg``; ``catalog`` prices GPUs (and the projections)."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    dev = resolve_device(cfg.device)
    if dev.kind == "cpu" and cfg.threads > len(dev.cores):
        raise UnsupportedConfig(f"{cfg.threads} threads asked for; this process may use {len(dev.cores)} core(s)")
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": dev.name if dev.kind == "cpu" else resolve_device("cpu").name,
        "cuda_available": bool(torch.cuda.is_available()),
        "loadavg_start": _load(),
    }
    say(f"training the model (seed {cfg.seed}) …")
    trained = train(cfg.seed, epochs=cfg.epochs)
    precisions = cfg.precisions or (CPU_PRECISIONS if dev.kind == "cpu" else CUDA_PRECISIONS)
    for p in precisions:
        if p not in PRECISIONS:
            raise UnsupportedConfig(f"unknown precision {p!r} (known: {', '.join(PRECISIONS)})")
    price = device_price(dev, cfg, catalog, cfg.threads)
    configs = [(b, p) for p in precisions for b in cfg.batches]
    say(f"measuring {len(configs)} configurations on {dev.torch_device}, {cfg.duration_s:g} s each, interleaved …")
    grid, skipped = measure_grid(
        trained,
        dev,
        configs,
        duration_s=cfg.duration_s,
        warmup_s=cfg.warmup_s,
        threads=cfg.threads,
        price=price,
        rounds=cfg.rounds,
    )
    extra: list[Measurement] = []
    projections: list[tuple[str, DevicePrice]] = []
    if dev.kind == "cuda":  # pragma: no cover - needs a GPU
        cpu = resolve_device("cpu")
        say(f"measuring the CPU at batch {cfg.scenario_batch} (the device step) …")
        extra, _ = measure_grid(
            trained,
            cpu,
            [(cfg.scenario_batch, p) for p in CPU_PRECISIONS],
            duration_s=cfg.duration_s,
            warmup_s=cfg.warmup_s,
            threads=cfg.threads,
            price=cpu_price(cfg.threads, cfg.usd_per_vcpu_hour),
            rounds=cfg.rounds,
        )
    for gpu in cfg.project_gpus:
        if dev.gpu_model is not None and gpu.upper() == dev.gpu_model.upper():
            continue
        projections.append((gpu, gpu_price(catalog, gpu)))
    index = {(m.device, m.batch, str(m.precision)): m for m in grid}
    scenario = build_scenario(
        index,
        dev.torch_device,
        primary_kind=dev.kind,
        batch=cfg.scenario_batch,
        cpu_alternatives=extra,
        projections=projections,
        max_accuracy_drop_pp=cfg.max_accuracy_drop_pp,
        p99_slo_ms=cfg.p99_slo_ms,
    )
    unit = device_price(dev, cfg, catalog, 1)
    sharing = None
    scaling = None
    with contextlib.ExitStack() as stack:
        replicas: tuple[int, ...] = ()
        if cfg.scaling:
            default = tuple(range(1, min(len(dev.cores), 4) + 1)) if dev.kind == "cpu" else (1,)
            replicas = cfg.scaling_replicas or default
        need = max([2 if cfg.sharing else 0, *replicas])
        pool = None
        if need:
            say(f"starting {need} worker processes …")
            pool = stack.enter_context(WorkerPool(trained, need))
        if cfg.sharing:
            say("sharing: two workloads on one device …")
            sharing = run_sharing(
                trained,
                dev,
                unit,
                batch=cfg.sharing_batch,
                precision=cfg.sharing_precision,
                duration_s=cfg.sharing_duration_s,
                pool=pool,
            )
        if cfg.scaling:
            service = {m.batch: m.latencies_s for m in grid if m.precision == cfg.scaling_precision}
            if not service:
                say(f"measuring the service times of {cfg.scaling_precision} for the scaling model …")
                sizes = sorted({1, cfg.scaling_max_batch})
                got, _ = measure_grid(
                    trained,
                    dev,
                    [(b, cfg.scaling_precision) for b in sizes],
                    duration_s=cfg.duration_s,
                    price=unit,
                    rounds=cfg.rounds,
                )
                service = {m.batch: m.latencies_s for m in got}
            b1 = next((m for m in grid if m.precision == cfg.scaling_precision and m.batch == 1), None)
            one = service[min(service)]
            mu1 = b1.throughput if b1 is not None else 1.0 / max(1e-6, sum(one) / len(one))
            rates = list(cfg.scaling_rates or default_rates(mu1))
            shown = ", ".join(f"{r:g}" for r in rates)
            say(f"scaling: {shown} requests/s against {', '.join(map(str, replicas))} replica(s) …")
            scaling = run_scaling(
                trained,
                dev,
                unit,
                service,
                rates,
                precision=cfg.scaling_precision,
                max_batch=cfg.scaling_max_batch,
                measured_replicas=replicas,
                duration_s=cfg.scaling_duration_s,
                slo_ms=cfg.scaling_slo_ms,
                seed=cfg.seed,
                pool=pool,
            )
    env["loadavg_end"] = _load()
    env["note"] = _load_note(env, dev)
    return InferenceResult(
        cfg, dev, trained, grid, skipped, scenario, extra, sharing, scaling, env, time.perf_counter() - started
    )


def _load_note(env: dict[str, Any], dev: DeviceInfo) -> str:
    loads = [x for x in (env.get("loadavg_start"), env.get("loadavg_end")) if x]
    if not loads:
        return ""
    peak = max(cast(list[float], x)[0] for x in loads)
    cores = max(1, len(dev.cores))
    busy = "shared with other work" if peak > 0.5 * cores else "mostly idle"
    return (
        (
            f"host {busy}: 1-minute load average up to {peak:g} on {cores} core(s) during the run; "
            "throughput on a busy host is lower and p99 higher than on a dedicated one (cpu_fraction shows the share "
            "of its core a configuration got)"
        )
        if not math.isnan(peak)
        else ""
    )
