# SPDX-License-Identifier: Apache-2.0
"""The tests mirror the code: every folder of ``tests/`` is named after a package of
``kvviz/`` (or the library, or one of the few folders that test the whole project), so a
test is found where its code lives."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Test folders with no ``kvviz/`` package of their name, and why.
WHOLE_PROJECT = {
    "kvcore": "the cache library",
    "layers": "import contracts, licence headers, this layout",
    "install": "the README's commands and the wheel",
    "fuzz": "hypothesis fuzzers of every input",
    "docs": "the documentation site (docs/)",
    "engines": "vLLM and SGLang behind kvviz/backends, in a venv of their own",
}


def test_every_test_folder_is_named_after_a_kvviz_package_or_tests_the_whole_project():
    packages = {p.name for p in (ROOT / "kvviz").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and p.name != "__pycache__" and any(p.glob("test_*.py"))}
    assert folders - packages - set(WHOLE_PROJECT) == set()
    assert set(WHOLE_PROJECT) - folders == set(), "a whole-project folder listed here has gone: drop it"
