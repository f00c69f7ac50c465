"""Task status machine, predicate statuses, fit errors and plugin votes (Volcano's api/types.go)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, NewType

TaskID = NewType("TaskID", str)
JobID = NewType("JobID", str)
QueueID = NewType("QueueID", str)


class TaskStatus(IntEnum):
    """A task's place in the scheduling life cycle; bit values as Volcano's."""

    PENDING = 1 << 0
    ALLOCATED = 1 << 1
    PIPELINED = 1 << 2
    BINDING = 1 << 3
    BOUND = 1 << 4
    RUNNING = 1 << 5
    RELEASING = 1 << 6
    SUCCEEDED = 1 << 7
    FAILED = 1 << 8
    UNKNOWN = 1 << 9

    def __str__(self) -> str:
        return self.name.capitalize()


PENDING: Final = TaskStatus.PENDING
ALLOCATED: Final = TaskStatus.ALLOCATED
PIPELINED: Final = TaskStatus.PIPELINED
BINDING: Final = TaskStatus.BINDING
BOUND: Final = TaskStatus.BOUND
RUNNING: Final = TaskStatus.RUNNING
RELEASING: Final = TaskStatus.RELEASING
SUCCEEDED: Final = TaskStatus.SUCCEEDED
FAILED: Final = TaskStatus.FAILED
UNKNOWN: Final = TaskStatus.UNKNOWN

_ALLOCATED_SET: Final = frozenset({BOUND, BINDING, RUNNING, ALLOCATED})
_PREEMPTABLE_SET: Final = frozenset({BOUND, RUNNING})
_COMPLETED_SET: Final = frozenset({FAILED, SUCCEEDED})
_SCHEDULED_SET: Final = frozenset({RUNNING, BOUND, FAILED, SUCCEEDED})


def allocated_status(status: TaskStatus) -> bool:
    """Holds node resources in the session: Bound, Binding, Running, Allocated."""
    return status in _ALLOCATED_SET


def preemptable_status(status: TaskStatus) -> bool:
    return status in _PREEMPTABLE_SET


def completed_status(status: TaskStatus) -> bool:
    return status in _COMPLETED_SET


def scheduled_status(status: TaskStatus) -> bool:
    return status in _SCHEDULED_SET


class Vote(IntEnum):
    """A plugin's vote in job pipelined/enqueueable and victim selection (util.Permit/Abstain/Reject)."""

    REJECT = -1
    ABSTAIN = 0
    PERMIT = 1


PERMIT: Final = Vote.PERMIT
ABSTAIN: Final = Vote.ABSTAIN
REJECT: Final = Vote.REJECT


