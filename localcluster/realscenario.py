"""The colocation scenario on the real node (localcluster/realnode.py), with every figure measured.

Steps (workloads are real containers of the busybox workload image, all pinned to CPU 0 so that
online and offline really compete; the Node keeps examples/local-node.yaml's watermarks, CPU high
30 % / low 15 % of the node, which count kubepods usage only; the v2 node: 60 / 40 %, V2Node.DEMO_CPU_WATERMARKS):
1. placement: two offline jobs (`schedulerName: volcano`, qos-level -1, requesting and limited to
   `kubernetes.io/batch-cpu: 100`, i.e. 0.1 core each by the agent's CFS quota, and requesting a plain
   `cpu: 100m` as a batch pod sized without a colocation system does (what kubelet's allocatable leaves
   beside the online service and Tidemark's own pods on 2 cores), so that kubelet gives them CPU
   weight of their own instead of starving them as BestEffort) spin on CPU 0; the figure is pod
   creation -> both Running on the node (scheduler bind + kubelet start);
2a. kubelet alone: the node's labels are taken off for a moment (the agent puts back kubelet's values:
   no cpu.idle, no quota) and the watermarks raised so that nothing is evicted; the online service
   (qos-level 2, `cpu: 500m`) spins on CPU 0 for 2 s; the figure is online's share of the CPU time the
   pods get (kubelet's weights: 512 against 2 x 102, about 70 %); then the labels and the knobs are back;
2. CPU back with the agent: the online service idles until a control file appears in its hostPath
   volume, then spins on CPU 0; the figure is the spike's start -> the first 100 ms window in which
   online gets >= 90 % of the CPU time the pods get (cpuacct of the pod cgroups);
2b. offline work back: the spike ends 0.5 s after it began (SPIKE_HOLD_S: three samples over the high
   watermark would evict); the figure is the spike's end -> the first 100 ms window in which the offline
   jobs run at >= 50 % of their rate over the second before the spike, within RESUME_BOUND_S (x SLOWDOWN),
   and both jobs still there EVICTION_WATCH_S after the spike's end (no eviction);
3. eviction: the spike again, and it stays; kubepods usage passes the high watermark; the figures are
   spike start -> the agent's eviction (the offline pods' deletion) and eviction -> their containers gone
   from containerd (kubelet killed them);
4. re-admission: the spike ends; a new offline job is created once the agent has cleared the
   evicting state (usage under every low watermark for 3 samples); the figure is spike end ->
   that job Running.
`run(node)` returns the figures and the verdict; `make run` (localcluster/cli.py) plays it under the
live view and prints them, as does `python -m localcluster.realnode scenario` without the view.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from localcluster import host
from localcluster.cluster import CTL_DIR, WORKLOAD_IMAGE, LocalCluster
from localcluster.host import wait_until
from tidemark.apis import LABEL_COLOCATION, LABEL_OVERSUBSCRIPTION
from tidemark.quantities import quantity_to_int

NS = "tidemark-demo"
CTL = CTL_DIR  # on the node: the host's real node, or inside the v2 node's VM
SPIN = "taskset -c 0 sh -c 'while :; do :; done'"
# The offline jobs spin from their start: the agent caps each at its batch-cpu limit (0.1 core) as soon as
# kubelet creates its pod cgroup (pod events, then short re-senses of a pod still waiting for its cgroups),
# before the container runs. Unthrottled, two spinners on CPU 0 would be 50 % of the node, past the demo's
# 30 % high watermark, and the pressure path would evict them within a second, before the spike.
OFFLINE_SPIN = SPIN
WEB = (
    "taskset -c 0 sh -c 'while :; do if [ -e /ctl/spike ]; then i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
    "else sleep 0.2; fi; done'"
)
#: step 2b: how long the spike lasts from its start (at least until online has the CPU back), the offline rate (of the
#: pre-spike one) that counts as back, how soon, and how long after the spike's end an eviction is still watched for.
#: Short: online usage alone past the high watermark evicts after 3 sampler periods (the online pod alone spinning is
#: 50 % of the node, the demo's high watermark 30 %). Until the satisfaction measure stopped counting the pressure
#: path's fast samples for CPU (agent/decide/pressure.py `counted`), 3 of them, 0.75 s, did: a 1.5 s spike evicted
#: both jobs 0.5 s after it ended (2026-11-29).
SPIKE_HOLD_S = 0.5
RESUME_SHARE = 0.5
RESUME_BOUND_S = 5.0  # x SLOWDOWN: the sample (1 s) must clear the spike and the tier raise its ceiling (1 s steps)
EVICTION_WATCH_S = 3.0  # x SLOWDOWN: three sampler periods, the agent's samples no longer hold the spike


@dataclass
class Figures:
    placement_s: float | None = None
    cpu_back_s: float | None = None
    online_share: float | None = None
    offline_resume_s: float | None = None  # the spike's end -> offline back to RESUME_SHARE of its pre-spike rate
    offline_resume_ratio: float | None = None  # the offline rate in that window, of the pre-spike rate
    kubelet_share: float | None = None  # online's share of the pods' CPU over the same spike, kubelet alone
    spike_to_eviction_s: float | None = None
    eviction_to_gone_s: float | None = None
    readmission_s: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def table(self) -> str:
        def f(v: float | None, unit: str = "s") -> str:
            return "-" if v is None else (f"{v:.0%}" if unit == "%" else f"{v:.2f} s")

        rows = [
            ("offline jobs placed and running (create -> Running)", f(self.placement_s)),
            ("kubelet alone: online share of the pods' CPU over a 2 s spike", f(self.kubelet_share, "%")),
            ("with the agent: online spike takes the CPU back (>= 90 % in a 100 ms window)", f(self.cpu_back_s)),
            ("with the agent: online share of CPU 0 in that window", f(self.online_share, "%")),
            (f"spike over ({SPIKE_HOLD_S:g} s) -> offline back to >= {RESUME_SHARE:.0%} of its rate, no eviction",
             f(self.offline_resume_s)),
            ("sustained spike -> offline pods evicted", f(self.spike_to_eviction_s)),
            ("eviction -> offline containers gone (kubelet)", f(self.eviction_to_gone_s)),
            ("spike over -> offline work admitted and running again", f(self.readmission_s)),
        ]
        lines = [f"  {k:<64} {v}" for k, v in rows]
        lines.append("  verdict: " + ("PASSED" if self.passed else "FAILED: " + "; ".join(self.failures)))
        return "\n".join(lines)


def _pod(
    name: str,
    command: str,
    annotations: dict[str, str],
    requests: dict[str, str],
    limits: dict[str, str] | None = None,
    ctl: bool = False,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        "resources": {"requests": requests, "limits": limits or {}},
    }
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "terminationGracePeriodSeconds": 0,
        "dnsPolicy": "Default",  # the local cluster has no DNS; kubelet would warn on every sync otherwise
        "containers": [container],
    }
    if ctl:
        container["volumeMounts"] = [{"name": "ctl", "mountPath": "/ctl", "readOnly": True}]
        spec["volumes"] = [{"name": "ctl", "hostPath": {"path": str(CTL), "type": "DirectoryOrCreate"}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": spec,
    }


def _apply(node: LocalCluster, obj: dict[str, Any]) -> None:
    host.run([node.bins["kubectl"], f"--kubeconfig={node.kubeconfig}", "apply", "-f", "-"], input=json.dumps(obj))


def _pod_get(node: LocalCluster, name: str) -> dict[str, Any] | None:
    done = node.kubectl("get", "pod", "-n", NS, name, "-o", "json", check=False, timeout=30)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _running(node: LocalCluster, name: str) -> bool:
    p = _pod_get(node, name)
    return bool(p and p.get("status", {}).get("phase") == "Running")


def _cid(pod: dict[str, Any]) -> str:
    return str(pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1])


def _offline_knobs(node: LocalCluster, pod: dict[str, Any]) -> list[str]:
    """The agent's offline knobs of a job (batch-cpu 100) that do not hold yet, read from its cgroups on the node:
    v1 `cpu.idle` and `cpu.cfs_quota_us`, v2 `cpu.idle` and `cpu.max` (a 10 ms quota per 100 ms period)."""
    d = node.pod_cgroup(pod, "cpu")
    c = node.container_cgroup(pod, "cpu")
    name = pod["metadata"]["name"]
    if node.CGROUP_VERSION == "v1":
        wanted = {
            f"{name} cpu.idle=1": f"{d}/cpu.idle",
            f"{name} pod cpu.cfs_quota_us=10000": f"{d}/cpu.cfs_quota_us",
            f"{name} container cpu.cfs_quota_us=10000": f"{c}/cpu.cfs_quota_us",
        }
    else:
        wanted = {
            f"{name} cpu.idle=1": f"{d}/cpu.idle",
            f"{name} pod cpu.max=10000 100000": f"{d}/cpu.max",
            f"{name} container cpu.max=10000 100000": f"{c}/cpu.max",
        }
    got = node.read_files(list(wanted.values()))
    return [k for k, p in wanted.items() if got.get(p) != k.rsplit("=", 1)[1]]


def _wait_knobs(node: LocalCluster, pods: list[dict[str, Any]], timeout: float) -> list[str]:
    """Wait until the agent has set the jobs' offline knobs; what is still missing after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [m for p in pods for m in _offline_knobs(node, p)]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.1)


