"""The fleet's pure parts: the synthetic host an agent senses (real files, the agent's own layout) and the
per-agent accounting of the audit log (localcluster/fleet.py, benchmarks/bench_fleet.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent.cgroups.layout import KubeLayout
from agent.cgroups.mounts import detect_hierarchy
from localcluster.fleet import read_audit
from localcluster.fleet_host import SyntheticHost

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_fleet.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fleet", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = mod
    spec.loader.exec_module(mod)
    return mod


def _usage(path: str) -> int:
    with open(os.path.join(path, "cpu.stat")) as f:
        return int(f.read().split()[1])


def test_the_host_is_laid_out_as_the_agent_reads_it_and_follows_its_pods(tmp_path: Path) -> None:
    host = SyntheticHost(str(tmp_path), ncpu=1, memory_total=4 * 2**30, allocatable_cpu_milli=1000)
    layout = KubeLayout(detect_hierarchy(host.cgroup_root), "cgroupfs", "/")  # what the agent derives
    host.add_pod("u-on", "Burstable", 50, 64 * 2**20, ["containerd://abc"])
    host.add_pod("u-off", "BestEffort", 0, 128 * 2**20)
    online, offline = layout.pod("u-on", "Burstable"), layout.pod("u-off", "BestEffort")
    assert os.path.isdir(online.child(layout.container_names("containerd://abc")[0]).cpu)
    host.advance(2.0, {"u-on": 0.25, "u-off": 0.5})
    assert _usage(online.cpu) == 500_000 and _usage(offline.cpu) == 1_000_000
    assert _usage(layout.kubepods().cpu) == 1_500_000
    assert _usage(layout.qos("BestEffort").cpu) == 1_000_000
    with open(os.path.join(host.proc_root, "stat")) as f:
        busy, idle = (int(x) for x in f.readline().split()[1:5:3])
    assert (busy, idle) == (160, 40)  # 0.75 cores of pods + 0.05 of the host, for 2 s, on 1 core
    with open(os.path.join(layout.kubepods().memory, "memory.current")) as f:
        assert int(f.read()) == 192 * 2**20
    host.remove_pod("u-off")
    assert not os.path.exists(offline.cpu)
    host.advance(1.0, {"u-on": 0.25})
    assert _usage(layout.kubepods().cpu) == 1_750_000


def _event(t: str, user: str, verb: str, resource: str, name: str = "", sub: str = "") -> dict[str, Any]:
    ref = {"resource": resource, "name": name, **({"subresource": sub} if sub else {})}
    return {"stage": "ResponseStarted" if verb == "watch" else "ResponseComplete", "verb": verb,
            "user": {"username": user}, "objectRef": ref, "stageTimestamp": t}


def test_writes_per_minute_are_taken_at_the_publication_pace(tmp_path: Path, bench: ModuleType) -> None:
    """Publications every 60 s in a 130-s window: 3 of them by where the window starts, 2 writes each; the
    count says 2.77 a minute, the pace 2.0. The kubelet's and another agent's requests count apart."""
    agent, kubelet = "tidemark:agent:n1", "system:node:n1"
    lines = []
    for m in (0, 1, 2):
        lines.append(_event(f"2026-11-28T10:0{m}:05Z", agent, "patch", "nodereports", "n1"))
        lines.append(_event(f"2026-11-28T10:0{m}:05.1Z", "tidemark-webhook", "patch", "nodes", "n1", "status"))
        lines.append(_event(f"2026-11-28T10:0{m}:06Z", agent, "get", "nodes", "n1"))
    lines.append(_event("2026-11-28T10:00:30Z", agent, "watch", "pods"))
    lines.append(_event("2026-11-28T10:00:31Z", kubelet, "update", "leases", "n1"))
    lines.append(_event("2026-11-28T10:09:00Z", agent, "patch", "nodereports", "n1"))  # outside the window
    path = tmp_path / "audit.log"
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\nnot json\n")
    events = read_audit(path, since=1795860000.0, until=1795860130.0)  # 10:00:00 .. 10:02:10
    out = bench.api_per_client(events, 130 / 60, ["n1"])
    assert out["agent_writes_per_min"]["max"] == 2.0
    assert out["agent_writes_per_min_counted"]["max"] == round(6 / (130 / 60), 2)
    assert out["agent_requests_per_min"]["max"] == round(7 / (130 / 60), 2)  # 3 patches, 3 gets, 1 watch
    assert out["agent_watches_opened_per_min"]["max"] == round(1 / (130 / 60), 2)
    assert out["kubelet_writes_per_min"]["max"] == round(1 / (130 / 60), 2)


def test_a_surged_node_holds_its_pods_past_the_watermark_whatever_its_mix(tmp_path: Path) -> None:
    """4 x a small online request left a node under the 80 % watermark (the load step then expected evictions
    that had no cause): a surged node's online pods now run at 4 x, or at what takes them alone to 95 % (the
    watermark under the agents' satisfaction measure is the online pods' usage)."""
    from localcluster.fleet_load import SURGE, SURGE_TARGET, LoadModel, PodLoad

    host = SyntheticHost(str(tmp_path), ncpu=1, memory_total=4 * 2**30, allocatable_cpu_milli=1000)
    model = LoadModel({"n1": host})
    model.pods = {"web": PodLoad("n1", "web", "idle", 0.1, False), "job": PodLoad("n1", "job", "offline", 0.2, True)}
    assert model.surge_factor("n1") == pytest.approx(SURGE_TARGET / 0.1)  # 4 x 0.1 = 40 % only
    model.pods["web"].request_cores = 0.5
    assert model.surge_factor("n1") == SURGE  # 4 x 0.5 is past it already
    model.surge = {"n1"}
    model.pods["web"].request_cores = 0.1
    host.add_pod("web", "Burstable", 100, 64 * 2**20, [])
    host.add_pod("job", "BestEffort", 0, 64 * 2**20, [])
    before = _usage(host.kubepods.cpu)
    model.tick(1.0, 0.0)
    assert model.surge_factor("n1") * 0.1 == pytest.approx(SURGE_TARGET)
    assert (_usage(host.kubepods.cpu) - before) / 1e6 == pytest.approx(SURGE_TARGET + 0.2, rel=0.01)  # + the job


def test_a_gang_member_the_controller_took_counts_on_the_node_that_asked(bench: ModuleType) -> None:
    """The NodeReport controller takes a gang whole when one member's eviction would break it (issue 34 item 3): its
    members on calm nodes are the asking node's eviction. The message is the controller's own wording
    (scheduler_ext/controller/evictions.py `_evict_gang`); before, they counted as calm nodes' evictions."""
    said = "evicted by tidemark-agent with its gang on behalf of node hollow-7: the agent's eviction of fleet/a ..."
    m = bench.GANG_MESSAGE.search(said)
    assert m is not None and m.group(1) == "hollow-7"
    assert bench.GANG_MESSAGE.search("evicted by tidemark-agent on behalf of node hollow-7: cpu 95%") is None
    src = (Path(__file__).resolve().parents[3] / "scheduler_ext" / "controller" / "evictions.py").read_text()
    assert 'f"evicted by tidemark-agent with its gang on behalf of node "' in src


