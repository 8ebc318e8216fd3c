# SPDX-License-Identifier: Apache-2.0
"""The course with mastery: per-lesson practice, thresholds, spaced review.

The lessons are :data:`kvviz.core.demos.LESSONS`; the course takes them in :data:`COURSE` order
(the same, with eviction brought forward: ``refcount`` and ``lru`` follow the first lesson).
Each lesson practises the move kinds of its concept (:data:`CONCEPTS`:
:mod:`kvviz.teach.exercise`'s kinds, on a design and policy) in :data:`STAGES`: its own demo,
then seeded random scenarios of rising level. A stage passes at :data:`PASS_SHARE` of at
least :data:`MIN_MOVES` moves right first time; a round whose scenario has fewer moves of the
lesson's kinds plays every kind of move the scenario has (:func:`round_exercise`), and a demo
with fewer moves than that on the lesson's design (base-vs-trie's on a base cache) goes on with
a generated scenario's ops on the same cache
(:func:`kvviz.teach.practice_command.round_session`), so every stage can pass. A lesson's
demo passed unlocks the next lesson's demo; its random stages follow, two lessons behind
(:func:`next_round`), so a learner meets eviction by the fourth round. A lesson is mastered
when its three stages passed.

A move kind the learner missed is asked again in a review round of that kind alone, with a
fresh seed, after 1, 2, 4 and then 8 more rounds: a review that passes waits the next
interval (a miss in a round that still passes does not start it over), one that fails is due
again after the first. A kind already waiting for its review keeps its due round when missed
elsewhere, so it comes due whatever else is missed. A review due comes before new material,
but never twice in a row while new material waits: the course always moves on. A failed round
comes back with a fresh seed (a new random scenario; a demo with its choices in a new order).

**Everything is derived from the progress file.** :class:`Progress` holds the rounds played
and the reviews pending, nothing else; which stage is next, every seed and every interval
follow from it, so the same file always gives the same next round. The file itself (its
path, reading, writing) is the CLI's; here it is text in, text out: :func:`parse_progress`
refuses anything that is not a progress file written by this module with one line
(:class:`ProgressError`), :func:`progress_text` writes it canonically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvviz.core.demos import LESSONS, load_demo
from kvviz.core.designs import BASE, HASH, TRIE
from kvviz.teach.exercise import MOVE_KINDS, Exercise, build_exercise
from kvviz.core.words import count

__all__ = ["COURSE", "CONCEPTS", "MAX_PROGRESS_BYTES", "MIN_MOVES", "PASS_SHARE", "REVIEW_INTERVALS", "SCHEMA", "STAGES",
           "Concept", "LessonStatus", "Progress", "ProgressError", "Round", "RoundResult", "lesson_status",
           "next_round", "next_up_line", "parse_progress", "progress_path", "progress_text", "record",
           "round_exercise", "summary_lines"]

SCHEMA = "kvviz.progress/1"
STAGES = ("demo", "easy", "medium")
"""A lesson's stages: its demo, then random scenarios at each level (the level unlocks when
the stage before it passes)."""
PASS_SHARE = 0.8
"""The share of moves right first time that passes a stage (or a review)."""
MIN_MOVES = 5
"""A round with fewer moves played passes nothing (too little to tell)."""
ROUND_MOVES = 12
"""Moves in a random round."""
STAGE_LAG = 2
"""How many lessons a lesson's random stages trail its demo: new material alternates between
meeting a lesson and practising one met before."""
REVIEW_INTERVALS = (1, 2, 4, 8)
"""Rounds until a missed kind is asked again, growing while it is got right; past the last, it
is retired."""
MAX_PROGRESS_BYTES = 1_000_000
"""A progress file larger than this is refused before it is parsed."""
MAX_ROUNDS = 5_000
"""Rounds the file keeps (the oldest go): a bounded file whatever the learner does."""


@dataclass(frozen=True)
class Concept:
    """What a lesson's practice asks: the move ``kinds``, on ``design`` with ``policy``
    (random rounds; the demo round runs the demo as written)."""

    kinds: tuple[str, ...]
    design: str = TRIE
    policy: str = "lru"


CONCEPTS: Mapping[str, Concept] = {
    "prefix-sharing": Concept(("stop", "take")),
    "base-vs-trie": Concept(("stop", "take"), BASE),
    "hash-vs-trie": Concept(("stop", "take", "drop"), HASH),
    "progressive-publish": Concept(("stop", "dedup")),
    "dedup": Concept(("dedup",)),
    "refcount": Concept(("victim", "take")),
    "lru": Concept(("victim", "swap")),
    "eviction-cascade": Concept(("victim",)),
    "heap-ties": Concept(("swap", "victim")),
    "policies": Concept(("victim", "swap"), TRIE, "lfu"),
    "priority": Concept(("victim",), TRIE, "priority"),
    "extend": Concept(("take",)),
    "multi-turn-chat": Concept(("stop", "take", "dedup")),
}
"""Each lesson's concept, by lesson (a lesson without a row practises every kind)."""

