# SPDX-License-Identifier: Apache-2.0
"""Perform-the-op exercises: the learner plays the cache, move by move.

At an op, the exercise stops before each move the cache makes and asks the learner to make
it: where acquire's walk stops, which pages leave the free list, which node is the victim,
each swap of a heap's sift (two slots, or "the sift stops"), whether publish adopts a cached
node (dedup) or creates one, which of the pages taken from a hash cache's queue drop their
block. Each move is graded against the op's sub-step stream (:mod:`kvviz.core.substeps`:
kvcore's own events, the model answer), shown on the state kvcore held just before it.

**Moves come from the design's event table.** A sub-step's kind is what its design's
:class:`~kvviz.core.designs.EventWords` row says it is; a move kind is one row of
:data:`MOVE_KINDS`, naming the sub-step kinds it grades (``grades``). :func:`move_kinds_of`
gives a design exactly the move kinds whose graded sub-step kinds its event table produces,
so a design that brings a new event (a new sub-step kind) brings its move by adding one row
here, and a design whose events reuse known kinds (a take, a drop) gets their moves at once.

A move is never asked when the sub-steps before it already gave its answer away: the walk's
stop is asked before the walk's first step, a dedup before the candidate it adopts leaves
the heap, a hash take before the blocks its pages drop. Every move has at least two choices
(a move with one is not asked), each wrong choice models a named mistake (``mistake``) and
says why it is wrong. Choices are lettered ``a``..; typed values (``2``, ``3 5``, ``[1] [3]``,
``node 4``, ``stop``, ``none``) are read too. Deterministic: choices are shuffled by a
:class:`random.Random` seeded with the exercise's seed and the move's place.

:class:`Play` is the learner's way through: answer, retry, ``fix`` (apply the right move,
count the miss), the score per move. Pure model: no Textual, no click.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from kvcore import Snapshot

from kvviz.core.designs import Design, design_of
from kvviz.teach.quiz.choices import LETTERS, Choice, letter_choice, score_line
from kvviz.core.words import Labeler, are, count, default_labeler, policy_key_text

__all__ = ["MAX_CHOICES", "MOVE_KINDS", "Choice", "Exercise", "Move", "MoveKind", "MoveResult", "Play",
           "Verdict", "build_exercise", "move_kinds_of", "read_choice", "state_lines"]

MAX_CHOICES = 8
"""Choices a move offers at most (the walk's stop over a long prompt: a window of blocks)."""


@dataclass(frozen=True)
class Move:
    """One move the learner makes: at frame ``step``'s op, before sub-step ``anchor`` (the
    state shown is kvcore's right before it, ``state``), of kind ``kind``. ``covers`` are the
    sub-steps whose events are its model answer (their sentences are what the cache did);
    ``detail`` holds what the move is about (a block index, a sifting node's slot) for
    views and for checking."""

    index: int
    kind: str
    step: int
    op_text: str
    anchor: int
    covers: tuple[int, ...]
    prompt: str
    choices: tuple[Choice, ...]
    state: Snapshot = field(repr=False, compare=False)
    said: tuple[str, ...] = ()
    detail: tuple[tuple[str, object], ...] = ()

    @property
    def answer(self) -> Choice:
        """The right choice."""
        return next(c for c in self.choices if c.right)

    def info(self, name: str, default=None):
        """One entry of ``detail``."""
        return dict(self.detail).get(name, default)

    def read(self, text: str) -> Choice:
        """The choice ``text`` names: a letter, or a typed value. ValueError says why not."""
        return read_choice(self, text)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How one answer went: ``right``, the choice given, and the line to show."""

    right: bool
    choice: Choice
    line: str


@dataclass(frozen=True, slots=True)
class MoveResult:
    """A finished move: the first choice given (None when fixed before any), whether it was
    right first time, whether the learner asked for the fix."""

    move: int
    kind: str
    first: str | None
    mistake: str | None
    right: bool
    fixed: bool


@dataclass(frozen=True)
class Exercise:
    """The moves of some ops of a session, in play order; ``seed`` shuffled their choices."""

    title: str
    seed: int
    moves: tuple[Move, ...]
    design: str

    def __len__(self) -> int:
        return len(self.moves)


# -- the move kinds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MoveKind:
    """One kind of move: its ``name``, a ``title`` ("the walk's stop"), the sub-step kinds
    whose events are its model answer (``grades``: what a design's event table must produce
    for the move to apply), what the learner is to look at (``looks``: state sections, see
    :func:`state_lines`), ``find``: ``(_Op) -> [move drafts]``, and the ``rule`` a hint
    states."""

    name: str
    title: str
    grades: frozenset[str]
    looks: tuple[str, ...]
    find: Callable[["_Op"], list["_Draft"]]
    rule: str = ""


@dataclass
class _Draft:
    anchor: int
    covers: tuple[int, ...]
    prompt: str
    choices: list[tuple[str, tuple, str | None, str]]  # (text, value, mistake, why)
    detail: tuple[tuple[str, object], ...] = ()


class _Op:
    """One op's sub-steps with what the finders need: the op, the design, kvcore's states."""

    def __init__(self, step: int, op, subs, label: Labeler, recompute_last_token: bool = False):
        self.step = step
        self.recompute_last_token = recompute_last_token  # vLLM's cap: a hit stops before the last token
        self.op = op
        self.subs = subs
        self.before: Snapshot = subs.before
        self.after: Snapshot = subs.after
        self.design: Design = design_of(subs.before)
        self.kinds = [s.kind for s in subs]
        self.events = [s.event for s in subs]
        self.label = label
        self.tpp = subs.before.tokens_per_page
        self.rng = random.Random(0)  # picks among distractors; build_exercise seeds it per op
        self.evicted: dict[tuple[int, ...], int] = {}  # a block's tokens -> the last step that evicted it

    def state(self, anchor: int) -> Snapshot:
        """kvcore's state right before sub-step ``anchor``."""
        return self.subs.state(anchor - 1)

    def indices(self, *kinds: str) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k in kinds]

    def run_before(self, i: int, kinds: Iterable[str]) -> int:
        """The first index of the run of ``kinds`` that ends right before ``i`` (``i`` when none)."""
        kinds = set(kinds)
        while i > 0 and self.kinds[i - 1] in kinds:
            i -= 1
        return i

    def tokens(self) -> tuple[int, ...]:
        """The op's tokens as the allocation holds them after it (an extend's whole list)."""
        alloc = self.after.allocation_named(self.op.name) if self.op.name is not None else None
        if alloc is not None:
            return alloc.tokens
        return tuple(self.op.tokens or ())

    def block(self, index: int, tokens: Sequence[int] | None = None) -> tuple[int, ...]:
        tokens = self.tokens() if tokens is None else tokens
        return tuple(tokens[index * self.tpp:(index + 1) * self.tpp])


