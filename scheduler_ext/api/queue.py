"""QueueInfo (Volcano's api/queue_info.go) with the Queue spec fields plugins read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scheduler_ext.api.resource import Resource
from scheduler_ext.api.types import QueueID
from tidemark.apis import short_repr

QUEUE_OPEN: Final = "Open"
QUEUE_CLOSED: Final = "Closed"
QUEUE_CLOSING: Final = "Closing"
HIERARCHY_ANNOTATION: Final = "volcano.sh/hierarchy"
HIERARCHY_WEIGHT_ANNOTATION: Final = "volcano.sh/hierarchy-weights"


#: Volcano's admission webhook sets an unset (zero) weight to 1; its scheduler then never sees 0
DEFAULT_QUEUE_WEIGHT: Final = 1
_MAX_WEIGHT: Final = 2**31 - 1  # spec.weight is an int32


def queue_weight(raw: object, problems: list[str] | None = None) -> int:
    """spec.weight as Volcano's webhook leaves it: unset -> 1; anything not an int32 >= 0 -> 1 with a problem.

    An explicit 0 is kept (Volcano's scheduler reads it as written; its webhook would have made it 1),
    with a problem saying the queue gets no share.
    """
    if raw is None:
        return DEFAULT_QUEUE_WEIGHT
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= _MAX_WEIGHT:
        if raw == 0 and problems is not None:
            problems.append("spec.weight=0 gives the queue no share (Volcano's webhook would make it 1)")
        return raw
    if problems is not None:
        problems.append(f"spec.weight={short_repr(raw)} is not an integer in 0..{_MAX_WEIGHT}; using 1")
    return DEFAULT_QUEUE_WEIGHT


class QueueInfo:
    """A Queue; `state` is Open when the object's status.state is empty (the queue controller's default)."""

    __slots__ = (
        "annotations",
        "capability",
        "capability_raw",
        "creation",
        "deserved",
        "deserved_raw",
        "guarantee",
        "guarantee_raw",
        "hierarchy",
        "implicit",
        "name",
        "obj",
        "parent",
        "priority",
        "reclaimable",
        "state",
        "uid",
        "weight",
        "weights",
    )

    def __init__(
        self,
        obj: Mapping[str, Any],
        *,
        creation: float = 0.0,
        implicit: bool = False,
        problems: list[str] | None = None,
    ) -> None:
        md = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.obj = obj
        self.name: str = str(md.get("name") or "")
        self.uid = QueueID(self.name)
        self.annotations: Mapping[str, Any] = md.get("annotations") or {}
        self.weight: int = queue_weight(spec.get("weight"), problems)
        self.hierarchy: str = str(self.annotations.get(HIERARCHY_ANNOTATION, ""))
        self.weights: str = str(self.annotations.get(HIERARCHY_WEIGHT_ANNOTATION, ""))
        self.capability_raw: Mapping[str, Any] = spec.get("capability") or {}
        self.deserved_raw: Mapping[str, Any] = spec.get("deserved") or {}
        guarantee = spec.get("guarantee") or {}
        self.guarantee_raw: Mapping[str, Any] = (
            (guarantee.get("resource") or {}) if isinstance(guarantee, Mapping) else {}
        )
        self.capability = Resource.from_resource_list(self.capability_raw)
        self.deserved = Resource.from_resource_list(self.deserved_raw)
        self.guarantee = Resource.from_resource_list(self.guarantee_raw)
        self.parent: str = str(spec.get("parent") or "")
        p = spec.get("priority")
        self.priority: int = int(p) if isinstance(p, int) and not isinstance(p, bool) else 0
        rec = spec.get("reclaimable")
        self.reclaimable: bool = True if rec is None else bool(rec)
        self.state: str = str(status.get("state") or QUEUE_OPEN)
        self.creation = creation
        self.implicit = implicit

    def __repr__(self) -> str:
        return f"Queue({self.name}, weight {self.weight}, state {self.state})"

    def is_open(self) -> bool:
        return self.state == QUEUE_OPEN
