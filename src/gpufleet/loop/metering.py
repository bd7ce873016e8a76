"""Metering: what a run holds on each node, in the ledger's units (pure).

One share per node the run was placed on (its pods on that node summed): GPU share in 1/7000 GPU
(whole GPUs ``count * 7000``, a fraction ``milli * 7``, a MIG slice its compute slices / 7), CPU and
memory of the job's request. A CPU-only job holds CPU and memory on the node it was given.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpufleet.cost.ledger import SHARE_UNITS, gpu_share
from gpufleet.model.gpu import MIG_COMPUTE_SLICES, MILLI, gpu_model
from gpufleet.model.job import GpuRequest, Job, PodPlacement

_MIG_SLICES = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True, slots=True)
class Share:
    node: str
    gpu_units: int  # 1/7000 GPU
    cpu_milli: int
    memory_mib: int

    @property
    def gpu_share(self) -> Fraction:
        return Fraction(self.gpu_units, SHARE_UNITS)


@functools.lru_cache(maxsize=4096)
def share_units(req: GpuRequest, gpu_model_name: str) -> int:
    """GPU share (1/7000 GPU) one pod asking ``req`` holds on a node of ``gpu_model_name``."""
    if req.count == 0:
        return 0
    if req.mig_profile is None:
        return req.count * req.milli * SHARE_UNITS // MILLI  # exact: 7 units per milli-GPU
    if gpu_model(gpu_model_name).mig_profile(req.mig_profile) is None:
        m = _MIG_SLICES.match(req.mig_profile)
        k = int(m.group(1)) if m else MIG_COMPUTE_SLICES
        return k * MILLI
    return int(gpu_share(req, gpu_model_name) * SHARE_UNITS)


def run_shares(
    job: Job, placement: Sequence[PodPlacement], gpu_model_of: Callable[[str], str], fallback_node: str
) -> tuple[Share, ...]:
    """The shares a run of ``job`` placed by ``placement`` holds, one per node (in first-seen order)."""
    spec = job.spec
    per_node: dict[str, tuple[int, int, int]] = {}
    for p in placement:
        units = share_units(spec.gpu, gpu_model_of(p.node)) if p.gpus else 0
        u, c, m = per_node.get(p.node, (0, 0, 0))
        per_node[p.node] = (u + units, c + spec.cpu_milli, m + spec.memory_mib)
    if not per_node and fallback_node:
        per_node[fallback_node] = (0, spec.cpu_milli, spec.memory_mib)
    return tuple(Share(n, u, c, m) for n, (u, c, m) in per_node.items())
