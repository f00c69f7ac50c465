"""shuffle: evict the running tasks the victim-task plugins choose (Volcano's actions/shuffle/shuffle.go).

Every Running task of every job is offered to the session's VictimTasks dispatch (the union of the
victims of the first tier whose enabled plugins — `enabledVictim` — name any, e.g. tdm's tasks on
revocable nodes whose time window closed); each victim is evicted at once (reason `shuffle`), outside
any statement. Victims are evicted in the order the plugins returned them (Volcano: map order).
A plugin may give a victim its own reason in the task's cycle state (REASON_KEY; the rescheduling
plugin's `Rebalanced: ...`, scheduler_ext/plugins/rescheduling.py).
"""

from __future__ import annotations

import logging
from typing import Final

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import RUNNING
from scheduler_ext.framework.interface import Action, ActionSpec
from scheduler_ext.framework.session import Session

log = logging.getLogger(__name__)

EVICT_REASON: Final = "shuffle"
#: a victim's own reason, set by its plugin in the task's cycle state
REASON_KEY: Final = "shuffle.reason"


class ShuffleAction(Action):
    name = "shuffle"

    def execute(self, ssn: Session) -> None:
        tasks: list[TaskInfo] = [t for job in ssn.jobs.values() for t in job.tasks_in(RUNNING).values()]
        for victim in ssn.victim_tasks(tasks):
            reason = str(ssn.cycle_states.get(victim.uid, {}).get(REASON_KEY) or EVICT_REASON)
            log.debug("shuffle: evict %s (job %s): %s", victim.key, victim.job, reason)
            ssn.evict(victim, reason)


SPEC = ActionSpec(
    name="shuffle",
    build=ShuffleAction,
    doc="Evict the running tasks that the victim-task plugins (e.g. tdm) select.",
)
