"""Hierarchy detection: v1 / v2 / hybrid from mountinfo text, else from the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cgroups.mounts import CgroupDetectionError, detect_hierarchy, parse_mountinfo

THIS_MACHINE = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
COMBINED = """\
25 24 0:22 / /sys/fs/cgroup rw shared:4 - tmpfs tmpfs ro,mode=755
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
31 25 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory
"""
UNIFIED = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
DAEMONSET = """\
700 600 0:26 / /host/sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
701 600 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw
"""


def test_parse_mountinfo_fields_and_escapes() -> None:
    mounts = parse_mountinfo(
        "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\nbad"
    )
    assert len(mounts) == 1
    m = mounts[0]
    assert (m.mount_point, m.root, m.fstype) == ("/mnt two", "/mnt1", "ext3")
    assert m.super_options == ("rw", "errors=continue")


def test_v1_with_unified_is_hybrid() -> None:
    h = detect_hierarchy("/sys/fs/cgroup", THIS_MACHINE)
    assert h.version == "hybrid" and h.knob_version == "v1" and h.source == "mountinfo"
    assert h.dir_for("cpu") == "/sys/fs/cgroup/cpu"
    assert h.dir_for("cpuacct") == "/sys/fs/cgroup/cpuacct"
    assert h.dir_for("memory") == "/sys/fs/cgroup/memory"
    assert h.unified == "/sys/fs/cgroup/unified"


def test_combined_cpu_cpuacct_mount() -> None:
    h = detect_hierarchy("/sys/fs/cgroup", COMBINED)
    assert h.version == "v1"
    assert h.dir_for("cpu") == h.dir_for("cpuacct") == "/sys/fs/cgroup/cpu,cpuacct"


def test_unified_v2() -> None:
    h = detect_hierarchy("/sys/fs/cgroup/", UNIFIED)
    assert h.version == "v2" and h.knob_version == "v2"
    assert h.dir_for("cpu") == h.dir_for("memory") == "/sys/fs/cgroup"


def test_parameterised_root_picks_its_own_mount() -> None:
    assert detect_hierarchy("/host/sys/fs/cgroup", DAEMONSET).dir_for("memory") == "/host/sys/fs/cgroup"


def test_missing_controller_is_an_error() -> None:
    text = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    with pytest.raises(CgroupDetectionError, match="cpuacct, memory"):
        detect_hierarchy("/sys/fs/cgroup", text)


def test_tree_probe_when_mountinfo_has_nothing_under_root(tmp_path: Path) -> None:
    for c in ("cpu,cpuacct", "memory"):
        os.makedirs(tmp_path / c)
    os.symlink("cpu,cpuacct", tmp_path / "cpu")
    h = detect_hierarchy(str(tmp_path), THIS_MACHINE)
    assert h.source == "tree" and h.version == "v1"
    assert h.dir_for("cpu") == str(tmp_path / "cpu")
    assert h.dir_for("cpuacct") == str(tmp_path / "cpu,cpuacct")


def test_tree_probe_v2_and_hybrid(tmp_path: Path) -> None:
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cgroup.controllers").write_text("cpu memory")
    assert detect_hierarchy(str(tmp_path / "v2")).version == "v2"
    for c in ("cpu", "cpuacct", "memory", "unified"):
        os.makedirs(tmp_path / "hy" / c)
    (tmp_path / "hy" / "unified" / "cgroup.controllers").write_text("")
    assert detect_hierarchy(str(tmp_path / "hy")).version == "hybrid"


def test_tree_probe_errors(tmp_path: Path) -> None:
    with pytest.raises(CgroupDetectionError, match="no cgroup"):
        detect_hierarchy(str(tmp_path))
    with pytest.raises(CgroupDetectionError, match="cannot list"):
        detect_hierarchy(str(tmp_path / "absent"))
    os.makedirs(tmp_path / "cpu")
    with pytest.raises(CgroupDetectionError, match="lacks"):
        detect_hierarchy(str(tmp_path))


def test_this_machine_real_mountinfo() -> None:
    if not os.path.isdir("/sys/fs/cgroup/cpu"):
        pytest.skip("no cgroup v1 cpu hierarchy here")
    with open("/proc/self/mountinfo") as f:
        h = detect_hierarchy("/sys/fs/cgroup", f.read())
    assert h.knob_version == "v1"
    assert os.path.isfile(os.path.join(h.dir_for("cpuacct"), "cpuacct.usage"))


# The DaemonSet's narrow mounts: host /sys/fs/cgroup/<ctrl>/kubepods at /host/sys/fs/cgroup/<ctrl>/kubepods
# (mountinfo as the agent's container sees it on this machine's v1 host; `cpu` and `cpuacct` separate).
NARROW_V1 = """\
900 800 0:29 /kubepods /host/sys/fs/cgroup/cpu/kubepods rw,nosuid - cgroup cgroup rw,cpu
901 800 0:30 /kubepods /host/sys/fs/cgroup/cpuacct/kubepods rw,nosuid - cgroup cgroup rw,cpuacct
902 800 0:32 /kubepods /host/sys/fs/cgroup/memory/kubepods rw,nosuid - cgroup cgroup rw,memory
910 800 0:29 /kubepods/besteffort/podx/abc /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu
"""
# cpu -> cpu,cpuacct symlink on the host: the hostPath resolves it, both mounts are the combined hierarchy.
NARROW_COMBINED = """\
900 800 0:27 /kubepods /host/sys/fs/cgroup/cpu/kubepods rw - cgroup cgroup rw,cpu,cpuacct
901 800 0:27 /kubepods /host/sys/fs/cgroup/cpuacct/kubepods rw - cgroup cgroup rw,cpu,cpuacct
902 800 0:28 /kubepods.slice /host/sys/fs/cgroup/memory/kubepods.slice rw - cgroup cgroup rw,memory
"""
NARROW_V2 = "900 800 0:26 /kubepods.slice /host/sys/fs/cgroup/kubepods.slice rw - cgroup2 cgroup2 rw\n"
# Inside a cgroup namespace (containerd's default on v2) the root is shown relative to the namespace.
NARROW_V2_CGROUPNS = "900 800 0:26 /../../.. /host/sys/fs/cgroup/kubepods rw - cgroup2 cgroup2 rw\n"


def test_narrow_v1_subtree_mounts_map_back_to_their_hierarchies() -> None:
    h = detect_hierarchy("/host/sys/fs/cgroup", NARROW_V1)
    assert h.version == "v1" and h.source == "mountinfo"
    for c in ("cpu", "cpuacct", "memory"):
        assert h.dir_for(c) == f"/host/sys/fs/cgroup/{c}"


def test_narrow_combined_and_systemd_subtrees() -> None:
    h = detect_hierarchy("/host/sys/fs/cgroup", NARROW_COMBINED)
    assert h.dir_for("cpu") == h.dir_for("cpuacct") == "/host/sys/fs/cgroup/cpu"
    assert h.dir_for("memory") == "/host/sys/fs/cgroup/memory"


@pytest.mark.parametrize("text", [NARROW_V2, NARROW_V2_CGROUPNS])
def test_narrow_v2_subtree_is_v2_at_the_root(text: str) -> None:
    h = detect_hierarchy("/host/sys/fs/cgroup", text)
    assert h.version == "v2" and h.knob_version == "v2"
    assert h.dir_for("cpu") == h.dir_for("memory") == "/host/sys/fs/cgroup"


def test_a_subtree_mounted_off_its_path_is_an_error() -> None:
    text = "900 800 0:29 /kubepods /host/sys/fs/cgroup/cpu-pods rw - cgroup cgroup rw,cpu\n"
    with pytest.raises(CgroupDetectionError, match="subtree /kubepods is mounted at /host/sys/fs/cgroup/cpu-pods"):
        detect_hierarchy("/host/sys/fs/cgroup", text)


def test_narrow_layouts_give_the_pod_paths_through_the_mounts(tmp_path: Path) -> None:
    """The layout's pod directories resolve inside the mounted subtrees (a tree probe sees the same)."""
    from agent.cgroups.layout import KubeLayout

    for c in ("cpu", "cpuacct", "memory"):
        os.makedirs(tmp_path / c / "kubepods" / "besteffort")
    h = detect_hierarchy(str(tmp_path))
    assert h.source == "tree" and h.version == "v1"
    pod = KubeLayout(h, "cgroupfs").pod("u1", "BestEffort")
    assert pod.cpu == str(tmp_path / "cpu" / "kubepods" / "besteffort" / "podu1")
    assert pod.memory == str(tmp_path / "memory" / "kubepods" / "besteffort" / "podu1")
    v2 = tmp_path / "v2"
    (v2 / "kubepods.slice").mkdir(parents=True)
    (v2 / "kubepods.slice" / "cgroup.controllers").write_text("cpu memory")
    h2 = detect_hierarchy(str(v2))
    assert h2.version == "v2"
    assert KubeLayout(h2, "systemd").kubepods().cpu == str(v2 / "kubepods.slice")
