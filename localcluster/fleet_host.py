"""A hollow node's host for its Tidemark agent: a cgroup v2 tree and /proc in a directory, kept in step with the
pods its hollow kubelet runs (localcluster/fleet.py).

kubemark's hollow kubelet runs no process and makes no cgroup, so an agent beside it has nothing to sense. This
writes what a kubelet host shows (kubelet's cgroupfs layout, agent/cgroups/layout.py, so the agent reads it with
its own code through `--cgroup-root`/`--proc-root`): kubepods, its QoS groups, one group per pod with its sandbox,
`cpu.stat` counters that a load model advances, `memory.current`, /proc/stat and /proc/meminfo. The agent's own
writes (cpu.weight, cpu.idle, memory.high, ...) land in these files like any kernel file the agent writes.
Only what a fleet needs: one cgroup v2 layout, no block I/O, no network.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from agent.cgroups.layout import KubeLayout
from agent.cgroups.mounts import detect_hierarchy
from agent.decide.qos import milli_to_shares, shares_to_weight
from agent.model import CgroupDirs

CLK_TCK = 100
#: the pause sandbox in every pod group (the agent treats a pod group without one as unfinished)
SANDBOX_ID = "containerd://" + "5a4db0c5" * 8
_PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@dataclass
class HostPod:
    uid: str
    qos: str  # Guaranteed, Burstable or BestEffort
    dirs: CgroupDirs
    usage_usec: int = 0
    memory: int = 0


class SyntheticHost:
    """One node's tree under `base`; `add_pod`/`remove_pod` follow the kubelet, `advance` lets time pass."""

    def __init__(self, base: str, ncpu: int, memory_total: int, allocatable_cpu_milli: int) -> None:
        self.base, self.ncpu, self.memory_total = base, ncpu, memory_total
        self.cgroup_root = os.path.join(base, "cgroup")
        self.proc_root = os.path.join(base, "proc")
        os.makedirs(os.path.join(self.proc_root, "self"), exist_ok=True)
        os.makedirs(self.cgroup_root, exist_ok=True)
        _write(os.path.join(self.cgroup_root, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids\n")
        _write(
            os.path.join(self.proc_root, "self", "mountinfo"),
            f"30 23 0:26 / {self.cgroup_root} rw,nosuid - cgroup2 cgroup2 rw\n",
        )
        self.layout = KubeLayout(detect_hierarchy(self.cgroup_root), "cgroupfs", "/")
        self.kubepods = self.layout.kubepods()
        self._groups: dict[str, int] = {}  # group dir -> usage_usec (kubepods and the QoS groups)
        self._make(self.kubepods, milli_to_shares(allocatable_cpu_milli))
        for qos in ("Burstable", "BestEffort"):
            self._make(self.layout.qos(qos), 2)
        self.pods: dict[str, HostPod] = {}
        self._busy = self._idle = 0.0  # CPU seconds since boot, for /proc/stat
        self.system_cores = 0.05  # what runs outside kubepods (the kubelet, the agent, the OS)
        self._write_stat()
        self._write_memory()

    def _make(self, d: CgroupDirs, shares: int) -> None:
        path = d.cpu
        os.makedirs(path, exist_ok=True)
        files = {
            "cgroup.procs": "",
            "cpu.weight": f"{shares_to_weight(shares)}\n",
            "cpu.max": "max 100000\n",
            "cpu.max.burst": "0\n",
            "cpu.idle": "0\n",
            "memory.current": "0\n",
            "memory.max": "max\n",
            "memory.high": "max\n",
            "memory.low": "0\n",
            "memory.min": "0\n",
            "memory.stat": "anon 0\nfile 0\ninactive_file 0\nactive_file 0\n",
            "cpu.pressure": _PSI,
            "memory.pressure": _PSI,
        }
        for name, text in files.items():
            _write(os.path.join(path, name), text)
        self._groups.setdefault(path, 0)
        self._write_cpu(path, 0)

    @staticmethod
    def _write_cpu(path: str, usec: int) -> None:
        _write(
            os.path.join(path, "cpu.stat"),
            f"usage_usec {usec}\nuser_usec {usec}\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
        )

    # --- the kubelet's side -------------------------------------------------------------------------
    def add_pod(
        self, uid: str, qos: str, cpu_request_milli: int, memory: int, containers: tuple[str, ...] | list[str] = ()
    ) -> None:
        """A pod's group, its sandbox's and its containers' (`containers`: status containerIDs, runtime://id)."""
        if uid in self.pods:
            return
        dirs = self.layout.pod(uid, qos)  # type: ignore[arg-type]
        self._make(dirs, 2 if qos == "BestEffort" else milli_to_shares(cpu_request_milli))
        sandbox = dirs.child(self.layout.container_names(SANDBOX_ID)[0])
        self._make(sandbox, 2)
        self._groups.pop(dirs.cpu, None)
        self._groups.pop(sandbox.cpu, None)
        for cid in containers:
            child = dirs.child(self.layout.container_names(cid)[0])
            self._make(child, 2)
            self._groups.pop(child.cpu, None)
        self.pods[uid] = HostPod(uid, qos, dirs, memory=memory)
        _write(os.path.join(dirs.memory, "memory.current"), f"{memory}\n")
        _write(os.path.join(dirs.memory, "memory.stat"), f"anon {memory}\nfile 0\ninactive_file 0\nactive_file 0\n")
        self._write_memory()

    def remove_pod(self, uid: str) -> None:
        pod = self.pods.pop(uid, None)
        if pod is not None:
            shutil.rmtree(pod.dirs.cpu, ignore_errors=True)
            self._write_memory()

    # --- time ---------------------------------------------------------------------------------------
    def advance(self, seconds: float, cores: dict[str, float]) -> None:
        """`seconds` pass; pod `uid` burns `cores[uid]` cores (missing: none), the host `system_cores`."""
        groups = dict.fromkeys(self._groups, 0)
        for uid, pod in self.pods.items():
            usec = int(cores.get(uid, 0.0) * seconds * 1e6)
            if not usec:
                continue
            pod.usage_usec += usec
            self._write_cpu(pod.dirs.cpu, pod.usage_usec)
            groups[self.kubepods.cpu] += usec
            if pod.qos != "Guaranteed":
                groups[self.layout.qos(pod.qos).cpu] += usec  # type: ignore[arg-type]
        for path, usec in groups.items():
            if usec:
                self._groups[path] += usec
                self._write_cpu(path, self._groups[path])
        busy = min(
            self.ncpu * seconds, sum(cores.get(u, 0.0) for u in self.pods) * seconds + self.system_cores * seconds
        )
        self._busy += busy
        self._idle += self.ncpu * seconds - busy
        self._write_stat()

    def _write_stat(self) -> None:
        busy, idle = round(self._busy * CLK_TCK), round(self._idle * CLK_TCK)
        lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0"]
        lines += [f"cpu{i} {busy // self.ncpu} 0 0 {idle // self.ncpu} 0 0 0 0 0 0" for i in range(self.ncpu)]
        lines += ["intr 0", "ctxt 0", "btime 1700000000", "processes 1"]
        _write(os.path.join(self.proc_root, "stat"), "\n".join(lines) + "\n")

    def _write_memory(self) -> None:
        used = sum(p.memory for p in self.pods.values())
        _write(os.path.join(self.kubepods.memory, "memory.current"), f"{used}\n")
        _write(
            os.path.join(self.kubepods.memory, "memory.stat"), f"anon {used}\nfile 0\ninactive_file 0\nactive_file 0\n"
        )
        available = max(0, self.memory_total - used - 256 * 2**20)
        _write(
            os.path.join(self.proc_root, "meminfo"),
            f"MemTotal: {self.memory_total // 1024} kB\nMemFree: {available // 1024} kB\n"
            f"MemAvailable: {available // 1024} kB\n",
        )

    def cli_args(self) -> list[str]:
        return [
            "--cgroup-root",
            self.cgroup_root,
            "--kube-cgroup-root",
            "/",
            "--cgroup-driver",
            "cgroupfs",
            "--proc-root",
            self.proc_root,
        ]
