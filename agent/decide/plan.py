"""One decision cycle: `decide(snapshot, config, now) -> Plan`, the whole decision.

1. Smooth the window (usage, U_non); check staleness.
2. Fold the new samples into the watermark hysteresis (the node's evicting state).
3. Capacity: the usage profiles take the new samples once a minute (`profile.fold`); U_non as
   `capacity.policy` estimates it (`profile.estimate`: the window, or the profile for the hours ahead);
   B and X, published values, what to patch on the Node and its status. Whether this
   cycle is a capacity tick (every `capacity.period`) is decided here too: between ticks the plan
   carries no capacity keys, except together with an evicting change (B = X = 0 at once).
4. Victims: the watermark prefix while evicting, then the admission guard's.
5. QoS knobs (nodes with a colocation or oversubscription label), memory and I/O QoS included: every new
   sample goes through the memory pressure hysteresis (`memqos.pressure_step`) first.
Everything is explained in words (`Plan.explanations`).

State: everything carried between cycles (the hysteresis counts, the admission guard's counts, the
X history, when the next capacity tick is due) comes in as `snapshot.state` and goes out as
`Plan.next_state`, a pure function of the inputs and `now`; the daemon stores the next state and
applies the plan as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from agent.config import AgentConfig
from agent.decide import (
    admission,
    capacity,
    cooldown,
    eviction,
    iopressure,
    ioqos,
    memguard,
    memqos,
    pressure,
    profile,
    qos,
    tier,
    usage,
    watermarks,
)
from agent.decide.ops import (
    CapacityView,
    EvictPod,
    HeldEviction,
    IoStatus,
    Plan,
    SetCgroupValue,
    SetProcessValue,
    UsageView,
)
from agent.model import (
    X_KEY,
    AdmissionState,
    AgentState,
    Amounts,
    CgroupState,
    MemoryPressureState,
    NodeView,
    PodView,
    ProfileState,
    Sample,
    Snapshot,
    WatermarkState,
)
from tidemark.apis import ANN_OFFLINE_JOB_EVICTING, RESOURCES, PodUID, Resource
from tidemark.nodereport import ReportSpec

#: the explanation of a decision that publishes capacity starts so; the rest is why (the daemon logs it)
PUBLISHING = "publishing: "


def _fmt(r: Resource, v: float) -> str:
    return f"{v:.0f}m" if r == "cpu" else f"{v / 2**20:.0f}Mi"


def _recent(samples: tuple[Sample, ...], n: int) -> tuple[Amounts, dict[PodUID, Amounts]]:
    """Mean kubepods and per-pod usage over the last n samples (the ones that made the decision)."""
    tail = samples[-n:] if n > 0 else samples
    view = usage.summarize(tail, (), Amounts(1, 1), "mean")
    return view.kubepods, dict(view.pods)


def _label_sentence(colocation: bool, oversubscription: bool) -> str:
    if colocation and oversubscription:
        return (
            "labels colocation and oversubscription: B and X published, offline QoS knobs, "
            "eviction past a high watermark"
        )
    if colocation:
        return "label colocation only: offline QoS knobs and eviction past a high watermark; B and X are not published"
    if oversubscription:
        return (
            "label oversubscription only: B and X published, offline QoS knobs, eviction past a high watermark "
            "only while the pods' requests exceed allocatable"
        )
    return "no colocation/oversubscription label: nothing is published, no knobs, no eviction"


def _requests_of_live(pods: tuple[PodView, ...]) -> Amounts:
    total = Amounts()
    for p in pods:
        if not p.terminating:
            total = total + p.all_requests()
    return total


@dataclass(frozen=True, slots=True)
class _Usage:
    """Section 1's result: the smoothed window every later section reads."""

    window: tuple[Sample, ...]
    view: UsageView
    stale: bool
    #: the samples the hysteresis has not seen yet
    new: tuple[Sample, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Hysteresis:
    """Section 2's result: the watermark and memory pressure states after the new samples."""

    watermarks: WatermarkState
    was_evicting: bool
    memory: MemoryPressureState
    memory_reason: str | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Capacity:
    """Section 3's result: B and X, and what this cycle patches on the Node and its status."""

    cap: CapacityView
    tick: bool
    capacity_next: float
    annotations: Mapping[str, str | None]
    #: what this cycle writes on the Node, in the NodeReport's terms (None: nothing)
    report: ReportSpec | None
    notes: tuple[str, ...]
    #: the capacity ticks' computed values the next `low_envelope` takes the lowest of
    pub_history: capacity.PubHistory = ()


@dataclass(frozen=True, slots=True)
class _Victims:
    """Section 4's result: the evictions and the admission guard's carried state."""

    evictions: tuple[EvictPod, ...]
    admission: AdmissionState
    x_history: tuple[tuple[float, int, int], ...]
    notes: tuple[str, ...]
    #: victims the cool-downs hold back (agent.decide.cooldown)
    held: tuple[HeldEviction, ...] = ()
    #: since when the offline tier is starved (the next state's `starved_since`)
    starved_since: float | None = None


def _usage_section(snapshot: Snapshot, config: AgentConfig, now: float) -> _Usage:
    """Smooth the window and say whether it is too old (or lacks /proc) to publish from: capacity fails closed."""
    node, pods = snapshot.node, snapshot.pods
    notes: list[str] = []
    window = usage.prune(snapshot.samples, config.sampler.window)
    view: UsageView = usage.summarize(window, pods, node.allocatable, config.sampler.smoothing)
    stale_after = config.capacity.stale_periods * max(config.sampler.period, snapshot.sample_period)
    stale = view.newest is None or now - view.newest > stale_after
    if stale:
        notes.append(
            "no usable sample yet"
            if view.newest is None
            else f"the newest sample is {now - view.newest:.1f} s old (> {stale_after:g} s): B and X publish 0"
        )
    elif view.node_samples == 0:
        # fail closed: without the machine's usage, U_non would read as 0 and B as A x ratio
        stale = True
        notes.append(
            "no reading of the machine's usage (/proc/stat, /proc/meminfo) in the window: U_non is unknown, "
            "so B and X publish 0"
        )
    for r in RESOURCES:
        notes.append(
            f"{r}: kubepods uses {_fmt(r, view.kubepods.get(r))} = {view.percent.get(r):.1f} % of allocatable "
            f"{_fmt(r, node.allocatable.get(r))} (watermarks high {node.watermarks.high(r)} %, low "
            f"{node.watermarks.low(r)} %; {config.sampler.smoothing} of {view.samples} sample(s))"
        )
    new = snapshot.samples[-snapshot.new_samples :] if snapshot.new_samples > 0 else ()
    notes.extend(pressure.notes(window[-1] if window else None, new, pods, config.pressure))
    return _Usage(window, view, stale, new, tuple(notes))


def _hysteresis_section(
    snapshot: Snapshot,
    config: AgentConfig,
    u: _Usage,
    live_requests: Amounts,
    mode: watermarks.Mode,
    t: tier.TierCpu | None = None,
) -> _Hysteresis:
    """Fold every new sample into the watermark and memory pressure hysteresis (pressure-path samples count too)."""
    node, state, n = snapshot.node, snapshot.state, config.eviction.consecutive
    notes: list[str] = []
    wm: WatermarkState = state.watermarks
    was_evicting = wm.evicting
    for s in u.new:
        pct = usage.sample_percent(s, node.allocatable)
        if pct is not None:
            cpu_fast = config.eviction_cpu.measure == "node" or t is None  # `pressure.counted`
            counts = pressure.counted(s, snapshot.samples, config.sampler.period, config.pressure, cpu_fast)
            pct, starved = tier.cpu_measure(
                pct, s, snapshot.pods, node.allocatable, t, config.eviction_cpu, snapshot.samples
            )
            wm = watermarks.step(wm, pct, live_requests, node.allocatable, node.watermarks, mode, n, counts, starved)
    evicting = wm.evicting
    mem_state, mem_reason = state.memory, None
    for s in u.new:
        pct = usage.sample_percent(s, node.allocatable)
        obs = memqos.MemoryPressure(
            None if pct is None else pct.memory,
            node.watermarks.high("memory"),
            s.pressure.get("memory"),
            triggered="memory" in s.triggered and config.pressure.enabled,
        )
        mem_state = memqos.pressure_step(mem_state, obs, config.memory_qos)
        mem_reason = memqos.pressure_reason(obs, config.memory_qos)
    if evicting and not was_evicting:
        triggered = [r for r in RESOURCES if wm.over(r) >= n]
        notes.append(
            f"{', '.join(triggered)} usage at or past the high watermark for {n} consecutive samples"
            + (" with requests over allocatable" if mode == "usage_and_requests" else "")
            + ": the node becomes evicting (annotated at once, B = X = 0)"
        )
    elif was_evicting and not evicting:
        notes.append(f"every resource at or under its low watermark for {n} consecutive samples: eviction clears")
    elif evicting:
        notes.append(
            f"the node stays evicting until every resource is at or under its low watermark for {n} consecutive "
            f"samples (now {wm.clear})"
        )
        for r in RESOURCES:
            pct_r = u.view.percent.get(r)
            if node.watermarks.low(r) < pct_r < node.watermarks.high(r):
                notes.append(
                    f"{r} usage {pct_r:.1f} % sits between its low ({node.watermarks.low(r)}) and high "
                    f"({node.watermarks.high(r)}) watermarks: the node stays closed to offline work"
                )
    return _Hysteresis(wm, was_evicting, mem_state, mem_reason, tuple(notes))


def _evicting_marks(
    node: NodeView, config: AgentConfig, evicting: bool
) -> tuple[dict[str, str | None], bool | None]:
    """The evicting annotation (and optional taint: True/False to add/remove) to change: they follow the state
    at once."""
    marks: dict[str, str | None] = {}
    if evicting and not node.evicting_annotation:
        marks[ANN_OFFLINE_JOB_EVICTING] = "true"
    elif not evicting and node.evicting_annotation:
        marks[ANN_OFFLINE_JOB_EVICTING] = None
    taint: bool | None = None
    if config.eviction.taint and evicting and not node.evicting_taint:
        taint = True
    elif not evicting and node.evicting_taint:
        taint = False
    return marks, taint


def _capacity_section(
    snapshot: Snapshot, config: AgentConfig, now: float, u: _Usage, evicting: bool, profiles: ProfileState,
    t: tier.TierCpu | None = None,
) -> _Capacity:
    """B and X every cycle; written on capacity ticks only, or at once together with an evicting change."""
    node, pods = snapshot.node, snapshot.pods
    notes: list[str] = []
    tick, capacity_next = capacity.cadence(snapshot.state.capacity_due, config.capacity.period, now)
    room = profile.headroom(
        node.allocatable,
        Amounts(node.watermarks.high("cpu"), node.watermarks.high("memory")),
        Amounts(config.capacity.ratio_cpu, config.capacity.ratio_memory),
    )
    newest = u.window[-1].pods if u.window else {}  # cold pods' usage now (the window's per-pod means cost more)
    policy = config.capacity.policy
    est = profile.estimate(profiles, u.view.non_offline, pods, newest, config.profile, policy, now, room)
    notes.append(est.describe(config.profile))
    terms = capacity.compute_terms(node, pods, est.u_non, config.capacity)
    cap = replace(capacity.capacity_view(node, terms, evicting, u.stale), policy=est.policy, u_non=est.u_non)
    for r in RESOURCES:
        line = terms[r].describe()
        reasons = capacity.zero_reasons(node, r, evicting, u.stale)
        if reasons:
            line += f"; published 0 ({'; '.join(reasons)})"
        notes.append(line)
    marks, taint = _evicting_marks(node, config, evicting)
    offline = _offline_doc(node.allocatable.cpu, config, t)
    window = config.capacity.envelope
    history = snapshot.state.pub_history
    low = capacity.low_envelope(history, cap) if window > 0 else None
    pub = capacity.publication(
        node, cap, u.view, config.capacity, now, u.stale, offline, tier.offline_requests(pods), low
    )
    if tick:
        history = capacity.remember(history, cap, now, window)
    # a starving tier's turn is written at once: the scheduler's move must come within the agent's rebalanceGrace
    publish = tick or bool(marks) or taint is not None or pub.starving_flip
    if publish and pub.enveloped and low is not None:
        cap = low  # what is written (the metrics, Events and the admission guard's X history follow it)
    if pub.reasons and (pub.annotations or pub.status):
        if publish:
            notes.append(PUBLISHING + "; ".join(pub.reasons))
        else:
            notes.append(
                f"not a capacity tick (every {config.capacity.period:g} s, the next in "
                f"{capacity_next - now:.1f} s): publishing waits ({'; '.join(pub.reasons)})"
            )
    elif pub.held:
        notes.append("publishing waits: " + "; ".join(pub.held))
    elif node.oversubscription:
        notes.append("published values are current (none missing, moved more than the threshold, or due)")
    annotations: dict[str, str | None] = {**pub.annotations, **marks} if publish else marks
    report = ReportSpec(annotations, dict(pub.status) if publish else {}, taint)
    return _Capacity(cap, tick, capacity_next, annotations, None if report.empty() else report, tuple(notes), history)


def _offline_doc(alloc: float, config: AgentConfig, t: tier.TierCpu | None) -> capacity.OfflineDoc | None:
    """node-usage's `offline`: the allowance starvation is judged by (`TierCpu.allowance`), percent of allocatable,
    and `eviction.cpu.satisfaction`; None without a tier or under the node measure (no starvation then)."""
    if t is None or alloc <= 0 or config.eviction_cpu.measure != "satisfaction":
        return None
    return capacity.OfflineDoc(100.0 * t.allowance / alloc, config.eviction_cpu.satisfaction)


def _watermark_victims(
    snapshot: Snapshot,
    config: AgentConfig,
    now: float,
    u: _Usage,
    mode: watermarks.Mode,
    live_requests: Amounts,
    t: tier.TierCpu | None,
    rnd: cooldown.Round,
) -> tuple[list[eviction.Victim], list[str], float | None]:
    """The shortest victim prefix that brings every resource past its high watermark now (last N samples) under it;
    the cool-downs (`rnd`) hold some back. With since when the offline tier is starved (`_satisfaction_victims`)."""
    node, n = snapshot.node, config.eviction.consecutive
    notes: list[str] = []
    recent_kube, recent_pods = _recent(u.window, n)
    pct_recent = Amounts(
        100.0 * recent_kube.cpu / node.allocatable.cpu if node.allocatable.cpu > 0 else 0.0,
        100.0 * recent_kube.memory / node.allocatable.memory if node.allocatable.memory > 0 else 0.0,
    )
    pressured = watermarks.over_resources(pct_recent, live_requests, node.allocatable, node.watermarks, mode)
    since = None
    if config.eviction_cpu.measure == "satisfaction":
        cpu_found, cpu_notes, since = _satisfaction_victims(snapshot, config, now, recent_kube, recent_pods, mode, t)
        cpu_found = rnd.filter(cpu_found)
        notes.extend(cpu_notes)
        pressured = tuple(r for r in pressured if r != "cpu")
    else:
        cpu_found = []
    if not pressured and not cpu_found:
        notes.append("no resource is past its high watermark now: no eviction this cycle")
    found, vnotes = eviction.watermark_victims(
        snapshot.pods,
        recent_pods,
        recent_kube,
        node.allocatable,
        node.watermarks,
        pressured,
        mode,
        live_requests,
        now,
        config.eviction.terminating_slack,
        (*snapshot.unevictable, *(v.pod.uid for v in cpu_found)),
        rnd,
    )
    notes.extend(vnotes)
    return cpu_found + found, notes, since


def _satisfaction_victims(
    snapshot: Snapshot,
    config: AgentConfig,
    now: float,
    recent_kube: Amounts,
    recent_pods: dict[PodUID, Amounts],
    mode: watermarks.Mode,
    t: tier.TierCpu | None,
) -> tuple[list[eviction.Victim], list[str], float | None]:
    """CPU victims under `eviction.cpu.measure: satisfaction` (agent.decide.eviction's module docstring), and since
    when the tier is starved: its CPUStarvation victims wait `eviction.cpu.rebalanceGrace` from then for the
    scheduler's rescheduling plugin to move offline pods (it reads node-usage `offline`), the online ones never."""
    node, pods, ec = snapshot.node, snapshot.pods, config.eviction_cpu
    online, offline = tier.online_of(recent_kube, recent_pods, pods)
    slack = config.eviction.terminating_slack
    until = snapshot.samples[-1].time if snapshot.samples else now
    since, notes = None, []
    if t is not None and tier.starved_over(snapshot.samples, until, pods, t, ec, offline):
        since = snapshot.state.starved_since if snapshot.state.starved_since is not None else now
        if now - since >= ec.rebalance_grace:
            found = eviction.starvation_victims(
                pods, recent_pods, t.allowance, ec.satisfaction, node.allocatable, now, slack, snapshot.unevictable
            )
            return found, [], since
        notes.append(
            f"cpu (satisfaction measure): the offline tier is starved (allowance {t.allowance:.0f}m); its "
            f"CPUStarvation evictions wait {ec.rebalance_grace - (now - since):.0f} s more "
            f"(eviction.cpu.rebalanceGrace {ec.rebalance_grace:g} s) for the scheduler to move offline pods"
        )
    online_pct = 100.0 * online / node.allocatable.cpu if node.allocatable.cpu > 0 else 0.0
    if online_pct < node.watermarks.high("cpu"):
        tier_said = " and the offline tier is not starved" if since is None else ""
        return [], [*notes, (
            f"cpu (satisfaction measure): online pods use {online_pct:.1f} % of allocatable (high watermark "
            f"{node.watermarks.high('cpu')} %){tier_said}: no CPU eviction"
        )], since
    found, wnotes = eviction.watermark_victims(
        pods, recent_pods, recent_kube, node.allocatable, node.watermarks, ("cpu",), mode, Amounts(), now, slack,
        snapshot.unevictable,
    )
    online_said = f"online pods alone use {online_pct:.1f} % of allocatable CPU"
    victims = [eviction.Victim(v.pod, "OnlineCPUHighWatermark", f"{online_said}; {v.detail}") for v in found]
    return victims, [*notes, *wnotes], since


def _victims_section(
    snapshot: Snapshot,
    config: AgentConfig,
    now: float,
    u: _Usage,
    mode: watermarks.Mode,
    live_requests: Amounts,
    evicting: bool,
    c: _Capacity,
    t: tier.TierCpu | None = None,
) -> _Victims:
    """Watermark victims while evicting, then the admission guard's (oversubscription nodes), capped per cycle."""
    node, pods, state, n = snapshot.node, snapshot.pods, snapshot.state, config.eviction.consecutive
    notes: list[str] = []
    victims: list[eviction.Victim] = []
    ec = config.eviction
    rnd = cooldown.Round(snapshot.evicted, cooldown.Cooldowns(ec.cooldown_node, ec.cooldown_workload), now)
    starved_since = None
    if evicting and mode != "off":
        found, wnotes, starved_since = _watermark_victims(snapshot, config, now, u, mode, live_requests, t, rnd)
        victims.extend(found)
        notes.extend(wnotes)
    adm: AdmissionState = state.admission
    history = state.x_history
    if node.oversubscription:
        on_node = Amounts(float(node.published_x.get("cpu") or 0), float(node.published_x.get("memory") or 0))
        hold = admission.x_hold(history, on_node, c.cap.published_x, now, config.eviction.admission_hold)
        total, _online = admission.plain_requests(pods)
        over = admission.overflowing(total, node.allocatable, hold, node.types)
        for _ in u.new:
            adm = admission.step(adm, over)
        for r in over:
            notes.append(
                f"admission guard: {r} plain requests {_fmt(r, total.get(r))} exceed allocatable + X_hold "
                f"{_fmt(r, node.allocatable.get(r) + hold.get(r))} ({adm.overflow(r)}/{n} cycles)"
            )
        found, anotes = admission.victims(
            pods,
            adm,
            n,
            node.allocatable,
            hold,
            node.types,
            already=[v.pod.uid for v in victims],
            skip=snapshot.unevictable,
        )
        victims.extend(rnd.filter(found))
        notes.extend(anotes)
        if c.annotations.keys() & set(X_KEY.values()):
            history = (*history, (now, int(c.cap.published_x.cpu), int(c.cap.published_x.memory)))
    else:
        adm = AdmissionState()
    history = tuple(h for h in history if now - h[0] <= config.eviction.admission_hold)
    if snapshot.unevictable and victims:
        notes.append(f"{len(snapshot.unevictable)} pod(s) skipped as victims: their eviction was refused recently")
    if config.eviction.max_per_cycle and len(victims) > config.eviction.max_per_cycle:
        notes.append(f"{len(victims) - config.eviction.max_per_cycle} eviction(s) deferred by eviction.max_per_cycle")
        rnd.defer([v.pod for v in victims[config.eviction.max_per_cycle :]])
        victims = victims[: config.eviction.max_per_cycle]
    evictions = tuple(
        EvictPod(
            v.pod.uid, v.pod.namespace, v.pod.name, v.reason, ec.grace_period, v.detail, cooldown.workload_of(v.pod)
        )
        for v in victims
    )
    for v in victims:
        notes.append(f"evict {v.pod.key} ({v.reason}): {v.detail}")
    held = rnd.held_except([v.pod for v in victims])
    for h in held:
        notes.append(f"hold {h.key} ({h.reason}): {h.why}")
    return _Victims(evictions, adm, history, tuple(notes), held, starved_since)


@dataclass(frozen=True, slots=True)
class _Knobs:
    """Section 5's result: the knob and process writes, and I/O QoS as decided (its gauges)."""

    cgroup_writes: tuple[SetCgroupValue, ...] = ()
    process_writes: tuple[SetProcessValue, ...] = ()
    io: IoStatus = field(default_factory=IoStatus)
    notes: tuple[str, ...] = ()
    #: the memory guard's limits and the I/O controller's state after this decision (agent.decide.memguard,
    #: agent.decide.iopressure)
    guard: memguard.GuardPlan | None = None
    io_bps: int | None = None
    io_at: float | None = None
    io_said: str = ""


def _memory_wants(
    snapshot: Snapshot, config: AgentConfig, u: _Usage, h: _Hysteresis, cgroups: CgroupState
) -> tuple[tuple[memqos.MemoryWant, ...], tuple[str, ...]]:
    """Memory QoS's values (offline memory.high tightened to the newest working set under pressure)."""
    if not config.memory_qos.enabled:
        return (), ("memoryQoS.enabled is false: no memory knobs (values the agent wrote go back)",)
    last = u.window[-1] if u.window else None
    newest = _MemoryOf(last.pods if last is not None and last.pods else u.view.pods)
    minputs = memqos.MemoryInputs(
        snapshot.node.allocatable.memory, config.capacity.ratio_memory, h.memory, newest, h.memory_reason
    )
    return memqos.plan_memory(snapshot.pods, cgroups, minputs, config.memory_qos)


def _qos_section(
    snapshot: Snapshot, config: AgentConfig, u: _Usage, mode: watermarks.Mode, h: _Hysteresis, t: tier.TierCpu | None
) -> _Knobs:
    """The QoS knobs (memory and I/O QoS included) of a labelled node; with qos.enabled false none, so owned ones go
    back."""
    pods, cgroups = snapshot.pods, snapshot.cgroups
    if mode == "off" or cgroups is None:
        return _Knobs()
    if not config.qos.enabled:
        return _Knobs(
            notes=("qos.enabled is false: no QoS knobs (values the agent wrote before go back to their originals)",)
        )
    notes: list[str] = []
    inputs = qos.QosInputs(t)
    memory, mnotes = _memory_wants(snapshot, config, u, h, cgroups)
    notes.extend(mnotes)
    g = memguard.plan_guard(pods, cgroups, snapshot.tier_sense, config.tier_memory)
    notes.extend(g.notes)
    st = snapshot.state
    io_cfg, io_bps, io_at, io_said = iopressure.decide_io(
        st.tier_io_bps, st.tier_io_at, snapshot.tier_sense, config.io_qos, config.tier_io
    )
    notes.append(io_said)
    io = ioqos.plan_io(pods, cgroups, io_cfg)
    notes.extend(io.notes)
    cgroup_writes, process_writes, qnotes = qos.plan_qos(
        pods, cgroups, inputs, config.qos, (*memory, *g.wants), io.wants
    )
    cgroup_writes = (*cgroup_writes, *g.reclaims)
    notes.extend(qnotes)
    for w in cgroup_writes:
        notes.append(f"write {w.file}={w.value} in {w.path} (now {w.current}): {w.reason}")
    if process_writes:
        notes.append(f"{len(process_writes)} offline process(es) get oom_score_adj={config.qos.oom_score_adj}")
    return _Knobs(cgroup_writes, process_writes, io.status, tuple(notes), g.plan, io_bps, io_at, io_said)


def decide(snapshot: Snapshot, config: AgentConfig, now: float) -> Plan:
    node = snapshot.node
    notes: list[str] = list(snapshot.notes) + list(node.warnings)
    notes.append(_label_sentence(node.colocation, node.oversubscription))
    mode = watermarks.mode_for(node.colocation, node.oversubscription)

    # 1. usage
    u = _usage_section(snapshot, config, now)
    notes.extend(u.notes)
    # 2. watermark hysteresis over the new samples (samples the pressure path took count like any other)
    live_requests = _requests_of_live(snapshot.pods)
    # 1b. the offline tier's CPU ceiling (agent.decide.tier) from the newest sample and the online pods' wait
    td = tier.decide_for(
        snapshot.state.tier_cpu, snapshot.state.tier_at, u.window[-1] if u.window else None, snapshot.pods,
        node.allocatable.cpu, snapshot.online_wait, config.tier, float(config.qos.min_offline_quota), now,
        snapshot.state.tier_wait_base, u.window, min(tier.ALLOWANCE_WINDOW, config.eviction_cpu.window),
    )
    if mode == "off":
        td = tier.TierDecision(None, "no colocation/oversubscription label: no offline tier", None)
    t, tier_said, tier_at = td.cpu, td.reason, td.at
    notes.append(tier_said)
    h = _hysteresis_section(snapshot, config, u, live_requests, mode, t)
    notes.extend(h.notes)
    evicting = h.watermarks.evicting
    # 3. capacity: computed every cycle (U_non by `capacity.policy`); written on capacity ticks, or at once with an
    # evicting change. The usage profiles take the new samples once a minute.
    profiles = snapshot.state.profile
    if profile.due(profiles, now):
        profiles = profile.fold(profiles, snapshot.samples, snapshot.pods, config.profile, now)
    c = _capacity_section(snapshot, config, now, u, evicting, profiles, t)
    notes.extend(c.notes)
    # 4. victims
    v = _victims_section(snapshot, config, now, u, mode, live_requests, evicting, c, t)
    notes.extend(v.notes)
    # 5. QoS knobs
    k = _qos_section(snapshot, config, u, mode, h, t)
    notes.extend(k.notes)

    next_state = replace(
        snapshot.state,
        watermarks=h.watermarks,
        admission=v.admission,
        x_history=v.x_history,
        capacity_due=c.capacity_next,
        pub_history=c.pub_history,
        memory=h.memory,
        profile=profiles,
        tier_cpu=t.ceiling if t is not None else snapshot.state.tier_cpu if config.tier.enabled else None,
        tier_at=tier_at,
        tier_wait_base=td.base,
        tier_io_bps=k.io_bps,
        tier_io_at=k.io_at,
        starved_since=v.starved_since,
    )
    return Plan(
        node=node.name,
        labels=dict(node.labels),
        usage=u.view,
        capacity=c.cap,
        evicting=evicting,
        report=c.report,
        evictions=v.evictions,
        held=v.held,
        cgroup_writes=k.cgroup_writes,
        process_writes=k.process_writes,
        explanations=tuple(notes),
        next_state=next_state,
        capacity_tick=c.tick,
        io=k.io,
        tier=tier.view_of(t, snapshot.online_wait, td.base),
        tier_memory_limit=k.guard.total if k.guard is not None and k.guard.limits else None,
        tier_memory_headroom=k.guard.headroom if k.guard is not None else None,
        online_io_wait=snapshot.tier_sense.io_wait if snapshot.tier_sense is not None else None,
        offline_io_bps=k.io_bps,
        tier_memory_reason="; ".join(g.reason for g in k.guard.limits) if k.guard is not None else "",
        offline_io_reason=k.io_said,
    )


class _MemoryOf(Mapping[PodUID, float]):
    """The memory of each pod's usage, read through (memory QoS needs it only under pressure)."""

    def __init__(self, usage: Mapping[PodUID, Amounts]) -> None:
        self._usage = usage

    def __getitem__(self, key: PodUID) -> float:
        return self._usage[key].memory

    def __iter__(self) -> Iterator[PodUID]:
        return iter(self._usage)

    def __len__(self) -> int:
        return len(self._usage)


def initial_state(evicting: bool, capacity_due: float | None = None) -> AgentState:
    """The state a fresh agent (or `plan`) starts from: evicting iff the Node is marked so; the first
    capacity tick due at `capacity_due` (None: the first decision)."""
    return AgentState(watermarks=WatermarkState(evicting=evicting), capacity_due=capacity_due)
