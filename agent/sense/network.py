"""Network sensing for network QoS: pods' host-side veths, interface counters, the node NIC.

- A pod's host-side veth: the peer ifindex (`IFLA_LINK`) of the pod's `eth0`, read through the pod's
  net namespace (`<proc>/<pid>/ns/net` of any of its processes), then that index's name in the
  node's namespace. A pod whose namespace is the node's own is on the host network.
- Counters: one netlink link dump (`IFLA_STATS64`) per sample gives every interface's rx/tx bytes;
  rates are deltas over the sample interval in bits/s (the first sample has none).
- The NIC: `networkQoS.interface`, else the interface of the default route; its speed from
  `<sys>/class/net/<nic>/speed` (Mbit/s; -1 or absent on virtual links: unknown).

Everything goes through pyroute2 (no `ip`/`tc` subprocess); the namespace the agent acts in is a
parameter (`node_ipr`), so tests run the whole node inside a namespace of their own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.model import NetPod, NetSnapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodNet:
    """What network sensing needs of a pod: a PID inside it (None: not running yet)."""

    uid: str
    key: str
    offline: bool
    host_network: bool = False
    pid: int | None = None


def _default_ipr(netns: str | None = None) -> Any:
    from pyroute2 import IPRoute

    return IPRoute(netns=netns) if netns else IPRoute()


def _ns_inode(path: str) -> int | None:
    """The namespace's inode; None when the process is gone. PermissionError propagates: following
    `/proc/<pid>/ns/net` of another process is a ptrace access check (CAP_SYS_PTRACE in a container)."""
    try:
        return os.stat(path).st_ino
    except PermissionError:
        raise
    except OSError:
        return None


def link_counters(ipr: Any) -> dict[str, tuple[int, int, int]]:
    """name -> (ifindex, rx_bytes, tx_bytes) of every interface in `ipr`'s namespace."""
    out: dict[str, tuple[int, int, int]] = {}
    for link in ipr.get_links():
        name = link.get_attr("IFLA_IFNAME")
        stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
        if not name or not stats:
            continue
        out[str(name)] = (int(link["index"]), int(stats["rx_bytes"]), int(stats["tx_bytes"]))
    return out


def default_interface(ipr: Any) -> str | None:
    """The interface of the IPv4 (else IPv6) default route in `ipr`'s namespace."""
    for family in (2, 10):  # AF_INET, AF_INET6
        try:
            routes = ipr.get_routes(family=family, table=254)
        except Exception:  # a family the kernel lacks
            continue
        for r in routes:
            if r.get("dst_len") == 0 and r.get_attr("RTA_DST") is None:
                oif = r.get_attr("RTA_OIF")
                if oif is not None:
                    links = ipr.get_links(oif)
                    if links:
                        return str(links[0].get_attr("IFLA_IFNAME"))
    return None


def nic_speed_bps(nic: str, sys_root: str = "/sys") -> int | None:
    """The link speed in bits/s from sysfs, None when the link reports none."""
    try:
        with open(os.path.join(sys_root, "class", "net", nic, "speed")) as f:
            mbit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1_000_000 if mbit > 0 else None


