"""Capacity that holds still (issue 32 item 6): a steady online load and a busy offline pod that finishes and is
replaced. The finished pod's usage stayed in the window's samples, and with it gone from the pod list it counted
as U_non, so B fell by the pod's whole usage each time one finished (1600m -> 100m here), then climbed back."""

from __future__ import annotations

import pytest

from agent.config import CapacityConfig
from agent.config_profile import HOUR, ProfileConfig
from agent.decide import profile as pf
from agent.decide.capacity import compute_terms
from agent.decide.usage import prune, summarize
from agent.model import Amounts, ProfileState, Sample

from .helpers import GiB, node, pod, sample

CPU = 4000.0
ONLINE, SYSTEM, JOB = 1000.0, 200.0, 1500.0
JOB_SECONDS = 60
T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400.0)


def _second(t: int) -> Sample:
    """Second t: the online pod at 1000m, the system at 200m, the running offline job at 1500m."""
    job = f"job-{t // JOB_SECONDS}"
    return sample(T0 + t, ONLINE + JOB, 4 * GiB, node_cpu=ONLINE + SYSTEM + JOB, node_mem=5 * GiB,
                  pods={"web": (ONLINE, 2 * GiB), job: (JOB, 2 * GiB)})  # fmt: skip


def _pods_at(t: int) -> list:  # type: ignore[type-arg]
    """The pod list at second t: the finished jobs are gone from it, their samples are still in the window."""
    return [pod("web", cpu=2000, created=T0 - 86400), pod(f"job-{t // JOB_SECONDS}", level=-1, created=T0 + t)]


def test_b_holds_still_while_offline_pods_come_and_go() -> None:
    n = node(cpu=CPU, mem=16 * GiB)
    samples: list[Sample] = []
    bs: list[int] = []
    for t in range(600):  # ten minutes, a capacity computation every 10 s
        samples.append(_second(t))
        if t >= 60 and t % 10 == 9:
            window = prune(samples, 60.0)
            pods = _pods_at(t)
            view = summarize(window, pods, n.allocatable, "mean")
            bs.append(compute_terms(n, pods, view.non_offline, CapacityConfig())["cpu"].B)
    expected = int(CPU * 0.70 - ONLINE - SYSTEM)  # 1600m: offline usage never shrinks B
    assert min(bs) == max(bs) == expected, f"B swung between {min(bs)}m and {max(bs)}m"


def test_the_profile_does_not_learn_a_finished_offline_pod_as_online_usage() -> None:
    """The fold runs once a minute: the pods of its samples that finished meanwhile are not U_non."""
    start = int(5 * HOUR)
    samples = [_second(start + i) for i in range(60)]
    later_pods = _pods_at(start + 60)  # job of that minute has finished when the fold runs
    state = pf.fold(ProfileState(), samples, later_pods, ProfileConfig(), T0 + start + 60)
    slot = state.node.cpu[5]
    assert ONLINE + SYSTEM <= pf.percentile(slot, "cpu", 0.95) <= (ONLINE + SYSTEM) * 1.1  # a bucket's end


def test_usage_of_pods_gone_since_is_not_online() -> None:
    pods = [pod("web")]
    s = sample(1, 2500, 0, node_cpu=2700, pods={"web": (1000, 0), "gone": (1500, 0)})
    v = summarize([s], pods, Amounts(CPU, 16 * GiB), "mean")
    assert v.non_offline.cpu == pytest.approx(1200)
    assert v.online.cpu == pytest.approx(1000)
