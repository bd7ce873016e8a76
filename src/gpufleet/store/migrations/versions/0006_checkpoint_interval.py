"""Jobs declare how often they checkpoint (issue 9): ``jobs.checkpoint_interval_s``.

The world loop accounts the work a preempted job keeps (its last checkpoint) the same way on the
server as in the simulator; a job that declares no interval keeps none (NULL, as before).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("checkpoint_interval_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("checkpoint_interval_s")
