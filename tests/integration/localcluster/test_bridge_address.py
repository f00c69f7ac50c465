"""The real node's bridge keeps its MAC while pods come and go (`localcluster.host.pin_bridge_address`).

A bridge whose address was never set takes the lowest MAC of its ports; a pod whose veth held it takes that
address with it when deleted, and the host could not reach the other pods for 40 s and more (a CI run's
scrape of the agent timed out at connect, with the agent's and the scheduler's probes). Checked on a bridge in a
network namespace of its own: unpinned, a port with a lower MAC moves the address; pinned, it does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from localcluster.host import pin_bridge_address

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"), reason="a network namespace and a bridge need root and iproute2"
)

LOW = "02:00:00:00:00:01"


def _ip(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True).stdout


def _address(ns: str, dev: str) -> str:
    return _ip(ns, "-br", "link", "show", "dev", dev).split()[2]


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"tm-br-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        _ip(name, "link", "add", "br0", "type", "bridge")
        _ip(name, "link", "set", "br0", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _port_with_low_mac_comes_and_goes(ns: str) -> tuple[str, str]:
    """The bridge's address while a port with the lowest MAC is on it, and after that port is deleted."""
    _ip(ns, "link", "add", "v0", "type", "veth", "peer", "name", "p0")
    _ip(ns, "link", "set", "v0", "address", LOW)
    _ip(ns, "link", "set", "v0", "master", "br0", "up")
    during = _address(ns, "br0")
    _ip(ns, "link", "del", "v0")
    return during, _address(ns, "br0")


def test_an_unpinned_bridge_follows_its_lowest_port(ns: str) -> None:
    """The kernel's behaviour the pin is for: without it the address moves with the ports."""
    during, after = _port_with_low_mac_comes_and_goes(ns)
    assert during == LOW and after != LOW


def test_a_pinned_bridge_keeps_its_address(ns: str) -> None:
    mac = pin_bridge_address("br0", netns=ns)
    assert mac == _address(ns, "br0") != LOW
    assert _port_with_low_mac_comes_and_goes(ns) == (mac, mac)
