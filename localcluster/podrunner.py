"""The local pod runner: runs the pods bound to this machine's Node as host processes. NOT A KUBELET.

`make run` needs pods that really run, in cgroups laid out as kubelet lays them out, so that the
agent measures and isolates real processes and the scheduler's placements have effects. A real
kubelet needs a container runtime, images and networking this one-machine demo does not have; this
module is the smallest stand-in that keeps the contracts the agent and the scheduler depend on:

What it does (kubelet's behaviour, kept):
- registers the Node (capacity, allocatable, Ready condition, addresses) and heartbeats its Ready
  condition; it never touches capacity/allocatable afterwards, so the agent's
  `kubernetes.io/batch-*` status patch stays (as with a real kubelet);
- watches the pods bound to the node (`spec.nodeName`) and admits each new one as a stock kubelet
  does (`localcluster.admission`: requests incl. extended resources within allocatable, the
  node selector); a rejected pod gets phase Failed with reason `OutOf<resource>` and a Warning event;
- runs each container's `command` + `args` as a host process inside kubelet's cgroup tree
  (`localcluster.cgroups`: cgroupfs driver, QoS subtrees, `pod<uid>` and a container directory
  named by a generated 64-hex container id, kubelet's shares/quota/memory values), moved into its
  groups *before* it executes anything (a `sh` wrapper blocks on a pipe until it has been moved,
  pinned and given kubelet's oom_score_adj, then `exec`s the command);
- pins the process to CPUs when the pod asks with the annotation `tidemark.io/local-cpuset`
  (a cpu list such as `"0"` or `"0-1,3"`; sched_setaffinity, inherited by children);
- reports phase (Pending/Running/Succeeded/Failed), conditions and containerStatuses (container id
  `tidemark-local://<id>`, state, exit code, restart count) through `pods/status`; restarts
  containers per restartPolicy with kubelet's back-off (10 s doubling to 5 min);
- on deletion or eviction (a deletionTimestamp) sends SIGTERM to each container's process group,
  SIGKILL after the pod's grace period, then deletes the Pod object with grace 0 and a UID
  precondition (kubelet's final step) and removes the pod's cgroups;
- on exit stops every process (SIGTERM, SIGKILL after a short grace), and removes the whole tree.

What it does NOT do (a kubelet would): images, filesystems, volumes, networking (processes share the
host's network; podIP is the node IP), probes, lifecycle hooks, eviction under node pressure, device
plugins, static pods, the CPU/memory managers (pinning is the annotation above), cgroup drivers other
than cgroupfs, Node leases. Hollow nodes (`hollow=True`, for simulated extra nodes) only admit pods
and report them Running, without processes (like kubemark's hollow kubelet).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from agent.model import CgroupDirs
from localcluster.admission import admit
from localcluster.cgroups import KubeletCgroups, Limits
from tidemark.apis import canonical_amount, pod_limits, pod_requests, qos_class
from tidemark.kube.client import STRATEGIC_MERGE_PATCH, ApiStatusError, KubeError, request
from tidemark.kube.events import EventRecorder, ObjectRef
from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import NODES, PODS

log = logging.getLogger(__name__)
_REPO = Path(__file__).resolve().parents[1]

JSON = dict[str, Any]
ANN_CPUSET: Final = "tidemark.io/local-cpuset"
COMPONENT: Final = "tidemark-podrunner"
CONTAINER_SCHEME: Final = "tidemark-local"
HOLLOW_SCHEME: Final = "tidemark-hollow"
BACKOFF_INITIAL: Final = 10.0
BACKOFF_MAX: Final = 300.0
HEARTBEAT_SECONDS: Final = 10.0
FORCE_DELETE_GRACE: Final = 2.0
#: the `sh` wrapper: wait on stdin (a pipe) until moved into the cgroups, then become the command
_WRAPPER: Final = 'read -r go || exit 125; exec "$@" </dev/null'

ContainerState = Literal["waiting", "running", "terminated"]


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_cpuset(text: str) -> set[int]:
    """A Linux cpu list (`0`, `0-1,3`) as a set; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            a, b = int(lo), int(hi)
            if a > b:
                raise ValueError(f"bad cpu range {part!r}")
            cpus.update(range(a, b + 1))
        else:
            cpus.add(int(lo))
    if not cpus or min(cpus) < 0:
        raise ValueError(f"bad cpu list {text!r}")
    return cpus


