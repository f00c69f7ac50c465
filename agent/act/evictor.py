"""Evictions through the Eviction API (policy/v1 or v1beta1, discovered), outcomes as values.

`KubeEvictor` wraps `tidemark.kube.eviction.Evictor` (version discovery, UID precondition) and maps its
results to `EvictResult`, which the daemon acts on without importing the Kubernetes client:
- `evicted`: the pod is terminating now (it counts as released for its grace period + slack);
- `blocked`: HTTP 429, a PodDisruptionBudget (or API throttling) refused it: the daemon passes it over
  for `eviction.refused_retry` seconds and the victim order moves on to the next pod;
- `gone`: 404 or a UID mismatch: the pod we meant is already gone;
- `error`: anything else; `transport` says no HTTP answer came (an outage: back off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agent.decide.ops import EvictPod

Outcome = Literal["evicted", "blocked", "gone", "error"]


@dataclass(frozen=True, slots=True)
class EvictResult:
    outcome: Outcome
    message: str = ""
    status: int | None = None
    retry_after: float | None = None
    transport: bool = False
    #: the pod's eviction Event is written already (by the NodeReport controller that evicted it)
    recorded: bool = False


class KubeEvictor:
    """Evicts with the pod's UID as a precondition, so a namesake pod is never evicted by mistake."""

    def __init__(self, api_client: Any) -> None:
        from tidemark.kube.eviction import Evictor

        self._evictor = Evictor(api_client)

    def evict(self, op: EvictPod) -> EvictResult:
        from tidemark.kube.eviction import EvictionOutcome

        r = self._evictor.evict(op.namespace, op.name, grace_period_seconds=op.grace_seconds, uid=op.uid or None)
        if r.outcome is EvictionOutcome.EVICTED:
            return EvictResult("evicted", r.message, r.status)
        if r.outcome is EvictionOutcome.BLOCKED:
            return EvictResult("blocked", r.message, r.status, r.retry_after)
        if r.outcome is EvictionOutcome.NOT_FOUND:
            return EvictResult("gone", r.message, r.status)
        return EvictResult("error", r.message, r.status, transport=r.status is None)
