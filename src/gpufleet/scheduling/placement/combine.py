"""A weighted combination of score plugins, as kube-scheduler combines Score plugins.

Each plugin's scores are normalized to 0..100 over the candidate nodes (min-max, like
NormalizeScore; all equal → 0), multiplied by its weight and summed. A node vetoed (``-inf``) by
any plugin stays vetoed. GPUs inside the chosen node are chosen by the plugin with the highest
weight (the first such on ties), as the FGD simulator configures Open-Gpu-Share's gpuSelMethod.

Configured through ``PolicyContext.params["plugins"]``: a sequence of ``(name, weight)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.errors import RegistryError
from gpufleet.scheduling.framework import PLACEMENT, PolicyContext, ScorePlugin
from gpufleet.scheduling.placement.base import MAX_NODE_SCORE, AllocationObserver, minmax01
from gpufleet.scheduling.snapshot import Assignment, ClusterSnapshot, FloatArray, IntArray, PodRequest


class Combined:
    name = "combine"

    def __init__(self, plugins: Sequence[tuple[ScorePlugin, float]]) -> None:
        if not plugins:
            raise RegistryError("combine needs at least one (plugin, weight)")
        self.plugins = list(plugins)
        self.selector = max(self.plugins, key=lambda pw: pw[1])[0]

    def score(self, snap: ClusterSnapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
        total = np.zeros(len(nodes))
        for plugin, weight in self.plugins:
            s = minmax01(np.asarray(plugin.score(snap, pod, nodes), dtype=np.float64))
            total += weight * MAX_NODE_SCORE * np.where(np.isfinite(s), s, 0.0)
            total[~np.isfinite(s)] = -np.inf
        return total

    def select(self, snap: ClusterSnapshot, pod: PodRequest, node: int) -> Assignment | None:
        return self.selector.select(snap, pod, node)

    def observe(self, snap: ClusterSnapshot, pod: PodRequest, a: Assignment, sign: int) -> None:
        for plugin, _ in self.plugins:
            if isinstance(plugin, AllocationObserver):
                plugin.observe(snap, pod, a, sign)


@PLACEMENT.register("combine")
def make_combined(ctx: PolicyContext) -> Combined:
    spec = ctx.params.get("plugins", ())
    if not isinstance(spec, Sequence) or not spec:
        raise RegistryError(
            "placement 'combine' is not used by name: list several policies instead "
            "(profile 'placement:' entries with weights, or --placement fgd,cost)"
        )
    plugins: list[tuple[ScorePlugin, float]] = []
    for item in spec:
        name, weight = item
        plugins.append((PLACEMENT.get(str(name))(ctx), float(weight)))
    return Combined(plugins)
