"""Smoothing the sample window into the usage the capacity model and the plan report.

Each quantity is smoothed on its own over the samples that have it: the mean (default) or the p95
(nearest rank). Online/offline sums and U_non are formed per sample first, then smoothed, so a pod
missing from one sample does not skew a class.

U_non is the machine minus every pod that is not a current online pod: an offline pod that finished or was
evicted inside the window (gone from the pod list, still in the window's samples) is not online usage. Counting
it as U_non was a cause of capacity swings (issue 32 item 6): a busy offline pod leaving took B down by its own
usage for a whole window, a new one placed on that B left, and so on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence

from agent.config_sampler import Smoothing
from agent.decide.ops import UsageView
from agent.model import Amounts, PodView, Sample
from tidemark.apis import PodUID, percent


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


#: per-sample class sums and the Amounts `summarize` folds from them, memoized: the daemon passes the same Sample
#: objects second after second, so a 60-sample window costs one new entry per decision, not sixty (building the
#: Amounts anew for each sample every second was a third of a decision at 5 pods). Keyed by id(sample) with the
#: sample itself kept in the entry (an id cannot be reused while it is cached) and the classification it was made for.
_Sums = tuple[float, float, float, float]
#: (online, offline, U_non) of one sample
_Views = tuple[Amounts, Amounts, Amounts | None]
_SUMS: dict[int, tuple[Sample, frozenset[PodUID], frozenset[PodUID], _Sums, _Views]] = {}
_SUMS_MAX = 4096
#: `summarize` drops the memo of samples not in its window once it holds this many more: an entry keeps its
#: sample alive, and samples that had left the 60-s window stayed cached up to _SUMS_MAX (about an hour of
#: them: +15 MiB of RSS on a 10-pod node, growing the whole first hour; far more with 110 pods)
_SUMS_SLACK = 64


def _entry(
    s: Sample, offline: frozenset[PodUID], online: frozenset[PodUID]
) -> tuple[Sample, frozenset[PodUID], frozenset[PodUID], _Sums, _Views]:
    """One sample's memo entry: its sums (online cpu, online memory, offline cpu, offline memory) and its views
    (online, offline, U_non; pods in neither class, gone since the sample, count in U_non's subtraction). Pure."""
    hit = _SUMS.get(id(s))
    if hit is not None and hit[0] is s and hit[1] == offline and hit[2] == online:
        return hit
    on_cpu = on_mem = off_cpu = off_mem = gone_cpu = gone_mem = 0.0
    for uid, a in s.pods.items():
        if uid in offline:
            off_cpu += a.cpu
            off_mem += a.memory
        elif uid in online:
            on_cpu += a.cpu
            on_mem += a.memory
        else:
            gone_cpu += a.cpu
            gone_mem += a.memory
    u_non = (
        None if s.node is None
        else Amounts(max(0.0, s.node.cpu - off_cpu - gone_cpu), max(0.0, s.node.memory - off_mem - gone_mem))
    )
    entry = (s, offline, online, (on_cpu, on_mem, off_cpu, off_mem),
             (Amounts(on_cpu, on_mem), Amounts(off_cpu, off_mem), u_non))  # fmt: skip
    if len(_SUMS) >= _SUMS_MAX:
        _SUMS.clear()
    _SUMS[id(s)] = entry
    return entry


def _forget_all_but(samples: Sequence[Sample]) -> None:
    """Drop the memoized sums of every sample not in `samples` (the window: older ones are not asked again)."""
    keep = {id(s) for s in samples}
    for key in [key for key in _SUMS if key not in keep]:
        del _SUMS[key]


def class_sums(s: Sample, offline: frozenset[PodUID], online: frozenset[PodUID]) -> tuple[float, float, float, float]:
    """(online cpu, online memory, offline cpu, offline memory) of one sample (pure; memoized with `summarize`'s)."""
    return _entry(s, offline, online)[3]


def u_non_of(s: Sample, offline: frozenset[PodUID], online: frozenset[PodUID]) -> Amounts | None:
    """One sample's U_non: the machine minus every pod that is not a current online pod (offline, or gone since:
    see the module docstring); None without a machine reading."""
    return _entry(s, offline, online)[4][2]


class PodMeans(Mapping[PodUID, Amounts]):
    """Per-pod smoothed usage over a window, computed on first use (most decisions never look at it)."""

    def __init__(self, samples: Sequence[Sample], how: Smoothing) -> None:
        self._samples = tuple(samples)
        self._how = how
        self._values: dict[PodUID, Amounts] | None = None

    def _compute(self) -> dict[PodUID, Amounts]:
        if self._values is None:
            per_pod: dict[PodUID, tuple[list[float], list[float]]] = {}
            for s in self._samples:
                for uid, a in s.pods.items():
                    values = per_pod.get(uid)
                    if values is None:
                        values = per_pod[uid] = ([], [])
                    values[0].append(a.cpu)
                    values[1].append(a.memory)
            self._values = {
                uid: Amounts(smooth(c, self._how), smooth(m, self._how)) for uid, (c, m) in sorted(per_pod.items())
            }
        return self._values

    def __getitem__(self, key: PodUID) -> Amounts:
        return self._compute()[key]

    def __iter__(self) -> Iterator[PodUID]:
        return iter(self._compute())

    def __len__(self) -> int:
        return len(self._compute())

    def __repr__(self) -> str:
        return repr(self._compute())


def summarize(samples: Sequence[Sample], pods: Sequence[PodView], allocatable: Amounts, how: Smoothing) -> UsageView:
    """Smoothed kubepods, node, per-class, per-pod usage and U_non over `samples`.

    Pods of a sample that are not in `pods` (gone since) count in neither class. The daemon runs this every
    second over a 60-sample window of 110 pods: per-sample class sums are memoized and the per-pod means
    are computed only when read.
    """
    if not samples:
        return UsageView()
    offline = frozenset(p.uid for p in pods if p.offline)
    online = frozenset(p.uid for p in pods if not p.offline)
    kube = [s.kubepods for s in samples if s.kubepods is not None]
    node = [s.node for s in samples if s.node is not None]
    online_sums: list[Amounts] = []
    offline_sums: list[Amounts] = []
    non_offline: list[Amounts] = []
    for s in samples:
        on, off, u_non = _entry(s, offline, online)[4]
        online_sums.append(on)
        offline_sums.append(off)
        if u_non is not None:
            non_offline.append(u_non)
    if len(_SUMS) > len(samples) + _SUMS_SLACK:
        _forget_all_but(samples)
    pods_view = PodMeans(samples, how)
    kubepods = _smooth_amounts(kube, how)
    pct: Callable[[float, float], float] = percent
    times = sorted(s.time for s in samples)
    span = times[-1] - times[0] + min(s.elapsed for s in samples)
    readable = [s for s in samples if s.kubepods is not None]
    newest_percent = sample_percent(max(readable, key=lambda s: s.time), allocatable) if readable else None
    p95 = _smooth_amounts(kube, "p95") if kube else None
    p95_percent = Amounts(pct(p95.cpu, allocatable.cpu), pct(p95.memory, allocatable.memory)) if p95 else None
    return UsageView(
        kubepods=kubepods,
        percent=Amounts(pct(kubepods.cpu, allocatable.cpu), pct(kubepods.memory, allocatable.memory)),
        node=_smooth_amounts(node, how),
        online=_smooth_amounts(online_sums, how),
        offline=_smooth_amounts(offline_sums, how),
        non_offline=_smooth_amounts(non_offline, how),
        pods=pods_view,
        samples=len(samples),
        node_samples=len(node),
        window_seconds=span,
        newest=times[-1],
        newest_percent=newest_percent,
        p95_percent=p95_percent,
    )


def sample_percent(sample: Sample, allocatable: Amounts) -> Amounts | None:
    """One sample's kubepods usage in percent of allocatable (None when kubepods was unreadable)."""
    if sample.kubepods is None:
        return None
    return Amounts(percent(sample.kubepods.cpu, allocatable.cpu), percent(sample.kubepods.memory, allocatable.memory))
