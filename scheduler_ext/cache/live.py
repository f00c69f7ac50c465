"""The live cluster for `run`: the watch, the assumed decisions and the snapshot builder, wired together.

Three parts, one job each (docs/design.md, "The live cache and the kept model"):

- `watch` (scheduler_ext/cache/watch.py): reflectors keep the stores of Nodes, Pods, PodGroups,
  Queues, PriorityClasses and PDBs, and wake the scheduler on changes worth an early session;
- `decisions` (scheduler_ext/cache/assumed.py): binds, evictions and PodGroup phases issued but not
  yet seen by the watch, overlaid on every snapshot so no pod is placed twice;
- `builder` (scheduler_ext/cache/builder.py): one session's ClusterInfo from the stores, parsing
  only changed pods and updating the last session's model (scheduler_ext/model/incremental.py).

The watch's pod map and the decisions share one lock: a pod seen bound and its assumed bind dropped
are one step for the snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from scheduler_ext.cache.assumed import AssumedDecisions
from scheduler_ext.cache.builder import LiveSnapshot, SnapshotBuilder
from scheduler_ext.cache.watch import SCHEDULER_BACKOFF, ClusterWatch
from tidemark.kube.reflector import BackoffPolicy


class LiveCache:
    """The three parts of the live cache; `snapshot(now)` builds one session's ClusterInfo.

    `on_wake(reason)` is called (from a reflector thread) on changes worth an early session;
    `on_skipped(object, why)` once per object version left out of scheduling.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        scheduler_name: str,
        on_wake: Callable[[str], None] | None = None,
        backoff: BackoffPolicy = SCHEDULER_BACKOFF,
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
        on_skipped: Callable[[Mapping[str, Any], str], None] | None = None,
    ) -> None:
        lock = threading.Lock()
        self.decisions = AssumedDecisions(lock, clock)
        self.watch = ClusterWatch(
            api_client, scheduler_name=scheduler_name, lock=lock, on_pod_stored=self.decisions.observe,
            on_wake=on_wake, backoff=backoff, watch_timeout=watch_timeout,
        )
        self.builder = SnapshotBuilder(self.watch, self.decisions, on_skipped=on_skipped)
        #: the watch's reflectors by store name ("nodes", "pods", ...)
        self.reflectors = self.watch.reflectors

    def start(self) -> LiveCache:
        self.watch.start()
        return self

    def stop(self) -> None:
        self.watch.stop()

    def synced(self) -> bool:
        """Every watch cache holds its first full list (and PDB discovery is done)."""
        return self.watch.synced()

    def last_contact(self) -> float | None:
        """Monotonic time any watch last heard from the server."""
        return self.watch.last_contact()

    def snapshot(self, now: float) -> LiveSnapshot:
        """The ClusterInfo for one session (wall-clock `now`), with assumed decisions overlaid."""
        return self.builder.build(now)

    def clear_assumptions(self) -> None:
        """Forget everything assumed (e.g. on a new term as leader: the watch caches are the truth)."""
        self.decisions.clear()

    def note_podgroup_phases(self, phases: Mapping[str, tuple[str, str]]) -> None:
        """PodGroup `ns/name` -> (resourceVersion read, phase decided): holds until the object changes."""
        self.decisions.note_podgroup_phases(phases)
