"""Owners and grants for a shared server (issue 8).

- ``teams.run_as``: the Unix account the team's jobs run as (NULL: none set).
- ``teams.priority_classes``: the priority classes the team's members may submit with (JSON list;
  NULL: the default grant, every class up to ``normal``).
- ``tokens.run_as``: a token's own Unix account, which wins over its team's.
- ``jobs.run_as``: the account resolved when the job was submitted (NULL: the server's own account,
  which only a single-user server accepts).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("run_as", sa.String(32), nullable=True))
        batch.add_column(sa.Column("priority_classes", sa.JSON(), nullable=True))
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("run_as", sa.String(32), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("run_as", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("run_as")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("run_as")
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("priority_classes")
        batch.drop_column("run_as")
