# SPDX-License-Identifier: Apache-2.0
"""The whole course played through: a learner who computes every move from the state shown
(this test's oracle, never kvviz's grading) passes every stage at the first try, and a
learner right nine times in ten (seeded) still finishes, reviews and all."""

from __future__ import annotations

import random

from kvviz.teach.practice_command import round_session
from kvviz.core.demos import load_demo
from kvviz.teach.course import COURSE, MIN_MOVES, STAGES, Progress, next_round, record, round_exercise

from .oracle import expected


def _play(progress: Progress, answer) -> tuple[Progress, object]:
    """The next round played by ``answer(move, session, oracle's value) -> choice``."""
    round_ = next_round(progress)
    session = round_session(round_)
    exercise = round_exercise(session, round_)
    right, misses = 0, {}
    for move in exercise.moves:
        value = expected(move, session, session.frame(move.step - 1).snapshot)
        choice = answer(move, value)
        if choice.right:
            right += 1
        else:
            misses[move.kind] = misses.get(move.kind, 0) + 1
    return record(progress, round_, len(exercise.moves), right, misses), round_


def _reference(move, value):
    return next(c for c in move.choices if c.value == value)


def test_a_learner_who_computes_every_move_passes_every_stage_at_the_first_try():
    progress, rounds = Progress(), []
    while next_round(progress) is not None and len(rounds) < 2 * len(COURSE) * len(STAGES):
        progress, round_ = _play(progress, _reference)
        rounds.append((round_.lesson, round_.stage))
    assert next_round(progress) is None  # the course is done
    assert len(rounds) == len(COURSE) * len(STAGES) == len(set(rounds))  # each stage once: no retries, no reviews
    assert rounds.index(("lru", "demo")) == 3
    assert all(r.passed for r in progress.rounds)


def test_a_learner_right_nine_times_in_ten_finishes_the_course():
    rng = random.Random(9)

    def learner(move, value):
        right = _reference(move, value)
        if rng.random() < 0.9:
            return right
        return rng.choice([c for c in move.choices if c is not right])

    progress = Progress()
    limit = 4 * len(COURSE) * len(STAGES)
    while next_round(progress) is not None and len(progress.rounds) < limit:
        progress, _ = _play(progress, learner)
    assert next_round(progress) is None, f"not done after {len(progress.rounds)} rounds"
    assert sum(not r.passed for r in progress.rounds) > 0  # it did miss: the test is not the first one again


def test_base_vs_tries_demo_round_practises_the_base_cache_and_goes_on_to_a_stages_moves():
    """On a base cache the demo has 3 take moves (it was played on the trie instead): the round
    runs it on the base cache and goes on, on that cache, with a generated scenario's ops."""
    progress = Progress()
    while (next_round(progress).lesson, next_round(progress).stage) != ("base-vs-trie", "demo"):
        progress, _ = _play(progress, _reference)
    for failed in range(3):  # the round, and the same round failed and back with fresh seeds
        round_ = next_round(progress)
        assert (round_.lesson, round_.stage, round_.design) == ("base-vs-trie", "demo", "base")
        assert "its demo on a base cache" in round_.title
        session = round_session(round_)
        assert session.config.kind == "base" and session.title == load_demo("base-vs-trie").title
        demo = len(load_demo("base-vs-trie").steps)
        assert any(session.frame(i).op.name.startswith("g") for i in range(demo + 1, len(session)))  # ops go on
        moves = round_exercise(session, round_).moves
        assert len(moves) >= MIN_MOVES and {m.kind for m in moves} <= set(round_.kinds)
        assert any(m.step <= demo for m in moves) and any(m.step > demo for m in moves)
        progress = record(progress, round_, len(moves), 0, {})  # failed: back with a fresh seed
