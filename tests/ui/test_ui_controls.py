# SPDX-License-Identifier: Apache-2.0
"""Every control of the UI: the binding tests press keys, the rest call actions."""

from __future__ import annotations

import time

from kvviz.ui.screens.help_screen import KEYS, HelpScreen
from kvviz.ui.screens.prompt_screen import PromptScreen

SIZE = (100, 30)


def footer_actions(app) -> set[str]:
    """Actions the footer shows right now (enabled and not hidden by check_action)."""
    return {active.binding.action for active in app.screen.active_bindings.values()}


async def test_right_left_l_and_h_step_forward_and_back(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right", "right", "l")
        assert app.step == 3
        await pilot.press("left", "h")
        assert app.step == 1
        await pilot.press("h", "h")
        assert app.step == 0, "stepping back from the start stays at the start"


async def test_home_and_end_go_to_the_first_and_last_step(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("end")
        assert app.step == len(small) - 1
        await pilot.press("home")
        assert app.step == 0


async def test_g_asks_for_a_step_and_goes_there(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("backspace", "5", "enter")
        assert app.step == 5
        assert not isinstance(app.screen, PromptScreen)


async def test_jump_refuses_a_step_that_does_not_exist_and_stays_open(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        app.action_jump()
        await pilot.pause()
        app.screen.confirm("99")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        assert "does not exist" in str(app.screen.query_one("#prompt-error").render())
        assert app.step == 0


async def test_space_plays_and_pauses_and_the_footer_label_follows(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        assert "play" in footer_actions(app) and "pause" not in footer_actions(app)
        await pilot.press("space")
        assert app.playing
        assert "pause" in footer_actions(app) and "play" not in footer_actions(app)
        assert app.screen.has_class("-playing")
        assert "playing" in app.timeline.text
        await pilot.press("space")
        assert not app.playing
        assert "play" in footer_actions(app)
        assert "paused" in app.timeline.text


async def test_play_pause_action_toggles_state(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE):
        app.action_play_pause()
        assert app.playing
        app.action_play_pause()
        assert not app.playing


async def test_a_play_tick_steps_forward_and_playback_stops_at_the_end(app_on, small):
    app = app_on(small, step=len(small) - 3)
    async with app.run_test(size=SIZE):
        app.action_play()
        app.play_tick()
        assert app.step == len(small) - 2 and app.playing
        app.play_tick()
        assert app.step == len(small) - 1
        assert not app.playing, "playback pauses on the last step"


async def test_play_from_the_last_step_starts_over(app_on, small):
    app = app_on(small, step=len(small) - 1)
    async with app.run_test(size=SIZE):
        app.action_play()
        assert app.step == 0 and app.playing
        app.action_pause()


async def test_plus_and_minus_change_the_play_speed(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        start = app.speed
        await pilot.press("plus")
        assert app.speed > start
        await pilot.press("minus", "minus")
        assert app.speed < start
        for _ in range(10):
            await pilot.press("minus")
        assert app.speed == 0.5, "the slowest speed is a floor"


async def test_brackets_jump_between_interesting_steps(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right_square_bracket")
        assert app.step == 6, "step 6 evicts"
        await pilot.press("right_square_bracket")
        assert app.step == 7, "step 7 fails"
        await pilot.press("right_square_bracket")
        assert app.step == 9
        await pilot.press("left_square_bracket")
        assert app.step == 7


async def test_v_jumps_to_the_first_violating_step_and_shows_only_when_there_is_one(app_on, leaky, small):
    app = app_on(leaky)
    async with app.run_test(size=SIZE) as pilot:
        assert "first_violation" in footer_actions(app)
        await pilot.press("v")
        assert app.step == 3
    clean = app_on(small)
    async with clean.run_test(size=SIZE):
        assert "first_violation" not in footer_actions(clean)
        clean.action_first_violation()
        assert clean.step == 0


async def test_tab_moves_focus_through_the_views_and_the_command_bar(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        seen = [app.focused.id]
        for _ in range(6):
            await pilot.press("tab")
            seen.append(app.focused.id)
        assert seen[:4] == ["trie", "pool", "allocations", "heap"]
        assert "command-input" in seen


async def test_question_mark_opens_help_listing_keys_and_legend(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


def test_help_documents_every_app_key():
    from kvviz.explore.timeline_screen import TimelineScreen

    documented = " ".join(key for key, _ in KEYS)
    names = {"left_square_bracket": "[", "right_square_bracket": "]", "question_mark": "?", "colon": ":",
             "plus": "+", "minus": "-", "left": "←", "right": "→", "equals_sign": "+", "underscore": "-"}
    for binding in TimelineScreen.BINDINGS:
        first = binding.key.split(",")[0]
        assert names.get(first, first) in documented, f"help does not mention {binding.key} ({binding.action})"


async def test_q_quits(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_w_toggles_the_why_panel(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.why.display
        await pilot.press("w")
        assert app.why.display
        assert "Why was page 2 evicted?" in app.why.text
        await pilot.press("w")
        assert not app.why.display


async def test_colon_focuses_the_command_bar_and_escape_leaves_it(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        assert app.focused is app.command_bar.input
        await pilot.press("escape")
        assert app.focused is not app.command_bar.input


async def test_escape_clears_the_selection(app_on, small):
    app = app_on(small, step=3)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down")
        assert app.selection is not None
        await pilot.press("escape")
        assert app.selection is None
        assert not app.view.highlight


async def _until(pilot, condition, what: str, bound_s: float = 30.0) -> None:
    """Let the app run until ``condition()`` holds; fail after ``bound_s`` seconds (a bound on
    a loaded machine, not a synchronisation: the loop ends as soon as the condition holds)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, f"still not {what} after {bound_s:.0f} s"
        await pilot.pause(0.01)


def _palette_lists(app, text: str) -> bool:
    """True when the open command palette's list shows a hit containing ``text``."""
    from textual.command import CommandList, CommandPalette

    screen = app.screen
    if not isinstance(screen, CommandPalette):
        return False
    hits = screen.query_one(CommandList)
    return any(text in str(hits.get_option_at_index(i).prompt) for i in range(hits.option_count))


async def test_ctrl_p_palette_jumps_to_a_typed_step(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press("7")
        # The palette searches in a worker: enter acts once the hit is listed.
        await _until(pilot, lambda: _palette_lists(app, "Jump to step 7"), "listing the jump to step 7")
        await pilot.press("enter")
        await _until(pilot, lambda: app.step == 7, "at step 7")
        assert app.step == 7


async def test_palette_opens_a_demo(app_on, small):
    from kvviz.ui.widgets.palette import KvvizCommands

    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        provider = KvvizCommands(app.screen)
        hits = [hit async for hit in provider.search("demo lru")]
        assert hits, "the palette lists the demos"
        demo = next(hit for hit in hits if "lru" in str(hit.text))
        demo.command()
        await pilot.pause()
        assert app.session.title.startswith("LRU eviction")
        assert app.step == 0


async def test_palette_lists_export_theme_and_jump(app_on, small):
    from kvviz.ui.widgets.palette import KvvizCommands

    app = app_on(small)
    async with app.run_test(size=SIZE):
        names = [str(hit.display) async for hit in KvvizCommands(app.screen).discover()]
        for wanted in ("Export this step", "Theme: kvviz-light", "Jump to step", "Jump to first violation",
                       "Save script as .kvs"):
            assert any(wanted in name for name in names), wanted


async def test_enter_folds_a_subtree_in_the_trie(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        rows = len(app.trie.rows)
        await pilot.press("down")  # the first node under the root
        await pilot.press("enter")
        assert len(app.trie.rows) < rows
        assert "folded" in app.trie.row_text(1)
        await pilot.press("enter")
        assert len(app.trie.rows) == rows


async def test_c_compresses_chains_of_single_child_nodes(app_on, small):
    app = app_on(small, step=2)  # one chain of three nodes
    async with app.run_test(size=SIZE) as pilot:
        assert len(app.trie.rows) == 4
        await pilot.press("c")
        assert len(app.trie.rows) == 2
        assert "×3" in app.trie.row_text(1)


async def test_z_switches_the_page_grid_to_one_character_per_page(app_on, small):
    app = app_on(small, step=1)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.pool.is_compact
        app.pool.focus()
        await pilot.press("z")
        assert app.pool.is_compact
        assert app.pool.page_text(0) == "▪"


async def test_live_resize_adapts_the_layout(app_on, lru):
    app = app_on(lru, step=20)
    async with app.run_test(size=(120, 40)) as pilot:
        assert not app.screen.has_class("-short")
        await pilot.resize_terminal(60, 20)
        await pilot.pause()
        assert app.screen.has_class("-short") and app.screen.has_class("-narrow")
        assert app.trie.size.width > 0 and app.pool.size.width > 0
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.trie.rows, "the views still render after resizing"


async def test_tests_play_without_a_clock_and_the_real_app_with_one(app_on, small):
    """The app_on fixture turns the play timer off (a timer ticking between two key presses
    under load made a binding test flaky); the app a user runs still plays by its timer."""
    app = app_on(small, step=0)
    async with app.run_test(size=(120, 40)):
        app.action_play()
        assert app.playing and app._timer is None and app.step == 0
        app.action_pause()
    real = app_on(small, step=0, play_timer=True)
    async with real.run_test(size=(120, 40)):
        real.action_play()
        assert real.playing and real._timer is not None
        real.action_pause()
        assert real._timer is None
