# SPDX-License-Identifier: Apache-2.0
"""Inside an op: stepping into an op, through its sub-steps and out; every view
showing kvcore's state after the sub-step with what it moves in focus; the narration's
sentence; the pseudo-code pane and a bug-museum demo's buggy code beside ours.

Binding tests press keys; the rest call actions or set state. The sub-steps themselves are
the model's (tests/core/test_substeps.py proves them); here each expectation is read from
``session.substeps(i)`` and compared with what the widgets draw.
"""

from __future__ import annotations

import pytest
from rich.style import Style

from kvviz.core.demos import load_demo
from kvviz.core import pseudocode
from kvviz.core.session import Session
from kvviz.core.view import FrameView, later_neighbour, same_shape
from kvviz.core.designs import design
from tests.ui.test_ui_views_fit import reaches_a_session

SIZE = (140, 44)
CASCADE = 7  # eviction-cascade: acquire x evicts a chain leaf first, then its parent


def demo(name: str) -> Session:
    return Session.from_scenario(load_demo(name))


def kinds(session, step) -> list[str]:
    return [s.kind for s in session.substeps(step)]


def rows(view) -> list[str]:
    return [view.row_text(i) for i in range(len(view.rows))]


def first(session, step, kind, after=-1) -> int:
    """The index of the first sub-step of ``kind`` in ``step``'s op, after index ``after``."""
    return next(s.index for s in session.substeps(step) if s.kind == kind and s.index > after)


# -- keys ------------------------------------------------------------------------------------


async def test_i_steps_into_the_op_at_its_first_substep_and_o_steps_out(app_on):
    session = demo("eviction-cascade")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("i")
        assert (app.step, app.substep) == (CASCADE, 0)
        assert app.view.substep.step == session.substeps(CASCADE)[0]
        await pilot.press("o")
        assert (app.step, app.substep) == (CASCADE, None)
        assert app.view.substep is None and app.view.snapshot == session.frame(CASCADE).snapshot


async def test_i_at_the_start_steps_into_the_first_op(app_on, small):
    app = app_on(small, step=0)
    async with app.run_test(size=SIZE):
        app.action_step_into()
        assert (app.step, app.substep) == (1, 0)


async def test_right_and_left_move_by_substep_while_stepped_in(app_on):
    session = demo("eviction-cascade")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.press("right", "right", "l")
        assert (app.step, app.substep) == (CASCADE, 3)
        await pilot.press("left", "h")
        assert (app.step, app.substep) == (CASCADE, 1)
        assert app.view.snapshot == session.substeps(CASCADE).state(1)


async def test_past_the_last_substep_right_goes_into_the_next_op_and_left_comes_back(app_on):
    session = demo("eviction-cascade")
    last = len(session.substeps(CASCADE)) - 1
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE):
        app.show_substep(CASCADE, last)
        assert app.view.snapshot == session.frame(CASCADE).snapshot, "the last sub-step ends at the frame"
        app.action_next_step()
        assert (app.step, app.substep) == (CASCADE + 1, 0)
        app.action_previous_step()
        assert (app.step, app.substep) == (CASCADE, last)


async def test_left_at_the_first_substep_of_the_first_op_stays(app_on, small):
    app = app_on(small, step=1)
    async with app.run_test(size=SIZE):
        app.action_step_into()
        app.action_previous_step()
        assert (app.step, app.substep) == (1, 0)


