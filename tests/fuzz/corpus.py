"""The malformed-input corpus of issue #13, generated from one valid cluster by named mutations.

`python -m tests.fuzz.corpus` (re)writes tests/fuzz/cases/<family>/<name>.<ext>; the files are
committed, so a failure names a file anyone can feed to `tidemark-scheduler simulate` or
`tidemark-agent plan` by hand. Families: quantities, annotations, shapes, encodings, lists, nodereports (the
cluster file, run by both programs; nodereports: the values an agent publishes, issue 33 items 4 and 15)
and confs (scheduler confs run by simulate, agent configs run
by plan), and from hardening round 3 (issue 33): profiles (ColocationProfiles in the cluster file, run by
both programs), checkpoints (`profiles.json` in a state dir, read by `plan --state-dir`) and traces (the
capacity replay's `--trace`). Every case is malformed or hostile somewhere; the rule the tests enforce is the
same for all: exit 0 or 2, never 1, never a traceback; exit 2 names what is wrong.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
NODE = "n1"

#: the cases (paths under CASES) that once crashed a command with an exception instead of exit 2; both
#: programs' tests run them by name (tests/unit/scheduler/test_malformed_objects.py,
#: tests/unit/agent/test_plan_malformed_input.py)
ONCE_CRASHED = (
    "encodings/binary-random.yaml",  # UnicodeDecodeError
    "encodings/latin1.yaml",
    "encodings/utf16.yaml",
    "quantities/pod-request-cpu-1e400.yaml",  # OverflowError
    "quantities/pod-request-cpu-number-huge.yaml",
    "shapes/pod-spec-containers-0-str.yaml",  # AttributeError on mis-shaped containers
    "shapes/pod-spec-containers-0-resources-list.yaml",
    "shapes/pod-spec-affinity-list.yaml",
    "shapes/pod-spec-affinity-nodeAffinity-preferredDuringSchedulingIgnoredDuringExecution-0-int.yaml",
    "shapes/pod-spec-nodeSelector-list.yaml",
    "shapes/pod-spec-nodeSelector-dict.yaml",
    "lists/list-items-int.yaml",  # the agent iterated over 5
    "lists/podlist-items-int.yaml",
    "lists/list-nested-items-int.yaml",
)

Obj = dict[str, Any]


def base_cluster() -> list[Obj]:
    """A small valid cluster: labelled node n1, an online and an offline pod on it, a gang, a queue."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"},
                "annotations": {"volcano.sh/oversubscription-cpu": "1000", "volcano.sh/oversubscription-memory": "0"},
            },
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n2"},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}},
        },
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 2, "capability": {"cpu": "8"}},
        },
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "batch"},
            "spec": {"minMember": 2, "queue": "research", "minResources": {"cpu": "1"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "on-1"},
            "spec": {
                "nodeName": NODE,
                "schedulerName": "volcano",
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}],
            },
            "status": {"phase": "Running", "containerStatuses": [{"name": "app", "containerID": "containerd://aaa"}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "crunch",
                "namespace": "batch",
                "uid": "off-1",
                "annotations": {"volcano.sh/qos-level": "BE"},
            },
            "spec": {"nodeName": NODE, "schedulerName": "volcano", "containers": [{"name": "job", "resources": {}}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "job", "containerID": "containerd://bbb"}]},
        },
        *[
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"gang-w-{i}",
                    "namespace": "batch",
                    "uid": f"g-{i}",
                    "annotations": {"scheduling.k8s.io/group-name": "gang", "volcano.sh/qos-level": "-1"},
                },
                "spec": {
                    "schedulerName": "volcano",
                    "containers": [{"name": "w", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 1, "preference": {"matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}
                                ]}}
                            ]
                        }
                    },
                },
                "status": {"phase": "Pending"},
            }
            for i in range(2)
        ],
    ]


# --- mutation helpers ------------------------------------------------------------------------------


def _find(objs: list[Obj], kind: str, name: str) -> Obj:
    for o in objs:
        if o.get("kind") == kind and o.get("metadata", {}).get("name") == name:
            return o
    raise KeyError(f"{kind} {name}")


def _set(objs: list[Obj], kind: str, name: str, path: str | tuple[str, ...], value: Any) -> list[Obj]:
    """Set `path` (dots, `[i]` for list items; or a tuple of keys) of one object; mappings are created."""
    obj = _find(objs, kind, name)
    parts = list(path) if isinstance(path, tuple) else path.replace("[", ".[").split(".")
    cur: Any = obj
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key: Any = int(part[1:-1]) if part.startswith("[") else part
        if last:
            cur[key] = value
        else:
            if isinstance(cur, dict) and not isinstance(cur.get(key), dict | list):
                cur[key] = {}
            cur = cur[key]
    return objs


