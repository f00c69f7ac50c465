"""The privilege action (OpenI-Octopus's delayed job-level preemption) in simulate terms.

Each `cycle(objects, now)` is one scheduler session at `now` with a fresh action object (as after a
scheduler restart): the state travels only in the PodGroups' conditions, written back the way `run`
writes them (merge by type; an unchanged condition keeps its lastTransitionTime).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from scheduler_ext.actions.privilege import COND_PRIVILEGED, COND_WILL_EVICTED, parse_tenants
from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.plan import merge_conditions
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.simulate import simulate

from .helpers import conf, node, pod, podgroup, queue

T0 = 1_700_000_000.0


def conf_text(delay: str = "5m", **args: Any) -> str:
    extra = "".join(f"\n    {k}: {v}" for k, v in args.items())
    return f"""
actions: "enqueue, allocate, privilege"
configurations:
- name: privilege
  arguments:
    evictionDelay: {delay}{extra}
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
"""


def pclass(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def job(name: str, n: int, *, cpu: str = "1", running_on: str = "", pc: str = "low", ns: str = "ns1",
        q: str = "q1", preemptable: bool = True, min_member: int | None = None) -> list[dict[str, Any]]:
    pg = podgroup(name, ns, queue=q, min_member=n if min_member is None else min_member,
                  phase="Running" if running_on else "Inqueue", priorityClassName=pc)
    if preemptable:
        pg["metadata"]["annotations"] = {"volcano.sh/preemptable": "true"}
    pods = [
        pod(f"{name}-{i}", ns, group=name, cpu=cpu, node_name=running_on,
            phase="Running" if running_on else "Pending")
        for i in range(n)
    ]
    return [pg, *pods]


def base(*jobs: list[dict[str, Any]], cpu: str = "4") -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [queue("q1"), queue("q2"), pclass("low", 10), pclass("high", 1000),
                                  node("n1", cpu=cpu, memory="64Gi")]
    for j in jobs:
        objs.extend(j)
    return objs


def cycle(objects: list[dict[str, Any]], now: float, text: str) -> Session:
    """One session; evicted pods are deleted, conditions written back into `objects` (in place)."""
    c = conf(text)
    ssn = open_session(build_cluster(objects, now=now), c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    now_iso = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    evicted = {e.task.key for e in ssn.evictions}
    bound = {b.task.key: b.node for b in ssn.binds}
    keep = []
    for obj in objects:
        md = obj["metadata"]
        key = f"{md.get('namespace')}/{md['name']}"
        if obj["kind"] == "Pod":
            if key in evicted:
                continue
            if key in bound:
                obj["spec"]["nodeName"] = bound[key]
                obj["status"]["phase"] = "Running"
        if obj["kind"] == "PodGroup" and key in ssn.jobs:
            pg = ssn.jobs[key].pod_group  # type: ignore[index]
            obj["status"]["phase"] = pg.phase
            if pg.conditions:
                obj["status"]["conditions"] = merge_conditions(obj["status"].get("conditions") or [],
                                                               pg.conditions, now_iso)
        keep.append(obj)
    objects[:] = keep
    return ssn


def cond(objects: list[dict[str, Any]], pg: str, ctype: str) -> dict[str, Any] | None:
    for obj in objects:
        if obj["kind"] == "PodGroup" and obj["metadata"]["name"] == pg:
            for c in obj["status"].get("conditions") or []:
                if c["type"] == ctype:
                    return dict(c)
    return None


def state(objects: list[dict[str, Any]], pg: str, ctype: str) -> tuple[str, str] | None:
    c = cond(objects, pg, ctype)
    return None if c is None else (c["status"], c["reason"])


def evicted(ssn: Session) -> list[str]:
    return sorted(e.task.key for e in ssn.evictions)


def test_marks_first_then_evicts_the_whole_job_after_the_delay() -> None:
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    ssn = cycle(objs, T0, conf_text("5m"))
    assert ssn.evictions == [] and ssn.binds == []
    assert state(objs, "high", COND_PRIVILEGED) == ("True", "PreemptionDelayed")
    assert state(objs, "low", COND_WILL_EVICTED) == ("True", "PreemptionDelayed")
    assert "victims=ns1/low" in (cond(objs, "high", COND_PRIVILEGED) or {})["message"]
    assert "preemptor=ns1/high" in (cond(objs, "low", COND_WILL_EVICTED) or {})["message"]
    assert [e[1] for e in ssn.jobs["ns1/high"].pod_group.events] == ["PreemptionDelayed"]  # type: ignore[index]
    since = (cond(objs, "high", COND_PRIVILEGED) or {})["lastTransitionTime"]

    ssn = cycle(objs, T0 + 299, conf_text("5m"))
    assert ssn.evictions == []
    # unchanged: the clock does not restart
    assert (cond(objs, "high", COND_PRIVILEGED) or {})["lastTransitionTime"] == since
    assert ssn.jobs["ns1/high"].pod_group.events == []  # type: ignore[index]  # no repeated events

    ssn = cycle(objs, T0 + 300, conf_text("5m"))
    # eviction by whole job: all four tasks go, though two cpus would do
    assert evicted(ssn) == [f"ns1/low-{i}" for i in range(4)]
    assert {e.reason for e in ssn.evictions} == {"privilege"}
    assert state(objs, "high", COND_PRIVILEGED) == ("False", "VictimsEvicted")
    assert state(objs, "low", COND_WILL_EVICTED) == ("False", "Evicted")

    ssn = cycle(objs, T0 + 301, conf_text("5m"))
    assert sorted(b.task.key for b in ssn.binds) == ["ns1/high-0", "ns1/high-1"]
    assert ssn.evictions == []


def test_fewest_jobs_whose_resources_suffice() -> None:
    objs = base(job("a", 1, running_on="n1"), job("b", 1, running_on="n1"), job("c", 1, cpu="2", running_on="n1"),
                job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("0s"))
    assert state(objs, "c", COND_WILL_EVICTED) == ("False", "Evicted")
    assert cond(objs, "a", COND_WILL_EVICTED) is None and cond(objs, "b", COND_WILL_EVICTED) is None


def test_delay_zero_evicts_in_the_same_session_and_the_preemptor_binds_next() -> None:
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    ssn = cycle(objs, T0, conf_text("0s"))
    assert len(ssn.evictions) == 4
    ssn = cycle(objs, T0, conf_text("0s"))
    assert len(ssn.binds) == 2


def test_only_lower_priority_preemptable_jobs_of_the_same_queue() -> None:
    for victim in (
        job("low", 4, running_on="n1", q="q2"),  # another queue
        job("low", 4, running_on="n1", preemptable=False),  # not preemptable
        job("low", 4, running_on="n1", pc="high"),  # same priority
    ):
        objs = base(victim, job("high", 2, pc="high"))
        ssn = cycle(objs, T0, conf_text("0s"))
        assert ssn.evictions == []
        assert cond(objs, "high", COND_PRIVILEGED) is None


def test_no_preemption_when_the_job_fits_or_cannot_fit_even_with_all_victims() -> None:
    objs = base(job("low", 2, running_on="n1"), job("high", 3, pc="high"), cpu="4")
    ssn = cycle(objs, T0, conf_text("0s"))  # 2 free + 2 low = 4 >= 3: preempts
    assert len(ssn.evictions) == 2
    objs = base(job("low", 2, running_on="n1"), job("high", 5, pc="high"), cpu="4")
    ssn = cycle(objs, T0, conf_text("0s"))  # needs 5 of 4
    assert ssn.evictions == [] and cond(objs, "high", COND_PRIVILEGED) is None


def test_freed_resources_cancel_both_sides() -> None:
    objs = base(job("low", 2, running_on="n1"), job("other", 2, running_on="n1", preemptable=False),
                job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    assert state(objs, "low", COND_WILL_EVICTED) == ("True", "PreemptionDelayed")
    objs[:] = [o for o in objs if not o["metadata"]["name"].startswith("other-")]  # 'other' finished
    ssn = cycle(objs, T0 + 10, conf_text("5m"))
    # allocate placed the preemptor in the freed room: the need vanished
    assert sorted(b.task.key for b in ssn.binds) == ["ns1/high-0", "ns1/high-1"]
    assert state(objs, "high", COND_PRIVILEGED) == ("False", "PreemptionCanceled")
    assert state(objs, "low", COND_WILL_EVICTED) == ("False", "PreemptionCanceled")
    ssn = cycle(objs, T0 + 400, conf_text("5m"))
    assert ssn.evictions == []


def test_preemptor_gone_releases_its_victims() -> None:
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    objs[:] = [o for o in objs if not o["metadata"]["name"].startswith("high")]
    ssn = cycle(objs, T0 + 400, conf_text("5m"))
    assert ssn.evictions == []
    assert state(objs, "low", COND_WILL_EVICTED) == ("False", "PreemptionCanceled")


def test_marked_jobs_are_never_victims() -> None:
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    # an even higher job arrives: 'low' is promised to 'high', so no victims for 'top'
    objs.extend([pclass("top", 5000), *job("top", 2, pc="top")])
    ssn = cycle(objs, T0 + 1, conf_text("5m"))
    assert cond(objs, "top", COND_PRIVILEGED) is None
    assert ssn.evictions == []


def test_tenant_priority_and_permissions() -> None:
    # the tenant 'vip' has priority 2000 in the queue: its low-class job preempts a high-class job
    objs = base(job("busy", 4, running_on="n1", pc="high", ns="ns1"), job("urgent", 2, pc="low", ns="vip"))
    ssn = cycle(objs, T0, conf_text("0s", **{"tenant.vip.priority": 2000}))
    assert len(ssn.evictions) == 4
    # ... unless ns1 is not preemptable
    objs = base(job("busy", 4, running_on="n1", pc="high", ns="ns1"), job("urgent", 2, pc="low", ns="vip"))
    ssn = cycle(objs, T0, conf_text("0s", **{"tenant.vip.priority": 2000, "tenant.ns1.preemptable": False}))
    assert ssn.evictions == []
    # ... and a tenant without the permission never preempts
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high", ns="guest"))
    ssn = cycle(objs, T0, conf_text("0s", **{"tenant.guest.preempt": "false"}))
    assert ssn.evictions == []


def test_parse_tenants_ignores_bad_values() -> None:
    t = parse_tenants({"tenant.a.priority": 5, "tenant.b.preempt": "nope", "tenant.c.bogus": 1, "evictionDelay": "1s"})
    assert t["a"].priority == 5 and t["a"].preempt and t["a"].preemptable
    assert t["b"].preempt  # malformed: the default
    assert "c" not in t


def test_critical_pods_are_never_victims() -> None:
    low = job("low", 4, running_on="n1")
    low[1]["spec"]["priorityClassName"] = "system-node-critical"
    objs = base(low, job("high", 2, pc="high"))
    ssn = cycle(objs, T0, conf_text("0s"))
    assert ssn.evictions == []


def test_simulate_carries_the_state_between_cycles() -> None:
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    res = simulate(copy.deepcopy(objs), conf(conf_text("0s")), ACTIONS, PLUGINS, cycles=2, now=T0)
    assert sorted(res.evictions) == [f"ns1/low-{i}" for i in range(4)]
    assert sorted(res.binds) == ["ns1/high-0", "ns1/high-1"]
    # with a delay, cycles at one --now never reach it
    res = simulate(copy.deepcopy(objs), conf(conf_text("1m")), ACTIONS, PLUGINS, cycles=3, now=T0)
    assert res.evictions == ()
    # a PodGroup already Privileged since 2 minutes (e.g. before a restart) is due at --now
    objs2 = copy.deepcopy(objs)
    cycle(objs2, T0 - 120, conf_text("1m"))
    res = simulate(objs2, conf(conf_text("1m")), ACTIONS, PLUGINS, cycles=1, now=T0)
    assert len(res.evictions) == 4


def test_a_stale_snapshot_after_the_eviction_neither_cancels_nor_evicts_again() -> None:
    """Live, the next session may read the PodGroups before the eviction session's condition writes land,
    with the victims already Terminating: that is "evicted", not "resources were freed"."""
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    stale = copy.deepcopy(objs)  # conditions still True
    for o in stale:
        if o["kind"] == "Pod" and o["metadata"]["name"].startswith("low-"):
            o["metadata"]["deletionTimestamp"] = "2023-11-14T22:18:20Z"
    ssn = cycle(stale, T0 + 301, conf_text("5m"))
    assert ssn.evictions == []
    assert state(stale, "high", COND_PRIVILEGED) == ("False", "VictimsEvicted")
    assert state(stale, "low", COND_WILL_EVICTED) == ("False", "Evicted")


def test_a_snapshot_with_only_the_preemptors_write_landed_keeps_the_victim_evicted() -> None:
    """The two PodGroups' status writes land separately: a session that sees the preemptor's
    VictimsEvicted but still the victim's WillEvicted=True must say Evicted, not PreemptionCanceled."""
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    marked = copy.deepcopy(objs)  # the victim's WillEvicted=True as observed before the eviction
    cycle(objs, T0 + 300, conf_text("5m"))
    assert state(objs, "high", COND_PRIVILEGED) == ("False", "VictimsEvicted")
    half = [o for o in objs if not (o["kind"] == "PodGroup" and o["metadata"]["name"] == "low")]
    half += [o for o in marked if o["kind"] == "PodGroup" and o["metadata"]["name"] == "low"]
    assert state(half, "low", COND_WILL_EVICTED) == ("True", "PreemptionDelayed")
    ssn = cycle(half, T0 + 301, conf_text("5m"))
    assert ssn.evictions == []
    assert state(half, "low", COND_WILL_EVICTED) == ("False", "Evicted")


