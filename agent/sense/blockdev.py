"""The disks I/O QoS limits offline pods on: whole disks by `MAJ:MIN`, and what makes a weight act on each.

Sensing only (the decision is `agent.decide.ioqos`); nothing here raises: what cannot be resolved becomes a
sentence in the notes, and the rest goes on.

- **Default** (`io_qos.devices` empty, or an `auto` entry): the disks under the kubelet root directory and the
  container runtimes' roots (`AUTO_PATHS`: where emptyDir volumes, container layers and logs are written).
  Each path's filesystem is the mount with the longest mount point above it in the host's mountinfo (the
  caller passes `<proc>/1/mountinfo`, the host's mounts when the agent shares the host's PID namespace as the
  DaemonSet does); its `MAJ:MIN` field is the device. A filesystem without a block device of its own (overlay,
  tmpfs; btrfs shows an anonymous 0:N) falls back to its mount source when that names a block device. Loop
  devices (major 7) are left out: the I/O of a loop device lands on the disk under its backing file.
- **Entries**: `MAJ:MIN`, `/dev/<name>` or a name in /sys/class/block (`vdb`, `nvme0n1`); an entry is taken as
  configured, a loop device included.
- **Whole disks**: a partition is replaced by its disk (`/sys/dev/block/MAJ:MIN/partition` exists: the parent
  directory is the disk). v2's `io.max` refuses partitions, and a disk's queue is where throttling acts
  (Koordinator's blkio reconcile maps partitions to their disk the same way). Device-mapper devices (LVM) are
  kept as they are: a limit on a dm device holds the I/O sent to it.
- **Weights**: `bfq` when `/sys/dev/block/MAJ:MIN/queue/scheduler` selects `[bfq]`; `iocost` when the v2 root's
  `io.cost.qos` has `enable=1` for the disk; else "" (a proportional weight does not act on that disk).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Final

from agent.cgroups.mounts import Hierarchy, Mount, parse_mountinfo
from agent.knobs import is_device
from agent.model import BlockDevice
from agent.sense.procfs import ProcFS

#: where kubelet and the container runtimes write (kubelet's --root-dir default, containerd, docker, CRI-O)
AUTO_PATHS: Final = ("/var/lib/kubelet", "/var/lib/containerd", "/var/lib/docker", "/var/lib/containers")
AUTO: Final = "auto"
LOOP_MAJOR: Final = 7


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def mount_for(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount a path lives on: the longest mount point above it (the last such mount wins, as the kernel's)."""
    best: Mount | None = None
    best_len = -1
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        if (mp == "/" or path == mp or path.startswith(mp + "/")) and len(mp) >= best_len:
            best, best_len = m, len(mp)
    return best


def whole_disk(number: str, sys_root: str = "/sys") -> tuple[str, str] | None:
    """(`MAJ:MIN`, name) of the disk a device number belongs to (itself unless it is a partition); None when
    sysfs has no such device."""
    link = os.path.join(sys_root, "dev", "block", number)
    if not os.path.exists(link):
        return None
    real = os.path.realpath(link)
    if os.path.exists(os.path.join(real, "partition")):
        parent = os.path.dirname(real)
        disk = _read(os.path.join(parent, "dev"))
        if disk is not None and is_device(disk):
            return disk, os.path.basename(parent)
        return None
    return number, os.path.basename(real)


def by_name(name: str, sys_root: str = "/sys") -> str | None:
    """A block device's `MAJ:MIN` from its name in /sys/class/block."""
    if not name or "/" in name or name.startswith("."):
        return None
    number = _read(os.path.join(sys_root, "class", "block", name, "dev"))
    return number if number is not None and is_device(number) else None


