"""binpack: prefer nodes that are already full, to leave whole nodes free (Volcano's binpack.go).

score = weight * 100 * sum_r(w_r * (used_r + request_r) / allocatable_r) / sum_r(w_r) over the
resources the task requests that have a weight (cpu, memory, and `binpack.resources`); a node where
a requested resource would overflow scores 0. Computed for all candidate nodes at once.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from scheduler_ext.api.resource import RES_CPU, RES_MEMORY
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session

WEIGHT: Final = "binpack.weight"
CPU: Final = "binpack.cpu"
MEMORY: Final = "binpack.memory"
RESOURCES: Final = "binpack.resources"
RESOURCES_PREFIX: Final = "binpack.resources."
MAX_NODE_SCORE: Final = 100.0
#: up to this many nodes are scored in plain Python (cheaper than numpy for tiny arrays)
SMALL: Final = 8


class BinpackPlugin(Plugin):
    name = "binpack"

    def __init__(self, arguments: Arguments) -> None:
        self.weight = arguments.get_int(WEIGHT, 1)
        cpu = arguments.get_int(CPU, 1)
        mem = arguments.get_int(MEMORY, 1)
        self.resources: dict[str, int] = {}
        for raw in arguments.get_str(RESOURCES, "").split(","):
            name = raw.strip()
            if not name:
                continue
            w = arguments.get_int(RESOURCES_PREFIX + name, 1)
            self.resources[name] = w if w >= 0 else 1
        self.resources[RES_CPU] = cpu if cpu >= 0 else 1
        self.resources[RES_MEMORY] = mem if mem >= 0 else 1

    def on_session_open(self, ssn: Session) -> None:
        if self.weight == 0:
            return
        table = ssn.table

        def terms(task: TaskInfo) -> list[tuple[int, int, float]]:
            """(column, weight, request) for the requested resources binpack weighs."""
            hit = task.cache.get("binpack.terms")
            if hit is None:
                hit = []
                for rn in task.resreq.resource_names():
                    col = table.dim_index.get(rn)
                    w = self.resources.get(rn)
                    request = task.resreq.get(rn)
                    if col is None or w is None or request == 0:
                        continue
                    hit.append((col, w, request))
                task.cache["binpack.terms"] = hit
            return hit  # type: ignore[no-any-return]

        def score_one(task: TaskInfo, i: int) -> float:
            total = 0.0
            weight_sum = 0
            for col, w, request in terms(task):
                alloc = float(table.allocatable[i, col])
                if alloc != 0 and w != 0:
                    used_final = float(table.used[i, col]) + request
                    if used_final > alloc:
                        return 0.0
                    total += used_final * w / alloc
                weight_sum += w
            if weight_sum > 0:
                total /= weight_sum
            return total * MAX_NODE_SCORE * self.weight

        def score(task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
            if len(nodes) <= SMALL:
                return np.array([score_one(task, int(i)) for i in nodes], dtype=float)
            total = np.zeros(len(nodes))
            weight_sum = 0
            failed = np.zeros(len(nodes), dtype=bool)
            for col, w, request in terms(task):
                alloc = table.allocatable[nodes, col]
                used_final = table.used[nodes, col] + request
                if w != 0:
                    safe = np.where(alloc == 0, 1.0, alloc)
                    failed |= (used_final > alloc) & (alloc != 0)
                    total += np.where(alloc == 0, 0.0, used_final * w / safe)
                weight_sum += w
            if weight_sum > 0:
                total /= weight_sum
            total *= MAX_NODE_SCORE * self.weight
            total[failed] = 0.0
            return total

        ssn.add_vector_node_order_fn(self.name, score, node_local=True)


SPEC = PluginSpec(
    name="binpack",
    build=BinpackPlugin,
    arguments=(
        ArgSpec(WEIGHT, "int", 1, "weight of the binpack score in the node order sum"),
        ArgSpec(CPU, "int", 1, "weight of cpu within the binpack score"),
        ArgSpec(MEMORY, "int", 1, "weight of memory within the binpack score"),
        ArgSpec(RESOURCES, "str", "", "other resources to pack, comma separated (e.g. nvidia.com/gpu)"),
        ArgSpec(RESOURCES_PREFIX, "int", 1, "weight of a resource listed in binpack.resources", prefix=True),
    ),
    doc="Prefer fuller nodes.",
)
