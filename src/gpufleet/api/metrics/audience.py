"""Who reads ``/metrics`` (and ``/metrics/dcgm``), and which series each reader gets.

The README promises that another team's job is a 404 everywhere; the metrics keep it:

- **no token** (:data:`ANONYMOUS`): cluster totals. A family whose series carry a job id, a team,
  a namespace, a project or a pod (:data:`PRIVATE_LABELS`) is summed over those labels (one
  series per remaining label set: ``gpufleet_jobs{state}``, ``gpufleet_cost_usd_total{gpu_type,
  capacity_type}``, ``container_gpu_allocation{node,...}``); the budget families are served
  without samples (a sum of percentages or of limits means nothing); the DCGM series name no pod.
  Summed counters are kept monotonic in this process (a high-water mark per series, as the full
  counters are).
- **a member's or a viewer's token**: the series of its own team (by their ``team`` label, a pod's
  owner, a budget's owning team), and the cluster-wide families (nodes, HTTP, savings, GPUs).
- **an admin token** (:data:`EVERYTHING`, what Prometheus is given): every series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from gpufleet.api.auth import Principal

__all__ = ["ANONYMOUS", "BUDGET_FAMILIES", "EVERYTHING", "PRIVATE_LABELS", "Audience", "Owners", "restrict"]

# labels that name a team's work: a job id, its team, namespace, project, a run's pod, a budget
PRIVATE_LABELS = frozenset({"job", "team", "namespace", "project", "pod", "budget"})
BUDGET_FAMILIES = frozenset(
    {
        "gpufleet_budget_percentage",
        "gpufleet_budget_spend_usd",
        "gpufleet_budget_limit_usd",
        "gpufleet_budget_enforcing",
    }
)
_SUMMED_NOTE = " (no token: summed over the job, team, namespace, project and pod labels)"


@dataclass(frozen=True, slots=True)
class Audience:
    """Who scrapes: everything (an admin token), one team (a member or viewer token), or nobody in
    particular (no token: the totals)."""

    everything: bool = False
    team: str | None = None

    @classmethod
    def of(cls, who: Principal | None) -> Audience:
        if who is None:
            return ANONYMOUS
        if who.reads_every_series:
            return EVERYTHING
        return cls(team=who.team)

    @property
    def anonymous(self) -> bool:
        return not self.everything and self.team is None

    def sees(self, team: str | None) -> bool:
        """Whether this audience sees the series of ``team``'s work (None: an unknown owner)."""
        if self.everything:
            return True
        return team is not None and team == self.team


ANONYMOUS = Audience()
EVERYTHING = Audience(everything=True)


@dataclass
class Owners:
    """The teams behind label values that do not name their team: pods and budgets."""

    pods: dict[str, str] = field(default_factory=dict)  # pod (<job>-r<run>, a Kubernetes Job) → team
    budgets: dict[str, str] = field(default_factory=dict)  # budget name → owning team ("": none)


HighWater = Callable[[str, Sequence[str], float], float]


def restrict(families: Iterable[Metric], audience: Audience, owners: Owners, high: HighWater) -> Iterator[Metric]:
    """``families`` (every series) as ``audience`` may see them (module docstring)."""
    for fam in families:
        if audience.everything:
            yield fam
        elif audience.anonymous:
            yield _totals(fam, high)
        else:
            yield _copy(fam, [s for s in fam.samples if _visible(fam.name, s, audience, owners)])


def _copy(fam: Metric, samples: list[Sample], documentation: str | None = None) -> Metric:
    out = Metric(fam.name, fam.documentation if documentation is None else documentation, fam.type, fam.unit)
    out.samples = samples
    return out


def _visible(family: str, s: Sample, audience: Audience, owners: Owners) -> bool:
    labels = s.labels
    if family in BUDGET_FAMILIES:
        return audience.sees(owners.budgets.get(labels.get("budget", "")) or None)
    if "team" in labels:
        return audience.sees(labels["team"])
    if "pod" in labels:
        return audience.sees(owners.pods.get(labels["pod"]))
    return not PRIVATE_LABELS & labels.keys()  # a private label without a known owner: nobody's


def _totals(fam: Metric, high: HighWater) -> Metric:
    """``fam`` summed over its private labels (budgets: no samples)."""
    if fam.name in BUDGET_FAMILIES:
        return _copy(fam, [])
    if not any(PRIVATE_LABELS & s.labels.keys() for s in fam.samples):
        return fam
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for s in fam.samples:
        if s.name.endswith("_created"):  # a creation time: no meaning once summed
            continue
        key = (s.name, tuple((k, v) for k, v in s.labels.items() if k not in PRIVATE_LABELS))
        sums[key] = sums.get(key, 0.0) + s.value
    samples = []
    for (name, labels), value in sums.items():
        if fam.type == "counter":
            value = high("total:" + name, [f"{k}={v}" for k, v in labels], value)
        samples.append(Sample(name, dict(labels), value, None, None))
    return _copy(fam, samples, fam.documentation + _SUMMED_NOTE)
