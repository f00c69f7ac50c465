"""Pod-level cgroups: which directories under kubepods belong to a pod, and which processes run in one.

The agent writes knobs into pods' groups (the pod's own and its containers') and `oom_score_adj` only of the
processes listed in them; the one exception is v2 memory QoS, which sets `memory.min`/`memory.low` on the
kubepods group and the Burstable group too (a child's protection is bounded by its parent's:
`agent.decide.memqos`), and the offline tier's CPU quota on the BestEffort group (`agent.decide.tier`).
A journal entry naming anything else (the kubepods group's limits, a QoS class group's
shares, a host process) cannot have come from the agent, so `restore` and `replay` leave it alone
(`agent.act.cgroup_writer`). Pod-level means, relative to a kubepods directory:

- cgroupfs: `pod<uid>/...` (Guaranteed) or `burstable|besteffort/pod<uid>/...`;
- systemd: `<prefix>-pod<uid>.slice/...` or `<prefix>-burstable|besteffort.slice/<prefix>-...-pod<uid>.slice/...`
  (`kubepods-burstable-pod<uid_>.slice`; with a kubelet `--cgroup-root` of `/kubelet.slice` the prefix is
  `kubelet-kubepods`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from typing import Final

_POD: Final = re.compile(r"pod[0-9A-Za-z_-]+|[0-9A-Za-z_.-]+-pod[0-9A-Za-z_-]+\.slice")
_QOS: Final = re.compile(r"burstable|besteffort|[0-9A-Za-z_.-]+-(burstable|besteffort)\.slice")
#: kubepods/<qos>/<pod>/<container>: nothing the agent manages is deeper than a container's own group
_MAX_DEPTH: Final = 3
#: the knobs the agent also writes on kubepods and its QoS class groups (v2 memory QoS, on ancestors)
ANCESTOR_KNOBS: Final = frozenset({"memory.min", "memory.low"})
#: the knobs the agent also writes on the BestEffort QoS group: the offline tier's CPU quota (agent.decide.tier)
#: and its memory guard (agent.decide.memguard)
TIER_KNOBS: Final = frozenset({"cpu.cfs_quota_us", "cpu.max", "memory.limit_in_bytes", "memory.high"})
_BESTEFFORT: Final = re.compile(r"besteffort|[0-9A-Za-z_.-]+-besteffort\.slice")


def _relative(path: str, roots: Sequence[str]) -> list[str] | None:
    norm = os.path.normpath(path)
    for root in roots:
        r = os.path.normpath(root)
        if norm.startswith(r.rstrip("/") + "/"):
            return norm[len(r.rstrip("/")) + 1 :].split("/")
    return None


def pod_level(path: str, roots: Sequence[str]) -> bool:
    """`path` is a pod's cgroup directory (or a container's below it) under one of the kubepods `roots`."""
    parts = _relative(path, roots)
    if not parts:
        return False
    first = 1 if _QOS.fullmatch(parts[0]) else 0
    return len(parts) > first and _POD.fullmatch(parts[first]) is not None


def restorable(path: str, file: str, roots: Sequence[str]) -> bool:
    """A journaled `<path>/<file>` the agent can have written: pod-level, or an ancestor knob on kubepods or on
    a QoS class group directly below it."""
    if pod_level(path, roots):
        return True
    if file in TIER_KNOBS:
        parts = _relative(path, roots)
        return parts is not None and len(parts) == 1 and _BESTEFFORT.fullmatch(parts[0]) is not None
    if file not in ANCESTOR_KNOBS:
        return False
    norm = os.path.normpath(path)
    if any(norm == os.path.normpath(r) for r in roots):
        return True
    parts = _relative(path, roots)
    return parts is not None and len(parts) == 1 and _QOS.fullmatch(parts[0]) is not None


def _pod_dirs(roots: Sequence[str]) -> Iterator[str]:
    """Every pod-level directory under `roots` (pods and their containers), without following symlinks."""
    for root in roots:
        stack = [(os.path.normpath(root), 0)]
        while stack:
            path, depth = stack.pop()
            if depth and pod_level(path, roots):
                yield path
            if depth >= _MAX_DEPTH:
                continue
            try:
                with os.scandir(path) as entries:
                    stack.extend((e.path, depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
            except OSError:
                continue


def pod_pids(roots: Sequence[str]) -> frozenset[int]:
    """The PIDs listed in the `cgroup.procs` of the pod-level groups under `roots` (host PIDs: hostPID)."""
    out: set[int] = set()
    for path in _pod_dirs(roots):
        try:
            with open(os.path.join(path, "cgroup.procs"), "rb") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        out.update(int(t) for t in text.split() if t.isdigit())
    return frozenset(out)
