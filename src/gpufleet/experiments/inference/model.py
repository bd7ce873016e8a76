"""The data set, the model and its precision variants.

Data: scikit-learn's bundled copy of the UCI optical-recognition handwritten digits (1,797 8×8
images, 10 classes; ``sklearn.datasets.load_digits`` reads it from the installed package, never from
the network). Split 75 / 25, stratified by class, with a seeded permutation: 1,347 training and 450
held-out images.

Model: an MLP 64 → 512 → 512 → 10 (ReLU), about 300k parameters, trained with Adam for a few
epochs on one CPU thread (deterministic for a seed: the seed fixes the initial weights and the
shuffling; one thread fixes the order of the floating-point sums).

Precisions (:func:`prepare`):

- ``fp32`` — the trained model as is.
- ``bf16`` — weights and inputs cast to bfloat16 (CPU or CUDA).
- ``fp16`` — weights and inputs cast to float16: CUDA only (half matmuls on a CPU are a slow
  fallback, not a serving option; use ``bf16`` there).
- ``int8`` — ``torch.ao.quantization.quantize_dynamic`` on the ``nn.Linear`` layers: int8 weights,
  activations quantized per batch at run time, fp32 in and out. CPU only (PyTorch's dynamic
  quantized kernels are fbgemm/onednn CPU kernels). PyTorch 2.13 marks ``torch.ao.quantization`` as
  deprecated (its successor is the separate ``torchao`` package) but still ships and runs it; the
  deprecation warnings are silenced here.
"""

from __future__ import annotations

import copy
import importlib
import io
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import torch
from torch import nn

Precision = Literal["fp32", "bf16", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "int8")

DATASET_NAME = "digits"
DATASET_SOURCE = (
    "scikit-learn's bundled sklearn/datasets/data/digits.csv.gz (sklearn.datasets.load_digits): a copy of "
    "the test set of the UCI Optical Recognition of Handwritten Digits data set (E. Alpaydin, C. Kaynak, "
    "1998; CC BY 4.0)"
)
HIDDEN = (512, 512)
N_FEATURES = 64
N_CLASSES = 10


class UnsupportedConfig(Exception):
    """A configuration this device cannot run (e.g. INT8 on CUDA); the message says why."""


@dataclass(frozen=True, slots=True)
class Dataset:
    x_train: np.ndarray  # float32 (n, 64), pixel counts / 16
    y_train: np.ndarray  # int64 (n,)
    x_test: np.ndarray
    y_test: np.ndarray
    name: str = DATASET_NAME
    source: str = DATASET_SOURCE


@dataclass(slots=True)
class TrainedModel:
    """The trained FP32 model (on the CPU, eval mode) with its data and how it was trained."""

    model: nn.Module
    data: Dataset
    seed: int
    epochs: int
    hidden: tuple[int, ...]
    train_seconds: float
    train_accuracy: float
    info: dict[str, Any] = field(default_factory=dict)

    def state_bytes(self) -> bytes:
        """The weights, serialised (what a worker process rebuilds the model from)."""
        buf = io.BytesIO()
        torch.save(self.model.state_dict(), buf)
        return buf.getvalue()


def load_dataset(seed: int = 0, test_fraction: float = 0.25) -> Dataset:
    """The digits, split ``1 - test_fraction`` / ``test_fraction`` per class with a seeded permutation."""
    datasets = importlib.import_module("sklearn.datasets")  # untyped; imported only here
    bunch = datasets.load_digits()
    x = np.asarray(bunch.data, dtype=np.float32) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    rng = np.random.default_rng(seed)
    test_idx: list[np.ndarray] = []
    train_idx: list[np.ndarray] = []
    for cls in range(N_CLASSES):
        idx = rng.permutation(np.flatnonzero(y == cls))
        n_test = round(len(idx) * test_fraction)
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr = rng.permutation(np.concatenate(train_idx))
    te = rng.permutation(np.concatenate(test_idx))
    return Dataset(x[tr], y[tr], x[te], y[te])


def build_model(hidden: tuple[int, ...] = HIDDEN) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = N_FEATURES
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, N_CLASSES))
    return nn.Sequential(*layers)


def model_from_bytes(state: bytes, hidden: tuple[int, ...] = HIDDEN) -> nn.Module:
    model = build_model(hidden)
    model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    return model.eval()


def train(
    seed: int = 0, *, epochs: int = 12, hidden: tuple[int, ...] = HIDDEN, data: Dataset | None = None
) -> TrainedModel:
    """Train the MLP on one CPU thread (seconds); deterministic for ``seed``."""
    data = data or load_dataset(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        model = build_model(hidden)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()
        x = torch.from_numpy(data.x_train)
        y = torch.from_numpy(data.y_train)
        start = time.perf_counter()
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), 64):
                idx = order[i : i + 64]
                opt.zero_grad()
                loss = loss_fn(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
        seconds = time.perf_counter() - start
        model.eval()
        with torch.inference_mode():
            train_acc = float((model(x).argmax(1) == y).float().mean())
    finally:
        torch.set_num_threads(threads)
    return TrainedModel(
        model,
        data,
        seed,
        epochs,
        tuple(hidden),
        seconds,
        train_acc,
        info={"parameters": sum(p.numel() for p in model.parameters()), "torch": torch.__version__},
    )


def input_dtype(precision: Precision) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def prepare(model: nn.Module, precision: Precision, device: str) -> nn.Module:
    """A copy of ``model`` in ``precision`` on ``device`` (eval mode); :class:`UnsupportedConfig`
    for the combinations that do not exist (FP16 on the CPU, INT8 on CUDA)."""
    on_cuda = device.startswith("cuda")
    m = copy.deepcopy(model).eval()
    if precision == "fp32":
        return m.to(device)
    if precision == "bf16":
        return m.to(device=device, dtype=torch.bfloat16)
    if precision == "fp16":
        if not on_cuda:
            raise UnsupportedConfig("fp16 is a CUDA precision here; on the CPU use bf16")
        return m.to(device=device, dtype=torch.float16)
    if precision == "int8":
        if on_cuda:
            raise UnsupportedConfig("int8 dynamic quantization (torch.ao quantize_dynamic) runs on the CPU only")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
            q = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call,unused-ignore]
                m.cpu(), {nn.Linear}, dtype=torch.qint8
            )
        return cast(nn.Module, q)
    raise UnsupportedConfig(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
    """Share of ``x`` classified as ``y``, in batches of ``batch`` (as it is served); ``x`` is in the
    model's input dtype and on its device (see :func:`input_dtype`)."""
    correct = 0
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            out = model(x[i : i + batch])
            correct += int((out.argmax(1).to(y.device) == y[i : i + batch]).sum())
    return correct / len(x)
