"""What the realnode_v2 tests share: the pods they make, the knobs the agent must set on them, and the waits.

The paths are the node's (the VM's) own: kubelet's systemd driver puts a pod under
`kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with _ for ->.slice` and each container in
`cri-containerd-<id>.scope` below it (`V2Node.pod_cgroup` / `container_cgroup`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localcluster.v2node import V2Node
from tests.fixtures.realnode import RealNamespace
from tidemark.apis import quantity_to_int

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEM = "kubernetes.io/batch-memory"
OFFLINE = {"volcano.sh/qos-level": "-1"}
ONLINE = {"volcano.sh/qos-level": "2"}
MIB = 1024 * 1024
#: the offline pod: BestEffort (only extended resources), 0.2 core and 64 MiB of batch resources
OFFLINE_RES = {BATCH_CPU: "200", BATCH_MEM: "64Mi"}
#: the online pod: Burstable, 100m and 64 MiB requested
ONLINE_REQ = {"cpu": "100m", "memory": "64Mi"}
CG = "/sys/fs/cgroup"
KUBEPODS = f"{CG}/kubepods.slice"
#: the agent's journal on the node (the DaemonSet's hostPath state dir, the service's StateDirectory)
JOURNAL = "/var/lib/tidemark/journal.json"
#: the agent's --cgroup-root inside its DaemonSet pod: journal paths start with it
POD_CGROUP_ROOT = "/host/sys/fs/cgroup"


def pod_dict(ns: RealNamespace, name: str) -> dict[str, Any]:
    """The pod as the API server has it, as plain JSON (what the node-access methods take)."""
    data: dict[str, Any] = ns.api.sanitize_for_serialization(ns.get(name))
    return data


def not_evicting(ns: RealNamespace, timeout: float = 300) -> None:
    """The agent out of its evicting state (batch-* published again): offline pods are admitted."""

    def open_() -> bool:
        node = ns.core.read_node(ns.node.node_name)
        notes = node.metadata.annotations or {}
        alloc = node.status.allocatable or {}
        batch_cpu = quantity_to_int(alloc.get(BATCH_CPU, "0")) or 0  # the API server writes 2000 as "2k"
        return notes.get("volcano.sh/offline-job-evicting") != "true" and batch_cpu >= 400

    ns.wait(open_, timeout, "the node open for offline pods (not evicting, batch-cpu >= 400)")


@dataclass(frozen=True)
class KnobPods:
    """The namespace of the offline and online pod (`offline`, `online`) that the systemd actions and the uninstall
    act under (tests/integration/realnode_v2/conftest.py `knob_pods`)."""

    ns: RealNamespace


def start_pods(ns: RealNamespace, offline: str = "offline", online: str = "online",
               command: str = "sleep 36000") -> tuple[dict[str, Any], dict[str, Any]]:
    """An offline batch pod and an online pod through the scheduler, both Running; their JSON.

    The offline pod is made again, as its controller would, when kubelet rejected it because the published
    batch-* had dropped between the scheduler's view and kubelet's admission (`OutOfkubernetes.io/batch-cpu`,
    docs/agent.md "Capacity: B and X"): under TCG a kubelet restart or a pod start costs enough CPU to do that.
    """
    ns.create(ns.pod(online, command, requests=ONLINE_REQ, annotations=ONLINE))
    for _attempt in range(4):
        not_evicting(ns)
        ns.create(ns.pod(offline, command, requests=OFFLINE_RES, limits=OFFLINE_RES, annotations=OFFLINE))

        def settled() -> bool:
            return str(ns.get(offline).status.phase) in ("Running", "Failed")

        ns.wait(settled, 300, f"pod {offline} Running or Failed")
        status = ns.get(offline).status
        if status.phase == "Running" or not str(status.reason or "").startswith("OutOfkubernetes.io/batch-"):
            break
        print(f"V2NODE {offline}: rejected by kubelet ({status.reason}: {status.message}); made again")
        ns.core.delete_namespaced_pod(offline, ns.name, grace_period_seconds=0)
        ns.wait(lambda: not [p for p in ns.core.list_namespaced_pod(ns.name).items if p.metadata.name == offline],
                120, f"pod {offline} gone")
    for name in (offline, online):
        ns.wait_running(name, timeout=300)
    return pod_dict(ns, offline), pod_dict(ns, online)


def wanted_knobs(node: V2Node, offline: dict[str, Any], online: dict[str, Any]) -> dict[str, str]:
    """The knob files the agent must hold, with their exact values (docs/agent.md's tables for v2)."""
    off, off_c = node.pod_cgroup(offline), node.container_cgroup(offline)
    on, on_c = node.pod_cgroup(online), node.container_cgroup(online)
    return {
        # offline: idle class among its siblings, CFS quota and memory limit from the batch-* limits, container
        # weight from the batch-cpu request (kubelet's shares -> weight: 204 shares -> 8)
        f"{off}/cpu.idle": "1",
        f"{off}/cpu.max": "20000 100000",
        f"{off}/memory.max": str(64 * MIB),
        f"{off_c}/cpu.weight": "8",
        f"{off_c}/cpu.max": "20000 100000",
        f"{off_c}/memory.max": str(64 * MIB),
        # online: memory protection = its request (memoryQoS.lowRatio 1.0) on the pod and its container
        f"{on}/memory.low": str(64 * MIB),
        f"{on_c}/memory.low": str(64 * MIB),
    }


def offline_memory_high(node: V2Node, offline: dict[str, Any]) -> int | None:
    """The offline pod's `memory.high` (memoryQoS: limit x highRatio), None while it is `max`."""
    v = node.read_files([f"{node.pod_cgroup(offline)}/memory.high"]).popitem()[1]
    return None if v in (None, "max") else int(v)


def ancestors_protect(node: V2Node, at_least: int) -> dict[str, str | None]:
    """kubepods.slice and kubepods-burstable.slice `memory.low` where they do not protect `at_least` bytes."""
    paths = [f"{KUBEPODS}/memory.low", f"{KUBEPODS}/kubepods-burstable.slice/memory.low"]
    got = node.read_files(paths)
    return {p: v for p, v in got.items() if v is None or v == "max" or int(v) < at_least}


def wait_ancestors_protect(node: V2Node, at_least: int, timeout: float) -> float:
    """Seconds until kubepods.slice and kubepods-burstable.slice protect `at_least` bytes again; AssertionError
    with their values after `timeout`. systemd resets them on daemon-reload too, and may do so after the pod slices
    (its realize queue runs after `systemctl daemon-reload` returned), so the agent's drift check can find them a
    read or two later than the pods' knobs."""
    def problem() -> str | None:
        short = ancestors_protect(node, at_least)
        return f"QoS ancestors not protecting {at_least} bytes: {short}" if short else None

    return _until_fine(problem, timeout)


def mismatches(node: V2Node, wanted: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    got = node.read_files(list(wanted))
    return {p: (v, got.get(p)) for p, v in wanted.items() if got.get(p) != v}


def wait_knobs(node: V2Node, wanted: dict[str, str], timeout: float, what: str = "the agent's knobs") -> float:
    """Seconds until every file in `wanted` holds its value; AssertionError with the differences after `timeout`."""
    def problem() -> str | None:
        wrong = mismatches(node, wanted)
        lines = [f"{p}: want {w!r}, have {h!r}" for p, (w, h) in sorted(wrong.items())]
        return f"{what} not in force:\n" + "\n".join(lines) if wrong else None

    return _until_fine(problem, timeout)


def _until_fine(problem: Callable[[], str | None], timeout: float) -> float:
    """Seconds until `problem()` says None, read every 0.5 s; AssertionError with its last words after `timeout`."""
    t0 = time.monotonic()
    while True:
        said = problem()
        if said is None:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"after {timeout:.0f} s: {said}")
        time.sleep(0.5)


def journal(node: V2Node) -> dict[str, Any]:
    """The agent's journal on the node (`{"knobs": [...], "procs": [...]}`), empty when there is none."""
    text = node.read_files([JOURNAL]).popitem()[1]
    data: dict[str, Any] = json.loads(text) if text else {}
    return data


def node_path(path: str) -> str:
    """A journal path as the node sees it (the DaemonSet's agent writes below its own --cgroup-root)."""
    return CG + path[len(POD_CGROUP_ROOT):] if path.startswith(POD_CGROUP_ROOT + "/") else path


def agent_pod(node: V2Node) -> dict[str, Any] | None:
    agents = [p for p in node.pods("tidemark-system", "app.kubernetes.io/name=tidemark-agent")
              if not p["metadata"].get("deletionTimestamp")]
    return agents[0] if agents else None


def agent_metrics(node: V2Node) -> str:
    """The DaemonSet agent's /metrics, fetched on the node (the pod network is the VM's)."""
    pod = agent_pod(node)
    assert pod is not None, "no agent pod"
    ip = pod["status"]["podIP"]
    done = node.run(
        ["python3", "-c", f"import urllib.request;print(urllib.request.urlopen('http://{ip}:9102/metrics',"
         "timeout=20).read().decode())"],
        timeout=90,
    )
    assert done.ok, done.err
    return done.out


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
