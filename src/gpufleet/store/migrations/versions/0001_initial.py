"""The initial schema: teams, quotas, tokens, jobs and their events, runs, nodes, the usage ledger
(node intervals and usage segments), GPU telemetry and controller heartbeats.

Written to match :mod:`gpufleet.store.models` exactly (tests/test_store_schema.py compares them on
SQLite and PostgreSQL). Unique constraints carry PostgreSQL's default names on both databases so a
later migration can refer to them by name.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT (as in models.py).
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "controllers",
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("is_leader", sa.Boolean(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("last_cycle_ms", sa.Float(), nullable=True),
        sa.Column("queue", sa.JSON(), nullable=False),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("replica"),
    )
    op.create_table(
        "gpu_samples",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=True),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("memory_used_mib", sa.Float(), nullable=False),
        sa.Column("memory_total_mib", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_samples_job", "gpu_samples", ["job_id"], unique=False)
    op.create_index("ix_gpu_samples_time", "gpu_samples", ["time"], unique=False)
    op.create_table(
        "node_intervals",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("gpu_model", sa.String(length=63), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("capacity_type", sa.String(length=16), nullable=False),
        sa.Column("hourly_usd", sa.Float(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_intervals_node", "node_intervals", ["node"], unique=False)
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("gpu_model", sa.String(length=63), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("capacity_type", sa.String(length=16), nullable=False),
        sa.Column("sharing", sa.String(length=16), nullable=False),
        sa.Column("hourly_price_usd", sa.Float(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("added_at", sa.Float(), nullable=False),
        sa.Column("removed_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "teams",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("cohort", sa.String(length=63), nullable=True),
        sa.Column("borrowing_limit_milli", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "usage_segments",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("run", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("experiment", sa.String(length=255), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("gpu_model", sa.String(length=63), nullable=False),
        sa.Column("capacity_type", sa.String(length=16), nullable=False),
        sa.Column("gpu_share_units", sa.Integer(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("node_hourly_usd", sa.Float(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "run", "node", name="uq_usage_run_node"),
    )
    op.create_index("ix_usage_segments_job_id", "usage_segments", ["job_id"], unique=False)
    op.create_index("ix_usage_team", "usage_segments", ["team"], unique=False)
    op.create_index("ix_usage_time", "usage_segments", ["start", "end"], unique=False)
    op.create_table(
        "jobs",
        sa.Column("seq", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("experiment", sa.String(length=255), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("priority_class", sa.String(length=32), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("mig_profile", sa.String(length=32), nullable=True),
        sa.Column("gpu_types", sa.JSON(), nullable=False),
        sa.Column("min_gpu_memory_gib", sa.Float(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("checkpoint_dir", sa.Text(), nullable=True),
        sa.Column("max_runtime_s", sa.Float(), nullable=True),
        sa.Column("estimated_runtime_s", sa.Float(), nullable=True),
        sa.Column("submitted_by", sa.String(length=32), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("run", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["team"],
            ["teams.name"],
        ),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id", name="jobs_id_key"),
        sa.UniqueConstraint("submitted_by", "idempotency_key", name="uq_jobs_idempotency"),
    )
    op.create_index("ix_jobs_state_seq", "jobs", ["state", "seq"], unique=False)
    op.create_index("ix_jobs_team_seq", "jobs", ["team", "seq"], unique=False)
    op.create_table(
        "quotas",
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("gpu_model", sa.String(length=63), nullable=False),
        sa.Column("nominal_milli", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team"], ["teams.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("team", "gpu_model"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=127), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["team"],
            ["teams.name"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_sha256", name="tokens_secret_sha256_key"),
    )
    op.create_table(
        "job_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("old", sa.String(length=16), nullable=True),
        sa.Column("new", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_events_job", "job_events", ["job_id", "id"], unique=False)
    op.create_table(
        "runs",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("run", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("capacity_type", sa.String(length=16), nullable=False),
        sa.Column("node_hourly_usd", sa.Float(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("admitted_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("stop_requested", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "run"),
    )
    op.create_index("ix_runs_open", "runs", ["ended_at"], unique=False)


def downgrade() -> None:
    for table in (
        "runs",
        "job_events",
        "tokens",
        "quotas",
        "jobs",
        "usage_segments",
        "teams",
        "nodes",
        "node_intervals",
        "gpu_samples",
        "controllers",
    ):
        op.drop_table(table)
