"""Team usage: what each team holds now and its decayed historical usage.

Feeds fair-share ordering (DRF on current shares, Slurm-style decayed usage) and quota admission.
Usage is in milli-GPU per GPU type, CPU milli-cores and memory MiB. Pure bookkeeping: the caller
tells it the time; it never reads a clock.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from gpufleet.model.share import milli_gpus


@dataclass(slots=True)
class TeamUsage:
    gpu_milli: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # gpu type → milli
    cpu_milli: int = 0
    memory_mib: int = 0
    decayed_gpu_s: float = 0.0  # decayed GPU-seconds (as of ``decayed_at``)
    decayed_at: float = 0.0

    @property
    def total_gpu_milli(self) -> int:
        return sum(self.gpu_milli.values())


class UsageTracker:
    """Current allocation per team and per GPU type, plus decayed usage with a half-life."""

    def __init__(self, half_life_s: float = 7 * 24 * 3600.0) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s must be positive")
        self.half_life_s = half_life_s
        self.teams: dict[str, TeamUsage] = defaultdict(TeamUsage)
        self.version = 0  # bumped on every change of what teams hold (for callers' caches)

    def _decay_to(self, u: TeamUsage, now: float) -> None:
        if now > u.decayed_at:
            dt = now - u.decayed_at
            held_gpus = milli_gpus(u.total_gpu_milli)
            k = math.log(2) / self.half_life_s
            # exact integral of constant usage under exponential decay over dt
            decay = math.exp(-k * dt)
            u.decayed_gpu_s = u.decayed_gpu_s * decay + held_gpus * (1 - decay) / k
            u.decayed_at = now

    def add(self, team: str, gpu_type: str, gpu_milli: int, cpu_milli: int, memory_mib: int, now: float) -> None:
        u = self.teams[team]
        self._decay_to(u, now)
        self.version += 1
        if gpu_milli:
            u.gpu_milli[gpu_type] += gpu_milli
        u.cpu_milli += cpu_milli
        u.memory_mib += memory_mib

    def remove(self, team: str, gpu_type: str, gpu_milli: int, cpu_milli: int, memory_mib: int, now: float) -> None:
        u = self.teams[team]
        self._decay_to(u, now)
        self.version += 1
        if gpu_milli:
            u.gpu_milli[gpu_type] -= gpu_milli
            if u.gpu_milli[gpu_type] < 0:
                raise ValueError(f"team {team}: negative {gpu_type} usage")
        u.cpu_milli -= cpu_milli
        u.memory_mib -= memory_mib

    def held(self, team: str, gpu_type: str) -> int:
        u = self.teams.get(team)
        return 0 if u is None else u.gpu_milli.get(gpu_type, 0)

    def decayed(self, team: str, now: float) -> float:
        u = self.teams.get(team)
        if u is None:
            return 0.0
        self._decay_to(u, now)
        return u.decayed_gpu_s

    def dominant_share(self, team: str, gpu_total_milli: int, cpu_total: int, mem_total: int) -> float:
        """DRF dominant share: the largest of the team's GPU, CPU and memory shares of the cluster."""
        u = self.teams.get(team)
        if u is None:
            return 0.0
        shares = [
            u.total_gpu_milli / gpu_total_milli if gpu_total_milli else 0.0,
            u.cpu_milli / cpu_total if cpu_total else 0.0,
            u.memory_mib / mem_total if mem_total else 0.0,
        ]
        return max(shares)
