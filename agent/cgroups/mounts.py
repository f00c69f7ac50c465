"""Which cgroup version is mounted under the cgroup root, and where each controller lives.

Detection reads mountinfo-like text (`/proc/self/mountinfo`; the caller passes it, so tests and the
DaemonSet's `/host/sys/fs/cgroup` work) and falls back to probing the directory tree when no cgroup
mount sits under the root (a tmp tree in tests, or a bind mount that mountinfo shows elsewhere):

- v2: a cgroup2 filesystem mounted at the root itself (`<root>/cgroup.controllers` exists);
- v1: cgroup (v1) filesystems under the root, one per controller set (`cpu`, `cpuacct` or a combined
  `cpu,cpuacct` with `cpu`/`cpuacct` symlinks, `memory`...);
- hybrid: v1 controllers plus a cgroup2 mount below the root (systemd's `unified`); cpu and memory
  are then on v1, so every knob and reader uses the v1 files.

Subtree mounts (the DaemonSet mounts only the kubepods subtrees it writes): a mount whose mountinfo
root is a cgroup below its hierarchy's root (`/kubepods` mounted at `<root>/cpu/kubepods`) is mapped
back to its hierarchy, `<root>/cpu`, so that every path the layout builds below the hierarchy
(`<root>/cpu/kubepods/...`) lands in the mount. The subtree must sit at its own cgroup path below
the hierarchy directory (the DaemonSet mounts host `/sys/fs/cgroup/<P>` at `<root>/<P>`); a subtree
mounted anywhere else is an error, never a guess. Inside a cgroup namespace mountinfo shows the
root relative to the namespace (`/..`): the subtree's place is then taken from its position under
the root (`<root>/<controller dir>/...` on v1, `<root>/...` on a v2-only mount set).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

CgroupVersion = Literal["v1", "v2", "hybrid"]
KnobVersion = Literal["v1", "v2"]
#: the v1 controllers the agent needs
CONTROLLERS: Final[tuple[str, ...]] = ("cpu", "cpuacct", "memory")
#: v1 controllers the agent uses where they are mounted (blkio: I/O QoS; without it there are no I/O knobs)
OPTIONAL_CONTROLLERS: Final[tuple[str, ...]] = ("blkio",)


class CgroupDetectionError(Exception):
    """No usable cgroup hierarchy under the given root (translated to exit code 1 by the CLI)."""


@dataclass(frozen=True, slots=True)
class Mount:
    """One mountinfo line, reduced to what detection needs."""

    mount_point: str
    root: str
    fstype: str
    super_options: tuple[str, ...]
    #: the filesystem's device, `MAJ:MIN` (0:N for filesystems without a block device)
    device: str = ""
    #: the mount source (`/dev/vda1`, `overlay`)
    source: str = ""


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """`/proc/<pid>/mountinfo` lines; malformed lines are skipped.

    Format: `id parent major:minor root mount_point options [optional...] - fstype source super_options`.
    """
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        if sep < 6 or len(fields) < sep + 3:
            continue
        mounts.append(
            Mount(
                mount_point=_unescape(fields[4]),
                root=_unescape(fields[3]),
                fstype=fields[sep + 1],
                super_options=tuple(fields[sep + 3].split(",")),
                device=fields[2],
                source=_unescape(fields[sep + 2]),
            )
        )
    return tuple(mounts)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """The detected layout: version, the directory holding each controller, and how it was found."""

    version: CgroupVersion
    mount_root: str
    controller_dirs: Mapping[str, str]
    unified: str | None
    source: Literal["mountinfo", "tree"]

    @property
    def knob_version(self) -> KnobVersion:
        """Which files cpu/memory use: v2 only on a pure unified host (hybrid keeps them on v1)."""
        return "v2" if self.version == "v2" else "v1"

    def dir_for(self, controller: str) -> str:
        """The hierarchy directory that holds `controller` (the unified root on v2); "" for an optional v1
        controller that is not mounted (blkio)."""
        if self.version == "v2":
            return self.mount_root
        if controller in OPTIONAL_CONTROLLERS:
            return self.controller_dirs.get(controller, "")
        return self.controller_dirs[controller]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hierarchy_dir(root: str, mp: str, sub: str, v2: bool) -> str:
    """The directory that stands for the hierarchy's root, for a mount of cgroup `sub` at `mp`."""
    sub = sub.rstrip("/")
    if not sub:
        return mp
    parts = sub.split("/")
    if ".." in parts:  # a cgroup namespace's view: the mount's place is its position under the root
        if v2:
            return root
        return os.path.join(root, os.path.relpath(mp, root).split("/")[0])
    if mp.endswith(sub) and _under(mp[: -len(sub)] or "/", root):
        return mp[: -len(sub)] or "/"
    raise CgroupDetectionError(
        f"the cgroup subtree {sub} is mounted at {mp}: mount it at <hierarchy dir>{sub} below {root}"
    )


