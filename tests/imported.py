# SPDX-License-Identifier: Apache-2.0
"""What an import pulls in, seen from a fresh interpreter: the purity tests of kvcore
(tests/kvcore/test_purity.py), the model (tests/layers/test_purity.py) and the pseudo-code
(tests/core/test_pseudocode.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def top_level_modules_after(imports: str) -> set[str]:
    """The top-level modules that running ``imports`` in a fresh interpreter (in the checkout)
    adds to those the interpreter loaded at its start. Those were not pulled in by any import
    of ours: ``site``, and whatever the installation hooks in (Debian's python3 loads a
    ``sitecustomize``, which made these tests fail in a venv made from it)."""
    code = (f"import sys; _start = set(sys.modules); {imports}; _added = sorted(set(sys.modules) - _start); "
            "import json; print(json.dumps(_added))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(result.stdout)}


def foreign_modules_after(imports: str) -> set[str]:
    """:func:`top_level_modules_after` outside the standard library (private ``_`` modules aside)."""
    return {m for m in top_level_modules_after(imports) - set(sys.stdlib_module_names) if not m.startswith("_")}
