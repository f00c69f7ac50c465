"""Volcano's per-pod CPU burst (`volcano.sh/enable-quota-burst`, `volcano.sh/quota-burst-time`): the parser, the
plan on v1 and v2 fake trees, the events for bad values, and the daemon putting the value back when the
annotation goes (real cgroups: tests/integration/agent/test_real_cgroups.py, tests/integration/cgroup_v2/)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.config import QosConfig
from agent.daemon.podcache import PodCache
from agent.model import ContainerView
from agent.sense.snapshot import pod_view
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import make_harness, pod_obj
from tests.unit.agent.helpers import pod
from tests.unit.agent.test_qos import plan
from tidemark.apis import ANN_ENABLE_QUOTA_BURST, ANN_QUOTA_BURST_TIME, parse_quota_burst

Tree = Callable[..., KubeletCgroupTree]
ON, TIME = ANN_ENABLE_QUOTA_BURST, ANN_QUOTA_BURST_TIME


@pytest.mark.parametrize(
    ("annotations", "value", "warns"),
    [
        (None, None, False),
        ({TIME: "5000"}, None, False),  # the time alone does nothing (Volcano's handler returns)
        ({ON: "true"}, 0, False),
        ({ON: "1", TIME: "200000"}, 200000, False),
        ({ON: " True ", TIME: " 7 "}, None, True),  # ParseBool takes no spaces: treated as false, with a warning
        ({ON: "false", TIME: "5"}, None, False),
        ({ON: "yes"}, None, True),
        ({ON: "t", TIME: "2ms"}, 0, True),
        ({ON: "T", TIME: "0"}, 0, True),
        ({ON: "TRUE", TIME: "-5"}, 0, True),
        ({ON: "true", TIME: "9" * 40}, 0, True),
    ],
)
def test_annotations_parse_as_volcano_reads_them(annotations: dict[str, str] | None, value: int | None,
                                                 warns: bool) -> None:  # fmt: skip
    parsed = parse_quota_burst(annotations)
    assert parsed.value == value and bool(parsed.warning) == warns


def burst_pod(tree: KubeletCgroupTree, annotations: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    tree.add_pod("on", "Guaranteed", {"a": "containerd://a", "b": "containerd://b"}, cpu_request_milli=3000,
                 cpu_limit_milli=3000)  # fmt: skip
    dirs = tree.pods["on"].dirs
    tree.write(dirs.child("a"), "cpu.cfs_quota_us" if dirs.version == "v1" else "cpu.max",
               "200000" if dirs.version == "v1" else "200000 100000")  # fmt: skip
    tree.write(dirs.child("b"), "cpu.cfs_quota_us" if dirs.version == "v1" else "cpu.max",
               "100000" if dirs.version == "v1" else "100000 100000")  # fmt: skip
    parsed = parse_quota_burst(annotations)
    return pod("on", qos="Guaranteed", cpu=3000, cpu_limit=3000,
               containers=(ContainerView("a", "containerd://a"), ContainerView("b", "containerd://b")),
               quota_burst=parsed.value)  # fmt: skip


def bursts(tree: KubeletCgroupTree, writes) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {os.path.basename(w.path): w.value for w in writes if w.file in ("cpu.cfs_burst_us", "cpu.max.burst")}


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_each_container_gets_min_of_time_and_quota_and_the_pod_the_sum(kubelet_cgroup_tree: Tree, version: str) -> None:
    tree = kubelet_cgroup_tree(version)
    p = burst_pod(tree, {ON: "true", TIME: "150000"})
    writes, _, _ = plan(tree, [p])
    assert bursts(tree, writes) == {"a": "150000", "b": "100000", "podon": "250000"}
    file = "cpu.cfs_burst_us" if version == "v1" else "cpu.max.burst"
    assert {w.file for w in writes} == {file}
    assert all("volcano.sh/quota-burst-time: 150000 us" in w.reason for w in writes)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_no_time_or_a_bad_one_bursts_each_quota(kubelet_cgroup_tree: Tree, version: str) -> None:
    tree = kubelet_cgroup_tree(version)
    p = burst_pod(tree, {ON: "true", TIME: "lots"})
    writes, _, _ = plan(tree, [p])
    assert bursts(tree, writes) == {"a": "200000", "b": "100000", "podon": "300000"}


def test_the_annotation_wins_over_the_node_switch_and_needs_no_switch(kubelet_cgroup_tree: Tree) -> None:
    tree = kubelet_cgroup_tree("v1")
    p = burst_pod(tree, {ON: "true", TIME: "10000"})
    for cfg in (QosConfig(), QosConfig(cpu_burst=True, cpu_burst_percent=50)):
        assert bursts(tree, plan(tree, [p], cfg=cfg)[0]) == {"a": "10000", "b": "10000", "podon": "20000"}


def test_containers_without_a_quota_are_skipped(kubelet_cgroup_tree: Tree) -> None:
    tree = kubelet_cgroup_tree("v1")
    tree.add_pod("web", "Burstable", {"c": "containerd://c"}, cpu_request_milli=500)  # no limit: quota -1
    p = pod("web", cpu=500, containers=(ContainerView("c", "containerd://c"),), quota_burst=50000)
    assert bursts(tree, plan(tree, [p])[0]) == {}


def test_offline_pods_never_burst(kubelet_cgroup_tree: Tree) -> None:
    tree = kubelet_cgroup_tree("v1")
    tree.add_pod("job", "Guaranteed", {"c": "containerd://c"}, cpu_request_milli=1000, cpu_limit_milli=1000)
    p = pod("job", level=-1, qos="Guaranteed", cpu=1000, cpu_limit=1000,
            containers=(ContainerView("c", "containerd://c"),), quota_burst=0)  # fmt: skip
    writes, _, notes = plan(tree, [p])
    assert bursts(tree, writes) == {}
    assert any("is offline" in n and "ignored" in n for n in notes)


def test_applied_values_are_not_planned_again(kubelet_cgroup_tree: Tree) -> None:
    tree = kubelet_cgroup_tree("v2")
    p = burst_pod(tree, {ON: "true"})
    for w in plan(tree, [p])[0]:
        Path(w.path, w.file).write_text(w.value)
    assert plan(tree, [p])[0] == ()


def obj(annotations: dict[str, str], rv: int = 1) -> dict:  # type: ignore[type-arg]
    o = pod_obj("u1", "web", qos_class="Guaranteed", rv=rv)
    o["metadata"]["annotations"] = annotations
    return o


def test_a_bad_value_is_a_warning_and_one_event_per_value() -> None:
    view, warnings = pod_view(obj({ON: "true", TIME: "fast"}), 0.0)
    assert view.quota_burst == 0 and any("quota-burst-time='fast'" in w for w in warnings)
    cache = PodCache()
    first = cache.update([obj({ON: "true", TIME: "fast"})], 0.0)
    assert [n.reason for n in first.notices] == ["InvalidQuotaBurst"]
    assert "each container's CFS quota is used" in first.notices[0].message
    again = cache.update([obj({ON: "true", TIME: "fast"}, rv=2)], 1.0)
    assert again.notices == ()
    other = cache.update([obj({ON: "maybe"}, rv=3)], 2.0)
    assert [n.reason for n in other.notices] == ["InvalidQuotaBurst"] and "treated as false" in other.notices[0].message


def test_the_daemon_writes_journals_and_puts_back_when_the_annotation_goes(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    cid = "containerd://" + "c" * 64
    tree.add_pod("u-web", "Guaranteed", {"c": cid}, cpu_request_milli=1000, cpu_limit_milli=1000)
    web = pod_obj("u-web", "web", qos_class="Guaranteed", requests={"cpu": "1"}, containers={"c": cid})
    web["metadata"]["annotations"] = {ON: "true", TIME: "40000"}
    h = make_harness(tree, tmp_path, pods=[web])
    h.tick(2)
    d, c = tree.pods["u-web"].dirs, tree.pods["u-web"].containers["c"]
    assert tree.read(d, "cpu.cfs_burst_us") == "40000" and tree.read(c, "cpu.cfs_burst_us") == "40000"
    assert h.state is not None
    journaled = {(os.path.basename(e.path), e.file): (e.original, e.written) for e in h.state.journal.knobs.values()}
    assert journaled[(os.path.basename(c.cpu), "cpu.cfs_burst_us")] == ("0", "40000")
    gone = dict(web, metadata={**web["metadata"], "annotations": {}, "resourceVersion": "2"})
    h.cluster.put_pod(gone)
    h.tick(12)  # the next full reconcile puts the originals back
    assert tree.read(d, "cpu.cfs_burst_us") == "0" and tree.read(c, "cpu.cfs_burst_us") == "0"
    assert "QosRestored" in h.events.reasons()
