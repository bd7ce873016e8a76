"""Budgets belong to a team (issue 8): ``budgets.team``.

A budget on ``team:X`` belongs to X (filled in here for existing rows); one on a project, namespace,
experiment or label belongs to the team named when it is created, and only that team's jobs count
against it. Existing budgets on those scopes stay unowned (NULL: every team's jobs, as before,
visible to admins only) until an admin names their team.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.add_column(sa.Column("team", sa.String(63), nullable=True))
    budgets = sa.table("budgets", sa.column("team", sa.String), sa.column("scope_kind"), sa.column("scope_value"))
    op.execute(budgets.update().where(budgets.c.scope_kind == "team").values(team=budgets.c.scope_value))


def downgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.drop_column("team")
