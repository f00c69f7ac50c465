"""Tidemark on the production-shaped node: systemd as PID 1, cgroup v2, containerd with `SystemdCgroup = true`,
kubelet 1.20.2 with `--cgroup-driver=systemd` (tests/fixtures/v2node.py; ONE VM per run, QEMU's TCG).

The agent runs as its DaemonSet's pod from `daemonset/overlays/cgroup-v2-systemd` (through the local-v2
overlay: the local image), as a user of such a node applies it. Everything asserted is read on the node:
the cgroup files kubelet's systemd driver made, the ones the agent wrote, containerd's tasks. Under TCG code
runs about ten times slower: the waits are long, and no test asserts an absolute time (the figures are printed).
"""

from __future__ import annotations

import time

import pytest

from localcluster.v2node import V2Node
from tests.fixtures.realnode import QUIET_WATERMARKS, RealNamespace, set_cpu_watermarks
from tests.integration.realnode_v2.common import (
    BATCH_CPU,
    BATCH_MEM,
    KUBEPODS,
    MIB,
    OFFLINE,
    OFFLINE_RES,
    ONLINE,
    agent_metrics,
    agent_pod,
    ancestors_protect,
    metric,
    not_evicting,
    offline_memory_high,
    pod_dict,
    start_pods,
    wait_knobs,
    wanted_knobs,
)
from tidemark.apis import quantity_to_int

pytestmark = [pytest.mark.realnode_v2, pytest.mark.slow]


def test_the_node_is_cgroup_v2_systemd_with_kubelet_on_the_systemd_driver(v2_node: V2Node) -> None:
    out = v2_node.sh(
        "cat /proc/1/comm; stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.controllers; "
        "systemctl is-active kubelet containerd; grep -c 'SystemdCgroup = true' /etc/containerd/config.toml; "
        "grep cgroupDriver /var/lib/kubelet/config.yaml; systemctl show -p ActiveState kubepods.slice"
    ).out.split("\n")
    assert out[0] == "systemd"
    assert out[1] == "cgroup2fs"
    assert {"cpu", "memory", "io"} <= set(out[2].split())
    assert out[3:5] == ["active", "active"]
    assert out[5] == "1"
    assert out[6] == "cgroupDriver: systemd"
    assert out[7] == "ActiveState=active"  # kubelet's kubepods.slice is a systemd unit


def test_agent_pod_ready_publishes_batch_and_x_and_detects_v2_systemd(v2_node: V2Node, v2_ns: RealNamespace) -> None:
    pod = agent_pod(v2_node)
    assert pod is not None and v2_node.pod_ready(pod)
    assert pod["spec"]["containers"][0]["image"].startswith("localhost/tidemark/tidemark:")
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert "/host/sys/fs/cgroup/kubepods.slice" in mounts  # overlays/cgroup-v2-systemd

    def published() -> bool:
        node = v2_ns.core.read_node(v2_node.node_name)
        alloc = node.status.allocatable or {}
        notes = node.metadata.annotations or {}
        return (
            (quantity_to_int(alloc.get(BATCH_CPU, "0")) or 0) > 0
            and (quantity_to_int(alloc.get(BATCH_MEM, "0")) or 0) > 0
            and "volcano.sh/oversubscription-cpu" in notes
            and "volcano.sh/oversubscription-memory" in notes
        )

    v2_ns.wait(published, 300, "batch-* in allocatable and the X annotations")
    # What the agent found: its log (the container's, on the node) names the hierarchy and the driver.
    log = v2_node.sh(
        "cat /var/log/pods/tidemark-system_tidemark-agent-*/agent/*.log", timeout=60
    ).out
    assert "cgroup driver systemd" in log, log[-3000:]
    assert "cgroup v2" in log
    # its own container's cgroup (its cgroup namespace root: nsdelegate refuses writes there) is left alone
    assert "EPERM" not in log, log[-3000:]
    failed = v2_ns.core.list_event_for_all_namespaces(field_selector="reason=CgroupWriteFailed").items
    assert not failed, [e.message for e in failed]


