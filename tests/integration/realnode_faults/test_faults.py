"""Faults on the real node (tests/fixtures/realnode.py): kubelet restart, containerd restart, the agent
SIGKILLed right after it journals a knob batch, the API server down for 30 s, and an online pod spinning
on every CPU.

After each fault, with no manual action:
- no online pod is evicted or restarted (same UID, Running, same restart count, no Evicted event);
- the offline knobs are what the plan says (the offline container's shares/quota/memory limit) and the
  agent's journal agrees with the files (every journaled knob whose file exists holds the value the
  journal says was written; nothing was set aside as rejected);
- no pod is bound twice: each pod created around the fault is bound once (at most one Scheduled event,
  and the scheduler's `tidemark_scheduler_binds{result="conflict"}` does not move while its pod lives);
- the agent pod is Ready again and cycling (its `tidemark_agent_decisions_total` advances).

The recovery time printed for each fault (`FAULT ... recovered in`) runs from the faulted component being
back (restarted) to all of the above holding, including a new pod bound and Running; docs/security.md
records the figures. Waits poll conditions; the only fixed wait is the API server's 30 s outage.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.act.statedir import same
from agent.knobs import current_of
from localcluster.files import parse_env_file
from localcluster.host import alive, wait_until
from localcluster.host import cmdline as _cmdline
from localcluster.host import kill_pid as _kill_pid
from localcluster.realnode import RealNode
from tests.fixtures.realnode import CG, NO_BATCH_BUDGET_LABEL, RealNamespace, container_cgroup, pod_cgroup
from tidemark.apis import quantity_to_int

pytestmark = pytest.mark.slow


STATE = Path("/var/lib/tidemark")  # the agent's hostPath state directory
HOST_CGROUP = "/host/sys/fs/cgroup"  # the agent's --cgroup-root inside its container
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEM = "kubernetes.io/batch-memory"
OFFLINE = {"volcano.sh/qos-level": "-1"}
ONLINE = {"volcano.sh/qos-level": "2"}
OFFLINE_REQ = {BATCH_CPU: "20", BATCH_MEM: "64Mi"}
OFFLINE_LIM = {BATCH_CPU: "40", BATCH_MEM: "64Mi"}
AGENT_SEL = "app.kubernetes.io/name=tidemark-agent"
SCHED_SEL = "app.kubernetes.io/name=tidemark-scheduler"


def say(line: str) -> None:
    """A figure line on the terminal (pytest -s) and in the captured output of a failure."""
    print(f"FAULT {line}", flush=True)


# --- what the tests read -----------------------------------------------------------------------------


def read(path: Path) -> str:
    return path.read_text().strip()


def offline_knobs(pod: Any) -> dict[str, str]:
    c_cpu, c_mem = container_cgroup(pod, "cpu"), container_cgroup(pod, "memory")
    return {
        "shares": read(c_cpu / "cpu.shares"),
        "quota": read(c_cpu / "cpu.cfs_quota_us"),
        "period": read(c_cpu / "cpu.cfs_period_us"),
        "memory": read(c_mem / "memory.limit_in_bytes"),
    }


def knobs_as_planned(pod: Any) -> bool:
    """The plan for OFFLINE_REQ/OFFLINE_LIM: shares = 20 milli-cores' worth, quota 40 m, memory 64 Mi."""
    try:
        k = offline_knobs(pod)
    except OSError:
        return False
    return k["shares"] == "20" and int(k["quota"]) == 40 * int(k["period"]) // 1000 and k["memory"] == str(64 << 20)


def journal() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((STATE / "journal.json").read_text())
    return data


def journal_mismatches() -> list[str]:
    """Journaled knobs whose file exists but does not hold what the journal says was written."""
    bad: list[str] = []
    for e in journal().get("knobs", []):
        path = str(e["path"])
        host = path.replace(HOST_CGROUP, str(CG), 1) if path.startswith(HOST_CGROUP) else path
        f = Path(host) / e["file"]
        try:
            current = read(f)
        except OSError:
            continue  # the pod is gone: its entry waits for the agent's cleanup
        line = current_of(str(e["file"]), current, str(e["written"]))  # a keyed knob (io.max): that disk's line
        if line is None or not same(line, str(e["written"])):
            bad.append(f"{f}: {current!r}, journal written {e['written']!r}")
    return bad


def rejected_journals() -> list[str]:
    return sorted(p.name for p in STATE.glob("journal.json.rejected-*"))


