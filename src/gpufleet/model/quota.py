"""Quotas and cohorts (Kueue semantics).

A team has a nominal GPU quota per GPU model (``"*"`` = any model), in milli-GPU. Teams in the same
cohort may borrow the cohort's unused nominal quota, up to ``borrowing_limit_milli``; a lender gets
its quota back by preempting borrowers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ANY_GPU = "*"
# A team's grant when none was set: the classes up to "normal" (an admin grants "high"/"urgent").
DEFAULT_PRIORITY_GRANT: tuple[str, ...] = ("background", "low", "normal")


@dataclass(frozen=True, slots=True)
class Quota:
    team: str
    nominal_milli: dict[str, int] = field(default_factory=dict)  # gpu model (or "*") → milli-GPU
    cohort: str | None = None
    borrowing_limit_milli: int | None = None  # None: may borrow all idle cohort quota
    weight: float = 1.0  # fair-share weight
    # Priority classes the team's members may submit with (None: any). Another team may preempt the
    # team's jobs within its nominal quota only with a strictly higher class the team could use too.
    priority_classes: tuple[str, ...] | None = None

    def nominal_for(self, gpu_model: str) -> int | None:
        """Nominal milli-GPU for a model; None when the team has no quota entry for it."""
        if gpu_model in self.nominal_milli:
            return self.nominal_milli[gpu_model]
        return self.nominal_milli.get(ANY_GPU)
