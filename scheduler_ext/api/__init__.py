"""Scheduler data model: Resource, TaskInfo, JobInfo, NodeInfo/NodeTable, QueueInfo, ClusterInfo."""

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.job import JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo, NodeTable
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import INFINITY, ZERO, DimensionDefault, Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import (
    FitError,
    FitErrors,
    JobID,
    QueueID,
    Status,
    StatusCode,
    TaskID,
    TaskStatus,
    ValidateResult,
    Vote,
)

__all__ = [
    "INFINITY",
    "ZERO",
    "ClusterInfo",
    "DimensionDefault",
    "FitError",
    "FitErrors",
    "JobID",
    "JobInfo",
    "NodeInfo",
    "NodeTable",
    "PodGroup",
    "QueueID",
    "QueueInfo",
    "Resource",
    "Status",
    "StatusCode",
    "TaskID",
    "TaskInfo",
    "TaskStatus",
    "ValidateResult",
    "Vote",
]
