"""Every shell block of docs/install.md is run by a test (no root needed for this check).

`<!-- run: STEP -->` blocks are executed by test_install.py (its `STEPS` must be exactly the doc's
steps); `<!-- tested: FILE::NAME reason -->` names a test (or a real-node method) that exists and runs
the block; `<!-- not run: REASON -->` needs a reason and stays the exception (a registry push: no
registry on the test machine).
"""

from __future__ import annotations

import re

from tests.integration.install import test_install
from tests.integration.install.doc import REPO, blocks

MAX_NOT_RUN = 1


def test_every_shell_block_of_the_install_doc_has_a_marker() -> None:
    found = blocks()
    assert found, "docs/install.md has no ```sh blocks"
    unmarked = [b.line for b in found if not b.kind]
    assert not unmarked, f"docs/install.md: ```sh blocks without a run/tested/not run marker at lines {unmarked}"


def test_the_run_steps_are_the_ones_the_install_test_executes() -> None:
    steps = [b.arg for b in blocks() if b.kind == "run"]
    assert len(steps) == len(set(steps)), f"a step marked twice: {steps}"
    assert set(steps) == set(test_install.STEPS), (steps, test_install.STEPS)


def test_tested_markers_name_existing_tests() -> None:
    for b in blocks():
        if b.kind != "tested":
            continue
        m = re.match(r"(\S+\.py)::(\w+)", b.arg)
        assert m, f"line {b.line}: `tested:` needs FILE::TEST, got {b.arg!r}"
        path = REPO / m.group(1)
        assert path.is_file(), f"line {b.line}: {path} does not exist"
        assert re.search(rf"^\s*def {m.group(2)}\(", path.read_text(), re.M), f"line {b.line}: no {m.group(2)}"


def test_not_run_blocks_say_why_and_stay_few() -> None:
    not_run = [b for b in blocks() if b.kind == "not run"]
    assert all(len(b.arg) > 20 for b in not_run), [b.arg for b in not_run]
    assert len(not_run) <= MAX_NOT_RUN, [b.line for b in not_run]


def test_the_marker_parser_sees_markers_and_their_absence() -> None:
    text = "<!-- run: a -->\n```sh\necho a\n```\n\n```sh\necho b\n```\n<!-- not run: because -->\n```sh\nc\n```\n"
    got = [(b.kind, b.arg, b.code) for b in blocks(text)]
    assert got == [("run", "a", "echo a\n"), ("", "", "echo b\n"), ("not run", "because", "c\n")]
