"""The pressure path's sensor (docs/design.md, "Pressure path"): a thread blocked in poll() on the kernel's
pressure notifications, next to the 1 s sampler, that wakes the main loop the moment one fires.

Sources (`sources_for`):

- cgroup v2: PSI triggers (`some <stall_us> <window_us>` written to an fd of `cpu.pressure` /
  `memory.pressure`, polled for POLLPRI) on the kubepods group and on each online pod's group;
- where the kubepods group has no pressure file of a resource (cgroup v1): the node's
  `/proc/pressure/<resource>` trigger, when the kernel has PSI;
- cgroup v1 memcg: `memory.pressure_level` through an eventfd registered in `cgroup.event_control`
  (`"<eventfd> <fd of memory.pressure_level> <level>"`), polled for POLLIN.

A fired source is a `PressureEvent` handed to `on_event` (the daemon's `Cycle.pressure_fired`, which
samples and decides at once: see `agent.decide.pressure`). A source whose group goes away (POLLERR,
POLLHUP, POLLNVAL) is dropped; `arm()` is called again with the current sources at each QoS reconcile.
The opener (which fds to poll, how to arm them) and the clock are injected: unit tests use pipes.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from agent.model import CgroupDirs
from tidemark.apis import Resource

log = logging.getLogger(__name__)

Kind = Literal["psi", "pressure_level"]
#: after a round of events, the thread waits this long before polling again (v1 "low" events may come
#: hundreds of times a second under reclaim; the decision needs only the first)
MIN_ROUND = 0.02


@dataclass(frozen=True, slots=True)
class Source:
    """One pressure file to watch: what it measures, where (`scope`: node, kubepods, or a pod's key)."""

    resource: Resource
    scope: str
    kind: Kind
    path: str


@dataclass(frozen=True, slots=True)
class PressureEvent:
    time: float  # monotonic
    source: Source


@dataclass(frozen=True, slots=True)
class Armed:
    """An armed source: the fd to poll, the poll events that mean "fired", and every fd to close."""

    fd: int
    events: int
    close: tuple[int, ...]
    #: bytes to read from `fd` to re-arm it after it fired (an eventfd's counter: 8), 0 for none
    drain: int = 0
    #: the PSI trigger the kernel took (it may differ from the configured one: `unprivileged_trigger`)
    trigger: str = ""


def unprivileged_trigger(trigger: str) -> str | None:
    """The trigger an unprivileged writer may arm: the window rounded up to a whole multiple of 2 s, the
    stall scaled with it (the same share of the window); None when `trigger` already fits or is malformed."""
    parts = trigger.split()
    if len(parts) != 3 or not (parts[1] + parts[2]).isascii() or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    stall, window = int(parts[1]), int(parts[2])
    rounded = max(2_000_000, -(-window // 2_000_000) * 2_000_000)
    if rounded == window or window <= 0:
        return None
    return f"{parts[0]} {stall * rounded // window} {rounded}"


class Opener(Protocol):
    def arm(self, source: Source, trigger: str, level: str) -> Armed: ...


class KernelOpener:
    """Arms the real kernel files (root, or CAP_SYS_RESOURCE for PSI windows that are not 2 s multiples)."""

    def arm(self, source: Source, trigger: str, level: str) -> Armed:
        if source.kind == "psi":
            fd = os.open(source.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                try:
                    os.write(fd, trigger.encode() + b"\0")
                except OSError as exc:
                    # without CAP_SYS_RESOURCE the kernel takes only windows in whole multiples of 2 s
                    fallback = unprivileged_trigger(trigger)
                    if exc.errno != errno.EINVAL or fallback is None:
                        raise
                    os.write(fd, fallback.encode() + b"\0")
                    log.warning(
                        "pressure: %s refused %r (no CAP_SYS_RESOURCE?); armed %r instead",
                        source.path,
                        trigger,
                        fallback,
                    )
                    return Armed(fd, select.POLLPRI, (fd,), trigger=fallback)
            except OSError:
                os.close(fd)
                raise
            return Armed(fd, select.POLLPRI, (fd,), trigger=trigger)
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        fds = [efd]
        try:
            pfd = os.open(source.path, os.O_RDONLY | os.O_CLOEXEC)
            fds.append(pfd)
            ctl = os.open(os.path.join(os.path.dirname(source.path), "cgroup.event_control"), os.O_WRONLY)
            try:
                os.write(ctl, f"{efd} {pfd} {level}".encode())
            finally:
                os.close(ctl)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return Armed(efd, select.POLLIN, tuple(fds), drain=8)


def sources_for(
    kubepods: CgroupDirs, online: Iterable[tuple[str, CgroupDirs]], proc_root: str = "/proc"
) -> tuple[Source, ...]:
    """What to watch on this node: the kubepods group's and online pods' PSI (v2), the node's PSI where the
    group has none, and the kubepods memcg's `memory.pressure_level` (v1)."""
    out: list[Source] = []
    resources: tuple[Resource, ...] = ("cpu", "memory")
    for r in resources:
        d = kubepods.cpu if r == "cpu" else kubepods.memory
        group = os.path.join(d, f"{r}.pressure")
        if os.path.exists(group):
            out.append(Source(r, "kubepods", "psi", group))
        elif os.path.exists(node := os.path.join(proc_root, "pressure", r)):
            out.append(Source(r, "node", "psi", node))
    if kubepods.version == "v1" and os.path.exists(level := os.path.join(kubepods.memory, "memory.pressure_level")):
        out.append(Source("memory", "kubepods", "pressure_level", level))
    if kubepods.version == "v2":
        for key, dirs in sorted(online):
            for r in resources:
                path = os.path.join(dirs.cpu if r == "cpu" else dirs.memory, f"{r}.pressure")
                if os.path.exists(path):
                    out.append(Source(r, f"pod {key}", "psi", path))
    return tuple(out)


class PressureSensor:
    """Polls the armed sources; `start()` runs `poll_once` on a thread until `stop()`."""

    def __init__(
        self,
        on_event: Callable[[PressureEvent], None],
        monotonic: Callable[[], float],
        opener: Opener | None = None,
    ) -> None:
        self.on_event = on_event
        self.monotonic = monotonic
        self.opener: Opener = opener or KernelOpener()
        self._armed: dict[Source, Armed] = {}
        self._by_fd: dict[int, Source] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        self.trigger = ""
        self.level = ""
        #: sources that could not be armed, with why (shown once in the log, and by `armed_sources`)
        self.problems: dict[Source, str] = {}

    # --- arming ---------------------------------------------------------------------------------------------

    def arm(self, sources: Sequence[Source], trigger: str, level: str) -> None:
        """Watch exactly `sources` (those already armed with the same trigger and level stay armed)."""
        with self._lock:
            if (trigger, level) != (self.trigger, self.level):
                self._disarm(list(self._armed))
                self.trigger, self.level = trigger, level
                self.problems.clear()
            wanted = set(sources)
            self._disarm([s for s in self._armed if s not in wanted])
            for s in sources:
                if s in self._armed or s in self.problems:
                    continue
                try:
                    armed = self.opener.arm(s, trigger, level)
                except OSError as exc:
                    self.problems[s] = os.strerror(exc.errno) if exc.errno else str(exc)
                    log.warning("pressure: cannot watch %s (%s): %s", s.path, s.kind, self.problems[s])
                    continue
                self._armed[s] = armed
                self._by_fd[armed.fd] = s
                self._poll.register(armed.fd, armed.events)
            for s in [s for s in self.problems if s not in wanted]:
                del self.problems[s]
        self._kick()

    def armed_sources(self) -> tuple[Source, ...]:
        with self._lock:
            return tuple(self._armed)

    def _disarm(self, sources: Sequence[Source]) -> None:
        for s in sources:
            armed = self._armed.pop(s)
            self._by_fd.pop(armed.fd, None)
            with contextlib.suppress(KeyError, ValueError):
                self._poll.unregister(armed.fd)
            for fd in armed.close:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # --- polling --------------------------------------------------------------------------------------------

    def poll_once(self, timeout: float | None) -> list[PressureEvent]:
        """One poll() (timeout in seconds, None: until something happens); hands each fired source to `on_event`."""
        try:
            ready = self._poll.poll(None if timeout is None else max(0, int(timeout * 1000)))
        except InterruptedError:
            return []
        now = self.monotonic()
        out: list[PressureEvent] = []
        with self._lock:
            gone: list[Source] = []
            for fd, ev in ready:
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                source = self._by_fd.get(fd)
                if source is None:
                    continue
                armed = self._armed[source]
                if ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    # the group was removed (a PSI file then reports POLLERR | POLLPRI for ever)
                    gone.append(source)
                    continue
                if armed.drain:
                    try:
                        os.read(fd, armed.drain)
                    except BlockingIOError:
                        continue
                    except OSError as exc:
                        if exc.errno != errno.EAGAIN:
                            gone.append(source)
                        continue
                out.append(PressureEvent(now, source))
            if gone:
                log.info("pressure: %d source(s) went away: %s", len(gone), ", ".join(s.path for s in gone))
                self._disarm(gone)
        for e in out:
            self.on_event(e)
        return out

    def _kick(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="tidemark-pressure", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.poll_once(None):
                    self._stop.wait(MIN_ROUND)
            except Exception:  # a bad fd or a kernel surprise must not end the thread: the sampler goes on
                log.exception("pressure: poll failed")
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._kick()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with self._lock:
            self._disarm(list(self._armed))
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def died(self) -> bool:
        """Started, not stopped, and its thread is gone (/healthz)."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()
