# SPDX-License-Identifier: Apache-2.0
"""The licence is shipped and declared, and every source file says which licence it is under."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPDX = "SPDX-License-Identifier: Apache-2.0"


def source_files() -> list[Path]:
    files = [p for d in ("kvcore", "kvviz", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    files += list((ROOT / "kvviz").rglob("*.tcss")) + [ROOT / ".ci" / "run"]
    return sorted(files)


def test_the_licence_text_is_apache_2_and_matches_the_declared_licence():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a stub
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert declared == "Apache-2.0"


def test_every_source_file_carries_an_spdx_header():
    files = source_files()
    assert len(files) > 100  # the walk found the tree
    missing = [str(p.relative_to(ROOT)) for p in files
               if SPDX not in "".join(p.read_text(encoding="utf-8").splitlines(keepends=True)[:3])]
    assert missing == []
