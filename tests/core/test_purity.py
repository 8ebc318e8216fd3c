# SPDX-License-Identifier: Apache-2.0
"""kvcore imports only the standard library; kvviz's model never imports textual."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(import_line: str) -> set[str]:
    code = f"import sys; {import_line}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_kvcore_imports_only_the_standard_library():
    modules = _modules_after("import kvcore, kvcore.events, kvcore.invariants")
    top = {m.split(".")[0] for m in modules}
    foreign = {m for m in top if m not in sys.stdlib_module_names and m not in {"kvcore", "__main__"}
               and not m.startswith("_")}
    assert foreign == set()
    assert "textual" not in top and "rich" not in top and "kvviz" not in top