Mutation = Callable[[list[Obj]], Any]


def m(kind: str, name: str, path: str | tuple[str, ...], value: Any) -> Mutation:
    return lambda objs: _set(objs, kind, name, path, value)


def node_ann(key: str, value: Any) -> Mutation:
    return m("Node", NODE, ("metadata", "annotations", key), value)


def pod_ann(pod: str, key: str, value: Any) -> Mutation:
    return m("Pod", pod, ("metadata", "annotations", key), value)


def dump(objs: list[Any]) -> bytes:
    return yaml.safe_dump_all(objs, sort_keys=False, width=4096).encode()


# --- families ------------------------------------------------------------------------------------

HUGE = "9" * 400
ABSURD_QUANTITIES = {
    "1e400": "1e400",
    "1E+400": "1E+400",
    "1e999999999": "1e999999999",
    "400-digits": HUGE,
    "400-digits-milli": HUGE + "m",
    "exa-huge": "99999999999Ei",
    "inf": "inf",
    "minus-inf": "-Infinity",
    "nan": "NaN",
    "negative": "-1",
    "garbage": "lots",
    "empty": "",
    "tiny": "1e-400",
    "float-yaml-inf": float("inf"),
    "number-huge": 10**40,
    "bool": True,
    "list": [1, 2],
    "mapping": {"a": 1},
    # not apimachinery's grammar, though Python's Decimal reads each of them as a number
    "full-width": "\uff18",
    "arabic-indic": "\u0661",
    "underscore": "1_000m",
    "space": " 1",
    "exponent-binary": "1e5Ki",
    "upper-k": "1K",
}


def quantities() -> Iterator[tuple[str, Mutation]]:
    for tag, q in ABSURD_QUANTITIES.items():
        yield f"pod-request-cpu-{tag}", m("Pod", "gang-w-0", "spec.containers[0].resources.requests.cpu", q)
    for tag in ("1e400", "400-digits", "negative", "nan", "inf"):
        q = ABSURD_QUANTITIES[tag]
        yield f"pod-request-memory-{tag}", m("Pod", "web", "spec.containers[0].resources.requests.memory", q)
        yield f"node-allocatable-cpu-{tag}", m("Node", NODE, "status.allocatable.cpu", q)
        yield f"node-allocatable-memory-{tag}", m("Node", NODE, "status.allocatable.memory", q)
        yield f"podgroup-minresources-{tag}", m("PodGroup", "gang", "spec.minResources.cpu", q)
        yield f"queue-capability-{tag}", m("Queue", "research", "spec.capability.cpu", q)
    yield "pod-limit-batch-cpu-1e400", m(
        "Pod", "crunch", "spec.containers[0].resources.limits", {"kubernetes.io/batch-cpu": "1e400"}
    )
    yield "pod-overhead-1e400", m("Pod", "web", "spec.overhead", {"cpu": "1e400"})
    for tag in ("full-width", "underscore"):  # on the node plan reads, too
        yield f"pod-request-memory-{tag}", m("Pod", "web", "spec.containers[0].resources.requests.memory",
                                             ABSURD_QUANTITIES[tag])
    yield "node-batch-allocatable-huge", m("Node", NODE, ("status", "allocatable", "kubernetes.io/batch-cpu"), HUGE)
    yield "queue-deserved-1e400", m("Queue", "research", "spec.deserved", {"memory": "1e400"})
    yield "queue-guarantee-1e400", m("Queue", "research", "spec.guarantee", {"resource": {"cpu": "1e400"}})
    yield "init-container-1e400", m(
        "Pod", "gang-w-1", "spec.initContainers", [{"name": "i", "resources": {"requests": {"cpu": "1e400"}}}]
    )


