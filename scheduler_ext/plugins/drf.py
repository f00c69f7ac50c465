"""drf: Dominant Resource Fairness between jobs (Volcano's drf.go).

A job's share is its largest allocated/total ratio over the cluster's resource dimensions; jobs with
smaller shares go first, and a preemptor may take from jobs whose share after the preemption would
still be at least its own. With `enableHierarchy`, queues form a tree from their
`volcano.sh/hierarchy` ("root/eng/dev") and `volcano.sh/hierarchy-weights` ("1/2/8") annotations;
queues are ordered by weighted dominant share walking down the tree (saturated subtrees last) and
reclaim follows the same comparison (Volcano's hierarchical DRF).
"""

from __future__ import annotations

import logging
from typing import Final

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import Resource, share
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PERMIT, allocated_status
from scheduler_ext.framework.interface import Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import Event, EventHandler

log = logging.getLogger(__name__)
SHARE_DELTA: Final = 0.000001


class HNode:
    """A node of the hierarchical DRF tree: a queue path element, or a job (leaf)."""

    __slots__ = ("attr", "children", "hierarchy", "parent", "request", "saturated", "weight")

    def __init__(self, hierarchy: str, weight: float, attr: DrfAttr, request: Resource, leaf: bool) -> None:
        self.hierarchy = hierarchy
        self.weight = weight
        self.attr = attr
        self.request = request
        self.saturated = False
        self.parent: HNode | None = None
        self.children: dict[str, HNode] | None = None if leaf else {}

    def clone(self, parent: HNode | None = None) -> HNode:
        attr = DrfAttr()
        attr.share, attr.dominant_resource, attr.allocated = (
            self.attr.share,
            self.attr.dominant_resource,
            self.attr.allocated.clone(),
        )
        n = HNode(self.hierarchy, self.weight, attr, self.request.clone(), self.children is None)
        n.saturated = self.saturated
        n.parent = parent
        if self.children is not None:
            assert n.children is not None
            for k, c in self.children.items():
                n.children[k] = c.clone(n)
        return n


def resource_saturated(allocated: Resource, request: Resource, demanding: set[str]) -> bool:
    for rn in allocated.resource_names():
        a, r = allocated.get(rn), request.get(rn)
        if a != 0 and r != 0 and a >= r:
            return True
        if rn not in demanding and r != 0:
            return True
    return False


class DrfAttr:
    __slots__ = ("allocated", "dominant_resource", "share")

    def __init__(self) -> None:
        self.share = 0.0
        self.dominant_resource = ""
        self.allocated = Resource()


def calculate_share(allocated: Resource, total: Resource) -> tuple[str, float]:
    res = 0.0
    dominant = ""
    for rn in total.resource_names():
        s = share(allocated.get(rn), total.get(rn))
        if s > res:
            res = s
            dominant = rn
    return dominant, res


