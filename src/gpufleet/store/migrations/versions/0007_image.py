"""Jobs may name a container image (issue 11): ``jobs.image``.

A Kubernetes backend runs the job's command in that image; the local backend runs it on the host
and ignores the image. NULL: the backend's default image.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("image", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("image")
