"""What an idle agent spends (docs/scale.md, "Idle cost"; benchmarks/bench_agent_idle.py): no loop spinning while
a duty's gate is shut, and the journal saved every knob change without asdict's deep copy (same bytes)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from agent.act.statedir import Journal, KnobEntry, ProcEntry
from agent.daemon.cycle import GATED_POLL
from agent.daemon.timing import Duty, Schedule
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness

Tree = Callable[..., KubeletCgroupTree]


def _unsynced(h: Harness) -> None:
    h.cluster._synced = False  # the first list of the Node and its Pods has not come (API server unreachable)


def test_a_held_duty_due_is_a_wait_of_held_poll_not_zero() -> None:
    s = Schedule(100.0, (Duty("qos", "", lambda _now: None, every=lambda: 10.0),
                         Duty("sample", "", lambda _now: None, every=lambda: 1.0, first=0.5)))  # fmt: skip
    assert s.delay(100.0) == 0.0  # qos due now
    assert s.delay(100.0, held=("qos",), held_poll=0.1) == 0.1
    assert s.delay(100.25, held=("qos",), held_poll=0.5) == 0.25  # sample's timer is nearer
    assert s.delay(100.0, 0.02, held=("qos",), held_poll=0.1) == 0.02  # an extra wake-up still counts


def test_the_loop_does_not_spin_before_the_node_and_pods_are_listed(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """Before: every timed duty is gated on the first list, their timers stayed due and the loop waited 0 s, a busy
    loop at every start (about a CPU-second) and for as long as the API server could not be reached."""
    h = make_harness(kubelet_cgroup_tree(version="v2"), tmp_path, configure=_unsynced)
    cycle = h.agent.cycle
    assert cycle.delay() >= GATED_POLL
    runner = threading.Thread(target=h.agent.run, daemon=True)
    runner.start()
    threading.Event().wait(0.35)  # real time: the loop's waits are real even with the fake clock
    h.agent.stop()
    runner.join(5)
    steps = h.agent.stats.loop_durations["step"].count
    assert cycle.last_plan is None
    assert steps <= 10, f"{steps} steps in 0.35 s: the loop spins"
    h.cluster._synced = True
    h.agent.wake()
    h.clock.advance(1.0)
    h.agent.step()
    assert cycle.last_plan is not None  # the gate open: decided as before


def test_the_journal_is_saved_as_asdict_would_write_it(tmp_path: Path) -> None:
    """The save builds the entries' dicts itself (asdict deep-copied every field, half of a save's cost): the file
    must stay what it was, field for field."""
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    knob = KnobEntry("/sys/fs/cgroup/kubepods/besteffort", "cpu.max", "max 100000", "45000 100000",
                     "44000 100000", "ns/pod", 1.5, {"cpu.max.burst": "0"})  # fmt: skip
    journal.knobs[knob.key] = knob
    plain = KnobEntry("/sys/fs/cgroup/kubepods/burstable/pod1", "cpu.weight", "10", "2")
    journal.knobs[plain.key] = plain
    journal.procs[42] = ProcEntry(42, 1234, "0", "1000", None, "ns/p")
    journal.save()
    saved = json.loads((tmp_path / "journal.json").read_text())
    assert saved["knobs"] == [asdict(e) for e in sorted(journal.knobs.values(), key=lambda e: e.key)]
    assert saved["procs"] == [asdict(journal.procs[42])]
    knob.resets["cpu.max.burst"] = "1000"  # a later change of the entry is not in the file already written
    assert json.loads((tmp_path / "journal.json").read_text())["knobs"][0]["resets"] == {"cpu.max.burst": "0"}
    again = Journal(str(tmp_path / "journal.json"), fsync=False)
    again.load()
    assert again.knobs[plain.key] == plain and again.procs[42] == journal.procs[42]


def test_an_idle_listener_does_not_wake_five_times_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The /metrics listener's selector waited 0.2 s at most even with no connection open; with none open it now
    waits for a connection, a finished request or `stop` (each wakes it), and a connection still gets its answer."""
    import selectors
    import urllib.request

    from prometheus_client import CollectorRegistry

    import tidemark.serving_bounded as bounded
    from tidemark.serving import ServingServer

    waits: list[float | None] = []

    class Counting(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            waits.append(timeout)
            return super().select(timeout)

    monkeypatch.setattr(bounded.selectors, "DefaultSelector", Counting)
    server = ServingServer("127.0.0.1:0", CollectorRegistry(), healthz={"ok": lambda: (True, "ok")}).start()
    try:
        threading.Event().wait(0.8)
        idle = len(waits)
        assert idle <= 2, f"{idle} selector wakes in 0.8 s with no connection"
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as resp:
            assert resp.status == 200
    finally:
        stopped = threading.Thread(target=server.stop)
        stopped.start()
        stopped.join(5)
    assert not stopped.is_alive()


def test_run_does_not_load_what_only_plan_needs() -> None:
    """`tidemark-agent run` imports agent.cli: the modules only `plan --cluster` uses (reading a cluster dump,
    ColocationProfiles, shape checks) are imported where `plan` needs them, not in every agent's memory."""
    import subprocess
    import sys

    code = (
        "import sys, agent.cli, agent.daemon.runner; "
        "print(sorted(m for m in ('tidemark.objects', 'tidemark.profiles', 'tidemark.shapes') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_the_usage_memo_keeps_only_the_window_s_samples() -> None:
    """`usage.summarize` memoizes each sample's class sums, the entry holding the sample: samples that had left the
    60-s window stayed in memory until 4096 were cached (an hour: +15 MiB on a 10-pod hollow node, RSS growing all
    that time). The memo now holds the window and a little more, and the results are those computed afresh."""
    from agent.decide import usage
    from agent.model import Amounts, PodView, Sample
    from tidemark.apis import PodUID

    pods = [PodView(PodUID(f"u{i}"), "ns", f"p{i}", -1 if i % 3 == 0 else 0, "Burstable") for i in range(10)]
    alloc = Amounts(1000.0, 4e9)
    usage._SUMS.clear()
    window: list[Sample] = []
    for t in range(400):
        pod_use = {p.uid: Amounts(float(10 + (t * 7 + i) % 50), 64e6 + i) for i, p in enumerate(pods)}
        window.append(Sample(float(t), 1.0, Amounts(400.0 + t % 9, 2e9), Amounts(300.0, 1e9), pod_use))
        window = window[-60:]
        view = usage.summarize(window, pods, alloc, "mean")
        assert len(usage._SUMS) <= 60 + usage._SUMS_SLACK, f"{len(usage._SUMS)} samples cached at t={t}"
    usage._SUMS.clear()
    assert usage.summarize(window, pods, alloc, "mean") == view  # the memo changes nothing
    # a new classification (a pod turned offline) is not served from the memo of the old one
    flipped = [replace(p, qos_level=-1) if p.uid == PodUID("u1") else p for p in pods]
    fresh = usage.summarize(window, flipped, alloc, "mean")
    usage._SUMS.clear()
    assert fresh == usage.summarize(window, flipped, alloc, "mean") and fresh.offline != view.offline
