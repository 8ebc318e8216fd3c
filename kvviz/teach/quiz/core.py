# SPDX-License-Identifier: Apache-2.0
"""The quiz's types: a step as a question sees it, a question kind, a question, its choices,
reading an answer line, and the named mistakes distractors model.

Answer lines (the same in ``--plain`` and the UI): a choice letter (``a``-``z``), or the
answer itself typed in full: a number, a list of pages such as ``3 5`` (a lone number is a
one-page list: ``4`` and ``page 4`` mean the same), ``none``; a blank line skips. Letters
never collide with values, so a choice whose value is 10 or more is chosen like any other.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvcore import events as ev

from kvviz.core.designs import design_of
from kvviz.core.words import count, there_are
from kvviz.teach.quiz.choices import LETTERS, Choice, letter_choice

if TYPE_CHECKING:  # pragma: no cover
    from kvcore import Snapshot

    from kvviz.core.session import Frame, Session

MAX_DISTRACTORS = 3
"""Wrong choices shown with each question (fewer when fewer mistakes make sense there)."""


Value = int | tuple[int, ...]


# -- the named mistakes: one table ------------------------------------------------------------

MISTAKES: dict[str, str] = {
    # victims and eviction order
    "interior": "picks a ref-0 node that still has children (only leaves are evicted)",
    "referenced-leaf": "picks a leaf a live allocation still references",
    "largest-key": "pops the largest key first (the policy's order upside down)",
    "lru-only": "applies lru's key under another policy",
    "seq-only": "orders by creation (seq) alone, forgetting that use moves a node back",
    "own-prefix": "evicts a node the acquire itself just matched (referenced by it)",
    "free-page": "names a free page as a victim (free pages are taken, not evicted)",
    "page-order": "orders by page number instead of by key or token order",
    "cascade-early": "treats every ref-0 node as a candidate at once (a parent joins only when childless)",
    "cascade-missed": "forgets that a parent left childless becomes a candidate (the cascade)",
    # hits and matching
    "partial-page": "counts a partial page as shared",
    "unpublished": "shares another request's unpublished pages",
    "no-sharing": "expects nothing to be shared",
    "whole-request": "matches the whole request, past the first page that differs",
    "prefix-ignored": "matches a page cached after another prefix",
    "pages-not-tokens": "counts matched pages instead of tokens",
    "page-short": "stops one page before the match ends",
    "page-past-miss": "counts one page past the first page that misses",
    # block tables, free pages, room
    "copied-hits": "takes fresh pages for the hit pages instead of sharing them",
    "page-too-many": "rounds the extra slots up separately (a page too many)",
    "page-too-few": "gives a partial last page no page (a page too few)",
    "own-copies": "keeps its own copies at a dedup publish",
    "unchanged": "expects the op to leave the number unchanged",
    "release-all": "frees published pages at release (they stay cached)",
    "release-extra": "returns one page more than its block table holds at release",
    "release-unshared": "frees the published pages nobody else uses at release",
    "release-candidates": "frees the pages that become eviction candidates at release",
    "hits-taken": "takes the hit pages from the free list too",
    "evicted-stay": "leaves evicted pages on the free list",
    "both-copies": "frees both copies at a dedup publish",
    "free-only": "counts only free pages as room (ref-0 cached pages can be evicted)",
    "extra-ignored": "forgets the extra token slots",
    "referenced-evictable": "counts referenced pages as evictable",
    "pool-full": "thinks a pool with no free page cannot take more",
    "needed-not-short": "answers the pages it needs, not how many are missing",
    # refs and evictability
    "ref-unchanged": "expects the ref count not to change",
    "ref-zeroed": "drops the ref to 0 at release while others still hold the path",
    "ref-up": "adds a reference at release",
    "ref-one": "counts only the newest user",
    "ref-twice": "counts one allocation twice (acquire and publish)",
    "ref-all": "counts every live allocation, not only those whose path holds the node",
    "ref-hits": "counts the times the node was matched, not the allocations holding it now",
    "candidates-only": "counts only heap candidates as evictable",
    "every-leaf": "counts every leaf as evictable, referenced or not",
    "before-op": "answers with the state before the op",
    "all": "counts referenced pages as evictable",
    "none": "thinks released pages leave nothing evictable",
    # sub-steps
    "wrong-child": "swaps with the child of the larger key",
    "no-swap": "expects the heap property to hold without a swap",
    "swap-always": "swaps with the smaller child without comparing its key with the entry's own",
    "skips-a-level": "swaps with the smallest key further down, skipping a level of the sift",
    "referenced-parent": "makes a referenced parent a candidate",
    "grandparent": "makes the parent's parent a candidate",
    "first-block": "names the first block instead of the first duplicate",
    "last-block": "names the last block instead of the first duplicate",
    # base and hash caches
    "trie-rules": "applies the trie's sharing rules to a cache that shares nothing",
    "queue-tail": "takes pages from the free queue's tail",
    "eager-eviction": "thinks a released page's block leaves the cache at release",
    "first-cached": "drops the first cached page in page order, not queue order",
}
"""Every mistake a distractor may model, by tag: what the learner did. A quiz's JSON carries
the tag of the choice given, so a teacher sees misconceptions, not only scores."""


@dataclass(frozen=True)
class Mistake:
    """A wrong answer, the sentence that names the learner's mistake it models, and its tag
    (a key of :data:`MISTAKES`)."""

    value: Value
    mistake: str
    tag: str = ""

    def __post_init__(self) -> None:
        if self.tag not in MISTAKES:
            raise ValueError(f"mistake tag {self.tag!r} is not in MISTAKES")


# -- what a question looks at ------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    """One step as a question sees it: the op, and the frames before and after it."""

    session: "Session"
    index: int
    before: "Frame"
    after: "Frame"

    @property
    def op(self):
        """The step's op."""
        return self.after.op

    @property
    def snap0(self) -> "Snapshot":
        """The state before the op (what the learner sees when asked)."""
        return self.before.snapshot

    @property
    def snap1(self) -> "Snapshot":
        """The state after the op (the revealed answer)."""
        return self.after.snapshot

    @property
    def tree(self) -> bool:
        """Whether the cache keeps a trie of shared nodes (its design says so)."""
        return design_of(self.snap0).tree

    @property
    def ok(self) -> bool:
        """Whether the op succeeded."""
        return self.after.error is None

    @property
    def matched(self) -> ev.Matched | None:
        """The acquire's match event, if any."""
        return next((e for e in self.after.events if isinstance(e, ev.Matched)), None)

    @property
    def victims(self) -> tuple[ev.Evicted, ...]:
        """The evictions of this step, in order."""
        return self.after.evictions

    @property
    def dedups(self) -> tuple[ev.Deduplicated, ...]:
        """Pages this publish adopted from the trie."""
        return tuple(e for e in self.after.events if isinstance(e, ev.Deduplicated))

    def mine(self, snap: "Snapshot"):
        """The op's allocation in ``snap`` (None when not live there)."""
        return snap.allocation_named(self.op.name)

    def text(self) -> str:
        """``Step 5: `acquire r1 1..8```, how every question starts."""
        return f"Step {self.index}: `{self.op.text}`."

    def substeps(self):
        """The op's sub-steps (kvcore's own stream, built on first asking)."""
        return self.session.substeps(self.index)