def _node_name(snap: Snapshot, node_id: int) -> str:
    node = snap.node(node_id)
    if not node_id:
        return "the root"
    return f"node {node_id}" + (f" (page {node.page})" if node is not None and node.page is not None else "")


# -- the walk's stop ----------------------------------------------------------------------------


def _find_stop(o: _Op) -> list[_Draft]:
    if o.op.kind != "acquire":
        return []
    spots = o.indices("walk", "stop", "match")
    tokens = tuple(o.op.tokens or ())
    full = len(tokens) // o.tpp
    if not spots or full < 1:
        return []
    anchor = spots[0]
    matched_event = next((o.events[i] for i in spots if o.kinds[i] == "match"), None)
    walked = [o.events[i] for i in spots if o.kinds[i] == "walk"]
    if matched_event is not None:
        answer = len(matched_event.nodes)
        last = spots.index(o.kinds.index("match")) if "match" in o.kinds else len(spots) - 1
        covers = tuple(spots[:last + 1])
    else:  # a failed acquire: the walk's own steps tell how far it got
        answer = len(walked)
        covers = tuple(spots)
    state = o.state(anchor)
    if not (state.blocks if o.design.rows == "blocks" else any(n.id for n in state.nodes)):
        return []  # nothing cached at all: the state shown says the answer (0 blocks), so no question
    shares = o.design.shares
    tree = o.design.tree

    def holder(k: int) -> str:
        if matched_event is not None and k < len(matched_event.nodes):
            if tree:
                return _node_name(state, matched_event.nodes[k])
            return f"block {matched_event.nodes[k]} on page {matched_event.pages[k]}"
        if k < len(walked):
            return _node_name(state, walked[k].node)
        return "a cached entry"

    def parent_of(k: int) -> str:
        return "the root" if k == 0 else holder(k - 1)

    # vLLM's recompute_last_token: the prompt's last token is always computed, so a hit
    # covers at most the full blocks before it
    cap = (len(tokens) - 1) // o.tpp if o.recompute_last_token else full
    capped = o.recompute_last_token and answer == cap < full

    def why(k: int) -> tuple[str | None, str]:
        stop_block = f"block {answer} [{o.label(o.block(answer, tokens))}]" if answer < full else ""
        if capped and k >= answer:
            rule = (f"recompute_last_token: the prompt's last token is always computed, so a hit covers at most "
                    f"{count(cap, 'block')} before it")
            return (None, rule) if k == answer else ("past-the-cap", rule)
        if not shares:
            if k == answer:
                return None, "the base cache shares nothing: no block is ever found, the match is 0 blocks"
            return "shared-on-base", ("the base cache keeps no cached blocks to match: every request starts from "
                                      "nothing, whatever others computed")
        if k == answer:
            if answer == full:
                return None, f"every full block is cached along one path ({', '.join(holder(j) for j in range(full))})"
            found = (f"blocks 0..{answer - 1} are cached along one path; " if answer > 1 else
                     "block 0 is cached; " if answer else "")
            where = f"under {parent_of(answer)}" if tree else "under its chained key (its whole prefix)"
            return None, f"{found}{stop_block} is not cached {where}: the walk stops there"
        if k > answer:
            where = f"no child of {parent_of(answer)} holds it" if tree else "its chained key is not cached"
            gone = o.evicted.get(o.block(answer, tokens))
            if gone is not None:  # the mistake: matching a block that was cached once
                return "past-the-stop", (f"{stop_block} is not cached ({where}): a node holding its tokens was "
                                         f"evicted at step {gone}, and an evicted block matches nothing; the walk "
                                         "stops at the first block missing")
            return "past-the-stop", (f"{stop_block} is not cached ({where}); the walk stops at the first block "
                                     "missing: a later block is never matched past a gap, even if the same tokens "
                                     "are cached elsewhere")
        return "stopped-early", (f"block {k} [{o.label(o.block(k, tokens))}] is cached as {holder(k)} under "
                                 f"{parent_of(k)}: the walk goes on")

    values = list(range(full + 1))
    if len(values) > MAX_CHOICES:  # a window of blocks holding the answer, placed by the seed's rng later
        first = max(0, min(answer - MAX_CHOICES // 2, full + 1 - MAX_CHOICES))
        values = values[first:first + MAX_CHOICES]
    choices = []
    for k in values:
        mistake, reason = why(k)
        text = ("the full block matches" if k == full == 1 else f"all {full} full blocks match" if k == full and k else
                "0 blocks: nothing matches" if k == 0 else
                f"{count(k, 'block')} {'matches' if k == 1 else 'match'}; the walk stops at block {k}")
        choices.append((text, (k,), mistake, reason))
    prompt = (f"{o.op.text}: {count(len(tokens), 'token')}, {count(full, 'full block')} of {o.tpp}. "
              f"How many blocks does the walk match before it stops?")
    return [_Draft(anchor, covers, prompt, choices, (("full", full),))]


# -- pages taken --------------------------------------------------------------------------------


def _need_words(o: _Op, state: Snapshot, n_taken: int) -> str:
    """How many pages the op needs from the free list, as the rule computes it."""
    tpp = o.tpp
    if o.op.kind == "acquire":
        matched = next((len(e.nodes) for e, k in zip(o.events, o.kinds) if k == "match"), 0)
        length = len(o.op.tokens or ())
        need = math.ceil((length - matched * tpp + o.op.extra) / tpp)
        rule = (f"ceil(({length} tokens - {matched * tpp} matched + {o.op.extra} extra) / {tpp}) = "
                f"{count(need, 'page')}")
    else:
        alloc = state.allocation_named(o.op.name)
        held = len(alloc.pages) if alloc is not None else 0
        length = len(o.tokens())
        need = max(0, math.ceil((length + o.op.extra) / tpp) - held)
        rule = f"ceil(({length} tokens + {o.op.extra} extra) / {tpp}) - {held} held = {count(need, 'page')}"
        if need == 0:
            rule = f"no new page: its {count(held, 'page')} hold {length} tokens + {o.op.extra} extra"
    free = state.free_count
    if o.design.lazy:
        return f"it needs {rule}, all from the free queue's head"
    more = "" if need <= free else f"; only {are(free)} free, so {need - free} more {'comes' if need - free == 1 else 'come'} from eviction"
    return f"it needs {rule}{more}"


def _free_word(o: _Op) -> str:
    return "the free queue's head" if o.design.lazy else "the free list's front"


def _pages(pages: Sequence[int]) -> str:
    return "no page" if not pages else ("page " if len(pages) == 1 else "pages ") + ", ".join(map(str, pages))


def _off_by(d: int) -> str:
    """The mistake of taking ``d`` pages more (or fewer, negative) than needed."""
    return f"{('one', 'two')[abs(d) - 1]}-too-{'many' if d > 0 else 'few'}"


def _off_words(d: int) -> str:
    return f"{('one', 'two')[abs(d) - 1]} page{'s' if abs(d) > 1 else ''} too {'many' if d > 0 else 'few'}"


def _find_take(o: _Op) -> list[_Draft]:
    """A move per take, and one where an acquire or extend that fits takes nothing from a
    non-empty free list (the match covers it, or its pages had room): so "some pages" is
    never the answer for free."""
    drafts = []
    spots = [(o.run_before(i, ("drop",)), (i,), tuple(o.events[i].pages)) for i in o.indices("take")]
    if (not spots and o.op.kind in ("acquire", "extend") and "start" in o.kinds
            and not set(o.kinds) & {"fail", "refused"}):
        later = o.indices("pop", "drop")
        anchor = later[0] if later else len(o.kinds)
        if o.state(anchor).free:
            spots.append((anchor, (), ()))
    for anchor, covers, right in spots:
        state = o.state(anchor)
        free = state.free
        n = len(right)
        need = _need_words(o, state, n)
        where = _free_word(o)
        if right:
            why = f"{need}; pages come from {where}, in its order: {_pages(right)}"
        else:
            why = f"{need}: nothing comes from {where}"
        options: list[tuple[str, tuple, str | None, str]] = [(f"take {_pages(right)}", right, None, why)]
        # Prefixes of the wrong length on one side or both, picked by the seed: a fixed bracket
        # (one too few, one too many) let "the middle-length prefix" win 79% of take moves.
        fits = [p for p in ((-2, -1), (-1, 1), (1, 2)) if all(0 < n + d <= len(free) for d in p)]
        sides = o.rng.choice(fits) if fits else tuple(d for d in (-1, 1, 2) if 0 < n + d <= len(free))
        wrong = [
            (tuple(free[-n:]) if n else None, "from-the-back", f"pages are handed out from {where}, not the other end"),
            *((tuple(free[:n + d]) if n + d > 0 else None, _off_by(d),
               f"{_off_words(d)}: this take hands out {count(n, 'page')}, not {n + d}; {need}") for d in sides),
            (tuple(sorted(free))[:n], "lowest-numbers",
             f"the order of {where} is not page order: it takes from {where}"),
            ((), "nothing-taken", f"the match does not cover the request: {need}"),
        ]
        seen = {right}
        for value, mistake, reason in wrong:
            if value is None or value in seen or len(value) > len(free) or (value and len(value) != len(set(value))):
                continue
            if mistake.endswith("-too-many") and len(value) == n:
                continue
            seen.add(value)
            options.append((f"take {_pages(value)}", value, mistake, reason))
        prompt = (f"{o.op.text}: which pages does {o.op.name} take from {where}, in block-table order? "
                  f"({_pages(free) if free else 'nothing'} {'is' if len(free) == 1 else 'are'} there now)")
        drafts.append(_Draft(anchor, covers, prompt, options[:5], (("free", tuple(free)),)))
    return drafts


# -- the hash queue's drop ----------------------------------------------------------------------


def _drop_text(pages: tuple[int, ...]) -> str:
    if not pages:
        return "no block drops"
    return f"drop the block{'s' if len(pages) != 1 else ''} of {_pages(pages)}"


def _find_drop(o: _Op) -> list[_Draft]:
    drafts = []
    for i in o.indices("take"):
        e = o.events[i]
        anchor = o.run_before(i, ("drop",))
        state = o.state(anchor)
        taken = tuple(e.pages)
        dropped = tuple(o.events[j].page for j in range(anchor, i) if o.kinds[j] == "drop")
        blocks = {o.events[j].page: o.events[j].block for j in range(anchor, i) if o.kinds[j] == "drop"}
        if not any(state.pages[p].state == "cached" for p in state.free):
            continue  # no page of the queue caches a block: "none drops" is no question
        kept = [p for p in taken if p not in blocks]
        right_why = ("; ".join([f"page {p} still caches block {b}: the block leaves as the page is taken "
                                f"(lazy eviction)" for p, b in blocks.items()]
                               + ([f"{_pages(kept)} {'caches' if len(kept) == 1 else 'cache'} nothing"] if kept else [])))
        options = [(_drop_text(dropped), dropped, None, right_why)]
        cached_taken = tuple(p for p in taken if state.pages[p].state == "cached")
        wrong = [  # every choice names pages taken: the question is which of them drop
            ((), "free-means-empty", "a page in the free queue may still cache its block (vLLM evicts lazily): "
                                     + right_why),
            (taken, "every-page-drops", "only a page that still caches a block drops one: " + right_why),
            (tuple(kept), "the-others", "the pages that drop are the ones still caching a block: " + right_why),
            (cached_taken[:1], "only-the-first", "every taken page that still caches a block drops it, not only "
                                                 "the first: " + right_why),
        ]
        seen = {dropped}
        for value, mistake, reason in wrong:
            if value in seen:
                continue
            seen.add(value)
            options.append((_drop_text(value), value, mistake, reason))
        one = len(taken) == 1
        prompt = (f"{o.op.text}: {_pages(taken)} {'leaves' if one else 'leave'} the free queue's head. "
                  + ("Does it drop a cached block as it is taken?" if one else
                     "Which of them drop a cached block as they are taken?"))
        drafts.append(_Draft(anchor, tuple(range(anchor, i)), prompt, options, (("taken", taken),)))
    return drafts


# -- the victim ---------------------------------------------------------------------------------


def _find_victim(o: _Op) -> list[_Draft]:
    drafts = []
    for i in o.indices("pop"):
        e = o.events[i]
        state = o.state(i)
        nodes = {n.id: n for n in state.nodes if n.id}
        heap = set(state.heap)
        key = state.node_key
        victim = nodes[e.node]
        options = []
        for node_id in sorted(heap):
            node = nodes[node_id]
            if node_id == e.node:
                options.append((node_id, None, f"node {node_id} is a leaf with ref 0 and the smallest key "
                                               f"{policy_key_text(key(node))} of all the candidates"))
            else:
                options.append((node_id, "not-smallest", f"node {node_id}'s key {policy_key_text(key(node))} is larger "
                                                         f"than node {e.node}'s {policy_key_text(key(victim))}"))
        if len(options) > MAX_CHOICES - 2:  # keep the victim and the keys nearest it
            others = sorted((o_ for o_ in options if o_[1]), key=lambda t: key(nodes[t[0]]))
            options = [o_ for o_ in options if not o_[1]] + others[:MAX_CHOICES - 3]
        inner = [n for n in nodes.values() if n.ref == 0 and state.children(n.id)]
        held = [n for n in nodes.values() if n.ref > 0 and not state.children(n.id)]
        for node in sorted(inner, key=key)[:1]:
            child = state.children(node.id)[0]
            options.append((node.id, "inner-node", f"node {node.id} still has a child (node {child}): only leaves "
                                                   "are evicted; it becomes a candidate when its children go"))
        for node in sorted(held, key=key)[:1]:
            options.append((node.id, "referenced", f"node {node.id} has ref {node.ref}: a live allocation uses it, "
                                                   "so it cannot be evicted"))
        choices = [(f"evict {_node_name(state, nid)} [{o.label(nodes[nid].tokens)}] key {policy_key_text(key(nodes[nid]))}",
                    (nid,), mistake, why) for nid, mistake, why in sorted(options)]
        if len(choices) < 2:  # one node in the whole trie: the other choice is to find nothing
            choices.append(("evict nothing: no node can go, the acquire fails", (), "nothing-evictable",
                            f"node {e.node} is a leaf with ref 0: evictable, so the acquire fits"))
        prompt = (f"{o.op.text}: the pool is short of pages. Which node does the cache evict next? "
                  f"(policy {state.policy}: the smallest key among the leaves with ref 0)")
        drafts.append(_Draft(i, (i,), prompt, choices, (("policy", state.policy),)))
    return drafts


# -- the heap's swaps ---------------------------------------------------------------------------


def _sift_choices(state: Snapshot, slot: int, right: tuple[int, ...], label: Labeler) -> list:
    """The choices at one point of a sift: swap the sifting entry at ``slot`` with a
    neighbour in the heap's array, or stop; ``right`` is the cache's (``()``: stop)."""
    heap = state.heap
    nodes = {n.id: n for n in state.nodes}

    def key(s: int):
        return state.node_key(nodes[heap[s]])

    def k(s: int) -> str:
        return f"[{s}] node {heap[s]} {policy_key_text(key(s))}"

    neighbours = ([(slot - 1) // 2] if slot > 0 else []) + [c for c in (2 * slot + 1, 2 * slot + 2) if c < len(heap)]
    children = [c for c in neighbours if c > slot]
    out = []
    for other in neighbours:
        upper, lower = min(slot, other), max(slot, other)
        value = (upper, lower)
        if value == right:
            if other < slot:
                why = f"{k(slot)} is smaller than its parent {k(other)}: sift up, swap them"
            else:
                why = f"{k(slot)} is larger than its smaller child {k(other)}: sift down, swap them"
            out.append((f"swap [{upper}] and [{lower}]", value, None, why))
        elif key(lower) >= key(upper):
            out.append((f"swap [{upper}] and [{lower}]", value, "in-order",
                        f"{k(upper)} is not larger than {k(lower)}: those two are in order already"))
        elif other > slot and len(children) == 2:
            smaller = min(children, key=key)
            out.append((f"swap [{upper}] and [{lower}]", value, "larger-child",
                        f"both children are smaller, and {k(smaller)} is the smaller: it must go up, or it would "
                        f"end below a larger key"))
        else:  # pragma: no cover - mid-sift only one neighbour is out of order
            out.append((f"swap [{upper}] and [{lower}]", value, "wrong-pair", f"{k(slot)} sifts, not this pair"))
    if right == ():
        out.append(("no swap: the sift stops", (), None,
                    f"{k(slot)} is in order with its parent and children: the heap holds, the sift stops"))
    else:
        out.append(("no swap: the sift stops", (), "stopped-early",
                    f"{k(right[0])} and {k(right[1])} are out of order: the sift goes on"))
    return out


def _find_swap(o: _Op) -> list[_Draft]:
    """A move per swap of a sift, and one for its stop when it swapped at least once: a sift
    that never moves (an lru push, always the newest key) asks nothing, so "the sift stops"
    is not the answer for free. Each prompt says how the entry came to its slot."""
    drafts = []
    slot = None  # the sifting entry's slot, None when no sift is under way
    swapped = False  # whether the sift under way swapped yet
    cause = ""  # how the sifting entry came to its slot
    n = len(o.kinds)
    for i in range(n + 1):
        kind = o.kinds[i] if i < n else None
        e = o.events[i] if i < n else None
        if kind == "swap":
            state = o.state(i)
            right = (min(e.slot, e.other_slot), max(e.slot, e.other_slot))
            here = e.slot
            drafts.append(_Draft(i, (i,), _sift_prompt(o, state, here, cause), _sift_choices(state, here, right,
                                                                                           o.label),
                                 (("slot", here), ("node", state.heap[here]))))
            slot, swapped = e.other_slot, True
            cause = f"it swapped down from slot [{here}]" if e.other_slot > here else f"it swapped up from slot [{here}]"
            continue
        if slot is not None:  # the sift ended before this sub-step: ask for its stop, if it moved and could go on
            state = o.state(i)
            heap = state.heap
            if swapped and slot < len(heap) and (slot > 0 or 2 * slot + 1 < len(heap)):
                drafts.append(_Draft(i, (), _sift_prompt(o, state, slot, cause),
                                     _sift_choices(state, slot, (), o.label),
                                     (("slot", slot), ("node", heap[slot]))))
            slot = None
        swapped = False
        if kind == "push":
            slot, cause = e.slot, f"it was pushed at the array's end, slot [{e.slot}]"
        elif kind == "pop" and e.moved is not None:
            slot, cause = 0, (f"node {e.node}, the top, left the heap (the victim), and the array's last entry came "
                              "to slot [0]")
        elif kind == "unheap" and e.moved is not None:
            slot, cause = e.slot, (f"node {e.node} left the heap from slot [{e.slot}] (no longer a candidate), and "
                                   f"the array's last entry came to its slot")
    return drafts


def _sift_prompt(o: _Op, state: Snapshot, slot: int, cause: str) -> str:
    node = state.heap[slot]
    return (f"{o.op.text}: node {node} sits at heap slot [{slot}] ({cause}) and sifts. Which two slots swap next "
            f"(policy {state.policy}: a parent's key is never larger than its children's)?")


# -- dedup --------------------------------------------------------------------------------------


def _depth(state: Snapshot, node_id: int) -> int:
    depth = 0
    node = state.node(node_id)
    while node is not None and node.id:
        depth += 1
        node = state.node(node.parent)
    return depth


def _find_dedup(o: _Op) -> list[_Draft]:
    if o.op.kind != "publish":
        return []
    drafts = []
    for i in o.indices("dedup", "create"):
        e = o.events[i]
        anchor = o.run_before(i, ("unheap", "swap", "uncandidate")) if o.kinds[i] == "dedup" else i
        state = o.state(anchor)
        if o.kinds[i] == "dedup":
            parent = state.node(e.node).parent
            own = e.own_page
            right = ("adopt", e.node)
        else:
            parent = e.parent
            own = e.page
            right = ("create",)
        index = _depth(state, parent)
        block = o.block(index)
        where = "the root" if not parent else f"node {parent}"
        children = state.children(parent)
        same = [n.id for n in state.nodes if n.id and tuple(n.tokens) == block and n.id not in children]
        options = []
        if right == ("create",):
            options.append((f"create a new node under {where} on its own page {own}", right, None,
                            f"no child of {where} holds [{o.label(block)}]: a new node holds the allocation's "
                            f"own page {own}"))
        else:
            options.append((f"create a new node under {where} on its own page {own}", ("create",), "missed-dedup",
                            f"node {e.node} under {where} already holds [{o.label(block)}]: publish adopts it "
                            "rather than cache a second copy"))
        for child in children:
            node = state.node(child)
            value = ("adopt", child)
            text = f"adopt node {child} (page {node.page}) [{o.label(node.tokens)}]"
            if value == right:
                options.append((text, value, None, f"node {child} under {where} holds exactly block {index} "
                                                   f"[{o.label(block)}]: adopt its page {node.page}, return own "
                                                   f"page {own}"))
            else:
                options.append((text, value, "other-tokens", f"node {child} holds [{o.label(node.tokens)}], not "
                                                             f"block {index}'s [{o.label(block)}]"))
        for nid in same[:2]:
            node = state.node(nid)
            options.append((f"adopt node {nid} (page {node.page}) [{o.label(node.tokens)}]", ("adopt", nid),
                            "same-tokens-other-prefix",
                            f"node {nid} holds the same tokens under another parent: a block is shared only "
                            "after the same prefix"))
        if len(options) < 2:
            continue
        prompt = (f"{o.op.text}: block {index} [{o.label(block)}] is to be published under {where}. "
                  "Adopt a cached node, or create a new one?")
        drafts.append(_Draft(anchor, (i,), prompt, options[:MAX_CHOICES], (("block", index), ("parent", parent))))
    return drafts


MOVE_KINDS: dict[str, MoveKind] = {m.name: m for m in (
    MoveKind("stop", "the walk's stop", frozenset({"walk", "stop", "match"}), ("structure",), _find_stop,
             "from the root, follow the op's full blocks while a cached entry holds the next one (a trie: a child "
             "of the last node matched; a hash cache: the block's chained key); the base cache shares nothing"),
    MoveKind("take", "pages from the free list", frozenset({"take"}), ("free", "allocations"), _find_take,
             "it needs ceil((tokens - tokens matched + extra) / tokens_per_page) pages (extend: for all its tokens, "
             "less the pages it holds); they come from the free list's front, in its order, as many as there are"),
    MoveKind("drop", "the free queue's drop", frozenset({"drop"}), ("free",), _find_drop,
             "of the pages taken from the free queue's head, each that still caches a block loses it now (lazy "
             "eviction); a page that caches nothing drops nothing"),
    MoveKind("victim", "the victim", frozenset({"pop"}), ("structure",), _find_victim,
             "the victim is the node with the smallest key among the leaves (no children) with ref 0; the policy "
             "says what the key is"),
    MoveKind("swap", "a heap swap", frozenset({"swap"}), ("heap",), _find_swap,
             "a sift down swaps the entry with its smaller child while that child's key is smaller; a sift up "
             "swaps it with its parent while its own key is smaller; when neither holds, the sift stops"),
    MoveKind("dedup", "dedup or create", frozenset({"dedup", "create"}), ("structure",), _find_dedup,
             "the block goes under the node of the block before it; a child there holding exactly its tokens is "
             "adopted (its page shared, the own page freed), else a new node holds the own page"),
)}
"""Every move kind, in the order moves at one sub-step are asked (a hash take before its drop)."""


def _substep_kinds(design: Design) -> frozenset[str]:
    """The sub-step kinds a design's event table produces (a row's kind, and the other kind
    its ``kind_of`` may pick: the walk's stop)."""
    kinds = set()
    for words in design.events.values():
        kinds.add(words.kind)
        if words.kind_of is not None and words.kind == "walk":
            kinds.add("stop")
    return frozenset(kinds)


def move_kinds_of(design: Design) -> tuple[str, ...]:
    """The move kinds of ``design``: those whose graded sub-step kinds its event table
    produces (a base cache keeps the trie's table, so it has them all; most never come up
    there). A kind grading several sub-step kinds applies when all of them are produced,
    except the walk's stop, which a design without a walk grades by its match alone."""
    made = _substep_kinds(design)
    out = []
    for name, kind in MOVE_KINDS.items():
        if name == "stop" and not design.shares:
            continue  # a cache that shares nothing: the state says "nothing cached", the answer always 0
        needed = kind.grades - {"walk", "stop"} if name == "stop" else kind.grades
        if needed <= made:
            out.append(name)
    return tuple(out)


# -- building an exercise -----------------------------------------------------------------------


def build_exercise(session, *, seed: int = 0, steps: Iterable[int] | None = None,
                   kinds: Iterable[str] | None = None, max_moves: int | None = None) -> Exercise:
    """The moves of ``session``'s ops (``steps``: frame indices, default every op), only of
    ``kinds`` when given, whole ops in order until ``max_moves`` is reached. Choices are
    shuffled by ``seed``. KeyError names an unknown move kind."""
    wanted = tuple(MOVE_KINDS) if kinds is None else tuple(kinds)
    for name in wanted:
        if name not in MOVE_KINDS:
            raise KeyError(f"no move kind {name!r} (kinds: {', '.join(MOVE_KINDS)})")
    design = design_of(session.frame(0).snapshot)
    usable = [k for k in MOVE_KINDS if k in wanted and k in move_kinds_of(design)]
    moves: list[Move] = []
    evicted: dict[tuple[int, ...], int] = {}
    done = 1
    for step in (range(1, len(session)) if steps is None else steps):
        for earlier in range(done, step):  # what earlier ops evicted, for the feedback on a match past it
            for e in session.frame(earlier).evictions:
                evicted[tuple(e.tokens)] = earlier
        done = max(done, step)
        if max_moves is not None and len(moves) >= max_moves:
            break
        frame = session.frame(step)
        subs = session.substeps(step)
        o = _Op(step, frame.op, subs, session.label_tokens, session.config.recompute_last_token)
        o.rng = random.Random(f"kvviz-practice/{seed}/{step}/distractors")
        o.evicted = dict(evicted)
        drafts = []
        for order, name in enumerate(usable):
            for draft in MOVE_KINDS[name].find(o):
                drafts.append((draft.anchor, order, draft, name))
        drafts.sort(key=lambda t: (t[0], t[1]))
        for anchor, _, draft, name in drafts:
            moves.append(_finish(len(moves), name, o, draft, seed))
    title = session.title or "this scenario"
    return Exercise(title, seed, tuple(moves), design.name)


def _finish(index: int, kind: str, o: _Op, draft: _Draft, seed: int) -> Move:
    """A draft with its choices shuffled (by the seed and the move's place) and lettered."""
    rng = random.Random(f"kvviz-practice/{seed}/{o.step}/{draft.anchor}/{kind}")
    options = list(draft.choices)
    rng.shuffle(options)  # every kind: an order by value would let a fixed position beat chance
    choices = tuple(Choice(LETTERS[i], text, value, mistake, why)
                    for i, (text, value, mistake, why) in enumerate(options[:len(LETTERS)]))
    said = tuple(o.subs[i].sentence for i in draft.covers)
    return Move(index, kind, o.step, o.op.text, draft.anchor, draft.covers, draft.prompt, choices,
                o.state(draft.anchor), said, draft.detail)


# -- reading an answer --------------------------------------------------------------------------

_NUMBERS = re.compile(r"-?\d+")


def read_choice(move: Move, text: str) -> Choice:
    """The choice ``text`` names: its letter (``b``), or its value typed in full (``2``,
    ``3 5``, ``[1] [3]``, ``node 4``, ``stop``, ``create``, ``none``). ValueError says why
    not, naming the letters."""
    text = text.strip().lower()
    if not text:
        raise ValueError("empty answer")
    letters = f"a-{move.choices[-1].letter}"
    chosen = letter_choice(move.choices, text)
    if chosen is not None:
        return chosen
    words = set(re.findall(r"[a-z]+", text))
    numbers = tuple(int(n) for n in _NUMBERS.findall(text))
    for choice in move.choices:
        if _typed(move.kind, choice.value, words, numbers):
            return choice
    raise ValueError(f"{text!r} is none of the choices: answer with a letter {letters} or the value itself")


def _typed(kind: str, value: tuple, words: set[str], numbers: tuple[int, ...]) -> bool:
    if kind == "dedup":
        if value == ("create",):
            return "create" in words or "new" in words
        return bool(numbers) and numbers[-1] == value[1] and "create" not in words
    if not numbers:
        return value == () and bool(words & {"none", "stop", "nothing", "no"})
    if kind == "swap":
        return tuple(sorted(numbers)) == value
    return numbers == value


# -- playing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Play:
    """The learner's way through an exercise: ``position`` is the move being asked;
    ``missed`` whether the current move was already answered wrong (a retry then scores
    nothing more); ``results`` the finished moves."""

    exercise: Exercise
    position: int = 0
    missed: str | None = None  # the first wrong choice's letter on the current move
    mistake: str | None = None
    results: tuple[MoveResult, ...] = ()

    @property
    def done(self) -> bool:
        return self.position >= len(self.exercise.moves)

    @property
    def move(self) -> Move | None:
        return None if self.done else self.exercise.moves[self.position]

    @property
    def right(self) -> int:
        """Moves right first time."""
        return sum(r.right for r in self.results)

    def score_line(self) -> str:
        """``Score: 3 of 4 moves right first time``."""
        return score_line(self.right, len(self.results), "move")

    def answer(self, choice: Choice) -> tuple["Play", Verdict]:
        """Grade ``choice`` for the current move: right moves on; wrong stays on the move
        (counted once as a miss) to retry or fix."""
        move = self.move
        if move is None:
            raise ValueError("the exercise is over")
        if choice.right:
            result = MoveResult(move.index, move.kind, self.missed or choice.letter, self.mistake,
                                self.missed is None, False)
            line = f"Right: {choice.why}." if self.missed is None else f"Right now (counted as a miss): {choice.why}."
            return replace(self, position=self.position + 1, missed=None, mistake=None,
                           results=self.results + (result,)), Verdict(True, choice, line)
        play = self if self.missed is not None else replace(self, missed=choice.letter, mistake=choice.mistake)
        return play, Verdict(False, choice, f"Not so ({choice.mistake}): {choice.why}. Try again, or fix.")

    def fix(self) -> tuple["Play", Verdict]:
        """Apply the cache's move, count the miss, go on."""
        move = self.move
        if move is None:
            raise ValueError("the exercise is over")
        answer = move.answer
        result = MoveResult(move.index, move.kind, self.missed, self.mistake or "fixed", False, True)
        return (replace(self, position=self.position + 1, missed=None, mistake=None, results=self.results + (result,)),
                Verdict(False, answer, f"Fixed: {answer.letter}) {answer.text}: {answer.why}."))

    def misses_by_kind(self) -> dict[str, int]:
        """Missed moves per move kind (table order)."""
        out = {k: 0 for k in MOVE_KINDS}
        for r in self.results:
            if not r.right:
                out[r.kind] += 1
        return {k: v for k, v in out.items() if v}


# -- the state, as text -------------------------------------------------------------------------


def state_lines(move: Move, label: Labeler = default_labeler) -> list[str]:
    """The state a move is asked on, as plain lines: only what its kind looks at
    (:attr:`MoveKind.looks`), never a section that gives the answer away (a victim move
    lists the trie's nodes in id order with their keys, never the heap's array)."""
    snap = move.state
    lines: list[str] = []
    for look in MOVE_KINDS[move.kind].looks:
        if look == "structure":
            lines += _structure_lines(snap, label)
        elif look == "free":
            lines += _free_lines(snap)
        elif look == "heap":
            lines += _heap_lines(snap)
        elif look == "allocations":
            lines += _allocation_lines(snap, label)
    return lines


def _structure_lines(snap: Snapshot, label: Labeler) -> list[str]:
    entry = design_of(snap)
    if entry.rows == "blocks":  # a hash table of blocks (the hash design)
        if not snap.blocks:
            return ["Cached blocks: none"]
        out = ["Cached blocks (block: page, parent block, tokens):"]
        for b in snap.blocks:
            out.append(f"  block {b.id}: page {b.page}, parent {b.parent if b.parent is not None else '-'}, "
                       f"[{label(b.tokens)}]" + ("" if b.reachable else " (unreachable)"))
        return out
    if not entry.shares:  # the base cache: nothing is cached between requests
        return ["The base cache: no trie, nothing cached to match."]
    nodes = [n for n in snap.nodes if n.id]
    if not nodes:
        return ["Trie: only the root"]
    out = ["Trie nodes (id order): parent, tokens, page, ref, key, children"]
    for n in nodes:
        kids = snap.children(n.id)
        out.append(f"  node {n.id}: parent {n.parent or 'root'}, [{label(n.tokens)}], page {n.page}, ref {n.ref}, "
                   f"key {policy_key_text(snap.node_key(n))}, children {', '.join(map(str, kids)) if kids else 'none'}")
    return out


def _free_lines(snap: Snapshot) -> list[str]:
    if design_of(snap).lazy:  # a free queue whose pages may still cache a block
        cells = [f"{p}{'*' if snap.pages[p].state == 'cached' else ''}" for p in snap.free]
        return [f"Free queue (head first; * still caches a block): {' '.join(cells) if cells else 'empty'}"]
    return [f"Free list (front first): {' '.join(map(str, snap.free)) if snap.free else 'empty'}"]


def _heap_lines(snap: Snapshot) -> list[str]:
    nodes = {n.id: n for n in snap.nodes}
    cells = [f"[{i}] node {nid} {policy_key_text(snap.node_key(nodes[nid]))}" for i, nid in enumerate(snap.heap)]
    return [f"Heap array (policy {snap.policy}, slot: node key):", *(f"  {c}" for c in cells)] if cells else [
        "Heap: empty"]


def _allocation_lines(snap: Snapshot, label: Labeler) -> list[str]:
    live = [a for a in snap.allocations if not a.released]
    if not live:
        return []
    return ["Allocations: " + "; ".join(f"{a.name or '#' + str(a.id)} pages {' '.join(map(str, a.pages)) or '-'}"
                                        for a in live)]
