# SPDX-License-Identifier: Apache-2.0
"""Every exercise move on every demo and on random scenarios (every policy, base, hash) is
graded as the oracle (tests/teach/oracle.py, no kvviz sub-step code) derives it from
kvcore's own states. CI runs 12 random scenarios per cache config (108); ``pytest --soak``
runs 60 per config (540)."""

from __future__ import annotations

from collections import Counter

import pytest

from kvviz.teach.exercise import build_exercise

from .oracle import problems
from .scenarios import SOAK, all_demos, demo_session, random_cases, random_session

PER_CONFIG = 60 if SOAK else 12


@pytest.mark.parametrize("name", all_demos())
def test_every_move_of_every_demo_is_graded_as_the_oracle_derives_it(name):
    session = demo_session(name)
    exercise = build_exercise(session, seed=7)
    assert exercise.moves, f"{name} has no moves"
    assert problems(exercise, session) == []


@pytest.mark.parametrize("seed,level,design,policy", random_cases(PER_CONFIG),
                         ids=lambda v: str(v))
def test_every_move_of_random_scenarios_is_graded_as_the_oracle_derives_it(seed, level, design, policy):
    session = random_session(seed, level, design, policy)
    exercise = build_exercise(session, seed=seed)
    assert exercise.moves
    assert problems(exercise, session) == []


def test_the_demos_and_random_scenarios_reach_every_move_kind():
    kinds = Counter()
    for name in all_demos():
        kinds.update(m.kind for m in build_exercise(demo_session(name)).moves)
    assert set(kinds) == {"stop", "take", "drop", "victim", "swap", "dedup"}
    # a sift's stop (the answer "no swap") and a publish that creates beside a sibling are asked too
    moves = [m for name in ("lru", "dedup", "policies") for m in build_exercise(demo_session(name)).moves]
    assert any(m.kind == "swap" and m.answer.value == () for m in moves)
    assert any(m.kind == "dedup" and m.answer.value == ("create",) for m in moves)