def around(view: StepView, kind: str, answer: int, mistakes: list[Mistake], low: int = 0,
           bound: int | None = None) -> list[Mistake]:
    """At most :data:`MAX_DISTRACTORS` of ``mistakes`` for a number question, placing ``answer``
    among them: the smallest, the largest or inside (one value below it at least, one above),
    one of the places these mistakes allow drawn with equal odds per question (seeded from the
    step, the kind and the answer, so deterministic); each place takes as many values as it can.
    So "the smallest (second smallest, second largest, largest) number" is no shortcut, though
    the mistakes on one side are often fewer (a count has nothing below 0; a value bracketed by
    one mistake on each side was the middle of three every time): the answer the largest with
    one value below is a choice of two. At least ``low`` lie below when that many exist (a
    kind whose answer 0 is common keeps 0's rank to itself). Values equal to the answer,
    repeated, or outside ``0..bound`` are dropped (the first mistake naming a value keeps it)."""
    seen, below, above = {answer}, [], []
    for m in mistakes:
        if m.value in seen or m.value < 0 or (bound is not None and m.value > bound):
            continue
        seen.add(m.value)
        (below if m.value < answer else above).append(m)
    rng = random.Random(f"kvviz-quiz/around/{kind}/{view.index}/{view.op.text}/{answer}")
    top = min(MAX_DISTRACTORS, len(below))
    places = []  # (how many below, how many above): the answer the smallest, the largest, or inside
    if above and not min(low, len(below)):
        places.append((0, min(MAX_DISTRACTORS, len(above))))
    if below:
        places.append((top, 0))
    inside = [(r, min(MAX_DISTRACTORS - r, len(above))) for r in range(max(1, low), top + 1)
              if r < MAX_DISTRACTORS and above]
    if inside:
        places.append(rng.choice(inside))
    r, s = rng.choice(places) if places else (0, 0)
    return rng.sample(below, r) + rng.sample(above, s)