async def test_escape_steps_out_first_then_clears_the_selection(app_on):
    from kvviz.core.view import NODE, Selection

    app = app_on(demo("eviction-cascade"), step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        app.select(Selection(NODE, 2))
        await pilot.press("escape")
        assert app.substep is None and app.selection is not None
        await pilot.press("escape")
        assert app.selection is None


async def test_moving_by_whole_steps_steps_out(app_on):
    app = app_on(demo("eviction-cascade"), step=CASCADE)
    async with app.run_test(size=SIZE):
        app.action_step_into()
        app.go_to(3)
        assert (app.step, app.substep) == (3, None)


async def test_brackets_jump_between_notable_substeps_inside_the_op(app_on):
    session = demo("eviction-cascade")
    notable = [s.index for s in session.substeps(CASCADE) if s.kind in design("trie").stops]
    assert len(notable) >= 4, "the cascade has a take, two pops, two evicts and a new candidate"
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        seen = []
        for _ in notable:
            await pilot.press("right_square_bracket")
            seen.append(app.substep)
        assert seen == notable
        await pilot.press("right_square_bracket")
        assert app.substep == notable[-1], "no later notable sub-step: ] stays"
        await pilot.press("left_square_bracket")
        assert app.substep == notable[-2]
        assert app.step == CASCADE


async def test_space_plays_substeps_while_stepped_in(app_on):
    session = demo("eviction-cascade")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.press("space")
        assert app.playing
        await pilot.press("space")
        assert not app.playing
        app.play_tick()  # what the play timer calls: one sub-step, not one step
        assert (app.step, app.substep) == (CASCADE, 1)


async def test_playing_runs_through_the_last_op_and_pauses_at_its_last_substep(app_on, small):
    app = app_on(small, step=small.last.index)
    async with app.run_test(size=SIZE):
        app.action_step_into()
        app.action_play()
        for _ in range(len(small.substeps(app.step))):
            app.play_tick()
        assert not app.playing
        assert (app.step, app.substep) == (small.last.index, len(small.substeps(small.last.index)) - 1)
        app.action_pause()


async def test_in_practice_mode_stepping_on_past_an_op_asks_the_next_steps_question_first(app_on, lru):
    from kvviz.teach.quiz import questions

    question = questions(lru, 0)[0]
    before = question.step - 1
    app = app_on(lru, step=before, quiz=True)
    async with app.run_test(size=SIZE):
        app.show_substep(before, len(lru.substeps(before)) - 1)
        app.action_next_step()
        assert app.quiz.pending is not None and app.quiz.pending.step == question.step
        assert (app.step, app.substep) == (before, None), "the step asked about is not shown"
        assert not app.check_action("step_into", ()), "i waits for the answer"


async def test_the_footer_offers_into_or_out(app_on, small):
    from tests.ui.test_ui_controls import footer_actions

    app = app_on(small, step=2)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert "step_into" in footer_actions(app) and "step_out" not in footer_actions(app)
        app.action_step_into()
        await pilot.pause()
        assert "step_out" in footer_actions(app) and "step_into" not in footer_actions(app)


# -- what the views show ---------------------------------------------------------------------


async def test_the_timeline_bar_shows_the_position_inside_the_op(app_on):
    session = demo("eviction-cascade")
    pop = first(session, CASCADE, "pop")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE):
        app.show_substep(CASCADE, pop)
        head = app.timeline.text.splitlines()[0]
        assert f"step {CASCADE}/{len(session) - 1} · {pop + 1}/{len(session.substeps(CASCADE))} pop" in head
        app.action_step_out()
        assert " pop " not in app.timeline.text.splitlines()[0]


async def test_a_cascade_pop_shows_the_parent_in_the_heap_while_its_child_is_still_in_the_trie(app_on):
    # Mid-op the invariants do not hold (node 2 is a candidate with a child): the views show
    # kvcore's state as it is, without a violation mark.
    session = demo("eviction-cascade")
    pop = first(session, CASCADE, "pop")
    step = session.substeps(CASCADE)[pop]
    victim, parent = step.event.node, step.event.moved
    state = session.substeps(CASCADE).state(pop)
    assert state.heap[0] == parent and state.node(victim) is not None
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE):
        app.show_substep(CASCADE, pop)
        heap = rows(app.heap)
        assert any(f"[0] node {parent} " in r and "moved to the top" in r for r in heap)
        assert any(f"left: node {victim} " in r and "popped: the victim" in r for r in heap)
        trie = rows(app.trie)
        assert any(f"p{state.node(victim).page} " in r for r in trie), "the victim is still in the trie"
        for view in (app.trie, app.heap, app.allocations):
            assert not any("⚠" in r for r in rows(view)), f"{view.id} flags a mid-op state"
        assert not app.view.violations