def test_a_snapshot_with_only_the_victims_write_landed_says_victims_evicted() -> None:
    """The mirror case: the victim's `WillEvicted=False, Evicted` seen while the preemptor still shows
    Privileged=True (its write not landed) must end as VictimsEvicted, not PreemptionCanceled (the victims
    are leaving, so the preemptor "fits without victims": that is not "resources were freed")."""
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    cycle(objs, T0, conf_text("5m"))
    marked = copy.deepcopy(objs)  # the preemptor's Privileged=True as observed before the eviction
    cycle(objs, T0 + 300, conf_text("5m"))
    assert state(objs, "low", COND_WILL_EVICTED) == ("False", "Evicted")
    half = [o for o in objs if not (o["kind"] == "PodGroup" and o["metadata"]["name"] == "high")]
    half += [o for o in marked if o["kind"] == "PodGroup" and o["metadata"]["name"] == "high"]
    for o in half:
        if o["kind"] == "Pod" and o["metadata"]["name"].startswith("low-"):
            o["metadata"]["deletionTimestamp"] = "2023-11-14T22:18:20Z"
    assert state(half, "high", COND_PRIVILEGED)[0] == "True"
    ssn = cycle(half, T0 + 301, conf_text("5m"))
    assert ssn.evictions == []
    assert state(half, "high", COND_PRIVILEGED) == ("False", "VictimsEvicted")


