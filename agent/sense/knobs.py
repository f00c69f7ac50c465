"""The daemon's view of the knob files: read at each QoS reconcile, kept current by the writer in between.

`KnobSensor.read` is `agent.sense.snapshot.sense_cgroups` for the daemon: it remembers which knob files each
directory has (a cgroup's files do not change while it exists), so a reconcile costs one read per knob
file, not a directory listing per cgroup; it can refresh a subset of pods (those that changed) and
keeps everything in one mutable `belief` that the cgroup writer updates after each write.

`counterfactual()` is what `decide` sees: the belief with every knob the agent owns (journaled) shown at
its ORIGINAL value. The plan then lists every knob the agent still wants (applied only where the real
file differs) and leaves out those it no longer wants (a feature turned off, labels removed): these
are restored. One pure `decide` thus serves both applying and restoring.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from agent.cgroups.fs import FileReader, parse_pids
from agent.cgroups.layout import KubeLayout
from agent.knobs import merged
from agent.model import BlockDevice, CgroupDirs, CgroupState, PodCgroups, PodView
from agent.sense.blockdev import host_devices
from agent.sense.procfs import ProcFS
from agent.sense.snapshot import knob_names, qos_ancestors, resolve_pod_cgroups
from tidemark.apis import PodUID


class _Original(Protocol):
    @property
    def original(self) -> str: ...


class _OriginalKnob(_Original, Protocol):
    @property
    def path(self) -> str: ...

    @property
    def file(self) -> str: ...


class OriginalValues(Protocol):
    """What `counterfactual` reads of the journal (agent.act.statedir.Journal): the original value
    of every knob and process value the agent owns. A protocol, so sensing imports no executor."""

    @property
    def knobs(self) -> Mapping[tuple[str, str], _OriginalKnob]: ...

    @property
    def procs(self) -> Mapping[int, _Original]: ...

    def __len__(self) -> int: ...


class KnobSensor:
    def __init__(self, layout: KubeLayout, reader: FileReader, procfs: ProcFS, sys_root: str = "/sys") -> None:
        self.layout = layout
        self.sys_root = sys_root
        self.reader = reader
        self.procfs = procfs
        self.version = layout.hierarchy.knob_version
        self.pods: dict[PodUID, PodCgroups] = {}
        #: pods whose pod cgroup exists but kubelet has not finished it (no sandbox in it yet): left out of `pods`
        self.unfinished: set[PodUID] = set()
        #: kubelet's QoS-level directories (memory QoS writes its protection sums there), found at each full resolve
        self.ancestors: dict[str, CgroupDirs] = {}
        self.files: dict[str, dict[str, str]] = {}
        self.pids: dict[PodUID, tuple[int, ...]] = {}
        self.oom: dict[int, str] = {}
        #: the disks I/O QoS limits offline pods on (`agent.sense.blockdev`, set by the daemon at each full read)
        self.devices: tuple[BlockDevice, ...] = ()
        self.device_notes: tuple[str, ...] = ()
        self._present: dict[str, frozenset[str]] = {}
        self._owners: dict[str, PodUID] | None = None
        self._proc_owners: dict[int, str] | None = None
        self.reads = 0

    # --- sensing ------------------------------------------------------------------------------------

    def _read_dir(self, d: CgroupDirs, directory: str) -> dict[str, str] | None:
        present = self._present.get(directory)
        if present is None:
            try:
                present = knob_names(d, directory).intersection(os.listdir(directory))
            except OSError:
                return None
            self._present[directory] = frozenset(present)
        values: dict[str, str] = {}
        for name in present:
            text = self.reader.read(os.path.join(directory, name))
            self.reads += 1
            if text is None:
                self._present.pop(directory, None)  # the cgroup went away (or lost the file): list it again
                continue
            values[name] = text.strip()
        return values

    def resolve_devices(self, entries: Sequence[str]) -> None:
        """The disks I/O QoS limits (`io_qos.devices`; empty: automatic), from the host's mounts and sysfs."""
        self.devices, self.device_notes = host_devices(entries, self.procfs, self.layout.hierarchy, self.sys_root)

    def resolve(self, pods: Sequence[PodView], only: Iterable[PodUID] | None = None) -> None:
        """Find the pods' cgroups (all, or `only` those); pods without one here are left out."""
        self._owners = self._proc_owners = None
        if only is None:
            self.unfinished = set()
            self.pods = resolve_pod_cgroups(self.layout, pods, self.unfinished)
            self.ancestors = qos_ancestors(self.layout)
            return
        wanted = set(only)
        subset = [p for p in pods if p.uid in wanted]
        self.unfinished -= wanted
        found = resolve_pod_cgroups(self.layout, subset, self.unfinished)
        for uid in wanted:
            if uid in found:
                self.pods[uid] = found[uid]
            else:
                self.pods.pop(uid, None)

    def read(
        self,
        pods: Sequence[PodView],
        only: Iterable[PodUID] | None = None,
        need: Callable[[PodView], tuple[bool, bool]] | None = None,
    ) -> None:
        """Read the knob files (and offline pods' processes) of all pods, or of `only` those.

        `need(pod) -> (pod level, containers)` says which directories can matter to the plan (the QoS plan
        writes nothing for an online pod without CPU burst or v2 memory QoS, and nothing in an offline pod's
        containers unless it uses batch-* resources); the others are not read. Default: everything. The
        QoS-level ancestors (`ancestors`, memory QoS's sums) are read at every call.
        """
        wanted = None if only is None else set(only)
        live = {p.uid: p for p in pods}
        self._proc_owners = None
        for uid, pc in self.pods.items():
            if wanted is not None and uid not in wanted:
                continue
            pod = live.get(uid)
            pod_level, containers = need(pod) if need is not None and pod is not None else (True, True)
            dirs = ([pc.pod] if pod_level else []) + (list(pc.containers.values()) if containers else [])
            for d in dirs:
                self._read_all(d)
            if pod is not None and pod.offline:
                found = self._subtree_pids(pc.pod.memory)
                self.pids[uid] = found
                for pid in found:
                    value = self.procfs.oom_score_adj(pid)
                    if value is not None:
                        self.oom[pid] = value
        for d in self.ancestors.values():  # memory QoS's sums, the offline tier's quota on the BestEffort root
            self._read_all(d)
        if wanted is None:
            self._prune()

    def _read_all(self, d: CgroupDirs) -> None:
        """Every knob directory of `d` (cpu, memory, and v1's blkio where it is mounted)."""
        for directory in d.distinct():
            if not knob_names(d, directory):
                continue  # v1's cpuacct: no knob there
            values = self._read_dir(d, directory)
            if values is not None:
                self.files[directory] = values

    def _subtree_pids(self, directory: str) -> tuple[int, ...]:
        pids: list[int] = []
        for root, _dirs, files in os.walk(directory):
            if "cgroup.procs" in files:
                text = self.reader.read(os.path.join(root, "cgroup.procs"))
                if text:
                    pids.extend(parse_pids(text))
        return tuple(dict.fromkeys(pids))

    def _prune(self) -> None:
        dirs = {d for pc in self.pods.values() for cg in (pc.pod, *pc.containers.values()) for d in cg.distinct()}
        dirs |= {p for d in self.ancestors.values() for p in d.distinct()}
        for d in [d for d in self.files if d not in dirs]:
            del self.files[d]
        for d in [d for d in self._present if d not in dirs]:
            del self._present[d]
        for uid in [u for u in self.pids if u not in self.pods]:
            del self.pids[uid]
        live = {pid for pids in self.pids.values() for pid in pids}
        for pid in [p for p in self.oom if p not in live]:
            del self.oom[pid]

    # --- what decide sees -----------------------------------------------------------------------------

    def owner_of(self) -> dict[str, PodUID]:
        """directory -> pod UID, for every pod and container directory (cached until the next resolve)."""
        if self._owners is None:
            out: dict[str, PodUID] = {}
            for uid, pc in self.pods.items():
                for cg in (pc.pod, *pc.containers.values()):
                    for d in cg.distinct():
                        out[d] = uid
            self._owners = out
        return self._owners

    def proc_owner(self) -> dict[int, str]:
        if self._proc_owners is None:
            self._proc_owners = {pid: str(uid) for uid, pids in self.pids.items() for pid in pids}
        return self._proc_owners

    def state(self) -> CgroupState:
        return CgroupState(
            self.version,
            dict(self.pods),
            self.files,
            dict(self.pids),
            self.oom,
            dict(self.ancestors),
            self.devices,
            self.device_notes,
        )

    def counterfactual(self, journal: OriginalValues | None) -> CgroupState:
        """The belief with every owned knob (and process value) shown at its original value."""
        if journal is None or not len(journal):
            return self.state()
        files: dict[str, Mapping[str, str]] = dict(self.files)
        patched: dict[str, dict[str, str]] = {}
        for e in journal.knobs.values():
            path, file = e.path, e.file
            current = self.files.get(path)
            if current is None or file not in current:
                continue
            target = patched.get(path)
            if target is None:
                target = patched[path] = dict(current)
                files[path] = target
            target[file] = merged(file, target[file], e.original)  # a keyed knob: that key's line only
        oom: Mapping[int, str] = self.oom
        if journal.procs:
            oom = dict(self.oom)
            for pid, p in journal.procs.items():
                if pid in oom:
                    oom[pid] = p.original
        return CgroupState(
            self.version,
            dict(self.pods),
            files,
            dict(self.pids),
            oom,
            dict(self.ancestors),
            self.devices,
            self.device_notes,
        )
