"""What the daemon's other threads hand the main loop, each hand-over waking it.

The reflectors report changed pods, the pressure sensor its triggers, the API worker the results of its
writes. They never touch the loop's state: they put their news here, under one lock, and set `woken`; the
loop (`agent.daemon.cycle`) takes the news at its next step.
"""

from __future__ import annotations

import threading

from agent.daemon.apiworker import Report
from agent.sense.pressure import PressureEvent
from tidemark.apis import PodUID


class Inbox:
    def __init__(self) -> None:
        #: set by every hand-over (and `wake`); the loop waits on it between steps
        self.woken = threading.Event()
        self._lock = threading.Lock()
        self._pods: set[PodUID] = set()
        #: every knob to read again (the first step, a knob changed behind the agent's back)
        self._all = True
        self._pressure: list[PressureEvent] = []
        self._reports: list[Report] = []

    def wake(self) -> None:
        self.woken.set()

    # --- the other threads --------------------------------------------------------------------------------

    def pod_changed(self, uid: PodUID) -> None:
        with self._lock:
            self._pods.add(uid)
        self.woken.set()

    def pressure(self, event: PressureEvent) -> None:
        """The pressure sensor's thread: a trigger fired; the loop samples and decides at once."""
        with self._lock:
            self._pressure.append(event)
        self.woken.set()

    def report(self, report: Report) -> None:
        """The API worker's thread: a Node write or an eviction finished."""
        with self._lock:
            self._reports.append(report)
        self.woken.set()

    # --- the main loop ------------------------------------------------------------------------------------

    def pods_added(self, uids: set[PodUID] | frozenset[PodUID]) -> None:
        """Pods the loop itself found new (its next knob read, in the same step, takes them)."""
        with self._lock:
            self._pods |= uids

    def all_changed(self) -> None:
        with self._lock:
            self._all = True

    def pods_pending(self) -> bool:
        with self._lock:
            return self._all or bool(self._pods)

    def take_pods(self) -> tuple[set[PodUID], bool]:
        """The pods changed since the last take, and whether every pod is to be read again."""
        with self._lock:
            pods, every = self._pods, self._all
            self._pods, self._all = set(), False
        return pods, every

    def take_pressure(self) -> list[PressureEvent]:
        with self._lock:
            events, self._pressure = self._pressure, []
        return events

    def take_reports(self) -> list[Report]:
        with self._lock:
            reports, self._reports = self._reports, []
        return reports
