"""The capacity replay: usage traces through the agent's pure decisions and the scheduler, one policy at a time,
scored on what offline work got and what it cost (docs/capacity-prediction.md).

For each trace (benchmarks/capacity_traces.py) and each policy, step by step (15 s in the shipped traces):

1. usage: the online pods' and the system's usage from the trace; the running offline pods take the CPU left
   (their idle class yields: `A - online - system`, shared by request, at most their request each) and their
   working set; a pod's work advances by the CPU it got;
2. the agent's watermark rule, its own pure functions (`agent.decide.watermarks.step` with one step standing for
   the N samples of 1 s in it; `agent.decide.eviction.watermark_victims` for the victims); memory past
   allocatable OOM-kills offline pods (oom_score_adj 1000) youngest first; an evicted or killed pod is
   resubmitted from scratch, its progress lost;
3. capacity: the policy's B (below), 0 while the node is evicting, published by the agent's rule with its
   defaults (`agent.decide.capacity.move_kind`/`publish_due`/`low_envelope`: a decrease by more than 30 % of the
   value (`urgent_decrease`) past max(10 % of it, 5 % of allocatable), a withdrawal and a reopening from 0 past
   them at once, an increase or a shallower decrease 60 s after the last publication, 60 s resync; with
   `--publish envelope=60` a publication that is not urgent writes the least B of the last 60 s (off by default);
   `--publish KEY=VALUE` changes any `capacity.publish` field, e.g. `--publish urgent_decrease=0`);
4. the scheduler: when a pending offline pod could fit what is published, one session of the real scheduler
   (`scheduler_ext.simulate.simulate`, the shipped volcano-scheduler.conf; `--scheduler fit` uses a first-fit in
   queue order instead, the same on one node with scalar resources, for quick sweeps) over the Node (its
   `kubernetes.io/batch-cpu`/`batch-memory` as published), the online and running offline pods and the queue.

Policies (B = max(0, A x ratio - U) for all, ratio 0.70 CPU / 0.50 memory: the same target utilisation, so
only the estimate U of the online usage differs; each peer's own terms are kept):

- `window-mean`, `window-p95`: U = the mean / p95 of the last 60 s (Tidemark's `window` policy, its two smoothings);
- `profile`: U = `agent.decide.profile.estimate` with the agent's profiles, folded every minute (Tidemark's
  `profile` policy, `capacity.profile.*` defaults unless `--profile KEY=VALUE`);
- `koordinator`: Koordinator's peak prediction (pkg/koordlet/prediction/peak_predictor.go, predict_server.go,
  config.go): decaying histograms per pod, of the system and of the prod class (half-life 12 h CPU, 24 h
  memory; Tidemark's histogram module reproduces pkg/util/histogram), the p95 CPU / p98 memory x 1.10; the
  minimum of its pod predictor (pods in their 24 h cold start reclaim nothing) and its priority predictor,
  each min(capacity - unreclaimable, requests - unreclaimable); capacity here is A x ratio;
- `katalyst`: Katalyst's headroom reporter (pkg/agent/sysadvisor/plugin/qosaware/reporter/manager/resource/
  generic.go, pkg/util/general/window.go, cmd/katalyst-agent/app/options/sysadvisor/qosaware/reporter/
  headroom_reporter.go): the instantaneous budget every 30 s, averaged over a 2-minute window (no report until
  it is full), and each report moving by at least 0.3 core / 300Mi (smaller changes ignored) and at most
  4 cores / 5Gi;
- `cce`: Huawei CCE's pod-profiling oversubscription (its user guide, "Resource Oversubscription Based on Pod
  Profiling": each pod's mean, peak and standard deviation at a confidence level): U = the system's and each
  online pod's mean + 1.645 sigma (95 % one-sided), exponentially weighted over the history (half-life 12 h).

Run: python benchmarks/bench_capacity.py [--traces diurnal,bursty,steps,mixed] [--policies ...] [--days 4]
     [--scheduler simulate|fit] [--trace FILE ...] [--sweep] [--json F] [--plot F]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import capacity_traces as ct  # noqa: E402

from agent.config import CapacityConfig  # noqa: E402
from agent.config_profile import ProfileConfig  # noqa: E402
from agent.decide import eviction, profile, usage, watermarks  # noqa: E402
from agent.decide.capacity import URGENT, low_envelope, move_kind, publish_due, remember  # noqa: E402
from agent.decide.ops import CapacityView  # noqa: E402
from agent.model import EMPTY_HISTOGRAM, Amounts, Histogram, PodView, ProfileState, Sample, WatermarkState  # noqa: E402
from tidemark.apis import PodUID, Resource, Watermarks  # noqa: E402

RATIO: dict[Resource, float] = {"cpu": 0.70, "memory": 0.50}
MARKS = Watermarks((80, 30), (60, 30))
#: the agent's publication rule with its defaults (`capacity.publish.*`: threshold, floor, min_interval,
#: urgent_decrease, envelope, resync); `--publish` replaces it
PUBLISH = CapacityConfig()
QUEUE_CAP = 40
#: an evicted pod runs this long before it is gone (its terminationGracePeriodSeconds, Kubernetes' default)
GRACE = 30.0
WARMUP_DAYS = 1
GiB = 2**30


# --- the policies ---------------------------------------------------------------------------------------------


@dataclass
class Step:
    """What a policy may look at in one step: the time, the online pods' usage, U_non (system + online)."""

    t: int
    now: float
    online: Mapping[str, Amounts]
    u_non: Amounts
    #: the Sample the agent would take over this step (node = U_non + offline, pods incl. offline)
    sample: Sample
    pods: tuple[PodView, ...]