def zero_answer(question: Question) -> bool:
    """Whether ``question``'s answer is 0 (a :attr:`QuestionKind.spare` rule)."""
    return question.answer == 0


def page_slips(view: StepView, answer: Value, stop: str, unit: str = "page") -> list[Mistake]:
    """The slips of a learner who walks the right pages but miscounts: pages for tokens, one
    page short, one page past the miss (``stop`` says why the match ends there; ``unit`` is
    what the cache matches: a trie's page, a hash cache's block)."""
    tpp, tokens = view.snap0.tokens_per_page, view.op.tokens
    out = []
    if answer and tpp > 1:
        out.append(Mistake(answer // tpp, f"counting matched {unit}s, not tokens: each {unit} holds "
                                          f"{count(tpp, 'token')}", "pages-not-tokens"))
    if answer:
        out.append(Mistake(answer - tpp, f"one {unit} short: the last matched {unit} hits too", "page-short"))
    if answer + tpp <= len(tokens):
        out.append(Mistake(answer + tpp, f"one {unit} past the match: {stop}", "page-past-miss"))
    return out


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def walk(snap: "Snapshot", tokens) -> list:
    """The trie nodes of ``snap`` that the full pages of ``tokens`` match, root first."""
    tpp = snap.tokens_per_page
    child = {(n.parent, n.tokens): n for n in snap.nodes if n.parent is not None}
    path, parent = [], 0
    for start in range(0, len(tokens) - tpp + 1, tpp):
        node = child.get((parent, tuple(tokens[start:start + tpp])))
        if node is None:
            break
        path.append(node)
        parent = node.id
    return path


def simulate_evictions(snap: "Snapshot", protected, count: int, key=None, cascade: bool = True) -> list:
    """The first ``count`` nodes evicted from ``snap`` when candidates are the childless ref-0
    nodes not in ``protected``, popped smallest ``key`` first (default: the policy's), a parent
    left childless joining when ``cascade``. Models the cache with its own key, and learners
    with another key or without the cascade. Fewer than ``count`` when candidates run out."""
    key = key or snap.node_key
    alive = {n.id: n for n in snap.nodes if n.parent is not None}
    kids = Counter(n.parent for n in alive.values())
    candidates = {n.id for n in alive.values() if kids[n.id] == 0 and n.ref == 0 and n.id not in protected}
    out = []
    while candidates and len(out) < count:
        victim = min((alive[i] for i in candidates), key=key)
        out.append(victim)
        candidates.discard(victim.id)
        kids[victim.parent] -= 1
        parent = alive.get(victim.parent)
        if cascade and parent is not None and kids[parent.id] == 0 and parent.ref == 0 \
                and parent.id not in protected:
            candidates.add(parent.id)
    return out


# -- the question kinds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Parting:
    """Where a learner's answer and the cache part ways: the step, the sub-step (0-based
    index into the op's sub-steps; None: the step as a whole) and one sentence."""

    step: int
    substep: int | None
    sentence: str


@dataclass(frozen=True)
class QuestionKind:
    """One kind of question: everything about it in one entry.

    ``applies(view)``: whether the step is an interesting one for this kind; ``ask(view)``:
    the question; ``answer(view)``: the correct answer, read from the frame after the step
    (or the op's sub-steps); ``form``: 'number', 'list' (order matters) or 'set'; ``noun``:
    what the numbers name ('page', 'node'); ``bound(view)``: the largest number an answer
    may contain; ``describe(value)``: an answer in words; ``distractors(view, answer)``:
    wrong answers with the mistake each models; ``hints(view)``: graduated hints (the rule,
    where to look, the computation with this state's numbers); ``why(view, answer)``: one
    sentence; ``diverge(view, value)``: where a wrong value parts from the cache
    (a :class:`Parting`, or None); ``weight``: how much more often than a weight-1 kind
    it is picked where both apply; ``lesson``: the demo lessons it is the point of (a
    demo's quiz asks it wherever it applies there); ``hides_order(view)``: whether the
    eviction order in array form (the heap, whose top is the next victim) would give the
    answer away, so views hide it while the question is asked; ``describe_at(view, value)``:
    a value in words where they depend on the step (else ``describe``); ``spare(question)``: whether
    a question of this kind is one to ask sparingly, at most once per two others of the kind
    (:func:`~kvviz.teach.quiz.asking.questions`): an answer of 0, which no choice can lie
    below, where most answers are 0 ("the smallest number" was the shortcut).
    """

    name: str
    title: str
    form: str
    noun: str
    applies: Callable[[StepView], bool]
    ask: Callable[[StepView], str]
    answer: Callable[[StepView], Value]
    bound: Callable[[StepView], int]
    describe: Callable[[Value], str]
    distractors: Callable[[StepView, Value], list[Mistake]]
    hints: Callable[[StepView], tuple[str, str, str]]
    why: Callable[[StepView, Value], str]
    diverge: Callable[[StepView, Value], Parting | None] = lambda view, value: None
    weight: int = 1
    lesson: frozenset[str] = frozenset()
    hides_order: Callable[[StepView], bool] = lambda view: False
    spare: Callable[[Question], bool] | None = None
    describe_at: Callable[[StepView, Value], str] | None = None

    def say(self, view: StepView | None, value: Value) -> str:
        """``value`` in words at ``view``: :attr:`describe_at` where the kind has one (a choice
        whose words depend on the step, such as "no swap"), else :attr:`describe`."""
        return self.describe_at(view, value) if self.describe_at and view is not None else self.describe(value)

    def hint(self, view: StepView) -> str:
        """The first of the graduated hints at ``view`` (the rule)."""
        return self.hints(view)[0]


