"""The live agent against a real kube-apiserver (RBAC) and the machine's real cgroup v1 hierarchy.

The test stands in for kubelet: it creates the Node (status: allocatable), creates Pods bound to it
(`spec.nodeName`), makes their cgroups in a kubelet-like tree under a unique prefix (`real_cgroup_v1`),
starts real processes in them, and reports the pods Running and Ready with `containerStatuses` whose
container IDs name those cgroups. When a pod is evicted (a deletionTimestamp), `LiveNode.kubelet()`
does kubelet's part: kills the process, removes the pod's cgroups and deletes the Pod with grace 0.

What a kubelet does is asserted on a real one (tests/integration/localcluster/test_realnode.py, the
session fixture tests/fixtures/realnode.py): the agent's DaemonSet pod Ready and publishing B and X,
the offline knobs in kubelet's own cgroup tree, online keeping >= 90 % of a contended CPU, eviction
ending with kubelet killing the offline containers, restarts. The test that asserted those here with
a hand-made tree moved there. What stays here needs only the API server and cgroups, and what it
asserts could not be controlled on the real node, where this shared machine's other work moves the
usage the agent measures:
- test_live_agent.py: which victims and how many (exact memory amounts held by our own processes,
  the Node marked before the first eviction, hysteresis between the watermarks, our taint beside a
  foreign one), an online pod never evicted, a PodDisruptionBudget refusal (the Eviction API's 429),
  a rejected config and the feature switched off restoring every knob;
- test_live_resilience.py: an API outage (the client pointed at a closed port), malformed
  annotations, the restore command, a killed agent's journal replayed, `run --once`, SIGTERM, and
  the uninstall check against a DaemonSet (read with the agent's own RBAC).

The agent authenticates as the token user `tidemark-agent`, bound to EXACTLY the ClusterRole in
daemonset/agent/rbac.yaml (`agent_rbac`): every test is a proof that those rules suffice. That role writes no
Node: the agent writes its NodeReport, and the NodeReport controller the webhook's pods run
(`scheduler_ext.controller.nodereport`) applies it, here in-process with the admin's client
(`node_report_controller`; its own rights and the webhook's judging are tested in
tests/integration/scheduler/test_agent_rights_api.py). The agent holds no eviction right either: it asks the
same controller in its NodeReport, which evicts (tests/integration/scheduler/test_eviction_asks_api.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cgroups.fs import FileReader
from tests.fixtures.cgroups import RealCgroupV1Tree, RealProcess
from tests.fixtures.kubeapi import KubeAPIServer, KubeNamespace
from tidemark.kube.client import ApiStatusError, RateLimitedApiClient, new_api_client, request_json
from tidemark.kube.resources import NODES, PODS

REPO = Path(__file__).resolve().parents[3]
RBAC_FILE = REPO / "daemonset" / "agent" / "rbac.yaml"
AGENT_USER = "tidemark-agent"
MERGE_PATCH = "application/merge-patch+json"
FAST_CONFIG = """\
sampler: {period: 200ms, window: 4s}
capacity: {period: 600ms, publish: {resync: 5s}}
eviction: {consecutive: 3, period: 200ms, terminating_slack: 2s, refused_retry: 30s}
qos: {reconcile: 1s}
"""


def wait_for(
    condition: Callable[[], object], what: str, timeout: float = 20.0, every: Callable[[], None] | None = None
) -> Any:
    """Poll `condition` (running `every` first each round) until truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        if every is not None:
            every()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def agent_rbac(kube_apiserver: KubeAPIServer) -> dict[str, Any]:
    """The ClusterRole from daemonset/agent/rbac.yaml, bound to the token user `tidemark-agent` (and nothing else)."""
    docs = [d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    api = new_api_client(configuration=kube_apiserver.admin_client().configuration)
    path = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    try:
        request_json(api, "POST", path, body=role)
    except ApiStatusError as e:
        if e.status != 409:
            raise
        request_json(api, "PUT", f"{path}/{role['metadata']['name']}", body=role)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "tidemark-agent-test-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": AGENT_USER}],
    }
    try:
        request_json(api, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
    except ApiStatusError as e:
        if e.status != 409:
            raise
    agent = new_api_client(configuration=kube_apiserver.client_for(AGENT_USER).configuration)

    def allowed() -> bool:
        try:
            request_json(agent, "GET", NODES.collection_path(), query={"limit": 1})
        except ApiStatusError as e:
            if e.status == 403:
                return False
            raise
        return True

    wait_for(allowed, "the agent's ClusterRole to take effect")
    return role


@pytest.fixture(scope="package")
def node_report_controller(kube_apiserver: KubeAPIServer) -> Iterator[Any]:
    """The NodeReport controller of the webhook's pods, applying every agent's report to its Node. Package-scoped:
    it watches every NodeReport of the shared API server with admin rights, so left running it would answer the
    eviction asks of later packages' tests that count their own controllers' answers (test_eviction_asks_api)."""
    from scheduler_ext.controller.nodereport import NodeReportController

    api = new_api_client(configuration=kube_apiserver.admin_client().configuration)
    controller = NodeReportController(api, resync=30.0).start()
    try:
        yield controller
    finally:
        controller.stop()


def agent_client(server: KubeAPIServer) -> RateLimitedApiClient:
    """The agent's client (token user tidemark-agent), from a hand-built Configuration whose host a test may change."""
    from kubernetes import client as k8s_client

    cfg = k8s_client.Configuration(host=server.api_url)
    cfg.api_key = {"authorization": server.token(AGENT_USER)}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.verify_ssl = False
    return new_api_client(configuration=cfg, user_agent="tidemark-agent-test")


@dataclass
class LivePod:
    name: str
    uid: str
    cid: str
    qos_class: str
    process: RealProcess | None = None


@dataclass
class RunningAgent:
    agent: Any
    thread: threading.Thread
    events: Any
    state: Any
    api: RateLimitedApiClient
    stopped: bool = False

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.agent.stop()
        self.thread.join(15)
        self.agent.shutdown()
        self.events.stop(1.0)
        if self.state is not None:
            self.state.unlock()


@dataclass
class LiveNode:
    kube: KubeNamespace
    tree: RealCgroupV1Tree
    tmp: Path
    admin: RateLimitedApiClient
    name: str = ""
    pods: dict[str, LivePod] = field(default_factory=dict)
    agents: list[RunningAgent] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)

    # --- the cluster side (the test is kubelet) --------------------------------------------------------

    def create_node(
        self,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        cpu: str = "2",
        memory: str = "8Gi",
    ) -> str:
        self.name = self.kube.unique("agent-node")
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels
                if labels is not None
                else {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"},
                "annotations": annotations or {},
            },
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        request_json(self.admin, "POST", NODES.collection_path(), body=body)
        name = self.name
        self.kube.defer(lambda: _delete(self.admin, NODES.object_path(name)))
        return name

    def node(self) -> dict[str, Any]:
        return request_json(self.admin, "GET", NODES.object_path(self.name))

    def annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})

    def patch_node(self, body: dict[str, Any]) -> None:
        request_json(self.admin, "PATCH", NODES.object_path(self.name), body=body, content_type=MERGE_PATCH)

    def add_pod(
        self,
        name: str,
        *,
        qos: str | None = None,
        requests: dict[str, str] | None = None,
        busy: bool = True,
        cpu: int = 0,
        memory_bytes: int = 0,
        labels: dict[str, str] | None = None,
        start: bool = True,
    ) -> LivePod:
        """Create the Pod bound to the node, its cgroups and process, then report it Running and Ready."""
        annotations = {"volcano.sh/qos-level": qos} if qos is not None else {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.kube.name, "annotations": annotations, "labels": labels or {}},
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {"name": "c", "image": "registry.invalid/none", "resources": {"requests": dict(requests or {})}}
                ],
            },
        }
        created = request_json(self.admin, "POST", PODS.collection_path(self.kube.name), body=body)
        uid = created["metadata"]["uid"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": self.kube.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        request_json(self.admin, "POST", PODS.object_path(name, self.kube.name, "binding"), body=binding)
        qos_class = created["status"]["qosClass"]
        cid = secrets.token_hex(32)
        milli = _milli((requests or {}).get("cpu", "0"))
        self.tree.add_pod(uid, qos_class, {"c": f"containerd://{cid}"}, cpu_request_milli=milli)
        pod = LivePod(name, uid, cid, qos_class)
        if start:
            pod.process = self.tree.start_process(uid, "c", memory_bytes=memory_bytes, busy=busy, cpu=cpu)
        self.pods[name] = pod
        self.report_running(name)
        return pod

    def report_running(self, name: str) -> None:
        pod = self.pods[name]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "containerID": f"containerd://{pod.cid}",
                    "image": "registry.invalid/none",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
        request_json(
            self.admin,
            "PATCH",
            PODS.object_path(name, self.kube.name, "status"),
            body={"status": status},
            content_type=MERGE_PATCH,
        )

    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return request_json(self.admin, "GET", PODS.object_path(name, self.kube.name))
        except ApiStatusError as e:
            if e.status == 404:
                return None
            raise

    def terminating(self, name: str) -> bool:
        pod = self.pod(name)
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    def kubelet(self) -> None:
        """kubelet's part for evicted pods: stop the process, remove the cgroups, delete the Pod (grace 0)."""
        for name, pod in self.pods.items():
            if name in self.removed:
                continue
            obj = self.pod(name)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                continue
            self.removed.add(name)
            self.stop_process(name)
            dirs = self.tree.pods[pod.uid]
            for d in [*dirs.containers.values(), dirs.dirs]:
                for path in d.distinct():
                    with contextlib.suppress(OSError):
                        os.rmdir(path)
            if obj is not None:
                _delete(self.admin, PODS.object_path(name, self.kube.name))

    def stop_process(self, name: str) -> None:
        pod = self.pods[name]
        if pod.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pod.process.pid, 9)
            with contextlib.suppress(Exception):
                pod.process.popen.wait(timeout=5)

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for ns in (self.kube.name, "default"):
            body = request_json(self.admin, "GET", f"/api/v1/namespaces/{ns}/events")
            items.extend(body.get("items") or [])
        names = {self.name, *self.pods}
        return [
            e
            for e in items
            if (e.get("involvedObject") or {}).get("name") in names and (reason is None or e.get("reason") == reason)
        ]

    # --- the agent ----------------------------------------------------------------------------------

    def start_agent(
        self,
        config: str = FAST_CONFIG,
        *,
        api: RateLimitedApiClient | None = None,
        watch_timeout: int = 30,
        **options: Any,
    ) -> RunningAgent:
        from agent.act.report_evictor import ReportEvictor
        from agent.act.report_writer import ReportWriter
        from agent.act.statedir import StateDir
        from agent.daemon.agent import Agent, AgentOptions
        from agent.daemon.cluster import KubeCluster
        from agent.daemon.configsource import ConfigSource
        from agent.sense.procfs import ProcFS
        from tidemark.clock import SystemClock
        from tidemark.kube.events import EventRecorder

        api = api or agent_client(self.kube.server)
        config_path = self.tmp / "agent.yaml"
        config_path.write_text(config)
        source = ConfigSource(str(config_path))
        assert source.load().accepted
        state = StateDir(str(self.tmp / "state"))
        assert state.try_lock(), "another agent holds the test's state dir"
        state.load()
        reader = FileReader()
        events = EventRecorder(api, "tidemark-agent", host=self.name)
        options.setdefault("config_poll", 0.2)
        agent = Agent(
            node_name=self.name,
            layout=self.tree.layout,
            procfs=ProcFS("/proc", reader),
            reader=reader,
            clock=SystemClock(),
            cluster=KubeCluster(api, self.name, watch_timeout=watch_timeout),
            config=source,
            state=state,
            node_writer=ReportWriter(api, self.name),  # the default `--node-writes report`: no Node rights
            evictor=ReportEvictor(api, self.name),  # the default: asks the controller, no eviction right
            events=events,
            options=AgentOptions(**options),
        )
        agent.start()
        thread = threading.Thread(target=agent.run, name="agent", daemon=True)
        thread.start()
        running = RunningAgent(agent, thread, events, state, api)
        self.agents.append(running)
        return running

    def state_dir(self) -> str:
        return str(self.tmp / "state")

    def cli_args(self, *, config: str = FAST_CONFIG) -> list[str]:
        """`tidemark-agent run` flags for this node (the agent's kubeconfig, this test's tree and state dir)."""
        path = self.tmp / "agent.yaml"
        path.write_text(config)
        return [
            "--node-name",
            self.name,
            "--kubeconfig",
            str(self.kube.server.kubeconfig_path(AGENT_USER)),
            "--config",
            str(path),
            "--cgroup-root",
            self.tree.cgroup_root,
            "--kube-cgroup-root",
            self.tree.kube_cgroup_root,
            "--cgroup-driver",
            "cgroupfs",
            "--state-dir",
            self.state_dir(),
            "--listen-address",
            "127.0.0.1:0",
        ]

    def cycles(self, running: RunningAgent, decisions: int = 0, reconciles: int = 0) -> None:
        """Wait until the agent made `decisions` more decisions and `reconciles` more full knob reads.

        For checks that something does NOT happen: a bound on the agent's own progress, not a fixed sleep.
        """
        agent = running.agent
        d0 = agent.cycle.decisions
        h = agent.stats.loop_durations.get("qos_sense")
        r0 = h.count if h is not None else 0

        def done() -> bool:
            hist = agent.stats.loop_durations.get("qos_sense")
            reconciled = hist.count if hist is not None else 0
            return agent.cycle.decisions >= d0 + decisions and reconciled >= r0 + reconciles

        wait_for(done, f"{decisions} decisions and {reconciles} reconciles of the agent", every=self.kubelet)

    def write_config(self, text: str) -> None:
        path = self.tmp / "agent.yaml"
        tmp = self.tmp / "agent.yaml.new"
        tmp.write_text(text)
        os.replace(tmp, path)  # a new inode, as a ConfigMap's symlink swap


def _milli(q: str) -> int:
    return int(float(q[:-1])) if q.endswith("m") else int(float(q) * 1000)


def _delete(api: Any, path: str) -> None:
    try:
        request_json(api, "DELETE", path, query={"gracePeriodSeconds": 0})
    except ApiStatusError as e:
        if e.status != 404:
            raise


@pytest.fixture
def live(
    kube: KubeNamespace,
    real_cgroup_v1: RealCgroupV1Tree,
    agent_rbac: dict[str, Any],
    node_report_controller: Any,
    tmp_path: Path,
) -> Iterator[LiveNode]:
    admin = new_api_client(configuration=kube.server.admin_client().configuration)
    node = LiveNode(kube, real_cgroup_v1, tmp_path, admin)
    try:
        yield node
    finally:
        for a in node.agents:
            a.stop()


def read_knob(path: str, file: str) -> str:
    with open(os.path.join(path, file)) as f:
        return f.read().strip()
