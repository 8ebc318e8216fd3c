# SPDX-License-Identifier: Apache-2.0
"""The command bar: ops typed in the scenario language, completion, inline errors, branching,
and saving the script."""

from __future__ import annotations

from kvviz.core.scenario import parse_scenario_file
from kvviz.ui.screens.branch_screen import BranchScreen
from kvviz.explore.command_bar import complete
from kvviz.ui.screens.prompt_screen import PromptScreen

SIZE = (100, 30)


async def type_command(pilot, text: str, *, key_by_key: bool = False) -> None:
    """``:`` (the binding), the command, then enter (the binding). The text is typed key by key
    where the typing itself is tested, else set as the input's value (what typing ends in: a
    key press per character cost the file most of its 18 s)."""
    await pilot.press("colon")
    if key_by_key:
        await pilot.press(*text)
    else:
        pilot.app.command_bar.input.value = text
        pilot.app.command_bar.input.cursor_position = len(text)
        await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


async def test_a_valid_op_is_applied_at_the_end_and_shown(app_on, small):
    app = app_on(small, step=len(small) - 1)
    before = len(small)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "acquire r9 1..4", key_by_key=True)
        assert len(app.session) == before + 1
        assert app.step == before
        assert app.session.last.op.text == "acquire r9 1..4"
        assert app.command_bar.input.value == "", "the box empties after the op is applied"
        assert "Step 10/10" in app.narration.text


async def test_an_invalid_op_shows_an_inline_error_and_loses_nothing(app_on, small):
    app = app_on(small, step=len(small) - 1)
    before = len(small)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "aquire r9 1..4")
        bar = app.command_bar
        assert bar.error is not None and bar.error.column == 1
        assert "did you mean 'acquire'" in str(bar.query_one("#command-error").render())
        assert bar.input.has_class("-error")
        assert bar.input.value == "aquire r9 1..4", "the typed text stays"
        assert len(app.session) == before, "the timeline is intact"
        await pilot.press("home", "delete", "a", "c")  # fix the typo: the error goes away
        assert bar.error is None and not bar.input.has_class("-error")


async def test_an_error_points_at_its_column(app_on, small):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "release nobody")
        error = app.command_bar.error
        assert error.column == 9
        shown = str(app.command_bar.query_one("#command-error").render())
        assert shown.startswith(" " * 8 + "^ column 9: unknown allocation 'nobody'")


async def test_an_op_that_fails_in_the_cache_is_recorded_as_a_failed_step(app_on, small):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "acquire huge 1..400")
        assert app.session.last.failed
        assert "FAILED" in app.timeline.text
        assert app.session.frame(-1).snapshot == app.session.frame(-2).snapshot, "a failed op changes nothing"


async def test_typing_while_stepped_back_asks_and_branch_drops_the_later_steps(app_on, small):
    app = app_on(small, step=3)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "release r2")
        assert isinstance(app.screen, BranchScreen)
        await pilot.press("b")
        await pilot.pause()
        assert len(app.session) == 5, "steps 4.. were dropped, the new op is step 4"
        assert app.step == 4
        assert app.session.last.op.text == "release r2"


async def test_cancelling_the_branch_question_keeps_the_timeline_and_the_text(app_on, small):
    app = app_on(small, step=3)
    before = len(small)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "release r2")
        await pilot.press("escape")
        await pilot.pause()
        assert len(app.session) == before and app.step == 3
        assert app.command_bar.input.value == "release r2"


async def test_append_from_the_branch_question_adds_the_op_at_the_end(app_on, small):
    app = app_on(small, step=3)
    before = len(small)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "acquire x 1..4")
        await pilot.press("a")
        await pilot.pause()
        assert len(app.session) == before + 1
        assert app.step == before
        assert app.session.summaries[3].op_text == small.summaries[3].op_text, "earlier steps are kept"


def test_completion_offers_op_names_live_names_and_a_fresh_name():
    live = ["r1", "r2", "big"]
    assert complete("acq", live) == "acquire "
    assert complete("rel", live) == "release "
    assert complete("release b", live) == "release big"
    assert complete("publish r", live) == "publish r1"
    assert complete("acquire ", live) == "acquire r3"
    assert complete("release big", live) is None, "nothing to add to a complete name"
    assert complete("", live) is None


async def test_right_arrow_accepts_the_suggestion(app_on, small):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon", "r", "e", "l")
        await pilot.pause()
        await pilot.press("right")
        assert app.command_bar.input.value == "release "
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("right")
        assert app.command_bar.input.value == "release r3"


async def test_up_recalls_earlier_commands(app_on, small):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "acquire x 1..4")
        await pilot.press("up")
        assert app.command_bar.input.value == "acquire x 1..4"


async def test_ctrl_s_saves_the_script_as_a_kvs_that_replays(app_on, small, tmp_path):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE) as pilot:
        await type_command(pilot, "acquire x 1..4")
        await pilot.press("escape", "ctrl+s")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("enter")
        await pilot.pause()
    saved = tmp_path / "kvviz-session.kvs"
    scenario = parse_scenario_file(saved)
    assert [s.op.text for s in scenario.steps] == [s.op.text for s in app.session.steps]
    assert scenario.steps[-1].op.text == "acquire x 1..4"


async def test_save_script_to_a_path_the_user_types(app_on, small, tmp_path):
    app = app_on(small)
    async with app.run_test(size=SIZE):
        path = app.save_script(tmp_path / "sub" / "mine")
    assert path == tmp_path / "sub" / "mine.kvs" and path.is_file()