def _from_mountinfo(root: str, mounts: tuple[Mount, ...]) -> Hierarchy | None:
    v1: dict[str, str] = {}
    unified: str | None = None
    v2_subtree = False
    for m in mounts:
        mp = os.path.normpath(m.mount_point)
        if not _under(mp, root):
            continue
        if m.fstype == "cgroup2":
            if mp == root:
                return Hierarchy("v2", root, {c: root for c in CONTROLLERS}, root, "mountinfo")
            if _hierarchy_dir(root, mp, m.root, v2=True) == root:
                v2_subtree = True  # a kubepods subtree of the unified hierarchy mounted at its own path
            else:
                unified = unified or mp
        elif m.fstype == "cgroup":
            for c in CONTROLLERS + OPTIONAL_CONTROLLERS:
                if c in m.super_options and c not in v1:
                    v1[c] = _hierarchy_dir(root, mp, m.root, v2=False)
    if not v1 and v2_subtree:
        return Hierarchy("v2", root, {c: root for c in CONTROLLERS}, root, "mountinfo")
    if not v1:
        return None
    missing = [c for c in CONTROLLERS if c not in v1]
    if missing:
        raise CgroupDetectionError(f"cgroup v1 under {root} lacks the {', '.join(missing)} controller(s)")
    return Hierarchy("hybrid" if unified else "v1", root, v1, unified, "mountinfo")


def _from_tree(root: str) -> Hierarchy:
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return Hierarchy("v2", root, {c: root for c in CONTROLLERS}, root, "tree")
    try:
        entries = sorted(os.listdir(root))
    except OSError as e:
        raise CgroupDetectionError(f"cannot list the cgroup root {root}: {e.strerror or e}") from e
    v1: dict[str, str] = {}
    for c in CONTROLLERS + OPTIONAL_CONTROLLERS:
        direct = os.path.join(root, c)
        if os.path.isdir(direct):
            v1[c] = direct
            continue
        for name in entries:
            if "," in name and c in name.split(",") and os.path.isdir(os.path.join(root, name)):
                v1[c] = os.path.join(root, name)
                break
    if not v1 and any(os.path.isfile(os.path.join(root, e, "cgroup.controllers")) for e in entries):
        # only subtrees of a unified hierarchy (kubepods, kubepods.slice) mounted at their own paths
        return Hierarchy("v2", root, {c: root for c in CONTROLLERS}, root, "tree")
    if not v1:
        raise CgroupDetectionError(f"no cgroup v1 or v2 hierarchy under {root}")
    missing = [c for c in CONTROLLERS if c not in v1]
    if missing:
        raise CgroupDetectionError(f"cgroup v1 under {root} lacks the {', '.join(missing)} controller(s)")
    unified_dir = os.path.join(root, "unified")
    unified = unified_dir if os.path.isfile(os.path.join(unified_dir, "cgroup.controllers")) else None
    return Hierarchy("hybrid" if unified else "v1", root, v1, unified, "tree")


def detect_hierarchy(cgroup_root: str, mountinfo: str | None = None) -> Hierarchy:
    """Detect v1 / v2 / hybrid under `cgroup_root` from mountinfo text, else from the tree itself."""
    root = os.path.normpath(cgroup_root)
    if mountinfo:
        found = _from_mountinfo(root, parse_mountinfo(mountinfo))
        if found is not None:
            return found
    return _from_tree(root)
