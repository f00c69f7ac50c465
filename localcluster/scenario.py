"""The live colocation scenario `make run` plays on the local cluster, with real measurements.

Workload (namespace `demo`, every pod scheduled by `tidemark-scheduler`, run by the local pod runner,
every process pinned to the same CPU with `tidemark.io/local-cpuset` so online and offline compete):
- `web`: the online service, `volcano.sh/qos-level: "2"`, plain requests sized for its peak (cpu 1,
  memory 128Mi: Burstable) while it idles at 0.05 core, priority `volcano-production`. Its command is the load generator
  (`localcluster.loadgen`) reading its CPU demand from a file the scenario rewrites.
- `etl` (a gang PodGroup, minMember 2: etl-0, etl-1) and `crunch` (one pod): offline batch jobs,
  `volcano.sh/qos-level: "-1"`, priority `volcano-free`, requesting `kubernetes.io/batch-cpu: 50`
  (milli-cores) and `kubernetes.io/batch-memory: 64Mi` (BestEffort for kubelet), demand 0.1 core each.
- `report` (a gang of 2), submitted while the node is evicting: it must wait until it clears.

Phases and what is measured (monotonic clock; pods' transitions as the watch saw them; CPU from the
cgroup counters `cpuacct.usage` of `kubepods/burstable` (the online pod) and `kubepods/besteffort`
(the batch-* pods), read every 100 ms):
1. online service placed and Running;
2. the agent publishes batch capacity; the offline jobs are placed on the oversubscribed node and run
   (placement time: submission -> all Running);
3. a brief online spike (1.2 s at 1 core): time until the online pod holds >= 90 % of the pods' CPU
   time on the shared CPU (online share = online / (online + offline) per 100 ms window), and its
   cores; the spike is shorter than the agent's 3 consecutive samples, so nothing is evicted;
4. a sustained spike: the node's pod usage passes the high watermark; the agent marks the node
   `volcano.sh/offline-job-evicting` and evicts the offline pods (time to the mark, to the first
   eviction, to all gone); `report` is submitted and stays Pending; the online pod is never evicted;
5. the load falls under the low watermark: the node is cleared and `report` is placed and runs
   (re-admission time from the load drop).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from localcluster import manifests
from localcluster.cgroups import KubeletCgroups
from localcluster.podrunner import ANN_CPUSET
from localcluster.watch import ClusterWatch
from tidemark.apis import ANN_GROUP_NAME, ANN_QOS_LEVEL
from tidemark.kube.client import ApiStatusError

JSON = dict[str, Any]
NAMESPACE: Final = "demo"
IMAGE: Final = "tidemark.local/host-process"  # never pulled: the pod runner runs the command on the host
ONLINE_IDLE: Final = 0.05
OFFLINE_DEMAND: Final = 0.10
OFFLINE_REQUEST: Final = 50  # kubernetes.io/batch-cpu, milli-cores: the 3 first pods need 150m of the agent's budget B
SHARE_TARGET: Final = 0.90
SAMPLE: Final = 0.1


class ScenarioFailed(Exception):
    """A step did not happen in time; the message says which and what was seen."""


@dataclass(frozen=True, slots=True)
class CpuSample:
    """CPU granted over one window: cores (CPU-seconds per second) of the online and offline pods."""

    end: float
    seconds: float
    online: float
    offline: float

    @property
    def share(self) -> float:
        total = self.online + self.offline
        return self.online / total if total > 0 else 0.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Results:
    figures: dict[str, float | None] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    spike_samples: list[JSON] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    def to_json(self) -> JSON:
        return {
            "ok": self.ok,
            "error": self.error,
            "figures": self.figures,
            "checks": [asdict(c) for c in self.checks],
            "spike_samples": self.spike_samples,
            "notes": self.notes,
        }


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    node: str
    run_dir: Path
    python: str = sys.executable
    cpuset: str = "0"
    namespace: str = NAMESPACE
    brief_spike: float = 1.2
    settle: float = 4.0
    baseline: float = 2.0
    step_timeout: float = 90.0
    evict_timeout: float = 45.0


class CpuMeter:
    """Online vs offline CPU from kubelet's QoS groups: burstable holds the online pod, besteffort the batch pods."""

    def __init__(self, cgroups: KubeletCgroups) -> None:
        self.online = cgroups.layout.qos("Burstable")
        self.offline = cgroups.layout.qos("BestEffort")
        self.cgroups = cgroups

    def read(self) -> tuple[float, int, int]:
        return time.monotonic(), self.cgroups.cpu_usage_ns(self.online), self.cgroups.cpu_usage_ns(self.offline)

    def sample(self, seconds: float, every: float = SAMPLE) -> list[CpuSample]:
        """Windows of `every` seconds for `seconds`, back to back from now."""
        out: list[CpuSample] = []
        t0, on0, off0 = self.read()
        start = t0
        nxt = t0 + every
        while True:
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t1, on1, off1 = self.read()
            dt = t1 - t0
            out.append(CpuSample(t1, dt, (on1 - on0) / 1e9 / dt, (off1 - off0) / 1e9 / dt))
            t0, on0, off0 = t1, on1, off1
            nxt += every
            if t1 - start >= seconds - 1e-3:
                return out


