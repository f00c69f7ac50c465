"""One declaration per kernel knob the agent knows: cgroup files (v1/v2) and the process knob `oom_score_adj`.

Everything the agent knows about a knob lives here, and only here; the rest derives from it:

- the executor (`agent.act.cgroup_writer`) refuses a file that is not declared `writable`, a value outside
  the knob's `grammar`, and a journal entry (loaded or restored) that fails either;
- the write order (`order_key`, used by the QoS plan and the executor) comes from each knob's `phase`,
  `phase_for(value)` (the `cpu.idle` EINVAL traps) and `limit` (tightening children first);
- the sensor (`agent.sense.snapshot`, the daemon's knob sensor) reads back the files declared `sensed`, per
  controller directory;
- a *keyed* knob (block I/O: `io.max`, `blkio.throttle.*_device`, `io.weight`) holds one line per key (a
  device `MAJ:MIN`, or `default`) and takes one line per write(2): its values are single lines, each
  (directory, file, key) is a knob of its own for the plan, the journal and restores (`entry_key`), what the
  file holds for a key is `current_of(file, content, value)` (the kernel's default line when the file has no
  line for that key: `io.max` and the v1 throttle files list only the devices with a limit) and what it holds
  after a write is `merged(file, content, value)`.

Pure: no I/O, no kubernetes; decision modules import it.

Write phases (docs/design.md, "QoS enforcement"; the EINVAL traps are tested in the cgroup v2 lane,
docs/testing.md): 0 `cpu.idle=0` (shares and weight are refused while a
group is idle, so leaving idle comes first), 1 `cpu.shares`/`cpu.weight`, 2 CFS quotas, 3 bursts,
4 `cpu.idle=1`, 5 memory limits and protections, 6 vendor knobs, 7 block I/O. Measured on this project's real v1 kernel:
shares 512, then idle=1 -> shares read 3 and writing them gives EINVAL; idle=0 -> shares read 1024, not 512
(the kernel resets them): hence `cpu.idle`'s `resets`. Within a phase, a limit that tightens
goes deepest directory first and one that loosens shallowest first (v1 refuses a child quota above its
parent's; lowering `memory.limit_in_bytes` below usage gives EBUSY, so limits are never lowered on a parent
before its children). A batch (`batch_order`) writes a limit loosened above another write of the same file first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

#: a write of a batch (`batch_order`)
W = TypeVar("W")

KnobVersion = Literal["v1", "v2"]
#: which directory of a `CgroupDirs` holds the file (`proc`: `/proc/<pid>/`; `blkio`: v1's blkio hierarchy,
#: v2's unified directory)
Where = Literal["cpu", "memory", "blkio", "proc"]

V1: Final = frozenset({"v1"})
V2: Final = frozenset({"v2"})
BOTH: Final = frozenset({"v1", "v2"})

INT64_MAX: Final = 2**63 - 1
#: the largest CFS quota/burst the kernel takes, in microseconds (its max_cfs_runtime is about 2^44 us)
MAX_CFS_US: Final = 2**44
_INT = re.compile(r"[+-]?[0-9]{1,19}")  # fullmatch (`$` passes a trailing newline)
#: a block device number as the kernel prints it (`MAJ:MIN`, each at most 20 bits / 12 bits wide in practice)
_DEVICE = re.compile(r"[0-9]{1,7}:[0-9]{1,7}")
UINT64_MAX: Final = 2**64 - 1
#: ASCII digits only (`str.isdigit` accepts "²", which `int` refuses)
_UINT = re.compile(r"[0-9]{1,20}")
#: io.max's keys, in the order the kernel prints them (a line written in this order reads back the same)
IO_MAX_KEYS: Final = ("rbps", "wbps", "riops", "wiops")


# --- value grammars -----------------------------------------------------------------------------------


def _int_in(text: str, low: int, high: int) -> bool:
    return bool(_INT.fullmatch(text)) and low <= int(text) <= high


def _shares(v: str) -> bool:
    return _int_in(v, 2, 262_144)


def _weight(v: str) -> bool:
    return _int_in(v, 1, 10_000)


def _idle(v: str) -> bool:
    return v in ("0", "1")


def _cfs_quota(v: str) -> bool:
    return v == "-1" or _int_in(v, 1000, MAX_CFS_US)


def _cfs_period(v: str) -> bool:
    return _int_in(v, 1000, 1_000_000)


def _burst(v: str) -> bool:
    return _int_in(v, 0, MAX_CFS_US)


def _cpu_max(v: str) -> bool:
    parts = v.split()
    return (
        1 <= len(parts) <= 2
        and (parts[0] == "max" or _int_in(parts[0], 1000, MAX_CFS_US))
        and (len(parts) == 1 or _cfs_period(parts[1]))
    )


def _v1_bytes(v: str) -> bool:
    return v == "-1" or _int_in(v, 0, INT64_MAX)


def _v2_bytes(v: str) -> bool:
    return v == "max" or _int_in(v, 0, INT64_MAX)


def _reclaim_bytes(v: str) -> bool:
    return _int_in(v, 1, INT64_MAX)


def _qos_level(v: str) -> bool:
    return _int_in(v, -1, 2)


def _oom_score_adj(v: str) -> bool:
    return _int_in(v, -1000, 1000)


def is_device(text: str) -> bool:
    """`MAJ:MIN`, a block device number."""
    return bool(_DEVICE.fullmatch(text))


def _throttle_line(v: str) -> bool:
    """v1 `blkio.throttle.*_device`: `MAJ:MIN <value>`, 0 = unlimited (the kernel stores it as no rule)."""
    parts = v.split()
    return len(parts) == 2 and is_device(parts[0]) and bool(_UINT.fullmatch(parts[1])) and int(parts[1]) <= UINT64_MAX


def _io_max_line(v: str) -> bool:
    """v2 `io.max`: `MAJ:MIN` and any of `rbps= wbps= riops= wiops=`, each a number or `max`, each once."""
    parts = v.split()
    if len(parts) < 2 or not is_device(parts[0]):
        return False
    seen: set[str] = set()
    for token in parts[1:]:
        key, eq, value = token.partition("=")
        if not eq or key not in IO_MAX_KEYS or key in seen:
            return False
        if value != "max" and not (_UINT.fullmatch(value) and 0 < int(value) <= UINT64_MAX):
            return False
        seen.add(key)
    return True


def _weight_line(high: int) -> Callable[[str], bool]:
    """v2 `io.weight` / `io.bfq.weight`: `default <1..high>` or `MAJ:MIN <1..high>`."""

    def accepts(v: str) -> bool:
        parts = v.split()
        return len(parts) == 2 and (parts[0] == "default" or is_device(parts[0])) and _int_in(parts[1], 1, high)

    return accepts


def _bfq_weight(v: str) -> bool:
    return _int_in(v, 1, 1000)


def _cfq_weight(v: str) -> bool:
    return _int_in(v, 10, 1000)


# --- the declaration ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Knob:
    """One kernel knob file."""

    #: the file name (`cpu.idle`; `oom_score_adj` in /proc/<pid>/)
    file: str
    #: cgroup versions that have it (empty for the process knob)
    versions: frozenset[str]
    where: Where
    #: the accepted values, in words (docs, error messages)
    grammar: str
    accepts: Callable[[str], bool]
    #: apply/restore phase (module docstring)
    phase: int
    #: a limit: tightening goes deepest first, loosening shallowest first
    limit: bool = False
    #: the agent may write it (declared-only knobs are read, or wait for the feature that writes them)
    writable: bool = True
    #: the sensor reads it back into the knob belief
    sensed: bool = True
    vendor: bool = False
    #: files of the same directory the kernel changes when this knob is written: their values before the
    #: first write are journaled with it and put back right after it is restored
    resets: tuple[str, ...] = ()
    #: (value, phase) pairs where writing that value goes in another phase than `phase`
    value_phases: tuple[tuple[str, int], ...] = ()
    #: keyed: the file holds one line per key (its first token: a device `MAJ:MIN`, or `default`), a value
    #: is one such line and one write(2) sets one key (module docstring)
    keyed: bool = False
    #: an action, not a state: each write does something once (v2 `memory.reclaim`); never read, journaled,
    #: skipped as a no-op or restored
    action: bool = False
    #: keyed: the line the kernel shows for a key that has no line in the file (`{key}` is replaced); empty
    #: when every key the agent writes always has a line (`io.weight`'s `default`)
    absent: str = ""
    why: str = ""

    def validate(self, value: str) -> str | None:
        """Why `value` may not be written (None when it may); the value is taken stripped."""
        if self.accepts(value.strip()):
            return None
        return f"{value!r} is not a valid value for {self.file} ({self.grammar})"

    def phase_for(self, value: str) -> int:
        """The phase of writing `value` (`cpu.idle=0` comes before shares/weight, `cpu.idle=1` after them)."""
        v = value.strip()
        return next((phase for special, phase in self.value_phases if special == v), self.phase)


KNOBS_DECLARED: Final[tuple[Knob, ...]] = (
    Knob("cpu.shares", V1, "cpu", "an integer 2..262144", _shares, 1,
         why="offline pods' minimal weight (2) without cpu.idle; batch-cpu requests on containers"),
    Knob("cpu.weight", V2, "cpu", "an integer 1..10000", _weight, 1,
         why="v2 twin of cpu.shares (kubelet's shares->weight conversion)"),
    Knob("cpu.cfs_quota_us", V1, "cpu", "-1 or an integer 1000..2^44 (us)", _cfs_quota, 2, limit=True,
         why="the offline tier's CPU ceiling (the BestEffort root, offline pods outside it: agent.decide.tier); "
             "batch-cpu limits"),
    Knob("cpu.max", V2, "cpu", '"max" or <quota 1000..2^44>, optionally followed by <period 1000..1000000>',
         _cpu_max, 2, limit=True, why="v2 twin of cpu.cfs_quota_us/cpu.cfs_period_us (the tier's ceiling, batch-cpu)"),
    Knob("cpu.cfs_period_us", V1, "cpu", "an integer 1000..1000000 (us)", _cfs_period, 2, writable=False,
         why="read for the period a v1 quota is computed against; never written"),
    Knob("cpu.cfs_burst_us", V1, "cpu", "an integer 0..2^44 (us)", _burst, 3,
         why="online pods' optional CPU burst"),
    Knob("cpu.max.burst", V2, "cpu", "an integer 0..2^44 (us)", _burst, 3,
         why="v2 twin of cpu.cfs_burst_us"),
    Knob("cpu.idle", BOTH, "cpu", "0 or 1", _idle, 4, resets=("cpu.shares", "cpu.weight"), value_phases=(("0", 0),),
         why="offline pods' idle scheduling class (kernel >= 5.15): 1 after shares/weight, 0 before them; "
             "while idle the kernel refuses shares/weight (EINVAL) and shows the minimal weight (v1 shares 3), "
             "and leaving idle resets them to the default (v1 1024), not to what they were"),
    Knob("memory.limit_in_bytes", V1, "memory", "-1 or bytes 0..2^63-1", _v1_bytes, 5, limit=True,
         why="batch-memory limits; the memory guard on the BestEffort root (agent.decide.memguard)"),
    Knob("memory.soft_limit_in_bytes", V1, "memory", "-1 or bytes 0..2^63-1", _v1_bytes, 5,
         why="v1 memory QoS: offline pods reclaimed first under global pressure"),
    Knob("memory.max", V2, "memory", '"max" or bytes 0..2^63-1', _v2_bytes, 5, limit=True,
         why="v2 twin of memory.limit_in_bytes"),
    Knob("memory.high", V2, "memory", '"max" or bytes 0..2^63-1', _v2_bytes, 5, limit=True,
         why="v2 memory QoS: offline pods' reclaim throttle, lowered toward the working set under pressure; the "
             "memory guard on the BestEffort root (agent.decide.memguard)"),
    Knob("memory.low", V2, "memory", '"max" or bytes 0..2^63-1', _v2_bytes, 5,
         why="v2 memory QoS: online pods' best-effort protection (pod, containers, QoS-level sums)"),
    Knob("memory.min", V2, "memory", '"max" or bytes 0..2^63-1', _v2_bytes, 5,
         why="v2 memory QoS: online pods' hard protection (pod, containers, QoS-level sums)"),
    Knob("memory.reclaim", V2, "memory", "bytes 1..2^63-1", _reclaim_bytes, 5, sensed=False, action=True,
         why="v2 memory guard: offline page cache reclaimed now while the online pods stall on memory (one-shot)"),
    Knob("cpu.qos_level", BOTH, "cpu", "an integer -1..2", _qos_level, 6, vendor=True,
         why="openEuler's CPU QoS class (-1 offline), where the file exists"),
    Knob("memory.qos_level", BOTH, "memory", "an integer -1..2", _qos_level, 6, vendor=True,
         why="openEuler's memory QoS class (-1 offline), where the file exists"),
    Knob("io.max", V2, "blkio", '"MAJ:MIN" then rbps=, wbps=, riops=, wiops= each "max" or 1..2^64-1', _io_max_line, 7,
         keyed=True, absent="{key} rbps=max wbps=max riops=max wiops=max",
         why="v2 I/O QoS: offline pods' bytes and I/Os per second on the node's disks (blk-throttle)"),
    Knob("io.weight", V2, "blkio", '"default" or "MAJ:MIN", then 1..10000', _weight_line(10_000), 7, keyed=True,
         why="v2 I/O QoS: offline pods' proportional weight; acts only where the disk has an io cost model "
             "(io.cost.qos enable=1)"),
    Knob("io.bfq.weight", V2, "blkio", '"default" or "MAJ:MIN", then 1..1000', _weight_line(1000), 7, keyed=True,
         why="v2 I/O QoS: offline pods' BFQ weight; acts only on disks whose scheduler is bfq"),
    Knob("blkio.throttle.read_bps_device", V1, "blkio", '"MAJ:MIN <bytes/s>" (0: no limit)', _throttle_line, 7,
         keyed=True, absent="{key} 0", why="v1 I/O QoS: offline pods' read bytes per second (blk-throttle)"),
    Knob("blkio.throttle.write_bps_device", V1, "blkio", '"MAJ:MIN <bytes/s>" (0: no limit)', _throttle_line, 7,
         keyed=True, absent="{key} 0",
         why="v1 I/O QoS: offline pods' write bytes per second (direct I/O and writeback they issue themselves)"),
    Knob("blkio.throttle.read_iops_device", V1, "blkio", '"MAJ:MIN <I/Os per s>" (0: no limit)', _throttle_line, 7,
         keyed=True, absent="{key} 0", why="v1 I/O QoS: offline pods' read I/Os per second"),
    Knob("blkio.throttle.write_iops_device", V1, "blkio", '"MAJ:MIN <I/Os per s>" (0: no limit)', _throttle_line, 7,
         keyed=True, absent="{key} 0", why="v1 I/O QoS: offline pods' write I/Os per second"),
    Knob("blkio.bfq.weight", V1, "blkio", "an integer 1..1000", _bfq_weight, 7,
         why="v1 I/O QoS: offline pods' BFQ weight; acts only on disks whose scheduler is bfq"),
    Knob("blkio.weight", V1, "blkio", "an integer 10..1000", _cfq_weight, 7,
         why="v1 I/O QoS: offline pods' CFQ weight on kernels before 5.0 (no bfq); acts only under CFQ"),
    Knob("oom_score_adj", frozenset(), "proc", "an integer -1000..1000", _oom_score_adj, 7,
         why="offline tasks are OOM-killed first (1000)"),
)  # fmt: skip

#: every declared knob by file name
KNOBS: Final[Mapping[str, Knob]] = {k.file: k for k in KNOBS_DECLARED}
#: the cgroup knobs (not the process knob)
CGROUP_KNOBS: Final[Mapping[str, Knob]] = {f: k for f, k in KNOBS.items() if k.where != "proc"}
OOM_SCORE_ADJ: Final = KNOBS["oom_score_adj"]
#: the phase of a file nobody declared (never written: the executor refuses it first)
UNKNOWN_PHASE: Final = 9
#: the block I/O knobs (I/O QoS)
IO_KNOBS: Final[Mapping[str, Knob]] = {f: k for f, k in CGROUP_KNOBS.items() if k.where == "blkio"}


def knob(file: str) -> Knob | None:
    return KNOBS.get(file)


def sensed_files(where: Literal["cpu", "memory", "blkio"]) -> frozenset[str]:
    """The knob files the sensor reads in a `where` directory (on v2 both sets live in one directory)."""
    return frozenset(k.file for k in CGROUP_KNOBS.values() if k.sensed and k.where == where)


def validate_cgroup_value(file: str, value: str, version: str | None = None) -> str | None:
    """Why `value` may not be written to the cgroup file `file` (None when it may)."""
    k = CGROUP_KNOBS.get(file)
    if k is None or not k.writable:
        return f"{file} is not a knob this agent writes"
    if version is not None and version not in k.versions:
        return f"{file} is not a cgroup {version} knob"
    return k.validate(value)


# --- keyed knobs (one line per device) ---------------------------------------------------------------------


def key_of(file: str, value: str) -> str | None:
    """The key a value of the keyed knob `file` sets (its first token); None for a plain knob."""
    k = KNOBS.get(file)
    if k is None or not k.keyed:
        return None
    parts = value.split(maxsplit=1)
    return parts[0] if parts else ""


def entry_key(path: str, file: str, value: str) -> tuple[str, str]:
    """The identity of a knob write for the journal and restores: (directory, file), and for a keyed knob
    (directory, "<file> <key>"): each device's line is a knob of its own."""
    key = key_of(file, value)
    return (path, file) if key is None else (path, f"{file} {key}")


