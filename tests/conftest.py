"""Shared fixtures for every test directory: fake and real cgroup v1 trees (tests/fixtures/cgroups.py),
a node in network namespaces (tests/fixtures/netns.py), a real kube-apiserver + etcd
(tests/fixtures/kubeapi.py), and real cgroup v2 trees with the lane that runs `cgroup_v2` tests in one
VM on a v1 host (tests/fixtures/cgroup_v2.py, tests/fixtures/vm.py)."""

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

pytest_plugins = [
    "tests.fixtures.cgroups",
    "tests.fixtures.kubeapi",
    "tests.fixtures.netns",
    "tests.fixtures.vm",
    "tests.fixtures.cgroup_v2",
    "tests.fixtures.realnode",
    "tests.fixtures.v2node",
]

# Property tests check correctness, not speed: a loaded 2-core CI machine must not fail them on
# hypothesis' 200 ms deadline. Under CI the examples are derandomised so a run is reproducible.
settings.register_profile("tidemark", deadline=None, print_blob=True)
settings.register_profile("tidemark-ci", deadline=None, print_blob=True, derandomize=True)
settings.load_profile("tidemark-ci" if os.environ.get("CI") == "true" else "tidemark")


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """A command run in-process (`main([...])`) configures the root logger for its own stderr, as a
    command should; pytest closes that stream after the test. Put the root logger back, so no later
    test logs into a closed stream ("--- Logging error ---")."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
