"""The cluster's programs as subprocesses, as in production: own session, logs to a file, TERM then KILL."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def pick_port(preferred: int | None) -> int:
    """`preferred` when it is free (0 or None: any free port), else a free one."""
    if preferred and port_free(preferred):
        return preferred
    return free_port()


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(200 <= r.status < 300)
    except (urllib.error.URLError, OSError, ValueError):
        return False


_REPO = Path(__file__).resolve().parents[1]

@dataclass
class Component:
    """One program of the cluster, started in its own session (Ctrl-C in the terminal reaches only us)."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = 0.0

    def start(self) -> Component:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        # `python -m localcluster ...` from any working directory: the package is not installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                close_fds=True,
            )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout` s (polling), then SIGKILL; returns the exit status."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.popen.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(5)
        # Anything the program left in its session (it should have none) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        return self.popen.poll()

    def wait_healthy(self, url: str, timeout: float) -> None:
        """Poll `url` until 2xx; RuntimeError with the log tail if the program exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not http_ok(url):
            if not self.alive():
                raise RuntimeError(
                    f"{self.name} exited with status {self.returncode()} (log {self.log_path}):\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} not healthy at {url} after {timeout:.0f}s (log {self.log_path}):\n{self.tail()}"
                )
            time.sleep(0.1)
