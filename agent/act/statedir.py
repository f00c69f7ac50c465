"""The agent's state directory (`--state-dir`, default /var/lib/tidemark).

Files (JSON, each replaced atomically: write a temp file, fsync it, rename it over the old one, fsync the
directory, so a crash leaves the old or the new version, never a torn one; `journal.json` without the fsyncs,
see below). A file is created only new
(`O_EXCL | O_NOFOLLOW`: a link planted at the temp name is removed, never written through) and read only when
it is a regular file of at most MAX_STATE_BYTES, opened without following a link and without blocking (a FIFO
planted at `profiles.json` once stopped the agent's start for ever); anything else is set aside like a corrupt
file:

- `journal.json`: every knob the agent changed, with the value it found there first (`original`), the
  value it wrote last (`written`) and the one before (`previous`). An entry is written BEFORE the knob is
  written, so a kill at any point leaves a journal that covers the file: when the kill came before the write,
  the file still holds `original` and restoring is a no-op; after, it holds `written`. The rename alone makes
  that hold for a killed agent (the page cache outlives the process). It is not fsync'd: what it guards
  (cgroup files, /proc values) lives in kernel memory and does not outlive the reboot an fsync protects
  against; after one, kubelet makes every cgroup again with its own values, and an entry older than the file
  heals as below. The tier's ceiling changes a knob every second on a busy node: that was a synchronous
  flush of the node's disk every second (a sixth of the agent loop's wall time on a hollow node; its CPU
  barely moved, docs/scale.md). It is saved in one line (`jq . journal.json` reads it). Restoring puts
  `original` back only where the file still holds `written` or `previous` (kubelet may have set its own value
  since: then the entry is dropped, the value left alone).
  Loading checks every entry (the journal is data, and a writable journal must not become a host file
  write): the right shape and types, a declared knob file (`agent.knobs`), values of the knob's
  grammar, a normalized absolute path, for processes a positive PID. A failing entry is left out with an
  ERROR log line and the file as loaded is copied to `journal.json.rejected-<time>` for a human; the rest
  loads. The directory roots are checked where they are known, by the writer (`CgroupWriter.check_*`).
  `proc_root` is recorded in the file for humans and never read back: /proc is where the command line says.
- `qos-classes.json`: the qos-level of each pod UID as first seen (fixed at first sight: docs/design.md,
  "Vocabulary and object contracts"). Checked whole when loaded: one entry that is not a UID with a level
  in -7..7, a name and a finite time sets the file aside (`.corrupt-<time>`, one ERROR line).
- `profiles.json`: the usage profiles (`agent.decide.profile`), written every `capacity.profile.checkpoint`
  and on the way out, loaded at start so a restart keeps them. A file that is not JSON or not a profile
  document is moved aside (`profiles.json.corrupt-<time>`) with one ERROR line saying why, and the profiles
  start cold.
- `lock`: `flock`ed by the running daemon, so two agents never share a journal.
- `restore-requested`: made by `tidemark-agent restore` while a daemon holds the lock; the daemon
  restores everything, stops applying knobs, and removes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from agent.decide.profile import CheckpointError, from_json, to_json
from agent.knobs import KNOBS, entry_key, key_of, validate_cgroup_value, validate_process_value
from agent.model import ProfileState
from tidemark.apis import QOS_MAX, QOS_MIN

log = logging.getLogger(__name__)

JOURNAL: Final = "journal.json"
QOS_CLASSES: Final = "qos-classes.json"
PROFILES: Final = "profiles.json"
LOCK: Final = "lock"
RESTORE_REQUEST: Final = "restore-requested"
FORMAT_VERSION: Final = 1


class StateDirError(Exception):
    """The state directory cannot be used (not creatable, locked by another agent, unwritable)."""


#: the largest state file read back (profiles.json of MAX_PODS pods is a few MiB): a bigger one is set aside
MAX_STATE_BYTES: Final = 64 << 20
#: a new file of ours: never through a link or into a file already there (a planted symlink at the temp name
#: would be written through)
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create_private(path: str) -> int:
    """A new 0600 file at `path`; whatever sits there (a temp file left by a kill, a planted link) is unlinked
    first (unlinking a symlink removes the link, never its target)."""
    try:
        return os.open(path, _CREATE, 0o600)
    except FileExistsError:
        os.unlink(path)
        return os.open(path, _CREATE, 0o600)


def atomic_write_json(path: str, data: object, *, fsync: bool = True, compact: bool = False) -> None:
    """Replace `path` with `data` as JSON: temp file, fsync, rename, fsync of the directory. `compact`: one line
    without spaces (large files written often, the usage profiles)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp.{os.getpid()}"
    if compact:
        payload = json.dumps(data, separators=(",", ":")).encode()
    else:
        payload = json.dumps(data, sort_keys=True, indent=1).encode()
    fd = _create_private(tmp)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def make_private_dirs(path: str) -> None:
    """`path` and its missing parents, each created 0700 (os.makedirs gives the parents 0777 & ~umask, 0755
    under the usual umask); directories that exist keep their mode (kubelet's hostPath, a site's choice)."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: theirs, left alone
            os.mkdir(directory, 0o700)


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file at `path`, never through a symlink (ELOOP), never blocking on a FIFO or a
    device (opened non-blocking, refused unless S_ISREG), at most `limit` (MAX_STATE_BYTES) bytes (EFBIG beyond)."""
    limit = MAX_STATE_BYTES if limit is None else limit
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def copy_private(src: str, dst: str) -> None:
    """Copy `src` (a regular file, `read_regular`) to a new file `dst` created 0600 (shutil.copyfile creates
    0666 & ~umask: 0644); refuses (FileExistsError) when `dst` exists, so a copy never goes through a file or
    link already there."""
    data = read_regular(src)
    fd = os.open(dst, _CREATE, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def read_json(path: str) -> tuple[Any, str | None]:
    """(data, None), (None, None) when absent, or (None, why) when unreadable or not JSON (a symlink, a FIFO or
    anything but a regular file, more than MAX_STATE_BYTES: `read_regular`)."""
    try:
        return json.loads(read_regular(path).decode("utf-8")), None
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{path}: {'a symbolic link' if e.errno == errno.ELOOP else e.strerror or e}"
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: '[' x 200000
        return None, f"{path}: {e}"


def _set_aside(path: str, why: str) -> None:
    """Keep a corrupt file for a human to look at, and start afresh."""
    aside = f"{path}.corrupt-{int(time.time())}"
    with contextlib.suppress(OSError):
        os.replace(path, aside)
    log.error("state file unusable (%s); moved to %s and starting empty", why, aside)


# --- the journal -----------------------------------------------------------------------------------


@dataclass(slots=True)
class KnobEntry:
    """One knob file the agent changed: `<path>/<file>`."""

    path: str
    file: str
    original: str
    written: str
    previous: str | None = None
    pod: str = ""
    since: float = 0.0
    #: files the kernel resets when this knob is written (`Knob.resets`): their values before our first write
    resets: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """(directory, file); (directory, "<file> <key>") for a keyed knob (`agent.knobs.entry_key`)."""
        return entry_key(self.path, self.file, self.written)

    def ours(self, current: str | None) -> bool:
        """Whether the file still holds a value we wrote (the last one or, after a kill mid-way, the one before)."""
        if current is None:
            return False
        return same(current, self.written) or (self.previous is not None and same(current, self.previous))


@dataclass(slots=True)
class ProcEntry:
    """One process's `oom_score_adj` the agent changed; `start` (starttime in /proc/<pid>/stat) guards PID reuse."""

    pid: int
    start: int | None
    original: str
    written: str
    previous: str | None = None
    pod: str = ""
    file: str = "oom_score_adj"

    def ours(self, current: str | None) -> bool:
        if current is None:
            return False
        return same(current, self.written) or (self.previous is not None and same(current, self.previous))


_KNOB_FIELDS: Final = frozenset({"path", "file", "original", "written", "previous", "pod", "since", "resets"})
_PROC_FIELDS: Final = frozenset({"pid", "start", "original", "written", "previous", "pod", "file"})
#: the fields `Journal.save` writes, in declaration order
_KNOB_SAVED: Final = tuple(f.name for f in fields(KnobEntry))
_PROC_SAVED: Final = tuple(f.name for f in fields(ProcEntry))


def _fields_of(entry: KnobEntry | ProcEntry, names: tuple[str, ...]) -> dict[str, Any]:
    """`dataclasses.asdict` of a journal entry, without its recursive deep copy: the journal is saved before every
    knob change (every second while the tier ceiling moves) and asdict was half the cost of a save. The fields
    are strings, numbers and the flat `resets` mapping (copied)."""
    out = {name: getattr(entry, name) for name in names}
    if "resets" in out:
        out["resets"] = dict(out["resets"])
    return out


def _text(raw: Mapping[str, Any], key: str, *, optional: bool = False, default: str | None = None) -> str | None:
    value = raw.get(key, default)
    if value is None and optional:
        return None
    if not isinstance(value, str) or "\0" in value or len(value) > 4096:
        raise ValueError(f"{key} is not a string")
    return value


def knob_entry(raw: object) -> tuple[KnobEntry | None, str]:
    """A journal knob entry from JSON, checked (module docstring); (None, why) when it fails."""
    if not isinstance(raw, Mapping):
        return None, "not an object"
    try:
        unknown = set(raw) - _KNOB_FIELDS
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        path, file = _text(raw, "path"), _text(raw, "file")
        original, written = _text(raw, "original"), _text(raw, "written")
        previous, pod = _text(raw, "previous", optional=True), _text(raw, "pod", default="")
        since = raw.get("since", 0.0)
        if isinstance(since, bool) or not isinstance(since, int | float):
            raise ValueError("since is not a number")
        resets = raw.get("resets") or {}
        if not isinstance(resets, Mapping) or not all(isinstance(v, str) for v in resets.values()):
            raise ValueError("resets is not an object of strings")
    except ValueError as e:
        return None, str(e)
    assert path is not None and file is not None and original is not None and written is not None and pod is not None
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        return None, f"{path!r} is not a normalized absolute path"
    for value in (original, written, previous):
        why = None if value is None else validate_cgroup_value(file, value)
        if why is not None:
            return None, why
    key = key_of(file, written)
    if key is not None and any(key_of(file, v) != key for v in (original, previous) if v is not None):
        return None, f"{file}: original, written and previous must set the same key ({key})"
    declared = KNOBS[file].resets
    for other, value in resets.items():
        why = validate_cgroup_value(other, value) if other in declared else f"{file} does not reset {other}"
        if why is not None:
            return None, why
    return KnobEntry(path, file, original, written, previous, pod, float(since), dict(resets)), ""


def proc_entry(raw: object) -> tuple[ProcEntry | None, str]:
    """A journal process entry from JSON, checked (module docstring); (None, why) when it fails."""
    if not isinstance(raw, Mapping):
        return None, "not an object"
    try:
        unknown = set(raw) - _PROC_FIELDS
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        pid, start = raw.get("pid"), raw.get("start")
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
            raise ValueError(f"{pid!r} is not a process id")
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise ValueError(f"start {start!r} is not a start time")
        file = _text(raw, "file", default="oom_score_adj")
        original, written = _text(raw, "original"), _text(raw, "written")
        previous, pod = _text(raw, "previous", optional=True), _text(raw, "pod", default="")
    except ValueError as e:
        return None, str(e)
    assert file is not None and original is not None and written is not None and pod is not None
    for value in (original, written, previous):
        why = None if value is None else validate_process_value(file, value)
        if why is not None:
            return None, why
    return ProcEntry(pid, start, original, written, previous, pod, file), ""


def same(a: str, b: str) -> bool:
    """Equal knob values (whitespace and integer formatting ignored)."""
    x, y = a.split(), b.split()
    if x == y:
        return True
    if len(x) != len(y):
        return False
    try:
        return [int(v) for v in x] == [int(v) for v in y]
    except ValueError:
        return False


class Journal:
    """The original values of every knob and process value the agent changed (see the module docstring)."""

    def __init__(self, path: str, *, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.knobs: dict[tuple[str, str], KnobEntry] = {}
        self.procs: dict[int, ProcEntry] = {}
        #: where /proc was when the process values were written: saved for humans, never loaded
        self.proc_root = "/proc"
        #: why each entry of the file was left out by the last load
        self.rejected: list[str] = []
        self.saves = 0

    def load(self) -> None:
        """Read the file; entries that fail the checks (module docstring) are left out, the rest loads."""
        self.rejected = []
        data, why = read_json(self.path)
        if why is not None:
            _set_aside(self.path, why)
            return
        if data is None:
            return
        knobs = data.get("knobs", []) if isinstance(data, Mapping) else None
        procs = data.get("procs", []) if isinstance(data, Mapping) else None
        if not isinstance(knobs, list) or not isinstance(procs, list):
            _set_aside(self.path, f"{self.path}: unexpected content (not a journal object with knobs/procs lists)")
            return
        for i, raw in enumerate(knobs):
            entry, why = knob_entry(raw)
            if entry is None:
                self._reject(f"knobs[{i}]", why)
            elif entry.key in self.knobs:
                self._reject(f"knobs[{i}]", f"a second entry for {entry.path}/{entry.file}")
            else:
                self.knobs[entry.key] = entry
        for i, raw in enumerate(procs):
            pentry, why = proc_entry(raw)
            if pentry is None:
                self._reject(f"procs[{i}]", why)
            elif pentry.pid in self.procs:
                self._reject(f"procs[{i}]", f"a second entry for pid {pentry.pid}")
            else:
                self.procs[pentry.pid] = pentry
        if self.rejected:
            aside = f"{self.path}.rejected-{int(time.time())}"
            with contextlib.suppress(OSError):
                copy_private(self.path, aside)
            log.error("journal %s: %d entr(ies) rejected; the file as loaded is kept in %s", self.path,
                      len(self.rejected), aside)  # fmt: skip

    def _reject(self, where: str, why: str) -> None:
        line = f"journal entry {where} rejected: {why}"
        self.rejected.append(line)
        log.error("%s", line)

    def save(self) -> None:
        """Write the journal (atomically, one line; not fsync'd: the module docstring); raises OSError when it
        cannot (nothing may be written then)."""
        data = {
            "version": FORMAT_VERSION,
            "proc_root": self.proc_root,
            "knobs": [_fields_of(e, _KNOB_SAVED) for e in sorted(self.knobs.values(), key=lambda e: e.key)],
            "procs": [_fields_of(p, _PROC_SAVED) for p in sorted(self.procs.values(), key=lambda p: p.pid)],
        }
        atomic_write_json(self.path, data, fsync=self.fsync, compact=True)
        self.saves += 1

    def __len__(self) -> int:
        return len(self.knobs) + len(self.procs)


# --- first-seen qos-levels ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstSeen:
    level: int
    pod: str
    seen: float


def first_seen_levels(data: object) -> tuple[dict[str, FirstSeen], str | None]:
    """The pods of a `qos-classes.json` document, checked whole: ({}, why) at the first entry that is not a pod
    UID with a level in -7..7, a name and a finite time (the file is then set aside, not half-loaded)."""
    pods = data.get("pods") if isinstance(data, Mapping) else None
    if not isinstance(pods, Mapping):
        return {}, "not an object with a pods object"
    out: dict[str, FirstSeen] = {}
    for uid, raw in pods.items():
        where = f"pods[{str(uid)[:40]!r}]"
        if not isinstance(uid, str) or not 0 < len(uid) <= 128 or not isinstance(raw, Mapping):
            return {}, f"{where}: not a pod UID with an object"
        level, pod, seen = raw.get("level"), raw.get("pod", ""), raw.get("seen", 0)
        if isinstance(level, bool) or not isinstance(level, int) or not QOS_MIN <= level <= QOS_MAX:
            return {}, f"{where}.level: {str(level)[:40]!r} is not an integer {QOS_MIN}..{QOS_MAX}"
        if not isinstance(pod, str) or len(pod) > 512:
            return {}, f"{where}.pod: not a pod name"
        if isinstance(seen, bool) or not isinstance(seen, int | float) or not math.isfinite(seen):
            return {}, f"{where}.seen: {str(seen)[:40]!r} is not a finite time"
        out[uid] = FirstSeen(level, pod, float(seen))
    return out, None


class QosClasses:
    """The qos-level of each pod UID as first seen, persisted (later edits are ignored: docs/design.md,
    "Vocabulary and object contracts")."""

    def __init__(self, path: str | None, *, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self.levels: dict[str, FirstSeen] = {}
        self.dirty = False

    def load(self) -> None:
        if self.path is None:
            return
        data, why = read_json(self.path)
        if why is None and data is not None:
            levels, problem = first_seen_levels(data)
            if problem is None:
                self.levels = levels
                return
            why = f"{self.path}: {problem}"
        if why is not None:
            _set_aside(self.path, why)

    def first(self, uid: str, level: int, pod: str, now: float) -> int:
        """The level to use for `uid`: the stored one, or `level` (stored now) at first sight."""
        seen = self.levels.get(uid)
        if seen is not None:
            return seen.level
        self.levels[uid] = FirstSeen(level, pod, now)
        self.dirty = True
        return level

    def forget_except(self, live: Mapping[str, object] | set[str]) -> int:
        """Drop the pods no longer on the node; returns how many."""
        gone = [uid for uid in self.levels if uid not in live]
        for uid in gone:
            del self.levels[uid]
        if gone:
            self.dirty = True
        return len(gone)

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        data = {
            "version": FORMAT_VERSION,
            "pods": {uid: {"level": f.level, "pod": f.pod, "seen": f.seen} for uid, f in sorted(self.levels.items())},
        }
        atomic_write_json(self.path, data, fsync=self.fsync)
        self.dirty = False


# --- usage profiles ----------------------------------------------------------------------------------


class ProfileCheckpoint:
    """`profiles.json`: the usage profiles, saved now and then and loaded at start (see the module docstring)."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self.saves = 0
        #: what the last load found, in words (for the log and tests)
        self.loaded = ""

    def load(self, now: float, *, set_aside: bool = True) -> ProfileState:
        """The profiles in the file; an empty (cold) state when there is none or it is unusable (set aside, unless
        `set_aside` is False: `plan` reads a running agent's file and changes nothing). Times ahead of `now` (the
        wall clock) beyond clock adjustments make it unusable: their weights would overflow every read."""
        data, why = read_json(self.path)
        if why is None and data is not None:
            try:
                state = from_json(data, now)
            except CheckpointError as e:
                why = f"{self.path}: {e}"
            else:
                self.loaded = f"{len(state.pods)} pod profile(s), node profile since {state.node.first:.0f}"
                log.info("usage profiles loaded from %s: %s", self.path, self.loaded)
                return state
        if why is None:
            self.loaded = "no checkpoint: the profiles start cold"
            return ProfileState()
        if not set_aside:
            self.loaded = f"unusable ({why})"
            return ProfileState()
        aside = f"{self.path}.corrupt-{int(time.time())}"
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)
        self.loaded = f"unusable ({why}); moved to {aside}"
        log.error("usage profiles %s unusable (%s); moved to %s; the profiles start cold (capacity as a fresh "
                  "agent's until they fill)", self.path, why, aside)  # fmt: skip
        return ProfileState()

    def save(self, state: ProfileState) -> None:
        """Write the profiles atomically; raises OSError when it cannot."""
        atomic_write_json(self.path, to_json(state), fsync=self.fsync, compact=True)
        self.saves += 1


# --- the directory ---------------------------------------------------------------------------------


class StateDir:
    """The directory, its lock and its files."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self._lock_fd: int | None = None
        self.journal = Journal(os.path.join(path, JOURNAL))  # never fsync'd: the module docstring
        self.qos = QosClasses(os.path.join(path, QOS_CLASSES), fsync=fsync)
        self.profiles = ProfileCheckpoint(os.path.join(path, PROFILES), fsync=fsync)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def ensure(self) -> None:
        try:
            make_private_dirs(self.path)
        except OSError as e:
            raise StateDirError(f"cannot create the state dir {self.path}: {e.strerror or e}") from e
        if not os.access(self.path, os.W_OK):
            raise StateDirError(f"the state dir {self.path} is not writable")

    def try_lock(self) -> bool:
        """Take the exclusive lock without waiting; False when another process holds it."""
        self.ensure()
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:  # never through a link: the pid is written into it
            fd = os.open(self.file(LOCK), flags, 0o600)
        except OSError as e:
            why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror or e
            raise StateDirError(f"cannot open {self.file(LOCK)}: {why}") from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise StateDirError(f"cannot lock {self.file(LOCK)}: {e.strerror or e}") from e
        self._lock_fd = fd
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def load(self) -> None:
        self.journal.load()
        self.qos.load()

    # --- the restore handshake ----------------------------------------------------------------------

    def request_restore(self) -> None:
        atomic_write_json(self.file(RESTORE_REQUEST), {"requested": time.time(), "by": os.getpid()}, fsync=False)

    def restore_requested(self) -> bool:
        return os.path.exists(self.file(RESTORE_REQUEST))

    def clear_restore_request(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.file(RESTORE_REQUEST))


@contextlib.contextmanager
def locked(state: StateDir) -> Iterator[bool]:
    """`with locked(s) as ok:` ok is whether we hold the lock; released on exit."""
    ok = state.try_lock()
    try:
        yield ok
    finally:
        if ok:
            state.unlock()
