"""GPU telemetry as the DCGM exporter publishes it: each sample's GPU UUID, temperature and power
(``gpu_samples.uuid``, ``temperature_c``, ``power_w``; NULL for rows written before).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_samples") as batch:
        batch.add_column(sa.Column("uuid", sa.String(length=96), nullable=True))
        batch.add_column(sa.Column("temperature_c", sa.Float(), nullable=True))
        batch.add_column(sa.Column("power_w", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_samples") as batch:
        batch.drop_column("power_w")
        batch.drop_column("temperature_c")
        batch.drop_column("uuid")
