"""The SIGTERM check that tells an uninstall (restore every knob) from an update or a drain (keep them).

The API answers are scripted through the check's `get` hook (the real API server: tests/integration/agent_live/
test_live_resilience.py; a real uninstall with `kubectl delete -k`: the realnode_v2 lane
test_v2node_unit.py). `kubectl delete -k` (and `-f install.yaml`) of the install deletes the namespace, the
ServiceAccount and the RBAC before the DaemonSet (kustomize's order), so a stopping agent is refused its own
pod (403, 401), or stopped by the namespace's deletion while its DaemonSet is still there; the check before
this one kept every knob in both cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agent.daemon.runner import uninstall_check
from tidemark.kube.client import ApiStatusError, TransportError

ENV = {"POD_NAME": "agent-x", "POD_NAMESPACE": "tidemark-system"}
OWNER = {"kind": "DaemonSet", "name": "tidemark-agent", "uid": "ds-1"}


def pod(generation: str | None = "3") -> dict[str, Any]:
    labels = {"pod-template-generation": generation} if generation else {}
    return {"metadata": {"name": "agent-x", "ownerReferences": [OWNER], "labels": labels}}


def ds(generation: int = 3, uid: str = "ds-1", deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "tidemark-agent", "uid": uid, "generation": generation}
    if deleting:
        md["deletionTimestamp"] = "2026-11-28T05:00:00Z"
    return {"metadata": md}


def scripted(*answers: tuple[Any, Any]) -> tuple[Callable[[str], Any], list[str]]:
    """`get` answering each (pod, daemonset) pair in turn (the last one repeats); an exception is raised."""
    calls: list[str] = []
    seq: Iterator[tuple[Any, Any]] = iter(answers)
    current: list[tuple[Any, Any]] = [answers[0]]

    def get(path: str) -> Any:
        calls.append(path)
        if "/pods/" in path:
            current[0] = next(seq, current[0])
        answer = current[0][0] if "/pods/" in path else current[0][1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return get, calls


def check(get: Callable[[str], Any], wait: float = 10.0) -> tuple[bool, float]:
    clock = [0.0]

    def sleep(s: float) -> None:
        clock[0] += s

    verdict = uninstall_check(None, ENV, get=get, wait=wait, sleep=sleep, clock=lambda: clock[0])()
    return verdict, clock[0]


def test_the_daemonset_gone_or_being_deleted_is_an_uninstall() -> None:
    assert check(scripted((pod(), ApiStatusError(404, "not found")))[0]) == (True, 0.0)
    assert check(scripted((pod(), ds(deleting=True)))[0]) == (True, 0.0)
    assert check(scripted((pod(), ds(uid="ds-2")))[0]) == (True, 0.0)


def test_refused_credentials_are_an_uninstall() -> None:
    """kubectl delete -k removed the ServiceAccount (401) or the ClusterRoleBinding (403) first."""
    assert check(scripted((ApiStatusError(403, "forbidden"), None))[0]) == (True, 0.0)
    assert check(scripted((ApiStatusError(401, "unauthorized"), None))[0]) == (True, 0.0)
    assert check(scripted((pod(), ApiStatusError(403, "forbidden")))[0]) == (True, 0.0)


def test_a_rollout_of_a_newer_template_keeps_the_knobs_at_once() -> None:
    verdict, waited = check(scripted((pod("3"), ds(generation=4)))[0])
    assert (verdict, waited) == (False, 0.0)


def test_the_same_template_looks_again_until_the_uninstall_shows() -> None:
    """The namespace's deletion reached the pod before kubectl deleted the DaemonSet: a few seconds later it is gone."""
    get, calls = scripted((pod(), ds()), (pod(), ds()), (pod(), ApiStatusError(404, "not found")))
    verdict, waited = check(get)
    assert (verdict, waited) == (True, 2.0)
    assert len(calls) == 6


def test_a_drain_keeps_the_knobs_after_the_wait() -> None:
    verdict, waited = check(scripted((pod(), ds()))[0], wait=10.0)
    assert verdict is False and 10.0 <= waited <= 11.0


def test_no_answer_keeps_the_knobs_after_the_wait() -> None:
    verdict, waited = check(scripted((TransportError("refused"), None))[0])
    assert verdict is False and 10.0 <= waited <= 11.0
    verdict, waited = check(scripted((pod(), ApiStatusError(500, "boom")))[0])
    assert verdict is False and 10.0 <= waited <= 11.0


def test_an_api_server_slow_to_answer_during_the_uninstall_is_asked_again() -> None:
    """A timeout or a 429/5xx from the API server the uninstall itself is loading is no answer: the check asks
    again within its wait (the v2 lane's uninstall of 2026-11-30 kept every knob)."""
    get, _ = scripted(
        (TransportError("read timed out"), None),
        (ApiStatusError(429, "too many"), None),
        (pod(), ApiStatusError(503, "unavailable")),
        (pod(), ApiStatusError(404, "not found")),
    )
    assert check(get) == (True, 3.0)


def test_a_refusal_other_than_the_credentials_keeps_the_knobs_at_once() -> None:
    assert check(scripted((ApiStatusError(400, "bad request"), None))[0]) == (False, 0.0)


def test_outside_a_pod_the_environment_decides() -> None:
    assert uninstall_check(None, {"TIDEMARK_RESTORE_ON_EXIT": "true"})() is True
    assert uninstall_check(None, {})() is False
