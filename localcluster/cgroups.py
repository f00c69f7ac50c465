"""A kubelet-like cgroup tree for the local pod runner: kubelet's layout and values, cgroupfs driver.

kubelet (cgroupfs driver, `--cgroup-root=/<prefix>`) lays pods out as
`<mount>/<controller>/<prefix>/kubepods[/burstable|/besteffort]/pod<uid>/<container id>` on cgroup v1
(one directory per controller: here cpu, cpuacct and memory) and the same path once under the unified
mount on cgroup v2. The values are kubelet's (and runc's, for containers):

| group | cpu (v1 shares / v2 weight) | quota | memory limit |
|---|---|---|---|
| `<prefix>` (kubelet's --cgroup-root) | as kubepods, so the extra level changes nothing | none | none |
| kubepods | allocatable cpu -> shares | none | allocatable memory |
| kubepods/besteffort | 2 | none | none |
| kubepods/burstable | sum of its pods' cpu requests -> shares (min 2) | none | none |
| pod | its cpu request -> shares (BestEffort: 2) | sum of limits, when every container has one | same rule |
| container | its cpu request -> shares (none: 2) | its limit | its limit |

shares = milli * 1024 / 1000 clamped to 2..262144; v2 weight = 1 + (shares - 2) * 9999 / 262142;
quota = milli * period / 1000 (at least 1 ms). A unique prefix (`tidemark-local-<owner pid>-<random>`)
keeps the tree away from every other group on the machine; every path written or removed is checked
to lie under it (and never under the machine's own `memory/process_api`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from agent.cgroups.layout import KubeLayout
from agent.cgroups.mounts import Hierarchy, detect_hierarchy
from agent.decide.qos import milli_to_shares, shares_to_weight
from agent.model import CgroupDirs

log = logging.getLogger(__name__)

QosClassName = Literal["Guaranteed", "Burstable", "BestEffort"]
PREFIX_BASE: Final = "tidemark-local"
_PREFIX_RE: Final = re.compile(rf"^{PREFIX_BASE}-(\d+)-[0-9a-f]+$")
PERIOD_US: Final = 100_000
MIN_QUOTA_US: Final = 1000
_PROTECTED: Final = ("process_api",)
CONTROLLERS: Final = ("cpu", "cpuacct", "memory")


class CgroupSetupError(Exception):
    """The cgroup tree cannot be created here (not root, controllers missing, ...)."""


def new_prefix(owner_pid: int | None = None) -> str:
    """`tidemark-local-<owner pid>-<random>`: unique, and the owner pid lets a later run sweep leftovers."""
    return f"{PREFIX_BASE}-{owner_pid if owner_pid is not None else os.getpid()}-{secrets.token_hex(3)}"


def quota_us(milli: int, period_us: int = PERIOD_US) -> int:
    """kubelet's MilliCPUToQuota: milli * period / 1000, at least 1 ms."""
    return max(MIN_QUOTA_US, milli * period_us // 1000)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one cgroup gets: cpu request (milli) for shares, optional cpu limit (milli) and memory limit (bytes)."""

    cpu_request_milli: int = 0
    cpu_limit_milli: int | None = None
    memory_limit: int | None = None
    besteffort: bool = False

    @property
    def shares(self) -> int:
        return 2 if self.besteffort else milli_to_shares(self.cpu_request_milli)


def _write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(f"{value}\n")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class KubeletCgroups:
    """kubelet's cgroup tree under a unique kube cgroup root, on this host's real hierarchy."""

    def __init__(
        self,
        prefix: str,
        *,
        cgroup_root: str = "/sys/fs/cgroup",
        allocatable_cpu_milli: int,
        allocatable_memory: int,
        hierarchy: Hierarchy | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix) or not prefix.startswith(PREFIX_BASE):
            raise ValueError(f"cgroup prefix must be a plain name starting with {PREFIX_BASE}: {prefix!r}")
        self.prefix = prefix
        self.cgroup_root = os.path.normpath(cgroup_root)
        self.hierarchy = hierarchy or detect_hierarchy(self.cgroup_root)
        self.version = self.hierarchy.knob_version
        self.kube_cgroup_root = f"/{prefix}"
        self.layout = KubeLayout(self.hierarchy, "cgroupfs", self.kube_cgroup_root)
        self.allocatable_cpu_milli = allocatable_cpu_milli
        self.allocatable_memory = allocatable_memory
        self.kubepods = self.layout.kubepods()
        self._burstable_requests: dict[str, int] = {}

    # --- paths -------------------------------------------------------------------------------

    def roots(self) -> tuple[str, ...]:
        """The prefix directory in each hierarchy this tree uses (one on v2)."""
        if self.version == "v2":
            return (os.path.join(self.hierarchy.mount_root, self.prefix),)
        out: list[str] = []
        for c in CONTROLLERS:
            d = os.path.join(self.hierarchy.dir_for(c), self.prefix)
            if d not in out:
                out.append(d)
        return tuple(out)

    def _check(self, path: str) -> None:
        """Refuse any path outside our prefix: this tree never touches the machine's own groups."""
        norm = os.path.normpath(path)
        parts = norm.split("/")
        if self.prefix not in parts or not norm.startswith(self.cgroup_root + "/"):
            raise RuntimeError(f"refusing to touch {path}: outside {self.cgroup_root}/*/{self.prefix}")
        if any(p in parts for p in _PROTECTED):
            raise RuntimeError(f"refusing to touch {path}: a protected group")

    # --- setup -------------------------------------------------------------------------------

    def check_usable(self) -> None:
        """Raise CgroupSetupError with the reason when this host's hierarchy cannot hold the tree."""
        if os.geteuid() != 0:
            raise CgroupSetupError("creating cgroups needs root")
        if self.version == "v2":
            root = self.hierarchy.mount_root
            try:
                enabled = _read(os.path.join(root, "cgroup.subtree_control")).split()
            except OSError as e:
                raise CgroupSetupError(f"cannot read {root}/cgroup.subtree_control: {e}") from e
            missing = [c for c in ("cpu", "memory") if c not in enabled]
            if missing:
                raise CgroupSetupError(f"cgroup v2 at {root} does not delegate {', '.join(missing)} to child groups")
            return
        for c in CONTROLLERS:
            d = self.hierarchy.dir_for(c)
            if not os.access(d, os.W_OK):
                raise CgroupSetupError(f"{d} is not writable")

    def setup(self, check: bool = True) -> None:
        """Create `<prefix>/kubepods` and the QoS subtrees with kubelet's values (`check`: check_usable first)."""
        if check:
            self.check_usable()
        kube_shares = milli_to_shares(self.allocatable_cpu_milli)
        for root in self.roots():
            self._mkdir(root)
            if self.version == "v2":
                self._enable_controllers(root)
                _write(os.path.join(root, "cpu.weight"), shares_to_weight(kube_shares))
            elif os.path.exists(os.path.join(root, "cpu.shares")):
                # kubelet's kubepods sits at the root with its shares; the prefix level in between
                # gets the same weight, so the tree competes with the rest of the machine as kubelet's does.
                _write(os.path.join(root, "cpu.shares"), kube_shares)
        self._group(
            self.kubepods,
            Limits(cpu_request_milli=self.allocatable_cpu_milli, memory_limit=self.allocatable_memory),
            children=True,
        )
        self._group(self.layout.qos("Burstable"), Limits(besteffort=True), children=True)
        self._group(self.layout.qos("BestEffort"), Limits(besteffort=True), children=True)

    def _mkdir(self, path: str) -> None:
        self._check(path)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)

    def _enable_controllers(self, path: str) -> None:
        """cgroup v2: let children of `path` use cpu and memory (kubelet's tree does the same)."""
        _write(os.path.join(path, "cgroup.subtree_control"), "+cpu +memory")

    def _group(self, d: CgroupDirs, limits: Limits, *, children: bool = False) -> None:
        for path in d.distinct():
            self._mkdir(path)
        if d.version == "v2":
            if children:
                self._enable_controllers(d.cpu)
            _write(os.path.join(d.cpu, "cpu.weight"), shares_to_weight(limits.shares))
            if limits.cpu_limit_milli is not None:
                _write(os.path.join(d.cpu, "cpu.max"), f"{quota_us(limits.cpu_limit_milli)} {PERIOD_US}")
            if limits.memory_limit is not None:
                _write(os.path.join(d.memory, "memory.max"), limits.memory_limit)
            return
        _write(os.path.join(d.cpu, "cpu.shares"), limits.shares)
        if limits.cpu_limit_milli is not None:
            _write(os.path.join(d.cpu, "cpu.cfs_period_us"), PERIOD_US)
            _write(os.path.join(d.cpu, "cpu.cfs_quota_us"), quota_us(limits.cpu_limit_milli))
        if limits.memory_limit is not None:
            _write(os.path.join(d.memory, "memory.limit_in_bytes"), limits.memory_limit)

    # --- pods and containers -----------------------------------------------------------------

    def pod_dirs(self, uid: str, qos: QosClassName) -> CgroupDirs:
        return self.layout.pod(uid, qos)

    def create_pod(self, uid: str, qos: QosClassName, limits: Limits) -> CgroupDirs:
        """The pod's group (kubelet's ResourceConfigForPod); burstable's shares follow its pods' requests."""
        dirs = self.layout.pod(uid, qos)
        if qos == "Burstable":
            self._burstable_requests[uid] = limits.cpu_request_milli
            self._update_burstable()
        self._group(dirs, limits, children=True)
        return dirs

    def create_container(self, pod: CgroupDirs, container_id: str, limits: Limits) -> CgroupDirs:
        """The container's group (runc's values from the container's own request and limits)."""
        dirs = pod.child(self.layout.container_names(container_id)[0])
        self._group(dirs, limits)
        return dirs

    def _update_burstable(self) -> None:
        total = sum(self._burstable_requests.values())
        d = self.layout.qos("Burstable")
        if self.version == "v2":
            _write(os.path.join(d.cpu, "cpu.weight"), shares_to_weight(milli_to_shares(total)))
        else:
            _write(os.path.join(d.cpu, "cpu.shares"), milli_to_shares(total))

    def add_process(self, dirs: CgroupDirs, pid: int) -> None:
        """Move `pid` into the group in every hierarchy (before it starts working)."""
        for path in dirs.distinct():
            self._check(path)
            _write(os.path.join(path, "cgroup.procs"), pid)

    def pids(self, dirs: CgroupDirs) -> set[int]:
        out: set[int] = set()
        for path in dirs.distinct():
            with contextlib.suppress(OSError):
                out.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
        return out

    def cpu_usage_ns(self, dirs: CgroupDirs) -> int:
        """Cumulative CPU time of the group in nanoseconds (cpuacct.usage; v2 cpu.stat usage_usec)."""
        if dirs.version == "v2":
            for line in _read(os.path.join(dirs.cpu, "cpu.stat")).splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
            return 0
        return int(_read(os.path.join(dirs.cpuacct, "cpuacct.usage")))

    def remove_group(self, dirs: CgroupDirs, timeout: float = 5.0) -> bool:
        """Remove one group (and anything below it) in every hierarchy; False if some stayed busy."""
        ok = True
        for path in dirs.distinct():
            ok = remove_tree(path, self._check, timeout) and ok
        return ok

    def remove_pod(self, uid: str, dirs: CgroupDirs, timeout: float = 5.0) -> bool:
        """Remove the pod's group and its containers' groups (leaf first); False if some stayed busy."""
        ok = self.remove_group(dirs, timeout)
        if self._burstable_requests.pop(uid, None) is not None:
            with contextlib.suppress(OSError):
                self._update_burstable()
        return ok

    # --- teardown ------------------------------------------------------------------------------

    def all_pids(self) -> set[int]:
        """Every process in any group of the tree."""
        out: set[int] = set()
        for root in self.roots():
            for path, _dirs, _files in _walk(root):
                with contextlib.suppress(OSError, ValueError):
                    out.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
        return out

    def teardown(self, timeout: float = 10.0) -> list[str]:
        """Kill whatever still runs in the tree (by pid, from cgroup.procs), remove every group leaf-first.

        Returns the directories that could not be removed (empty when clean).
        """
        deadline = time.monotonic() + timeout
        while True:
            pids = self.all_pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        left: list[str] = []
        for root in self.roots():
            if not remove_tree(root, self._check, max(0.5, deadline - time.monotonic())):
                left.extend(p for p, _d, _f in _walk(root))
        return left

    def exists(self) -> bool:
        return any(os.path.isdir(r) for r in self.roots())