def _from_dev_path(path: str, sys_root: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISBLK(st.st_mode):
        return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    # in a container /dev holds few devices: the name under /sys/class/block still tells
    return by_name(os.path.basename(os.path.realpath(path)) if st is not None else os.path.basename(path), sys_root)


def resolve_entry(entry: str, sys_root: str = "/sys") -> str | None:
    """A configured entry (`MAJ:MIN`, `/dev/<name>`, a name) as a device number; None when there is none."""
    if is_device(entry):
        return entry
    if entry.startswith("/dev/"):
        return _from_dev_path(entry, sys_root)
    return by_name(entry, sys_root)


def _auto(mounts: Sequence[Mount], sys_root: str) -> tuple[dict[str, str], list[str]]:
    """number -> why, for the disks under `AUTO_PATHS`; notes for what could not be resolved."""
    found: dict[str, str] = {}
    notes: list[str] = []
    for path in AUTO_PATHS:
        m = mount_for(path, mounts)
        if m is None:
            notes.append(f"I/O QoS: no mount holds {path} in the host's mountinfo")
            continue
        number = m.device if is_device(m.device) and not m.device.startswith("0:") else None
        if number is None and m.source.startswith("/dev/"):
            number = _from_dev_path(m.source, sys_root)
        if number is None:
            notes.append(
                f"I/O QoS: {path} is on {m.fstype} ({m.source or m.device}) at {m.mount_point}, not on a block "
                "device: nothing to limit there (set io_qos.devices)"
            )
            continue
        if number.split(":")[0] == str(LOOP_MAJOR):
            notes.append(f"I/O QoS: {path} is on the loop device {number}: left out (configure it to limit it)")
            continue
        found[number] = f"{found[number]}, {path}" if number in found else f"backs {path}"
    return found, notes


def weight_model(number: str, sys_root: str = "/sys", iocost_qos: str | None = None) -> str:
    """What makes a proportional I/O weight act on the disk: `bfq`, `iocost` or "" (module docstring)."""
    for line in (iocost_qos or "").splitlines():
        parts = line.split()
        if parts and parts[0] == number and "enable=1" in parts[1:]:
            return "iocost"
    scheduler = _read(os.path.join(sys_root, "dev", "block", number, "queue", "scheduler")) or ""
    return "bfq" if "[bfq]" in scheduler else ""


def sense_devices(
    entries: Sequence[str], mountinfo: str | None, sys_root: str = "/sys", iocost_qos: str | None = None
) -> tuple[tuple[BlockDevice, ...], tuple[str, ...]]:
    """The disks to limit (configured entries, or the automatic ones) and sentences about what was left out."""
    notes: list[str] = []
    wanted: dict[str, str] = {}
    if not entries or AUTO in entries:
        found, more = _auto(parse_mountinfo(mountinfo or ""), sys_root)
        wanted.update(found)
        notes.extend(more)
    for entry in entries:
        if entry == AUTO:
            continue
        number = resolve_entry(entry, sys_root)
        if number is None:
            notes.append(f"I/O QoS: io_qos.devices entry {entry!r} is no block device on this node; left out")
            continue
        wanted.setdefault(number, f"configured ({entry})")
    devices: list[BlockDevice] = []
    seen: set[str] = set()
    for number, why in wanted.items():
        disk = whole_disk(number, sys_root)
        if disk is None:
            notes.append(f"I/O QoS: {number} ({why}) is not in /sys/dev/block (gone?); left out")
            continue
        whole, name = disk
        if whole != number:
            why = f"{why}; the disk of partition {number}"
        if whole in seen:
            continue
        seen.add(whole)
        devices.append(BlockDevice(whole, name, why, weight_model(whole, sys_root, iocost_qos)))
    return tuple(sorted(devices, key=lambda d: tuple(int(x) for x in d.number.split(":")))), tuple(notes)


def host_devices(
    entries: Sequence[str], procfs: ProcFS, hierarchy: Hierarchy, sys_root: str = "/sys"
) -> tuple[tuple[BlockDevice, ...], tuple[str, ...]]:
    """`sense_devices` on this host: its mounts (`ProcFS.host_mountinfo`) and, on v2, the root's io.cost.qos."""
    iocost = None
    if hierarchy.knob_version == "v2":
        path = os.path.join(hierarchy.mount_root, "io.cost.qos")
        iocost = _read(path) if os.path.exists(path) else None
    return sense_devices(entries, procfs.host_mountinfo(), sys_root, iocost)
