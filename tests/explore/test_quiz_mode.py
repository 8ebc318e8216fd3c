# SPDX-License-Identifier: Apache-2.0
"""Quiz mode in the UI: the question panel before each interesting step, answers typed
in the answer line (a choice letter or the answer itself), skip, graduated hints, score, no
re-asking, stepping into where a wrong answer parted, and a timeline that asking never changes."""

from __future__ import annotations

import pytest

from kvviz.teach.quiz import feedback, questions
from kvviz.explore.app import KvvizApp
from kvviz.explore.quiz_mode import QuizRun

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

SIZE = (120, 40)


def _export(session):
    from kvviz.report.bundle import session_script

    return session_script(session), len(session)


def _wrong_line(question):
    return next(c.label for c in question.choices if c.value != question.answer)


def _right_line(question):
    return question.correct_choice.label


def _panel_text(app) -> str:
    return str(app.question_panel.query_one("#question-text").render())


async def test_p_and_the_palette_entry_switch_practice_on_and_off(app_on, lru):
    app = app_on(lru)
    async with app.run_test(size=SIZE) as pilot:
        assert app.quiz is None and not app.question_panel.display
        await pilot.press("p")
        assert app.quiz is not None and app.question_panel.display
        await pilot.press("p")
        assert app.quiz is None and not app.question_panel.display
    from kvviz.ui.widgets.palette import KvvizCommands

    names = [name for name, _, _ in KvvizCommands._commands(type("P", (), {"app": app})())]
    assert "Toggle quiz mode" in names


async def test_practice_on_a_hash_cache_asks_the_hash_caches_own_questions(app_on):
    from kvviz.core.demos import load_demo
    from kvviz.core.designs import design
    from kvviz.core.session import Session

    app = app_on(Session.from_scenario(load_demo("hash-vs-trie")))
    async with app.run_test(size=SIZE) as pilot:
        app.action_toggle_quiz()
        await pilot.pause()
        assert app.quiz is not None and app.question_panel.display
        kinds = {q.kind for q in app.quiz.by_step.values()}
        assert kinds and kinds <= set(design("hash").questions)


async def test_stepping_onto_a_question_asks_first_and_shows_the_step_before(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, quiz=True)
    before = _export(lru)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(first.step):
            app.action_next_step()
        await pilot.pause()
        assert app.quiz.pending == first
        assert app.step == first.step - 1  # the step is not revealed yet
        text = _panel_text(app)
        assert first.text.split("`")[1] in text
        assert all(c.text in text for c in first.choices)
        app.action_next_step()  # no way past the question without an answer
        assert app.step == first.step - 1 and app.quiz.pending == first
        app.action_last_step()
        assert app.step == first.step - 1
    assert _export(lru) == before  # asking never changed the timeline


