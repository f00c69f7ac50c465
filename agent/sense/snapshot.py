"""The sensing boundary: Kubernetes objects and cgroup knob files into the frozen model.

Quantities, qos-levels, watermarks and timestamps are parsed here (with `tidemark.apis`), so the
decision modules take plain numbers. Nothing here raises on a malformed object: bad fields fall back
to the documented defaults and add a warning. The cluster file itself is loaded by
`tidemark.objects.load_objects` (one loader for both programs; exit code 2 on a bad file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from agent.cgroups.fs import FileReader, parse_pids
from agent.cgroups.layout import KubeLayout
from agent.knobs import sensed_files
from agent.model import (
    BATCH_KEY,
    MAX_AMOUNT,
    X_KEY,
    Amounts,
    CgroupDirs,
    CgroupState,
    ContainerView,
    NodeView,
    PodCgroups,
    PodView,
)
from agent.sense.procfs import ProcFS
from tidemark.apis import (
    ANN_NODE_USAGE,
    ANN_OFFLINE_JOB_EVICTING,
    LABEL_COLOCATION,
    LABEL_OVERSUBSCRIPTION,
    LABEL_PART_OF,
    PART_OF_TIDEMARK,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    RES_CPU,
    RES_MEMORY,
    RESOURCES,
    NodeName,
    PodUID,
    Resource,
    annotations_of,
    eviction_exemption,
    is_mirror_pod,
    json_annotation,
    label_enabled,
    labels_of,
    parse_bool,
    parse_oversubscription_amount,
    parse_oversubscription_types,
    parse_qos_level,
    parse_quota_burst,
    parse_resource_list,
    parse_watermarks,
    pod_limits,
    pod_requests,
    qos_class,
)
from tidemark.apis import published_batch as published_batch_amount

# --- cluster file (read by tidemark.objects.load_objects, shared with the scheduler) ---------------------


def find_node(objects: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    for obj in objects:
        md = obj.get("metadata")
        if obj.get("kind") == "Node" and isinstance(md, Mapping) and md.get("name") == name:
            return obj
    return None


def pods_on(objects: Iterable[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """Pods bound to the node and not finished (Succeeded/Failed pods hold no resources)."""
    out = []
    for obj in objects:
        spec = obj.get("spec")
        status = obj.get("status")
        if obj.get("kind") != "Pod" or not isinstance(spec, Mapping) or spec.get("nodeName") != name:
            continue
        if isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"):
            continue
        out.append(obj)
    return out


def parse_time(raw: object) -> float | None:
    """RFC3339 (`2024-01-02T03:04:05Z`) to epoch seconds; None when absent or malformed."""
    if not isinstance(raw, str) or not raw:
        if isinstance(raw, datetime):
            return raw.timestamp()
        return None
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


def _mapping(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _str_map(m: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in m.items() if v is not None}


def node_view(node: Mapping[str, Any]) -> NodeView:
    warnings: list[str] = []
    md = _mapping(node, "metadata")
    status = _mapping(node, "status")
    labels = _str_map(labels_of(node))
    annotations = _str_map(annotations_of(node))
    colocation = label_enabled(labels, LABEL_COLOCATION)
    oversub = label_enabled(labels, LABEL_OVERSUBSCRIPTION)
    warnings.extend(w for w in (colocation.warning, oversub.warning) if w)
    problems: list[str] = []
    alloc = _bounded(
        parse_resource_list(_mapping(status, "allocatable"), problems)
        or parse_resource_list(_mapping(status, "capacity"), problems),
        problems,
    )
    warnings.extend(f"node status: {p}" for p in problems)
    if RES_CPU not in alloc or RES_MEMORY not in alloc:
        warnings.append("the Node has no allocatable cpu/memory: usage percentages are 0 and nothing triggers")
    marks = parse_watermarks(annotations)
    warnings.extend(marks.warnings)
    types = parse_oversubscription_types(annotations)
    if types.warning:
        warnings.append(types.warning)
    published_x: dict[Resource, int | None] = {}
    published_batch: dict[Resource, int | None] = {}
    allocatable_raw = _mapping(status, "allocatable")
    for r in RESOURCES:
        raw = annotations.get(X_KEY[r])
        parsed = parse_oversubscription_amount(raw, X_KEY[r])
        if parsed.warning:
            warnings.append(parsed.warning)
        published_x[r] = None if raw is None or parsed.warning else parsed.value
        braw = allocatable_raw.get(BATCH_KEY[r])
        # the NodeReport gate's own grammar (tidemark.quantities.published_batch; issue 33, item 15)
        published_batch[r] = None if braw is None else published_batch_amount(BATCH_KEY[r], braw)[0]
    evicting = parse_bool(annotations.get(ANN_OFFLINE_JOB_EVICTING), key=ANN_OFFLINE_JOB_EVICTING)
    if evicting.warning:
        warnings.append(evicting.warning)
    last_publish = None
    usage_raw = annotations.get(ANN_NODE_USAGE)
    if usage_raw is not None:
        doc = json_annotation(usage_raw)
        last_publish = parse_time(doc.get("time")) if doc is not None else None
        if last_publish is None:
            warnings.append(f"{ANN_NODE_USAGE} has no readable time; treated as never published")
    taints_raw = _mapping(node, "spec").get("taints")
    taints = tuple(t for t in taints_raw if isinstance(t, Mapping)) if isinstance(taints_raw, list) else ()
    return NodeView(
        name=NodeName(str(md.get("name", ""))),
        allocatable=Amounts(float(alloc.get(RES_CPU, 0)), float(alloc.get(RES_MEMORY, 0))),
        labels=labels,
        annotations=annotations,
        colocation=colocation.value,
        oversubscription=oversub.value,
        watermarks=marks,
        types=types.value,
        published_x=published_x,
        published_batch=published_batch,
        evicting_annotation=evicting.value,
        taints=taints,
        last_publish=last_publish,
        warnings=tuple(f"node: {w}" for w in warnings),
    )


def _bounded(values: Mapping[str, int], problems: list[str]) -> dict[str, int]:
    """Drop amounts beyond int64 (no real quantity is that large; floats could not hold them)."""
    out = {}
    for k, v in values.items():
        if 0 <= v <= MAX_AMOUNT:
            out[k] = v
        else:
            problems.append(f"resource {k}={v} is out of range; ignored")
    return out


def _int(raw: object, default: int) -> int:
    if isinstance(raw, bool):
        return default
    value = default
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9]{1,18}", raw.strip()):
        value = int(raw.strip())
    return value if -(2**31) <= value <= MAX_AMOUNT else default


def _container_views(pod: Mapping[str, Any], problems: list[str]) -> tuple[ContainerView, ...]:
    spec = _mapping(pod, "spec")
    status = _mapping(pod, "status")
    ids: dict[str, str] = {}
    statuses = status.get("containerStatuses")
    if isinstance(statuses, list):
        for s in statuses:
            if isinstance(s, Mapping) and isinstance(s.get("containerID"), str) and s.get("containerID"):
                ids[str(s.get("name"))] = str(s["containerID"])
    out = []
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        if not isinstance(c, Mapping):
            continue
        res = _mapping(c, "resources")
        limits = _bounded(parse_resource_list(_mapping(res, "limits"), problems), problems)
        requests = _bounded(parse_resource_list(_mapping(res, "requests"), problems), problems)
        name = str(c.get("name", ""))
        out.append(
            ContainerView(
                name=name,
                container_id=ids.get(name),
                batch_cpu_request=requests.get(RES_BATCH_CPU, limits.get(RES_BATCH_CPU, 0)),
                batch_cpu_limit=limits.get(RES_BATCH_CPU),
                batch_memory_limit=limits.get(RES_BATCH_MEMORY),
            )
        )
    return tuple(out)


def pod_view(pod: Mapping[str, Any], now: float) -> tuple[PodView, list[str]]:
    md = _mapping(pod, "metadata")
    spec = _mapping(pod, "spec")
    namespace = str(md.get("namespace") or "default")
    name = str(md.get("name") or "")
    key = f"{namespace}/{name}"
    warnings: list[str] = []
    uid = md.get("uid")
    if not uid:
        warnings.append(f"pod {key} has no metadata.uid: its cgroup cannot be found")
        uid = key
    qos = parse_qos_level(annotations_of(pod))
    if qos.reason:
        warnings.append(f"pod {key}: {qos.reason}")
    burst = parse_quota_burst(annotations_of(pod))
    if burst.warning:
        warnings.append(f"pod {key}: {burst.warning}")
    problems: list[str] = []
    req = _bounded(pod_requests(pod, problems), problems)
    limits = _bounded(pod_limits(pod, problems), problems)
    containers = _container_views(pod, problems)
    warnings.extend(f"pod {key}: {p}" for p in dict.fromkeys(problems))
    deletion = parse_time(md.get("deletionTimestamp"))
    grace_raw = md.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds"))
    view = PodView(
        uid=PodUID(str(uid)),
        namespace=namespace,
        name=name,
        qos_level=qos.level,
        qos_class=qos_class(pod),
        priority=_int(spec.get("priority"), 0),
        created=parse_time(md.get("creationTimestamp")) or now,
        deletion=deletion,
        grace_seconds=float(_int(grace_raw, 30)),
        requests=Amounts(float(req.get(RES_CPU, 0)), float(req.get(RES_MEMORY, 0))),
        batch_requests=Amounts(float(req.get(RES_BATCH_CPU, 0)), float(req.get(RES_BATCH_MEMORY, 0))),
        cpu_limit=limits.get(RES_CPU),
        containers=containers,
        mirror=is_mirror_pod(pod),
        exempt=eviction_exemption(pod),
        quota_burst=burst.value,
        owner=controller_owner(md),
        component=labels_of(pod).get(LABEL_PART_OF) == PART_OF_TIDEMARK,
    )
    return view, warnings


def controller_owner(md: Mapping[str, Any]) -> str | None:
    """The ownerReference with controller=true as "Kind/name" (the workload the eviction cool-downs count,
    agent.decide.cooldown); None without one or when it is malformed."""
    refs = md.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return f"{ref['kind']}/{ref['name']}"
    return None


# --- cgroup knobs ---------------------------------------------------------------------------------

#: knob files read per controller directory (only those that exist are recorded): the declared `sensed` ones
CPU_KNOBS: Final = sensed_files("cpu")
MEMORY_KNOBS: Final = sensed_files("memory")
IO_KNOBS: Final = sensed_files("blkio")


def knob_names(d: CgroupDirs, directory: str) -> frozenset[str]:
    """The knob files sensing reads in `directory`, one of `d`'s (v2: every controller's in the one directory)."""
    if d.version == "v2":
        return CPU_KNOBS | MEMORY_KNOBS | IO_KNOBS
    names: frozenset[str] = frozenset()
    if directory == d.cpu:
        names |= CPU_KNOBS
    if directory == d.memory:
        names |= MEMORY_KNOBS
    if directory == d.blkio:
        names |= IO_KNOBS
    return names


def qos_ancestors(layout: KubeLayout) -> dict[str, CgroupDirs]:
    """kubelet's QoS-level directories that exist (`kubepods`, `burstable`: memory QoS's sums; `besteffort`: the
    offline tier's CPU quota, agent.decide.tier), keyed as those name them."""
    out: dict[str, CgroupDirs] = {}
    for key, d in (
        ("kubepods", layout.kubepods()),
        ("burstable", layout.qos("Burstable")),
        ("besteffort", layout.qos("BestEffort")),
    ):
        if os.path.isdir(d.memory):
            out[key] = d
    return out


