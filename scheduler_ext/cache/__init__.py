"""Cluster state (a file: file_source; API watches: live), the snapshot builder, the plan and its
executor (the only side effects)."""