class StatusCode(IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5


@dataclass(frozen=True, slots=True)
class Status:
    """One predicate verdict: a code, a human reason (kube-scheduler's wording) and the plugin."""

    code: StatusCode
    reason: str
    plugin: str = ""


def should_abort(status: Status) -> bool:
    """Stop evaluating further filters on this node (util.ShouldAbort)."""
    return status.code in (
        StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
        StatusCode.ERROR,
        StatusCode.WAIT,
        StatusCode.SKIP,
    )


NODE_POD_NUMBER_EXCEEDED: Final = "node(s) pod number exceeded"
NODE_RESOURCE_FIT_FAILED: Final = "node(s) resource fit failed"
ALL_NODE_UNAVAILABLE_MSG: Final = "all nodes are unavailable"


def insufficient_resource_reason(names: list[str]) -> str:
    """Volcano's WrapInsufficientResourceReason: names only the first short resource."""
    return f"Insufficient {names[0]}" if names else ""


class FitError(Exception):
    """Why one task does not fit one node."""

    def __init__(self, task_ns: str, task_name: str, node_name: str, statuses: Iterable[Status]) -> None:
        self.task_namespace = task_ns
        self.task_name = task_name
        self.node_name = node_name
        self.statuses: tuple[Status, ...] = tuple(statuses)
        super().__init__(self.message())

    def reasons(self) -> list[str]:
        return [s.reason for s in self.statuses if s.reason]

    def message(self) -> str:
        return (
            f"task {self.task_namespace}/{self.task_name} on node {self.node_name} fit failed: "
            + ", ".join(self.reasons())
        )

    def contains(self, *codes: StatusCode) -> bool:
        return any(s.code in codes for s in self.statuses)


def as_fit_error(err: Exception, task_ns: str, task_name: str, node_name: str) -> FitError:
    if isinstance(err, FitError):
        return err
    return FitError(task_ns, task_name, node_name, [Status(StatusCode.ERROR, str(err))])


class FitErrors:
    """Per-task record of why nodes were rejected; nodes sharing the same verdict are grouped.

    Groups may hold node *indices* with the session's name list, resolved only when a message or a
    per-node view is asked for (thousands of failing nodes cost nothing until then).
    """

    __slots__ = ("_groups", "_lazy", "_nodes", "err", "hyper_node")

    def __init__(self) -> None:
        self._lazy: list[Callable[[], None]] = []
        self._nodes: dict[str, tuple[Status, ...]] = {}
        self._groups: list[tuple[Sequence[str] | tuple[Any, Sequence[str]], tuple[Status, ...]]] = []
        self.err = ""
        self.hyper_node = ""

    def set_error(self, err: str) -> None:
        self.err = err

    def set_node_error(self, node_name: str, err: Exception | tuple[Status, ...]) -> None:
        if isinstance(err, tuple):
            self._nodes[node_name] = err
        elif isinstance(err, FitError):
            self._nodes[node_name] = err.statuses
        else:
            self._nodes[node_name] = (Status(StatusCode.ERROR, str(err)),)

    def set_group_error(self, node_names: Sequence[str], statuses: tuple[Status, ...]) -> None:
        """Many nodes rejected for the same reasons."""
        if len(node_names):
            self._groups.append((node_names, statuses))

    def set_group_indices(self, indices: Any, names: Sequence[str], statuses: tuple[Status, ...]) -> None:
        """Like set_group_error with node indices into `names` (resolved lazily)."""
        if len(indices):
            self._groups.append(((indices, names), statuses))

    def add_lazy(self, fn: Callable[[FitErrors], None]) -> None:
        """Defer recording: `fn(self)` runs (once) when the errors are first looked at."""
        self._lazy.append(lambda: fn(self))

    def node_statuses(self) -> dict[str, tuple[Status, ...]]:
        while self._lazy:
            self._lazy.pop(0)()
        out: dict[str, tuple[Status, ...]] = {}
        for group, statuses in self._groups:
            if isinstance(group, tuple):
                idx, names = group
                for i in idx:
                    out[names[int(i)]] = statuses
            else:
                for n in group:
                    out[n] = statuses
        out.update(self._nodes)
        return out

    def __len__(self) -> int:
        return len(self.node_statuses())

    def unschedulable_and_unresolvable_nodes(self) -> set[str]:
        return {
            n
            for n, sts in self.node_statuses().items()
            if any(s.code == StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE for s in sts)
        }

    def histogram(self) -> dict[str, int]:
        """reason -> number of nodes, as kube-scheduler's "0/3 nodes are available" message counts."""
        counts: dict[str, int] = {}
        for sts in self.node_statuses().values():
            for s in sts:
                if s.reason:
                    counts[s.reason] = counts.get(s.reason, 0) + 1
        return counts

    def error(self) -> str:
        nodes = self.node_statuses()
        err = self.err or f"0/{len(nodes)} nodes are unavailable"
        if not nodes:
            return err
        hist = sorted(f"{v} {k}" for k, v in self.histogram().items())
        msg = f"{err}: {', '.join(hist)}."
        if self.hyper_node:
            msg = f"In hyperNode {self.hyper_node}: {msg}"
        return msg

    def __str__(self) -> str:
        return self.error()


@dataclass(frozen=True, slots=True)
class ValidateResult:
    """A JobValidFn verdict."""

    passed: bool
    reason: str = ""
    message: str = ""
