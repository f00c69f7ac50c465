"""conformance: never evict critical pods (system-*-critical classes, kube-system) (Volcano's conformance.go)."""

from __future__ import annotations

from typing import Final

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PERMIT
from scheduler_ext.framework.interface import Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session

CRITICAL_CLASSES: Final = frozenset({"system-cluster-critical", "system-node-critical"})
NAMESPACE_SYSTEM: Final = "kube-system"


def evictable(evictees: list[TaskInfo]) -> list[TaskInfo]:
    return [
        t
        for t in evictees
        if (t.pod.get("spec") or {}).get("priorityClassName") not in CRITICAL_CLASSES
        and t.namespace != NAMESPACE_SYSTEM
    ]


class ConformancePlugin(Plugin):
    name = "conformance"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        def fn(_evictor: TaskInfo, evictees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            return evictable(evictees), PERMIT

        ssn.add_preemptable_fn(self.name, fn)
        ssn.add_reclaimable_fn(self.name, fn)
        ssn.add_unified_evictable_fn(self.name, lambda _ctx, cands: (evictable(cands), PERMIT))


SPEC = PluginSpec(name="conformance", build=ConformancePlugin, doc="Protect critical pods from eviction.")
