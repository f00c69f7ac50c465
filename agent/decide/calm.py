"""Whether the node is calm, so the agent may sample, run the tier and check the watermarks every
`sampler.calmPeriod` instead of every `sampler.period` (docs/agent.md, "Calm sampling"): a pure fold (the last
decision's plan, the node, whether pressure lasts, when calm began, now, config) -> `Calm`.

Why: an idle agent spends most of its CPU reading every cgroup once a second (issue 34: 0.64 % of a core at 1 s,
0.40 % at 2 s on a hollow node). A second matters only where the next second can change a decision: near a
watermark, while the tier's ceiling moves or binds, while the online pods wait, while an I/O limit holds the
offline pods, while free memory nears the memory guard's line, under pressure, while evicting. Elsewhere a
sample every few seconds decides the same, and a PSI trigger (`agent.sense.pressure`) still wakes the agent at
once. So calm is every condition below holding for `sampler.calmAfter` seconds; any one failing ends it at once.

Between two calm samples the agent still probes the kubepods root every `sampler.period` (its CPU counter and
memory: two or three files, against every pod's and /proc's for a sample): `probe_breaks` says when that usage
crossed the calm line, and the full sample comes at once. So a usage step on a calm node is seen within a
second, as without calm sampling; what the calm period delays is only what the pods' own readings say.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import AgentConfig
from agent.decide.ops import Plan
from agent.decide.tier import target_of
from agent.model import Amounts
from tidemark.apis import RESOURCES, Watermarks

__all__ = ["MARGIN", "MOVING", "ROOM", "Calm", "Probe", "decide_calm", "probe_breaks", "reason_not_calm"]

#: usage at least this many points under every high watermark: a calm period's sample cannot miss a crossing
#: unless usage jumps this far between two samples, and a jump that large stalls tasks (a PSI trigger)
MARGIN = 20.0
#: the tier's ceiling rules that mean it moves or binds (agent.decide.tier.ceiling): a second each
MOVING = frozenset({"wait", "hold", "raise", "floor"})
#: the memory guard's headroom (free memory above the kernel's low watermark and the margin) at least this
#: fraction of allocatable memory: the online pods can allocate that much between two calm samples
ROOM = 0.10
#: the online pods' waits at most this fraction of their targets
WAIT_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Calm:
    """Since when (monotonic seconds) every condition has held (None: one fails now), whether the calm period
    applies (held for `sampler.calmAfter`), and why, in words."""

    since: float | None
    calm: bool
    reason: str
    #: the failing condition's short name (the `tidemark_agent_calm_ends_total` label), "" when none fails
    cause: str = ""


def reason_not_calm(plan: Plan, marks: Watermarks, allocatable: Amounts, cfg: AgentConfig,
                    lasting: bool) -> tuple[str, str] | None:  # fmt: skip
    """The first condition that fails (its short name, and in words); None when every one holds (module
    docstring)."""
    if lasting:
        return "pressure", "pressure lasts"
    if plan.evicting or plan.evictions or plan.held:
        return "evicting", "evicting"
    u = plan.usage
    pct = u.newest_percent if u.newest_percent is not None else u.percent
    for r in RESOURCES:
        used, high = getattr(pct, r), marks.high(r)
        if used > high - MARGIN:
            return f"{r}_usage", f"{r} usage {used:.0f} % is within {MARGIN:g} points of the {high} % high watermark"
    t = plan.tier
    if t is not None:
        if t.rule in MOVING:
            return "tier_ceiling", f"the tier's CPU ceiling moves ({t.rule})"
        slices = cfg.tier.online_wait_signal == "slice"
        wait = t.online_delay_ms if slices else t.online_wait
        target = target_of(cfg.tier) + (t.online_wait_base or 0.0)
        if wait is not None and wait > WAIT_SHARE * target:
            return "cpu_wait", f"online CPU wait {wait:.3f} is over half its target {target:.3f}"
    if plan.offline_io_bps is not None:
        return "io_limit", "an I/O limit holds the offline pods"
    if plan.online_io_wait is not None and plan.online_io_wait > WAIT_SHARE * cfg.tier_io.online_wait_target:
        target = cfg.tier_io.online_wait_target
        return "io_wait", f"online I/O wait {plan.online_io_wait:.3f} is over half its target {target:g}"
    room = plan.tier_memory_headroom
    if room is not None and room < ROOM * allocatable.memory:
        mib = room / 2**20
        return "memory_headroom", f"the memory guard's headroom {mib:.0f}Mi is under {ROOM:.0%} of allocatable memory"
    return None


def decide_calm(plan: Plan, marks: Watermarks, allocatable: Amounts, cfg: AgentConfig, lasting: bool,
                since: float | None, now: float) -> Calm:  # fmt: skip
    """The calm state after a decision (`since`: the previous `Calm.since`; `now`: monotonic seconds)."""
    s = cfg.sampler
    if s.calm_period <= s.period:
        return Calm(None, False, f"calm sampling off (sampler.calmPeriod {s.calm_period:g}s)", "off")
    why = reason_not_calm(plan, marks, allocatable, cfg, lasting)
    if why is not None:
        return Calm(None, False, f"not calm: {why[1]}", why[0])
    start = now if since is None else since
    held = now - start
    if held < s.calm_after:
        return Calm(start, False, f"calm for {held:.0f}s of sampler.calmAfter {s.calm_after:g}s")
    return Calm(start, True, f"calm for {held:.0f}s: sampling every {s.calm_period:g}s")


@dataclass(frozen=True, slots=True)
class Probe:
    """One read of the kubepods root between calm samples (`agent.sense.sampler.Sampler.probe`): monotonic
    seconds, CPU usage counter (ns) and working set (bytes); None where unreadable."""

    mono: float
    cpu_ns: int | None
    memory: int | None


def probe_breaks(prev: Probe | None, cur: Probe, allocatable: Amounts, marks: Watermarks) -> tuple[str, str] | None:
    """Whether the kubepods usage between `prev` and `cur` crossed the calm line of a resource (MARGIN points under
    its high watermark): the cause's short name and the words; None when it did not, or nothing can be told."""
    used: dict[str, float] = {}
    if cur.memory is not None and allocatable.memory > 0:
        used["memory"] = 100.0 * cur.memory / allocatable.memory
    if prev is not None and prev.cpu_ns is not None and cur.cpu_ns is not None and allocatable.cpu > 0:
        elapsed = cur.mono - prev.mono
        if elapsed > 0 and cur.cpu_ns >= prev.cpu_ns:
            used["cpu"] = 100.0 * (cur.cpu_ns - prev.cpu_ns) / elapsed / 1e6 / allocatable.cpu
    for r in RESOURCES:
        if r in used and used[r] > marks.high(r) - MARGIN:
            high = marks.high(r)
            words = f"probe: {r} usage {used[r]:.0f} % is within {MARGIN:g} points of the {high} % high watermark"
            return f"probe_{r}", words
    return None
