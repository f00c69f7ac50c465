"""Usage profiles and the `profile` capacity policy (docs/capacity-prediction.md): pure folds and reads.

**Histograms.** Koordinator's decaying histogram (pkg/util/histogram/{histogram,decaying_histogram,
histogram_options}.go, itself VPA's), reproduced: exponential buckets (the first `first` wide, each next 5 %
wider, up to `max_value`; CPU from 25m to 1024 cores, memory from 5 MiB to 2 TiB, as pkg/koordlet/prediction/
predict_server.go sizes them), a sample at time t weighing 2^((t - reference) / half-life), the reference
moved forward (all weights rescaled) when the exponent grows past 50, buckets under the epsilon 1e-4 dropped,
and a percentile read as the END of the bucket that reaches it (so it errs up by at most 5 %).

**Profiles** (`fold`, once a minute; the rules, in order):

| what | kept per | sample | weight |
|---|---|---|---|
| pod CPU, pod memory working set | pod with samples | its mean over the minute | minutes covered |
| U_non CPU and memory (node minus offline pods) | node, hour of day (UTC, 24 slots) | each sample | seconds / 60 |

A pod gone from the node for 30 minutes loses its profile (Koordinator's model expiration); a new half-life
rescales the history once (its weights as of that fold) and applies from then on. The cost of a fold is one
bucket update per pod that has samples and one per sample for the node; decisions between folds cost nothing.

**The estimate** (`estimate`, every capacity computation), per resource r:

| term | rule |
|---|---|
| W | the window's U_non (`sampler.smoothing` of the last `sampler.window`): the present |
| P | margin x the highest percentile of the hourly slots from now to now + horizon (a slot without data: the |
|   | whole profile's; a profile holding less than a day of samples, or none: no P) |
| cold | each online pod younger than `cold_start` (0, off, by default): max(0, max(request, margin x its own |
|   | percentile) - usage now) |
| headroom | (high watermark - ratio) x A, at least 0: how far online usage may rise over the planned U_non before |
|   | the node evicts (offline pods filling B keep it at A x ratio) |
| U_non (policy `profile`) | max(W, P - headroom) + the sum of cold |
| U_non (policy `window`) | W (P is shown, not used) |

B = max(0, A x ratio - U_non - reserve) as before (agent.decide.capacity), so B = min(A x ratio - W, A x high - P)
(without cold pods): the present stays under the target ratio, the peak the profile expects over the horizon
under the eviction threshold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from agent.config_profile import ProfileConfig
from agent.decide import usage
from agent.model import (
    EMPTY_HISTOGRAM,
    ZERO,
    Amounts,
    Histogram,
    NodeProfile,
    PodProfile,
    PodView,
    ProfileState,
    Sample,
)
from tidemark.apis import RESOURCES, PodUID, Resource

#: a fold every minute (Koordinator's TrainingInterval)
FOLD_SECONDS: Final = 60.0
SLOTS: Final = 24
SLOT_SECONDS: Final = 3600.0
#: a pod's profile outlives the pod this long (Koordinator's ModelExpirationDuration, 30 min)
POD_EXPIRY: Final = 1800.0
#: the node's profile is read once it holds a day of samples, every hour of it seen (before: W alone, as the
#: window policy): a young profile's hour is a few minutes, where one spike is its p95 for the rest of the hour.
#: A restart keeps what the profile holds (the checkpoint), so only a new node waits.
READY_SECONDS: Final = 86400.0
EPSILON: Final = 1e-4
MAX_EXPONENT: Final = 50.0


@dataclass(frozen=True, slots=True)
class Buckets:
    """Exponential bucket boundaries: bucket 0 is [0, first), bucket n starts at first x (ratio^n - 1) / (ratio - 1)."""

    first: float
    ratio: float
    max_value: float
    #: how many buckets (the last one holds everything from its start up)
    count: int = field(init=False)

    def __post_init__(self) -> None:
        count = math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first + 1) / math.log(self.ratio)) + 1
        object.__setattr__(self, "count", count)

    def start(self, bucket: int) -> float:
        if bucket <= 0:
            return 0.0
        return self.first * (self.ratio**bucket - 1) / (self.ratio - 1)

    def find(self, value: float) -> int:
        if not value >= self.first:  # NaN and negatives land in bucket 0
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first + 1) / math.log(self.ratio))
        return min(bucket, self.count - 1)


#: milli-cores, 25m to 1024 cores; bytes, 5 MiB to 2 TiB (Koordinator's predict_server.go, in Tidemark's units)
SCHEME: Final[dict[Resource, Buckets]] = {
    "cpu": Buckets(25.0, 1.05, 1024 * 1000.0),
    "memory": Buckets(5.0 * 2**20, 1.05, float(2**41)),
}


# --- one histogram ---------------------------------------------------------------------------------------


def _rescaled(h: Histogram, reference: float, half_life: float) -> Histogram:
    """The same histogram relative to `reference` (weights x 2^((old - new) / half-life)), tiny buckets dropped."""
    factor = 2.0 ** ((h.reference - reference) / half_life)
    buckets = {b: w * factor for b, w in h.buckets.items() if w * factor >= EPSILON}
    return Histogram(buckets, sum(buckets.values()), reference)


def add(h: Histogram, resource: Resource, value: float, weight: float, t: float, half_life: float) -> Histogram:
    """`h` with a sample of `value` at time `t` (weight x its decay factor)."""
    return add_many(h, resource, ((value, weight, t),), half_life)


def add_many(
    h: Histogram, resource: Resource, samples: Sequence[tuple[float, float, float]], half_life: float
) -> Histogram:
    """`h` with every (value, weight, time) sample added: one copy of the buckets however many samples."""
    if not samples:
        return h
    newest = max(t for _, _, t in samples)
    if not h.buckets:
        h = Histogram({}, 0.0, newest)
    elif (newest - h.reference) / half_life > MAX_EXPONENT:
        h = _rescaled(h, newest, half_life)
    scheme = SCHEME[resource]
    buckets = dict(h.buckets)
    total = h.total
    touched: list[int] = []
    for value, weight, t in samples:
        if not weight > 0 or not math.isfinite(value):
            continue
        w = weight * 2.0 ** ((t - h.reference) / half_life)
        b = scheme.find(value)
        buckets[b] = buckets.get(b, 0.0) + w
        total += w
        touched.append(b)
    tiny = [b for b in touched if buckets.get(b, EPSILON) < EPSILON]  # only a new bucket can be under it
    for b in tiny:
        total -= buckets.pop(b)
    return Histogram(buckets, total, h.reference)


def percentile(h: Histogram, resource: Resource, q: float) -> float:
    """The upper end of the bucket where the cumulative weight reaches q x total (VPA's); 0 when empty."""
    if not h.buckets:
        return 0.0
    scheme = SCHEME[resource]
    order = sorted(h.buckets)
    total = sum(h.buckets.values())
    threshold = q * total
    partial = 0.0
    bucket = order[-1]
    for b in order:
        partial += h.buckets[b]
        if partial >= threshold:
            bucket = b
            break
    return scheme.start(bucket + 1) if bucket < scheme.count - 1 else scheme.start(bucket)


def average(h: Histogram, resource: Resource) -> float:
    """The weighted mean of the bucket starts (VPA's Average); 0 when empty."""
    total = sum(h.buckets.values())
    if total <= 0:
        return 0.0
    scheme = SCHEME[resource]
    return sum(w * scheme.start(b) for b, w in h.buckets.items()) / total


def weight_at(h: Histogram, t: float, half_life: float) -> float:
    """The histogram's total weight as of time `t` (a minute of samples folded at `t` weighs 1)."""
    return sum(h.buckets.values()) * 2.0 ** ((h.reference - t) / half_life) if h.buckets else 0.0


def merged(hs: Sequence[Histogram], t: float, half_life: float) -> Histogram:
    """One histogram holding all of `hs` (their weights aligned at `t`)."""
    buckets: dict[int, float] = {}
    for h in hs:
        if not h.buckets:
            continue
        factor = 2.0 ** ((h.reference - t) / half_life)
        for b, w in h.buckets.items():
            buckets[b] = buckets.get(b, 0.0) + w * factor
    return Histogram(buckets, sum(buckets.values()), t) if buckets else EMPTY_HISTOGRAM


# --- the fold ----------------------------------------------------------------------------------------------


def slot_of(t: float) -> int:
    """The hour of the day (UTC) of epoch time `t`."""
    return int((t % 86400.0) // SLOT_SECONDS)


def due(state: ProfileState, now: float) -> bool:
    """Whether a fold is due (a minute since the last one)."""
    return state.folded is None or now - state.folded >= FOLD_SECONDS


def _half_lives(state: ProfileState, cfg: ProfileConfig, now: float) -> ProfileState:
    """The state with the configured half-lives: a change rescales every histogram to `now` once."""
    old = {"cpu": state.half_life_cpu, "memory": state.half_life_memory}
    new = {"cpu": cfg.half_life_cpu, "memory": cfg.half_life_memory}
    if old == new:
        return state
    node, pods = state.node, dict(state.pods)
    for r in RESOURCES:
        if old[r] <= 0 or old[r] == new[r]:
            continue

        def at_now(h: Histogram, r: Resource = r) -> Histogram:
            return _rescaled(h, now, old[r]) if h.buckets else h

        if r == "cpu":
            node = replace(node, cpu=tuple(at_now(h) for h in node.cpu))
            pods = {u: replace(p, cpu=at_now(p.cpu)) for u, p in pods.items()}
        else:
            node = replace(node, memory=tuple(at_now(h) for h in node.memory))
            pods = {u: replace(p, memory=at_now(p.memory)) for u, p in pods.items()}
    return replace(state, node=node, pods=pods, half_life_cpu=new["cpu"], half_life_memory=new["memory"])


def _node_fold(
    node: NodeProfile, new: Sequence[Sample], offline: frozenset[PodUID], online: frozenset[PodUID], cfg: ProfileConfig
) -> NodeProfile:
    """Each sample's U_non (the machine minus offline pods and pods gone since, `usage.u_non_of`) into its hour's
    histograms."""
    per_slot: dict[Resource, dict[int, list[tuple[float, float, float]]]] = {"cpu": {}, "memory": {}}
    first = node.first
    last = node.last
    seconds = node.seconds
    for s in new:
        if s.node is None or s.elapsed <= 0:
            continue
        seconds += s.elapsed
        u_non = usage.u_non_of(s, offline, online)  # memoized: the decision summed them too
        if u_non is None:
            continue
        slot = slot_of(s.time)
        w = s.elapsed / FOLD_SECONDS
        per_slot["cpu"].setdefault(slot, []).append((u_non.cpu, w, s.time))
        per_slot["memory"].setdefault(slot, []).append((u_non.memory, w, s.time))
        first = s.time if first <= 0 else min(first, s.time)
        last = max(last, s.time)
    out = node
    for r in RESOURCES:
        slots = list((node.cpu if r == "cpu" else node.memory) or (EMPTY_HISTOGRAM,) * SLOTS)
        for slot, samples in per_slot[r].items():
            slots[slot] = add_many(slots[slot], r, samples, cfg.half_life(r))
        out = replace(out, cpu=tuple(slots)) if r == "cpu" else replace(out, memory=tuple(slots))
    return replace(out, first=first, last=last, seconds=seconds)


def _pod_fold(
    pods: Mapping[PodUID, PodProfile], new: Sequence[Sample], live: frozenset[PodUID], cfg: ProfileConfig, now: float
) -> dict[PodUID, PodProfile]:
    """Each live pod's mean over the new samples into its histograms; pods gone for POD_EXPIRY dropped."""
    sums: dict[PodUID, list[float]] = {}
    for s in new:
        if s.elapsed <= 0:
            continue
        for uid, a in s.pods.items():
            if uid not in live:
                continue
            acc = sums.get(uid)
            if acc is None:
                acc = sums[uid] = [0.0, 0.0, 0.0, s.time]
            acc[0] += a.cpu * s.elapsed
            acc[1] += a.memory * s.elapsed
            acc[2] += s.elapsed
            acc[3] = max(acc[3], s.time)
    out = {uid: p for uid, p in pods.items() if uid in live or now - p.last <= POD_EXPIRY}
    for uid, (cpu, memory, seconds, t) in sums.items():
        p = out.get(uid) or PodProfile(first=t)
        w = seconds / FOLD_SECONDS
        out[uid] = PodProfile(
            add(p.cpu, "cpu", cpu / seconds, w, t, cfg.half_life_cpu),
            add(p.memory, "memory", memory / seconds, w, t, cfg.half_life_memory),
            p.first or t,
            t,
        )
    return out


def fold(
    state: ProfileState, samples: Sequence[Sample], pods: Sequence[PodView], cfg: ProfileConfig, now: float
) -> ProfileState:
    """The profiles with the samples newer than the last fold (see the module docstring). Pure."""
    state = _half_lives(state, cfg, now)
    new = [s for s in samples if state.folded is None or s.time > state.folded]
    live = frozenset(p.uid for p in pods)
    offline = frozenset(p.uid for p in pods if p.offline)
    online = frozenset(p.uid for p in pods if not p.offline)
    node = _node_fold(state.node, new, offline, online, cfg) if new else state.node
    pod_profiles = _pod_fold(state.pods, new, live, cfg, now)
    folded = max((s.time for s in new), default=state.folded)
    return ProfileState(
        pod_profiles, node, folded if folded is not None else now, cfg.half_life_cpu, cfg.half_life_memory
    )


# --- the estimate ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColdPod:
    """An online pod in its cold start: what it counts at, against its usage now."""

    key: str
    counted: Amounts
    usage: Amounts


@dataclass(frozen=True, slots=True)
class Estimate:
    """U_non as the capacity policy estimates it, and the figures behind it (for `plan` and the events)."""

    policy: str
    u_non: Amounts
    window: Amounts
    #: margin x the profile's percentile over the horizon; None without a profile
    profile: Amounts | None = None
    #: the hours (UTC) of the day the profile was read at (empty: the whole profile)
    slots: tuple[int, ...] = ()
    cold: tuple[ColdPod, ...] = ()
    #: (high watermark - ratio) x allocatable: what the profile's peak may exceed the planned U_non by
    headroom: Amounts = ZERO

    def describe(self, cfg: ProfileConfig) -> str:
        def q(r: Resource, v: float) -> str:
            return f"{v:.0f}m" if r == "cpu" else f"{v / 2**20:.0f}Mi"

        hours = f"hours {', '.join(f'{h:02d}' for h in self.slots)} UTC" if self.slots else "the whole profile"
        parts = []
        for r in RESOURCES:
            prof = (
                f"profile p{cfg.percentile(r) * 100:g} x {cfg.margin:g} of {hours} {q(r, self.profile.get(r))}"
                if self.profile is not None
                else "no profile yet (it is read once it holds a day of samples)"
            )
            cold = sum(max(0.0, c.counted.get(r) - c.usage.get(r)) for c in self.cold)
            if self.policy == "profile":
                parts.append(
                    f"{r}: U_non = max(window {q(r, self.window.get(r))}, {prof} - headroom "
                    f"{q(r, self.headroom.get(r))}) + cold start {q(r, cold)} = {q(r, self.u_non.get(r))}"
                )
            else:
                parts.append(f"{r}: U_non = window {q(r, self.window.get(r))} ({prof}: not in force)")
        lead = f"capacity policy {self.policy}"
        if self.cold and self.policy == "profile":
            lead += f" ({len(self.cold)} online pod(s) in their cold start: {', '.join(c.key for c in self.cold[:5])})"
        return lead + ": " + "; ".join(parts)


def horizon_slots(now: float, horizon: float) -> tuple[int, ...]:
    """The hours of the day from now to now + horizon (at most all 24), in order."""
    count = min(SLOTS, math.floor(((now % SLOT_SECONDS) + horizon) / SLOT_SECONDS) + 1)
    first = slot_of(now)
    return tuple((first + i) % SLOTS for i in range(count))


#: profile_peak's results, memoized: the node profile only changes once a minute and the slots once an hour,
#: while the agent decides every second. Keyed by id(node profile) with the profile kept in the entry (an id
#: cannot be reused while it is cached).
_PEAKS: dict[tuple[int, tuple[int, ...], ProfileConfig], tuple[NodeProfile, Amounts | None, tuple[int, ...]]] = {}
_PEAKS_MAX = 64


def profile_peak(state: ProfileState, cfg: ProfileConfig, now: float) -> tuple[Amounts | None, tuple[int, ...]]:
    """P: margin x the highest percentile among the slots of the horizon (see the module docstring). Pure
    (memoized)."""
    slots = horizon_slots(now, cfg.horizon)
    key = (id(state.node), slots, cfg)
    hit = _PEAKS.get(key)
    if hit is not None and hit[0] is state.node:
        return hit[1], hit[2]
    result = _profile_peak(state, cfg, now, slots)
    if len(_PEAKS) >= _PEAKS_MAX:
        _PEAKS.clear()
    _PEAKS[key] = (state.node, *result)
    return result


def _profile_peak(
    state: ProfileState, cfg: ProfileConfig, now: float, slots: tuple[int, ...]
) -> tuple[Amounts | None, tuple[int, ...]]:
    if state.node.seconds < READY_SECONDS - FOLD_SECONDS:
        return None, ()
    values: dict[Resource, float] = {}
    read: tuple[int, ...] = slots
    for r in RESOURCES:
        hs = state.node.cpu if r == "cpu" else state.node.memory
        if not hs:
            return None, ()
        q = cfg.percentile(r)
        found = [percentile(hs[s], r, q) for s in slots if hs[s].buckets]
        if len(found) < len(slots):
            whole = merged(hs, now, cfg.half_life(r))
            if not whole.buckets:
                return None, ()
            found.append(percentile(whole, r, q))
            read = ()
        values[r] = cfg.margin * max(found)
    return Amounts.of(values), read


#: each pod profile's (CPU, memory) percentiles, memoized: a pod's profile changes once a minute, its estimate is
#: read every second (a node just booted has every pod in its cold start). Keyed by id with the profile kept.
_POD_PEAKS: dict[tuple[int, float, float], tuple[PodProfile, float, float]] = {}
_POD_PEAKS_MAX = 4096


def pod_peak(prof: PodProfile, cfg: ProfileConfig) -> tuple[float, float]:
    """(CPU, memory) percentiles of a pod's own profile (`capacity.profile.percentile.*`). Pure (memoized)."""
    key = (id(prof), cfg.percentile_cpu, cfg.percentile_memory)
    hit = _POD_PEAKS.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1], hit[2]
    cpu = percentile(prof.cpu, "cpu", cfg.percentile_cpu)
    memory = percentile(prof.memory, "memory", cfg.percentile_memory)
    if len(_POD_PEAKS) >= _POD_PEAKS_MAX:
        _POD_PEAKS.clear()
    _POD_PEAKS[key] = (prof, cpu, memory)
    return cpu, memory


def cold_pods(
    state: ProfileState, pods: Sequence[PodView], usage: Mapping[PodUID, Amounts], cfg: ProfileConfig, now: float
) -> tuple[ColdPod, ...]:
    """Online pods younger than `cold_start`, counted at max(request, margin x their own profile's percentile)."""
    out: list[ColdPod] = []
    if cfg.cold_start <= 0:
        return ()
    for p in pods:
        if p.offline or p.terminating or now - p.created >= cfg.cold_start:
            continue
        prof = state.pods.get(p.uid)
        cpu, memory = pod_peak(prof, cfg) if prof is not None else (0.0, 0.0)
        counted = Amounts(max(p.requests.cpu, cfg.margin * cpu), max(p.requests.memory, cfg.margin * memory))
        out.append(ColdPod(p.key, counted, usage.get(p.uid, ZERO)))
    return tuple(out)


def estimate(
    state: ProfileState,
    window: Amounts,
    pods: Sequence[PodView],
    usage: Mapping[PodUID, Amounts],
    cfg: ProfileConfig,
    policy: str,
    now: float,
    headroom: Amounts = ZERO,
) -> Estimate:
    """U_non for B under `policy` (see the module docstring); `headroom` = (high watermark - ratio) x
    allocatable per resource, at least 0. Pure."""
    peak, slots = profile_peak(state, cfg, now)
    if policy != "profile":
        return Estimate(policy, window, window, peak, slots, headroom=headroom)
    cold = cold_pods(state, pods, usage, cfg, now)
    values: dict[Resource, float] = {}
    for r in RESOURCES:
        base = max(window.get(r), peak.get(r) - headroom.get(r)) if peak is not None else window.get(r)
        values[r] = base + sum(max(0.0, c.counted.get(r) - c.usage.get(r)) for c in cold)
    return Estimate(policy, Amounts.of(values), window, peak, slots, cold, headroom)


def headroom(allocatable: Amounts, high_percent: Amounts, ratio: Amounts) -> Amounts:
    """(high watermark - ratio) x allocatable per resource, at least 0."""
    return Amounts(
        max(0.0, (high_percent.cpu / 100.0 - ratio.cpu) * allocatable.cpu),
        max(0.0, (high_percent.memory / 100.0 - ratio.memory) * allocatable.memory),
    )


# --- the checkpoint's document (the file is agent.act.statedir's) -------------------------------------------

CHECKPOINT_VERSION: Final = 1
CHECKPOINT_KIND: Final = "tidemark-usage-profiles"
MAX_PODS: Final = 5000
#: the half-lives a checkpoint may carry: the configurable range (agent/config.py, capacity.profile.half_life.*);
#: a tiny one (1e-300) loads and then overflows 2^(dt / half-life) at every fold
HALF_LIFE_RANGE: Final = (60.0, 30 * 86400.0)
#: a bucket key: ASCII digits (`str.isdigit` accepts "²", which int() refuses, and "٣", which int() reads as 3)
_BUCKET_KEY: Final = re.compile(r"[0-9]{1,4}")


def _hist_json(h: Histogram) -> dict[str, object]:
    return {"reference": h.reference, "buckets": {str(b): w for b, w in sorted(h.buckets.items())}}


def to_json(state: ProfileState) -> dict[str, object]:
    """The profiles as the JSON document `profiles.json` holds."""
    node = state.node
    return {
        "kind": CHECKPOINT_KIND,
        "version": CHECKPOINT_VERSION,
        "folded": state.folded,
        "half_life": {"cpu": state.half_life_cpu, "memory": state.half_life_memory},
        "node": {
            "first": node.first,
            "last": node.last,
            "seconds": node.seconds,
            "cpu": [_hist_json(h) for h in node.cpu],
            "memory": [_hist_json(h) for h in node.memory],
        },
        "pods": {
            uid: {"first": p.first, "last": p.last, "cpu": _hist_json(p.cpu), "memory": _hist_json(p.memory)}
            for uid, p in sorted(state.pods.items())
        },
    }


class CheckpointError(ValueError):
    """A checkpoint document that is not one (its path in the message)."""


def _number(raw: object, where: str, *, optional: bool = False) -> float:
    if raw is None and optional:
        return 0.0
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise CheckpointError(f"{where}: not a finite number")
    return float(raw)


def _hist_from(raw: object, resource: Resource, where: str) -> Histogram:
    if not isinstance(raw, Mapping):
        raise CheckpointError(f"{where}: not an object")
    reference = _number(raw.get("reference"), f"{where}.reference")
    buckets_raw = raw.get("buckets")
    if not isinstance(buckets_raw, Mapping):
        raise CheckpointError(f"{where}.buckets: not an object")
    count = SCHEME[resource].count
    buckets: dict[int, float] = {}
    for key, value in buckets_raw.items():
        if not isinstance(key, str) or not _BUCKET_KEY.fullmatch(key) or int(key) >= count:
            raise CheckpointError(f"{where}.buckets: {key!r} is not a bucket (0..{count - 1})")
        w = _number(value, f"{where}.buckets[{key}]")
        if w < 0 or w > 1e300:
            raise CheckpointError(f"{where}.buckets[{key}]: weight {w!r} out of range")
        if w >= EPSILON:
            buckets[int(key)] = w
    return Histogram(buckets, sum(buckets.values()), reference)


def _slots_from(raw: object, resource: Resource, where: str) -> tuple[Histogram, ...]:
    if raw in (None, []):
        return ()
    if not isinstance(raw, list) or len(raw) != SLOTS:
        raise CheckpointError(f"{where}: not a list of {SLOTS} hourly histograms")
    return tuple(_hist_from(h, resource, f"{where}[{i}]") for i, h in enumerate(raw))


#: how far ahead of the reader's clock a checkpoint's times may be (a clock set back, a restart on another clock:
#: the weights grow at most 2^(slack / half-life)); further is a checkpoint written under a wrong clock, whose
#: weights 2^((reference - now) / half-life) overflow every read
FUTURE_SLACK: Final = 86400.0


def _ahead(state: ProfileState, now: float) -> str | None:
    """The first time in `state` later than `now` + FUTURE_SLACK, named, or None."""
    limit = now + FUTURE_SLACK
    times: list[tuple[str, float]] = [("folded", state.folded or 0.0), ("node.last", state.node.last)]
    for name, slots in (("node.cpu", state.node.cpu), ("node.memory", state.node.memory)):
        times.extend((f"{name}[{i}].reference", h.reference) for i, h in enumerate(slots))
    for uid, p in state.pods.items():
        times += [(f"pods[{uid[:40]!r}].last", p.last), (f"pods[{uid[:40]!r}].cpu.reference", p.cpu.reference),
                  (f"pods[{uid[:40]!r}].memory.reference", p.memory.reference)]  # fmt: skip
    for where, t in times:
        if t > limit:
            return f"{where}: {t:.0f} is {t - now:.0f} s ahead of this clock (more than {FUTURE_SLACK:g} s)"
    return None


def from_json(data: object, now: float | None = None) -> ProfileState:
    """The profiles from a checkpoint document; CheckpointError naming what is wrong. Pure.

    With `now`, a checkpoint whose times run ahead of it (written under a wrong clock) is refused too."""
    state = _from_json(data)
    if now is not None and (why := _ahead(state, now)) is not None:
        raise CheckpointError(why)
    return state


def _from_json(data: object) -> ProfileState:
    if not isinstance(data, Mapping) or data.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError(f"not a usage profile checkpoint (kind is not {CHECKPOINT_KIND!r})")
    if data.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"version {data.get('version')!r} is not {CHECKPOINT_VERSION}")
    folded = data.get("folded")
    folded_at = None if folded is None else _number(folded, "folded")
    half = data.get("half_life")
    if not isinstance(half, Mapping):
        raise CheckpointError("half_life: not an object")
    hl_cpu, hl_mem = _number(half.get("cpu"), "half_life.cpu"), _number(half.get("memory"), "half_life.memory")
    low, high = HALF_LIFE_RANGE
    if not (low <= hl_cpu <= high and low <= hl_mem <= high):
        raise CheckpointError(
            f"half_life: cpu {hl_cpu!r}, memory {hl_mem!r}: each must be positive, {low:g}..{high:g} s"
        )
    node_raw = data.get("node")
    if not isinstance(node_raw, Mapping):
        raise CheckpointError("node: not an object")
    node = NodeProfile(
        _slots_from(node_raw.get("cpu"), "cpu", "node.cpu"),
        _slots_from(node_raw.get("memory"), "memory", "node.memory"),
        _number(node_raw.get("first"), "node.first", optional=True),
        _number(node_raw.get("last"), "node.last", optional=True),
        _number(node_raw.get("seconds"), "node.seconds", optional=True),
    )
    if bool(node.cpu) != bool(node.memory):
        raise CheckpointError("node: cpu and memory must both be present or both empty")
    pods_raw = data.get("pods")
    if not isinstance(pods_raw, Mapping) or len(pods_raw) > MAX_PODS:
        raise CheckpointError(f"pods: not an object of at most {MAX_PODS} pods")
    pods: dict[PodUID, PodProfile] = {}
    for uid, raw in pods_raw.items():
        where = f"pods[{str(uid)[:40]!r}]"
        if not isinstance(uid, str) or not 0 < len(uid) <= 128 or not isinstance(raw, Mapping):
            raise CheckpointError(f"{where}: not a pod UID with an object")
        pods[PodUID(uid)] = PodProfile(
            _hist_from(raw.get("cpu"), "cpu", f"{where}.cpu"),
            _hist_from(raw.get("memory"), "memory", f"{where}.memory"),
            _number(raw.get("first"), f"{where}.first", optional=True),
            _number(raw.get("last"), f"{where}.last", optional=True),
        )
    return ProfileState(pods, node, folded_at, hl_cpu, hl_mem)
