"""The monitoring bundle against a real Prometheus scraping the real node (tests/fixtures/realnode.py).

Debian's `prometheus` 2.42 runs with its own config, data dir and a free loopback port. Its scrape jobs
are generated from the PodMonitor and ServiceMonitor as installed in the cluster (read back with
kubectl, translated the way the Prometheus Operator does: operator.py). Debian's build has no
Kubernetes discovery, so the discovery's target groups (roles pod and endpoints, with Prometheus'
`__meta_kubernetes_*` labels) come from the real API server through `http_sd_configs` (kube_sd.py);
Prometheus itself applies the operator's relabel rules to them: the targets it keeps prove that the
shipped selectors, ports and relabelling match the shipped DaemonSet, Deployment and Services. Its
rules are the installed PrometheusRule's groups.

Then every alert and every Grafana dashboard query (read from the installed dashboard ConfigMaps,
`$node` set to a value of the dashboard's own variable query) must return series. Series that appear
only on an event are made to appear: a pod bound by the scheduler (binds, attempts), an offline pod
whose knobs the agent sets (reaction latency `qos`), an online spike past a lowered watermark that
makes the agent evict (evictions by reason, reaction latency `evict`). The exceptions are listed in
`NO_SERIES_UNTIL` with the reason, and the test asserts that reason.

The scrape interval is 5 s instead of the monitors' 15 s, only to keep the run short (it changes how
soon series exist, not which). Everything waits by polling the Prometheus API; no fixed sleeps.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.realnode import WORKLOAD_IMAGE, RealNode
from tests.fixtures.debian_tools import require_tool
from tests.fixtures.realnode import QUIET_WATERMARKS, set_cpu_watermarks
from tests.integration.monitoring.kube_sd import KubeSD
from tests.integration.monitoring.operator import scrape_jobs
from tests.integration.monitoring.prom import Prometheus

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).parent
NS = "tidemark-system"
INTERVAL_S = 5
INTERVAL = f"{INTERVAL_S}s"
WINDOW = 300.0  # seconds of range query: the whole test's life
OFFLINE = {"volcano.sh/qos-level": "-1"}
ONLINE = {"volcano.sh/qos-level": "2"}
MONITORING_KINDS = {"Service", "PodMonitor", "ServiceMonitor", "PrometheusRule"}

# The only queries allowed to return nothing, with the reason the test asserts: the metric's family is
# exported by the scheduler (its HELP line is on /metrics) but has no sample until the first call.
NO_SERIES_UNTIL = {
    "tidemark_scheduler_evictions_total": (
        "the scheduler evicts only in its preempt/reclaim actions (an online pod or a queue reclaiming "
        "its share from running pods); the labelled counter has no sample before the first eviction call"
    ),
}
# Controls: the agent's PodMonitor mutated so that it must find nothing (test_the_shipped_monitors_...).
CONTROLS: dict[str, Callable[[dict[str, Any]], None]] = {
    "wrong-selector": lambda spec: spec["selector"]["matchLabels"].update({"app.kubernetes.io/name": "tidemark-x"}),
    "wrong-port": lambda spec: spec["podMetricsEndpoints"][0].update({"targetPort": 9103}),
}
# Alerts that must stay silent on a healthy install (the others depend on load: evicting, pending pods).
SILENT_WHEN_HEALTHY = (
    "TidemarkAgentNotReady",
    "TidemarkAgentConfigRejected",
    "TidemarkAgentDecisionFailures",
    "TidemarkSchedulerNoLeader",
    "TidemarkSchedulerConfigRejected",
)
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "by", "on", "or", "and", "unless", "rate", "increase", "deriv", "absent",
    "histogram_quantile", "le", "without", "group_left", "count",
}


def monitoring_objects(node: RealNode) -> list[dict[str, Any]]:
    """The monitoring overlay's own objects (Services, monitors, rules, dashboards), as kustomize renders them: not
    the base's, which the overlay renders too. The base's `tidemark-webhook` Service is a Service as well, and the
    module's teardown (and the install test's restore) deleted it with the rest: every later agent's NodeReport
    write then failed closed (`service "tidemark-webhook" not found`) until something applied the base again."""
    rendered = node.kubectl("kustomize", str(REPO / "daemonset" / "overlays" / "monitoring")).stdout
    base = node.kubectl("kustomize", str(REPO / "daemonset" / "base")).stdout
    theirs = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(base) if d}
    docs = [d for d in yaml.safe_load_all(rendered) if d and (d["kind"], d["metadata"]["name"]) not in theirs]
    return [
        d
        for d in docs
        if d["kind"] in MONITORING_KINDS
        or (d["kind"] == "ConfigMap" and (d["metadata"].get("labels") or {}).get("grafana_dashboard") == "1")
    ]


def apply_docs(node: RealNode, docs: list[dict[str, Any]], tmp: Path) -> Path:
    path = tmp / f"apply-{secrets.token_hex(3)}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    node.kubectl("apply", "-f", str(path), timeout=120)
    return path


def ensure_operator_crds(node: RealNode) -> None:
    node.kubectl("apply", "-f", str(HERE / "operator-crds.yaml"))
    for plural in ("podmonitors", "servicemonitors", "prometheusrules"):
        node.kubectl("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com", "--timeout=60s")


def vector_selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (`name{matchers}`), functions and grouping left out."""
    expr = re.sub(r"\b(by|without) \([^)]*\)", "", expr)
    expr = re.sub(r"\[[^]]*\]", "", expr)
    found = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", expr):
        name, matchers = m.group(1), m.group(2) or ""
        if name in PROMQL_WORDS or expr[m.end():].lstrip().startswith("("):
            continue
        found.append(name + matchers)
    return found


