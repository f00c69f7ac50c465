#!/usr/bin/python3
"""runc, minus the capabilities this host cannot grant (containerd's runc `BinaryName` on the real node).

Some VMs run root without a capability in its bounding set (these machines lack CAP_SYS_RESOURCE:
docs/testing.md); runc then refuses every container that asks for it ("unable to
apply caps: operation not permitted"), although the same manifest runs on a normal node. This
drops, from the OCI spec runc is given (`create`/`run --bundle`, `exec --process`), exactly the
capabilities missing from this process's bounding set, says so on stderr (the shim's log), and
execs the real runc. Nothing else changes. Used only by localcluster/realnode.py.
"""

from __future__ import annotations

import json
import os
import sys

CAPS = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]
RUNC = os.environ.get("TIDEMARK_REAL_RUNC", "/usr/sbin/runc")


def missing_caps() -> set[str]:
    with open("/proc/self/status") as f:
        bnd = next(int(line.split()[1], 16) for line in f if line.startswith("CapBnd:"))
    return {f"CAP_{name}" for bit, name in enumerate(CAPS) if not bnd >> bit & 1}


def strip(caps: dict[str, list[str]], missing: set[str]) -> list[str]:
    dropped: set[str] = set()
    for key, values in caps.items():
        if isinstance(values, list):
            caps[key] = [c for c in values if c not in missing]
            dropped |= set(values) - set(caps[key])
    return sorted(dropped)


def fix(path: str, process_only: bool) -> None:
    missing = missing_caps()
    if not missing or not os.path.exists(path):
        return
    with open(path) as f:
        spec = json.load(f)
    proc = spec if process_only else spec.get("process", {})
    dropped = strip(proc.get("capabilities") or {}, missing)
    if dropped:
        with open(path + ".tmp", "w") as f:
            json.dump(spec, f)
        os.replace(path + ".tmp", path)
        sys.stderr.write(f"tidemark runc wrapper: this host cannot grant {', '.join(dropped)}; dropped\n")


def main() -> None:
    args = sys.argv[1:]
    for i, a in enumerate(args):
        if a in ("--bundle", "-b") and i + 1 < len(args):
            fix(os.path.join(args[i + 1], "config.json"), process_only=False)
        elif a.startswith("--bundle="):
            fix(os.path.join(a.split("=", 1)[1], "config.json"), process_only=False)
        elif a in ("--process", "-p") and i + 1 < len(args):
            fix(args[i + 1], process_only=True)
        elif a.startswith("--process="):
            fix(a.split("=", 1)[1], process_only=True)
    os.execv(RUNC, [RUNC, *args])


if __name__ == "__main__":
    main()
