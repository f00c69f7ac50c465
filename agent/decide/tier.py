"""The offline tier's CPU ceiling: one number for all offline pods, recomputed every `tier.period` (docs/agent.md,
"The offline tier"). Pure: (previous ceiling, the newest usage, the online pods' CPU wait, config) -> ceiling.

The peers' bound (Koordinator, pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go,
`calculateBESuppressCPU`: "suppress(BE) := node.Capacity * SLOPercent - pod(non-BE).Used - system.Used"):

    bound = allocatable x `tier.cpu.suppressRatio` - online pods' usage - system usage

(allocatable, not capacity: kubelet's reservations are already out of it, and system usage is subtracted too, so the
bound errs toward the online pods). Koordinator raises its BE quota by at most a tenth of the node per round and cuts
at once; so does this. Beyond the peers, the ceiling follows the online pods' own CPU wait (`agent.sense.onlinewait`,
the worst online pod): above `tier.cpu.onlineWaitTarget` while the tier uses at least a tenth of its ceiling (it can
be the cause), the ceiling halves every period (`tier.cpu.cut: halve`, the default; multiplicative decrease, as TCP:
a few periods take any ceiling to the floor), or with `proportional` is multiplied by target / wait, never below a
half (a wait just over the target trims it; it did not do more offline work than halving in the colocation
benchmark's 7 paired rounds); above the
target while the tier is idle it holds (the wait has another cause: an online pod's own CPU limit throttles it); at
or under the target it rises by at most `tier.cpu.raiseStep` of allocatable, while the tier uses at least `UNUSED`
(half) of it (rule `unused`: a raise it would not use is not written). Always at most the bound (a bound within
`DEADBAND` of the ceiling in force keeps it, up or down, as Koordinator's), never under
`tier.cpu.minCores` (the floor wins over the bound: a pod holding a lock must progress).

The target is for the wait the tier ADDS (`baseline_for`): what the online pods wait while the tier is idle (at most
`IDLE` of allocatable, or its floor) is their baseline, an average of such periods, and the rule compares the wait
with target + baseline. Why: on a busy machine the online pods wait for other things too (the host's own processes,
each other); before, a worst online pod waiting 6 % of the time with no offline work at all held the ceiling at its
floor for good (the colocation benchmark's quick run: a 100m quota, 63 % of the node idle). Offline work
that makes them wait more than the target over their baseline is still cut at once. A baseline lasts `BASE_TTL`
seconds without an idle period (then the target alone applies, and the cut that follows measures it again), is
lowered at once by a smaller wait read while the tier runs, and never excuses more than `BASE_MAX`.

The split (`split`): the ceiling is shared by the tier's groups, the BestEffort root (when no online pod sits in it)
and each offline pod outside it, by recent demand plus an equal share of the slack, at least `qos.min_offline_quota`
each when the ceiling allows it, never above a pod's own CPU limit; the shares never add up to more than the
ceiling (each is at least the kernel's 1 ms per period, `agent.decide.qos.MIN_QUOTA_US`, so many groups under a
tiny ceiling may pass it by that much).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agent.config_tier import EvictionCpuConfig, TierConfig, WaitSignal
from agent.decide import watermarks
from agent.decide.ops import TierView
from agent.model import Amounts, OnlineWait, PodView, Sample, WaitBaseline
from tidemark.apis import PodUID

#: the wait rule multiplies the ceiling by this while the online pods wait too long
CUT = 0.5
#: a proportional cut is at least this much (target / wait can round to 1 for a wait a hair over the target)
TRIM = 0.99
#: the wait rule cuts only while the tier uses at least this fraction of its ceiling (else it cannot be the cause)
CAUSE = 0.1
#: the key of the BestEffort root's group in a split
ROOT = "besteffort"
#: the tier is idle (not what the online pods wait for) at or under this fraction of allocatable, or its floor
IDLE = 0.05
#: a new idle period's wait moves the baseline by this weight (an average over a few periods)
BASE_WEIGHT = 0.3
#: seconds a baseline lasts without an idle period
BASE_TTL = 300.0
#: the baseline never excuses more wait than this (the share signal: a fraction of the time)
BASE_MAX = 0.5
#: ...nor, with the slice signal, more run delay per slice than this (milliseconds)
BASE_MAX_MS = 2.0
#: a new ceiling within this fraction of allocatable of the one in force keeps it, up or down (Koordinator's
#: `suppressBypassQuotaDeltaRatio`, 0.01 of capacity, cpu_suppress.go): the bound moves with every second's online
#: usage, and each move was a quota write and a journal save, the larger part of an idle agent's CPU
#: (docs/scale.md, "Idle cost of one agent"). Never for the wait rule's cuts, nor to or from the floor.
DEADBAND = 0.02
#: a raise waits while the tier uses under this fraction of its ceiling in force: a raise it would not use changes
#: nothing but costs a quota write and a journal save (TCP's congestion window validation, RFC 7661: a sender using
#: under half its window does not grow it). A tier that wants more uses what it has, and the raises resume
UNUSED = 0.5
#: seconds of samples whose median bound a starved tier is judged by (`bound_over`, `TierCpu.allowance`; at most
#: `eviction.cpu.window`, none at 0)
ALLOWANCE_WINDOW = 5.0


def signal_of(wait: OnlineWait | None, signal: WaitSignal) -> float | None:
    """What the feedback compares with its target: the worst online pod's run delay per slice (ms) or its wait
    share, per `tier.cpu.onlineWaitSignal` (None: not read)."""
    if wait is None:
        return None
    return wait.delay_ms if signal == "slice" else wait.ratio


def target_of(cfg: TierConfig) -> float:
    """The feedback's target in the signal's unit: `tier.cpu.onlineDelayTarget` (ms per slice) or
    `tier.cpu.onlineWaitTarget` (a fraction)."""
    return cfg.online_delay_target if cfg.online_wait_signal == "slice" else cfg.online_wait_target


def baseline_for(prev: WaitBaseline | None, inp: CpuInputs, floor: float, now: float,
                 signal: WaitSignal = "share") -> WaitBaseline | None:  # fmt: skip
    """The next baseline of `signal` (module docstring): an idle period folds its value in; a smaller value read
    while the tier runs lowers it at once (offline work adds wait, it does not take any away); older than
    `BASE_TTL`, gone."""
    if prev is not None and now - prev.at > BASE_TTL:
        prev = None
    wait = signal_of(inp.wait, signal)
    if wait is None:
        return prev
    if inp.offline <= max(floor, IDLE * inp.allocatable):
        value = wait if prev is None else prev.value + BASE_WEIGHT * (wait - prev.value)
        return WaitBaseline(min(BASE_MAX_MS if signal == "slice" else BASE_MAX, max(0.0, value)), now, signal)
    if prev is not None and wait < prev.value:
        return WaitBaseline(wait, prev.at, signal)
    return prev


@dataclass(frozen=True, slots=True)
class CpuInputs:
    """The newest sample, in milli-cores."""

    allocatable: float
    #: online pods' usage (kubepods minus the offline pods)
    online: float
    #: the machine's usage outside kubepods (None: /proc/stat unreadable; counted as 0)
    system: float
    #: the offline pods' usage
    offline: float
    wait: OnlineWait | None = None


def cut_factor(wait: float, target: float, cfg: TierConfig) -> float:
    """What one period over the target multiplies the ceiling by: `CUT` (halve), or target / wait within [`CUT`,
    `TRIM`] (proportional: a wait 10 % over the target trims about a tenth, one twice the target halves; every
    period over the target cuts at least `1 - TRIM`)."""
    if cfg.cut != "proportional" or wait <= 0:
        return CUT
    return max(CUT, min(TRIM, target / wait))


@dataclass(frozen=True, slots=True)
class CpuCeiling:
    """A ceiling decision: the value, the bound, which rule set it and why, in words."""

    ceiling: float
    bound: float
    rule: str
    reason: str
    inputs: CpuInputs = field(default_factory=lambda: CpuInputs(0.0, 0.0, 0.0, 0.0))


def inputs_of(pods: Sequence[PodView], node: Amounts | None, kubepods: Amounts | None,
              usage: Mapping[PodUID, Amounts], allocatable: float, wait: OnlineWait | None) -> CpuInputs:
    """The ceiling's inputs from one sample's usage (node, kubepods, per pod)."""
    offline_uids = {p.uid for p in pods if p.offline}
    offline = sum(a.cpu for uid, a in usage.items() if uid in offline_uids)
    kube = kubepods.cpu if kubepods is not None else sum(a.cpu for a in usage.values())
    system = max(0.0, node.cpu - kube) if node is not None else 0.0
    return CpuInputs(allocatable, max(0.0, kube - offline), system, offline, wait)


def bound_of(inp: CpuInputs, cfg: TierConfig) -> float:
    """allocatable x `tier.cpu.suppressRatio` - online usage, - system usage with `tier.cpu.subtractSystem`."""
    return inp.allocatable * cfg.suppress_ratio - inp.online - (inp.system if cfg.subtract_system else 0.0)


def _kept(band: float) -> str:
    return f"kept: the bound is within {band:.0f}m ({DEADBAND:g} of allocatable)"


def ceiling(previous: float | None, inp: CpuInputs, cfg: TierConfig, due: bool = True,
            base: float = 0.0) -> CpuCeiling:  # fmt: skip
    """The next ceiling (milli-cores; module docstring). `previous` None: the first decision starts at the bound.
    `due` False (a decision within a period of the last step: a pod event, a pressure sample): no raise and no
    halving, only the cut to a lower bound, so the ceiling rises at most one step per period. `base`: the online
    pods' wait while the tier is idle (`baseline_for`), which the target is on top of."""
    floor = cfg.min_cores * 1000.0
    band = DEADBAND * inp.allocatable
    if not due and previous is not None:
        bound = bound_of(inp, cfg)
        value = max(floor, min(previous, bound))
        rule = "floor" if value == floor and bound < floor else "bound" if bound < previous else "kept"
        if rule == "bound" and previous - value < band:
            value, rule = previous, "deadband"
        return CpuCeiling(value, bound, rule, f"tier CPU ceiling {value:.0f}m ({rule}): within the period", inp)
    bound = bound_of(inp, cfg)
    system = f" - system {inp.system:.0f}m" if cfg.subtract_system else f" (system {inp.system:.0f}m not subtracted)"
    said = (
        f"bound {bound:.0f}m = allocatable {inp.allocatable:.0f}m x {cfg.suppress_ratio:g} - online "
        f"{inp.online:.0f}m{system}"
    )
    wait = inp.wait
    value_now = signal_of(wait, cfg.online_wait_signal)
    slices = cfg.online_wait_signal == "slice"
    target = target_of(cfg) + base
    what, unit = ("online CPU delay per slice", "ms") if slices else ("online CPU wait", "")
    over = f"target {target_of(cfg):g}{unit}" + (f" + baseline {base:.3f}{unit}" if base > 0 else "")
    waiting = value_now is not None and value_now > target
    start = bound if previous is None else previous
    if waiting and wait is not None and value_now is not None:
        told = f"{what} {value_now:.3f}{unit} ({wait.pod}) > {over}"
        if inp.offline >= CAUSE * start:
            factor = cut_factor(value_now, target, cfg)
            done = "halved" if factor == CUT else f"cut to {factor:.2f}x"
            value, rule, why = min(bound, start * factor), "wait", f"{told}: {done} from {start:.0f}m"
        else:
            value, rule, why = min(bound, start), "hold", f"{told}, but the tier uses {inp.offline:.0f}m: held"
    elif previous is None or bound <= previous:
        value, rule, why = bound, "bound", "at the bound" if previous is None else f"cut at once from {previous:.0f}m"
        if previous is not None and previous - bound < band and bound > floor and previous > floor:
            value, rule, why = previous, "deadband", _kept(band)
    else:
        step = cfg.raise_step * inp.allocatable
        if inp.offline < UNUSED * previous:
            value, rule = previous, "unused"
            why = f"kept: the tier uses {inp.offline:.0f}m, under {UNUSED:g} of it (a raise would go unused)"
        elif previous + step < bound:
            value, rule, why = previous + step, "raise", f"raised {step:.0f}m ({cfg.raise_step:g} of allocatable)"
        elif bound - previous < band and previous > floor:
            value, rule, why = previous, "deadband", _kept(band)
        else:
            value, rule, why = bound, "bound", "raised to the bound"
        if wait is not None and value_now is not None:
            why += f"; {what} {value_now:.3f}{unit} <= {over}"
    if value < floor:
        value, rule, why = floor, "floor", f"{why}; held at the floor tier.cpu.minCores {cfg.min_cores:g}"
    return CpuCeiling(value, bound, rule, f"tier CPU ceiling {value:.0f}m ({rule}): {why}; {said}", inp)


