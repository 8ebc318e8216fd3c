# SPDX-License-Identifier: Apache-2.0
"""Export from the UI (e) and the headless SVG the CLI uses."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvviz.explore.screenshot import screenshot_svg
from kvviz.cli import cli
from kvviz.report.bundle import open_bundle

SIZE = (100, 30)


async def test_e_writes_bundle_markdown_and_svg_of_the_current_step(app_on, small, tmp_path):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("e")
        await pilot.pause()
        stem = "kvviz-lru-eviction-in-a-small-pool-step6"
        for suffix in (".json", ".md", ".svg"):
            assert (tmp_path / f"{stem}{suffix}").is_file(), suffix
        shown = " ".join(str(n.message) for n in app._notifications)
        assert f"{stem}.json" in shown and f"{stem}.svg" in shown, "the paths are shown"
    bundle = json.loads((tmp_path / f"{stem}.json").read_text())
    assert bundle["step"] == 6
    opened = open_bundle(tmp_path / f"{stem}.json")
    assert opened.divergence is None and opened.step == 6
    assert "acquire r3" in (tmp_path / f"{stem}.md").read_text()
    svg = (tmp_path / f"{stem}.svg").read_text()
    assert svg.startswith("<svg") and "step&#160;6/9" in svg


async def test_export_goes_to_the_current_directory_without_an_export_dir(small, tmp_path):
    from kvviz.explore.app import make_app

    app = make_app(small, 2, animations=False, cursor_blink=False)
    async with app.run_test(size=SIZE):
        written = app.export_step()
    assert {p.parent for p in written} == {tmp_path}  # the conftest chdir'ed here


def test_screenshot_svg_renders_a_step_headless(small):
    svg = screenshot_svg(small, 7, size=(80, 24))
    assert svg.startswith("<svg") and "FAILED" in svg


async def test_screenshot_svg_also_works_inside_a_running_event_loop(small):
    svg = screenshot_svg(small, 1, size=(80, 24))
    assert "step&#160;1/9" in svg


def test_kvviz_export_writes_the_same_svg_headless(tmp_path):
    from tests.ui_fixtures import SMALL

    out = tmp_path / "x.svg"
    result = CliRunner().invoke(cli, ["export", str(SMALL), "--step", "6", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<svg")
