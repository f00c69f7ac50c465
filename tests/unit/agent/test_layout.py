"""kubelet's layout for both drivers and both versions, and `--cgroup-driver auto`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.cgroups.layout import KubeLayout, detect_driver, kube_root_parts, split_container_id
from agent.cgroups.mounts import Hierarchy, detect_hierarchy
from tests.fixtures.cgroups import KubeletCgroupTree

V1 = Hierarchy("v1", "/sys/fs/cgroup", {c: f"/sys/fs/cgroup/{c}" for c in ("cpu", "cpuacct", "memory")}, None, "tree")
V2 = Hierarchy(
    "v2", "/sys/fs/cgroup", {c: "/sys/fs/cgroup" for c in ("cpu", "cpuacct", "memory")}, "/sys/fs/cgroup", "tree"
)
UID = "1b4f5a2c-0d3e-4f5a-8b7c-9d0e1f2a3b4c"


@pytest.mark.parametrize(
    ("qos", "expected"),
    [
        ("Guaranteed", f"kubepods/pod{UID}"),
        ("Burstable", f"kubepods/burstable/pod{UID}"),
        ("BestEffort", f"kubepods/besteffort/pod{UID}"),
    ],
)
def test_cgroupfs_paths(qos: str, expected: str) -> None:
    v1 = KubeLayout(V1, "cgroupfs").pod(UID, qos)  # type: ignore[arg-type]
    assert v1.cpu == f"/sys/fs/cgroup/cpu/{expected}"
    assert v1.cpuacct == f"/sys/fs/cgroup/cpuacct/{expected}"
    assert v1.memory == f"/sys/fs/cgroup/memory/{expected}"
    v2 = KubeLayout(V2, "cgroupfs").pod(UID, qos)  # type: ignore[arg-type]
    assert v2.cpu == v2.memory == v2.cpuacct == f"/sys/fs/cgroup/{expected}"
    assert v2.version == "v2" and v1.version == "v1"


def test_systemd_paths_escape_dashes() -> None:
    u = UID.replace("-", "_")
    lay = KubeLayout(V2, "systemd")
    assert lay.kubepods().cpu == "/sys/fs/cgroup/kubepods.slice"
    assert lay.qos("Burstable").cpu == "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice"
    assert lay.pod(UID, "Burstable").cpu == (
        f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"
    )
    assert lay.pod(UID, "BestEffort").memory.endswith(f"kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice")
    assert lay.pod(UID, "Guaranteed").cpu == f"/sys/fs/cgroup/kubepods.slice/kubepods-pod{u}.slice"
    assert KubeLayout(V1, "systemd").pod(UID, "Guaranteed").memory == (
        f"/sys/fs/cgroup/memory/kubepods.slice/kubepods-pod{u}.slice"
    )


def test_kube_cgroup_root() -> None:
    assert (
        KubeLayout(V1, "cgroupfs", "/tidemark-x/nested").kubepods().cpu
        == "/sys/fs/cgroup/cpu/tidemark-x/nested/kubepods"
    )
    assert KubeLayout(V1, "cgroupfs", "/").qos("BestEffort").memory == "/sys/fs/cgroup/memory/kubepods/besteffort"
    # systemd: a slice root is parsed as systemd names, as kubelet does
    assert kube_root_parts("/kubelet.slice", "systemd") == ("kubelet",)
    assert kube_root_parts("/my_root.slice", "systemd") == ("my-root",)
    lay = KubeLayout(V2, "systemd", "/kubelet.slice")
    assert lay.kubepods().cpu == "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice"
    assert lay.qos("BestEffort").cpu == (
        "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"
    )


def test_container_names_per_runtime_and_driver() -> None:
    assert split_container_id("containerd://abc") == ("containerd", "abc")
    assert split_container_id("abc") == ("", "abc")
    systemd = KubeLayout(V1, "systemd")
    assert systemd.container_names("containerd://abc")[0] == "cri-containerd-abc.scope"
    assert systemd.container_names("cri-o://abc")[0] == "crio-abc.scope"
    assert systemd.container_names("docker://abc")[0] == "docker-abc.scope"
    cgroupfs = KubeLayout(V1, "cgroupfs")
    assert cgroupfs.container_names("containerd://abc")[0] == "abc"
    assert cgroupfs.container_names("docker://abc")[0] == "abc"
    assert cgroupfs.container_names("cri-o://abc")[0] == "crio-abc"
    assert set(systemd.container_names("x://abc")) == set(cgroupfs.container_names("x://abc"))


def test_container_dir_prefers_what_exists(tmp_path: Path) -> None:
    h = Hierarchy("v2", str(tmp_path), {c: str(tmp_path) for c in ("cpu", "cpuacct", "memory")}, str(tmp_path), "tree")
    lay = KubeLayout(h, "systemd")
    pod = lay.pod("u1", "BestEffort")
    os.makedirs(os.path.join(pod.cpu, "crio-abc.scope"))
    # the id says containerd, but the directory on disk is CRI-O's: the existing one wins
    assert lay.container(pod, "containerd://abc").cpu.endswith("/crio-abc.scope")
    assert lay.container(pod, "containerd://zzz").cpu.endswith("/cri-containerd-zzz.scope")


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_auto_driver_from_the_tree(
    kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], version: str, driver: str
) -> None:
    tree = kubelet_cgroup_tree(version, driver)
    found, why = detect_driver(tree.hierarchy, "/", "auto", "/nonexistent")
    assert found == driver
    assert "exists" in why


def test_auto_driver_tie_break_from_kubelet_config(tmp_path: Path) -> None:
    for c in ("cpu", "cpuacct", "memory"):
        os.makedirs(tmp_path / "cg" / c)
    h = detect_hierarchy(str(tmp_path / "cg"))
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n")
    assert detect_driver(h, "/", "auto", str(config))[0] == "systemd"
    config.write_text("cgroupDriver: cgroupfs\n")
    assert detect_driver(h, "/", "auto", str(config))[0] == "cgroupfs"
    config.write_text("cgroupDriver: weird\n")
    assert detect_driver(h, "/", "auto", str(config)) == (
        "cgroupfs",
        "cgroup driver cgroupfs (no kubepods cgroup yet and no kubelet config; the default)",
    )
    config.write_text(": : not yaml [")
    assert detect_driver(h, "/", "auto", str(config))[0] == "cgroupfs"
    assert detect_driver(h, "/", "auto", str(tmp_path / "absent"))[0] == "cgroupfs"
    assert detect_driver(h, "/", "systemd", str(tmp_path / "absent"))[0] == "systemd"
