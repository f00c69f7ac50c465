"""The network QoS journal: atomic JSON beside journal.json, bad records skipped, a corrupt file moved aside.

The executor itself runs against real qdiscs in tests/integration/agent/test_netqos.py (root); here only
what needs no kernel.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.act.tc_writer import IFB_PREFIX, LinkRecord, TcJournal, TcWriter, ifb_name


def test_round_trip(tmp_path: Path) -> None:
    j = TcJournal(str(tmp_path / "state" / "netqos-journal.json"), fsync=False)
    j.links["veth1"] = LinkRecord(7, ifb_name(7), "batch/a", True, 50_000_000, 40_000_000)
    j.save()
    again = TcJournal(j.path)
    again.load()
    assert again.links == j.links
    body = json.loads(Path(j.path).read_text())
    assert body["version"] == 1 and body["links"]["veth1"]["ifb"] == f"{IFB_PREFIX}7"


def test_bad_records_are_skipped_and_a_corrupt_file_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "netqos-journal.json"
    path.write_text(json.dumps({"links": {"a": {"index": "x"}, "b": {"index": 3, "ifb": "tmq3"}, "c": 5}}))
    j = TcJournal(str(path))
    j.load()
    assert list(j.links) == ["b"]
    path.write_text("{not json")
    j.load()
    assert j.links == {}
    assert not path.exists() and len(list(tmp_path.glob("netqos-journal.json.corrupt-*"))) == 1


def test_ifb_names_fit_ifnamsiz() -> None:
    assert ifb_name(2**31 - 1) == "tmq2147483647" and len(ifb_name(2**31 - 1)) <= 15


class _NoLinks:
    """Stands in for a netlink socket that finds no interface at all (no kernel state is imitated)."""

    def link_lookup(self, **_: object) -> list[int]:
        return []

    def close(self) -> None:
        pass


def test_a_gone_interface_is_reported_and_its_journal_entry_dropped(tmp_path: Path) -> None:
    j = TcJournal(str(tmp_path / "netqos-journal.json"), fsync=False)
    j.links["veth-gone"] = LinkRecord(9, "tmq9", "batch/old")
    writer = TcWriter(j, ipr=_NoLinks)
    (removed,) = writer.restore()
    assert removed.ok and removed.action == "remove" and j.links == {}


def test_a_record_from_another_namespace_is_kept_not_forgotten(tmp_path: Path) -> None:
    """An agent moved off the host network sees none of the interfaces it made: the records stay (and the
    removal fails with the reason) until an agent in the namespace they were made in removes them."""
    j = TcJournal(str(tmp_path / "netqos-journal.json"), fsync=False)
    j.links["veth-host"] = LinkRecord(9, "tmq9", "batch/a", netns=4026531840)
    j.links["veth-old"] = LinkRecord(10, "tmq10", "batch/b")  # an older journal: no namespace recorded
    (kept, dropped) = TcWriter(j, ipr=_NoLinks, netns=lambda: 4026532999).restore()
    assert not kept.ok and kept.veth == "veth-host" and "another network namespace" in kept.error
    assert dropped.ok and dropped.veth == "veth-old"
    assert list(j.links) == ["veth-host"]
    again = TcJournal(j.path)
    again.load()
    assert again.links["veth-host"].netns == 4026531840
    (removed,) = TcWriter(again, ipr=_NoLinks, netns=lambda: 4026531840).restore()
    assert removed.ok and again.links == {}
