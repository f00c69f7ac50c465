"""The `io_qos` section of the agent's configuration (docs/agent.md, "I/O QoS").

Kept beside `agent.config` (which builds `AgentConfig` from it and maps the YAML keys) as
`agent.config_memqos` is. Pure: no I/O.

Why these defaults: I/O QoS is on; offline pods' bytes per second follow the online pods' I/O wait (`tier.io.*`,
`TierIoConfig`, agent.decide.iopressure) instead of a constant, which was too low on a fast idle disk and too high
on a slow busy one (issue 32: 22 % of BestEffort's offline work under the former 50 MiB/s). The static byte
limits stay selectable (0 by default). The IOPS limits are sized so that a batch job's usual I/O runs
unthrottled: on a general-purpose cloud SSD (gp3's baseline is 3000 IOPS) one offline pod can take at most a
third of the write IOPS. The weight (10 against the kernel's default 100) acts only where a disk has an io
cost model or the BFQ scheduler (the plan says which disks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MiB = 2**20


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class IoQosConfig:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "I/O QoS (default true, where the files exist): offline pods' block I/O limited on the node's disks "
            "(v2 `io.max`, `io.weight`; v1 `blkio.throttle.*_device`, `blkio.bfq.weight`). false puts back every "
            "I/O value the agent wrote (where nobody changed it since). Online pods are never touched."
        ),
    )
    devices: tuple[str, ...] = field(
        default=(),
        metadata=_doc(
            "The disks to limit (default empty: automatic, the disks under the kubelet root directory and the "
            "container runtimes' roots; loop devices left out): a list of `MAJ:MIN`, `/dev/<name>` or names in "
            "/sys/class/block (`vdb`, `nvme0n1`); `auto` adds the automatic ones. A partition stands for its disk."
        ),
    )
    offline_read_bps: int = field(
        default=0,
        metadata=_doc(
            "A static cap on the read bytes per second of each offline pod on each disk (default 0: none; the I/O "
            "controller, `tier.io.*`, sets the limit from the online pods' I/O wait), a quantity (`100Mi`, `50M`). "
            "Above 0 it stays a ceiling over the controller's limit, or the only limit with `tier.io.enabled: false`."
        ),
    )
    offline_write_bps: int = field(
        default=0,
        metadata=_doc(
            "A static cap on the write bytes per second of each offline pod on each disk (default 0: none, as for "
            "reads; until issue 32 the default was a constant 50Mi). cgroup v1 holds direct I/O and the writeback a "
            "pod does itself (fsync), not the kernel's background writeback of its page cache (the memory guard "
            "bounds that: its limit bounds the tier's dirty pages); v2 holds all of it (cgroup writeback)."
        ),
    )
    offline_read_iops: int = field(
        default=2000,
        metadata=_doc("Read I/Os per second of each offline pod on each disk (default 2000); 0 = no limit."),
    )
    offline_write_iops: int = field(
        default=1000,
        metadata=_doc("Write I/Os per second of each offline pod on each disk (default 1000); 0 = no limit."),
    )
    offline_weight: int = field(
        default=10,
        metadata=_doc(
            "Offline pods' proportional I/O weight, 1..10000 (default 10; the kernel's default is 100): v2 "
            "`io.weight` (io cost model) and `io.bfq.weight` / v1 `blkio.bfq.weight` (clamped to 1..1000), v1 "
            "`blkio.weight` (CFQ, 10..1000). Acts only on disks with an io cost model or the bfq scheduler."
        ),
    )


@dataclass(frozen=True, slots=True)
class TierIoConfig:
    """`tier.io.*`: offline pods' I/O bandwidth by the online pods' I/O wait (agent.decide.iopressure).

    Kept here until `agent.config_tier` holds the tier's keys (issue 32's shared design); the YAML keys are
    `tier.io.*` either way."""

    enabled: bool = field(
        default=True,
        metadata=_doc(
            "The I/O controller (default true): each offline pod's read and write bytes per second on each managed "
            "disk follow the online pods' I/O wait, halved when it passes `tier.io.onlineWaitTarget`, raised by "
            "`tier.io.raiseStep` while it stays under (AIMD). false leaves only the static `io_qos` limits."
        ),
    )
    online_wait_target: float = field(
        default=0.10,
        metadata=_doc(
            "The online pods' I/O wait the controller aims under (default 0.10), in (0, 1]: the fraction of the "
            "last period some task of the worst online pod waited on I/O (v2 `io.pressure` `some total` of each "
            "online pod; v1 the worst online pod's block I/O delay with kernel.task_delayacct=1, else "
            "/proc/pressure/io, else the managed disks' await from /proc/diskstats)."
        ),
    )
    min_bps: int = field(
        default=4 * MiB,
        metadata=_doc(
            "The least an offline pod is held to (default 4Mi per second, per disk), a quantity: an offline pod "
            "holding a lock must still progress."
        ),
    )
    max_bps: int = field(
        default=0,
        metadata=_doc(
            "The most the controller allows (default 0: no limit at all once calm and the limit no longer binds); "
            "a quantity per second."
        ),
    )
    raise_step: int = field(
        default=8 * MiB,
        metadata=_doc("Bytes per second the limit rises per calm `tier.period` (default 8Mi), a quantity."),
    )
    decrease: float = field(
        default=0.5,
        metadata=_doc(
            "The factor the limit is multiplied by when the online wait passes the target (default 0.5), in (0, 1)."
        ),
    )
