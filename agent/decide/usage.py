"""Smoothing the sample window into the usage the capacity model and the plan report.

Each quantity is smoothed on its own over the samples that have it: the mean (default) or the p95
(nearest rank). Online/offline sums and U_non are formed per sample first, then smoothed, so a pod
missing from one sample does not skew a class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agent.apis import PodUID, percent
from agent.config import Smoothing
from agent.decide.ops import UsageView
from agent.model import Amounts, PodView, Sample


def smooth(values: Sequence[float], how: Smoothing) -> float:
    """Mean, or nearest-rank p95; 0 for no values."""
    if not values:
        return 0.0
    if how == "p95":
        ordered = sorted(values)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return sum(values) / len(values)


def prune(samples: Sequence[Sample], window_seconds: float) -> tuple[Sample, ...]:
    """The samples within `window_seconds` of the newest one (all of them until the window fills)."""
    if not samples:
        return ()
    newest = max(s.time for s in samples)
    return tuple(s for s in samples if s.time > newest - window_seconds + 1e-9)


def _smooth_amounts(items: Sequence[Amounts], how: Smoothing) -> Amounts:
    return Amounts(smooth([a.cpu for a in items], how), smooth([a.memory for a in items], how))


def _class_sum(sample: Sample, uids: frozenset[PodUID]) -> Amounts:
    total = Amounts()
    for uid, amounts in sample.pods.items():
        if uid in uids:
            total = total + amounts
    return total


def summarize(samples: Sequence[Sample], pods: Sequence[PodView], allocatable: Amounts, how: Smoothing) -> UsageView:
    """Smoothed kubepods, node, per-class, per-pod usage and U_non over `samples`."""
    if not samples:
        return UsageView()
    offline = frozenset(p.uid for p in pods if p.offline)
    online = frozenset(p.uid for p in pods if not p.offline)
    kube = [s.kubepods for s in samples if s.kubepods is not None]
    node = [s.node for s in samples if s.node is not None]
    non_offline = [(s.node - _class_sum(s, offline)).floor0() for s in samples if s.node is not None]
    per_pod: dict[PodUID, list[Amounts]] = {}
    for s in samples:
        for uid, amounts in s.pods.items():
            per_pod.setdefault(uid, []).append(amounts)
    kubepods = _smooth_amounts(kube, how)
    pct: Callable[[float, float], float] = percent
    times = sorted(s.time for s in samples)
    span = times[-1] - times[0] + min(s.elapsed for s in samples)
    return UsageView(
        kubepods=kubepods,
        percent=Amounts(pct(kubepods.cpu, allocatable.cpu), pct(kubepods.memory, allocatable.memory)),
        node=_smooth_amounts(node, how),
        online=_smooth_amounts([_class_sum(s, online) for s in samples], how),
        offline=_smooth_amounts([_class_sum(s, offline) for s in samples], how),
        non_offline=_smooth_amounts(non_offline, how),
        pods={uid: _smooth_amounts(v, how) for uid, v in sorted(per_pod.items())},
        samples=len(samples),
        window_seconds=span,
        newest=times[-1],
    )


def sample_percent(sample: Sample, allocatable: Amounts) -> Amounts | None:
    """One sample's kubepods usage in percent of allocatable (None when kubepods was unreadable)."""
    if sample.kubepods is None:
        return None
    return Amounts(percent(sample.kubepods.cpu, allocatable.cpu), percent(sample.kubepods.memory, allocatable.memory))
