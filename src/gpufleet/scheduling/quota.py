"""Quota admission with cohorts (Kueue semantics).

- A team with no :class:`Quota` is unlimited. A team with a quota may hold, per GPU type, up to
  its nominal quota (the entry for the type, else ``"*"``, else 0).
- Beyond nominal it may *borrow* while its cohort has unused nominal quota of that type, up to
  its ``borrowing_limit_milli``.
- A team within its nominal quota may *reclaim*: preempt jobs of cohort members that are
  borrowing that type (see ``preemption.py``). A reclaim never makes the reclaimer borrow, so
  reclaim cannot cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.model.quota import Quota
from gpufleet.scheduling.snapshot import BoolArray
from gpufleet.scheduling.usage import UsageTracker


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    type_ok: BoolArray  # per GPU-type index: may the job use this type now?
    within_nominal: BoolArray  # per GPU-type index: would it stay within nominal quota?
    reason: str = ""


class QuotaPolicy:
    def __init__(self, quotas: Iterable[Quota] = ()) -> None:
        self.quotas: dict[str, Quota] = {}
        self.cohorts: dict[str, list[str]] = defaultdict(list)
        self._cohort_cache: dict[tuple[str, bool, str], tuple[int, int, int]] = {}
        self._nominal_cache: dict[tuple[str, bool, str], int] = {}
        self._admit_cache: dict[tuple[str, int, int], tuple[int, QuotaVerdict]] = {}  # valid for one usage version
        for q in quotas:
            self.quotas[q.team] = q
            if q.cohort:
                self.cohorts[q.cohort].append(q.team)

    def __bool__(self) -> bool:
        return bool(self.quotas)

    def weight(self, team: str) -> float:
        q = self.quotas.get(team)
        return q.weight if q else 1.0

    def nominal(self, team: str, gpu_type: str) -> int | None:
        q = self.quotas.get(team)
        if q is None:
            return None
        n = q.nominal_for(gpu_type)
        return 0 if n is None else n

    def _cohort(self, name: str, single: bool, gpu_type: str, usage: UsageTracker) -> tuple[int, int]:
        """(nominal, used) milli-GPU of ``gpu_type`` summed over a cohort (or one team), cached
        until usage changes."""
        key = (name, single, gpu_type)
        hit = self._cohort_cache.get(key)
        if hit is not None and hit[0] == usage.version:
            return hit[1], hit[2]
        members = [name] if single else self.cohorts[name]
        nominal = self._nominal_cache.get(key)
        if nominal is None:  # quotas do not change: compute once
            nominal = self._nominal_cache[key] = sum(self.quotas[m].nominal_for(gpu_type) or 0 for m in members)
        teams = usage.teams
        used = sum(teams[m].gpu_milli.get(gpu_type, 0) for m in members if m in teams)
        self._cohort_cache[key] = (usage.version, nominal, used)
        return nominal, used

    def reclaim_need(self, team: str, gpu_type: str, demand_milli: int, usage: UsageTracker) -> int:
        """Milli-GPU of ``gpu_type`` the cohort's borrowers must give back for ``team`` to use
        ``demand_milli`` more within its nominal quota (0: nothing to reclaim)."""
        q = self.quotas.get(team)
        if q is None or not q.cohort:
            return 0
        cohort_nominal, cohort_used = self._cohort(q.cohort, False, gpu_type, usage)
        return max(0, cohort_used + demand_milli - cohort_nominal)

    def is_borrowing(self, team: str, gpu_type: str, usage: UsageTracker) -> bool:
        n = self.nominal(team, gpu_type)
        return n is not None and usage.held(team, gpu_type) > n

    def admit(self, team: str, demand_milli: int, gpu_types: Sequence[str], usage: UsageTracker) -> QuotaVerdict:
        """Which GPU types ``team`` may place ``demand_milli`` more milli-GPU on."""
        memo_key = (team, demand_milli, len(gpu_types))
        hit = self._admit_cache.get(memo_key)
        if hit is not None and hit[0] == usage.version:
            return hit[1]
        verdict = self._admit(team, demand_milli, gpu_types, usage)
        self._admit_cache[memo_key] = (usage.version, verdict)
        return verdict

    def _admit(self, team: str, demand_milli: int, gpu_types: Sequence[str], usage: UsageTracker) -> QuotaVerdict:
        k = max(1, len(gpu_types))
        q = self.quotas.get(team)
        if q is None or demand_milli == 0:
            ones = np.ones(k, dtype=np.bool_)
            return QuotaVerdict(ones, ones)
        ok = np.zeros(k, dtype=np.bool_)
        within = np.zeros(k, dtype=np.bool_)
        reasons = []
        for i, t in enumerate(gpu_types):
            nominal = q.nominal_for(t) or 0
            used = usage.held(team, t)
            cohort_nominal, cohort_used = self._cohort(q.cohort or team, q.cohort is None, t, usage)
            cohort_fits = cohort_used + demand_milli <= cohort_nominal
            if used + demand_milli <= nominal:
                within[i] = True
                if cohort_fits:
                    ok[i] = True
                else:  # lent out: the borrowers must give it back first (reclaim)
                    reasons.append(f"{t}: within nominal, reclaiming from cohort '{q.cohort}'")
                continue
            if not q.cohort:
                reasons.append(f"{t}: {used + demand_milli} > nominal {nominal} milli-GPU")
                continue
            borrow = used + demand_milli - nominal
            if q.borrowing_limit_milli is not None and borrow > q.borrowing_limit_milli:
                reasons.append(f"{t}: borrowing {borrow} > limit {q.borrowing_limit_milli} milli-GPU")
                continue
            if cohort_fits:
                ok[i] = True
            else:
                reasons.append(f"{t}: cohort '{q.cohort}' has {cohort_nominal - cohort_used} milli-GPU unused")
        reason = "" if ok.any() else "quota: " + "; ".join(reasons)
        return QuotaVerdict(ok, within, reason)

    def holds(self, usage: UsageTracker, gpu_types: Sequence[str]) -> list[str]:
        """Violations of the quota invariant (for tests and audits): empty when quotas hold."""
        bad = []
        for team, q in self.quotas.items():
            for t in gpu_types:
                used = usage.held(team, t)
                nominal = q.nominal_for(t) or 0
                if used <= nominal:
                    continue
                if not q.cohort:
                    bad.append(f"{team}/{t}: {used} > nominal {nominal}")
                    continue
                if q.borrowing_limit_milli is not None and used - nominal > q.borrowing_limit_milli:
                    bad.append(f"{team}/{t}: borrowing beyond limit")
                members = self.cohorts[q.cohort]
                if sum(usage.held(m, t) for m in members) > sum(self.quotas[m].nominal_for(t) or 0 for m in members):
                    bad.append(f"cohort {q.cohort}/{t}: usage above cohort nominal")
        return bad