@dataclass(frozen=True, slots=True)
class Group:
    """A group the ceiling is split over: the BestEffort root (`ROOT`) or an offline pod (its UID)."""

    key: str
    #: recent usage, milli-cores
    demand: float
    #: its own CPU limit (milli), None when it has none
    limit: float | None = None


def split(total: float, groups: Sequence[Group], least: float) -> dict[str, float]:
    """Each group's share of `total` (milli; module docstring): `least` each when `total` allows it (else an equal
    share), the rest by demand plus an equal share of the slack, capped at each group's own limit."""
    if not groups:
        return {}
    n = len(groups)
    base = least if least * n <= total else total / n
    rest = total - base * n
    slack = rest / n
    weights = [max(0.0, g.demand) + slack for g in groups]
    weight_sum = sum(weights)
    out: dict[str, float] = {}
    for g, w in zip(groups, weights):
        share = base + (rest * w / weight_sum if weight_sum > 0 else rest / n)
        out[g.key] = share if g.limit is None else min(share, g.limit)
    return out


def root_holds_online(pods: Sequence[PodView]) -> bool:
    """An online pod is BestEffort too: then the root cannot take the tier's quota (it would cap that pod)."""
    return any(not p.offline and p.qos_class == "BestEffort" and not p.terminating for p in pods)


