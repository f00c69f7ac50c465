"""Test doubles for the Kubernetes I/O layer's pure parts: a manual clock and a scripted list/watch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tidemark.kube.reflector import ListResult


class ManualClock:
    """Monotonic time that moves only when told to (or when `wait` is called)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, seconds: float) -> bool:
        """A reflector/elector `wait`: records the delay, advances time, never reports a stop."""
        self.waits.append(seconds)
        self.now += seconds
        return False


def pod(name: str, rv: str, namespace: str = "ns", **labels: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "uid": f"uid-{name}",
            "labels": labels,
        },
    }


class ScriptedStream:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for e in self.events:
            if isinstance(e, BaseException):
                raise e
            yield e

    def close(self) -> None:
        self.closed = True


class ScriptedListerWatcher:
    """Plays a script: each list()/watch() call takes the next step (a result or an exception).

    `on_exhausted` runs when the script ends (tests stop the reflector there).
    """

    description = "scripted"

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = list(lists)
        self.watches = list(watches)
        self.list_calls = 0
        self.watch_calls: list[str] = []
        self.on_exhausted: Any = None

    def _exhausted(self) -> None:
        if self.on_exhausted is not None:
            self.on_exhausted()
        raise RuntimeError("script exhausted")

    def list(self) -> ListResult:
        self.list_calls += 1
        if not self.lists:
            self._exhausted()
        step = self.lists.pop(0)
        if isinstance(step, BaseException):
            raise step
        assert isinstance(step, ListResult)
        return step

    def watch(self, resource_version: str, timeout_seconds: int) -> ScriptedStream:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self._exhausted()
        step = self.watches.pop(0)
        if isinstance(step, BaseException):
            raise step
        return ScriptedStream(step)
