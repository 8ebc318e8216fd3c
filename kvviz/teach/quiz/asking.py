# SPDX-License-Identifier: Apache-2.0
"""Which questions are asked: the one table of kinds, the kinds a design brings, one question
per interesting step (a demo's lesson first), and the state shown before a question without
giving its answer away."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import TYPE_CHECKING

from kvviz.core.designs import design, design_of
from kvviz.core.policy_words import key_fields, key_value
from kvviz.teach.quiz.base_kinds import BASE_KINDS
from kvviz.teach.quiz.core import Question, QuestionKind, StepView, build
from kvviz.teach.quiz.hash_kinds import HASH_KINDS
from kvviz.teach.quiz.substep_kinds import SUBSTEP_KINDS
from kvviz.teach.quiz.trie_kinds import TRIE_KINDS

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.core.session import Session

KINDS: dict[str, QuestionKind] = {k.name: k for k in (*TRIE_KINDS, *SUBSTEP_KINDS, *BASE_KINDS, *HASH_KINDS)}
"""Every question kind, by name: the one table this package is built around. A design lists
the names of its kinds (:attr:`kvviz.core.designs.Design.questions`)."""


def kinds_of(snapshot) -> list[QuestionKind]:
    """The question kinds of ``snapshot``'s design, in its order (none when the quiz does not apply)."""
    entry = design_of(snapshot)
    return [KINDS[name] for name in entry.questions] if entry.quiz else []


def step_views(session: "Session", last: int | None = None):
    """Every step of ``session`` (up to step ``last``) as a :class:`StepView`."""
    before = session.frame(0)
    end = len(session) if last is None else min(len(session), last + 1)
    for index in range(1, end):
        after = session.frame(index)
        yield StepView(session, index, before, after)
        before = after


def questions_at(view: StepView, rng: random.Random) -> list[Question]:
    """Every question that makes sense at one step, one per kind of the cache's design that
    applies (none when the design has no questions: see :func:`refusal`)."""
    out = []
    for spec in kinds_of(view.snap0):
        if spec.applies(view):
            question = build(spec, view, rng)
            if question is not None:
                out.append(question)
    return out


def refusal(session: "Session") -> str | None:
    """Why the quiz asks nothing about ``session``, in one line (None when it asks): the
    design's :attr:`~kvviz.core.designs.Design.quiz_refusal` when it brings no questions."""
    entry = design(session.config.kind)
    if entry.quiz and entry.questions:
        return None
    return entry.quiz_refusal or f"the {entry.name} design brings no practice questions"


@lru_cache(maxsize=1)
def _demo_titles() -> dict[str, str]:
    from kvviz.core.demos import demo_names, load_demo

    return {load_demo(name).title: name for name in demo_names()}


def lesson_of(session: "Session") -> str | None:
    """The demo ``session`` runs (its lesson), found by its title; None for any other script."""
    return _demo_titles().get(session.title) if session.title else None


LESSON_STEPS = 3
"""A lesson whose kinds apply at this many steps asks only there."""

SPARE_PER = 2
"""A kind's questions to ask sparingly (:attr:`~kvviz.teach.quiz.core.QuestionKind.spare`: an
answer of 0) are asked at most once per this many of its others in a session: with three
choices, the answer the smallest number about as often as each other place."""


def questions(session: "Session", seed: int = 0, last: int | None = None,
              lesson: str | None = None) -> list[Question]:
    """One question at each interesting step of ``session`` (up to step ``last``), chosen and
    shuffled by ``seed``, never the same kind twice in a row (a step that offers only the kind
    just asked is skipped).

    A lesson (a demo's name; default: :func:`lesson_of`) asks what it teaches: where the kinds
    it teaches apply at :data:`LESSON_STEPS` steps or more, only at those steps (``lru``: the
    victim and the heap's next swap at its eviction steps); else its kinds first wherever they
    apply, other kinds elsewhere. A kind's questions to ask sparingly
    (:attr:`~.core.QuestionKind.spare`) come at most once per :data:`SPARE_PER` of its others:
    the steps of those beyond that (drawn by ``seed``) ask another kind, or nothing. The same
    session and seed give the same questions; the session is only read."""
    lesson = lesson_of(session) if lesson is None else lesson
    rng = random.Random(f"kvviz-quiz/questions/{seed}")
    offered = [questions_at(view, rng) for view in step_views(session, last)]
    draw = random.Random(f"kvviz-quiz/spare/{seed}")
    while True:
        out = _ask(offered, lesson, seed)
        dropped = set()  # (step, kind) of the questions asked beyond the share
        for name in sorted({q.kind for q in out if q.spec.spare}):
            sparing = [q.step for q in out if q.kind == name and q.spec.spare(q)]
            others = sum(1 for q in out if q.kind == name) - len(sparing)
            excess = len(sparing) - others // SPARE_PER
            if excess > 0:
                dropped |= {(step, name) for step in draw.sample(sparing, excess)}
        if not dropped:
            return out
        offered = [[q for q in options if (q.step, q.kind) not in dropped] for options in offered]


def _ask(offered: list[list[Question]], lesson: str | None, seed: int) -> list[Question]:
    """One of ``offered``'s questions at each step that has one (see :func:`questions`)."""
    pick = random.Random(f"kvviz-quiz/pick/{seed}")  # its own: a step's pick never depends on later steps' choices
    taught = [[q for q in options if lesson in q.spec.lesson] for options in offered]
    focus = sum(1 for t in taught if t) >= LESSON_STEPS
    later = [(j, frozenset(q.kind for q in t)) for j, t in enumerate(taught) if t]

    @lru_cache(maxsize=None)
    def chain(start: int, previous: str) -> bool:
        """Whether the lesson steps from ``start`` on can each ask a lesson kind, none the
        kind asked just before it."""
        rest = [kinds for j, kinds in later if j >= start]
        if not rest:
            return True
        first = next(j for j, _ in later if j >= start)
        return any(k != previous and chain(first + 1, k) for k in rest[0])
    out: list[Question] = []
    for i, (options, ours) in enumerate(zip(offered, taught)):
        if focus and not ours:
            continue
        pool = ours or options
        if out:  # variety: never the kind just asked; the lesson's other kinds first, then any other
            pool = ([q for q in pool if q.kind != out[-1].kind]
                    or [q for q in options if q.kind != out[-1].kind])
        # a lesson kind that leaves every later lesson step a kind of its own (none asked twice in a row)
        pool = [q for q in pool if chain(i + 1, q.kind)] or pool
        if pool:
            out.append(pick.choices(pool, [q.spec.weight for q in pool])[0])
    return out


def shown_candidates(snapshot, seed: int, step: int) -> str:
    """The eviction candidates of ``snapshot`` with their keys, in a shuffled order (seeded by
    ``seed`` and ``step``): what the quiz shows instead of the heap, whose array order puts
    the next victim first. Empty for a design without a heap."""
    if not design_of(snapshot).tree:
        return ""
    nodes = [snapshot.node(n) for n in snapshot.heap]
    random.Random(f"kvviz-quiz/candidates/{seed}/{step}").shuffle(nodes)
    if not nodes:
        return "Eviction candidates: none (no unreferenced leaves)."
    listed = "\n".join(f"  node {n.id} page {n.page} key {key_value(snapshot.node_key(n))}" for n in nodes)
    return f"Eviction candidates (childless, ref 0), in no particular order, key {key_fields(snapshot)}:\n{listed}"
