# SPDX-License-Identifier: Apache-2.0
"""What a newcomer and a fuzzer hit in the UI the second time: keys that did
nothing silently, a hint nobody earned, text cut without an ellipsis, modals that hid the
step, units mixed in a trace's timeline, a save name that killed the app."""

from __future__ import annotations

import re

from rich.style import Style

from kvviz.core.demos import load_demo
from kvviz.core.session import Session
from kvviz.ui.screens.prompt_screen import PromptScreen
from kvviz.ui.widgets.line_canvas import spans_to_strip

BIG = (120, 40)
TINY = (60, 20)


def toasts(app) -> list[str]:
    """The notifications shown so far, as text."""
    return [str(n.message) for n in app._notifications]


def screen_text(app) -> str:
    """What the terminal shows now, modal screens and what is behind them, as plain text."""
    svg = app.export_screenshot()
    text = re.sub(r"<[^>]+>", "", svg.replace("&#160;", " "))
    return text


def footer_keys(app) -> set[str]:
    """The keys the footer shows right now."""
    return {active.binding.key for active in app.screen.active_bindings.values() if active.binding.show
            and active.enabled}


# -- item 14: the "stepped back" hint only after a step back ---------------------------------

async def test_a_freshly_opened_demo_does_not_say_it_stepped_back(app_on, lru):
    app = app_on(lru, demo="lru")
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert "stepped back" not in app.command_bar.input.placeholder
        app.go_to(5)  # forward: still nobody stepped back
        await pilot.pause()
        assert "stepped back" not in app.command_bar.input.placeholder


async def test_the_stepped_back_hint_follows_a_step_back(app_on, lru):
    app = app_on(lru, step=5)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert "stepped back" not in app.command_bar.input.placeholder
        app.action_previous_step()
        await pilot.pause()
        assert app.command_bar.input.placeholder.startswith("stepped back to 4/")
        app.action_last_step()
        await pilot.pause()
        assert "stepped back" not in app.command_bar.input.placeholder


# -- item 10: keys say why they do nothing; z from every view -----------------------------------

async def test_b_on_a_lesson_demo_says_why_there_is_no_buggy_code(app_on, lru):
    app = app_on(lru, demo="lru")
    async with app.run_test(size=BIG, notifications=True) as pilot:
        await pilot.press("b")
        await pilot.pause()
        assert any("bug-museum" in t for t in toasts(app)), toasts(app)
        assert not app.show_buggy


async def test_b_on_a_bug_demo_without_a_variant_says_why(app_on):
    app = app_on(Session.from_scenario(load_demo("bug-b12-extend-self")), demo="bug-b12-extend-self")
    async with app.run_test(size=BIG, notifications=True) as pilot:
        await pilot.press("b")
        await pilot.pause()
        shown = toasts(app)
        assert shown and "bug-b12-extend-self" in shown[-1], shown


async def test_v_without_a_violation_says_so(app_on, lru):
    app = app_on(lru, step=3)
    async with app.run_test(size=BIG, notifications=True) as pilot:
        await pilot.press("v")
        await pilot.pause()
        assert any("No invariant violations" in t for t in toasts(app)), toasts(app)
        assert app.step == 3


async def test_z_switches_the_page_grid_layout_from_the_trie(app_on, lru):
    app = app_on(lru)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert app.structure.has_focus
        before = app.pool.is_compact
        await pilot.press("z")
        assert app.pool.is_compact != before


# -- item 15: the footer lists x, p, b and v (b and v where they apply) ---------------------------

async def test_the_footer_lists_code_and_practice_and_buggy_code_on_a_bug_demo(app_on):
    name = "bug-b5-ref-leak"
    app = app_on(Session.from_scenario(load_demo(name)), demo=name)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert {"x", "p", "b"} <= footer_keys(app)


async def test_the_footer_lists_v_when_the_timeline_has_a_violation(app_on, leaky, lru):
    app = app_on(leaky)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert "v" in footer_keys(app)
    app = app_on(lru, demo="lru")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert not {"v", "b"} & footer_keys(app)  # shown only where they do something


# -- item 11: an ellipsis where a line is cut; modals over the step; a readable sub-step -------

def test_a_line_cut_at_the_width_ends_with_an_ellipsis():
    strip = spans_to_strip([("candidates: childless", Style()), (", ref 0", Style())], 12, Style())
    assert strip.text == "candidates:…"
    assert spans_to_strip([("fits", Style()), ("   ", Style())], 5, Style()).text == "fits "  # spaces cut: no …
    assert spans_to_strip([("exactly", Style())], 7, Style()).text == "exactly"


async def test_views_cut_at_120_by_40_and_60_by_20_say_so(app_on, lru):
    for size in (BIG, TINY):
        app = app_on(lru, step=28)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            heap = app.heap
            room = heap.scrollable_content_region.width
            header = "".join(s.text for s in heap.render_line(0)._segments).rstrip()
            if len("candidates: childless, ref 0 · next victim on top · key (last_access, seq)") > room:
                assert header.endswith("…"), (size, header)


async def test_the_go_to_prompt_leaves_the_step_in_sight(app_on, lru):
    app = app_on(lru, step=12)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        app.action_jump()
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        shown = screen_text(app)
        assert "step 12/32" in shown and "Go to step" in shown


