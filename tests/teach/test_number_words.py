# SPDX-License-Identifier: Apache-2.0
"""One way to count in words: every prompt, choice, why, hint and rule of the practice moves
and quiz questions of seeded rounds on every design agrees number and noun ("1 child", "there
is 1", "the last token"), checked by patterns of this test's own."""

from __future__ import annotations

import re

import pytest

from kvviz.teach.practice_command import _session
from kvviz.core.demos import LESSONS
from kvviz.teach.exercise import MOVE_KINDS, build_exercise
from kvviz.teach.quiz import questions

# a count of one before a plural noun or verb, but not an id ("page 1 leaves", "node 1 sits")
_NOUNS = r"(?<!page )(?<!node )(?<!block )(?<!slot )(?<!, )(?<![\d.,\-\[])"
FINDINGS = [re.compile(p) for p in (
    r"\bchilds\b",
    _NOUNS + r"\b1 (?:are|were)\b",
    r"\bthere are 1\b",
    _NOUNS + r"\b1 (?:tokens|pages|blocks|nodes|moves|rounds|children|candidates)\b",
    r"\bblocks 0\.\.0\b",
    r"\bof it drop\b",
)]


def _texts(session):
    for move in build_exercise(session, seed=1, max_moves=400).moves:
        yield move.prompt
        for choice in move.choices:
            yield choice.text
            yield choice.why
    for question in questions(session, seed=1):
        yield question.text
        yield question.why
        yield from question.hints
        for choice in question.choices:
            yield choice.text
            yield choice.mistake or ""


def _sessions(design):
    for lesson in LESSONS:
        yield _session(lesson, False, 0, None, None, design)
    for level in ("easy", "medium", "hard"):
        for seed in range(8):
            yield _session(None, True, seed, level, None, design)


@pytest.mark.parametrize("design", ["trie", "base", "hash"])
def test_no_sentence_of_a_round_says_one_with_a_plural(design):
    found = [f"{m.group(0)!r} in {text!r}" for session in _sessions(design) for text in _texts(session)
             for pattern in FINDINGS for m in pattern.finditer(text)]
    assert found == []


def test_the_move_rules_say_their_numbers_in_agreement():
    assert [kind.rule for kind in MOVE_KINDS.values() if any(p.search(kind.rule) for p in FINDINGS)] == []