class Policy:
    name = "policy"

    def __init__(self, trace: ct.Trace) -> None:
        self.trace = trace
        self.alloc = Amounts(trace.node_cpu, trace.node_memory)

    def budget(self, s: Step) -> Amounts:
        raise NotImplementedError

    def target(self, r: Resource) -> float:
        return self.alloc.get(r) * RATIO[r]

    def from_u(self, u: Amounts) -> Amounts:
        return Amounts(max(0.0, self.target("cpu") - u.cpu), max(0.0, self.target("memory") - u.memory))


class WindowPolicy(Policy):
    def __init__(self, trace: ct.Trace, how: str) -> None:
        super().__init__(trace)
        self.name = f"window-{how}"
        self.how = how
        self.recent: deque[Amounts] = deque(maxlen=max(1, round(60.0 / trace.step)))

    def budget(self, s: Step) -> Amounts:
        self.recent.append(s.u_non)
        how = "p95" if self.how == "p95" else "mean"
        u = Amounts(
            usage.smooth([a.cpu for a in self.recent], how),  # type: ignore[arg-type]
            usage.smooth([a.memory for a in self.recent], how),  # type: ignore[arg-type]
        )
        return self.from_u(u)


class ProfilePolicy(Policy):
    def __init__(self, trace: ct.Trace, cfg: ProfileConfig, name: str = "profile", headroom: bool = True) -> None:
        super().__init__(trace)
        self.name = name
        self.cfg = cfg
        self.headroom = headroom
        self.state = ProfileState()
        self.samples: list[Sample] = []
        self.recent: deque[Amounts] = deque(maxlen=max(1, round(60.0 / trace.step)))
        self.last: profile.Estimate | None = None

    def budget(self, s: Step) -> Amounts:
        self.samples.append(s.sample)
        self.recent.append(s.u_non)
        if profile.due(self.state, s.now):
            self.state = profile.fold(self.state, self.samples, s.pods, self.cfg, s.now)
            self.samples = []
        window = Amounts(
            sum(a.cpu for a in self.recent) / len(self.recent), sum(a.memory for a in self.recent) / len(self.recent)
        )
        usage_now = {PodUID(k): v for k, v in s.online.items()}
        room = profile.headroom(self.alloc, Amounts(MARKS.high("cpu"), MARKS.high("memory")),
                                Amounts(RATIO["cpu"], RATIO["memory"])) if self.headroom else Amounts()  # fmt: skip
        est = profile.estimate(self.state, window, s.pods, usage_now, self.cfg, "profile", s.now, room)
        self.last = est
        return self.from_u(est.u_non)


class KoordinatorPolicy(Policy):
    """pkg/koordlet/prediction: see the module docstring."""

    name = "koordinator"
    HALF: ClassVar[dict[Resource, float]] = {"cpu": 12 * 3600.0, "memory": 24 * 3600.0}
    Q: ClassVar[dict[Resource, float]] = {"cpu": 0.95, "memory": 0.98}
    MARGIN = 1.10
    COLD = 24 * 3600.0

    def __init__(self, trace: ct.Trace) -> None:
        super().__init__(trace)
        self.pods: dict[str, dict[Resource, Histogram]] = {}
        self.sys: dict[Resource, Histogram] = {"cpu": EMPTY_HISTOGRAM, "memory": EMPTY_HISTOGRAM}
        self.prod: dict[Resource, Histogram] = {"cpu": EMPTY_HISTOGRAM, "memory": EMPTY_HISTOGRAM}
        self.acc: list[Step] = []
        self.last_train = -math.inf
        self.cached = Amounts()

    def _train(self, now: float) -> None:
        """TrainingInterval 1 min: the minute's mean of each pod, of the prod class and of the system."""
        n = len(self.acc)
        names = {k for s in self.acc for k in s.online}
        for k in names:
            hs = self.pods.setdefault(k, {"cpu": EMPTY_HISTOGRAM, "memory": EMPTY_HISTOGRAM})
            for r in ("cpu", "memory"):
                v = sum(s.online[k].get(r) for s in self.acc if k in s.online) / n
                hs[r] = profile.add(hs[r], r, v, 1.0, now, self.HALF[r])
        for r in ("cpu", "memory"):
            prod = sum(sum(a.get(r) for a in s.online.values()) for s in self.acc) / n
            sys_u = sum(s.u_non.get(r) for s in self.acc) / n - prod
            self.prod[r] = profile.add(self.prod[r], r, prod, 1.0, now, self.HALF[r])
            self.sys[r] = profile.add(self.sys[r], r, max(0.0, sys_u), 1.0, now, self.HALF[r])
        self.acc = []

    def budget(self, s: Step) -> Amounts:
        self.acc.append(s)
        if s.now - self.last_train >= 60.0:
            self._train(s.now)
            self.last_train = s.now
            self.cached = self._predict(s)
        return self.cached

    def _predict(self, s: Step) -> Amounts:
        out: dict[Resource, float] = {}
        online = [p for p in s.pods if not p.offline]
        for r in ("cpu", "memory"):
            cap = self.target(r)
            q, m = self.Q[r], self.MARGIN
            # podReclaimablePredictor: warm pods only
            unrecl = recl = 0.0
            for p in online:
                if s.now - p.created <= self.COLD or p.name not in self.pods:
                    continue
                peak = m * profile.percentile(self.pods[p.name][r], r, q)
                unrecl += peak
                recl += max(0.0, p.requests.get(r) - peak)
            by_pod = min(max(0.0, cap - unrecl), recl)
            # priorityReclaimablePredictor: the system's and the prod class's histograms, every pod's request
            unrecl_prio = m * (profile.percentile(self.sys[r], r, q) + profile.percentile(self.prod[r], r, q))
            requests = sum(p.requests.get(r) for p in online)
            by_prio = min(max(0.0, cap - unrecl_prio), max(0.0, requests - unrecl_prio))
            out[r] = min(by_pod, by_prio)
        return Amounts.of(out)


