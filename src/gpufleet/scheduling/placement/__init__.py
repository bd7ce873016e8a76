"""Placement policies (ScorePlugins), one module each, registered in ``PLACEMENT`` on import."""

from gpufleet.scheduling.placement import (
    bestfit,
    clustering,
    combine,
    cost,
    dotprod,
    fgd,
    fgdcpu,
    fgdwaste,
    firstfit,
    packing,
    randomfit,
    spread,
)
from gpufleet.scheduling.placement.base import commit, place_one, uncommit

__all__ = [
    "bestfit",
    "clustering",
    "combine",
    "commit",
    "cost",
    "dotprod",
    "fgd",
    "fgdcpu",
    "fgdwaste",
    "firstfit",
    "packing",
    "place_one",
    "randomfit",
    "spread",
    "uncommit",
]