def groups_of(pods: Sequence[PodView], usage: Mapping[PodUID, Amounts]) -> tuple[list[Group], bool]:
    """The tier's groups, and whether the BestEffort root is one of them (it holds offline pods and no online one)."""
    root = not root_holds_online(pods)
    groups: list[Group] = []
    root_demand = 0.0
    root_used = False
    for p in sorted(pods, key=lambda p: p.uid):
        if not p.offline:
            continue
        u = usage.get(p.uid)
        demand = u.cpu if u is not None else 0.0
        if root and p.qos_class == "BestEffort":
            root_demand += demand
            root_used = True
            continue
        groups.append(Group(str(p.uid), demand, float(p.cpu_limit) if p.cpu_limit is not None else None))
    if root and root_used:
        groups.insert(0, Group(ROOT, root_demand))
    return groups, root and root_used


@dataclass(frozen=True, slots=True)
class TierCpu:
    """The tier's CPU decision: the ceiling and each group's share (milli). `root` None: the BestEffort root takes
    no quota (no offline pod in it, or an online one)."""

    decision: CpuCeiling
    root: float | None
    pods: Mapping[PodUID, float]
    #: the median bound of the last `ALLOWANCE_WINDOW` seconds (`bound_over`); None: the newest sample's alone
    judged_bound: float | None = None

    @property
    def ceiling(self) -> float:
        return self.decision.ceiling

    @property
    def allowance(self) -> float:
        """What the node's capacity leaves the tier, the one starvation is judged against: the bound (Koordinator's
        suppress value: allocatable x ratio - online - system), or the floor above it. Never the feedback's own
        moves below the bound:
        - a tier still climbing to its bound, after an agent start or a spike, is being given more each period
          (judged by its ceiling, it killed both offline jobs of `make run`'s scenario, idle node, 100m on its way
          up);
        - a cut for the online pods' wait gives the CPU back within periods once the wait falls: judged by it, the
          colocation benchmark's two-thirds cpu cell evicted both offline pods at 30 % node CPU (ceiling halved to
          the 100m floor, 12 % of their 860m), work the same node ran again a minute later.
        The bound is the median of the last `ALLOWANCE_WINDOW` seconds' where known (`judged_bound`), not one
        sample's: one sample is one read of counters, and a read between two updates, or a second's lull of the online
        pods, put a starving tier's allowance over the satisfaction for that second (a CI fleet run: 544m for one
        sample every 15-20 s among 150-350m, for 600m requested). Each time the agent's grace started again and the
        rescheduling plugin read "not starving": the surge nodes' work was neither moved nor evicted. A median, not a
        mean: the tier's usage follows its ceiling, which follows the bound down at once, so a mean raised by one
        high sample would call the tier idle ("lacks work"). Nor does the ceiling count then unless it is the floor:
        it rises a step on such a sample."""
        d = self.decision
        if self.judged_bound is None:
            return max(d.ceiling if d.rule != "deadband" else 0.0, d.bound)
        return max(d.ceiling if d.ceiling > d.bound and d.rule != "deadband" else 0.0, self.judged_bound)


