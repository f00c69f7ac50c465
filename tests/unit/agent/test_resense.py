"""The re-sense schedule of pods a pod event found waiting for their cgroups (agent.decide.resense), and the
agent doing it: a new offline pod's knobs follow its cgroup within a retry, not a QoS reconcile.

Fake clock and a fake kubelet tree (tests/fixtures/cgroups.py); no sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.decide import resense
from agent.decide.resense import Retry, RetryPolicy
from agent.model import CgroupDirs, ContainerView, PodCgroups, PodView
from agent.sense.snapshot import resolve_pod_cgroups
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, pod_obj
from tidemark.apis import PodUID

Tree = Callable[..., KubeletCgroupTree]
U = PodUID("u1")
P = RetryPolicy(first=0.1, most=2.0, give_up=30.0)
DIRS = CgroupDirs("/c/pod", "/a/pod", "/m/pod", "v1")


def view(*containers: ContainerView, deletion: float | None = None) -> PodView:
    return PodView(U, "ns", "p", -1, "BestEffort", deletion=deletion, containers=containers)


# --- waiting -------------------------------------------------------------------------------------------


def test_waiting_until_the_pod_and_every_container_cgroup_is_found() -> None:
    c = ContainerView("main", "containerd://abc")
    assert resense.waiting(view(c), None)  # no pod cgroup yet
    assert resense.waiting(view(ContainerView("main", None)), PodCgroups(DIRS))  # the API names no container yet
    assert resense.waiting(view(c), PodCgroups(DIRS))  # named, its cgroup not there yet
    assert not resense.waiting(view(c), PodCgroups(DIRS, {"main": DIRS.child("abc")}))
    assert not resense.waiting(view(), PodCgroups(DIRS))
    assert not resense.waiting(view(c, deletion=5.0), None)  # terminating pods are never chased


# --- the schedule --------------------------------------------------------------------------------------


def test_an_event_that_finds_a_pod_waiting_starts_the_backoff_and_it_doubles_to_the_cap() -> None:
    r = resense.reschedule({}, {U: True}, {U}, 100.0, P)
    assert r == {U: Retry(100.0, 100.1, 0.1)}
    assert resense.due(r, 100.05) == frozenset() and resense.due(r, 100.1) == {U}
    assert resense.next_due(r) == 100.1
    times, now = [], 100.1
    while U in r and now < 200:
        times.append(round(r[U].delay, 3))
        r = resense.reschedule(r, {U: True}, (), now, P)
        if U in r:
            now = r[U].due
    assert times[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert all(t == 2.0 for t in times[5:])
    assert U not in r and now <= 100.0 + P.give_up  # gave up within `give_up` of the event


def test_a_pod_found_complete_leaves_and_a_new_event_starts_over() -> None:
    r = {U: Retry(100.0, 101.5, 0.8)}
    assert resense.reschedule(r, {U: False}, (), 101.5, P) == {}
    assert resense.reschedule(r, {U: True}, {U}, 101.0, P) == {U: Retry(101.0, 101.1, 0.1)}


def test_a_pod_cgroup_kubelet_is_still_making_is_looked_at_every_first_delay_until_give_up() -> None:
    r = resense.reschedule({}, {U: True}, [U], 0.0, P)
    looks = 0
    while U in r:
        now = r[U].due
        r = resense.reschedule(r, {U: True}, [], now, P, soon={U})
        looks += 1
        assert U not in r or r[U] == Retry(0.0, now + 0.1, 0.1)
    assert looks in (299, 300) and now == pytest.approx(30.0, abs=0.11)  # gave up 30 s after its event
    # once the sandbox is there the doubling goes on from `first`
    r = resense.reschedule(resense.reschedule({}, {U: True}, [U], 0.0, P), {U: True}, [], 0.1, P, soon={U})
    assert resense.reschedule(r, {U: True}, [], 0.2, P)[U].delay == 0.2


def test_a_retry_not_due_keeps_its_time_and_a_reconcile_adds_nothing() -> None:
    r = {U: Retry(100.0, 101.5, 0.8)}
    assert resense.reschedule(r, {U: True}, (), 101.0, P) == r  # read early (a reconcile): same schedule
    other = PodUID("u2")
    assert resense.reschedule(r, {other: True}, (), 101.0, P) == r  # waiting without an event: the reconcile's
    assert resense.forget(r, [U]) == {} and resense.next_due({}) is None


# --- the agent ------------------------------------------------------------------------------------------

LONG_RECONCILE = "qos:\n  reconcile: 120s\n"


def pending(uid: str, name: str, *, rv: int, started: bool) -> dict[str, Any]:
    """An offline batch pod as kubelet reports it: Pending without container ids, then Running with them."""
    pod = pod_obj(uid, name, qos="-1", requests={"kubernetes.io/batch-cpu": "100"}, rv=rv)
    c = pod["spec"]["containers"][0]
    c["resources"]["limits"] = {"kubernetes.io/batch-cpu": "100"}
    if not started:
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort", "containerStatuses": [{"name": "c"}]}
    return pod


def cid(pod: dict[str, Any]) -> str:
    return str(pod["status"]["containerStatuses"][0]["containerID"])


def qos_latencies(h: Harness) -> tuple[float, float]:
    """(count, sum) of tidemark_agent_reaction_latency_seconds{action="qos"}."""
    hist = h.agent.stats.reaction.get("qos")
    if hist is None:
        return 0.0, 0.0
    buckets, total = hist.snapshot()
    return buckets[-1][1], total


def started(tree: Tree, tmp_path: Path, version: str = "v1") -> Harness:
    h = make_harness(tree(version), tmp_path, config_text=LONG_RECONCILE)
    h.tick(3)  # samples, a first decision and the first reconcile are behind us
    return h


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_pod_knobs_follow_the_pod_cgroup_within_a_retry_not_the_reconcile(
    kubelet_cgroup_tree: Tree, tmp_path: Path, version: str
) -> None:
    h = started(kubelet_cgroup_tree, tmp_path, version)
    quota, want_quota = ("cpu.cfs_quota_us", "10000") if version == "v1" else ("cpu.max", "10000 100000")
    unlimited = "-1" if version == "v1" else "max 100000"
    shares, want_shares = ("cpu.shares", "102") if version == "v1" else ("cpu.weight", "4")
    h.tick(1, seconds=0.5)  # between two samples: the metric below cannot count from a sample by chance
    running = pending("u-new", "new", rv=2, started=True)
    h.cluster.put_pod(pending("u-new", "new", rv=1, started=False))  # kubelet's first status: no cgroup yet
    h.tick(1, seconds=0.01)
    assert PodUID("u-new") in h.agent.cycle.retries
    # kubelet creates the pod cgroup, runc the container's
    fake = h.tree.add_pod("u-new", "BestEffort", {"c": cid(running)})
    assert h.agent.cycle.delay() < 0.11  # the main loop wakes for the retry (the next sample is 1 s away)
    reads = h.agent.sensor.reads
    before = qos_latencies(h)
    h.tick(1, seconds=0.1)
    assert h.tree.read(fake.dirs, "cpu.idle") == "1"  # before any new pod event; the reconcile is 120 s away
    assert h.tree.read(fake.dirs, quota) == want_quota  # the pod quota = the sum of the batch-cpu limits
    assert h.agent.sensor.reads > reads and h.agent.stats.qos_resenses == 1
    after = qos_latencies(h)  # the reaction metric counts from the pod event (0.01 + 0.1 s before)
    assert after[0] == before[0] + 1 and abs(after[1] - before[1] - 0.11) < 1e-6
    # the container is not named by the API yet: still waiting, looked at again later, its own knobs wait
    assert PodUID("u-new") in h.agent.cycle.retries
    assert h.tree.read(fake.containers["c"], quota) == unlimited
    h.cluster.put_pod(running)  # kubelet's Running (PLEG): the container knobs follow this event
    h.tick(1, seconds=0.01)
    assert h.tree.read(fake.containers["c"], quota) == want_quota
    assert h.tree.read(fake.containers["c"], shares) == want_shares
    assert PodUID("u-new") not in h.agent.cycle.retries  # complete: no more retries


def test_a_pod_that_never_gets_a_cgroup_is_given_up_and_idle_pods_cost_no_retries(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = started(kubelet_cgroup_tree, tmp_path)
    assert h.agent.cycle.retries == {}  # nothing waiting: no re-sense on a quiet node
    h.cluster.put_pod(pending("u-ghost", "ghost", rv=1, started=False))
    h.tick(1, seconds=0.01)
    assert PodUID("u-ghost") in h.agent.cycle.retries
    h.tick(28, seconds=1.0)
    assert PodUID("u-ghost") in h.agent.cycle.retries
    h.tick(4, seconds=1.0)
    assert h.agent.cycle.retries == {}  # gave up 30 s after the event; its next event or the reconcile finds it
    # a deleted pod leaves the schedule at once
    h.cluster.put_pod(pending("u-gone", "gone", rv=1, started=False))
    h.tick(1, seconds=0.01)
    assert PodUID("u-gone") in h.agent.cycle.retries
    h.cluster.delete_pod("default", "gone")
    h.tick(1, seconds=0.01)
    assert PodUID("u-gone") not in h.agent.cycle.retries


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_pod_knobs_wait_for_kubelet_to_finish_the_pod_cgroup_its_sandbox_child(
    kubelet_cgroup_tree: Tree, tmp_path: Path, version: str
) -> None:
    """kubelet mkdirs the pod cgroup, writes its values, then has the sandbox made inside it: an agent
    `cpu.idle=1` in between fails kubelet's `cpu.shares` write (EINVAL) and drops the values after it."""
    h = started(kubelet_cgroup_tree, tmp_path, version)
    quota = "cpu.cfs_quota_us" if version == "v1" else "cpu.max"
    h.cluster.put_pod(pending("u-new", "new", rv=1, started=False))
    h.tick(1, seconds=0.01)
    fake = h.tree.add_pod("u-new", "BestEffort", sandbox=False)  # kubelet's mkdir, its writes under way
    kubelets = h.tree.read(fake.dirs, quota)
    for _ in range(3):  # the retries find the pod cgroup and leave it alone, looking again every 0.1 s
        h.tick(1, seconds=0.1)
        assert h.tree.read(fake.dirs, "cpu.idle") == "0"
        assert h.tree.read(fake.dirs, quota) == kubelets
        assert PodUID("u-new") in h.agent.cycle.retries
    assert h.agent.stats.qos_resenses == 3
    for path in fake.dirs.child("sandbox").distinct():  # the runtime makes the sandbox's cgroup
        os.makedirs(path, exist_ok=True)
    assert h.agent.cycle.retries[PodUID("u-new")].delay == 0.1  # not doubled: the sandbox comes within a second
    h.tick(1, seconds=0.1)  # the next retry, no new pod event (the reconcile is 120 s away)
    assert h.tree.read(fake.dirs, "cpu.idle") == "1"
    assert h.tree.read(fake.dirs, quota) == ("10000" if version == "v1" else "10000 100000")


@pytest.mark.parametrize(("version", "driver"), [("v1", "cgroupfs"), ("v1", "systemd"), ("v2", "systemd")])
def test_a_pod_cgroup_counts_once_it_holds_a_directory(kubelet_cgroup_tree: Tree, version: str, driver: str) -> None:
    tree = kubelet_cgroup_tree(version, driver=driver)
    fake = tree.add_pod("u1", "Burstable", cpu_request_milli=100, sandbox=False)
    pod = PodView(U, "ns", "p", -1, "Burstable")
    assert resolve_pod_cgroups(tree.layout, [pod]) == {}  # kubelet may still be writing it
    assert resense.waiting(pod, resolve_pod_cgroups(tree.layout, [pod]).get(pod.uid))
    with open(os.path.join(fake.dirs.cpu, "cpu.stat.tmp"), "w"):  # a file is not a child cgroup
        pass
    assert resolve_pod_cgroups(tree.layout, [pod]) == {}
    os.makedirs(os.path.join(fake.dirs.cpu, tree.layout.container_names("containerd://abc")[0]))
    found = resolve_pod_cgroups(tree.layout, [pod])
    assert found == {pod.uid: PodCgroups(fake.dirs)}
    assert not resense.waiting(pod, found[pod.uid])
