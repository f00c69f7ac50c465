"""Issue 33 item 2 (rules only; the same on the real API server in
tests/integration/scheduler/test_admission_hardening3_api.py): every member of the agents' group is an agent.

Before: only `tidemark:agent:<node>` users of the group were judged as agents; a member named otherwise (a
certificate `CN=node-a, O=tidemark:agents`) held the agent ClusterRole and passed every agent rule untouched:
it wrote any node's NodeReport and evicted any pod.
"""

from __future__ import annotations

import pytest

from scheduler_ext.webhook import admission as adm
from tests.unit.scheduler.test_webhook_admission import FakeLookups, report

SETTINGS = adm.Settings()


@pytest.mark.parametrize("username", ["node-a", "system:node:node-a", "admin", "tidemark:agentnode-a",
                                      "system:serviceaccount:batch"])
def test_a_group_member_with_another_name_is_refused_as_an_agent_that_names_no_node(username: str) -> None:
    user = {"username": username, "groups": ["tidemark:agents", "system:authenticated"]}
    assert adm.agent_identity(user, SETTINGS)
    for name in ("node-a", "node-b"):
        v = adm.validate(report(name, user=user), FakeLookups(), SETTINGS)
        assert not v.allowed and v.code == 403 and "names no node" in v.message, v
    # evictions: the agents' group holds no eviction right since the controller evicts for agents (no hook judges
    # pods/eviction; tests/integration/scheduler/test_agent_rights_api.py: 403 by RBAC)


def test_outside_the_group_a_user_is_still_left_to_rbac() -> None:
    user = {"username": "node-a", "groups": ["system:authenticated"]}
    assert not adm.agent_identity(user, SETTINGS)
    assert adm.validate(report("node-b", user=user), FakeLookups(), SETTINGS).allowed
