"""Usage traces for the capacity replay (benchmarks/bench_capacity.py; docs/capacity-prediction.md, "Traces").

A trace is one node over time: its allocatable, the usage of everything that is not a pod (`system`), each
online pod's CPU and memory per step and its requests, and the offline pods that arrive (each with its
requests and the work it has to do). The format (JSON, `kind: tidemark-capacity-trace`, version 1):

    {"kind": "tidemark-capacity-trace", "version": 1, "name": "diurnal", "seed": 1,
     "start": 1767571200,            # epoch seconds of step 0 (UTC; the profiles' hours are UTC hours)
     "step": 15,                     # seconds per step
     "steps": 23040,
     "node": {"cpu": 32000, "memory": 137438953472},          # allocatable: milli-cores, bytes
     "system": {"cpu": [...], "memory": [...]},                # per step: the node's usage minus its pods'
     "online": [{"name": "web", "created": -1, "deleted": null,  # step of creation (-1: before the trace)
                 "request": {"cpu": 4000, "memory": 8589934592},
                 "cpu": [...], "memory": [...]}],               # per step from `created` (null before)
     "offline": [{"name": "job-1", "arrival": 120, "request": {"cpu": 2000, "memory": 4294967296},
                  "memory": 3435973836, "work": 7200000}]}     # working set; milli-core-seconds of work

Filling one from Prometheus (one node, `step` = the query_range step, e.g. 15s):

    online pod CPU (milli):  1000 * sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{node="N",
                             container!="", container!="POD"}[1m]))
    online pod memory:       sum by (namespace, pod) (container_memory_working_set_bytes{node="N", container!="",
                             container!="POD"})
    requests (kube-state-metrics): sum by (namespace, pod) (kube_pod_container_resource_requests{node="N",
                             resource="cpu"}) * 1000, and resource="memory"
    system CPU (milli):      1000 * sum(rate(node_cpu_seconds_total{instance="N", mode!~"idle|iowait|steal"}[1m]))
                             minus the pods' sum above
    system memory:           node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes minus the pods' sum
    creation:                kube_pod_created{node="N"} (the step it falls in; before the range: -1)

Leave `offline` empty (or give your batch history: arrival = kube_pod_created, work = the integral of its CPU)
and `--offline generated` adds the seeded batch arrivals below. Values before `created` are null.

The seeded generator (`generate`) makes four traces of one 32-core, 128 GiB node, 4 days at 15 s:

- `diurnal`: 8 services whose load follows the working day (peaks near 14:00 UTC, nights at a third);
- `bursty`: 6 services with a steady base and random bursts (2 an hour each, 30 s to 15 min, 2 to 5 cores);
- `steps`: 5 diurnal services, one doubling for good at 10:00 on day 2 (a release), a new service deployed at
  18:00 on day 2 (a cold start), one halving at 09:00 on day 3;
- `mixed`: diurnal, bursty and step services together.

Offline pods arrive in every trace the same way (its own seed): a Poisson stream (5 an hour, 1.5x at night)
and a fan-out of 8 to 16 pods every 4 hours; 1, 2 or 4 cores, 0.75 to 1.5 GiB per core, work for a lognormal
duration at full speed (median 40 min, 5 min to 8 h).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GiB = 2**30
DAY = 86400
KIND = "tidemark-capacity-trace"
#: 2026-01-05 00:00:00 UTC, a Monday
START = 1767571200


@dataclass
class OnlinePod:
    name: str
    request_cpu: float
    request_memory: float
    cpu: list[float | None]
    memory: list[float | None]
    created: int = -1
    deleted: int | None = None


@dataclass
class OfflinePod:
    name: str
    arrival: int
    request_cpu: float
    request_memory: float
    memory: float
    work: float


@dataclass
class Trace:
    name: str
    start: float
    step: float
    steps: int
    node_cpu: float
    node_memory: float
    system_cpu: list[float]
    system_memory: list[float]
    online: list[OnlinePod] = field(default_factory=list)
    offline: list[OfflinePod] = field(default_factory=list)
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        def r(xs: list[float | None]) -> list[float | None]:
            return [None if x is None else round(x) for x in xs]

        return {
            "kind": KIND,
            "version": 1,
            "name": self.name,
            "seed": self.seed,
            "start": self.start,
            "step": self.step,
            "steps": self.steps,
            "node": {"cpu": self.node_cpu, "memory": self.node_memory},
            "system": {"cpu": r(list(self.system_cpu)), "memory": r(list(self.system_memory))},
            "online": [
                {
                    "name": p.name,
                    "created": p.created,
                    "deleted": p.deleted,
                    "request": {"cpu": p.request_cpu, "memory": p.request_memory},
                    "cpu": r(p.cpu),
                    "memory": r(p.memory),
                }
                for p in self.online
            ],
            "offline": [
                {
                    "name": p.name,
                    "arrival": p.arrival,
                    "request": {"cpu": p.request_cpu, "memory": p.request_memory},
                    "memory": round(p.memory),
                    "work": round(p.work),
                }
                for p in self.offline
            ],
        }


class TraceError(ValueError):
    """A trace file that does not follow the format (the path of the bad field in the message)."""


#: bounds: 1e6 steps is 174 days at 15 s (the shipped traces have 23040); a file larger than MAX_BYTES or with more
#: pods than MAX_PODS is refused before it is replayed (a `steps: 1e12` once allocated a 1e12-element list)
MAX_STEPS = 1_000_000
MAX_PODS = 10_000
MAX_BYTES = 1 << 30


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(raw: object, where: str, *, low: float = 0.0) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < low:
        raise TraceError(f"{where}: expected a finite number >= {low:g}, got {_shown(raw)}")
    return float(raw)


def _int(raw: object, where: str, low: int, high: int) -> int:
    """A JSON integer in low..high (never a float: `steps: 2.5` was read as 2)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise TraceError(f"{where}: expected an integer {low}..{high}, got {_shown(raw)}")
    return raw