async def test_a_letter_typed_in_the_answer_line_answers_and_reveals_with_feedback_and_score(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert app.question_panel.input.has_focus  # asked: the answer line takes the keys
        await pilot.press(_right_line(first), "enter")  # the keys, for real
        await pilot.pause()
        assert app.step == first.step and app.quiz.pending is None
        assert app.quiz.tally.right == 1 and app.quiz.tally.asked == 1
        text = _panel_text(app)
        reply = first.read(_right_line(first))
        for line in feedback(first, reply):
            assert line[:30] in text.replace("\n", " ") or line[:30] in text
        assert "Score: 1 of 1 question right, streak 1" in text


async def test_a_wrong_answer_says_so_and_gives_the_answer(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        app.answer_question(_wrong_line(first))
        await pilot.pause()
        assert app.step == first.step
        assert app.quiz.tally.right == 0 and app.quiz.tally.asked == 1
        text = " ".join(_panel_text(app).split())
        assert "Wrong" in text and f"{first.correct_choice.label}) {first.correct_choice.text}" in text
        assert "Why:" in text


async def test_a_typed_answer_is_graded_and_garbage_asks_again(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        await pilot.press("escape")  # back to the views; a puts the cursor in the answer line again
        assert not app.question_panel.input.has_focus
        await pilot.press("a")
        assert app.question_panel.input.has_focus
        await pilot.press(*"banana", "enter")
        await pilot.pause()
        assert app.quiz.pending == first and app.step == first.step - 1  # asked again
        app.question_panel.input.value = first.correct_line
        await pilot.press("enter")
        await pilot.pause()
        assert app.step == first.step and app.quiz.tally.right == 1
        assert not app.question_panel.input.has_focus


@pytest.mark.parametrize("keys", [("enter",), ("escape", "s")])
async def test_skip_reveals_and_counts_as_asked_not_right(app_on, lru, keys):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        await pilot.press(*keys)  # a blank answer line, or s from the views
        await pilot.pause()
        assert app.step == first.step
        assert (app.quiz.tally.right, app.quiz.tally.asked, app.quiz.tally.streak) == (0, 1, 0)
        assert "Skipped" in _panel_text(app)


async def test_hints_come_one_at_a_time_from_the_rule_to_the_numbers(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert "Hint 1" not in _panel_text(app)
        await pilot.press("question_mark", "enter")  # ? in the answer line
        await pilot.pause()
        assert "Hint 1 of 3:" in _panel_text(app) and "Hint 2" not in _panel_text(app)
        assert app.question_panel.input.value == "" and app.quiz.pending == first
        await pilot.press("escape", "t")  # t from the views
        await pilot.pause()
        text = " ".join(_panel_text(app).split())
        assert "Hint 2 of 3:" in text and " ".join(first.hints[1].split())[:25] in text
        app.action_hint()
        app.action_hint()  # past the last: it stays
        await pilot.pause()
        assert "Hint 3 of 3:" in _panel_text(app) and app.quiz.tally.asked == 0


async def test_stepping_back_never_asks_an_answered_question_again(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        app.answer_question(_right_line(first))
        app.action_first_step()
        for _ in range(first.step):
            app.action_next_step()
        await pilot.pause()
        assert app.step == first.step and app.quiz.pending is None
        assert app.quiz.tally.asked == 1


async def test_stepping_back_from_a_question_unasks_it_and_asks_it_later(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE):
        app.action_next_step()
        app.action_previous_step()
        assert app.quiz.pending is None and app.quiz.tally.asked == 0
        app.action_next_step()
        app.action_next_step()
        assert app.quiz.pending == first


async def test_a_jump_stops_at_the_first_unanswered_question(app_on, lru):
    asked = questions(lru, 0)
    app = app_on(lru, quiz=True)
    async with app.run_test(size=SIZE):
        app.go_to(asked[1].step)
        assert app.quiz.pending == asked[0]
        app.action_skip_question()
        app.go_to(asked[1].step)
        assert app.quiz.pending == asked[1] and app.step == asked[1].step - 1


async def test_playing_pauses_at_a_question(app_on, lru):
    first = questions(lru, 0)[0]
    app = app_on(lru, quiz=True)
    async with app.run_test(size=SIZE):
        app.action_play()
        for _ in range(first.step):
            app.play_tick()
        assert not app.playing and app.quiz.pending == first


async def test_the_answer_keys_do_nothing_without_a_question(app_on, lru):
    app = app_on(lru, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1", "s", "t")
        assert app.quiz.tally.asked == 0 and app.step == 0
        assert not app.check_action("answer_choice", ("1",))


async def test_a_typed_op_keeps_the_score_and_the_answers(app_on, small):
    first = questions(small, 0)[0]
    app = app_on(small, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE):
        app.action_next_step()
        app.answer_question(_right_line(first))
        app.action_last_step()
        if app.quiz.pending is not None:
            app.action_skip_question()
        asked = app.quiz.tally.asked
        from kvviz.core.scenario import parse_command

        app.apply_op(parse_command("acquire z 1..4", small.live_names(), small.vocab))
        practice = app._current_quiz()
        assert practice.tally.asked >= asked and first.step in practice.answered


def test_renewed_runs_keep_only_answers_to_the_same_question(lru, small):
    run = QuizRun(lru, 0)
    step, question = next(iter(run.by_step.items()))
    run.ask(question)
    run.answer(_right_line(question))
    same = run.renewed(lru, 1)
    assert step in same.answered and same.tally == run.tally
    other = run.renewed(small, 2)
    assert all(other.by_step.get(s) == run.by_step.get(s) for s in other.answered)


def test_launch_ui_opens_practice_mode_with_the_seed(monkeypatch, lru):
    from kvviz import commands as common
    from kvviz.explore.launch import launch_ui

    started = []
    monkeypatch.setattr(common, "run_app", started.append)
    launch_ui(lru, quiz_seed=7)
    launch_ui(lru)
    assert isinstance(started[0], KvvizApp)
    assert started[0].start_quiz and started[0].quiz_seed == 7
    assert not started[1].start_quiz


@pytest.mark.parametrize("reveal", [False, True])
def test_snapshot_question_and_reveal(snap_compare, lru, reveal):
    from kvviz.explore.app import make_app

    first = questions(lru, 0)[0]
    app = make_app(lru, first.step - 1, animations=False, cursor_blink=False, quiz=True)

    async def ask(pilot):
        app.action_next_step()
        if reveal:
            app.answer_question(_wrong_line(first))
        await pilot.pause()

    assert snap_compare(app, run_before=ask, terminal_size=SIZE)


async def test_the_hint_takes_the_key_lines_place(app_on, lru):
    from kvviz.explore.quiz_mode import QUIZ_KEYS

    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert QUIZ_KEYS[:20] in _panel_text(app)
        app.action_hint()
        await pilot.pause()
        assert "Hint 1 of 3:" in _panel_text(app) and QUIZ_KEYS[:20] not in _panel_text(app)


async def test_a_choice_of_ten_or_more_is_typed_in_full_and_one_digit_never_answers_at_once(app_on):
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session

    # 12 pages free before the release of r's 2 unpublished pages: the choices are 12 and up.
    session = Session.from_scenario(parse_scenario(
        "cache trie pages=16 tokens_per_page=4\nacquire r 1..8\nrelease r\n"))
    asked = questions(session, 0)
    (question,) = [q for q in asked if q.kind == "free"]
    assert question.answer >= 10 and all(c.value >= 10 for c in question.choices)
    app = app_on(session, question.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        await pilot.press("1")
        await pilot.pause()
        assert app.quiz.pending == question  # "1" alone is not scored at once
        await pilot.press(*str(question.answer)[1:], "enter")
        await pilot.pause()
        assert app.quiz.tally.right == 1 and app.step == question.step


async def test_f_steps_into_the_sub_step_where_a_wrong_answer_parted(app_on):
    from kvviz.teach.generate import generate
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session

    # kvviz quiz --random --seed 0 --level medium: the cascade question at step 13
    session = Session.from_scenario(parse_scenario(generate(0, "medium")))
    (question,) = [q for q in questions(session, 0) if q.step == 13]
    wrong = next(c for c in question.choices if c.mistake)
    parted = question.divergence(wrong.value)
    assert parted is not None and parted.substep is not None
    app = app_on(session, question.step - 1, quiz=True, quiz_seed=0)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert not app.check_action("step_to_parting", ())  # nothing parted yet
        app.answer_question(wrong.label)
        await pilot.pause()
        assert "f step into the sub-step" in _panel_text(app)
        await pilot.press("f")
        await pilot.pause()
        assert (app.step, app.substep) == (parted.step, parted.substep)


async def test_the_heap_is_hidden_while_a_victim_question_is_asked(app_on, lru):
    victim = next(q for q in questions(lru, 0) if q.kind == "victim")
    app = app_on(lru, victim.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        assert app.heap.visible
        app.action_next_step()
        await pilot.pause()
        assert app.quiz.pending == victim and app.screen.has_class("-order-hidden") and not app.heap.visible
        assert "The heap is hidden until you answer" in _panel_text(app)
        app.answer_question(victim.correct_choice.label)
        await pilot.pause()
        assert not app.screen.has_class("-order-hidden") and app.heap.visible


def _line_of_candidates_question(session):
    """The ``lru`` demo's victim question whose step before it tells the line of candidates,
    oldest first: its first in line is the answer's page's sequence."""
    return next(q for q in questions(session, 0) if q.kind == "victim"
                and "oldest first" in session.frame(q.step - 1).story)


async def test_the_story_and_the_why_are_withheld_while_a_question_is_asked(app_on, lru):
    from kvviz.core.view import PAGE, Selection
    from kvviz.explore.quiz_mode import WITHHELD_STORY, WITHHELD_WHY

    victim = _line_of_candidates_question(lru)
    story = lru.frame(victim.step - 1).story
    line = story[story.index("oldest first"):].split(".")[0]  # "oldest first: s2 (7), s4 (13), ..."
    page = victim.answer  # the victim's page
    app = app_on(lru, victim.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_toggle_why()
        app.select(Selection(PAGE, page))
        await pilot.pause()
        assert line in app.narration.text  # not asking yet: the story shows
        told = app.why.text  # and the why tells about the answer's page ("the next victim")
        assert f"page {page}" in told.lower()
        app.action_next_step()
        await pilot.pause()
        assert app.quiz.pending == victim and app.step == victim.step - 1
        assert line not in app.narration.text and " ".join(WITHHELD_STORY.split()[:4]) in app.narration.text
        assert app.why.text.startswith(WITHHELD_WHY.title) and f"page {page}" not in app.why.text.lower()
        app.action_toggle_why()
        app.action_toggle_why()  # shown again while asking: still withheld
        await pilot.pause()
        assert app.why.text.startswith(WITHHELD_WHY.title)
        app.answer_question(victim.correct_choice.label)
        await pilot.pause()
        assert app.step == victim.step
        assert lru.frame(victim.step).story.split(".")[0] in app.narration.text  # the revealed step's story
        assert not app.why.text.startswith(WITHHELD_WHY.title)
        app.action_previous_step()  # back to the step the question was asked at: its story is back
        await pilot.pause()
        assert line in app.narration.text and app.why.text == told


async def test_leaving_practice_while_asking_shows_the_story_again(app_on, lru):
    victim = _line_of_candidates_question(lru)
    app = app_on(lru, victim.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert app.quiz.pending == victim
        assert "oldest first" not in app.narration.text
        app.action_toggle_quiz()
        await pilot.pause()
        assert app.quiz is None and "oldest first" in app.narration.text


def test_the_p_key_is_quiz_mode_in_the_footer_help_and_palette():
    from kvviz.ui.screens.help_screen import KEYS
    from kvviz.explore.timeline_screen import TimelineScreen

    binding = next(b for b in TimelineScreen.BINDINGS if getattr(b, "key", None) == "p")
    assert binding.description == "quiz"
    assert ("p", "quiz mode on / off: predict each interesting step, then see it") in KEYS
    assert not any("practice" in text for _, text in KEYS)  # "practice" is kvviz practice's exercises


async def test_while_a_question_is_asked_the_track_marks_no_step_ahead(app_on, lru):
    from kvviz.ui.widgets.timeline_bar import GLYPHS, track_cells

    first = questions(lru, 0)[0]
    app = app_on(lru, first.step - 1, quiz=True)
    async with app.run_test(size=SIZE) as pilot:
        app.action_next_step()
        await pilot.pause()
        assert app.quiz.pending == first
        track = app.timeline.text.splitlines()[1]
        cells = track_cells(lru.summaries, app.timeline.line_width)
        ahead = "".join(glyph for (low, _high, _), glyph in zip(cells, track) if low > app.step)
        assert set(ahead) == {GLYPHS["plain"]}, track  # no ✗, ▾, ? or ! ahead of the question
        assert any(lru.summaries[i].evictions for i in range(app.step + 1, len(lru))), "nothing to hide"
        await pilot.press(_right_line(first), "enter")
        await pilot.pause()
        assert app.quiz.pending is None and "▾" in app.timeline.text.splitlines()[1]  # answered: all marks