def metrics(pod: dict[str, Any], port: int) -> dict[str, float]:
    """Unlabelled and labelled samples of a pod's /metrics (name{labels} -> value)."""
    ip = pod.get("status", {}).get("podIP")
    if not ip:
        return {}
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def the_pod(node: RealNode, selector: str, ready: bool = True) -> dict[str, Any] | None:
    pods = [p for p in node.pods("tidemark-system", selector) if not p["metadata"].get("deletionTimestamp")]
    if ready:
        pods = [p for p in pods if node.pod_ready(p)]
    return pods[0] if pods else None


def agent_decisions(node: RealNode) -> float | None:
    pod = the_pod(node, AGENT_SEL)
    return metrics(pod, 9102).get("tidemark_agent_decisions_total") if pod else None


def scheduler_state(node: RealNode) -> tuple[str, float] | None:
    """(every scheduler pod's uid and restart count, their conflict binds summed): the leader is one of them."""
    pods = [p for p in node.pods("tidemark-system", SCHED_SEL) if not p["metadata"].get("deletionTimestamp")]
    if not pods:
        return None
    key, conflicts = [], 0.0
    for pod in sorted(pods, key=lambda p: p["metadata"]["uid"]):
        restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or [])
        key.append(f"{pod['metadata']['uid']}/{restarts}")
        conflicts += metrics(pod, 8080).get('tidemark_scheduler_binds_total{result="conflict"}', 0.0)
    return ",".join(key), conflicts


def node_ready(node: RealNode) -> bool:
    try:
        return node._node_ready()
    except Exception:
        return False


# --- the workload every fault runs against ------------------------------------------------------------


@dataclass
class Workload:
    ns: RealNamespace
    online: dict[str, tuple[str, int]]  # name -> (uid, restart count)
    offline: str
    sched_before: tuple[str, float] | None

    def online_state(self) -> dict[str, tuple[str, int]]:
        out = {}
        for name in self.online:
            p = self.ns.get(name)
            restarts = sum(c.restart_count for c in p.status.container_statuses or [])
            out[name] = (p.metadata.uid, restarts)
        return out


def wait_batch_cpu(ns: RealNamespace, at_least: int, timeout: float = 90) -> None:
    def enough() -> bool:
        alloc = ns.core.read_node(ns.node.node_name).status.allocatable or {}
        return (quantity_to_int(alloc.get(BATCH_CPU, "0")) or 0) >= at_least

    ns.wait(enough, timeout, f"{BATCH_CPU} >= {at_least} published")


@pytest.fixture
def workload(real_node: RealNode, real_ns: RealNamespace) -> Workload:
    """A Burstable online pod (qos-level 2), a BestEffort online pod (default scheduler), and an offline
    pod with batch resources whose knobs the agent has set."""
    wait_batch_cpu(real_ns, 60, timeout=180)  # B is what the shared machine leaves: other load lowers it
    real_ns.create(real_ns.pod("offline", requests=OFFLINE_REQ, limits=OFFLINE_LIM, annotations=OFFLINE))
    real_ns.create(real_ns.pod("online", requests={"cpu": "100m", "memory": "32Mi"}, annotations=ONLINE))
    real_ns.create(real_ns.pod("online-be", annotations=ONLINE, scheduler=None))  # default scheduler, BestEffort
    for name in ("offline", "online", "online-be"):
        real_ns.wait_running(name, timeout=180)
    off = real_ns.get("offline")
    real_ns.wait(lambda: knobs_as_planned(off), 60, "the agent's knobs on the offline container")
    w = Workload(real_ns, {"online": ("", 0), "online-be": ("", 0)}, "offline", scheduler_state(real_node))
    w.online = w.online_state()
    return w


