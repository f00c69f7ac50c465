"""Network QoS on the real node: the shipped network-qos overlay on kubelet + containerd + bridge CNI.

The agent runs as its DaemonSet's pod from daemonset/overlays/network-qos (host network, NET_ADMIN,
SYS_ADMIN) with `networkQoS.enabled: true` in its ConfigMap, as a user installs it; an offline and an
online pod are real busybox containers, each with its own host-side veth on the cluster's bridge.
Throughput is measured with iperf3 from the host: the server runs in the pod's network namespace
(`nsenter -t <pid> -n`), the client on the node, to the pod's address on the cluster's bridge network
(the only addresses used). Download = node -> pod (the veth's egress, HTB on the veth), upload =
pod -> node (`iperf3 -R`: the veth's ingress, mirred to the agent's IFB). qdiscs and IFBs are checked
with `ip`/`tc` (iproute2), independently of the agent's pyroute2 code.

The module puts the cluster back as it found it: the local overlay re-applied (the agent back on the
pod network with its two capabilities and the session's ConfigMap), so later tests see the normal agent.
Needs root, iperf3 and the real node (tests/fixtures/realnode.py); about 2 minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.realnode import REPO, RealNode, local_agent_config
from tests.fixtures.netns import skip_reason
from tests.fixtures.realnode import RealNamespace

pytestmark = [pytest.mark.slow, pytest.mark.netns]

OFFLINE = {"volcano.sh/qos-level": "-1"}
ONLINE = {"volcano.sh/qos-level": "2"}
CEILING_BPS = 50_000_000
ROUNDS = 3
HTB_HANDLE = "7464:"
AGENT = "app.kubernetes.io/name=tidemark-agent"
# Absolute watermarks: the VM's NIC reports no speed, and the traffic under test stays on the bridge.
NETQOS = {
    "enabled": True,
    "offlineLimit": "50M",
    "offlineMin": "10M",
    "onlineHighWatermark": "20G",
    "onlineLowWatermark": "10G",
    "period": "1s",
}


def agent_config(enabled: bool) -> str:
    conf = yaml.safe_load(local_agent_config()) or {}
    conf["networkQoS"] = {**NETQOS, "enabled": enabled}
    return str(yaml.safe_dump(conf, sort_keys=False))


def stage_network_qos(node: RealNode, config: str) -> Path:
    """A copy of daemonset/ whose agent ConfigMap carries `config`, and an overlay that is the local one
    (the locally built image) on top of overlays/network-qos instead of the base."""
    top = node.run_dir / "daemonset-netqos"
    shutil.rmtree(top, ignore_errors=True)
    shutil.copytree(REPO / "daemonset", top, ignore=shutil.ignore_patterns("*.md", "monitoring"))
    cm_path = top / "agent" / "configmap.yaml"
    docs = [d for d in yaml.safe_load_all(cm_path.read_text()) if d]
    for d in docs:
        if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "tidemark-agent-config":
            d["data"] = {"agent.yaml": config}
    cm_path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    local = yaml.safe_load((top / "overlays" / "local" / "kustomization.yaml").read_text())
    local["bases"] = ["../network-qos"]
    out = top / "overlays" / "local-network-qos"
    out.mkdir()
    (out / "kustomization.yaml").write_text(yaml.safe_dump(local, sort_keys=False))
    return out


def _sh(*argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
    return done


def wait_agent(node: RealNode, host_network: bool, timeout: float = 240) -> dict[str, Any]:
    """The one agent pod, Ready, on the host network or not (a rollout replaces the old pod)."""
    found: list[dict[str, Any]] = []

    def ready() -> bool:
        pods = [p for p in node.pods("tidemark-system", AGENT) if not p["metadata"].get("deletionTimestamp")]
        found[:] = pods
        return (
            len(pods) == 1
            and bool(pods[0]["spec"].get("hostNetwork")) == host_network
            and node.pod_ready(pods[0])
            and len(node.pods("tidemark-system", AGENT)) == 1
        )

    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent pod (hostNetwork={host_network}) Ready")
            time.sleep(1.0)
    except TimeoutError as e:
        states = node.kubectl("get", "pods", "-n", "tidemark-system", "-o", "wide", check=False).stdout
        raise TimeoutError(f"{e}\n{states}") from None
    return found[0]


@pytest.fixture(scope="module")
def netqos_tools() -> None:
    """iperf3 and iproute2 before the real node comes up (under CI=true iperf3 is installed, or this fails)."""
    reason = skip_reason()
    if reason is None and (shutil.which("tc") is None or shutil.which("nsenter") is None):
        reason = "tc and nsenter are missing (Debian: apt-get install iproute2 util-linux)"
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"network QoS on the real node under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def netqos_node(netqos_tools: None, real_node: RealNode) -> Iterator[RealNode]:
    real_node.kubectl("apply", "-k", str(stage_network_qos(real_node, agent_config(True))), timeout=180)
    try:
        wait_agent(real_node, host_network=True)
        yield real_node
    finally:
        # Shaping off first, while the agent still sees the host's interfaces (an agent on the pod network
        # cannot reach the veths and IFBs a failed test may have left shaped) ...
        patch = json.dumps({"data": {"agent.yaml": agent_config(False)}})
        real_node.kubectl("patch", "configmap", "-n", "tidemark-system", "tidemark-agent-config", "-p", patch)
        deadline = time.monotonic() + 60
        while agent_ifbs() and time.monotonic() < deadline:
            time.sleep(0.5)
        # ... then the session's install back: apply's three-way merge drops hostNetwork and the capabilities.
        real_node.kubectl("apply", "-k", str(real_node.stage_manifests()), timeout=180)
        wait_agent(real_node, host_network=False)
        real_node.wait_tidemark()


# --- independent views of the node (iproute2) ------------------------------------------------------


def pod_pid(pod: Any) -> int:
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod.status.qos_class)
    base = Path("/sys/fs/cgroup/cpu/kubepods")
    group = (base / qos if qos else base) / f"pod{pod.metadata.uid}" / cid
    return int((group / "cgroup.procs").read_text().split()[0])


def host_veth(pid: int) -> str:
    """The node-side name of the pod's eth0 peer: its `link_index` read in the pod's namespace."""
    inside = json.loads(_sh("nsenter", "-t", str(pid), "-n", "ip", "-j", "link", "show", "eth0").stdout)
    index = int(inside[0]["link_index"])
    for link in json.loads(_sh("ip", "-j", "link", "show").stdout):
        if int(link["ifindex"]) == index:
            return str(link["ifname"])
    raise AssertionError(f"no node interface with index {index}")


def qdiscs(dev: str) -> list[dict[str, Any]]:
    done = _sh("tc", "-j", "qdisc", "show", "dev", dev, check=False)
    return list(json.loads(done.stdout or "[]")) if done.returncode == 0 else []


def shaped(dev: str) -> bool:
    q = qdiscs(dev)
    return any(x["kind"] == "htb" and x["handle"] == HTB_HANDLE and x.get("root") for x in q) and any(
        x["kind"] == "ingress" for x in q
    )


def untouched(dev: str) -> bool:
    return not any(x["kind"] in ("htb", "ingress") for x in qdiscs(dev))


def agent_ifbs() -> list[str]:
    links = json.loads(_sh("ip", "-j", "link", "show").stdout)
    return [str(link["ifname"]) for link in links if str(link["ifname"]).startswith("tmq")]


def ifb_of(dev: str) -> str:
    index = json.loads(_sh("ip", "-j", "link", "show", dev).stdout)[0]["ifindex"]
    return f"tmq{index}"


def _listening(pid: int, port: int) -> bool:
    out = _sh("nsenter", "-t", str(pid), "-n", "ss", "-Hltn", f"sport = :{port}", check=False).stdout
    return bool(out.strip())


def iperf_bps(pid: int, address: str, port: int, upload: bool, seconds: int = 3) -> float:
    """Bits/s received over `seconds`: the server in the pod's namespace, the client on the node (a few
    tries: a loaded machine can drop a control connection)."""
    argv = ["iperf3", "-c", address, "-p", str(port), "-t", str(seconds), "-J"] + (["-R"] if upload else [])
    last = ""
    for _ in range(4):
        server = subprocess.Popen(
            ["nsenter", "-t", str(pid), "-n", "iperf3", "-s", "-1", "-p", str(port), "-B", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while not _listening(pid, port) and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            done = _sh(*argv, timeout=seconds + 30, check=False)
            try:
                result = json.loads(done.stdout or "{}")
                return float(result["end"]["sum_received"]["bits_per_second"])
            except (ValueError, KeyError, TypeError):
                last = f"exit {done.returncode}: {done.stdout[-400:]} {done.stderr[-400:]}"
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
    raise AssertionError(f"iperf3 to {address}:{port} failed: {last}")


def set_enabled(node: RealNode, ns: RealNamespace, enabled: bool) -> None:
    body = {"data": {"agent.yaml": agent_config(enabled)}}
    ns.core.patch_namespaced_config_map("tidemark-agent-config", "tidemark-system", body)


# --- the test --------------------------------------------------------------------------------------


def test_offline_pod_shaped_online_pod_not_and_restore_is_clean(netqos_node: RealNode, real_ns: RealNamespace) -> None:
    node = netqos_node
    real_ns.create(real_ns.pod("offline-net", annotations=OFFLINE))
    real_ns.create(real_ns.pod("online-net", requests={"cpu": "50m", "memory": "16Mi"}, annotations=ONLINE))
    off, on = real_ns.wait_running("offline-net"), real_ns.wait_running("online-net")
    off_pid, on_pid = pod_pid(off), pod_pid(on)
    off_veth, on_veth = host_veth(off_pid), host_veth(on_pid)
    assert off_veth != on_veth

    try:
        real_ns.wait(lambda: shaped(off_veth), 60, f"HTB and ingress on the offline pod's veth {off_veth}")
    except TimeoutError as e:
        logs = node.kubectl("logs", "-n", "tidemark-system", "-l", AGENT, "--tail=200", check=False).stdout
        pytest.fail(f"{e}\n" + "\n".join(line for line in logs.splitlines() if "network" in line.lower())[-4000:])
    ifb = ifb_of(off_veth)
    assert ifb in agent_ifbs()
    assert untouched(on_veth), qdiscs(on_veth)

    # Alternate rounds (offline and online, download and upload), the median asserted: a shared machine.
    flows = {
        "offline download": (off_pid, off.status.pod_ip, False),
        "offline upload": (off_pid, off.status.pod_ip, True),
        "online download": (on_pid, on.status.pod_ip, False),
        "online upload": (on_pid, on.status.pod_ip, True),
    }
    rounds: dict[str, list[float]] = {k: [] for k in flows}
    port = 5201
    for _ in range(ROUNDS):
        for name, (pid, address, upload) in flows.items():
            rounds[name].append(iperf_bps(pid, address, port, upload=upload))
            port += 1
    figures = {k: statistics.median(v) for k, v in rounds.items()}
    shown = "; ".join(
        f"{k} {min(v) / 1e6:.1f}/{statistics.median(v) / 1e6:.1f}/{max(v) / 1e6:.1f}" for k, v in rounds.items()
    )
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nreal node network QoS, ceiling {CEILING_BPS / 1e6:.0f} Mbit/s; min/median/max of {ROUNDS}: {shown}")
    print(f"load average {load}")
    for direction in ("download", "upload"):
        # Held near the ceiling (HTB's burst lets a little more through at the start of a flow) ...
        assert 0.5 * CEILING_BPS <= figures[f"offline {direction}"] <= 1.15 * CEILING_BPS, shown
        # ... while the online pod's veth is not shaped at all.
        assert figures[f"online {direction}"] >= 3 * CEILING_BPS, shown

    # networkQoS.enabled: false (hot reload of the ConfigMap) removes every qdisc and the IFB.
    set_enabled(node, real_ns, False)
    real_ns.wait(lambda: untouched(off_veth) and ifb not in agent_ifbs(), 120, "the shaping removed on disable")
    assert untouched(on_veth)
    unshaped = iperf_bps(off_pid, off.status.pod_ip, port, upload=False)
    print(f"offline download with networkQoS disabled: {unshaped / 1e6:.1f} Mbit/s")
    assert unshaped >= 3 * CEILING_BPS, f"offline download after disable: {unshaped / 1e6:.1f} Mbit/s"

    # Enabled again, then `tidemark-agent restore` in the agent's pod: the running agent pauses and its
    # network loop removes what it made.
    set_enabled(node, real_ns, True)
    real_ns.wait(lambda: shaped(off_veth), 120, "the offline veth shaped again")
    agent = wait_agent(node, host_network=True)
    node.kubectl(
        "exec",
        "-n",
        "tidemark-system",
        agent["metadata"]["name"],
        "--",
        "tidemark-agent",
        "restore",
        "--cgroup-root=/host/sys/fs/cgroup",
        "--proc-root=/proc",
        timeout=90,
    )
    real_ns.wait(lambda: untouched(off_veth) and ifb not in agent_ifbs(), 60, "the shaping removed by restore")
    assert untouched(on_veth)