def annotations() -> Iterator[tuple[str, Mutation]]:
    for key in ("volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory"):
        short = key.rsplit("-", 1)[1]
        for tag, value in (("400-digits", HUGE), ("5000-digits", "9" * 5000), ("negative", "-5"),
                           ("float", "1.5"), ("1e400", "1e400"), ("int-not-string", 12), ("list", [1])):
            yield f"node-x-{short}-{tag}", node_ann(key, value)
    for tag, value in (("5000-digits", "9" * 5000), ("leading-zeros", "0" * 5000 + "80"), ("float", "80.5"),
                       ("inverted", "10"), ("over-100", "1000"), ("negative", "-80"), ("text", "high"),
                       ("null", None), ("list", [80])):
        yield f"watermark-cpu-high-{tag}", node_ann("volcano.sh/evicting-cpu-high-watermark", value)
    for tag, value in (("5000-digits", "-" + "0" * 5000 + "1"), ("huge", HUGE), ("lowercase", "be"),
                       ("out-of-range", "-8"), ("list", ["BE"]), ("mapping", {"a": "b"}), ("int", -1),
                       ("empty", "")):
        yield f"qos-level-{tag}", pod_ann("crunch", "volcano.sh/qos-level", value)
    for tag, value in (("unknown", "gpu,disk"), ("empty", ""), ("list", ["cpu"])):
        yield f"oversubscription-types-{tag}", node_ann("volcano.sh/oversubscription-types", value)
    for tag, value in (("not-json", "{"), ("json-list", "[1]"), ("bad-time", '{"time": 5}'), ("huge", "[" * 10000),
                       ("future", '{"cpu": 99, "memory": 99, "window": "60s", "time": "2099-01-01T00:00:00Z"}')):
        yield f"node-usage-{tag}", node_ann("tidemark.io/node-usage", value)
    yield "evicting-yes", node_ann("volcano.sh/offline-job-evicting", "yes")
    yield "label-oversubscription-yes", m("Node", NODE, ("metadata", "labels", "volcano.sh/oversubscription"), "yes")
    sla = "volcano.sh/sla-waiting-time"
    yield "sla-waiting-time-huge", m("PodGroup", "gang", "metadata.annotations", {sla: HUGE + "h"})
    yield "sla-waiting-time-garbage", m("PodGroup", "gang", "metadata.annotations", {sla: "soon"})
    yield "task-priority-huge", pod_ann("gang-w-0", "volcano.sh/task-priority", HUGE)
    yield "preemptable-garbage", pod_ann("gang-w-0", "volcano.sh/preemptable", "maybe")
    yield "group-name-missing-podgroup", pod_ann("gang-w-0", "scheduling.k8s.io/group-name", "ghost")
    yield "group-name-list", pod_ann("gang-w-0", "scheduling.k8s.io/group-name", ["gang"])
    yield "queue-name-missing", pod_ann("web", "scheduling.volcano.sh/queue-name", "ghost")
    yield "queue-weight-missing", lambda objs: _find(objs, "Queue", "research")["spec"].pop("weight")
    yield "queue-weight-heavy", m("Queue", "research", "spec.weight", "heavy")
    yield "queue-weight-negative", m("Queue", "research", "spec.weight", -4)
    yield "queue-weight-huge", m("Queue", "research", "spec.weight", 10**30)
    yield "podgroup-minmember-negative", m("PodGroup", "gang", "spec.minMember", -3)
    yield "podgroup-minmember-huge", m("PodGroup", "gang", "spec.minMember", 10**30)
    yield "podgroup-mintaskmember-garbage", m("PodGroup", "gang", "spec.minTaskMember", {"w": "many"})


