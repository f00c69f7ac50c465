"""What the Prometheus Operator makes of Tidemark's PodMonitor and ServiceMonitor: Prometheus scrape jobs.

The test's Prometheus is Debian's plain `prometheus` (no operator on the real node), so its config is
generated here from the PodMonitor/ServiceMonitor objects read back from the cluster, the way the
operator (v0.6x) generates it: Kubernetes discovery (role pod / endpoints) in the monitor's
namespace (served by kube_sd.py: Debian's build has no `kubernetes_sd_configs`), `keep` rules for
the label selector and the port, the operator's target labels (namespace, pod, container, service,
job, endpoint), then the monitor's own `relabelings`. A field
the translation does not know fails loudly (`Unsupported`), so a future edit of monitors.yaml cannot
be silently skipped by the test. The job label is the operator's: `<namespace>/<name>` for a
PodMonitor, the Service's name for a ServiceMonitor (without `jobLabel`).
"""

from __future__ import annotations

import re
from typing import Any

SD_ROLE = {"PodMonitor": "pod", "ServiceMonitor": "endpoints"}
KNOWN_SPEC = {"selector", "podMetricsEndpoints", "endpoints"}
KNOWN_ENDPOINT = {"port", "targetPort", "path", "interval", "relabelings"}
KNOWN_SELECTOR = {"matchLabels"}
RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "regex": "regex",
    "replacement": "replacement",
    "action": "action",
    "separator": "separator",
}


class Unsupported(Exception):
    """A monitor field this translation does not implement."""


def _sanitize(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _check(what: str, got: dict[str, Any], known: set[str]) -> None:
    extra = set(got) - known
    if extra:
        raise Unsupported(f"{what}: fields {sorted(extra)} are not translated here (operator.py)")


def _relabelings(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in items:
        _check("relabeling", r, set(RELABEL_KEYS))
        out.append({RELABEL_KEYS[k]: v for k, v in r.items()})
    return out


def scrape_jobs(monitor: dict[str, Any], sd_url: str, interval: str | None = None) -> list[dict[str, Any]]:
    """The scrape jobs for one PodMonitor or ServiceMonitor (`interval` overrides the monitor's).

    The operator writes `kubernetes_sd_configs: [{role, namespaces}]`; Debian's Prometheus has no
    Kubernetes discovery, so the same role and namespace are asked of `sd_url` (kube_sd.py) instead.
    """
    kind = monitor["kind"]
    ns, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    spec = monitor["spec"]
    _check(f"{kind} {name} spec", spec, KNOWN_SPEC)
    _check(f"{kind} {name} selector", spec["selector"], KNOWN_SELECTOR)
    obj = "pod" if kind == "PodMonitor" else "service"
    endpoints = spec["podMetricsEndpoints"] if kind == "PodMonitor" else spec["endpoints"]
    jobs = []
    for i, ep in enumerate(endpoints):
        _check(f"{kind} {name} endpoint", ep, KNOWN_ENDPOINT)
        relabel: list[dict[str, Any]] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        for k, v in sorted(spec["selector"].get("matchLabels", {}).items()):
            s = _sanitize(k)
            relabel.append(
                {
                    "action": "keep",
                    "source_labels": [
                        f"__meta_kubernetes_{obj}_label_{s}",
                        f"__meta_kubernetes_{obj}_labelpresent_{s}",
                    ],
                    "regex": f"({v});true",
                }
            )
        if kind == "PodMonitor":
            if "port" in ep:
                relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                                "regex": ep["port"]})
            elif "targetPort" in ep:
                relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                                "regex": str(ep["targetPort"])})
            relabel.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                            "regex": "(Failed|Succeeded)"})
        else:
            if "port" in ep:
                relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                                "regex": ep["port"]})
            elif "targetPort" in ep:
                relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                                "regex": str(ep["targetPort"])})
        relabel += [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ]
        if kind == "PodMonitor":
            relabel.append({"target_label": "job", "replacement": f"{ns}/{name}"})
        else:
            relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"})
            relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"})
        relabel.append({"target_label": "endpoint", "replacement": str(ep.get("port", ep.get("targetPort", "")))})
        relabel += _relabelings(ep.get("relabelings", []))
        jobs.append(
            {
                "job_name": f"{'podMonitor' if kind == 'PodMonitor' else 'serviceMonitor'}/{ns}/{name}/{i}",
                "honor_labels": False,
                "http_sd_configs": [
                    {"url": f"{sd_url}/{SD_ROLE[kind]}/{ns}", "refresh_interval": interval or "30s"}
                ],
                "scrape_interval": interval or ep.get("interval", "30s"),
                "metrics_path": ep.get("path", "/metrics"),
                "relabel_configs": relabel,
            }
        )
    return jobs
