"""The files `hack/kube-apiserver.sh start` writes, read without importing `kubernetes`
(the test fixture loads this on every pytest run)."""

from __future__ import annotations

from pathlib import Path


def parse_token_file(path: Path) -> dict[str, str]:
    """user -> bearer token, from the token CSV (`token,user,uid[,"groups"]`) the server reads."""
    tokens: dict[str, str] = {}
    for line in path.read_text().splitlines():
        parts = line.split(",", 3)
        if len(parts) >= 3:
            tokens[parts[1]] = parts[0]
    return tokens


def parse_env_file(path: Path) -> dict[str, str]:
    """The `KEY=value` lines `hack/kube-apiserver.sh start` writes (comments skipped)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key and not key.startswith("#"):
            env[key] = value
    return env
