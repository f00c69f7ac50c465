"""localcluster/probe.py's `spike_and_resume` (`make run`'s steps 2 and 2b) on cgroup files a fake clock drives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster import probe


class Node:
    """cpuacct.usage of one online and two offline groups; each `sleep` advances the clock and the counters: online
    spins while the spike file exists, offline runs at 0.2 cores before it, nothing during it, and after it at
    `after(seconds since the spike's end)` cores (the tier's ceiling climbing back)."""

    def __init__(self, root: Path, after: dict[float, float]) -> None:
        self.t = 100.0
        self.spike = root / "ctl" / "spike"
        self.spike.parent.mkdir()
        self.online = root / "online"
        self.offline = [root / "job-0", root / "job-1"]
        self.used = {d: 0.0 for d in [self.online, *self.offline]}
        self.after = sorted(after.items())
        self.seen_spike = False
        self.ended: float | None = None
        for d in self.used:
            d.mkdir()
        self._write()

    def _write(self) -> None:
        for d, ns in self.used.items():
            (d / "cpuacct.usage").write_text(str(int(ns)))

    def monotonic(self) -> float:
        return self.t

    def offline_cores(self) -> float:
        if self.spike.exists():
            self.seen_spike = True
            return 0.0
        if not self.seen_spike:
            return 0.2
        if self.ended is None:
            self.ended = self.t
        since = self.t - self.ended
        return next((cores for at, cores in reversed(self.after) if since >= at), 0.0)

    def sleep(self, seconds: float) -> None:
        steps = max(1, round(seconds / 0.01))
        for _ in range(steps):
            cores = self.offline_cores()
            self.t += seconds / steps
            for d in self.offline:
                self.used[d] += cores / 2 * 1e9 * seconds / steps
            if self.spike.exists():
                self.used[self.online] += 1e9 * seconds / steps
        self._write()


def play(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, after: dict[float, float]) -> tuple[Node, dict[str, Any]]:
    node = Node(tmp_path, after)
    monkeypatch.setattr(probe, "time", node)
    got = probe.spike_and_resume(
        str(node.online), [str(d) for d in node.offline], "v1", str(node.spike), timeout=5.0, hold=1.5,
        resume_share=0.5, resume_timeout=4.0,
    )
    return node, got


def test_offline_back_is_the_first_window_at_half_its_pre_spike_rate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # At the floor (0.04 cores: 20 %) for 1.2 s after the spike, then 0.15 cores (75 %).
    node, got = play(monkeypatch, tmp_path, {0.0: 0.04, 1.2: 0.15})
    assert got["seconds"] == pytest.approx(0.1) and got["share"] == 1.0  # online had the CPU in the first window
    assert got["pre_offline_cores"] == pytest.approx(0.2)
    assert got["held"] == pytest.approx(1.5)
    assert got["resume_seconds"] == pytest.approx(1.3) and got["resume_ratio"] == pytest.approx(0.75)
    assert got["trace"][:12] == [pytest.approx(0.2)] * 12
    assert not node.spike.exists() and node.spike.parent.is_dir()  # the online pod's hostPath mount keeps its dir


def test_offline_never_back_is_none_with_the_trace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, got = play(monkeypatch, tmp_path, {0.0: 0.08})  # 40 %: under half, for good
    assert got["resume_seconds"] is None and got["resume_ratio"] is None
    assert got["trace"] == [pytest.approx(0.4)] * 40
