"""Reads of the Kubernetes custom-resource reconciler: a budget by its CR's name, the jobs an attribution covers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.store.models import BudgetRow, JobRow

# The attribution match keys that are job columns (other keys, e.g. labels, are filtered by the caller).
_MATCH_COLUMNS: Final[Mapping[str, Any]] = {
    "namespace": JobRow.namespace,
    "project": JobRow.project,
    "experiment": JobRow.experiment,
}


def budget_named(s: Session, name: str) -> BudgetRow | None:
    """The budget called ``name`` (by name only, not id), refreshed from the store; None if none."""
    q = select(BudgetRow).where(BudgetRow.name == name).execution_options(populate_existing=True)
    return s.scalars(q).first()


def team_jobs_matching(s: Session, team: str, states: Sequence[str], match: Mapping[str, str]) -> list[JobRow]:
    """``team``'s jobs in ``states`` whose namespace, project and experiment equal those ``match``
    names (its other keys are ignored here)."""
    where = [JobRow.team == team, JobRow.state.in_(states)]
    where += [_MATCH_COLUMNS[dim] == value for dim, value in match.items() if dim in _MATCH_COLUMNS]
    return list(s.scalars(select(JobRow).where(*where)))
