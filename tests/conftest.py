"""Shared fixtures for every test directory: fake and real cgroup trees (tests/fixtures/cgroups.py)
and a real kube-apiserver + etcd (tests/fixtures/kubeapi.py)."""

import importlib.util

pytest_plugins = [m for m in ("tests.fixtures.cgroups", "tests.fixtures.kubeapi") if importlib.util.find_spec(m)]
