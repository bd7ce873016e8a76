"""Approval by another person and stale proposals (issue 20, finding 9): the person holding a token
(``tokens.owner``), the owners of a proposal's proposer and decider (``proposals.proposed_by_owner``,
``decided_by_owner``) and the values a proposal read when it was planned (``proposals.planned_on``).
All NULL for rows written before: a token without an owner cannot approve, and a proposal without
``planned_on`` is checked against the ``before`` it recorded.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-14 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=127), nullable=True))
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("proposed_by_owner", sa.String(length=127), nullable=True))
        batch.add_column(sa.Column("decided_by_owner", sa.String(length=127), nullable=True))
        batch.add_column(sa.Column("planned_on", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("planned_on")
        batch.drop_column("decided_by_owner")
        batch.drop_column("proposed_by_owner")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("owner")