async def test_an_eviction_substep_shows_the_victim_gone_and_its_page_in_the_allocation(app_on):
    session = demo("eviction-cascade")
    evict = first(session, CASCADE, "evict")
    event = session.substeps(CASCADE)[evict].event
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE):
        app.show_substep(CASCADE, evict)
        assert any("✗" in r and "evicted" in r for r in rows(app.trie)), "the victim shown once more, in red"
        assert app.view.frame.diff.nodes_evicted == (event.node,)
        x = app.view.snapshot.allocation_named("x")
        assert event.page in x.pages
        assert f"@x" in app.pool.page_text(event.page)
        assert any(f":{event.page}" in r for r in rows(app.allocations))


async def test_the_allocation_table_follows_every_substep_of_the_cascade(app_on):
    # The table keeps its rows while no allocation changes (pops, swaps, candidates): each
    # sub-step's block table must still be the one drawn.
    session = demo("eviction-cascade")
    subs = session.substeps(CASCADE)
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        for index in range(len(subs)):
            app.show_substep(CASCADE, index)
            await pilot.pause()
            x = subs.state(index).allocation_named("x")
            drawn = [r for r in rows(app.allocations) if r.startswith("x ")]
            if x is None:
                assert drawn == []
                continue
            cells = " ".join(f"{i}:{page}" for i, page in enumerate(x.pages))
            assert len(drawn) == 1 and drawn[0].rstrip().endswith(cells), (index, drawn, cells)


async def test_the_allocation_table_redraws_when_an_allocation_changes_under_the_same_marks(app_on):
    import dataclasses

    session = demo("eviction-cascade")
    subs = session.substeps(CASCADE)
    first_evict = first(session, CASCADE, "evict")
    last = len(subs) - 1
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.show_substep(CASCADE, first_evict)
        await pilot.pause()
        shown = app.view
        later = dataclasses.replace(shown, frame=dataclasses.replace(shown.frame, snapshot=subs.state(last)))
        app.allocations.show(later)
        pages = subs.state(last).allocation_named("x").pages
        cells = " ".join(f"{i}:{page}" for i, page in enumerate(pages))
        assert any(r.rstrip().endswith(cells) for r in rows(app.allocations))


async def test_the_two_heap_slots_of_a_sift_swap_are_in_focus_and_tagged(app_on, lru):
    swap = first(lru, 28, "swap")
    event = lru.substeps(28)[swap].event
    app = app_on(lru, step=28)
    async with app.run_test(size=SIZE):
        app.show_substep(28, swap)
        assert app.view.focus.slots == {event.slot, event.other_slot}
        tagged = [r for r in rows(app.heap) if "⇅ swapped" in r]
        assert len(tagged) == 2
        assert any(f"[{event.other_slot}] node {event.node} " in r for r in tagged), "the node moved down"
        assert any(f"[{event.slot}] node {event.other} " in r for r in tagged), "its child moved up"
        focused = [i for i, row in enumerate(app.heap.rows) if app.heap.is_focus(row)]
        assert len(focused) == 2


async def test_mid_sift_the_top_of_the_heap_is_called_the_next_victim_only_when_its_key_is_smallest(app_on, lru):
    """After a pop the last entry sits at slot 0 until the sift moves it down: it is not the
    next victim then, and the heap view must not say so (a learner would read it as the answer)."""
    swap = first(lru, 28, "swap")
    state = lru.substeps(28).state(swap - 1)  # just before the first swap: slot 0 is out of order
    keys = [state.node_key(state.node(n)) for n in state.heap]
    assert keys[0] != min(keys), "the workload no longer has an out-of-order top mid-sift"
    app = app_on(lru, step=28)
    async with app.run_test(size=SIZE):
        app.show_substep(28, swap - 1)
        assert not any("next victim" in r for r in rows(app.heap)[1:])
        app.show_substep(28, len(lru.substeps(28)) - 1)  # the sift is over
        assert any(r.lstrip().startswith("[0]") and "next victim" in r for r in rows(app.heap))
        app.show_substep(28, None)  # stepped out: the whole step's heap, in order
        assert any(r.lstrip().startswith("[0]") and "next victim" in r for r in rows(app.heap))


