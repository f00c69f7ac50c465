"""The QoS plan (docs/design.md, "QoS enforcement"): exact cgroup and process writes, only those that differ.

kubelet's tree matters: `cpu.idle` and shares act only among siblings. BestEffort offline pods sit
under `kubepods/besteffort` (kubelet: `cpu.shares=2`), so idling them among themselves is enough;
offline pods in the burstable/guaranteed subtrees compete with online pods above pod level (their
requests are in `burstable`'s shares), so they also get a CFS quota.

- Offline pods: pod `cpu.idle=1` where the file exists (kernel >= 5.15), else `cpu.shares=2` (v1) /
  `cpu.weight=1` (v2). The offline tier's CPU ceiling (`agent.decide.tier`, recomputed every `tier.period`)
  goes on the BestEffort root (`kubepods/besteffort`, `kubepods-besteffort.slice`) when it holds offline pods
  and no online one, and as per-pod quotas on the offline pods outside it (never above the pod's own limit);
  `cpu.cfs_quota_us` with the period from `cpu.cfs_period_us` (v1) / `cpu.max` `"<quota> <period>"` (v2). It
  replaces the static `A * ratio - U_non` quota of offline pods in the burstable/guaranteed subtrees. Without a
  tier decision (`tier.enabled: false`) no tier quota is wanted, so the values written before go back.
- batch-* pods (as volcano-agent): container `cpu.shares` from the batch-cpu request (kubelet's
  milli * 1024 / 1000, 2..262144; v2 `cpu.weight` by kubelet's shares->weight conversion), CFS quota
  from the batch-cpu limit, memory limit from the batch-memory limit; the pod level gets the sums when
  every container declares the limit.
- `oom_score_adj` (1000) for every process in an offline pod's cgroups.
- Memory QoS (`agent.decide.memqos`) and I/O QoS (`agent.decide.ioqos`): their wanted values come in as
  `memory` and `io` and go through the same filter (file exists, value differs) and order.
- Online pods: optional CFS burst (`cpu.cfs_burst_us` / `cpu.max.burst`) = quota * percent (`qos.cpu_burst`, the
  node switch); a pod with Volcano's `volcano.sh/enable-quota-burst: "true"` gets its own instead (`_pod_burst`:
  min(`volcano.sh/quota-burst-time`, quota) per container, the sum at pod level), whatever the switch; offline
  pods never burst.
- openEuler `cpu.qos_level` / `memory.qos_level` = -1 for offline pods where the files exist.

Order: the declared one (`agent.knobs.order_key`, also the executor's): `cpu.shares`/`cpu.weight`
before quota, burst, then `cpu.idle=1` (the kernel refuses shares on an idle group); quota and memory
limits that tighten go deepest first, those that loosen shallowest first (v1 refuses a child quota above
its parent's). Every file written here is declared in `agent.knobs` (a unit test checks it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.config import QosConfig
from agent.decide.ioqos import IoWant
from agent.decide.memqos import MemoryWant
from agent.decide.ops import SetCgroupValue, SetProcessValue
from agent.decide.tier import TierCpu
from agent.knobs import CGROUP_KNOBS, OOM_SCORE_ADJ, batch_order, current_of, limit_value, order_key
from agent.model import CgroupDirs, CgroupState, PodView
from tidemark.apis import PodUID

MIN_SHARES = 2
MAX_SHARES = 262_144
MIN_QUOTA_US = 1000
DEFAULT_PERIOD_US = 100_000
_INF = math.inf


def milli_to_shares(milli: int) -> int:
    """kubelet's MilliCPUToShares: milli * 1024 / 1000, clamped to 2..262144 (0 -> 2)."""
    if milli <= 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def shares_to_weight(shares: int) -> int:
    """kubelet/runc's cgroup v2 conversion: 1 + ((shares - 2) * 9999) / 262142."""
    shares = max(MIN_SHARES, min(MAX_SHARES, shares))
    return 1 + ((shares - 2) * 9999) // 262_142