def free_pages_kind(name: str, **rules) -> QuestionKind:
    """A "how many pages are free after the op" question: the asking, the answer (the free
    count after the step), its bound and its words are the same on every design; ``rules``
    give the rest (``applies``, ``distractors``, ``hints``, ``why``, ``diverge``, ...)."""
    return QuestionKind(
        name, "free pages", "number", "page",
        ask=lambda v: f"{v.text()} How many pages are free after it ({there_are(v.snap0.free_count)} now)?",
        answer=lambda v: v.snap1.free_count,
        bound=lambda v: v.snap0.page_count,
        describe=lambda x: count(x, "free page"),
        **rules,
    )


def cached_pages_run(tokens, tokens_per_page: int, cached) -> int:
    """Tokens of the longest run of whole pages from the start of ``tokens`` each of whose
    tokens is in ``cached`` (a set of token tuples), wherever it is cached: what a match
    would give if a page's place (its prefix, its key) did not count."""
    k = 0
    while (k + 1) * tokens_per_page <= len(tokens) and \
            tuple(tokens[k * tokens_per_page:(k + 1) * tokens_per_page]) in cached:
        k += 1
    return k * tokens_per_page


def block_table_kind(name: str, **rules) -> QuestionKind:
    """A "what is the allocation's block table after the acquire" question: the asking, the
    answer (its pages after the step, in order), their bound and words are the same on every
    design; ``rules`` give the rest (``applies``, ``distractors``, ``hints``, ``why``, ...)."""
    return QuestionKind(
        name, "block table", "list", "page",
        ask=lambda v: f"{v.text()} What is {v.op.name}'s block table after it?",
        answer=lambda v: tuple(v.mine(v.snap1).pages),
        bound=lambda v: v.snap0.page_count - 1,
        describe=lambda x: page_list(x),
        **rules,
    )


def pages_text(value) -> str:
    """``3 5`` (``none`` for no pages)."""
    return " ".join(map(str, value)) if value else "none"


def page_list(value, noun: str = "page") -> str:
    """``pages 3 5``, ``page 3``, ``no pages``: a list answer in words."""
    if not value:
        return f"no {noun}s"
    return f"{noun} {value[0]}" if len(value) == 1 else f"{noun}s {pages_text(value)}"


# -- questions and answers -------------------------------------------------------------------


_DIGITS = re.compile(r"[0-9]{1,30}")  # ASCII only: "²".isdigit() is True but int("²") fails


class AnswerError(ValueError):
    """An answer line that is not an answer: the message says what to type instead."""


@dataclass(frozen=True)
class Reply:
    """A graded answer: the line as given, the value it means, whether it is right, and the
    mistake (and its tag) of the choice it matches, if any."""

    given: str
    value: Value
    right: bool
    mistake: str | None = None
    tag: str | None = None


