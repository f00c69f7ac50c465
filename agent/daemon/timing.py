"""The main loop's local timers on the monotonic clock: named duties, each due at its own time.

Duties: `sample` (`sampler.period`; `pressure.fast_period` while pressure lasts, and at once on a
pressure trigger: `hurry`), `decide` (`eviction.period`), `qos` (`qos.reconcile`) and
`config` (`AgentOptions.config_poll`). Timers are drift-free: the next time is the previous due time
plus the period, or now plus the period when the loop fell behind. The capacity cadence is not here:
it is part of the decision (`AgentState.capacity_due`, see `agent.decide.plan`); the loop only wakes
for it (`wake_for`).
"""

from __future__ import annotations

from agent.config import AgentConfig


class Schedule:
    def __init__(self, now: float, config_poll: float) -> None:
        self._next = {"sample": now, "decide": now, "qos": now, "config": now + config_poll}

    def due(self, name: str, now: float) -> bool:
        return now >= self._next[name]

    def hurry(self, name: str, at: float) -> None:
        """Make `name` due at `at` at the latest (a pressure trigger samples at once)."""
        self._next[name] = min(self._next[name], at)

    def advance(self, name: str, now: float, period: float) -> None:
        nxt = self._next[name] + period
        self._next[name] = nxt if nxt > now else now + period

    def delay(self, now: float, *extra: float) -> float:
        """Seconds until the next duty (or until any of `extra`, seconds from now), at least 0."""
        return max(0.0, min((min(self._next.values()) - now, *extra)))

    def reconfigured(self, now: float, old: AgentConfig, new: AgentConfig) -> None:
        """A new configuration: shorter periods take effect at once; knobs follow the new policy now."""
        if new.sampler.period != old.sampler.period:
            self._next["sample"] = min(self._next["sample"], now + new.sampler.period)
        self._next["decide"] = min(self._next["decide"], now + new.eviction.period)
        self._next["qos"] = now