def shapes() -> Iterator[tuple[str, Mutation]]:
    pod = "gang-w-0"
    for path, value in (
        ("spec.containers", 5),
        ("spec.containers", "app"),
        ("spec.containers", {"name": "app"}),
        ("spec.containers[0]", "app"),
        ("spec.containers[0]", None),
        ("spec.containers[0].resources", [1]),
        ("spec.containers[0].resources", "big"),
        ("spec.containers[0].resources.requests", ["cpu"]),
        ("spec.containers[0].resources.requests", "1"),
        ("spec.containers[0].resources.limits", 7),
        ("spec.initContainers", 3),
        ("spec.initContainers", [5]),
        ("spec.affinity", []),
        ("spec.affinity", "yes"),
        ("spec.affinity.nodeAffinity", 1),
        ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", {"a": 1}),
        ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]", 3),
        ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "heavy"),
        ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference", []),
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", []),
        ("spec.affinity.podAntiAffinity", {"requiredDuringSchedulingIgnoredDuringExecution": {"topologyKey": "x"}}),
        ("spec.affinity.podAffinity", {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": []}]}),
        ("spec.nodeSelector", ["disk=ssd"]),
        ("spec.nodeSelector", "ssd"),
        ("spec.nodeSelector", {"disk": {"ssd": True}}),
        ("spec.tolerations", {"key": "x"}),
        ("spec.tolerations", [7]),
        ("spec.topologySpreadConstraints", [{"maxSkew": "one", "topologyKey": 5}]),
        ("spec.priority", "high"),
        ("spec.priority", 10**30),
        ("spec.schedulerName", ["volcano"]),
        ("spec.overhead", [1]),
        ("spec", []),
        ("spec", "pod"),
        ("metadata", "gang-w-0"),
        ("metadata.labels", ["a"]),
        ("metadata.annotations", "x"),
        ("metadata.ownerReferences", {"kind": "Job"}),
        ("metadata.ownerReferences", [1]),
        ("metadata.creationTimestamp", "yesterday"),
        ("metadata.creationTimestamp", 12),
        ("status", [1]),
        ("status.containerStatuses", {"name": "w"}),
        ("status.phase", ["Running"]),
    ):
        yield f"pod-{path.replace('[', '-').replace(']', '').replace('.', '-')}-{type(value).__name__}", m(
            "Pod", pod, path, value
        )
    yield "pod-name-list", m("Pod", pod, "metadata.name", ["x"])
    yield "pod-no-metadata", lambda objs: _find(objs, "Pod", pod).pop("metadata")
    yield "node-status-list", m("Node", NODE, "status", [1])
    yield "node-allocatable-list", m("Node", NODE, "status.allocatable", ["cpu"])
    yield "node-taints-mapping", m("Node", NODE, "spec.taints", {"key": "x"})
    yield "node-conditions-string", m("Node", NODE, "status.conditions", "Ready")
    yield "node-labels-nested", m("Node", NODE, "metadata.labels", {"volcano.sh/oversubscription": {"x": 1}})
    yield "podgroup-spec-list", m("PodGroup", "gang", "spec", [1])
    yield "podgroup-queue-list", m("PodGroup", "gang", "spec.queue", ["research"])
    yield "queue-capability-list", m("Queue", "research", "spec.capability", ["cpu"])
    yield "queue-guarantee-string", m("Queue", "research", "spec.guarantee", "all")
    yield "queue-reclaimable-string", m("Queue", "research", "spec.reclaimable", "sometimes")
    yield "duplicate-pod", lambda objs: objs.append(copy.deepcopy(_find(objs, "Pod", "web")))
    yield "duplicate-queue", lambda objs: objs.append(copy.deepcopy(_find(objs, "Queue", "research")))
    yield "duplicate-podgroup", lambda objs: objs.append(copy.deepcopy(_find(objs, "PodGroup", "gang")))
    yield "duplicate-node", lambda objs: objs.append(copy.deepcopy(_find(objs, "Node", "n2")))
    yield "kind-list-value", lambda objs: objs.append({"kind": ["Pod"], "metadata": {"name": "x"}})
    yield "kind-missing", lambda objs: objs.append({"metadata": {"name": "x"}})
    yield "document-scalar", lambda objs: objs.append(42)
    yield "document-string", lambda objs: objs.append("hello")


RawCase = tuple[str, bytes]

# --- hardening round 3 (issue 33): profiles, usage checkpoints, capacity traces ---------------------------

PROFILE_NS = "batch"


#: NodeReport values (issue 33, items 4 and 15): what an agent might publish as X or batch-*, each a string the
#: NodeReport gate (tidemark.nodereport.spec_problems) and every reader judge by one grammar
#: (tidemark.quantities.published_x / published_batch); tests/unit/test_nodereport_grammar.py holds them to it
NODEREPORT_VALUES: dict[str, str] = {
    "superscript": "\u00b2", "arabic-indic": "\u0661\u0662\u0663", "full-width": "\uff18", "32-digits": "9" * 32,
    "17-digits": "9" * 17, "max-amount": str(2**53), "beyond-max": str(2**53 + 1), "8TiB-plus": "8796093022209",
    "9e12-cores": "9000000000000000", "negative": "-5", "space": " 5", "newline": "5\n", "fraction": "0.5",
    "exponent": "1e3", "binary-si": "1Gi", "empty": "", "plus": "+5", "underscore": "1_000",
}


def nodereports() -> Iterator[tuple[str, Mutation]]:
    """The node carrying each NodeReport value as X (annotations) and batch-* (allocatable and capacity)."""
    for tag, value in NODEREPORT_VALUES.items():
        yield f"x-cpu-{tag}", node_ann("volcano.sh/oversubscription-cpu", value)
        yield f"x-memory-{tag}", node_ann("volcano.sh/oversubscription-memory", value)
        for key in ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"):
            short = key.rsplit("-", 1)[1]
            yield f"batch-{short}-{tag}", _then(m("Node", NODE, ("status", "allocatable", key), value),
                                                m("Node", NODE, ("status", "capacity"), {"cpu": "4", key: value}))


def _profile(name: str = "offline", **spec: Any) -> Obj:
    base: Obj = {"namespaceSelector": {"matchLabels": {"team": "batch"}}, "qosLevel": "BE", "batchResources": True}
    return {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
            "metadata": {"name": name}, "spec": {**base, **spec}}


def _with_profile(*extra: Obj) -> Mutation:
    def mutate(objs: list[Obj]) -> None:
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROFILE_NS,
                                                                          "labels": {"team": "batch"}}})
        objs.extend(copy.deepcopy(list(extra)))
    return mutate


