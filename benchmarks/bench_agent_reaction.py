"""Agent reaction on the real cgroup v1 hierarchy (root): online CPU recovery and eviction latency.

The agent runs in-process with the DEFAULT configuration (1 s sampling, N = 3, decisions every 1 s, QoS
reconcile every 10 s and on pod events), an in-memory Node and Pods (the API is not what is measured;
an eviction call is recorded when the agent makes it), and a kubelet-like tree under a unique prefix
(tests/fixtures/cgroups.py's RealCgroupV1Tree: kubelet's shares; both pods Burstable with equal requests,
so without the agent they split a shared CPU 50/50). Processes are pinned to CPU 0, moved into their
groups first, and start working when the benchmark says "go" (the step is that write, no interpreter start).

1. Online CPU recovery, from an online load step until the online process gets >= 90 % of the CPU it
   demands (one core), measured from its cgroup's cpuacct.usage every 100 ms:
   a. step with the offline pod already known (its knobs applied at first sight);
   b. a new offline pod appears (cgroup, busy process, then the pod event, as kubelet reports it) while
      the online pod is busy: from its start until the online pod is back at >= 90 %.
2. Eviction latency, from a memory load step of an offline pod past the memory high watermark (700 MiB of
   a 1 GiB node) to the first eviction call; target <= N x period + 1 s = 4 s.

Run (root): python benchmarks/bench_agent_reaction.py [--trials 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.act.evictor import EvictResult  # noqa: E402
from agent.act.statedir import StateDir  # noqa: E402
from agent.cgroups.fs import FileReader  # noqa: E402
from agent.daemon.agent import Agent, AgentOptions  # noqa: E402
from agent.daemon.cluster import StaticCluster  # noqa: E402
from agent.daemon.configsource import ConfigSource  # noqa: E402
from agent.decide.ops import EvictPod  # noqa: E402
from agent.procfs import ProcFS  # noqa: E402
from tests.fixtures.cgroups import RealCgroupV1Tree  # noqa: E402
from tidemark.clock import SystemClock  # noqa: E402

GATED = r"""
import sys
size = int(sys.argv[1]); busy = sys.argv[2] == "busy"
sys.stdin.readline()                      # moved into our cgroups
sys.stdin.readline()                      # "go": the load step
blob = bytearray(size)
for i in range(0, size, 4096):
    blob[i] = 1
while busy:
    pass
sys.stdin.readline()
"""


class Gated:
    """A process pinned to a CPU, in a container's groups, that works only after `go()`."""

    def __init__(self, tree: RealCgroupV1Tree, uid: str, *, memory: int = 0, busy: bool = True, cpu: int = 0) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", GATED, str(memory), "busy" if busy else "idle"], stdin=subprocess.PIPE
        )
        os.sched_setaffinity(self.popen.pid, {cpu})
        for path in tree.pods[uid].containers["c"].distinct():
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(self.popen.pid))
        assert self.popen.stdin is not None
        self.popen.stdin.write(b"moved\n")
        self.popen.stdin.flush()
        tree.processes.append(self)  # type: ignore[arg-type]  # cleanup kills by pid
        self.pid = self.popen.pid

    def go(self) -> float:
        assert self.popen.stdin is not None
        t = time.monotonic()
        self.popen.stdin.write(b"go\n")
        self.popen.stdin.flush()
        return t

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, EvictPod]] = []

    def evict(self, op: EvictPod) -> EvictResult:
        self.calls.append((time.monotonic(), op))
        return EvictResult("evicted", status=201)


class NodeSink:
    def __init__(self, cluster: StaticCluster) -> None:
        self.cluster = cluster

    def patch(self, body: Any) -> dict[str, Any] | None:
        node = json.loads(json.dumps(self.cluster.node()))
        ann = node["metadata"].setdefault("annotations", {})
        for k, v in ((body.get("metadata") or {}).get("annotations") or {}).items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self.cluster.set_node(node)
        return node

    def patch_status(self, body: Any) -> dict[str, Any]:
        return self.cluster.node() or {}


