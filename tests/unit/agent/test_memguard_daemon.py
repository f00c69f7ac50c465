"""The memory guard and the I/O controller through the daemon's "tier" duty, on a fake kubelet tree: sensed,
decided, written on the BestEffort root, and put back when turned off (agent.decide.memguard, agent.sense.tiersense)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.cgroups import UNLIMITED_V1, KubeletCgroupTree
from tests.unit.agent.daemon_helpers import make_harness, pod_obj

Mi = 2**20
LOW_PAGES = 1000  # the zones' low watermarks summed (pages of 4 KiB)


def _proc(t: KubeletCgroupTree, free: int) -> None:
    with open(os.path.join(t.proc_root, "meminfo"), "w") as f:
        f.write(f"MemTotal: {8 * 2**20} kB\nMemFree: {free // 1024} kB\nMemAvailable: {free // 1024 * 2} kB\n")
    with open(os.path.join(t.proc_root, "zoneinfo"), "w") as f:
        f.write(f"Node 0, zone DMA32\n        min      800\n        low      {LOW_PAGES}\n        high     1200\n")


def _root(t: KubeletCgroupTree, version: str, used: int, cache: int) -> str:
    d = t.layout.qos("BestEffort").memory
    with open(os.path.join(d, "memory.usage_in_bytes" if version == "v1" else "memory.current"), "w") as f:
        f.write(str(used))
    with open(os.path.join(d, "memory.stat"), "w") as f:
        prefix = "total_" if version == "v1" else ""
        f.write(f"{prefix}active_file {cache // 2}\n{prefix}inactive_file {cache // 2}\n")
    return d


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_guard_limits_the_besteffort_root_and_goes_back_when_off(
    kubelet_cgroup_tree: object, tmp_path: Path, version: str
) -> None:
    t: KubeletCgroupTree = kubelet_cgroup_tree(version)  # type: ignore[operator]
    t.add_pod("u-crunch", "BestEffort", {"c": "containerd://" + "c" * 64})
    pods = [pod_obj("u-crunch", "crunch", qos="BE", containers={"c": "containerd://" + "c" * 64})]
    _proc(t, free=2048 * Mi)
    root = _root(t, version, used=1024 * Mi, cache=512 * Mi)
    file = "memory.limit_in_bytes" if version == "v1" else "memory.high"
    h = make_harness(t, tmp_path, pods=pods, config_text="tier: {memory: {margin: 256Mi}}\n")
    h.tick(3)
    want = 1024 * Mi + 2048 * Mi - LOW_PAGES * 4096 - 256 * Mi
    with open(os.path.join(root, file)) as f:
        assert int(f.read()) == want // 4096 * 4096
    # free memory falls under the line: the limit falls at once, never past the page cache
    _proc(t, free=LOW_PAGES * 4096 + 56 * Mi)  # 200Mi under low + margin
    h.tick(2)
    with open(os.path.join(root, file)) as f:
        assert int(f.read()) == 1024 * Mi - 200 * Mi
    assert h.state is not None and any(e.file == file and e.path == root for e in h.state.journal.knobs.values())
    (tmp_path / "agent.yaml").write_text("tier: {memory: {enabled: false}}\n")
    h.tick(12)  # the new configuration is read, and the next full decision restores
    with open(os.path.join(root, file)) as f:
        assert f.read().strip() == (str(UNLIMITED_V1) if version == "v1" else "max")


def test_v2_online_memory_wait_reclaims_offline_page_cache(kubelet_cgroup_tree: object, tmp_path: Path) -> None:
    t: KubeletCgroupTree = kubelet_cgroup_tree("v2", psi=True)  # type: ignore[operator]
    t.add_pod("u-web", "Burstable", {"c": "containerd://" + "a" * 64}, cpu_request_milli=1000)
    t.add_pod("u-crunch", "BestEffort", {"c": "containerd://" + "c" * 64})
    pods = [
        pod_obj("u-web", "web", qos_class="Burstable", requests={"cpu": "1", "memory": "1Gi"},
                containers={"c": "containerd://" + "a" * 64}),
        pod_obj("u-crunch", "crunch", qos="BE", containers={"c": "containerd://" + "c" * 64}),
    ]  # fmt: skip
    _proc(t, free=2048 * Mi)
    root = _root(t, "v2", used=1024 * Mi, cache=512 * Mi)
    with open(os.path.join(root, "memory.reclaim"), "w") as f:
        f.write("")
    h = make_harness(t, tmp_path, pods=pods, config_text="tier: {memory: {reclaimWait: 0.05, reclaimStep: 32Mi}}\n")
    h.tick(2)
    pressure = os.path.join(t.pods["u-web"].dirs.memory, "memory.pressure")
    total = 0
    for _ in range(3):
        total += 200_000  # 0.2 s of stall per second: a wait of 0.2
        with open(pressure, "w") as f:
            f.write(f"some avg10=20.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=0 avg60=0 avg300=0 total=0\n")
        h.tick(1)
    with open(os.path.join(root, "memory.reclaim")) as f:
        assert f.read() == str(32 * Mi)
    with open(os.path.join(root, "memory.high")) as f:
        assert int(f.read()) == 1024 * Mi  # no growth while the online pod stalls
    assert not any(e.file == "memory.reclaim" for e in h.state.journal.knobs.values())  # type: ignore[union-attr]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_plan_shows_the_guard_and_the_io_limit_with_their_reasons(
    kubelet_cgroup_tree: object, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    from tests.unit.agent.test_cli import run, setup

    t: KubeletCgroupTree = kubelet_cgroup_tree(version)  # type: ignore[operator]
    cluster, clock = setup(t, tmp_path)
    _proc(t, free=2048 * Mi)
    root = _root(t, version, used=1024 * Mi, cache=512 * Mi)
    rc, out, err = run(["plan", "--node-name", "n1", "--cluster", cluster, *t.cli_args(), "-o", "json"], clock, capsys)
    assert rc == 0, err
    import json

    doc = json.loads(out)
    file = "memory.limit_in_bytes" if version == "v1" else "memory.high"
    want = (1024 * Mi + 2048 * Mi - LOW_PAGES * 4096 - 256 * Mi) // 4096 * 4096
    assert {"path": root, "file": file, "value": str(want)} in doc["cgroup_writes"]
    memory = doc["tier"]["memory"]
    assert memory["limit"] == want and "headroom" in memory["reason"] and "the BestEffort root" in memory["reason"]
    assert doc["tier"]["io"]["limit_bps"] is None and "no limit" in doc["tier"]["io"]["reason"]
    assert any(e.startswith("memory guard: MemFree 2048Mi") for e in doc["explanations"])
