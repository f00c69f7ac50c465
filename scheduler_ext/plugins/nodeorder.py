"""nodeorder: kube-scheduler's scoring plugins, weighted (Volcano's nodeorder.go).

Weights (arguments `<name>.weight`, defaults as Volcano and the seed docs): leastrequested 1,
mostrequested 0, balancedresource 1, nodeaffinity 2, podaffinity 2, tainttoleration 3,
imagelocality 1, podtopologyspread 2, selectorspread 0 (the seed add-on guide's default); a plugin
with weight 0 is off. Each plugin scores 0..100 per node (normalized over the candidate nodes where
kube-scheduler normalizes), times its weight; the sum is this plugin's node-order score. Resource
scores use kube-scheduler's integer arithmetic and its view of node requests (non-zero defaults of
100m CPU / 200Mi for containers without requests in least/most requested). All scores are computed
for the candidate nodes at once.

imagelocality is kube-scheduler's ImageLocality as Volcano's vendored scheduler has it: over the
node's `status.images`, each image of the pod's init and app containers present on the node adds
its size scaled by the share of nodes that have it; the sum, clamped to [23 MiB, 1000 MiB x
containers], maps linearly to 0..100 (not normalized). Image names are matched as kube-scheduler
does (`:latest` appended to a name without a tag).

selectorspread is kube-scheduler's SelectorSpread (Volcano's selectorspread.weight): per node the
count of matching pods in the pod's namespace (not terminating), scored 100 x (max - count) / max
over the candidates, blended 1/3 node and 2/3 zone (`topology.kubernetes.io/region`/`zone`, or the
failure-domain.beta labels) where nodes have zones; skipped for pods with topologySpreadConstraints.
Departure: kube-scheduler takes the selector from the Services, ReplicationControllers, ReplicaSets
and StatefulSets matching the pod, which are not in the snapshot; here the matching pods are those
of the same controller (ownerReference with controller=true), which is what a ReplicaSet's or
StatefulSet's selector selects; pods without a controller score 100 everywhere (an empty selector).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from scheduler_ext.affinity.labels import (
    node_matches_pod_affinity_selector,
    node_selector_term_matches,
    pod_tolerations,
    preferred_node_affinity,
    shape_key,
    tolerates_taint,
)
from scheduler_ext.affinity.podaffinity import (
    normalize_min_max,
    score_pod_affinity,
    score_topology_spread,
)
from scheduler_ext.api.resource import GPU_RESOURCE_NAME
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session

NODE_AFFINITY_WEIGHT: Final = "nodeaffinity.weight"
POD_AFFINITY_WEIGHT: Final = "podaffinity.weight"
LEAST_REQUESTED_WEIGHT: Final = "leastrequested.weight"
BALANCED_RESOURCE_WEIGHT: Final = "balancedresource.weight"
MOST_REQUESTED_WEIGHT: Final = "mostrequested.weight"
TAINT_TOLERATION_WEIGHT: Final = "tainttoleration.weight"
IMAGE_LOCALITY_WEIGHT: Final = "imagelocality.weight"
POD_TOPOLOGY_SPREAD_WEIGHT: Final = "podtopologyspread.weight"
SELECTOR_SPREAD_WEIGHT: Final = "selectorspread.weight"
MAX_NODE_SCORE: Final = 100
MIB: Final = 1024 * 1024
#: kube-scheduler's imagelocality thresholds (minThreshold, maxContainerThreshold)
IMAGE_MIN_THRESHOLD: Final = 23 * MIB
IMAGE_MAX_CONTAINER_THRESHOLD: Final = 1000 * MIB
#: kube-scheduler's selectorspread zoneWeighting
ZONE_WEIGHTING: Final = 2.0 / 3.0
ZONE_LABELS: Final = (
    ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"),
    ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"),
)
#: up to this many nodes are scored in plain Python (cheaper than numpy for tiny arrays)
SMALL: Final = 8

DEFAULT_WEIGHTS: Final = {
    LEAST_REQUESTED_WEIGHT: 1,
    MOST_REQUESTED_WEIGHT: 0,
    NODE_AFFINITY_WEIGHT: 2,
    POD_AFFINITY_WEIGHT: 2,
    BALANCED_RESOURCE_WEIGHT: 1,
    TAINT_TOLERATION_WEIGHT: 3,
    IMAGE_LOCALITY_WEIGHT: 1,
    POD_TOPOLOGY_SPREAD_WEIGHT: 2,
    SELECTOR_SPREAD_WEIGHT: 0,
}


def normalized_image_name(name: str) -> str:
    """kube-scheduler's normalizedImageName: a name without a tag gets `:latest`."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