_FIRST = ("prefix-sharing", "refcount", "lru")
COURSE: tuple[str, ...] = tuple(x for x in _FIRST if x in LESSONS) + tuple(x for x in LESSONS if x not in _FIRST)
"""The lessons in course order: :data:`LESSONS`, with reference counts and lru eviction (the
lesson the project is named for) right after the first, so eviction comes within a few rounds."""

#: Where a review of one kind runs: the design that has it.
_REVIEW_DESIGN = {"drop": HASH}


class ProgressError(ValueError):
    """A progress file that is not one: its one-line message says what is wrong."""


@dataclass(frozen=True)
class RoundResult:
    """One round played: its ``lesson`` and ``stage`` (or ``review`` of a kind), its seed, the
    moves played and right first time, and the misses per move kind."""

    lesson: str
    stage: str
    seed: int
    moves: int
    right: int
    misses: tuple[tuple[str, int], ...] = ()
    review: str | None = None

    @property
    def passed(self) -> bool:
        """At least :data:`MIN_MOVES` moves, :data:`PASS_SHARE` of them right first time."""
        return self.moves >= MIN_MOVES and self.right >= PASS_SHARE * self.moves


@dataclass(frozen=True)
class Progress:
    """The rounds played (oldest first) and the reviews pending: ``{kind: (interval index,
    due round)}``, a review being due once ``len(rounds)`` reaches its due round."""

    rounds: tuple[RoundResult, ...] = ()
    reviews: Mapping[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Round:
    """The next round to play: a demo (``demo``) or a random scenario (``random`` with
    ``seed`` and ``level``), on ``design``/``policy`` (None: the demo's own), asking
    ``kinds``; ``title`` says it for people."""

    lesson: str
    stage: str
    title: str
    demo: str | None
    random: bool
    seed: int
    level: str | None
    design: str | None
    policy: str | None
    kinds: tuple[str, ...]
    review: str | None = None
    max_moves: int = ROUND_MOVES


@dataclass(frozen=True)
class LessonStatus:
    """A lesson's place in the course: which stages passed, unlocked, mastered."""

    lesson: str
    passed: tuple[str, ...]
    unlocked: bool
    mastered: bool


def progress_path(environ: Mapping[str, str] | None = None, home: str | None = None) -> Path:
    """The progress file: ``$XDG_DATA_HOME/kvviz/progress.json``, or
    ``~/.local/share/kvviz/progress.json`` when it is unset, empty or not absolute (the XDG
    base-directory rule). Never the working directory."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(home if home is not None else os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kvviz" / "progress.json"


def concept(lesson: str) -> Concept:
    """The lesson's concept (every kind on a trie, for a lesson without a row)."""
    return CONCEPTS.get(lesson, Concept(tuple(MOVE_KINDS)))


def lesson_status(progress: Progress) -> list[LessonStatus]:
    """Every lesson in course order (:data:`COURSE`), with its stages passed; a lesson is
    unlocked when the demo of the one before it passed (the first always is)."""
    passed: dict[str, set[str]] = {}
    for r in progress.rounds:
        if r.review is None and r.passed:
            passed.setdefault(r.lesson, set()).add(r.stage)
    out = []
    unlocked = True
    for lesson in COURSE:
        done = tuple(s for s in STAGES if s in passed.get(lesson, ()))
        out.append(LessonStatus(lesson, done, unlocked, unlocked and len(done) == len(STAGES)))
        unlocked = unlocked and STAGES[0] in done
    return out


def _seed(progress: Progress, salt: int) -> int:
    """A fresh seed for the next round, from the rounds played (never one used before in this
    file: the count only grows)."""
    return 1 + 101 * len(progress.rounds) + salt


def _next_stage(progress: Progress) -> tuple[str, str] | None:
    """The new material next: of every unlocked lesson's first unpassed stage, the one of
    least rank (course place + :data:`STAGE_LAG` per stage), the earlier lesson on a tie."""
    best = None
    for place, status in enumerate(lesson_status(progress)):
        if not status.unlocked or status.mastered:
            continue
        stage = next(s for s in STAGES if s not in status.passed)
        rank = (place + STAGE_LAG * STAGES.index(stage), place)
        if best is None or rank < best[0]:
            best = (rank, status.lesson, stage)
    return None if best is None else (best[1], best[2])


def _review_due(progress: Progress) -> str | None:
    """The kind whose review is due (earliest due, then table order), None when none is."""
    played = len(progress.rounds)
    due = sorted((d, list(MOVE_KINDS).index(k), k) for k, (_, d) in progress.reviews.items() if d <= played)
    return due[0][2] if due else None


def next_round(progress: Progress) -> Round | None:
    """The round to play next: a due review first (unless the last round was a review and new
    material waits), else the next stage (:func:`_next_stage`); None when the course is done."""
    kind = _review_due(progress)
    stage = _next_stage(progress)
    if kind is not None and (stage is None or not progress.rounds or progress.rounds[-1].review is None):
        lesson = next((r.lesson for r in reversed(progress.rounds) if dict(r.misses).get(kind)), COURSE[0])
        design = _REVIEW_DESIGN.get(kind, TRIE)
        seed = _seed(progress, 50 + list(MOVE_KINDS).index(kind))
        return Round(lesson, "review", f"review of {MOVE_KINDS[kind].title} ({kind}), random seed {seed}", None, True,
                     seed, "medium", design, None, (kind,), review=kind)
    if stage is None:
        return None
    lesson, stage = stage
    c = concept(lesson)
    seed = _seed(progress, STAGES.index(stage))  # fresh each round: a failed round comes back new
    if stage == "demo":  # on the lesson's design (base-vs-trie: the base cache), the demo's own policy
        on = f" on a {c.design} cache" if c.design != load_demo(lesson).config.kind else ""
        return Round(lesson, stage, f"lesson {lesson}: its demo{on}, moves {', '.join(c.kinds)}", lesson, False, seed,
                     None, c.design, None, c.kinds, max_moves=40)
    return Round(lesson, stage, f"lesson {lesson}: a random {stage} scenario (seed {seed}) on "
                                f"{c.design}" + (f" {c.policy}" if c.design == TRIE else "")
                 + f", moves {', '.join(c.kinds)}", None, True, seed, stage, c.design,
                 c.policy if c.design == TRIE else None, c.kinds)


def round_exercise(session, round_: Round) -> Exercise:
    """The exercise of ``round_`` on its ``session``: the moves of the round's kinds, or, when
    the scenario has fewer than :data:`MIN_MOVES` of them (a short demo, a quiet random
    scenario), every move the scenario has, so the round can pass."""
    exercise = build_exercise(session, seed=round_.seed, kinds=round_.kinds, max_moves=round_.max_moves)
    if len(exercise.moves) < MIN_MOVES:
        exercise = build_exercise(session, seed=round_.seed, max_moves=round_.max_moves)
    return exercise


def record(progress: Progress, round_: Round, moves: int, right: int, misses: Mapping[str, int]) -> Progress:
    """``progress`` with ``round_`` played: its result appended, reviews rescheduled (a kind
    missed now, not waiting already, is due after the first interval; a review passed waits
    the next interval, or retires after the last; a review failed is due after the first)."""
    result = RoundResult(round_.lesson, round_.stage, round_.seed, moves, right,
                         tuple((k, n) for k, n in misses.items() if n), round_.review)
    rounds = (progress.rounds + (result,))[-MAX_ROUNDS:]
    played = len(progress.rounds) + 1
    reviews = dict(progress.reviews)
    if round_.review is not None:
        if result.passed:  # grows even with a miss: the round passed
            step, _ = reviews.get(round_.review, (0, played))
            if step + 1 < len(REVIEW_INTERVALS):
                reviews[round_.review] = (step + 1, played + REVIEW_INTERVALS[step + 1])
            else:
                reviews.pop(round_.review, None)
        else:
            reviews[round_.review] = (0, played + REVIEW_INTERVALS[0])
    for kind, n in misses.items():
        if n and kind != round_.review and kind not in reviews:  # a waiting review keeps its due round
            reviews[kind] = (0, played + REVIEW_INTERVALS[0])
    return Progress(rounds, reviews)


# -- the file ---------------------------------------------------------------------------------


def progress_text(progress: Progress) -> str:
    """The progress file's text (canonical JSON, one line per round)."""
    rounds = [{"lesson": r.lesson, "stage": r.stage, "seed": r.seed, "moves": r.moves, "right": r.right,
               "misses": dict(r.misses), **({"review": r.review} if r.review else {})} for r in progress.rounds]
    body = ",\n    ".join(json.dumps(r, sort_keys=True) for r in rounds)
    reviews = {k: {"interval": REVIEW_INTERVALS[i], "step": i, "due": d}
               for k, (i, d) in sorted(progress.reviews.items())}
    return (f'{{\n  "schema": "{SCHEMA}",\n  "rounds": [' + (f"\n    {body}\n  " if rounds else "") + "],\n"
            f'  "reviews": {json.dumps(reviews, sort_keys=True)}\n}}\n')


def _int(value, what: str, low: int = 0) -> int:
    from kvviz.core.limits import MAX_NUMBER  # bounded before use: past int64 a count overflows a float

    if type(value) is not int or not low <= value <= MAX_NUMBER:
        raise ProgressError(f"{what} is not a whole number from {low} to 2^63 - 1")
    return value


def parse_progress(text: str) -> Progress:
    """The progress in ``text``; :class:`ProgressError` (one line) for anything else."""
    if len(text) > MAX_PROGRESS_BYTES:
        raise ProgressError(f"larger than {MAX_PROGRESS_BYTES:,} characters")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProgressError(f"not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ProgressError(f"not a kvviz progress file (no \"schema\": \"{SCHEMA}\")")
    rounds_data, reviews_data = data.get("rounds"), data.get("reviews")
    if not isinstance(rounds_data, list) or not isinstance(reviews_data, dict):
        raise ProgressError('"rounds" must be a list and "reviews" an object')
    rounds = []
    for i, r in enumerate(rounds_data[-MAX_ROUNDS:]):
        where = f"round {i + 1}"
        if not isinstance(r, dict) or not isinstance(r.get("lesson"), str) or not isinstance(r.get("stage"), str):
            raise ProgressError(f"{where} has no lesson or stage")
        misses = r.get("misses", {})
        if not isinstance(misses, dict) or any(k not in MOVE_KINDS for k in misses):
            raise ProgressError(f"{where}: misses must name move kinds ({', '.join(MOVE_KINDS)})")
        review = r.get("review")
        if review is not None and review not in MOVE_KINDS:
            raise ProgressError(f"{where}: review {review!r} is no move kind")
        moves = _int(r.get("moves"), f"{where}'s moves")
        right = _int(r.get("right"), f"{where}'s right")
        if right > moves:
            raise ProgressError(f"{where}: {right} right of {moves} moves")
        rounds.append(RoundResult(r["lesson"], r["stage"], _int(r.get("seed"), f"{where}'s seed"), moves, right,
                                  tuple((k, _int(n, f"{where}'s misses of {k}")) for k, n in misses.items()),
                                  review))
    reviews = {}
    for kind, entry in reviews_data.items():
        if kind not in MOVE_KINDS or not isinstance(entry, dict):
            raise ProgressError(f"review {kind!r} is no move kind with an interval")
        step = _int(entry.get("step"), f"review {kind}'s step")
        if step >= len(REVIEW_INTERVALS):
            raise ProgressError(f"review {kind}'s step {step} is past the last interval")
        reviews[kind] = (step, _int(entry.get("due"), f"review {kind}'s due round"))
    return Progress(tuple(rounds), reviews)


# -- saying it --------------------------------------------------------------------------------


def next_up_line(progress: Progress) -> str:
    """One line: what to practise next, and the command."""
    nxt = next_round(progress)
    if nxt is None:
        return "Next up: nothing, every lesson is mastered (kvviz practice --random --level hard for more)."
    return f"Next up: {nxt.title}: kvviz practice --next"


def summary_lines(progress: Progress) -> list[str]:
    """``kvviz progress``: each lesson's stages, mastery, reviews pending, next up."""
    played = len(progress.rounds)
    moves = sum(r.moves for r in progress.rounds)
    right = sum(r.right for r in progress.rounds)
    lines = [f"{count(played, 'round')} played, {right} of {count(moves, 'move')} right first time.",
             f"Lessons (a stage passes at {PASS_SHARE:.0%} of {MIN_MOVES}+ moves right first time):"]
    width = max(map(len, LESSONS))
    for s in lesson_status(progress):
        mark = "mastered" if s.mastered else ("open" if s.unlocked else "locked")
        stages = " ".join(f"{st}{'✓' if st in s.passed else '·'}" for st in STAGES)
        lines.append(f"  {s.lesson:<{width}}  {mark:<8}  {stages}")
    if progress.reviews:
        lines.append("Reviews (missed kinds, asked again at growing intervals):")
        for kind, (step, due) in sorted(progress.reviews.items()):
            when = "due now" if due <= played else f"due in {count(due - played, 'round')}"
            lines.append(f"  {kind}: {MOVE_KINDS[kind].title}, interval {REVIEW_INTERVALS[step]}, {when}")
    lines.append(next_up_line(progress))
    return lines
