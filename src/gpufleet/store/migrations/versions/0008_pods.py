"""Jobs may be gangs (issue 11): ``jobs.pods``, the pods placed all or nothing (default 1).

A multi-pod owner adopted from Kubernetes (a JobSet, a PyTorchJob, an indexed Job) is one gang;
the local backend runs one pod per job (it refuses a gang at launch, naming why).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pods", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pods")