def node_images(node: Mapping[str, Any]) -> dict[str, int]:
    """Image name -> size in bytes from a Node's `status.images` (malformed entries skipped)."""
    out: dict[str, int] = {}
    images = (node.get("status") or {}).get("images")
    if not isinstance(images, list):
        return out
    for img in images:
        if not isinstance(img, Mapping):
            continue
        size = img.get("sizeBytes")
        names = img.get("names")
        if not isinstance(names, list) or isinstance(size, bool) or not isinstance(size, int):
            continue
        for n in names:
            if isinstance(n, str) and n:
                out[n] = size
    return out


def pod_images(spec: Mapping[str, Any]) -> list[str]:
    """The normalized images of the pod's init and app containers, in order (one per container)."""
    out: list[str] = []
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping):
                out.append(normalized_image_name(str(c.get("image") or "")))
    return out


def image_priority(sum_scores: int, num_containers: int) -> int:
    """kube-scheduler's calculatePriority."""
    max_threshold = IMAGE_MAX_CONTAINER_THRESHOLD * num_containers
    s = min(max(sum_scores, IMAGE_MIN_THRESHOLD), max_threshold)
    if max_threshold <= IMAGE_MIN_THRESHOLD:
        return 0
    return MAX_NODE_SCORE * (s - IMAGE_MIN_THRESHOLD) // (max_threshold - IMAGE_MIN_THRESHOLD)


def zone_key(labels: Mapping[str, str]) -> str:
    """kube's utilnode.GetZoneKey: region and zone, '' when both are missing."""
    region = labels.get(ZONE_LABELS[0][0]) or labels.get(ZONE_LABELS[0][1]) or ""
    zone = labels.get(ZONE_LABELS[1][0]) or labels.get(ZONE_LABELS[1][1]) or ""
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def selector_spread_scores(counts: list[int], zones: list[str]) -> list[float]:
    """kube-scheduler's SelectorSpread NormalizeScore over the candidates' matching-pod counts."""
    max_node = max(counts, default=0)
    by_zone: dict[str, int] = {}
    for c, z in zip(counts, zones, strict=True):
        if z:
            by_zone[z] = by_zone.get(z, 0) + c
    max_zone = max(by_zone.values(), default=0)
    out: list[float] = []
    for c, z in zip(counts, zones, strict=True):
        f = float(MAX_NODE_SCORE)
        if max_node > 0:
            f = MAX_NODE_SCORE * ((max_node - c) / max_node)
        if by_zone and z:
            zs = float(MAX_NODE_SCORE)
            if max_zone > 0:
                zs = MAX_NODE_SCORE * ((max_zone - by_zone[z]) / max_zone)
            f = f * (1.0 - ZONE_WEIGHTING) + ZONE_WEIGHTING * zs
        out.append(float(int(f)))
    return out


def controller_uid(pod: Mapping[str, Any]) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid"):
            return str(ref["uid"])
    return ""


