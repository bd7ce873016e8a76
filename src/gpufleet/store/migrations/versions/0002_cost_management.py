"""Cost management: budgets, their alerts and the notification outbox, job progress reports, a
job's own budget limit, and the priority class on usage segments (for priority multipliers).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("usage_segments") as batch:
        batch.add_column(sa.Column("priority_class", sa.String(length=32), nullable=False, server_default="normal"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("budget_usd", sa.Float(), nullable=True))
    op.create_table(
        "job_progress",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("step", sa.Float(), nullable=True),
        sa.Column("total_steps", sa.Float(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_progress_job", "job_progress", ["job_id", "time"], unique=False)
    op.create_table(
        "budgets",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=127), nullable=False),
        sa.Column("scope_kind", sa.String(length=16), nullable=False),
        sa.Column("scope_value", sa.String(length=255), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("period_start", sa.Float(), nullable=True),
        sa.Column("period_end", sa.Float(), nullable=True),
        sa.Column("timezone", sa.String(length=63), nullable=False),
        sa.Column("limit_usd", sa.Float(), nullable=False),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("throttle", sa.JSON(), nullable=False),
        sa.Column("grace_s", sa.Float(), nullable=False),
        sa.Column("channels", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="budgets_name_key"),
    )
    op.create_table(
        "budget_alerts",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("budget_id", sa.String(length=32), nullable=False),
        sa.Column("period_start", sa.Float(), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("fired_at", sa.Float(), nullable=False),
        sa.Column("spend_usd", sa.Float(), nullable=False),
        sa.Column("limit_usd", sa.Float(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["budget_id"], ["budgets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("budget_id", "period_start", "threshold", name="uq_budget_alert_once"),
    )
    op.create_table(
        "notifications",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("alert_id", BIG_ID, nullable=False),
        sa.Column("channel_index", sa.Integer(), nullable=False),
        sa.Column("channel", sa.JSON(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("sent_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["alert_id"], ["budget_alerts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("alert_id", "channel_index", name="uq_notification_once"),
    )
    op.create_index("ix_notifications_due", "notifications", ["status", "next_attempt_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_notifications_due", table_name="notifications")
    op.drop_table("notifications")
    op.drop_table("budget_alerts")
    op.drop_table("budgets")
    op.drop_index("ix_job_progress_job", table_name="job_progress")
    op.drop_table("job_progress")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("budget_usd")
    with op.batch_alter_table("usage_segments") as batch:
        batch.drop_column("priority_class")