def test_knobs_in_kubelets_systemd_slices(v2_node: V2Node, v2_ns: RealNamespace) -> None:
    """Every pod's cgroups where kubelet's systemd driver puts them, the offline knobs and the online
    memory protection set there, and the protection summed on kubepods.slice and the Burstable slice."""
    offline, online = start_pods(v2_ns)
    uid = offline["metadata"]["uid"]
    slice_dir = v2_node.pod_cgroup(offline)
    assert slice_dir == (
        f"{KUBEPODS}/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    )
    assert "-" not in slice_dir.rsplit("pod", 1)[1].removesuffix(".slice")  # systemd's escaping of the uid
    exists = v2_node.sh(
        f"test -d {slice_dir} && test -d {v2_node.container_cgroup(offline)} && "
        f"test -d {v2_node.pod_cgroup(online)} && echo ok"
    )
    assert exists.out.strip() == "ok"
    took = wait_knobs(v2_node, wanted_knobs(v2_node, offline, online), 180)
    print(f"V2NODE knobs in force {took:.1f} s after both pods Running")
    high = offline_memory_high(v2_node, offline)
    assert high is not None and 0 < high <= 64 * MIB  # batch-memory limit x memoryQoS.highRatio
    assert not ancestors_protect(v2_node, 64 * MIB)
    # the offline containers' processes are the OOM killer's first choice
    pids = v2_node.read_files([f"{v2_node.container_cgroup(offline)}/cgroup.procs"]).popitem()[1] or ""
    assert pids.split(), "no process in the offline container"
    for pid in pids.split():
        assert v2_node.read_files([f"/proc/{pid}/oom_score_adj"]).popitem()[1] == "1000"


def test_psi_pressure_path_fires_on_the_pod_slices(v2_node: V2Node, v2_ns: RealNamespace) -> None:
    """An online pod whose two spinners share one CPU stalls (`cpu.pressure` some > 0 on its slice): the agent's
    PSI trigger on the pod slices fires and wakes it (tidemark_agent_pressure_triggers_total{resource="cpu"}),
    and the online pods' PSI it samples comes from those slices."""
    before = metric(agent_metrics(v2_node), "tidemark_agent_pressure_triggers_total", resource="cpu", source="psi")
    spin = "taskset -c 1 sh -c 'while :; do :; done' & taskset -c 1 sh -c 'while :; do :; done' & wait"
    v2_ns.create(v2_ns.pod("stall", spin, requests={"cpu": "100m", "memory": "16Mi"}, annotations=ONLINE))
    v2_ns.wait_running("stall", timeout=300)
    stall = pod_dict(v2_ns, "stall")
    psi_file = f"{v2_node.pod_cgroup(stall)}/cpu.pressure"

    def stalled() -> bool:
        text = v2_node.read_files([psi_file]).popitem()[1] or ""
        some = dict(kv.split("=") for kv in text.splitlines()[0].split()[1:]) if text else {}
        return float(some.get("avg10", "0")) > 5.0

    v2_ns.wait(stalled, 120, f"{psi_file}: some avg10 > 5 %")
    t0 = time.monotonic()

    def fired() -> bool:
        text = agent_metrics(v2_node)
        n = metric(text, "tidemark_agent_pressure_triggers_total", resource="cpu", source="psi")
        online = metric(text, "tidemark_agent_pressure_some_ratio", scope="online_pods_max", resource="cpu")
        return n > before and online > 0.05

    v2_ns.wait(fired, 180, "the agent's cpu PSI trigger to fire and its online-pod PSI to show the stall")
    print(f"V2NODE PSI: the agent counted the pod slice's cpu stall within {time.monotonic() - t0:.1f} s")


def test_eviction_past_the_watermark_kills_only_the_offline_containers(
    v2_node: V2Node, v2_ns: RealNamespace
) -> None:
    not_evicting(v2_ns)
    v2_ns.create(v2_ns.pod("offline-2", "sleep 36000", requests=OFFLINE_RES, limits=OFFLINE_RES, annotations=OFFLINE))
    _, online = start_pods(v2_ns)  # beside offline-2: under TCG each pod takes the best part of a minute to start
    v2_ns.wait_running("offline-2", timeout=300)
    offline_ids = {
        c["containerID"].split("://", 1)[1]
        for name in ("offline", "offline-2")
        for c in pod_dict(v2_ns, name)["status"]["containerStatuses"]
    }
    online_id = online["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    assert offline_ids <= v2_node.running_tasks()
    # the online pod spins on both CPUs: the node's pods use ~100 % of it, past a 30 % high watermark
    hog = "sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & wait"
    v2_ns.create(v2_ns.pod("hog", hog, requests={"cpu": "100m", "memory": "16Mi"}, annotations=ONLINE))
    v2_ns.wait_running("hog", timeout=300)
    hog_pod = pod_dict(v2_ns, "hog")
    set_cpu_watermarks(v2_node, 30, 15)
    try:
        t0 = time.monotonic()

        def evicted() -> bool:
            names = {p.metadata.name for p in v2_ns.core.list_namespaced_pod(v2_ns.name).items
                     if p.metadata.deletion_timestamp is None}
            return not names & {"offline", "offline-2"}

        v2_ns.wait(evicted, 300, "the offline pods evicted")
        t_ev = time.monotonic() - t0
        v2_ns.wait(lambda: not offline_ids & v2_node.running_tasks(), 180, "the offline containers gone")
        print(f"V2NODE eviction {t_ev:.1f} s after the watermark was lowered; containers gone "
              f"{time.monotonic() - t0 - t_ev:.1f} s later")
        tasks = v2_node.running_tasks()
        assert online_id in tasks
        for name, before in (("online", online), ("hog", hog_pod)):
            now = pod_dict(v2_ns, name)
            assert now["metadata"]["uid"] == before["metadata"]["uid"]
            assert now["status"]["phase"] == "Running"
            assert now["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        v2_ns.core.delete_namespaced_pod("hog", v2_ns.name, grace_period_seconds=0)
        set_cpu_watermarks(v2_node, *QUIET_WATERMARKS)
