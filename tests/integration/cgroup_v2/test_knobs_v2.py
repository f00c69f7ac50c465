"""Every cgroup v2 knob the executor writes, on a real v2 kernel, with its real effect; the write
order that keeps the kernel from refusing a batch (EINVAL traps); the journal and `tidemark-agent
restore`.

Knobs go through the agent's one executor (`CgroupWriter`: validation, safe order, journal), as the
daemon writes them. Effects are measured on real busy or allocating processes; under QEMU's TCG only
ratios and counters are asserted, never absolute times.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import StateDir
from agent.cgroups.fs import FileReader, ReadStats
from agent.cli import main
from agent.decide.ops import SetCgroupValue
from agent.sense.cgroups import throttling
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB, RealProcess
from tests.integration.agent.test_real_cgroups import cpu_share, report

pytestmark = [pytest.mark.cgroup_v2]

A = "0a1b2c3d-0000-4000-8000-00000000a001"
B = "0a1b2c3d-0000-4000-8000-00000000b002"


def writer(tree: RealCgroupV2Tree, state: StateDir | None = None) -> CgroupWriter:
    return CgroupWriter(state.journal if state else None, roots=[tree.kubepods.cpu])


def apply(w: CgroupWriter, *writes: tuple[str, str, str]) -> list[str]:
    result = w.apply([SetCgroupValue(p, f, v) for p, f, v in writes])
    assert not result.invalid, result.invalid
    assert not result.failed, [(o.file, o.value, o.error) for o in result.failed]
    return [f"{o.file}={o.value}" for o in result.applied]


def events(tree: RealCgroupV2Tree, d: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in tree.read(d, "memory.events").splitlines())}


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def two_burstable(tree: RealCgroupV2Tree, cpu_b: int = 0) -> tuple[RealProcess, RealProcess]:
    tree.add_pod(A, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500)
    tree.add_pod(B, "Burstable", {"job": "containerd://" + "b" * 64}, cpu_request_milli=500)
    a = tree.start_process(A, "app", cpu=0)
    b = tree.start_process(B, "job", cpu=cpu_b)
    return a, b


def test_cpu_weight_divides_a_contended_cpu(real_cgroup_v2: RealCgroupV2Tree) -> None:
    """Sibling pods at weights 100 and 1 (kubelet's 20 and 20 before): A takes CPU 0."""
    tree = real_cgroup_v2
    a, b = two_burstable(tree)
    before = cpu_share(a, b, 3.0)
    pod_a, pod_b = tree.pods[A].dirs.cpu, tree.pods[B].dirs.cpu
    assert apply(writer(tree), (pod_b, "cpu.weight", "1"), (pod_a, "cpu.weight", "100")) == [
        "cpu.weight=100",
        "cpu.weight=1",
    ]
    assert tree.read(pod_b, "cpu.weight") == "1"
    after = cpu_share(a, b, 5.0)
    report(f"v2 cpu.weight: A's share of CPU 0 {before:.1f} % at equal weights, {after:.1f} % at 100 vs 1")
    # 99 % in theory. Under TCG much less (likely the 6.1 kernel's tick-granular CFS preemption: B keeps
    # the CPU for at least a tick each time it is picked, and a tick is long in emulated work). Measured: 72.8-99 % on a
    # quiet host, 64.7 % on a loaded one (2026-11-27). Asserted: the weights clearly move the CPU to A
    # (without them A stays near 50 %).
    assert before < 70.0
    assert after >= 62.0 and after >= before + 15.0


def test_cpu_max_throttles_and_the_reader_counts_it(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    a, b = two_burstable(tree, cpu_b=1)
    pod_b = tree.pods[B].dirs
    reader = FileReader(ReadStats())
    t0 = throttling(reader, pod_b)
    assert t0 is not None
    apply(writer(tree), (pod_b.cpu, "cpu.max", "20000 100000"))
    assert tree.read(pod_b, "cpu.max") == "20000 100000"
    time.sleep(0.5)
    # B (20 % quota on its own CPU) against A (unlimited on its own CPU): per wall second
    a0, b0, w0 = a.cpu_seconds(), b.cpu_seconds(), time.monotonic()
    time.sleep(3.0)
    a1, b1, w1 = a.cpu_seconds(), b.cpu_seconds(), time.monotonic()
    ratio_b = (b1 - b0) / (w1 - w0)
    ratio_a = (a1 - a0) / (w1 - w0)
    t1 = throttling(reader, pod_b)
    assert t1 is not None
    periods = t1.nr_throttled - t0.nr_throttled
    report(f"v2 cpu.max 20 %: B used {ratio_b:.3f} core, unlimited A {ratio_a:.3f}; throttled {periods} periods")
    assert ratio_b <= 0.3
    assert ratio_b < ratio_a * 0.6
    assert t1.nr_throttled > t0.nr_throttled and t1.throttled_ns > t0.throttled_ns


def test_cpu_max_burst_needs_its_quota_first(real_cgroup_v2: RealCgroupV2Tree) -> None:
    """The kernel refuses a burst above the quota (EINVAL); the executor raises the quota first."""
    tree = real_cgroup_v2
    tree.add_pod(A, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500, cpu_limit_milli=200)
    pod = tree.pods[A].dirs.cpu
    assert tree.read(pod, "cpu.max") == "20000 100000"
    with pytest.raises(OSError) as trap:
        tree.write(pod, "cpu.max.burst", "50000")
    assert trap.value.errno == errno.EINVAL
    # the same change as one batch, burst listed first: quota (phase 2) goes before burst (phase 3)
    done = apply(writer(tree), (pod, "cpu.max.burst", "50000"), (pod, "cpu.max", "60000 100000"))
    assert done == ["cpu.max=60000 100000", "cpu.max.burst=50000"]
    assert tree.read(pod, "cpu.max.burst") == "50000"


def test_cpu_weight_goes_before_cpu_idle(real_cgroup_v2: RealCgroupV2Tree) -> None:
    """`cpu.weight` on a group with `cpu.idle=1` is EINVAL: the executor writes the weight first."""
    tree = real_cgroup_v2
    tree.add_pod(B, "Burstable", {"job": "containerd://" + "b" * 64}, cpu_request_milli=500)
    pod = tree.pods[B].dirs.cpu
    tree.write(pod, "cpu.idle", "1")
    with pytest.raises(OSError) as trap:
        tree.write(pod, "cpu.weight", "1")
    assert trap.value.errno == errno.EINVAL
    tree.write(pod, "cpu.idle", "0")
    done = apply(writer(tree), (pod, "cpu.idle", "1"), (pod, "cpu.weight", "1"))
    assert done == ["cpu.weight=1", "cpu.idle=1"]
    assert tree.read(pod, "cpu.idle") == "1"


def test_restoring_cpu_idle_keeps_kubelets_weight(real_cgroup_v2: RealCgroupV2Tree, tmp_path: Path) -> None:
    """The kernel resets `cpu.weight` to its default (100) when `cpu.idle` goes back to 0: the executor
    journals kubelet's weight with the idle write and puts it back after the restore."""
    tree = real_cgroup_v2
    tree.add_pod(B, "Burstable", {"job": "containerd://" + "b" * 64}, cpu_request_milli=500)
    pod = tree.pods[B].dirs.cpu
    kubelets = tree.read(pod, "cpu.weight")
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    assert apply(writer(tree, state), (pod, "cpu.idle", "1")) == ["cpu.idle=1"]
    result = writer(tree, state).restore_all()
    assert not result.failed, [(o.file, o.value, o.error) for o in result.failed]
    assert tree.read(pod, "cpu.idle") == "0"
    report(f"v2 cpu.weight after cpu.idle 1 -> 0: {tree.read(pod, 'cpu.weight')} (kubelet's {kubelets})")
    assert tree.read(pod, "cpu.weight") == kubelets


def test_memory_max_oom_kills_inside_the_group(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    tree.add_pod(B, "BestEffort", {"job": "containerd://" + "b" * 64})
    box = tree.pods[B].containers["job"].memory
    apply(writer(tree), (box, "memory.max", str(64 * MiB)))
    assert tree.read(box, "memory.max") == str(64 * MiB)
    proc = tree.start_process(B, "job", memory_bytes=96 * MiB, busy=False)
    wait_until(lambda: proc.popen.poll() is not None, 60, "the process over memory.max to be OOM-killed")
    assert proc.popen.returncode == -9
    assert events(tree, box)["oom_kill"] >= 1


def test_memory_high_throttles_without_killing(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    tree.add_pod(B, "BestEffort", {"job": "containerd://" + "b" * 64})
    pod = tree.pods[B].dirs.memory
    apply(writer(tree), (pod, "memory.high", str(48 * MiB)))
    assert tree.read(pod, "memory.high") == str(48 * MiB)
    proc = tree.start_process(B, "job", memory_bytes=96 * MiB, busy=False)
    wait_until(lambda: events(tree, pod)["high"] > 0, 60, "memory.events high to count the throttling")
    time.sleep(1.0)
    assert proc.popen.poll() is None, "memory.high throttles and reclaims; it never kills"
    assert events(tree, pod)["oom_kill"] == 0
    total = int(tree.read(pod, "memory.pressure").splitlines()[0].rsplit("total=", 1)[1])
    high = events(tree, pod)["high"]
    report(f"v2 memory.high 48 MiB, 96 MiB wanted: {high} high events, memory.pressure total {total} us")
    assert total > 0


def test_memory_low_and_min_hold_their_values(real_cgroup_v2: RealCgroupV2Tree) -> None:
    """Online protection files exist on pod groups and keep exact byte values (page-rounded reads)."""
    tree = real_cgroup_v2
    tree.add_pod(A, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500)
    pod = tree.pods[A].dirs.memory
    for name, value in (("memory.min", 32 * MiB), ("memory.low", 128 * MiB)):
        tree.write(pod, name, value)
        assert tree.read(pod, name) == str(value)


def test_journal_and_restore_put_every_v2_original_back(
    real_cgroup_v2: RealCgroupV2Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = real_cgroup_v2
    tree.add_pod(A, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500, cpu_limit_milli=1000)
    tree.add_pod(B, "Burstable", {"job": "containerd://" + "b" * 64}, cpu_request_milli=500, memory_limit=512 * MiB)
    online, offline = tree.pods[A].dirs.cpu, tree.pods[B].dirs.cpu
    job = tree.pods[B].containers["job"].cpu
    files = [
        (online, "cpu.max.burst"),
        (job, "cpu.weight"),
        (offline, "cpu.max"),
        (offline, "cpu.idle"),
        (offline, "memory.high"),
        (offline, "memory.max"),
        (job, "memory.max"),
    ]
    before = {(d, f): tree.read(d, f) for d, f in files}
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    done = apply(
        writer(tree, state),
        (offline, "cpu.idle", "1"),
        (job, "cpu.weight", "5"),
        (offline, "cpu.max", "30000 100000"),
        (online, "cpu.max.burst", "50000"),
        (offline, "memory.high", str(200 * MiB)),
        (offline, "memory.max", str(256 * MiB)),
        (job, "memory.max", str(128 * MiB)),
    )
    assert len(done) == 7
    fresh = StateDir(state.path)
    fresh.load()
    assert {(e.path, e.file): e.original for e in fresh.journal.knobs.values()} == before
    # kubelet changes one of them meanwhile: restore must leave that one alone
    tree.write(job, "memory.max", str(100 * MiB))
    rc = main(
        [
            "restore",
            "--state-dir",
            state.path,
            "--cgroup-root",
            tree.cgroup_root,
            "--kube-cgroup-root",
            tree.kube_cgroup_root,
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    report(f"v2 restore: {out.strip()}")
    after = {(d, f): tree.read(d, f) for d, f in files}
    assert after == {**before, (job, "memory.max"): str(100 * MiB)}
