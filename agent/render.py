"""Printing a plan: the exact JSON of docs/design.md, "Plan output", or a table that explains each decision in words."""

from __future__ import annotations

import json
from typing import Any

from agent.decide.ops import Plan
from agent.model import Amounts


def _cpu_mem(a: Amounts) -> dict[str, int]:
    return {"cpu": round(a.cpu), "memory": round(a.memory)}


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as the JSON document of docs/design.md, "Plan output" (no other keys)."""
    u, c = plan.usage, plan.capacity
    return {
        "node": plan.node,
        "labels": dict(plan.labels),
        "usage": {
            "cpu": round(u.kubepods.cpu),
            "memory": round(u.kubepods.memory),
            "cpu_percent": round(u.percent.cpu, 2),
            "memory_percent": round(u.percent.memory, 2),
            "online": _cpu_mem(u.online),
            "offline": _cpu_mem(u.offline),
        },
        "capacity": {
            "batch": _cpu_mem(c.published_batch),
            "batch_bound": _cpu_mem(c.batch_bound),
            "computed": {"B": _cpu_mem(c.B), "X": _cpu_mem(c.X)},
            "policy": c.policy,
            "u_non": _cpu_mem(c.u_non),
        },
        "oversubscription": _cpu_mem(c.published_x),
        "node_report": plan.report.patch() if plan.report else {},
        "evicting": plan.evicting,
        "evictions": [{"pod": e.key, "reason": e.reason} for e in plan.evictions],
        "held": [
            {"pod": h.key, "reason": h.reason, "cooldown": h.cooldown, "until": round(h.until, 3), "why": h.why}
            for h in plan.held
        ],
        "cgroup_writes": [{"path": w.path, "file": w.file, "value": w.value} for w in plan.cgroup_writes],
        "process_writes": [{"pid": w.pid, "file": w.file, "value": w.value} for w in plan.process_writes],
        "tier": _tier(plan),
        "explanations": list(plan.explanations),
    }


def _tier(plan: Plan) -> dict[str, Any]:
    """The offline tier's decisions (agent.decide.tier): {} while there is none (tier.enabled false, no sample)."""
    t = plan.tier
    if t is None:
        return _tier_memory_io(plan)
    wait = None if t.online_wait is None else round(t.online_wait, 4)
    delay = None if t.online_delay_ms is None else round(t.online_delay_ms, 4)
    return {"cpu": {"ceiling": round(t.ceiling), "bound": round(t.bound), "rule": t.rule, "online_wait": wait,
                    "online_delay_ms": delay, "reason": t.reason}, **_tier_memory_io(plan)}


def _tier_memory_io(plan: Plan) -> dict[str, Any]:
    """The memory guard's limit and the I/O controller's (agent.decide.memguard, agent.decide.iopressure)."""
    out: dict[str, Any] = {}
    if plan.tier_memory_reason:
        out["memory"] = {"limit": plan.tier_memory_limit, "reason": plan.tier_memory_reason}
    if plan.offline_io_reason:
        wait = None if plan.online_io_wait is None else round(plan.online_io_wait, 4)
        out["io"] = {"limit_bps": plan.offline_io_bps, "online_wait": wait, "reason": plan.offline_io_reason}
    return out


def render_json(plan: Plan) -> str:
    return json.dumps(plan_json(plan), indent=2)


def render_yaml(plan: Plan) -> str:
    """The JSON document as YAML (`-o yaml`), key order kept."""
    import yaml  # only for -o yaml

    return str(yaml.safe_dump(plan_json(plan), sort_keys=False, default_flow_style=False)).rstrip("\n")


def _bytes(v: float) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"


def _amounts(a: Amounts) -> str:
    return f"cpu {a.cpu:.0f}m, memory {_bytes(a.memory)}"


def render_table(plan: Plan) -> str:
    u, c = plan.usage, plan.capacity
    lines = [f"Node {plan.node}"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(plan.labels.items()) if k.startswith("volcano.sh/"))
    lines.append(f"  labels: {labels or '(no volcano.sh labels)'}")
    lines.append(f"Usage ({u.samples} sample(s) over {u.window_seconds:.1f} s)")
    lines.append(
        f"  pods (kubepods): {_amounts(u.kubepods)}  = cpu {u.percent.cpu:.1f} %, memory {u.percent.memory:.1f} %"
    )
    lines.append(f"  online pods:     {_amounts(u.online)}")
    lines.append(f"  offline pods:    {_amounts(u.offline)}")
    lines.append(f"  machine (/proc): {_amounts(u.node)};  not offline (U_non): {_amounts(u.non_offline)}")
    lines.append("Capacity")
    lines.append(f"  policy {c.policy}: U_non {_amounts(c.u_non)}")
    lines.append(f"  computed B: {_amounts(c.B)};  X: {_amounts(c.X)}")
    lines.append(f"  published batch-cpu/-memory: {_amounts(c.published_batch)}")
    if c.batch_bound.cpu or c.batch_bound.memory:
        lines.append(f"  never under the bound batch pods' requests (kubelet re-admits them on a restart): "
                     f"{_amounts(c.batch_bound)}")
    lines.append(f"  published oversubscription-cpu/-memory: {_amounts(c.published_x)}")
    if plan.tier is not None:
        lines.append(f"Offline tier: {plan.tier.reason}")
    if plan.tier_memory_reason:
        lines.append(f"Offline tier memory: {plan.tier_memory_reason}")
    if plan.offline_io_reason:
        lines.append(f"Offline I/O: {plan.offline_io_reason}")
    lines.append(f"Evicting: {'yes' if plan.evicting else 'no'}")
    if plan.evictions:
        lines.append("Evictions")
        for e in plan.evictions:
            lines.append(f"  {e.key}  {e.reason}: {e.detail}")
    else:
        lines.append("Evictions: none")
    if plan.held:
        lines.append("Held back (eviction cool-downs)")
        for h in plan.held:
            lines.append(f"  {h.key}  {h.reason}: {h.why}")
    lines.append(f"NodeReport: {json.dumps(plan.report.patch()) if plan.report else 'none'}")
    if plan.cgroup_writes:
        lines.append(f"cgroup writes ({len(plan.cgroup_writes)}, in order)")
        for w in plan.cgroup_writes:
            lines.append(f"  {w.path}/{w.file} = {w.value}  (now {w.current}): {w.reason}")
    else:
        lines.append("cgroup writes: none (every knob already holds its value)")
    if plan.process_writes:
        lines.append(f"process writes ({len(plan.process_writes)})")
        for p in plan.process_writes:
            lines.append(f"  pid {p.pid} {p.file} = {p.value}  (now {p.current}): {p.reason}")
    else:
        lines.append("process writes: none")
    lines.append("Why")
    for why in plan.explanations:
        if not why.startswith("write "):  # each write is listed above with its reason
            lines.append(f"  - {why}")
    return "\n".join(lines)
