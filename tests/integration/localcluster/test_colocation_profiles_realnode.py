"""ColocationProfiles on the real node: a plain Deployment in a selected namespace runs offline (issue #26).

(tests/fixtures/realnode.py: the `real_node`/`real_ns` fixtures; the eviction as in test_realnode.py.)

The Deployment is what a user has before Tidemark: `cpu`/`memory` requests and limits, the default scheduler,
no qos-level. The profile (namespace selected by a label, pods by `app=etl`) is applied by the shipped webhook's
Pod hook (the webhook's Deployment, its shipped RBAC and watches) when the ReplicaSet controller creates the pod;
the shipped scheduler binds it against `kubernetes.io/batch-*`, kubelet runs it, and the agent gives it the
offline knobs: `cpu.idle=1` on the pod where the kernel has it (>= 5.15), else the minimal `cpu.shares=2`
(docs/agent.md, "QoS knobs (aware of kubelet's tree)"), the batch container's `cpu.shares`, CFS quota and memory
limit from its batch requests and limits, `oom_score_adj` 1000. Past the CPU high watermark the agent evicts it
like any offline pod, and the pod its ReplicaSet makes again is offline too (the same workload, the same bucket).
Pods the selectors do not match (another label, another namespace) are stored and run as sent; a malformed
profile is refused by the webhook pod naming the field; with the webhook scaled to zero a matching Deployment's
pod is created unchanged (failurePolicy Ignore), and the webhook is put back before the test ends.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster.realnode import WORKLOAD_IMAGE, RealNode
from tests.fixtures.realnode import RealNamespace, container_cgroup, namespace_on, pod_cgroup, set_cpu_watermarks
from tests.integration.localcluster.test_realnode import quiet_and_cleared, read
from tidemark.apis import quantity_to_int
from tidemark.profiles import ANN_PROFILE, GROUP, PLURAL, VERSION

pytestmark = pytest.mark.slow

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEM = "kubernetes.io/batch-memory"
TEAM_LABEL = "tidemark.io/test-team"
ONLINE = {"volcano.sh/qos-level": "2"}
WEBHOOK = "tidemark-webhook"
SYSTEM_NS = "tidemark-system"
#: how long a profile create is tried again while the API server cannot reach the webhook (`_profile`)
WEBHOOK_RETRY_S = 30.0


def _profile_body(name: str, team: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ColocationProfile", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team}},
                     "selector": {"matchLabels": {"app": "etl"}}, **spec}}


def _profile(ns: RealNamespace, name: str, team: str) -> None:
    """Creates the profile, as a pipeline's `kubectl apply` would: a create the API server could not get validated
    (HTTP 500, the webhook call timed out) is tried again for up to WEBHOOK_RETRY_S. Once in a CI run, right after
    the install test's reinstall, a call timed out while the node's probes of three pods timed out too (a blip of
    the node's pod network, not an answer of the webhook); a refusal (4xx) is never retried."""
    from kubernetes import client

    body = _profile_body(name, team, qosLevel="BE", schedulerName="volcano", batchResources=True)
    t0 = time.monotonic()
    while True:
        try:
            ns.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            break
        except client.ApiException as e:
            if e.status != 500 or "failed calling webhook" not in str(e.body) or \
                    time.monotonic() - t0 > WEBHOOK_RETRY_S:
                raise
            print(f"ColocationProfile {name}: the webhook call failed ({e.body}); trying again")
            time.sleep(1)
    ns.cleanups.append(lambda: ns.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name))


def _deployment(name: str, app: str = "etl") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                                  "name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
                                  "command": ["sh", "-c", "sleep 3600"],
                                  "resources": {"requests": {"cpu": "20m", "memory": "32Mi"},
                                                "limits": {"cpu": "40m", "memory": "64Mi"}}}]}}},
    }


def _create_deployment(ns: RealNamespace, name: str, app: str = "etl") -> None:
    from kubernetes import client

    apps = client.AppsV1Api(ns.api)
    apps.create_namespaced_deployment(ns.name, _deployment(name, app))
    ns.cleanups.append(lambda: apps.delete_namespaced_deployment(name, ns.name))


def _webhook_endpoints(ns: RealNamespace) -> int:
    subsets = ns.core.read_namespaced_endpoints(WEBHOOK, SYSTEM_NS).subsets or []
    return sum(len(s.addresses or []) for s in subsets)


