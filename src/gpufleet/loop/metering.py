"""Metering: what a run holds on each node, in the ledger's units (pure).

One share per node the run was placed on (its pods on that node summed): GPU share in 1/7000 GPU
(:func:`gpufleet.model.share.landed_units`: whole GPUs ``count * 7000``, a fraction ``milli * 7``, a
MIG slice its compute slices / 7, an adopted pod's replicas ``k/R`` of the node it landed on), CPU and
memory of the job's request. A CPU-only job holds CPU and memory on the node it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpufleet.model.job import Job, PodPlacement
from gpufleet.model.share import landed_units, request_units, units_fraction

# GPU share (1/7000 GPU) one pod asking a request holds on a node of a GPU model (the name callers
# know; the rule lives in gpufleet.model.share)
share_units = request_units


@dataclass(frozen=True, slots=True)
class Share:
    node: str
    gpu_units: int  # 1/7000 GPU
    cpu_milli: int
    memory_mib: int

    @property
    def gpu_share(self) -> Fraction:
        return units_fraction(self.gpu_units)


def run_shares(
    job: Job,
    placement: Sequence[PodPlacement],
    gpu_model_of: Callable[[str], str],
    fallback_node: str,
    node_replicas_of: Callable[[str], int] | None = None,
) -> tuple[Share, ...]:
    """The shares a run of ``job`` placed by ``placement`` holds, one per node (in first-seen order).
    ``node_replicas_of``: a node's replicas per GPU (:attr:`~gpufleet.model.node.GpuSharingFacts.replicas`),
    for pods that ask replicas."""
    spec = job.spec
    per_node: dict[str, tuple[int, int, int]] = {}
    for p in placement:
        units = 0
        if p.gpus:
            replicas = node_replicas_of(p.node) if node_replicas_of is not None else 1
            units = landed_units(spec.gpu, gpu_model_of(p.node), spec.labels, replicas)
        u, c, m = per_node.get(p.node, (0, 0, 0))
        per_node[p.node] = (u + units, c + spec.cpu_milli, m + spec.memory_mib)
    if not per_node and fallback_node:
        per_node[fallback_node] = (0, spec.cpu_milli, spec.memory_mib)
    return tuple(Share(n, u, c, m) for n, (u, c, m) in per_node.items())
