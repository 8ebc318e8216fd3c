# SPDX-License-Identifier: Apache-2.0
"""The quiz's input conventions as properties (letters choose, values typed in full, a choice of
10 or more), and the state shown before a victim question giving the answer away no more often
than a random guess would."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from kvviz.explore.quiz_command import _state
from kvviz.teach.quiz import LETTERS, AnswerError, StepView, questions, questions_at, shown_candidates
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

from . import quiz_oracle as oracle

_SESSIONS: dict = {}


def _session(seed: int, level: str, kind: str, policy: str) -> Session:
    key = (seed, level, kind, policy)
    if key not in _SESSIONS:
        _SESSIONS[key] = oracle.random_session(seed, level, kind, policy)
    return _SESSIONS[key]


def _questions(seed, level, kind, policy):
    return questions(_session(seed, level, kind, policy), seed)


scenarios = st.tuples(st.integers(0, 40), st.sampled_from(oracle.LEVELS),
                      st.sampled_from(["trie", "trie", "base", "hash"]), st.sampled_from(oracle.POLICIES))


@given(scenarios, st.data())
def test_every_choice_letter_in_either_case_reads_as_that_choice(case, data):
    seed, level, kind, policy = case
    asked = _questions(seed, level, kind, "lru" if kind != "trie" else policy)
    if not asked:
        return
    q = data.draw(st.sampled_from(asked))
    choice = data.draw(st.sampled_from(q.choices))
    label = data.draw(st.sampled_from([choice.label, choice.label.upper(), f"  {choice.label} "]))
    reply = q.read(label)
    assert reply.value == choice.value and reply.right == (choice.mistake is None)
    assert reply.tag == choice.tag


@given(scenarios, st.data())
def test_every_value_typed_in_full_reads_as_that_value(case, data):
    seed, level, kind, policy = case
    asked = _questions(seed, level, kind, "lru" if kind != "trie" else policy)
    if not asked:
        return
    q = data.draw(st.sampled_from(asked))
    choice = data.draw(st.sampled_from(q.choices))
    line = q.value_line(choice.value)
    if q.spec.form != "number" and choice.value:
        line = data.draw(st.sampled_from([line, line.replace(" ", ", "), f"{q.spec.noun}s {line}"]))
    reply = q.read(line)
    assert reply.value == choice.value and reply.right == (choice.mistake is None)


@given(scenarios, st.data())
def test_a_letter_past_the_choices_is_refused_never_read_as_another_choice(case, data):
    seed, level, kind, policy = case
    asked = _questions(seed, level, kind, "lru" if kind != "trie" else policy)
    if not asked:
        return
    q = data.draw(st.sampled_from(asked))
    letter = data.draw(st.sampled_from(LETTERS[len(q.choices):]))
    try:
        q.read(letter)
    except AnswerError as error:
        assert f"there is no choice {letter}" in str(error)
    else:
        raise AssertionError(f"{letter!r} was read as an answer")


@given(st.integers(10, 40), st.integers(1, 6), st.data())
def test_a_choice_of_ten_or_more_is_chosen_by_its_letter_or_its_value(free, pages, data):
    # `pages` unpublished pages released into a pool with `free` free pages: every choice is 10 or more.
    tpp = 4
    total = free + pages
    text = f"cache trie pages={total} tokens_per_page={tpp}\nacquire r 1..{pages * tpp}\nrelease r\n"
    session = Session.from_scenario(parse_scenario(text))
    view = StepView(session, 2, session.frame(1), session.frame(2))
    (q,) = [q for q in questions_at(view, random.Random(data.draw(st.integers(0, 99)))) if q.kind == "free"]
    assert all(c.value >= 10 for c in q.choices)
    choice = data.draw(st.sampled_from(q.choices))
    assert q.read(choice.label).value == choice.value == q.read(str(choice.value)).value
    assert q.read(str(q.answer)).right
    assert not q.read(str(q.answer)[0]).right  # one digit is a value of its own, never a choice


@given(scenarios, st.data())
def test_a_lone_number_in_a_list_question_is_a_one_page_answer(case, data):
    seed, level, kind, policy = case
    asked = [q for q in _questions(seed, level, kind, "lru" if kind != "trie" else policy)
             if q.spec.form != "number"]
    if not asked:
        return
    q = data.draw(st.sampled_from(asked))
    page = data.draw(st.integers(0, q.bound))
    assert q.read(str(page)).value == (page,)


# -- the state shown before a victim question ----------------------------------------------------


def _victim_questions(n):
    """``n`` victim questions of seeded random scenarios over every policy, with their views."""
    out = []
    for seed in range(400):
        for policy in oracle.POLICIES:
            session = _session(seed, oracle.LEVELS[seed % 3], "trie", policy)
            for index in range(1, len(session)):
                view = StepView(session, index, session.frame(index - 1), session.frame(index))
                for q in questions_at(view, random.Random(index)):
                    if q.kind == "victim":
                        out.append((session, q))
                        if len(out) == n:
                            return out
    return out


def _listed_pages(text):
    import re

    return [int(p) for p in re.findall(r"node \d+ page (\d+) key", text)]


def test_the_candidates_shown_before_a_victim_question_give_it_away_no_more_than_a_guess():
    asked = _victim_questions(500)
    assert len(asked) == 500
    first_right = heap_top_right = guess = 0.0
    for session, q in asked:
        snap = session.frame(q.step - 1).snapshot
        listed = _listed_pages(shown_candidates(snap, 0, q.step))
        assert sorted(listed) == sorted(snap.node(n).page for n in snap.heap)  # every candidate, once
        first_right += listed[0] == q.answer
        heap_top_right += snap.node(snap.heap[0]).page == q.answer
        guess += 1 / len(listed)  # a blind pick among the candidates shown
    share, top, chance = first_right / 500, heap_top_right / 500, guess / 500
    # The heap in array order would give most answers away (the measure can fail) ...
    assert top > 0.8, top
    # ... the shuffled list no more often than a blind pick among the candidates it lists (with
    # slack for a sample of 500: two standard deviations of a proportion near 0.5 is about 0.045).
    assert share <= chance + 0.045, (share, chance)


def test_the_plain_quiz_state_never_shows_the_heap_in_array_order_nor_lists_a_victim_questions_candidates():
    for session, q in _victim_questions(40):
        text = _state(session, q, 0)
        assert "array order" not in text and "<- next victim" not in text
        assert "in no particular order" not in text  # the smallest key listed would be the answer
        assert "Eviction candidates: not listed for this question" in text