def test_an_agent_counts_as_started_when_its_readyz_answers_200() -> None:
    """The fleet paces agent starts by readiness (localcluster/fleet.py `agent_ready`): a 503 or a closed port is not
    started yet."""
    import http.server
    import threading

    from localcluster.fleet import agent_ready, free_ports

    status = {"code": 503}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"] if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = int(server.server_address[1])
        assert agent_ready(port) is False
        status["code"] = 200
        assert agent_ready(port) is True
    finally:
        server.shutdown()
        server.server_close()
    assert agent_ready(free_ports(1)[0]) is False


def test_an_unknown_load_step_arm_is_exit_2(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--arms", "rebalance,evict-only"]) == 2
    assert "--arms" in capsys.readouterr().err


def test_a_later_arm_waits_for_the_surge_nodes_to_publish_again(bench: ModuleType,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The first arm records what the surge nodes publish; a later one starts only once each is back at 80 % of it
    (or the timeout): the second 20-node run's rebalance arm started with a surge node at 128m of 405m."""
    from types import SimpleNamespace

    published = {"hollow-1": 400, "hollow-2": 100}
    monkeypatch.setattr(bench, "batch_cpu_of", lambda api, node: published[node])
    monkeypatch.setattr(bench.time, "sleep", lambda s: None)
    ticks = iter(range(1000))
    monkeypatch.setattr(bench.time, "monotonic", lambda: float(next(ticks)))
    fleet, reference = SimpleNamespace(api=None), {}
    assert bench.await_recovered(fleet, set(published), reference, 30) == 0.0
    assert reference == {"hollow-1": 400, "hollow-2": 100}
    published["hollow-2"] = 30  # still low from the earlier arm's surge: waits out the timeout
    assert bench.await_recovered(fleet, set(published), reference, 30) >= 30
    published["hollow-2"] = 80  # back at 80 %
    assert bench.await_recovered(fleet, set(published), reference, 30) <= 1


def test_the_step_surges_the_online_nodes_holding_the_most_of_the_arms_pods(bench: ModuleType) -> None:
    """Chosen after the placement (the 2026-11-30 CI run's seed-chosen pair held 1 offline pod between them): the
    candidates (nodes with online pods) by the arm's Running pods, most first, by name on a tie; other arms' pods and
    non-candidates do not count."""
    clock = bench.PodClock.__new__(bench.PodClock)
    clock.lock = threading.Lock()
    placed = {"rb-job-0-a": "n1", "rb-job-0-b": "n2", "rb-job-1-a": "n2", "rb-job-1-b": "n3", "rb-job-2-a": "n3",
              "rb-job-2-b": "n9", "rb-job-3-a": "n9", "rb-job-3-b": "n9", "ev-job-0-a": "n1", "ev-job-0-b": "n1"}
    clock.node_of, clock.live = placed, set(placed)
    assert bench.busiest(clock, "rb-job-", ["n1", "n2", "n3", "n4"], 2) == {"n2", "n3"}  # n9 has no online pod
    assert bench.busiest(clock, "ev-job-", ["n1", "n2", "n3", "n4"], 1) == {"n1"}
    assert bench.busiest(clock, "rb-job-", ["n4", "n5"], 1) == {"n4"}  # none: by name


def test_a_hollow_kubelet_that_died_is_started_again_with_its_argv_and_its_log_kept(tmp_path: Path) -> None:
    """kubemark 1.20's fake runtime can die of a map race (`Fleet._restart_hollow_nodes`): a CI run lost a node's
    new pods that way. A real process that exits stands in for the hollow kubelet."""
    from localcluster.fleet import Fleet

    said: list[str] = []
    fleet = Fleet(1, tmp_path, log=said.append)
    (tmp_path / "logs").mkdir()
    argv = ["sh", "-c", "echo run; exit 3"]
    first = fleet._spawn("kubemark", "hollow-0000", argv, {"X": "1"})
    fleet._spawn("agent", "hollow-0000", ["sh", "-c", "exit 0"])
    first.popen.wait(10)
    for p in fleet.procs:
        p.popen.wait(10)
    fleet._restart_hollow_nodes()
    kubemark = [p for p in fleet.procs if p.role == "kubemark"]
    assert len(kubemark) == 1 and kubemark[0] is not first
    assert (kubemark[0].argv, kubemark[0].env) == (argv, {"X": "1"})
    assert fleet.hollow_restarts == 1 and said == ["hollow node hollow-0000 exited 3: started again "
                                                   "(log kubemark-hollow-0000.log)"]  # fmt: skip
    assert len([p for p in fleet.procs if p.role == "agent"]) == 1  # only hollow kubelets are restarted
    kubemark[0].popen.wait(10)
    assert (tmp_path / "logs" / "kubemark-hollow-0000.log").read_text() == "run\nrun\n"  # appended, not truncated
    fleet._stop.set()
    fleet._restart_hollow_nodes()
    assert fleet.hollow_restarts == 1  # never while stopping


def test_free_ports_are_below_the_ephemeral_range_distinct_and_skip_taken_ones(tmp_path: Path) -> None:
    """A port from inside the kernel's ephemeral range can go to an outgoing connection before the agent binds it
    (a CI fleet run's agent exited on "Address already in use"): `free_ports` hands out ports under it only."""
    import socket

    from localcluster.fleet import PORTS_FROM, ephemeral_low, free_ports

    low = ephemeral_low()
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(PORTS_FROM <= p < low for p in ports)
    # a second call before anything binds them hands out others (the fleet asks for its hollow nodes', the
    # scheduler's and the agents' ports in turn: the same ports twice made the scheduler exit on "in use")
    assert not set(free_ports(20)) & set(ports)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[0]))
        again = free_ports(20)
        assert ports[0] not in again and all(p < low for p in again)
    (tmp_path / "range").write_text("40000\t60999\n")
    assert ephemeral_low(str(tmp_path / "range")) == 40000 and ephemeral_low(str(tmp_path / "none")) == 32768
    narrow = free_ports(3, low=PORTS_FROM + 200)
    assert all(PORTS_FROM <= p < PORTS_FROM + 200 for p in narrow)
    with pytest.raises(RuntimeError):
        free_ports(300, low=PORTS_FROM + 200)
