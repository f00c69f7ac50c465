"""Finding and ranking nodes for a task, vectorised (Volcano's util/predicate_helper.go and
util/scheduler_helper.go: PredicateNodes, PrioritizeNodes, SelectBestNodeAndScore).

Node sets are numpy arrays of table indices. The resource fit, batch predicates and vector scores
run over whole arrays; plugins that only have per-node callbacks are called node by node on the
nodes still in the running, in tier order, so the first failing plugin names the reason as in Volcano.
Results that depend only on a task's requests and a node's row (resource fit, node-local scores)
are cached per request shape in a NodeLocalCache and recomputed only for nodes whose row changed
since, so the tasks of one job cost a few array operations each.
Ties between equally scored nodes go to the first node in the session's node order (Volcano picks
at random); results are therefore reproducible.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np

from scheduler_ext.api.node import NodeInfo, NodeTable
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import FitErrors, Status, StatusCode, insufficient_resource_reason

if TYPE_CHECKING:
    from scheduler_ext.framework.session import Session

Mode = Literal["allocate", "preempt"]
_ABORT_CODES = (
    StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
    StatusCode.ERROR,
    StatusCode.SKIP,
    StatusCode.WAIT,
)
BASELINE_PERCENTAGE_OF_NODES_TO_FIND = 50
_NO_ROWS = np.zeros(0, dtype=np.intp)
MIN_RESOURCE = 0.1


class NodeLocalCache:
    """Arrays over all nodes keyed by a shape; rows whose table generation moved are recomputed."""

    def __init__(self, table: NodeTable, max_entries: int = 512) -> None:
        self.table = table
        self.max_entries = max_entries
        self.all = np.arange(table.n, dtype=np.intp)
        self._entries: OrderedDict[object, tuple[np.ndarray, int]] = OrderedDict()
        #: the last changed_since answer: (since, log length, rows); the entries of one shape were last
        #: refreshed together, so the lookups of one task ask the same question several times
        self._stale: tuple[int, int, np.ndarray] = (-1, -1, _NO_ROWS)

    def get(self, key: object, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """compute(indices) -> values for those nodes; returns the up-to-date full array (do not mutate)."""
        table = self.table
        pos = len(table.change_log)
        entry = self._entries.get(key)
        if entry is None:
            values = np.asarray(compute(self.all))
            self._entries[key] = (values, pos)
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            return values
        self._entries.move_to_end(key)
        values, seen = entry
        if seen != pos:
            since, upto, stale = self._stale
            if since != seen or upto != pos:
                stale = table.changed_since(seen)
                self._stale = (seen, pos, stale)
            values[stale] = compute(stale)
            self._entries[key] = (values, pos)
        return values


def resource_shape(task: TaskInfo) -> bytes:
    """A key for everything resource-based about the task (its request vectors)."""
    key = task.cache.get("shape.resources")
    if key is None:
        key = b"|".join(
            (
                task.init_vec.tobytes(),
                task.init_check_cols.tobytes(),
                task.resreq_vec.tobytes(),
                task.kube_vec.tobytes(),
                np.array(task.kube_nonzero).tobytes(),
            )
        )
        task.cache["shape.resources"] = key
    return key  # type: ignore[no-any-return]


def _fits(task: TaskInfo, avail: np.ndarray) -> np.ndarray:
    cols = task.init_check_cols
    req = task.init_vec[cols]
    a = avail[:, cols]
    return np.asarray(((req < a) | (np.abs(req - a) < MIN_RESOURCE)).all(axis=1))


def fit_mask(
    ssn: Session,
    task: TaskInfo,
    base: Literal["idle", "future"],
    headroom: np.ndarray | None,
    headroom_key: object | None = None,
) -> np.ndarray:
    """Over all nodes: `task.InitResreq.LessEqual(node.Idle or node.FutureIdle() (+ headroom), Zero)`.

    headroom is over all nodes (N, D); with a `headroom_key` (node-local headroom) the result is
    cached like the plain fit, otherwise computed afresh.
    """
    table = ssn.table
    arr = table.idle if base == "idle" else table.future_idle
    if headroom is None:
        return ssn.node_cache.get(("fit", base, resource_shape(task)), lambda idx: _fits(task, arr[idx]))
    if headroom_key is None:
        return _fits(task, arr + headroom)
    room = headroom
    return ssn.node_cache.get(
        ("fit", base, resource_shape(task), headroom_key), lambda idx: _fits(task, arr[idx] + room[idx])
    )


def num_feasible_nodes_to_find(ssn: Session, num_all: int) -> int:
    """How many feasible nodes to look for (Volcano's CalculateNumOfFeasibleNodesToFind)."""
    opts = ssn.options
    if num_all <= opts.min_nodes_to_find or opts.percentage_of_nodes_to_find >= 100:
        return num_all
    pct = opts.percentage_of_nodes_to_find
    if pct <= 0:
        pct = BASELINE_PERCENTAGE_OF_NODES_TO_FIND - num_all // 125
        pct = max(pct, opts.min_percentage_of_nodes_to_find)
    return max(num_all * pct // 100, opts.min_nodes_to_find)


def _fails_in_mode(statuses: tuple[Status, ...], mode: Mode) -> bool:
    if mode == "allocate":
        return True
    return any(s.code in _ABORT_CODES for s in statuses)


def _insufficient_groups(
    task: TaskInfo, table: NodeTable, bad: np.ndarray, avail: np.ndarray
) -> list[tuple[np.ndarray, tuple[Status, ...]]]:
    """Group nodes short of resources by the first short dimension (Volcano names only that one)."""
    cols = task.init_check_cols
    req = task.init_vec[cols]
    a = avail[:, cols]
    short = ~((req < a) | (np.abs(req - a) < MIN_RESOURCE))
    first = np.argmax(short, axis=1)
    out: list[tuple[np.ndarray, tuple[Status, ...]]] = []
    for c in np.unique(first):
        idx = bad[first == c]
        out.append((idx, (Status(StatusCode.UNSCHEDULABLE, insufficient_resource_reason([table.dims[cols[c]]])),)))
    return out


class PredicateHelper:
    """Predicate search with Volcano's per-(job, role) error cache: once tasks of a role failed on a
    node, later tasks of that role are not re-checked there within this helper's life."""

    def __init__(self, ssn: Session, enable_error_cache: bool = True) -> None:
        self.ssn = ssn
        self.enable_error_cache = enable_error_cache
        #: job/role -> (failed mask over all nodes, the FitErrors that explain them)
        self._cache: dict[str, tuple[np.ndarray, FitErrors]] = {}

    def predicate_nodes(
        self,
        task: TaskInfo,
        candidates: np.ndarray,
        *,
        resource_fit: bool = False,
        mode: Mode = "allocate",
        headroom: np.ndarray | None = None,
        headroom_key: object | None = None,
    ) -> tuple[np.ndarray, FitErrors]:
        """Indices of the nodes (from `candidates`) where the task passes, and why the others fail.

        resource_fit: check `task.init_resreq` against each node's future idle first (allocate's own
        predicate). headroom: extra room over all nodes (N, D) from Session.fit_headroom.
        """
        ssn = self.ssn
        table = ssn.table
        fe = FitErrors()
        n_all = len(candidates)
        if n_all == 0:
            return candidates, fe
        names = table.names
        use_cache = self.enable_error_cache and bool(task.task_role)
        group = f"{task.job}/{task.task_role}"
        cached = self._cache.get(group) if use_cache else None
        num_to_find = num_feasible_nodes_to_find(ssn, n_all)
        sampling = num_to_find < n_all
        start = ssn.last_processed_node_index % n_all if sampling else 0
        order = np.roll(candidates, -start) if start else candidates
        remaining = order

        if cached is not None:
            failed_before, prev = cached
            hit = failed_before[remaining]
            if hit.any():
                hit_idx = remaining[hit]

                def from_cache(fe_: FitErrors, idx: np.ndarray = hit_idx, prev: FitErrors = prev) -> None:
                    statuses = prev.node_statuses()
                    for i in idx:
                        st = statuses.get(names[int(i)])
                        if st is not None:
                            fe_.set_node_error(names[int(i)], st)

                fe.add_lazy(from_cache)
                remaining = remaining[~hit]

        if resource_fit and len(remaining):
            ok = fit_mask(ssn, task, "future", headroom, headroom_key)
            if remaining is not ssn.all_nodes:
                ok = ok[remaining]
            if not ok.all():
                bad = remaining[~ok]
                avail = table.future_idle[bad] + (headroom[bad] if headroom is not None else 0.0)

                def insufficient(fe_: FitErrors, bad: np.ndarray = bad, avail: np.ndarray = avail) -> None:
                    for idx, sts in _insufficient_groups(task, table, bad, avail):
                        fe_.set_group_indices(idx, names, sts)

                fe.add_lazy(insufficient)
                remaining = remaining[ok]

        for _name, fn, bfn in ssn.predicate_plugins():
            if not len(remaining):
                break
            if bfn is not None:
                res = bfn(task, remaining)
                keep = np.asarray(res.passed, dtype=bool)
                if mode == "preempt":
                    for idx, statuses in res.all_failures():
                        if _fails_in_mode(statuses, mode):
                            fe.set_group_indices(np.asarray(idx), names, statuses)
                        else:
                            keep |= np.isin(remaining, idx)
                    remaining = remaining[keep]
                elif not keep.all():

                    def plugin_failures(fe_: FitErrors, res: object = res) -> None:
                        assert hasattr(res, "all_failures")
                        for idx, statuses in res.all_failures():
                            fe_.set_group_indices(np.asarray(idx), names, statuses)

                    fe.add_lazy(plugin_failures)
                    remaining = remaining[keep]
            else:
                keep_list = []
                for i in remaining:
                    node = ssn.node_list[int(i)]
                    err = fn(task, node)
                    if err is None or not _fails_in_mode(err.statuses, mode):
                        keep_list.append(int(i))
                    else:
                        fe.set_node_error(node.name, err.statuses)
                remaining = np.array(keep_list, dtype=np.intp)

        passing = remaining
        if sampling:
            found = np.flatnonzero(np.isin(order, remaining))
            if len(found) > num_to_find:
                processed = int(found[num_to_find - 1]) + 1
                remaining = order[found[:num_to_find]]
            else:
                processed = n_all
                remaining = order[found]
            ssn.last_processed_node_index = (start + processed) % n_all
        if use_cache and len(passing) < n_all:
            failed = np.zeros(table.n, dtype=bool)
            failed[candidates] = True
            failed[passing] = False
            if cached is not None:
                failed |= cached[0]
            self._cache[group] = (failed, fe)
        return remaining, fe


def score_nodes(ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
    """Total node-order score per node (Volcano's PrioritizeNodes: map+order, reduce, batch, vector)."""
    total = ssn.vector_node_order(task, nodes)
    if ssn.has_scalar_node_order() or ssn.node_reduce_fns:
        infos = [ssn.node_list[int(i)] for i in nodes]
        plugin_lists: dict[str, list[list[object]]] = {}
        for k, node in enumerate(infos):
            map_scores, order = ssn.node_order_map_fn(task, node)
            total[k] += order
            for plugin, s in map_scores.items():
                plugin_lists.setdefault(plugin, []).append([node.name, math.floor(s)])
        reduced = ssn.node_order_reduce_fn(task, plugin_lists)  # type: ignore[arg-type]
        batch = ssn.batch_node_order_fn(task, infos)
        for k, node in enumerate(infos):
            total[k] += reduced.get(node.name, 0.0) + batch.get(node.name, 0.0)
    return total


def select_best_node(ssn: Session, task: TaskInfo, nodes: np.ndarray) -> tuple[NodeInfo | None, float]:
    """The best-scored node (BestNodeFn first, if any plugin has one); ties go to the earliest node."""
    if len(nodes) == 0:
        return None, 0.0
    if len(nodes) == 1:
        return ssn.node_list[int(nodes[0])], 0.0
    scores = score_nodes(ssn, task, nodes)
    if ssn.best_node_fns:
        by_score: dict[float, list[NodeInfo]] = {}
        for i, s in zip(nodes, scores):
            by_score.setdefault(float(s), []).append(ssn.node_list[int(i)])
        best = ssn.best_node_fn(task, by_score)
        if best is not None:
            return best, 0.0
    k = int(np.argmax(scores))
    return ssn.node_list[int(nodes[k])], float(scores[k])
