"""Hardening round 2, item 6: tenant strings never reach a URL unvalidated or unquoted.

The finding: the webhook put a PodGroup's `spec.queue` into its own GET unescaped. urllib3 removes
dot segments from the path it sends, so `spec.queue: ../../../../api/v1/namespaces/other/pods/p` made
the webhook GET another namespace's pod with its token; the pod has no `status.state`, which reads as an
Open queue, so the PodGroup was admitted when that pod existed and denied when it did not: an
existence oracle over every object the webhook may read. Now names are validated as Kubernetes
validates them (DNS-1123 subdomains for Queue, PodGroup, Pod and Node names, a DNS-1123 label for a
namespace) before any lookup, and every path segment built in `tidemark.kube.resources` is quoted, with
`.`/`..` refused.

The API lookups run against a recording HTTP server on loopback, through the real client stack
(kubernetes' ApiClient, urllib3): what it records is what an API server would have been asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler_ext.webhook import admission as adm
from tidemark.apis import dns1123_label_problem, dns1123_subdomain_problem
from tidemark.kube.resources import NODES, PODS, QUEUES, InvalidNameError

SECRET_POD = "/api/v1/namespaces/other/pods/p"


class _Recorder(BaseHTTPRequestHandler):
    paths: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path == SECRET_POD:
            body, status = {"kind": "Pod", "metadata": {"name": "p", "namespace": "other"}}, 200
        elif self.path.startswith("/apis/scheduling.volcano.sh/v1beta1/queues/default"):
            body, status = {"kind": "Queue", "spec": {"weight": 1}, "status": {"state": "Open"}}, 200
        else:
            body, status = {"kind": "Status", "reason": "NotFound", "code": 404}, 404
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api() -> Iterator[tuple[Any, list[str]]]:
    from kubernetes import client

    from tidemark.kube.client import new_api_client

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    api_client = new_api_client(configuration=cfg)
    try:
        yield api_client, server.paths  # type: ignore[attr-defined]
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()


def _podgroup_create(queue: str, namespace: str = "tenant") -> dict[str, Any]:
    return {
        "uid": "u1", "operation": "CREATE", "namespace": namespace, "name": "pg",
        "resource": {"group": "scheduling.volcano.sh", "version": "v1beta1", "resource": "podgroups"},
        "object": {"metadata": {"name": "pg", "namespace": namespace}, "spec": {"minMember": 1, "queue": queue}},
        "userInfo": {"username": "tenant"},
    }


TRAVERSALS = [
    "../../../../api/v1/namespaces/other/pods/p",
    "..%2F..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fother%2Fpods%2Fp",
    "default/../../../../../api/v1/namespaces/other/pods/p",
    "..",
    ".",
    "default?watch=true",
    "default#x",
    "Default",
    "a" * 254,
]


@pytest.mark.parametrize("queue", TRAVERSALS)
def test_a_crafted_queue_name_is_refused_before_any_request(api: tuple[Any, list[str]], queue: str) -> None:
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    verdict = adm.validate(_podgroup_create(queue), ApiLookups(client), adm.Settings())
    assert not verdict.allowed
    assert "spec.queue" in verdict.message and "not a valid Queue name" in verdict.message
    assert paths == []  # not even a quoted GET: the name cannot exist


def test_the_oracle_is_gone_whether_or_not_the_target_exists(api: tuple[Any, list[str]]) -> None:
    """Before: allowed when other/p existed (the Pod read as an Open queue), denied when not."""
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    lookups = ApiLookups(client)
    exists = adm.validate(_podgroup_create("../../../../api/v1/namespaces/other/pods/p"), lookups, adm.Settings())
    missing = adm.validate(_podgroup_create("../../../../api/v1/namespaces/other/pods/q"), lookups, adm.Settings())
    assert not exists.allowed and not missing.allowed
    assert exists.message.replace("/p'", "/q'") == missing.message
    assert SECRET_POD not in paths


def test_a_valid_queue_is_still_looked_up(api: tuple[Any, list[str]]) -> None:
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    assert adm.validate(_podgroup_create("default"), ApiLookups(client), adm.Settings()).allowed
    assert paths == ["/apis/scheduling.volcano.sh/v1beta1/queues/default"]
    verdict = adm.validate(_podgroup_create("my.queue-1"), ApiLookups(client), adm.Settings())
    assert not verdict.allowed and "does not exist" in verdict.message
    assert paths[-1] == "/apis/scheduling.volcano.sh/v1beta1/queues/my.queue-1"


def test_a_crafted_parent_queue_is_refused_before_any_request(api: tuple[Any, list[str]]) -> None:
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    request = {
        "uid": "u1", "operation": "CREATE", "name": "q",
        "resource": {"group": "scheduling.volcano.sh", "version": "v1beta1", "resource": "queues"},
        "object": {"metadata": {"name": "q"},
                   "spec": {"weight": 1, "parent": "../../../../api/v1/namespaces/other/pods/p"}},
        "userInfo": {"username": "tenant"},
    }
    verdict = adm.validate(request, ApiLookups(client), adm.Settings())
    assert not verdict.allowed and "spec.parent" in verdict.message and "not a valid Queue name" in verdict.message
    assert paths == []


def test_the_agent_token_pod_name_is_validated_and_quoted(api: tuple[Any, list[str]]) -> None:
    """The pod extra comes from the token; the webhook validates it as a pod name before asking for the pod."""
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    agent = "system:serviceaccount:tidemark-system:tidemark-agent"
    # the agent's one write is its NodeReport (its evictions are asks in it)
    request = {
        "uid": "u1", "operation": "UPDATE", "name": "node-a",
        "resource": {"group": "colocation.tidemark.io", "version": "v1alpha1", "resource": "nodereports"},
        "object": {"metadata": {"name": "node-a"}, "spec": {}},
        "userInfo": {"username": agent,
                     "extra": {adm.POD_NAME_EXTRA: ["../../other/pods/p"], adm.POD_UID_EXTRA: ["x"]}},
    }
    verdict = adm.validate(request, ApiLookups(client), adm.Settings())
    assert not verdict.allowed and verdict.code == 403
    assert paths == []


def test_api_lookups_quote_what_they_are_given(api: tuple[Any, list[str]]) -> None:
    """Even called directly with a bad name, ApiLookups asks for nothing outside the object it names."""
    from scheduler_ext.webhook.server import ApiLookups

    client, paths = api
    lookups = ApiLookups(client)
    assert lookups.queue("../../../../api/v1/namespaces/other/pods/p") is None
    assert lookups.pod_node("other/pods/p/..", "..", None) is None
    assert SECRET_POD not in paths
    assert all(p.startswith(("/apis/scheduling.volcano.sh/v1beta1/queues/", "/api/v1/namespaces/")) for p in paths)


# --- the validators and the path builder --------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "default", "my.queue-1", "0", "a" * 253, "x.y.z"])
def test_subdomains_kubernetes_accepts(name: str) -> None:
    assert dns1123_subdomain_problem(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "A", "-a", "a-", "a..b", "a_b", "a" * 254, "é", "a\n",
                                  "a b", "a%2f", 5, None])
def test_subdomains_kubernetes_refuses(name: object) -> None:
    assert dns1123_subdomain_problem(name)


@pytest.mark.parametrize(("name", "ok"), [("tenant", True), ("a" * 63, True), ("a" * 64, False), ("a.b", False),
                                          ("", False), ("..", False), ("a\n", False)])
def test_labels(name: str, ok: bool) -> None:
    assert (dns1123_label_problem(name) is None) == ok


@pytest.mark.parametrize("bad", [".", "..", "", "a/b", "a%2fb"])
def test_object_paths_refuse_what_is_not_a_path_segment(bad: str) -> None:
    with pytest.raises(InvalidNameError):
        PODS.object_path(bad, "ns")
    with pytest.raises(InvalidNameError):
        PODS.object_path("p", bad)
    with pytest.raises(InvalidNameError):
        NODES.object_path("n1", subresource=bad)


def test_object_paths_quote_every_segment() -> None:
    assert QUEUES.object_path("q") == "/apis/scheduling.volcano.sh/v1beta1/queues/q"
    assert PODS.object_path("p", "ns", "eviction") == "/api/v1/namespaces/ns/pods/p/eviction"
    assert PODS.object_path("p?x", "n s") == "/api/v1/namespaces/n%20s/pods/p%3Fx"
    assert PODS.collection_path("n#s") == "/api/v1/namespaces/n%23s/pods"
    assert issubclass(InvalidNameError, ValueError)
