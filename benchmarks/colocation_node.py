"""bench_colocation's view of the node: its counters (CPU of kubepods and of pods, /proc/stat, vmstat, disk), the
control directory the offline pods watch, the agent's knobs left in the cgroup files.

Two nodes: the host's real node (cgroup v1, cgroupfs; files read here) and the production-shaped node
(TIDEMARK_NODE=v2: cgroup v2, systemd driver, in a VM; files read through its guest agent,
localcluster/v2node.py). Both are read through `LocalCluster.read_files`, so one read per counter snapshot.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 2**20
CG = Path("/sys/fs/cgroup")
CTL_ROOT = "/run/tidemark-colocation"
STATE_DIR = Path("/var/lib/tidemark")
UNLIMITED_V1 = 9223372036854771712
#: whole disks in /proc/diskstats (no partitions, loop, zram or device-mapper devices)
_DISK = re.compile(r"^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme\d+n\d+|mmcblk\d+)$")


def _read(path: Path | str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _int(path: Path | str, default: int = 0) -> int:
    try:
        return int(_read(path))
    except ValueError:
        return default


def busy_jiffies(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat: user+nice+system+irq+softirq (+idle, iowait, steal in total)."""
    f = [int(x) for x in (stat.splitlines() or ["cpu 0 0 0 0 0 0 0 0"])[0].split()[1:]]
    f += [0] * (8 - len(f))
    return f[0] + f[1] + f[2] + f[5] + f[6], sum(f[:8])


