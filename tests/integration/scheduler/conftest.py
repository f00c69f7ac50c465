"""Fixtures of the scheduler's real-apiserver tests (the API server itself: tests/fixtures/kubeapi.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import admin_api, apply_rbac


@pytest.fixture
def skube(kube: KubeNamespace) -> Iterator[KubeNamespace]:
    """The test namespace, with user tidemark-scheduler bound to exactly daemonset/scheduler/rbac.yaml's rules
    (the leader-election Role in this namespace, the lock namespace of the tests)."""
    api = admin_api(kube)
    apply_rbac(api, [kube.name])
    api.close()
    yield kube


@pytest.fixture
def admin(kube: KubeNamespace) -> Iterator[Any]:
    """A Tidemark (raw JSON) client as admin, for the test's own objects."""
    api = admin_api(kube)
    yield api
    api.close()
