"""Hardening round 2, item 9: YAML alias bombs.

A 3 KB cluster file whose anchors nest nine deep (each alias list names the one before nine times: 9^9
strings once expanded) loaded in milliseconds, since PyYAML shares aliased nodes; what blew up was
everything after it that walks the value. Both CLIs put a malformed field into a problem line through
`short_repr`, which `repr()`ed the whole value before cutting it: 60 s and 1.28 GB later both were
still building that string (killed by the test's limits). Now the loader refuses aliases that add
more than a small budget of nodes (and recursive ones), and `short_repr` builds every message from a
bounded excerpt. The CLIs run as subprocesses under an address-space limit and a timeout, so the
test is bounded even against the old code.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz.corpus import alias_bomb_cluster
from tidemark.apis import short_repr
from tidemark.objects import ObjectsError, load_objects
from tidemark.yamlsafe import MAX_ALIAS_NODES, YamlError, load_all

CONF = Path(__file__).resolve().parents[1] / "fuzz" / "full.conf"
LIMIT_BYTES = 1536 * 1024 * 1024


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def _run(argv: list[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=_limit, check=False)
    except subprocess.TimeoutExpired:
        return -1, "timed out", time.monotonic() - start
    return proc.returncode, proc.stderr, time.monotonic() - start


@pytest.mark.parametrize("program", ["tidemark-scheduler", "tidemark-agent"])
def test_a_3kb_alias_bomb_is_refused_at_once(program: str, tmp_path: Path) -> None:
    data = alias_bomb_cluster(depth=9, where="node" if program == "tidemark-agent" else "pod")
    assert len(data) < 3200
    path = tmp_path / "bomb.yaml"
    path.write_bytes(data)
    bindir = Path(sys.executable).parent
    if program == "tidemark-scheduler":
        argv = [str(bindir / program), "simulate", "--conf", str(CONF), "--cluster", str(path)]
    else:
        argv = [str(bindir / program), "plan", "--node-name", "n1", "--cluster", str(path),
                "--proc-root", str(tmp_path), "--cgroup-root", str(tmp_path)]
    rc, err, took = _run(argv)
    assert rc == 2, err[-500:]
    assert "alias" in err and str(path) in err, err[-500:]
    assert "Traceback" not in err
    assert took < 30, took
    assert len(err) < 2000  # one bounded line


class _Trap(list):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        raise AssertionError("short_repr called repr() on the whole value")


def test_short_repr_builds_from_a_bounded_excerpt() -> None:
    leaf: list[object] = _Trap(["lol"] * 9)
    value: list[object] = leaf
    for _ in range(8):  # 9^9 strings once expanded, 9 x 9 list objects in memory
        value = _Trap([value] * 9)
    start = time.perf_counter()
    text = short_repr(value)
    assert time.perf_counter() - start < 0.5
    assert len(text) <= 40 and text.startswith("[[[[")
    assert short_repr("x" * 10**7).endswith("...(10000000 chars)")  # a string still says its length
    assert short_repr({"a": 1}) == "{'a': 1}" and short_repr("1e400") == "'1e400'"
    assert len(short_repr(10**5000)) <= 40  # repr() of a 5000-digit int raises in Python >= 3.11


def test_anchors_within_the_budget_still_load() -> None:
    text = "a: &spec {cpu: '1', memory: 1Gi}\n" + "".join(f"p{i}: *spec\n" for i in range(100))
    (doc,) = load_all(text)
    assert doc["p99"] == {"cpu": "1", "memory": "1Gi"}


def test_aliases_beyond_the_budget_are_refused_with_the_place(tmp_path: Path) -> None:
    text = "a: &a [" + ",".join(["x"] * 1000) + "]\nb: [" + ",".join(["*a"] * (MAX_ALIAS_NODES // 1000 + 2)) + "]\n"
    with pytest.raises(YamlError) as refused:
        load_all(text)
    assert "aliases" in str(refused.value) and refused.value.line == 2
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ObjectsError, match=r"f\.yaml.*line 2.*aliases"):
        load_objects(path)


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(YamlError, match="refers to a node that contains it"):
        load_all("a: &a [1, *a]\n")
    with pytest.raises(YamlError, match="refers to a node that contains it"):
        load_all("a: &a {b: *a}\n")
