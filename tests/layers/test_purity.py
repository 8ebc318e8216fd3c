# SPDX-License-Identifier: Apache-2.0
"""The pure part of kvviz never imports textual: the model, the exports and the CLI can run
(and be tested) without the terminal UI. Checked in a fresh interpreter, where sys.modules
shows everything an import pulled in."""

from tests.imported import foreign_modules_after, top_level_modules_after


def test_the_model_exports_and_cli_do_not_import_textual():
    modules = top_level_modules_after("import kvviz.core.session, kvviz.core.why, kvviz.report.bundle, kvviz.cli")
    assert "kvviz" in modules and "kvcore" in modules  # the imports did run
    assert "textual" not in modules


def test_the_model_and_the_bundle_need_nothing_but_kvcore_and_the_standard_library():
    foreign = foreign_modules_after(
        "import kvviz.core.session, kvviz.core.why, kvviz.core.snapshot_diff, kvviz.core.narrate, "
        "kvviz.core.expect, kvviz.report.bundle")
    assert foreign == {"kvviz", "kvcore"}


def test_writing_every_text_export_does_not_import_textual():
    modules = top_level_modules_after(
        "from kvviz.core.scenario import parse_scenario, SCENARIO_EXAMPLE; "
        "from kvviz.core.session import Session; from kvviz.report import render_export; "
        "s = Session.from_scenario(parse_scenario(SCENARIO_EXAMPLE)); "
        "[render_export(s, 7, x) for x in ('.json', '.md', '.txt')]")
    assert "rich" in modules  # the .txt export renders with Rich
    assert "textual" not in modules
