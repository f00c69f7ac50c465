"""The QoS plan on fake kubelet trees (v1/v2, cgroupfs/systemd): exact writes, only real changes, safe order."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pytest

from agent.cgroups.fs import FileReader
from agent.config import QosConfig
from agent.decide.ops import SetCgroupValue, SetProcessValue
from agent.decide.qos import QosInputs, milli_to_shares, plan_qos, quota_us, same_value, shares_to_weight
from agent.decide.tier import CpuCeiling, TierCpu
from agent.model import ContainerView, PodView
from agent.sense.procfs import ProcFS
from agent.sense.snapshot import resolve_pod_cgroups, sense_cgroups
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tidemark.apis import PodUID

from .helpers import pod

Tree = Callable[..., KubeletCgroupTree]
INPUTS = QosInputs()


def tier(pods: dict[str, float], root: float | None = None) -> QosInputs:
    """A tier decision whose split is `pods` (uid -> milli) and `root` on the BestEffort root."""
    total = sum(pods.values()) + (root or 0.0)
    return QosInputs(TierCpu(CpuCeiling(total, total, "bound", "test"), root, {PodUID(k): v for k, v in pods.items()}))


def plan(
    tree: KubeletCgroupTree, pods: Sequence[PodView], inputs: QosInputs = INPUTS, cfg: QosConfig | None = None
) -> tuple[tuple[SetCgroupValue, ...], tuple[SetProcessValue, ...], tuple[str, ...]]:
    reader = FileReader()
    cgroups = resolve_pod_cgroups(tree.layout, pods)
    state = sense_cgroups(tree.layout, pods, cgroups, reader, ProcFS(tree.proc_root, reader))
    return plan_qos(pods, state, inputs, cfg or QosConfig())


def apply(writes: Sequence[SetCgroupValue]) -> None:
    for w in writes:
        with open(os.path.join(w.path, w.file), "w") as f:
            f.write(w.value)


def short(tree: KubeletCgroupTree, writes: Sequence[SetCgroupValue]) -> list[tuple[str, str, str]]:
    return [(os.path.relpath(w.path, tree.cgroup_root), w.file, w.value) for w in writes]


def test_kubelet_conversions() -> None:
    assert milli_to_shares(0) == 2 and milli_to_shares(1) == 2 and milli_to_shares(1000) == 1024
    assert milli_to_shares(10**9) == 262144
    assert shares_to_weight(2) == 1 and shares_to_weight(1024) == 39 and shares_to_weight(262144) == 10000
    assert quota_us(20, 100_000) == 2000 and quota_us(5, 100_000) == 1000 and quota_us(1500, 50_000) == 75000
    assert same_value("  100000 \n", "100000") and same_value("050", "50") and not same_value(None, "1")
    assert same_value("max 100000", "max  100000") and not same_value("max 100000", "5000 100000")


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_besteffort_offline_gets_cpu_idle_only(tree_factory: Tree, version: str, driver: str) -> None:
    tree = tree_factory(version, driver)
    tree.add_pod("off", "BestEffort", {"job": "containerd://j1"})
    writes, procs, _ = plan(
        tree, [pod("off", level=-1, qos="BestEffort", containers=(ContainerView("job", "containerd://j1"),))]
    )
    assert [(w.path, w.file, w.value) for w in writes] == [(tree.pods["off"].dirs.cpu, "cpu.idle", "1")]
    assert procs == ()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_without_cpu_idle_minimal_shares_or_weight(tree_factory: Tree, version: str) -> None:
    tree = tree_factory(version, cpu_idle=False)
    tree.add_pod("be", "BestEffort")
    tree.add_pod("bu", "Burstable", cpu_request_milli=500)
    writes, _, _ = plan(tree, [pod("be", level=-1, qos="BestEffort"), pod("bu", level=-1, cpu=500)], INPUTS)
    knob = ("cpu.shares", "2") if version == "v1" else ("cpu.weight", "1")
    assert (tree.pods["bu"].dirs.cpu, *knob) in [(w.path, w.file, w.value) for w in writes]
    # BestEffort already has kubelet's shares=2 (weight 1): nothing to write
    assert not any(w.path == tree.pods["be"].dirs.cpu and w.file in ("cpu.shares", "cpu.weight") for w in writes)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_offline_pods_outside_the_root_get_their_tier_share(tree_factory: Tree, version: str) -> None:
    tree = tree_factory(version)
    tree.add_pod("a", "Burstable", cpu_request_milli=300)
    tree.add_pod("b", "Burstable", cpu_request_milli=100)
    tree.add_pod("g", "Guaranteed", cpu_request_milli=100, cpu_limit_milli=100)
    tree.add_pod("on", "Burstable", cpu_request_milli=2000)
    pods = [
        pod("a", level=-1, cpu=300),
        pod("b", level=-2, cpu=100),
        pod("g", level=-1, qos="Guaranteed", cpu=100, cpu_limit=100),
        pod("on", cpu=2000),
    ]
    writes, _, notes = plan(tree, pods, tier({"a": 1080, "b": 360, "g": 100}))
    quota = {(os.path.basename(w.path), w.file): w.value for w in writes if w.file in ("cpu.cfs_quota_us", "cpu.max")}
    if version == "v1":
        assert quota == {("poda", "cpu.cfs_quota_us"): "108000", ("podb", "cpu.cfs_quota_us"): "36000"}
    else:
        assert quota == {("poda", "cpu.max"): "108000 100000", ("podb", "cpu.max"): "36000 100000"}
    # g already holds its kubelet quota of 100m = what it would get: no write
    assert not any(os.path.basename(w.path) == "podon" for w in writes)
    assert any("share the tier's ceiling 1540m" in n for n in notes)
    # without a tier decision (tier.enabled false) no quota is wanted: the static A x ratio - U_non rule is gone
    assert not any(w.file in ("cpu.cfs_quota_us", "cpu.max") for w in plan(tree, pods)[0])


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_the_besteffort_root_gets_the_tier_quota_and_caps_its_children(
    tree_factory: Tree, version: str, driver: str
) -> None:
    tree = tree_factory(version, driver)
    tree.add_pod("bt", "BestEffort", {"a": "containerd://ca"})
    containers = (ContainerView("a", "containerd://ca", batch_cpu_request=1000, batch_cpu_limit=2000),)
    p = pod("bt", level=-1, qos="BestEffort", bcpu=1000, containers=containers)
    writes, _, _ = plan(tree, [p], tier({}, root=500))
    root = tree.layout.qos("BestEffort").cpu
    file = "cpu.cfs_quota_us" if version == "v1" else "cpu.max"
    value = "50000" if version == "v1" else "50000 100000"
    quotas = [(w.path, w.value) for w in writes if w.file == file]
    # the root gets 500m; the pod and its container (batch-cpu limit 2000m) at most that (v1 refuses a parent's quota
    # under a child's), and tightening goes child first so the root comes last
    cdir = tree.pods["bt"].containers["a"].cpu
    assert quotas == [(cdir, value), (tree.pods["bt"].dirs.cpu, value), (root, value)]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_root_quota_left_by_an_earlier_period_goes_back_before_the_pods_in_it_get_theirs(
    tree_factory: Tree, version: str
) -> None:
    # an online pod now sits in the BestEffort root: no root quota this period, the offline pod in it gets a share;
    # the root still holds the 20m an earlier period wrote, under the share (v1: EINVAL on the pod's write until the
    # journal released the root, the whole suite's test_faults)
    tree = tree_factory(version)
    tree.add_pod("be", "BestEffort")
    tree.add_pod("on", "BestEffort")
    root = tree.layout.qos("BestEffort")
    tree.write(root, "cpu.cfs_quota_us" if version == "v1" else "cpu.max", "2000" if version == "v1" else "2000 100000")
    pods = [pod("be", level=-1, qos="BestEffort"), pod("on", qos="BestEffort")]
    writes, _, _ = plan(tree, pods, tier({"be": 268}))
    file = "cpu.cfs_quota_us" if version == "v1" else "cpu.max"
    quotas = [(w.path, w.value) for w in writes if w.file == file]
    unlimited = "-1" if version == "v1" else "max 100000"
    share = "26800" if version == "v1" else "26800 100000"
    assert quotas == [(root.cpu, unlimited), (tree.pods["be"].dirs.cpu, share)]
    apply(writes)
    assert not any(w.file == file for w in plan(tree, pods, tier({"be": 268}))[0])
    # without a tier decision at all the root is left to the journal (no want)
    tree.write(root, file, "2000" if version == "v1" else "2000 100000")
    assert not any(w.path == root.cpu for w in plan(tree, pods)[0])


def test_batch_order_loosens_an_ancestor_first_and_keeps_the_declared_order_otherwise() -> None:
    from agent.knobs import batch_order

    def key(w: tuple[str, str, str, str | None]) -> tuple[str, str, str, str | None]:
        return w

    root, child, other = "/cg/kubepods/besteffort", "/cg/kubepods/besteffort/pod1", "/cg/kubepods/burstable/pod2"
    writes = [(child, "cpu.cfs_quota_us", "26800", "-1"), (root, "cpu.cfs_quota_us", "-1", "2000"),
              (other, "cpu.cfs_quota_us", "5000", "1000")]  # fmt: skip
    assert batch_order(writes, key) == [writes[1], writes[0], writes[2]]
    # no descendant written: the declared order (tightening first, deepest first; loosening after)
    plain = [(other, "cpu.cfs_quota_us", "5000", "1000"), (child, "cpu.cfs_quota_us", "100", "200"),
             (root, "cpu.cfs_quota_us", "150", "300")]  # fmt: skip
    assert batch_order(plain, key) == [plain[1], plain[2], plain[0]]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_container_quota_never_passes_its_pods_tier_share(tree_factory: Tree, version: str) -> None:
    # a Burstable offline pod outside the root with a batch-cpu limit of 100m and a tier share of 50m: the container
    # gets 50m too (v1 refuses the pod's 50m under a container's 100m, EINVAL every period: make run's jobs)
    tree = tree_factory(version)
    tree.add_pod("bj", "Burstable", {"a": "containerd://ca"}, cpu_request_milli=50)
    containers = (ContainerView("a", "containerd://ca", batch_cpu_request=50, batch_cpu_limit=100),)
    p = pod("bj", level=-1, cpu=50, containers=containers)
    writes, _, _ = plan(tree, [p], tier({"bj": 50}))
    file = "cpu.cfs_quota_us" if version == "v1" else "cpu.max"
    value = "5000" if version == "v1" else "5000 100000"
    quotas = {(w.path, w.value) for w in writes if w.file == file}
    assert quotas == {(tree.pods["bj"].containers["a"].cpu, value), (tree.pods["bj"].dirs.cpu, value)}
    # a share above the limit leaves the container at its limit and the pod at the sum of the limits
    writes, _, _ = plan(tree, [p], tier({"bj": 300}))
    value = "10000" if version == "v1" else "10000 100000"
    assert {(w.path, w.value) for w in writes if w.file == file} == {
        (tree.pods["bj"].containers["a"].cpu, value), (tree.pods["bj"].dirs.cpu, value)
    }


def test_quota_uses_the_period_in_the_file_and_minimum(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    tree.add_pod("a", "Burstable", cpu_request_milli=100)
    tree.write(tree.pods["a"].dirs, "cpu.cfs_period_us", 50000)
    starving = tier({"a": 20})
    writes, _, _ = plan(tree, [pod("a", level=-1, cpu=100)], starving)
    assert ("cpu.cfs_quota_us", "1000") in [(w.file, w.value) for w in writes]  # 20m of a 50 ms period = 1 ms
    v2 = tree_factory("v2")
    v2.add_pod("a", "Burstable", cpu_request_milli=100)
    v2.write(v2.pods["a"].dirs, "cpu.max", "max 20000")
    writes, _, _ = plan(v2, [pod("a", level=-1, cpu=100)], tier({"a": 50}))
    assert ("cpu.max", "1000 20000") in [(w.file, w.value) for w in writes]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_batch_pod_container_and_pod_limits(tree_factory: Tree, version: str, driver: str) -> None:
    tree = tree_factory(version, driver)
    tree.add_pod("bt", "BestEffort", {"a": "containerd://ca", "b": "containerd://cb"})
    containers = (
        ContainerView("a", "containerd://ca", batch_cpu_request=1000, batch_cpu_limit=2000, batch_memory_limit=GiB),
        ContainerView("b", "containerd://cb", batch_cpu_request=500, batch_cpu_limit=500, batch_memory_limit=GiB // 2),
    )
    p = pod("bt", level=-1, qos="BestEffort", bcpu=1500, bmem=GiB, containers=containers)
    writes, _, _ = plan(tree, [p])
    cname = "ca" if driver == "cgroupfs" else "cri-containerd-ca.scope"
    pdir = tree.pods["bt"].dirs
    got = {(w.path, w.file): w.value for w in writes}
    if version == "v1":
        assert got[(f"{pdir.cpu}/{cname}", "cpu.shares")] == "1024"
        assert got[(f"{pdir.cpu}/{cname}", "cpu.cfs_quota_us")] == "200000"
        assert got[(f"{pdir.memory}/{cname}", "memory.limit_in_bytes")] == str(GiB)
        assert got[(pdir.cpu, "cpu.cfs_quota_us")] == "250000"
        assert got[(pdir.memory, "memory.limit_in_bytes")] == str(GiB + GiB // 2)
    else:
        assert got[(f"{pdir.cpu}/{cname}", "cpu.weight")] == "39"
        assert got[(f"{pdir.cpu}/{cname}", "cpu.max")] == "200000 100000"
        assert got[(f"{pdir.memory}/{cname}", "memory.max")] == str(GiB)
        assert got[(pdir.cpu, "cpu.max")] == "250000 100000"
        assert got[(pdir.memory, "memory.max")] == str(GiB + GiB // 2)
    assert got[(pdir.cpu, "cpu.idle")] == "1"
    # order: weights, then quotas (tightening: containers before the pod), then idle, then memory
    files = [w.file for w in writes]
    assert files.index("cpu.idle") > max(i for i, f in enumerate(files) if f in ("cpu.shares", "cpu.weight"))
    quota_paths = [w.path for w in writes if w.file in ("cpu.cfs_quota_us", "cpu.max")]
    assert quota_paths[-1] == pdir.cpu
    mem_paths = [w.path for w in writes if w.file in ("memory.limit_in_bytes", "memory.max")]
    assert mem_paths[-1] == pdir.memory
    # applying the plan leaves nothing to do
    apply(writes)
    assert plan(tree, [p])[0] == ()


def test_batch_pod_without_all_limits_has_no_pod_limit(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    tree.add_pod("bt", "BestEffort", {"a": "containerd://ca", "b": "containerd://cb"})
    containers = (
        ContainerView("a", "containerd://ca", batch_cpu_request=1000, batch_cpu_limit=2000),
        ContainerView("b", "containerd://cb", batch_cpu_request=500),
    )
    writes, _, _ = plan(tree, [pod("bt", level=-1, qos="BestEffort", bcpu=1500, containers=containers)])
    pdir = tree.pods["bt"].dirs
    assert not any(w.path == pdir.cpu and w.file == "cpu.cfs_quota_us" for w in writes)
    assert not any(w.file == "memory.limit_in_bytes" for w in writes)


def test_batch_container_not_started_yet(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    tree.add_pod("bt", "BestEffort")
    containers = (ContainerView("a", None, batch_cpu_request=1000, batch_cpu_limit=2000),)
    writes, _, notes = plan(tree, [pod("bt", level=-1, qos="BestEffort", bcpu=1000, containers=containers)])
    assert any("has no cgroup yet" in n for n in notes)
    assert ("cpu.cfs_quota_us", "200000") in [(w.file, w.value) for w in writes]  # the pod level still gets the sum


def test_loosening_goes_parent_first(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    tree.add_pod("bt", "BestEffort", {"a": "containerd://ca"})
    containers = (ContainerView("a", "containerd://ca", batch_cpu_request=1000, batch_cpu_limit=3000),)
    cdir = tree.pods["bt"].containers["a"]
    tree.write(tree.pods["bt"].dirs, "cpu.cfs_quota_us", 100000)
    tree.write(cdir, "cpu.cfs_quota_us", 100000)
    writes, _, _ = plan(tree, [pod("bt", level=-1, qos="BestEffort", bcpu=1000, containers=containers)])
    quota_paths = [w.path for w in writes if w.file == "cpu.cfs_quota_us"]
    assert quota_paths == [tree.pods["bt"].dirs.cpu, cdir.cpu]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_only_differences_and_idempotence(tree_factory: Tree, version: str) -> None:
    tree = tree_factory(version)
    tree.add_pod("a", "Burstable", {"c": "containerd://x"}, cpu_request_milli=500)
    pods = [pod("a", level=-1, cpu=500, containers=(ContainerView("c", "containerd://x"),))]
    writes, _, _ = plan(tree, pods)
    assert writes
    apply(writes)
    assert plan(tree, pods)[0] == ()


def test_oom_score_adj_for_offline_processes_only(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    tree.add_pod("off", "Burstable", {"c": "containerd://x"}, cpu_request_milli=100)
    tree.add_pod("be", "BestEffort", {"c": "containerd://y"})
    tree.add_pod("on", "Burstable", {"c": "containerd://z"}, cpu_request_milli=100)
    tree.add_process("off", 101, oom_score_adj=999)
    tree.add_process("off", 102, oom_score_adj=1000)
    tree.add_process("be", 201, oom_score_adj=1000)
    tree.add_process("on", 301, oom_score_adj=998)
    pods = [
        pod("off", level=-1, cpu=100, containers=(ContainerView("c", "containerd://x"),)),
        pod("be", level=-1, qos="BestEffort", containers=(ContainerView("c", "containerd://y"),)),
        pod("on", cpu=100, containers=(ContainerView("c", "containerd://z"),)),
    ]
    _, procs, _ = plan(tree, pods)
    assert [(p.pid, p.file, p.value, p.current) for p in procs] == [(101, "oom_score_adj", "1000", "999")]


def test_vendor_knobs_where_the_files_exist(tree_factory: Tree) -> None:
    tree = tree_factory("v1", vendor_knobs=True)
    tree.add_pod("off", "BestEffort")
    tree.add_pod("on", "Burstable", cpu_request_milli=100)
    writes, _, _ = plan(tree, [pod("off", level=-1, qos="BestEffort"), pod("on", cpu=100)])
    got = [(os.path.basename(w.path), w.file, w.value) for w in writes]
    assert ("podoff", "cpu.qos_level", "-1") in got and ("podoff", "memory.qos_level", "-1") in got
    assert not any(p == "podon" for p, _, _ in got)
    writes, _, _ = plan(tree, [pod("off", level=-1, qos="BestEffort")], cfg=QosConfig(vendor_knobs=False))
    assert not any(w.file.endswith("qos_level") for w in writes)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cpu_burst_for_online_pods_when_enabled(tree_factory: Tree, version: str) -> None:
    tree = tree_factory(version)
    tree.add_pod("on", "Guaranteed", {"c": "containerd://x"}, cpu_request_milli=2000, cpu_limit_milli=2000)
    tree.add_pod("nolimit", "Burstable", cpu_request_milli=100)
    pods = [
        pod("on", qos="Guaranteed", cpu=2000, cpu_limit=2000, containers=(ContainerView("c", "containerd://x"),)),
        pod("nolimit", cpu=100),
    ]
    assert plan(tree, pods)[0] == ()
    writes, _, _ = plan(tree, pods, cfg=QosConfig(cpu_burst=True, cpu_burst_percent=50))
    file = "cpu.cfs_burst_us" if version == "v1" else "cpu.max.burst"
    assert [(os.path.basename(w.path), w.file, w.value) for w in writes] == [
        ("podon", file, "100000"),
        ("x", file, "100000"),
    ]


def test_pod_without_cgroup_is_noted(tree_factory: Tree) -> None:
    tree = tree_factory("v1")
    writes, procs, notes = plan(tree, [pod("ghost", level=-1)])
    assert writes == () and procs == () and any("no cgroup found" in n for n in notes)


@pytest.fixture
def tree_factory(kubelet_cgroup_tree: Tree) -> Tree:
    return kubelet_cgroup_tree