def oom_score_adj(qos: str, memory_request: int, memory_capacity: int) -> int:
    """kubelet's GetContainerOOMScoreAdjust: Guaranteed -997, BestEffort 1000, Burstable by memory request."""
    if qos == "Guaranteed":
        return -997
    if qos == "BestEffort":
        return 1000
    if memory_capacity <= 0:
        return 999
    adj = 1000 - (1000 * memory_request) // memory_capacity
    if adj < 3:
        return 3
    if adj == 1000:
        return 999
    return int(adj)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _created(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("creationTimestamp") or "")


def _container_limits(c: Mapping[str, Any], besteffort: bool) -> Limits:
    """runc's values for one container: shares from its cpu request (limit when only a limit), quota, memory."""
    res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
    assert isinstance(res, Mapping)
    req = res.get("requests") if isinstance(res.get("requests"), Mapping) else {}
    lim = res.get("limits") if isinstance(res.get("limits"), Mapping) else {}
    assert isinstance(req, Mapping) and isinstance(lim, Mapping)
    cpu_limit = canonical_amount("cpu", lim["cpu"]) if "cpu" in lim else None
    cpu_req = canonical_amount("cpu", req["cpu"]) if "cpu" in req else cpu_limit
    mem_limit = canonical_amount("memory", lim["memory"]) if "memory" in lim else None
    return Limits(cpu_req or 0, cpu_limit, mem_limit, besteffort=besteffort)


@dataclass
class ContainerRun:
    """One container of a pod and its current process."""

    name: str
    spec: Mapping[str, Any]
    init: bool = False
    container_id: str = ""
    dirs: CgroupDirs | None = None
    popen: subprocess.Popen[bytes] | None = None
    state: ContainerState = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    restart_count: int = 0
    last_terminated: JSON | None = None
    next_start: float = 0.0
    oom_kills: int = 0

    @property
    def image(self) -> str:
        return str(self.spec.get("image") or "")

    def argv(self) -> list[str]:
        cmd = self.spec.get("command") or []
        args = self.spec.get("args") or []
        return [str(x) for x in (*cmd, *args)] if cmd else []

    def terminated_json(self) -> JSON:
        out: JSON = {
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "reason": self.reason,
            "containerID": self.full_id,
        }
        if self.started_at:
            out["startedAt"] = rfc3339(self.started_at)
        if self.finished_at:
            out["finishedAt"] = rfc3339(self.finished_at)
        if self.message:
            out["message"] = self.message
        return out

    @property
    def full_id(self) -> str:
        return f"{CONTAINER_SCHEME}://{self.container_id}" if self.container_id else ""

    def status_json(self, hollow: bool) -> JSON:
        cid = f"{HOLLOW_SCHEME}://{self.container_id}" if hollow and self.container_id else self.full_id
        st: JSON = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.state == "running",
            "restartCount": self.restart_count,
            "started": self.state == "running",
        }
        if cid:
            st["containerID"] = cid
        if self.state == "running":
            st["state"] = {"running": {"startedAt": rfc3339(self.started_at or time.time())}}
        elif self.state == "terminated":
            term = self.terminated_json()
            term["containerID"] = cid
            st["state"] = {"terminated": term}
        else:
            waiting: JSON = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            st["state"] = {"waiting": waiting}
        st["lastState"] = {"terminated": self.last_terminated} if self.last_terminated else {}
        return st


