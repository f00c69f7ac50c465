"""ClusterInfo: the snapshot a session opens on (Volcano's api/cluster_info.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo, NodeTable
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import JobID, QueueID


@dataclass(slots=True)
class ClusterInfo:
    """Everything one session sees; the session mutates it (this is Volcano's snapshot clone)."""

    table: NodeTable
    #: ready nodes, in the order the objects were given (Volcano's NodeList order)
    node_list: list[NodeInfo]
    nodes: dict[str, NodeInfo]
    jobs: dict[JobID, JobInfo]
    queues: dict[QueueID, QueueInfo]
    priority_classes: dict[str, int] = field(default_factory=dict)
    default_priority: int = 0
    pdbs: list[Mapping[str, Any]] = field(default_factory=list)
    #: pods of other schedulers (they still hold node resources)
    foreign_tasks: list[TaskInfo] = field(default_factory=list)
    #: nodes whose Ready condition is not True (not schedulable this session)
    not_ready_nodes: list[str] = field(default_factory=list)
    #: lines explaining defaults that were applied to malformed input
    warnings: list[str] = field(default_factory=list)
    now: float = 0.0
    scheduler_name: str = "volcano"
