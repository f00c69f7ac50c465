"""The `capacity.profile` section of the agent's configuration: usage profiles and the `profile` capacity policy
(docs/capacity-prediction.md; the decision is `agent.decide.profile`).

Kept beside `agent.config` (which builds `AgentConfig` from it and maps the YAML keys) as `agent.config_memqos`
is. Pure: no I/O.

Why these defaults: they are the ones the trace replay (`make bench-capacity`, docs/capacity-prediction.md)
measured best on its shipped traces; the percentiles, the margin and the half-lives are Koordinator's
(pkg/koordlet/prediction/config.go: p95 CPU, p98 memory, x 1.10, half-life 12 h CPU and 24 h memory), the horizon
and the hourly slots are Tidemark's own; Koordinator's 24 h cold start is available and off (its field says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.config_values import Parser, _show, parse_duration

HOUR = 3600.0
DAY = 24 * HOUR


def duration_between(low: float, high: float) -> Parser:
    """A duration (seconds or Go-style) in [low, high]."""

    def parse(raw: object) -> tuple[Any, str | None]:
        value = parse_duration(raw)
        if value is None or not low <= value <= high:
            return None, f"must be a duration from {low:g} s to {high:g} s (e.g. 30m, 2h), got {_show(raw)}"
        return value, None

    return parse


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    percentile_cpu: float = field(
        default=0.95,
        metadata=_doc(
            "`profile` policy: the percentile of the node's non-offline CPU usage profile it plans for, in (0, 1] "
            "(default 0.95, Koordinator's)."
        ),
    )
    percentile_memory: float = field(
        default=0.98,
        metadata=_doc(
            "`profile` policy: the percentile of the node's non-offline memory (working set) profile, in (0, 1] "
            "(default 0.98, Koordinator's: memory is not compressible)."
        ),
    )
    margin: float = field(
        default=1.10,
        metadata=_doc(
            "`profile` policy: the profile's percentile is multiplied by this safety margin, 1..3 (default 1.10, "
            "Koordinator's safetyMarginPercent 10)."
        ),
    )
    half_life_cpu: float = field(
        default=12 * HOUR,
        metadata=_doc(
            "Seconds after which a CPU sample in a usage profile weighs half as much as a new one (default 12h, "
            "Koordinator's). A change applies from then on; the history keeps its weight."
        ),
    )
    half_life_memory: float = field(
        default=24 * HOUR,
        metadata=_doc(
            "Seconds after which a memory sample in a usage profile weighs half as much (default 24h, Koordinator's)."
        ),
    )
    horizon: float = field(
        default=4 * HOUR,
        metadata=_doc(
            "`profile` policy: seconds ahead the node's hourly profile is read: B plans for the highest hour "
            "from now to now + horizon (default 4h, the replay's best: most offline work placed now ends within "
            "it), 0..24h; 24h plans for the day's peak at all times."
        ),
    )
    cold_start: float = field(
        default=0.0,
        metadata=_doc(
            "Seconds after its creation during which an online pod counts at the larger of its request and its "
            "own profile's peak x margin, not at its usage, 0..7d (default 0: off). Koordinator counts pods at "
            "their request for 24h; here every pod of a fresh or rebooted node is that young, and the real node's "
            "install test saw B drop to 0 for them, while the node's profile already holds the usage of a pod "
            "that replaced another. Set it where new services arrive on nodes whose profile does not know them."
        ),
    )
    checkpoint: float = field(
        default=300.0,
        metadata=_doc(
            "Seconds between writes of the profiles to the state dir (`profiles.json`, atomic; default 5m): a "
            "restart loses at most this much history, never the profile."
        ),
    )

    def percentile(self, resource: str) -> float:
        return self.percentile_cpu if resource == "cpu" else self.percentile_memory

    def half_life(self, resource: str) -> float:
        return self.half_life_cpu if resource == "cpu" else self.half_life_memory
