"""The event heap: ``(time, priority, sequence)`` keys so ties break the same way every run."""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple


class Kind(IntEnum):
    """Event kinds; the value is the priority among events at the same time (smaller first)."""

    JOB_END = 0  # a run ends: success, timeout or failure
    NODE_INTERRUPT = 1  # a spot node is taken back
    SPOT_NOTICE = 2  # two-minute warning before an interruption
    NODE_READY = 3  # a provisioned node joins
    SUBMIT = 4
    CYCLE = 5  # run the scheduling cycle
    AUTOSCALE_TICK = 6
    SAMPLE = 7


class Event(NamedTuple):
    """Heap entry; a tuple so the heap compares in C. ``seq`` is unique, so ``payload`` is never
    compared."""

    time: float
    kind: Kind
    seq: int
    payload: object = None


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, payload: object = None) -> Event:
        ev = Event(time, kind, self._seq, payload)
        self._seq += 1
        heapq.heappush(self._heap, ev)
        return ev

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float:
        return self._heap[0].time

    def __len__(self) -> int:
        return len(self._heap)
