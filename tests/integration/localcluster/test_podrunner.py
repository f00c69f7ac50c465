"""The local pod runner (localcluster.podrunner; NOT a kubelet) against a real kube-apiserver and real cgroups.

Pure parts first (kubelet's admission rules, oom_score_adj, cpu lists, the cgroup values written on a
v1 and a v2 tree laid out in tmp_path). Then, marked `kube` + `cgroup` (root, a real apiserver from
tests/fixtures/kubeapi.py): pods bound to a node the runner registered run as host processes in
kubelet's tree under a unique prefix, report their status, are rejected as kubelet rejects them,
stop on eviction (SIGTERM, SIGKILL after the grace period) and are deleted with grace 0, and nothing
is left behind when the runner stops.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cgroups.mounts import detect_hierarchy
from agent.decide.qos import milli_to_shares
from localcluster.admission import admit, is_extended_resource
from localcluster.cgroups import KubeletCgroups, Limits, new_prefix
from localcluster.podrunner import NodeSpec, PodRunner, oom_score_adj, parse_cpuset

GiB = 2**30
MiB = 2**20


def pod(name: str = "p", requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests or {}}}], **spec},
    }


ALLOC = {"cpu": "2", "memory": "4Gi", "pods": "110"}


# --- kubelet's admission (pure) ------------------------------------------------------------------


def test_admits_within_allocatable_counting_admitted_pods() -> None:
    assert admit(pod(requests={"cpu": "1500m"}), [], ALLOC) is None
    r = admit(pod(requests={"cpu": "600m"}), [pod(requests={"cpu": "1500m"})], ALLOC)
    assert r is not None
    assert r.reason == "OutOfcpu"
    assert r.message == "Pod Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"


def test_batch_resources_are_checked_even_when_the_node_lacks_them() -> None:
    # kubernetes.io/batch-cpu is a prefixed *native* name: a node without it has capacity 0 (kubelet rejects).
    assert not is_extended_resource("kubernetes.io/batch-cpu")
    r = admit(pod(requests={"kubernetes.io/batch-cpu": "100"}), [], ALLOC)
    assert r is not None and r.reason == "OutOfkubernetes.io/batch-cpu"
    assert r.message.endswith("requested: 100, used: 0, capacity: 0")
    alloc = {**ALLOC, "kubernetes.io/batch-cpu": "300", "kubernetes.io/batch-memory": str(GiB)}
    assert admit(pod(requests={"kubernetes.io/batch-cpu": "300"}), [], alloc) is None
    admitted = [pod(requests={"kubernetes.io/batch-cpu": "200"})]
    r = admit(pod(requests={"kubernetes.io/batch-cpu": "200"}), admitted, alloc)
    assert r is not None and "used: 200, capacity: 300" in r.message


def test_extended_resources_unknown_to_the_node_are_ignored() -> None:
    # kubelet's removeMissingExtendedResources: cluster-level resources the node does not list.
    assert is_extended_resource("example.com/licence")
    assert admit(pod(requests={"example.com/licence": "1"}), [], ALLOC) is None
    r = admit(pod(requests={"example.com/licence": "2"}), [], {**ALLOC, "example.com/licence": "1"})
    assert r is not None and r.reason == "OutOfexample.com/licence"


def test_pod_count_memory_and_node_selector() -> None:
    r = admit(pod(), [pod(), pod()], {**ALLOC, "pods": "2"})
    assert r is not None and r.reason == "OutOfpods" and "requested: 1, used: 2, capacity: 2" in r.message
    r = admit(pod(requests={"memory": "5Gi"}), [], ALLOC)
    assert r is not None and r.reason == "OutOfmemory"
    r = admit(pod(nodeSelector={"disk": "ssd"}), [], ALLOC, {"disk": "hdd"})
    assert r is not None and r.reason == "NodeAffinity"
    assert admit(pod(nodeSelector={"disk": "ssd"}), [], ALLOC, {"disk": "ssd"}) is None


def test_kubelet_oom_score_adj_and_cpu_lists() -> None:
    assert oom_score_adj("Guaranteed", GiB, 8 * GiB) == -997
    assert oom_score_adj("BestEffort", 0, 8 * GiB) == 1000
    assert oom_score_adj("Burstable", GiB, 8 * GiB) == 875
    assert oom_score_adj("Burstable", 0, 8 * GiB) == 999
    assert oom_score_adj("Burstable", 8 * GiB, 8 * GiB) == 3
    assert parse_cpuset("0") == {0}
    assert parse_cpuset("0-2,5") == {0, 1, 2, 5}
    for bad in ("", "2-1", "x", "-1"):
        with pytest.raises(ValueError):
            parse_cpuset(bad)


# --- the cgroup values (tmp trees shaped like a v1 and a v2 host) --------------------------------


def _v1_host(tmp_path: Path) -> str:
    root = tmp_path / "cgroup"
    for c in ("cpu", "cpuacct", "memory"):
        (root / c).mkdir(parents=True)
    return str(root)


def _v2_host(tmp_path: Path) -> str:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpu memory\n")
    return str(root)


def _read(path: str) -> str:
    return Path(path).read_text().strip()


def test_kubelet_values_on_a_v1_tree(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    tree = KubeletCgroups(new_prefix(), cgroup_root=root, allocatable_cpu_milli=2000, allocatable_memory=4 * GiB)
    tree.setup(check=False)
    assert _read(f"{tree.kubepods.cpu}/cpu.shares") == "2048"
    assert _read(f"{tree.kubepods.memory}/memory.limit_in_bytes") == str(4 * GiB)
    assert _read(f"{tree.layout.qos('BestEffort').cpu}/cpu.shares") == "2"
    g = tree.create_pod("uid-g", "Guaranteed", Limits(500, 500, 256 * MiB))
    assert g.cpu == f"{root}/cpu/{tree.prefix}/kubepods/poduid-g"
    assert (_read(f"{g.cpu}/cpu.shares"), _read(f"{g.cpu}/cpu.cfs_quota_us")) == ("512", "50000")
    assert _read(f"{g.memory}/memory.limit_in_bytes") == str(256 * MiB)
    tree.create_pod("uid-b1", "Burstable", Limits(300))
    b2 = tree.create_pod("uid-b2", "Burstable", Limits(200))
    assert _read(f"{tree.layout.qos('Burstable').cpu}/cpu.shares") == str(milli_to_shares(500))
    c = tree.create_container(b2, "tidemark-local://" + "a" * 64, Limits(200, 1000, None))
    assert c.cpu == f"{b2.cpu}/{'a' * 64}"
    assert (_read(f"{c.cpu}/cpu.shares"), _read(f"{c.cpu}/cpu.cfs_quota_us")) == ("204", "100000")
    be = tree.create_pod("uid-be", "BestEffort", Limits(besteffort=True))
    assert be.cpu.endswith("/kubepods/besteffort/poduid-be") and _read(f"{be.cpu}/cpu.shares") == "2"


def test_kubelet_values_on_a_v2_tree(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    tree = KubeletCgroups(new_prefix(), cgroup_root=root, allocatable_cpu_milli=2000, allocatable_memory=4 * GiB)
    assert tree.version == "v2" and detect_hierarchy(root).version == "v2"
    tree.setup(check=False)
    assert _read(f"{root}/{tree.prefix}/cgroup.subtree_control") == "+cpu +memory"
    assert _read(f"{tree.kubepods.cpu}/cpu.weight") == "79"  # shares 2048 -> weight
    assert _read(f"{tree.kubepods.memory}/memory.max") == str(4 * GiB)
    assert _read(f"{tree.layout.qos('BestEffort').cpu}/cpu.weight") == "1"
    g = tree.create_pod("uid-g", "Guaranteed", Limits(500, 500, 256 * MiB))
    assert (_read(f"{g.cpu}/cpu.max"), _read(f"{g.memory}/memory.max")) == ("50000 100000", str(256 * MiB))


def test_refuses_paths_outside_its_prefix(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    tree = KubeletCgroups(new_prefix(), cgroup_root=root, allocatable_cpu_milli=1000, allocatable_memory=GiB)
    with pytest.raises(RuntimeError, match="outside"):
        tree.add_process(tree.layout.pod("x", "BestEffort").child("../../../../memory"), 1)
    with pytest.raises(ValueError):
        KubeletCgroups("../etc", cgroup_root=root, allocatable_cpu_milli=1, allocatable_memory=1)


# --- against a real apiserver and real cgroups ---------------------------------------------------

LOADGEN = [sys.executable, "-m", "localcluster.loadgen"]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for c in ("cpu", "cpuacct", "memory"):
        if not os.access(f"/sys/fs/cgroup/{c}", os.W_OK):
            return f"/sys/fs/cgroup/{c} is absent or not writable (no cgroup v1 {c} here)"
    return None


def wait_until(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Harness:
    def __init__(self, kube: Any, runner: PodRunner) -> None:
        self.kube = kube
        self.runner = runner
        self.node = runner.node.name
        self.cgroups = runner.cgroups

    def create(self, name: str, command: list[str], *, requests: dict[str, str] | None = None,
               limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               restart: str = "Never", grace: int = 5) -> dict[str, Any]:  # fmt: skip
        from tidemark.kube.client import request_json

        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.kube.name, "annotations": annotations or {}},
            "spec": {
                "nodeName": self.node,
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": grace,
                "containers": [
                    {
                        "name": "main",
                        "image": "tidemark.local/host-process",
                        "command": command,
                        "resources": {"requests": requests or {}, "limits": limits or {}},
                    }
                ],
            },
        }
        return request_json(self.kube.api, "POST", f"/api/v1/namespaces/{self.kube.name}/pods", body=body)

    def get(self, name: str) -> dict[str, Any] | None:
        from tidemark.kube.client import ApiStatusError, request_json

        try:
            return request_json(self.kube.api, "GET", f"/api/v1/namespaces/{self.kube.name}/pods/{name}")
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise

    def phase(self, name: str, phase: str, timeout: float = 20.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            p = self.get(name)
            return p if p and (p.get("status") or {}).get("phase") == phase else None

        return wait_until(check, timeout, f"{name} to be {phase}")  # type: ignore[no-any-return]

    def pid(self, name: str) -> int:
        return self.runner.workers[self.get(name)["metadata"]["uid"]].containers[0].popen.pid  # type: ignore[index,union-attr]


@pytest.fixture
def harness(request: pytest.FixtureRequest, kube: Any, tmp_path: Path) -> Iterator[Harness]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    node = kube.unique("lc-node")
    spec = NodeSpec(node, 2000, 8 * GiB, 1000, 2 * GiB)
    tree = KubeletCgroups(new_prefix(), allocatable_cpu_milli=1000, allocatable_memory=2 * GiB)
    api = kube.server.admin_client()
    runner = PodRunner(api, spec, cgroups=tree, pods_dir=str(tmp_path / "pods"), shutdown_grace=3.0).start()
    kube.defer(lambda: kube.core.delete_node(node))
    h = Harness(kube, runner)
    try:
        yield h
    finally:
        left = runner.stop()
        assert left == [], f"cgroups left behind: {left}"
        assert not tree.exists(), f"{tree.roots()} still exist"
        api.close()


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_runs_pods_as_processes_in_kubelets_cgroup_tree(harness: Harness) -> None:
    h = harness
    node = h.kube.core.read_node(h.node)
    assert node.status.allocatable["cpu"] == "1" and node.status.conditions[0].type == "Ready"
    h.create("web", [*LOADGEN, "--target", "0.05", "--memory", "16Mi"], requests={"cpu": "200m", "memory": "64Mi"},
             annotations={"tidemark.io/local-cpuset": "0"})  # fmt: skip
    p = h.phase("web", "Running")
    status = p["status"]
    cs = status["containerStatuses"][0]
    assert re.fullmatch(r"tidemark-local://[0-9a-f]{64}", cs["containerID"]), cs
    assert cs["state"]["running"]["startedAt"] and cs["ready"] is True and status["qosClass"] == "Burstable"
    uid, cid = p["metadata"]["uid"], cs["containerID"].split("://")[1]
    assert h.cgroups is not None
    pod_dirs = h.cgroups.layout.pod(uid, "Burstable")
    container = pod_dirs.child(cid)
    pid = h.pid("web")
    for d in container.distinct():  # cpu, cpuacct, memory: in every hierarchy
        assert str(pid) in Path(d, "cgroup.procs").read_text().split()
    assert Path(pod_dirs.cpu, "cpu.shares").read_text().strip() == "204"
    assert Path(container.cpu, "cpu.shares").read_text().strip() == "204"
    assert Path(h.cgroups.layout.qos("Burstable").cpu, "cpu.shares").read_text().strip() == "204"
    assert Path(h.cgroups.kubepods.cpu, "cpu.shares").read_text().strip() == "1024"
    assert Path(h.cgroups.roots()[0], "cpu.shares").read_text().strip() == "1024"  # the prefix level: as kubepods
    assert os.sched_getaffinity(pid) == {0}
    expected_adj = oom_score_adj("Burstable", 64 * MiB, 8 * GiB)
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == str(expected_adj)

    # Moved before it allocated: its 16Mi are charged to the container's memory group.
    def charged() -> bool:
        return int(Path(container.memory, "memory.usage_in_bytes").read_text()) >= 16 * MiB

    wait_until(charged, 10, "the container's memory charge")


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_rejects_like_a_stock_kubelet(harness: Harness) -> None:
    h = harness
    h.create("big", ["true"], requests={"cpu": "1500m"})
    p = h.phase("big", "Failed")
    assert p["status"]["reason"] == "OutOfcpu"
    expected = "Pod Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000"
    assert p["status"]["message"] == expected
    h.create("batch", ["true"], requests={"kubernetes.io/batch-cpu": "100"})
    p = h.phase("batch", "Failed")
    assert p["status"]["reason"] == "OutOfkubernetes.io/batch-cpu"
    # The agent publishes batch capacity in the node status; then the same request is admitted.
    from tidemark.kube.client import STRATEGIC_MERGE_PATCH, request

    batch = {"kubernetes.io/batch-cpu": "500"}
    patch = {"status": {"capacity": batch, "allocatable": batch}}
    request(h.kube.api, "PATCH", f"/api/v1/nodes/{h.node}/status", body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def seen() -> bool:
        return "kubernetes.io/batch-cpu" in ((h.runner.node_object().get("status") or {}).get("allocatable") or {})

    wait_until(seen, 10, "the runner to see the batch capacity")
    h.create("batch-2", [*LOADGEN, "--target", "0.01"], requests={"kubernetes.io/batch-cpu": "400"})
    p = h.phase("batch-2", "Running")
    assert p["status"]["qosClass"] == "BestEffort"
    h.create("batch-3", ["true"], requests={"kubernetes.io/batch-cpu": "200"})
    p = h.phase("batch-3", "Failed")
    assert "requested: 200, used: 400, capacity: 500" in p["status"]["message"]
    assert h.cgroups is not None
    big_uid = h.get("big")["metadata"]["uid"]  # type: ignore[index]
    assert not Path(h.cgroups.layout.pod(big_uid, "Burstable").cpu).exists()


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_reports_completion_and_removes_the_pods_cgroups(harness: Harness) -> None:
    h = harness
    h.create("ok", ["true"])
    h.create("bad", ["sh", "-c", "exit 3"])
    ok = h.phase("ok", "Succeeded")
    bad = h.phase("bad", "Failed")
    term = bad["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    assert ok["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert h.cgroups is not None
    for p in (ok, bad):
        d = h.cgroups.layout.pod(p["metadata"]["uid"], "BestEffort")
        wait_until(lambda d=d: not Path(d.cpu).exists() and not Path(d.memory).exists(), 10, "pod cgroups removed")


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_eviction_stops_processes_within_the_grace_period_and_deletes_the_pod(harness: Harness) -> None:
    from tests.fixtures.kubeapi import evict

    h = harness
    h.create("polite", [*LOADGEN, "--target", "0.01"], grace=10)
    h.create("stubborn", ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], grace=2)
    h.phase("polite", "Running")
    h.phase("stubborn", "Running")
    polite, stubborn = h.pid("polite"), h.pid("stubborn")
    uids = {n: h.get(n)["metadata"]["uid"] for n in ("polite", "stubborn")}  # type: ignore[index]
    t0 = time.monotonic()
    assert evict(h.kube.api, h.kube.name, "polite") == 201
    assert evict(h.kube.api, h.kube.name, "stubborn") == 201
    wait_until(lambda: h.get("polite") is None, 10, "polite to be deleted")
    t_polite = time.monotonic() - t0
    assert not alive(polite)
    wait_until(lambda: h.get("stubborn") is None, 15, "stubborn to be deleted")
    t_stubborn = time.monotonic() - t0
    assert not alive(stubborn)
    assert t_polite < 2.0, f"SIGTERM should stop a well-behaved pod at once ({t_polite:.2f}s)"
    assert 2.0 <= t_stubborn < 6.0, f"SIGKILL after the 2 s grace period ({t_stubborn:.2f}s)"
    assert h.cgroups is not None
    for uid in uids.values():
        assert not Path(h.cgroups.layout.pod(uid, "BestEffort").cpu).exists()
    events = h.kube.core.list_namespaced_event(h.kube.name).items
    assert any(e.reason == "Killing" and e.involved_object.name == "stubborn" for e in events)


@pytest.mark.kube
@pytest.mark.cgroup
@pytest.mark.slow
def test_restarts_per_policy_and_cleans_up_on_stop(harness: Harness) -> None:
    h = harness
    h.create("crash", ["sh", "-c", "exit 1"], restart="Always")
    h.create("svc", [*LOADGEN, "--target", "0.01"], restart="Always")

    def crashed() -> bool:
        p = h.get("crash") or {}
        st = ((p.get("status") or {}).get("containerStatuses") or [{}])[0]
        return st.get("restartCount", 0) >= 1 and "waiting" in (st.get("state") or {})

    wait_until(crashed, 10, "crash to be in back-off")
    p = h.get("crash") or {}
    st = p["status"]["containerStatuses"][0]
    assert st["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert st["lastState"]["terminated"]["exitCode"] == 1
    h.phase("svc", "Running")
    pid = h.pid("svc")
    assert h.cgroups is not None
    left = h.runner.stop()  # what the fixture checks too: every process gone, the whole tree removed
    assert left == []
    assert not alive(pid)
    assert not h.cgroups.exists()


@pytest.mark.kube
@pytest.mark.slow
def test_hollow_node_reports_pods_running_without_processes(kube: Any, tmp_path: Path) -> None:
    from tidemark.kube.client import request_json

    node = kube.unique("hollow")
    api = kube.server.admin_client()
    runner = PodRunner(api, NodeSpec(node, 4000, 8 * GiB, 4000, 8 * GiB), cgroups=None,
                       pods_dir=str(tmp_path), hollow=True).start()  # fmt: skip
    kube.defer(lambda: kube.core.delete_node(node))
    try:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h", "namespace": kube.name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
        request_json(kube.api, "POST", f"/api/v1/namespaces/{kube.name}/pods", body=body)
        path = f"/api/v1/namespaces/{kube.name}/pods/h"
        wait_until(lambda: request_json(kube.api, "GET", path).get("status", {}).get("phase") == "Running", 10, "phase")
        cs = request_json(kube.api, "GET", path)["status"]["containerStatuses"][0]
        assert cs["containerID"].startswith("tidemark-hollow://")
        assert runner.workers and all(c.popen is None for w in runner.workers.values() for c in w.containers)
        kube.core.delete_namespaced_pod("h", kube.name)

        def gone() -> bool:
            try:
                request_json(kube.api, "GET", path)
            except Exception:
                return True
            return False

        wait_until(gone, 10, "the hollow pod to be finalised")
    finally:
        assert runner.stop() == []
        api.close()
