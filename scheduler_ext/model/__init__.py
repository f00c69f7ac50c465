"""The pure translation between Kubernetes objects and the scheduler's model (no I/O).

- `snapshot`: objects into a `ClusterInfo` (`build_cluster`), memoised per object.
- `incremental`: the same model kept current from watch deltas (equal to a rebuild, tested so).
- `plan`: a closed session into the writes `run` applies (binds, evictions, PodGroup status).

`scheduler_ext.cache` keeps the live I/O (watches, the executor); `simulate` and `run` both feed
this package.
"""
