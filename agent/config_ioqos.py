"""The `io_qos` section of the agent's configuration (docs/agent.md, "I/O QoS").

Kept beside `agent.config` (which builds `AgentConfig` from it and maps the YAML keys) as
`agent.config_memqos` is. Pure: no I/O.

Why these defaults: I/O QoS is on, with per-offline-pod limits sized so that a batch job's usual I/O
(reading its input, writing logs and checkpoints) runs unthrottled and only a pod that streams to disk flat
out (a shuffle spill, a compaction, `dd`) is held. On a general-purpose cloud SSD (gp3's baseline is 125 MiB/s
and 3000 IOPS) one offline pod can then take at most 40 % of the write bandwidth and a third of the write
IOPS; reads get twice the room (readahead makes buffered reads cheap per byte). Nodes with local NVMe raise
them (per-node overrides). The weight (10 against the kernel's default 100) acts only where a disk has an io
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
        default=100 * MiB,
        metadata=_doc(
            "Read bytes per second of each offline pod on each disk (default 100Mi), a quantity (`100Mi`, `50M`); "
            "0 = no limit."
        ),
    )
    offline_write_bps: int = field(
        default=50 * MiB,
        metadata=_doc(
            "Write bytes per second of each offline pod on each disk (default 50Mi); 0 = no limit. cgroup v1 holds "
            "direct I/O and the writeback a pod does itself (fsync), not the kernel's background writeback of its "
            "page cache; v2 holds all of it (cgroup writeback)."
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
