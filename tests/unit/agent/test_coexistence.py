"""foreign_writers: other managers of Tidemark's Node keys, read from managedFields."""

from __future__ import annotations

from typing import Any

from agent.decide.coexistence import foreign_writers


def _entry(manager: str, fields: dict[str, Any], subresource: str = "") -> dict[str, Any]:
    e = {"manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        e["subresource"] = subresource
    return e


BATCH_STATUS = {
    "f:status": {
        "f:capacity": {"f:kubernetes.io/batch-cpu": {}},
        "f:allocatable": {"f:kubernetes.io/batch-cpu": {}, "f:kubernetes.io/batch-memory": {}},
    }
}
OVERSUB_ANN = {"f:metadata": {"f:annotations": {"f:volcano.sh/oversubscription-cpu": {}, "f:other": {}}}}
KUBELET = {"f:status": {"f:capacity": {"f:cpu": {}, "f:memory": {}}, "f:conditions": {}}}


def test_names_each_foreign_manager_and_its_keys() -> None:
    node = {
        "metadata": {
            "managedFields": [
                _entry("kubelet", KUBELET),
                _entry("tidemark-agent", BATCH_STATUS),
                _entry("volcano-agent", BATCH_STATUS),
                _entry("koordlet", OVERSUB_ANN),
            ]
        }
    }
    assert foreign_writers(node) == {
        "volcano-agent": ["kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"],
        "koordlet": ["volcano.sh/oversubscription-cpu"],
    }


def test_only_us_or_nothing() -> None:
    assert foreign_writers({"metadata": {"managedFields": [_entry("tidemark-agent", BATCH_STATUS)]}}) == {}
    assert foreign_writers({"metadata": {}}) == {}
    assert foreign_writers({}) == {}


def test_malformed_managed_fields_are_ignored() -> None:
    node = {
        "metadata": {
            "managedFields": [5, {"manager": 3}, {"manager": "x", "fieldsV1": "nope"}, _entry("y", {"f:status": []})]
        }
    }
    assert foreign_writers(node) == {}
    assert foreign_writers({"metadata": {"managedFields": "junk"}}) == {}
