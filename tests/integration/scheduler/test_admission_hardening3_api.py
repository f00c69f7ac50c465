"""Issue 33's admission and RBAC items on the real kube-apiserver 1.20 (hardening round 3, items 2, 3, 8, 11, 12).

The webhook runs in-process as in test_agent_rights_api.py (item 2: the shipped agent role bound to the group
`tidemark:agents`, a client certificate signed by the API server's client CA) and test_colocation_profiles_api.py
(items 3, 8, 11, 12: the `ProfileCache` the command runs, the hooks `Fail` but the pod CREATE hook). Each test
failed on the code before the fix (docs/security.md, "Hardening round 3").
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.test_agent_rights_api import Rights, _client, _shipped_role, rights  # noqa: F401
from tests.integration.scheduler.test_colocation_profiles_api import Env, env  # noqa: F401
from tests.integration.scheduler.test_webhook_api import certs  # noqa: F401  (a fixture)
from tidemark.profiles import ANN_PROFILE

pytestmark = pytest.mark.kube


def _group_certificate(r: Rights, common_name: str) -> Any:
    """A client certificate `CN=<common_name>, O=tidemark:agents` signed by the API server's client CA, and the
    group bound to a copy of the shipped agent ClusterRole (as daemonset/ binds it)."""
    from kubernetes import client

    server_env = r.kube.server.env
    if "CLIENT_CA_KEY" not in server_env:
        pytest.skip("this kube-apiserver has no client CA (hack/kube-apiserver.sh predates it)")
    d = r.certs
    subj = f"/O=tidemark:agents/CN={common_name}"
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "member.key", "-out", "member.csr", "-subj", subj], cwd=d, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    (d / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", "member.csr", "-CA", server_env["CLIENT_CA_FILE"], "-CAkey",
                    server_env["CLIENT_CA_KEY"], "-CAcreateserial", "-CAserial", str(d / "client-ca.srl"), "-days", "1",
                    "-extfile", "client.cnf", "-out", "member.crt"], cwd=d, check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    rbac = client.RbacAuthorizationV1Api(r.kube.api)
    copy = r.kube.unique("tidemark-agent-group")
    rbac.create_cluster_role({"metadata": {"name": copy}, "rules": _shipped_role("tidemark-agent")})
    r.kube.defer(lambda: rbac.delete_cluster_role(copy))
    rbac.create_cluster_role_binding({
        "metadata": {"name": copy},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": copy},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "tidemark:agents"}],
    })
    r.kube.defer(lambda: rbac.delete_cluster_role_binding(copy))
    return _client(r.host, cert=(str(d / "member.crt"), str(d / "member.key")))


def test_item2_a_member_of_the_agents_group_with_another_name_is_refused(rights: Rights) -> None:  # noqa: F811
    """Before: `CN=<node A>, O=tidemark:agents` held the agent role and no agent rule judged it: it wrote node B's
    NodeReport (201) and evicted a pod on node B (201). Now it is judged as an agent, names no node: refused."""
    member = _group_certificate(rights, rights.node_a)
    rights.start_webhook()
    got = rights.measure(member, rights.node_a, rights.node_b)
    print("\nagents' group member named otherwise:", got)
    assert got["write another node's NodeReport"] == 403
    assert got["evict a pod on another node"] == 403
    assert got["write its own NodeReport"] == 403 and got["evict a pod on its own node"] == 403
    assert got["patch another Node's annotations"] == 403  # RBAC, as before


def _profile_offline(e: Env, app: str, **extra: Any) -> str:
    name = e.kube.unique(app)
    e.profile(name, {"namespaceSelector": {"matchLabels": {"team": e.label}},
                     "selector": {"matchLabels": {"app": app}}, "qosLevel": "BE", "batchResources": True, **extra})
    return name


def _wait_for(e: Env, profile: str, app: str) -> None:
    from tests.integration.scheduler.test_colocation_profiles_api import _until

    def mutated() -> bool:
        probe = e.pod("probe", {"app": app})
        e.kube.core.delete_namespaced_pod(probe["metadata"]["name"], e.kube.name, grace_period_seconds=0)
        return bool((probe["metadata"].get("annotations") or {}).get(ANN_PROFILE) == profile)

    _until(mutated, "the webhook to apply the profile")


def test_item3_a_pending_pods_profile_class_cannot_be_undone(env: Env) -> None:  # noqa: F811
    """Before: a tenant patched `volcano.sh/qos-level` of its pending, profile-offlined pod back to LC (200) and
    kept the batch resources. Now the class is fixed from creation: 403, bound or not."""
    from kubernetes import client

    profile = _profile_offline(env, "etl3")
    _wait_for(env, profile, "etl3")
    pod = env.pod("etl3", {"app": "etl3"})
    assert not pod["spec"].get("nodeName") and pod["metadata"]["annotations"]["volcano.sh/qos-level"] == "BE"
    with pytest.raises(client.ApiException) as refused:
        env.kube.core.patch_namespaced_pod(pod["metadata"]["name"], env.kube.name,
                                           {"metadata": {"annotations": {"volcano.sh/qos-level": "LC"}}})
    assert refused.value.status == 403 and "cannot move from offline to online" in str(refused.value.body)
    # within its side it may move
    env.kube.core.patch_namespaced_pod(pod["metadata"]["name"], env.kube.name,
                                       {"metadata": {"annotations": {"volcano.sh/qos-level": "-3"}}})


def test_item8_a_profiles_priority_class_brings_its_preemption_policy(env: Env) -> None:  # noqa: F811
    """Before: with a PriorityClass of `preemptionPolicy: Never`, the Priority admission refused every pod the
    profile selected (403: the pod kept the default PreemptLowerPriority). Now the policy comes with the class."""
    from kubernetes import client

    scheduling = client.SchedulingV1Api(env.kube.api)
    never = env.kube.unique("batch-never")
    scheduling.create_priority_class({"metadata": {"name": never}, "value": -5, "preemptionPolicy": "Never"})
    env.kube.defer(lambda: scheduling.delete_priority_class(never))
    profile = _profile_offline(env, "spark8", priorityClassName=never)
    _wait_for(env, profile, "spark8")
    pod = env.pod("spark8", {"app": "spark8"})
    assert pod["spec"]["priorityClassName"] == never and pod["spec"]["priority"] == -5
    assert pod["spec"]["preemptionPolicy"] == "Never"
    # and a class with the default policy still works (the env's class, PreemptLowerPriority)
    profile2 = _profile_offline(env, "etl8", priorityClassName=env.priority_class)
    _wait_for(env, profile2, "etl8")
    pod2 = env.pod("etl8", {"app": "etl8"})
    assert pod2["spec"]["priority"] == -10 and pod2["spec"]["preemptionPolicy"] == "PreemptLowerPriority"


def test_item11_profile_labels_never_overwrite_the_pods_own(env: Env) -> None:  # noqa: F811
    """Before: a profile's `labels: {app: batch}` replaced the pod's `app: etl11`, the label its ReplicaSet selects
    on (the ReplicaSet releases the pod and makes another, in a loop). Now the pod's label is kept, the others
    are added."""
    profile = _profile_offline(env, "etl11", labels={"app": "batch", "tier": "offline"})
    _wait_for(env, profile, "etl11")
    pod = env.pod("etl11", {"app": "etl11", "pod-template-hash": "7d9f8"})
    assert pod["metadata"]["labels"] == {"app": "etl11", "pod-template-hash": "7d9f8", "tier": "offline"}
    assert pod["metadata"]["annotations"][ANN_PROFILE] == profile


def test_item12_a_namespace_read_by_get_is_kept(kube: KubeNamespace) -> None:
    """Before: a namespace the watch had not delivered yet was read by GET at every admission (5 pods, 5 GETs).
    Now it is read once and kept until the watch has it. The cache's watch is not started here: a watch that
    has not caught up, for as long as the test runs."""
    from scheduler_ext.webhook.server import ProfileCache

    kube.core.patch_namespace(kube.name, {"metadata": {"labels": {"team": "t12"}}})
    cache = ProfileCache(kube.api)
    calls: list[str] = []
    real_get = cache._get

    def counting(path: str) -> Any:
        calls.append(path)
        return real_get(path)

    cache._get = counting  # type: ignore[method-assign]
    for _ in range(5):
        labels = cache.namespace_labels(kube.name)
        assert labels is not None and labels.get("team") == "t12"
    assert calls == [f"/api/v1/namespaces/{kube.name}"], calls
    assert cache.namespace_labels("absent-" + kube.name) is None
    assert cache.namespace_labels("absent-" + kube.name) is None and len(calls) == 2
