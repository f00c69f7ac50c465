"""PodGroup events: warn only when a task of the gang is really left pending (a departure from
Volcano's RecordJobStatusEvent, which also warns on the session that just bound the gang)."""

from __future__ import annotations

from scheduler_ext.model.plan import _podgroup_event

from .helpers import node, pod, podgroup, queue, run

CONF = """
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: proportion
"""


def test_no_warning_for_a_gang_that_was_just_bound() -> None:
    objs = [queue("q1"), node("n1", cpu="4"), podgroup("pg", min_member=2),
            pod("pg-p-0", group="pg"), pod("pg-p-1", group="pg")]
    ssn = run(objs, CONF)
    job = ssn.jobs["ns1/pg"]  # type: ignore[index]
    assert job.pod_group.phase == "Inqueue"  # Binding is not a scheduled status, as in Volcano
    assert _podgroup_event(job) is None


def test_warning_names_the_pending_tasks_and_why() -> None:
    objs = [queue("q1"), node("n1", cpu="1"), podgroup("pg", min_member=2),
            pod("pg-p-0", group="pg"), pod("pg-p-1", group="pg")]
    ssn = run(objs, CONF)
    event = _podgroup_event(ssn.jobs["ns1/pg"])  # type: ignore[index]
    assert event is not None
    etype, reason, message = event
    assert (etype, reason) == ("Warning", "Unschedulable")
    assert message.startswith("2/2 tasks in gang unschedulable")
