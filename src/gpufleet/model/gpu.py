"""GPU models and MIG geometry.

MIG geometry follows NVIDIA's placement tables for A100 and H100: a GPU has 8 memory slices and
7 compute slices; a profile occupies ``memory_slices`` contiguous memory slices starting at one
of its ``starts``. A profile's share of the GPU (for cost and fragmentation) is its compute
slices / 7.

A profile name may end in an attribute (go-nvlib's ``MigProfileInfo.String()``): ``+me`` (the
GPU's media engines: NVDEC, NVJPG, OFA), ``+me.all``, ``+gfx``, ``-me`` (no media engine). The
NVIDIA device plugin and GPU Feature Discovery write its ``+`` as ``.`` (a Kubernetes resource
name holds no ``+``): ``1g.10gb+me`` is the resource ``nvidia.com/mig-1g.10gb.me``.
:meth:`GpuModel.mig_profile` reads both spellings; an attributed profile has its base profile's
compute and memory slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

MIG_MEMORY_SLICES = 8
MIG_COMPUTE_SLICES = 7
MILLI = 1000  # one whole GPU in milli-GPU


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # e.g. "1g.10gb"
    compute_slices: int
    memory_slices: int
    memory_gib: int
    starts: tuple[int, ...]
    # at most this many on one GPU when fewer than its placements (None: one per placement): a GPU's
    # media engines go to a single +me instance
    max_instances: int | None = None

    @property
    def per_gpu(self) -> int:
        """How many of this profile one GPU holds when all its slices are this profile."""
        return min(len(self.starts), self.max_instances or len(self.starts))

    @property
    def share(self) -> float:
        """Fraction of the GPU this slice pays for and occupies (compute slices / 7)."""
        return self.compute_slices / MIG_COMPUTE_SLICES

    @property
    def milli(self) -> int:
        return round(MILLI * self.share)

    def masks(self) -> tuple[int, ...]:
        """Bit masks (bit i = memory slice i) of every valid placement of this profile."""
        run = (1 << self.memory_slices) - 1
        return tuple(run << s for s in self.starts)


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_gib: float
    mig_profiles: tuple[MigProfile, ...] = field(default=())
    aliases: tuple[str, ...] = field(default=())

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile | None:
        """The profile ``name`` (NVIDIA's or the device plugin's spelling, e.g. ``1g.10gb.me``) on
        this model, or None when the model has no such profile."""
        for p in self.mig_profiles:
            if p.name == name:
                return p
        size, attribute = split_mig_attribute(name)
        base = next((p for p in self.mig_profiles if p.name == size), None)
        if base is None or not attribute:
            return None
        # Ampere and Hopper offer the media engines on the one-slice profile only, one instance per GPU
        # (NVIDIA MIG user guide, the supported-profiles tables); -me, +me.all and +gfx are Blackwell's
        if attribute == MIG_MEDIA_EXTENSIONS and base.compute_slices == base.memory_slices == 1:
            return replace(base, name=size + attribute, max_instances=1)
        return None


# A MIG profile attribute as written after the profile's size → NVIDIA's spelling of it, longest first.
MIG_MEDIA_EXTENSIONS = "+me"
MIG_ATTRIBUTES: dict[str, str] = {
    "+me.all": "+me.all",
    ".me.all": "+me.all",  # the device plugin's spelling
    MIG_MEDIA_EXTENSIONS: MIG_MEDIA_EXTENSIONS,
    ".me": MIG_MEDIA_EXTENSIONS,
    "+gfx": "+gfx",
    ".gfx": "+gfx",
    "-me": "-me",
}
# attributes whose instances hold all the GPU's media engines: at most one per GPU
_ONE_PER_GPU = frozenset({MIG_MEDIA_EXTENSIONS, "+me.all"})


def split_mig_attribute(name: str) -> tuple[str, str]:
    """``(size, attribute)`` of a MIG profile name, the attribute in NVIDIA's spelling or ``""``:
    ``1g.10gb.me`` → ``("1g.10gb", "+me")``, ``1g.10gb`` → ``("1g.10gb", "")``."""
    name = name.strip().lower()
    for written, attribute in MIG_ATTRIBUTES.items():
        if name.endswith(written) and len(name) > len(written):
            return name[: -len(written)], attribute
    return name, ""


def mig_instances_limit(name: str) -> int | None:
    """At most how many instances of the profile ``name`` one GPU holds whatever its size says (1 for
    a media-engine profile, known or not), else None."""
    return 1 if split_mig_attribute(name)[1] in _ONE_PER_GPU else None


def _mig(unit_gib: int) -> tuple[MigProfile, ...]:
    """The standard A100/H100 profile set for a GPU whose memory slice is ``unit_gib`` GiB."""
    u = unit_gib
    return (
        MigProfile(f"1g.{u}gb", 1, 1, u, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile(f"1g.{2 * u}gb", 1, 2, 2 * u, (0, 2, 4, 6)),
        MigProfile(f"2g.{2 * u}gb", 2, 2, 2 * u, (0, 2, 4)),
        MigProfile(f"3g.{4 * u}gb", 3, 4, 4 * u, (0, 4)),
        MigProfile(f"4g.{4 * u}gb", 4, 4, 4 * u, (0,)),
        MigProfile(f"7g.{8 * u}gb", 7, 8, 8 * u, (0,)),
    )


# H200 141GB: NVIDIA's profile names round memory (8 memory slices of ~17.6 GB).
_H200_MIG = (
    MigProfile("1g.18gb", 1, 1, 18, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.35gb", 1, 2, 35, (0, 2, 4, 6)),
    MigProfile("2g.35gb", 2, 2, 35, (0, 2, 4)),
    MigProfile("3g.71gb", 3, 4, 71, (0, 4)),
    MigProfile("4g.71gb", 4, 4, 71, (0,)),
    MigProfile("7g.141gb", 7, 8, 141, (0,)),
)

# Built-in GPU models. openb's G1/G2/G3 are undisclosed models; memory is unknown (0 = unknown).
GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("H200", 141, _H200_MIG, aliases=("H200-141GB",)),
        GpuModel("H100-80GB", 80, _mig(10), aliases=("H100",)),
        GpuModel("A100-80GB", 80, _mig(10)),
        GpuModel("A100-40GB", 40, _mig(5), aliases=("A100",)),
        GpuModel("L40S", 48),
        GpuModel("A10G", 24),
        GpuModel("A10", 24),
        GpuModel("L4", 24),
        GpuModel("T4", 16),
        GpuModel("V100-16GB", 16, aliases=("V100M16", "V100")),
        GpuModel("V100-32GB", 32, aliases=("V100M32",)),
        GpuModel("P100", 16),
        GpuModel("G1", 0),
        GpuModel("G2", 0),
        GpuModel("G3", 0),
    )
}
_ALIASES: dict[str, str] = {a.upper(): m.name for m in GPU_MODELS.values() for a in (m.name, *m.aliases)}


def canonical_gpu_name(name: str) -> str | None:
    """The built-in model name for ``name`` or one of its aliases (case-insensitive), else None."""
    return _ALIASES.get(name.strip().upper())


def gpu_model(name: str) -> GpuModel:
    """The built-in model for ``name``; an unknown name gives a model with unknown memory."""
    canon = canonical_gpu_name(name)
    if canon is not None:
        return GPU_MODELS[canon]
    return GpuModel(name.strip(), 0)
