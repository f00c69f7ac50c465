"""Two leader electors on one real Lease (short timings): one leads; the other takes over, never overlapping.

The partitioned leader is cut off for real: its client is pointed at a closed port, so its
renewals fail with connection refused while the rival still reaches the server. A sampler thread
reads both `is_leader()` every millisecond or so and records any moment both said yes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import closed_port, token_api, wait_for
from tidemark.kube.client import request_json
from tidemark.kube.leader import ApiLeaseLock, LeaderElectionConfig, LeaderElector
from tidemark.kube.resources import LEASES

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CFG = LeaderElectionConfig(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)


class Sampler:
    """Watches a set of electors; `overlaps` counts samples where more than one claimed leadership."""

    def __init__(self, electors: list[LeaderElector]) -> None:
        self.electors = electors
        self.overlaps = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if sum(e.is_leader() for e in self.electors) > 1:
                self.overlaps += 1
            self.samples += 1
            time.sleep(0.001)

    def leaders(self) -> list[str]:
        return [e.identity for e in self.electors if e.is_leader()]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def make(api: Any, kube: KubeNamespace, identity: str, log: list[str]) -> LeaderElector:
    return LeaderElector(
        ApiLeaseLock(api, kube.name, "tidemark-scheduler"),
        identity=identity,
        config=CFG,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
    )


def lease(api: Any, kube: KubeNamespace) -> dict[str, Any]:
    spec: dict[str, Any] = request_json(api, "GET", LEASES.object_path("tidemark-scheduler", kube.name))["spec"]
    return spec


def test_one_leads_and_the_other_takes_over_from_a_partitioned_leader(kube: KubeNamespace) -> None:
    log: list[str] = []
    api_a, api_b = token_api(kube), token_api(kube)
    a, b = make(api_a, kube, "a", log), make(api_b, kube, "b", log)
    sampler = Sampler([a, b])
    a.start()
    b.start()
    try:
        wait_for(lambda: len(sampler.leaders()) == 1, "one leader", timeout=5)
        first = a if a.is_leader() else b
        second = b if first is a else a
        assert lease(api_a, kube)["holderIdentity"] == first.identity
        renewals: list[str] = []

        def renewed_three_times() -> bool:
            t = lease(api_a, kube)["renewTime"]
            if not renewals or renewals[-1] != t:
                renewals.append(t)
            return len(renewals) > 3

        wait_for(renewed_three_times, "three renewals", timeout=5)
        assert first.is_leader() and not second.is_leader()  # the follower stayed a follower

        first.lock.api_client.configuration.host = f"https://127.0.0.1:{closed_port()}"  # type: ignore[attr-defined]
        cut = time.monotonic()
        wait_for(
            lambda: not first.is_leader(), "the partitioned leader to fence itself", timeout=CFG.renew_deadline + 1
        )
        fenced = time.monotonic() - cut
        wait_for(second.is_leader, "the follower to take over", timeout=CFG.lease_duration + 2)
        took_over = time.monotonic() - cut
        assert fenced <= CFG.renew_deadline + 0.1
        assert took_over <= CFG.lease_duration + CFG.retry_period * 2.2 + 0.5
        spec = lease(api_b if second is b else api_a, kube)
        assert spec["holderIdentity"] == second.identity and spec["leaseTransitions"] == 1
        assert sampler.overlaps == 0 and sampler.samples > 1000
        assert log == [f"{first.identity} started", f"{first.identity} stopped", f"{second.identity} started"]
    finally:
        sampler.stop()
        a.stop(release=False)
        b.stop(release=False)


def test_a_clean_stop_hands_over_at_once(kube: KubeNamespace) -> None:
    log: list[str] = []
    api = token_api(kube)
    a = make(api, kube, "a", log).start()
    wait_for(a.is_leader, "a to lead", timeout=5)
    b = make(token_api(kube), kube, "b", log).start()
    sampler = Sampler([a, b])
    try:
        wait_for(lambda: b.leader_identity() == "a", "b to observe a's lease", timeout=5)
        assert not b.is_leader()
        stopped = time.monotonic()
        a.stop()  # releases the lease: b need not wait out the 2 s lease
        assert not a.is_leader()
        wait_for(b.is_leader, "b to take over", timeout=CFG.lease_duration)
        assert time.monotonic() - stopped < CFG.lease_duration - 0.5
        assert sampler.overlaps == 0
        assert log == ["a started", "a stopped", "b started"]
    finally:
        sampler.stop()
        a.stop()
        b.stop()
