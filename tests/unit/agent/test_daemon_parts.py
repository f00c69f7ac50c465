"""Pieces of the daemon on their own: the configuration source, the API job merge, the taint rebuild, the pod cache."""

from __future__ import annotations

import os
from pathlib import Path

from agent.daemon.apijobs import ApiJob, merge
from agent.daemon.configsource import ConfigSource
from agent.daemon.podcache import PodCache
from agent.daemon.wording import NodeEvent
from agent.decide.ops import EvictPod
from tests.unit.agent.daemon_helpers import pod_obj
from tidemark.apis import PodUID
from tidemark.nodereport import TAINT, ReportSpec, with_taint


def _configmap_swap(root: Path, version: int, text: str) -> None:
    """What kubelet does to a ConfigMap volume: a new timestamped dir, then `..data` swapped atomically."""
    target = root / f"..v{version}"
    target.mkdir()
    (target / "agent.yaml").write_text(text)
    tmp = root / "..data_tmp"
    os.symlink(target.name, tmp)
    os.replace(tmp, root / "..data")
    if not (root / "agent.yaml").is_symlink():
        os.symlink("..data/agent.yaml", root / "agent.yaml")


def test_config_source_follows_configmap_swaps_and_keeps_the_last_good(tmp_path: Path) -> None:
    _configmap_swap(tmp_path, 1, "eviction: {consecutive: 4}\n")
    source = ConfigSource(str(tmp_path / "agent.yaml"))
    assert source.load().accepted and source.resolve(None)[0].eviction.consecutive == 4
    assert source.poll() is None  # unchanged
    _configmap_swap(tmp_path, 2, "eviction: {consecutive: 5}\nbogus: 1\n")
    reload = source.poll()
    assert reload is not None and reload.accepted and [p.path for p in reload.problems] == ["bogus"]
    assert source.resolve(None)[0].eviction.consecutive == 5
    _configmap_swap(tmp_path, 3, "eviction: {consecutive: -1}\n")
    reload = source.poll()
    assert reload is not None and not reload.accepted and not source.ok
    assert "eviction.consecutive" in (source.last_rejection or "")
    assert source.resolve(None)[0].eviction.consecutive == 5  # the last good version stays
    _configmap_swap(tmp_path, 4, "eviction: {consecutive: -1}\n")
    assert source.poll() is None  # the same bad content: reported once
    _configmap_swap(tmp_path, 5, "eviction: {consecutive: 5}\nbogus: 1\n")
    reload = source.poll()
    assert reload is not None and reload.accepted and source.ok


def test_api_jobs_merge_newest_key_wins_and_keep_the_earliest_trigger() -> None:
    ev = EvictPod(PodUID("u"), "ns", "p", "CPUHighWatermark")
    old = ApiJob(
        report=ReportSpec({"a": "1", "volcano.sh/offline-job-evicting": "true"}, {"x": "1"}, True),
        evictions=(ev,),
        trigger=10.0,
        node_events=(NodeEvent("Warning", "EvictingStarted", "m"),),
    )
    new = ApiJob(report=ReportSpec({"a": "2"}), trigger=12.0)
    job = merge(old, new)
    assert job.report == ReportSpec({"a": "2", "volcano.sh/offline-job-evicting": "true"}, {"x": "1"}, True)
    assert job.evictions == () and job.trigger == 10.0 and job.node_events == old.node_events
    assert job.report.marks_evicting() is True and ReportSpec({"a": "2"}).marks_evicting() is None
    assert ReportSpec({"volcano.sh/offline-job-evicting": None}).marks_evicting() is False
    assert merge(ApiJob(report=ReportSpec(evicting_taint=True)), ApiJob(report=ReportSpec({"a": "1"}))).report == (
        ReportSpec({"a": "1"}, {}, True)  # a taint intent not written yet survives a newer job without one
    )


def test_the_taint_is_added_and_removed_without_touching_others() -> None:
    other = {"key": "example.com/x", "effect": "NoExecute"}
    assert with_taint([other], True) == [other, dict(TAINT)]
    assert with_taint([other, dict(TAINT)], True) is None
    assert with_taint([other, dict(TAINT)], False) == [other]


