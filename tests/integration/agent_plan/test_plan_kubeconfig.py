"""`tidemark-agent plan --kubeconfig`: the live cluster read-only, the same plan as from a file.

The Node and Pods live on the real kube-apiserver fixture; the cgroups are a fake kubelet tree (this
test is about where the objects come from, the cgroup side is tested elsewhere for real).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import main
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.fixtures.kubeapi import KubeNamespace
from tidemark.clock import FakeClock

pytestmark = pytest.mark.kube


def _pod(name: str, qos_level: str, cpu: str | None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu}} if cpu else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"volcano.sh/qos-level": qos_level}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none", "resources": resources}]},
    }


def _plan(argv: list[str], tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    clock = FakeClock(wall=1_700_000_000.0)
    clock.hooks.append(tree.hook({uid: 0.5 for uid in tree.pods}, other_cores=0.2))
    rc = main([*argv, *tree.cli_args(), "--samples", "2", "-o", "json"], clock=clock)
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_reads_the_live_node_and_its_pods(
    kube: KubeNamespace, kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kubernetes import client

    node = kube.unique("plan-node")
    kube.core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=node, labels={"volcano.sh/oversubscription": "true"}),
        status=client.V1NodeStatus(allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"},
                                   capacity={"cpu": "4", "memory": "16Gi", "pods": "110"}),
    ))
    kube.defer(lambda: kube.core.delete_node(node))
    uids = {}
    for name, level, cpu in (("web", "2", "2"), ("crunch", "BE", None)):
        created = kube.core.create_namespaced_pod(kube.name, _pod(name, level, cpu))
        uids[name] = created.metadata.uid
        kube.core.create_namespaced_pod_binding(
            name, kube.name, client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                                              target=client.V1ObjectReference(kind="Node", name=node)),
            _preload_content=False,
        )
    before = kube.core.read_node(node).metadata.resource_version

    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    tree.add_pod(uids["web"], "Burstable", {"c": "containerd://aaa"}, cpu_request_milli=2000)
    tree.add_pod(uids["crunch"], "BestEffort", {"c": "containerd://bbb"})
    tree.set_memory(uids["web"], 2 * GiB)
    tree.set_memory(uids["crunch"], GiB)
    kubeconfig = str(kube.server.kubeconfig_path("admin"))

    rc, out, err = _plan(["plan", "--node-name", node, "--kubeconfig", kubeconfig], tree, capsys)
    assert rc == 0, err
    live = json.loads(out)
    assert live["node"] == node and live["labels"] == {"volcano.sh/oversubscription": "true"}
    assert live["usage"]["online"]["memory"] == 2 * GiB and live["usage"]["offline"]["memory"] == GiB
    assert any(uids["crunch"] in w["path"] for w in live["cgroup_writes"]), live["cgroup_writes"]

    # The same objects from a file give the same plan.
    api = kube.server.admin_client()
    objects = [api.sanitize_for_serialization(kube.core.read_node(node))] + [
        api.sanitize_for_serialization(p) for p in kube.core.list_namespaced_pod(kube.name).items
    ]
    for kind, obj in zip(["Node", "Pod", "Pod"], objects, strict=True):
        obj["kind"] = kind
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(objects))
    rc, out, err = _plan(["plan", "--node-name", node, "--cluster", str(cluster)], tree, capsys)
    assert rc == 0, err
    from_file = json.loads(out)
    assert {k: v for k, v in from_file.items() if k != "explanations"} == {
        k: v for k, v in live.items() if k != "explanations"
    }
    # Read-only: nothing was written to the Node.
    assert kube.core.read_node(node).metadata.resource_version == before


def test_plan_unknown_node_is_a_usage_error(
    kube: KubeNamespace, kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    kubeconfig = str(kube.server.kubeconfig_path("admin"))
    rc, _, err = _plan(["plan", "--node-name", kube.unique("absent"), "--kubeconfig", kubeconfig], tree, capsys)
    assert rc == 2 and "not found in the cluster" in err
