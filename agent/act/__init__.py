"""Executors: the only code of the agent with side effects (docs/design.md, "House style" 1 and 7).

- `statedir`: the state directory (`--state-dir`): an exclusive lock, the journal of original knob
  values, the first-seen qos-level of every pod, the restore handshake; every file is written
  atomically (temp file, fsync, rename, fsync of the directory).
- `cgroup_writer`: cgroup knob and `/proc/<pid>/oom_score_adj` writes: validate, skip no-ops, order
  safely, journal the original before the first change, restore only what still holds our value.
- `node_writer`: Node annotations (merge patch), the evicting taint (a resourceVersion-guarded patch
  that keeps other taints), `kubernetes.io/batch-*` in the Node status (status merge patch).
- `evictor`: the Eviction API, outcomes as values (a PodDisruptionBudget refusal is not an error).

Decision modules never import this package (the import-linter contract `decisions-pure` in pyproject.toml,
proved live by tests/unit/test_import_contracts.py).
"""
