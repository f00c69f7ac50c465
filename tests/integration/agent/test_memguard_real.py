"""The memory guard on the machine's real cgroup v1 hierarchy (root): the BestEffort root's `memory.limit_in_bytes`
as the guard decides it, written by the executor (journaled), reclaiming the tier's page cache, and put back.

A kubelet-like tree (tests/fixtures/cgroups.py) with one offline pod; dd inside its container writes a file on
the root filesystem (ext4 here), which leaves its pages cached and charged to the pod, hence to the BestEffort
root. The node's free memory is given to the guard as a deficit (free = low watermark + margin - 64 MiB), so the
limit is what the root uses minus 64 MiB of page cache: the kernel must reclaim it at the write (v1 lowers a limit
by reclaiming in the writer) and the root's usage ends at or under the limit, the process alive. The real
/proc/meminfo and /proc/zoneinfo are read as the daemon reads them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal
from agent.cgroups.fs import FileReader
from agent.config_memqos import TierMemoryConfig
from agent.decide.memguard import guard, tier_groups
from agent.decide.ops import SetCgroupValue
from agent.model import NodeMemory
from agent.sense.meminfo import group_memory, node_memory
from tests.fixtures.cgroups import RealCgroupV1Tree
from tests.integration.agent.test_real_cgroups import report

pytestmark = [pytest.mark.cgroup]

Mi = 2**20
UID = "0a1b2c3d-0000-4000-8000-00000000e003"


def _read(path: str) -> int:
    with open(path) as f:
        return int(f.read())


def test_the_guard_limit_reclaims_offline_page_cache_on_v1(real_cgroup_v1: RealCgroupV1Tree, tmp_path: Path) -> None:
    t = real_cgroup_v1
    pod = t.add_pod(UID, "BestEffort", {"job": "containerd://" + "a" * 64})
    job = pod.containers["job"]
    data = Path("/var/tmp") / f"tidemark-guard-{os.getpid()}"
    script = f"echo $$ > {job.memory}/cgroup.procs && exec dd if=/dev/zero of={data} bs=1M count=160 status=none"
    try:
        subprocess.run(["sh", "-c", script], check=True, timeout=60)
        be = t.layout.qos("BestEffort")
        reader = FileReader()
        mem = node_memory(reader)
        assert mem is not None and mem.free > 0 and mem.low_watermark > 0  # the real files parse
        found = group_memory(reader, be)
        assert found is not None
        used, cache, current = found
        report(f"BestEffort root: used {used / Mi:.0f} MiB, page cache {cache / Mi:.0f} MiB, limit {current}")
        assert cache >= 100 * Mi and current is None  # dd's pages are charged to the offline tier
        cfg = TierMemoryConfig(margin=256 * Mi)
        deficit = NodeMemory(mem.low_watermark + cfg.margin - 64 * Mi, mem.available, mem.low_watermark)
        groups, _ = tier_groups([], be, {be.memory: found})
        (limit,) = guard(deficit, groups, None, "v1", cfg).limits
        assert limit.limit == used - 64 * Mi
        journal = Journal(str(tmp_path / "journal.json"), fsync=False)
        writer = CgroupWriter(journal, roots=t.kubepods.distinct())
        want = SetCgroupValue(be.memory, "memory.limit_in_bytes", str(limit.limit), None, limit.reason)
        result = writer.apply([want])
        assert not result.failed and not result.invalid, result
        after = group_memory(reader, be)
        assert after is not None
        report(f"after the guard's limit {limit.limit / Mi:.0f} MiB: used {after[0] / Mi:.0f} MiB")
        assert after[0] <= limit.limit and after[2] == limit.limit
        assert len(journal.knobs) == 1
        # put back, as uninstall or `tier.memory.enabled: false` do
        back = writer.restore_all()
        assert not back.failed and not back.invalid and not back.skipped, back
        assert _read(os.path.join(be.memory, "memory.limit_in_bytes")) >= 2**62
    finally:
        data.unlink(missing_ok=True)