class KatalystPolicy(Policy):
    """Katalyst's GenericHeadroomManager + CappedSmoothWindow: see the module docstring."""

    name = "katalyst"
    SYNC = 30.0
    WINDOW = 120.0
    MIN_STEP: ClassVar[dict[Resource, float]] = {"cpu": 300.0, "memory": 300.0 * 2**20}
    MAX_STEP: ClassVar[dict[Resource, float]] = {"cpu": 4000.0, "memory": 5.0 * GiB}

    def __init__(self, trace: ct.Trace) -> None:
        super().__init__(trace)
        size = int(self.WINDOW / self.SYNC)
        self.window: dict[Resource, deque[float]] = {r: deque(maxlen=size) for r in ("cpu", "memory")}
        self.last: dict[Resource, float | None] = {"cpu": None, "memory": None}
        self.next_sync = -math.inf
        self.report = Amounts()

    def budget(self, s: Step) -> Amounts:
        if s.now < self.next_sync:
            return self.report
        self.next_sync = s.now + self.SYNC
        raw = self.from_u(s.u_non)
        out: dict[Resource, float] = {}
        for r in ("cpu", "memory"):
            w = self.window[r]
            w.append(raw.get(r))
            cur = sum(w) / len(w) if len(w) == w.maxlen else None  # averageWithTTLSmoothWindow: full or nil
            last = self.last[r]
            if cur is None:
                cur = last
            elif last is None:
                self.last[r] = cur
            else:
                step = abs(cur - last)
                if step < self.MIN_STEP[r]:
                    cur = last
                elif step > self.MAX_STEP[r]:
                    cur = last + math.copysign(self.MAX_STEP[r], cur - last)
                    self.last[r] = cur
                else:
                    self.last[r] = cur
            out[r] = cur if cur is not None else 0.0
        self.report = Amounts.of(out)
        return self.report


class CcePolicy(Policy):
    """CCE's pod profiling: mean + z sigma per pod and of the system (see the module docstring)."""

    name = "cce"
    Z = 1.645
    HALF = 12 * 3600.0

    def __init__(self, trace: ct.Trace) -> None:
        super().__init__(trace)
        self.stats: dict[str, list[float]] = {}  # key -> [weight, mean_cpu, m2_cpu, mean_mem, m2_mem]
        self.acc: list[Step] = []
        self.last_fold = -math.inf
        self.cached = Amounts()

    def _update(self, key: str, cpu: float, mem: float, decay: float) -> None:
        st = self.stats.get(key)
        if st is None:
            self.stats[key] = [1.0, cpu, 0.0, mem, 0.0]
            return
        w = st[0] * decay + 1.0
        for i, v in ((1, cpu), (3, mem)):  # exponentially weighted mean and variance (West's update)
            delta = v - st[i]
            st[i] += delta / w
            st[i + 1] = st[i + 1] * decay + delta * (v - st[i])
        st[0] = w

    def budget(self, s: Step) -> Amounts:
        self.acc.append(s)
        if s.now - self.last_fold < 60.0:
            return self.cached
        decay = 2.0 ** (-(s.now - self.last_fold) / self.HALF) if self.last_fold > -math.inf else 1.0
        self.last_fold = s.now
        n = len(self.acc)
        names = {k for st in self.acc for k in st.online}
        for k in names:
            self._update(
                k,
                sum(st.online[k].cpu for st in self.acc if k in st.online) / n,
                sum(st.online[k].memory for st in self.acc if k in st.online) / n,
                decay,
            )
        prod = [sum(sum(a.get(r) for a in st.online.values()) for st in self.acc) / n for r in ("cpu", "memory")]
        self._update(
            "@system",
            sum(st.u_non.cpu for st in self.acc) / n - prod[0],
            sum(st.u_non.memory for st in self.acc) / n - prod[1],
            decay,
        )
        self.acc = []
        live = set(s.online) | {"@system"}
        u = [0.0, 0.0]
        for k in live:
            st = self.stats[k]
            for j, i in enumerate((1, 3)):
                var = st[i + 1] / st[0] if st[0] > 0 else 0.0
                u[j] += st[i] + self.Z * math.sqrt(max(0.0, var))
        self.cached = self.from_u(Amounts(u[0], u[1]))
        return self.cached


def make_policy(name: str, trace: ct.Trace, cfg: ProfileConfig) -> Policy:
    if name in ("window-mean", "window-p95"):
        return WindowPolicy(trace, name.split("-")[1])
    if name == "profile" or name.startswith("profile:"):
        return ProfilePolicy(trace, cfg, name, headroom=not name.endswith("no-headroom"))
    return {"koordinator": KoordinatorPolicy, "katalyst": KatalystPolicy, "cce": CcePolicy}[name](trace)


POLICIES = ("window-mean", "window-p95", "profile", "koordinator", "katalyst", "cce")


# --- the scheduler ----------------------------------------------------------------------------------------------


@dataclass
class Job:
    spec: ct.OfflinePod
    key: str
    queued: int
    start: int = -1
    progress: float = 0.0
    cpu: float = 0.0
    #: the step an evicted pod is gone at (it still runs, released, until then)
    gone: int = -1


