"""The configuration file, hot-reloaded: polled, validated, the last good version kept.

A Kubernetes ConfigMap volume updates by swapping a symlink (`..data`): the file's path stays, its inode
changes. The poll compares (device, inode, size, mtime) of the path (following links) and then the
content, so both an in-place edit and a symlink swap are seen. A new version with errors (unreadable,
not YAML, a value out of range, a bad override selector) is REJECTED as a whole: the last good
version stays in force and the reasons are reported (log, a Warning event on the Node, the
`config_last_reload_successful` metric) once per distinct bad content. Warnings (unknown keys) are
reported and the version is accepted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from agent.config import (
    AgentConfig,
    ConfigDocument,
    Problem,
    errors,
    parse_document,
    parse_text,
    read_text,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reload:
    """The outcome of a poll that saw a new version."""

    accepted: bool
    problems: tuple[Problem, ...]

    def describe(self) -> str:
        return "; ".join(str(p) for p in self.problems)


def parse(text: str | None, read_problems: tuple[Problem, ...]) -> tuple[ConfigDocument | None, tuple[Problem, ...]]:
    """A document, or None with the problems that make it unusable (errors)."""
    if text is None:
        return None, read_problems
    data, problems = parse_text(text)
    if problems:
        return None, problems
    doc, problems = parse_document(data)
    if errors(problems):
        return None, problems
    return doc, problems


class ConfigSource:
    """See the module docstring. Without a path, the defaults (and nothing to poll)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.document = ConfigDocument()
        self.problems: tuple[Problem, ...] = ()
        self.ok = True
        self.last_rejection: str | None = None
        self._signature: tuple[int, int, int, int] | None = None
        self._digest: str | None = None
        self._rejected_digest: str | None = None

    def _stat(self) -> tuple[int, int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def load(self) -> Reload:
        """The first load: the caller refuses to start on errors (exit code 2)."""
        if self.path is None:
            return Reload(True, ())
        self._signature = self._stat()
        text, read_problems = read_text(self.path)
        doc, problems = parse(text, read_problems)
        self._digest = hashlib.sha256(text.encode()).hexdigest() if text is not None else None
        if doc is None:
            self.ok = False
            return Reload(False, problems)
        self.document, self.problems, self.ok = doc, problems, True
        return Reload(True, problems)

    def poll(self) -> Reload | None:
        """None when the file did not change; else whether the new version was accepted, and why not."""
        if self.path is None:
            return None
        signature = self._stat()
        if signature == self._signature and signature is not None:
            return None
        self._signature = signature
        text, read_problems = read_text(self.path)
        digest = hashlib.sha256(text.encode()).hexdigest() if text is not None else None
        if digest is not None and digest == self._digest:
            if self.ok:
                return None  # touched, same content
            self.ok, self._rejected_digest, self.last_rejection = True, None, None
            return Reload(True, self.problems)  # back to the version in force
        if digest is not None and digest == self._rejected_digest:
            return None  # the same bad version: reported already
        doc, problems = parse(text, read_problems)
        if doc is None:
            self.ok = False
            self._rejected_digest = digest
            self.last_rejection = "; ".join(str(p) for p in errors(problems) or problems)
            log.error(
                "configuration %s rejected, keeping the last good one: %s",
                self.path,
                self.last_rejection,
                extra={"config": self.path},
            )
            return Reload(False, problems)
        self.document, self.problems, self.ok = doc, problems, True
        self._digest, self._rejected_digest, self.last_rejection = digest, None, None
        for p in problems:
            log.warning("configuration %s: %s", self.path, p)
        return Reload(True, problems)

    def resolve(self, labels: Mapping[str, str] | None) -> tuple[AgentConfig, tuple[Problem, ...], tuple[str, ...]]:
        return self.document.resolve(labels)