async def test_the_page_leaving_the_free_list_is_in_focus_in_the_pool(app_on):
    session = demo("eviction-cascade")
    take = first(session, CASCADE, "take")
    pages = session.substeps(CASCADE)[take].event.pages
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.show_substep(CASCADE, take)
        await pilot.pause()
        focus = app.pool.style_of("page-grid--focus")
        other = next(p for p in range(app.view.snapshot.page_count) if p not in pages)
        for page in pages:
            assert focus.bgcolor is not None and app.pool._cell_spans(page)[1].bgcolor == focus.bgcolor
        assert app.pool._cell_spans(other)[1].bgcolor != focus.bgcolor


async def test_the_walked_node_is_in_focus_in_the_trie(app_on):
    session = demo("prefix-sharing")
    step, walk = next((i, s.index) for i in range(1, len(session)) for s in session.substeps(i) if s.kind == "walk")
    node = session.substeps(step)[walk].event.node
    app = app_on(session, step=step)
    async with app.run_test(size=SIZE):
        app.show_substep(step, walk)
        focused = [row for row in app.trie.rows if app.trie.is_focus(row)]
        assert focused and all(node in row.data.chain for row in focused)
        strip = app.trie.render_strip(app.trie.rows.index(focused[0]), 80)
        focus = app.trie.style_of("line-view--focus")
        assert any(segment.style.bgcolor == (Style() + focus).bgcolor for segment in strip)


async def test_the_narration_says_the_substep_and_lists_its_neighbours(app_on):
    session = demo("eviction-cascade")
    subs = session.substeps(CASCADE)
    pop = first(session, CASCADE, "pop")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE):
        app.show_substep(CASCADE, pop)
        text = app.narration.text
        assert subs[pop].sentence in text
        assert f"sub-step {pop + 1}/{len(subs)} pop" in text
        assert f"▶{pop + 1:>3} pop" in text
        assert subs[pop + 1].sentence[:40] in text, "the next sub-steps are listed"
        assert app.narration.border_title == "Narration · sub-steps"


async def test_a_shortfin_ops_substeps_are_its_calls_and_the_narration_says_so(app_on):
    pytest.importorskip("shortfin")
    from kvviz.backends.registry import make_backend_factory

    name = "shortfin-b9-lookup-no-ref"
    session = Session.from_scenario(load_demo(name), backend_factory=make_backend_factory("shortfin"))
    app = app_on(session, step=1, demo=name)
    async with app.run_test(size=SIZE):
        for step in range(1, len(session)):
            subs = session.substeps(step)
            assert subs.source == "calls"
            for index in range(len(subs)):
                app.show_substep(step, index)
                assert app.view.snapshot == subs.state(index)
                assert subs.note in app.narration.text
                assert subs[index].sentence in app.narration.text
                assert app.view.substep.code is not None, "shortfin's calls have pseudo-code too"


# -- the pseudo-code pane --------------------------------------------------------------------


async def test_the_code_pane_shows_while_stepped_in_with_the_substeps_lines_lit(app_on):
    session = demo("eviction-cascade")
    pop = first(session, CASCADE, "pop")
    step = session.substeps(CASCADE)[pop]
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.code.display
        app.show_substep(CASCADE, pop)
        await pilot.pause()
        assert app.code.display
        code = app.view.substep.code
        assert code.lines == pseudocode.ALGORITHMS[step.algorithm].texts()
        assert code.current == set(step.lines) and len(step.lines) > 1, "a cascade pop spans several lines"
        lit = [i + 1 for i in range(len(app.code.rows)) if "▶" in app.code.row_text(i)[:5]]
        assert lit == sorted(step.lines)
        assert app.code.border_title.startswith("evict ← acquire line ")
        app.action_step_out()
        await pilot.pause()
        assert not app.code.display


