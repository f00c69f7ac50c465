"""docs/scheduler.md's configuration reference is generated from the registries: it must be current."""

from __future__ import annotations

from pathlib import Path

from scheduler_ext import reference
from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.plugins.registry import PLUGINS

DOC = Path(__file__).resolve().parents[3] / "docs" / "scheduler.md"


def test_docs_reference_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    stale = "docs/scheduler.md is stale: run python -m scheduler_ext.reference --write docs/scheduler.md"
    assert reference.render() in text, stale


def test_reference_names_every_action_plugin_and_argument() -> None:
    block = reference.render()
    for name, spec in ACTIONS.items():
        assert f"`{name}`" in block
        for a in spec.arguments:
            assert f"`{a.key}" in block
    for name, pspec in PLUGINS.items():
        assert f"`{name}`" in block
        for a in pspec.arguments:
            assert f"`{a.key}" in block
    assert "`enableHierarchy` | hierarchy | false" in block


def test_splice_replaces_only_the_block() -> None:
    doc = f"head\n{reference.BEGIN}\nold\n{reference.END}\ntail\n"
    assert reference.splice(doc, "NEW") == "head\nNEW\ntail\n"
    assert reference.splice("x\n", "NEW") == "x\n\nNEW\n"