def quota_us(milli: float, period_us: int) -> int:
    """milli-cores -> CFS quota for `period_us`, at least 1 ms (the kernel's minimum)."""
    return max(MIN_QUOTA_US, int(milli * period_us // 1000))


def same_value(current: str | None, value: str) -> bool:
    """Whether the file already holds `value` (whitespace and integer formatting ignored)."""
    if current is None:
        return False
    a, b = current.split(), value.split()
    if a == b:
        return True
    if len(a) != len(b):
        return False
    try:
        return [int(x) for x in a] == [int(x) for x in b]
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class QosInputs:
    """What the knobs depend on beyond the pods and their cgroups: the offline tier's CPU decision (None: no tier
    quota)."""

    tier: TierCpu | None = None


class _Builder:
    def __init__(self, cg: CgroupState) -> None:
        self.cg = cg
        self.wants: list[tuple[tuple[int, int, int, str, str], SetCgroupValue]] = []
        self.notes: list[str] = []

    def want(self, d: CgroupDirs, file: str, value: str, reason: str) -> None:
        """`value` for the declared knob `file` in its controller's directory of `d`, where it exists and differs."""
        knob = CGROUP_KNOBS[file]  # every file the plan names is declared (tests/unit/agent/test_knobs.py)
        if d.version not in knob.versions:
            return
        path = {"memory": d.memory, "blkio": d.blkio}.get(knob.where, d.cpu)
        if not path or not self.cg.has(path, file):
            return
        current = current_of(file, self.cg.value(path, file), value)  # a keyed knob: that key's line
        if same_value(current, value):
            return
        key = order_key(path, file, value, current)
        self.wants.append((key, SetCgroupValue(path, file, value, current, reason)))

    def period(self, d: CgroupDirs) -> int:
        if d.version == "v1":
            v = self.cg.value(d.cpu, "cpu.cfs_period_us")
            try:
                return int(v) if v else DEFAULT_PERIOD_US
            except ValueError:
                return DEFAULT_PERIOD_US
        parts = (self.cg.value(d.cpu, "cpu.max") or "").split()
        try:
            return int(parts[1]) if len(parts) == 2 else DEFAULT_PERIOD_US
        except ValueError:
            return DEFAULT_PERIOD_US

    def current_quota(self, d: CgroupDirs) -> int | None:
        if d.version == "v1":
            v = limit_value(self.cg.value(d.cpu, "cpu.cfs_quota_us"))
        else:
            v = limit_value(self.cg.value(d.cpu, "cpu.max"))
        return None if v == _INF else int(v)

    def quota(self, d: CgroupDirs, milli: float, reason: str) -> None:
        period = self.period(d)
        q = quota_us(milli, period)
        if d.version == "v1":
            self.want(d, "cpu.cfs_quota_us", str(q), reason)
        else:
            self.want(d, "cpu.max", f"{q} {period}", reason)

    def weight(self, d: CgroupDirs, shares: int, reason: str) -> None:
        if d.version == "v1":
            self.want(d, "cpu.shares", str(shares), reason)
        else:
            self.want(d, "cpu.weight", str(shares_to_weight(shares)), reason)

    def memory_limit(self, d: CgroupDirs, limit: int, reason: str) -> None:
        self.want(d, "memory.limit_in_bytes" if d.version == "v1" else "memory.max", str(limit), reason)

    def result(self) -> tuple[SetCgroupValue, ...]:
        return tuple(batch_order([w for _, w in self.wants], lambda w: (w.path, w.file, w.value, w.current)))


def _tier_root(b: _Builder, tier: TierCpu | None) -> None:
    """The tier's quota on the BestEffort root (sensed as the `besteffort` ancestor). A period without one (an online
    pod sits in the root, or no offline pod does) puts the root back to unlimited, kubelet's value, in the same plan
    (`agent.knobs.batch_order` writes it before the pods under it): the offline pods in it then get per-pod shares,
    and v1 refuses a child's quota above the quota an earlier period left on the root (EINVAL on every write until
    the journal released the root at the next reconcile)."""
    if tier is None:
        return
    root = b.cg.ancestors.get("besteffort")
    if tier.root is None:
        if root is not None and b.current_quota(root) is not None:
            why = "offline tier: no quota on the BestEffort root this period (unlimited, as kubelet leaves it)"
            if root.version == "v1":
                b.want(root, "cpu.cfs_quota_us", "-1", why)
            else:
                b.want(root, "cpu.max", f"max {b.period(root)}", why)
        return
    if root is None:
        b.notes.append("the BestEffort root cgroup was not found: the tier's quota on it waits")
        return
    b.quota(root, tier.root, f"offline tier: the BestEffort root's share of the {tier.decision.reason}")


def plan_qos(
    pods: Sequence[PodView],
    cg: CgroupState,
    inputs: QosInputs,
    cfg: QosConfig,
    memory: Sequence[MemoryWant] = (),
    io: Sequence[IoWant] = (),
) -> tuple[tuple[SetCgroupValue, ...], tuple[SetProcessValue, ...], tuple[str, ...]]:
    """Every knob write for the pods on the node (and `memory`'s and `io`'s), in safe order, only where the value
    differs."""
    b = _Builder(cg)
    wanted: list[MemoryWant | IoWant] = [*memory, *io]
    for m in wanted:
        b.want(m.dirs, m.file, m.value, m.reason)
    procs: list[SetProcessValue] = []
    tier = inputs.tier
    quotas: Mapping[PodUID, float] = tier.pods if tier is not None else {}
    _tier_root(b, tier)
    if tier is not None and quotas:
        b.notes.append(
            f"{len(quotas)} offline pod(s) outside the BestEffort root share the tier's ceiling "
            f"{tier.ceiling:.0f}m by recent demand, at least {cfg.min_offline_quota}m each where it allows"
        )
    for pod in sorted(pods, key=lambda p: p.uid):
        cgs = cg.pods.get(pod.uid)
        if cgs is None:
            b.notes.append(f"{pod.key}: no cgroup found (not started here yet, or gone); no knobs")
            continue
        d = cgs.pod
        if not pod.offline:
            if pod.quota_burst is not None:
                _pod_burst(b, d, tuple(cgs.containers.values()), pod, pod.quota_burst)
            elif cfg.cpu_burst:
                _burst(b, [d, *cgs.containers.values()], cfg, pod)
            continue
        if pod.quota_burst is not None:
            b.notes.append(
                f"{pod.key} asks for a CPU burst (volcano.sh/enable-quota-burst) but is offline: its CFS quota is "
                "the offline tier's share, a burst would let it past it; ignored"
            )
        # pod level: idle, else minimal shares/weight
        if cg.has(d.cpu, "cpu.idle"):
            b.want(d, "cpu.idle", "1", f"{pod.key} is offline: idle scheduling class among its siblings")
        else:
            b.weight(d, MIN_SHARES, f"{pod.key} is offline: minimal CPU weight (the kernel has no cpu.idle)")
        pod_quota: float | None = quotas.get(pod.uid)
        # under the root's tier quota a child's quota may not pass it (v1 refuses the parent's write, EINVAL)
        cap = tier.root if tier is not None and tier.root is not None and pod.qos_class == "BestEffort" else None
        # ...nor a container's quota the pod's own (its tier share): the pod's cut would be refused likewise
        container_cap = cap if pod_quota is None else _capped(pod_quota, cap)
        quota_reason = f"{pod.key} is offline outside the BestEffort root: its share of the offline tier's ceiling"
        # batch-* containers
        containers = {c.name: c for c in pod.containers}
        if pod.uses_batch:
            cpu_limits: list[int] = []
            mem_limits: list[int] = []
            for c in pod.containers:
                cd = cgs.containers.get(c.name)
                if c.batch_cpu_limit:
                    cpu_limits.append(c.batch_cpu_limit)
                if c.batch_memory_limit:
                    mem_limits.append(c.batch_memory_limit)
                if cd is None:
                    if c.batch_cpu_request or c.batch_cpu_limit or c.batch_memory_limit:
                        b.notes.append(f"{pod.key}: container {c.name} has no cgroup yet; its batch limits wait")
                    continue
                why = f"{pod.key}/{c.name} batch-* resources"
                if c.batch_cpu_request:
                    b.weight(cd, milli_to_shares(c.batch_cpu_request), f"{why}: shares from the batch-cpu request")
                if c.batch_cpu_limit:
                    b.quota(
                        cd,
                        _capped(c.batch_cpu_limit, container_cap),
                        f"{why}: CFS quota from the batch-cpu limit{_at_pod(container_cap, cap)}",
                    )
                if c.batch_memory_limit:
                    b.memory_limit(cd, c.batch_memory_limit, f"{why}: memory limit from the batch-memory limit")
            if containers and len(cpu_limits) == len(containers):
                pod_quota = sum(cpu_limits) if pod_quota is None else min(pod_quota, sum(cpu_limits))
                quota_reason = f"{pod.key}: pod CFS quota = sum of the batch-cpu limits" + (
                    " (capped by its share of the offline tier's ceiling)" if pod.uid in quotas else ""
                )
            if containers and len(mem_limits) == len(containers):
                b.memory_limit(d, sum(mem_limits), f"{pod.key}: pod memory limit = sum of the batch-memory limits")
        if pod_quota is not None:
            b.quota(d, _capped(pod_quota, cap), quota_reason + _at(cap))
        if cfg.vendor_knobs:
            b.want(d, "cpu.qos_level", "-1", f"{pod.key} is offline (openEuler cpu.qos_level)")
            b.want(d, "memory.qos_level", "-1", f"{pod.key} is offline (openEuler memory.qos_level)")
        want_oom = str(cfg.oom_score_adj)
        for pid in cg.pids.get(pod.uid, ()):
            current = cg.oom_score_adj.get(pid)
            if current is not None and current.strip() != want_oom:
                procs.append(
                    SetProcessValue(
                        pid, OOM_SCORE_ADJ.file, want_oom, current, f"{pod.key} is offline: OOM-killed first"
                    )
                )
    return b.result(), tuple(procs), tuple(b.notes)


def _capped(milli: float, cap: float | None) -> float:
    return milli if cap is None else min(milli, cap)


def _at(cap: float | None) -> str:
    return "" if cap is None else f", at most the BestEffort root's tier quota {cap:.0f}m"


def _at_pod(container_cap: float | None, root_cap: float | None) -> str:
    if container_cap is None or container_cap == root_cap:
        return _at(root_cap)
    return f", at most the pod's share of the offline tier's ceiling {container_cap:.0f}m"


def _pod_burst(b: _Builder, pod_dir: CgroupDirs, containers: Sequence[CgroupDirs], pod: PodView, time_us: int) -> None:
    """Volcano's per-pod CPU burst (pkg/agent/events/handlers/cpuburst): each container with a quota gets
    min(time, quota), or its quota when the time is 0; the pod the sum (at most its own quota). Containers and
    pods without a quota are skipped (the kernel ignores a burst there)."""
    total = 0
    for d in containers:
        q = b.current_quota(d)
        if q is None or q <= 0:
            continue
        burst = min(time_us, q) if time_us > 0 else q
        total += burst
        b.want(d, _burst_file(d), str(burst), _burst_reason(pod, time_us, q))
    pod_quota = b.current_quota(pod_dir)
    if total > 0 and pod_quota is not None and pod_quota > 0:
        b.want(pod_dir, _burst_file(pod_dir), str(min(total, pod_quota)), _burst_reason(pod, time_us, pod_quota))


def _burst_file(d: CgroupDirs) -> str:
    return "cpu.cfs_burst_us" if d.version == "v1" else "cpu.max.burst"


def _burst_reason(pod: PodView, time_us: int, quota: int) -> str:
    asked = f"{time_us} us" if time_us > 0 else "its quota"
    return f"{pod.key} asks for a CPU burst (volcano.sh/quota-burst-time: {asked}; at most the quota {quota} us)"


def _burst(b: _Builder, dirs: Sequence[CgroupDirs], cfg: QosConfig, pod: PodView) -> None:
    for d in dirs:
        q = b.current_quota(d)
        if q is None or q <= 0:
            continue
        burst = q * cfg.cpu_burst_percent // 100
        file = "cpu.cfs_burst_us" if d.version == "v1" else "cpu.max.burst"
        b.want(
            d,
            file,
            str(burst),
            f"{pod.key} is online with a CPU limit: CFS burst {cfg.cpu_burst_percent} % of quota",
        )
