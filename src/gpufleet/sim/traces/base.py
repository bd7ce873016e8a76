"""What every trace loader returns.

A :class:`Trace` is a list of jobs with their submit times (seconds from the trace's start,
sorted) and, where the trace has them, the cluster's nodes. Loaders raise
:class:`gpufleet.errors.TraceError` naming the file, line and field of a bad row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model.job import JobSpec
from gpufleet.model.node import Node, NodePool


@dataclass(frozen=True, slots=True)
class TraceJob:
    submit_time: float  # seconds from the start of the trace
    spec: JobSpec  # ``spec.duration_s`` is how long it really runs


@dataclass(slots=True)
class Trace:
    name: str
    jobs: list[TraceJob]
    nodes: list[Node] = field(default_factory=list)
    pools: list[NodePool] = field(default_factory=list)
    source: str = ""  # file or generator that produced it
    # a cluster's own history (gpufleet.sim.history): the requests are what the cluster really ran —
    # fractions, MIG slices, time-sliced shares — so a what-if's baseline replays them as they are
    as_run: bool = False
    # what the cluster's ledger billed for its nodes over the span these jobs cover (history only):
    # the figure a replay "as is" should reproduce; None when there is no such record
    recorded_cost_usd: float | None = None

    def __post_init__(self) -> None:
        self.jobs.sort(key=lambda j: j.submit_time)

    def __len__(self) -> int:
        return len(self.jobs)