def run(node: LocalCluster, say: Any = print, phase: Any = None, on_done: Any = None) -> Figures:
    """Plays the scenario; `say` narrates, `phase` (default: `say`) names each step as it starts, `on_done`
    (if given) is called with the figures after the last step, before the demo's pods are deleted."""
    step = phase or say
    fig = Figures()
    slow = node.SLOWDOWN  # the v2 node runs under QEMU's TCG: its waits are longer, its timings reported only
    node.ctl("spike", False)
    node.kubectl("create", "namespace", NS, check=False)
    node.prepare_node()  # examples/local-node.yaml's labels and watermarks (CPU 30 / 15 %)

    def sa_token() -> bool:  # ServiceAccount admission refuses pods until the token exists
        done = node.kubectl("get", "serviceaccount", "default", "-n", NS, "-o", "json", check=False, timeout=30)
        return done.returncode == 0 and bool(json.loads(done.stdout).get("secrets"))

    wait_until(sa_token, 60, f"the default ServiceAccount token in {NS}")
    try:
        offline_ann = {"volcano.sh/qos-level": "-1"}
        batch = {"kubernetes.io/batch-cpu": "100"}
        # plain cpu requested as well: kubelet weighs them (cpu.shares 102 each) instead of starving them
        job_requests = {**batch, "cpu": "100m"}
        step("0. the online service starts (qos-level 2, cpu 500m), idle")
        _apply(node, _pod("web", WEB, {"volcano.sh/qos-level": "2"}, {"cpu": "500m", "memory": "32Mi"}, ctl=True))
        wait_until(lambda: _running(node, "web"), 120 * slow, "web Running")
        # B > 0 also means the node is not evicting (usage under the low watermarks).
        say("waiting for the agent to publish kubernetes.io/batch-cpu >= 300 (offline capacity)")
        wait_until(lambda: _batch_cpu(node) >= 300, 180 * slow, "batch-cpu published", poll=1.0)
        step("1. two offline jobs (qos-level -1, kubernetes.io/batch-cpu 100 each) placed by the scheduler")
        t0 = time.monotonic()
        for i in range(2):
            _apply(node, _pod(f"job-{i}", OFFLINE_SPIN, offline_ann, job_requests, batch))
        wait_until(lambda: all(_running(node, f"job-{i}") for i in range(2)), 120 * slow, "the offline jobs Running")
        fig.placement_s = time.monotonic() - t0
        say(f"1. offline jobs placed and running in {fig.placement_s:.2f} s")
        jobs = [_pod_get(node, f"job-{i}") for i in range(2)]
        t_knobs = time.monotonic()
        missing = _wait_knobs(node, [j for j in jobs if j], 20 * slow)
        if missing:
            fig.failures.append(f"offline knobs not set within {20 * slow:.0f} s of Running: " + ", ".join(missing))
        else:
            say(f"1. their offline knobs (cpu.idle, CFS quota) hold {time.monotonic() - t_knobs:.2f} s after Running")
        web = _pod_get(node, "web")
        jobs = [_pod_get(node, f"job-{i}") for i in range(2)]
        if not (web and all(jobs)):
            raise AssertionError("before the spike: " + ", ".join(
                n for n, o in [("web", web), ("job-0", jobs[0]), ("job-1", jobs[1])] if not o) + " gone (evicted?)")
        assert web is not None
        cids = {_cid(j) for j in jobs if j}

        web = _kubelet_alone(node, fig, web, [j for j in jobs if j], step, say)

        # 2. the spike: created, ended and measured on the node (localcluster/probe.py), in 100 ms windows.
        _cpu_back(node, fig, web, [j for j in jobs if j], step, say)

        # 3. eviction.
        step("3. the spike again, and it stays past the high watermark: the agent evicts the offline jobs")
        node.ctl("spike", True)
        t_spike = time.monotonic()

        def evicted() -> bool:
            return all(
                _pod_get(node, f"job-{i}") is None
                or (_pod_get(node, f"job-{i}") or {}).get("metadata", {}).get("deletionTimestamp")
                for i in range(2)
            )

        try:
            wait_until(evicted, 120 * slow, "the offline jobs evicted", poll=0.1)
            fig.spike_to_eviction_s = time.monotonic() - t_spike
            t_ev = time.monotonic()
            wait_until(
                lambda: not cids & node.running_tasks(),
                60 * slow,
                "the offline containers gone",
                poll=0.1,
            )
            fig.eviction_to_gone_s = time.monotonic() - t_ev
            say(
                f"3. evicted {fig.spike_to_eviction_s:.2f} s after the spike began; containers gone "
                f"{fig.eviction_to_gone_s:.2f} s later"
            )
        except TimeoutError as e:
            fig.failures.append(str(e))
        if not _running(node, "web"):
            fig.failures.append("the online pod is no longer running")

        # 4. re-admission.
        step("4. the spike ends: under the low watermarks the node admits offline work again")
        node.ctl("spike", False)
        t_end = time.monotonic()
        _apply(node, _pod("job-late", OFFLINE_SPIN, offline_ann, job_requests, batch))
        try:
            wait_until(lambda: _running(node, "job-late"), 180 * slow, "offline work admitted again", poll=0.2)
            fig.readmission_s = time.monotonic() - t_end
            say(f"4. offline work admitted and running again {fig.readmission_s:.2f} s after the spike")
        except TimeoutError as e:
            fig.failures.append(str(e))
    except (TimeoutError, AssertionError) as e:
        fig.failures.append(str(e) or type(e).__name__)
    finally:
        if on_done is not None:
            on_done(fig)
        with contextlib.suppress(Exception):
            node.ctl("spike", False)
        node.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=0", "--force", check=False)
        node.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    return fig


