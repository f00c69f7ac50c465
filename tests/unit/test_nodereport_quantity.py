"""A NodeReport's amounts are applied when the Node holds the same quantity, whatever its spelling.

The API server stores a quantity in its canonical form: the agent reports `kubernetes.io/batch-memory:
"1424896000"` and the Node reads back `1424896k`. Compared as strings, the report never looked applied: on
the production-shaped node (tests/integration/realnode_v2/, 4 GiB) the agent's every Node write waited 10 s
and failed ("still missing: kubernetes.io/batch-memory"), backed off 30 s, and evictions waited behind it."""

from __future__ import annotations

from tidemark.nodereport import node_changes


def node(cpu: str, memory: str) -> dict[str, object]:
    res = {"kubernetes.io/batch-cpu": cpu, "kubernetes.io/batch-memory": memory}
    return {"metadata": {"annotations": {}}, "status": {"capacity": dict(res), "allocatable": dict(res)}}


def test_a_canonicalised_amount_is_applied() -> None:
    spec = {"resources": {"kubernetes.io/batch-cpu": "780", "kubernetes.io/batch-memory": "1424896000"}}
    assert node_changes(spec, node("780", "1424896k")).status == {}
    assert node_changes({"resources": {"kubernetes.io/batch-memory": "1073741824"}}, node("1", "1Gi")).status == {}


def test_a_different_amount_is_written() -> None:
    spec = {"resources": {"kubernetes.io/batch-memory": "1424896001"}}
    changes = node_changes(spec, node("780", "1424896k"))
    assert changes.status == {
        "status": {
            "capacity": {"kubernetes.io/batch-memory": "1424896001"},
            "allocatable": {"kubernetes.io/batch-memory": "1424896001"},
        }
    }
