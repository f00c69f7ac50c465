"""The client from a real kubeconfig (auth, write limiting, RBAC refusals) and /readyz wired to a real reflector."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import admin_api, closed_port, create_pod, token_api, wait_for
from tidemark.kube.client import ApiStatusError, request_json
from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import EVENTS, PODS
from tidemark.serving import CheckResult, ServingServer

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def test_writes_are_paced_by_qps_and_reads_are_not(kube: KubeNamespace) -> None:
    api = admin_api(kube, qps=10, burst=1)
    started = time.monotonic()
    for _ in range(10):
        request_json(api, "GET", PODS.collection_path(kube.name))
    reads = time.monotonic() - started
    started = time.monotonic()
    for i in range(5):
        body = {
            "metadata": {"name": f"e{i}"},
            "involvedObject": {"kind": "Pod", "name": "x", "namespace": kube.name},
            "reason": "R",
            "message": "m",
        }
        request_json(api, "POST", EVENTS.collection_path(kube.name), body=body)
    writes = time.monotonic() - started
    assert writes >= 0.4  # 1 from the burst, then 4 at 10/s
    assert reads < 0.4


def test_rbac_refusals_are_api_status_errors(kube: KubeNamespace) -> None:
    api = token_api(kube, user="tester-3")  # no rights at all
    with pytest.raises(ApiStatusError) as info:
        request_json(api, "GET", PODS.collection_path(kube.name))
    assert info.value.status == 403 and info.value.reason == "Forbidden"


class StoreSize(Collector):
    """A collector over the reflector's latest state, as the programs' collectors will be."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector

    def collect(self):  # type: ignore[no-untyped-def]
        g = GaugeMetricFamily("tidemark_test_watched_pods", "Pods in the reflector's store.")
        g.add_metric([], len(self.reflector.store))
        yield g


def test_readyz_follows_the_reflector_and_metrics_read_its_store(kube: KubeNamespace) -> None:
    api = token_api(kube)
    real_host = api.configuration.host
    api.configuration.host = f"https://127.0.0.1:{closed_port()}"  # start during an "outage"
    create_pod(admin_api(kube), kube.name, "p")
    r = Reflector.for_resource(api, PODS, namespace=kube.name)
    registry = CollectorRegistry()
    registry.register(StoreSize(r))

    def ready() -> CheckResult:
        contact = r.last_contact()
        if not r.has_synced() or contact is None:
            return False, "pods not listed yet"
        age = time.monotonic() - contact
        return (age < 60, f"last API contact {age:.1f}s ago")

    server = ServingServer("127.0.0.1:0", registry, healthz={"loops": lambda: (True, "")}, readyz={"api": ready})
    server.start()
    r.start()
    base = f"http://127.0.0.1:{server.port}"

    def status(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    try:
        wait_for(lambda: r.errors >= 1, "the reflector to fail once")
        assert status("/readyz") == (500, "[-]api failed: pods not listed yet\ncheck failed\n")
        assert status("/healthz")[0] == 200  # liveness never depends on the API server
        api.configuration.host = real_host
        wait_for(lambda: status("/readyz")[0] == 200, "ready once synced")
        assert "tidemark_test_watched_pods 1.0" in status("/metrics")[1]
    finally:
        r.stop()
        server.stop()