def _pod_obj(key: str, cpu: float, mem: float, *, batch: bool, node: str | None, created: float) -> dict[str, Any]:
    res = {"kubernetes.io/batch-cpu": str(int(cpu)), "kubernetes.io/batch-memory": str(int(mem))} if batch else {
        "cpu": f"{int(cpu)}m", "memory": str(int(mem))}  # fmt: skip
    ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    spec: dict[str, Any] = {"schedulerName": "volcano", "containers": [{"name": "c", "resources": {
        "requests": res, "limits": res}}]}  # fmt: skip
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": key,
            "namespace": "replay",
            "uid": key,
            "creationTimestamp": ts,
            "annotations": {"volcano.sh/qos-level": "BE"} if batch else {},
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


class Scheduler:
    """The real scheduler in-process (`simulate`), or a first fit in queue order (`fit`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.calls = 0
        self.seconds = 0.0
        if kind == "simulate":
            from scheduler_ext.actions.registry import ACTIONS
            from scheduler_ext.framework.conf import load_conf
            from scheduler_ext.plugins.registry import PLUGINS
            from scheduler_ext.simulate import simulate

            self.conf, _ = load_conf(str(REPO / "scheduler_ext" / "volcano-scheduler.conf"), ACTIONS, PLUGINS)
            self.actions, self.plugins, self.simulate = ACTIONS, PLUGINS, simulate

    def place(
        self,
        trace: ct.Trace,
        published: Amounts,
        online: Sequence[tuple[str, float, float]],
        running: Sequence[Job],
        pending: Sequence[Job],
        now: float,
    ) -> list[Job]:
        self.calls += 1
        t0 = time.perf_counter()
        try:
            if self.kind == "fit":
                return self._fit(published, running, pending)
            return self._simulate(trace, published, online, running, pending, now)
        finally:
            self.seconds += time.perf_counter() - t0

    @staticmethod
    def _fit(published: Amounts, running: Sequence[Job], pending: Sequence[Job]) -> list[Job]:
        free_cpu = published.cpu - sum(j.spec.request_cpu for j in running)
        free_mem = published.memory - sum(j.spec.request_memory for j in running)
        out = []
        for j in pending:
            if j.spec.request_cpu <= free_cpu and j.spec.request_memory <= free_mem:
                free_cpu -= j.spec.request_cpu
                free_mem -= j.spec.request_memory
                out.append(j)
        return out

    def _simulate(
        self,
        trace: ct.Trace,
        published: Amounts,
        online: Sequence[tuple[str, float, float]],
        running: Sequence[Job],
        pending: Sequence[Job],
        now: float,
    ) -> list[Job]:
        node = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"name": "n1", "labels": {"volcano.sh/colocation": "true"}},
            "status": {
                "allocatable": {
                    "cpu": f"{int(trace.node_cpu)}m",
                    "memory": str(int(trace.node_memory)),
                    "pods": "110",
                    "kubernetes.io/batch-cpu": str(int(published.cpu)),
                    "kubernetes.io/batch-memory": str(int(published.memory)),
                }
            },
        }
        objects = [node]
        objects += [_pod_obj(k, c, m, batch=False, node="n1", created=now - 86400) for k, c, m in online]
        objects += [_pod_obj(j.key, j.spec.request_cpu, j.spec.request_memory, batch=True, node="n1",
                             created=now) for j in running]  # fmt: skip
        by_key = {}
        for j in pending:
            objects.append(_pod_obj(j.key, j.spec.request_cpu, j.spec.request_memory, batch=True, node=None,
                                    created=trace.start + j.queued * trace.step))  # fmt: skip
            by_key[f"replay/{j.key}"] = j
        result = self.simulate(objects, self.conf, self.actions, self.plugins, now=now)
        return [by_key[k] for k in result.binds if k in by_key]


# --- the replay -------------------------------------------------------------------------------------------------


@dataclass
class Score:
    trace: str
    policy: str
    hours: float
    offered_core_hours: float = 0.0
    offered_gib_hours: float = 0.0
    used_core_hours: float = 0.0
    lost_core_hours: float = 0.0
    completed_core_hours: float = 0.0
    evicted_pods: int = 0
    oom_kills: int = 0
    completed_pods: int = 0
    violation_minutes_cpu: float = 0.0
    violation_minutes_memory: float = 0.0
    unavoidable_minutes: float = 0.0
    capacity_changes: int = 0
    #: the sum of |change| of the published batch-cpu (milli-cores): how far the capacity swung
    swing_milli: float = 0.0
    evicting_hours: float = 0.0
    dropped_arrivals: int = 0
    scheduler_calls: int = 0
    series: dict[str, list[float]] = field(default_factory=dict)

    @property
    def useful_core_hours(self) -> float:
        return self.used_core_hours - self.lost_core_hours

    def to_json(self) -> dict[str, Any]:
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items() if k != "series"}
        out["useful_core_hours"] = round(self.useful_core_hours, 3)
        out["changes_per_hour"] = round(self.capacity_changes / self.hours, 3) if self.hours else 0.0
        out["swing_cores_per_hour"] = round(self.swing_milli / 1000 / self.hours, 3) if self.hours else 0.0
        return out


def _online_views(trace: ct.Trace) -> list[PodView]:
    return [
        PodView(
            uid=PodUID(p.name),
            namespace="online",
            name=p.name,
            qos_level=0,
            qos_class="Burstable",
            created=trace.start + p.created * trace.step if p.created >= 0 else trace.start - 30 * 86400,
            requests=Amounts(p.request_cpu, p.request_memory),
        )
        for p in trace.online
    ]


def _share_cpu(running: Sequence[Job], free: float) -> None:
    """Offline pods are in the idle class: they share what online pods and the system leave, by request."""
    want = sum(j.spec.request_cpu for j in running)
    scale = 1.0 if want <= free else max(0.0, free) / want
    for j in running:
        j.cpu = j.spec.request_cpu * scale


def replay(trace: ct.Trace, policy: Policy, scheduler: Scheduler, *, series_every: int = 0) -> Score:
    """One policy over one trace (see the module docstring)."""
    run = _Replay(trace, policy, scheduler, series_every)
    for t in range(trace.steps):
        run.tick(t)
    run.score.scheduler_calls = scheduler.calls
    return run.score


class _Replay:
    """The node of one replay, one step at a time: offline arrivals, usage, the watermark rule and OOM kills,
    the published capacity, the scheduler."""

    def __init__(self, trace: ct.Trace, policy: Policy, scheduler: Scheduler, series_every: int) -> None:
        self.trace, self.policy, self.scheduler, self.series_every = trace, policy, scheduler, series_every
        self.step = trace.step
        self.alloc = Amounts(trace.node_cpu, trace.node_memory)
        self.warmup = int(WARMUP_DAYS * 86400 / self.step) if trace.steps * self.step > 2 * 86400 else 0
        self.score = Score(trace.name, policy.name, (trace.steps - self.warmup) * self.step / 3600.0)
        self.views = _online_views(trace)
        self.arrivals: dict[int, list[ct.OfflinePod]] = {}
        for p in trace.offline:
            self.arrivals.setdefault(p.arrival, []).append(p)
        self.pending: list[Job] = []
        self.running: list[Job] = []
        self.terminating: list[Job] = []
        self.seq = 0
        self.wm = WatermarkState()
        self.published: Amounts | None = None
        self.last_publish = -math.inf
        self.history: tuple[tuple[float, Amounts, Amounts], ...] = ()
        self.offline_views: dict[str, PodView] = {}
        self.dirty = True

    def tick(self, t: int) -> None:
        trace, alloc = self.trace, self.alloc
        now = trace.start + t * self.step
        scored = t >= self.warmup
        self._arrive(t, scored)
        online: dict[str, Amounts] = {}
        live_views: list[PodView] = []
        for pod, view in zip(trace.online, self.views):
            c, m = pod.cpu[t], pod.memory[t]
            if c is None or m is None or (pod.deleted is not None and t >= pod.deleted):
                continue
            online[pod.name] = Amounts(c, m)
            live_views.append(view)
        on = Amounts(sum(a.cpu for a in online.values()), sum(a.memory for a in online.values()))
        system = Amounts(trace.system_cpu[t], trace.system_memory[t])
        # 1. usage (evicted pods run, released, until their grace period ends)
        self.terminating = [j for j in self.terminating if j.gone > t]
        _share_cpu([*self.running, *self.terminating], alloc.cpu - on.cpu - system.cpu)
        self._progress(scored)
        # 2. the watermark rule, OOM kills
        off = Amounts(
            sum(j.cpu for j in self.running) + sum(j.cpu for j in self.terminating),
            sum(j.spec.memory for j in self.running) + sum(j.spec.memory for j in self.terminating),
        )
        kube = Amounts(on.cpu + off.cpu, on.memory + off.memory)
        requests = Amounts(sum(v.requests.cpu for v in live_views), sum(v.requests.memory for v in live_views))
        self._watermarks(t, now, scored, on, system, kube, requests)
        # 3. capacity
        published = self._capacity(t, now, scored, online, live_views, on, system, off, kube)
        if self.series_every and t % self.series_every == 0:
            for k, v in (
                ("published_cpu", published.cpu),
                ("online_cpu", on.cpu + system.cpu),
                ("offline_cpu", off.cpu),
                ("evicting", float(self.wm.evicting)),
            ):
                self.score.series.setdefault(k, []).append(round(v, 1))
        # 4. the scheduler, when something may fit
        self._schedule(t, now, published, online, live_views)

    def _arrive(self, t: int, scored: bool) -> None:
        """The offline pods submitted at `t` join the queue (dropped past QUEUE_CAP)."""
        for p in self.arrivals.get(t, ()):
            if len(self.pending) >= QUEUE_CAP:
                self.score.dropped_arrivals += scored
                continue
            self.seq += 1
            self.pending.append(Job(p, f"{p.name}-a{self.seq}", t))
            self.dirty = True

    def _progress(self, scored: bool) -> None:
        """The running offline pods work for one step at the CPU they got; the ones done leave."""
        score, step = self.score, self.step
        finished = []
        for j in self.running:
            j.progress += j.cpu * step
            if scored:
                score.used_core_hours += j.cpu * step / 3.6e6
            if j.progress >= j.spec.work:
                finished.append(j)
        for j in finished:
            self.running.remove(j)
            self.offline_views.pop(j.key, None)
            if scored:
                score.completed_pods += 1
                score.completed_core_hours += j.spec.work / 3.6e6
            self.dirty = True

    def _watermarks(
        self, t: int, now: float, scored: bool, on: Amounts, system: Amounts, kube: Amounts, requests: Amounts
    ) -> None:
        """The agent's watermark rule and the kernel's OOM killer; violations: the node past a high watermark (or
        memory past allocatable) because of offline pods, online alone under it. Victims are resubmitted."""
        alloc, score, step, trace = self.alloc, self.score, self.step, self.trace
        running, terminating = self.running, self.terminating
        on_cpu, on_mem, sys_mem = on.cpu, on.memory, system.memory
        pct = Amounts(100 * kube.cpu / alloc.cpu, 100 * kube.memory / alloc.memory)
        if scored:
            if 100 * on_cpu >= MARKS.high("cpu") * alloc.cpu or 100 * on_mem >= MARKS.high("memory") * alloc.memory:
                score.unavoidable_minutes += step / 60
            else:
                if pct.cpu >= MARKS.high("cpu"):
                    score.violation_minutes_cpu += step / 60
                if pct.memory >= MARKS.high("memory") or kube.memory + sys_mem > alloc.memory:
                    score.violation_minutes_memory += step / 60
        self.wm = watermarks.step(self.wm, pct, requests, alloc, MARKS, "usage", 1)
        victims: list[Job] = []
        if self.wm.evicting and running:
            pressured = watermarks.over_resources(pct, requests, alloc, MARKS, "usage")
            jobs = {j.key: j for j in running}
            for j in running:
                if j.key not in self.offline_views:
                    self.offline_views[j.key] = PodView(PodUID(j.key), "replay", j.key, -1, "BestEffort",
                                                        created=trace.start + j.start * step)  # fmt: skip
            pods = [self.offline_views[j.key] for j in running] + [
                PodView(PodUID(j.key), "replay", j.key, -1, "BestEffort", deletion=trace.start + j.gone * step)
                for j in terminating
            ]
            use = {PodUID(j.key): Amounts(j.cpu, j.spec.memory) for j in [*running, *terminating]}
            found, _ = eviction.watermark_victims(pods, use, kube, alloc, MARKS, pressured, "usage", requests, now,
                                                  10.0)  # fmt: skip
            victims = [jobs[v.pod.uid] for v in found]
        while on_mem + sys_mem + sum(j.spec.memory for j in [*running, *terminating] if j not in victims) > alloc.memory:  # noqa: E501
            if terminating:  # the kernel takes an offline pod that is on its way out first: gone now
                terminating.pop().gone = t
                continue
            alive = [j for j in running if j not in victims]
            if not alive:
                break
            youngest = max(alive, key=lambda j: (j.start, j.key))
            victims.append(youngest)
            score.oom_kills += scored
        for j in victims:
            running.remove(j)
            self.offline_views.pop(j.key, None)
            j.gone = t + max(1, math.ceil(GRACE / step))
            terminating.append(j)
            if scored:
                score.evicted_pods += 1
                score.lost_core_hours += j.progress / 3.6e6
            self.seq += 1
            self.pending.append(Job(j.spec, f"{j.spec.name}-a{self.seq}", t))  # resubmitted, from scratch
            self.dirty = True

    def _capacity(
        self,
        t: int,
        now: float,
        scored: bool,
        online: Mapping[str, Amounts],
        live_views: Sequence[PodView],
        on: Amounts,
        system: Amounts,
        off: Amounts,
        kube: Amounts,
    ) -> Amounts:
        """The policy's batch capacity, published as the agent publishes it (a move past the threshold, or the
        resync); returns what is published."""
        score, step = self.score, self.step
        on_cpu, on_mem, sys_cpu, sys_mem = on.cpu, on.memory, system.cpu, system.memory
        offline_usage = {PodUID(j.key): Amounts(j.cpu, j.spec.memory) for j in self.running}
        sample = Sample(
            now,
            step,
            Amounts(on_cpu + sys_cpu + off.cpu, on_mem + sys_mem + off.memory),
            kube,
            {**{PodUID(k): v for k, v in online.items()}, **offline_usage},
        )
        pods_now = tuple(live_views) + tuple(
            self.offline_views.get(j.key) or PodView(PodUID(j.key), "replay", j.key, -1, "BestEffort")
            for j in self.running
        )
        u_non = Amounts(on_cpu + sys_cpu, on_mem + sys_mem)
        b = self.policy.budget(Step(t, now, online, u_non, sample, pods_now))
        if self.wm.evicting:
            b = Amounts()
        b = Amounts(float(int(b.cpu)), float(int(b.memory)))
        published = self.published
        kinds = [
            move_kind(None if published is None else int(published.get(r)), int(b.get(r)), PUBLISH.publish_threshold,
                      PUBLISH.publish_floor * self.alloc.get(r), PUBLISH.urgent_decrease)
            for r in ("cpu", "memory")
        ]  # fmt: skip
        newest = CapacityView(published_batch=b)
        due = publish_due(kinds, None if published is None else now - self.last_publish, PUBLISH)
        if due and PUBLISH.envelope > 0 and not any(k in URGENT for k in kinds):
            b = low_envelope(self.history, newest).published_batch
        self.history = remember(self.history, newest, now, PUBLISH.envelope)
        if due:
            if published is not None and scored:  # a change: what is written moved past the threshold
                score.capacity_changes += move_kind(int(published.cpu), int(b.cpu), PUBLISH.publish_threshold,
                                                    PUBLISH.publish_floor * self.alloc.cpu) is not None
                score.swing_milli += abs(b.cpu - published.cpu)
            if published != b:
                self.dirty = True
            published, self.last_publish = b, now
            self.published = published
        if scored:
            score.offered_core_hours += published.cpu * step / 3.6e6
            score.offered_gib_hours += published.memory * step / 3600 / GiB
            score.evicting_hours += step / 3600 if self.wm.evicting else 0.0
        return published

    def _schedule(
        self, t: int, now: float, published: Amounts, online: Mapping[str, Amounts], live_views: Sequence[PodView]
    ) -> None:
        """The scheduler places pending pods when something changed and one of them may fit."""
        running, pending = self.running, self.pending
        if not (pending and self.dirty):
            return
        self.dirty = False
        free_cpu = published.cpu - sum(j.spec.request_cpu for j in running)
        free_mem = published.memory - sum(j.spec.request_memory for j in running)
        if any(j.spec.request_cpu <= free_cpu and j.spec.request_memory <= free_mem for j in pending):
            placed = self.scheduler.place(
                self.trace,
                published,
                [(k, v.requests.cpu, v.requests.memory) for k, v in zip(online, live_views)],
                running,
                pending,
                now,
            )
            for j in placed:
                pending.remove(j)
                j.start = t
                running.append(j)


# --- the comparison ----------------------------------------------------------------------------------------------


T = TypeVar("T", CapacityConfig, ProfileConfig)


def _with_overrides(cfg: T, overrides: Iterable[str]) -> T:
    """`cfg` with `FIELD=VALUE` overrides (numeric fields; an unknown one raises TypeError)."""
    for item in overrides:
        key, _, value = item.partition("=")
        cfg = replace(cfg, **{key: float(value)})
    return cfg


def publish_config(overrides: Iterable[str]) -> CapacityConfig:
    """The agent's publication rule (`capacity.publish.*`, CapacityConfig's fields) with `--publish` overrides."""
    return _with_overrides(CapacityConfig(), overrides)


def profile_config(overrides: Iterable[str]) -> ProfileConfig:
    return _with_overrides(ProfileConfig(), overrides)


SWEEP: tuple[tuple[str, dict[str, float]], ...] = (
    ("horizon=0", {"horizon": 0.0}),
    ("horizon=2h", {"horizon": 2 * 3600.0}),
    ("horizon=8h", {"horizon": 8 * 3600.0}),
    ("p99", {"percentile_cpu": 0.99}),
    ("margin=1.2", {"margin": 1.2}),
    ("cold-start=24h", {"cold_start": 24 * 3600.0}),  # Koordinator's cold start
    ("no-headroom", {}),  # U = max(W, P): the peak planned under the target ratio, not the watermark
)


def run_all(
    traces: Sequence[ct.Trace],
    policies: Sequence[str],
    cfg: ProfileConfig,
    scheduler_kind: str,
    sweep: bool,
    log: Callable[[str], None] = lambda line: print(line, flush=True),
) -> list[Score]:
    scores: list[Score] = []
    runs: list[tuple[str, ProfileConfig]] = [(p, cfg) for p in policies]
    if sweep:
        runs += [(f"profile:{label}", replace(cfg, **kw)) for label, kw in SWEEP]  # type: ignore[arg-type]
    for trace in traces:
        for name, c in runs:
            t0 = time.perf_counter()
            sched = Scheduler(scheduler_kind)
            s = replay(trace, make_policy(name, trace, c), sched, series_every=int(600 / trace.step))
            log(
                f"  {trace.name:8s} {name:20s} offered {s.offered_core_hours:7.1f} used {s.used_core_hours:7.1f} "
                f"lost {s.lost_core_hours:6.1f} core-h, evicted {s.evicted_pods:3d}, violations "
                f"{s.violation_minutes_cpu:5.1f}/{s.violation_minutes_memory:5.1f} min, changes/h "
                f"{s.capacity_changes / s.hours:5.2f} ({time.perf_counter() - t0:.0f} s, {sched.calls} sessions, "
                f"{sched.seconds:.0f} s in the scheduler)",
            )
            scores.append(s)
    return scores


SUMMED = (
    "offered_core_hours",
    "used_core_hours",
    "lost_core_hours",
    "completed_core_hours",
    "violation_minutes_cpu",
    "violation_minutes_memory",
    "evicting_hours",
    "hours",
    "offered_gib_hours",
    "swing_milli",
)


def totals(scores: Sequence[Score]) -> dict[str, dict[str, float]]:
    """Per policy, summed over the traces."""
    out: dict[str, dict[str, float]] = {}
    for s in scores:
        d = out.setdefault(s.policy, {})
        for k in SUMMED:
            d[k] = d.get(k, 0.0) + float(getattr(s, k))
        d["useful_core_hours"] = d.get("useful_core_hours", 0.0) + s.useful_core_hours
        d["evicted_pods"] = d.get("evicted_pods", 0.0) + s.evicted_pods
        d["capacity_changes"] = d.get("capacity_changes", 0.0) + s.capacity_changes
    for d in out.values():
        d["changes_per_hour"] = d["capacity_changes"] / d["hours"] if d["hours"] else 0.0
        d["swing_cores_per_hour"] = d["swing_milli"] / 1000 / d["hours"] if d["hours"] else 0.0
    return out


def table(scores: Sequence[Score]) -> str:
    head = (
        "| trace | policy | offered core-h | used core-h | lost core-h | useful core-h | evicted pods | "
        "violations cpu / mem (min) | changes / h | swing cores / h | evicting h |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {s.trace} | {s.policy} | {s.offered_core_hours:.0f} | {s.used_core_hours:.0f} | {s.lost_core_hours:.1f} | "
        f"{s.useful_core_hours:.0f} | {s.evicted_pods} | {s.violation_minutes_cpu:.1f} / "
        f"{s.violation_minutes_memory:.1f} | {s.capacity_changes / s.hours:.2f} | "
        f"{s.swing_milli / 1000 / s.hours:.2f} | {s.evicting_hours:.1f} |"
        for s in scores
    ]
    tot = totals(scores)
    rows += [
        f"| **all** | {p} | {d['offered_core_hours']:.0f} | {d['used_core_hours']:.0f} | {d['lost_core_hours']:.1f} | "
        f"{d['useful_core_hours']:.0f} | {d['evicted_pods']:.0f} | {d['violation_minutes_cpu']:.1f} / "
        f"{d['violation_minutes_memory']:.1f} | {d['changes_per_hour']:.2f} | {d['swing_cores_per_hour']:.2f} | "
        f"{d['evicting_hours']:.1f} |"
        for p, d in tot.items()
    ]
    return head + "\n" + "\n".join(rows)


PEERS = ("koordinator", "katalyst", "cce")


def goals(scores: Sequence[Score], chosen: str) -> dict[str, Any]:
    """The issue's goals for `chosen` against the best peer (the peer with the most useful core-hours)."""
    tot = totals(scores)
    peers = [p for p in PEERS if p in tot]
    if chosen not in tot or not peers:
        return {}
    best = max(peers, key=lambda p: tot[p]["useful_core_hours"])
    mine, theirs = tot[chosen], tot[best]
    least_violations = min(tot[p]["violation_minutes_cpu"] + tot[p]["violation_minutes_memory"] for p in peers)
    return {
        "chosen": chosen,
        "best_peer": best,
        "offered_at_least_best_peer": mine["offered_core_hours"] >= theirs["offered_core_hours"],
        "lost_at_most_half_of_best_peer": mine["lost_core_hours"] <= 0.5 * theirs["lost_core_hours"],
        "violations_no_more_than_peers": mine["violation_minutes_cpu"] + mine["violation_minutes_memory"]
        <= least_violations,
        "figures": {"chosen": mine, "best_peer": theirs},
    }


