"""Agent cost per cycle at 110 pods: CPU (fraction of one core) and RSS.

Setup: a fake kubelet tree in a tmp dir (cgroup v1, cgroupfs, kubelet's layout and values) with 110 pods
(one container each; a third offline, half of those Burstable so they get CFS quota suppression), an
in-memory Node and Pods, the default configuration (1 s sampling, decisions every 1 s, capacity and QoS
reconcile every 10 s, 60 s window), the real state dir (journal fsync'd) and the Kubernetes client
imported as the live daemon has it. Time is a FakeClock: each cycle = one second of agent time; the pods'
counters move between cycles (outside the measurement). One pod changes every 10 s (a pod event).

Measured: `time.process_time()` around each `Agent.step()` (the agent's own CPU: sampling reads,
decide, knob writes, journal), summed over CYCLES cycles after a 70-cycle warm-up (a full window), and
the process RSS at the end (VmRSS). CPU per 1-second cycle / 1 s = the fraction of one core.

`--live SECONDS` measures the real command end to end instead: a kube-apiserver + etcd started by
hack/kube-apiserver.sh, the Node and 110 Pods in it (bound, Running, container IDs naming the fake
tree's groups), and `tidemark-agent run` as a child process pointed at the fake tree; its CPU
(utime + stime from /proc/<pid>/stat) over the last SECONDS - 15 s and its RSS at the end.

`--arm baseline|profile` and `--compare ROUNDS` measure what the usage profiles cost (docs/capacity-prediction.md,
"Cost"): `baseline` runs with the profiles switched off (their fold never due) and `capacity.policy: window`: the
agent as before them; `profile` with `capacity.policy: profile` and profiles pre-filled as after days of history
(`--profile-buckets` buckets in each pod's CPU and memory histograms and in each of the node's 48 hourly ones;
`all` fills every bucket, the bound). The pods were created "2024-01-01", after the fake clock's time: with
`capacity.profile.cold_start` set they would all be in their cold start, but it is 0 (off) by default, so the
estimate reads no pod's profile (the node's hourly slots it does). `--compare` runs the two arms in turn in fresh
processes, ROUNDS times each (order alternating), and prints the medians and the profile's share. Over the 300 measured
cycles the profile folds five times and checkpoints once (every 5 minutes).

Run: python benchmarks/bench_agent_cycle.py [--pods 110] [--cycles 300] [--live 75] [--arm A] [--compare 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
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
from agent.sense.procfs import ProcFS  # noqa: E402
from tests.fixtures.cgroups import GiB, KubeletCgroupTree  # noqa: E402
from tidemark.clock import FakeClock  # noqa: E402


class NullWriter:
    def __init__(self, cluster: StaticCluster) -> None:
        self.cluster = cluster
        self.calls = 0

    def write(self, spec: object) -> dict[str, object]:
        self.calls += 1
        return self.cluster.node() or {}


class NullEvictor:
    def evict(self, op: EvictPod) -> EvictResult:
        return EvictResult("evicted")


class FastCounters:
    """Moves the counters the agent reads (each pod's and kubepods' cpuacct.usage, /proc/stat) by plain writes.

    The fixture's `advance` also keeps the QoS-level groups consistent, which the agent never reads; this
    keeps the benchmark's own time down (its cost is outside the measurement either way).
    """

    def __init__(self, tree: KubeletCgroupTree, cores: dict[str, float]) -> None:
        self.tree = tree
        self.cores = cores
        self.ns = {uid: 0 for uid in cores}
        self.total = 0
        self.ticks = 0

    def advance(self, seconds: float) -> None:
        import os

        for uid, c in self.cores.items():
            self.ns[uid] += int(c * seconds * 1e9)
            d = self.tree.pods[uid].dirs
            with open(os.path.join(d.cpuacct, "cpuacct.usage"), "w") as f:
                f.write(str(self.ns[uid]))
        self.total += int(sum(self.cores.values()) * seconds * 1e9)
        with open(os.path.join(self.tree.kubepods.cpuacct, "cpuacct.usage"), "w") as f:
            f.write(str(self.total))
        self.ticks += int((sum(self.cores.values()) + 2.0) * seconds * 100)
        with open(os.path.join(self.tree.proc_root, "stat"), "w") as f:
            f.write(f"cpu  {self.ticks} 0 0 {self.ticks * 3} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def pod_obj(i: int, uid: str, cid: str, offline: bool, burstable: bool) -> dict[str, object]:
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"}} if burstable else {}
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"pod-{i}",
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "1",
            "annotations": {"volcano.sh/qos-level": "BE"} if offline else {},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": resources}]},
        "status": {
            "phase": "Running",
            "qosClass": "Burstable" if burstable else "BestEffort",
            "containerStatuses": [{"name": "c", "containerID": f"containerd://{cid}"}],
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--live", type=float, metavar="SECONDS", help="run the real command against a real apiserver")
    ap.add_argument(
        "--arm",
        choices=("default", "baseline", "profile"),
        default="default",
        help="baseline: usage profiles off; profile: capacity.policy profile, profiles pre-filled",
    )
    ap.add_argument("--profile-buckets", default="40", help="buckets per pre-filled histogram, or `all`")
    ap.add_argument("--compare", type=int, metavar="ROUNDS", help="baseline vs profile, interleaved, medians")
    args = ap.parse_args()
    if args.live:
        return live(args.pods, args.live, args.json)
    if args.compare:
        return compare(args.compare, args.pods, args.cycles, args.profile_buckets)

    import importlib

    for module in ("tidemark.kube.client", "tidemark.kube.events", "tidemark.kube.reflector"):
        importlib.import_module(module)  # the live daemon's memory includes the Kubernetes client

    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp:
        tree, pods, cores, node = _fake_node(Path(tmp), args.pods)
        clock = FakeClock()
        cluster = StaticCluster(node, pods, clock=clock.monotonic)
        state = StateDir(str(Path(tmp) / "state"))
        assert state.try_lock()
        state.load()
        config_path = _arm_config(args.arm, Path(tmp), state, list(cores), clock.wall(), args.profile_buckets)
        reader = FileReader()
        agent = Agent(
            node_name="n1",
            layout=tree.layout,
            procfs=ProcFS(tree.proc_root, reader, clk_tck=100),
            reader=reader,
            clock=clock,
            cluster=cluster,
            config=ConfigSource(config_path),
            state=state,
            node_writer=NullWriter(cluster),
            evictor=NullEvictor(),
            options=AgentOptions(threaded_api=False),
        )
        if config_path is not None:
            assert agent.config_source.load().accepted
        agent.start()
        counters = FastCounters(tree, cores)
        per_cycle: list[float] = []
        warmup = 70
        for cycle in range(warmup + args.cycles):
            clock.advance(1.0)
            counters.advance(1.0)
            if cycle % 10 == 5:  # a pod event every 10 s
                p = pods[cycle % len(pods)]
                p = json.loads(json.dumps(p))
                p["metadata"]["resourceVersion"] = str(cycle)
                cluster.put_pod(p)
            t0 = time.process_time()
            agent.step()
            spent = time.process_time() - t0
            if cycle >= warmup:
                per_cycle.append(spent)
        rss = rss_bytes()
        loops = {name: (h.count, h.snapshot()[1]) for name, h in agent.stats.loop_durations.items()}
        state.unlock()

        profile_saves = state.profiles.saves
    mean = statistics.fmean(per_cycle)
    p99 = sorted(per_cycle)[int(0.99 * len(per_cycle)) - 1]
    figures = {
        "pods": args.pods,
        "cycles": args.cycles,
        "cpu_per_cycle_ms_mean": round(mean * 1000, 3),
        "cpu_per_cycle_ms_p99": round(p99 * 1000, 3),
        "cpu_per_cycle_ms_max": round(max(per_cycle) * 1000, 3),
        "core_fraction": round(mean / 1.0, 5),
        "rss_mib": round(rss / 2**20, 1),
        "journal_saves": agent.writer.journal.saves if agent.writer.journal else 0,
        "arm": args.arm,
        "profile_saves": profile_saves,
        "loop_seconds": {
            k: {"runs": n, "mean_ms": round(total / max(n, 1) * 1000, 3)} for k, (n, total) in sorted(loops.items())
        },
    }
    _print_cycle(figures, args.json, mean)
    ok = mean <= 0.01 and rss <= 100 * 2**20
    return 0 if ok else 1


def _fake_node(
    tmp: Path, npods: int
) -> tuple[KubeletCgroupTree, list[dict[str, Any]], dict[str, float], dict[str, Any]]:
    """The fake kubelet tree with `npods` pods (a third offline), the pods, each one's cores and the Node."""
    tree = KubeletCgroupTree(
        tmp / "host", "v1", "cgroupfs", allocatable_cpu_milli=32000, ncpu=32, memory_total=128 * GiB
    )
    pods = []
    cores: dict[str, float] = {}
    for i in range(npods):
        uid = f"{i:08d}-0000-4000-8000-000000000000"
        cid = f"{i:064x}"
        offline = i % 3 == 0
        burstable = not offline or i % 2 == 0
        tree.add_pod(
            uid,
            "Burstable" if burstable else "BestEffort",
            {"c": f"containerd://{cid}"},
            cpu_request_milli=100 if burstable else 0,
        )
        tree.set_memory(uid, 100 * 2**20)
        pods.append(pod_obj(i, uid, cid, offline, burstable))
        cores[uid] = 0.05 + (i % 7) * 0.02
    node = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "n1",
            "uid": "n1",
            "resourceVersion": "1",
            "labels": {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"},
            "annotations": {},
        },
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}},
    }
    return tree, pods, cores, node


