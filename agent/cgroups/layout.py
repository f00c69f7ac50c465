"""kubelet's cgroup layout: where the kubepods root, QoS subtrees, pods and containers live.

kubelet names cgroups as lists of parts (`[<kube root parts>, "kubepods", "burstable", "pod<uid>"]`)
and renders them per driver:

- cgroupfs: `kubepods/burstable/pod<uid>/<container id>` (Guaranteed pods sit directly under
  `kubepods`; CRI-O containers are `crio-<id>`);
- systemd: every part escaped (`-` -> `_`) and joined with `-` into a slice, then expanded:
  `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice`,
  containers as scopes `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`.

On v1 each controller has its own hierarchy (`<mount>/cpu/...`, `<mount>/memory/...`, and
`<mount>/blkio/...` where it is mounted); on v2 one unified directory serves all. `--kube-cgroup-root` is
kubelet's own `--cgroup-root` (default `/`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from agent.cgroups.mounts import Hierarchy
from agent.model import CgroupDirs

log = logging.getLogger(__name__)

Driver = Literal["cgroupfs", "systemd"]
DriverChoice = Literal["auto", "cgroupfs", "systemd"]
QosClassName = Literal["Guaranteed", "Burstable", "BestEffort"]
DEFAULT_KUBELET_CONFIG: Final = "/var/lib/kubelet/config.yaml"

#: containerID runtime prefix (`containerd://<id>`) -> systemd scope prefix
SCOPE_PREFIX: Final = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
_QOS_PART: Final[dict[str, str | None]] = {"Guaranteed": None, "Burstable": "burstable", "BestEffort": "besteffort"}


def split_container_id(raw: str) -> tuple[str, str]:
    """`containerd://abc` -> ("containerd", "abc"); a bare id has runtime ""."""
    runtime, sep, cid = raw.partition("://")
    if not sep:
        return "", raw
    return runtime, cid


def _escape(part: str) -> str:
    return part.replace("-", "_")


def _expand_slice(parts: tuple[str, ...]) -> str:
    """systemd's ExpandSlice over already-escaped parts: a-b-c -> a.slice/a-b.slice/a-b-c.slice."""
    out: list[str] = []
    for i in range(1, len(parts) + 1):
        out.append("-".join(parts[:i]) + ".slice")
    return "/".join(out)


def kube_root_parts(kube_root: str, driver: Driver) -> tuple[str, ...]:
    """kubelet's --cgroup-root as name parts.

    cgroupfs: the path components (`/a/b` -> a, b). systemd: a slice path (`/kubelet.slice`) is
    parsed as systemd names (base name without `.slice`, split on `-`, `_` back to `-`), as kubelet's
    ParseSystemdToCgroupName; a plain path is taken component by component.
    """
    parts = tuple(p for p in kube_root.strip().split("/") if p)
    if driver == "systemd" and parts and parts[-1].endswith(".slice"):
        base = parts[-1][: -len(".slice")]
        return tuple(p.replace("_", "-") for p in base.split("-") if p)
    return parts


@dataclass(frozen=True, slots=True)
class KubeLayout:
    """Pod and container cgroup paths for one hierarchy, driver and kube cgroup root."""

    hierarchy: Hierarchy
    driver: Driver
    kube_root: str = "/"

    def _relative(self, tail: tuple[str, ...]) -> str:
        parts = kube_root_parts(self.kube_root, self.driver) + tail
        if self.driver == "systemd":
            return _expand_slice(tuple(_escape(p) for p in parts))
        return "/".join(parts)

    def _dirs(self, rel: str) -> CgroupDirs:
        h = self.hierarchy
        blkio = h.dir_for("blkio")
        return CgroupDirs(
            os.path.join(h.dir_for("cpu"), rel),
            os.path.join(h.dir_for("cpuacct"), rel),
            os.path.join(h.dir_for("memory"), rel),
            h.knob_version,
            os.path.join(blkio, rel) if blkio else "",
        )

    def kubepods(self) -> CgroupDirs:
        return self._dirs(self._relative(("kubepods",)))

    def qos(self, qos_class: QosClassName) -> CgroupDirs:
        part = _QOS_PART[qos_class]
        return self._dirs(self._relative(("kubepods",) if part is None else ("kubepods", part)))

    def pod(self, uid: str, qos_class: QosClassName) -> CgroupDirs:
        part = _QOS_PART[qos_class]
        tail = ("kubepods", f"pod{uid}") if part is None else ("kubepods", part, f"pod{uid}")
        return self._dirs(self._relative(tail))

    def container_names(self, container_id: str) -> tuple[str, ...]:
        """Candidate directory names for a container, the runtime's usual name first."""
        runtime, cid = split_container_id(container_id)
        scopes = [f"{p}-{cid}.scope" for p in SCOPE_PREFIX.values()]
        plain = [cid, f"crio-{cid}"]
        preferred: str
        if self.driver == "systemd":
            preferred = f"{SCOPE_PREFIX[runtime]}-{cid}.scope" if runtime in SCOPE_PREFIX else scopes[0]
            rest = scopes + plain
        else:
            preferred = f"crio-{cid}" if runtime == "cri-o" else cid
            rest = plain + scopes
        return (preferred, *[n for n in rest if n != preferred])

    def container(
        self, pod: CgroupDirs, container_id: str, is_dir: Callable[[str], bool] = os.path.isdir
    ) -> CgroupDirs:
        """The container's directories: the first candidate name that exists, else the preferred one."""
        names = self.container_names(container_id)
        for name in names:
            if is_dir(os.path.join(pod.cpu, name)):
                return pod.child(name)
        return pod.child(names[0])


def _kubelet_config_driver(path: str) -> Driver | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    import yaml  # slow import, only on this tie-break path

    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    if isinstance(data, dict):
        value = data.get("cgroupDriver")
        if value in ("cgroupfs", "systemd"):
            return value  # type: ignore[no-any-return]
    return None


def detect_driver(
    hierarchy: Hierarchy,
    kube_root: str = "/",
    requested: DriverChoice = "auto",
    kubelet_config: str = DEFAULT_KUBELET_CONFIG,
) -> tuple[Driver, str]:
    """`--cgroup-driver auto` (docs/design.md, "Agent command line"), with the reason in words.

    systemd iff `kubepods.slice` exists under the kube cgroup root; cgroupfs iff `kubepods` does;
    when neither exists yet, kubelet's config file (`cgroupDriver`) breaks the tie; default cgroupfs.
    """
    if requested in ("cgroupfs", "systemd"):
        return requested, f"cgroup driver {requested} (from --cgroup-driver)"
    systemd = KubeLayout(hierarchy, "systemd", kube_root).kubepods()
    cgroupfs = KubeLayout(hierarchy, "cgroupfs", kube_root).kubepods()
    if os.path.isdir(systemd.cpu) or os.path.isdir(systemd.memory):
        return "systemd", f"cgroup driver systemd ({systemd.cpu} exists)"
    if os.path.isdir(cgroupfs.cpu) or os.path.isdir(cgroupfs.memory):
        return "cgroupfs", f"cgroup driver cgroupfs ({cgroupfs.cpu} exists)"
    from_config = _kubelet_config_driver(kubelet_config)
    if from_config is not None:
        return from_config, f"cgroup driver {from_config} (no kubepods cgroup yet; cgroupDriver in {kubelet_config})"
    return "cgroupfs", "cgroup driver cgroupfs (no kubepods cgroup yet and no kubelet config; the default)"
