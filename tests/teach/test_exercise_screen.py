# SPDX-License-Identifier: Apache-2.0
"""The exercise mode (``kvviz practice DEMO``): one Pilot test per move kind (a wrong choice
shows its mistake and stays, the right one shows what kvcore did and goes on), fix, the
score, what the views show at a move, and the bindings and a click."""

from __future__ import annotations

import pytest

from kvviz.core.demos import load_demo
from kvviz.teach.exercise import MOVE_KINDS, build_exercise
from kvviz.core.session import Session
from kvviz.teach.exercise_screen import make_exercise_app
from kvviz.ui.widgets.cache_column import CacheColumn
from kvviz.teach.move_panel import MovePanel

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

SIZE = (140, 42)
WHERE = {"stop": "lru", "take": "lru", "victim": "lru", "swap": "lru", "dedup": "dedup", "drop": "hash-vs-trie"}


def _app(kind: str | None = None, demo: str = "lru", steps=None):
    session = Session.from_scenario(load_demo(WHERE.get(kind, demo)))
    exercise = build_exercise(session, seed=2, kinds=[kind] if kind else None, steps=steps, max_moves=6)
    return make_exercise_app(session, exercise, animations=False)


def _text(app, selector: str) -> str:
    return str(app.screen_.query_one(selector).render())


@pytest.mark.parametrize("kind", sorted(MOVE_KINDS))
async def test_each_move_kind_grades_a_wrong_then_the_right_choice(kind):
    app = _app(kind)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        move = screen.play.move
        assert move.kind == kind
        assert MOVE_KINDS[kind].title in _text(app, "#move-prompt")
        wrong = next(c for c in move.choices if not c.right)
        screen.action_choose(wrong.letter)
        await pilot.pause()
        assert screen.play.move is move and screen.play.missed == wrong.letter
        assert wrong.mistake in _text(app, "#move-feedback")
        screen.action_choose(move.answer.letter)
        await pilot.pause()
        assert screen.play.position == 1 and screen.play.right == 0 and len(screen.play.results) == 1
        assert "Right now" in _text(app, "#move-feedback")
        if move.said:
            assert move.said[0][:30] in _text(app, "#move-said").replace("\n", " ")


async def test_fix_applies_the_caches_move_counts_the_miss_and_the_header_keeps_the_score():
    app = _app("take")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        first = screen.play.move
        screen.action_fix()
        await pilot.pause()
        assert screen.play.position == 1 and screen.play.results[0].fixed
        assert f"Fixed: {first.answer.letter})" in _text(app, "#move-feedback")
        screen.action_choose(screen.play.move.answer.letter)
        await pilot.pause()
        assert "Score: 1 of 2 moves right first time" in _text(app, "#exercise-header")


async def test_a_victim_move_hides_the_heap_and_a_swap_move_shows_it():
    app = _app(None, steps=[28])
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        column = screen.query_one(CacheColumn)
        while screen.play.move.kind != "victim":
            screen.action_choose(screen.play.move.answer.letter)
        await pilot.pause()
        assert not column.order.display
        screen.action_choose(screen.play.move.answer.letter)
        await pilot.pause()
        assert screen.play.move.kind == "swap" and column.order.display
        assert column.structure.display


async def test_the_last_move_ends_the_exercise_with_the_final_score():
    app = _app("dedup")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        for _ in range(len(screen.exercise.moves)):
            screen.action_choose(screen.play.move.answer.letter)
        await pilot.pause()
        assert screen.play.done and "Final score" in _text(app, "#move-feedback")
        assert "The exercise is over" in _text(app, "#move-prompt")


async def test_letter_x_and_question_mark_keys_are_bound():
    app = _app("victim")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        await pilot.press("question_mark")
        assert "Hint (the victim): the victim is the node with the smallest key" in _text(app, "#move-feedback")
        move = screen.play.move
        wrong = next(c for c in move.choices if not c.right)
        await pilot.press(wrong.letter)
        assert screen.play.missed == wrong.letter
        await pilot.press("x")
        assert screen.play.position == 1 and screen.play.results[0].fixed
        await pilot.press(screen.play.move.answer.letter)
        assert screen.play.position == 2


async def test_clicking_a_choice_in_the_list_answers_the_move():
    app = _app("stop")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        choices = screen.query_one(MovePanel).choices
        move = screen.play.move
        index = next(i for i, c in enumerate(move.choices) if c.right)
        region = choices.content_region
        await pilot.click(choices, offset=(region.x - choices.region.x + 2, region.y - choices.region.y + index))
        await pilot.pause()
        assert screen.play.position == 1 and screen.play.right == 1


def _row_of(view, text: str) -> int:
    """The screen row of ``view`` whose drawn line contains ``text``."""
    for y in range(view.content_region.height):
        if text in "".join(segment.text for segment in view.render_line(y)):
            return y
    raise AssertionError(f"{text!r} is not drawn in {view}")


async def test_clicking_the_victim_in_the_trie_view_answers_the_victim_move():
    app = _app("victim")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        move = screen.play.move
        victim = move.state.node(move.answer.value[0])
        trie = screen.query_one(CacheColumn).structure
        label = " ".join(map(str, victim.tokens))
        row = _row_of(trie, label)
        await pilot.click(trie, offset=(trie.content_region.x - trie.region.x + 8,
                                        trie.content_region.y - trie.region.y + row))
        await pilot.pause()
        assert screen.play.position == 1 and screen.play.right == 1


async def test_clicking_a_node_no_choice_names_says_so_and_changes_nothing():
    app = _app("victim")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        screen.answer_node(999)
        await pilot.pause()
        assert screen.play.position == 0 and screen.play.missed is None
        assert "none of this move's choices" in _text(app, "#move-feedback")


async def test_a_swap_is_answered_in_the_heap_by_the_entry_to_swap_with():
    app = _app("swap")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen_
        move = screen.play.move
        slot = move.info("slot")
        right = move.answer.value
        other = slot if right == () else (right[0] if right[1] == slot else right[1])
        screen.answer_node(move.state.heap[other], in_heap=True)
        await pilot.pause()
        assert screen.play.right == 1
