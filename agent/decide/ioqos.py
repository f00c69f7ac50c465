"""I/O QoS (docs/agent.md, "I/O QoS"): offline pods' block I/O limited on the node's disks, online pods untouched.

Pure: `decide` (agent.decide.plan) calls `plan_io`; its wanted values go through the QoS plan's filter (the file
exists, the value differs), order, executor, journal and restore like every other knob (`agent.decide.qos`).

For each offline pod with a pod cgroup, for each disk sensing found (`CgroupState.devices`,
`agent.sense.blockdev`):

- v2: `io.max` = `MAJ:MIN rbps=R wbps=W riops=RI wiops=WI` from `io_qos.offline_*` (`max` where a setting is
  0; no line at all when all four are 0); `io.weight` = `default W` and `io.bfq.weight` = `default min(W, 1000)`
  from `io_qos.offline_weight`;
- v1: `blkio.throttle.{read,write}_{bps,iops}_device` = `MAJ:MIN value`, for the settings that are not 0;
  `blkio.bfq.weight` = min(W, 1000) and `blkio.weight` (CFQ, kernels before 5.0) = W within 10..1000.

Where: v2 limits are hierarchical, so the pod level holds the whole pod. v1's blk-throttle is flat (a group's
limit holds only its own tasks: the kernel makes throttling hierarchical only on the default hierarchy,
`throtl_pd_init`; measured here, a limit on a v1 pod group left a writer in its container group at 745 MiB/s),
so on v1 the throttle lines go on each of the pod's containers, where its tasks are: each container is held at
the limit. Weights are hierarchical in BFQ on both versions and go on the pod level.

Each (directory, file, disk) is a knob of its own (`agent.knobs` keyed knobs): a disk dropped from the list, a
limit set to 0 or `io_qos.enabled: false` leaves its line out of the plan, and the line the agent wrote goes
back to what it was (no rule, for a pod kubelet made). Koordinator's koordlet does the same per disk number on
the best-effort QoS directory and on annotated pods (its `BlkIOReconcile`: one `MAJ:MIN value` write per file,
`0` to remove); here the target is every offline pod, from the node's configuration.

What each kernel can hold (measured, docs/agent.md): v1 throttles what a pod's own tasks submit, that is reads,
direct I/O and the writeback it issues itself (fsync); the kernel's flusher threads write the rest of its page
cache as the root group, unthrottled. v2 with the memory and io controllers attributes writeback to the pod
(cgroup writeback), so `io.max` holds buffered writes too. A weight acts only among siblings (an offline pod
under `kubepods/besteffort` is weighed against its siblings there) and only on disks with an io cost model
(v2 `io.cost.qos`) or the bfq scheduler; the plan says which disks have neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.config_ioqos import IoQosConfig
from agent.decide.ops import IoStatus
from agent.model import BlockDevice, CgroupDirs, CgroupState, PodCgroups, PodView

__all__ = ["IoPlan", "IoStatus", "IoWant", "plan_io", "rate"]

#: v1 throttle files and the setting each takes (read/write x bytes/I/Os)
V1_LIMITS = (
    ("blkio.throttle.read_bps_device", "offline_read_bps"),
    ("blkio.throttle.write_bps_device", "offline_write_bps"),
    ("blkio.throttle.read_iops_device", "offline_read_iops"),
    ("blkio.throttle.write_iops_device", "offline_write_iops"),
)
#: io.max keys and the setting each takes
V2_LIMITS = (("rbps", "offline_read_bps"), ("wbps", "offline_write_bps"), ("riops", "offline_read_iops"),
             ("wiops", "offline_write_iops"))  # fmt: skip
BFQ_MAX_WEIGHT = 1000
CFQ_MIN_WEIGHT = 10


@dataclass(frozen=True, slots=True)
class IoWant:
    """`value` wanted in `file` of `dirs`' blkio directory (kept only where the file exists and differs)."""

    dirs: CgroupDirs
    file: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class IoPlan:
    wants: tuple[IoWant, ...] = ()
    status: IoStatus = field(default_factory=IoStatus)
    notes: tuple[str, ...] = ()


def rate(value: int, unit: str) -> str:
    """A limit in words: `50Mi/s`, `2000 IOPS`, `no limit`."""
    if value <= 0:
        return "no limit"
    if unit == "B":
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size and value % size == 0:
                return f"{value // size}{suffix}/s"
        return f"{value} B/s"
    return f"{value} IOPS"


def _limits_words(cfg: IoQosConfig) -> str:
    return (
        f"read {rate(cfg.offline_read_bps, 'B')}, write {rate(cfg.offline_write_bps, 'B')}, "
        f"read {rate(cfg.offline_read_iops, 'io')}, write {rate(cfg.offline_write_iops, 'io')}"
    )


def io_max_line(device: str, cfg: IoQosConfig) -> str | None:
    """The io.max line for one disk; None when every limit is 0 (the pod gets no line: no rule)."""
    values = [(key, int(getattr(cfg, setting))) for key, setting in V2_LIMITS]
    if not any(v > 0 for _, v in values):
        return None
    return " ".join([device, *(f"{key}={v if v > 0 else 'max'}" for key, v in values)])