def _has_child(d: CgroupDirs) -> bool:
    """Whether the pod cgroup `d` holds a directory (a sandbox's or a container's cgroup): one scandir."""
    for path in d.distinct():
        try:
            with os.scandir(path) as entries:
                return any(e.is_dir(follow_symlinks=False) for e in entries)
        except OSError:
            continue
    return False


def resolve_pod_cgroups(
    layout: KubeLayout, pods: Sequence[PodView], unfinished: set[PodUID] | None = None
) -> dict[PodUID, PodCgroups]:
    """The cgroup directories of the pods that have one here, and that kubelet has finished writing.

    Pods not started yet are left out, and so is a pod cgroup with no child directory yet: kubelet 1.20
    makes the pod cgroup (mkdir), then writes its values (`cpu.shares`, the CFS quota, ..., `pids.max`,
    hugetlb; `pcm.EnsureExists`), and only then has the runtime create the sandbox, whose cgroup is a child
    of the pod's. A knob the agent writes in between (`cpu.idle=1`) makes kubelet's `cpu.shares` write
    fail with EINVAL, and libcontainer then skips the values after it. The child check (one scandir) is
    made only for a pod none of whose containers' cgroups were found; such pods are added to `unfinished`.
    """
    out: dict[PodUID, PodCgroups] = {}
    for p in pods:
        d = layout.pod(p.uid, p.qos_class)
        if not os.path.isdir(d.cpu) and not os.path.isdir(d.memory):
            continue
        containers: dict[str, CgroupDirs] = {}
        for c in p.containers:
            if c.container_id:
                cd = layout.container(d, c.container_id)
                if os.path.isdir(cd.cpu) or os.path.isdir(cd.memory):
                    containers[c.name] = cd
        if not containers and not _has_child(d):
            if unfinished is not None:
                unfinished.add(p.uid)
            continue
        out[p.uid] = PodCgroups(d, containers)
    return out