def _lines(content: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in content.splitlines():
        parts = line.split(maxsplit=1)
        if parts:
            out[parts[0]] = " ".join(line.split())
    return out


def current_of(file: str, content: str | None, value: str) -> str | None:
    """What `file` holds now for the key `value` sets: the content itself for a plain knob; for a keyed one
    the line of that key, else the kernel's line for a key without one (`absent`), else None."""
    key = key_of(file, value)
    if key is None or content is None:
        return content
    line = _lines(content).get(key)
    if line is not None:
        return line
    absent = KNOBS[file].absent
    return absent.format(key=key) if absent else None


def merged(file: str, content: str | None, value: str) -> str:
    """The content of `file` after `value` is written: the value itself for a plain knob; for a keyed one the
    content with that key's line replaced (removed when it is the `absent` line: the kernel lists no rule)."""
    key = key_of(file, value)
    if key is None:
        return value
    lines = _lines(content or "")
    line = " ".join(value.split())
    absent = KNOBS[file].absent
    if absent and line.split() == absent.format(key=key).split():
        lines.pop(key, None)
    else:
        lines[key] = line
    return "\n".join(lines.values())


def validate_process_value(file: str, value: str) -> str | None:
    """Why `value` may not be written to `/proc/<pid>/<file>` (None when it may)."""
    if file != OOM_SCORE_ADJ.file:
        return f"{file} is not a process knob this agent writes"
    return OOM_SCORE_ADJ.validate(value)


# --- the write order ---------------------------------------------------------------------------------------


def limit_value(text: str | None) -> float:
    """A quota/limit value as a number; infinity for unlimited (`-1`, `max`, huge v1 values) or unknown."""
    if text is None:
        return math.inf
    parts = text.split()
    if not parts or parts[0] == "max":
        return math.inf
    try:
        v = int(parts[0])
    except ValueError:
        return math.inf
    return math.inf if v < 0 or v >= 2**62 else float(v)


def batch_order(writes: Sequence[W], fields: Callable[[W], tuple[str, str, str, str | None]]) -> list[W]:
    """A batch of writes in the declared order (`order_key`; `fields(w)` = path, file, new value, current value),
    except that a limit loosened on a directory above another write of the same file goes first, shallowest first:
    v1 refuses a child's quota above its parent's, and the declared order (tightening before loosening, so siblings
    never pass a total) would write the child first (the BestEffort root going back to unlimited in the period its
    offline pods get per-pod quotas of their own)."""
    base = sorted(writes, key=lambda w: order_key(*fields(w)))
    seen = [fields(w) for w in base]
    first: list[int] = []
    for i, (path, file, new, current) in enumerate(seen):
        k = KNOBS.get(file)
        loosens = limit_value(new) == math.inf or limit_value(new) > limit_value(current)  # current may be unknown
        if k is None or not k.limit or not loosens:
            continue
        below = path.rstrip("/") + "/"
        if any(f == file and p.startswith(below) for p, f, _, _ in seen):
            first.append(i)
    if not first:
        return base
    first.sort(key=lambda i: seen[i][0].count("/"))
    chosen = set(first)
    return [base[i] for i in first] + [w for i, w in enumerate(base) if i not in chosen]


def order_key(path: str, file: str, new: str, current: str | None) -> tuple[int, int, int, str, str]:
    """Safe order of writing `new` to `<path>/<file>` (sort ascending): phase, then limits by direction.

    The same key serves applying and restoring: the phase depends on the value written (`cpu.idle=0`
    first, `cpu.idle=1` after shares), so a restore that takes a group out of idle does that first.
    """
    k = KNOBS.get(file)
    phase = k.phase_for(new) if k is not None else UNKNOWN_PHASE
    depth = path.count("/")
    if k is not None and k.limit:
        if limit_value(new) < limit_value(current):
            return (phase, 0, -depth, path, file)
        return (phase, 1, depth, path, file)
    return (phase, 0, depth, path, file)
