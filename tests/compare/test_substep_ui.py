# SPDX-License-Identifier: Apache-2.0
"""The UI side of bundles that point at a moment: open inside the op, export from inside it."""

from __future__ import annotations

import asyncio
import json

from kvviz.core.demos import load_demo
from kvviz.report.bundle import open_bundle
from kvviz.core.session import Session
from kvviz.explore.app import make_app


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_app_opens_inside_the_op_at_the_substep_a_bundle_points_at():
    session = Session.from_scenario(load_demo("lru"))

    async def scenario():
        app = make_app(session, 3, substep=1, animations=False, cursor_blink=False, play_timer=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            return app.step, app.substep

    assert run(scenario()) == (3, 1)


def test_exporting_from_inside_an_op_records_the_substep(tmp_path):
    session = Session.from_scenario(load_demo("lru"))

    async def scenario():
        app = make_app(session, 3, export_dir=tmp_path, animations=False, cursor_blink=False, play_timer=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.show_substep(3, 2)
            await pilot.pause()
            return app.export_step()

    written = run(scenario())
    bundle = next(p for p in written if p.suffix == ".json")
    assert bundle.name.endswith("-step3-sub3.json")
    data = json.loads(bundle.read_text())
    assert data["substep"]["index"] == 2
    assert open_bundle(bundle).substep == 2
    markdown = next(p for p in written if p.suffix == ".md").read_text()
    assert "At sub-step 3 of" in markdown
    svg = next(p for p in written if p.suffix == ".svg").read_text()
    assert "sub-step&#160;3/5&#160;tick" in svg  # the title, spaces as Rich writes them
