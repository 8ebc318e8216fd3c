# SPDX-License-Identifier: Apache-2.0
"""Predict, then reveal: questions at the interesting steps of a session, graded by the cache.

Each question is asked before step ``i`` is applied and answered from frame ``i`` (and the
op's sub-steps), the state the cache really reached: asking never applies an op. Every
question kind is one entry of :data:`KINDS` carrying when it applies, how to ask it, the
correct answer, the distractors (each computes a named mistake, :data:`MISTAKES`), graduated
hints, a why sentence and where a wrong answer parts from the cache (:class:`Parting`).
A design lists the kinds it brings (:attr:`kvviz.core.designs.Design.questions`): the trie's
(with sub-step kinds: the next heap swap, new candidates, dedup), the base cache's and the
hash cache's, each with its own rules. :func:`questions` picks one kind per interesting step,
deterministically for a (session, seed); :meth:`Question.read` turns an answer line (a choice
letter, or the answer typed in full) into a :class:`Reply`.

Modules: :mod:`.core` (types, reading), :mod:`.trie_kinds`, :mod:`.substep_kinds`,
:mod:`.base_kinds`, :mod:`.hash_kinds`, :mod:`.asking` (the table, choosing),
:mod:`.feedback` (feedback, JSON record, tally).
"""

from __future__ import annotations

from kvviz.teach.quiz.asking import KINDS, kinds_of, lesson_of, questions, questions_at, refusal, shown_candidates, step_views
from kvviz.teach.quiz.core import (LETTERS, MAX_DISTRACTORS, MISTAKES, AnswerError, Choice, Parting, Mistake, Question,
                   QuestionKind, Reply, StepView, Value, simulate_evictions, walk)
from kvviz.teach.quiz.feedback import Tally, feedback, record
from kvviz.teach.quiz.trie_kinds import partial_hit, ref_node, room, shown_pages

# The names tests and older callers used while this was one module.
_partial_hit, _room, _ref_node, _shown_pages = partial_hit, room, ref_node, shown_pages

__all__ = ["KINDS", "LETTERS", "MAX_DISTRACTORS", "MISTAKES", "AnswerError", "Choice", "Parting", "Mistake",
           "Question", "QuestionKind", "Reply", "StepView", "Tally", "Value", "feedback", "kinds_of", "lesson_of",
           "questions", "questions_at", "record", "refusal", "shown_candidates", "simulate_evictions", "step_views",
           "walk"]
