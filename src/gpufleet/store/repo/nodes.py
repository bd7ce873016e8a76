"""Persists the node inventory and each node's priced intervals (the ledger's capacity side)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpufleet.errors import NotFoundError
from gpufleet.model.node import CapacityType, Node
from gpufleet.store.convert import gpu_facts_to_json, taints_to_json
from gpufleet.store.models import NodeIntervalRow, NodeRow


def _open_interval(s: Session, name: str) -> NodeIntervalRow | None:
    q = select(NodeIntervalRow).where(NodeIntervalRow.node == name, NodeIntervalRow.end.is_(None))
    return s.scalars(q.order_by(NodeIntervalRow.start.desc())).first()


def _interval_shape(
    pool: str, model: str, gpus: int, cpu: int, mem: int, capacity: str, usd: float
) -> tuple[str, str, int, int, int, str, float]:
    return (pool, model, gpus, cpu, mem, capacity, usd)


def upsert_node(s: Session, node: Node, *, hourly_usd: float, now: float) -> NodeRow:
    """Record that ``node`` exists now at ``hourly_usd``. A new node gets an open ledger interval;
    a change of shape or price closes the open interval at ``now`` and opens a new one (so the
    ledger prices each second at the price of that second); a removed node comes back."""
    capacity = CapacityType(node.capacity_type).value
    shape = _interval_shape(
        node.pool, node.gpu_model, node.gpu_count, node.cpu_milli, node.memory_mib, capacity, hourly_usd
    )
    row = s.get(NodeRow, node.name)
    if row is None:
        row = NodeRow(name=node.name, added_at=now, state="ready")
        s.add(row)
    elif row.state == "removed":
        row.state, row.removed_at, row.added_at = "ready", None, now
    row.gpu_model, row.gpu_count, row.cpu_milli, row.memory_mib = (
        node.gpu_model,
        node.gpu_count,
        node.cpu_milli,
        node.memory_mib,
    )
    row.pool, row.capacity_type, row.sharing = node.pool, capacity, str(node.sharing)
    row.hourly_price_usd, row.labels, row.gpu_facts = hourly_usd, dict(node.labels), gpu_facts_to_json(node.gpu_facts)
    row.taints = taints_to_json(node.taints)
    iv = _open_interval(s, node.name)
    if iv is not None:
        same = (
            _interval_shape(
                iv.pool, iv.gpu_model, iv.gpu_count, iv.cpu_milli, iv.memory_mib, iv.capacity_type, iv.hourly_usd
            )
            == shape
        )
        if same:
            s.flush()
            return row
        iv.end = max(now, iv.start)
    s.add(
        NodeIntervalRow(
            node=node.name,
            pool=node.pool,
            gpu_model=node.gpu_model,
            gpu_count=node.gpu_count,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            capacity_type=capacity,
            hourly_usd=hourly_usd,
            start=now,
            end=None,
        )
    )
    s.flush()
    return row


def remove_node(s: Session, name: str, now: float) -> NodeRow:
    """The node went away: close its ledger interval (idempotent)."""
    row = s.get(NodeRow, name)
    if row is None:
        raise NotFoundError(f"node '{name}' not found")
    if row.state != "removed":
        row.state, row.removed_at = "removed", now
    iv = _open_interval(s, name)
    if iv is not None:
        iv.end = max(now, iv.start)
    s.flush()
    return row


def list_nodes(s: Session, include_removed: bool = False) -> list[NodeRow]:
    q = select(NodeRow).order_by(NodeRow.name)
    if not include_removed:
        q = q.where(NodeRow.state != "removed")
    return list(s.scalars(q))


def nodes_named(s: Session, names: Iterable[str]) -> dict[str, NodeRow]:
    """The rows of the nodes ``names`` (removed ones too), by primary key: a run's end meters the
    few nodes its shares name, not every node ever recorded."""
    return {name: row for name in dict.fromkeys(names) if (row := s.get(NodeRow, name)) is not None}


def node_intervals(s: Session, name: str) -> list[NodeIntervalRow]:
    q = select(NodeIntervalRow).where(NodeIntervalRow.node == name).order_by(NodeIntervalRow.start)
    return list(s.scalars(q))


def node_models(s: Session) -> dict[str, str]:
    """Node name → GPU model, of every node ever recorded (removed ones included)."""
    return {str(name): str(model) for name, model in s.execute(select(NodeRow.name, NodeRow.gpu_model))}


def gpu_capacity(s: Session) -> int:
    """GPUs on nodes that are not removed."""
    total = s.scalar(select(func.coalesce(func.sum(NodeRow.gpu_count), 0)).where(NodeRow.state != "removed"))
    return int(total or 0)


def node_intervals_between(s: Session, start: float, end: float) -> list[tuple[NodeIntervalRow, str | None]]:
    """The node intervals that overlap ``[start, end)``, each with its node's sharing mode (None:
    the node has no row), by node, then start."""
    q = (
        select(NodeIntervalRow, NodeRow.sharing)
        .join(NodeRow, NodeRow.name == NodeIntervalRow.node, isouter=True)
        .where(NodeIntervalRow.start < end, or_(NodeIntervalRow.end.is_(None), NodeIntervalRow.end > start))
        .order_by(NodeIntervalRow.node, NodeIntervalRow.start)
    )
    return [(iv, sharing) for iv, sharing in s.execute(q)]