def decide_cpu(
    previous: float | None,
    pods: Sequence[PodView],
    inp: CpuInputs,
    usage: Mapping[PodUID, Amounts],
    cfg: TierConfig,
    least: float,
    due: bool = True,
    base: float = 0.0,
) -> TierCpu:
    """The ceiling and its split over the tier's groups."""
    c = ceiling(previous, inp, cfg, due, base)
    groups, with_root = groups_of(pods, usage)
    shares = split(c.ceiling, groups, least)
    root = shares.pop(ROOT, None) if with_root else None
    return TierCpu(c, root, {PodUID(k): v for k, v in shares.items()})


# --- what `agent.decide.plan` asks of the tier --------------------------------------------------------------------


def offline_requests(pods: Sequence[PodView]) -> float:
    """The CPU the offline pods request (plain + batch-cpu, milli): what the tier was sold."""
    return sum(p.all_requests().cpu for p in pods if p.offline and not p.terminating)


def online_of(kubepods: Amounts, usage: Mapping[PodUID, Amounts], pods: Sequence[PodView]) -> tuple[float, float]:
    """(online, offline) CPU usage in milli from kubepods and per-pod usage."""
    offline_uids = {p.uid for p in pods if p.offline}
    offline = sum(a.cpu for uid, a in usage.items() if uid in offline_uids)
    return max(0.0, kubepods.cpu - offline), offline