def online_pod(cfg: ScenarioConfig, load_file: Path) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": cfg.namespace,
            "labels": {"app": "web", "tidemark.io/demo": "online"},
            "annotations": {ANN_QOS_LEVEL: "2", ANN_CPUSET: cfg.cpuset},
        },
        "spec": {
            "schedulerName": "volcano",
            "priorityClassName": "volcano-production",
            "nodeSelector": {"kubernetes.io/hostname": cfg.node},
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "web",
                    "image": IMAGE,
                    "command": [cfg.python, "-m", "localcluster.loadgen"],
                    "args": ["--target", str(ONLINE_IDLE), "--target-file", str(load_file), "--memory", "32Mi"],
                    "resources": {"requests": {"cpu": "1", "memory": "128Mi"}},
                }
            ],
        },
    }


def podgroup(cfg: ScenarioConfig, name: str, min_member: int) -> JSON:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": cfg.namespace},
        "spec": {"minMember": min_member, "queue": "default", "priorityClassName": "volcano-free"},
    }


def offline_pod(cfg: ScenarioConfig, job: str, index: int) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{index}",
            "namespace": cfg.namespace,
            "labels": {"job": job, "tidemark.io/demo": "offline"},
            "annotations": {ANN_QOS_LEVEL: "-1", ANN_GROUP_NAME: job, ANN_CPUSET: cfg.cpuset},
        },
        "spec": {
            "schedulerName": "volcano",
            "priorityClassName": "volcano-free",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 3,
            "containers": [
                {
                    "name": "work",
                    "image": IMAGE,
                    "command": [cfg.python, "-m", "localcluster.loadgen"],
                    "args": ["--target", str(OFFLINE_DEMAND), "--memory", "16Mi", "--work", "900"],
                    "resources": {
                        "requests": {
                            "kubernetes.io/batch-cpu": str(OFFLINE_REQUEST),
                            "kubernetes.io/batch-memory": "64Mi",
                        },
                        "limits": {"kubernetes.io/batch-cpu": "300", "kubernetes.io/batch-memory": "256Mi"},
                    },
                }
            ],
        },
    }


def job_objects(cfg: ScenarioConfig, job: str, size: int) -> list[JSON]:
    return [podgroup(cfg, job, size), *(offline_pod(cfg, job, i) for i in range(size))]


