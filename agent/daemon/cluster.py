"""Where the daemon reads its Node and Pods from: the API (two reflectors) or memory (tests, benchmarks).

`KubeCluster` watches the agent's own Node (`fieldSelector=metadata.name=N`) and the Pods bound to it
(`fieldSelector=spec.nodeName=N`) with `tidemark.kube.reflector.Reflector`: list, then watch from the list's
resourceVersion, resume after a dropped watch, relist on 410, back off on errors, forever. Every change
calls the listener (the daemon wakes up for a QoS reconcile of what changed). The stores keep the last
known objects through an API outage, so local enforcement goes on with them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

JSON = dict[str, Any]
#: listener(kind, old, new): kind is "node" or "pods"; old/new as the reflector's change callback
Listener = Callable[[str, JSON | None, JSON | None], None]


class ClusterSource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def set_listener(self, listener: Listener) -> None: ...

    def node(self) -> JSON | None: ...

    def pods(self) -> list[JSON]: ...

    def generation(self) -> tuple[int, int]: ...

    def synced(self) -> bool: ...

    def last_contact(self) -> float | None:
        """Monotonic time of the last answer from the API (None: never)."""
        ...

    def describe(self) -> str: ...


class KubeCluster:
    """The Node and its Pods from the API server (see the module docstring)."""

    def __init__(self, api_client: Any, node_name: str, *, watch_timeout: int = 60) -> None:
        from tidemark.kube.reflector import Reflector
        from tidemark.kube.resources import NODES, PODS

        self.node_name = node_name
        self._listener: Listener | None = None
        self._node = Reflector.for_resource(
            api_client,
            NODES,
            field_selector=f"metadata.name={node_name}",
            on_change=lambda _t, old, new: self._changed("node", old, new),
            timeout_seconds=watch_timeout,
        )
        self._pods = Reflector.for_resource(
            api_client,
            PODS,
            field_selector=f"spec.nodeName={node_name}",
            on_change=lambda _t, old, new: self._changed("pods", old, new),
            timeout_seconds=watch_timeout,
        )

    def _changed(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        if self._listener is not None:
            self._listener(kind, old, new)

    def set_listener(self, listener: Listener) -> None:
        self._listener = listener

    def start(self) -> None:
        self._node.start()
        self._pods.start()

    def stop(self) -> None:
        self._node.stop()
        self._pods.stop()

    def node(self) -> JSON | None:
        return self._node.store.get(self.node_name)

    def pods(self) -> list[JSON]:
        return self._pods.store.list()

    def generation(self) -> tuple[int, int]:
        return self._node.store.generation, self._pods.store.generation

    def synced(self) -> bool:
        return self._node.has_synced() and self._pods.has_synced()

    def last_contact(self) -> float | None:
        times = [t for t in (self._node.last_contact(), self._pods.last_contact()) if t is not None]
        return max(times) if times else None

    def wait_for_sync(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return self._node.wait_for_sync(max(0.0, timeout)) and self._pods.wait_for_sync(
            max(0.0, deadline - time.monotonic())
        )

    def describe(self) -> str:
        return f"node {self.node_name}: lists {self._node.lists + self._pods.lists}, errors {self.errors}"

    @property
    def errors(self) -> int:
        return self._node.errors + self._pods.errors


class StaticCluster:
    """An in-memory Node and Pods (benchmarks, tests): `set_node`, `put_pod`, `delete_pod` notify the listener."""

    def __init__(
        self,
        node: JSON | None = None,
        pods: list[JSON] | None = None,
        *,
        synced: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._node = node
        self._pods: dict[str, JSON] = {}
        self._gen = [0, 0]
        self._synced = synced
        self._listener: Listener | None = None
        #: False simulates an API outage: last_contact() stays where it was
        self.live = True
        self.contact: float | None = clock()
        for p in pods or []:
            self._pods[self._key(p)] = p

    @staticmethod
    def _key(pod: JSON) -> str:
        md = pod.get("metadata") or {}
        return f"{md.get('namespace', 'default')}/{md.get('name', '')}"

    def set_listener(self, listener: Listener) -> None:
        self._listener = listener

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def node(self) -> JSON | None:
        with self._lock:
            return self._node

    def pods(self) -> list[JSON]:
        with self._lock:
            return list(self._pods.values())

    def generation(self) -> tuple[int, int]:
        with self._lock:
            return self._gen[0], self._gen[1]

    def synced(self) -> bool:
        return self._synced

    def last_contact(self) -> float | None:
        if self.live:
            self.contact = self._clock()
        return self.contact

    def describe(self) -> str:
        return "in-memory cluster"

    def set_node(self, node: JSON) -> None:
        with self._lock:
            old, self._node = self._node, node
            self._gen[0] += 1
        if self._listener is not None:
            self._listener("node", old, node)

    def put_pod(self, pod: JSON) -> None:
        with self._lock:
            old = self._pods.get(self._key(pod))
            self._pods[self._key(pod)] = pod
            self._gen[1] += 1
        if self._listener is not None:
            self._listener("pods", old, pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            old = self._pods.pop(f"{namespace}/{name}", None)
            self._gen[1] += 1
        if self._listener is not None and old is not None:
            self._listener("pods", old, None)
