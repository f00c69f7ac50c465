"""`make run`'s local colocation cluster, end to end, with its real effects asserted.

Runs `python -m localcluster run --once` (what `make run` runs): etcd + kube-apiserver 1.20.2,
the local pod runner (NOT a kubelet), `tidemark-agent run` and `tidemark-scheduler run` as
subprocesses with their own RBAC tokens, and the scenario (localcluster.scenario) with its
short settings and CPU watermarks 30/15 % (the demo pods all share CPU 0, at most 50 % of a 2-CPU
node). The agent runs with examples/local-agent-config.yaml plus `capacity.ratio.cpu: 1.0`: the
offline budget B = A * ratio - U_non counts the whole machine's non-offline usage, and other test
suites running on the same machine would otherwise keep B at 0 for minutes (placement and
re-admission would then measure them, not Tidemark).

Asserted from the measurements the scenario records and from the machine afterwards:
- the offline pods are placed on the oversubscribed node and run;
- an online spike takes the shared CPU back: online >= 90 % of the pods' CPU time on that CPU
  within 1 s (cgroup counters read every 100 ms; shares, not absolute cores, so that other tests
  loading the machine do not make it flaky);
- a sustained spike past the high watermark marks the node (before the first eviction, by etcd
  revision) and evicts the offline pods; no online pod is evicted; offline work is admitted again
  once the load falls under the low watermark;
- teardown is clean: no cgroup of the run's prefix in any hierarchy, no process left in it, the
  apiserver and etcd stopped.
Skips unless root with cgroup v1 cpu/cpuacct/memory, and unless kube-apiserver can be found or
built (under CI=true a missing apiserver is a failure, as for every `kube` test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster.watchdog import alive as _alive
from tests.fixtures.kubeapi import _locate_binaries

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (cgroups under /sys/fs/cgroup, moving processes)"
    for c in ("cpu", "cpuacct", "memory"):
        if not os.access(f"/sys/fs/cgroup/{c}", os.W_OK):
            return f"/sys/fs/cgroup/{c} is absent or not writable"
    return None


def _processes_in(prefix: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cgroup") as f:
                    text = f.read()
            except OSError:
                continue
            if f"/{prefix}/" in text or f"/{prefix}\n" in text:
                out.append(int(entry))
    return out


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_local_cluster_scenario(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    _locate_binaries(pytestconfig)
    results = tmp_path / "results.json"
    config = tmp_path / "agent.yaml"
    example = (REPO / "examples" / "local-agent-config.yaml").read_text()
    assert "\ncapacity:\n" in example
    config.write_text(example.replace("\ncapacity:\n", "\ncapacity:\n  ratio: {cpu: 1.0}\n", 1))
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, "-m", "localcluster", "run", "--once", "--short",
            "--run-dir", str(run_dir), "--results", str(results),
            "--agent-port", "0", "--scheduler-port", "0", "--cpu-watermarks", "30/15", "--no-build",
            "--agent-config", str(config),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-60:])
    assert results.exists(), f"no results (exit {done.returncode}):\n{tail}"
    doc: dict[str, Any] = json.loads(results.read_text())
    fig = doc["figures"]
    checks = {c["name"]: c for c in doc.get("checks") or []}
    print(json.dumps({"elapsed_seconds": round(elapsed, 1), "figures": fig, "timings": doc.get("timings")}, indent=1))

    def passed(name: str) -> None:
        assert name in checks, f"check {name!r} did not run: {doc.get('error')}\n{tail}"
        assert checks[name]["ok"], f"{name}: {checks[name]['detail']}\n{tail}"

    passed("offline pods placed on the oversubscribed node")
    passed("online takes the CPU back within 1 s")
    assert fig["cpu_recovery_seconds"] is not None and fig["cpu_recovery_seconds"] <= 1.0
    assert fig["online_share_during_spike"] >= 0.90
    passed("a brief spike evicts nothing")
    passed("sustained spike past the high watermark evicts the offline pods")
    passed("node marked before the first eviction")  # DESIGN: the Node is patched before the first eviction call
    assert fig["eviction_mark_seconds"] is not None and fig["eviction_seconds"] is not None
    passed("no offline pod admitted while evicting")
    passed("offline work admitted again after the load fell")
    passed("online pod never evicted")
    assert doc["ok"] and done.returncode == 0, f"exit {done.returncode}: {doc.get('error')}\n{tail}"

    # Clean teardown, checked on the machine itself.
    teardown = doc["teardown"]
    assert teardown["clean"] and teardown["leftover_cgroups"] == [], teardown
    assert teardown["restore_exit"] == 0, teardown
    prefix = doc["prefix"]
    left = [p for c in ("cpu", "cpuacct", "memory") if (p := Path("/sys/fs/cgroup", c, prefix)).exists()]
    assert left == [], f"cgroups left behind: {left}"
    assert _processes_in(prefix) == []
    env = (run_dir / "kube" / "env.stopped").read_text()
    keys = ("KUBE_APISERVER_PID", "ETCD_PID")
    pids = [int(line.split("=", 1)[1]) for line in env.splitlines() if line.split("=")[0] in keys]
    assert pids and not any(_alive(p) for p in pids), f"apiserver/etcd still running: {pids}"