class Scenario:
    """Plays the phases (module docstring) and records figures and checks in `results`."""

    def __init__(
        self,
        api: Any,
        watch: ClusterWatch,
        cgroups: KubeletCgroups,
        cfg: ScenarioConfig,
        *,
        say: Callable[[str], None] = print,
        phase: Callable[[str], None] = print,
        health: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.health = health
        self.api = api
        self.watch = watch
        self.meter = CpuMeter(cgroups)
        self.cfg = cfg
        self.say = say
        self.phase = phase
        self.results = Results()
        self.load_file = cfg.run_dir / "web-load"
        self.web_uid = ""
        self.t_start = time.monotonic()

    # --- helpers ----------------------------------------------------------------------------------

    def set_load(self, cores: float) -> float:
        """Rewrite the online service's demand (atomically); returns the monotonic time it was written."""
        tmp = self.load_file.with_suffix(".tmp")
        tmp.write_text(f"{cores}\n")
        os.replace(tmp, self.load_file)
        return time.monotonic()

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.results.checks.append(Check(name, ok, detail))
        self.say(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
        return ok

    def wait(self, what: str, cond: Callable[[], bool], timeout: float | None = None) -> float:
        """Poll `cond` (every 50 ms) until true; returns the monotonic time; ScenarioFailed on timeout."""
        deadline = time.monotonic() + (timeout or self.cfg.step_timeout)
        while not cond():
            dead = self.health()
            if dead:
                raise ScenarioFailed(f"while waiting for {what}: {dead}")
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"timed out after {timeout or self.cfg.step_timeout:.0f}s waiting for {what}")
            time.sleep(0.05)
        return time.monotonic()

    def create(self, objs: list[JSON]) -> None:
        for obj in objs:
            manifests.apply(self.api, obj)

    def uids(self, job: str) -> list[str]:
        return [
            str(p["metadata"]["uid"])
            for p in self.watch.pods_in(self.cfg.namespace)
            if (p["metadata"].get("labels") or {}).get("job") == job
        ]

    def pods_of(self, job: str) -> list[JSON]:
        return [
            p for p in self.watch.pods_in(self.cfg.namespace) if (p["metadata"].get("labels") or {}).get("job") == job
        ]

    def all_running(self, job: str, size: int) -> bool:
        pods = self.pods_of(job)
        return len(pods) == size and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    def failed_pods(self) -> list[str]:
        out = []
        for p in self.watch.pods_in(self.cfg.namespace):
            status = p.get("status") or {}
            if status.get("phase") == "Failed":
                out.append(f"{p['metadata']['name']} ({status.get('reason')}: {status.get('message')})")
        return out

    def batch_allocatable(self) -> int:
        alloc = (self.watch.node().get("status") or {}).get("allocatable") or {}
        try:
            return int(str(alloc.get("kubernetes.io/batch-cpu", "0")))
        except ValueError:
            return 0

    # --- the phases -------------------------------------------------------------------------------

    def run(self) -> Results:
        fig = self.results.figures
        self.t_start = time.monotonic()
        try:
            self.online_service()
            self.offline_jobs()
            self.brief_spike()
            self.sustained_spike()
            self.recovery()
            web = self.watch.pod(self.cfg.namespace, "web")
            t = self.watch.times(self.web_uid)
            self.check(
                "online pod never evicted",
                web is not None and web["metadata"]["uid"] == self.web_uid and t is not None and t.terminating is None,
                "web kept its UID and was never given a deletionTimestamp",
            )
        except ScenarioFailed as exc:
            self.results.error = str(exc)
            failed = self.failed_pods()
            if failed:
                self.results.notes.append("failed pods: " + "; ".join(failed))
            self.say(f"FAIL {exc}")
        fig.setdefault("placement_seconds", None)
        return self.results

    def online_service(self) -> None:
        self.phase(
            "1/5 online service: web (qos-level 2, requests cpu 1) placed by tidemark-scheduler, run by the pod runner"
        )
        self.set_load(ONLINE_IDLE)
        try:
            manifests.apply(
                self.api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.cfg.namespace}}
            )
        except ApiStatusError as exc:
            if exc.status != 409:
                raise
        t0 = time.monotonic()
        self.create([online_pod(self.cfg, self.load_file)])
        t1 = self.wait(
            "web to be Running",
            lambda: (self.watch.pod(self.cfg.namespace, "web") or {}).get("status", {}).get("phase") == "Running",
        )
        web = self.watch.pod(self.cfg.namespace, "web") or {}
        self.web_uid = str(web["metadata"]["uid"])
        self.results.figures["online_start_seconds"] = round(t1 - t0, 3)
        self.say(f"web Running on {web['spec'].get('nodeName')} after {t1 - t0:.2f}s (demand {ONLINE_IDLE} core)")

    def offline_jobs(self) -> None:
        fig = self.results.figures
        self.phase("2/5 offline jobs: the agent publishes batch capacity; etl (gang of 2) and crunch are placed")
        need = 3 * OFFLINE_REQUEST
        t_pub = self.wait(
            f"the agent to publish kubernetes.io/batch-cpu >= {need}m on the node",
            lambda: self.batch_allocatable() >= need,
        )
        fig["batch_capacity_wait_seconds"] = round(t_pub - self.t_start, 3)
        self.say(
            f"node allocatable kubernetes.io/batch-cpu = {self.batch_allocatable()}m (published by tidemark-agent; "
            f"the jobs below need {need}m)"
        )
        t0 = time.monotonic()
        self.create([*job_objects(self.cfg, "etl", 2), *job_objects(self.cfg, "crunch", 1)])
        try:
            t1 = self.wait(
                "etl-0, etl-1, crunch-0 to be Running",
                lambda: self.all_running("etl", 2) and self.all_running("crunch", 1),
            )
        except ScenarioFailed:
            failed = self.failed_pods()
            if failed:
                raise ScenarioFailed("offline pods failed: " + "; ".join(failed)) from None
            raise
        fig["placement_seconds"] = round(t1 - t0, 3)
        bound = [self.watch.times(u) for u in self.uids("etl") + self.uids("crunch")]
        bind_times = [t.bound - t0 for t in bound if t is not None and t.bound is not None]
        fig["placement_bind_seconds"] = round(max(bind_times), 3) if bind_times else None
        nodes = {p["spec"].get("nodeName") for p in self.pods_of("etl") + self.pods_of("crunch")}
        self.check(
            "offline pods placed on the oversubscribed node",
            nodes == {self.cfg.node},
            f"etl-0, etl-1, crunch-0 bound to {', '.join(sorted(str(n) for n in nodes))} and Running "
            f"{t1 - t0:.2f}s after submission (bound after {fig['placement_bind_seconds']}s)",
        )
        base = self.meter.sample(self.cfg.baseline)
        on = sum(s.online for s in base) / len(base)
        off = sum(s.offline for s in base) / len(base)
        fig["baseline_online_cores"] = round(on, 3)
        fig["baseline_offline_cores"] = round(off, 3)
        self.say(f"baseline on the shared CPU: online {on:.2f} core, offline {off:.2f} core")

    def brief_spike(self) -> None:
        fig = self.results.figures
        self.phase(f"3/5 brief online spike ({self.cfg.brief_spike:g}s at 1 core): offline CPU yields at once")
        t0 = self.set_load(1.0)
        samples = self.meter.sample(self.cfg.brief_spike)
        self.set_load(ONLINE_IDLE)
        recovered = next((s for s in samples if s.share >= SHARE_TARGET), None)
        recovery = recovered.end - t0 if recovered else None
        after = [s for s in samples if recovered and s.end >= recovered.end]
        share = sum(s.share for s in after) / len(after) if after else 0.0
        cores = sum(s.online for s in after) / len(after) if after else 0.0
        fig["cpu_recovery_seconds"] = round(recovery, 3) if recovery is not None else None
        fig["online_share_during_spike"] = round(share, 4)
        fig["online_cores_during_spike"] = round(cores, 3)
        fig["offline_cores_during_spike"] = round(sum(s.offline for s in after) / len(after), 3) if after else None
        self.results.spike_samples = [
            {
                "t": round(s.end - t0, 3),
                "online": round(s.online, 3),
                "offline": round(s.offline, 3),
                "share": round(s.share, 3),
            }
            for s in samples
        ]
        rows = "  ".join(f"{s.end - t0:.1f}s:{100 * s.share:.0f}%" for s in samples)
        self.say(f"online share of the shared CPU per 100 ms: {rows}")
        self.check(
            "online takes the CPU back within 1 s",
            recovery is not None and recovery <= 1.0 and share >= SHARE_TARGET,
            (
                f"online >= {SHARE_TARGET:.0%} of the pods' CPU time {recovery:.2f}s after the spike; "
                f"then {share:.1%} on average ({cores:.2f} core online, {fig['offline_cores_during_spike']} offline)"
                if recovery is not None
                else f"online never reached {SHARE_TARGET:.0%} (best {max(s.share for s in samples):.1%})"
            ),
        )
        # Hold idle: a spike shorter than the agent's consecutive samples must not evict anything.
        deadline = time.monotonic() + self.cfg.settle
        evicted = False
        while time.monotonic() < deadline:
            if self.watch.evicting() or not (self.all_running("etl", 2) and self.all_running("crunch", 1)):
                evicted = True
                break
            time.sleep(0.1)
        self.check(
            "a brief spike evicts nothing",
            not evicted,
            f"the node stayed open and the offline pods kept running for {self.cfg.settle:g}s after it",
        )
        if evicted:  # the sustained phase needs its offline pods back: not worth continuing
            raise ScenarioFailed("the brief spike already made the node evict")

    def sustained_spike(self) -> None:
        fig = self.results.figures
        self.phase("4/5 sustained online spike: pod usage passes the high watermark; the agent evicts offline pods")
        victims = self.uids("etl") + self.uids("crunch")
        t0 = self.set_load(1.0)
        t_mark = self.wait(
            "the node to be marked volcano.sh/offline-job-evicting", self.watch.evicting, self.cfg.evict_timeout
        )
        fig["eviction_mark_seconds"] = round(t_mark - t0, 3)
        self.say(f"node marked volcano.sh/offline-job-evicting=true {t_mark - t0:.2f}s after the spike began")
        self.create(job_objects(self.cfg, "report", 2))
        self.say("submitted report (gang of 2) while the node is evicting: it must wait")

        def gone_or_going(uid: str) -> bool:
            t = self.watch.times(uid)
            return t is not None and (t.terminating is not None or t.deleted is not None)

        def all_deleted() -> bool:
            return all((t := self.watch.times(u)) is not None and t.deleted is not None for u in victims)

        self.wait(
            "every offline pod to be evicted", lambda: all(gone_or_going(u) for u in victims), self.cfg.evict_timeout
        )
        first = min(t.terminating or t.deleted or 0.0 for u in victims if (t := self.watch.times(u)) is not None)
        fig["first_eviction_seconds"] = round(first - t0, 3)
        t_gone = self.wait(
            "the evicted pods' processes to stop and their objects to go", all_deleted, self.cfg.evict_timeout
        )
        fig["eviction_seconds"] = round(t_gone - t0, 3)
        mark_rv = self.watch.last_mark_rv()
        evicted_rvs = [t.terminating_rv for u in victims if (t := self.watch.times(u)) is not None and t.terminating_rv]
        if mark_rv is not None and evicted_rvs:
            self.check(
                "node marked before the first eviction",
                mark_rv < min(evicted_rvs),
                f"etcd revision of the mark {mark_rv}, of the first eviction {min(evicted_rvs)}",
            )
        report_bound = [p["metadata"]["name"] for p in self.pods_of("report") if p["spec"].get("nodeName")]
        self.check(
            "sustained spike past the high watermark evicts the offline pods",
            True,
            f"marked after {t_mark - t0:.2f}s, first eviction after {first - t0:.2f}s, "
            f"all 3 offline pods stopped and deleted after {t_gone - t0:.2f}s",
        )
        self.check(
            "no offline pod admitted while evicting",
            not report_bound and self.watch.evicting(),
            "report-0/1 Pending while the node is marked" if not report_bound else f"bound: {report_bound}",
        )

    def recovery(self) -> None:
        fig = self.results.figures
        self.phase("5/5 load falls under the low watermark: the node clears and offline work is admitted again")
        t0 = self.set_load(ONLINE_IDLE)
        t_clear = self.wait("the node's evicting mark to clear", lambda: not self.watch.evicting())
        fig["evicting_clear_seconds"] = round(t_clear - t0, 3)
        self.say(f"evicting mark cleared {t_clear - t0:.2f}s after the load fell")
        t_run = self.wait("report-0 and report-1 to be Running", lambda: self.all_running("report", 2))
        # Bound before the node was cleared? Exact by etcd revision (the two watches may deliver in
        # either order within milliseconds); by time with a 0.5 s allowance if a revision is unknown.
        clear_rv = self.watch.last_clear_rv()
        early = []
        for p in self.pods_of("report"):
            t = self.watch.times(str(p["metadata"]["uid"]))
            if t is None or t.bound is None:
                continue
            if clear_rv is not None and t.bound_rv is not None:
                if t.bound_rv < clear_rv:
                    early.append(p["metadata"]["name"])
            elif t.bound < t_clear - 0.5:
                early.append(p["metadata"]["name"])
        fig["readmission_seconds"] = round(t_run - t0, 3)
        nodes = {p["spec"].get("nodeName") for p in self.pods_of("report")}
        self.check(
            "offline work admitted again after the load fell",
            not early and nodes == {self.cfg.node},
            f"report-0/1 bound to {', '.join(sorted(str(n) for n in nodes))} and Running {t_run - t0:.2f}s after the "
            f"load fell ({t_run - t_clear:.2f}s after the node cleared)"
            + (f"; bound BEFORE clearing: {early}" if early else ""),
        )


def write_results(path: Path, results: Results) -> None:
    path.write_text(json.dumps(results.to_json(), indent=2, sort_keys=True) + "\n")
