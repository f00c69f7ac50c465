"""`tidemark-agent restore` without a running agent: put back every journaled original value, safely.

The journal is data on disk; a writable journal must never become a write to an arbitrary host file. So
the roots come from the command line (`--cgroup-root`, `--kube-cgroup-root`, `--cgroup-driver`,
`--proc-root`, the same flags and defaults as `run`), never from the journal:

- cgroup entries are restored only under kubelet's kubepods directories of that cgroup root and kube cgroup
  root (both drivers' layouts with `--cgroup-driver auto`), checked as written and with symlinks resolved;
- process entries only as `<proc-root>/<pid>/oom_score_adj`, for a positive PID whose start time still
  matches the journal's (PID reuse);
- every file name must be a declared knob and every value of its grammar (`agent.knobs`).

Entries with a bad shape, an undeclared file or a bad value are rejected when the journal loads (ERROR
line, the file copied to `journal.json.rejected-<time>`); valid entries outside the given roots are
skipped with a WARNING line and kept in the journal (a restore with the right flags can still put them
back). Everything else is restored as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agent.act.cgroup_writer import BatchResult, CgroupWriter
from agent.act.statedir import StateDir
from agent.cgroups.layout import Driver, DriverChoice, KubeLayout
from agent.cgroups.mounts import CgroupDetectionError, detect_hierarchy
from agent.sense.procfs import ProcFS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestoreRoots:
    """Where `restore` may write: from the command line (the same flags and defaults as `run`)."""

    cgroup_root: str = "/sys/fs/cgroup"
    kube_cgroup_root: str = "/"
    driver: DriverChoice = "auto"
    proc_root: str = "/proc"


@dataclass(slots=True)
class RestoreReport:
    journaled: int = 0
    result: BatchResult = field(default_factory=BatchResult)
    #: journal entries left out when the journal loaded (bad shape, undeclared file, bad value)
    rejected: list[str] = field(default_factory=list)
    roots: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.result.failed or self.result.skipped or self.rejected)

    def summary(self) -> str:
        r = self.result
        return (
            f"restored {len(r.applied) - r.resets} of {self.journaled} journaled value(s) (and {r.resets} the kernel "
            f"had reset with them); {r.released} no longer held our "
            f"value (kubelet's or gone), {r.noop} already original, {len(r.failed)} failed, {r.skipped} skipped "
            f"(outside the roots, kept in the journal), {len(self.rejected)} rejected (invalid entries)"
        )


def kubepods_roots(roots: RestoreRoots) -> tuple[tuple[str, ...], str]:
    """kubelet's kubepods directories under the given roots (both drivers' with `auto`), and a note."""
    try:
        hierarchy = detect_hierarchy(roots.cgroup_root, ProcFS(roots.proc_root).mountinfo())
    except CgroupDetectionError as e:
        return (), f"{e}: no cgroup entry can be restored (check --cgroup-root)"
    drivers: tuple[Driver, ...] = ("cgroupfs", "systemd") if roots.driver == "auto" else (roots.driver,)
    found: list[str] = []
    for driver in drivers:
        for d in KubeLayout(hierarchy, driver, roots.kube_cgroup_root).kubepods().distinct():
            if d not in found:
                found.append(d)
    return tuple(found), f"cgroup values are restored only under {', '.join(found)}"


def restore_state_dir(state: StateDir, roots: RestoreRoots) -> RestoreReport:
    """Load the journal (checked), restore what passes the checks under `roots`; the caller holds the lock."""
    report = RestoreReport()
    state.load()
    report.rejected = list(state.journal.rejected)
    report.journaled = len(state.journal) + len(report.rejected)
    report.roots, note = kubepods_roots(roots)
    report.notes.append(note)
    writer = CgroupWriter(state.journal, roots=report.roots, proc_root=roots.proc_root)
    report.result = writer.restore_all()
    if report.result.skipped:
        log.warning("%s (--cgroup-root %s, --kube-cgroup-root %s, --cgroup-driver %s, --proc-root %s)", note,
                    roots.cgroup_root, roots.kube_cgroup_root, roots.driver, roots.proc_root)  # fmt: skip
    if report.rejected and not state.journal.saves:
        # the rejected entries never go back into the journal file
        try:
            state.journal.save()
        except OSError as e:
            report.notes.append(f"cannot save the journal {state.journal.path}: {e.strerror or e}")
    state.clear_restore_request()
    return report
