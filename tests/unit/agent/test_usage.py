"""Window smoothing: mean or p95, the samples so far until the window fills, online/offline split, U_non."""

from __future__ import annotations

import pytest

from agent.decide.usage import prune, sample_percent, smooth, summarize
from agent.model import Amounts
from tidemark.apis import PodUID

from .helpers import GiB, pod, sample


def test_smooth_mean_and_p95() -> None:
    assert smooth([], "mean") == 0.0
    assert smooth([1, 2, 3, 4], "mean") == 2.5
    values = list(range(1, 101))
    assert smooth(values, "p95") == 95
    assert smooth([5.0], "p95") == 5.0
    assert smooth([1, 100], "p95") == 100


def test_prune_keeps_the_window() -> None:
    samples = [sample(t, 0) for t in range(100)]
    kept = prune(samples, 60)
    assert [s.time for s in kept] == list(range(40, 100))
    assert prune(samples[:5], 60) == tuple(samples[:5])  # until it fills: the samples so far
    assert prune([], 60) == ()


def test_summarize_splits_online_offline_and_u_non() -> None:
    pods = [pod("on", level=0), pod("off", level=-1), pod("be", level=-7)]
    samples = [
        sample(
            1,
            1500,
            3 * GiB,
            node_cpu=2000,
            node_mem=5 * GiB,
            pods={"on": (1000, 2 * GiB), "off": (300, GiB), "be": (200, 0)},
        ),
        sample(2, 1700, 3 * GiB, node_cpu=2400, node_mem=5 * GiB, pods={"on": (1200, 2 * GiB), "off": (500, GiB)}),
    ]
    v = summarize(samples, pods, Amounts(4000, 16 * GiB), "mean")
    assert v.kubepods == Amounts(1600, 3 * GiB)
    assert v.percent.cpu == pytest.approx(40.0)
    assert v.percent.memory == pytest.approx(18.75)
    assert v.online == Amounts(1100, 2 * GiB)
    assert v.offline == Amounts(500, GiB)  # (300+200, 500) per sample, then the mean
    # U_non per sample: node - offline = (2000-500, 2400-500) -> mean 1700
    assert v.non_offline == Amounts(1700, 4 * GiB)
    assert v.pods[PodUID("be")] == Amounts(200, 0)  # smoothed over the samples that have it
    assert v.samples == 2 and v.window_seconds == pytest.approx(2.0) and v.newest == 2


def test_summarize_floor_and_missing_node() -> None:
    pods = [pod("off", level=-1)]
    s1 = sample(1, 100, 0, node_cpu=50, pods={"off": (100, 0)})
    v = summarize([s1], pods, Amounts(1000, 1000), "mean")
    assert v.non_offline.cpu == 0.0
    empty = summarize([], pods, Amounts(1000, 1000), "mean")
    assert empty.samples == 0 and empty.newest is None


def test_sample_percent() -> None:
    assert sample_percent(sample(1, 500, 50), Amounts(1000, 100)) == Amounts(50.0, 50.0)
    assert sample_percent(sample(1, 500, 50), Amounts(0, 0)) == Amounts(0.0, 0.0)