@pytest.fixture(scope="module")
def installed(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """The monitoring overlay's objects applied over the running install (the stand-in operator CRDs first)."""
    real_node.wait_tidemark()  # settled: a DaemonSet rolled by an earlier test has no terminating pod left
    ensure_operator_crds(real_node)
    docs = monitoring_objects(real_node)
    assert {d["kind"] for d in docs} == MONITORING_KINDS | {"ConfigMap"}
    path = apply_docs(real_node, docs, tmp_path_factory.mktemp("monitoring"))
    yield docs
    real_node.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def prometheus(
    real_node: RealNode, installed: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    binary = require_tool("prometheus", "prometheus")

    def get(kind: str, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            real_node.kubectl("get", kind, "-n", namespace, "-o", "json", timeout=30).stdout
        )["items"]
        return items

    sd = KubeSD(get)
    sd.start()
    monitors = get("podmonitors,servicemonitors", NS)
    jobs = [j for m in monitors for j in scrape_jobs(m, sd.url, INTERVAL)]
    agent_monitor = next(m for m in monitors if m["kind"] == "PodMonitor")
    for name, mutate in CONTROLS.items():
        control = copy.deepcopy(agent_monitor)
        mutate(control["spec"])
        for job in scrape_jobs(control, sd.url, INTERVAL):
            jobs.append({**job, "job_name": f"control/{name}"})
    rules = json.loads(real_node.kubectl("get", "prometheusrules", "-n", NS, "-o", "json").stdout)["items"]
    groups = [{**g, "interval": INTERVAL} for r in rules for g in r["spec"]["groups"]]
    prom = Prometheus(binary, tmp_path_factory.mktemp("prometheus"))
    try:
        prom.start(
            {"global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}, "scrape_configs": jobs}, groups
        )
        yield prom
    finally:
        prom.stop()
        sd.stop()


def _pod(ns: str, name: str, annotations: dict[str, str], command: str = "sleep 3600",
         requests: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "schedulerName": "volcano",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", command],
                "resources": {"requests": requests or {}},
            }],
        },
    }


def _evicting_cleared(node: RealNode) -> bool:
    """The newest EvictingStarted/EvictingCleared event on the Node is EvictingCleared (or there is none)."""
    out = node.kubectl("get", "events", "-A", "--field-selector", f"involvedObject.name={node.node_name}",
                       "-o", "json", timeout=30).stdout
    events = [e for e in json.loads(out)["items"] if e.get("reason") in ("EvictingStarted", "EvictingCleared")]
    if not events:
        return True
    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"])

    newest = max(events, key=when)
    return bool(newest["reason"] == "EvictingCleared")


