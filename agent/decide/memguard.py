"""The offline tier's memory guard and proactive reclaim (docs/agent.md, "Memory guard"): a pure function
(node memory, tier groups, online memory wait, config) -> limits, recomputed every `tier.period`.

Why: the kernel wakes kswapd when free memory falls under a zone's low watermark and sends an allocating task
into direct reclaim under the min watermark. An online pod that allocates while offline pods have filled memory
(often with page cache they will never read again) pays that reclaim in its own latency. The guard keeps offline
growth from taking free memory under the low watermark plus a margin, so the online pods' allocations find free
pages, and gives memory back as soon as the online pods stall on it.

The rule, for the tier's groups (the BestEffort root while it holds no online pod: `tier_groups`):

- headroom = MemFree - low watermark - `tier.memory.margin` (the low watermark: the sum of every zone's `low`
  pages in /proc/zoneinfo x the page size, `agent.sense.meminfo`);
- headroom >= 0: each group's limit = what it uses now + its equal share of the headroom, so the tier together
  can grow by the headroom and no more (Katalyst's memory guard, kubewharf/katalyst-core
  pkg/agent/sysadvisor/plugin/qosaware/resource/memory/plugin/memory_guard.go: the reclaimed-cores root's
  `memory.limit_in_bytes` = its usage + max(free - critical watermark, 0) per NUMA node; here the watermark is
  the kernel's own low one plus a margin, and the headroom is split so several groups cannot each take it all);
- headroom < 0 (free memory already under the line): each group's limit = what it uses - its share of the
  deficit, the share split by page cache and never more than its page cache (file pages: what reclaim takes
  without an OOM kill; anonymous memory is never squeezed by the guard: the watermark eviction handles that);
- proactive reclaim, while the online pods' memory wait (fraction of the last period some online task stalled
  on memory) is at or above `tier.memory.reclaimWait`: `tier.memory.reclaimStep` more of the groups' page cache
  (v2: written to `memory.reclaim`, the limit held at what they use; v1: the limit lowered by it).

Every limit thus stays within [used - page cache, used + share of the headroom]. To write only when a value
moves, a rise smaller than `tolerance` keeps the value in the file (a kept lower value is always safe); a
fall is written at once.

On cgroup v1 the limit is also what bounds the tier's dirty page cache: v1 writeback is issued by the flusher
threads as the root group and escapes a pod's `blkio.throttle`, and v1 has no per-cgroup dirty throttling (that
needs cgroup writeback, v2 only). Dirty pages are charged to the memory cgroup that dirtied them, so a tier at its
limit must reclaim, and waits on writeback to do so: the amount of offline dirty data the online pods' I/O can
queue behind is at most what the guard lets the tier hold. It bounds the burst, not a rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from agent.config_memqos import TierMemoryConfig
from agent.decide.memqos import MemoryWant
from agent.decide.ops import SetCgroupValue
from agent.knobs import limit_value
from agent.model import CgroupDirs, CgroupState, KnobVersion, NodeMemory, PodView, TierSense

__all__ = [
    "GuardLimit",
    "GuardOut",
    "GuardPlan",
    "NodeMemory",
    "TierGroup",
    "guard",
    "limit_file",
    "plan_guard",
    "tier_groups",
    "tolerance",
]

PAGE: Final = 4096


@dataclass(frozen=True, slots=True)
class TierGroup:
    """One cgroup the guard limits: what it holds now and what reclaim can take of it."""

    #: in words (`the BestEffort root`)
    name: str
    dirs: CgroupDirs
    #: bytes charged to it (v1 `memory.usage_in_bytes`, v2 `memory.current`)
    used: int
    #: its page cache (`active_file + inactive_file` of memory.stat): what reclaim takes without an OOM kill
    cache: int
    #: the limit its file holds now (None: none, or unknown)
    current: int | None = None


@dataclass(frozen=True, slots=True)
class GuardLimit:
    group: TierGroup
    limit: int
    #: v2: bytes to write to `memory.reclaim` this period (0: none)
    reclaim: int
    reason: str


@dataclass(frozen=True, slots=True)
class GuardPlan:
    limits: tuple[GuardLimit, ...] = ()
    #: MemFree - low watermark - margin (negative: a deficit)
    headroom: int = 0
    #: the online memory wait reached `tier.memory.reclaimWait`
    reclaiming: bool = False
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(g.limit for g in self.limits)


def _mi(v: float) -> str:
    return f"{v / 2**20:.0f}Mi"


def _page(v: int) -> int:
    return max(0, v) // PAGE * PAGE


def limit_file(version: KnobVersion) -> str:
    """The knob the guard writes: v1 `memory.limit_in_bytes` (reclaim on lowering, OOM past it), v2 `memory.high`
    (throttle and reclaim, never an OOM kill)."""
    return "memory.limit_in_bytes" if version == "v1" else "memory.high"


def tolerance(cfg: TierMemoryConfig) -> int:
    """A rise smaller than this keeps the value in the file: an eighth of the margin, at least a page."""
    return max(PAGE, _page(cfg.margin // 8))


def _split(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split by `weights` (equally when they are all 0), page-aligned down: the parts never sum past it."""
    if not weights:
        return []
    s = sum(weights)
    if s <= 0:
        return [_page(total // len(weights))] * len(weights)
    return [_page(total * w // s) for w in weights]


def tier_groups(
    pods: Sequence[PodView],
    besteffort: CgroupDirs | None,
    used: Mapping[str, tuple[int, int, int | None]],
) -> tuple[list[TierGroup], list[str]]:
    """The groups the guard limits: the BestEffort root when it exists and holds no online pod (kubelet puts every
    pod without requests there, offline pods whose batch-* requests make them BestEffort included). `used`: a
    directory -> (used, page cache, current limit) as sensed. Offline pods in the burstable/guaranteed subtrees
    keep their own limits (memory QoS, batch-memory limits)."""
    if besteffort is None:
        return [], ["memory guard: no BestEffort QoS group on this node: nothing to guard"]
    online_be = [p.key for p in pods if not p.offline and p.qos_class == "BestEffort"]
    if online_be:
        return [], [
            f"memory guard: the BestEffort root holds online pod(s) {', '.join(sorted(online_be)[:3])}: a limit there "
            "would hold them too, so the guard stays off (offline pods keep memory QoS's per-pod limits)"
        ]
    found = used.get(besteffort.memory)
    if found is None:
        return [], [f"memory guard: {besteffort.memory} has no readable memory usage: nothing guarded this period"]
    u, cache, current = found
    return [TierGroup("the BestEffort root", besteffort, u, min(max(0, cache), max(0, u)), current)], []


def guard(
    memory: NodeMemory,
    groups: Sequence[TierGroup],
    online_wait: float | None,
    version: KnobVersion,
    cfg: TierMemoryConfig,
) -> GuardPlan:
    """Each group's limit and reclaim this period (module docstring), with the sentences that explain them."""
    headroom = memory.free - memory.low_watermark - cfg.margin
    why_free = (
        f"MemFree {_mi(memory.free)} - low watermark {_mi(memory.low_watermark)} - tier.memory.margin "
        f"{_mi(cfg.margin)} = {'headroom' if headroom >= 0 else 'deficit'} {_mi(abs(headroom))}"
    )
    reclaiming = cfg.reclaim_wait > 0 and online_wait is not None and online_wait >= cfg.reclaim_wait
    notes = [f"memory guard: {why_free} (MemAvailable {_mi(memory.available)})"]
    if reclaiming:
        notes.append(
            f"memory guard: online memory wait {online_wait:.3f} >= tier.memory.reclaimWait {cfg.reclaim_wait:g}: "
            f"{_mi(cfg.reclaim_step)} of offline page cache reclaimed this period"
        )
    if not groups:
        return GuardPlan((), headroom, reclaiming, tuple(notes))
    caches = [min(g.cache, g.used) for g in groups]
    if headroom >= 0:
        moves = _split(headroom, [0] * len(groups))
    else:
        moves = [-min(c, t) for c, t in zip(caches, _split(-headroom, caches), strict=True)]
    steps = _split(cfg.reclaim_step, caches) if reclaiming else [0] * len(groups)
    file = limit_file(version)
    out: list[GuardLimit] = []
    for g, cache, move, step in zip(groups, caches, moves, steps, strict=True):
        take = min(step, cache + min(0, move))  # never past the page cache, with the deficit's share
        reclaim = take if version == "v2" else 0
        limit = g.used + move
        if reclaiming:
            limit = min(limit, g.used) if version == "v2" else min(limit, g.used + min(0, move) - take)
        limit = max(g.used - cache, _page(limit) if limit > 0 else 0)
        if g.current is not None and g.current <= limit < g.current + tolerance(cfg):
            limit = max(g.current, g.used - cache)  # a small rise: keep the file's value (writes only on moves)
        if move >= 0:
            rule = f"uses {_mi(g.used)} + its share of the headroom {_mi(move)}"
        else:
            rule = f"uses {_mi(g.used)} - its share of the deficit {_mi(-move)} (page cache {_mi(cache)})"
        if reclaiming:
            rule += (
                f"; online memory wait: {_mi(take)} reclaimed (memory.reclaim)"
                if version == "v2"
                else f"; online memory wait: lowered by {_mi(take)} more of its page cache"
            )
        out.append(GuardLimit(g, int(limit), int(reclaim), f"memory guard: {g.name} {file} = {_mi(limit)}: {rule}"))
    return GuardPlan(tuple(out), headroom, reclaiming, tuple(notes))


def current_limit(text: str | None) -> int | None:
    """A limit file's value as bytes (None: unlimited or unreadable)."""
    v = limit_value(text)
    return None if v == float("inf") else int(v)


@dataclass(frozen=True, slots=True)
class GuardOut:
    """The guard's part of a decision: the limits as memory wants, the one-shot reclaims, and the plan."""

    wants: tuple[MemoryWant, ...] = ()
    reclaims: tuple[SetCgroupValue, ...] = ()
    plan: GuardPlan | None = None
    notes: tuple[str, ...] = ()


def plan_guard(pods: Sequence[PodView], cg: CgroupState, sense: TierSense | None, cfg: TierMemoryConfig) -> GuardOut:
    """The memory guard's writes for this decision from the newest tier reading (`TierSense`)."""
    if not cfg.enabled:
        return GuardOut(notes=("tier.memory.enabled is false: no memory guard (values the agent wrote go back)",))
    if sense is None or sense.memory is None:
        return GuardOut(notes=("memory guard: /proc/meminfo or /proc/zoneinfo not read yet: no guard this period",))
    groups, notes = tier_groups(pods, cg.ancestors.get("besteffort"), sense.groups)
    plan = guard(sense.memory, groups, sense.memory_wait, cg.version, cfg)
    wants: list[MemoryWant] = []
    reclaims: list[SetCgroupValue] = []
    file = limit_file(cg.version)
    for g in plan.limits:
        wants.append(MemoryWant(g.group.dirs, file, str(g.limit), g.reason))
        if g.reclaim > 0:
            reclaims.append(SetCgroupValue(g.group.dirs.memory, "memory.reclaim", str(g.reclaim), None, g.reason))
    if sense.memory_wait is not None:
        notes.append(f"memory guard: online memory wait {sense.memory_wait:.3f} ({sense.memory_wait_source})")
    return GuardOut(tuple(wants), tuple(reclaims), plan, (*plan.notes, *notes, *(g.reason for g in plan.limits)))