def _walk(root: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """Bottom-up walk of a cgroup directory (leaves first)."""
    if not os.path.isdir(root):
        return iter(())
    return os.walk(root, topdown=False)


def remove_tree(root: str, check: Callable[[str], None], timeout: float) -> bool:
    """rmdir every directory under `root`, leaves first, retrying EBUSY (tasks still exiting)."""
    deadline = time.monotonic() + timeout
    while True:
        busy = False
        for path, _dirs, _files in list(_walk(root)):
            check(path)
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    log.warning("cannot remove cgroup %s: %s", path, e)
                busy = True
        if not busy or not os.path.isdir(root):
            return not os.path.isdir(root)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def stale_prefixes(cgroup_root: str = "/sys/fs/cgroup") -> list[str]:
    """Prefixes `tidemark-local-<pid>-*` left by runs whose owner process is gone (e.g. killed -9)."""
    found: set[str] = set()
    try:
        hierarchy = detect_hierarchy(cgroup_root)
    except Exception:
        return []
    dirs = {hierarchy.mount_root} if hierarchy.knob_version == "v2" else {hierarchy.dir_for(c) for c in CONTROLLERS}
    for d in dirs:
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                m = _PREFIX_RE.match(name)
                if not m:
                    continue
                # Stale iff its owner is gone. A recycled pid makes a dead run's tree look alive: left
                # alone (the safe side); a live owner is never mistaken for a dead one.
                if _pid_alive(int(m.group(1))):
                    continue
                found.add(name)
    return sorted(found)


def sweep_stale(cgroup_root: str = "/sys/fs/cgroup") -> list[str]:
    """Kill the processes of and remove every stale local-cluster tree; returns the prefixes swept."""
    swept: list[str] = []
    for prefix in stale_prefixes(cgroup_root):
        tree = KubeletCgroups(prefix, cgroup_root=cgroup_root, allocatable_cpu_milli=0, allocatable_memory=0)
        left = tree.teardown(timeout=5.0)
        if left:
            log.warning("could not remove stale cgroups of %s: %s", prefix, ", ".join(left[:5]))
        swept.append(prefix)
    return swept