def _list(raw: object, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_PODS:
        raise TraceError(f"{where}: expected a list of at most {MAX_PODS} pods")
    return raw


def _series(raw: object, where: str, steps: int, *, nullable: bool = False) -> list[float | None]:
    if not isinstance(raw, list) or len(raw) != steps:
        raise TraceError(f"{where}: expected a list of {steps} values (one per step)")
    out: list[float | None] = []
    for i, v in enumerate(raw):
        if v is None and nullable:
            out.append(None)
        else:
            out.append(_num(v, f"{where}[{i}]"))
    return out


def from_json(data: object) -> Trace:
    """A trace from its JSON document; TraceError naming the first bad field."""
    if not isinstance(data, Mapping) or data.get("kind") != KIND or data.get("version") != 1:
        raise TraceError(f"not a trace: expected kind {KIND!r} and version 1")
    steps = _int(data.get("steps"), "steps", 1, MAX_STEPS)
    node = data.get("node")
    if not isinstance(node, Mapping):
        raise TraceError("node: expected {cpu, memory}")
    system = data.get("system") or {}
    if not isinstance(system, Mapping):
        raise TraceError("system: expected {cpu: [...], memory: [...]}")
    sys_cpu = _series(system.get("cpu", [0] * steps), "system.cpu", steps)
    sys_mem = _series(system.get("memory", [0] * steps), "system.memory", steps)
    trace = Trace(
        name=str(data.get("name") or "trace"),
        start=_num(data.get("start"), "start"),
        step=_num(data.get("step"), "step", low=1),
        steps=steps,
        node_cpu=_num(node.get("cpu"), "node.cpu", low=1),
        node_memory=_num(node.get("memory"), "node.memory", low=1),
        system_cpu=[v or 0.0 for v in sys_cpu],
        system_memory=[v or 0.0 for v in sys_mem],
        seed=_int(data.get("seed") or 0, "seed", 0, 2**63 - 1),
    )
    for i, raw in enumerate(_list(data.get("online"), "online")):
        where = f"online[{i}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("request"), Mapping):
            raise TraceError(f"{where}: expected an object with name, request, cpu, memory")
        created = _int(raw.get("created", -1), f"{where}.created", -1, steps)
        deleted = raw.get("deleted")
        deleted = None if deleted is None else _int(deleted, f"{where}.deleted", 0, steps)
        trace.online.append(
            OnlinePod(
                name=str(raw.get("name") or f"online-{i}"),
                request_cpu=_num(raw["request"].get("cpu", 0), f"{where}.request.cpu"),
                request_memory=_num(raw["request"].get("memory", 0), f"{where}.request.memory"),
                cpu=_series(raw.get("cpu"), f"{where}.cpu", steps, nullable=True),
                memory=_series(raw.get("memory"), f"{where}.memory", steps, nullable=True),
                created=created,
                deleted=deleted,
            )
        )
    for i, raw in enumerate(_list(data.get("offline"), "offline")):
        where = f"offline[{i}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("request"), Mapping):
            raise TraceError(f"{where}: expected an object with name, arrival, request, memory, work")
        trace.offline.append(
            OfflinePod(
                name=str(raw.get("name") or f"offline-{i}"),
                arrival=_int(raw.get("arrival"), f"{where}.arrival", 0, steps),
                request_cpu=_num(raw["request"].get("cpu"), f"{where}.request.cpu", low=1),
                request_memory=_num(raw["request"].get("memory"), f"{where}.request.memory", low=1),
                memory=_num(raw.get("memory"), f"{where}.memory"),
                work=_num(raw.get("work"), f"{where}.work", low=1),
            )
        )
    return trace


def load(path: str | Path) -> Trace:
    """A trace file; TraceError naming the file and what is wrong (never another exception)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise TraceError(f"{path}: larger than {MAX_BYTES} bytes")
        data = json.loads(raw.decode("utf-8"))
    except TraceError:
        raise
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: '[' x 100000
        raise TraceError(f"{path}: {e.strerror if isinstance(e, OSError) else e}") from e
    try:
        return from_json(data)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from e


# --- the generator --------------------------------------------------------------------------------------


class _Gen:
    def __init__(self, seed: int, steps: int, step: float, start: float) -> None:
        self.rng = random.Random(seed)
        self.steps = steps
        self.step = step
        self.start = start

    def hour(self, i: int) -> float:
        return ((self.start + i * self.step) % DAY) / 3600.0

    def noise(self, sigma: float, tau_steps: float) -> list[float]:
        """A slow AR(1) multiplicative noise around 1 plus a fast jitter."""
        out, x = [], 0.0
        a = math.exp(-1.0 / tau_steps)
        for _ in range(self.steps):
            x = a * x + math.sqrt(1 - a * a) * self.rng.gauss(0, sigma)
            out.append(max(0.2, 1.0 + x + self.rng.gauss(0, sigma / 2)))
        return out

    def diurnal(self, peak: float, trough: float, peak_hour: float) -> list[float]:
        """A working-day curve: `trough` at night, `peak` around `peak_hour` (UTC), noisy."""
        n = self.noise(0.07, 40)
        out = []
        for i in range(self.steps):
            h = self.hour(i)
            d = math.cos((h - peak_hour) / 24.0 * 2 * math.pi)  # 1 at the peak, -1 twelve hours away
            shape = max(0.0, d) ** 1.5
            out.append((trough + (peak - trough) * shape) * n[i])
        return out

    def bursty(self, base: float) -> list[float]:
        """A steady base with random bursts: 2 an hour, 30 s to 15 min, 2 to 5 cores."""
        n = self.noise(0.05, 20)
        out = [base * n[i] for i in range(self.steps)]
        rate = 2.0 / 3600.0 * self.step
        i = 0
        while i < self.steps:
            if self.rng.random() < rate:
                length = max(2, int(min(900.0, max(30.0, self.rng.expovariate(1 / 180.0))) / self.step))
                amp = self.rng.uniform(2000.0, 5000.0)
                for j in range(i, min(self.steps, i + length)):
                    out[j] += amp * self.rng.uniform(0.85, 1.0)
                i += length
            i += 1
        return out

    def memory(self, base: float, cpu: list[float], per_core: float) -> list[float]:
        """A working set that follows the CPU a little (caches), noisy."""
        n = self.noise(0.02, 200)
        return [(base + per_core * c / 1000.0) * n[i] for i, c in enumerate(cpu)]

    def online(self, name: str, cpu: list[float], mem_base: float, per_core: float, request_factor: float = 1.6,
               created: int = -1) -> OnlinePod:  # fmt: skip
        mem = self.memory(mem_base, cpu, per_core)
        live = range(max(0, created), self.steps)
        peak_cpu = sorted(cpu[i] for i in live)[int(0.99 * (len(live) - 1))]
        peak_mem = max(mem[i] for i in live)
        return OnlinePod(
            name,
            request_cpu=float(round(peak_cpu * request_factor / 100) * 100),
            request_memory=float(math.ceil(peak_mem * 1.3 / 2**28) * 2**28),
            cpu=[c if i >= created else None for i, c in enumerate(cpu)],
            memory=[m if i >= created else None for i, m in enumerate(mem)],
            created=created,
        )


def _offline(seed: int, steps: int, step: float, start: float) -> list[OfflinePod]:
    rng = random.Random(seed * 7919 + 17)
    out: list[OfflinePod] = []

    def job(i: int) -> OfflinePod:
        cores = rng.choice((1, 2, 2, 4))
        per_core = rng.uniform(0.75, 1.5) * GiB
        minutes = min(480.0, max(5.0, math.exp(rng.gauss(math.log(40.0), 1.0))))
        request_mem = math.ceil(cores * per_core / 2**28) * 2**28
        return OfflinePod(
            f"job-{len(out) + 1}",
            i,
            request_cpu=cores * 1000.0,
            request_memory=float(request_mem),
            memory=request_mem * rng.uniform(0.6, 0.9),
            work=cores * 1000.0 * minutes * 60.0,
        )

    fanout_every = int(4 * 3600 / step)
    for i in range(steps):
        h = ((start + i * step) % DAY) / 3600.0
        rate = 5.0 / 3600.0 * step * (1.5 if h < 6 or h >= 22 else 1.0)
        if rng.random() < rate:
            out.append(job(i))
        if i % fanout_every == fanout_every // 2:
            for _ in range(rng.randint(8, 16)):
                out.append(job(i))
    return out


def _system(g: _Gen) -> tuple[list[float], list[float]]:
    n = g.noise(0.1, 30)
    return [500.0 * x for x in n], [3.0 * GiB * (0.95 + 0.05 * x) for x in n]


def generate(name: str, seed: int = 1, days: int = 4, step: float = 15.0, start: float = START) -> Trace:
    """One of the shipped traces (see the module docstring), the same for the same seed."""
    steps = int(days * DAY / step)
    g = _Gen(seed * 1000 + sum(map(ord, name)), steps, step, start)
    sys_cpu, sys_mem = _system(g)
    t = Trace(name, start, step, steps, 32000.0, 128.0 * GiB, sys_cpu, sys_mem, seed=seed)
    day_step = int(DAY / step)

    def at(day: int, hour: float) -> int:
        return int(day * day_step + hour * 3600 / step)

    def diurnal_services(count: int, total_peak: float, prefix: str) -> None:
        weights = [g.rng.uniform(0.5, 1.5) for _ in range(count)]
        for k, w in enumerate(weights):
            peak = total_peak * w / sum(weights)
            cpu = g.diurnal(peak, peak * g.rng.uniform(0.25, 0.4), 14.0 + g.rng.uniform(-1.5, 1.5))
            t.online.append(g.online(f"{prefix}-{k}", cpu, g.rng.uniform(2.0, 4.0) * GiB, 0.4 * GiB))

    def bursty_services(count: int, total_base: float, prefix: str) -> None:
        for k in range(count):
            cpu = g.bursty(total_base / count * g.rng.uniform(0.7, 1.3))
            t.online.append(g.online(f"{prefix}-{k}", cpu, g.rng.uniform(2.0, 4.0) * GiB, 0.2 * GiB, 1.3))

    if name == "diurnal":
        diurnal_services(8, 17000.0, "web")
    elif name == "bursty":
        bursty_services(6, 9000.0, "api")
    elif name == "steps":
        diurnal_services(5, 11000.0, "web")
        up = t.online[0]  # a release doubles it for good at 10:00 on day 2
        t.online[0] = g.online(up.name, [c * (2.0 if i >= at(1, 10) else 1.0) for i, c in enumerate(
            x or 0.0 for x in up.cpu)], 3.0 * GiB, 0.4 * GiB)  # fmt: skip
        down = t.online[1]  # one halves at 09:00 on day 3
        t.online[1] = g.online(down.name, [c * (0.5 if i >= at(2, 9) else 1.0) for i, c in enumerate(
            x or 0.0 for x in down.cpu)], 3.0 * GiB, 0.4 * GiB)  # fmt: skip
        new_cpu = g.diurnal(4000.0, 1200.0, 15.0)  # a new service deployed at 18:00 on day 2
        t.online.append(g.online("new-svc", new_cpu, 4.0 * GiB, 0.5 * GiB, created=at(1, 18)))
    elif name == "mixed":
        diurnal_services(4, 9000.0, "web")
        bursty_services(3, 4000.0, "api")
        up = t.online[0]
        t.online[0] = g.online(up.name, [c * (1.8 if i >= at(2, 11) else 1.0) for i, c in enumerate(
            x or 0.0 for x in up.cpu)], 3.0 * GiB, 0.4 * GiB)  # fmt: skip
    else:
        raise ValueError(f"unknown trace {name!r} (diurnal, bursty, steps, mixed)")
    # kubelet admits no more than allocatable: requests above 90 % of it are scaled down to fit
    requested = sum(p.request_cpu for p in t.online)
    if requested > 0.9 * t.node_cpu:
        for p in t.online:
            p.request_cpu = float(round(p.request_cpu * 0.9 * t.node_cpu / requested / 100) * 100)
    t.offline = _offline(seed * 1000 + sum(map(ord, name)), steps, step, start)
    return t


TRACES = ("diurnal", "bursty", "steps", "mixed")


def with_generated_offline(trace: Trace) -> Trace:
    """The trace with the generator's offline arrivals (for a trace filled from Prometheus without them)."""
    trace.offline = _offline(trace.seed or 1, trace.steps, trace.step, trace.start)
    return trace