def node_obj(memory: str = "8Gi", cpu: str = "2") -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "bench",
            "uid": "bench",
            "resourceVersion": "1",
            "labels": {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"},
            "annotations": {},
        },
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod_obj(uid: str, name: str, cid: str, *, offline: bool, cpu_request: str | None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu_request}} if cpu_request else {}
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "1",
            "annotations": {"volcano.sh/qos-level": "BE"} if offline else {},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "bench", "containers": [{"name": "c", "resources": resources}]},
        "status": {
            "phase": "Running",
            "qosClass": "Burstable" if cpu_request else "BestEffort",
            "containerStatuses": [{"name": "c", "containerID": f"containerd://{cid}"}],
        },
    }


class Bench:
    def __init__(self, tmp: str, node: dict[str, Any]) -> None:
        self.tree = RealCgroupV1Tree(allocatable_cpu_milli=2000)
        self.cluster = StaticCluster(node, [])
        self.recorder = Recorder()
        self.state = StateDir(os.path.join(tmp, secrets.token_hex(4)), fsync=True)
        assert self.state.try_lock()
        self.state.load()
        reader = FileReader()
        self.agent = Agent(
            node_name="bench",
            layout=self.tree.layout,
            procfs=ProcFS("/proc", reader),
            reader=reader,
            clock=SystemClock(),
            cluster=self.cluster,
            config=ConfigSource(None),
            state=self.state,
            node_writer=NodeSink(self.cluster),
            evictor=self.recorder,
            options=AgentOptions(threaded_api=True),
        )
        self.thread: threading.Thread | None = None

    def pod(
        self, name: str, *, offline: bool, cpu_request: str | None, announce: bool = True
    ) -> tuple[str, dict[str, Any]]:
        uid = f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}"
        cid = secrets.token_hex(32)
        milli = int(cpu_request[:-1]) if cpu_request else 0
        self.tree.add_pod(
            uid, "Burstable" if cpu_request else "BestEffort", {"c": f"containerd://{cid}"}, cpu_request_milli=milli
        )
        obj = pod_obj(uid, name, cid, offline=offline, cpu_request=cpu_request)
        if announce:
            self.cluster.put_pod(obj)
        return uid, obj

    def start(self) -> None:
        self.agent.start()
        self.thread = threading.Thread(target=self.agent.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.agent.stop()
        if self.thread is not None:
            self.thread.join(10)
        self.agent.shutdown()
        self.state.unlock()
        self.tree.cleanup()

    def usage_ns(self, uid: str) -> int:
        with open(os.path.join(self.tree.pods[uid].dirs.cpuacct, "cpuacct.usage")) as f:
            return int(f.read())


def recovery(
    b: Bench, uid: str, other: str, t0: float, timeout: float = 20.0, window: float = 0.1
) -> dict[str, float | None]:
    """From t0 until the end of the first 100 ms window in which the online pod got >= 90 % of the CPU.

    "The CPU" is what the two pinned pods got together (cpuacct.usage of both): this machine is shared and
    other sessions' processes land on the same CPU at times, taking their part from both pods alike, so the
    online pod's fraction of the wall clock is recorded too (`absolute`) but the criterion is its share.
    """
    prev_t, prev, prev_o = time.monotonic(), b.usage_ns(uid), b.usage_ns(other)
    while time.monotonic() - t0 < timeout:
        time.sleep(window)
        t, u, o = time.monotonic(), b.usage_ns(uid), b.usage_ns(other)
        mine, theirs = (u - prev) / 1e9, (o - prev_o) / 1e9
        if mine + theirs > 0.2 * (t - prev_t) and mine / (mine + theirs) >= 0.9:
            return {"seconds": t - t0, "absolute": mine / (t - prev_t)}
        prev_t, prev, prev_o = t, u, o
    return {"seconds": None, "absolute": None}


def wait(cond: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def knob(b: Bench, uid: str, file: str) -> str:
    with open(os.path.join(b.tree.pods[uid].dirs.cpu, file)) as f:
        return f.read().strip()


def trial_step(tmp: str) -> dict[str, float | None]:
    b = Bench(tmp, node_obj())
    try:
        web, _ = b.pod("web", offline=False, cpu_request="500m")
        etl, _ = b.pod("etl", offline=True, cpu_request="500m")
        online = Gated(b.tree, web)
        offline = Gated(b.tree, etl)
        offline.go()
        b.start()
        assert wait(lambda: knob(b, etl, "cpu.idle") == "1", 15), "offline knobs"
        time.sleep(1.0)
        t0 = online.go()
        r = recovery(b, web, etl, t0)
        return {"recovery_s": r["seconds"], "absolute": r["absolute"]}
    finally:
        b.stop()


def trial_new_offline(tmp: str) -> dict[str, float | None]:
    b = Bench(tmp, node_obj())
    try:
        web, _ = b.pod("web", offline=False, cpu_request="500m")
        online = Gated(b.tree, web)
        online.go()
        b.start()
        time.sleep(2.5)  # samples, first decision
        etl, obj = b.pod("etl", offline=True, cpu_request="500m", announce=False)
        offline = Gated(b.tree, etl)
        t0 = offline.go()
        b.cluster.put_pod(obj)  # kubelet reports the running pod: the pod event
        r = recovery(b, web, etl, t0)
        knobs_at = wait(lambda: knob(b, etl, "cpu.idle") == "1", 5)
        react = b.agent.stats.reaction.get("qos")
        first_qos = react.snapshot()[1] / react.count if react and react.count else None
        return {
            "recovery_s": r["seconds"],
            "absolute": r["absolute"],
            "knobs": 1.0 if knobs_at else 0.0,
            # the agent's own figure: pod event -> knobs written (mean over its QoS writes in the trial)
            "qos_reaction_s": first_qos,
        }
    finally:
        b.stop()


def trial_eviction(tmp: str) -> dict[str, float | None]:
    b = Bench(tmp, node_obj(memory="1Gi"))
    try:
        b.pod("web", offline=False, cpu_request="100m")
        hog, _ = b.pod("hog", offline=True, cpu_request=None)
        proc = Gated(b.tree, hog, memory=700 * 2**20, busy=False, cpu=1)
        b.start()
        time.sleep(2.5)
        t0 = proc.go()
        ok = wait(lambda: bool(b.recorder.calls), 15)
        latency = b.recorder.calls[0][0] - t0 if ok else None
        react = b.agent.stats.reaction.get("evict")
        return {
            "eviction_s": latency,
            "victim_ok": 1.0 if ok and b.recorder.calls[0][1].name == "hog" else 0.0,
            "agent_trigger_to_call_s": (react.snapshot()[1] / react.count) if react and react.count else None,
        }
    finally:
        b.stop()


def summary(values: list[float | None]) -> dict[str, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "max": None, "n": 0}
    return {"median": round(statistics.median(got), 3), "max": round(max(got), 3), "n": len(got)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.access("/sys/fs/cgroup/cpu", os.W_OK):
        print("bench_agent_reaction: needs root and the cgroup v1 cpu hierarchy; skipped")
        return 0
    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="tidemark-reaction-") as tmp:
        step = [trial_step(tmp) for _ in range(args.trials)]
        new = [trial_new_offline(tmp) for _ in range(args.trials)]
        ev = [trial_eviction(tmp) for _ in range(args.trials)]
    figures = {
        "recovery_step_with_known_offline_pod_s": summary([t["recovery_s"] for t in step]),
        "recovery_new_offline_pod_s": summary([t["recovery_s"] for t in new]),
        "online_fraction_of_wall_at_recovery": summary([t["absolute"] for t in step + new]),
        "agent_pod_event_to_knobs_s": summary([t["qos_reaction_s"] for t in new]),
        "eviction_latency_s": summary([t["eviction_s"] for t in ev]),
        "agent_trigger_sample_to_eviction_call_s": summary([t["agent_trigger_to_call_s"] for t in ev]),
        "eviction_victim_correct": all(t["victim_ok"] == 1.0 for t in ev),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"agent reaction on real cgroup v1, default config, {args.trials} trials each:")
        for k, v in figures.items():
            print(f"  {k}: {v}")
    worst_recovery = max(
        (
            v
            for v in (
                figures["recovery_step_with_known_offline_pod_s"]["max"],  # type: ignore[index]
                figures["recovery_new_offline_pod_s"]["max"],
            )
            if v is not None
        ),
        default=None,
    )  # type: ignore[index]
    worst_eviction = figures["eviction_latency_s"]["max"]  # type: ignore[index]
    ok = worst_recovery is not None and worst_recovery <= 1.0 and worst_eviction is not None and worst_eviction <= 4.0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
