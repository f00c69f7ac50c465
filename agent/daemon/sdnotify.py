"""systemd's notification protocol (sd_notify(3)), without a dependency: one datagram per message.

`Type=notify` units get `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace); the agent sends
`READY=1` once its first decision is applied, `WATCHDOG=1` every half `WATCHDOG_USEC` while its loops
are alive (so a hung agent is restarted), `STATUS=...` lines, and `STOPPING=1` on shutdown. Outside
systemd (no NOTIFY_SOCKET) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = ("\0" + raw[1:] if raw.startswith("@") else raw) or None
        self.watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if usec.isascii() and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 1e6 / 2.0
        self.sent: list[str] = []

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        """Send `KEY=value` lines in one datagram; False when not under systemd or the send failed."""
        if self.address is None:
            return False
        message = "\n".join(lines)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall(message.encode())
        except OSError as e:
            log.debug("sd_notify %r failed: %s", message, e)
            return False
        self.sent.append(message)
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")