def _cpu_back(
    node: LocalCluster, fig: Figures, web: dict[str, Any], jobs: list[dict[str, Any]], step: Any, say: Any
) -> None:
    """Steps 2 and 2b: the online spike on CPU 0, created, ended and measured on the node (localcluster/probe.py)
    in 100 ms windows: how soon online has >= 90 % of the CPU back, then, once the spike is over, how soon the
    offline jobs run again at RESUME_SHARE of their pre-spike rate, and that neither was evicted meanwhile."""
    slow = node.SLOWDOWN
    step("2. online load spike on CPU 0: the agent's knobs give online the CPU back")
    uids = {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobs}
    got = node.probe(
        "spike_and_resume",
        online=node.pod_cgroup(web, "cpuacct"),
        offline=[node.pod_cgroup(j, "cpuacct") for j in jobs],
        version=node.CGROUP_VERSION,
        spike=f"{CTL}/spike",
        timeout=10.0 * slow,
        hold=SPIKE_HOLD_S,
        resume_share=RESUME_SHARE,
        resume_timeout=2 * RESUME_BOUND_S * slow,
    )
    fig.cpu_back_s, fig.online_share = got["seconds"], got["share"]
    bound = node.REACTION_BOUND_S
    if fig.cpu_back_s is None or (bound is not None and fig.cpu_back_s > bound):
        within = f"within {bound:.0f} s" if bound is not None else f"within {10 * slow:.0f} s"
        fig.failures.append(f"online did not get >= 90 % of CPU 0 {within} ({fig.cpu_back_s})")
    if fig.cpu_back_s is not None and fig.online_share is not None:
        say(f"2. CPU back to online in {fig.cpu_back_s:.2f} s (online {fig.online_share:.0%} of CPU 0's pod time)")
    else:
        say(f"2. the CPU did not come back to online within {10 * slow:.0f} s")
    _offline_back(node, fig, got, uids, step, say)