@dataclass
class PodWorker:
    """What the runner knows and does for one pod (by UID)."""

    uid: str
    namespace: str
    name: str
    pod: JSON
    qos: str
    admitted: bool
    init_containers: list[ContainerRun] = field(default_factory=list)
    containers: list[ContainerRun] = field(default_factory=list)
    dirs: CgroupDirs | None = None
    cpuset: set[int] | None = None
    oom_adj: int = 0
    start_time: float = field(default_factory=time.time)
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    terminating_since: float | None = None
    kill_deadline: float | None = None
    killed: bool = False
    gone_from_api: bool = False
    finalised: bool = False
    cleaned: bool = False
    last_status: JSON | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def restart_policy(self) -> str:
        return str(_spec(self.pod).get("restartPolicy") or "Always")

    def all_containers(self) -> list[ContainerRun]:
        return [*self.init_containers, *self.containers]

    def running(self) -> list[ContainerRun]:
        return [c for c in self.all_containers() if c.popen is not None and c.state == "running"]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """The Node this runner registers and serves."""

    name: str
    cpu_capacity_milli: int
    memory_capacity: int
    cpu_allocatable_milli: int
    memory_allocatable: int
    pods: int = 110
    address: str = "127.0.0.1"
    labels: Mapping[str, str] = field(default_factory=dict)

    def node_object(self, now: float, version: str) -> JSON:
        def cpu(m: int) -> str:
            return f"{m // 1000}" if m % 1000 == 0 else f"{m}m"

        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": os.uname().machine.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": {
                "capacity": {
                    "cpu": cpu(self.cpu_capacity_milli),
                    "memory": str(self.memory_capacity),
                    "pods": str(self.pods),
                },
                "allocatable": {
                    "cpu": cpu(self.cpu_allocatable_milli),
                    "memory": str(self.memory_allocatable),
                    "pods": str(self.pods),
                },
                "conditions": [ready_condition(now)],
                "addresses": [
                    {"type": "InternalIP", "address": self.address},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                    "kernelVersion": os.uname().release,
                    "osImage": "",
                    "containerRuntimeVersion": f"{CONTAINER_SCHEME}://host-processes",
                    "kubeletVersion": version,
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": labels["kubernetes.io/arch"],
                },
            },
        }


def ready_condition(now: float, since: float | None = None) -> JSON:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "PodRunnerReady",
        "message": "tidemark local pod runner is posting ready status (a stand-in, not a kubelet)",
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": rfc3339(since or now),
    }


