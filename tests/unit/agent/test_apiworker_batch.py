"""The API worker with an evictor that takes one decision's victims at once (agent/act/report_evictor.py, the
NodeReport asks): one call per job, the answers handled as the Eviction API's, and the controller's pod Events not
written twice. The evictor here is a scripted stand-in for the outcomes (the real one against the real API server
and controller: tests/integration/scheduler/test_eviction_asks_api.py and tests/integration/agent_live/)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.act.evictor import EvictResult
from agent.daemon.apijobs import ApiJob
from agent.daemon.apiworker import ApiWorker, Report
from agent.daemon.metrics import Stats
from agent.decide.ops import EvictPod
from agent.model import PodUID


class BatchEvictor:
    def __init__(self, *answers: list[EvictResult]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def evict(self, op: EvictPod) -> EvictResult:
        raise AssertionError("a batch evictor is asked once per job, never per pod")

    def evict_many(self, ops: Sequence[EvictPod]) -> list[EvictResult]:
        self.calls.append([op.name for op in ops])
        return self.answers.pop(0)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.seen.append((str((obj.get("metadata") or {}).get("name") or obj.get("name")), reason))


def _op(name: str) -> EvictPod:
    return EvictPod(PodUID(f"u-{name}"), "batch", name, "CPUHighWatermark", detail=f"{name} uses 2 cores")


def _worker(evictor: BatchEvictor, events: Events, reports: list[Report]) -> ApiWorker:
    clock = iter(float(t) for t in range(1000))
    return ApiWorker(None, evictor, events, reports.append, Stats(), threaded=False, wall=lambda: 100.0,
                     monotonic=lambda: next(clock), backoff_initial=0.0)  # fmt: skip


def test_one_ask_for_all_victims_and_the_answers_as_the_eviction_apis() -> None:
    evictor = BatchEvictor([EvictResult("evicted", recorded=True), EvictResult("blocked", "budget", 429),
                            EvictResult("evicted", recorded=True)])  # fmt: skip
    events, reports = Events(), []
    worker = _worker(evictor, events, reports)
    worker.submit(ApiJob(evictions=(_op("a"), _op("b"), _op("c")), node_marked=True, trigger=99.5,
                         node_ref={"kind": "Node", "metadata": {"name": "n1"}}))  # fmt: skip
    assert evictor.calls == [["a", "b", "c"]]
    assert [(r.eviction.name, r.result.outcome) for r in reports if r.eviction and r.result] == [
        ("a", "evicted"), ("b", "blocked"), ("c", "evicted")]
    # the controller wrote the evicted pods' Events: the agent writes the refusal's and the Node's summary only
    assert events.seen == [("b", "EvictionBlocked"), ("n1", "EvictedOfflinePods")]
    assert worker.stats.reaction["evict"].count == 2


def test_no_answer_backs_off_and_asks_again_for_the_rest() -> None:
    late = EvictResult("error", "no answer", transport=True)
    evictor = BatchEvictor([late, late], [EvictResult("evicted", recorded=True)] * 2)
    events, reports = Events(), []
    worker = _worker(evictor, events, reports)
    worker.submit(ApiJob(evictions=(_op("a"), _op("b")), node_marked=True, node_ref={"name": "n1"}))
    assert worker.backing_off() and evictor.calls == [["a", "b"]]
    assert worker.flush(1.0)
    assert evictor.calls == [["a", "b"], ["a", "b"]] and not worker.backing_off()