def _offline_back(
    node: LocalCluster, fig: Figures, got: dict[str, Any], uids: dict[str, str], step: Any, say: Any
) -> None:
    """Step 2b's verdict from the probe's figures: offline work back within RESUME_BOUND_S x SLOWDOWN of the
    spike's end, and the same offline pods still there, none deleted (the agent's eviction deletes them)."""
    step(f"2b. the spike ends after {got.get('held', SPIKE_HOLD_S):.1f} s: offline work resumes under the tier ceiling")
    fig.offline_resume_s, fig.offline_resume_ratio = got.get("resume_seconds"), got.get("resume_ratio")
    bound = RESUME_BOUND_S * node.SLOWDOWN
    pre = got.get("pre_offline_cores")
    pre_text = "-" if pre is None else f"{pre:.2f}"
    trace = " ".join("-" if r is None else f"{r:.2f}" for r in (got.get("trace") or [])[:40])

    def gone() -> list[str]:
        pods = {name: _pod_get(node, name) for name in uids}
        return [n for n, p in pods.items() if p is None or p["metadata"].get("uid") != uids[n]
                or p["metadata"].get("deletionTimestamp")]

    evicted = gone()
    watch_until = time.monotonic() + max(0.0, EVICTION_WATCH_S * node.SLOWDOWN - (fig.offline_resume_s or 0.0))
    while not evicted and time.monotonic() < watch_until:  # an eviction the spike's samples decide a moment later
        time.sleep(0.2)
        evicted = gone()
    if fig.offline_resume_s is None or fig.offline_resume_s > bound:
        fig.failures.append(
            f"offline work not back to {RESUME_SHARE:.0%} of its pre-spike rate ({pre_text} cores) within "
            f"{bound:.0f} s of the spike's end ({fig.offline_resume_s}; rate per 100 ms of the pre-spike one: {trace})"
        )
    if evicted:
        fig.failures.append(f"offline pods evicted by a {got.get('held', SPIKE_HOLD_S):.1f} s spike: "
                            + ", ".join(evicted))
    if fig.offline_resume_s is not None and fig.offline_resume_ratio is not None:
        say(
            f"2b. offline work back to {100 * fig.offline_resume_ratio:.0f} % of its pre-spike rate "
            f"{fig.offline_resume_s:.1f} s after the spike ended, "
            + ("no eviction" if not evicted else "but evicted: " + ", ".join(evicted))
            + f" (pre-spike {pre_text} cores; then, per 100 ms: {trace})"
        )
    else:
        say(f"2b. offline work not back to {RESUME_SHARE:.0%} of its pre-spike rate ({pre_text} cores) "
            f"within {2 * bound:.0f} s of the spike's end")