def _arm_config(arm: str, tmp: Path, state: StateDir, uids: list[str], now: float, buckets: str) -> str | None:
    """The agent.yaml of the compared arm (None: the default configuration)."""
    config_path = None
    if arm == "baseline":
        from agent.decide import profile as profile_module

        profile_module.due = lambda state, now: False  # the agent without usage profiles
        config_path = str(tmp / "agent.yaml")
        Path(config_path).write_text("capacity: {policy: window}\n")
    elif arm == "profile":
        config_path = str(tmp / "agent.yaml")
        Path(config_path).write_text("capacity: {policy: profile}\n")
        prefill(state, uids, now, buckets)
    return config_path


def _print_cycle(figures: dict[str, Any], as_json: bool, mean: float) -> None:
    """The figures as JSON or in words, against the targets."""
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"agent cycle at {figures['pods']} pods, {figures['cycles']} one-second cycles (default config, fake tree):"
        )
        print(
            f"  CPU per cycle: mean {figures['cpu_per_cycle_ms_mean']} ms, p99 {figures['cpu_per_cycle_ms_p99']} ms, "
            f"max {figures['cpu_per_cycle_ms_max']} ms  => {mean * 100:.2f} % of one core (target <= 1 %)"
        )
        print(f"  RSS: {figures['rss_mib']} MiB (target <= 100 MiB; Kubernetes client imported)")
        for k, v in figures["loop_seconds"].items():  # type: ignore[union-attr]
            print(f"  {k:10s} runs {v['runs']:5d}  mean {v['mean_ms']:.3f} ms")