def _preemptor_write_lost(objs: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`objs` with the preemptor's PodGroup as it was in `before` (its status write failed, the victim's landed)."""
    out = [o for o in objs if not (o["kind"] == "PodGroup" and o["metadata"]["name"] == "high")]
    return out + [o for o in before if o["kind"] == "PodGroup" and o["metadata"]["name"] == "high"]


def test_a_mark_that_reached_only_the_victim_is_completed_with_the_victims_clock() -> None:
    """Live, the preemptor's status write can fail (a 409 when the session read it before its previous write
    came back) while the victim's lands: the next session completes the mark, no cancelation in between."""
    objs = base(job("low", 4, running_on="n1"), job("high", 2, pc="high"))
    before = copy.deepcopy(objs)
    cycle(objs, T0, conf_text("5m"))
    half = _preemptor_write_lost(objs, before)
    assert cond(half, "high", COND_PRIVILEGED) is None
    ssn = cycle(half, T0 + 10, conf_text("5m"))
    assert ssn.evictions == []
    assert state(half, "high", COND_PRIVILEGED) == ("True", "PreemptionDelayed")
    assert state(half, "low", COND_WILL_EVICTED) == ("True", "PreemptionDelayed")
    due = "2023-11-14T22:18:20Z"  # T0 + 300: the victim's clock, not restarted
    assert f"evicting them at {due}" in (cond(half, "high", COND_PRIVILEGED) or {})["message"]
    assert ssn.jobs["ns1/low"].pod_group.events == []  # type: ignore[index]  # the victim saw no change
    ssn = cycle(half, T0 + 300, conf_text("5m"))
    assert evicted(ssn) == [f"ns1/low-{i}" for i in range(4)]


def test_a_mark_that_reached_only_the_victim_is_canceled_when_the_need_vanished() -> None:
    objs = base(job("low", 2, running_on="n1"), job("other", 2, running_on="n1", preemptable=False),
                job("high", 2, pc="high"))
    before = copy.deepcopy(objs)
    cycle(objs, T0, conf_text("5m"))
    half = [o for o in _preemptor_write_lost(objs, before) if not o["metadata"]["name"].startswith("other-")]
    ssn = cycle(half, T0 + 10, conf_text("5m"))
    assert sorted(b.task.key for b in ssn.binds) == ["ns1/high-0", "ns1/high-1"]
    assert state(half, "low", COND_WILL_EVICTED) == ("False", "PreemptionCanceled")
    assert cond(half, "high", COND_PRIVILEGED) is None
