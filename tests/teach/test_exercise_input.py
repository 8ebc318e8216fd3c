# SPDX-License-Identifier: Apache-2.0
"""Property tests of the input conventions: every choice of every move reads back from its
letter (either case) and from its value typed in full, and any other text is a ValueError
or some choice of the move, never another exception."""

from __future__ import annotations

from functools import lru_cache

from hypothesis import given
from hypothesis import strategies as st

from kvviz.teach.exercise import build_exercise, read_choice

from .scenarios import demo_session, random_session


@lru_cache(maxsize=1)
def _moves():
    moves = []
    for name in ("lru", "dedup", "hash-vs-trie", "eviction-cascade", "policies"):
        moves += build_exercise(demo_session(name), seed=5).moves
    moves += build_exercise(random_session(3, "hard")).moves
    return tuple(moves)


def typed(kind: str, value: tuple) -> str:
    """A choice's value as a learner would type it."""
    if kind == "dedup":
        return "create" if value == ("create",) else f"adopt node {value[1]}"
    if not value:
        return "stop" if kind == "swap" else "none"
    if kind == "swap":
        return f"[{value[1]}] [{value[0]}]"
    if kind == "victim":
        return f"node {value[0]}"
    return " ".join(map(str, value))


moves = st.integers(0, 10**6).map(lambda i: _moves()[i % len(_moves())])


@given(moves, st.data())
def test_every_choice_reads_back_from_its_letter_in_either_case_and_from_its_value(move, data):
    choice = data.draw(st.sampled_from(move.choices))
    assert read_choice(move, choice.letter) == choice
    assert read_choice(move, f"  {choice.letter.upper()} ") == choice
    assert read_choice(move, typed(move.kind, choice.value)) == choice


@given(moves, st.text(max_size=40))
def test_any_other_text_is_a_choice_or_a_one_line_value_error(move, text):
    try:
        choice = read_choice(move, text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert choice in move.choices


def test_a_letter_past_the_last_choice_names_the_letters():
    move = next(m for m in _moves() if len(m.choices) == 2)
    try:
        read_choice(move, "c")
    except ValueError as exc:
        assert "there is no choice c: choose a-b" in str(exc)
    else:  # pragma: no cover - the assertion below says what went wrong
        raise AssertionError("c read as a choice of a two-choice move")
