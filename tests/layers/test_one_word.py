# SPDX-License-Identifier: Apache-2.0
"""One list for one thing: every command option that offers eviction policies offers
kvcore's ``POLICIES``, and every option that offers cache designs offers the registry's
``KVCORE_DESIGNS`` (or a part of it), so a policy or design added once reaches every command."""

from __future__ import annotations

import click

from kvcore import POLICIES
from kvviz.cli import cli
from kvviz.core.designs import KVCORE_DESIGNS


def _options(group: click.Group):
    """(command path, option) for every option of every command below ``group``."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from ((f"{name} {path}", o) for path, o in _options(command))
            continue
        yield from ((name, p) for p in command.params if isinstance(p, click.Option))


def test_every_policy_choice_is_kvcores_list_of_policies():
    offered = {path: tuple(o.type.choices) for path, o in _options(cli)
               if o.name == "policy" and isinstance(o.type, click.Choice)}
    assert offered, "no command offers --policy as a choice"
    assert {path: choices for path, choices in offered.items() if choices != POLICIES} == {}


def test_every_design_choice_is_drawn_from_the_design_registry():
    offered = {path: tuple(o.type.choices) for path, o in _options(cli)
               if o.name in ("kind", "design") and isinstance(o.type, click.Choice)}
    assert offered, "no command offers a design as a choice"
    assert {path: c for path, c in offered.items() if not set(c) <= set(KVCORE_DESIGNS)} == {}


def test_the_apps_quiz_mode_is_never_named_practice_in_code():
    """"practice" is ``kvviz practice`` (the exercises); the app's ``p`` mode is quiz mode: no
    name, attribute, argument or CSS selector of the stepping app or the UI kit says practice."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "kvviz"
    found = []
    for folder in ("explore", "ui"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                        else node.arg if isinstance(node, (ast.arg, ast.keyword)) and node.arg
                        else node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                        else None)
                if name and "practice" in name and not name.startswith("practice_command"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
        for path in sorted((root / folder).rglob("*.tcss")):
            found += [f"{path.relative_to(root)}:{i} {line.strip()}"
                      for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "practice" in line]
    assert found == []
