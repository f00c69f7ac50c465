"""The live view of `make run` on the real node: redrawn in a terminal, line by line otherwise.

What it shows, all read from the running cluster: the node's usage against its cpu and memory
high/low watermarks as numbers and as TRENDS over the last minute (a small chart per resource, one
column per second, the watermarks drawn as lines), the usage measured from the kubepods cgroup (what
the agent compares with the watermarks) beside the agent's own smoothed `tidemark.io/node-usage`,
the offline tier's CPU ceiling and the online pods' CPU wait it follows, scraped from the agent's
/metrics every frame, with the ceiling's trend under the cpu chart (issue 32: the ceiling dips with an
online spike and climbs back after it), the oversubscription it publishes (B: `kubernetes.io/batch-*`
allocatable; X: the `volcano.sh/oversubscription-*` annotations), the evicting state, every demo pod with its class,
phase and CPU, the newest Events (the agent's, the scheduler's and kubelet's decisions), and the
scenario's narrative.

Two halves:
- pure: `ViewState` (everything on screen) built by `build_state(node, pods, ...)`, and
  `render(state, width, color) -> lines` with `trend(...)` and `level_chart(...)` for the charts,
  `parse_metrics`/`reading_of` for the agent's exposition text; no clock, no I/O
  (tests/unit/localcluster/test_view.py);
- live: `Measure` reads the cgroup counters, `LiveView` samples every half second (a watch of Nodes,
  Pods and Events: localcluster/watch.py) and redraws, or prints what changed when there is no
  terminal.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from localcluster.agentmetrics import AGENT_NAMESPACE, AgentReading, agent_metrics_url, http_get, reading_of
from localcluster.watch import ClusterWatch, EventLine
from tidemark.apis import (
    ANN_NODE_USAGE,
    ANN_OVERSUBSCRIPTION_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY,
    node_is_evicting,
    parse_qos_level,
    parse_watermarks,
    quantity_to_int,
    quantity_to_milli,
)

CLEAR: Final = "\x1b[H\x1b[2J"
BOLD, DIM, RED, GREEN, YELLOW, RESET = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m"
BLOCKS: Final = " ▁▂▃▄▅▆▇█"
HIGH_LINE: Final = "─"
LOW_LINE: Final = "┄"
TREND_SECONDS: Final = 60
TREND_WIDTH: Final = 60
TREND_HEIGHT: Final = 4
EVENT_REPEAT: Final = 10.0


# --- pure: state --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Node usage at one moment (seconds on the view's clock), percent of allocatable; None: unknown."""

    t: float
    cpu: float | None
    memory: float | None
    tier: float | None = None  # the offline tier's CPU ceiling, cores


@dataclass(frozen=True)
class PodRow:
    name: str
    klass: str  # online | offline
    level: int
    phase: str
    cpu: float | None  # cores over the last second


@dataclass(frozen=True)
class ViewState:
    node: str
    now: float
    cpu_alloc_milli: int = 0
    memory_alloc: int = 0
    cpu_pct: float | None = None  # measured: kubepods cgroup / allocatable
    memory_pct: float | None = None
    agent_cpu: str = "-"  # the agent's smoothed tidemark.io/node-usage
    agent_memory: str = "-"
    cpu_marks: tuple[int, int] = (80, 30)
    memory_marks: tuple[int, int] = (60, 30)
    evicting: bool = False
    batch_cpu: str = "-"  # allocatable kubernetes.io/batch-cpu (milli)
    batch_memory: int | None = None
    x_cpu: str = "-"
    x_memory: str = "-"
    pods: tuple[PodRow, ...] = ()
    events: tuple[str, ...] = ()
    narrative: tuple[str, ...] = ()
    phase: str = ""
    history: tuple[Sample, ...] = ()
    footer: tuple[str, ...] = ()
    tier: AgentReading = field(default_factory=AgentReading)