def prefill(state: StateDir, uids: list[str], now: float, buckets: str) -> None:
    """profiles.json as after days of history: `buckets` consecutive buckets (or all) in every histogram."""
    from agent.decide import profile as pf
    from agent.model import Histogram, NodeProfile, PodProfile, ProfileState

    def hist(resource: str, start: int) -> Histogram:
        count = pf.SCHEME[resource].count  # type: ignore[index]
        n = count if buckets == "all" else min(count, int(buckets))
        first = 0 if buckets == "all" else min(start, count - n)
        weights = {b: 1.0 + (b % 7) for b in range(first, first + n)}
        return Histogram(weights, sum(weights.values()), now - 60)

    pods = {uid: PodProfile(hist("cpu", 20), hist("memory", 60), now - 7 * 86400, now - 60) for uid in uids}
    node = NodeProfile(tuple(hist("cpu", 90) for _ in range(24)), tuple(hist("memory", 110) for _ in range(24)),
                       now - 7 * 86400, now - 60, 7 * 86400.0)  # fmt: skip
    state.profiles.save(ProfileState(pods, node, now - 60, 12 * 3600.0, 24 * 3600.0))


def compare(rounds: int, pods: int, cycles: int, buckets: str) -> int:
    """baseline and profile in fresh processes, alternating, `rounds` each; medians and the profile's share."""
    import subprocess

    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "profile": []}
    for r in range(rounds):
        order = ("baseline", "profile") if r % 2 == 0 else ("profile", "baseline")
        for arm in order:
            flags = ["--arm", arm, "--pods", str(pods), "--cycles", str(cycles), "--profile-buckets", buckets]
            out = subprocess.run(
                [sys.executable, __file__, "--json", *flags],
                capture_output=True,
                text=True,
            )
            runs[arm].append(json.loads(out.stdout))
            print(f"round {r + 1} {arm:8s}: {runs[arm][-1]['cpu_per_cycle_ms_mean']:.3f} ms/cycle, "
                  f"{runs[arm][-1]['rss_mib']} MiB", flush=True)  # fmt: skip
    med = {
        arm: {k: statistics.median(x[k] for x in xs) for k in ("cpu_per_cycle_ms_mean", "rss_mib")}
        for arm, xs in runs.items()
    }
    cpu_share = med["profile"]["cpu_per_cycle_ms_mean"] / med["baseline"]["cpu_per_cycle_ms_mean"] - 1
    rss_extra = med["profile"]["rss_mib"] - med["baseline"]["rss_mib"]
    result = {"rounds": rounds, "pods": pods, "cycles": cycles, "profile_buckets": buckets, "medians": med,
              "profile_cpu_added": round(cpu_share, 4), "profile_rss_added_mib": round(rss_extra, 1),
              "runs": runs}  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    ok = cpu_share <= 0.20 and rss_extra <= 10
    print(f"usage profiles at {pods} pods: +{cpu_share * 100:.1f} % CPU per cycle (target <= 20 %), "
          f"+{rss_extra:.1f} MiB RSS (target <= 10 MiB): {'met' if ok else 'NOT met'}")  # fmt: skip
    return 0 if ok else 1


