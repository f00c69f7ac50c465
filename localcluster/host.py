"""What every local cluster does on this machine: run a command, wait for a condition, find and stop a process
by pid and command line, read mounts, cgroups and sysctls, and build the kube binaries once.

Shared by the real node (localcluster/realnode.py), the v2 node (localcluster/v2node.py), the scenario
(localcluster/realscenario.py), the benchmarks and the tests; it knows nothing of any one cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
KUBE_SCRIPT: Final = REPO / "hack" / "kube-apiserver.sh"
IMAGE_SCRIPT: Final = REPO / "hack" / "image.sh"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Unsupported(Exception):
    """This machine cannot run the real node (the reason is the message)."""


def cache_bin() -> Path:
    """Where hack/kube-apiserver.sh keeps the kube 1.20.2 binaries it built ($TIDEMARK_CACHE or ~/.cache/tidemark)."""
    root = os.environ.get("TIDEMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tidemark"
    )
    return Path(root) / "kube-1.20.2" / "bin"


def run(argv: list[str], timeout: float = 120, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`argv` with its output captured as text; with `check`, a non-zero exit raises with the end of its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def wait_until(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> float:
    """Polls `cond`; returns the seconds it took; TimeoutError naming `what`."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - t0


def ensure_kube_binaries(log: Callable[[str], None]) -> dict[str, str]:
    """kube-apiserver, kubelet, kubectl, kube-controller-manager, kube-scheduler (built once, cached)."""
    targets = {
        "kube-apiserver": "build",
        "kubelet": "build-kubelet",
        "kubectl": "build-kubectl",
        "kube-controller-manager": "build-controller-manager",
        "kube-scheduler": "build-scheduler",
    }
    out: dict[str, str] = {}
    for name, sub in targets.items():
        path = cache_bin() / name
        if not path.is_file():
            log(f"building {name} from Debian's kubernetes source (once per machine; hack/kube-apiserver.sh {sub})")
            t0 = time.monotonic()
            run(["bash", str(KUBE_SCRIPT), sub], timeout=3600)
            log(f"  {name} built in {time.monotonic() - t0:.0f} s")
        out[name] = str(path)
    return out


def read_sysctl(name: str) -> str:
    return Path("/proc/sys", name).read_text().strip()


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path("/proc/sys", name).write_text(value)


def mounts_under(prefixes: list[str]) -> list[str]:
    """Mount points under any of `prefixes`, deepest first (from /proc/self/mountinfo)."""
    found: list[str] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) < 5:
            continue
        mp = parts[4].replace("\\040", " ")
        if any(mp == p or mp.startswith(p.rstrip("/") + "/") for p in prefixes):
            found.append(mp)
    return sorted(set(found), key=lambda m: (-m.count("/"), m))


def cgroup_rmdir_tree(root: Path) -> None:
    """rmdir `root` and its children leaf-first (a group with processes stays; reported by the caller)."""
    if not root.is_dir():
        return
    for d, _dirs, _files in sorted(os.walk(root), key=lambda t: -t[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(d)


def cgroup_pids(root: Path) -> list[int]:
    pids: list[int] = []
    if not root.is_dir():
        return pids
    for d, _dirs, files in os.walk(root):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids += [int(x) for x in Path(d, "cgroup.procs").read_text().split()]
    return pids


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_pid(pid: int, marker: str, grace: float = 10.0) -> None:
    """TERM, then KILL after `grace`, only while the command line still names `marker`."""
    if not alive(pid) or marker not in cmdline(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])



def pin_bridge_address(bridge: str, netns: str | None = None) -> str:
    """Set `bridge`'s MAC to its own current value, so the kernel stops choosing it: a bridge whose address was
    never set takes the lowest MAC of its ports, and when the pod whose veth held it is deleted the address moves.
    Every other pod's neighbour entry for the gateway then names a MAC nobody answers, and the host cannot reach
    any pod (probes, scrapes) until the entries fail over: 40 s and more (docs/testing.md, "The bridge's
    address"). The CNI bridge plugin does the same for a bridge it creates; this one is created before it.
    Returns the address."""
    ip = ["ip", "-n", netns] if netns else ["ip"]
    mac = str(json.loads(run([*ip, "-j", "link", "show", "dev", bridge]).stdout)[0]["address"])
    run([*ip, "link", "set", "dev", bridge, "address", mac])
    return mac
