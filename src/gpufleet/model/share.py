"""GPU shares: the forms a share of one GPU takes on its way, and every conversion between them.

A share is asked, placed, held and charged in six forms:

=====================  ==========================================================================
``k`` of ``R``         ``k`` replicas of a GPU time-sliced (or MPS) ``R`` ways: what a Kubernetes pod
                       asks for (``nvidia.com/gpu: k`` on a node whose GPUs have ``R`` replicas)
milli                  milli-GPU, 1000 = one GPU: what the scheduler places (``GpuRequest.milli``,
                       ``PodPlacement.milli``); a replica is ``1000 * k // R`` (rounded down)
MIG profile            ``<k>g.<mem>gb``: ``k`` of the GPU's 7 compute slices (its milli rounded)
share units            1/7000 GPU: what the ledger and the store meter; whole GPUs, MIG ``k/7`` and
                       milli ``m/1000`` are all whole numbers of units
Fraction               GPU-equivalents, exact (``units / 7000``)
float GPUs             GPU-equivalents for display, quotas, estimates and ordering (``milli / 1000``)
=====================  ==========================================================================

:class:`~gpufleet.model.job.GpuRequest` carries the placed form (count, milli, MIG profile);
:func:`request_units` turns it into what a pod holds on a node of a GPU model. A pod someone else
made (an adopted workload) asks replicas, not milli: it holds ``k/R`` of the node it lands on
(:func:`landed_units`), whatever share it was placed as.

Pure arithmetic: no I/O; the MIG geometry itself (profiles, placements) is :mod:`gpufleet.model.gpu`,
whether profiles fit one GPU together :func:`mig_fit_problem`. Outside this module and that one no
code divides by ``MILLI`` or names 7000 or the 7 compute slices (tests/project/test_layering.py names
the few exceptions: the placement plugins' published scores).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpufleet.k8s.vocabulary import LABEL_ADOPTED_OWNER, LABEL_REQUESTED_REPLICAS
from gpufleet.model.gpu import (
    MIG_COMPUTE_SLICES,
    MIG_MEMORY_SLICES,
    MILLI,
    MigProfile,
    gpu_model,
    mig_instances_limit,
)
from gpufleet.model.job import GpuRequest

SHARE_UNITS = MIG_COMPUTE_SLICES * MILLI  # 7000 share units = one GPU
UNITS_PER_MILLI = SHARE_UNITS // MILLI  # 7

# -- MIG profile names ------------------------------------------------------------------------------

# A profile name as NVIDIA writes it (``1g.10gb``, ``1g.10gb+me``, ``1g.24gb+me.all``, ``1g.24gb-me``) or
# the device plugin does (``1g.10gb.me``: gpufleet.model.gpu.MIG_ATTRIBUTES), for finding one inside a
# longer name (a GFD product label's ``-MIG-<profile>`` suffix).
MIG_PROFILE_PATTERN = r"\d+g\.\d+gb(?:[+.]me\.all|[+.]me|[+.]gfx|-me)?"
# What gpufleet reads of a name: ``<k>g.`` at its start (the compute slices), then ``<mem>gb``.
_MIG_NAME = re.compile(r"(\d+)g\.(?:(\d+)gb)?")


@dataclass(frozen=True, slots=True)
class MigName:
    slices: int  # compute slices, 1..7
    memory_gib: int | None  # the memory the name gives (None: it gives none, e.g. ``2g.x``)


def parse_mig_profile(name: str) -> MigName | None:
    """What a MIG profile's name says (``1g.10gb`` → 1 compute slice, 10 GB); None when the name does
    not start with ``<k>g.`` for ``k`` in 1..7."""
    m = _MIG_NAME.match(name)
    if m is None or not 1 <= int(m[1]) <= MIG_COMPUTE_SLICES:
        return None
    return MigName(int(m[1]), int(m[2]) if m[2] else None)


def mig_slices(profile: str, *gpu_models: str | None) -> int | None:
    """Compute slices of ``profile``: the first of ``gpu_models`` that has the profile says, else its
    name does; None for a name gpufleet cannot read (:func:`parse_mig_profile`)."""
    for name in gpu_models:
        p = gpu_model(name).mig_profile(profile) if name else None
        if p is not None:
            return p.compute_slices
    parsed = parse_mig_profile(profile)
    return parsed.slices if parsed is not None else None


def mig_milli(slices: int) -> int:
    """A MIG slice of ``slices`` compute slices in milli-GPU (``1000 * k / 7`` rounded: 1g = 143)."""
    return round(MILLI * slices / MIG_COMPUTE_SLICES)


def mig_units(slices: int) -> int:
    """A MIG slice in share units (exact: 1000 per compute slice)."""
    return slices * SHARE_UNITS // MIG_COMPUTE_SLICES


def mig_share(profile: str, gpu_model_name: str | None = None) -> float:
    """A MIG slice's share of its GPU (compute slices / 7), for weighting telemetry and estimates; a
    profile gpufleet cannot read counts as one slice."""
    return (mig_slices(profile, gpu_model_name) or 1) / MIG_COMPUTE_SLICES


def mig_slices_per_gpu(profile: str, gpu_model_name: str | None = None) -> int:
    """How many slices of ``profile`` one GPU holds when all its slices are that profile: the model's
    placements when it has the profile (one for a media-engine profile, ``+me``), else ``7 // k`` (a
    profile gpufleet cannot read: 7; a ``+me`` one: 1)."""
    p = gpu_model(gpu_model_name).mig_profile(profile) if gpu_model_name else None
    if p is not None:
        return p.per_gpu
    by_size = max(1, MIG_COMPUTE_SLICES // (mig_slices(profile) or 1))
    return min(by_size, mig_instances_limit(profile) or by_size)


def mig_fit_problem(profiles: Sequence[MigProfile]) -> str | None:
    """Why ``profiles`` do not fit on one GPU together (its 7 compute slices; their memory slices at
    their profiles' allowed placements), or None when they do."""
    compute = sum(p.compute_slices for p in profiles)
    if compute > MIG_COMPUTE_SLICES:
        return f"{compute} compute slices, the GPU has {MIG_COMPUTE_SLICES}"
    order = sorted(profiles, key=lambda p: (-p.memory_slices, len(p.starts)))

    def place(i: int, used: int) -> bool:
        if i == len(order):
            return True
        return any(not (used & mask) and place(i + 1, used | mask) for mask in order[i].masks())

    if not place(0, 0):
        return f"no placement of their memory slices ({MIG_MEMORY_SLICES}, each profile at its allowed offsets)"
    return None


# -- time-sliced replicas (k of R) and milli --------------------------------------------------------


def replicas_milli(k: int, replicas: int) -> int:
    """``k`` replicas of a GPU shared ``replicas`` ways, in milli-GPU (rounded down: 1 of 3 = 333)."""
    return MILLI * k // max(1, replicas)


def milli_replicas(milli: int, replicas: int) -> int:
    """The fewest replicas of a GPU shared ``replicas`` ways that hold ``milli`` (never less than
    asked, at least one): 250 milli of a GPU shared 8 ways = 2."""
    return max(1, -(-milli * replicas // MILLI))


def replicas_gpus(k: int, replicas: int) -> int:
    """The GPUs ``k`` replicas of GPUs shared ``replicas`` ways span at least (``k/R`` rounded up: 3
    of 2 = 2)."""
    return -(-k // max(1, replicas))


def advertised_gpus(advertised: int, replicas: int) -> int:
    """The whole GPUs behind ``advertised`` replicas of GPUs shared ``replicas`` ways (rounded down:
    a replica left over is no GPU)."""
    return advertised // max(1, replicas)


# -- milli and GPU-equivalents ------------------------------------------------------------------------


def milli_gpus(milli: float) -> float:
    """Milli-GPU as GPU-equivalents, a float (1500 → 1.5): what a job holds for display, estimates,
    quotas and ordering. Money is metered exactly, in share units."""
    return milli / MILLI


def gpus_milli(gpus: float) -> int:
    """GPU-equivalents in milli-GPU (rounded: 0.25 → 250), e.g. a quota given in GPUs."""
    return round(gpus * MILLI)


def whole_gpus(milli: int) -> int | None:
    """The whole GPUs ``milli`` makes (3000 → 3); None when it is not a whole number of GPUs."""
    return None if milli % MILLI else milli // MILLI


# -- share units and Fraction ----------------------------------------------------------------------


def gpu_units(count: int) -> int:
    """Whole GPUs in share units (7000 each)."""
    return count * SHARE_UNITS


def milli_units(milli: int) -> int:
    """Milli-GPU in share units (exact: 7 per milli-GPU)."""
    return milli * SHARE_UNITS // MILLI


def units_fraction(units: int) -> Fraction:
    """Share units as GPU-equivalents."""
    return Fraction(units, SHARE_UNITS)


def fraction_units(share: Fraction | int) -> int | None:
    """GPU-equivalents in share units; None when not a whole number of units (e.g. 1/3 GPU)."""
    f = Fraction(share)
    if SHARE_UNITS % f.denominator:
        return None
    return f.numerator * (SHARE_UNITS // f.denominator)


def gpus_units(gpus: float) -> int | None:
    """GPU-equivalents given as a float in share units: the whole number of units within 1e-6 of
    it; None when there is none (e.g. 1/3 GPU) or it is not finite."""
    if not math.isfinite(gpus):
        return None
    units_f = gpus * SHARE_UNITS
    units = round(units_f)
    return units if abs(units_f - units) <= 1e-6 else None


# -- what a pod holds --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def request_units(req: GpuRequest, gpu_model_name: str) -> int:
    """Share units one pod asking ``req`` holds on a node of ``gpu_model_name``: whole GPUs
    ``count * 7000``, a fraction ``milli * 7``, a MIG slice its compute slices (of the model's
    profile, else as its name says) ``* 1000``; a MIG name gpufleet cannot read, the whole GPU (a
    charge errs high)."""
    if req.count == 0:
        return 0
    if req.mig_profile is None:
        return req.count * milli_units(req.milli)
    return req.count * mig_units(mig_slices(req.mig_profile, gpu_model_name) or MIG_COMPUTE_SLICES)


def request_share(req: GpuRequest, gpu_model_name: str) -> Fraction:
    """:func:`request_units` as GPU-equivalents (1g.10gb on an A100-80GB = 1/7)."""
    return units_fraction(request_units(req, gpu_model_name))


# -- shares asked as replicas (adopted workloads on time-sliced nodes) -------------------------------


def label_count(labels: Mapping[str, Any], key: str) -> int | None:
    """A positive whole number a label holds, else None (absent, empty or not a number)."""
    raw = str(labels.get(key, "")).strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def requested_replicas(job_labels: Mapping[str, Any]) -> int | None:
    """The replicas each pod of an adopted job asks for; None for any other job (a label a user
    set on an API submission is not believed: gpufleet makes those pods, and asks what it placed)."""
    if not job_labels.get(LABEL_ADOPTED_OWNER):
        return None
    return label_count(job_labels, LABEL_REQUESTED_REPLICAS)


def landed_units(req: GpuRequest, gpu_model_name: str, job_labels: Mapping[str, Any], node_replicas: int) -> int:
    """Share units one pod of a job holds on the node it landed on, whose GPUs are shared
    ``node_replicas`` ways (:attr:`gpufleet.model.node.GpuSharingFacts.replicas`). A pod of an adopted
    job that asks ``k`` replicas holds ``k`` of that node's ``R`` (``1000 * k // R`` milli), whatever
    share it was placed as (its selector may match nodes of several ``R``); a fraction gpufleet's own
    pod asks there holds one replica at least (its pod asks one; the scheduler reserved
    ``max(milli, 1000 // R)``: ``ClusterSnapshot.share_milli``); any other pod holds :func:`request_units`."""
    k = requested_replicas(job_labels) if req.count and req.mig_profile is None else None
    if k is not None and node_replicas > 1:
        return milli_units(replicas_milli(k, node_replicas))
    if node_replicas > 1 and req.is_fractional:
        return milli_units(max(req.milli, replicas_milli(1, node_replicas)))
    return request_units(req, gpu_model_name)
