"""Property tests of whole sessions on random small clusters (docs/design.md, "Invariants for property tests").

Clusters: a few nodes, some labelled `volcano.sh/oversubscription=true` with X, some evicting; pods
already running (a valid starting state), some of them being deleted (so allocate also pipelines);
pending online/offline pods in gang jobs and single-pod
jobs with random priorities and queues. The conf is examples/volcano-scheduler.conf (an equivalent
inline conf when the file is absent). After a session:
- at each placement (binds in order, on top of the running pods, releasing ones included: they
  still hold the node): on a labelled node an online pod
  keeps `sum(online requests) <= allocatable` and an offline pod keeps `sum(all requests) <=
  allocatable + X`; elsewhere `sum(all requests) <= allocatable`; no offline pod on an evicting node;
- gangs are all-or-nothing: bound + running >= minMember, or none of the job's pending pods bound;
- the job, task and queue orders are strict total orders (and their sort keys agree with them);
- the same input gives the same output.
Requests are plain integers (milli-cpu, bytes), so the checks are exact.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import parse_conf
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS

NOW = 1_700_000_000.0
GI = 1024**3
MI = 1024**2
EXAMPLE_CONF = Path(__file__).resolve().parents[3] / "examples" / "volcano-scheduler.conf"
INLINE_CONF = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: oversubscription
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def conf_text() -> str:
    return EXAMPLE_CONF.read_text() if EXAMPLE_CONF.exists() else INLINE_CONF


# --- the model the checks use (independent of the scheduler's own accounting) -------------------------


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu: int  # milli
    mem: int  # bytes
    max_pods: int
    labelled: bool
    x_cpu: int
    x_mem: int
    evicting: bool


@dataclass(frozen=True)
class PodSpec:
    name: str
    cpu: int
    mem: int
    offline: bool
    node: str = ""  # running there when set
    releasing: bool = False  # running and being deleted (its resources free up later: pipelining)


@dataclass(frozen=True)
class JobSpec:
    name: str
    queue: str
    min_member: int
    priority: str  # "" or a PriorityClass name
    pods: tuple[PodSpec, ...]


@dataclass
class ClusterSpec:
    nodes: list[NodeSpec]
    running: list[PodSpec]
    jobs: list[JobSpec]
    queues: list[str] = field(default_factory=lambda: ["q1"])

    def pod(self, key: str) -> PodSpec:
        name = key.split("/", 1)[1]
        for p in self.running:
            if p.name == name:
                return p
        for j in self.jobs:
            for p in j.pods:
                if p.name == name:
                    return p
        raise KeyError(key)


def node_obj(n: NodeSpec) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": n.name}
    ann: dict[str, str] = {}
    if n.labelled:
        labels["volcano.sh/oversubscription"] = "true"
    # the agent writes X everywhere it may; only labelled nodes honour it
    ann["volcano.sh/oversubscription-cpu"] = str(n.x_cpu)
    ann["volcano.sh/oversubscription-memory"] = str(n.x_mem)
    if n.evicting:
        ann["volcano.sh/offline-job-evicting"] = "true"
    res = {"cpu": f"{n.cpu}m", "memory": str(n.mem), "pods": str(n.max_pods)}
    return {
        "kind": "Node",
        "metadata": {"name": n.name, "labels": labels, "annotations": ann},
        "spec": {},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }


def pod_obj(p: PodSpec, *, group: str = "", priority: str = "", prio_value: int = 0) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if p.offline:
        ann["volcano.sh/qos-level"] = "-1"
    if group:
        ann["scheduling.k8s.io/group-name"] = group
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{p.cpu}m", "memory": str(p.mem)}}}],
    }
    if priority:
        spec["priorityClassName"] = priority
        spec["priority"] = prio_value
    if p.node:
        spec["nodeName"] = p.node
    md: dict[str, Any] = {"name": p.name, "namespace": "ns", "uid": f"uid-{p.name}", "annotations": ann}
    if p.releasing:
        md["deletionTimestamp"] = "2023-11-14T00:00:00Z"
    return {
        "kind": "Pod",
        "metadata": md,
        "spec": spec,
        "status": {"phase": "Running" if p.node else "Pending"},
    }


PRIORITIES = {"low": -100, "high": 1000}


def objects(c: ClusterSpec) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {"kind": "PriorityClass", "metadata": {"name": name}, "value": v} for name, v in PRIORITIES.items()
    ]
    objs += [
        {"kind": "Queue", "metadata": {"name": q}, "spec": {"weight": i + 1}, "status": {"state": "Open"}}
        for i, q in enumerate(c.queues)
    ]
    objs += [node_obj(n) for n in c.nodes]
    objs += [pod_obj(p) for p in c.running]
    for j in c.jobs:
        pg: dict[str, Any] = {
            "kind": "PodGroup",
            "metadata": {"name": j.name, "namespace": "ns"},
            "spec": {"queue": j.queue, "minMember": j.min_member},
            "status": {"phase": "Pending"},
        }
        if j.priority:
            pg["spec"]["priorityClassName"] = j.priority
        objs.append(pg)
        objs += [
            pod_obj(p, group=j.name, priority=j.priority, prio_value=PRIORITIES.get(j.priority, 0)) for p in j.pods
        ]
    return objs


# --- strategies ---------------------------------------------------------------------------------------

node_specs = st.builds(
    lambda i, cpu, mem, pods, labelled, xc, xm, ev: NodeSpec(f"n{i}", cpu, mem, pods, labelled, xc, xm, ev),
    st.just(0),
    st.sampled_from([2000, 4000, 8000]),
    st.sampled_from([4 * GI, 8 * GI, 16 * GI]),
    st.sampled_from([4, 110]),
    st.booleans(),
    st.sampled_from([0, 500, 2000, 4000]),
    st.sampled_from([0, 512 * MI, 2 * GI, 8 * GI]),
    st.sampled_from([False, False, False, True]),
)
requests = st.tuples(
    st.sampled_from([100, 500, 1000, 1500, 2000, 3000]), st.sampled_from([128 * MI, 512 * MI, GI, 2 * GI, 4 * GI])
)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    raw_nodes = draw(st.lists(node_specs, min_size=1, max_size=4))
    nodes = [
        NodeSpec(f"n{i}", n.cpu, n.mem, n.max_pods, n.labelled, n.x_cpu, n.x_mem, n.evicting)
        for i, n in enumerate(raw_nodes)
    ]
    queues = ["q1", "q2"][: draw(st.integers(1, 2))]
    # running pods: kept only where they leave the node in a valid state (the starting point is valid)
    running: list[PodSpec] = []
    model = Model(nodes)
    for i in range(draw(st.integers(0, 6))):
        cpu, mem = draw(requests)
        p = PodSpec(f"run-{i}", cpu, mem, draw(st.booleans()), draw(st.sampled_from([n.name for n in nodes])),
                    draw(st.sampled_from([False, False, False, True])))
        if not model.violations(p, p.node):
            model.place(p, p.node)
            running.append(p)
    jobs: list[JobSpec] = []
    for j in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(["online", "offline", "mixed"]))
        pods = []
        for k in range(size):
            cpu, mem = draw(requests)
            off = kind == "offline" or (kind == "mixed" and draw(st.booleans()))
            pods.append(PodSpec(f"j{j}-t-{k}", cpu, mem, off))
        jobs.append(
            JobSpec(
                f"j{j}",
                draw(st.sampled_from(queues)),
                draw(st.integers(1, size)),
                draw(st.sampled_from(["", "low", "high"])),
                tuple(pods),
            )
        )
    return ClusterSpec(nodes, running, jobs, queues)


# --- the checker --------------------------------------------------------------------------------------


class Model:
    """Requests on each node, split online/offline, and the rules a placement must keep."""

    def __init__(self, nodes: list[NodeSpec]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.all = {n.name: [0, 0] for n in nodes}
        self.online = {n.name: [0, 0] for n in nodes}
        self.count = {n.name: 0 for n in nodes}

    def violations(self, p: PodSpec, node: str) -> list[str]:
        n = self.nodes[node]
        out: list[str] = []
        new_all = (self.all[node][0] + p.cpu, self.all[node][1] + p.mem)
        new_on = (self.online[node][0] + p.cpu, self.online[node][1] + p.mem)
        if self.count[node] + 1 > n.max_pods:
            out.append(f"{p.name} on {node}: more than {n.max_pods} pods")
        if p.offline and n.evicting:
            out.append(f"offline {p.name} on evicting node {node}")
        if n.labelled:
            if p.offline:
                if new_all[0] > n.cpu + n.x_cpu or new_all[1] > n.mem + n.x_mem:
                    out.append(f"offline {p.name} on {node}: all requests {new_all} > allocatable + X")
            elif new_on[0] > n.cpu or new_on[1] > n.mem:
                out.append(f"online {p.name} on {node}: online requests {new_on} > allocatable")
        elif new_all[0] > n.cpu or new_all[1] > n.mem:
            out.append(f"{p.name} on {node}: requests {new_all} > allocatable")
        return out

    def place(self, p: PodSpec, node: str) -> None:
        self.all[node][0] += p.cpu
        self.all[node][1] += p.mem
        if not p.offline:
            self.online[node][0] += p.cpu
            self.online[node][1] += p.mem
        self.count[node] += 1


def check_placements(c: ClusterSpec, binds: list[tuple[str, str]]) -> list[str]:
    """Replay the binds in order over the running pods; every rule violation, as text."""
    model = Model(c.nodes)
    for p in c.running:
        model.place(p, p.node)
    problems: list[str] = []
    for key, node in binds:
        p = c.pod(key)
        problems += model.violations(p, node)
        model.place(p, node)
    return problems


def check_gangs(c: ClusterSpec, binds: list[tuple[str, str]]) -> list[str]:
    bound = {k.split("/", 1)[1] for k, _ in binds}
    problems = []
    for j in c.jobs:
        n = sum(1 for p in j.pods if p.name in bound)
        if 0 < n < j.min_member:
            problems.append(f"gang {j.name}: {n} of minMember {j.min_member} bound")
    return problems


# --- running sessions ---------------------------------------------------------------------------------


def open_(c: ClusterSpec) -> Session:
    conf, _ = parse_conf(conf_text(), ACTIONS, PLUGINS)
    return open_session(build_cluster(objects(c), now=NOW), conf, PLUGINS)


def run_session(c: ClusterSpec) -> tuple[list[tuple[str, str]], dict[str, str], Session]:
    conf, _ = parse_conf(conf_text(), ACTIONS, PLUGINS)
    ssn = open_session(build_cluster(objects(c), now=NOW), conf, PLUGINS)
    for name in conf.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    binds = [(b.task.key, b.node) for b in ssn.binds]
    phases = {str(j.uid): j.pod_group.phase for j in ssn.jobs.values()}
    return binds, phases, ssn


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(clusters())
def test_capacity_invariants_and_gangs(c: ClusterSpec) -> None:
    binds, _phases, _ssn = run_session(c)
    assert check_placements(c, binds) == []
    assert check_gangs(c, binds) == []


@PROPS
@given(clusters())
def test_same_input_same_output(c: ClusterSpec) -> None:
    first = run_session(copy.deepcopy(c))
    second = run_session(copy.deepcopy(c))
    assert first[0] == second[0]
    assert first[1] == second[1]


def _strict_total_order(items: list[Any], before: Any) -> None:
    for a in items:
        assert not before(a, a)
    for a, b in itertools.combinations(items, 2):
        assert before(a, b) != before(b, a), (a, b)
    for a, b, d in itertools.permutations(items, 3):
        if before(a, b) and before(b, d):
            assert before(a, d), (a, b, d)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_orders_are_total(c: ClusterSpec) -> None:
    ssn = open_(c)
    jobs = list(ssn.jobs.values())
    _strict_total_order(jobs, ssn.job_order_fn)
    tasks = [t for j in jobs for t in j.tasks.values()][:12]
    _strict_total_order(tasks, ssn.task_order_fn)
    # queues that hold jobs (actions only ever order those; proportion knows no others)
    queues = [q for q in ssn.queues.values() if any(j.queue == q.uid for j in jobs)]
    _strict_total_order(queues, ssn.queue_order_fn)
    checks: list[tuple[Any, list[Any], Any]] = [
        (ssn.job_order_key_fn(), jobs, ssn.job_order_fn),
        (ssn.task_order_key_fn(), tasks, ssn.task_order_fn),
        (ssn.queue_order_key_fn(), queues, ssn.queue_order_fn),
    ]
    for keyfn, items, before in checks:
        if keyfn is None:
            continue
        for a, b in itertools.permutations(items, 2):
            assert (keyfn(a) < keyfn(b)) == before(a, b), (a, b)
    close_session(ssn)


# --- the checker can fail -----------------------------------------------------------------------------


def _tiny() -> ClusterSpec:
    nodes = [
        NodeSpec("n0", 4000, 8 * GI, 110, True, 2000, 0, False),
        NodeSpec("n1", 4000, 8 * GI, 110, False, 2000, 0, True),
    ]
    running = [PodSpec("web", 3000, GI, False, "n0"), PodSpec("old", 1000, GI, True, "n1")]
    jobs = [JobSpec("j0", "q1", 2, "", (PodSpec("j0-t-0", 2000, GI, True), PodSpec("j0-t-1", 1500, GI, False)))]
    return ClusterSpec(nodes, running, jobs)


def test_checker_reports_each_kind_of_violation() -> None:
    c = _tiny()
    assert check_placements(c, [("ns/j0-t-0", "n0")]) == []  # 3 + 1 + 2 = 6 <= 4 + 2
    assert len(check_placements(c, [("ns/j0-t-0", "n0"), ("ns/j0-t-1", "n0")])) == 1  # online 3 + 1.5 > 4
    assert check_placements(c, [("ns/j0-t-1", "n1")]) == []  # 1 + 1.5 <= 4 (online, unlabelled)
    assert len(check_placements(c, [("ns/j0-t-0", "n1")])) == 1  # evicting
    bad_x = ClusterSpec([NodeSpec("n0", 4000, 8 * GI, 110, True, 500, 0, False)], c.running[:1], c.jobs)
    assert len(check_placements(bad_x, [("ns/j0-t-0", "n0")])) == 1  # 3 + 2 > 4 + 0.5
    assert check_gangs(c, [("ns/j0-t-0", "n0")]) == ["gang j0: 1 of minMember 2 bound"]


def test_a_plugin_that_lends_x_to_online_pods_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property's checker catches the classic bug: online pods sized against allocatable + X."""
    from scheduler_ext.plugins import oversubscription as mod

    c = ClusterSpec(
        [NodeSpec("n0", 4000, 8 * GI, 110, True, 4000, 8 * GI, False)],
        [PodSpec("web", 3000, GI, False, "n0")],
        [JobSpec("j0", "q1", 1, "", (PodSpec("j0-t-0", 2000, GI, False),))],
    )
    binds, _, _ = run_session(c)
    assert check_placements(c, binds) == [] and binds == []
    real = mod.OversubscriptionPlugin.headroom

    def lends_x(self: Any, ssn: Any, task: Any, nodes: Any) -> Any:
        return self.x if not task.offline else real(self, ssn, task, nodes)

    monkeypatch.setattr(mod.OversubscriptionPlugin, "headroom", lends_x)
    binds, _, _ = run_session(c)
    assert binds == [("ns/j0-t-0", "n0")]
    assert check_placements(c, binds) != []
