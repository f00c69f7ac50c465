"""Leader wiring of `run`: who may schedule and write.

Without `--leader-elect` this process always leads. With it, sessions run only while this replica
holds the Lease `--lock-name` (default `tidemark-scheduler`) in `--lock-object-namespace`
(tidemark.kube.leader does the election); `is_leader()` is also the executor's fence, checked before
every bind, eviction and status write, so a replica that lost the Lease issues nothing more, even
for work it queued before. Each new term (the start without election, every Lease won) is handed
to the loop once by `take_new_term()`, which then drops what the previous term assumed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from scheduler_ext.run.options import RunOptions
from tidemark.kube.leader import ApiLeaseLock, LeaderElector


class Leadership:
    """See the module docstring. `stopping()` true makes `is_leader()` false (shutdown)."""

    def __init__(
        self,
        api_client: Any,
        options: RunOptions,
        *,
        stopping: Callable[[], bool],
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self._stopping = stopping
        self._on_started = on_started
        self._new_term = threading.Event()
        self.elector: LeaderElector | None = None
        if options.leader_elect:
            self.elector = LeaderElector(
                ApiLeaseLock(api_client, options.lock_namespace, options.lock_name),
                identity=options.identity,
                config=options.leader_election,
                on_started_leading=self._started_leading,
                on_stopped_leading=on_stopped,
            )

    def start(self) -> None:
        if self.elector is not None:
            self.elector.start()
        else:
            self._new_term.set()

    def stop(self) -> None:
        """Release the Lease (is_leader() is false from here: nothing more is bound)."""
        if self.elector is not None:
            self.elector.stop()

    def is_leader(self) -> bool:
        if self._stopping():
            return False
        return self.elector.is_leader() if self.elector is not None else True

    def take_new_term(self) -> bool:
        """True once per new term."""
        if not self._new_term.is_set():
            return False
        self._new_term.clear()
        return True

    def _started_leading(self) -> None:
        self._new_term.set()
        self._on_started()
