"""One grammar for the NodeReport values, and values bounded by the node (issue 33, items 15, 4 and 10).

Item 15: the gate (`tidemark.nodereport.spec_problems`, which the webhook and the controller run) let through
values every reader then refused and took as 0: `²` and `١٢٣` (`str.isdigit` takes them), a 32-digit X, a
batch-memory beyond 8 TiB (the scheduler reads extended resources in milli-units). Now whatever the gate
accepts, the agent's reader (`agent.sense.snapshot.node_view`) and the scheduler's (`node_oversubscription`,
the snapshot's Node rows) read as the same amount, and what it refuses they refuse too.
Item 4: X and batch-* are bounded by the Node's capacity: the webhook refuses beyond it naming the bound, the
controller and the scheduler's snapshot (so `simulate`) lower them to it.
Item 10: a report owned by another Node uid, or older than its Node, is a dead Node's.
The cases run on the real API server are in tests/integration/scheduler/test_nodereport_bounds_api.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.sense.snapshot import node_view
from scheduler_ext.model.snapshot import _parse_node
from tests.fuzz.corpus import NODEREPORT_VALUES
from tidemark.apis import node_oversubscription
from tidemark.nodereport import spec_problems

X_KEYS = {"cpu": "volcano.sh/oversubscription-cpu", "memory": "volcano.sh/oversubscription-memory"}
BATCH_KEYS = {"cpu": "kubernetes.io/batch-cpu", "memory": "kubernetes.io/batch-memory"}
#: a node large enough that no value of the corpus is beyond its capacity (item 15 is about the grammar alone)
HUGE_NODE = {"cpu": "9000000000", "memory": "8Pi", "pods": "110"}


def _node(annotations: dict[str, str], batch: dict[str, str], capacity: dict[str, str] | None = None) -> Any:
    cap = {**(capacity or HUGE_NODE), **batch}
    return {"metadata": {"name": "n1", "labels": {"volcano.sh/oversubscription": "true"}, "annotations": annotations},
            "status": {"capacity": dict(cap), "allocatable": dict(cap)}}  # fmt: skip


@pytest.mark.parametrize("tag", sorted(NODEREPORT_VALUES))
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_x_the_gate_and_every_reader_agree(tag: str, resource: str) -> None:
    value = NODEREPORT_VALUES[tag]
    key = X_KEYS[resource]
    gate_ok = not spec_problems({"annotations": {key: value}})
    node = _node({key: value}, {})
    agent = node_view(node).published_x[resource]  # type: ignore[index]
    scheduler, _ = node_oversubscription(node)
    if gate_ok:
        assert agent is not None and agent == scheduler[resource] == int(value), (tag, agent, scheduler)
    else:
        assert agent is None and scheduler[resource] == 0, (tag, agent, scheduler)


@pytest.mark.parametrize("tag", sorted(NODEREPORT_VALUES))
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_batch_the_gate_and_every_reader_agree(tag: str, resource: str) -> None:
    value = NODEREPORT_VALUES[tag]
    key = BATCH_KEYS[resource]
    gate_ok = not spec_problems({"resources": {key: value}})
    node = _node({}, {key: value})
    agent = node_view(node).published_batch[resource]  # type: ignore[index]
    try:
        alloc = _parse_node(node)[0]
        scheduler: float | None = (alloc.scalar_resources or {}).get(key, 0.0)
    except Exception:  # the old reader refused the whole Node (SnapshotError)
        scheduler = None
    if gate_ok:
        assert agent is not None and scheduler == agent * 1000, (tag, agent, scheduler)
    else:
        assert agent is None and not scheduler, (tag, agent, scheduler)


def test_the_item15_values_are_refused_by_the_gate() -> None:
    for value in ("\u00b2", "\u0661\u0662\u0663", "9" * 32):
        assert spec_problems({"annotations": {X_KEYS["cpu"]: value}}), value
    # the scheduler reads batch-* in milli-units: 2^53 // 1000 bytes (8.19 TiB) is the most it reads
    assert spec_problems({"resources": {BATCH_KEYS["memory"]: str(2**53 // 1000 + 1)}})
    assert spec_problems({"resources": {BATCH_KEYS["memory"]: "9Ti"}})
    assert not spec_problems({"resources": {BATCH_KEYS["memory"]: str(8 * 2**40)}})


# --- item 4: bounded by the node ---------------------------------------------------------------------------

SMALL = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def test_the_gate_names_the_node_bound() -> None:
    from tidemark.nodereport import bound_problems

    node = _node({}, {}, SMALL)
    spec = {"annotations": {X_KEYS["cpu"]: "9000000000000000"}, "resources": {BATCH_KEYS["memory"]: "8796093022208"}}
    problems = bound_problems(spec, node)
    assert len(problems) == 2
    assert "at most 4000 (milli-cores" in problems[0] and "capacity cpu" in problems[0]
    assert "at most 8589934592 (bytes" in problems[1]
    assert bound_problems({"annotations": {X_KEYS["cpu"]: "4000"}, "resources": {BATCH_KEYS["cpu"]: "4000"}},
                          node) == []  # fmt: skip


def test_the_controller_clamps_to_the_bound() -> None:
    from tidemark.nodereport import clamped

    node = _node({}, {}, SMALL)
    spec = {"annotations": {X_KEYS["cpu"]: "9000000000000000", X_KEYS["memory"]: "5"},
            "resources": {BATCH_KEYS["cpu"]: "9000000"}, "evictingTaint": False}  # fmt: skip
    assert clamped(spec, node) == {"annotations": {X_KEYS["cpu"]: "4000", X_KEYS["memory"]: "5"},
                                   "resources": {BATCH_KEYS["cpu"]: "4000"}, "evictingTaint": False}  # fmt: skip


def test_simulate_reads_a_node_no_larger_than_it_is() -> None:
    """Before: a node publishing 9e12 cores (X and batch-cpu) was read as such and drew 54 of 60 offline pods in
    `simulate`; now the snapshot reads at most its capacity."""
    node = _node({X_KEYS["cpu"]: "9000000000000000"}, {BATCH_KEYS["cpu"]: "9000000000000"}, SMALL)
    alloc, cap, x, warnings, *_ = _parse_node(node)
    assert x["cpu"] == 4000
    assert (alloc.scalar_resources or {})[BATCH_KEYS["cpu"]] == 4000 * 1000
    assert (cap.scalar_resources or {})[BATCH_KEYS["cpu"]] == 4000 * 1000
    assert any("more than the node has" in w for w in warnings)


# --- item 10: a dead Node's report ---------------------------------------------------------------------------


def test_a_report_of_another_node_uid_is_stale() -> None:
    from tidemark.nodereport import owner_reference, report_is_stale, withdrawal

    old = {"metadata": {"name": "n1", "uid": "u-old", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    new = {"metadata": {"name": "n1", "uid": "u-new", "creationTimestamp": "2026-01-02T00:00:00Z"},
           "status": {"capacity": {BATCH_KEYS["cpu"]: "5"}}}  # fmt: skip
    report = {"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:01:00Z",
                           "ownerReferences": [owner_reference(old)]}}  # fmt: skip
    assert not report_is_stale(report, old)
    assert report_is_stale(report, new)
    ownerless = {"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:01:00Z"}}
    assert report_is_stale(ownerless, new) and not report_is_stale(ownerless, old)
    assert withdrawal(new).status == {"status": {"capacity": {BATCH_KEYS["cpu"]: None}}}