@dataclass(frozen=True)
class Question:
    """One question at one step: asked with the state of frame ``step - 1``, revealed by frame
    ``step``. ``hints``: three, each more telling (the rule, where to look, the computation)."""

    kind: str
    step: int
    text: str
    choices: tuple[Choice, ...]
    answer: Value
    bound: int
    hints: tuple[str, ...]
    why: str
    spec: QuestionKind = field(compare=False, repr=False, default=None)
    view: StepView | None = field(compare=False, repr=False, default=None)

    @property
    def hint(self) -> str:
        """The first hint (the rule)."""
        return self.hints[0]

    @property
    def hides_order(self) -> bool:
        """Whether the heap in array order would give this question's answer away."""
        return self.view is not None and self.spec.hides_order(self.view)

    @property
    def correct_line(self) -> str:
        """The correct answer as an answer line: ``4``, ``3 5``, ``none``."""
        return self.value_line(self.answer)

    @property
    def correct_choice(self) -> Choice:
        """The choice that is right."""
        return next(c for c in self.choices if c.mistake is None)

    def value_line(self, value: Value) -> str:
        """``value`` written as an answer line."""
        if self.spec.form == "number":
            return str(value)
        return " ".join(map(str, value)) if value else "none"

    def describe(self, value: Value) -> str:
        """A value in words (for feedback)."""
        return self.spec.say(self.view, value)

    def read(self, line: str) -> Reply | None:
        """Grade one answer line; None for a blank line (skip). AnswerError for a line that is no answer."""
        text = line.strip()
        if not text:
            return None
        value = self._parse(text)
        chosen = next((c for c in self.choices if c.value == value), None)
        return Reply(text, value, value == self.answer, chosen.mistake if chosen else None,
                     chosen.tag if chosen else None)

    def divergence(self, value: Value) -> Parting | None:
        """Where ``value`` parts from what the cache did (None when right or unknown)."""
        if value == self.answer or self.view is None:
            return None
        return self.spec.diverge(self.view, value)

    def _letters(self) -> str:
        return f"{self.choices[0].label}-{self.choices[-1].label}"

    def _parse(self, text: str) -> Value:
        form, noun = self.spec.form, self.spec.noun
        words = text.replace(",", " ").split()
        try:
            chosen = letter_choice(self.choices, text)
        except ValueError as exc:
            raise AnswerError(str(exc)) from None
        if chosen is not None:
            return chosen.value
        if form == "number":
            if len(words) != 1 or not _DIGITS.fullmatch(words[0]):
                raise AnswerError(f"{text!r} is not an answer: type a choice letter ({self._letters()}) or a "
                                  "number, or a blank line to skip")
            return self._in_range(int(words[0]))
        if words and words[0].lower() in (noun, noun + "s"):
            words = words[1:]
        if [w.lower() for w in words] in (["none"], ["-"]):
            return ()
        if not words or not all(_DIGITS.fullmatch(w) for w in words):
            # An example must not be the answer: the first of two fixed ones that is not.
            example = next(e for e in ("3 5", "2 6") if e != self.correct_line)
            raise AnswerError(f"{text!r} is not an answer: type a choice letter ({self._letters()}), "
                              f"a list of {noun}s such as `{example}`, `none`, or a blank line to skip")
        values = tuple(self._in_range(int(w)) for w in words)
        return tuple(sorted(set(values))) if form == "set" else values

    def _in_range(self, x: int) -> int:
        if x > self.bound:
            raise AnswerError(f"{x} is out of range: answers to this question go from 0 to {self.bound}")
        return x


def build(spec: QuestionKind, view: StepView, rng: random.Random) -> Question | None:
    """The question of kind ``spec`` at ``view``, or None when no wrong choice makes sense."""
    answer = spec.answer(view)
    bound = spec.bound(view)

    def fits(value) -> bool:
        if spec.form == "number":
            return 0 <= value <= bound
        return all(0 <= x <= bound for x in value)

    seen = {answer}
    wrong: list[Mistake] = []
    for m in spec.distractors(view, answer):
        value = m.value if spec.form != "set" else tuple(sorted(set(m.value)))
        if value in seen or not fits(value):
            continue  # a "mistake" that lands on the right answer (or an impossible one) is no distractor
        seen.add(value)
        wrong.append(Mistake(value, m.mistake, m.tag))
    if not wrong:
        return None
    wrong = rng.sample(wrong, min(MAX_DISTRACTORS, len(wrong)))
    options = [(answer, None, None)] + [(m.value, m.mistake, m.tag) for m in wrong]
    rng.shuffle(options)  # numbers too: in value order, the best fixed position beat chance by 19 points
    # Turned by the question itself: scenarios asked with the same seed drew the same orders, so
    # one letter was right too often across them (base_fail's first, 48% against 33%).
    turn = random.Random(f"kvviz-quiz/turn/{spec.name}/{view.index}/{view.op.text}/{answer}").randrange(len(options))
    options = options[turn:] + options[:turn]
    choices = tuple(Choice(LETTERS[i], spec.say(view, v), v, m, tag=t) for i, (v, m, t) in enumerate(options))
    return Question(spec.name, view.index, spec.ask(view), choices, answer, bound, tuple(spec.hints(view)),
                    spec.why(view, answer), spec, view)