async def test_the_save_prompt_leaves_the_step_in_sight(app_on, lru):
    app = app_on(lru, step=12)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        app.action_save_script()
        await pilot.pause()
        shown = screen_text(app)
        assert "step 12/32" in shown and "Save the script as" in shown


async def test_the_substep_sentence_reads_whole_at_60_by_20(app_on, lru):
    app = app_on(lru, step=3)
    async with app.run_test(size=TINY) as pilot:
        await pilot.pause()
        app.action_step_into()
        app.action_next_step()
        await pilot.pause()
        sentence = app.view.substep.step.sentence
        narration = app.narration
        height = narration.scrollable_content_region.height
        seen = " ".join(narration.row_text(i).strip() for i in range(min(height, len(narration.rows))))
        assert " ".join(sentence.split()) in " ".join(seen.split()), (sentence, seen)


# -- item 17: a save name the file system refuses --------------------------------------------------

async def save_as(app, pilot, name: str) -> None:
    app.action_save_script()
    await pilot.pause()
    app.screen.confirm(name)
    await pilot.pause()


async def test_a_300_character_save_name_is_one_line_and_the_timeline_stays(app_on, small, tmp_path):
    app = app_on(small, step=4)
    async with app.run_test(size=BIG, notifications=True) as pilot:
        await save_as(app, pilot, "x" * 300)
        assert isinstance(app.screen, PromptScreen)  # still asking: nothing was written
        problem = str(app.screen.query_one("#prompt-error").render())
        assert "\n" not in problem.strip() and "at most 255 bytes" in problem, problem
        assert len(problem) < 60, "fits the prompt's one line"
        assert (len(app.session), app.step) == (len(small), 4)
        assert not list(tmp_path.glob("x*"))


async def test_a_save_name_with_a_nul_byte_is_one_line_and_the_timeline_stays(app_on, small, tmp_path):
    app = app_on(small, step=4)
    async with app.run_test(size=BIG, notifications=True) as pilot:
        await save_as(app, pilot, "bad\x00name")
        assert isinstance(app.screen, PromptScreen)
        problem = str(app.screen.query_one("#prompt-error").render())
        assert "\n" not in problem.strip() and "NUL" in problem, problem
        assert len(problem) < 60, "fits the prompt's one line"
        assert (len(app.session), app.step) == (len(small), 4)
        app.screen.confirm("good")
        await pilot.pause()
        assert (tmp_path / "good.kvs").is_file()


async def test_the_command_bar_hint_is_cut_with_an_ellipsis_at_60_by_20(app_on, lru):
    app = app_on(lru, step=6)
    async with app.run_test(size=TINY) as pilot:
        app.action_previous_step()
        await pilot.pause()
        box = app.command_bar.input
        hint = box.placeholder
        assert hint.startswith("stepped back to 5/") and hint.endswith("…"), hint
        assert len(hint) <= box.content_region.width


# -- item 3: "cached" is one count on one screen -------------------------------------------------

async def test_the_pool_legend_counts_cached_pages_as_expect_cached_does(app_on, lru):
    app = app_on(lru, step=28)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        snap = app.view.snapshot
        legend = " ".join("".join(text for text, _ in line) for line in app.pool._legend)
        expects = {r.expect.text: r.ok for r in app.view.frame.expects}
        assert expects.get(f"expect cached {snap.cached_count}") is True  # the demo checks 7 here
        assert f"cached {snap.cached_count}:" in legend, legend
        assert f"■referenced {snap.cached_count - snap.evictable_count}" in legend
        assert f"□evictable {snap.evictable_count}" in legend
        assert "■cached" not in legend


# -- item 9: a trace's timeline speaks one unit, the block, and says so -----------------------------

def trace_session(tmp_path) -> Session:
    """Three Mooncake requests of 512-token blocks, as ``kvviz trace --ui`` opens them."""
    from kvviz.core.mooncake import read_trace
    from kvviz.trace.replay import ReplayConfig
    from kvviz.trace.to_kvs import trace_to_scenario

    path = tmp_path / "three.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
                    '{"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]}\n'
                    '{"timestamp": 20, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3]}\n')
    loaded = read_trace(path, block_tokens=512)
    converted = trace_to_scenario(loaded.requests, ReplayConfig(capacity_tokens=None, page_tokens=512),
                                  source=loaded.name)
    return Session.from_scenario(converted.scenario, lazy=True, units=converted.units)


async def test_a_trace_timeline_counts_blocks_in_the_pool_the_hit_column_and_the_event_log(app_on, tmp_path):
    session = trace_session(tmp_path)
    app = app_on(session, step=4)  # q0002 matches 2 of its 3 blocks
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert str(app.pool.border_title).endswith("pages × 1 block of 512 tokens"), app.pool.border_title
        assert str(app.allocations.border_title).endswith("hit in blocks")
        text = app.narration.text
        assert "matched 2 of 3 blocks (of 512 tokens)" in text
        assert "2 of 3 blocks (block 2" in text, text  # the event log: blocks, not tokens
        assert " tokens (block" not in text


async def test_every_footer_key_fits_120_columns_on_a_bug_demo_with_a_violation(app_on, leaky):
    from textual.widgets import Footer

    app = app_on(leaky, step=3, demo="bug-b5-ref-leak")  # b and v both act here
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert {"b", "v", "x", "p", "q"} <= footer_keys(app)
        footer = app.query_one(Footer)
        assert footer.virtual_size.width <= footer.region.width, "the footer is cut"