def _md(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    md = (obj or {}).get("metadata")
    return md if isinstance(md, Mapping) else {}


def _usage_field(raw: Any, key: str) -> str:
    import json

    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return "-"
    got = value.get(key) if isinstance(value, dict) else None
    return str(got) if isinstance(got, int | float) and not isinstance(got, bool) else "-"


def pod_phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    if _md(pod).get("deletionTimestamp"):
        return "Terminating"
    phase = str(status.get("phase") or "Pending")
    if phase == "Failed" and status.get("reason"):
        return f"Failed:{status.get('reason')}"
    if phase == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
        return "Pending (unbound)"
    return phase


def build_state(
    node_name: str,
    now: float,
    node: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    *,
    pod_cpu: Mapping[str, float] | None = None,
    cpu_pct: float | None = None,
    memory_pct: float | None = None,
    events: Sequence[str] = (),
    narrative: Sequence[str] = (),
    phase: str = "",
    history: Sequence[Sample] = (),
    footer: Sequence[str] = (),
    tier: AgentReading | None = None,
) -> ViewState:
    """Everything on screen from the Node and Pod objects and the measurements; bad fields show as '-'."""
    md = _md(node)
    ann = md.get("annotations") or {}
    status = (node or {}).get("status") or {}
    alloc = status.get("allocatable") or {}
    marks = parse_watermarks(ann)
    batch_mem = alloc.get("kubernetes.io/batch-memory")
    rows = []
    for p in pods:
        pmd = _md(p)
        level = parse_qos_level(pmd.get("annotations") or {})
        ph = pod_phase(p)
        cpu = (pod_cpu or {}).get(str(pmd.get("uid")))
        rows.append(
            PodRow(
                name=str(pmd.get("name")),
                klass="offline" if level.offline else "online",
                level=level.level,
                phase=ph,
                cpu=cpu if ph in ("Running", "Terminating") else None,
            )
        )
    return ViewState(
        node=node_name,
        now=now,
        cpu_alloc_milli=quantity_to_milli(alloc.get("cpu", "0")) or 0,
        memory_alloc=quantity_to_int(alloc.get("memory", "0")) or 0,
        cpu_pct=cpu_pct,
        memory_pct=memory_pct,
        agent_cpu=_usage_field(ann.get(ANN_NODE_USAGE), "cpu"),
        agent_memory=_usage_field(ann.get(ANN_NODE_USAGE), "memory"),
        cpu_marks=marks.cpu,
        memory_marks=marks.memory,
        evicting=node_is_evicting(node or {}),
        batch_cpu=str(alloc.get("kubernetes.io/batch-cpu", "-")),
        batch_memory=quantity_to_int(batch_mem) if batch_mem is not None else None,
        x_cpu=str(ann.get(ANN_OVERSUBSCRIPTION_CPU, "-")),
        x_memory=str(ann.get(ANN_OVERSUBSCRIPTION_MEMORY, "-")),
        pods=tuple(rows),
        events=tuple(events),
        narrative=tuple(narrative),
        phase=phase,
        history=tuple(history),
        footer=tuple(footer),
        tier=tier or AgentReading(),
    )


# --- pure: rendering ----------------------------------------------------------------------------


def _gib(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.1f}Gi" if n >= 2**30 else f"{n / 2**20:.0f}Mi"


def _pct(v: float | None) -> str:
    return "  -  " if v is None else f"{v:4.1f}%"


def columns(
    samples: Sequence[tuple[float, float | None]], now: float, seconds: float = TREND_SECONDS, width: int = TREND_WIDTH
) -> list[float | None]:
    """The samples of the last `seconds` in `width` equal columns, oldest left; a column holds its highest
    sample (a short spike stays visible), None where no sample fell."""
    step = seconds / width
    out: list[float | None] = [None] * width
    for t, v in samples:
        if v is None or t > now:
            continue
        age = now - t
        if age >= seconds:
            continue
        i = width - 1 - min(width - 1, int(age / step))
        prev = out[i]
        out[i] = v if prev is None else max(prev, v)
    return out


def _row_of(pct: float, height: int) -> int:
    return max(0, min(height - 1, int(pct * height / 100)))


def trend(
    samples: Sequence[tuple[float, float | None]],
    now: float,
    high: int,
    low: int,
    *,
    seconds: float = TREND_SECONDS,
    width: int = TREND_WIDTH,
    height: int = TREND_HEIGHT,
    color: bool = False,
) -> list[str]:
    """A chart of usage (percent, 0 at the bottom to 100 at the top) over the last `seconds`: `height`
    rows of block characters, eighths of a row each, with the high watermark drawn as a solid line and
    the low one dotted where no bar covers them, and labelled on the left. In colour, a column is red
    at or over the high watermark, yellow over the low one, green at or under it."""
    cols = columns(samples, now, seconds, width)
    high_row, low_row = _row_of(high, height), _row_of(low, height)
    lines = []
    for r in range(height - 1, -1, -1):
        if r == high_row and r == low_row:
            label = f"{high}/{low}%"
        elif r == high_row:
            label = f"high {high}%"
        elif r == low_row:
            label = f"low {low}%"
        elif r == height - 1:
            label = "100%"
        else:
            label = ""
        cells = []
        for v in cols:
            fill = 0 if v is None else max(0, min(8, round(max(0.0, min(100.0, v)) * height * 8 / 100) - 8 * r))
            if fill == 0:
                mark = HIGH_LINE if r == high_row else (LOW_LINE if r == low_row else " ")
                cells.append(f"{DIM}{mark}{RESET}" if color and mark != " " else mark)
                continue
            ch = BLOCKS[fill]
            if color and v is not None:
                tint = RED if v >= high else (YELLOW if v > low else GREEN)
                ch = f"{tint}{ch}{RESET}"
            cells.append(ch)
        lines.append(f"{label:>10} │{''.join(cells)}│")
    axis = f"{seconds:g}s ago".ljust(width // 2, "─") + "now".rjust(width - width // 2, "─")
    lines.append(f"{'':>10} └{axis}┘")
    return lines


def level_chart(
    samples: Sequence[tuple[float, float | None]],
    now: float,
    top: float,
    *,
    label: str,
    unit: str = "cores",
    seconds: float = TREND_SECONDS,
    width: int = TREND_WIDTH,
    height: int = 2,
) -> list[str]:
    """A small chart of a level (0 at the bottom to `top`) over the last `seconds`, in the columns of `trend`'s
    charts so that the two line up second by second; no watermark lines, no axis (the chart above has it). A
    column with any level above 0 shows at least its lowest eighth (the tier's floor stays visible)."""
    cols = columns(samples, now, seconds, width)
    lines = []
    for r in range(height - 1, -1, -1):
        cells = []
        for v in cols:
            if v is None or top <= 0:
                cells.append(" ")
                continue
            eighths = round(max(0.0, min(top, v)) * height * 8 / top)
            if v > 0:
                eighths = max(1, eighths)
            cells.append(BLOCKS[max(0, min(8, eighths - 8 * r))])
        name = f"{top:g} {unit}" if r == height - 1 else (label if r == 0 else "")
        lines.append(f"{name:>10} │{''.join(cells)}│")
    return lines


def tier_line(state: ViewState) -> str:
    """The tier's headline: its CPU ceiling and the online wait it follows; '?' when the scrape failed."""
    t = state.tier
    if not t.scraped:
        return "tier ceiling ?  (the agent's /metrics did not answer)"
    if t.ceiling is None:
        return "tier ceiling -  (not published: tier.enabled off, or no decision yet)"
    wait = "-" if t.online_wait is None else f"{t.online_wait:.1%}"
    delay = "" if t.online_delay_ms is None else f", {t.online_delay_ms:.2f} ms a slice"
    return (
        f"tier ceiling {t.ceiling:.2f} cores  (the offline tier's CPU, the agent's /metrics)"
        f"   online pods' CPU wait {wait}{delay}"
    )


def render(state: ViewState, width: int = 120, color: bool = True) -> list[str]:
    """The screen: header, usage and watermarks with their trends, B and X, pods, events, narrative."""

    def c(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if color else text

    def cut(text: str) -> str:
        return text if len(text) < width else text[: max(1, width - 1)]

    ev = c(RED + BOLD, "EVICTING") if state.evicting else c(GREEN, "open (not evicting)")
    cpu_h, cpu_l = state.cpu_marks
    mem_h, mem_l = state.memory_marks
    out = [
        c(BOLD, "Tidemark on a real node")
        + f"  node {state.node} ({state.cpu_alloc_milli / 1000:g} CPU, {_gib(state.memory_alloc)} allocatable)"
        + c(DIM, f"   {state.now:.0f}s"),
        c(YELLOW, state.phase or "-"),
        "",
        f"node state  {ev}",
        f"cpu    {_pct(state.cpu_pct)} of allocatable (pods, kubepods cgroup)   agent's smoothed {state.agent_cpu}%"
        f"   watermarks high {cpu_h}% low {cpu_l}%",
        *trend([(s.t, s.cpu) for s in state.history], state.now, cpu_h, cpu_l, color=color),
        tier_line(state),
        *level_chart([(s.t, s.tier) for s in state.history], state.now, state.cpu_alloc_milli / 1000, label="ceiling"),
        f"memory {_pct(state.memory_pct)} of allocatable (working set)   agent's smoothed {state.agent_memory}%"
        f"   watermarks high {mem_h}% low {mem_l}%",
        *trend([(s.t, s.memory) for s in state.history], state.now, mem_h, mem_l, color=color),
        f"published  B: kubernetes.io/batch-cpu {state.batch_cpu}{'m' if state.batch_cpu != '-' else ''}"
        f"  batch-memory {_gib(state.batch_memory)}"
        f"   X: volcano.sh/oversubscription-cpu {state.x_cpu}  -memory {state.x_memory}",
        "",
        c(BOLD, f"{'POD':<14} {'CLASS':<8} {'QOS':>3}  {'PHASE':<22} {'CPU':>6}"),
    ]
    if not state.pods:
        out.append(c(DIM, "(no pods yet)"))
    for p in state.pods:
        tint = GREEN if p.phase == "Running" else (RED if p.phase.startswith(("Failed", "Terminating")) else YELLOW)
        cpu = "-" if p.cpu is None else f"{p.cpu:.2f}"
        out.append(f"{p.name[:14]:<14} {p.klass:<8} {p.level:>3}  {c(tint, f'{p.phase[:22]:<22}')} {cpu:>6}")
    out += ["", c(BOLD, "recent decisions (Events)")]
    out += [cut(e) for e in state.events] or [c(DIM, "(none yet)")]
    out += ["", c(BOLD, "scenario")]
    out += [cut(n) for n in state.narrative]
    if state.footer:
        out.append("")
        out += [c(BOLD, cut(f)) for f in state.footer]
    return out


def state_line(state: ViewState) -> str:
    """One line for a log without a terminal: what changed is visible line to line."""
    pods = ", ".join(f"{p.name}:{p.phase}" for p in state.pods) or "none"
    return (
        f"state node {'EVICTING' if state.evicting else 'open'}, cpu {_pct(state.cpu_pct).strip()} "
        f"(agent {state.agent_cpu}%, high {state.cpu_marks[0]}% low {state.cpu_marks[1]}%), "
        f"batch-cpu {state.batch_cpu}, oversubscription-cpu {state.x_cpu}, {_tier_short(state.tier)}; pods {pods}"
    )


def _tier_short(t: AgentReading) -> str:
    if not t.scraped:
        return "tier ceiling ?"
    return "tier ceiling -" if t.ceiling is None else f"tier ceiling {t.ceiling:.2f}"


def state_digest(state: ViewState) -> tuple[Any, ...]:
    return (state.evicting, state.batch_cpu not in ("0", "-"), tuple((p.name, p.phase) for p in state.pods))


def event_shown(e: EventLine, namespace: str) -> bool:
    """The scenario's story: Events about the Node (cluster-scoped) and the demo's pods, not about the
    installation's own pods in tidemark-system."""
    return e.namespace in ("", namespace)


def newest_events(events: Sequence[EventLine], n: int = 6) -> list[EventLine]:
    """The last `n` Events, oldest first, one per reason and object (the newest): a decision repeated every
    cycle (CapacityPublished) does not push the others off the screen."""
    seen: set[tuple[str, str]] = set()
    out: list[EventLine] = []
    for e in reversed(events):
        if (e.reason, e.object) in seen:
            continue
        seen.add((e.reason, e.object))
        out.append(e)
        if len(out) == n:
            break
    return out[::-1]


def event_text(e: EventLine) -> str:
    count = f" x{e.count}" if e.count > 1 else ""
    return f"{e.wall} {e.type} {e.reason}{count} {e.object} [{e.source}]: {e.message}"


# --- live: measuring and drawing -------------------------------------------------------------------


class Measure:
    """CPU (cores over the last read) of the kubepods cgroup and of pods by UID, and kubepods' memory
    working set (usage minus inactive file, as kubelet and the agent count it), from cgroup v1 files."""

    def __init__(self, root: Path = Path("/sys/fs/cgroup"), clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.clock = clock
        self._prev: dict[str, tuple[float, int]] = {}

    def _cpu_dir(self, uid: str | None, qos: str) -> Path:
        base = self.root / "cpuacct" / "kubepods"
        if uid is None:
            return base
        sub = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(qos)
        return (base / sub if sub else base) / f"pod{uid}"

    def cpu(self, pods: Mapping[str, str]) -> tuple[float | None, dict[str, float]]:
        """(kubepods cores, {uid: cores}) since the previous call; `pods` maps uid -> qosClass."""
        now = self.clock()
        fresh: dict[str, tuple[float, int]] = {}
        rates: dict[str, float] = {}
        for key, d in [("", self._cpu_dir(None, "")), *((u, self._cpu_dir(u, q)) for u, q in pods.items())]:
            try:
                ns = int((d / "cpuacct.usage").read_text())
            except (OSError, ValueError):
                continue
            fresh[key] = (now, ns)
            prev = self._prev.get(key)
            if prev is not None and now > prev[0] and ns >= prev[1]:
                rates[key] = (ns - prev[1]) / 1e9 / (now - prev[0])
        self._prev = fresh
        total = rates.pop("", None)
        return total, rates

    def memory_working_set(self) -> int | None:
        d = self.root / "memory" / "kubepods"
        try:
            usage = int((d / "memory.usage_in_bytes").read_text())
            stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines() if " " in line)
        except (OSError, ValueError):
            return None
        return max(0, usage - int(stat.get("total_inactive_file", "0")))


class SampledMeasure(Measure):
    """`Measure` from cumulative counters a sampler on the node writes to a file (localcluster/probe.py's
    `sampler`, for the v2 node's VM: its files are not this machine's); rates between two of its samples."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._last: tuple[float, dict[str, int]] | None = None
        self._rates: tuple[float | None, dict[str, float]] = (None, {})

    def _load(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
            return data
        except (OSError, ValueError):
            return None

    def cpu(self, pods: Mapping[str, str]) -> tuple[float | None, dict[str, float]]:
        data = self._load()
        if data is None:
            return None, {}
        t = float(data["t"])
        counters = {k: int(v) for k, v in (data.get("pods_cpu_ns") or {}).items()}
        if data.get("kubepods_cpu_ns") is not None:
            counters[""] = int(data["kubepods_cpu_ns"])
        last = self._last
        if last is not None and t > last[0]:
            rates = {k: (v - last[1][k]) / 1e9 / (t - last[0]) for k, v in counters.items()
                     if k in last[1] and v >= last[1][k]}
            total = rates.pop("", None)
            self._rates = (total, {u: r for u, r in rates.items() if u in pods})
        if last is None or t > last[0]:
            self._last = (t, counters)
        return self._rates

    def memory_working_set(self) -> int | None:
        data = self._load()
        v = data.get("kubepods_memory_ws") if data else None
        return None if v is None else int(v)


@dataclass
class LiveView:
    """Samples every `period` seconds; in a terminal redraws the screen, otherwise prints the narrative,
    state changes and (once per reason and object every 10 s) Events as lines."""

    watch: ClusterWatch
    node_name: str
    namespace: str
    tty: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    period: float = 0.5
    measure: Measure = field(default_factory=Measure)
    clock: Callable[[], float] = time.monotonic
    phase_text: str = "starting"
    footer: tuple[str, ...] = ()
    #: one GET of the agent's /metrics (url -> text); raises on failure
    fetch: Callable[[str], str] = field(default_factory=lambda: http_get)

    def __post_init__(self) -> None:
        self.t0 = self.clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.narrative: deque[str] = deque(maxlen=12)
        self.history: deque[Sample] = deque(maxlen=int(TREND_SECONDS / self.period) * 2 + 8)
        self._pod_cpu: dict[str, float] = {}
        self._cpu_pct: float | None = None
        self._mem_pct: float | None = None
        self._tier = AgentReading()
        self._digest: tuple[Any, ...] = ()
        self._event_printed: dict[tuple[str, str], float] = {}
        self.watch.on_event(self._on_event)

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _print(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def say(self, text: str) -> None:
        line = f"{self.elapsed():6.1f}s {text}"
        with self._lock:
            self.narrative.append(line)
        if not self.tty:
            self._print(line)

    def phase(self, text: str) -> None:
        self.phase_text = text
        self.say(f"== {text}")

    def shown(self, e: EventLine) -> bool:
        return event_shown(e, self.namespace)

    def _on_event(self, e: EventLine) -> None:
        if self.tty or not self.shown(e):
            return
        key = (e.reason, e.object)
        last = self._event_printed.get(key)
        if last is not None and e.at - last < EVENT_REPEAT:
            return
        self._event_printed[key] = e.at
        self._print(f"{self.elapsed():6.1f}s event {event_text(e)}")

    def sample(self) -> None:
        """One measurement: CPU of kubepods and the demo pods, memory, into the history."""
        node = self.watch.node()
        alloc = (node.get("status") or {}).get("allocatable") or {}
        cpu_alloc = quantity_to_milli(alloc.get("cpu", "0")) or 0
        mem_alloc = quantity_to_int(alloc.get("memory", "0")) or 0
        pods = {
            str(_md(p).get("uid")): str((p.get("status") or {}).get("qosClass") or "")
            for p in self.watch.pods_in(self.namespace)
        }
        total, per_pod = self.measure.cpu(pods)
        ws = self.measure.memory_working_set()
        self._pod_cpu = per_pod
        self._cpu_pct = 100.0 * total * 1000 / cpu_alloc if total is not None and cpu_alloc else None
        self._mem_pct = 100.0 * ws / mem_alloc if ws is not None and mem_alloc else None
        self._tier = self.scrape()
        with self._lock:
            self.history.append(Sample(self.elapsed(), self._cpu_pct, self._mem_pct, self._tier.ceiling))

    def scrape(self) -> AgentReading:
        """The tier's gauges from the node's agent; any failure (no pod yet, refused, slow, bad text) is '?'."""
        url = agent_metrics_url(self.watch.pods_in(AGENT_NAMESPACE), self.node_name)
        if url is None:
            return AgentReading()
        try:
            return reading_of(self.fetch(url))
        except Exception:  # the view never stops on a bad scrape
            return AgentReading()

    def state(self) -> ViewState:
        with self._lock:
            narrative, history = list(self.narrative), list(self.history)
        return build_state(
            self.node_name,
            self.elapsed(),
            self.watch.node(),
            self.watch.pods_in(self.namespace),
            pod_cpu=self._pod_cpu,
            cpu_pct=self._cpu_pct,
            memory_pct=self._mem_pct,
            events=[event_text(e) for e in newest_events([e for e in self.watch.recent_events(200) if self.shown(e)])],
            narrative=narrative,
            phase=self.phase_text,
            history=history,
            footer=self.footer,
            tier=self._tier,
        )

    def frame(self, color: bool = True) -> str:
        return "\n".join(render(self.state(), shutil.get_terminal_size((120, 40)).columns, color))

    def tick(self) -> None:
        self.sample()
        if self.tty:
            text = self.frame()
            with self._lock:
                self.out.write(CLEAR + text + "\n")
                self.out.flush()
            return
        st = self.state()
        digest = state_digest(st)
        if digest != self._digest:
            self._digest = digest
            self._print(f"{self.elapsed():6.1f}s {state_line(st)}")

    def start(self) -> LiveView:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="live view", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with contextlib.suppress(Exception):  # a bad read never ends the view (logged as '-')
                self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