def vm_counters(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k.startswith(("pgscan_", "allocstall_")) or k in ("oom_kill", "pgmajfault"):
            out[k] = int(v)
    return out


def sectors_written(diskstats: str) -> int:
    """Sectors written to the machine's whole disks."""
    total = 0
    for line in diskstats.splitlines():
        p = line.split()
        if len(p) > 9 and _DISK.match(p[2]):
            total += int(p[9])
    return total


def meminfo_bytes(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if v.split():
            out[k] = int(v.split()[0]) * 1024
    return out


def cpu_ns(text: str | None, version: str) -> int:
    """A cgroup's CPU time in ns: v1 `cpuacct.usage`, v2 `cpu.stat` usage_usec."""
    if not text:
        return 0
    if version == "v1":
        return int(text.split()[0]) if text.split()[0].isdigit() else 0
    for line in text.splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) * 1000
    return 0


def stat_value(text: str | None, key: str) -> int:
    """`key N` from a flat-keyed cgroup file (memory.stat, memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        if line.startswith(key + " "):
            return int(line.split()[1])
    return 0


@dataclass
class Counters:
    t: float
    kubepods_ns: int
    web_ns: int
    offline_ns: int
    busy: tuple[int, int]
    vm: dict[str, int]
    sectors: int


def window_figures(c0: Counters, c1: Counters, cores: float) -> dict[str, Any]:
    dt = max(c1.t - c0.t, 1e-9)
    busy = (c1.busy[0] - c0.busy[0]) / max(c1.busy[1] - c0.busy[1], 1)
    scanned = sum(c1.vm.get(k, 0) - c0.vm.get(k, 0) for k in c1.vm if k.startswith("pgscan_"))
    stalls = sum(c1.vm.get(k, 0) - c0.vm.get(k, 0) for k in c1.vm if k.startswith("allocstall_"))
    return {
        "node_cpu_util": round((c1.kubepods_ns - c0.kubepods_ns) / 1e9 / dt / cores, 4),
        "online_cores": round((c1.web_ns - c0.web_ns) / 1e9 / dt, 4),
        "offline_cores": round(max(0, c1.offline_ns - c0.offline_ns) / 1e9 / dt, 4),
        "node_busy_util": round(busy, 4),
        "reclaim_scanned_mib_s": round(scanned * 4096 / MIB / dt, 1),
        "direct_reclaim_stalls": stalls,
        "node_oom_kills": c1.vm.get("oom_kill", 0) - c0.vm.get("oom_kill", 0),
        "disk_write_mib_s": round((c1.sectors - c0.sectors) * 512 / MIB / dt, 1),
    }


class NodeView:
    """The node's files as the benchmark reads them; `version` is the node's cgroup version."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.version = str(getattr(node, "CGROUP_VERSION", "v1"))

    # --- paths ---------------------------------------------------------------------------------------
    def pod_dir(self, pod: dict[str, Any], controller: str) -> str:
        return str(self.node.pod_cgroup(pod, controller))

    def kubepods(self, controller: str) -> str:
        return f"{CG}/{controller}/kubepods" if self.version == "v1" else f"{CG}/kubepods.slice"

    def cpu_file(self, d: str) -> str:
        return f"{d}/cpuacct.usage" if self.version == "v1" else f"{d}/cpu.stat"

    def pod_cpu(self, pod: dict[str, Any]) -> str:
        return self.cpu_file(self.pod_dir(pod, "cpuacct"))

    def read(self, paths: list[str]) -> dict[str, str | None]:
        return dict(self.node.read_files(paths)) if paths else {}

    # --- snapshots -----------------------------------------------------------------------------------
    def counters(self, web: dict[str, Any] | None, offline: list[dict[str, Any]]) -> Counters:
        kp = self.cpu_file(self.kubepods("cpuacct"))
        webp = self.pod_cpu(web) if web else ""
        offp = [self.pod_cpu(p) for p in offline]
        got = self.read([kp, *([webp] if webp else []), *offp, "/proc/stat", "/proc/vmstat", "/proc/diskstats"])
        return Counters(
            t=time.monotonic(),
            kubepods_ns=cpu_ns(got.get(kp), self.version),
            web_ns=cpu_ns(got.get(webp), self.version) if webp else 0,
            offline_ns=sum(cpu_ns(got.get(p), self.version) for p in offp),
            busy=busy_jiffies(got.get("/proc/stat") or ""),
            vm=vm_counters(got.get("/proc/vmstat") or ""),
            sectors=sectors_written(got.get("/proc/diskstats") or ""),
        )

    def busy(self) -> tuple[int, int]:
        return busy_jiffies(self.read(["/proc/stat"]).get("/proc/stat") or "")

    def meminfo(self) -> dict[str, int]:
        return meminfo_bytes(self.read(["/proc/meminfo"]).get("/proc/meminfo") or "")

    def oom_kills(self, pod: dict[str, Any]) -> int:
        """OOM kills inside the pod's memory cgroup (v1 memory.oom_control, v2 memory.events `oom_kill`)."""
        f = "memory.oom_control" if self.version == "v1" else "memory.events"
        path = f"{self.pod_dir(pod, 'memory')}/{f}"
        return stat_value(self.read([path]).get(path), "oom_kill")

    def anon_bytes(self, pod: dict[str, Any]) -> int:
        """The pod's anonymous memory (v1 memory.stat total_rss, v2 anon): the memory kind's hog."""
        path = f"{self.pod_dir(pod, 'memory')}/memory.stat"
        return stat_value(self.read([path]).get(path), "total_rss" if self.version == "v1" else "anon")

    def kubepods_working_set(self) -> int:
        d = self.kubepods("memory")
        usage = f"{d}/memory.usage_in_bytes" if self.version == "v1" else f"{d}/memory.current"
        got = self.read([usage, f"{d}/memory.stat"])
        inactive = stat_value(got.get(f"{d}/memory.stat"), "total_inactive_file" if self.version == "v1"
                              else "inactive_file")
        return int(got.get(usage) or 0) - inactive

    def pod_present(self, pod: dict[str, Any]) -> bool:
        """The pod's cgroup still exists (kubelet has not removed it)."""
        path = f"{self.pod_dir(pod, 'memory')}/cgroup.procs"
        return self.read([path]).get(path) is not None

    def pod_has_processes(self, pod: dict[str, Any]) -> bool:
        """Any process left in the pod's cgroups (v1: the cpu hierarchy walked; v2: cgroup.events populated)."""
        if self.version == "v2":
            path = f"{self.pod_dir(pod, 'cpu')}/cgroup.events"
            return stat_value(self.read([path]).get(path), "populated") == 1
        for d, _dirs, files in os.walk(self.pod_dir(pod, "cpu")):
            if "cgroup.procs" in files and _read(Path(d, "cgroup.procs")).split():
                return True
        return False

    # --- the control directory (a hostPath the offline pods watch) --------------------------------------
    def ctl_reset(self, cell: str) -> str:
        d = f"{CTL_ROOT}/{cell}"
        if self.version == "v1":
            shutil.rmtree(d, ignore_errors=True)
            Path(d).mkdir(parents=True)
        else:
            self.node.sh(f"rm -rf {shlex.quote(d)} && mkdir -p {shlex.quote(d)}")
        return d

    def ctl_touch(self, cell: str, name: str) -> None:
        path = f"{CTL_ROOT}/{cell}/{name}"
        if self.version == "v1":
            Path(path).touch()
        else:
            self.node.sh(f"touch {shlex.quote(path)}")

    def ctl_read(self, cell: str, names: list[str]) -> dict[str, str | None]:
        got = self.read([f"{CTL_ROOT}/{cell}/{n}" for n in names])
        return {n: got.get(f"{CTL_ROOT}/{cell}/{n}") for n in names}

    def ctl_remove(self, cell: str = "") -> None:
        d = f"{CTL_ROOT}/{cell}" if cell else CTL_ROOT
        if self.version == "v1":
            shutil.rmtree(d, ignore_errors=True)
        else:
            with contextlib.suppress(Exception):
                self.node.sh(f"rm -rf {shlex.quote(d)}")

    # --- the agent's knobs --------------------------------------------------------------------------
    def agent_knobs(self, pods: list[dict[str, Any]] | None = None) -> list[str]:
        """What of the agent's knobs the cgroup files show (kubelet writes none of them): v1 agent_knobs_v1;
        v2 `cpu.idle` = 1, a `memory.high` or `io.max` line under kubepods.slice, a CPU quota on the besteffort
        slice."""
        if self.version == "v1":
            return agent_knobs_v1(pods)
        script = (
            "cd /sys/fs/cgroup/kubepods.slice 2>/dev/null || exit 0; "
            "grep -rlx 1 --include=cpu.idle . 2>/dev/null | sed 's/$/=1/'; "
            "grep -r -v -x max --include=memory.high . 2>/dev/null; "
            "grep -r . --include=io.max . 2>/dev/null; "
            "grep -v '^max ' kubepods-besteffort.slice/cpu.max 2>/dev/null | sed 's|^|besteffort cpu.max=|'; true"
        )
        return [line for line in self.node.sh(script, check=False).out.splitlines() if line.strip()]


def agent_knobs_v1(pods: list[dict[str, Any]] | None = None) -> list[str]:
    """v1: `cpu.idle` = 1 and a memory soft limit anywhere under kubepods, a CFS quota on the besteffort root
    (the tier ceiling), blkio throttles on a pod; CFS quotas on the given pods (none of which has a CPU limit)
    and memory limits on those without a memory limit; `oom_score_adj` 1000 in a Burstable pod (kubelet gives
    them less)."""
    found: list[str] = []
    for d, _dirs, files in os.walk(CG / "cpu" / "kubepods"):
        if "cpu.idle" in files and _read(Path(d, "cpu.idle")) == "1":
            found.append(f"{d}/cpu.idle=1")
    quota = _read(CG / "cpu" / "kubepods" / "besteffort" / "cpu.cfs_quota_us")
    if quota not in ("", "-1"):
        found.append(f"{CG}/cpu/kubepods/besteffort/cpu.cfs_quota_us={quota}")
    for d, _dirs, files in os.walk(CG / "memory" / "kubepods"):
        if "memory.soft_limit_in_bytes" in files and _int(Path(d, "memory.soft_limit_in_bytes")) != UNLIMITED_V1:
            found.append(f"{d}/memory.soft_limit_in_bytes={_read(Path(d, 'memory.soft_limit_in_bytes'))}")
    for d, _dirs, files in os.walk(CG / "blkio" / "kubepods"):
        for f in files:
            if f.startswith("blkio.throttle.") and f.endswith("_device") and _read(Path(d, f)):
                found.append(f"{d}/{f}={_read(Path(d, f))!r}")
    for p in pods or []:
        found += _pod_knobs_v1(p)
    return found


def _pod_dir_v1(pod: dict[str, Any], controller: str) -> Path:
    qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod.get("status", {}).get("qosClass", ""))
    base = CG / controller / "kubepods"
    return (base / qos if qos else base) / f"pod{pod['metadata']['uid']}"


