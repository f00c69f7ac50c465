"""daemonset/base/priorityclass.yaml on the real API server: the class is accepted as shipped (1e9 is the highest
value outside system-*, `preemptionPolicy: Never` is served by 1.20) and the Priority admission gives a Tidemark pod
that names it priority 1e9 and preemptionPolicy Never, so the default scheduler never preempts for it."""

from __future__ import annotations

import contextlib

import pytest
import yaml

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.install.doc import REPO

pytestmark = pytest.mark.kube


def test_a_pod_at_the_tidemark_class_gets_its_value_and_never_preempts(kube: KubeNamespace) -> None:
    from kubernetes import client  # type: ignore[import-untyped,unused-ignore]

    body = yaml.safe_load((REPO / "daemonset" / "base" / "priorityclass.yaml").read_text())
    sched = client.SchedulingV1Api(kube.api)
    name = body["metadata"]["name"]
    with contextlib.suppress(client.ApiException):  # 409: another test of this session created it
        sched.create_priority_class(body=body)
        kube.defer(lambda: sched.delete_priority_class(name))
    pc = sched.read_priority_class(name)
    assert pc.value == 1_000_000_000 and pc.preemption_policy == "Never"
    pod = kube.core.create_namespaced_pod(kube.name, client.V1Pod(
        metadata=client.V1ObjectMeta(name="agent-like"),
        spec=client.V1PodSpec(priority_class_name=name,
                              containers=[client.V1Container(name="c", image="x")])))  # fmt: skip
    assert pod.spec.priority == 1_000_000_000 and pod.spec.preemption_policy == "Never"
