"""The live view of the local cluster: redrawn in a terminal, line by line otherwise.

Shows the node's usage (measured from kubepods' cgroup counters, and the agent's smoothed
`tidemark.io/node-usage`), its watermarks, the oversubscription the agent publishes (annotations and
`kubernetes.io/batch-*` allocatable), the evicting state, every pod with its placement, phase and
CPU, the recent decisions with their reasons (Events from the agent, the scheduler and the pod
runner), where the metrics and logs are, and the scenario's narrative.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from localcluster.cgroups import KubeletCgroups
from localcluster.watch import ClusterWatch, EventLine
from tidemark.apis import (
    ANN_OVERSUBSCRIPTION_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY,
    parse_qos_level,
    parse_watermarks,
    quantity_to_int,
    quantity_to_milli,
)

CLEAR = "\x1b[H\x1b[2J"
EVENT_REPEAT = 10.0
BOLD, DIM, RED, GREEN, YELLOW, RESET = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m"


@dataclass
class ViewInfo:
    node: str
    run_dir: Path
    agent_url: str
    scheduler_url: str
    kubeconfig: Path
    logs: Mapping[str, Path] = field(default_factory=dict)
    namespace: str = "demo"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}Gi" if n >= 2**30 else f"{n / 2**20:.0f}Mi"


class LiveView:
    """Narrative + periodic view; thread-safe `say`/`phase` from the scenario thread."""

    def __init__(
        self,
        watch: ClusterWatch,
        cgroups: KubeletCgroups | None,
        info: ViewInfo,
        *,
        tty: bool,
        out: TextIO = sys.stdout,
        period: float = 0.5,
    ) -> None:
        self.watch = watch
        self.cgroups = cgroups
        self.info = info
        self.tty = tty
        self.out = out
        self.period = period
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self.lines: deque[str] = deque(maxlen=14)
        self.current_phase = "starting"
        self.footer = "Ctrl-C: tear everything down"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_prev: dict[str, tuple[float, int]] = {}
        self.pod_cpu: dict[str, float] = {}
        self.kubepods_cores = 0.0
        self._last_digest: tuple[Any, ...] = ()
        self._event_printed: dict[tuple[str, str], float] = {}
        watch.on_event(self._on_event)

    # --- narrative ----------------------------------------------------------------------------

    def _stamp(self) -> str:
        return f"{time.monotonic() - self.t0:6.1f}s"

    def say(self, text: str) -> None:
        line = f"{self._stamp()} {text}"
        with self._lock:
            self.lines.append(line)
        if not self.tty:
            self._print(line)

    def phase(self, text: str) -> None:
        self.current_phase = text
        self.say(f"== {text}")

    def _print(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def _on_event(self, e: EventLine) -> None:
        if self.tty:
            return
        # Periodic decisions (capacity republished, a gang still waiting) once per EVENT_REPEAT seconds.
        key = (e.reason, e.object)
        last = self._event_printed.get(key)
        if last is not None and e.at - last < EVENT_REPEAT:
            return
        self._event_printed[key] = e.at
        count = f" (x{e.count})" if e.count > 1 else ""
        self._print(f"{self._stamp()} event {e.type} {e.reason} {e.object} [{e.source}]{count}: {e.message}")

    # --- loop ---------------------------------------------------------------------------------

    def start(self) -> LiveView:
        self._thread = threading.Thread(target=self._loop, name="live view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        last_measure = 0.0
        while not self._stop.wait(self.period):
            now = time.monotonic()
            if now - last_measure >= 1.0:
                last_measure = now
                self._measure()
            try:
                if self.tty:
                    text = self.render()
                    with self._lock:
                        self.out.write(CLEAR + text + "\n")
                        self.out.flush()
                else:
                    self._print_changes()
            except Exception as exc:  # a view glitch never stops the cluster
                self.say(f"(view error: {type(exc).__name__}: {exc})")

    def _measure(self) -> None:
        """Per-pod and kubepods CPU (cores) over the last second, from cgroup counters."""
        if self.cgroups is None:
            return
        now = time.monotonic()
        groups: dict[str, Any] = {"kubepods": self.cgroups.kubepods}
        for p in self.watch.pods.store.list():
            md = p.get("metadata") or {}
            qos = (p.get("status") or {}).get("qosClass")
            if (p.get("spec") or {}).get("nodeName") == self.info.node and qos in (
                "Guaranteed",
                "Burstable",
                "BestEffort",
            ):
                groups[str(md.get("uid"))] = self.cgroups.layout.pod(str(md.get("uid")), qos)
        fresh: dict[str, tuple[float, int]] = {}
        for key, dirs in groups.items():
            try:
                ns = self.cgroups.cpu_usage_ns(dirs)
            except (OSError, ValueError):
                continue
            fresh[key] = (now, ns)
            prev = self._cpu_prev.get(key)
            if prev is not None and now > prev[0]:
                cores = max(0.0, (ns - prev[1]) / 1e9 / (now - prev[0]))
                if key == "kubepods":
                    self.kubepods_cores = cores
                else:
                    self.pod_cpu[key] = cores
        self._cpu_prev = fresh

    # --- content ------------------------------------------------------------------------------

    def node_summary(self) -> dict[str, Any]:
        node = self.watch.node()
        md = node.get("metadata") or {}
        ann = md.get("annotations") or {}
        status = node.get("status") or {}
        alloc = status.get("allocatable") or {}
        cpu_alloc = quantity_to_milli(alloc.get("cpu", "0")) or 0
        marks = parse_watermarks(ann)
        return {
            "cpu_alloc": cpu_alloc,
            "mem_alloc": quantity_to_int(alloc.get("memory", "0")) or 0,
            "batch_cpu": str(alloc.get("kubernetes.io/batch-cpu", "-")),
            "batch_memory": quantity_to_int(alloc.get("kubernetes.io/batch-memory", "0")) or 0,
            "has_batch": "kubernetes.io/batch-cpu" in alloc,
            "x_cpu": ann.get(ANN_OVERSUBSCRIPTION_CPU, "-"),
            "x_mem": ann.get(ANN_OVERSUBSCRIPTION_MEMORY, "-"),
            "marks": marks,
            "evicting": self.watch.evicting(),
            "usage": self.watch.node_usage(),
            "measured_pct": 100.0 * self.kubepods_cores * 1000 / cpu_alloc if cpu_alloc else 0.0,
            "labels": {k: v for k, v in (md.get("labels") or {}).items() if k.startswith("volcano.sh/")},
        }

    def pod_rows(self) -> list[tuple[str, str, str, str, str, str]]:
        rows = []
        for p in self.watch.pods_in(self.info.namespace):
            md = p.get("metadata") or {}
            status = p.get("status") or {}
            level = parse_qos_level(md.get("annotations") or {})
            phase = str(status.get("phase") or "Pending")
            if md.get("deletionTimestamp"):
                phase = "Terminating"
            elif phase == "Failed" and status.get("reason"):
                phase = f"Failed:{status.get('reason')}"
            node = str((p.get("spec") or {}).get("nodeName") or "-")
            cpu = self.pod_cpu.get(str(md.get("uid")))
            rows.append(
                (
                    str(md.get("name")),
                    "offline" if level.offline else "online",
                    str(level.level),
                    phase,
                    node,
                    f"{cpu:.2f}" if cpu is not None and phase in ("Running", "Terminating") else "-",
                )
            )
        return rows

    def render(self) -> str:
        width = shutil.get_terminal_size((120, 40)).columns
        s = self.node_summary()
        usage = s["usage"]
        marks = s["marks"]
        ev = f"{RED}{BOLD}EVICTING{RESET}" if s["evicting"] else f"{GREEN}open{RESET}"
        out = [
            f"{BOLD}Tidemark local cluster{RESET}  node {self.info.node}  "
            f"({s['cpu_alloc'] / 1000:g} CPU, {_gib(s['mem_alloc'])} allocatable)   "
            f"{DIM}{time.monotonic() - self.t0:.0f}s{RESET}",
            f"{YELLOW}{self.current_phase}{RESET}",
            "",
            f"usage     pods (kubepods cgroup) {self.kubepods_cores:.2f} core = {s['measured_pct']:.0f}% of "
            f"allocatable cpu   agent's smoothed node-usage: cpu {usage.get('cpu', '-')}% "
            f"memory {usage.get('memory', '-')}%",
            f"watermark cpu high {marks.cpu[0]}% low {marks.cpu[1]}%   memory high {marks.memory[0]}% "
            f"low {marks.memory[1]}%   node: {ev}",
            f"oversub   allocatable kubernetes.io/batch-cpu {s['batch_cpu']}m batch-memory {_gib(s['batch_memory'])}"
            f"   annotations volcano.sh/oversubscription-cpu {s['x_cpu']} -memory {s['x_mem']}",
            "",
            f"{BOLD}{'POD':<12} {'CLASS':<8} {'QOS':>3}  {'PHASE':<22} {'NODE':<16} {'CPU':>5}{RESET}",
        ]
        for name, klass, level, phase, node, cpu in self.pod_rows():
            color = GREEN if phase == "Running" else (RED if phase.startswith(("Failed", "Terminating")) else YELLOW)
            out.append(f"{name:<12} {klass:<8} {level:>3}  {color}{phase:<22}{RESET} {node:<16} {cpu:>5}")
        others = [n for n in self.watch.node_list() if (n.get("metadata") or {}).get("name") != self.info.node]
        if others:
            counts: dict[str, int] = {}
            for p in self.watch.pods.store.list():
                name = str((p.get("spec") or {}).get("nodeName") or "")
                counts[name] = counts.get(name, 0) + 1
            shown = []
            for n in others:
                name = str((n.get("metadata") or {}).get("name"))
                alloc = (n.get("status") or {}).get("allocatable") or {}
                shown.append(f"{name} (cpu {alloc.get('cpu')}, {counts.get(name, 0)} pods)")
            out.append(f"{DIM}simulated nodes (no processes): {', '.join(shown)}{RESET}")
        out += ["", f"{BOLD}recent decisions (Events){RESET}"]
        for e in self.watch.recent_events(8):
            count = f" x{e.count}" if e.count > 1 else ""
            line = f"{e.wall} {e.reason}{count} {e.object} [{e.source}]: {e.message}"
            out.append(line[: width - 1])
        out += ["", f"{BOLD}scenario{RESET}"]
        with self._lock:
            out += [ln[: width - 1] for ln in self.lines]
        out += [
            "",
            f"{DIM}metrics: agent {self.info.agent_url}/metrics  scheduler {self.info.scheduler_url}/metrics"
            f"   kubeconfig: {self.info.kubeconfig}{RESET}",
            f"{DIM}logs: {self.info.run_dir}/*.log{RESET}",
            *(f"{BOLD}{line}{RESET}" for line in self.footer.splitlines()),
        ]
        return "\n".join(out)

    def _print_changes(self) -> None:
        s = self.node_summary()
        digest = (s["evicting"], s["batch_cpu"] not in ("0", "-"), tuple(r[:5] for r in self.pod_rows()))
        if digest == self._last_digest:
            return
        self._last_digest = digest
        pods = ", ".join(f"{r[0]}:{r[3]}@{r[4]}" for r in self.pod_rows()) or "none"
        usage = s["usage"].get("cpu", "-")
        self._print(
            f"{self._stamp()} state node {'EVICTING' if s['evicting'] else 'open'}, pods cpu {s['measured_pct']:.0f}% "
            f"(agent {usage}%), batch-cpu {s['batch_cpu']}m, oversubscription-cpu {s['x_cpu']}; pods {pods}"
        )
