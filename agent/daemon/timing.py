"""The main loop's duty table and its timers on the monotonic clock.

A `Duty` is one row of the table `agent.daemon.cycle.Cycle` runs in order at every step: its name, its
reason, what runs, and when it is due: on its own timer (`every`, read from the configuration in force at
each run), on news (`when`: other threads' hand-overs, flags an earlier duty of the same step set), or both;
`gate` holds it (and its timer) back until it can run at all. Adding a periodic duty is one row.

`Schedule` keeps the timers. They are drift-free: the next time is the previous due time plus the period,
or now plus the period when the loop fell behind. The capacity cadence is not a timer here: it is part of
the decision (`AgentState.capacity_due`, see `agent.decide.plan`); the loop only wakes for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Duty:
    """One row of the main loop's table (see the module docstring)."""

    name: str
    #: why the daemon does this (the table is the daemon's documentation: docs/design.md, "The agent")
    reason: str
    #: what runs, with the step's monotonic time
    run: Callable[[float], None]
    #: a timed duty's period in seconds (the configuration in force); None: due on `when` only
    every: Callable[[], float] | None = None
    #: due besides its timer (news, flags); None: on its timer only
    when: Callable[[float], bool] | None = None
    #: the duty runs only while this holds, and its timer waits meanwhile; None: no condition
    gate: Callable[[], bool] | None = None
    #: a timed duty is first due this many seconds after the start
    first: float = 0.0


def always(_now: float) -> bool:
    """`when` of a duty that runs at every step (it only folds in what is pending, which is cheap)."""
    return True


class Schedule:
    def __init__(self, now: float, duties: tuple[Duty, ...] = ()) -> None:
        self._next: dict[str, float] = {d.name: now + d.first for d in duties if d.every is not None}

    def add(self, name: str, at: float) -> None:
        self._next[name] = at

    def due(self, name: str, now: float) -> bool:
        return now >= self._next[name]

    def hurry(self, name: str, at: float) -> None:
        """Make `name` due at `at` at the latest (a pressure trigger samples at once)."""
        self._next[name] = min(self._next[name], at)

    def advance(self, name: str, now: float, period: float) -> None:
        nxt = self._next[name] + period
        self._next[name] = nxt if nxt > now else now + period

    def delay(self, now: float, *extra: float, held: Collection[str] = (), held_poll: float = 0.0) -> float:
        """Seconds until the next duty (or until any of `extra`, seconds from now), at least 0. A `held` duty (its
        gate shut: its timer waits, due) counts as due in `held_poll` seconds at the soonest: its due timer must not
        make the loop spin until the gate opens."""
        if not held:
            return max(0.0, min((min(self._next.values(), default=now + 3600.0) - now, *extra)))
        waits = [max(at - now, held_poll) if name in held else at - now for name, at in self._next.items()]
        return max(0.0, min((min(waits, default=3600.0), *extra)))

    def reconfigured(self, now: float, periods: Mapping[str, float]) -> None:
        """A new configuration: each timer is due within its new period at the latest (a shorter period takes
        effect at once; an unchanged one leaves the drift-free grid as it is)."""
        for name, period in periods.items():
            if name in self._next:
                self._next[name] = min(self._next[name], now + period)
