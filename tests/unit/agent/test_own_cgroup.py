"""The agent's own cgroup: on cgroup v2 mounted with nsdelegate (systemd's default) the kernel refuses a
process in a cgroup namespace any write to the files of its namespace's root cgroup (EPERM), and the
DaemonSet's agent runs in one (containerd's default on v2), rooted at its own container's cgroup.

Found on the production-shaped node (the realnode_v2 lane): memory QoS protects every online pod's
containers, the agent's own among them, and `memory.low` of its container scope failed with EPERM at every
decision: a warning line a second and a CgroupWriteFailed event. Here the kernel's refusal is injected through
the writer's `write` hook on a plain directory whose cgroup.procs lists this process (what the kernel shows
through the hostPath mount, the pod sharing the host's PID namespace).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agent.act.cgroup_writer import OWN, CgroupWriter, write_file
from agent.act.statedir import Journal
from agent.daemon import wording
from agent.decide.ops import SetCgroupValue
from tests.unit.agent.helpers import pod


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "kubepods.slice"
    own = root / "kubepods-burstable.slice" / "kubepods-burstable-podA.slice" / "cri-containerd-a.scope"
    other = root / "kubepods-burstable.slice" / "kubepods-burstable-podB.slice" / "cri-containerd-b.scope"
    for d, pids in ((own, f"{os.getpid()}\n"), (other, "4242\n")):
        d.mkdir(parents=True)
        (d / "cgroup.procs").write_text(pids)
        (d / "memory.low").write_text("0\n")
    return own, other


def test_the_agents_own_cgroup_is_left_alone_after_the_kernel_refuses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own, other = _tree(tmp_path)
    calls: list[str] = []

    def write(path: str, value: str) -> None:
        calls.append(path)
        if path.startswith(str(own)):
            raise OSError(errno.EPERM, "Operation not permitted")
        write_file(path, value)

    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=[str(tmp_path / "kubepods.slice")], write=write)
    writes = [SetCgroupValue(str(own), "memory.low", "100663296"), SetCgroupValue(str(other), "memory.low", "1024")]
    first = writer.apply(writes)
    assert [(o.path, o.error) for o in first.failed] == [(str(own), OWN)]
    assert [o.path for o in first.applied] == [str(other)]
    assert (str(own), "memory.low") not in journal.knobs  # never changed: nothing to restore
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    calls.clear()
    again = writer.apply([SetCgroupValue(str(own), "memory.low", "100663296")])
    assert calls == [] and again.noop == 1 and not again.failed  # not tried again


def test_eperm_elsewhere_is_a_failure_as_before(tmp_path: Path) -> None:
    _own, other = _tree(tmp_path)

    def write(path: str, value: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    writer = CgroupWriter(None, roots=[str(tmp_path / "kubepods.slice")], write=write)
    result = writer.apply([SetCgroupValue(str(other), "memory.low", "1024")])
    assert [o.error for o in result.failed] == ["EPERM: Operation not permitted"]
    assert not writer.own


def test_qos_applied_says_online_for_an_online_pod() -> None:
    assert wording.qos_applied(pod("u1", level=0), ["memory.low=1"]).message.startswith("online (qos-level 0)")
    assert wording.qos_applied(pod("u2", level=-1), ["cpu.idle=1"]).message.startswith("offline (qos-level -1)")