def plot(scores: Sequence[Score], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(s.trace for s in scores))
    policies = [p for p in dict.fromkeys(s.policy for s in scores) if not p.startswith("profile:")]
    fig, axes = plt.subplots(len(traces) + 1, 1, figsize=(12, 3.2 * (len(traces) + 1)))
    for ax, tr in zip(axes, traces):
        first = next(s for s in scores if s.trace == tr)
        n = len(first.series.get("online_cpu", []))
        hours = [i * 600 / 3600 for i in range(n)]
        ax.plot(hours, [v / 1000 for v in first.series["online_cpu"]], color="black", lw=1, label="online + system")
        for p in policies:
            s = next(x for x in scores if x.trace == tr and x.policy == p)
            ax.plot(hours, [v / 1000 for v in s.series["published_cpu"]], lw=1, label=f"B {p}")
        ax.axvline(WARMUP_DAYS * 24, color="grey", ls=":")
        ax.set_title(f"{tr}: published batch-cpu (cores) per policy; left of the dotted line: warm-up, not scored")
        ax.set_xlabel("hour")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
    tot = totals(scores)
    ax = axes[-1]
    xs = range(len(policies))
    width = 0.2
    bars = (
        ("offered_core_hours", "offered"),
        ("used_core_hours", "used"),
        ("useful_core_hours", "useful"),
        ("lost_core_hours", "lost x 10"),
    )
    for k, (key, label) in enumerate(bars):
        vals = [tot[p][key] * (10 if key == "lost_core_hours" else 1) for p in policies]
        ax.bar([x + (k - 1.5) * width for x in xs], vals, width, label=label)
    ax.set_xticks(list(xs), policies)
    ax.set_title("all traces: offline core-hours (lost scaled x 10)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=",".join(ct.TRACES), help="shipped traces to generate (comma-separated)")
    ap.add_argument("--trace", action="append", default=[], help="a trace file (docs/capacity-prediction.md)")
    ap.add_argument("--offline", choices=("trace", "generated"), default="trace",
                    help="generated: add the seeded batch arrivals to --trace files")  # fmt: skip
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--days", type=float, default=4.0)
    ap.add_argument("--seeds", default="1,2", help="trace seeds (comma-separated): each shipped trace once per seed")
    ap.add_argument("--scheduler", choices=("simulate", "fit"), default="simulate")
    ap.add_argument("--profile", action="append", default=[], metavar="FIELD=VALUE",
                    help="a ProfileConfig field for the profile policy (e.g. horizon=7200)")  # fmt: skip
    ap.add_argument("--publish", action="append", default=[], metavar="FIELD=VALUE",
                    help="a capacity.publish field of the agent's rule (CapacityConfig), e.g. envelope=0")
    ap.add_argument("--sweep", action="store_true", help="also run the profile policy's parameter sweep")
    ap.add_argument("--chosen", default="profile", help="the policy the goals are checked for")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="write the plot here (matplotlib)")
    args = ap.parse_args(argv)
    global PUBLISH
    try:
        PUBLISH = publish_config(args.publish)
    except (TypeError, ValueError) as e:
        print(f"bench_capacity: error: --publish: {e}", file=sys.stderr)
        return 2
    seeds = [int(x) for x in args.seeds.split(",") if x]
    traces = []
    for seed in seeds:
        for n in (x for x in args.traces.split(",") if x):
            tr = ct.generate(n, seed=seed, days=args.days)
            if len(seeds) > 1:
                tr.name = f"{n}#{seed}"
            traces.append(tr)
    for path in args.trace:
        try:
            tr = ct.load(path)
        except ct.TraceError as e:  # a named error and exit 2, never a traceback (docs/capacity-prediction.md)
            print(f"bench_capacity: error: trace {e}", file=sys.stderr)
            return 2
        traces.append(ct.with_generated_offline(tr) if args.offline == "generated" else tr)
    cfg = profile_config(args.profile)
    print(f"capacity replay: {len(traces)} trace(s), policies {args.policies}, scheduler {args.scheduler}", flush=True)
    t0 = time.perf_counter()
    scores = run_all(traces, args.policies.split(","), cfg, args.scheduler, args.sweep)
    print(table(scores))
    g = goals(scores, args.chosen)
    if g:
        print(json.dumps({k: v for k, v in g.items() if k != "figures"}, indent=1))
    if args.json:
        doc = {
            "method": "benchmarks/bench_capacity.py (docs/capacity-prediction.md)",
            "seeds": seeds,
            "days": args.days,
            "warmup_days": WARMUP_DAYS,
            "scheduler": args.scheduler,
            "profile_config": cfg.__class__.__name__ and {f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
            "publish_config": {f: getattr(PUBLISH, f) for f in ("publish_threshold", "publish_floor", "min_interval",
                                                                 "urgent_decrease", "envelope", "resync")},
            "scores": [s.to_json() for s in scores],
            "totals": totals(scores),
            "goals": g,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        plot(scores, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