def _wait_webhook(node: RealNode, ns: RealNamespace, replicas: int | None = None, timeout: float = 180) -> None:
    """The shipped webhook's pods Ready behind its Service (the fixture's `wait_tidemark` waits for the agent and
    the scheduler only; the webhook starts after its certificates are made)."""
    def ready() -> bool:
        pods = node.pods(SYSTEM_NS, f"app.kubernetes.io/name={WEBHOOK}")
        up = [p for p in pods if node.pod_ready(p) and not p["metadata"].get("deletionTimestamp")]
        want = replicas if replicas is not None else max(1, len(pods))
        return len(up) >= want and _webhook_endpoints(ns) >= want

    ns.wait(ready, timeout, f"the {WEBHOOK} pods Ready with endpoints")


def _selected_namespace(node: RealNode, ns: RealNamespace) -> str:
    """Labels the test's namespace for a fresh profile of its own; returns the profile's name."""
    _wait_webhook(node, ns)
    team = f"t{secrets.token_hex(3)}"
    profile = f"etl-offline-{team}"
    ns.core.patch_namespace(ns.name, {"metadata": {"labels": {TEAM_LABEL: team}}})
    _profile(ns, profile, team)
    _wait_profile_served(ns, profile)
    return profile


def _wait_profile_served(ns: RealNamespace, profile: str, timeout: float = 60) -> None:
    """Until the webhook's cache has the profile: a probe pod comes back mutated (then deleted)."""
    def mutated() -> bool:
        probe = ns.pod(f"probe-{secrets.token_hex(3)}", scheduler=None, node_name="no-such-node")
        probe["metadata"]["labels"] = {"app": "etl"}
        created = ns.create(probe)
        ns.core.delete_namespaced_pod(created.metadata.name, ns.name, grace_period_seconds=0)
        return bool((created.metadata.annotations or {}).get(ANN_PROFILE) == profile)

    ns.wait(mutated, timeout, f"the webhook to apply ColocationProfile {profile}")


def _wait_batch_published(ns: RealNamespace, node: str, cpu: int, memory: int) -> None:
    def published() -> bool:
        alloc = ns.core.read_node(node).status.allocatable or {}
        return ((quantity_to_int(alloc.get(BATCH_CPU, "0")) or 0) >= cpu
                and (quantity_to_int(alloc.get(BATCH_MEM, "0")) or 0) >= memory)

    ns.wait(published, 90, f"{BATCH_CPU} >= {cpu} and {BATCH_MEM} >= {memory} published")


def _owned_pods(ns: RealNamespace, app: str = "etl") -> list[Any]:
    """The pods of the test's Deployment (the probes have no owner)."""
    return [p for p in ns.core.list_namespaced_pod(ns.name, label_selector=f"app={app}").items
            if p.metadata.owner_references and not p.metadata.deletion_timestamp]


def _running_pod(ns: RealNamespace, timeout: float = 180, app: str = "etl") -> Any:
    def running() -> Any:
        pods = [p for p in _owned_pods(ns, app) if p.status.phase == "Running"]
        return pods[0] if pods else None

    try:
        ns.wait(lambda: running() is not None, timeout, f"the Deployment's pod (app={app}) Running")
    except TimeoutError as e:
        names = [p.metadata.name for p in _owned_pods(ns, app)]
        raise TimeoutError(f"{e}: {[ns.describe(n) for n in names]}") from None
    return running()


def _assert_offline(pod: Any, profile: str, node: str | None) -> None:
    assert pod.metadata.annotations[ANN_PROFILE] == profile
    assert pod.metadata.annotations["volcano.sh/qos-level"] == "BE"
    assert pod.spec.scheduler_name == "volcano"
    assert node is None or pod.spec.node_name == node
    res = pod.spec.containers[0].resources
    assert "cpu" not in res.requests and "memory" not in res.requests
    assert "cpu" not in res.limits and "memory" not in res.limits
    assert quantity_to_int(res.requests[BATCH_CPU]) == 20 and quantity_to_int(res.limits[BATCH_CPU]) == 40
    assert quantity_to_int(res.requests[BATCH_MEM]) == 32 * 2**20
    assert quantity_to_int(res.limits[BATCH_MEM]) == 64 * 2**20


def _assert_unchanged(pod: Any) -> None:
    assert ANN_PROFILE not in (pod.metadata.annotations or {})
    assert "volcano.sh/qos-level" not in (pod.metadata.annotations or {})
    assert pod.spec.scheduler_name == "default-scheduler"
    res = pod.spec.containers[0].resources
    assert res.requests == {"cpu": "20m", "memory": "32Mi"} and res.limits == {"cpu": "40m", "memory": "64Mi"}