def _in_window(samples: Sequence[Sample], until: float, window: float) -> Iterator[Sample]:
    """The samples with kubepods usage of the `window` seconds that end at `until`, newest first."""
    for s in reversed(samples):
        if s.time > until:
            continue
        if s.time <= until - window:
            return
        if s.kubepods is not None:
            yield s


def bound_over(
    samples: Sequence[Sample], pods: Sequence[PodView], allocatable: float, ratio: float, until: float, window: float,
    system: bool = True,
) -> float | None:
    """The median of the tier's bound (allocatable x `ratio` - online, - system when `system`, each sample's
    `inputs_of`) over the
    samples of the `window` seconds that end at `until`: what most of them say, whatever one or two odd reads say.
    None without a sample of kubepods usage in it, or for a window of 0."""
    if window <= 0:
        return None
    bounds = [allocatable * ratio - inp.online - (inp.system if system else 0.0)
              for inp in (inputs_of(pods, s.node, s.kubepods, s.pods, allocatable, None)
                          for s in _in_window(samples, until, window))]  # fmt: skip
    return statistics.median(bounds) if bounds else None


def offline_over(samples: Sequence[Sample], pods: Sequence[PodView], until: float, window: float) -> float | None:
    """The offline pods' mean CPU usage (milli) over the `window` seconds of samples that end at `until`, each sample
    weighted by its interval; None while they cover less than 90 % of the window (a young agent, or a gap in the
    samples, judges no starvation). Koordinator's cpu_evict.go averages BE usage over cpuEvictTimeWindowSeconds
    likewise: a start-up burst is not a starved tier."""
    offline_uids = {p.uid for p in pods if p.offline}
    used = covered = 0.0
    for s in _in_window(samples, until, window):
        used += s.elapsed * sum(a.cpu for uid, a in s.pods.items() if uid in offline_uids)
        covered += s.elapsed
    if covered < 0.9 * window or covered <= 0:
        return None
    return used / covered


