"""Commands in a QEMU guest through its guest agent (qemu-guest-agent on a virtio-serial port).

The host end is a unix socket (QEMU's `-chardev socket,server=on`); the protocol is QMP-shaped JSON:
`guest-sync-delimited` to find the start of our replies after a reconnect (the agent answers with a
0xFF byte before the reply), `guest-exec` with `capture-output` to start a command and
`guest-exec-status` to poll it until it has exited (stdout and stderr come back base64-encoded).
QEMU's socket takes one client at a time: every call connects, syncs and disconnects, so another process
(a debugging session beside a test run) can use the channel between two calls; within a process calls
take a lock.

No network, no ssh keys, no shell on a console: the guest agent is Debian's `qemu-guest-agent`,
started by udev when the port appears.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class GuestError(RuntimeError):
    """The guest agent did not answer, or answered with an error."""


@dataclass(frozen=True, slots=True)
class Done:
    """A finished guest command."""

    rc: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class GuestAgent:
    def __init__(self, sock_path: Path) -> None:
        self.sock_path = sock_path
        self._sock: socket.socket | None = None
        self._buf = b""
        self._lock = threading.Lock()

    # --- the channel ------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._buf = b""

    def _connect(self, timeout: float) -> socket.socket:
        if self._sock is not None:
            return self._sock
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(str(self.sock_path))
        except OSError as e:
            s.close()
            raise GuestError(f"cannot connect to the guest agent socket {self.sock_path}: {e}") from None
        self._sock, self._buf = s, b""
        try:
            self._sync(timeout)
        except (OSError, GuestError):
            self._drop()
            raise
        return s

    def _send(self, obj: dict[str, Any], raw_prefix: bytes = b"") -> None:
        assert self._sock is not None
        self._sock.sendall(raw_prefix + json.dumps(obj).encode() + b"\n")

    def _recv_line(self, deadline: float) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GuestError("the guest agent did not answer in time")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise GuestError("the guest agent did not answer in time") from None
            if not chunk:
                raise GuestError("the guest agent closed the channel")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _sync(self, timeout: float) -> None:
        """guest-sync-delimited: everything before the 0xFF and our id is a stale reply; skip it."""
        ident = random.randrange(1, 2**31)
        # A leading 0xFF resets the agent's JSON parser (a half-sent request of a dropped connection).
        self._send({"execute": "guest-sync-delimited", "arguments": {"id": ident}}, raw_prefix=b"\xff")
        deadline = time.monotonic() + timeout
        while True:
            line = self._recv_line(deadline)
            line = line[line.rfind(b"\xff") + 1 :] if b"\xff" in line else line
            with contextlib.suppress(ValueError):
                if json.loads(line or b"null") == {"return": ident}:
                    return

    def _call(self, cmd: str, args: dict[str, Any] | None, timeout: float) -> Any:
        self._connect(min(timeout, 10.0))
        req: dict[str, Any] = {"execute": cmd}
        if args:
            req["arguments"] = args
        try:
            self._send(req)
            reply = json.loads(self._recv_line(time.monotonic() + timeout))
        except (OSError, GuestError, ValueError) as e:
            self._drop()
            raise GuestError(f"{cmd}: {e}") from None
        if "error" in reply:
            raise GuestError(f"{cmd}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return")

    # --- the API --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _session(self, timeout: float) -> Iterator[None]:
        with self._lock:
            try:
                self._connect(timeout)
                yield
            finally:
                self._drop()

    def ping(self, timeout: float = 5.0) -> bool:
        """The agent answers (the guest is up far enough to run commands)."""
        try:
            with self._session(timeout):
                self._call("guest-ping", None, timeout)
            return True
        except (GuestError, OSError):
            return False

    def run(self, argv: list[str], timeout: float = 120.0, stdin: str | None = None) -> Done:
        """Run `argv` in the guest as root; its exit code and output (GuestError if it cannot be started,
        TimeoutError if it runs longer than `timeout`: it is left running)."""
        args: dict[str, Any] = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if stdin is not None:
            args["input-data"] = base64.b64encode(stdin.encode()).decode()
        with self._session(10.0):
            pid = self._call("guest-exec", args, 30.0)["pid"]
            deadline = time.monotonic() + timeout
            poll = 0.01
            while True:
                st = self._call("guest-exec-status", {"pid": pid}, 30.0)
                if st.get("exited"):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"guest command {argv!r} still running after {timeout:.0f} s")
                time.sleep(poll)
                poll = min(poll * 2, 0.2)
        out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
        err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
        rc = int(st.get("exitcode", -1)) if "exitcode" in st else 128 + int(st.get("signal", 0))
        return Done(rc, out, err)

    def sh(self, script: str, timeout: float = 120.0, check: bool = True) -> Done:
        """`sh -c script` in the guest; with `check`, a non-zero exit raises GuestError with its output."""
        done = self.run(["/bin/sh", "-c", script], timeout=timeout)
        if check and not done.ok:
            raise GuestError(f"guest: {script!r} exited {done.rc}: {(done.err or done.out).strip()[-2000:]}")
        return done
