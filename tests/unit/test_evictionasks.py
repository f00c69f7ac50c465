"""Eviction asks (tidemark/evictionasks.py): the agent asks in its NodeReport, the controller judges and answers.

The pure parts: the bounds the webhook and the controller check, which asks are pending, how outcomes are pruned,
what the controller refuses to evict, and how the agent reads an answer (agent/act/report_evictor.py). The
controller's evictions on the real kube-apiserver are tests/integration/scheduler/test_eviction_asks_api.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.act.report_evictor import result_of
from tidemark.evictionasks import (
    ASK_FIELDS,
    DENIED,
    EVICTED,
    EVICTING,
    MAX_ASKS,
    NOT_FOUND,
    REFUSED,
    Ask,
    asks_of,
    asks_problems,
    judge,
    merged,
    outcome,
    pending,
)
from tidemark.nodereport import spec_problems


def ask(uid: str = "u1", at: str = "2026-11-29T10:00:00.000001Z", **kw: Any) -> dict[str, Any]:
    raw = {"uid": uid, "namespace": "batch", "name": f"job-{uid}", "reason": "CPUHighWatermark",
           "message": "cpu 93% over 90%", "askedAt": at}  # fmt: skip
    raw.update(kw)
    return raw


def pod(uid: str = "u1", node: str = "node-a", qos: str | None = "BE", **md: Any) -> dict[str, Any]:
    ann = {"volcano.sh/qos-level": qos} if qos is not None else {}
    return {"metadata": {"name": f"job-{uid}", "namespace": "batch", "uid": uid, "annotations": ann, **md},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]}}  # fmt: skip


def test_a_report_may_carry_bounded_asks() -> None:
    assert spec_problems({"evictions": [ask("u1"), ask("u2", gracePeriodSeconds=0)]}) == []
    assert spec_problems({"evictions": []}) == []
    too_many = [ask(f"u{i}") for i in range(MAX_ASKS + 1)]
    assert spec_problems({"evictions": too_many}) == [f"spec.evictions has {MAX_ASKS + 1} asks (at most {MAX_ASKS})"]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"evictions": {"uid": "u1"}}, "must be a list"),
        ({"evictions": [ask(reason="not a reason")]}, "no Event reason"),
        ({"evictions": [ask(reason="Cpu\n")]}, "no Event reason"),
        ({"evictions": [ask(namespace="Batch")]}, "namespace"),
        ({"evictions": [ask(name="a/b")]}, "name"),
        ({"evictions": [ask(uid="")]}, "uid must be a non-empty string"),
        ({"evictions": [ask(uid="u" * 65)]}, "uid is 65 characters long"),
        ({"evictions": [ask(message="m" * 1025)]}, "message must be a string"),
        ({"evictions": [ask(gracePeriodSeconds=-1)]}, "gracePeriodSeconds"),
        ({"evictions": [ask(gracePeriodSeconds=True)]}, "gracePeriodSeconds"),
        ({"evictions": [ask(node="node-b")]}, "'node' is not a field"),
        ({"evictions": [ask("u1"), ask("u1", at="later")]}, "names a pod twice"),
    ],
)
def test_malformed_asks_are_refused(bad: dict[str, Any], words: str) -> None:
    problems = spec_problems(bad)
    assert problems and any(words in p for p in problems), problems


def test_pending_asks_and_pruned_outcomes() -> None:
    a1, a2 = Ask.from_json(ask("u1")), Ask.from_json(ask("u2"))
    done = outcome(a1, EVICTED, "", "t")
    assert pending([a1, a2], [done]) == [a2]
    # the same pod asked again later is a new ask (a refused pod, retried after eviction.refused_retry)
    again = Ask.from_json(ask("u1", at="2026-11-29T10:00:30.000001Z"))
    assert pending([again], [done]) == [again]
    # a claim (Evicting) is an answer in progress: nobody else evicts it
    assert pending([a2], [outcome(a2, EVICTING, "", "t")]) == []
    # outcomes live as long as their ask: the newest decision's asks replace the old ones, and their outcomes go
    assert merged([a2], [done], [outcome(a2, REFUSED, "pdb", "t")]) == [outcome(a2, REFUSED, "pdb", "t")]
    assert merged([a1, a2], [done], []) == [done]
    assert asks_of({"evictions": [ask("u1"), "junk"]}) == [a1]


def test_the_controller_evicts_only_offline_pods_bound_to_the_reports_node() -> None:
    a = Ask.from_json(ask("u1"))
    assert judge(a, pod("u1"), "node-a") is None
    assert judge(a, pod("u1", qos="-3"), "node-a") is None
    assert judge(a, pod("u1", node="node-b"), "node-a") == (
        DENIED, "the agent of node node-a may not evict pod batch/job-u1 (on node node-b)")
    assert judge(a, pod("u1", node=""), "node-a")[0] == DENIED  # type: ignore[index]
    for online in ("LC", "LS", "0", None, "BE\nx"):
        verdict = judge(a, pod("u1", qos=online), "node-a")
        assert verdict is not None and verdict[0] == DENIED and "not offline" in verdict[1], online
    ds = pod("u1", ownerReferences=[{"kind": "DaemonSet", "name": "d", "controller": True, "apiVersion": "apps/v1"}])
    assert judge(a, ds, "node-a") == (DENIED, "pod batch/job-u1 is owned by a DaemonSet: never evicted for an agent")
    assert judge(a, None, "node-a")[0] == NOT_FOUND  # type: ignore[index]
    assert judge(a, pod("u2"), "node-a")[0] == NOT_FOUND  # type: ignore[index]  # a namesake: another uid


def test_the_agent_reads_each_answer_as_the_eviction_apis() -> None:
    assert result_of({"outcome": EVICTED}).outcome == "evicted"
    assert result_of({"outcome": EVICTED}).recorded  # the controller wrote the pod's Event
    refused = result_of({"outcome": REFUSED, "message": "would violate the pod's disruption budget"})
    assert refused.outcome == "blocked" and refused.status == 429 and "disruption budget" in refused.message
    assert result_of({"outcome": NOT_FOUND}).outcome == "gone"
    denied = result_of({"outcome": DENIED, "message": "not offline"})
    assert denied.outcome == "blocked" and "denied" in denied.message  # the next victim goes at once
    failed = result_of({"outcome": "Failed", "message": "boom"})
    assert failed.outcome == "error" and not failed.transport


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_field = st.sampled_from(sorted(ASK_FIELDS))


@given(st.lists(st.dictionaries(_field, _json, max_size=8) | _json, max_size=5))
def test_any_json_is_judged_never_raised_and_an_accepted_ask_round_trips(raw: Any) -> None:
    """The gate takes whatever a writer sends (the webhook and the controller run it on every report): a list of
    problems, never an exception; and an ask it accepts is read back as it was written."""
    problems = asks_problems(raw)
    assert isinstance(problems, list)
    if not problems and isinstance(raw, list):
        for a in raw:
            assert Ask.from_json(a).to_json() == {"message": "", **a}


_valid_ask = st.fixed_dictionaries(
    {"uid": st.uuids().map(str), "namespace": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
     "name": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,5})?", fullmatch=True),
     "reason": st.from_regex(r"[A-Z][A-Za-z0-9]{0,30}", fullmatch=True), "askedAt": st.text(min_size=1, max_size=40)},
    optional={"message": st.text(max_size=50), "gracePeriodSeconds": st.integers(0, 86400)})  # fmt: skip


@given(st.lists(_valid_ask, max_size=MAX_ASKS, unique_by=lambda a: a["uid"]))
def test_well_formed_asks_pass_and_read_back_as_written(asks: list[dict[str, Any]]) -> None:
    assert asks_problems(asks) == []
    assert [a.to_json() for a in asks_of({"evictions": asks})] == [{"message": "", **a} for a in asks]
