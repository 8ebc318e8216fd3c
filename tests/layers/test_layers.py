# SPDX-License-Identifier: Apache-2.0
"""The house's layer edges, proved statically: every module's imports are read from its AST,
imports inside functions (and under ``if TYPE_CHECKING``) included, so a lazy import cannot
hide an edge the way it hid ``export/svg.py -> app`` before.

    kvcore                                   imports only the standard library
    kvviz.model / backends / trace / export  never textual, click, kvviz.ui or kvviz.cli
    kvviz.backends                           never kvviz.core.session (the session drives backends)
    kvviz.ui                                 never kvviz.cli (the CLI starts the UI, not the reverse)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PURE = ("kvviz.model", "kvviz.backends", "kvviz.trace", "kvviz.report", "kvviz.core.limits", "kvviz.core.demos", "kvviz.samples")
RULES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    # (importers, what they must not import)
    (PURE, ("textual", "click", "kvviz.ui", "kvviz.cli")),
    (("kvviz.backends",), ("kvviz.core.session",)),
    (("kvviz.ui",), ("kvviz.cli",)),
    # kvviz serve runs the app in the processes it starts: it never loads the UI or the CLI.
    (("kvviz.serve",), ("kvviz.ui", "kvviz.cli", "textual.app", "click")),
    (("kvcore",), ("kvviz", "rich", "textual", "click")),
)


def module_name(path: Path, root: Path = ROOT) -> str:
    """``kvviz/explore/app.py`` -> ``kvviz.explore.app``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` imports, anywhere in it (functions, classes, ``if`` blocks),
    relative imports resolved against ``module``. ``from a import b`` counts as ``a`` and
    ``a.b`` (``b`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations_in(files: list[Path], root: Path = ROOT) -> list[str]:
    """Each broken edge as ``module imports target (rule)``."""
    problems = []
    for path in files:
        module = module_name(path, root)
        imported = imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        for importers, banned in RULES:
            if not any(matches(module, i) for i in importers):
                continue
            for target in sorted(imported):
                for b in banned:
                    if matches(target, b):
                        problems.append(f"{module} imports {target} (no {'/'.join(importers)} module may import {b})")
        if matches(module, "kvcore"):
            for target in sorted(imported):
                top = target.split(".")[0]
                if top and top != "kvcore" and top not in sys.stdlib_module_names:
                    problems.append(f"{module} imports {target} (kvcore imports only the standard library)")
    return sorted(set(problems))


def source_files() -> list[Path]:
    return sorted(p for d in ("kvcore", "kvviz") for p in (ROOT / d).rglob("*.py"))


def test_every_module_keeps_to_its_layer():
    files = source_files()
    assert len(files) > 40  # the walk found the tree
    assert violations_in(files) == []


@pytest.mark.parametrize(("module", "source", "edge"), [
    ("kvviz/report/svg.py", "def f():\n    from ..ui.app import screenshot_svg\n", "kvviz.explore.app"),
    ("kvviz/cli/x.py", "", None),  # the CLI may import anything
    ("kvviz/core/session.py", "def f():\n    import textual.app\n", "textual.app"),
    ("kvviz/trace/replay.py", "class C:\n    def m(self):\n        from kvviz.cli import common\n", "kvviz.cli"),
    ("kvviz/backends/registry.py", "def f():\n    from ..model.session import kvcore_backend\n",
     "kvviz.core.session"),
    ("kvviz/backends/commands.py", "import click\n", "click"),
    ("kvviz/explore/app.py", "def f():\n    from ..cli.common import settle_heap\n", "kvviz.commands"),
    ("kvviz/explore/app.py", "from ..model.session import Session\n", None),  # the UI may read the model
    ("kvcore/trie.py", "def f():\n    import rich\n", "rich"),
    ("kvcore/trie.py", "def f():\n    import numpy\n", "numpy"),
    ("kvcore/trie.py", "import heapq\nfrom .heap import x\n", None),
    ("kvviz/report/__init__.py", "from .bundle import x\nfrom ..ui import screenshot\n", "kvviz.ui"),
    ("kvviz/serve/server.py", "def f():\n    from ..ui.app import make_app\n", "kvviz.explore.app"),
    ("kvviz/serve/server.py", "from textual_serve.server import Server\n", None),  # textual-serve is its engine
])
def test_the_checker_catches_an_edge_even_inside_a_function(tmp_path, module, source, edge):
    path = tmp_path / module
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    found = violations_in([path], tmp_path)
    if edge is None:
        assert found == []
    else:
        assert found and all(f" imports {edge} " in p or f" imports {edge}." in p for p in found[:1]), found


def test_relative_imports_resolve_against_the_package():
    assert "kvviz.explore.app" in imports_of("from ..ui.app import make_app\n", "kvviz.report.svg")
    assert "kvviz.report.bundle" in imports_of("from .bundle import x\n", "kvviz.report", is_package=True)
    assert "kvviz.core.session.Session" in imports_of("from .session import Session\n", "kvviz.core.why")
