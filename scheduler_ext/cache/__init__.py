"""Cluster state sources (a file today, API watches later), the snapshot builder and side effects."""
