"""The configuration reference of docs/scheduler.md, rendered from the registries.

The tables are generated from the same ActionSpec/PluginSpec/ArgSpec declarations the conf parser
validates against, so the documentation cannot drift from what the scheduler accepts
(tests/unit/scheduler/test_reference.py fails when docs/scheduler.md is stale; regenerate with
`python -m scheduler_ext.reference --write docs/scheduler.md`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import DEFAULT_FALSE, OPTION_KEYS, UNSUPPORTED_PLUGINS
from scheduler_ext.framework.interface import ArgSpec
from scheduler_ext.plugins.registry import PLUGINS

BEGIN = "<!-- BEGIN GENERATED REFERENCE (python -m scheduler_ext.reference --write docs/scheduler.md) -->"
END = "<!-- END GENERATED REFERENCE -->"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(value: object) -> str:
    if value is None or value == "":
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def _args_table(args: Iterable[ArgSpec]) -> list[str]:
    rows = ["| argument | type | default | meaning |", "|---|---|---|---|"]
    for a in args:
        key = f"`{a.key}*`" if a.prefix else f"`{a.key}`"
        rows.append(f"| {key} | {a.kind} | {_default(a.default)} | {_cell(a.doc)} |")
    return rows


def render() -> str:
    """The generated block: actions, plugins with their arguments, the enable flags, unsupported plugins."""
    out: list[str] = [BEGIN, "", "### Actions", ""]
    out += ["| action | what it does |", "|---|---|"]
    out += [f"| `{name}` | {_cell(spec.doc)} |" for name, spec in ACTIONS.items()]
    for name, spec in ACTIONS.items():
        if spec.arguments:
            out += ["", f"#### `{name}` configurations (`configurations: [{{name: {name}, arguments: ...}}]`)", ""]
            out += _args_table(spec.arguments)
    out += ["", "### Plugins", "", "| plugin | what it does |", "|---|---|"]
    out += [f"| `{name}` | {_cell(pspec.doc)} |" for name, pspec in PLUGINS.items()]
    for name, pspec in PLUGINS.items():
        if pspec.arguments:
            out += ["", f"#### `{name}` arguments", ""]
            out += _args_table(pspec.arguments)
    out += ["", "### Plugin enable flags", ""]
    out += [
        "Every plugin entry accepts these keys (Volcano's spellings, `enable` and `enabled` mixed). Unset flags",
        "are true, as in Volcano, except `enableHierarchy` (false). A flag only matters for a plugin that",
        "registers the matching callback.",
        "",
        "",
    ]
    out[-1:] = ["| key | switches | unset means |", "|---|---|---|"]
    out += [
        f"| `{key}` | {field.replace('_', ' ')} | {'false' if field in DEFAULT_FALSE else 'true'} |"
        for key, field in OPTION_KEYS.items()
    ]
    out += ["", "### Accepted but not yet supported", ""]
    out += [
        "These plugin names are accepted with a warning and have no effect: "
        + ", ".join(f"`{n}`" for n in sorted(UNSUPPORTED_PLUGINS))
        + ". Any other unknown plugin name is skipped with a warning; an unknown action is an error.",
        "",
        END,
    ]
    return "\n".join(out)


def splice(document: str, block: str) -> str:
    """`document` with the text between the markers replaced by `block` (appended when absent)."""
    if BEGIN in document and END in document:
        head, rest = document.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + block + tail
    return document.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--write", metavar="FILE", help="update the generated block of FILE in place")
    ns = ap.parse_args(argv)
    block = render()
    if ns.write:
        path = Path(ns.write)
        path.write_text(splice(path.read_text(encoding="utf-8") if path.exists() else "", block), encoding="utf-8")
    else:
        sys.stdout.write(block + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