def recovered(node: RealNode, w: Workload, since: float, tag: str, bound: list[str]) -> float:
    """Waits until everything is back; asserts the invariants; returns the seconds since `since`."""
    ns = w.ns
    wait_until(lambda: node_ready(node), 120, "the Node Ready")
    steps = [f"Node Ready {time.monotonic() - since:.1f} s"]
    for name in bound:
        ns.wait_running(name, timeout=120)
    steps.append(f"in-flight pods Running {time.monotonic() - since:.1f} s")
    node.wait_tidemark(timeout=180)
    steps.append(f"agent and a scheduler Ready {time.monotonic() - since:.1f} s")
    d0 = None

    def cycling() -> bool:
        nonlocal d0
        d = agent_decisions(node)
        if d is None:
            return False
        if d0 is None or d < d0:
            d0 = d
            return False
        return d > d0

    wait_until(cycling, 90, "the agent's decisions counter to advance", poll=0.5)
    # A pod created now is bound once and runs: the scheduler and kubelet work end to end.
    probe = f"probe-{tag}"
    ns.create(ns.pod(probe, annotations=OFFLINE))
    ns.wait_running(probe, timeout=120)
    off = ns.get(w.offline)
    ns.wait(lambda: knobs_as_planned(off), 60, f"the offline knobs as planned (now {offline_knobs(off)})")
    ns.wait(lambda: not journal_mismatches(), 60, "the journal to agree with the files")
    took = time.monotonic() - since
    say(f"{tag}: " + ", ".join(steps) + f", all recovered {took:.1f} s")
    # Invariants.
    assert w.online_state() == w.online, "an online pod was restarted or replaced"
    for name in w.online:
        assert ns.get(name).status.phase == "Running"
    events = ns.core.list_namespaced_event(ns.name).items
    evicted = [e.involved_object.name for e in events if e.reason in ("Evicted", "Killing", "Preempted")]
    assert not [n for n in evicted if n in w.online], f"online pods evicted or killed: {evicted}"
    assert not rejected_journals(), f"journal set aside as rejected: {rejected_journals()}"
    assert_bound_once(node, w, [*bound, probe])
    return took


def scheduled_counts(ns: RealNamespace) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in ns.core.list_namespaced_event(ns.name).items:
        if e.reason == "Scheduled":
            counts[e.involved_object.name] = counts.get(e.involved_object.name, 0) + (e.count or 1)
    return counts


def assert_bound_once(node: RealNode, w: Workload, names: list[str]) -> None:
    ns = w.ns
    for n in names:
        assert ns.get(n).spec.node_name == node.node_name, f"{n} not bound"
    counts = scheduled_counts(ns)
    assert all(counts.get(n, 0) <= 1 for n in names), f"bound more than once: {counts}"
    after = scheduler_state(node)
    if w.sched_before and after and after[0] == w.sched_before[0]:  # same scheduler process: its counters hold
        assert after[1] == w.sched_before[1], f"bind conflicts {w.sched_before[1]} -> {after[1]}"


def create_in_flight(ns: RealNamespace, tag: str, n: int = 3) -> list[str]:
    """Pods the scheduler binds while the fault happens."""
    names = [f"{tag}-{i}" for i in range(n)]
    for name in names:
        ns.create(ns.pod(name, annotations=OFFLINE))
    return names


# --- restarting the node's processes -----------------------------------------------------------------


def restart(node: RealNode, name: str, sig: int = signal.SIGTERM) -> float:
    """Stops `name` (kubelet, containerd) with `sig`, starts it again with the same command line; returns
    the monotonic time it was started again."""
    pid = node.pids[name]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert str(node.run_dir) in _cmdline(pid)
    if sig == signal.SIGKILL:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 10, f"{name} gone")
    else:
        _kill_pid(pid, str(node.run_dir), grace=15)
    node._start(name, [a.decode() for a in argv])
    return time.monotonic()


def batch_cpu_published(ns: RealNamespace) -> int:
    return quantity_to_int((ns.core.read_node(ns.node.node_name).status.allocatable or {}).get(BATCH_CPU, "0")) or 0


def batch_cpu_bound(ns: RealNamespace) -> int:
    """Rb as kubelet counts it: the batch-cpu requests of the node's pods that have not finished."""
    pods = ns.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={ns.node.node_name}").items
    return sum((quantity_to_int((c.resources.requests or {}).get(BATCH_CPU, "0")) or 0) for p in pods
               if p.status.phase not in ("Succeeded", "Failed") for c in p.spec.containers)  # fmt: skip


