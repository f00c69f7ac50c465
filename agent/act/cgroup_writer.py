"""The one executor of kernel-knob writes: cgroup files and `/proc/<pid>/oom_score_adj` (house style 7).

For every batch (the writes of one plan, or a set of restores):

1. validate against the knob declarations (`agent.knobs`): a declared, writable knob file, a value
   of its grammar and range, a directory under the kubepods roots this agent manages, checked both as
   written and with every symlink resolved (nothing outside them is ever written: in particular not the
   machine's own groups); the final file is opened with O_NOFOLLOW;
2. skip no-ops (the file already holds the value);
3. journal: every knob about to change for the first time gets its current value recorded as `original`
   (read fresh from the file), every later change moves `written` to `previous`; the journal is saved
   (fsync'd, atomic rename) BEFORE the first write of the batch, and nothing is written if it cannot be;
4. write in the declared safe order (`knobs.order_key`): `cpu.idle=0`, `cpu.shares`/`cpu.weight`, quotas,
   bursts, then `cpu.idle=1` (the kernel refuses shares on an idle group), memory, vendor knobs; a limit that
   tightens goes child first, one that loosens parent first (v1 refuses a child quota above its parent's).
   Restores follow the same key, so a group leaves idle before its shares are put back;
5. record each outcome; one failing file (EINVAL, EBUSY, a vanished cgroup) never stops the others. A write
   the kernel refused (not "gone") is not tried again before a back-off (1 s, doubling to 60 s; any value of
   that knob): the next decision wants the same write about 100 ms later, and the kernel's answer rarely changes
   that fast. It is logged the first time and then at the 2nd, 4th, 8th... refusal, never on every period.

Action knobs (`Knob.action`: v2 `memory.reclaim`, the memory guard's one-shot reclaim) are written as they come: never
journaled, compared with a belief or restored.

Restores put `original` back only where the file still holds what we wrote (`written`, or `previous`
after a kill between journaling and writing); anything else means kubelet (or someone) set its own value:
the entry is dropped and the file left alone.

Keyed knobs (block I/O: one line per device, `agent.knobs`) are one knob per (directory, file, key): what a file
holds for a write is `knobs.current_of` of its content, the journal keys the entry by `knobs.entry_key`, and the
belief keeps each file's whole content (`knobs.merged`). For them ENODEV means the device went away, not the
cgroup: that is a failure (logged and counted), not "gone".

Journal entries are data from disk, not trusted: `restore` and `replay` check every entry again (declared
knob, values of its grammar, path under this writer's roots, symlinks resolved, a pod's or container's group
and never kubepods or a QoS class group itself, but for the v2 memory protection the agent sets there
(`agent.cgroups.podpath`); for processes a positive PID,
`oom_score_adj` under this writer's `proc_root`, and, before a restore writes it, the process listed in a
pod-level group under the roots) and skip the ones that fail, with a log line, keeping them in the journal
for a restore with the right roots (`BatchResult.invalid`).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from agent.act.statedir import Journal, KnobEntry, ProcEntry, same
from agent.cgroups.podpath import pod_pids, restorable
from agent.decide.ops import SetCgroupValue, SetProcessValue
from agent.knobs import (
    KNOBS,
    batch_order,
    current_of,
    entry_key,
    key_of,
    merged,
    order_key,
    validate_cgroup_value,
    validate_process_value,
)
from agent.sense.procfs import process_start as procfs_process_start

log = logging.getLogger(__name__)

#: errnos meaning "the cgroup or process is gone" (a normal race with pod teardown)
GONE: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENODEV, errno.ESRCH})
#: the outcome of a write into the agent's own cgroup, which the kernel refuses (see `CgroupWriter._own`)
OWN: Final = "own cgroup"
#: seconds before a refused knob write is tried again, doubling per refusal up to RETRY_MAX (module docstring, 5)
RETRY_FIRST: Final = 1.0
RETRY_MAX: Final = 60.0


@dataclass(slots=True)
class Refusal:
    """A knob write the kernel refused: how often in a row, and when the knob may be written again."""

    error: str
    times: int
    until: float


def _under_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def write_file(path: str, value: str) -> None:
    """One write(2) of the exact string (cgroup and proc files take the value in one call).

    O_TRUNC as a shell's `>` does: kernel files ignore it, regular files (test trees) need it.
    """
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_file(path: str) -> str | None:
    """The stripped content, or None when the file is gone, unreadable or a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def process_start(proc_root: str, pid: int) -> int | None:
    """starttime (clock ticks since boot, field 22 of /proc/<pid>/stat) read through psutil: a PID's identity
    across reuse (agent.sense.procfs)."""
    return procfs_process_start(proc_root, pid)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One file: what was (or was to be) written, and what happened."""

    path: str
    file: str
    value: str
    before: str | None
    ok: bool
    error: str = ""
    restore: bool = False
    pod: str = ""


@dataclass(slots=True)
class BatchResult:
    applied: list[Outcome] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    noop: int = 0
    #: journal entries dropped because the file no longer holds our value (kubelet's now) or is gone
    released: int = 0
    #: journal entries skipped by a restore or replay because they failed the checks (kept in the journal)
    skipped: int = 0
    #: of `applied`: files put back after a restored knob that the kernel resets (`Knob.resets`)
    resets: int = 0
    #: writes held back because the kernel refused that knob recently (`Refusal`; tried again after its back-off)
    deferred: int = 0
    journal_error: str | None = None

    def merge(self, other: BatchResult) -> None:
        self.applied.extend(other.applied)
        self.failed.extend(other.failed)
        self.invalid.extend(other.invalid)
        self.noop += other.noop
        self.released += other.released
        self.skipped += other.skipped
        self.resets += other.resets
        self.deferred += other.deferred
        self.journal_error = self.journal_error or other.journal_error


#: current knob values as the daemon believes them: directory -> file -> value (updated on every write)
Belief = dict[str, dict[str, str]]


class CgroupWriter:
    """Applies knob writes and restores (see the module docstring). `journal` None = nothing journaled (tests).

    `roots`: the kubepods directories this writer may write under; empty = no cgroup file at all.
    """

    def __init__(
        self,
        journal: Journal | None,
        *,
        roots: Sequence[str] = (),
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.time,
        write: Callable[[str, str], None] = write_file,
        read: Callable[[str], str | None] = read_file,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self.roots = tuple(os.path.normpath(r) for r in roots)
        self.real_roots = tuple(os.path.realpath(r) for r in self.roots)
        #: directory -> why not (None: fine), for the plan's writes (their directories come from the layout, and
        #: cgroupfs holds no symlinks); journal entries are always checked afresh
        self._dir_checks: dict[str, str | None] = {}
        #: cgroups found to hold this process, whose files the kernel refuses to let it write (`_own`)
        self.own: set[str] = set()
        self.proc_root = proc_root
        self._clock = clock
        self._write = write
        self._read = read
        self._monotonic = monotonic
        #: knob (`entry_key`) -> its last refusal, while the kernel keeps refusing it (module docstring, 5)
        self.refused: dict[tuple[str, str], Refusal] = {}

    # --- validation -------------------------------------------------------------------------------

    def validate_path(self, path: str, file: str | None = None) -> str | None:
        """Why `<path>/<file>` may not be written (None when it may): lexically and, symlinks resolved, under a root.

        `file` given: the file itself must not be a symlink either (writes also open it with O_NOFOLLOW).
        """
        norm = os.path.normpath(path)
        if "\0" in path or not os.path.isabs(path) or norm != path.rstrip("/") or "/../" in f"{path}/":
            return f"{path} is not a normalized absolute path"
        if not _under_any(norm, self.roots):
            return f"{path} is outside the kubepods cgroups this agent manages"
        real = os.path.realpath(path)
        if not _under_any(real, self.real_roots):
            return f"{path} resolves to {real}, outside the kubepods cgroups this agent manages"
        if file is not None:
            target = os.path.realpath(os.path.join(path, file))
            if target != os.path.join(real, file):
                return f"{path}/{file} is a symlink (to {target})"
        return None

    def _checked_dir(self, path: str) -> str | None:
        if path not in self._dir_checks:
            if len(self._dir_checks) > 8192:
                self._dir_checks.clear()
            self._dir_checks[path] = self.validate_path(path)
        return self._dir_checks[path]

    def check_knob_entry(self, e: KnobEntry) -> str | None:
        """Why a journal entry may not be restored by this writer (None when it may)."""
        for value in (e.original, e.written, e.previous):
            why = None if value is None else validate_cgroup_value(e.file, value)
            if why is not None:
                return why
        k = KNOBS.get(e.file)
        for other, value in e.resets.items():
            why = f"{e.file} does not reset {other}" if k is None or other not in k.resets else None
            why = why or validate_cgroup_value(other, value)
            if why is not None:
                return why
            why = self.validate_path(e.path, other)
            if why is not None:
                return why
        why = self.validate_path(e.path, e.file)
        if why is None and not restorable(e.path, e.file, self.roots):
            why = f"{e.path} is not a pod's cgroup (the agent writes {e.file} only in pods' and containers' groups)"
        return why

    def check_proc_entry(self, p: ProcEntry) -> str | None:
        if isinstance(p.pid, bool) or not isinstance(p.pid, int) or p.pid <= 0:
            return f"{p.pid!r} is not a process id"
        for value in (p.original, p.written, p.previous):
            why = None if value is None else validate_process_value(p.file, value)
            if why is not None:
                return why
        return None

    def _skip(self, what: str, why: str, result: BatchResult) -> None:
        result.skipped += 1
        result.invalid.append(f"journal entry {what} skipped: {why}")
        log.warning("journal entry %s skipped: %s", what, why)

    # --- forward writes ---------------------------------------------------------------------------

    def apply(
        self,
        writes: Sequence[SetCgroupValue],
        procs: Sequence[SetProcessValue] = (),
        *,
        belief: Belief | None = None,
        oom_belief: MutableMapping[int, str] | None = None,
        owner: Callable[[str], str] = lambda _path: "",
        proc_owner: Mapping[int, str] | None = None,
    ) -> BatchResult:
        """Write `writes` and `procs` (no-ops skipped), journaling first; `belief` is updated with what landed."""
        result = BatchResult()
        files = belief if belief is not None else {}
        if self.refused:  # a knob no longer asked for (its pod gone) is forgotten two periods after its retry
            stale = self._monotonic() - 2 * RETRY_MAX
            self.refused = {k: r for k, r in self.refused.items() if r.until > stale}
        todo: list[tuple[SetCgroupValue, str | None]] = []
        actions: list[SetCgroupValue] = []
        for w in writes:
            why = validate_cgroup_value(w.file, w.value) or self._checked_dir(w.path)
            if why is not None:
                result.invalid.append(why)
                continue
            knob = KNOBS.get(w.file)
            if knob is not None and knob.action:
                actions.append(w)  # a one-shot (`memory.reclaim`): nothing to journal, compare or restore
                continue
            if w.path in self.own:
                result.noop += 1  # not ours to change: the kernel refuses it (`_own`)
                continue
            current = current_of(w.file, files.get(w.path, {}).get(w.file), w.value)
            if current is not None and same(current, w.value):
                result.noop += 1
                continue
            refusal = self.refused.get(entry_key(w.path, w.file, w.value))
            if refusal is not None and self._monotonic() < refusal.until:
                result.deferred += 1
                continue
            todo.append((w, current))
        ptodo: list[tuple[SetProcessValue, int | None]] = []
        for p in procs:
            why = None if p.pid > 0 else f"bad process write {p.pid}/{p.file}"
            why = why or validate_process_value(p.file, p.value)
            if why is not None:
                result.invalid.append(why)
                continue
            current = oom_belief.get(p.pid) if oom_belief is not None else None
            if current is not None and same(current, p.value):
                result.noop += 1
                continue
            ptodo.append((p, None))

        new_knobs: set[tuple[str, str]] = set()
        new_procs: set[int] = set()
        if self.journal is not None and (todo or ptodo):
            todo, ptodo, new_knobs, new_procs = self._journal_first(todo, ptodo, files, owner, proc_owner or {}, result)
            if result.journal_error is not None:
                return result

        for w, current in batch_order(todo, lambda t: (t[0].path, t[0].file, t[0].value, t[1])):
            key = entry_key(w.path, w.file, w.value)
            refusal = self.refused.get(key)
            times = refusal.times + 1 if refusal is not None else 1
            loud = times & (times - 1) == 0  # the 1st, 2nd, 4th, 8th... refusal in a row
            outcome = self._do(w.path, w.file, w.value, current, restore=False, pod=owner(w.path), loud=loud)
            self._note_refusal(key, outcome, times)
            if outcome.ok:
                held = files.setdefault(w.path, {})
                held[w.file] = merged(w.file, held.get(w.file), w.value)
                result.applied.append(outcome)
            else:
                result.failed.append(outcome)
                if self.journal is not None and key in new_knobs:
                    self.journal.knobs.pop(key, None)  # never changed: nothing to restore
        for w in actions:
            outcome = self._do(w.path, w.file, w.value, None, restore=False, pod=owner(w.path))
            (result.applied if outcome.ok else result.failed).append(outcome)
        for p, _start in ptodo:
            path = os.path.join(self.proc_root, str(p.pid), p.file)
            before = oom_belief.get(p.pid) if oom_belief is not None else None
            outcome = self._do(path, "", p.value, before, restore=False, pod=(proc_owner or {}).get(p.pid, ""))
            if outcome.ok:
                if oom_belief is not None:
                    oom_belief[p.pid] = p.value
                result.applied.append(outcome)
            else:
                result.failed.append(outcome)
                if self.journal is not None and p.pid in new_procs:
                    self.journal.procs.pop(p.pid, None)
        if self.journal is not None and result.failed and (new_knobs or new_procs):
            self._save_quietly()
        return result

    def _journal_first(
        self,
        todo: list[tuple[SetCgroupValue, str | None]],
        ptodo: list[tuple[SetProcessValue, int | None]],
        files: Belief,
        owner: Callable[[str], str],
        proc_owner: Mapping[int, str],
        result: BatchResult,
    ) -> tuple[
        list[tuple[SetCgroupValue, str | None]],
        list[tuple[SetProcessValue, int | None]],
        set[tuple[str, str]],
        set[int],
    ]:
        assert self.journal is not None
        journal = self.journal
        now = self._clock()
        keep: list[tuple[SetCgroupValue, str | None]] = []
        new_knobs: set[tuple[str, str]] = set()
        for w, current in todo:
            key = entry_key(w.path, w.file, w.value)
            entry = journal.knobs.get(key)
            if entry is None:
                content = self._read(os.path.join(w.path, w.file))
                fresh = current_of(w.file, content, w.value)
                if fresh is None:
                    why = "gone" if content is None else f"{w.file} has no line for {key_of(w.file, w.value)}"
                    result.failed.append(Outcome(w.path, w.file, w.value, None, False, why, pod=owner(w.path)))
                    continue
                if same(fresh, w.value):  # our belief was stale: nothing to do
                    files.setdefault(w.path, {})[w.file] = content or fresh
                    result.noop += 1
                    continue
                resets = self._companions(w.path, w.file)
                journal.knobs[key] = KnobEntry(w.path, w.file, fresh, w.value, None, owner(w.path), now, resets)
                new_knobs.add(key)
                keep.append((w, fresh))
            else:
                if current is not None and not entry.ours(current) and not same(current, entry.original):
                    # kubelet set its own value since: that is what a restore must put back now
                    entry.original = current
                    entry.previous = None
                elif not same(entry.written, w.value):
                    entry.previous = entry.written
                entry.written = w.value
                keep.append((w, current))
        pkeep: list[tuple[SetProcessValue, int | None]] = []
        new_procs: set[int] = set()
        for p, _ in ptodo:
            start = process_start(self.proc_root, p.pid)
            fresh = self._read(os.path.join(self.proc_root, str(p.pid), p.file))
            if start is None or fresh is None:
                continue  # the process exited
            if same(fresh, p.value):
                result.noop += 1
                continue
            entry_p = journal.procs.get(p.pid)
            if entry_p is None or entry_p.start != start:
                journal.procs[p.pid] = ProcEntry(p.pid, start, fresh, p.value, None, proc_owner.get(p.pid, ""))
                new_procs.add(p.pid)
            else:
                if not entry_p.ours(fresh) and not same(fresh, entry_p.original):
                    entry_p.original = fresh
                    entry_p.previous = None
                elif not same(entry_p.written, p.value):
                    entry_p.previous = entry_p.written
                entry_p.written = p.value
            pkeep.append((p, start))
        if keep or pkeep:
            try:
                journal.save()
            except OSError as e:
                # Never change a knob whose original is not safely on disk.
                for key in new_knobs:
                    journal.knobs.pop(key, None)
                for pid in new_procs:
                    journal.procs.pop(pid, None)
                result.journal_error = f"cannot save the journal {journal.path}: {e.strerror or e}"
                log.error("%s; no knob written", result.journal_error)
                return [], [], set(), set()
        return keep, pkeep, new_knobs, new_procs

    def _companions(self, path: str, file: str) -> dict[str, str]:
        """The values before any write of ours of the files the kernel resets when `file` is written: the
        journaled original where we own the file, else what it holds now (nothing of this batch is written yet)."""
        assert self.journal is not None
        k = KNOBS.get(file)
        out: dict[str, str] = {}
        for other in k.resets if k is not None else ():
            owned = self.journal.knobs.get((path, other))
            if owned is not None:
                out[other] = owned.original
                continue
            value = self._read(os.path.join(path, other))
            if value is not None and validate_cgroup_value(other, value) is None:
                out[other] = value
        return out

    def _own(self, path: str) -> bool:
        """Whether `path` is the cgroup this process runs in. On cgroup v2 mounted with `nsdelegate` (systemd's
        default) a process in a cgroup namespace may not write the files of its namespace's root cgroup (EPERM),
        and the DaemonSet's agent runs in its own (containerd's default on v2): its own container's cgroup
        (cgroup.procs lists host PIDs there, the pod has hostPID). Such a cgroup is left alone from then on."""
        procs = self._read(os.path.join(path, "cgroup.procs"))
        return procs is not None and str(os.getpid()) in procs.split()

    def _note_refusal(self, key: tuple[str, str], outcome: Outcome, times: int) -> None:
        """Start or lengthen the back-off of a refused knob; forget it once written or gone."""
        if outcome.ok or outcome.error in ("gone", OWN):
            self.refused.pop(key, None)
            return
        delay = min(RETRY_FIRST * 2 ** (times - 1), RETRY_MAX)
        self.refused[key] = Refusal(outcome.error, times, self._monotonic() + delay)

    def _do(self, path: str, file: str, value: str, before: str | None, *, restore: bool, pod: str,
            loud: bool = True) -> Outcome:  # fmt: skip
        target = os.path.join(path, file) if file else path
        try:
            self._write(target, value)
        except OSError as e:
            if e.errno == errno.EPERM and file and self._own(path):
                self.own.add(path)
                log.info("%s is the agent's own cgroup, which the kernel does not let it write (a cgroup namespace "
                         "root under nsdelegate): left alone (%s=%r not written)", path, file, value)
                return Outcome(path, file, value, before, False, OWN, restore, pod)
            # for a keyed knob ENODEV is the device going away (counted), not the cgroup
            gone = e.errno in GONE and not (e.errno == errno.ENODEV and key_of(file, value) is not None)
            why = "gone" if gone else f"{errno.errorcode.get(e.errno or 0, 'error')}: {e.strerror or e}"
            if not gone and loud:
                again = "" if restore else " (refusals of this knob in a row back off; see the module docstring)"
                log.warning("writing %s=%r into %s failed: %s%s", file or "value", value, path, why, again)
            return Outcome(path, file, value, before, False, why, restore, pod)
        return Outcome(path, file, value, before, True, "", restore, pod)

    def _save_quietly(self) -> None:
        assert self.journal is not None
        try:
            self.journal.save()
        except OSError as e:
            log.error("cannot save the journal %s: %s", self.journal.path, e.strerror or e)

    # --- restores ---------------------------------------------------------------------------------

    def restore(
        self,
        knobs: Iterable[KnobEntry],
        procs: Iterable[ProcEntry] = (),
        *,
        belief: Belief | None = None,
        oom_belief: MutableMapping[int, str] | None = None,
    ) -> BatchResult:
        """Put `original` back where the file still holds our value; drop the entries (unless a write fails)."""
        result = BatchResult()
        journal = self.journal
        pending: list[tuple[KnobEntry, str]] = []
        for e in knobs:
            why = self.check_knob_entry(e)
            if why is not None:
                self._skip(f"{e.path}/{e.file}", why, result)
                continue
            content = self._read(os.path.join(e.path, e.file))
            current = current_of(e.file, content, e.written)
            if current is None or not e.ours(current):
                result.released += 1
                if journal is not None:
                    journal.knobs.pop(e.key, None)
                if content is not None and belief is not None and e.path in belief:
                    belief[e.path][e.file] = content
                continue
            if same(current, e.original):
                result.noop += 1
                if journal is not None:
                    journal.knobs.pop(e.key, None)
                continue
            pending.append((e, current))
        for e, current in sorted(pending, key=lambda t: order_key(t[0].path, t[0].file, t[0].original, t[1])):
            outcome = self._do(e.path, e.file, e.original, current, restore=True, pod=e.pod)
            if (outcome.ok or outcome.error == "gone") and journal is not None:
                journal.knobs.pop(e.key, None)
            if outcome.ok:
                result.applied.append(outcome)
                if belief is not None and e.path in belief:
                    belief[e.path][e.file] = merged(e.file, belief[e.path].get(e.file), e.original)
                # the kernel reset these when the knob was written (and again now): put their values back
                for other, value in sorted(e.resets.items()):
                    again = self._do(e.path, other, value, None, restore=True, pod=e.pod)
                    (result.applied if again.ok else result.failed).append(again)
                    result.resets += again.ok
                    if again.ok and belief is not None and e.path in belief:
                        belief[e.path][other] = value
            else:
                result.failed.append(outcome)
        in_pods: frozenset[int] | None = None  # read once, when a process value is about to be restored
        for p in procs:
            why = self.check_proc_entry(p)
            if why is not None:
                self._skip(f"pid {p.pid!r} {p.file}", why, result)
                continue
            start = process_start(self.proc_root, p.pid)
            path = os.path.join(self.proc_root, str(p.pid), p.file)
            current = self._read(path) if start is not None else None
            if start is None or start != p.start or current is None or not p.ours(current):
                result.released += 1
                if journal is not None:
                    journal.procs.pop(p.pid, None)
                continue
            if same(current, p.original):
                result.noop += 1
                if journal is not None:
                    journal.procs.pop(p.pid, None)
                continue
            if in_pods is None:
                in_pods = pod_pids(self.roots)
            if p.pid not in in_pods:
                self._skip(f"pid {p.pid} {p.file}", f"process {p.pid} is not in a pod's cgroup", result)
                continue
            outcome = self._do(path, "", p.original, current, restore=True, pod=p.pod)
            if (outcome.ok or outcome.error == "gone") and journal is not None:
                journal.procs.pop(p.pid, None)
            if outcome.ok:
                result.applied.append(outcome)
                if oom_belief is not None:
                    oom_belief[p.pid] = p.original
            else:
                result.failed.append(outcome)
        if journal is not None and (result.applied or result.released or result.noop or result.failed):
            self._save_quietly()
        return result

    def restore_all(self) -> BatchResult:
        """Every journaled value (the `restore` command, a restore request, uninstall)."""
        if self.journal is None:
            return BatchResult()
        return self.restore(list(self.journal.knobs.values()), list(self.journal.procs.values()))

    def replay(self) -> BatchResult:
        """On start: drop the entries whose file no longer holds our value (gone, never written, or kubelet's now).

        A kill between journaling and writing leaves the file at `original` (nothing to keep) or at
        `written` (kept: the daemon goes on owning it and restores it when the feature is turned off).
        """
        result = BatchResult()
        journal = self.journal
        if journal is None:
            return result
        for key, e in list(journal.knobs.items()):
            why = self.check_knob_entry(e)
            if why is not None:
                self._skip(f"{e.path}/{e.file}", why, result)
                continue
            current = current_of(e.file, self._read(os.path.join(e.path, e.file)), e.written)
            if current is None or not e.ours(current) or same(current, e.original):
                del journal.knobs[key]
                result.released += 1
        for pid, p in list(journal.procs.items()):
            why = self.check_proc_entry(p)
            if why is not None:
                self._skip(f"pid {pid!r} {p.file}", why, result)
                continue
            start = process_start(self.proc_root, pid)
            current = self._read(os.path.join(self.proc_root, str(pid), p.file)) if start is not None else None
            if start != p.start or current is None or not p.ours(current) or same(current, p.original):
                del journal.procs[pid]
                result.released += 1
        if result.released:
            self._save_quietly()
        return result
