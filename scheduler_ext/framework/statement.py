"""Statement: a transaction of evict/pipeline/allocate operations on the session (Volcano's statement.go).

Operations change the session at once (job task status, node accounting, plugin event handlers);
`commit` makes them real (allocations become binds, evictions become evictions), `discard` rolls
them back in reverse order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import ALLOCATED, PENDING, PIPELINED, RELEASING, RUNNING

if TYPE_CHECKING:
    from scheduler_ext.framework.session import Session

log = logging.getLogger(__name__)


class OpKind(IntEnum):
    EVICT = 0
    PIPELINE = 1
    ALLOCATE = 2


@dataclass(frozen=True, slots=True)
class Operation:
    kind: OpKind
    task: TaskInfo
    reason: str = ""


class Statement:
    __slots__ = ("_ops", "ssn")

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._ops: list[Operation] = []

    def operations(self) -> list[Operation]:
        return list(self._ops)

    def has_evictions(self) -> bool:
        return any(op.kind == OpKind.EVICT for op in self._ops)

    # --- evict ---------------------------------------------------------------------------------
    def evict(self, reclaimee: TaskInfo, reason: str) -> None:
        """Mark the task Releasing now; the eviction happens on commit."""
        self.ssn.restatus_on_node(reclaimee, RELEASING)
        self.ssn.fire_deallocate(reclaimee)
        self._ops.append(Operation(OpKind.EVICT, reclaimee, reason))

    def _unevict(self, reclaimee: TaskInfo) -> None:
        self.ssn.restatus_on_node(reclaimee, RUNNING)
        self.ssn.fire_allocate(reclaimee)

    # --- pipeline ------------------------------------------------------------------------------
    def pipeline(self, task: TaskInfo, hostname: str, eviction_occurred: bool = False) -> None:
        """Reserve `hostname` for the task until releasing resources free up."""
        ssn = self.ssn
        job = ssn.jobs.get(task.job)
        errors: list[str] = []
        if job is not None:
            job.update_task_status(task, PIPELINED)
        else:
            errors.append(f"job {task.job} not found")
        task.node_name = hostname
        task.eviction_occurred = eviction_occurred
        node = ssn.nodes.get(hostname)
        if node is not None:
            try:
                node.add_task(task)
            except ValueError as e:
                errors.append(str(e))
        else:
            errors.append(f"node {hostname} not found")
        err = ssn.fire_allocate(task)
        if err is not None:
            errors.append(str(err))
        if errors:
            self._back_to_pending(task)
            raise ValueError(f"pipeline {task.key} to {hostname} rolled back: {'; '.join(errors)}")
        self._ops.append(Operation(OpKind.PIPELINE, task))

    def unpipeline(self, task: TaskInfo) -> None:
        self._back_to_pending(task)

    def _back_to_pending(self, task: TaskInfo) -> None:
        """Undo a pipeline or an allocation: Pending again, off its node."""
        ssn = self.ssn
        job = ssn.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, PENDING)
        node = ssn.nodes.get(task.node_name)
        if node is not None:
            node.remove_task(task)
        ssn.fire_deallocate(task)
        task.node_name = ""

    # --- allocate ------------------------------------------------------------------------------
    def allocate(self, task: TaskInfo, node: NodeInfo) -> None:
        """Place the task on the node in the session; it is bound on commit."""
        ssn = self.ssn
        errors: list[str] = []
        job = ssn.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, ALLOCATED)
        else:
            errors.append(f"job {task.job} not found")
        task.node_name = node.name
        try:
            node.add_task(task)
        except ValueError as e:
            errors.append(str(e))
        err = ssn.fire_allocate(task)
        if err is not None:
            errors.append(str(err))
        if errors:
            self._back_to_pending(task)
            raise ValueError(f"allocate {task.key} to {node.name} rolled back: {'; '.join(errors)}")
        self._ops.append(Operation(OpKind.ALLOCATE, task))

    # --- transaction -----------------------------------------------------------------------------
    def discard(self) -> None:
        """Roll every operation back, newest first."""
        for op in reversed(self._ops):
            op.task.generate_last_tx_context()
            if op.kind == OpKind.EVICT:
                self._unevict(op.task)
            elif op.kind == OpKind.PIPELINE:
                self._back_to_pending(op.task)
            else:
                self._back_to_pending(op.task)
        self._ops = []

    def commit(self) -> None:
        """Make the operations real: evictions are issued, allocations dispatched to bind."""
        for op in self._ops:
            op.task.clear_last_tx_context()
            if op.kind == OpKind.EVICT:
                self.ssn.record_eviction(op.task, op.reason)
            elif op.kind == OpKind.ALLOCATE:
                self.ssn.dispatch(op.task)
        self._ops = []

    def merge(self, *stmts: Statement) -> None:
        for s in stmts:
            self._ops.extend(s._ops)
            s._ops = []