def _wait_offline_knobs(ns: RealNamespace, pod: Any) -> None:
    """The agent's offline knobs on a batch pod (v1, BestEffort tree), as test_realnode.py reads them."""
    p_cpu = pod_cgroup(pod, "cpu")
    c_cpu, c_mem = container_cgroup(pod, "cpu"), container_cgroup(pod, "memory")

    def knobs() -> dict[str, str]:
        idle = p_cpu / "cpu.idle"
        return {
            "pod idle": read(idle) if idle.exists() else "absent",
            "pod shares": read(p_cpu / "cpu.shares"),
            "shares": read(c_cpu / "cpu.shares"),
            "quota": read(c_cpu / "cpu.cfs_quota_us"),
            "period": read(c_cpu / "cpu.cfs_period_us"),
            "memory": read(c_mem / "memory.limit_in_bytes"),
        }

    def set_by_agent() -> bool:
        k = knobs()
        idle_class = k["pod idle"] == "1" if k["pod idle"] != "absent" else k["pod shares"] == "2"
        return (idle_class and k["shares"] == "20" and int(k["quota"]) == 40 * int(k["period"]) // 1000
                and k["memory"] == str(64 * 2**20))

    try:
        ns.wait(set_by_agent, 60, f"the agent's offline knobs on {p_cpu}")
    except TimeoutError as e:
        raise TimeoutError(f"{e} (now {knobs()})") from None
    pids = [int(p) for p in read(c_cpu / "cgroup.procs").split()]
    assert pids
    ns.wait(lambda: all(read(Path(f"/proc/{p}/oom_score_adj")) == "1000" for p in pids), 30, "oom_score_adj 1000")


def test_a_plain_deployment_in_a_selected_namespace_runs_offline(real_node: RealNode, real_ns: RealNamespace) -> None:
    profile = _selected_namespace(real_node, real_ns)
    _wait_batch_published(real_ns, real_node.node_name, 40, 64 * 2**20)
    _create_deployment(real_ns, "etl")
    # outside the selectors: another label in the selected namespace (kube-scheduler, plain requests)
    _create_deployment(real_ns, "web", app="web")

    pod = _running_pod(real_ns)
    _assert_offline(pod, profile, real_node.node_name)
    assert pod.status.qos_class == "BestEffort"  # no cpu/memory left: kubelet's BestEffort tree
    _wait_offline_knobs(real_ns, pod)
    # what a user sees (docs/colocation-profiles.md, "What a user sees")
    described = real_node.kubectl("describe", "pod", "-n", real_ns.name, pod.metadata.name).stdout
    assert f"{ANN_PROFILE}: {profile}" in described and f"{BATCH_CPU}:" in described, described

    web = _running_pod(real_ns, app="web")
    _assert_unchanged(web)
    assert web.status.qos_class == "Burstable"
    assert read(container_cgroup(web, "cpu") / "cpu.shares") == "20"  # kubelet's value for 20m
    idle = pod_cgroup(web, "cpu") / "cpu.idle"
    assert not idle.exists() or read(idle) == "0", "the agent idled a pod no profile selected"

    # outside the selectors: the same Deployment in a namespace the profile does not select
    with namespace_on(real_node) as other:
        _create_deployment(other, "etl")
        other.wait(lambda: bool(_owned_pods(other)), 60, "the other namespace's Deployment pod created")
        _assert_unchanged(_owned_pods(other)[0])