@pytest.fixture(scope="module")
def events(real_node: RealNode, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Makes the events whose series a dashboard shows: binds, offline knobs, an eviction by the agent."""
    ns = f"t-mon-{secrets.token_hex(3)}"
    tmp = tmp_path_factory.mktemp("events")
    real_node.kubectl("create", "namespace", ns)
    try:
        Prometheus.wait(
            lambda: "token" in real_node.kubectl("get", "sa", "default", "-n", ns, "-o", "json", check=False).stdout,
            60, f"the default ServiceAccount of {ns}",
        )
        pods = [_pod(ns, f"offline-{i}", OFFLINE) for i in range(2)]
        pods.append(_pod(ns, "online-idle", ONLINE, requests={"cpu": "50m", "memory": "16Mi"}))
        apply_docs(real_node, pods, tmp)
        real_node.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod", "--all", "--timeout=180s", timeout=200)
        # The agent has set the offline knobs (reaction `qos`); now an online spike on one CPU and a
        # high watermark the spike alone passes: the agent evicts the offline pods (as test_realnode.py).
        spike = _pod(ns, "online-spike", ONLINE, "taskset -c 0 sh -c 'while :; do :; done'",
                     requests={"cpu": "200m", "memory": "16Mi"})
        apply_docs(real_node, [spike], tmp)
        real_node.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/online-spike", "--timeout=120s", timeout=140)
        set_cpu_watermarks(real_node, 10, 5)
        try:
            def offline_gone() -> bool:
                names = real_node.kubectl("get", "pods", "-n", ns, "-o", "name", timeout=30).stdout.split()
                return not {"pod/offline-0", "pod/offline-1"} & set(names)

            Prometheus.wait(offline_gone, 120, "the agent to evict the offline pods")
        finally:
            set_cpu_watermarks(real_node, *QUIET_WATERMARKS)
            real_node.kubectl("delete", "pod", "-n", ns, "online-spike", "--grace-period=0", "--force", check=False)
        Prometheus.wait(lambda: _evicting_cleared(real_node), 90, "the agent to clear its evicting state")
        yield ns
    finally:
        real_node.kubectl("delete", "pods", "-n", ns, "--all", "--grace-period=0", "--force", check=False, timeout=120)
        with contextlib.suppress(TimeoutError):
            Prometheus.wait(lambda: not real_node.kubectl("get", "pods", "-n", ns, "-o", "name", check=False,
                                                          timeout=30).stdout.strip(), 60, f"the pods of {ns} gone")
        real_node.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _excepted(expr: str) -> bool:
    return any(name in expr for name in NO_SERIES_UNTIL)


def _wait_series(prom: Prometheus, expr: str, timeout: float = 120.0) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def some() -> bool:
        nonlocal found
        found = prom.query_range(expr, WINDOW)
        return bool(found)

    with contextlib.suppress(TimeoutError):
        Prometheus.wait(some, timeout, expr, poll=2.0)
    return found


def test_the_shipped_monitors_find_every_agent_and_scheduler_pod(real_node: RealNode, prometheus: Prometheus) -> None:
    real_node.wait_tidemark()  # an earlier test may have rolled the DaemonSet: the replaced pod must be gone
    agents = real_node.pods(NS, "app.kubernetes.io/name=tidemark-agent")
    scheds = real_node.pods(NS, "app.kubernetes.io/name=tidemark-scheduler")
    want = {p["metadata"]["name"] for p in agents + scheds if real_node.pod_ready(p)}

    def all_up() -> bool:
        # By pod name, not IP: the agent is hostNetwork, so a replaced agent pod had the same address.
        targets = prometheus.targets()
        up = {t["labels"].get("pod", "") for t in targets if t["health"] == "up"}
        agent_job = {t["labels"].get("pod") for t in targets if t["labels"].get("job") == f"{NS}/tidemark-agent"}
        return want <= up and agent_job == {p["metadata"]["name"] for p in agents}

    Prometheus.wait(all_up, 120, f"targets up for the pods {sorted(want)}: {prometheus.targets()}")
    targets = prometheus.targets()
    by_job: dict[str, set[str]] = {}
    for t in targets:
        by_job.setdefault(t["labels"]["job"], set()).add(t["labels"]["pod"])
    # The operator's job labels: <namespace>/<PodMonitor> for the agent, the Service's name for the scheduler;
    # the selectors keep nothing else (the webhook's Service and the agent's headless one are in the namespace).
    assert set(by_job) == {f"{NS}/tidemark-agent", "tidemark-scheduler-metrics"}, by_job
    # The controls (CONTROLS: the agent's PodMonitor with a wrong selector value, a wrong port) keep
    # nothing: the selectors and ports are what finds the targets, so a typo in monitors.yaml fails here.
    assert not [t["scrapeUrl"] for t in targets if t["scrapePool"].startswith("control/")]
    def controls_dropped() -> bool:  # discovered, then dropped by the relabelling (2.42 shows the job moved)
        dropped = prometheus.api("targets", state="dropped")["droppedTargets"]
        pools = {t["discoveredLabels"].get("job") or t["discoveredLabels"].get("__tmp_prometheus_job_name")
                 for t in dropped}
        return pools >= {f"control/{c}" for c in CONTROLS}

    Prometheus.wait(controls_dropped, 60, "the control jobs' discovered targets dropped")
    assert by_job[f"{NS}/tidemark-agent"] == {p["metadata"]["name"] for p in agents}
    ready_scheds = {p["metadata"]["name"] for p in scheds if real_node.pod_ready(p)}
    assert ready_scheds <= by_job["tidemark-scheduler-metrics"] <= {p["metadata"]["name"] for p in scheds}
    agent_targets = [t for t in targets if t["labels"]["job"] == f"{NS}/tidemark-agent"]
    assert {t["labels"]["node"] for t in agent_targets} == {real_node.node_name}  # the PodMonitor's relabeling
    assert all(t["scrapeUrl"].endswith(":9102/metrics") for t in agent_targets)


def test_the_installed_rules_evaluate_without_error(prometheus: Prometheus, installed: list[dict[str, Any]]) -> None:
    shipped = {r["alert"] for d in installed if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"]
               for r in g["rules"]}

    def evaluated() -> bool:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        return {r["name"] for r in rules} == shipped and all(
            not r["lastEvaluation"].startswith("0001") for r in rules
        )

    Prometheus.wait(evaluated, 60, "every shipped rule evaluated once")
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not bad, bad


def test_every_alert_selects_series_and_a_healthy_install_fires_none(
    real_node: RealNode, prometheus: Prometheus, installed: list[dict[str, Any]], events: str
) -> None:
    rules = [r for d in installed if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"] for r in g["rules"]]
    empty: dict[str, list[str]] = {}
    for rule in rules:
        for sel in vector_selectors(rule["expr"]):
            series = _wait_series(prometheus, sel)
            if not series:
                empty.setdefault(rule["alert"], []).append(sel)
            elif "$labels.node" in json.dumps(rule["annotations"]):
                # The annotations name the node: every series the alert can fire on carries it.
                assert {s["metric"].get("node") for s in series} == {real_node.node_name}, (rule["alert"], sel)
    assert not empty, f"alert selectors without series: {empty}"
    assert set(SILENT_WHEN_HEALTHY) <= {r["alert"] for r in rules}
    # An alert fires only after its expression held for `for:` (5 minutes); a single failed scrape while
    # the events' CPU spike ran is not "firing". Healthy = each expression empty again within a minute.
    firing: dict[str, list[dict[str, Any]]] = {}

    def quiet() -> bool:
        firing.clear()
        firing.update({r["alert"]: v for r in rules if r["alert"] in SILENT_WHEN_HEALTHY
                       if (v := prometheus.query(r["expr"]))})
        return not firing

    with contextlib.suppress(TimeoutError):
        Prometheus.wait(quiet, 60, "the silent alerts' expressions empty", poll=2.0)
    assert not firing, firing


def test_every_dashboard_query_returns_series(
    real_node: RealNode, prometheus: Prometheus, installed: list[dict[str, Any]], events: str
) -> None:
    dashboards = {
        name: json.loads(text)
        for d in installed
        if d["kind"] == "ConfigMap"
        for name, text in d["data"].items()
    }
    assert set(dashboards) == {"tidemark-agent.json", "tidemark-scheduler.json"}
    # The agent dashboard's variable: label_values(tidemark_agent_ready, node), through the API.
    variables = [v for d in dashboards.values() for v in d.get("templating", {}).get("list", [])]
    node_var = next(v for v in variables if v["name"] == "node")
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", node_var["query"]).groups()  # type: ignore[union-attr]
    values: list[str] = []

    def has_values() -> bool:
        nonlocal values
        values = prometheus.api(f"label/{label}/values", **{"match[]": metric})
        return bool(values)

    Prometheus.wait(has_values, 120, f"values of the dashboard variable {node_var['query']}")
    assert real_node.node_name in values

    exprs = [
        (d["title"], p["title"], t["expr"].replace("$node", real_node.node_name))
        for d in dashboards.values()
        for p in d["panels"]
        for t in p["targets"]
    ]
    assert exprs
    missing, excepted = [], []
    # the listed exceptions last, and briefly: what they assert is that no sample exists yet (below), so the other
    # queries' waits are theirs too; waiting each one's 120 s for a series it says cannot be there cost the suite 2 min
    for dash, panel, expr in sorted(exprs, key=lambda e: _excepted(e[2])):
        if _wait_series(prometheus, expr, timeout=2 * INTERVAL_S if _excepted(expr) else 120.0):
            continue
        (excepted if _excepted(expr) else missing).append((dash, panel, expr))
    assert not missing, f"dashboard queries without series: {missing}"
    for dash, panel, expr in excepted:  # the listed exceptions: declared on /metrics, no sample yet
        name = next(n for n in NO_SERIES_UNTIL if n in expr)
        for t in prometheus.targets():
            if t["labels"]["job"] != "tidemark-scheduler-metrics":
                continue
            with urllib.request.urlopen(t["scrapeUrl"], timeout=10) as r:
                text = r.read().decode()
            assert f"# HELP {name} " in text, (dash, panel, name)
            assert not [line for line in text.splitlines() if line.startswith(name)], (dash, panel, name)
    assert len(excepted) <= len(NO_SERIES_UNTIL)
