# SPDX-License-Identifier: Apache-2.0
"""Every choice names something that exists where the question points, and the words around
a choice read as sentences: a hash drop offers only pages taken, the next swap only nodes
still in the heap, a sift says how its entry got to its slot, and a wrong quiz choice is
quoted, not made the subject ("That choice is none")."""

from __future__ import annotations

from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.teach.practice_command import _session
from kvviz.core.demos import LESSONS
from kvviz.teach.exercise import build_exercise
from kvviz.teach.quiz import feedback, questions


def _sessions(design):
    for lesson in LESSONS:
        yield _session(lesson, False, 0, None, None, design)
    for level in ("easy", "medium", "hard"):
        for seed in range(6):
            yield _session(None, True, seed, level, None, design)


def test_a_hash_drop_offers_only_pages_the_question_says_were_taken():
    drops = [m for s in _sessions("hash") for m in build_exercise(s, max_moves=400).moves if m.kind == "drop"]
    assert len(drops) >= 20
    for move in drops:
        taken = set(move.info("taken"))
        assert all(set(c.value) <= taken for c in move.choices), move.prompt
        assert "Which of it" not in move.prompt


def test_every_next_swap_choice_names_a_node_still_in_the_heap():
    from kvviz.teach.quiz.substep_kinds import _heap_after_pop

    asked = 0
    for design in ("trie",):
        for session in _sessions(design):
            for q in questions(session, seed=3):
                if q.kind == "next_swap":
                    asked += 1
                    heap = set(_heap_after_pop(q.view))
                    assert {c.value for c in q.choices} <= heap, q.text
    assert asked >= 1


def test_a_sift_move_says_how_its_entry_came_to_its_slot():
    session = _session("lru", False, 0, None, None, None)
    swaps = [m for m in build_exercise(session, kinds=["swap"], max_moves=400).moves]
    assert swaps and all(("pushed" in m.prompt or "left the heap" in m.prompt or "swapped" in m.prompt)
                         for m in swaps)
    assert any("the array's last entry came to slot [0]" in m.prompt for s in _sessions("trie")
               for m in build_exercise(s, kinds=["swap"], max_moves=400).moves)


def test_a_wrong_quiz_choice_is_quoted_in_the_feedback():
    for lesson in LESSONS:
        for q in questions(_session(lesson, False, 0, None, None, None)):
            wrong = next(c for c in q.choices if c.mistake)
            lines = feedback(q, q.read(wrong.label))
            assert not any(line.startswith("That choice is") for line in lines)
            assert any(line.startswith("Your choice (") for line in lines)


def test_a_random_rounds_header_names_the_scenario_once():
    result = CliRunner().invoke(cli, ["practice", "--random", "--plain"], input="")
    first = result.stdout.splitlines()[0]
    assert "Practice on Practice" not in result.stdout
    assert first.startswith("Practice: A random easy scenario, seed 0: ")


def test_matching_a_block_evicted_earlier_is_answered_with_its_eviction():
    session = _session("policies", False, 0, None, None, None)
    evicted_at = {}
    for step in range(1, len(session)):
        for e in session.frame(step).evictions:
            evicted_at[tuple(e.tokens)] = step
    answered = []
    for move in build_exercise(session, kinds=["stop"], max_moves=400).moves:
        for choice in move.choices:
            if choice.mistake == "past-the-stop" and "evicted at step" in choice.why:
                answered.append(choice.why)
    assert answered and all("an evicted block matches nothing" in why for why in answered)


def test_a_take_off_by_some_pages_says_how_many_this_take_hands_out():
    offs = [(m, c) for s in _sessions("trie") for m in build_exercise(s, kinds=["take"], max_moves=400).moves
            for c in m.choices if c.mistake and c.mistake.endswith(("-too-few", "-too-many"))]
    assert len(offs) >= 20
    for move, choice in offs:
        n = len(move.answer.value)
        assert f"this take hands out {n} page{'s' if n != 1 else ''}, not {len(choice.value)}" in choice.why


def test_a_wrong_next_swap_choice_is_told_what_it_said_and_what_the_sift_did():
    """"no swap" is quoted as such (not as the moved node's number), any other choice by its
    node; the parting says the entry stayed exactly when the answer is "no swap"."""
    from kvviz.teach.quiz.substep_kinds import NO_SWAP

    told = set()
    for session in _sessions("trie"):
        for q in questions(session, seed=1):
            if q.kind != "next_swap":
                continue
            stays = q.correct_choice.text == NO_SWAP
            for choice in q.choices:
                if choice.right:
                    continue
                lines = feedback(q, q.read(choice.letter))
                said = "no swap" if choice.text == NO_SWAP else f"node {choice.value}"
                assert lines[0].startswith(f"Wrong: you said {choice.text};"), lines
                parted = next(line for line in lines if line.startswith("Where it parted:"))
                assert f"you chose {said}:" in parted and ("so it stayed" in parted) == stays, lines
                told.add((choice.tag, stays))
    assert {("no-swap", False), ("swap-always", True), ("wrong-child", False), ("wrong-child", True)} <= told, told