def normalize(raw: np.ndarray, reverse: bool) -> np.ndarray:
    """kube-scheduler's DefaultNormalizeScore over the candidates (integer arithmetic)."""
    hi = raw.max() if len(raw) else 0.0
    if hi == 0:
        return np.full(len(raw), float(MAX_NODE_SCORE)) if reverse else np.zeros(len(raw))
    v = np.floor(MAX_NODE_SCORE * raw / hi)
    return MAX_NODE_SCORE - v if reverse else v


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Go's int64 division (truncation toward zero) for non-negative operands."""
    return np.where(b == 0, 0, a // np.where(b == 0, 1, b))


class NodeOrderPlugin(Plugin):
    name = "nodeorder"

    def __init__(self, arguments: Arguments) -> None:
        self.weights = {k: arguments.get_int(k, v) for k, v in DEFAULT_WEIGHTS.items()}
        self._affinity_cache: dict[str, np.ndarray] = {}
        self._taint_cache: dict[str, np.ndarray] = {}
        self._image_cache: dict[tuple[str, ...], np.ndarray] = {}
        #: per node: image name -> size; image name -> number of nodes with it (built on first use)
        self._node_images: list[dict[str, int]] | None = None
        self._image_nodes: dict[str, int] = {}
        #: id(raw array) -> whether any node has a non-zero raw score (arrays live as long as the caches)
        self._any: dict[int, bool] = {}

    # --- resource scores -------------------------------------------------------------------------
    def _least_most(self, ssn: Session, task: TaskInfo, nodes: np.ndarray, most: bool) -> np.ndarray:
        table = ssn.table
        total = np.zeros(len(nodes), dtype=np.int64)
        weight_sum = np.zeros(len(nodes), dtype=np.int64)
        w = 1 if most else 50
        for col, pod_req in ((0, task.kube_nonzero[0]), (1, task.kube_nonzero[1])):
            alloc = np.floor(table.allocatable[nodes, col]).astype(np.int64)
            req = np.floor(table.kube_nonzero[nodes, col] + pod_req).astype(np.int64)
            if most:
                req = np.minimum(req, alloc)
                s = _int_div(req * MAX_NODE_SCORE, alloc)
            else:
                s = np.where(req > alloc, 0, _int_div((alloc - req) * MAX_NODE_SCORE, alloc))
            present = alloc != 0
            total += np.where(present, s * w, 0)
            weight_sum += np.where(present, w, 0)
        return _int_div(total, weight_sum).astype(float)

    def _balanced(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        """BalancedAllocation: 100 * (1 - std of requested/allocatable fractions), kube's requests."""
        table = ssn.table
        cols = self._balanced_cols(ssn, task)
        if not cols:
            return np.zeros(len(nodes))  # PreScore skips best-effort pods
        fr = []
        pr = []
        for col, pod_req in cols:
            alloc = np.floor(table.allocatable[nodes, col])
            req = np.floor(table.kube_requested[nodes, col] + pod_req)
            present = alloc != 0
            fr.append(np.where(present, np.minimum(req / np.where(present, alloc, 1.0), 1.0), 0.0))
            pr.append(present)
        count = np.sum(pr, axis=0)
        # two fractions: |a - b| / 2 exactly as kube-scheduler; more: the population std
        std = np.zeros(len(nodes))
        pairs = [(0, 1)] if len(cols) == 2 else [(0, 1), (0, 2), (1, 2)]
        for a, b in pairs:
            only = pr[a] & pr[b] & (count == 2)
            std = np.where(only, np.abs((fr[a] - fr[b]) / 2), std)
        if len(cols) > 2:
            many = count > 2
            if many.any():
                f = np.vstack(fr)
                mean = f.sum(axis=0) / np.where(count == 0, 1, count)
                var = ((f - mean) ** 2).sum(axis=0) / np.where(count == 0, 1, count)
                std = np.where(many, np.sqrt(var), std)
        return np.trunc((1 - std) * MAX_NODE_SCORE)

    # --- node affinity / taints (cached per pod shape over all nodes) ------------------------------
    def _node_affinity_raw(self, ssn: Session, task: TaskInfo) -> np.ndarray:
        spec = task.pod.get("spec") or {}
        terms = preferred_node_affinity(spec)
        key = task.cache.get("nodeorder.affinity")
        if key is None:
            key = task.cache["nodeorder.affinity"] = shape_key(terms)
        hit = self._affinity_cache.get(key)
        if hit is not None:
            return hit
        raw = np.zeros(len(ssn.node_list))
        for node in ssn.node_list:
            s = 0
            for t in terms:
                w = int(t.get("weight") or 0)
                if w == 0:
                    continue
                if node_selector_term_matches(t.get("preference") or {}, node.labels, node.name):
                    s += w
            raw[node.index] = s
        self._affinity_cache[key] = raw
        self._any[id(raw)] = bool(raw.any())
        return raw

    def _taint_raw(self, ssn: Session, task: TaskInfo) -> np.ndarray:
        spec = task.pod.get("spec") or {}
        tolerations = [t for t in pod_tolerations(spec) if (t.get("effect") or "") in ("", "PreferNoSchedule")]
        key = task.cache.get("nodeorder.taints")
        if key is None:
            key = task.cache["nodeorder.taints"] = shape_key(tolerations)
        hit = self._taint_cache.get(key)
        if hit is not None:
            return hit
        raw = np.zeros(len(ssn.node_list))
        for node in ssn.node_list:
            raw[node.index] = sum(
                1
                for taint in node.taints
                if taint.get("effect") == "PreferNoSchedule" and not tolerates_taint(tolerations, taint)
            )
        self._taint_cache[key] = raw
        self._any[id(raw)] = bool(raw.any())
        return raw

    # --- image locality (static per session: node images do not change within it) ---------------
    def _image_scores(self, ssn: Session, task: TaskInfo) -> np.ndarray | None:
        """0..100 per node over all nodes (kube-scheduler's ImageLocality), None when no node has images."""
        if self._node_images is None:
            self._node_images = [node_images(n.node) for n in ssn.node_list]
            counts: dict[str, int] = {}
            for imgs in self._node_images:
                for name in imgs:
                    counts[name] = counts.get(name, 0) + 1
            self._image_nodes = counts
        if not self._image_nodes:
            return None
        images = task.cache.get("nodeorder.images")
        if images is None:
            images = task.cache["nodeorder.images"] = tuple(pod_images(task.pod.get("spec") or {}))
        hit = self._image_cache.get(images)
        if hit is not None:
            return hit
        total_nodes = len(ssn.node_list)
        raw = np.zeros(total_nodes)
        if images and any(i in self._image_nodes for i in images):
            for idx, imgs in enumerate(self._node_images):
                s = 0
                for name in images:
                    size = imgs.get(name)
                    if size is not None:
                        s += int(size * (self._image_nodes[name] / total_nodes))
                raw[idx] = image_priority(s, len(images))
        self._image_cache[images] = raw
        return raw

    # --- selector spread ------------------------------------------------------------------------
    def _selector_spread(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        spec = task.pod.get("spec") or {}
        if spec.get("topologySpreadConstraints"):
            return np.zeros(len(nodes))
        owner = controller_uid(task.pod)
        counts: list[int] = []
        for i in nodes.tolist():
            c = 0
            if owner:
                for t in ssn.table.kube_pods[i].values():
                    if (
                        t.namespace == task.namespace
                        and t.uid != task.uid
                        and not (t.pod.get("metadata") or {}).get("deletionTimestamp")
                        and controller_uid(t.pod) == owner
                    ):
                        c += 1
            counts.append(c)
        zones = [zone_key(ssn.node_list[i].labels) for i in nodes.tolist()]
        return np.array(selector_spread_scores(counts, zones))

    # --- total ----------------------------------------------------------------------------------
    def resource_score(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        """least/most requested and balanced allocation: each node on its own (cached per shape).

        A few nodes (the ones that changed since the last task of this shape) are scored in plain
        Python, which is cheaper than numpy for tiny arrays; tests check both paths agree.
        """
        if len(nodes) <= SMALL:
            return np.array([self.resource_score_one(ssn, task, int(i)) for i in nodes], dtype=float)
        w = self.weights
        total = np.zeros(len(nodes))
        if w[LEAST_REQUESTED_WEIGHT]:
            total += self._least_most(ssn, task, nodes, most=False) * w[LEAST_REQUESTED_WEIGHT]
        if w[MOST_REQUESTED_WEIGHT]:
            total += self._least_most(ssn, task, nodes, most=True) * w[MOST_REQUESTED_WEIGHT]
        if w[BALANCED_RESOURCE_WEIGHT]:
            total += self._balanced(ssn, task, nodes) * w[BALANCED_RESOURCE_WEIGHT]
        return total

    def resource_score_one(self, ssn: Session, task: TaskInfo, i: int) -> float:
        """resource_score for one node, in Python (the same float arithmetic as the numpy path)."""
        w = self.weights
        table = ssn.table
        alloc_row = table.allocatable[i].tolist()
        total = 0.0
        least_w = w[LEAST_REQUESTED_WEIGHT]
        most_w = w[MOST_REQUESTED_WEIGHT]
        if least_w or most_w:
            nz0, nz1 = table.kube_nonzero[i].tolist()
            pairs = (
                (int(alloc_row[0]), int(nz0 + task.kube_nonzero[0])),
                (int(alloc_row[1]), int(nz1 + task.kube_nonzero[1])),
            )
            if least_w:
                acc = wsum = 0
                for alloc, req in pairs:
                    if alloc == 0:
                        continue
                    acc += (0 if req > alloc else (alloc - req) * MAX_NODE_SCORE // alloc) * 50
                    wsum += 50
                total += (acc // wsum if wsum else 0) * least_w
            if most_w:
                acc = wsum = 0
                for alloc, req in pairs:
                    if alloc == 0:
                        continue
                    acc += (min(req, alloc) * MAX_NODE_SCORE // alloc) * 1
                    wsum += 1
                total += (acc // wsum if wsum else 0) * most_w
        if w[BALANCED_RESOURCE_WEIGHT]:
            cols = self._balanced_cols(ssn, task)
            if cols:
                requested = table.kube_requested[i].tolist()
                fractions = []
                for col, pod_req in cols:
                    alloc_f = float(math.floor(alloc_row[col]))
                    if alloc_f == 0:
                        continue
                    req_f = float(math.floor(requested[col] + pod_req))
                    fractions.append(min(req_f / alloc_f, 1.0))
                if len(fractions) == 2:
                    std = abs((fractions[0] - fractions[1]) / 2)
                elif len(fractions) > 2:
                    mean = sum(fractions) / len(fractions)
                    std = float(np.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions)))
                else:
                    std = 0.0
                total += float(math.trunc((1 - std) * MAX_NODE_SCORE)) * w[BALANCED_RESOURCE_WEIGHT]
        return total

    def _balanced_cols(self, ssn: Session, task: TaskInfo) -> list[tuple[int, float]]:
        """(column, pod request) pairs BalancedAllocation looks at; empty for best-effort pods."""
        hit = task.cache.get("nodeorder.balanced")
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        hit = task.cache["nodeorder.balanced"] = self._balanced_cols_of(ssn, task)
        return hit

    @staticmethod
    def _balanced_cols_of(ssn: Session, task: TaskInfo) -> list[tuple[int, float]]:
        cols: list[tuple[int, float]] = [(0, task.kube_req.get("cpu", 0.0)), (1, task.kube_req.get("memory", 0.0))]
        gpu_col = ssn.table.dim_index.get(GPU_RESOURCE_NAME)
        gpu_req = task.kube_req.get(GPU_RESOURCE_NAME, 0.0)
        if gpu_col is not None and gpu_req > 0:
            cols.append((gpu_col, gpu_req))
        if all(r == 0 for _, r in cols):
            return []
        return cols

    def score(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        """The scores normalized over the candidate nodes, or depending on other nodes' pods."""
        w = self.weights
        total = np.zeros(len(nodes))
        if w[IMAGE_LOCALITY_WEIGHT]:
            img = self._image_scores(ssn, task)
            if img is not None:
                total += img[nodes] * w[IMAGE_LOCALITY_WEIGHT]
        if w[SELECTOR_SPREAD_WEIGHT]:
            total += self._selector_spread(ssn, task, nodes) * w[SELECTOR_SPREAD_WEIGHT]
        if w[NODE_AFFINITY_WEIGHT]:
            full = self._node_affinity_raw(ssn, task)
            if self._any[id(full)]:
                raw = full[nodes]
                if raw.any():
                    total += normalize(raw, reverse=False) * w[NODE_AFFINITY_WEIGHT]
        if w[TAINT_TOLERATION_WEIGHT]:
            full = self._taint_raw(ssn, task)
            if self._any[id(full)]:
                total += normalize(full[nodes], reverse=True) * w[TAINT_TOLERATION_WEIGHT]
            else:  # no intolerable PreferNoSchedule taint anywhere: every node scores 100
                total += float(MAX_NODE_SCORE * w[TAINT_TOLERATION_WEIGHT])
        node_labels = ssn.table.labels
        if w[POD_AFFINITY_WEIGHT] and (task.has_pod_affinity or ssn.table.affinity_pods):
            idx = [int(i) for i in nodes]
            pa = score_pod_affinity(task, idx, node_labels, ssn.table.kube_pods, ssn.table.affinity_pods.values())
            if pa is not None:
                total += np.array(normalize_min_max(pa)) * w[POD_AFFINITY_WEIGHT]
        if w[POD_TOPOLOGY_SPREAD_WEIGHT] and (task.pod.get("spec") or {}).get("topologySpreadConstraints"):
            spec = task.pod.get("spec") or {}
            idx = [int(i) for i in nodes]
            eligible = [n.index for n in ssn.node_list if node_matches_pod_affinity_selector(spec, n.labels, n.name)]
            ts = score_topology_spread(task, idx, eligible, node_labels, ssn.table.kube_pods)
            if ts is not None:
                total += np.array(ts) * w[POD_TOPOLOGY_SPREAD_WEIGHT]
        return total

    def on_session_open(self, ssn: Session) -> None:
        w = self.weights
        if w[LEAST_REQUESTED_WEIGHT] or w[MOST_REQUESTED_WEIGHT] or w[BALANCED_RESOURCE_WEIGHT]:
            ssn.add_vector_node_order_fn(
                self.name, lambda task, nodes: self.resource_score(ssn, task, nodes), node_local=True
            )
        ssn.add_vector_node_order_fn(self.name, lambda task, nodes: self.score(ssn, task, nodes))

    def on_session_close(self, ssn: Session) -> None:
        self._affinity_cache = {}
        self._taint_cache = {}
        self._image_cache = {}
        self._node_images = None
        self._image_nodes = {}
        self._any = {}


SPEC = PluginSpec(
    name="nodeorder",
    build=NodeOrderPlugin,
    arguments=tuple(
        ArgSpec(k, "int", v, f"weight of the {k.split('.')[0]} score (0 turns it off)")
        for k, v in DEFAULT_WEIGHTS.items()
    ),
    doc="kube-scheduler node scores, weighted.",
)
