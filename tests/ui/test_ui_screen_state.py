# SPDX-License-Identifier: Apache-2.0
"""The main screen's state is reactive: setting it draws, with no action in between (a
feature that sets the position, the selection or play cannot forget a redraw), and the one
cache column titles the main screen and the side-by-side app alike."""

from __future__ import annotations

from kvviz.core.demos import load_demo
from kvviz.compare.engine import SideSpec, run_compare
from kvviz.core.session import Session
from kvviz.core.view import PAGE, Selection
from kvviz.compare.app import make_diff_app
from kvviz.ui.stepping import Position

SIZE = (120, 40)


async def test_setting_the_position_draws_that_step_and_sub_step(app_on, lru):
    app = app_on(lru)
    async with app.run_test(size=SIZE):
        screen = app.main_screen
        screen.position = Position(5)
        assert app.view.frame.index == 5 and "step 5/" in app.timeline.text
        screen.position = Position(5, 1)
        assert app.view.substep is not None and app.view.substep.step.index == 1
        assert app.narration.border_title == "Narration · sub-steps"
        screen.position = Position(10**6, 10**6)
        assert (app.step, app.view.frame.index) == (app.last_step, app.last_step), "clamped to the timeline"
        assert app.substep == len(lru.substeps(app.last_step)) - 1, "and to the op's sub-steps"


async def test_setting_the_selection_marks_it_in_every_view(app_on, small):
    app = app_on(small, step=3)
    async with app.run_test(size=SIZE):
        app.main_screen.selection = Selection(PAGE, 0)
        assert app.view.selection == Selection(PAGE, 0) and 0 in app.view.highlight.pages
        app.main_screen.selection = None
        assert app.view.selection is None and not app.view.highlight.pages


async def test_setting_playing_says_so_in_the_timeline_and_the_screen_class(app_on, small):
    app = app_on(small, step=0)
    async with app.run_test(size=SIZE):
        screen = app.main_screen
        screen.playing = True
        assert screen.has_class("-playing") and "▶ playing" in app.timeline.text
        screen.playing = False
        assert not screen.has_class("-playing") and "‖ paused" in app.timeline.text


async def test_the_main_screen_and_a_compare_title_the_pool_alike(app_on):
    scenario = load_demo("lru")
    app = app_on(Session.from_scenario(scenario), step=3)
    run = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "fifo"))
    compare = make_diff_app(run, 3, animations=False)
    async with app.run_test(size=SIZE):
        main_title = app.pool.border_title
    async with compare.run_test(size=SIZE):
        side_title = compare.widget(compare.sides[0], "pool").border_title
    assert main_title == side_title and " pages × " in main_title