def test_kubelet_restart(real_node: RealNode, workload: Workload) -> None:
    """With no offline budget left (B = 0 under the running batch pod), kubelet's restart re-admits every running
    pod against the Node's allocatable (kubernetes/kubernetes#68002): the agent publishes the bound batch pods'
    requests, not 0, so the offline pod keeps running (the same UID, no `OutOfkubernetes.io/batch-cpu`)."""
    ns = workload.ns
    node = real_node.node_name
    off = ns.get(workload.offline)
    real_node.kubectl("label", "node", node, "--overwrite", f"{NO_BATCH_BUDGET_LABEL}=true")
    ns.cleanups.append(lambda: real_node.kubectl("label", "node", node, f"{NO_BATCH_BUDGET_LABEL}-", check=False))
    ns.wait(lambda: batch_cpu_published(ns) == batch_cpu_bound(ns) >= int(OFFLINE_REQ[BATCH_CPU]), 90,
            f"{BATCH_CPU} held at the running batch pods' requests (B = 0)")
    in_flight = create_in_flight(ns, "kl")
    t = restart(real_node, "kubelet")
    wait_until(lambda: node_ready(real_node), 120, "the Node Ready")
    for name in in_flight:
        ns.wait_running(name, timeout=120)  # kubelet has admitted the pods it found by now
    after = ns.get(workload.offline)
    rejected = [e.reason for e in ns.core.list_namespaced_event(ns.name).items
                if e.involved_object.name == workload.offline and (e.reason or "").startswith("OutOf")]  # fmt: skip
    assert after.metadata.uid == off.metadata.uid and after.status.phase == "Running" and not rejected, (
        f"kubelet's restart rejected the running batch pod: {after.status.phase} {after.status.reason} {rejected}")
    say(f"kubelet restart with B = 0: {BATCH_CPU} held at {batch_cpu_published(ns)}, the batch pod kept running")
    real_node.kubectl("label", "node", node, f"{NO_BATCH_BUDGET_LABEL}-")  # the probe pod below needs a budget
    took = recovered(real_node, workload, t, "kubelet", in_flight)
    say(f"kubelet restart (SIGTERM, same flags): recovered in {took:.1f} s")


def test_containerd_restart(real_node: RealNode, workload: Workload) -> None:
    in_flight = create_in_flight(workload.ns, "cd")
    t = restart(real_node, "containerd")
    wait_until(lambda: real_node.ctr("version", check=False).returncode == 0, 30, "containerd to answer")
    took = recovered(real_node, workload, t, "containerd", in_flight)
    say(f"containerd restart (SIGTERM, same config; containers keep running in their shims): recovered in {took:.1f} s")


def agent_task_pid(node: RealNode) -> int:
    pod = the_pod(node, AGENT_SEL)
    assert pod is not None
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == cid and parts[2] == "RUNNING":
            return int(parts[1])
    raise AssertionError(f"no running task for the agent container {cid}")


def kill_agent_after_journal(node: RealNode, pid: int, marker: str, timeout: float = 60) -> bool:
    """Polls the journal's inode every millisecond (the agent saves it by atomic rename before a batch's first
    write) and SIGKILLs the agent the moment the journal names `marker`: the batch's writes are then under way or
    just done. Returns whether the kill landed on such a batch (else it killed at the timeout)."""
    path = STATE / "journal.json"
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            ino = os.stat(path).st_ino
            if ino != last:
                last = ino
                if marker in path.read_text():
                    os.kill(pid, signal.SIGKILL)
                    return True
        if not alive(pid):  # restarted by kubelet before the batch came: say why, not ProcessLookupError
            raise AssertionError(f"the agent (pid {pid}) ended before it journaled {marker}: {agent_last_state(node)}")
        # A short sleep, not a spin: a busy loop took one of the CI machine's two CPUs for up to the whole timeout.
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    return False


def agent_last_state(node: RealNode) -> str:
    pod = the_pod(node, AGENT_SEL, ready=False)
    status = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return f"restarts {status[0].get('restartCount')}, last state {status[0].get('lastState')}"


def test_agent_sigkill_during_a_knob_write(real_node: RealNode, workload: Workload) -> None:
    ns = workload.ns
    pid = agent_task_pid(real_node)
    created = ns.create(ns.pod("victim", requests=OFFLINE_REQ, limits=OFFLINE_LIM, annotations=OFFLINE))
    # The agent journals the victim's knobs once kubelet has made its cgroups: kill it right then.
    landed = kill_agent_after_journal(real_node, pid, f"pod{created.metadata.uid}", timeout=120)
    t = time.monotonic()
    victim = ns.wait_running("victim", timeout=120)
    try:
        k = offline_knobs(victim)
        at_kill = f"{int(k['shares'] == '20') + int(k['memory'] == str(64 << 20))} of 2 (shares, memory)"
    except OSError:
        at_kill = "unknown (container cgroup not there yet)"
    say(
        f"agent SIGKILL {'right after it journaled the victim batch' if landed else 'at the timeout'}; "
        f"victim knobs at their planned value just after the kill: {at_kill}"
    )
    wait_until(lambda: not alive(pid), 10, "the agent process gone")
    took = recovered(real_node, workload, t, "agent", [])
    ns.wait(lambda: knobs_as_planned(ns.get("victim")), 60, "the victim's knobs as planned")
    assert landed, "the agent never journaled the victim's knobs"
    say(f"agent SIGKILL: kubelet restarted the container; recovered in {took:.1f} s")