def test_pod_cache_parses_once_per_resource_version_and_skips_finished_pods() -> None:
    cache = PodCache()
    a, b = pod_obj("u1", "a", qos="BE"), pod_obj("u2", "b")
    done = pod_obj("u3", "c")
    done["status"]["phase"] = "Succeeded"
    update = cache.update([a, b, done], 0.0)
    assert update.parsed == 2 and update.added == {"u1", "u2"} and len(update.views) == 2
    again = cache.update([a, b], 0.0)
    assert again.parsed == 0 and again.views is update.views
    a2 = pod_obj("u1", "a", qos="garbage", rv=2)
    changed = cache.update([a2], 0.0)
    assert changed.changed == {"u1"} and changed.removed == {"u2"}
    assert [v.qos_level for v in changed.views] == [-1]  # first seen offline: stays offline
    assert [n.reason for n in changed.notices] == ["QosLevelChangeIgnored", "InvalidQosLevel"]


def test_schedule_is_drift_free_and_wakes_for_the_nearest_duty() -> None:
    from agent.daemon.timing import Duty, Schedule

    def row(name: str, period: float, first: float = 0.0) -> Duty:
        return Duty(name, "", lambda _now: None, every=lambda: period, first=first)

    s = Schedule(100.0, (row("sample", 1.0), row("decide", 1.0), row("qos", 10.0), row("config", 2.0, 2.0)))
    assert s.due("sample", 100.0) and not s.due("config", 101.0) and s.delay(100.0) == 0.0
    for name, period in (("sample", 1.0), ("decide", 1.0), ("qos", 10.0)):
        s.advance(name, 100.0, period)
    assert s.delay(100.0) == 1.0 and s.delay(100.0, 0.25) == 0.25 and s.delay(100.0, -3.0) == 0.0
    s.advance("sample", 101.4, 1.0)  # on time: the grid holds
    assert not s.due("sample", 101.9) and s.due("sample", 102.0)
    s.advance("sample", 107.5, 1.0)  # fell behind: a period from now
    assert not s.due("sample", 108.4) and s.due("sample", 108.5)
    s.advance("decide", 110.0, 30.0)
    s.advance("qos", 110.0, 10.0)
    s.reconfigured(110.0, {"sample": 0.5, "decide": 0.2, "qos": 10.0})  # shorter periods take effect at once
    assert s.due("decide", 110.2) and s.due("sample", 110.5) and not s.due("qos", 119.9) and s.due("qos", 120.0)


def test_capacity_published_is_an_event_only_when_offline_capacity_opens_or_closes() -> None:
    """Every publication moved values on a fleet: an Event each was the agent's most frequent write."""
    from types import SimpleNamespace

    from agent.daemon.apijobs import capacity_opened_or_closed

    def amounts(cpu: int | None, memory: int | None) -> SimpleNamespace:
        values = {"cpu": cpu, "memory": memory}
        return SimpleNamespace(get=values.get)

    def case(old: tuple[int | None, int | None], new: tuple[int, int], bound: tuple[int, int] = (0, 0)) -> bool:
        node = SimpleNamespace(published_x=amounts(0, 0), published_batch=amounts(*old))
        plan = SimpleNamespace(capacity=SimpleNamespace(published_x=amounts(0, 0), published_batch=amounts(*new),
                                                        batch_bound=amounts(*bound)))
        return capacity_opened_or_closed(plan, node)  # type: ignore[arg-type]

    assert case((None, None), (500, 2**30))  # the first publication
    assert case((0, 2**30), (500, 2**30))  # CPU opens
    assert case((500, 2**30), (0, 2**30))  # CPU closes
    assert not case((500, 2**30), (900, 2**29))  # moved, still open
    assert not case((0, 0), (0, 0))
    # held at the bound pods' 200m (kubelet's re-admission floor): the room is what opens and closes
    assert case((500, 2**30), (200, 2**30), bound=(200, 0))  # closes: no room over the bound pods
    assert case((200, 2**30), (500, 2**30), bound=(200, 0))  # opens
    assert not case((200, 2**30), (200, 2**30), bound=(200, 0))
