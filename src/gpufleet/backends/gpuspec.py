"""Declared GPUs: the ``gpus`` setting of a server without an NVIDIA driver (laptops, CI).

Where NVML cannot tell us what the machine holds, the operator declares it in one short string so
the scheduler, quotas and cost engine still see a realistic inventory:

====================  =======================================
``"8xA100-80GB"``     eight A100-80GB GPUs
``"A100-80GB"``       one (the count defaults to 1)
``"2 x H100:mig"``    two H100-80GB GPUs in MIG mode
``"0"`` or ``""``     no GPUs (a CPU-only server)
====================  =======================================

The model must be a built-in one (or an alias) because prices, MIG geometry and memory all come
from the model; a typo would otherwise silently produce an unpriced, unschedulable node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.errors import ConfigError
from gpufleet.model.gpu import GPU_MODELS, canonical_gpu_name

MAX_DECLARED_GPUS = 64  # more than any single server holds; catches "80xA100" for "8xA100"
_COUNT_RE = re.compile(r"^\s*(\d+)\s*[xX*]\s*(.*)$")
_KNOWN_OPTIONS = ("mig",)


@dataclass(frozen=True, slots=True)
class DeclaredGpus:
    """What a ``gpus`` spec declares: ``count`` GPUs of one canonical ``model``."""

    count: int = 0
    model: str = ""  # canonical name; "" when count == 0
    mig: bool = False

    @property
    def memory_gib(self) -> float:
        return GPU_MODELS[self.model].memory_gib if self.model else 0.0


NO_GPUS = DeclaredGpus()


def parse_gpu_spec(spec: str | None, *, field: str = "gpus") -> DeclaredGpus:
    """Parse a declared-GPU spec (see the module docstring).

    Raises :class:`ConfigError` naming ``field`` and the offending token for anything else, so a
    bad config line points straight at the mistake.
    """
    text = (spec or "").strip()
    if text in ("", "0"):
        return NO_GPUS
    body, options = _split_options(text, field)
    count, model_token = _split_count(body, field)
    model = canonical_gpu_name(model_token)
    if model is None:
        known = ", ".join(m for m in GPU_MODELS if GPU_MODELS[m].memory_gib > 0)
        raise ConfigError(f"unknown GPU model '{model_token}' in '{text}' (known: {known})", field=field)
    mig = "mig" in options
    if mig and not GPU_MODELS[model].supports_mig:
        raise ConfigError(f"GPU model '{model}' does not support MIG (in '{text}')", field=field)
    return DeclaredGpus(count=count, model=model, mig=mig)


def _split_options(text: str, field: str) -> tuple[str, frozenset[str]]:
    """``"8xA100:mig"`` → ``("8xA100", {"mig"})``; unknown options are errors."""
    body, *opts = text.split(":")
    options: set[str] = set()
    for raw in opts:
        opt = raw.strip().lower()
        if opt not in _KNOWN_OPTIONS:
            raise ConfigError(
                f"unknown option ':{raw.strip()}' in '{text}' (known: {', '.join(':' + o for o in _KNOWN_OPTIONS)})",
                field=field,
            )
        options.add(opt)
    return body.strip(), frozenset(options)


def _split_count(body: str, field: str) -> tuple[int, str]:
    """``"8xA100-80GB"`` → ``(8, "A100-80GB")``; ``"A100-80GB"`` → ``(1, "A100-80GB")``."""
    m = _COUNT_RE.match(body)
    if m is None:
        count, model = 1, body
        if body.isdigit():
            raise ConfigError(f"GPU count '{body}' needs a model, e.g. '{body}xA100-80GB'", field=field)
    else:
        count, model = int(m.group(1)), m.group(2).strip()
        if not 1 <= count <= MAX_DECLARED_GPUS:
            raise ConfigError(
                f"GPU count '{m.group(1)}' must be 1..{MAX_DECLARED_GPUS} (use '0' for no GPUs)", field=field
            )
    if not model:
        raise ConfigError(f"missing GPU model in '{body}'", field=field)
    if any(c.isspace() for c in model):
        raise ConfigError(f"bad GPU model token '{model}' (no spaces allowed)", field=field)
    return count, model
