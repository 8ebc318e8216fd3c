# SPDX-License-Identifier: Apache-2.0
"""One choice, one set of letters, one hint word list, one letter reader and one score line
for the quiz and the practice moves (kvviz/teach/quiz/choices.py), defined nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

from kvviz.teach.practice_command import _session
from kvviz.teach.exercise import build_exercise
from kvviz.teach.quiz import questions
from kvviz.teach.quiz.choices import Choice, score_line

KVVIZ = Path(__file__).resolve().parents[2] / "kvviz"


def _definitions(pattern: str) -> list[str]:
    found = []
    for path in sorted(KVVIZ.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(pattern, line):
                found.append(f"{path.relative_to(KVVIZ)}:{n}")
    return found


def test_choice_letters_and_hint_words_are_defined_once():
    assert [d.split(":")[0] for d in _definitions(r"class Choice\b")] == ["teach/quiz/choices.py"]
    assert len(_definitions(r"LETTERS = ")) == 1
    assert len(_definitions(r"HINT_WORDS = ")) == 1
    assert len(_definitions(r"FIX_WORDS = ")) == 1


def test_a_quiz_question_and_a_practice_move_offer_the_same_choice():
    session = _session("lru", False, 0, None, None, None)
    move = build_exercise(session, max_moves=5).moves[0]
    question = questions(session)[0]
    assert all(type(c) is Choice for c in move.choices + question.choices)


def test_one_score_line_words_the_quiz_and_the_moves():
    assert score_line(1, 1, "move") == "Score: 1 of 1 move right first time"
    assert score_line(3, 4, "question", 2) == "Score: 3 of 4 questions right, streak 2"
