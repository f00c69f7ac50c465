"""Debian's `prometheus` run by a test: its own config, data dir and free loopback port; the HTTP API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    binary: str
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, config: dict[str, Any], rule_groups: list[dict[str, Any]] | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if rule_groups:
            (self.workdir / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}))
            config = {**config, "rule_files": [str(self.workdir / "rules.yaml")]}
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 (the child owns it)
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self.wait(self._ready, 60, "Prometheus /-/ready")

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        p = self.workdir / "prometheus.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=30) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, seconds: float, step: float = 5.0) -> list[dict[str, Any]]:
        end = time.time()
        data = self.api("query_range", query=expr, start=f"{end - seconds:.3f}", end=f"{end:.3f}", step=str(step))
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return active

    @staticmethod
    def wait(cond: Callable[[], bool], timeout: float, what: str, poll: float = 1.0) -> None:
        t0 = time.monotonic()
        while not cond():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)