def _then(*mutations: Mutation) -> Mutation:
    def mutate(objs: list[Obj]) -> None:
        for one in mutations:
            one(objs)
    return mutate


def profiles() -> Iterator[tuple[str, Mutation]]:
    """ColocationProfiles a careless or hostile admin could store (the webhook refuses them; simulate and plan
    skip them naming why): trailing newlines `$` let through, non-ASCII digits, shapes, sizes."""
    for tag, spec in (
        ("label-key-newline", {"labels": {"app\n": "x"}}),
        ("label-value-newline", {"labels": {"app": "x\n"}}),
        ("annotation-key-newline", {"annotations": {"example.com/k\n": "v"}}),
        ("selector-key-newline", {"selector": {"matchLabels": {"app\n": "x"}}}),
        ("selector-value-newline", {"selector": {"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["x\n"]}]}}),
        ("qos-newline", {"qosLevel": "-1\n"}),
        ("qos-superscript", {"qosLevel": "-\u00b2"}),
        ("qos-arabic-indic", {"qosLevel": "-\u0661"}),
        ("probability-float", {"probability": 50.5}),
        ("probability-string", {"probability": "50"}),
        ("probability-inf", {"probability": float("inf")}),
        ("labels-65", {"labels": {f"k{i}": "v" for i in range(65)}}),
        ("annotation-value-5000", {"annotations": {"example.com/k": "x" * 5000}}),
        ("labels-list", {"labels": ["app=x"]}),
        ("selector-list", {"selector": [{"app": "x"}]}),
        ("spec-unknown-field", {"tolerations": [{"key": "x"}]}),
        ("priority-class-missing", {"priorityClassName": "ghost"}),
    ):
        yield f"profile-{tag}", _with_profile(_profile(**spec))
    yield "profile-spec-list", _with_profile({**_profile(), "spec": [1]})
    yield "profile-name-newline", _with_profile({**_profile(), "metadata": {"name": "offline\n"}})
    never = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "never"},
             "value": -5, "preemptionPolicy": "Never"}
    yield "profile-priority-never", _with_profile(never, _profile(priorityClassName="never"))
    yield "profile-priority-policy-list", _with_profile({**never, "preemptionPolicy": ["Never"]},
                                                       _profile(priorityClassName="never"))
    yield "profile-labels-overwrite-owner-label", _then(
        _with_profile(_profile(labels={"app": "batch"})),
        m("Pod", "crunch", ("metadata", "labels"), {"app": "crunch"}))
    yield "profile-forged-mark", _then(
        _with_profile(_profile()), pod_ann("crunch", "tidemark.io/colocation-profile", "none"),
        pod_ann("crunch", "volcano.sh/qos-level", "LC"))
    yield "profiles-200", _with_profile(*[_profile(f"p{i:03d}", selector={"matchLabels": {"app": f"a{i}"}})
                                          for i in range(200)])


CHECKPOINT_NOW = 1_700_000_000.0


def _checkpoint(buckets: dict[str, Any] | None = None, half_life: Any = 43200.0, **top: Any) -> Obj:
    hist = {"reference": CHECKPOINT_NOW - 60, "buckets": buckets if buckets is not None else {"3": 1.0}}
    doc: Obj = {"kind": "tidemark-usage-profiles", "version": 1, "folded": CHECKPOINT_NOW - 60,
                "half_life": {"cpu": half_life, "memory": 86400.0},
                "node": {"first": CHECKPOINT_NOW - 3600, "last": CHECKPOINT_NOW - 60, "seconds": 3540.0,
                         "cpu": [], "memory": []},
                "pods": {"u1": {"first": CHECKPOINT_NOW - 600, "last": CHECKPOINT_NOW - 60, "cpu": hist,
                                "memory": {"reference": CHECKPOINT_NOW - 60, "buckets": {"1": 1.0}}}}}
    doc.update(top)
    return doc


def _json(doc: Any) -> bytes:
    import json

    return json.dumps(doc).encode()


def checkpoints() -> Iterator[RawCase]:
    """`profiles.json` as a crafted state dir holds it (`tidemark-agent plan --state-dir`; the agent's start reads
    the same loader): each is unusable and read as cold, never raised."""
    yield "valid", _json(_checkpoint())
    for tag, key in (("superscript", "\u00b2"), ("arabic-indic", "\u0663"), ("full-width", "\uff13"),
                     ("newline", "3\n"), ("negative", "-1"), ("huge", "9" * 5000), ("beyond", "100000")):
        yield f"bucket-key-{tag}", _json(_checkpoint({key: 1.0}))
    for tag, hl in (("tiny", 1e-300), ("zero", 0), ("huge", 1e300), ("string", "12h"), ("nan", float("nan"))):
        yield f"half-life-{tag}", _json(_checkpoint(half_life=hl))
    yield "weight-infinite", _json(_checkpoint({"3": float("inf")}))
    yield "weight-negative", _json(_checkpoint({"3": -1.0}))
    yield "reference-future", _json(_checkpoint(folded=CHECKPOINT_NOW + 10 * 86400))
    yield "pods-list", _json(_checkpoint(pods=[1, 2]))
    yield "node-slots-23", _json(_checkpoint(node={"first": 0, "last": 0, "seconds": 0,
                                                   "cpu": [{"reference": 0, "buckets": {}}] * 23, "memory": []}))
    yield "kind-missing", _json({"version": 1})
    yield "not-json", b"{"
    yield "deep-nesting", b"[" * 100_000 + b"]" * 100_000
    yield "binary", bytes(range(256))
    yield "empty", b""


def _trace(**changes: Any) -> Obj:
    doc: Obj = {"kind": "tidemark-capacity-trace", "version": 1, "name": "t", "seed": 1, "start": 1767571200,
                "step": 15, "steps": 2, "node": {"cpu": 4000, "memory": 2**33},
                "system": {"cpu": [100, 100], "memory": [2**30, 2**30]},
                "online": [{"name": "web", "created": -1, "deleted": None, "request": {"cpu": 1000, "memory": 2**30},
                            "cpu": [500, 600], "memory": [2**29, 2**29]}],
                "offline": [{"name": "j", "arrival": 1, "request": {"cpu": 1000, "memory": 2**30}, "memory": 2**29,
                             "work": 60000}]}
    for path, value in changes.items():
        cur: Any = doc
        *parents, last = path.split("__")
        for p in parents:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        cur[last] = value
    return doc


def traces() -> Iterator[RawCase]:
    """Capacity replay traces (`benchmarks/bench_capacity.py --trace`): each malformed, each exit 2 naming it."""
    for tag, changes in (
        ("steps-1e12", {"steps": 1e12}), ("steps-float", {"steps": 2.5}), ("steps-string", {"steps": "2"}),
        ("steps-zero", {"steps": 0}), ("seed-string", {"seed": "abc"}), ("seed-list", {"seed": [1]}),
        ("created-string", {"online__0__created": "x"}), ("created-float", {"online__0__created": 0.5}),
        ("deleted-infinite", {"online__0__deleted": float("inf")}),
        ("arrival-beyond", {"offline__0__arrival": 10**9}), ("online-int", {"online": 5}),
        ("offline-mapping", {"offline": {"a": 1}}), ("node-cpu-nan", {"node": {"cpu": float("nan"), "memory": 1}}),
        ("system-short", {"system": {"cpu": [1], "memory": [1]}}), ("kind-wrong", {"kind": "trace"}),
    ):
        yield tag, _json(_trace(**changes))
    yield "deep-nesting", b"[" * 100_000 + b"]" * 100_000
    yield "not-utf8", b"\xff\xfe{"
    yield "not-json", b"{"



def _alias_levels(depth: int, indent: str) -> str:
    """`x0: &x0 [9 strings]`, then each level an anchored list of nine aliases of the one before."""
    lines = [f'{indent}x0: &x0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{indent}x{i}: &x{i} [" + ",".join([f"*x{i - 1}"] * 9) + "]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


def alias_bomb_cluster(depth: int = 9, where: str = "pod") -> bytes:
    """The valid cluster with a 'billion laughs' (9^depth strings once expanded) in an unknown metadata field
    of the Node (`where="node"`) or of the online pod web, aliased as a field both programs read and check:
    the Node's `metadata.uid` or web's `spec.nodeName` (which must be strings). About 3 KB at depth 9."""
    text = dump(base_cluster()).decode()
    top = f"*x{depth - 1}"
    if where == "node":
        levels = _alias_levels(depth, "    ")
        text = text.replace(f"  name: {NODE}\n", f"  name: {NODE}\n  anchors:\n{levels}  uid: {top}\n", 1)
    else:
        text = text.replace("  name: web\n", f"  name: web\n  anchors:\n{_alias_levels(depth, '    ')}", 1)
        text = text.replace(f"  nodeName: {NODE}\n  schedulerName: volcano\n  containers:\n  - name: app",
                            f"  nodeName: {top}\n  schedulerName: volcano\n  containers:\n  - name: app", 1)
    assert top in text
    return text.encode()


def encodings() -> Iterator[RawCase]:
    valid = dump(base_cluster())
    yield "binary-random", bytes(range(256)) * 4
    yield "latin1", valid.replace(b"shop", "sh\xf6p".encode("latin-1"))
    yield "utf16", valid.decode().encode("utf-16")
    yield "utf8-bom", b"\xef\xbb\xbf" + valid
    yield "nul-bytes", valid.replace(b"shop", b"sh\x00p")
    yield "truncated", valid[: len(valid) // 2]
    yield "empty", b""
    yield "only-separators", b"---\n---\n---\n"
    yield "tabs", valid.replace(b"  ", b"\t")
    yield "yaml-anchor-bomb", (
        b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        b"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    )
    yield "python-tag", b"!!python/object/apply:os.system ['echo pwned']\n"
    yield "yaml-timestamp-name", valid.replace(b"name: web", b"name: 2024-01-01")
    yield "duplicate-keys", valid.replace(b"kind: Node\n", b"kind: Node\nkind: Pod\n", 1)
    yield "deep-nesting", b"[" * 5000 + b"]" * 5000
    yield "surrogates", valid.replace(b"shop", b"sh\xed\xa0\x80p")
    yield "control-chars", valid.replace(b"shop", b"sh\x07p")
    # aliases: bombs (9^9 strings once expanded, in a field both programs check), a recursive one, and
    # anchors well within the budget (a valid file)
    yield "alias-bomb-pod", alias_bomb_cluster(9, "pod")
    yield "alias-bomb-node", alias_bomb_cluster(9, "node")
    yield "alias-recursive", valid.replace(b"  name: web\n", b"  name: web\n  loop: &loop [1, *loop]\n", 1)
    yield "aliases-within-budget", valid.replace(
        b"      requests:\n        cpu: 500m\n        memory: 1Gi\n",
        b"      requests: &small\n        cpu: 500m\n        memory: 1Gi\n      limits: *small\n", 1)
    # a key given twice: last-one-wins made the offline pod online
    yield "duplicate-annotation-key", valid.replace(b"    volcano.sh/qos-level: BE\n",
                                                    b"    volcano.sh/qos-level: BE\n    volcano.sh/qos-level: '2'\n", 1)
    yield "duplicate-key-in-a-list-item", valid.replace(b"  - name: app\n", b"  - name: app\n    name: app2\n", 1)
    # YAML 1.1 reads these unquoted annotation values as numbers or booleans (010 is 8): not strings
    watermark = b"    volcano.sh/oversubscription-memory: '0'\n"
    for tag, raw in (("octal", b"010"), ("hex", b"0x50"), ("underscore", b"1_0"), ("yes", b"yes")):
        yield f"annotation-{tag}-unquoted", valid.replace(
            watermark, watermark + b"    volcano.sh/evicting-cpu-high-watermark: " + raw + b"\n", 1)


def lists() -> Iterator[RawCase]:
    objs = base_cluster()
    yield "list-items-int", dump([{"apiVersion": "v1", "kind": "List", "items": 5}])
    yield "list-items-string", dump([{"apiVersion": "v1", "kind": "List", "items": "pods"}])
    yield "list-items-mapping", dump([{"apiVersion": "v1", "kind": "List", "items": {"a": 1}}])
    yield "list-items-null", dump([{"apiVersion": "v1", "kind": "List", "items": None}])
    yield "list-items-scalars", dump([{"apiVersion": "v1", "kind": "List", "items": [1, "x", None]}])
    yield "list-of-lists", dump([{"apiVersion": "v1", "kind": "List", "items": [{"kind": "List", "items": objs}]}])
    yield "podlist-items-int", dump([{"apiVersion": "v1", "kind": "PodList", "items": 5}])
    yield "list-valid", dump([{"apiVersion": "v1", "kind": "List", "items": objs}])
    yield "top-level-sequence", yaml.safe_dump(objs).encode()
    yield "top-level-scalar", b"5\n"
    yield "top-level-string", b"hello\n"
    yield "list-no-items", dump([{"apiVersion": "v1", "kind": "List"}])
    yield "list-kind-int", dump([{"apiVersion": "v1", "kind": 5, "items": objs}])
    yield "list-nested-items-int", dump([{"kind": "List", "items": [{"kind": "List", "items": 7}]}])
    yield "no-node", dump([o for o in objs if o["kind"] != "Node"])


_ONE_PLUGIN = 'actions: "allocate"\ntiers:\n- plugins:\n  - name: '
SCHEDULER_CONFS: dict[str, str] = {
    "actions-int": "actions: 5\n",
    "actions-unknown": 'actions: "allocate, teleport"\ntiers: []\n',
    "tiers-mapping": 'actions: "allocate"\ntiers: {a: 1}\n',
    "tiers-string": 'actions: "allocate"\ntiers: "x"\n',
    "plugins-int": 'actions: "allocate"\ntiers:\n- plugins: 5\n',
    "plugin-name-list": 'actions: "allocate"\ntiers:\n- plugins:\n  - name: [gang]\n',
    "plugin-arguments-list": 'actions: "allocate"\ntiers:\n- plugins:\n  - name: binpack\n    arguments: [1]\n',
    "binpack-weight-huge": _ONE_PLUGIN + "binpack\n    arguments: {binpack.weight: " + HUGE + "}\n",
    "nodeorder-weight-1e400": _ONE_PLUGIN + "nodeorder\n    arguments: {leastrequested.weight: 1e400}\n",
    "binpack-weight-nan": _ONE_PLUGIN + "binpack\n    arguments: {binpack.cpu: .nan}\n",
    "binary": "\x00\x01\x02",
    "empty": "",
    "scalar": "42\n",
    "configurations-int": 'actions: "allocate"\ntiers: []\nconfigurations: 3\n',
    "enable-flag-string": 'actions: "allocate"\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: "perhaps"\n',
    "duplicate-key": 'actions: "allocate"\nactions: "allocate, backfill"\ntiers: []\n',
    "alias-bomb": "x: " + _alias_levels(9, "  ").replace("  x0:", "\n  x0:", 1) + "actions: *x8\n",
}

AGENT_CONFIGS: dict[str, str] = {
    "period-huge": "sampler:\n  period: " + HUGE + "s\n",
    "period-1e400": "sampler:\n  period: 1e400\n",
    "ratio-nan": "capacity:\n  ratio:\n    cpu: .nan\n",
    "ratio-inf": "capacity:\n  ratio:\n    cpu: .inf\n",
    "reserve-1e400": "capacity:\n  reserve:\n    cpu: 1e400\n",
    "reserve-list": "capacity:\n  reserve: [1]\n",
    "sampler-list": "sampler: [1, 2]\n",
    "top-level-list": "- 1\n- 2\n",
    "binary": "\x00\xff",
    "consecutive-huge": "eviction:\n  consecutive: " + HUGE + "\n",
    "unknown-key": "samplr: {}\n",
    "overrides-int": "overrides: 5\n",
    "duplicate-key": "sampler:\n  period: 1s\nsampler:\n  period: 5s\n",
    "alias-bomb": "x: " + _alias_levels(9, "  ").replace("  x0:", "\n  x0:", 1) + "sampler: *x8\n",
}


def _mutated() -> Iterator[tuple[str, str, bytes]]:
    for family, gen in (("quantities", quantities), ("annotations", annotations), ("shapes", shapes),
                        ("profiles", profiles), ("nodereports", nodereports)):
        for name, mutation in gen():
            objs = base_cluster()
            mutation(objs)
            yield family, name, dump(objs)
    for family, raw in (("encodings", encodings), ("lists", lists)):
        for name, data in raw():
            yield family, name, data


def all_cases() -> Iterator[tuple[str, str, bytes]]:
    """(family, file name, content) of every case."""
    for family, name, data in _mutated():
        yield family, f"{name}.yaml", data
    for name, data in checkpoints():
        yield "checkpoints", f"{name}.json", data
    for name, data in traces():
        yield "traces", f"{name}.json", data
    for name, text in SCHEDULER_CONFS.items():
        yield "confs", f"scheduler-{name}.conf", text.encode("latin-1")
    for name, text in AGENT_CONFIGS.items():
        yield "confs", f"agent-{name}.yaml", text.encode("latin-1")


def write(root: Path = CASES) -> int:
    names: set[str] = set()
    count = 0
    for family, name, data in all_cases():
        key = f"{family}/{name}"
        if key in names:
            raise SystemExit(f"duplicate case {key}")
        names.add(key)
        path = root / family / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        count += 1
    for stale in root.glob("*/*"):
        if f"{stale.parent.name}/{stale.name}" not in names:
            stale.unlink()
    return count


if __name__ == "__main__":
    print(f"{write()} cases written under {CASES}", file=sys.stderr)
