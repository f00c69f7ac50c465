"""The digest of a real node's diagnostics (tests/fixtures/realnode.py, `digest`): what the end of a CI run's
output shows of a failed real-node test. It must keep the agent pods' restart line and the lines that say why a
container went away, and drop the rest."""

from __future__ import annotations

from tests.fixtures.realnode import digest

DIAGNOSTICS = """NAME READY STATUS RESTARTS AGE
tidemark-agent-x 1/1 Running 1 9m
agent pods (name restarts last-reason last-exit last-finished):
tidemark-agent-x 1 Error 1 2026-11-30T08:00:00Z
--- tidemark-system events (last 20)
2m Normal Pulled pod/tidemark-agent-x Container image already present
2m Warning Unhealthy pod/tidemark-agent-x Liveness probe failed: context deadline exceeded
2m Normal Killing pod/tidemark-agent-x Container agent failed liveness probe, will be restarted
--- logs tidemark-agent-x (tail 80)
I cycle ok
I cycle ok
--- previous logs tidemark-agent-x (tail 40)
Traceback (most recent call last):
ValueError: bad
"""


def test_the_digest_keeps_the_restart_line_and_the_reasons_and_drops_the_rest() -> None:
    got = digest(DIAGNOSTICS)
    assert got[0] == "tidemark-agent-x 1 Error 1 2026-11-30T08:00:00Z"
    assert any("Liveness probe failed" in g for g in got)
    assert any("failed liveness probe, will be restarted" in g for g in got)
    assert "Traceback (most recent call last):" in got
    assert not any("cycle ok" in g or "image already present" in g for g in got)


def test_the_digest_is_bounded() -> None:
    assert len(digest("\n".join(["Warning Unhealthy probe failed"] * 100 + [f"Error {i}" for i in range(50)]))) <= 14