@contextlib.contextmanager
def apiserver_down(node: RealNode, seconds: float) -> Iterator[list[float]]:
    """Stops the API server the fixture started (TERM), keeps it down `seconds`, starts it again with the
    same command line and environment, and records its new pid where `kube-apiserver.sh stop` reads it."""
    api_dir = Path(node._state["api_dir"])
    env_file = api_dir / "env"
    pid = int(parse_env_file(env_file)["KUBE_APISERVER_PID"])
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")]
    environ = dict(
        kv.decode().split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv
    )
    back: list[float] = []
    _kill_pid(pid, str(api_dir), grace=15)
    t_down = time.monotonic()
    try:
        yield back
        time.sleep(max(0.0, seconds - (time.monotonic() - t_down)))  # the outage itself: a fixed 30 s
    finally:
        with open(api_dir / "kube-apiserver.log", "ab") as logf:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                 env=environ, start_new_session=True)  # fmt: skip
        text = env_file.read_text().replace(f"KUBE_APISERVER_PID={pid}\n", f"KUBE_APISERVER_PID={p.pid}\n")
        tmp = env_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.replace(env_file)
        back.append(time.monotonic())

        def ready() -> bool:
            return node.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0

        wait_until(ready, 60, "the API server ready again", poll=0.5)
        say(f"API server down {back[0] - t_down:.1f} s; ready {time.monotonic() - back[0]:.1f} s after its start")


def test_apiserver_down_30s(real_node: RealNode, workload: Workload) -> None:
    in_flight = create_in_flight(workload.ns, "api")
    with apiserver_down(real_node, 30.0) as back:
        pass
    took = recovered(real_node, workload, back[0], "apiserver", in_flight)
    say(f"API server down 30 s: recovered in {took:.1f} s after its restart")


def test_agent_stays_ready_while_online_pods_spin_every_cpu(real_node: RealNode, real_ns: RealNamespace) -> None:
    """The agent (system-node-critical, its cpu request) keeps answering its probes and cycling while an
    online pod with a large request spins on both CPUs without a limit."""
    ncpu = os.cpu_count() or 2
    spin = " & ".join(["while :; do :; done"] * ncpu)
    real_ns.create(real_ns.pod("hog", spin, requests={"cpu": "500m", "memory": "16Mi"}, annotations=ONLINE))
    real_ns.wait_running("hog")
    hog_cg = pod_cgroup(real_ns.get("hog"), "cpuacct") / "cpuacct.usage"
    agent = the_pod(real_node, AGENT_SEL)
    assert agent is not None
    agent_uid = agent["metadata"]["uid"]
    restarts0 = agent["status"]["containerStatuses"][0].get("restartCount", 0)
    u0, t0 = int(read(hog_cg)), time.monotonic()
    d0 = agent_decisions(real_node)
    assert d0 is not None
    samples = []
    while time.monotonic() - t0 < 40:  # 4 liveness/readiness periods
        pod = the_pod(real_node, AGENT_SEL, ready=False)
        assert pod is not None and pod["metadata"]["uid"] == agent_uid
        assert real_node.pod_ready(pod), "the agent pod went unready under the CPU hog"
        samples.append(agent_decisions(real_node))
        time.sleep(2)
    hog_cores = (int(read(hog_cg)) - u0) / 1e9 / (time.monotonic() - t0)
    d1 = agent_decisions(real_node)
    assert d1 is not None and d1 > d0, f"the agent stopped cycling: {samples}"
    pod = the_pod(real_node, AGENT_SEL, ready=False)
    assert pod is not None
    assert pod["status"]["containerStatuses"][0].get("restartCount", 0) == restarts0, "the agent was restarted"
    events = real_ns.core.list_namespaced_event("tidemark-system").items
    unhealthy = [e.message for e in events if e.involved_object.uid == agent_uid and e.reason == "Unhealthy"
                 and e.last_timestamp and e.last_timestamp.timestamp() > time.time() - 45]  # fmt: skip
    say(
        f"online hog {hog_cores:.2f} cores over {time.monotonic() - t0:.0f} s: agent Ready throughout, "
        f"decisions {d0:.0f} -> {d1:.0f}, probe failures {len(unhealthy)}"
    )
    assert not unhealthy, unhealthy
    assert hog_cores > 0.5 * ncpu * 0.5, f"the hog only used {hog_cores:.2f} cores: no contention to test"
