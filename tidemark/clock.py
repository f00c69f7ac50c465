"""Injected time (house style 9): the agent never calls time.* directly outside this module.

`monotonic()` measures intervals (CPU deltas), `wall()` stamps samples and compares against
Kubernetes timestamps (epoch seconds), `sleep()` waits between reads. Tests use `FakeClock`, whose
`sleep` advances both clocks and runs hooks (so a test can advance fake cgroup counters "during"
the sleep) instead of waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; `sleep` advances it and calls each hook with the new time."""

    def __init__(self, wall: float = 1_700_000_000.0, monotonic: float = 1000.0) -> None:
        self._wall = wall
        self._mono = monotonic
        self.hooks: list[Callable[[float], None]] = []

    def monotonic(self) -> float:
        return self._mono

    def wall(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        for hook in list(self.hooks):
            hook(seconds)
