"""Where a job may run and what keeps it off a node (issue 22, observation 7): ``jobs.constraints``
and ``nodes.taints``.

``jobs.constraints`` is the job's node selector, required node affinity and tolerations in the
PodSpec's own JSON shape (``nodeSelector``, ``affinity.nodeAffinity.requiredDuringScheduling...``,
``tolerations``); ``nodes.taints`` the node's NoSchedule/NoExecute taints (``[{key, value,
effect}]``). Both NULL for the rows there are: no job had constraints and no node taints before
(a node with a taint gpufleet's pods did not tolerate was not used at all), so NULL is what they
were. The downgrade drops both columns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-21 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("constraints", sa.JSON(), nullable=True))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("taints", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("taints")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("constraints")
