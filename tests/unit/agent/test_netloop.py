"""The daemon's network QoS loop: offline pods and their processes in, events to the Node, dry run, restore.

The cycle's sensing and executor are recorders of our own interfaces (tests/unit/agent/test_netqos_loop.py);
the journal-only restore talks to this machine's real netlink (a link lookup needs no privilege).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.act.tc_writer import JOURNAL, LinkRecord
from agent.config import AgentConfig
from agent.daemon.netloop import NetworkLoop, restore_network
from agent.daemon.netqos import NetworkQos
from agent.model import PodView
from tests.unit.agent.test_netqos_loop import CONFIG, Sensor, Writer
from tidemark.apis import PodUID
from tidemark.clock import FakeClock

M = 1_000_000
NODE = {"kind": "Node", "metadata": {"name": "n1"}}


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.seen.append((obj["metadata"]["name"], type_, reason))


def pod(uid: str, level: int) -> PodView:
    return PodView(PodUID(uid), "ns", uid, level, "BestEffort")


def _loop(tmp_path: Path, rx: list[float], dry_run: bool = False) -> tuple[NetworkLoop, Writer, Recorder]:
    writer = Writer(tmp_path)
    qos = NetworkQos(Sensor(rx), writer)  # type: ignore[arg-type]
    events = Recorder()
    loop = NetworkLoop(
        qos,
        config=lambda: AgentConfig(network_qos=CONFIG),
        pods=lambda: (pod("a", -1), pod("b", 0), pod("c", -7)),
        pids=lambda: {"a": (41, 42), "b": (50,)},
        node_ref=lambda: NODE,
        events=events,
        clock=FakeClock(),
        dry_run=dry_run,
    )
    return loop, writer, events


def test_offline_pods_with_one_process_each(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path, [])
    assert [(p.key, p.pid, p.offline) for p in loop.pod_nets()] == [("ns/a", 41, True), ("ns/c", None, True)]


def test_ticks_apply_and_send_events_to_the_node(tmp_path: Path) -> None:
    loop, writer, events = _loop(tmp_path, [900 * M, 900 * M])
    loop.tick()
    plan = loop.tick()
    assert plan.next_state.download.limited and len(writer.applied) == 2
    assert events.seen == [("n1", "Warning", "NetworkCeilingLowered")]


def test_dry_run_applies_nothing(tmp_path: Path) -> None:
    loop, writer, _ = _loop(tmp_path, [0.0], dry_run=True)
    assert loop.tick().enabled and writer.applied == []
    loop.stop(restore=True)
    assert writer.restores == 0


def test_stop_with_restore(tmp_path: Path) -> None:
    loop, writer, _ = _loop(tmp_path, [])
    loop.stop(restore=True)
    assert writer.restores == 1


def test_restore_network_from_the_journal_alone(tmp_path: Path) -> None:
    assert restore_network(str(tmp_path)) == (0, 0)  # never ran: nothing to do
    (tmp_path / JOURNAL).write_text(
        json.dumps({"version": 1, "links": {"tq-gone0": {"index": 99999, "ifb": "tmq99999"}}})
    )
    assert restore_network(str(tmp_path)) == (1, 0)  # the veth and its IFB are gone: the entry is dropped
    assert json.loads((tmp_path / JOURNAL).read_text())["links"] == {}


def test_a_paused_agent_removes_its_shaping(tmp_path: Path) -> None:
    loop, writer, _ = _loop(tmp_path, [0.0])
    paused = [False]
    loop._paused = lambda: paused[0]
    assert loop.tick().enabled
    writer.journal.links["veth1"] = LinkRecord(5, "tmq5")
    paused[0] = True
    assert not loop.tick().enabled and writer.restores == 1
