# SPDX-License-Identifier: Apache-2.0
"""The layer rules are declared in pyproject.toml (``[tool.importlinter]``) and ``lint-imports``
holds the tree to them: the layers, the kvcore, Textual and click rules. These tests run it on
the tree, plant one broken edge of each kind in a copy to show every contract can fail (an
import inside a function counts), and draw the package graph to show no package imports one
that imports it back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` (no cache written into it)."""
    env = {**os.environ, "PYTHONPATH": str(root)}  # grimp finds the packages through sys.path
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_declared_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory):
    """A copy of the two packages and the contracts, to plant broken edges in."""
    root = tmp_path_factory.mktemp("tree")
    for package in ("kvcore", "kvviz"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(("module", "planted", "contract"), [
    ("kvviz/core/session.py", "def f():\n    from kvviz.ui import themes\n", "layers"),
    ("kvviz/watch/forest.py", "from kvviz.compare import engine\n", "layers"),  # features are independent
    ("kvviz/teach/course.py", "def f():\n    from kvviz.explore import app\n", "layers"),
    ("kvviz/backends/registry.py", "def f():\n    from kvviz.core import session\n", "layers"),
    ("kvcore/trie.py", "def f():\n    import rich\n", "kvcore imports only the standard library"),
    ("kvviz/trace/replay.py", "def f():\n    import textual.app\n", "Textual only in the UI modules"),
    ("kvviz/watch/timeline.py", "import click\n", "click only in the command modules"),
])
def test_each_contract_catches_an_edge_planted_in_a_copy(tree_copy, module, planted, contract):
    path = tree_copy / module
    original = path.read_text(encoding="utf-8")
    path.write_text(original + "\n\n" + planted, encoding="utf-8")
    try:
        result = lint(tree_copy)
    finally:
        path.write_text(original, encoding="utf-8")
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout


def package_graph() -> dict[str, set[str]]:
    """``{kvviz subpackage: the kvviz subpackages it imports}`` (direct imports, in functions too)."""
    graph = grimp.build_graph("kvviz", cache_dir=None)
    packages = sorted({m.split(".")[1] for m in graph.modules if m.count(".") >= 1})
    edges: dict[str, set[str]] = {p: set() for p in packages}
    for importer in packages:
        for imported in packages:
            if importer != imported and graph.direct_import_exists(
                    importer=f"kvviz.{importer}", imported=f"kvviz.{imported}", as_packages=True):
                edges[importer].add(imported)
    return edges


def test_no_package_imports_one_that_imports_it_back():
    graph = package_graph()
    assert {"core", "backends", "ui", "report", "explore", "teach", "watch", "compare", "trace"} <= set(graph)
    assert {"core", "backends"} <= graph["watch"]  # the graph has edges: it was read
    both_ways = sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph[b])
    assert both_ways == []
