"""Quota admission with cohorts (Kueue semantics).

- A team with no :class:`Quota` is unlimited. A team with a quota may hold, per GPU type, up to
  its nominal quota (the entry for the type, else ``"*"``, else 0).
- Beyond nominal it may *borrow* while its cohort has unused nominal quota of that type, up to
  its ``borrowing_limit_milli``.
- A team within its nominal quota may *reclaim*: preempt jobs of cohort members that are
  borrowing that type (see ``preemption.py``). A reclaim never makes the reclaimer borrow, so
  reclaim cannot cycle.
- Only a preemptible job may borrow (``may_borrow``): what is borrowed can be reclaimed, and a job
  that is not preemptible is never stopped, so it may only use what cannot be taken back from it —
  its team's nominal quota (KAI-scheduler: non-preemptible workloads must be in-quota). Since no
  such job ever borrows, a team's non-preemptible jobs hold at most its nominal quota, and whatever
  it borrows is held by preemptible jobs: a reclaim always finds its victims among those.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.model.gpu import canonical_gpu_name
from gpufleet.model.job import Job
from gpufleet.model.quota import Quota
from gpufleet.model.share import milli_gpus
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
        # valid for one usage version
        self._admit_cache: dict[tuple[str, int, int, bool], tuple[int, QuotaVerdict]] = {}
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

    def cohort_unused(self, team: str, gpu_type: str, usage: UsageTracker) -> int:
        """Milli-GPU of ``gpu_type`` of the nominal quota of ``team``'s cohort (or of the team alone)
        that nobody holds; 0 for a team without a quota."""
        q = self.quotas.get(team)
        if q is None:
            return 0
        nominal, used = self._cohort(q.cohort or team, q.cohort is None, gpu_type, usage)
        return max(0, nominal - used)

    def own_shortfall(
        self, team: str, gpu_type: str, demand_milli: int, usage: UsageTracker, *, may_borrow: bool
    ) -> int | None:
        """Milli-GPU of ``gpu_type`` that ``team`` would have to stop of its own jobs for
        ``demand_milli`` more to be admitted on the type (Kueue's ``withinClusterQueue``): the
        least over the ways in — back within its nominal quota, or (``may_borrow``) within its
        borrowing limit and the cohort's room. None when its own jobs are not the obstacle: it has
        no quota, it is within its nominal quota (a reclaim from the cohort's borrowers is the way
        then) or no amount of its own jobs would do (the demand is above its nominal quota and it
        may not borrow)."""
        q = self.quotas.get(team)
        if q is None:
            return None
        nominal = q.nominal_for(gpu_type) or 0
        used = usage.held(team, gpu_type)
        if used + demand_milli <= nominal:
            return None
        cohort_nominal, cohort_used = self._cohort(q.cohort or team, q.cohort is None, gpu_type, usage)
        ways = []
        if demand_milli <= nominal:  # back within its nominal quota
            ways.append(max(used + demand_milli - nominal, cohort_used + demand_milli - cohort_nominal))
        if may_borrow and q.cohort:  # within its borrowing limit and the cohort's room
            limit = q.borrowing_limit_milli
            over_limit = used + demand_milli - nominal - limit if limit is not None else 0
            ways.append(max(over_limit, cohort_used + demand_milli - cohort_nominal))
        ways = [w for w in ways if 0 < w <= used]
        return min(ways) if ways else None

    def is_borrowing(self, team: str, gpu_type: str, usage: UsageTracker) -> bool:
        n = self.nominal(team, gpu_type)
        return n is not None and usage.held(team, gpu_type) > n

    def admit(
        self,
        team: str,
        demand_milli: int,
        gpu_types: Sequence[str],
        usage: UsageTracker,
        *,
        may_borrow: bool = True,
    ) -> QuotaVerdict:
        """Which GPU types ``team`` may place ``demand_milli`` more milli-GPU on; ``may_borrow``:
        False for a job that is not preemptible (it may use its team's nominal quota only)."""
        memo_key = (team, demand_milli, len(gpu_types), may_borrow)
        hit = self._admit_cache.get(memo_key)
        if hit is not None and hit[0] == usage.version:
            return hit[1]
        verdict = self._admit(team, demand_milli, gpu_types, usage, may_borrow)
        self._admit_cache[memo_key] = (usage.version, verdict)
        return verdict

    def _admit(
        self, team: str, demand_milli: int, gpu_types: Sequence[str], usage: UsageTracker, may_borrow: bool
    ) -> QuotaVerdict:
        k = max(1, len(gpu_types))
        q = self.quotas.get(team)
        if q is None or demand_milli == 0:
            ones = np.ones(k, dtype=np.bool_)
            return QuotaVerdict(ones, ones)
        ok = np.zeros(k, dtype=np.bool_)
        within = np.zeros(k, dtype=np.bool_)
        reasons = []
        held = []  # what the team holds of the types it would have to borrow (a job that may not)
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
            if not may_borrow and q.cohort:
                held.append(f"{team} holds {milli_gpus(used):g} of its {milli_gpus(nominal):g} {t} GPUs")
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
        if held:
            reasons.append(f"a job that is not preemptible may not borrow ({'; '.join(held)})")
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


class NominalReservations:
    """No thrash (Kueue admits the work that fits in nominal quota before the work that borrows): a
    preemptible job may not borrow the room of its cohort that another member's pending jobs would
    take within that member's unused nominal quota — that member would reclaim it at once.

    Made once per cycle from the queue: per (member, GPU type) the pending single-pod jobs of the
    member that could use the type (every type they allow) and each fit within the member's unused
    nominal quota of it, summed up to that quota (jobs beyond it would borrow, not reclaim). What is
    kept then is, per member, the least of what those jobs still ask (less those placed since) and
    the member's unused nominal quota now."""

    def __init__(self, quotas: QuotaPolicy, usage: UsageTracker, gpu_types: Sequence[str], pending: Iterable[Job]):
        self.quotas = quotas
        self.usage = usage
        room: dict[tuple[str, str], int] = {}  # (member, type) → its unused nominal quota
        for team, q in quotas.quotas.items():
            if q.cohort is None:
                continue
            for t in gpu_types:
                free = (q.nominal_for(t) or 0) - usage.held(team, t)
                if free > 0:
                    room[(team, t)] = free
        self._jobs: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
        asked: dict[tuple[str, str], int] = defaultdict(int)
        open_ = len(room)
        for job in pending if room else ():
            spec = job.spec
            if spec.gang_size != 1 or not spec.gpu.count:
                continue
            demand = spec.total_gpu_milli
            allowed = {canonical_gpu_name(t) or t for t in spec.gpu_types} if spec.gpu_types else None
            for t in gpu_types:
                key = (job.team, t)
                free = room.get(key, 0)
                if demand > free or asked[key] >= free or (allowed is not None and t not in allowed):
                    continue
                self._jobs[key].append((job.id, demand))
                asked[key] += demand
                if asked[key] >= free:
                    open_ -= 1
            if open_ <= 0:
                break

    def kept(self, team: str, gpu_type: str, placed: Container[str]) -> tuple[int, list[str]]:
        """Milli-GPU of ``gpu_type`` in ``team``'s cohort kept for the other members' pending
        nominal work, and who they are; ``placed``: jobs placed since (they hold their room)."""
        q = self.quotas.quotas.get(team)
        if q is None or q.cohort is None:
            return 0, []
        total, who = 0, []
        for m in self.quotas.cohorts[q.cohort]:
            jobs = self._jobs.get((m, gpu_type)) if m != team else None
            if not jobs:
                continue
            asked = sum(d for jid, d in jobs if jid not in placed)
            free = (self.quotas.nominal(m, gpu_type) or 0) - self.usage.held(m, gpu_type)
            keep = min(asked, free)
            if keep > 0:
                total += keep
                who.append(m)
        return total, who
