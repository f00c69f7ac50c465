"""An in-process agent over a fake kubelet tree, an in-memory cluster and recording fakes of the API writers.

Mocks (said here, as docs/testing.md asks): the API side is replaced by `FakeNodeWriter` (applies merge
patches to the in-memory Node), `FakeEvictor` (scripted outcomes) and `RecordingEvents`; the real API
is exercised in tests/integration/agent_live/. Time is a `FakeClock` whose sleeps advance the tree's
counters; `Harness.tick(n)` advances one sampler period and runs `Agent.step()`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.act.evictor import EvictResult
from agent.act.statedir import StateDir
from agent.cgroups.fs import FileReader
from agent.daemon.agent import Agent, AgentOptions
from agent.daemon.cluster import StaticCluster
from agent.daemon.configsource import ConfigSource
from agent.decide.ops import EvictPod
from agent.sense.procfs import ProcFS
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tidemark.clock import FakeClock
from tidemark.nodereport import ReportSpec, node_changes, with_taint

JSON = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def node_obj(
    name: str = "n1",
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
    rv: int = 1,
) -> JSON:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"node-uid-{name}",
            "resourceVersion": str(rv),
            "labels": dict(
                labels
                if labels is not None
                else {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"}
            ),
            "annotations": dict(annotations or {}),
        },
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}, "capacity": {"cpu": cpu}},
    }


def pod_obj(
    uid: str,
    name: str,
    *,
    ns: str = "default",
    qos: str | None = None,
    qos_class: str = "BestEffort",
    requests: Mapping[str, str] | None = None,
    containers: Mapping[str, str] | None = None,
    created: str = "2024-01-01T00:00:00Z",
    rv: int = 1,
    node: str = "n1",
    priority: int = 0,
) -> JSON:
    annotations = {"volcano.sh/qos-level": qos} if qos is not None else {}
    specs = []
    statuses = []
    for cname, cid in (containers or {"c": f"containerd://{uid.replace('-', '')[:12]:0<64}"}).items():
        specs.append({"name": cname, "resources": {"requests": dict(requests or {})}})
        statuses.append({"name": cname, "containerID": cid})
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "resourceVersion": str(rv),
            "annotations": annotations,
            "creationTimestamp": created,
        },
        "spec": {"nodeName": node, "containers": specs, "priority": priority, "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "qosClass": qos_class, "containerStatuses": statuses},
    }


class FakeNodeWriter:
    """Puts each written `ReportSpec` on the cluster's Node as the NodeReport controller would (through
    `tidemark.nodereport.node_changes`, bumping resourceVersion); `fail` makes calls raise."""

    def __init__(self, cluster: StaticCluster) -> None:
        self.cluster = cluster
        self.writes: list[ReportSpec] = []
        self.fail: Exception | None = None

    def write(self, spec: ReportSpec) -> JSON:
        if self.fail is not None:
            raise self.fail
        self.writes.append(spec)
        node = self.cluster.node()
        assert node is not None
        changes = node_changes(spec.patch(), node)
        new = copy.deepcopy(node)
        if changes.annotations:
            new = merge_patch(new, {"metadata": {"annotations": changes.annotations}})
        if changes.status:
            new = merge_patch(new, changes.status)
        if changes.taint is not None:
            taints = with_taint(list(new.setdefault("spec", {}).get("taints") or []), changes.taint)
            new["spec"]["taints"] = taints if taints is not None else new["spec"].get("taints")
        md = new["metadata"]
        md["resourceVersion"] = str(int(md.get("resourceVersion") or 0) + 1)
        self.cluster.set_node(new)
        return new


class FakeEvictor:
    """Records eviction calls; `outcomes[uid]` scripts a result (default: evicted, and the pod terminates)."""

    def __init__(self, cluster: StaticCluster, clock: FakeClock) -> None:
        self.cluster = cluster
        self.clock = clock
        self.calls: list[EvictPod] = []
        self.outcomes: dict[str, EvictResult] = {}
        #: the Node's evicting annotation at each call (the Node must be marked before the first)
        self.node_marked_at_call: list[bool] = []

    def evict(self, op: EvictPod) -> EvictResult:
        self.calls.append(op)
        node = self.cluster.node() or {}
        self.node_marked_at_call.append(
            (node.get("metadata", {}).get("annotations") or {}).get("volcano.sh/offline-job-evicting") == "true"
        )
        result = self.outcomes.get(op.uid, EvictResult("evicted", status=201))
        if result.outcome == "evicted":
            for p in self.cluster.pods():
                if p["metadata"]["uid"] == op.uid:
                    p = copy.deepcopy(p)
                    from agent.decide.capacity import rfc3339

                    p["metadata"]["deletionTimestamp"] = rfc3339(self.clock.wall() + 30)
                    p["metadata"]["resourceVersion"] = str(int(p["metadata"]["resourceVersion"]) + 1)
                    self.cluster.put_pod(p)
        return result


@dataclass
class RecordingEvents:
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # (object name, type, reason, message)

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((str((obj.get("metadata") or {}).get("name")), type_, reason, message))

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]


@dataclass
class Harness:
    tree: KubeletCgroupTree
    clock: FakeClock
    cluster: StaticCluster
    agent: Agent
    node_writer: FakeNodeWriter
    evictor: FakeEvictor
    events: RecordingEvents
    state: StateDir | None
    cores: dict[str, float] = field(default_factory=dict)
    other_cores: float = 0.0

    def tick(self, n: int = 1, seconds: float | None = None) -> None:
        """Let one sampler period pass (pods burn `cores`), then run the agent's due duties; n times."""
        period = self.agent.keeper.config.sampler.period if seconds is None else seconds
        for _ in range(n):
            self.clock.sleep(period)
            self.agent.step()

    def node(self) -> JSON:
        node = self.cluster.node()
        assert node is not None
        return node

    def annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})


def make_harness(
    tree: KubeletCgroupTree,
    tmp_path: Path,
    *,
    node: JSON | None = None,
    pods: list[JSON] | None = None,
    config_text: str | None = None,
    dry_run: bool = False,
    state: bool = True,
    options: AgentOptions | None = None,
    configure: Callable[[Harness], None] | None = None,
) -> Harness:
    clock = FakeClock()
    cluster = StaticCluster(node if node is not None else node_obj(), pods or [], clock=clock.monotonic)
    config_path = None
    if config_text is not None:
        config_path = str(tmp_path / "agent.yaml")
        Path(config_path).write_text(config_text)
    source = ConfigSource(config_path)
    assert source.load().accepted
    state_dir = None
    if state:
        state_dir = StateDir(str(tmp_path / "state"), fsync=False)
        assert state_dir.try_lock()
        state_dir.load()
    reader = FileReader()
    events = RecordingEvents()
    writer = FakeNodeWriter(cluster)
    evictor = FakeEvictor(cluster, clock)
    agent = Agent(
        node_name="n1",
        layout=tree.layout,
        procfs=ProcFS(tree.proc_root, reader, clk_tck=100),
        reader=reader,
        clock=clock,
        cluster=cluster,
        config=source,
        state=state_dir,
        node_writer=writer,
        evictor=evictor,
        events=events,
        options=options or AgentOptions(dry_run=dry_run, threaded_api=False, config_poll=1.0),
    )
    h = Harness(tree, clock, cluster, agent, writer, evictor, events, state_dir)
    clock.hooks.append(lambda s: tree.advance(s, h.cores, h.other_cores))
    if configure is not None:
        configure(h)
    agent.start()
    agent.step()
    return h


__all__ = ["GiB", "Harness", "RecordingEvents", "make_harness", "node_obj", "pod_obj"]
