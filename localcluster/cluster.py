"""The local colocation cluster: control plane, pod runner, scheduler and agent on this machine, and teardown.

Order up: preflight (root, cgroups, apiserver binaries: built once when missing) -> stale trees of
killed runs swept -> etcd + kube-apiserver (RBAC, one token per component) -> CRDs, PriorityClasses,
scheduler conf, RBAC -> the pod runner registers the Node (real capacity) -> the Node is labelled
and annotated as the user would (examples/local-node.yaml) -> `tidemark-agent run` and
`tidemark-scheduler run` as subprocesses with their own kubeconfigs, logs under the run directory.
Order down: scheduler, agent, `tidemark-agent restore` (every knob it changed), pod runner (stops
every pod process, removes its cgroups), a final sweep of the cgroup prefix (by pid from
cgroup.procs, then rmdir leaf-first), etcd + apiserver.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from localcluster import controlplane
from localcluster.cgroups import CgroupSetupError, KubeletCgroups, new_prefix, sweep_stale
from localcluster.components import Component, pick_port
from localcluster.controlplane import REPO, ControlPlane
from localcluster.manifests import load_yaml, wait_for
from localcluster.podrunner import host_capacity
from localcluster.watchdog import alive as _alive
from tidemark.kube.client import MERGE_PATCH, request
from tidemark.kube.resources import NODES

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNSUPPORTED: Final = 3
EVICTION_HARD_MEMORY: Final = 100 * 2**20  # kubelet's default memory.available<100Mi


class Unsupported(Exception):
    """This machine cannot run the local cluster (not root, no cgroups, no apiserver and no way to build it)."""


def default_node_name() -> str:
    name = re.sub(r"[^a-z0-9.-]", "-", socket.gethostname().lower()).strip("-.")
    return name or "local"


def default_run_dir() -> Path:
    base = Path(os.environ.get("TMPDIR", "/tmp")) / "tidemark-local"
    return base / time.strftime("run-%Y%m%d-%H%M%S")


def program(name: str) -> str:
    """`tidemark-agent`/`tidemark-scheduler` next to this interpreter (the venv), else on PATH."""
    sibling = Path(sys.executable).parent / name
    if sibling.exists():
        return str(sibling)
    found = shutil.which(name)
    if not found:
        raise Unsupported(f"{name} is not installed (pip install -e . in this checkout)")
    return found


@dataclass
class Options:
    run_dir: Path | None = None
    node_name: str | None = None
    extra_nodes: int = 0
    agent_port: int = 9102
    scheduler_port: int = 8080
    scheduler_conf: Path = REPO / "examples" / "volcano-scheduler.conf"
    agent_config: Path = REPO / "examples" / "local-agent-config.yaml"
    node_manifest: Path = REPO / "examples" / "local-node.yaml"
    allocatable_cpu_milli: int | None = None
    allocatable_memory: int | None = None
    cpu_watermarks: tuple[int, int] | None = None
    cgroup_root: str = "/sys/fs/cgroup"
    build: bool = True


@dataclass
class LocalCluster:
    """Bring up with `up()`, tear down with `down()` (idempotent, safe after a partial `up`)."""

    opts: Options
    out: TextIO = sys.stdout
    run_dir: Path = field(init=False)
    node: str = field(init=False)
    prefix: str = field(init=False)
    cp: ControlPlane | None = None
    cgroups: KubeletCgroups | None = None
    components: dict[str, Component] = field(default_factory=dict)
    agent_url: str = ""
    scheduler_url: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    teardown_report: dict[str, Any] = field(default_factory=dict)
    cpu_capacity_milli: int = 0
    memory_capacity: int = 0
    watchdog: Component | None = None

    def __post_init__(self) -> None:
        self.run_dir = (self.opts.run_dir or default_run_dir()).resolve()
        self.node = self.opts.node_name or default_node_name()
        self.prefix = new_prefix()

    def log(self, text: str) -> None:
        self.out.write(f"{text}\n")
        self.out.flush()

    # --- preflight ------------------------------------------------------------------------------

    def preflight(self) -> None:
        """Raise Unsupported with the reason when this machine cannot run it; build the apiserver once."""
        if os.geteuid() != 0:
            raise Unsupported(
                "the local cluster needs root: it creates cgroups under /sys/fs/cgroup and moves processes"
            )
        if not Path("/bin/sh").exists():
            raise Unsupported("/bin/sh is missing (the pod runner's process wrapper)")
        cpu, mem = host_capacity()
        self.cpu_capacity_milli, self.memory_capacity = cpu, mem
        probe = KubeletCgroups(
            self.prefix, cgroup_root=self.opts.cgroup_root, allocatable_cpu_milli=cpu, allocatable_memory=mem
        )
        try:
            probe.check_usable()
        except CgroupSetupError as exc:
            raise Unsupported(f"cgroups: {exc}") from exc
        except Exception as exc:
            raise Unsupported(f"no usable cgroup hierarchy under {self.opts.cgroup_root}: {exc}") from exc
        for name in ("tidemark-agent", "tidemark-scheduler"):
            program(name)
        found, reason = controlplane.binaries_status()
        if found:
            return
        if not (self.opts.build and controlplane.can_build()):
            raise Unsupported(f"no kube-apiserver/etcd ({reason}); building one needs root and apt (Debian 12)")
        self.log("== building kube-apiserver 1.20.2 from Debian's source package, once (about 5 minutes on 2 cores)")
        t0 = time.monotonic()
        rc, tail = controlplane.build(self.out)
        if rc == controlplane.EXIT_CANNOT_BUILD:
            raise Unsupported(f"cannot build kube-apiserver here: {tail}")
        if rc != 0:
            raise RuntimeError(f"hack/kube-apiserver.sh build failed (exit {rc}):\n{tail}")
        self.timings["build_seconds"] = round(time.monotonic() - t0, 1)

    # --- up -------------------------------------------------------------------------------------

    def up(self) -> None:
        t_start = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        latest = self.run_dir.parent / "latest"
        with contextlib.suppress(OSError):
            if latest.is_symlink() or not latest.exists():
                latest.unlink(missing_ok=True)
                latest.symlink_to(self.run_dir.name)
        self.log(f"== run directory {self.run_dir} (logs, kubeconfigs, pod logs)")
        swept = sweep_stale(self.opts.cgroup_root)
        if swept:
            self.log(f"   swept cgroup trees left by killed runs: {', '.join(swept)}")
        self.start_watchdog()

        t0 = time.monotonic()
        self.cp = controlplane.start(self.run_dir / "kube", watch_pid=os.getpid())
        self.log(
            f"== control plane: etcd + kube-apiserver 1.20.2 at {self.cp.api_url} (RBAC, token per component), "
            f"ready in {self.cp.startup_seconds:.1f}s"
        )
        controlplane.bootstrap(self.cp, self.opts.scheduler_conf, lambda s: self.log(f"   {s}"))
        conf = self.opts.scheduler_conf
        shown_conf = conf.relative_to(REPO) if conf.is_relative_to(REPO) else conf
        self.log(
            "   PriorityClasses volcano-production/volcano-free, ConfigMap tidemark-system/volcano-scheduler-configmap "
            f"({shown_conf})"
        )
        self.timings["control_plane_seconds"] = round(time.monotonic() - t0, 2)

        t0 = time.monotonic()
        self.start_podrunner()
        self.configure_node()
        self.timings["node_seconds"] = round(time.monotonic() - t0, 2)

        t0 = time.monotonic()
        self.start_agent()
        self.start_scheduler()
        self.timings["programs_seconds"] = round(time.monotonic() - t0, 2)
        self.timings["up_seconds"] = round(time.monotonic() - t_start, 2)
        self.log(f"== cluster up in {self.timings['up_seconds']:.1f}s")

    def allocatable(self) -> tuple[int, int]:
        cpu = self.opts.allocatable_cpu_milli or self.cpu_capacity_milli
        mem = self.opts.allocatable_memory or max(0, self.memory_capacity - EVICTION_HARD_MEMORY)
        return cpu, mem

    def start_podrunner(self) -> None:
        assert self.cp is not None
        cpu, mem = self.allocatable()
        self.cgroups = KubeletCgroups(
            self.prefix, cgroup_root=self.opts.cgroup_root, allocatable_cpu_milli=cpu, allocatable_memory=mem
        )
        argv = [
            sys.executable, "-m", "localcluster", "podrunner",
            "--kubeconfig", str(self.cp.kubeconfig(controlplane.PODRUNNER_USER)),
            "--node-name", self.node,
            "--cgroup-root", self.opts.cgroup_root,
            "--cgroup-prefix", self.prefix,
            "--pods-dir", str(self.run_dir / "pods"),
            "--allocatable-cpu", f"{cpu}m",
            "--allocatable-memory", str(mem),
            "--ready-file", str(self.run_dir / "podrunner.ready"),
        ]  # fmt: skip
        for i in range(1, self.opts.extra_nodes + 1):
            argv += ["--hollow-node", f"{self.node}-sim-{i}"]
        comp = self._start(Component("podrunner", argv, self.run_dir / "podrunner.log"))
        admin = self.cp.client()
        try:

            def registered() -> bool:
                if not comp.alive():
                    raise RuntimeError(f"the pod runner exited {comp.returncode()}:\n{comp.tail()}")
                try:
                    request(admin, "GET", NODES.object_path(self.node))
                except Exception:
                    return False
                return (self.run_dir / "podrunner.ready").exists()

            wait_for(registered, 60, "the pod runner to register the node", poll=0.1)
        finally:
            admin.close()
        hollow = (
            f", {self.opts.extra_nodes} simulated node(s) {self.node}-sim-1..{self.opts.extra_nodes}"
            if self.opts.extra_nodes
            else ""
        )
        self.log(
            f"== node {self.node} registered by the local pod runner (NOT a kubelet; pid {comp.pid}): "
            f"capacity {self.cpu_capacity_milli // 1000} CPU {self.memory_capacity / 2**30:.1f}Gi, allocatable "
            f"cpu {cpu}m memory {mem / 2**30:.1f}Gi; kubelet-like cgroups under /sys/fs/cgroup/*/{self.prefix}{hollow}"
        )

    def cpu_watermarks(self) -> tuple[int, int] | None:
        """The CPU watermarks for this machine: the flag, else the example's scaled to the CPU count."""
        if self.opts.cpu_watermarks:
            return self.opts.cpu_watermarks
        ncpu = max(1, self.cpu_capacity_milli // 1000)
        if ncpu == 2:
            return None
        # The example's values are for 2 CPUs with the pods on one of them; keep them relative to that CPU.
        node_doc = next(iter(load_yaml(self.opts.node_manifest)), {})
        ann = (node_doc.get("metadata") or {}).get("annotations") or {}
        high = int(ann.get("volcano.sh/evicting-cpu-high-watermark", 30))
        low = int(ann.get("volcano.sh/evicting-cpu-low-watermark", 15))
        high2, low2 = max(2, round(high * 2 / ncpu)), max(1, round(low * 2 / ncpu))
        return (high2, min(low2, high2 - 1))

    def configure_node(self) -> None:
        """The user's part: labels and watermark annotations from examples/local-node.yaml (a merge patch)."""
        assert self.cp is not None
        node_doc = next(iter(load_yaml(self.opts.node_manifest)), {})
        md = node_doc.get("metadata") or {}
        labels = dict(md.get("labels") or {})
        annotations = dict(md.get("annotations") or {})
        marks = self.cpu_watermarks()
        if marks:
            annotations["volcano.sh/evicting-cpu-high-watermark"] = str(marks[0])
            annotations["volcano.sh/evicting-cpu-low-watermark"] = str(marks[1])
        admin = self.cp.client()
        try:
            request(
                admin,
                "PATCH",
                NODES.object_path(self.node),
                body={"metadata": {"labels": labels, "annotations": annotations}},
                content_type=MERGE_PATCH,
            )
        finally:
            admin.close()
        shown = ", ".join(f"{k}={v}" for k, v in labels.items())

        def pair(r: str) -> str:
            high = annotations.get(f"volcano.sh/evicting-{r}-high-watermark")
            low = annotations.get(f"volcano.sh/evicting-{r}-low-watermark")
            return f"{r} {high}/{low}"

        scaled = " (scaled to this machine's CPU count)" if marks and not self.opts.cpu_watermarks else ""
        self.log(
            f"   labelled {shown}; watermarks {pair('cpu')}{scaled}, {pair('memory')} ({self.opts.node_manifest.name})"
        )

    def start_agent(self) -> None:
        assert self.cp is not None
        port = pick_port(self.opts.agent_port)
        self.agent_url = f"http://127.0.0.1:{port}"
        state = self.run_dir / "agent-state"
        state.mkdir(parents=True, exist_ok=True)
        argv = [
            program("tidemark-agent"), "run",
            "--config", str(self.opts.agent_config),
            "--node-name", self.node,
            "--kubeconfig", str(self.cp.kubeconfig("tidemark-agent")),
            "--cgroup-root", self.opts.cgroup_root,
            "--kube-cgroup-root", f"/{self.prefix}",
            "--cgroup-driver", "cgroupfs",
            "--proc-root", "/proc",
            "--state-dir", str(state),
            "--listen-address", f"127.0.0.1:{port}",
            "--log-format", "text",
        ]  # fmt: skip
        comp = self._start(Component("tidemark-agent", argv, self.run_dir / "agent.log"), "agent")
        comp.wait_healthy(f"{self.agent_url}/healthz", 60)
        self.log(f"== tidemark-agent run (pid {comp.pid}, token tidemark-agent): metrics {self.agent_url}/metrics")

    def start_scheduler(self) -> None:
        assert self.cp is not None
        port = pick_port(self.opts.scheduler_port)
        self.scheduler_url = f"http://127.0.0.1:{port}"
        argv = [
            program("tidemark-scheduler"), "run",
            "--kubeconfig", str(self.cp.kubeconfig("tidemark-scheduler")),
            "--scheduler-conf", str(self.opts.scheduler_conf),
            "--scheduler-name", "volcano",
            "--schedule-period", "1s",
            "--listen-address", f"127.0.0.1:{port}",
            "--leader-elect", "false",
            "--log-format", "text",
        ]  # fmt: skip
        comp = self._start(Component("tidemark-scheduler", argv, self.run_dir / "scheduler.log"), "scheduler")
        comp.wait_healthy(f"{self.scheduler_url}/healthz", 60)
        self.log(
            f"== tidemark-scheduler run (pid {comp.pid}, token tidemark-scheduler): "
            f"metrics {self.scheduler_url}/metrics"
        )

    def _start(self, comp: Component, key: str | None = None) -> Component:
        comp.start()
        self.components[key or comp.name] = comp
        with open(self.run_dir / "components.pids", "a") as f:
            f.write(f"{comp.pid} {comp.name}\n")
        return comp

    def start_watchdog(self) -> None:
        """Cleans up if this process dies without tearing down (localcluster.watchdog)."""
        try:
            agent: str = program("tidemark-agent")
        except Unsupported:
            agent = ""
        argv = [sys.executable, "-m", "localcluster.watchdog", str(os.getpid()), str(self.run_dir), self.prefix]
        self.watchdog = Component("watchdog", [*argv, agent] if agent else argv, self.run_dir / "watchdog.log").start()

    def dead_component(self) -> str | None:
        """A one-line reason when a program of the cluster has exited, else None."""
        for comp in self.components.values():
            if comp.popen is not None and not comp.alive():
                return f"{comp.name} exited with status {comp.returncode()} (log {comp.log_path}):\n{comp.tail(10)}"
        return None

    # --- down -----------------------------------------------------------------------------------

    def down(self, say: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Tear everything down; returns what happened (`clean` true when nothing was left behind)."""
        say = say or self.log
        report: dict[str, Any] = {}
        t0 = time.monotonic()
        for key in ("scheduler", "agent"):
            comp = self.components.get(key)
            if comp is not None:
                report[f"{key}_exit"] = comp.stop(15)
        if "agent" in self.components:
            state = self.run_dir / "agent-state"
            try:
                done = subprocess.run(
                    [program("tidemark-agent"), "restore", "--state-dir", str(state), "--cgroup-root",
                     self.opts.cgroup_root, "--kube-cgroup-root", f"/{self.prefix}", "--cgroup-driver", "cgroupfs"],
                    capture_output=True, text=True, timeout=60, check=False,
                )  # fmt: skip
                report["restore_exit"] = done.returncode
                msg = (done.stdout + done.stderr).strip().splitlines()
                say(
                    f"   tidemark-agent restore --state-dir {state}: exit {done.returncode}"
                    + (f" ({msg[-1]})" if msg else "")
                )
            except (OSError, subprocess.TimeoutExpired, Unsupported) as exc:
                report["restore_exit"] = None
                say(f"   tidemark-agent restore failed: {exc}")
        runner = self.components.get("podrunner")
        if runner is not None:
            report["podrunner_exit"] = runner.stop(40)
        left_pids: list[int] = []
        left_dirs: list[str] = []
        if self.cgroups is not None:
            left_pids = sorted(self.cgroups.all_pids())
            left_dirs = self.cgroups.teardown()
        report["leftover_pids_killed"] = left_pids
        report["leftover_cgroups"] = left_dirs
        if self.cp is not None:
            err = self.cp.stop()
            report["control_plane_stop"] = err or "ok"
            report["control_plane_alive"] = [p for p in self.cp.pids() if _alive(p)]
            if not err and not report["control_plane_alive"]:
                # etcd preallocates about 60 MB; the logs stay.
                shutil.rmtree(self.cp.data_dir / "etcd-data", ignore_errors=True)
        report["clean"] = (
            not left_dirs
            and not report.get("control_plane_alive")
            and not (self.cgroups is not None and self.cgroups.exists())
        )
        if self.watchdog is not None:
            self.watchdog.stop(5)
        report["seconds"] = round(time.monotonic() - t0, 2)
        self.teardown_report = report
        return report