def _read_knobs(reader: FileReader, directory: str, names: frozenset[str]) -> dict[str, str]:
    try:
        present = names.intersection(os.listdir(directory))
    except OSError:
        return {}
    values: dict[str, str] = {}
    for name in sorted(present):
        text = reader.read(os.path.join(directory, name))
        if text is not None:
            values[name] = text.strip()
    return values


def _subtree_pids(reader: FileReader, directory: str) -> tuple[int, ...]:
    pids: list[int] = []
    for root, _dirs, files in os.walk(directory):
        if "cgroup.procs" in files:
            text = reader.read(os.path.join(root, "cgroup.procs"))
            if text:
                pids.extend(parse_pids(text))
    return tuple(dict.fromkeys(pids))


def sense_cgroups(
    layout: KubeLayout,
    pods: Sequence[PodView],
    cgroups: Mapping[PodUID, PodCgroups],
    reader: FileReader,
    procfs: ProcFS,
) -> CgroupState:
    """Current knob values of every pod and container directory (and of the QoS-level ancestors memory QoS
    writes), and offline pods' processes."""
    files: dict[str, dict[str, str]] = {}
    ancestors = qos_ancestors(layout)
    for pc in (*cgroups.values(), *(PodCgroups(d) for d in ancestors.values())):
        for d in (pc.pod, *pc.containers.values()):
            for directory in d.distinct():
                names = knob_names(d, directory)
                if names and directory not in files:
                    files[directory] = _read_knobs(reader, directory, names)
    pids: dict[PodUID, tuple[int, ...]] = {}
    oom: dict[int, str] = {}
    for p in pods:
        own = cgroups.get(p.uid)
        if own is None or not p.offline:
            continue
        found = _subtree_pids(reader, own.pod.memory)
        pids[p.uid] = found
        for pid in found:
            value = procfs.oom_score_adj(pid)
            if value is not None:
                oom[pid] = value
    return CgroupState(layout.hierarchy.knob_version, dict(cgroups), files, pids, oom, ancestors)
