"""The injected clock.

Engines (``scheduling/``, ``cost/``, ``sim/``) never read the wall clock; they receive a
:class:`Clock`. The simulator's event loop is the only thing that advances :class:`SimClock`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since an arbitrary epoch (UNIX epoch for the wall clock)."""
        ...


class WallClock:
    """The real clock, used by the service layer only."""

    def now(self) -> float:
        return time.time()


class SimClock:
    """A clock that only moves when told to (by the event loop or a test)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"simulated time cannot go backwards: {t} < {self._now}")
        self._now = float(t)

    def advance(self, dt: float) -> None:
        self.advance_to(self._now + dt)
