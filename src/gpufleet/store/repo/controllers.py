"""Persists controller replicas' heartbeats, the leader flag and the published queue."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from gpufleet.store.models import ControllerRow
from gpufleet.store.repo._common import _insert


def heartbeat(
    s: Session,
    replica: str,
    *,
    is_leader: bool,
    now: float,
    cycle_ms: float | None = None,
    queue: list[dict[str, Any]] | None = None,
    info: dict[str, Any] | None = None,
) -> None:
    """Record that ``replica`` is alive (and whether it leads). ``cycle_ms``, ``queue`` and
    ``info`` are kept from the previous heartbeat when not given."""
    values: dict[str, Any] = {
        "replica": replica,
        "is_leader": is_leader,
        "heartbeat_at": now,
        "started_at": now,
        "last_cycle_ms": cycle_ms,
        "queue": queue if queue is not None else [],
        "info": info if info is not None else {},
    }
    set_: dict[str, Any] = {"is_leader": is_leader, "heartbeat_at": now}
    if cycle_ms is not None:
        set_["last_cycle_ms"] = cycle_ms
    if queue is not None:
        set_["queue"] = queue
    if info is not None:
        set_["info"] = info
    stmt = _insert(s)(ControllerRow).values(**values)
    s.execute(stmt.on_conflict_do_update(index_elements=[ControllerRow.replica], set_=set_))  # type: ignore[attr-defined]


def leader(s: Session, now: float, stale_after_s: float = 15.0) -> ControllerRow | None:
    """The replica leading now: flagged leader with a heartbeat within ``stale_after_s``."""
    q = (
        select(ControllerRow)
        .where(and_(ControllerRow.is_leader.is_(True), ControllerRow.heartbeat_at >= now - stale_after_s))
        .order_by(ControllerRow.heartbeat_at.desc())
        .execution_options(populate_existing=True)
    )
    return s.scalars(q).first()


def list_controllers(s: Session) -> list[ControllerRow]:
    q = select(ControllerRow).order_by(ControllerRow.replica).execution_options(populate_existing=True)
    return list(s.scalars(q))