def _device_notes(devices: Sequence[BlockDevice], cfg: IoQosConfig, v2: bool) -> list[str]:
    notes: list[str] = []
    for d in devices:
        weight = (
            f"weight {cfg.offline_weight} acts through {d.weight_model}"
            if d.weight_model
            else f"weight {cfg.offline_weight} has no effect there (no io cost model, scheduler not bfq)"
        )
        notes.append(
            f"I/O QoS: each offline pod limited on {d.name} ({d.number}, {d.why}): {_limits_words(cfg)}; {weight}"
        )
    if not v2:
        notes.append(
            "I/O QoS on cgroup v1: reads, direct I/O and writeback a pod issues itself (fsync) are limited; the "
            "kernel's background writeback of its page cache is not attributed to it (cgroup v2 does that)"
        )
    return notes


def _v1_limits(pod: PodView, cgs: PodCgroups, cg: CgroupState, cfg: IoQosConfig) -> tuple[list[IoWant], bool]:
    """v1: the throttle lines on each container (flat hierarchy: module docstring), and whether any file exists."""
    wants: list[IoWant] = []
    limited = False
    for name, c in sorted(cgs.containers.items()):
        for dev in cg.devices:
            for file, setting in V1_LIMITS:
                value = int(getattr(cfg, setting))
                if value > 0:
                    limited = limited or cg.has(c.blkio, file)
                    unit = "B" if setting.endswith("bps") else "io"
                    why = (
                        f"{pod.key}/{name} is offline: on {dev.name} ({dev.number}) io_qos.{setting} "
                        f"{rate(value, unit)} (v1: each container, the hierarchy is flat)"
                    )
                    wants.append(IoWant(c, file, f"{dev.number} {value}", why))
    return wants, limited


def _pod_wants(pod: PodView, cgs: PodCgroups, cg: CgroupState, cfg: IoQosConfig) -> tuple[list[IoWant], bool]:
    """The I/O knobs of one offline pod, and whether a limit file exists for it (it is limited)."""
    d = cgs.pod
    v2 = cg.version == "v2"
    if v2:
        wants: list[IoWant] = []
        limited = False
        for dev in cg.devices:
            line = io_max_line(dev.number, cfg)
            if line is not None:
                limited = limited or cg.has(d.blkio, "io.max")
                why = f"{pod.key} is offline: on {dev.name} ({dev.number}) {_limits_words(cfg)}"
                wants.append(IoWant(d, "io.max", line, why))
    else:
        wants, limited = _v1_limits(pod, cgs, cg, cfg)
    w = cfg.offline_weight
    why = f"{pod.key} is offline: io_qos.offline_weight {w}"
    if v2:
        wants.append(IoWant(d, "io.weight", f"default {w}", why))
        wants.append(IoWant(d, "io.bfq.weight", f"default {min(w, BFQ_MAX_WEIGHT)}", why + " (bfq: at most 1000)"))
    else:
        wants.append(IoWant(d, "blkio.bfq.weight", str(min(w, BFQ_MAX_WEIGHT)), why + " (bfq: at most 1000)"))
        cfq = max(CFQ_MIN_WEIGHT, min(w, BFQ_MAX_WEIGHT))
        wants.append(IoWant(d, "blkio.weight", str(cfq), why + " (CFQ: 10..1000)"))
    return wants, limited


def plan_io(pods: Sequence[PodView], cg: CgroupState, cfg: IoQosConfig) -> IoPlan:
    """Every I/O QoS value wanted for the offline pods (module docstring), with the sentences that explain them."""
    if not cfg.enabled:
        return IoPlan(notes=("io_qos.enabled is false: no I/O knobs (values the agent wrote go back)",))
    devices = tuple((d.number, d.name, d.weight_model) for d in cg.devices)
    notes = list(cg.device_notes)
    if not cg.devices:
        notes.append("I/O QoS: no disk to limit on this node (io_qos.devices)")
        return IoPlan(status=IoStatus(True), notes=tuple(notes))
    v2 = cg.version == "v2"
    offline = [(p, cg.pods[p.uid]) for p in sorted(pods, key=lambda p: p.uid) if p.offline and p.uid in cg.pods]
    if not v2 and offline and not offline[0][1].pod.blkio:
        notes.append("I/O QoS: no cgroup v1 blkio hierarchy under the cgroup root: no I/O knobs (mount blkio)")
        return IoPlan(status=IoStatus(True, devices), notes=tuple(notes))
    notes.extend(_device_notes(cg.devices, cfg, v2))
    wants: list[IoWant] = []
    limited = 0
    for pod, cgs in offline:
        mine, held = _pod_wants(pod, cgs, cg, cfg)
        wants.extend(mine)
        limited += held
    return IoPlan(tuple(wants), IoStatus(True, devices, limited), tuple(notes))
