# SPDX-License-Identifier: Apache-2.0
"""Predict, then reveal: questions at the interesting steps of a session, graded by the cache.

Each question is asked before step ``i`` is applied and answered from frame ``i``, the state
the cache really reached (a session already holds every frame, so asking never changes the
timeline: nothing here applies an op). Every question kind is one entry of :data:`KINDS`
carrying when it applies at a step, how to ask it, the correct answer, the form an answer
line takes, the distractors (each names the learner's mistake it models), a hint and a why
sentence. :func:`questions` picks one kind per interesting step, deterministically for a
(session, seed); :meth:`Question.read` turns an answer line into a :class:`Reply`.

Answer lines: a choice number, or the answer itself. A number question numbers its choices
by their values (choice ``4`` *is* the answer 4), so the two never disagree. A list question
(block tables, victims in order, sets of nodes) reads a lone number as a choice number, and
two or more numbers, ``none``, or a list after ``page``/``pages``/``node``/``nodes`` as the
answer itself; a blank line skips.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcore import events as ev

from .designs import design, design_of
from .words import count
from .policy_words import key_fields, key_value, words_for
from .why import why_evicted, why_short_match

if TYPE_CHECKING:  # pragma: no cover
    from kvcore import Snapshot

    from .session import Frame, Session

MAX_DISTRACTORS = 3
"""Wrong choices shown with each question (fewer when fewer mistakes make sense there)."""

Value = int | tuple[int, ...]


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
        """Whether the cache keeps a trie of shared nodes (questions about refs and eviction
        need one): its design says so (:attr:`kvviz.model.designs.Design.tree`)."""
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


def _walk(snap: "Snapshot", tokens) -> list:
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


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Room:
    """What an acquire or extend asks of the pool, counted as the cache counts it."""

    needed: int
    free: int
    evictable: int
    protected: int  # ref-0 nodes the acquire itself matches: referenced by it, not evictable for it
    partial_free: int  # new pages if a partial page needed none (a mistake's count)

    @property
    def short(self) -> int:
        """Pages missing: 0 when the op fits."""
        return max(0, self.needed - self.free - self.evictable)


def _room(view: StepView) -> Room | None:
    """The op's demand on the pool, or None when it is not an acquire/extend that can run."""
    op, snap = view.op, view.snap0
    tpp = snap.tokens_per_page
    ref0 = snap.evictable_count if view.tree else 0
    if op.kind == "acquire" and op.tokens is not None:
        path = _walk(snap, op.tokens) if view.tree else []
        rest = len(op.tokens) - len(path) * tpp + op.extra
        protected = sum(1 for n in path if n.ref == 0)
        return Room(_ceil(rest, tpp), snap.free_count, ref0 - protected, protected, rest // tpp)
    if op.kind == "extend" and op.tokens is not None:
        mine = view.mine(snap)
        if mine is None:
            return None
        tokens = mine.tokens + op.tokens if op.append else op.tokens
        if tuple(tokens[:len(mine.tokens)]) != tuple(mine.tokens):
            return None  # not a continuation: InvalidOperation, not a question of room
        have = len(mine.pages)
        return Room(max(0, _ceil(len(tokens) + op.extra, tpp) - have), snap.free_count, ref0, 0,
                    max(0, (len(tokens) + op.extra) // tpp - have))
    return None


def _candidates(snap: "Snapshot", exclude=()) -> list:
    """Eviction candidates (childless non-root ref-0 nodes) of ``snap``, smallest key (under its
    policy) first."""
    out = [snap.node(n) for n in snap.heap if n not in exclude]
    return sorted(out, key=snap.node_key)


def _leaf(snap: "Snapshot", node) -> bool:
    return not snap.children(node.id)


# -- the question kinds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Mistake:
    """A wrong answer and the learner's mistake it models."""

    value: Value
    mistake: str


@dataclass(frozen=True)
class QuestionKind:
    """One kind of question: everything about it in one entry.

    ``applies(view)``: whether the step is an interesting one for this kind; ``ask(view)``:
    the question; ``answer(view)``: the correct answer, read from the frame after the step;
    ``form``: 'number', 'list' (order matters) or 'set'; ``noun``: what the numbers name
    ('page', 'node'); ``bound(view)``: the largest number an answer may contain;
    ``describe(value)``: an answer in words (a choice's text); ``distractors(view, answer)``:
    wrong answers with the mistake each models; ``hint(view)`` and ``why(view, answer)``: one sentence each;
    ``weight``: how much more often than a weight-1 kind it is picked where both apply (the
    rarer, harder moments, evictions and failures, should not drown in ref and free questions).
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
    hint: Callable[[StepView], str]
    why: Callable[[StepView, Value], str]
    weight: int = 1


def _pages(value) -> str:
    return " ".join(map(str, value)) if value else "none"


def _page_list(value) -> str:
    """``pages 3 5``, ``page 3``, ``no pages``: a list answer in words."""
    if not value:
        return "no pages"
    return f"page {value[0]}" if len(value) == 1 else f"pages {_pages(value)}"


# next victim ---------------------------------------------------------------------------

def _victim_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.snap0
    matched = set(view.matched.nodes) if view.matched else set()
    out = []
    interior = sorted((n for n in snap.nodes if n.parent is not None and n.ref == 0 and not _leaf(snap, n)),
                      key=snap.node_key)
    if interior:
        out.append(Mistake(interior[0].page,
                           "an interior node: only leaves are evicted, a parent goes after its children"))
    held = sorted((n for n in snap.nodes if n.parent is not None and n.ref > 0 and _leaf(snap, n)),
                  key=snap.node_key)
    if held:
        out.append(Mistake(held[0].page, "a leaf that is still referenced: a live allocation protects it"))
    candidates = _candidates(snap, matched)
    words = words_for(snap)
    if candidates:
        out.append(Mistake(candidates[-1].page, words.last_mistake))
        if not words.lru:  # the learner who knows only lru's rule
            oldest = min(candidates, key=lambda n: n.key)
            out.append(Mistake(oldest.page, f"the least recently used leaf: that is lru's choice; {snap.policy} "
                                            f"evicts by {key_fields(snap)} ({words.rule})"))
    own = [snap.node(n) for n in matched if snap.node(n).ref == 0]
    if own:
        out.append(Mistake(own[0].page, "a page this acquire matches: its own prefix is referenced, so protected"))
    if snap.free:
        out.append(Mistake(snap.free[0], "the first free page: a free page is taken, not evicted"))
    return out


def _victim_why(view: StepView, answer: Value) -> str:
    lines = why_evicted(view.session, view.index, answer).lines
    free = view.snap0.free_count
    first = f"The {count(free, 'free page')} went first" if free else "No page was free"
    return (f"{first}; then {lines[1][0].lower()}{lines[1][1:]} "
            "It was the eviction candidate (childless, ref 0) with the smallest key.")


VICTIM = QuestionKind(
    "victim", "next victim", "number", "page",
    applies=lambda v: v.tree and v.ok and bool(v.victims),
    ask=lambda v: f"{v.text()} It needs more pages than the {count(v.snap0.free_count, 'free page')}. "
                  "Which page is evicted first?",
    answer=lambda v: v.victims[0].page,
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: f"page {x}",
    distractors=_victim_distractors,
    hint=lambda v: "Free pages go first; then the cache pops the eviction candidate (a childless node with ref 0) "
                   f"with the smallest key {key_fields(v.snap0)}. The acquire's own match is protected.",
    why=_victim_why,
    weight=3,
)


# the next victims, in order -----------------------------------------------------------

def _victims_count(view: StepView) -> int:
    return min(3, len(view.victims))


def _victims_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.snap0
    n = len(answer)
    matched = set(view.matched.nodes) if view.matched else set()
    words = words_for(snap)
    reverse = "newest first" if words.lru else "in reverse"
    out = [Mistake(tuple(reversed(answer)), f"the right pages, {reverse}: the heap pops the {words.smallest} key first")]
    candidates = _candidates(snap, matched)
    out.append(Mistake(tuple(c.page for c in candidates[:n]),
                       "only the leaves that are candidates now: a parent left childless joins the heap (a cascade)"))
    if words.lru:
        out.append(Mistake(tuple(c.page for c in sorted(candidates, key=lambda c: c.seq)[:n]),
                           "creation order (seq) alone: a node used again moves to the back of the line"))
    else:  # the learner who knows only lru's order
        out.append(Mistake(tuple(c.page for c in sorted(candidates, key=lambda c: c.key)[:n]),
                           f"least recently used first: that is lru's order; {snap.policy} pops the smallest "
                           f"{key_fields(snap)}"))
    out.append(Mistake(tuple(sorted(answer)), f"page-number order: the key is {key_fields(snap)}, not the page"))
    return [m for m in out if len(m.value) == n]


VICTIMS = QuestionKind(
    "victims", "the next victims in order", "list", "page",
    applies=lambda v: v.tree and v.ok and len(v.victims) >= 2,
    ask=lambda v: (f"{v.text()} It evicts {count(len(v.victims), 'page')}. "
                   + (f"Which {_victims_count(v)} are evicted first, in order?" if len(v.victims) > 3
                      else "Which, in the order they are evicted?")),
    answer=lambda v: tuple(e.page for e in v.victims[:_victims_count(v)]),
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: _page_list(x),
    distractors=_victims_distractors,
    hint=lambda v: f"Pop the smallest key {key_fields(v.snap0)} among childless ref-0 nodes; when a node's last child "
                   "is evicted and it has ref 0, it becomes a candidate too.",
    why=lambda v, x: (f"Each eviction pops the smallest key among the candidates at that moment: "
                      + ", ".join(f"page {e.page} key {key_value(e.key)}" for e in v.victims[:len(x)])
                      + (" (a parent left childless joined the heap on the way)."
                         if any(e.parent_became_candidate is not None for e in v.victims[:len(x) - 1]) else ".")),
    weight=3,
)


# hit tokens ----------------------------------------------------------------------------

def _partial_hit(view: StepView) -> int:
    """Tokens matched if a partial page counted: the full-page match plus the common tokens
    with the best next cached page."""
    snap, tokens = view.snap0, view.op.tokens
    path = _walk(snap, tokens)
    tpp = snap.tokens_per_page
    start = len(path) * tpp
    parent = path[-1].id if path else 0
    best = 0
    for child in snap.children(parent):
        same = 0
        for a, b in zip(snap.node(child).tokens, tokens[start:]):
            if a != b:
                break
            same += 1
        best = max(best, same)
    return start + best


def _unpublished_hit(view: StepView) -> int:
    """Tokens matched if live allocations' unpublished full pages were shared too."""
    tokens, tpp = view.op.tokens, view.snap0.tokens_per_page
    best = 0
    for a in view.snap0.allocations:
        if len(a.tokens) // tpp <= a.published:
            continue  # every full page of it is published: nothing unpublished to mistake
        same = 0
        for x, y in zip(a.tokens, tokens):
            if x != y:
                break
            same += 1
        best = max(best, same // tpp * tpp)
    return best


def _hit_distractors(view: StepView, answer: Value) -> list[Mistake]:
    tokens = view.op.tokens
    out = [Mistake(_partial_hit(view), "counting a partial page as a hit: only whole pages are shared")]
    if _unpublished_hit(view) > answer:  # only then does the mistake give another count
        out.append(Mistake(_unpublished_hit(view),
                           "sharing another request's unpublished pages: only published pages are found"))
    if answer:
        out.append(Mistake(0, "no sharing at all: published pages stay cached after release and are found by prefix"))
    out.append(Mistake(len(tokens), "the whole request: tokens after the first page that differs are never matched"))
    return out


def _hit_applies(view: StepView) -> bool:
    if not (view.tree and view.ok and view.op.kind == "acquire" and view.matched):
        return False
    return view.matched.matched_tokens > 0 or _partial_hit(view) > 0 or _unpublished_hit(view) > 0


def _hit_why(view: StepView, answer: Value) -> str:
    lines = why_short_match(view.session, view.index, view.op.name).lines
    if _unpublished_hit(view) > answer:
        # The why-query looks at the trie only; the learner's likely mistake is elsewhere.
        tpp, tokens = view.snap0.tokens_per_page, view.op.tokens
        holders = [a.label for a in view.snap0.allocations if len(a.tokens) // tpp > a.published
                   and tuple(a.tokens[:answer + tpp]) == tuple(tokens[:answer + tpp])]
        who = ", ".join(holders) if holders else "another request"
        verbs = ("holds", "has") if len(holders) <= 1 else ("hold", "have")
        return (f"{lines[0]} {who} {verbs[0]} the next page's tokens but {verbs[1]} not published them: only "
                "published pages are shared.")
    return " ".join(lines[:2])


HITS = QuestionKind(
    "hits", "hit tokens", "number", "token",
    applies=_hit_applies,
    ask=lambda v: f"{v.text()} How many of its {count(len(v.op.tokens), 'token')} will hit the cache?",
    answer=lambda v: v.matched.matched_tokens,
    bound=lambda v: len(v.op.tokens),
    describe=lambda x: count(x, "token"),
    distractors=_hit_distractors,
    hint=lambda v: f"Walk the trie from the root one full page ({v.snap0.tokens_per_page} tokens) at a time; "
                   "stop at the first page that is not a child of the last match.",
    why=_hit_why,
    weight=2,
)


# block table ---------------------------------------------------------------------------

def _table_applies(view: StepView) -> bool:
    if not view.ok or view.mine(view.snap1) is None:
        return False
    op = view.op
    if op.kind == "acquire":
        return bool(view.victims) or bool(view.matched and view.matched.matched_tokens)
    if op.kind == "extend":
        return len(view.mine(view.snap1).pages) > len(view.mine(view.snap0).pages)
    return op.kind == "publish" and bool(view.dedups)


def _table_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap, op = view.snap0, view.op
    out = [Mistake(tuple(sorted(answer)), "page-number order: a block table is in token order")]
    if op.kind == "publish":
        out.append(Mistake(view.mine(snap).pages, "keeping its own copies: publish adopts the cached page"))
        return out
    old = view.mine(snap).pages if op.kind == "extend" else ()
    new = len(answer) - len(old)
    taken = answer[len(old):]
    if view.victims and len(view.victims) >= 2:
        k = len(view.victims)
        words = words_for(snap)
        reverse = "newest first" if words.lru else "in reverse"
        out.append(Mistake(answer[:-k] + tuple(reversed(answer[-k:])),
                           f"evicted pages {reverse}: the {words.smallest} key is evicted (and used) first"))
    if op.kind == "acquire" and view.matched and view.matched.matched_tokens:
        fresh = len(answer)
        if len(snap.free) >= fresh:
            out.append(Mistake(tuple(snap.free[:fresh]), "copying the hit pages: a hit reuses the cached pages"))
    if new >= 1 and len(snap.free) > new and not view.victims:
        out.append(Mistake(old + tuple(snap.free[:new + 1]),
                           "a page too many: extra slots and tokens are counted together, rounded up once"))
    if new >= 2:
        out.append(Mistake(old + taken[:-1], "a page too few: a partial last page still needs a whole page"))
    return out


def _table_why(view: StepView, answer: Value) -> str:
    held = f"{view.op.name} holds pages {_pages(answer)}"
    if view.op.kind == "publish":
        return (f"{held}: it adopted the cached page of each duplicate block, and its own copies went back to "
                "the free list.")
    kept = len(view.matched.pages) if view.op.kind == "acquire" else len(view.mine(view.snap0).pages)
    first = count(kept, "matched page") if view.op.kind == "acquire" else count(kept, "page it had")
    new = len(answer) - kept
    evicted = len(view.victims)
    return (f"{held}: {first}, then {count(new, 'new page')} in token order ({new - evicted} from the front of "
            f"the free list, {evicted} evicted, {words_for(view.snap0).smallest} key first).")


TABLE = QuestionKind(
    "block_table", "block table", "list", "page",
    applies=_table_applies,
    ask=lambda v: f"{v.text()} What is {v.op.name}'s block table after it?",
    answer=lambda v: tuple(v.mine(v.snap1).pages),
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: _page_list(x),
    distractors=_table_distractors,
    hint=lambda v: "Matched pages first (shared, in token order), then free pages from the front of the free list, "
                   f"then evicted pages, {words_for(v.snap0).smallest} key first; publish swaps a duplicate for the "
                   "cached page.",
    why=lambda v, x: _table_why(v, x),
    weight=2,
)


# ref count -----------------------------------------------------------------------------

def _ref_node(view: StepView):
    """The node the ref question asks about: the deepest one the op references or drops."""
    op = view.op
    if op.kind == "acquire" and view.matched and view.matched.nodes:
        return view.matched.nodes[-1]
    if op.kind == "release":
        mine = view.mine(view.snap0)
        if mine is not None and mine.published:
            node = view.snap0.node_for_page(mine.pages[mine.published - 1])
            return node.id if node is not None else None
    if op.kind == "publish" and view.dedups:
        return view.dedups[-1].node
    return None


def _ref_applies(view: StepView) -> bool:
    if not (view.tree and view.ok):
        return False
    node = _ref_node(view)
    return node is not None and view.snap1.node(node) is not None and view.snap0.node(node) is not None


def _ref_distractors(view: StepView, answer: Value) -> list[Mistake]:
    node = _ref_node(view)
    before = view.snap0.node(node).ref
    out = [Mistake(before, "unchanged: every acquire that matches a node, every release and every adopting "
                           "publish changes its ref")]
    if view.op.kind == "release":
        out.append(Mistake(0, "release drops the node to 0: other live allocations on its path still count"))
        out.append(Mistake(before + 1, "release adds a reference: it drops one"))
    else:
        out.append(Mistake(1, "only the newest user counts: ref counts every live allocation on the path"))
        out.append(Mistake(answer + 1, "counting one allocation twice (acquire and publish): one per allocation"))
    return out


REF = QuestionKind(
    "ref", "ref count", "number", "ref",
    applies=_ref_applies,
    ask=lambda v: (f"{v.text()} What is the ref count of node {_ref_node(v)} "
                   f"(page {v.snap0.node(_ref_node(v)).page}) after it?"),
    answer=lambda v: v.snap1.node(_ref_node(v)).ref,
    bound=lambda v: len(v.snap0.allocations) + len(v.snap1.allocations) + 1,
    describe=lambda x: f"ref {x}",
    distractors=_ref_distractors,
    hint=lambda v: "A node's ref is the number of live allocations whose published path contains it.",
    why=lambda v, x: (f"Node {_ref_node(v)} is on the published path of "
                      f"{count(x, 'live allocation')} after the op, so its ref is {x}"
                      f" (it was {v.snap0.node(_ref_node(v)).ref})."),
)


# will it fail ----------------------------------------------------------------------------

def _fail_applies(view: StepView) -> bool:
    room = _room(view)
    if room is None or room.needed <= room.free:
        return False  # no pressure on the pool: nothing to predict
    failed_alloc = view.after.error is not None and view.after.error.kind == "CacheAllocationFailure"
    if view.after.error is not None and not failed_alloc:
        return False  # misuse (InvalidOperation) is not a question of room
    return failed_alloc == (room.short > 0)  # our count agrees with the cache's verdict


def _fail_distractors(view: StepView, answer: Value) -> list[Mistake]:
    room = _room(view)
    out = [
        Mistake(max(0, room.needed - room.free), "counting free pages only: ref-0 cached pages can be evicted"),
        Mistake(max(0, room.needed - room.free - room.evictable - room.protected),
                "evicting its own prefix: the pages an acquire matches are referenced by it"),
        Mistake(max(0, room.partial_free - room.free - room.evictable),
                "a partial page needs no page: every started page takes a whole page"),
    ]
    if answer:
        out.append(Mistake(0, "referenced pages can be evicted: only ref-0 pages can"))
    else:
        out.append(Mistake(1, "the pool looks full: but evictable pages make room"))
    return out


def _fail_why(view: StepView, answer: Value) -> str:
    room = _room(view)
    verdict = f"it fails, {count(answer, 'page')} short" if answer else "it succeeds"
    return (f"It needs {count(room.needed, 'new page')}; there are {room.free} free and {room.evictable} evictable "
            f"(ref 0, not its own prefix), so {verdict}; a failed op changes nothing.")


FAIL = QuestionKind(
    "fail", "will it fail", "number", "page",
    applies=_fail_applies,
    ask=lambda v: f"{v.text()} Will it fail? Answer how many pages short it is (0: it succeeds).",
    answer=lambda v: _room(v).short,
    bound=lambda v: _room(v).needed,
    describe=lambda x: f"fails, {count(x, 'page')} short" if x else "succeeds",
    distractors=_fail_distractors,
    hint=lambda v: "Count the new pages it needs (tokens not matched plus extra slots, rounded up to pages); it "
                   "fits when free plus evictable (ref 0, not matched by this acquire) cover them.",
    why=_fail_why,
    weight=2,
)


# free pages --------------------------------------------------------------------------------

def _free_applies(view: StepView) -> bool:
    if not view.ok:
        return False
    op = view.op
    if op.kind == "release":
        mine = view.mine(view.snap0)
        return mine is not None and bool(mine.pages)
    if op.kind == "publish":
        return bool(view.dedups)
    if op.kind == "acquire":
        return bool(view.victims) or bool(view.matched and view.matched.matched_tokens)
    return op.kind == "extend" and view.snap1.free_count != view.snap0.free_count


def _free_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap, op = view.snap0, view.op
    out = [Mistake(snap.free_count, "unchanged: this op moves pages to or from the free list")]
    if op.kind == "release":
        mine = view.mine(snap)
        out.append(Mistake(snap.free_count + len(mine.pages),
                           "release frees every page: published pages stay cached for reuse"))
        alone = sum(1 for p in mine.pages[:mine.published] if snap.node_for_page(p).ref == 1)
        out.append(Mistake(answer + alone, "release frees the pages nobody else uses: unreferenced pages stay "
                                           "cached, evictable, until a request needs the room"))
    if op.kind == "acquire" and view.matched and view.matched.matched_tokens:
        whole = _ceil(len(op.tokens) + op.extra, snap.tokens_per_page)
        out.append(Mistake(max(0, snap.free_count - whole), "hit pages also come from the free list: they are shared"))
    if view.victims:
        out.append(Mistake(answer + len(view.victims), "evicted pages stay on the free list: they go to the requester"))
    if op.kind == "publish":
        out.append(Mistake(snap.free_count + 2 * len(view.dedups),
                           "both copies freed: the cached page stays, only the duplicate returns"))
    return out


FREE = QuestionKind(
    "free", "free pages", "number", "page",
    applies=_free_applies,
    ask=lambda v: f"{v.text()} How many pages are free after it (there are {v.snap0.free_count} now)?",
    answer=lambda v: v.snap1.free_count,
    bound=lambda v: v.snap0.page_count,
    describe=lambda x: count(x, "free page"),
    distractors=_free_distractors,
    hint=lambda v: "Release frees only unpublished pages; acquires take free pages first; a duplicate page "
                   "returns to the free list when publish adopts the cached one.",
    why=lambda v, x: (f"The free list went from {v.snap0.free_count} to {x}: "
                      + {"release": "published pages stay cached, only the unpublished tail was freed.",
                         "publish": f"{count(len(v.dedups), 'duplicate page')} returned when publish adopted the "
                                    "cached copies.",
                         }.get(v.op.kind, f"it took {count(v.snap0.free_count - x, 'free page')} "
                                          f"and evicted {len(v.victims)}; hit pages are shared, not taken.")),
)


# evictable nodes --------------------------------------------------------------------------

def _shown_nodes(view: StepView) -> tuple[int, ...]:
    """The nodes the evictable question lists: the op's path first, then others by id (up to 5)."""
    snap1 = view.snap1
    path: list[int] = []
    if view.op.kind == "acquire" and view.matched:
        path = list(view.matched.nodes)
    elif view.op.kind == "release":
        mine = view.mine(view.snap0)
        if mine is not None:
            path = [view.snap0.node_for_page(p).id for p in mine.pages[:mine.published]
                    if view.snap0.node_for_page(p) is not None]
    shown = [n for n in path if snap1.node(n) is not None][-3:]
    shown += [n.id for n in snap1.nodes if n.parent is not None and n.id not in shown]
    return tuple(sorted(shown[:5]))


def _evictable_applies(view: StepView) -> bool:
    if not (view.tree and view.ok and view.op.kind in ("acquire", "release")):
        return False
    if view.op.kind == "acquire" and not (view.matched and view.matched.nodes):
        return False
    if view.op.kind == "release" and not (view.mine(view.snap0) and view.mine(view.snap0).published):
        return False
    return len(_shown_nodes(view)) >= 2


def _shown_pages(view: StepView) -> tuple[int, ...]:
    """The cached pages the evictable question lists (the pages of :func:`_shown_nodes`): the
    state the learner sees draws pages, so the question names pages, and their nodes."""
    return tuple(sorted(view.snap1.node(n).page for n in _shown_nodes(view)))


def _evictable_distractors(view: StepView, answer: Value) -> list[Mistake]:
    s0, s1 = view.snap0, view.snap1
    shown = [s1.node_for_page(p) for p in _shown_pages(view)]
    return [
        Mistake(tuple(n.page for n in shown if n.id in s1.heap),
                "only the candidates: a ref-0 node with children is evictable too, after its children"),
        Mistake(tuple(n.page for n in shown if _leaf(s1, n)), "every leaf: a referenced leaf is protected"),
        Mistake(tuple(n.page for n in shown if s0.node(n.id) is not None and s0.node(n.id).ref == 0),
                "as before the op: this op changed the refs on its path"),
        Mistake(tuple(n.page for n in shown), "all of them: referenced pages are never evicted"),
        Mistake((), "none: a released page stays cached with ref 0, and that is evictable"),
    ]


def _evictable_ask(view: StepView) -> str:
    listed = ", ".join(f"page {p} (node {view.snap1.node_for_page(p).id})" for p in _shown_pages(view))
    return f"{view.text()} After it, which of these cached pages are evictable (ref 0)? {listed}"


EVICTABLE = QuestionKind(
    "evictable", "evictable pages", "set", "page",
    applies=_evictable_applies,
    ask=_evictable_ask,
    answer=lambda v: tuple(p for p in _shown_pages(v) if v.snap1.node_for_page(p).ref == 0),
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: _page_list(x),
    distractors=_evictable_distractors,
    hint=lambda v: "Evictable means ref 0: no live allocation's published path contains the page's node. An "
                   "acquire references every node it matches; a release drops its references.",
    why=lambda v, x: ("After the op, " + "; ".join(f"page {p} has ref {v.snap1.node_for_page(p).ref}"
                                                    for p in _shown_pages(v))
                      + ": evictable means ref 0 (a parent goes after its children)."),
)


KINDS: dict[str, QuestionKind] = {k.name: k for k in (VICTIM, VICTIMS, HITS, TABLE, REF, FAIL, FREE, EVICTABLE)}
"""Every question kind, by name: the one table this module is built around."""


# -- questions and answers -------------------------------------------------------------------


_DIGITS = re.compile(r"[0-9]{1,30}")  # ASCII only: "²".isdigit() is True but int("²") fails


class AnswerError(ValueError):
    """An answer line that is not an answer: the message says what to type instead."""


@dataclass(frozen=True)
class Choice:
    """One numbered choice: its label (what to type), its value and text, and the mistake
    it models (None for the correct one)."""

    label: int
    value: Value
    text: str
    mistake: str | None

    def line(self) -> str:
        """``"3) pages 4 5"``: how the choice is printed."""
        return f"{self.label}) {self.text}"


@dataclass(frozen=True)
class Reply:
    """A graded answer: the line as given, the value it means, and whether it is right."""

    given: str
    value: Value
    right: bool
    mistake: str | None = None


@dataclass(frozen=True)
class Question:
    """One question at one step: asked with the state of frame ``step - 1``, revealed by frame ``step``."""

    kind: str
    step: int
    text: str
    choices: tuple[Choice, ...]
    answer: Value
    bound: int
    hint: str
    why: str

    @property
    def spec(self) -> QuestionKind:
        """The question's kind entry."""
        return KINDS[self.kind]

    @property
    def correct_line(self) -> str:
        """The correct answer as an answer line: ``4``, ``3 5``, ``page 3`` (one page, which a
        lone number would read as a choice number), ``none``."""
        return self.value_line(self.answer)

    def value_line(self, value: Value) -> str:
        """``value`` written as an answer line."""
        if self.spec.form == "number":
            return str(value)
        if not value:
            return "none"
        if len(value) == 1:
            return f"{self.spec.noun} {value[0]}"
        return " ".join(map(str, value))

    def describe(self, value: Value) -> str:
        """A value in words (for feedback)."""
        return self.spec.describe(value)

    def read(self, line: str) -> Reply | None:
        """Grade one answer line; None for a blank line (skip). AnswerError for a line that is no answer."""
        text = line.strip()
        if not text:
            return None
        value = self._parse(text)
        chosen = next((c for c in self.choices if c.value == value), None)
        return Reply(text, value, value == self.answer, chosen.mistake if chosen is not None else None)

    def _parse(self, text: str) -> Value:
        form, noun = self.spec.form, self.spec.noun
        words = text.replace(",", " ").split()
        if form == "number":
            if len(words) != 1 or not _DIGITS.fullmatch(words[0]):
                raise AnswerError(f"{text!r} is not a number: type one of the choices "
                                  f"({', '.join(str(c.label) for c in self.choices)}) or another number, "
                                  "or a blank line to skip")
            return self._in_range(int(words[0]))
        keyword = words[0].lower() in (noun, noun + "s")
        if keyword:
            words = words[1:]
        if [w.lower() for w in words] in (["none"], ["-"]):
            return ()
        if not words or not all(_DIGITS.fullmatch(w) for w in words):
            # An example must not be the answer: the first of two fixed ones that is not.
            example = next(e for e in ("3 5", "2 6") if e != self.correct_line)
            one = next(e for e in (f"{noun} 3", f"{noun} 2") if e != self.correct_line)
            raise AnswerError(f"{text!r} is not an answer: type a choice number (1-{len(self.choices)}), "
                              f"a list of {noun}s such as `{example}` (one {noun}: `{one}`), "
                              "`none`, or a blank line to skip")
        numbers = [int(w) for w in words]
        if len(numbers) == 1 and not keyword:
            k = numbers[0]
            if not 1 <= k <= len(self.choices):
                raise AnswerError(f"there is no choice {k}: choose 1-{len(self.choices)}, or type a list of "
                                  f"{noun}s (one {noun}: `{noun} {k}`)")
            return self.choices[k - 1].value
        values = tuple(self._in_range(x) for x in numbers)
        return tuple(sorted(set(values))) if form == "set" else values

    def _in_range(self, x: int) -> int:
        if x > self.bound:
            raise AnswerError(f"{x} is out of range: answers to this question go from 0 to {self.bound}")
        return x


def _build(spec: QuestionKind, view: StepView, rng: random.Random) -> Question | None:
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
        wrong.append(Mistake(value, m.mistake))
    if not wrong:
        return None
    wrong = rng.sample(wrong, min(MAX_DISTRACTORS, len(wrong)))
    options = [(answer, None)] + [(m.value, m.mistake) for m in wrong]
    if spec.form == "number":
        options.sort(key=lambda o: o[0])  # numbered by value: choice 4 is the answer 4
        choices = tuple(Choice(v, v, spec.describe(v), m) for v, m in options)
    else:
        rng.shuffle(options)
        choices = tuple(Choice(i + 1, v, spec.describe(v), m) for i, (v, m) in enumerate(options))
    return Question(spec.name, view.index, spec.ask(view), choices, answer, bound, spec.hint(view),
                    spec.why(view, answer))


def step_views(session: "Session", last: int | None = None):
    """Every step of ``session`` (up to step ``last``) as a :class:`StepView` (frame ``i - 1``
    before, ``i`` after)."""
    before = session.frame(0)
    end = len(session) if last is None else min(len(session), last + 1)
    for index in range(1, end):
        after = session.frame(index)
        yield StepView(session, index, before, after)
        before = after


def questions_at(view: StepView, rng: random.Random) -> list[Question]:
    """Every question that makes sense at one step, one per kind that applies (none on a cache
    whose design the quiz does not apply to, :attr:`kvviz.model.designs.Design.quiz`: see
    :func:`refusal`)."""
    if not design_of(view.snap0).quiz:
        return []
    out = []
    for spec in KINDS.values():
        if spec.applies(view):
            question = _build(spec, view, rng)
            if question is not None:
                out.append(question)
    return out


def refusal(session: "Session") -> str | None:
    """Why the quiz asks nothing about ``session``, in one line for the command line to say
    (None when it asks): the design's :attr:`~kvviz.model.designs.Design.quiz_refusal`. A hash
    cache's questions would need their own answers and explanations (free and cached pages
    overlap, there is no heap and no dedup); the trie's would be false there, so its design
    says the quiz does not apply (:func:`questions_at`)."""
    entry = design(session.config.kind)
    return None if entry.quiz else entry.quiz_refusal


def questions(session: "Session", seed: int = 0, last: int | None = None) -> list[Question]:
    """One question at each interesting step of ``session`` (up to step ``last``), chosen and
    shuffled by ``seed``.

    The same session and seed give the same questions; the session is only read. None for a
    session :func:`refusal` refuses."""
    rng = random.Random(f"kvviz-quiz/questions/{seed}")
    out: list[Question] = []
    for view in step_views(session, last):
        options = questions_at(view, rng)
        if out and len(options) > 1:
            # Variety: not the same kind twice in a row when the step offers another.
            options = [q for q in options if q.kind != out[-1].kind] or options
        if options:
            out.append(rng.choices(options, [q.spec.weight for q in options])[0])
    return out


# -- feedback and score (shared by the plain command and the UI panel) --------------------


def feedback(question: Question, reply: Reply | None) -> tuple[str, ...]:
    """What the learner reads after answering (``reply`` None: skipped): right or wrong, the
    correct answer, the mistake a wrong choice models, and one sentence of why."""
    correct = f"{question.correct_line} ({question.describe(question.answer)})"
    if reply is None:
        lines = [f"Skipped. The answer is {correct}."]
    elif reply.right:
        lines = [f"Right: {question.describe(question.answer)}."]
    else:
        lines = [f"Wrong: you said {question.describe(reply.value)}; the answer is {correct}."]
        if reply.mistake:
            lines.append(f"That choice is {reply.mistake}.")
    lines.append(f"Why: {question.why}")
    return tuple(lines)


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
        """``Score: 3 of 4 right, streak 2``."""
        return f"Score: {self.right} of {self.asked} right, streak {self.streak}"
