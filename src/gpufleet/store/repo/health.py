"""Checks that the store answers (the readiness probe's query); persists nothing."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def ping(s: Session) -> None:
    """Run ``SELECT 1``; raises whatever the database raises when it does not answer."""
    s.execute(text("SELECT 1"))
