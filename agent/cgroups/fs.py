"""Our small cgroup/procfs file layer: text reads that never raise, and pure parsers.

cgroup files vanish whenever a pod or container goes away, so a missing file is normal: the reader
returns None and counts it (`ReadStats.missing`); any other OSError (EACCES, EIO...) is counted as an
error and also returns None. Parsers take text and return plain values or None when malformed.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

#: errnos that mean "the file or its cgroup is gone" (a normal race with pod teardown)
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENODEV, errno.ESRCH})


@dataclass(slots=True)
class ReadStats:
    """Counters for reads that found nothing (missing) or failed otherwise (errors)."""

    reads: int = 0
    missing: int = 0
    errors: int = 0
    last_error: str | None = None
    missing_paths: list[str] = field(default_factory=list)

    def note_missing(self, path: str) -> None:
        self.missing += 1
        if len(self.missing_paths) < 20:
            self.missing_paths.append(path)


class FileReader:
    """Reads small text files; None (never an exception) when the file cannot be read."""

    def __init__(self, stats: ReadStats | None = None) -> None:
        self.stats = stats if stats is not None else ReadStats()

    def read(self, path: str) -> str | None:
        self.stats.reads += 1
        try:
            # os.open/os.read: a third of open()'s cost, and the sampler reads hundreds of files a second.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                chunks = [os.read(fd, 65536)]
                # cgroup and proc files are far smaller than the buffer and come whole in one read
                # (seq_file fills the buffer); only a full buffer may have more behind it.
                while len(chunks[-1]) == 65536:
                    chunks.append(os.read(fd, 65536))
            finally:
                os.close(fd)
            return b"".join(chunks).decode("ascii", errors="replace")
        except OSError as e:
            if e.errno in _GONE:
                self.stats.note_missing(path)
            else:
                self.stats.errors += 1
                self.stats.last_error = f"{path}: {e.strerror or e}"
            return None

    def read_int(self, path: str) -> int | None:
        text = self.read(path)
        return None if text is None else parse_int(text)

    def read_keyed(self, path: str) -> dict[str, int] | None:
        text = self.read(path)
        return None if text is None else parse_keyed(text)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


def parse_int(text: str) -> int | None:
    """A single integer file (`cpuacct.usage`, `cpu.shares`); None when malformed."""
    s = text.strip()
    if not s.isascii() or len(s) > 20:  # counters are 64-bit: anything longer is not a counter
        return None
    try:
        return int(s)
    except ValueError:
        return None


def parse_keyed(text: str) -> dict[str, int]:
    """A flat-keyed file (`memory.stat`, `cpu.stat`): `key value` per line; malformed lines skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        value = parse_int(parts[1])
        if value is not None:
            out[parts[0]] = value
    return out


@dataclass(frozen=True, slots=True)
class Pressure:
    """PSI `avg10` percentages: `some` always, `full` when the file has it (memory, io)."""

    some_avg10: float
    full_avg10: float | None = None


def parse_pressure(text: str) -> Pressure | None:
    """`some avg10=1.23 avg60=... total=...` / `full avg10=...`; None when no `some` line parses."""
    some: float | None = None
    full: float | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        for token in parts[1:]:
            key, _, value = token.partition("=")
            if key == "avg10":
                try:
                    v = float(value)
                except ValueError:
                    break
                if parts[0] == "some":
                    some = v
                else:
                    full = v
                break
    if some is None:
        return None
    return Pressure(some, full)


def parse_cpu_max(text: str) -> tuple[int | None, int] | None:
    """cgroup v2 `cpu.max`: (quota_us or None for `max`, period_us); None when malformed."""
    parts = text.split()
    if not parts or len(parts) > 2:
        return None
    try:
        period = int(parts[1]) if len(parts) == 2 else 100_000
    except ValueError:
        return None
    if parts[0] == "max":
        return None, period
    try:
        return int(parts[0]), period
    except ValueError:
        return None


def parse_pids(text: str) -> tuple[int, ...]:
    """`cgroup.procs`: one PID per line; malformed lines skipped."""
    pids: list[int] = []
    for line in text.split():
        if line.isascii() and line.isdigit():
            pids.append(int(line))
    return tuple(pids)
