"""The agent's hierarchy detection against real subtree bind mounts (the kernel's own mountinfo).

The DaemonSet bind-mounts only the kubepods subtrees (`/sys/fs/cgroup/<ctrl>/kubepods` at
`<cgroup-root>/<ctrl>/kubepods`); here the same is done on this machine's real hierarchies, in a private
mount namespace (`unshare --mount`: the mounts vanish with the child) with a unique group in place of
kubepods: v1 (cpu, cpuacct, memory) and the host's cgroup2 mount (`/sys/fs/cgroup/unified`, a real v2
hierarchy even with no controller enabled). The child runs `detect_hierarchy` on its own
/proc/self/mountinfo and the layout's kubepods directory must be the mounted group, seen through the mount.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.cgroup

CG = Path("/sys/fs/cgroup")
CHILD = r"""
import json, os, subprocess, sys
from agent.cgroups.mounts import detect_hierarchy
root, binds = sys.argv[1], json.loads(sys.argv[2])
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
for src, dst in binds:
    os.makedirs(dst, exist_ok=True)
    subprocess.run(["mount", "--bind", src, dst], check=True)
with open("/proc/self/mountinfo") as f:
    h = detect_hierarchy(root, f.read())
print(json.dumps({"version": h.version, "source": h.source,
                  "dirs": {c: h.dir_for(c) for c in ("cpu", "cpuacct", "memory")}}))
"""


def _usable() -> str:
    if os.geteuid() != 0:
        return "needs root (mount, cgroup mkdir)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    if not os.access(CG / "cpu", os.W_OK):
        return "needs the writable cgroup v1 cpu hierarchy"
    return ""


@pytest.fixture
def group() -> Iterator[str]:
    reason = _usable()
    if reason:
        pytest.skip(reason)
    name = f"tidemark-test-mounts-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        for ctrl in ("cpu", "cpuacct", "memory", "unified"):
            d = CG / ctrl / name
            if d.is_dir():
                os.rmdir(d)


def detect_in_private_ns(root: Path, binds: list[tuple[str, str]]) -> dict[str, object]:
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        ["unshare", "--mount", sys.executable, "-c", CHILD, str(root), json.dumps(binds)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_v1_subtree_binds_map_back_to_their_hierarchies(group: str, tmp_path: Path) -> None:
    binds = []
    for ctrl in ("cpu", "cpuacct", "memory"):
        (CG / ctrl / group).mkdir()
        binds.append((str(CG / ctrl / group), str(tmp_path / ctrl / group)))
    got = detect_in_private_ns(tmp_path, binds)
    assert got["source"] == "mountinfo" and got["version"] == "v1"
    assert got["dirs"] == {c: str(tmp_path / c) for c in ("cpu", "cpuacct", "memory")}


def test_v2_subtree_bind_is_the_unified_root(group: str, tmp_path: Path) -> None:
    unified = CG / "unified"
    if not (unified / "cgroup.controllers").is_file():
        pytest.skip("no cgroup2 mount at /sys/fs/cgroup/unified")
    (unified / group).mkdir()
    got = detect_in_private_ns(tmp_path, [(str(unified / group), str(tmp_path / group))])
    assert got["source"] == "mountinfo" and got["version"] == "v2"
    assert got["dirs"] == {c: str(tmp_path) for c in ("cpu", "cpuacct", "memory")}
