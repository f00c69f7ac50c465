"""The local cluster's watchdog: cleans up if the cluster's own process dies without tearing down (kill -9).

Started by `LocalCluster.up()` in its own session; polls the owner pid every second. When the owner
is gone: SIGTERM to the programs listed in `<run dir>/components.pids` (the pod runner, the agent,
the scheduler) whose command line still names the run directory (never a recycled pid), SIGKILL
after 10 s, `tidemark-agent restore` on the agent's state dir, then the cgroup prefix is swept (processes
killed by pid from cgroup.procs, groups removed leaf-first) and etcd + kube-apiserver are stopped.
A normal teardown stops the watchdog last.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE = 10.0


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _components(run_dir: Path) -> list[int]:
    """The pids in `components.pids` whose command line still names the run directory."""
    out: list[int] = []
    try:
        lines = (run_dir / "components.pids").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        pid = int(line.split()[0]) if line.split() and line.split()[0].isdigit() else 0
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if str(run_dir) in cmdline:
            out.append(pid)
    return out


def cleanup(run_dir: Path, prefix: str, agent: str | None, cgroup_root: str = "/sys/fs/cgroup") -> None:
    pids = _components(run_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    print(f"watchdog: stopped {len(pids)} program(s) of {run_dir}", flush=True)
    if agent:
        done = subprocess.run(
            [agent, "restore", "--state-dir", str(run_dir / "agent-state"), "--cgroup-root", cgroup_root,
             "--kube-cgroup-root", f"/{prefix}", "--cgroup-driver", "cgroupfs"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        print(f"watchdog: tidemark-agent restore: exit {done.returncode} {done.stdout.strip()}", flush=True)
    from localcluster.cgroups import KubeletCgroups

    tree = KubeletCgroups(prefix, cgroup_root=cgroup_root, allocatable_cpu_milli=0, allocatable_memory=0)
    left = tree.teardown()
    print(f"watchdog: cgroups under {prefix} {'removed' if not left else 'LEFT: ' + ', '.join(left)}", flush=True)
    script = Path(__file__).resolve().parents[1] / "hack" / "kube-apiserver.sh"
    if script.exists() and (run_dir / "kube" / "env").exists():
        subprocess.run(["bash", str(script), "stop", str(run_dir / "kube")], check=False)
        print("watchdog: control plane stopped", flush=True)


def watch(owner: int, run_dir: Path, prefix: str, agent: str | None) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the owner's business
    while alive(owner):
        time.sleep(1.0)
    print(f"watchdog: owner {owner} is gone without tearing down; cleaning up", flush=True)
    cleanup(run_dir, prefix, agent)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(watch(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
