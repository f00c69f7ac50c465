"""enqueue: move Pending PodGroups to Inqueue when plugins vote they may run (Volcano's enqueue.go).

Queues are visited in queue order and one job per queue per turn (job order), so queues take turns.
A job without minResources is always enqueued; otherwise JobEnqueueable decides (proportion,
overcommit, ... vote), and JobEnqueued lets plugins account for it.
"""

from __future__ import annotations

import logging

from scheduler_ext.api.job import PG_INQUEUE, JobInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.types import QueueID
from scheduler_ext.framework.interface import Action, ActionSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.util import PriorityQueue

log = logging.getLogger(__name__)


class EnqueueAction(Action):
    name = "enqueue"

    def execute(self, ssn: Session) -> None:
        queues: PriorityQueue[QueueInfo] = ssn.new_queue_queue()
        seen: set[QueueID] = set()
        jobs_by_queue: dict[QueueID, PriorityQueue[JobInfo]] = {}
        for job in ssn.jobs.values():
            queue = ssn.queues.get(job.queue)
            if queue is None:
                log.error("failed to find queue %s for job %s", job.queue, job.uid)
                continue
            if queue.uid not in seen:
                seen.add(queue.uid)
                queues.push(queue)
            if job.is_pending():
                jq = jobs_by_queue.get(job.queue)
                if jq is None:
                    jq = jobs_by_queue[job.queue] = ssn.new_job_queue()
                jq.push(job)

        while not queues.empty():
            queue = queues.pop()
            assert queue is not None
            jq = jobs_by_queue.get(queue.uid)
            if jq is None or jq.empty():
                continue
            popped = jq.pop()
            assert popped is not None
            job = popped
            if job.pod_group.min_resources is None or ssn.job_enqueueable(job):
                ssn.job_enqueued(job)
                job.pod_group.phase = PG_INQUEUE
                log.debug("enqueue: job %s is Inqueue", job.uid)
            queues.push(queue)


SPEC = ActionSpec(name="enqueue", build=EnqueueAction, doc="Pending PodGroups -> Inqueue when plugins permit.")
