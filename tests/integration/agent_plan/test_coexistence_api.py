"""The real API server records who wrote `kubernetes.io/batch-*`; foreign_writers reads it back."""

from __future__ import annotations

import pytest

from agent.decide.coexistence import foreign_writers
from tests.fixtures.kubeapi import KubeNamespace
from tidemark.kube.client import MERGE_PATCH, request_json
from tidemark.kube.resources import NODES

pytestmark = pytest.mark.kube


def test_a_second_writer_of_batch_resources_is_named(kube: KubeNamespace) -> None:
    from kubernetes import client

    node = kube.unique("coexist")
    # Labelled as kubelet registers a Node: the 1.20 server starts tracking fields on an object created
    # with some (one created with no field at all gets no managedFields from later updates either).
    labels = {"kubernetes.io/hostname": node}
    kube.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node, labels=labels)))
    kube.defer(lambda: kube.core.delete_node(node))
    # The API server records a writer only where it changed a value (as two agents computing their own
    # figures do).
    for agent, value in (("tidemark-agent/" + node, "1000"), ("volcano-agent/v1.11", "1500")):
        api = kube.server.admin_client()
        api.user_agent = agent
        body = {"status": {"capacity": {"kubernetes.io/batch-cpu": value}}}
        request_json(api, "PATCH", NODES.object_path(node, subresource="status"), body=body, content_type=MERGE_PATCH)
        if agent.startswith("tidemark"):
            assert foreign_writers(request_json(api, "GET", NODES.object_path(node))) == {}
    obj = request_json(kube.server.admin_client(), "GET", NODES.object_path(node))
    assert foreign_writers(obj) == {"volcano-agent": ["kubernetes.io/batch-cpu"]}