def test_a_profiled_pod_is_evicted_past_the_watermark(real_node: RealNode, real_ns: RealNamespace) -> None:
    """As test_realnode.py's eviction test, with the offline pod a plain Deployment's, made offline by a profile."""
    real_ns.cleanups.append(lambda: quiet_and_cleared(real_node, real_ns))
    profile = _selected_namespace(real_node, real_ns)
    _wait_batch_published(real_ns, real_node.node_name, 40, 64 * 2**20)
    _create_deployment(real_ns, "etl")
    victim = _running_pod(real_ns)
    _assert_offline(victim, profile, real_node.node_name)
    _wait_offline_knobs(real_ns, victim)
    cid = victim.status.container_statuses[0].container_id.split("://", 1)[1]

    real_ns.create(real_ns.pod("online-idle", requests={"cpu": "50m", "memory": "16Mi"}, annotations=ONLINE))
    idle = real_ns.wait_running("online-idle")
    assert ANN_PROFILE not in (idle.metadata.annotations or {})  # in the selected namespace, not app=etl
    # A sustained online spike on one CPU, then a high watermark the spike alone passes (test_realnode.py).
    spin = "taskset -c 0 sh -c 'while :; do :; done'"
    real_ns.create(real_ns.pod("online-spike", spin, requests={"cpu": "200m", "memory": "16Mi"}, annotations=ONLINE))
    real_ns.wait_running("online-spike")
    set_cpu_watermarks(real_node, 10, 5)

    def victim_gone() -> bool:
        return victim.metadata.uid not in {p.metadata.uid for p in real_ns.core.list_namespaced_pod(real_ns.name).items}

    real_ns.wait(victim_gone, 120, f"the agent to evict {victim.metadata.name}")
    real_ns.wait(lambda: cid not in real_node.running_tasks(), 60, "kubelet to kill the offline container")

    def evicted_by_agent() -> bool:
        events = real_ns.core.list_namespaced_event(
            real_ns.name, field_selector=f"involvedObject.name={victim.metadata.name}").items
        return any(e.reason == "OnlineCPUHighWatermark" for e in events)  # the spike alone passes it

    real_ns.wait(evicted_by_agent, 30, f"the agent's OnlineCPUHighWatermark event on {victim.metadata.name}")
    assert real_ns.get("online-idle").metadata.uid == idle.metadata.uid
    assert real_ns.get("online-idle").status.phase == "Running"
    assert real_ns.get("online-spike").status.phase == "Running"
    events = real_ns.core.list_namespaced_event(real_ns.name).items
    assert not [e for e in events if e.involved_object.name.startswith("online") and e.reason == "Evicted"]

    # the pod its ReplicaSet makes again is offline too: the same profile, the same class (its phase is not
    # asserted: the node publishes no batch capacity while it evicts)
    def replacement() -> Any:
        pods = [p for p in _owned_pods(real_ns) if p.metadata.uid != victim.metadata.uid]
        return pods[0] if pods else None

    real_ns.wait(lambda: replacement() is not None, 60, "the ReplicaSet's new pod")
    _assert_offline(replacement(), profile, None)


def test_a_malformed_profile_is_refused_by_the_webhook_naming_the_field(
    real_node: RealNode, real_ns: RealNamespace
) -> None:
    from kubernetes import client

    _wait_webhook(real_node, real_ns)  # the hook fails closed: with no webhook pod every profile would be refused
    team = f"t{secrets.token_hex(3)}"
    for spec, field in (
        ({"qosLevel": "-9"}, "spec.qosLevel='-9' must be LC, HLS, LS, BE"),  # 3 characters: the schema passes it
        ({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}},
         "spec.selector.matchExpressions[0].values must be a non-empty list"),
        ({"labels": {"bad key!": "x"}}, "spec.labels: key 'bad key!'"),
        ({"probability": 150}, "spec.probability"),  # the CRD schema refuses it first
    ):
        name = f"bad-{secrets.token_hex(3)}"
        with pytest.raises(client.ApiException) as refused:
            real_ns.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, _profile_body(name, team, **spec))
        real_ns.cleanups.append(  # only if it was stored after all
            lambda n=name: real_ns.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n))
        assert refused.value.status in (400, 422) and field in str(refused.value.body), refused.value.body


def test_with_the_webhook_down_a_matching_pod_is_created_unchanged(real_node: RealNode, real_ns: RealNamespace) -> None:
    """docs/colocation-profiles.md, "With the webhook down": the Pod hook's failurePolicy is Ignore. Last in the
    file: it scales the shipped webhook Deployment to 0 and puts it back (its Ready pods and the profile served
    again) before it ends, whatever happened."""
    profile = _selected_namespace(real_node, real_ns)
    replicas = real_node.kubectl("get", "deployment", WEBHOOK, "-n", SYSTEM_NS, "-o", "jsonpath={.spec.replicas}")
    replicas_n = int(replicas.stdout.strip() or "2")

    real_node.kubectl("scale", "deployment", WEBHOOK, "-n", SYSTEM_NS, "--replicas=0")
    try:
        real_ns.wait(lambda: _webhook_endpoints(real_ns) == 0, 90, "the webhook Service without endpoints")
        _create_deployment(real_ns, "etl")
        real_ns.wait(lambda: bool(_owned_pods(real_ns)), 60, "the Deployment's pod created with the webhook down")
        _assert_unchanged(_owned_pods(real_ns)[0])
    finally:
        real_node.kubectl("scale", "deployment", WEBHOOK, "-n", SYSTEM_NS, f"--replicas={replicas_n}")
        _wait_webhook(real_node, real_ns, replicas_n)
    _wait_profile_served(real_ns, profile, timeout=90)  # and serving the profiles again
