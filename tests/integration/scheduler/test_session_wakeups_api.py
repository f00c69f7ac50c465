"""Early wake-ups against a real API server: a session serves the wake-ups asked for before it.

Pending pods that exist when the scheduler starts each ask for an early session from the first list
(the "new pending pod" wake-up); the first session sees them all. Leaving that wake-up set ran a
second, empty session in the middle of the first one's binds (docs/benchmarks-e2e.md, run H).
The loop is driven here by hand (`_tick`), so nothing depends on timing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from scheduler_ext.run import RunOptions, Scheduler
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    CONF,
    USER,
    create_node,
    create_pod,
    node_of,
    scheduler_name,
    wait_for,
)
from tidemark.kube.client import ApiStatusError, new_api_client, request_json
from tidemark.kube.resources import QUEUES

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _ensure_default_queue(admin: Any) -> None:
    """Created by the executor when missing: its ADDED event would be a (legitimate) new wake-up."""
    body = {"apiVersion": QUEUES.api_version, "kind": "Queue", "metadata": {"name": "default"},
            "spec": {"weight": 1, "reclaimable": True}}
    try:
        request_json(admin, "POST", QUEUES.collection_path(), body=body)
    except ApiStatusError as exc:
        if exc.status != 409:
            raise


def test_a_session_serves_the_wake_ups_asked_for_before_it(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    _ensure_default_queue(admin)
    create_node(admin, kube, cpu="4")
    name = scheduler_name(kube)
    for i in range(3):
        create_pod(admin, kube, f"early-{i}", name, cpu="1")
    conf_path = tmp_path / "volcano-scheduler.conf"
    conf_path.write_text(CONF)
    opts = RunOptions(scheduler_conf=str(conf_path), scheduler_name=name, schedule_period=3600.0,
                      listen_address="127.0.0.1:0", lock_namespace=kube.name)
    api = new_api_client(str(kube.server.kubeconfig_path(USER)), pool_size=16)
    sched = Scheduler(opts, api_client=api, registry=CollectorRegistry())
    try:
        # start()'s pieces without the loop thread: this test is the loop
        sched.conf_reload.load()
        sched.cache.start()
        sched.recorder.start()
        sched.leadership.start()
        wait_for(lambda: len([k for k in sched.cache.watch.pods if k.startswith(f"{kube.name}/early-")]) == 3,
                 "the three pending pods in the cache")
        wait_for(sched.cache.synced, "caches synced")
        assert sched._wake.is_set(), "pending pods from the first list ask for an early session"
        assert sched._tick(), "a session ran"
        assert not sched._wake.is_set(), "the session served the wake-ups asked for before its snapshot"
        bound = wait_for(lambda: (m := node_of(admin, kube.name)) and all(m.values()) and m, "the pods bound")
        assert len(bound) == 3
        # a change after the session still asks for the next one
        create_pod(admin, kube, "late", name, cpu="1")
        wait_for(sched._wake.is_set, "a new pending pod wakes the loop")
    finally:
        sched.stop()
        api.close()


def test_a_periodic_session_waits_for_the_binds_in_flight(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    """The hold (`_hold_for_binds`): it returns once the binds are done, at its limit, or at an early wake-up."""
    kube = skube
    _ensure_default_queue(admin)
    create_node(admin, kube, cpu="8")
    name = scheduler_name(kube)
    for i in range(6):
        create_pod(admin, kube, f"held-{i}", name, cpu="1")
    conf_path = tmp_path / "volcano-scheduler.conf"
    conf_path.write_text(CONF)
    opts = RunOptions(scheduler_conf=str(conf_path), scheduler_name=name, schedule_period=3600.0,
                      listen_address="127.0.0.1:0", lock_namespace=kube.name)
    api = new_api_client(str(kube.server.kubeconfig_path(USER)), pool_size=16)
    sched = Scheduler(opts, api_client=api, registry=CollectorRegistry())
    try:
        sched.conf_reload.load()
        sched.cache.start()
        sched.recorder.start()
        sched.leadership.start()
        wait_for(lambda: len([k for k in sched.cache.watch.pods if k.startswith(f"{kube.name}/held-")]) == 6,
                 "the six pending pods in the cache")
        wait_for(sched.cache.synced, "caches synced")
        # Binds that cannot finish: the binder's answers are held back until the hold has been tested.
        gate = threading.Event()
        done = sched.executor._async_bind_done

        def late_done(op: Any, result: Any) -> None:
            gate.wait(30)
            done(op, result)

        sched.executor._async_bind_done = late_done  # type: ignore[method-assign]
        assert sched._tick(), "a session ran"
        assert sched.executor.binds_in_flight == 6
        sched._wake.clear()
        t0 = sched._clock()
        sched._hold_for_binds(t0 + 0.3)  # the limit ends it: the binds are still in flight
        assert sched._clock() - t0 >= 0.3 and sched.executor.binds_in_flight > 0
        sched._wake.set()  # an early wake-up ends it at once
        t1 = sched._clock()
        sched._hold_for_binds(t1 + 60)
        assert sched._clock() - t1 < 30
        sched._wake.clear()
        threading.Timer(0.2, gate.set).start()
        t2 = sched._clock()
        sched._hold_for_binds(t2 + 60)  # the binds finishing end it
        assert sched.executor.binds_in_flight == 0 and sched._clock() - t2 < 30
        bound = wait_for(lambda: (m := node_of(admin, kube.name)) and all(m.values()) and m, "the pods bound")
        assert len(bound) == 6
    finally:
        gate.set()
        sched.stop()
        api.close()
