"""The offline tier's memory guard (agent.decide.memguard) and its sensing (agent.sense.meminfo)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cgroups.fs import FileReader
from agent.config_memqos import TierMemoryConfig
from agent.decide.memguard import PAGE, NodeMemory, TierGroup, guard, tier_groups, tolerance
from agent.model import Amounts, CgroupDirs, PodView
from agent.sense.meminfo import group_memory, low_watermark_pages, node_memory, parse_meminfo
from tidemark.apis import PodUID

Mi = 2**20
V1 = CgroupDirs(
    "/cg/cpu/kubepods/besteffort", "/cg/cpuacct/kubepods/besteffort", "/cg/memory/kubepods/besteffort", "v1"
)
V2 = CgroupDirs("/cg/kubepods/besteffort", "/cg/kubepods/besteffort", "/cg/kubepods/besteffort", "v2")
CFG = TierMemoryConfig(margin=256 * Mi, reclaim_wait=0.01, reclaim_step=64 * Mi)


def group(used: int, cache: int, current: int | None = None, dirs: CgroupDirs = V1) -> TierGroup:
    return TierGroup("the BestEffort root", dirs, used, cache, current)


def test_headroom_lets_the_tier_grow_by_free_memory_above_the_line() -> None:
    mem = NodeMemory(free=2048 * Mi, available=4096 * Mi, low_watermark=64 * Mi)
    plan = guard(mem, [group(1024 * Mi, 512 * Mi)], None, "v1", CFG)
    (g,) = plan.limits
    assert plan.headroom == (2048 - 64 - 256) * Mi
    assert g.limit == 1024 * Mi + plan.headroom
    assert g.reclaim == 0
    assert "headroom" in g.reason


def test_a_deficit_takes_page_cache_back_and_never_more() -> None:
    mem = NodeMemory(free=100 * Mi, available=900 * Mi, low_watermark=64 * Mi)  # 220Mi under the line
    (g,) = guard(mem, [group(1024 * Mi, 512 * Mi)], None, "v1", CFG).limits
    assert g.limit == (1024 - 220) * Mi
    (tight,) = guard(mem, [group(1024 * Mi, 50 * Mi)], None, "v1", CFG).limits
    assert tight.limit == (1024 - 50) * Mi  # anonymous memory is never squeezed by the guard


def test_online_memory_wait_reclaims_page_cache_v2_through_memory_reclaim() -> None:
    mem = NodeMemory(free=2048 * Mi, available=4096 * Mi, low_watermark=64 * Mi)
    plan = guard(mem, [group(1024 * Mi, 512 * Mi, dirs=V2)], 0.05, "v2", CFG)
    (g,) = plan.limits
    assert plan.reclaiming
    assert g.reclaim == 64 * Mi and g.limit == 1024 * Mi  # no growth while online pods stall
    (v1,) = guard(mem, [group(1024 * Mi, 512 * Mi)], 0.05, "v1", CFG).limits
    assert v1.reclaim == 0 and v1.limit == (1024 - 64) * Mi  # v1: the limit itself reclaims
    (calm,) = guard(mem, [group(1024 * Mi, 512 * Mi, dirs=V2)], 0.001, "v2", CFG).limits
    assert calm.reclaim == 0 and calm.limit > 1024 * Mi


def test_a_small_rise_keeps_the_file_and_a_fall_is_written() -> None:
    mem = NodeMemory(free=2048 * Mi, available=4096 * Mi, low_watermark=64 * Mi)
    want = 1024 * Mi + (2048 - 64 - 256) * Mi
    (kept,) = guard(mem, [group(1024 * Mi, 512 * Mi, current=want - PAGE * 10)], None, "v1", CFG).limits
    assert kept.limit == want - PAGE * 10
    (fallen,) = guard(mem, [group(1024 * Mi, 512 * Mi, current=want + PAGE)], None, "v1", CFG).limits
    assert fallen.limit == want
    (risen,) = guard(mem, [group(1024 * Mi, 512 * Mi, current=want - tolerance(CFG))], None, "v1", CFG).limits
    assert risen.limit == want


def _pod(uid: str, qos_level: int, qos_class: str) -> PodView:
    return PodView(PodUID(uid), "ns", uid, qos_level, qos_class, requests=Amounts())  # type: ignore[arg-type]


def test_the_besteffort_root_is_guarded_only_without_online_pods_in_it() -> None:
    used = {V1.memory: (100 * Mi, 10 * Mi, None)}
    groups, notes = tier_groups([_pod("a", -1, "BestEffort")], V1, used)
    assert [g.used for g in groups] == [100 * Mi] and not notes
    groups, notes = tier_groups([_pod("a", -1, "BestEffort"), _pod("b", 0, "BestEffort")], V1, used)
    assert groups == [] and "online pod" in notes[0]
    assert tier_groups([], None, used)[0] == []


page_counts = st.integers(min_value=0, max_value=2**22)  # up to 16 GiB in pages


@settings(max_examples=300, deadline=None)
@given(
    free=page_counts,
    low=st.integers(min_value=0, max_value=2**18),
    margin=st.integers(min_value=0, max_value=2**17),
    groups=st.lists(st.tuples(page_counts, page_counts, st.one_of(st.none(), page_counts)), min_size=1, max_size=4),
    wait=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)),
    v2=st.booleans(),
)
def test_property_the_limit_stays_between_reclaimable_and_the_headroom(
    free: int,
    low: int,
    margin: int,
    groups: list[tuple[int, int, int | None]],
    wait: float | None,
    v2: bool,
) -> None:
    """Never below what offline uses minus what reclaim may take; offline growth never takes free memory under the
    low watermark + margin (the sum of the groups' growth is at most the headroom, none when there is none)."""
    cfg = TierMemoryConfig(margin=margin * PAGE)
    tier = [
        TierGroup(f"g{i}", V2 if v2 else V1, u * PAGE, min(c, u) * PAGE, None if cur is None else cur * PAGE)
        for i, (u, c, cur) in enumerate(groups)
    ]
    plan = guard(NodeMemory(free * PAGE, free * PAGE, low * PAGE), tier, wait, "v2" if v2 else "v1", cfg)
    growth = 0
    for g in plan.limits:
        assert g.limit >= g.group.used - g.group.cache
        assert 0 <= g.reclaim <= g.group.cache
        growth += max(0, g.limit - g.group.used)
    assert growth <= max(0, plan.headroom)
    assert free * PAGE - growth >= min(free * PAGE, (low + margin) * PAGE)


def test_sensing_reads_meminfo_zoneinfo_and_a_group(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "meminfo").write_text("MemTotal: 8000 kB\nMemFree:  2000 kB\nMemAvailable: 5000 kB\n")
    (tmp_path / "zoneinfo").write_text(
        "Node 0, zone DMA\n  pages free 3\n        min      10\n        low      12\n        high 14\n"
        "Node 0, zone Normal\n        min      100\n        low      125\n"
    )
    mem = node_memory(FileReader(), str(tmp_path), page=4096)
    assert mem == NodeMemory(2000 * 1024, 5000 * 1024, 137 * 4096)
    assert parse_meminfo("Junk\nMemFree: x kB\n") == {}
    assert low_watermark_pages("no zones") is None
    g = tmp_path / "be"
    g.mkdir()
    (g / "memory.usage_in_bytes").write_text("1000000\n")
    (g / "memory.stat").write_text("cache 5\ntotal_active_file 300000\ntotal_inactive_file 200000\n")
    (g / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    d = CgroupDirs(str(g), str(g), str(g), "v1")
    assert group_memory(FileReader(), d) == (1000000, 500000, None)
    (g / "memory.limit_in_bytes").write_text("4096000\n")
    assert group_memory(FileReader(), d) == (1000000, 500000, 4096000)