def _pod_knobs_v1(p: dict[str, Any]) -> list[str]:
    found: list[str] = []
    limits = [c.get("resources", {}).get("limits") or {} for c in p["spec"]["containers"]]
    cpu_dir, mem_dir = _pod_dir_v1(p, "cpu"), _pod_dir_v1(p, "memory")
    if not any("cpu" in lim or "kubernetes.io/batch-cpu" in lim for lim in limits):
        for d, _dirs, files in os.walk(cpu_dir):
            if "cpu.cfs_quota_us" in files and _read(Path(d, "cpu.cfs_quota_us")) not in ("", "-1"):
                found.append(f"{d}/cpu.cfs_quota_us={_read(Path(d, 'cpu.cfs_quota_us'))}")
    if not any("memory" in lim or "kubernetes.io/batch-memory" in lim for lim in limits):
        for d, _dirs, files in os.walk(mem_dir):
            if "memory.limit_in_bytes" in files and _int(Path(d, "memory.limit_in_bytes")) != UNLIMITED_V1:
                found.append(f"{d}/memory.limit_in_bytes={_read(Path(d, 'memory.limit_in_bytes'))}")
    if p.get("status", {}).get("qosClass") == "Burstable":
        # the container's first process (its shell) only: stress-ng raises its own workers' to 1000
        for d, _dirs, files in os.walk(mem_dir):
            pids = sorted(int(x) for x in _read(Path(d, "cgroup.procs")).split()) if "cgroup.procs" in files else []
            if pids and d != str(mem_dir) and _read(f"/proc/{pids[0]}/oom_score_adj") == "1000":
                found.append(f"pid {pids[0]} ({p['metadata']['name']}) oom_score_adj=1000")
    return found


def journal_entries() -> int | None:
    try:
        doc = json.loads((STATE_DIR / "journal.json").read_text())
    except (OSError, ValueError):
        return None
    return len(doc.get("knobs") or []) + len(doc.get("procs") or [])
