"""The shell blocks of docs/install.md and their markers (`<!-- run: STEP -->`, `<!-- tested: ... -->`,
`<!-- not run: REASON -->`), read by the install test that runs them and by the check of the markers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "install.md"
BLOCK = re.compile(
    r"(?:^<!--[ \t]*(?P<kind>run|tested|not run):[ \t]*(?P<arg>[^\n]*?)[ \t]*-->[ \t]*\n)?^```sh\n(?P<code>.*?)^```",
    re.S | re.M,
)


@dataclass(frozen=True)
class Block:
    kind: str  # "run", "tested", "not run" or "" (no marker)
    arg: str  # the step, the test (FILE::TEST and its reason) or the reason
    code: str
    line: int


def blocks(text: str | None = None) -> list[Block]:
    text = DOC.read_text() if text is None else text
    return [
        Block(m["kind"] or "", (m["arg"] or "").strip(), m["code"], text.count("\n", 0, m.start()) + 1)
        for m in BLOCK.finditer(text)
    ]


def step(name: str) -> str:
    """The code of the block marked `<!-- run: name -->` (exactly one)."""
    found = [b.code for b in blocks() if b.kind == "run" and b.arg == name]
    assert len(found) == 1, f"docs/install.md has {len(found)} blocks marked run: {name}"
    return found[0]