def _kubelet_alone(
    node: LocalCluster, fig: Figures, web: dict[str, Any], jobs: list[dict[str, Any]], step: Any, say: Any
) -> dict[str, Any]:
    """Step 2a: the same spike with kubelet's values only (the node's labels off: the agent puts back what it
    wrote); the CPU watermarks raised meanwhile so that nothing is evicted, then everything as before."""
    slow = node.SLOWDOWN
    step("2a. the same spike with kubelet alone: the node's labels off, the agent puts kubelet's values back")
    node.kubectl("annotate", "node", node.node_name, "--overwrite",
                 "volcano.sh/evicting-cpu-high-watermark=95", "volcano.sh/evicting-cpu-low-watermark=90")
    node.kubectl("label", "node", node.node_name, f"{LABEL_COLOCATION}-", f"{LABEL_OVERSUBSCRIPTION}-")
    total = 3 * len(jobs)  # cpu.idle and two quotas per job (_offline_knobs)
    try:
        wait_until(lambda: len([m for p in jobs for m in _offline_knobs(node, p)]) == total, 30 * slow,
                   "kubelet's values back on the offline jobs", poll=0.2)
        got = node.probe(
            "cpu_share",
            online=node.pod_cgroup(web, "cpuacct"),
            offline=[node.pod_cgroup(j, "cpuacct") for j in jobs],
            version=node.CGROUP_VERSION,
            spike=f"{CTL}/spike",
            seconds=2.0,
        )
        fig.kubelet_share = got["share"]
        if fig.kubelet_share is not None:
            say(f"2a. kubelet alone: online got {fig.kubelet_share:.0%} of the pods' CPU over the 2 s spike")
    except TimeoutError as e:
        fig.failures.append(str(e))
    finally:
        node.kubectl("label", "node", node.node_name, "--overwrite",
                     f"{LABEL_COLOCATION}=true", f"{LABEL_OVERSUBSCRIPTION}=true")
    missing = _wait_knobs(node, jobs, 20 * slow)
    if missing:
        fig.failures.append("the offline knobs not back after the labels: " + ", ".join(missing))
    node.prepare_node()  # the demo's watermarks again (CPU 30 / 15 %)
    if not _running(node, "web") or not all(_running(node, j["metadata"]["name"]) for j in jobs):
        raise AssertionError("a pod is gone after the kubelet-alone spike")
    return _pod_get(node, "web") or web


def _batch_cpu(node: LocalCluster) -> int:
    n = node.kubectl("get", "node", node.node_name, "-o", "json", timeout=30)
    # a quantity: the API server writes a published 1000 as "1k"
    alloc = json.loads(n.stdout)["status"].get("allocatable", {})
    return quantity_to_int(alloc.get("kubernetes.io/batch-cpu", "0")) or 0