def live(npods: int, seconds: float, as_json: bool) -> int:
    """The real `tidemark-agent run` against a real kube-apiserver (see the module docstring)."""
    import os
    import shutil
    import subprocess
    import warnings

    import urllib3

    from tidemark.kube.client import new_api_client, request_json

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)  # a test server

    script = REPO / "hack" / "kube-apiserver.sh"
    if subprocess.run(["bash", str(script), "env"], capture_output=True).returncode != 0:
        print("bench_agent_cycle --live: no kube-apiserver binaries (hack/kube-apiserver.sh env); skipped")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="tidemark-bench-live-"))
    api_dir = tmp / "apiserver"
    started = subprocess.run(
        ["bash", str(script), "start", str(api_dir), "--authz", "AlwaysAllow", "--watch-pid", str(os.getpid())],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        print(started.stderr)
        return 1
    proc = None
    try:
        env = dict(line.split("=", 1) for line in (api_dir / "env").read_text().splitlines() if "=" in line)
        kubeconfig = str(Path(env["KUBECONFIG_DIR"]) / "admin.kubeconfig")
        api = new_api_client(kubeconfig)
        tree = KubeletCgroupTree(tmp / "host", "v1", "cgroupfs", allocatable_cpu_milli=32000, ncpu=32)
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": "bench"}})
        node = {
            "metadata": {
                "name": "n1",
                "labels": {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"},
            },
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}, "capacity": {"cpu": "32"}},
        }
        request_json(api, "POST", "/api/v1/nodes", body=node)
        _live_pods(api, tree, npods)
        cmd = _agent_command(kubeconfig, tree, tmp / "state")
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (c0, t0), (c1, t1), rss = _measure(proc.pid, seconds)
        ann = request_json(api, "GET", "/api/v1/nodes/n1")["metadata"].get("annotations") or {}
        figures = {
            "pods": npods,
            "measured_seconds": round(t1 - t0, 1),
            "core_fraction": round((c1 - c0) / (t1 - t0), 5),
            "rss_mib": round(rss / 2**20, 1),
            "published": "volcano.sh/oversubscription-cpu" in ann,
        }
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        subprocess.run(["bash", str(script), "stop", str(api_dir)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"tidemark-agent run (real command, real apiserver, fake tree) at {npods} pods, "
            f"{figures['measured_seconds']} s measured:"
        )
        print(
            f"  CPU {figures['core_fraction'] * 100:.2f} % of one core (target <= 1 %), RSS {figures['rss_mib']} MiB "
            f"(target <= 100 MiB); node published: {figures['published']}"
        )
    ok = figures["core_fraction"] <= 0.01 and figures["rss_mib"] <= 100
    return 0 if ok else 1


def _live_pods(api: Any, tree: KubeletCgroupTree, npods: int) -> None:
    """`npods` pods on n1 through the API server, Running, each with its cgroups in the fake tree."""
    from tidemark.kube.client import request_json

    for i in range(npods):
        offline = i % 3 == 0
        burstable = not offline or i % 2 == 0
        resources = {"requests": {"cpu": "100m", "memory": "128Mi"}} if burstable else {}
        body = {
            "metadata": {"name": f"pod-{i}", "annotations": {"volcano.sh/qos-level": "BE"} if offline else {}},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "registry.invalid/x", "resources": resources}],
            },
        }
        created = request_json(api, "POST", "/api/v1/namespaces/bench/pods", body=body)
        uid, cid = created["metadata"]["uid"], f"{i:064x}"
        tree.add_pod(
            uid,
            created["status"]["qosClass"],
            {"c": f"containerd://{cid}"},
            cpu_request_milli=100 if burstable else 0,
        )
        status = {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "c",
                        "containerID": f"containerd://{cid}",
                        "image": "x",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {}},
                    }
                ],
            }
        }
        request_json(
            api,
            "PATCH",
            f"/api/v1/namespaces/bench/pods/pod-{i}/status",
            body=status,
            content_type="application/merge-patch+json",
        )


def _agent_command(kubeconfig: str, tree: KubeletCgroupTree, state_dir: Path) -> list[str]:
    """`tidemark-agent run` for node n1 on the fake tree."""
    cmd = [
        sys.executable,
        "-m",
        "agent.cli",
        "run",
        "--node-name",
        "n1",
        "--kubeconfig",
        kubeconfig,
        "--cgroup-root",
        tree.cgroup_root,
        "--proc-root",
        tree.proc_root,
        "--cgroup-driver",
        "cgroupfs",
        "--state-dir",
        str(state_dir),
        "--listen-address",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    return cmd


def _measure(pid: int, seconds: float) -> tuple[tuple[float, float], tuple[float, float], int]:
    """The process's (CPU seconds, monotonic time) after a 15 s warm-up and at the end of `seconds`, and its RSS."""
    import os

    tck = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tck

    warmup = 15.0
    time.sleep(warmup)
    c0, t0 = cpu(), time.monotonic()
    time.sleep(max(1.0, seconds - warmup))
    c1, t1 = cpu(), time.monotonic()
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return (c0, t0), (c1, t1), rss


if __name__ == "__main__":
    sys.exit(main())
