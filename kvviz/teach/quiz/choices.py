# SPDX-License-Identifier: Apache-2.0
"""What the quiz and the practice moves share: a lettered :class:`Choice`, the letters, the
words that ask for a hint or the cache's move, reading a choice letter, and the score line.

One of each, so a learner meets the same choice, the same keys and the same score in
``kvviz quiz`` (its questions), ``kvviz practice`` (its moves) and the UI's quiz mode.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FIX_WORDS", "HINT_WORDS", "LETTERS", "Choice", "letter_choice", "score_line"]

LETTERS = string.ascii_lowercase
"""Choice letters, in order: at most 26 choices."""

HINT_WORDS = ("?", "hint")
"""An answer line that asks for the hint instead of answering."""

FIX_WORDS = ("fix", "x")
"""A practice answer line that applies the cache's move (a miss); ``x`` as in the UI, never a
choice letter (a move has at most eight choices)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """One lettered choice: its ``letter`` (what to type), its ``text``, its ``value`` (what a
    typed answer is compared with), the ``mistake`` it models (None: the right one), why it is
    right or wrong (a practice move's; a quiz question says why once, for all its choices),
    and the mistake's ``tag`` (:data:`kvviz.teach.quiz.MISTAKES`, the quiz's)."""

    letter: str
    text: str
    value: object
    mistake: str | None
    why: str = ""
    tag: str | None = None

    @property
    def right(self) -> bool:
        """Whether this is the right choice."""
        return self.mistake is None

    @property
    def label(self) -> str:
        """The letter (the quiz's name for it, in its JSON and its panel)."""
        return self.letter

    def line(self) -> str:
        """``"c) pages 4 5"``: how the choice is printed."""
        return f"{self.letter}) {self.text}"


def letter_choice(choices: Sequence[Choice], text: str) -> Choice | None:
    """The choice whose letter ``text`` is (one letter, any case); None when ``text`` is no
    letter at all. ValueError, naming the letters, for a letter no choice has."""
    text = text.strip().lower()
    if len(text) != 1 or text not in LETTERS:
        return None
    for choice in choices:
        if choice.letter == text:
            return choice
    raise ValueError(f"there is no choice {text}: choose {choices[0].letter}-{choices[-1].letter}, or type the "
                     "answer")


def score_line(right: int, asked: int, noun: str, streak: int | None = None) -> str:
    """``Score: 3 of 4 moves right first time`` (practice) or ``Score: 3 of 4 questions right,
    streak 2`` (quiz): one wording for both."""
    from kvviz.core.words import count

    line = f"Score: {right} of {count(asked, noun)} right"
    return line + (" first time" if streak is None else f", streak {streak}")
