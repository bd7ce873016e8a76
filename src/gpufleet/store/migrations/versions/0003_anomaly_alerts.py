"""Anomaly alerts on budgets: a budget may opt in to daily cost-anomaly alerts for its scope, with
its own threshold (percent above the baseline) and dollar floor.

Server defaults keep every existing budget as it was (no anomaly alerts) and let the columns be
NOT NULL without a data migration.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.add_column(sa.Column("anomaly_alerts", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("anomaly_threshold_pct", sa.Float(), nullable=False, server_default="20"))
        batch.add_column(sa.Column("anomaly_floor_usd", sa.Float(), nullable=False, server_default="50"))


def downgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.drop_column("anomaly_floor_usd")
        batch.drop_column("anomaly_threshold_pct")
        batch.drop_column("anomaly_alerts")