def starved_over(
    samples: Sequence[Sample], until: float, pods: Sequence[PodView], tier: TierCpu | None, cfg: EvictionCpuConfig,
    instant: float,
) -> bool:
    """`watermarks.starved` with the offline usage of `eviction.cpu.window` (`offline_over`); `instant` (this
    sample's own offline usage) when the window is 0."""
    if tier is None:
        return False
    offline = instant if cfg.window <= 0 else offline_over(samples, pods, until, cfg.window)
    if offline is None:
        return False
    return watermarks.starved(offline, tier.allowance, offline_requests(pods), cfg.starved_usage, cfg.satisfaction)


def cpu_measure(
    pct: Amounts, sample: Sample, pods: Sequence[PodView], allocatable: Amounts, tier: TierCpu | None,
    cfg: EvictionCpuConfig, history: Sequence[Sample] = (),
) -> tuple[Amounts, bool]:
    """What the watermark hysteresis sees of one sample under `eviction.cpu.measure`: the node measure as it is;
    satisfaction: CPU usage% of the online pods alone, and whether the tier is starved (`starved_over` the samples
    of `history` up to this one)."""
    if cfg.measure == "node" or sample.kubepods is None:
        return pct, False
    online, offline = online_of(sample.kubepods, sample.pods, pods)
    online_pct = 100.0 * online / allocatable.cpu if allocatable.cpu > 0 else 0.0
    starved = starved_over(history or (sample,), sample.time, pods, tier, cfg, offline)
    return Amounts(online_pct, pct.memory), starved


@dataclass(frozen=True, slots=True)
class TierDecision:
    """What `agent.decide.plan` takes from the tier: the decision (None: none), why, when the ceiling last took a step
    (the next state's `tier_at`), and the online wait baseline (the next state's `tier_wait_base`)."""

    cpu: TierCpu | None
    reason: str
    at: float | None
    base: WaitBaseline | None = None


def decide_for(
    state_ceiling: float | None, state_at: float | None, newest: Sample | None, pods: Sequence[PodView],
    allocatable: float, wait: OnlineWait | None, cfg: TierConfig, least: float, now: float,
    state_base: WaitBaseline | None = None, history: Sequence[Sample] = (), judge_window: float = 0.0,
) -> TierDecision:
    """The tier's decision for `agent.decide.plan` from the newest sample (none without one); the allowance a
    starved tier is judged by from the bound over the `judge_window` seconds of `history` (`bound_over`)."""
    if not cfg.enabled:
        return TierDecision(None, "tier.enabled is false: no tier CPU ceiling (values the agent wrote go back)", None)
    if newest is None or newest.kubepods is None:
        return TierDecision(None, "no sample of kubepods usage yet: no tier CPU ceiling this cycle", state_at,
                            state_base)  # fmt: skip
    inp = inputs_of(pods, newest.node, newest.kubepods, newest.pods, allocatable, wait)
    due = state_at is None or now - state_at >= cfg.period * 0.9
    if state_base is not None and state_base.signal != cfg.online_wait_signal:
        state_base = None  # measured in the other signal's unit (the config changed): measured again
    base = baseline_for(state_base, inp, cfg.min_cores * 1000.0, now, cfg.online_wait_signal) if due else state_base
    t = decide_cpu(state_ceiling, pods, inp, newest.pods, cfg, least, due, base.value if base is not None else 0.0)
    judged = bound_over(history, pods, allocatable, cfg.suppress_ratio, newest.time, judge_window,
                        cfg.subtract_system)
    if judged is not None:
        t = replace(t, judged_bound=judged)
    return TierDecision(t, t.decision.reason, now if due else state_at, base)


def view_of(t: TierCpu | None, wait: OnlineWait | None, base: WaitBaseline | None = None) -> TierView | None:
    """What `plan` and the metrics show of a tier decision."""
    if t is None:
        return None
    d = t.decision
    return TierView(d.ceiling, d.bound, d.rule, d.reason, wait.ratio if wait is not None else None,
                    base.value if base is not None else None, wait.pod if wait is not None else None,
                    wait.source if wait is not None else None, wait.delay_ms if wait is not None else None,
                    base.signal if base is not None else None)  # fmt: skip
