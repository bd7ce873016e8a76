"""``/v1/queue``: the waiting jobs in the order of the scheduler's last cycle.

The scheduler leader publishes ``[{job, position, reason, estimated_start, blocked}]`` on its
controller row (at most once a second; how the estimate is made: :mod:`gpufleet.scheduling.estimate`);
this joins it with the job rows (one query) and drops what is not waiting any more. Without a
leader (none started yet) the pending jobs are listed in submit order.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.api.render import ts, ts_or_none
from gpufleet.store import repo
from gpufleet.wire import QueueEntry

router = APIRouter(prefix="/v1", tags=["queue"])

_WAITING = ("PENDING", "PREEMPTED")
_FALLBACK_LIMIT = 1000


def _estimated(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _blocked(value: Any) -> str | None:
    return str(value) if value else None


@router.get("/queue", response_model=list[QueueEntry], responses=AUTHED, summary="The queue")
def get_queue(
    ctx: Ctx,
    who: Caller,
    team: Annotated[str | None, Query(max_length=63)] = None,
) -> list[QueueEntry]:
    """Waiting jobs, first to start first; a token other than admin sees only its team's entries
    (positions stay the global ones: "you are 12th")."""
    teams = None if who.is_admin else {who.team}
    if team is not None:
        teams = {team} if teams is None or team in teams else set()
    if teams is not None and not teams:
        return []
    with ctx.database.session(readonly=True) as s:
        leader = repo.leader(s, ctx.clock.now())
        published = list(leader.queue) if leader is not None else []
        if not published:
            pending = repo.pending_jobs(s, teams=teams, limit=_FALLBACK_LIMIT)
            reason = "waiting for the scheduler" if leader is None else "queued since the last scheduling cycle"
            return [
                QueueEntry(
                    job_id=r.id,
                    name=r.name,
                    team=r.team,
                    priority=r.priority_class,
                    position=i,
                    reason=reason,
                    estimated_start=None,
                    submitted_at=ts(r.submitted_at),
                )
                for i, r in enumerate(pending, start=1)
            ]
        ids = [str(e.get("job")) for e in published if isinstance(e, dict) and e.get("job")]
        rows = repo.jobs_by_id(s, ids, states=_WAITING, teams=teams)
    out = []
    for i, entry in enumerate(published, start=1):
        if not isinstance(entry, dict):
            continue
        row = rows.get(str(entry.get("job")))
        if row is None:
            continue
        out.append(
            QueueEntry(
                job_id=row.id,
                name=row.name,
                team=row.team,
                priority=row.priority_class,
                position=int(entry.get("position") or i),
                reason=str(entry.get("reason") or ""),
                estimated_start=ts_or_none(_estimated(entry.get("estimated_start"))),
                submitted_at=ts(row.submitted_at),
                blocked=_blocked(entry.get("blocked")),
            )
        )
    out.sort(key=lambda e: e.position)
    return out