class DrfPlugin(Plugin):
    name = "drf"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.total_resource = Resource()
        self.total_allocated = Resource()
        self.job_attrs: dict[str, DrfAttr] = {}
        self.root = HNode("root", 1.0, DrfAttr(), Resource(), leaf=False)

    # --- hierarchy ---------------------------------------------------------------------------------
    def _build(self, root: HNode, job: JobInfo, attr: DrfAttr, hierarchy: str, weights: str) -> None:
        inode = root
        paths = hierarchy.split("/")
        ws = weights.split("/")
        for i in range(1, len(paths)):
            assert inode.children is not None
            child = inode.children.get(paths[i])
            if child is None:
                try:
                    w = float(ws[i]) if i < len(ws) else 0.0
                except ValueError:
                    w = 0.0
                child = HNode(paths[i], max(w, 1.0), DrfAttr(), Resource(), leaf=False)
                child.parent = inode
                inode.children[paths[i]] = child
            inode = child
        assert inode.children is not None
        leaf = HNode(job.uid, 1.0, attr, job.total_request.clone(), leaf=True)
        leaf.parent = inode
        inode.children[job.uid] = leaf

    def _update(self, node: HNode, demanding: set[str]) -> None:
        if node.children is None:
            node.saturated = resource_saturated(node.attr.allocated, node.request, demanding)
            return
        mdr = 1.0
        for child in node.children.values():
            self._update(child, demanding)
            if child.attr.share != 0 and not child.saturated:
                _, s = calculate_share(child.attr.allocated, self.total_resource)
                mdr = min(mdr, s)
        node.attr.allocated = Resource()
        saturated = True
        for child in node.children.values():
            if not child.saturated:
                saturated = False
            if child.attr.share != 0:
                if child.saturated:
                    node.attr.allocated.add(child.attr.allocated)
                else:
                    node.attr.allocated.add(child.attr.allocated.clone().multi(mdr / child.attr.share))
        node.attr.dominant_resource, node.attr.share = calculate_share(node.attr.allocated, self.total_resource)
        node.saturated = saturated

    def update_hierarchical_share(
        self, root: HNode, total_allocated: Resource, job: JobInfo, attr: DrfAttr, hierarchy: str, weights: str
    ) -> None:
        demanding = {
            rn for rn in self.total_resource.resource_names() if total_allocated.get(rn) < self.total_resource.get(rn)
        }
        self._build(root, job, attr, hierarchy, weights)
        self._update(root, demanding)

    @staticmethod
    def compare_queues(root: HNode, lq: QueueInfo, rq: QueueInfo) -> float:
        lnode: HNode | None = root
        rnode: HNode | None = root
        lpaths = lq.hierarchy.split("/")
        rpaths = rq.hierarchy.split("/")
        depth = min(len(lpaths), len(rpaths))
        for i in range(depth):
            if lnode is None or rnode is None:
                return 0.0
            if not lnode.saturated and rnode.saturated:
                return -1.0
            if lnode.saturated and not rnode.saturated:
                return 1.0
            lv = lnode.attr.share / lnode.weight
            rv = rnode.attr.share / rnode.weight
            if lv == rv:
                if i < depth - 1:
                    lnode = (lnode.children or {}).get(lpaths[i + 1])
                    rnode = (rnode.children or {}).get(rpaths[i + 1])
            else:
                return lv - rv
        return 0.0

    def update_share(self, attr: DrfAttr) -> None:
        attr.dominant_resource, attr.share = calculate_share(attr.allocated, self.total_resource)

    def on_session_open(self, ssn: Session) -> None:
        self.total_resource = ssn.total_resource.clone()
        hierarchy = ssn.hierarchy_enabled(self.name)
        for job in ssn.jobs.values():
            attr = DrfAttr()
            for status, tasks in job.task_status_index.items():
                if allocated_status(status):
                    for t in tasks.values():
                        attr.allocated.add(t.resreq)
            self.update_share(attr)
            self.job_attrs[job.uid] = attr
            if hierarchy:
                queue = ssn.queues[job.queue]
                self.total_allocated.add(attr.allocated)
                self.update_hierarchical_share(
                    self.root, self.total_allocated, job, attr, queue.hierarchy, queue.weights
                )
        if hierarchy:
            self._register_hierarchy(ssn)

        def preemptable(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            latt = self.job_attrs.get(preemptor.job)
            if latt is None:
                return [], PERMIT
            lalloc = latt.allocated.clone().add(preemptor.resreq)
            _, ls = calculate_share(lalloc, self.total_resource)
            allocations: dict[str, Resource] = {}
            victims: list[TaskInfo] = []
            for preemptee in preemptees:
                if preemptee.job not in allocations:
                    ratt = self.job_attrs.get(preemptee.job)
                    if ratt is None:
                        continue
                    allocations[preemptee.job] = ratt.allocated.clone()
                ralloc = allocations[preemptee.job].sub(preemptee.resreq)
                _, rs = calculate_share(ralloc, self.total_resource)
                if ls < rs or abs(ls - rs) <= SHARE_DELTA:
                    victims.append(preemptee)
            return victims, PERMIT

        ssn.add_preemptable_fn(self.name, preemptable)

        def job_order(lv: JobInfo, rv: JobInfo) -> int:
            ls, rs = self.job_attrs[lv.uid].share, self.job_attrs[rv.uid].share
            if ls == rs:
                return 0
            return -1 if ls < rs else 1

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_order_key_fn(self.name, lambda j: self.job_attrs[j.uid].share)

        def on_event(ev: Event, sign: int) -> None:
            attr = self.job_attrs.get(ev.task.job)
            job = ssn.jobs.get(ev.task.job)
            if attr is None or job is None:
                return
            if sign > 0:
                attr.allocated.add(ev.task.resreq)
            else:
                attr.allocated.sub(ev.task.resreq)
            self.update_share(attr)
            queue = ssn.queues.get(job.queue)
            if hierarchy and queue is not None:
                if sign > 0:
                    self.total_allocated.add(ev.task.resreq)
                else:
                    self.total_allocated.sub(ev.task.resreq)
                self.update_hierarchical_share(
                    self.root, self.total_allocated, job, attr, queue.hierarchy, queue.weights
                )

        def on_allocate(ev: Event) -> None:
            on_event(ev, 1)

        def on_deallocate(ev: Event) -> None:
            on_event(ev, -1)

        ssn.add_event_handler(EventHandler(on_allocate, on_deallocate))

    def _register_hierarchy(self, ssn: Session) -> None:
        def queue_order(lv: QueueInfo, rv: QueueInfo) -> int:
            ret = self.compare_queues(self.root, lv, rv)
            return -1 if ret < 0 else 1 if ret > 0 else 0

        ssn.add_queue_order_fn(self.name, queue_order)

        def reclaimable(reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            victims: list[TaskInfo] = []
            total_allocated = self.total_allocated.clone()
            root = self.root.clone()
            ljob = ssn.jobs.get(reclaimer.job)
            if ljob is None or ljob.queue not in ssn.queues or ljob.uid not in self.job_attrs:
                return [], PERMIT
            lqueue = ssn.queues[ljob.queue]
            lattr = DrfAttr()
            lattr.allocated = self.job_attrs[ljob.uid].allocated.clone().add(reclaimer.resreq)
            total_allocated.add(reclaimer.resreq)
            self.update_share(lattr)
            self.update_hierarchical_share(root, total_allocated, ljob, lattr, lqueue.hierarchy, lqueue.weights)
            for preemptee in reclaimees:
                rjob = ssn.jobs.get(preemptee.job)
                if rjob is None or rjob.queue not in ssn.queues or rjob.uid not in self.job_attrs:
                    continue
                rqueue = ssn.queues[rjob.queue]
                total_allocated.sub(preemptee.resreq)
                rattr = DrfAttr()
                rattr.allocated = self.job_attrs[rjob.uid].allocated.clone().sub(preemptee.resreq)
                self.update_share(rattr)
                self.update_hierarchical_share(root, total_allocated, rjob, rattr, rqueue.hierarchy, rqueue.weights)
                ret = self.compare_queues(root, lqueue, rqueue)
                total_allocated.add(preemptee.resreq)
                rattr.allocated.add(preemptee.resreq)
                self.update_share(rattr)
                self.update_hierarchical_share(root, total_allocated, rjob, rattr, rqueue.hierarchy, rqueue.weights)
                if ret < 0:
                    victims.append(preemptee)
            return victims, PERMIT

        ssn.add_reclaimable_fn(self.name, reclaimable)

    def on_session_close(self, ssn: Session) -> None:
        self.job_attrs = {}


SPEC = PluginSpec(name="drf", build=DrfPlugin, doc="Dominant resource fairness between jobs.")
