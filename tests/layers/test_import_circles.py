# SPDX-License-Identifier: Apache-2.0
"""No import runs in a circle between kvcore and kvviz modules, read from their ASTs the way
the layer test reads them (imports inside functions and under ``if TYPE_CHECKING`` count: a
type-only circle is still two modules that each need the other).

An edge ``a -> b`` is drawn when ``a`` imports ``b``. ``from p import x`` is an edge to
``p.x`` when that is a module, and to ``p`` only when some name taken is ``p``'s own: so a
submodule's ``from . import code`` does not tie it to its package's ``__init__`` (no exception
is needed for packages re-exporting their submodules), while ``from . import Design`` does.
Every circle fails, named module by module, but the open ones :data:`KNOWN_CIRCLES` lists.
"""

from __future__ import annotations

from pathlib import Path

import ast

ROOT = Path(__file__).resolve().parents[2]


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


def source_files() -> list[Path]:
    return sorted(p for d in ("kvcore", "kvviz") for p in (ROOT / d).rglob("*.py"))


def import_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: the modules among files it imports}``. The layer test's reader counts
    ``from p import x`` as ``p`` and ``p.x``: ``p`` stays an edge unless every name taken from
    it is a submodule (``from . import code`` needs ``code``, not the package's own names)."""
    sources = {module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {}
    for module, path in sorted(sources.items()):
        imported = imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        edges = {target for target in imported if target in sources and target != module}
        for package in sorted(edges):
            names = [t for t in imported if t.rpartition(".")[0] == package]
            if names and all(t in sources for t in names):
                edges.discard(package)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm, iterative),
    its modules sorted; the groups sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


KNOWN_CIRCLES: list[list[str]] = []
"""The circles still open, each named with who is breaking it. The list must be exact: a new
circle fails, and so does a fixed one left listed (strike it here when it is gone)."""


def test_no_import_runs_in_a_circle_between_kvcore_and_kvviz_modules():
    files = source_files()
    graph = import_graph(files)
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100  # the walk found the tree and its edges
    assert circles(graph) == sorted(KNOWN_CIRCLES)


def _tree(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        paths.append(path)
    return paths


def test_a_type_only_circle_is_a_circle(tmp_path):
    files = _tree(tmp_path, {
        "kvviz/core/expect.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .session import Frame\n",
        "kvviz/core/session.py": "from .expect import evaluate\n",
    })
    assert circles(import_graph(files, tmp_path)) == [["kvviz.core.expect", "kvviz.core.session"]]


def test_a_circle_through_a_function_and_a_third_module_is_found(tmp_path):
    files = _tree(tmp_path, {
        "kvviz/report/a.py": "from . import b\n",
        "kvviz/report/b.py": "def f():\n    from .c import x\n",
        "kvviz/report/c.py": "import kvviz.report.a\n",
        "kvviz/report/d.py": "from .a import y\n",
    })
    assert circles(import_graph(files, tmp_path)) == [["kvviz.report.a", "kvviz.report.b", "kvviz.report.c"]]


def test_a_package_re_exporting_its_submodules_is_no_circle_but_a_name_of_its_own_is(tmp_path):
    re_export = _tree(tmp_path / "one", {
        "kvviz/core/designs/__init__.py": "from .hash import DESIGN\n",
        "kvviz/core/designs/hash.py": "from . import code\n",
        "kvviz/core/designs/code.py": "",
    })
    assert circles(import_graph(re_export, tmp_path / "one")) == []
    own_name = _tree(tmp_path / "two", {
        "kvviz/core/designs/__init__.py": "from .hash import DESIGN\nclass Design: ...\n",
        "kvviz/core/words.py": "from .designs import Design\n",
        "kvviz/core/designs/hash.py": "from ..words import count\n",
    })
    assert circles(import_graph(own_name, tmp_path / "two")) == [
        ["kvviz.core.designs", "kvviz.core.designs.hash", "kvviz.core.words"]]
