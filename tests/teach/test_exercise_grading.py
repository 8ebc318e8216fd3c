# SPDX-License-Identifier: Apache-2.0
"""Each move kind's grading can fail: an exercise whose right choice were another one is
caught by the oracle, for every kind; and the exercise's rules about choices, reading
answers, playing (retry, fix, the score) and determinism."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvviz.core.designs import design
from kvviz.teach.exercise import MOVE_KINDS, Exercise, Play, build_exercise, move_kinds_of, read_choice, state_lines

from .oracle import problems
from .scenarios import demo_session, random_session

WHERE = {"stop": "lru", "take": "lru", "victim": "lru", "swap": "lru", "dedup": "dedup", "drop": "hash-vs-trie"}


def _first(kind: str, **match):
    session = demo_session(WHERE[kind])
    exercise = build_exercise(session, seed=3)
    for move in exercise.moves:
        if move.kind == kind and all(getattr(move.answer, k) == v for k, v in match.items()):
            return session, exercise, move
    raise AssertionError(f"no {kind} move in {WHERE[kind]}")


def _graded_as(move, other):
    """``move`` with ``other`` marked right and its right choice marked as a mistake."""
    choices = tuple(replace(c, mistake=None) if c is other else replace(c, mistake=c.mistake or "planted")
                    for c in move.choices)
    return replace(move, choices=choices)


@pytest.mark.parametrize("kind", sorted(MOVE_KINDS))
def test_a_wrong_grade_of_each_move_kind_is_caught_by_the_oracle(kind):
    session, exercise, move = _first(kind)
    assert problems(Exercise(exercise.title, 3, (move,), exercise.design), session, counts=False) == []
    for other in move.choices:
        if other.right:
            continue
        planted = Exercise(exercise.title, 3, (_graded_as(move, other),), exercise.design)
        found = problems(planted, session)
        assert any("the oracle says" in line for line in found), (other, found)


def test_a_sift_stop_graded_as_a_swap_is_caught():
    session, exercise, move = _first("swap", value=())
    other = next(c for c in move.choices if not c.right)
    planted = Exercise(exercise.title, 3, (_graded_as(move, other),), exercise.design)
    found = problems(planted, session, counts=False)
    assert found


def test_a_move_shown_on_a_state_kvcore_never_held_is_caught():
    session, exercise, move = _first("victim")
    wrong_state = session.frame(move.step - 2).snapshot  # two ops before: the clock is behind
    planted = Exercise(exercise.title, 3, (replace(move, state=wrong_state),), exercise.design)
    found = problems(planted, session, counts=False)
    assert any("none of kvcore's own states" in line for line in found)


def test_every_wrong_choice_names_its_mistake_and_says_why():
    for name in ("lru", "dedup", "hash-vs-trie", "eviction-cascade"):
        for move in build_exercise(demo_session(name)).moves:
            assert sum(c.right for c in move.choices) == 1
            for c in move.choices:
                assert c.why and (c.right or c.mistake), (move.kind, c)


def test_a_victim_move_never_shows_the_heap_array():
    _, _, move = _first("victim")
    lines = state_lines(move)
    assert not any("Heap" in line for line in lines)
    assert any("key" in line for line in lines)


def test_moves_are_derived_from_each_designs_event_table():
    assert move_kinds_of(design("hash")) == ("stop", "take", "drop")
    assert "drop" not in move_kinds_of(design("trie"))
    assert {"victim", "swap", "dedup"} <= set(move_kinds_of(design("trie")))


def test_the_same_seed_gives_the_same_exercise_and_another_seed_shuffles_the_choices():
    a = build_exercise(demo_session("dedup"), seed=1)
    b = build_exercise(demo_session("dedup"), seed=1)
    assert [(m.kind, m.choices) for m in a.moves] == [(m.kind, m.choices) for m in b.moves]
    orders = {tuple(c.mistake for c in m.choices) for s in range(6)
              for m in build_exercise(demo_session("dedup"), seed=s).moves if m.kind == "take"}
    assert len(orders) > 1


def test_answers_are_read_as_letters_or_typed_values():
    _, _, take = _first("take")
    assert read_choice(take, take.answer.letter.upper()) == take.answer
    assert read_choice(take, " ".join(map(str, take.answer.value))) == take.answer
    _, _, swap = _first("swap")
    a, b = swap.answer.value or (None, None)
    if a is not None:
        assert read_choice(swap, f"[{b}] [{a}]") == swap.answer
    _, _, stop = _first("swap", value=())
    assert read_choice(stop, "stop") == stop.answer
    _, _, victim = _first("victim")
    assert read_choice(victim, f"node {victim.answer.value[0]}") == victim.answer
    with pytest.raises(ValueError, match="there is no choice z: choose a-"):
        read_choice(victim, "z")
    with pytest.raises(ValueError, match="none of the choices"):
        read_choice(victim, "node 999")


def test_a_wrong_move_counts_one_miss_and_fix_applies_the_right_move():
    _, exercise, _ = _first("victim")
    play = Play(exercise)
    first = play.move
    wrong = next(c for c in first.choices if not c.right)
    play, verdict = play.answer(wrong)
    assert not verdict.right and play.position == 0 and wrong.mistake in verdict.line
    play, _ = play.answer(wrong)  # a second wrong try is no second miss
    play, verdict = play.fix()
    assert play.position == 1 and "Fixed" in verdict.line
    assert play.results == (play.results[0],) and not play.results[0].right and play.results[0].fixed
    play, verdict = play.answer(play.move.answer)
    assert verdict.right and play.right == 1 and len(play.results) == 2
    assert play.misses_by_kind() == {first.kind: 1}


def test_a_right_answer_after_a_wrong_one_still_counts_as_a_miss():
    _, exercise, _ = _first("take")
    play = Play(exercise)
    wrong = next(c for c in play.move.choices if not c.right)
    play, _ = play.answer(wrong)
    play, verdict = play.answer(play.move.answer)
    assert verdict.right and play.right == 0 and play.results[0].mistake == wrong.mistake


def test_every_move_has_at_least_two_choices_lettered_from_a():
    for case in ((0, "hard", "trie", "lru"), (1, "hard", "hash", "lru"), (2, "medium", "base", "lru")):
        for move in build_exercise(random_session(*case)).moves:
            assert 2 <= len(move.choices) <= 8
            assert [c.letter for c in move.choices] == list("abcdefgh"[:len(move.choices)])


def test_kinds_and_max_moves_limit_the_exercise():
    session = demo_session("lru")
    only = build_exercise(session, kinds=["victim"])
    assert only.moves and {m.kind for m in only.moves} == {"victim"}
    short = build_exercise(session, max_moves=3)
    assert 3 <= len(short.moves) < len(build_exercise(session).moves)
    with pytest.raises(KeyError, match="no move kind"):
        build_exercise(session, kinds=["teleport"])


def test_a_new_design_gets_the_move_kinds_its_own_event_table_produces():
    from kvcore import events as ev

    from kvviz.core.designs import Design, EventWords, Nouns, register, unregister

    toy = Design(name="toy-practice", title="a toy cache", clauses={},
                 nouns=Nouns("slot", "slots", "array", "dropped", "free queue", "op"),
                 events={ev.PagesTaken: EventWords("take", "took"), ev.Matched: EventWords("match", "matched")})
    register(toy)
    try:
        assert move_kinds_of(toy) == ("stop", "take")
    finally:
        unregister("toy-practice")


def test_a_hash_cache_with_recompute_last_token_caps_the_walk_before_the_last_token():
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session

    from .oracle import problems as oracle_problems

    text = ("cache hash pages=6 tokens_per_page=2 recompute_last_token=yes\n"
            "acquire a 1 2 3 4\npublish a\nrelease a\nacquire b 1 2 3 4\n")
    session = Session.from_scenario(parse_scenario(text, "<capped>"))
    exercise = build_exercise(session)
    stop = [m for m in exercise.moves if m.kind == "stop" and m.step == 4][0]
    assert stop.answer.value == (1,) and "recompute_last_token" in stop.answer.why
    assert any(c.mistake == "past-the-cap" for c in stop.choices)
    assert oracle_problems(exercise, session) == []
