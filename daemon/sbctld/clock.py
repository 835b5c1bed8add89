"""The broker's injected clock (daemon/README.md §24): real in the daemon, fake in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self.now = start_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now
