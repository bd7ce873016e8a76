"""Proposals (issue 14): actions an agent proposes and a person approves, with their estimated and
measured effect on cost (``proposals``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-10 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "proposals",
        sa.Column("seq", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("est_monthly_savings_usd", sa.Float(), nullable=True),
        sa.Column("est_confidence", sa.Float(), nullable=True),
        sa.Column("est_basis", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("proposed_by", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("decided_by", sa.String(length=32), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("executed_at", sa.Float(), nullable=True),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("result_job_id", sa.String(length=32), nullable=True),
        sa.Column("change", sa.JSON(), nullable=False),
        sa.Column("effect_window_s", sa.Float(), nullable=False),
        sa.Column("measured_before_usd", sa.Float(), nullable=True),
        sa.Column("measured_after_usd", sa.Float(), nullable=True),
        sa.Column("measured_monthly_savings_usd", sa.Float(), nullable=True),
        sa.Column("measured_at", sa.Float(), nullable=True),
        sa.Column("measure_note", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id", name="proposals_id_key"),
        sa.UniqueConstraint("proposed_by", "idempotency_key", name="uq_proposals_idempotency"),
    )
    op.create_index("ix_proposals_state", "proposals", ["state", "seq"], unique=False)
    op.create_index("ix_proposals_team", "proposals", ["team", "seq"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_proposals_team", table_name="proposals")
    op.drop_index("ix_proposals_state", table_name="proposals")
    op.drop_table("proposals")
