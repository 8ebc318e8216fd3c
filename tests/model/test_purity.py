# SPDX-License-Identifier: Apache-2.0
"""The pure part of kvviz never imports textual: the model, the exports and the CLI can run
(and be tested) without the terminal UI. Checked in a fresh interpreter, where sys.modules
shows everything an import pulled in."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def top_level_modules_after(imports: str) -> set[str]:
    code = f"import json, sys; {imports}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(result.stdout)}


def test_the_model_exports_and_cli_do_not_import_textual():
    modules = top_level_modules_after("import kvviz.model.session, kvviz.model.why, kvviz.export.bundle, kvviz.cli")
    assert "kvviz" in modules and "kvcore" in modules  # the imports did run
    assert "textual" not in modules


def test_the_model_and_the_bundle_need_nothing_but_kvcore_and_the_standard_library():
    modules = top_level_modules_after(
        "import kvviz.model.session, kvviz.model.why, kvviz.model.diff, kvviz.model.narrate, "
        "kvviz.model.expect, kvviz.export.bundle")
    foreign = {m for m in modules - set(sys.stdlib_module_names) if not m.startswith("_")}
    assert foreign == {"kvviz", "kvcore"}


def test_writing_every_text_export_does_not_import_textual():
    modules = top_level_modules_after(
        "from kvviz.model.scenario import parse_scenario, SCENARIO_EXAMPLE; "
        "from kvviz.model.session import Session; from kvviz.export import render_export; "
        "s = Session.from_scenario(parse_scenario(SCENARIO_EXAMPLE)); "
        "[render_export(s, 7, x) for x in ('.json', '.md', '.txt')]")
    assert "rich" in modules  # the .txt export renders with Rich
    assert "textual" not in modules
