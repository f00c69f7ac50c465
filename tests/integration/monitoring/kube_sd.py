"""Prometheus' Kubernetes service discovery (roles pod and endpoints), served over `http_sd_configs`.

Debian's `prometheus` 2.42 is built without `discovery/kubernetes` (the package leaves out the SD
mechanisms whose Go dependencies Debian does not ship; its binary knows no `kubernetes_sd_configs`).
This serves the same target groups from the real API server: each GET lists the objects with kubectl
and returns the targets with the `__meta_kubernetes_*` labels Prometheus' own discovery sets (the
label names and rules of prometheus/discovery/kubernetes/pod.go and endpoints.go, v2.42), so the
operator's relabel rules (operator.py) run inside Prometheus on the same labels as in a cluster.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

P = "__meta_kubernetes_"


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _object_labels(prefix: str, meta: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, kind in (("labels", "label"), ("annotations", "annotation")):
        for k, v in (meta.get(key) or {}).items():
            out[f"{P}{prefix}_{kind}_{_sanitize(k)}"] = v
            out[f"{P}{prefix}_{kind}present_{_sanitize(k)}"] = "true"
    return out


def _pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    ready = next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), "unknown")
    labels = {
        P + "namespace": meta["namespace"],
        P + "pod_name": meta["name"],
        P + "pod_ip": status.get("podIP", ""),
        P + "pod_ready": ready.lower(),
        P + "pod_phase": status.get("phase", ""),
        P + "pod_node_name": spec.get("nodeName", ""),
        P + "pod_host_ip": status.get("hostIP", ""),
        P + "pod_uid": meta["uid"],
        **_object_labels("pod", meta),
    }
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner:
        labels[P + "pod_controller_kind"] = owner["kind"]
        labels[P + "pod_controller_name"] = owner["name"]
    return labels


def _container_labels(c: dict[str, Any], port: dict[str, Any] | None) -> dict[str, str]:
    labels = {P + "pod_container_name": c["name"], P + "pod_container_image": c.get("image", ""),
              P + "pod_container_init": "false"}
    if port is not None:
        labels |= {
            P + "pod_container_port_name": port.get("name", ""),
            P + "pod_container_port_number": str(port["containerPort"]),
            P + "pod_container_port_protocol": port.get("protocol", "TCP"),
        }
    return labels


def pod_groups(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """role: pod: one target per container port (per container without ports), pods with an IP only."""
    groups = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            continue
        common = _pod_labels(pod)
        for c in pod["spec"]["containers"]:
            for port in c.get("ports") or [None]:
                addr = f"{ip}:{port['containerPort']}" if port else ip
                groups.append({"targets": [addr], "labels": {**common, **_container_labels(c, port)}})
    return groups


def endpoints_groups(
    endpoints: list[dict[str, Any]], services: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """role: endpoints: one target per address and port, with the Service's and the target pod's labels."""
    svc = {s["metadata"]["name"]: s for s in services}
    by_name = {p["metadata"]["name"]: p for p in pods}
    groups = []
    for ep in endpoints:
        meta = ep["metadata"]
        common = {P + "namespace": meta["namespace"], P + "endpoints_name": meta["name"],
                  **_object_labels("endpoints", meta)}
        if meta["name"] in svc:
            common |= {P + "service_name": meta["name"], **_object_labels("service", svc[meta["name"]]["metadata"])}
        for subset in ep.get("subsets") or []:
            for port in subset.get("ports") or []:
                for ready, key in (("true", "addresses"), ("false", "notReadyAddresses")):
                    for addr in subset.get(key) or []:
                        labels = {
                            **common,
                            P + "endpoint_port_name": port.get("name", ""),
                            P + "endpoint_port_protocol": port.get("protocol", "TCP"),
                            P + "endpoint_ready": ready,
                        }
                        if addr.get("nodeName"):
                            labels[P + "endpoint_node_name"] = addr["nodeName"]
                        ref = addr.get("targetRef") or {}
                        if ref:
                            labels[P + "endpoint_address_target_kind"] = ref.get("kind", "")
                            labels[P + "endpoint_address_target_name"] = ref.get("name", "")
                        pod = by_name.get(ref.get("name", "")) if ref.get("kind") == "Pod" else None
                        if pod is not None:
                            labels |= _pod_labels(pod)
                            for c in pod["spec"]["containers"]:
                                for cp in c.get("ports") or []:
                                    if cp["containerPort"] == port["port"] and cp.get("protocol", "TCP") == port.get(
                                        "protocol", "TCP"
                                    ):
                                        labels |= _container_labels(c, cp)
                        groups.append({"targets": [f"{addr['ip']}:{port['port']}"], "labels": labels})
    return groups


class KubeSD:
    """GET /pod/<namespace> and /endpoints/<namespace>: http_sd target groups from `get(kind, namespace)`."""

    def __init__(self, get: Callable[[str, str], list[dict[str, Any]]]) -> None:
        self.get = get
        sd = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    body = json.dumps(sd.groups(self.path)).encode()
                    self.send_response(200)
                except Exception as e:  # the error goes to Prometheus' log and the test's failure
                    body = str(e).encode()
                    self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def groups(self, path: str) -> list[dict[str, Any]]:
        _, role, ns = path.split("/", 2)
        if role == "pod":
            return pod_groups(self.get("pods", ns))
        if role == "endpoints":
            return endpoints_groups(self.get("endpoints", ns), self.get("services", ns), self.get("pods", ns))
        raise ValueError(f"unknown role {role}")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