async def test_x_toggles_the_code_pane(app_on):
    app = app_on(demo("eviction-cascade"), step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.press("x")
        assert not app.code.display
        await pilot.press("x")
        assert app.code.display
        app.action_step_out()
        assert app.code.display, "toggled on, it stays on stepped out"
        assert "step into an op" in app.code.row_text(0)


async def test_b_shows_a_bug_demos_buggy_code_beside_ours_with_the_differing_lines_marked(app_on):
    name = "bug-b5-ref-leak"
    variant = pseudocode.buggy_variant(name)
    session = demo(name)
    step = next(i for i in range(1, len(session)) if session.frame(i).op.kind == variant.algorithm)
    app = app_on(session, step=step, demo=name)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.pause()
        assert not app.code_buggy.display
        assert "b: the buggy code beside" in app.code.border_title
        await pilot.press("b")
        await pilot.pause()
        assert app.code_buggy.display
        buggy = app.view.substep.buggy
        assert buggy.lines == variant.theirs and buggy.differs == set(variant.theirs_differ)
        assert app.view.substep.code.differs == set(variant.ours_differ)
        marked = [row.data[0] for i, row in enumerate(app.code_buggy.rows) if "≠" in app.code_buggy.row_text(i)[:5]]
        assert marked == sorted(variant.theirs_differ), "lit or not, a differing line is marked"
        await pilot.press("b")
        assert not app.code_buggy.display


async def test_b_on_a_demo_without_buggy_code_shows_nothing(app_on):
    app = app_on(demo("eviction-cascade"), step=CASCADE, demo="eviction-cascade")
    async with app.run_test(size=SIZE):
        app.action_step_into()
        app.action_toggle_buggy()
        assert not app.show_buggy and not app.code_buggy.display


async def test_opening_a_bug_demo_from_the_palette_knows_its_name(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE):
        app.open_demo("bug-b5-ref-leak")
        assert app.demo == "bug-b5-ref-leak" and app.has_buggy_code()


# -- shape -----------------------------------------------------------------------------------


async def test_no_widget_holds_the_live_session_while_stepped_in(app_on):
    app = app_on(demo("bug-b5-ref-leak"), step=3, demo="bug-b5-ref-leak")
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        app.action_toggle_buggy()
        app.action_toggle_why()
        await pilot.pause()
        for widget in app.main_screen.query("*"):
            for name, value in vars(widget).items():
                if name in ("_parent", "_app"):
                    continue
                assert not reaches_a_session(value), f"{widget!r}.{name} reaches the session"


@pytest.mark.parametrize("name", ["lru", "eviction-cascade", "dedup", "extend", "refcount", "heap-ties",
                                  "bug-b2-parent-leaf", "progressive-publish"])
async def test_every_substep_of_a_demo_renders_in_every_view_without_a_violation_mark(app_on, name):
    session = demo(name)
    app = app_on(session, demo=name)
    async with app.run_test(size=SIZE):
        for step in range(1, len(session)):
            for index in range(len(session.substeps(step))):
                app.show_substep(step, index)
                assert app.view.snapshot == session.substeps(step).state(index)
                for view in (app.trie, app.heap, app.allocations, app.code):
                    assert not any("⚠" in r for r in rows(view)), (step, index, view.id)
                for page in range(app.view.snapshot.page_count):
                    app.pool.page_text(page)
                assert app.view.substep.step.sentence in app.narration.text


def test_substeps_of_one_op_one_apart_are_neighbours_and_a_substep_is_no_whole_steps_neighbour():
    session = demo("eviction-cascade")
    subs = session.substeps(CASCADE)
    frame = session.frame(CASCADE)
    from kvviz.core.view import SubStepView, substep_frame

    def at(k):
        return FrameView(substep_frame(frame, subs.state(k - 1), subs.state(k), subs[k]),
                         substep=SubStepView(subs[k], len(subs)))

    whole, before = FrameView(frame), FrameView(session.frame(CASCADE - 1))
    assert later_neighbour(at(1), at(2)).position == (CASCADE, 2)
    assert later_neighbour(at(1), at(3)) is None
    assert later_neighbour(whole, at(0)) is None and later_neighbour(before, at(0)) is None
    assert later_neighbour(before, whole) is whole
    evict = first(session, CASCADE, "evict")
    assert not same_shape(at(evict - 1), at(evict)), "an eviction changes the trie's rows"
    assert not same_shape(at(evict), at(evict + 1)), "the ghost row of the evicted node goes"


async def test_a_views_scroll_range_follows_its_rows_without_a_layout_refresh(app_on, monkeypatch):
    # The trie's and the heap's rows change at every eviction; their virtual height follows
    # them without a layout refresh (a whole-screen repaint), never under the view's height.
    session = demo("eviction-cascade")
    evict = first(session, CASCADE, "evict")
    app = app_on(session, step=CASCADE)
    async with app.run_test(size=SIZE) as pilot:
        app.show_substep(CASCADE, evict - 1)
        await pilot.pause()
        layouts = []
        for view in (app.trie, app.heap):
            original = view.refresh

            def refresh(*args, _original=original, _view=view, **kwargs):
                if kwargs.get("layout"):
                    layouts.append(_view.id)
                return _original(*args, **kwargs)
            monkeypatch.setattr(view, "refresh", refresh)
        heights = set()
        for index in (evict, evict + 1, evict + 2):
            app.show_substep(CASCADE, index)
            await pilot.pause()
            for view in (app.trie, app.heap):
                assert view.virtual_size.height == max(len(view.rows), view.scrollable_content_region.height)
            heights.add(len(app.trie.rows))
        assert len(heights) > 1, "the trie's row count changed"
        assert layouts == []


# -- pictures --------------------------------------------------------------------------------

SNAPSHOT_SIZE = (140, 44)


def stepped_in(session, step, index, **opts):
    """A deterministic app showing sub-step ``index`` of step ``step``'s op."""
    from kvviz.explore.app import make_app

    app = make_app(session, step, animations=False, cursor_blink=False, **opts)

    async def step_in(pilot):
        app.show_substep(step, index)
        await pilot.pause()

    return app, step_in


def test_snapshot_mid_sift_swap(snap_compare, lru):
    # lru step 28: acquire n pops node 3; node 4 moves to the top and sifts down by two swaps.
    app, step_in = stepped_in(lru, 28, first(lru, 28, "swap"))
    assert snap_compare(app, run_before=step_in, terminal_size=SNAPSHOT_SIZE)


def test_snapshot_cascade_eviction_mid_way(snap_compare):
    # eviction-cascade step 7: the first victim (node 3) leaves the trie, its page goes to x;
    # its parent (node 2) already took slot [0] of the heap at the pop and is evicted next.
    session = demo("eviction-cascade")
    app, step_in = stepped_in(session, CASCADE, first(session, CASCADE, "evict"))
    assert snap_compare(app, run_before=step_in, terminal_size=SNAPSHOT_SIZE)


async def test_a_differing_line_longer_than_the_pane_wraps_in_both_panes_never_cut(app_on):
    name = "bug-b9-lookup-no-ref"
    session = demo(name)
    app = app_on(session, step=len(session) - 1, demo=name)
    async with app.run_test(size=(120, 36)) as pilot:
        app.action_step_into()
        app.action_toggle_buggy()
        await pilot.pause()
        ours, buggy = app.view.substep.code, app.view.substep.buggy
        for pane, code in ((app.code, ours), (app.code_buggy, buggy)):
            for number in code.differs:
                rows = [i for i, row in enumerate(pane.rows) if row.data[0] == number]
                text = " ".join(pane.row_text(i)[len(str(len(code.lines))) + 2:].strip() for i in rows)
                assert "".join(code.lines[number - 1].split()) == "".join(text.split()), (number, text)  # all of it
                assert all(pane.row_text(i).rstrip()[-1:] != "…" for i in rows)
        long = [n for n in ours.differs if len(ours.lines[n - 1]) > app.code.scrollable_content_region.width]
        assert long, "no differing line is longer than the pane: nothing to test"
        for number in ours.differs | buggy.differs:  # line for line: a line starts on the same row in both
            assert [r.data for r in app.code.rows].index((number, 0)) == \
                [r.data for r in app.code_buggy.rows].index((number, 0))