class NetSensor:
    """Samples the node NIC and the pods' veths; keeps the previous counters for rates."""

    def __init__(
        self,
        proc_root: str = "/proc",
        sys_root: str = "/sys",
        node_netns: str | None = None,
        ipr: Callable[[str | None], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = proc_root
        self.sys_root = sys_root
        #: the node's namespace: None = this process's own (the DaemonSet runs on the host network)
        self.node_netns = node_netns
        self._ipr = ipr or _default_ipr
        #: read right after each counter dump: rates divide by the time between dumps, not between calls
        self._clock = clock
        self._prev: tuple[float, dict[str, tuple[int, int, int]]] | None = None
        self._veths: dict[tuple[str, int], tuple[int, str] | None] = {}
        #: a pod's namespace could not be opened for lack of privilege (logged once as a warning)
        self.denied: str = ""

    def node_ns_path(self) -> str:
        if self.node_netns is None:
            return os.path.join(self.proc_root, "self", "ns", "net")
        return self.node_netns if "/" in self.node_netns else f"/run/netns/{self.node_netns}"

    def on_host_network(self, pid: int) -> bool | None:
        """True when the process shares the node's net namespace; None when it is gone (PermissionError when the
        agent may not look at it)."""
        pod = _ns_inode(os.path.join(self.proc_root, str(pid), "ns", "net"))
        node = _ns_inode(self.node_ns_path())
        if pod is None or node is None:
            return None
        return pod == node

    def peer_index(self, pid: int, ifname: str = "eth0") -> int | None:
        """The node-side ifindex of the pod's `ifname` (its veth peer), read through the pod's namespace."""
        with self._ipr(os.path.join(self.proc_root, str(pid), "ns", "net")) as ipr:
            for link in ipr.get_links():
                if link.get_attr("IFLA_IFNAME") == ifname:
                    peer = link.get_attr("IFLA_LINK")
                    return int(peer) if peer else None
        return None

    def sample(self, now: float, pods: Sequence[PodNet], interface: str = "") -> NetSnapshot:
        """One snapshot at `now` (the decision's clock); a pod whose veth cannot be read is reported without one."""
        with self._ipr(self.node_netns) as ipr:
            counters = link_counters(ipr)
            dumped = self._clock()
            nic = interface or default_interface(ipr) or ""
        by_index = {idx: name for name, (idx, _, _) in counters.items()}
        prev = self._prev
        self._prev = (dumped, counters)
        dt = dumped - prev[0] if prev is not None else 0.0

        def rates(name: str | None) -> tuple[float | None, float | None]:
            if prev is None or dt <= 0 or name is None or name not in counters or name not in prev[1]:
                return None, None
            (i0, rx0, tx0), (i1, rx1, tx1) = prev[1][name], counters[name]
            if i0 != i1 or rx1 < rx0 or tx1 < tx0:  # another interface took the name, or counters reset
                return None, None
            return (rx1 - rx0) * 8 / dt, (tx1 - tx0) * 8 / dt

        out: list[NetPod] = []
        live: set[tuple[str, int]] = set()
        for p in pods:
            veth: str | None = None
            index: int | None = None
            host = p.host_network
            if not host and p.pid is not None:
                try:
                    shared = self.on_host_network(p.pid)
                except PermissionError as e:
                    self._denied(p.pid, e)
                    shared = None
                host = bool(shared)
                if shared is False:
                    key = (p.uid, p.pid)
                    live.add(key)
                    if key not in self._veths or self._veths[key] is None:
                        self._veths[key] = self._find(p.pid, by_index)
                    found = self._veths[key]
                    if found is not None and by_index.get(found[0]) == found[1]:
                        index, veth = found
                    else:
                        self._veths.pop(key, None)
            rx, tx = rates(veth)
            out.append(NetPod(p.uid, p.key, p.offline, host, veth, index, rx, tx))
        for key in set(self._veths) - live:
            del self._veths[key]
        nic_rx, nic_tx = rates(nic or None)
        return NetSnapshot(
            time=now,
            nic=nic,
            nic_speed_bps=nic_speed_bps(nic, self.sys_root) if nic else None,
            nic_rx_bps=nic_rx,
            nic_tx_bps=nic_tx,
            pods=tuple(out),
        )

    def _find(self, pid: int, by_index: dict[int, str]) -> tuple[int, str] | None:
        try:
            peer = self.peer_index(pid)
        except PermissionError as e:
            self._denied(pid, e)
            return None
        except Exception as e:  # the pod went away, or its namespace cannot be entered
            log.debug("network QoS: no veth for pid %d: %s", pid, e)
            return None
        if peer is None or peer not in by_index:
            return None
        return peer, by_index[peer]

    def _denied(self, pid: int, e: BaseException) -> None:
        if not self.denied:
            self.denied = f"{type(e).__name__}: {e}"
            log.warning(
                "network QoS: cannot open the net namespace of pid %d (%s): the agent needs CAP_SYS_ADMIN and "
                "CAP_SYS_PTRACE and the host PID namespace (daemonset/overlays/network-qos); pods stay unshaped",
                pid,
                e,
            )
