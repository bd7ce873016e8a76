"""The MCP resources: the queue, the budgets with their status, the recommendations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.sdk import Client


def queue_resource(client: Client) -> list[dict[str, Any]]:
    """``GET /v1/queue``: waiting jobs in start order, with why each waits and when it should start."""
    return [q.model_dump(mode="json") for q in client.queue()]


def budgets_resource(client: Client) -> list[dict[str, Any]]:
    """``GET /v1/budgets`` with each one's ``/status`` (spend, committed, projection, days left)."""
    out = []
    for b in client.budgets():
        d = b.model_dump(mode="json")
        try:
            d["status"] = client.budget_status(b.id).model_dump(mode="json")
        except GpufleetError as e:
            d["status"] = {"error": str(e)}
        out.append(d)
    return out


def recommendations_resource(client: Client, window: str = "7d") -> list[dict[str, Any]]:
    """``GET /v1/recommendations`` over the last 7 days, largest $/month first."""
    return [r.model_dump(mode="json") for r in client.recommendations(window)]
