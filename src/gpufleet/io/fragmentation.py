"""The fragmentation experiment's inputs: openb clusters by name or path, and the published curves
(``analysis_allo_discrete.csv``) to compare with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.errors import InputError
from gpufleet.experiments.fragmentation import (
    SEEDS,
    Cluster,
    FloatArray,
    TraceResult,
    make_cluster,
    parse_published,
    run_experiment,
)
from gpufleet.io.traces import load_openb_nodes, load_openb_pods, openb_variant, pod_list_path, trace_name
from gpufleet.scheduling.framework import PLACEMENT
from gpufleet.sim.traces.openb import OpenbNodes


def load_cluster(trace: str, *, nodes: OpenbNodes | None = None) -> Cluster:
    """A trace by packaged name (``default``, ``gpushare40``...) or CSV path, on the GPU-node list;
    also as ``gpufleet simulate`` takes it: ``openb[:VARIANT]`` (:func:`~gpufleet.io.traces.openb_variant`)."""
    trace = openb_variant(trace) or trace
    pods = load_openb_pods(pod_list_path(trace), trace=trace)
    nodes = nodes if nodes is not None else load_openb_nodes()
    return make_cluster(trace_name(trace), nodes, pods)


def load_published(directory: str | Path, trace: str) -> dict[str, FloatArray]:
    """Published per-seed unallocated curves (policy → [seeds, 131]) from
    ``analysis_allo_discrete.csv`` in ``directory``, for ``trace`` (short or full name)."""
    path = Path(directory) / "analysis_allo_discrete.csv"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise InputError("published curves not found", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None
    return parse_published(text, trace, source=str(path))


def run_fragmentation(
    traces: Sequence[str | Cluster],
    policies: Sequence[str],
    seeds: Sequence[int] = SEEDS,
    *,
    inflation: float = 1.3,
    published: str | Path | None = None,
    workers: int = 1,
    progress: Callable[[float, float], None] | None = None,
) -> list[TraceResult]:
    """:func:`~gpufleet.experiments.fragmentation.run_experiment` on traces given by name or
    path, compared with the published curves in the ``published`` directory when given.
    ``progress(runs done, runs)`` is called after each (trace, policy, seed) run."""
    for p in policies:
        PLACEMENT.get(p)  # fail early on an unknown name, before loading any trace
    clusters = [t if isinstance(t, Cluster) else load_cluster(t) for t in traces]
    pub = {c.trace: load_published(published, c.trace) for c in clusters} if published is not None else None
    return run_experiment(
        clusters, policies, seeds, inflation=inflation, published=pub, workers=workers, progress=progress
    )
