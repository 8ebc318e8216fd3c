# SPDX-License-Identifier: Apache-2.0
"""What the learner reads after answering, the score, and the record a teacher reads (shared
by the plain command and the UI's question panel)."""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.teach.quiz.choices import score_line
from kvviz.teach.quiz.core import Question, Reply


def feedback(question: Question, reply: Reply | None) -> tuple[str, ...]:
    """What the learner reads after answering (``reply`` None: skipped): right or wrong, the
    correct answer, the mistake a wrong choice models, where the answer parted from the cache
    (the sub-step to step into), and one sentence of why."""
    correct = f"{question.correct_choice.label}) {question.describe(question.answer)}"
    if reply is None:
        lines = [f"Skipped. The answer is {correct}."]
    elif reply.right:
        lines = [f"Right: {question.describe(question.answer)}."]
    else:
        lines = [f"Wrong: you said {question.describe(reply.value)}; the answer is {correct}."]
        if reply.mistake:
            lines.append(_mistake_line(reply.mistake))
        parted = question.divergence(reply.value)
        if parted is not None:
            lines.append(f"Where it parted: {parted.sentence}")
    lines.append(f"Why: {question.why}")
    return tuple(lines)


def _mistake_line(mistake: str) -> str:
    """``Your choice (none) is the mistake: a released node stays cached...``: a mistake
    sentence is ``what the choice said: why that is wrong``; the choice's words are quoted as
    such, never read as the sentence's subject ("That choice is none")."""
    said, sep, why = mistake.partition(": ")
    if not sep:
        return f"Your choice is the mistake that {mistake}."
    return f"Your choice ({said}) is the mistake: {why}."


def record(question: Question, reply: Reply | None, given: str | None, hints_seen: int = 0) -> dict:
    """One question's entry in the quiz's JSON: what was asked and answered, whether it was
    right, the mistake tag of the choice given (a teacher's view of misconceptions), the hints
    (and how many the learner read), the why, and where a wrong answer parted from the cache
    (``substep`` 0-based into the op's sub-steps, which the UI numbers from 1; None: the step)."""
    parted = question.divergence(reply.value) if reply is not None and not reply.right else None
    return {
        "kind": question.kind, "step": question.step, "question": question.text,
        "choices": [c.line() for c in question.choices],
        "choice_mistakes": {c.label: c.tag for c in question.choices if c.tag},
        "given": given, "correct_answer": question.correct_line, "correct_choice": question.correct_choice.label,
        "right": reply is not None and reply.right,
        "mistake": reply.tag if reply is not None and not reply.right else None,
        "hints": list(question.hints), "hints_seen": hints_seen, "why": question.why,
        "parted": None if parted is None else {"step": parted.step, "substep": parted.substep,
                                               "sentence": parted.sentence},
    }


@dataclass(frozen=True)
class Tally:
    """The score so far: right answers, questions asked (skips count as asked, not right), streak."""

    right: int = 0
    asked: int = 0
    streak: int = 0

    def add(self, reply: Reply | None) -> "Tally":
        """The tally after one more answer (None: a skip, which ends the streak)."""
        hit = reply is not None and reply.right
        return Tally(self.right + hit, self.asked + 1, self.streak + 1 if hit else 0)

    def line(self) -> str:
        """``Score: 3 of 4 questions right, streak 2``."""
        return score_line(self.right, self.asked, "question", self.streak)