class PodRunner:
    """Runs the pods bound to one Node (see the module docstring). Thread-safe start/stop."""

    def __init__(
        self,
        api_client: Any,
        node: NodeSpec,
        *,
        cgroups: KubeletCgroups | None,
        pods_dir: str,
        hollow: bool = False,
        recorder: EventRecorder | None = None,
        tick: float = 0.1,
        shutdown_grace: float = 5.0,
        version: str = "v1.20.2-tidemark-podrunner",
        env_path: str | None = None,
    ) -> None:
        if not hollow and cgroups is None:
            raise ValueError("a pod runner that runs processes needs a cgroup tree")
        self.api = api_client
        self.node = node
        self.cgroups = cgroups
        self.pods_dir = pods_dir
        self.hollow = hollow
        self.recorder = recorder or EventRecorder(api_client, COMPONENT, host=node.name)
        self._own_recorder = recorder is None
        self.tick = tick
        self.shutdown_grace = shutdown_grace
        self.version = version
        self.env_path = env_path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.workers: dict[str, PodWorker] = {}
        self.done: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready_since = time.time()
        self._last_heartbeat = 0.0
        self.errors = 0
        self.pods = Reflector.for_resource(
            api_client,
            PODS,
            field_selector=f"spec.nodeName={node.name}",
            on_change=self._on_change,
            timeout_seconds=300,
        )
        self.nodes = Reflector.for_resource(
            api_client,
            NODES,
            field_selector=f"metadata.name={node.name}",
            on_change=self._on_change,
            timeout_seconds=300,
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def register_node(self) -> None:
        """Create the Node (kubelet's registration); an existing Node keeps its labels and annotations."""
        now = time.time()
        body = self.node.node_object(now, self.version)
        try:
            request(self.api, "POST", NODES.collection_path(), body=body)
        except ApiStatusError as exc:
            if exc.status != 409:
                raise
            # Re-registration: refresh status (capacity/allocatable as kubelet does) and the Ready condition.
            request(
                self.api,
                "PATCH",
                NODES.object_path(self.node.name, subresource="status"),
                body={"status": body["status"]},
                content_type=STRATEGIC_MERGE_PATCH,
            )
        self._last_heartbeat = now

    def start(self, sync_timeout: float = 30.0) -> PodRunner:
        if not self.hollow and self.cgroups is not None:
            self.cgroups.setup()
        os.makedirs(self.pods_dir, exist_ok=True)
        self.register_node()
        self.nodes.start()
        self.pods.start()
        if not (self.nodes.wait_for_sync(sync_timeout) and self.pods.wait_for_sync(sync_timeout)):
            raise KubeError(f"pod runner for {self.node.name}: pods/node not listed within {sync_timeout:.0f}s")
        self._thread = threading.Thread(target=self._loop, name=f"podrunner {self.node.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        """Stop syncing, stop every process (SIGTERM, then SIGKILL), remove all cgroups; returns leftovers."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        self.pods.stop()
        self.nodes.stop()
        deadline = time.monotonic() + self.shutdown_grace
        for w in self.workers.values():
            for c in w.running():
                self._signal(c, signal.SIGTERM)
        while any(c.popen is not None and c.popen.poll() is None for w in self.workers.values() for c in w.running()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for w in self.workers.values():
            for c in w.running():
                self._signal(c, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    assert c.popen is not None
                    c.popen.wait(5)
            if w.dirs is not None and self.cgroups is not None:
                self.cgroups.remove_pod(w.uid, w.dirs, timeout=2)
        left: list[str] = []
        if self.cgroups is not None:
            left = self.cgroups.teardown()
        if self._own_recorder:
            self.recorder.stop(2.0)
        return left

    def _on_change(self, event_type: str, old: JSON | None, new: JSON | None) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync_once()
            except Exception:  # one bad pod or API hiccup never stops the runner
                self.errors += 1
                log.exception("pod runner sync failed")
            try:
                self._heartbeat()
            except KubeError as exc:
                log.warning("node heartbeat failed: %s", exc)

    def _heartbeat(self) -> None:
        now = time.time()
        if now - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        self._last_heartbeat = now
        request(
            self.api,
            "PATCH",
            NODES.object_path(self.node.name, subresource="status"),
            body={"status": {"conditions": [ready_condition(now, self._ready_since)]}},
            content_type=STRATEGIC_MERGE_PATCH,
        )

    # --- the sync pass -------------------------------------------------------------------------

    def node_object(self) -> JSON:
        return self.nodes.store.get(self.node.name) or {}

    def sync_once(self) -> None:
        """One pass: new pods (admission, start), every worker's processes, termination and status."""
        pods: dict[str, JSON] = {}
        for pod in self.pods.store.list():
            uid = str(_meta(pod).get("uid") or "")
            if uid and _spec(pod).get("nodeName") == self.node.name:
                pods[uid] = pod
        for uid, w in list(self.workers.items()):
            if uid not in pods:
                w.gone_from_api = True
            else:
                w.pod = pods[uid]
        new = [p for uid, p in pods.items() if uid not in self.workers and uid not in self.done]
        for pod in sorted(new, key=lambda p: (_created(p), str(_meta(p).get("name")))):
            self._first_sight(pod)
        for uid, w in list(self.workers.items()):
            try:
                self._step(w)
            except Exception:
                self.errors += 1
                log.exception("pod %s: sync failed", w.key)
            if w.cleaned and (w.gone_from_api or w.finalised):
                del self.workers[uid]
                self.done.add(uid)

    def _active(self) -> list[JSON]:
        """Pods counted against allocatable: admitted and not finished (terminating ones still count)."""
        return [w.pod for w in self.workers.values() if w.admitted and not w.cleaned]

    def _first_sight(self, pod: JSON) -> None:
        md = _meta(pod)
        uid, ns, name = str(md.get("uid")), str(md.get("namespace") or "default"), str(md.get("name"))
        phase = str((pod.get("status") or {}).get("phase") or "")
        if phase in ("Succeeded", "Failed"):
            self.done.add(uid)
            return
        if md.get("deletionTimestamp"):
            self._delete_object(ns, name, uid)
            self.done.add(uid)
            return
        node = self.node_object()
        alloc = (node.get("status") or {}).get("allocatable") or {}
        rejection = admit(pod, self._active(), alloc, _meta(node).get("labels") or {})
        if rejection is not None:
            log.info("pod %s/%s rejected: %s %s", ns, name, rejection.reason, rejection.message)
            self.recorder.warning(
                pod if pod.get("kind") else {**pod, "kind": "Pod"}, rejection.reason, rejection.message
            )
            self._patch_status(
                ns, name, uid, {"phase": "Failed", "reason": rejection.reason, "message": rejection.message}
            )
            self.done.add(uid)
            return
        qos = qos_class(pod)
        w = PodWorker(uid=uid, namespace=ns, name=name, pod=pod, qos=qos, admitted=True)
        spec = _spec(pod)
        besteffort = qos == "BestEffort"
        w.init_containers = [
            ContainerRun(str(c.get("name")), c, init=True)
            for c in spec.get("initContainers") or []
            if isinstance(c, Mapping)
        ]
        w.containers = [
            ContainerRun(str(c.get("name")), c) for c in spec.get("containers") or [] if isinstance(c, Mapping)
        ]
        raw_cpuset = (md.get("annotations") or {}).get(ANN_CPUSET)
        if raw_cpuset is not None:
            try:
                w.cpuset = parse_cpuset(str(raw_cpuset)) & set(os.sched_getaffinity(0))
                if not w.cpuset:
                    raise ValueError(f"none of {raw_cpuset!r} is online")
            except ValueError as exc:
                w.cpuset = None
                self.recorder.warning(self._ref(w), "InvalidCPUSet", f"{ANN_CPUSET}={raw_cpuset!r} ignored: {exc}")
        requests = pod_requests(pod)
        w.oom_adj = oom_score_adj(qos, requests.get("memory", 0), self.node.memory_capacity)
        self.workers[uid] = w
        if not self.hollow:
            assert self.cgroups is not None
            limits = pod_limits(pod)
            pod_cfg = Limits(
                cpu_request_milli=requests.get("cpu", 0),
                cpu_limit_milli=limits.get("cpu") if qos != "BestEffort" else None,
                memory_limit=limits.get("memory") if qos != "BestEffort" else None,
                besteffort=besteffort,
            )
            w.dirs = self.cgroups.create_pod(uid, qos, pod_cfg)  # type: ignore[arg-type]
        log.info("pod %s admitted (%s%s)", w.key, qos, f", cpus {sorted(w.cpuset)}" if w.cpuset else "")

    def _ref(self, w: PodWorker) -> ObjectRef:
        return ObjectRef(kind="Pod", name=w.name, namespace=w.namespace, uid=w.uid)

    # --- one worker ------------------------------------------------------------------------------

    def _step(self, w: PodWorker) -> None:
        now = time.time()
        self._reap(w, now)
        deleting = w.gone_from_api or bool(_meta(w.pod).get("deletionTimestamp"))
        if deleting and w.terminating_since is None:
            self._begin_termination(w, now)
        if w.terminating_since is not None:
            self._continue_termination(w, now)
            return
        self._advance(w, now)
        self._report(w)
        if w.phase in ("Succeeded", "Failed") and not w.running() and not w.cleaned:
            self._cleanup(w)

    def _reap(self, w: PodWorker, now: float) -> None:
        for c in w.all_containers():
            if c.popen is None or c.state != "running":
                continue
            rc = c.popen.poll()
            if rc is None:
                continue
            c.state = "terminated"
            c.exit_code = rc if rc >= 0 else 128 - rc
            c.finished_at = now
            c.reason = "Completed" if rc == 0 else "Error"
            if self._oom_killed(c):
                c.reason = "OOMKilled"
            c.message = ""
            log.info("pod %s container %s exited %s (%s)", w.key, c.name, c.exit_code, c.reason)

    def _oom_killed(self, c: ContainerRun) -> bool:
        if c.dirs is None:
            return False
        name = "memory.events" if c.dirs.version == "v2" else "memory.oom_control"
        try:
            with open(os.path.join(c.dirs.memory, name)) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v) > c.oom_kills
        except (OSError, ValueError):
            pass
        return False

    def _advance(self, w: PodWorker, now: float) -> None:
        """Start what should run next (init containers in order, then all containers), restart per policy."""
        policy = w.restart_policy
        for c in w.init_containers:
            if c.state == "terminated" and c.exit_code == 0:
                continue
            if c.state == "terminated":
                if policy == "Never":
                    w.phase = "Failed"
                    return
                self._schedule_restart(w, c, now)
            if c.state == "waiting" and now >= c.next_start:
                self._start(w, c, now)
            w.phase = "Pending"
            return
        for c in w.containers:
            if c.state == "terminated":
                restart = policy == "Always" or (policy == "OnFailure" and c.exit_code != 0)
                if restart:
                    self._schedule_restart(w, c, now)
            if c.state == "waiting" and now >= c.next_start:
                self._start(w, c, now)
        w.phase = self._phase(w)

    def _phase(self, w: PodWorker) -> str:
        states = [c.state for c in w.containers]
        if not states:
            return "Pending"
        if any(s == "running" for s in states):
            return "Running"
        if all(s == "terminated" for s in states):
            return "Succeeded" if all(c.exit_code == 0 for c in w.containers) else "Failed"
        if any(c.restart_count > 0 for c in w.containers):
            return "Running"  # restarting (back-off)
        return "Pending"

    def _schedule_restart(self, w: PodWorker, c: ContainerRun, now: float) -> None:
        backoff = min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** min(c.restart_count, 10))
        c.last_terminated = c.terminated_json()
        self._remove_container_group(c)
        c.restart_count += 1
        c.state = "waiting"
        c.reason = "CrashLoopBackOff" if c.exit_code != 0 else "Restarting"
        c.message = f"back-off {backoff:.0f}s restarting container {c.name}"
        c.next_start = now + (backoff if c.exit_code != 0 else 0.0)
        c.popen = None
        c.container_id = ""
        c.exit_code = None

    def _remove_container_group(self, c: ContainerRun) -> None:
        if c.dirs is not None and self.cgroups is not None:
            self.cgroups.remove_group(c.dirs, 2.0)
        c.dirs = None

    def _env(self, w: PodWorker, c: ContainerRun) -> dict[str, str]:
        env = {"PATH": self.env_path, "HOSTNAME": w.name, "HOME": os.environ.get("HOME", "/root")}
        for key in ("LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TZ"):
            if key in os.environ:
                env[key] = os.environ[key]
        # The demo pods run `python -m localcluster.loadgen`; localcluster is not installed (not in the wheel).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        md = _meta(w.pod)
        fields: dict[str, str] = {
            "metadata.name": w.name,
            "metadata.namespace": w.namespace,
            "metadata.uid": w.uid,
            "spec.nodeName": self.node.name,
            "status.hostIP": self.node.address,
            "status.podIP": self.node.address,
        }
        for item in c.spec.get("env") or []:
            if not isinstance(item, Mapping) or not item.get("name"):
                continue
            if "value" in item:
                env[str(item["name"])] = str(item.get("value") or "")
                continue
            ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if not isinstance(ref, str):
                continue
            if ref in fields:
                env[str(item["name"])] = fields[ref]
            elif ref.startswith(("metadata.annotations['", "metadata.labels['")) and ref.endswith("']"):
                where, _, key = ref[:-2].partition("['")
                source = md.get(where.split(".")[1]) or {}
                env[str(item["name"])] = str(source.get(key, ""))
        return env

    def _start(self, w: PodWorker, c: ContainerRun, now: float) -> None:
        c.container_id = secrets.token_hex(32)
        if self.hollow:
            c.state, c.reason, c.started_at = "running", "", now
            return
        argv = c.argv()
        if not argv:
            c.state = "waiting"
            c.reason = "CreateContainerConfigError"
            c.message = "the local pod runner runs host commands: spec.containers[].command is required"
            c.container_id = ""
            c.next_start = now + BACKOFF_INITIAL
            return
        assert self.cgroups is not None and w.dirs is not None
        besteffort = w.qos == "BestEffort"
        c.dirs = self.cgroups.create_container(w.dirs, c.container_id, _container_limits(c.spec, besteffort))
        c.oom_kills = self._oom_count(c.dirs)
        log_dir = os.path.join(self.pods_dir, f"{w.namespace}_{w.name}_{w.uid}", c.name)
        os.makedirs(log_dir, exist_ok=True)
        cwd = str(c.spec.get("workingDir") or "") or os.path.dirname(log_dir)
        read_fd, write_fd = os.pipe()
        try:
            with open(os.path.join(log_dir, f"{c.restart_count}.log"), "ab") as out:
                popen = subprocess.Popen(
                    ["/bin/sh", "-c", _WRAPPER, f"{w.name}/{c.name}", *argv],
                    stdin=read_fd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    start_new_session=True,
                    env=self._env(w, c),
                    cwd=cwd if os.path.isdir(cwd) else None,
                )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            c.state, c.reason, c.message = "terminated", "StartError", str(exc)
            c.exit_code, c.started_at, c.finished_at = 128, now, now
            return
        os.close(read_fd)
        try:
            # Before the command runs: into its cgroups, onto its CPUs, kubelet's OOM score.
            self.cgroups.add_process(c.dirs, popen.pid)
            if w.cpuset:
                os.sched_setaffinity(popen.pid, w.cpuset)
            with open(f"/proc/{popen.pid}/oom_score_adj", "w") as f:
                f.write(str(w.oom_adj))
            os.write(write_fd, b"go\n")
        except OSError as exc:
            log.error("pod %s container %s: cannot place process %d: %s", w.key, c.name, popen.pid, exc)
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
        finally:
            os.close(write_fd)
        c.popen = popen
        c.state, c.reason, c.message = "running", "", ""
        c.started_at = time.time()
        log.info("pod %s container %s started: pid %d, cgroup %s", w.key, c.name, popen.pid, c.dirs.cpu)
        self.recorder.normal(self._ref(w), "Started", f"Started container {c.name} (pid {popen.pid}, host process)")

    def _oom_count(self, dirs: CgroupDirs) -> int:
        name = "memory.events" if dirs.version == "v2" else "memory.oom_control"
        try:
            with open(os.path.join(dirs.memory, name)) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except (OSError, ValueError):
            pass
        return 0

    # --- termination ---------------------------------------------------------------------------

    def _grace(self, w: PodWorker) -> float:
        md = _meta(w.pod)
        if w.gone_from_api:
            return FORCE_DELETE_GRACE
        raw = md.get("deletionGracePeriodSeconds")
        if raw is None:
            raw = _spec(w.pod).get("terminationGracePeriodSeconds", 30)
        try:
            grace = float(raw)
        except (TypeError, ValueError):
            grace = 30.0
        return max(FORCE_DELETE_GRACE if grace <= 0 else 0.0, grace)

    def _signal(self, c: ContainerRun, sig: int) -> None:
        if c.popen is None or c.popen.poll() is not None:
            return
        try:
            os.killpg(c.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.popen.pid, sig)

    def _begin_termination(self, w: PodWorker, now: float) -> None:
        w.terminating_since = now
        grace = self._grace(w)
        w.kill_deadline = time.monotonic() + grace
        running = w.running()
        for c in running:
            self._signal(c, signal.SIGTERM)
        if running:
            self.recorder.normal(
                self._ref(w),
                "Killing",
                f"Stopping container(s) {', '.join(c.name for c in running)} (grace {grace:g}s)",
            )
        log.info("pod %s terminating: SIGTERM to %d container(s), grace %.0fs", w.key, len(running), grace)

    def _continue_termination(self, w: PodWorker, now: float) -> None:
        if self.hollow:  # nothing runs: every container stops at once
            for c in w.all_containers():
                if c.state == "running":
                    c.state, c.exit_code, c.reason, c.finished_at = "terminated", 0, "Completed", now
        running = [c for c in w.running() if c.popen is not None and c.popen.poll() is None]
        if running and not w.killed and w.kill_deadline is not None and time.monotonic() >= w.kill_deadline:
            for c in running:
                self._signal(c, signal.SIGKILL)
            w.killed = True
            log.info("pod %s: grace period over, SIGKILL", w.key)
        self._reap(w, now)
        if any(c.state == "running" for c in w.all_containers()):
            return
        if not w.cleaned:
            if not w.gone_from_api:
                w.phase = "Failed" if any(c.exit_code not in (0, None) for c in w.containers) else "Succeeded"
                if self.hollow:
                    w.phase = "Succeeded"
                self._report(w)
            self._cleanup(w)
        if not w.finalised and not w.gone_from_api:
            self._delete_object(w.namespace, w.name, w.uid)
            w.finalised = True

    def _cleanup(self, w: PodWorker) -> None:
        if w.dirs is not None and self.cgroups is not None and not self.cgroups.remove_pod(w.uid, w.dirs, 2.0):
            log.warning("pod %s: cgroups still busy; will retry at shutdown", w.key)
        w.cleaned = True

    # --- API writes ----------------------------------------------------------------------------

    def _report(self, w: PodWorker) -> None:
        status = self._status(w)
        comparable = _without_times(status)
        if w.last_status == comparable:
            return
        if self._patch_status(w.namespace, w.name, w.uid, status):
            w.last_status = comparable

    def _status(self, w: PodWorker) -> JSON:
        now = time.time()
        ready = w.phase == "Running" and all(c.state == "running" for c in w.containers)
        initialized = all(c.state == "terminated" and c.exit_code == 0 for c in w.init_containers)

        def cond(kind: str, ok: bool) -> JSON:
            return {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(now),
            }

        return {
            "phase": w.phase,
            "hostIP": self.node.address,
            "podIP": self.node.address,
            "podIPs": [{"ip": self.node.address}],
            "startTime": rfc3339(w.start_time),
            "qosClass": w.qos,
            "conditions": [
                cond("Initialized", initialized),
                cond("Ready", ready),
                cond("ContainersReady", ready),
                cond("PodScheduled", True),
            ],
            "initContainerStatuses": [c.status_json(self.hollow) for c in w.init_containers],
            "containerStatuses": [c.status_json(self.hollow) for c in w.containers],
        }

    def _patch_status(self, ns: str, name: str, uid: str, status: JSON) -> bool:
        body = {"metadata": {"uid": uid}, "status": status}
        try:
            request(
                self.api, "PATCH", PODS.object_path(name, ns, "status"), body=body, content_type=STRATEGIC_MERGE_PATCH
            )
        except ApiStatusError as exc:
            if exc.status in (404, 409):
                return False
            log.warning("pod %s/%s: status update failed: %s", ns, name, exc)
            return False
        except KubeError as exc:
            log.warning("pod %s/%s: status update failed: %s", ns, name, exc)
            return False
        return True

    def _delete_object(self, ns: str, name: str, uid: str) -> None:
        """kubelet's final step: delete with grace 0, only this incarnation (UID precondition)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            request(self.api, "DELETE", PODS.object_path(name, ns), body=body)
        except ApiStatusError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: final delete failed: %s", ns, name, exc)
        except KubeError as exc:
            log.warning("pod %s/%s: final delete failed: %s", ns, name, exc)
        else:
            log.info("pod %s/%s deleted (grace 0) after its processes stopped", ns, name)


def _without_times(status: Mapping[str, Any]) -> JSON:
    """The status minus lastTransitionTime of conditions: what decides whether to write again."""
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions", [])
    ]
    return out


def host_capacity() -> tuple[int, int]:
    """(cpu milli-cores, memory bytes) of this machine: online CPUs and MemTotal."""
    cpus = os.cpu_count() or 1
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    return cpus * 1000, mem
