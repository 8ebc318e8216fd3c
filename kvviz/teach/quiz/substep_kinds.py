# SPDX-License-Identifier: Apache-2.0
"""Question kinds about the sub-steps kvviz animates inside one op: the next heap swap after
a pop, which nodes a release makes eviction candidates, which blocks a publish dedups.

Answers come from the op's own sub-step stream (kvcore's fine events, :mod:`..substeps`);
the state a swap question shows is the heap right before the pop, taken from that stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvcore import events as ev

from kvviz.core.words import count
from kvviz.core.policy_words import key_fields, key_value
from kvviz.teach.quiz.core import MAX_DISTRACTORS, Mistake, Parting, QuestionKind, StepView, Value, page_list


# the next swap ---------------------------------------------------------------------------

_NTH = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


@dataclass(frozen=True)
class _Sift:
    """The pop a swap question asks about: its sub-step, the event, which of the op's pops it is
    (1-based), kvcore's state right before it, the heap array right after it (the moved node in
    slot 0, before the sift) and the sift's first swap (None: the sift stops)."""

    index: int
    pop: ev.HeapPopped
    nth: int
    state: object
    after: tuple[int, ...]
    swap_index: int | None
    swap: ev.HeapSwapped | None


def _sifts(view: StepView) -> list[_Sift]:
    """Every pop of the op whose heap held three entries or more before it, in order."""
    steps = view.substeps()
    out, nth = [], 0
    for s in steps:
        if not isinstance(s.event, ev.HeapPopped):
            continue
        nth += 1
        state = steps.state(s.index - 1) if s.index > 0 else view.snap0
        heap = state.heap
        if len(heap) < 3 or s.event.moved is None:
            continue
        moved = s.event.moved
        # the popped node's parent, left childless with ref 0, takes slot 0 itself (kvcore
        # replaces the top instead of moving the last slot up and pushing the parent)
        after = (moved,) + heap[1:] if moved not in heap else (heap[-1],) + heap[1:-1]
        swap_index, swap = None, None
        for t in steps[s.index + 1:]:
            if isinstance(t.event, ev.HeapSwapped):
                swap_index, swap = t.index, t.event
                break
            if not isinstance(t.event, ev.HeapPopped):
                break  # the sift ended without a swap
        out.append(_Sift(s.index, s.event, nth, state, after, swap_index, swap))
    return out


def _sift(view: StepView) -> _Sift:
    """The pop asked about: the op's first, or (one step in two, drawn by the step) its first
    whose sift moves, where it has one. The op's first sift stayed in 55% of the questions
    asked (under lru the popped node's parent takes the top and stays), so "no swap" was a
    shortcut; its first moving sift alone left 57% swaps, nearly all with the oldest node in
    the heap ("the smallest number"): one step in two asks a sift that moves."""
    sifts = _sifts(view)
    moving = next((s for s in sifts if s.swap is not None), None)
    if moving is not None and random.Random(f"kvviz-quiz/sift/{view.index}/{view.op.text}").random() < 0.5:
        return moving
    return sifts[0]


def heap_before_pop(view: StepView) -> tuple[int, ...]:
    """The heap array right before the pop asked about (kvcore's state at that sub-step)."""
    return _sift(view).state.heap


def _heap_after_pop(view: StepView) -> tuple[int, ...]:
    """The heap array right after the pop asked about, before the sift (the moved node in slot 0)."""
    return _sift(view).after


def _swap_applies(view: StepView) -> bool:
    return bool(view.tree and view.ok and view.victims and _sifts(view))


def _swap_answer(view: StepView) -> int:
    sift = _sift(view)
    return sift.swap.other if sift.swap is not None else sift.pop.moved


NO_SWAP = "no swap: the sift stops"
"""How the choice "the moved node stays" reads: no node number (the moved node's number, the
oldest in slot 0 when the parent takes the top, was the answer 94% of the time)."""


def _swap_describe(view: StepView, value: Value) -> str:
    return NO_SWAP if value == _sift(view).pop.moved else f"node {value}"


def _swap_mistakes(view: StepView, answer: Value) -> list[Mistake]:
    """Every wrong answer a swap question may offer, each a node in the heap right after the
    pop (or "no swap"), never the popped node, which has left it."""
    sift = _sift(view)
    snap, moved, after = sift.state, sift.pop.moved, sift.after
    def key(n: int):
        return snap.node_key(snap.node(n))

    kids = list(after[1:3])
    out = []
    if answer != moved:
        out.append(Mistake(moved, "no swap: the sift stops only when no child has a smaller key than the entry's "
                                  "own", "no-swap"))
    else:
        out.append(Mistake(min(kids, key=key), "the child with the smaller key: a sift swaps with it only when its "
                                               "key is smaller than the entry's own", "swap-always"))
    out.append(Mistake(max(kids, key=key), "the child with the larger key: a sift-down swaps with the smaller "
                                           "child, so the smaller key rises" if answer != moved else
                                           "the child with the larger key: a sift-down swaps only with the smaller "
                                           "child, and only when its key is smaller than the entry's own",
                       "wrong-child"))
    deeper = after[3:7]
    if deeper:
        out.append(Mistake(min(deeper, key=key), "the smallest key further down: a sift swaps with a child of "
                                                 "slot 0 (slot 1 or 2), one level at a time", "skips-a-level"))
    shown = after[1:7]
    out.append(Mistake(min(shown, key=lambda n: snap.node(n).seq), f"the oldest node: the heap orders by the key "
                                                                    f"{key_fields(snap)}, not by creation, and a "
                                                                    "sift swaps with a child of slot 0",
                       "seq-only"))
    return out


def _swap_distractors(view: StepView, answer: Value) -> list[Mistake]:
    """At most :data:`MAX_DISTRACTORS` of :func:`_swap_mistakes`: "no swap" wherever the sift
    moves, and node numbers drawn so that the answer's number is the smallest, the largest or
    inside the numbers offered with equal odds among the places these nodes allow (node
    numbers follow age, and age follows an lru key: the smaller key was the smaller number)."""
    moved = _sift(view).pop.moved
    seen, fixed, nodes = {answer}, [], []
    for m in _swap_mistakes(view, answer):
        if m.value in seen:
            continue
        seen.add(m.value)
        (fixed if m.value == moved else nodes).append(m)
    if answer == moved:  # the answer shows no number: any nodes do
        return nodes[:MAX_DISTRACTORS]
    room = MAX_DISTRACTORS - len(fixed)
    below = [m for m in nodes if m.value < answer]
    above = [m for m in nodes if m.value > answer]
    rng = random.Random(f"kvviz-quiz/swap/{view.index}/{view.op.text}/{answer}")
    places = []  # (how many below, how many above)
    if above:
        places.append((0, min(room, len(above))))
    if below:
        places.append((min(room, len(below)), 0))
    if above and below and room >= 2:
        places.append((1, 1))
    r, s = rng.choice(places) if places else (0, 0)
    return fixed + rng.sample(below, r) + rng.sample(above, s)


def _swap_ask(view: StepView) -> str:
    sift = _sift(view)
    snap, pop = sift.state, sift.pop
    heap = " ".join(f"[{i}] node {n} {key_value(snap.node_key(snap.node(n)))}" for i, n in enumerate(snap.heap[:7]))
    how = (f"its parent node {pop.moved}, now childless with ref 0, takes slot 0" if pop.moved not in snap.heap
           else f"node {pop.moved} moves from the heap's last slot to slot 0")
    nth = _NTH[sift.nth - 1] if sift.nth <= len(_NTH) else f"{sift.nth}th"
    return (f"{view.text()} The heap before the {nth} eviction: {heap}. The cache pops node {pop.node} (the "
            f"smallest key) and {how}. Which node does node {pop.moved} swap with first, if any (node {pop.moved} "
            "itself: no swap)?")


def _swap_hints(view: StepView) -> tuple[str, str, str]:
    sift = _sift(view)
    snap, moved = sift.state, sift.pop.moved
    listed = "; ".join(f"node {n} key {key_value(snap.node_key(snap.node(n)))}" for n in sift.after[1:3])
    return (f"A sift-down compares the moved node with its children (slots 1 and 2 under slot 0) and swaps it with "
            f"the child of the smaller key {key_fields(snap)}, if that key is smaller than its own.",
            "Slot 0's children are slots 1 and 2 of the heap array as it stands after the pop.",
            f"Node {moved} has key {key_value(snap.node_key(snap.node(moved)))}; its children: {listed}.")


def _swap_diverge(view: StepView, value: Value) -> Parting | None:
    sift = _sift(view)
    said = "no swap" if value == sift.pop.moved else f"node {value}"
    if sift.swap is None:
        return Parting(view.index, sift.index, f"you chose {said}: after the pop at sub-step {sift.index + 1}, node "
                                                f"{sift.pop.moved} had no child with a smaller key, so it stayed.")
    swap = sift.swap
    return Parting(view.index, sift.swap_index, f"you chose {said}: at sub-step {sift.swap_index + 1} node "
                                                 f"{swap.node} (key {key_value(swap.key)}) swapped with node "
                                                 f"{swap.other} (key {key_value(swap.other_key)}), the child with "
                                                 "the smaller key.")


SWAP = QuestionKind(
    "next_swap", "the next heap swap", "number", "node",
    applies=_swap_applies,
    ask=_swap_ask,
    answer=_swap_answer,
    bound=lambda v: max(n.id for n in v.snap0.nodes),
    describe=lambda x: f"node {x}",
    describe_at=_swap_describe,
    distractors=_swap_distractors,
    hints=_swap_hints,
    why=lambda v, x: (f"After the pop, node {_sift(v).pop.moved} sits in slot 0 and sifts down: "
                      + (f"it swaps with node {x}, its child with the smaller key."
                         if x != _sift(v).pop.moved else "no child has a smaller key, so it stays.")),
    diverge=_swap_diverge,
    lesson=frozenset({"heap-ties", "lru"}),
)


# new candidates --------------------------------------------------------------------------

def _added(view: StepView) -> tuple[int, ...]:
    return tuple(sorted({e.page for e in view.after.events if isinstance(e, ev.CandidateAdded)}))


def _path(view: StepView) -> list:
    mine = view.mine(view.snap0)
    return [view.snap0.node_for_page(p) for p in mine.pages[:mine.published]]


def _candidate_applies(view: StepView) -> bool:
    if not (view.tree and view.ok and view.op.kind == "release"):
        return False
    mine = view.mine(view.snap0)
    return mine is not None and mine.published >= 1


def _candidate_distractors(view: StepView, answer: Value) -> list[Mistake]:
    s0 = view.snap0
    path = _path(view)
    freed = [n for n in path if n.ref == 1]  # ref 0 after this release
    out = [
        Mistake(tuple(n.page for n in freed), "every node whose ref drops to 0: a node with children is no "
                                              "candidate until they are gone", "interior"),
        Mistake(tuple(n.page for n in path if not s0.children(n.id)), "the childless nodes of its path, referenced "
                                                                      "or not: another holder keeps its ref above 0",
                "referenced-parent"),
        Mistake((), "none: a released node stays cached with ref 0, a candidate", "none"),
    ]
    if len(path) >= 2:
        out.append(Mistake((path[-2].page,), "the last node's parent: the release leaves the leaf itself, "
                                             "not its parent, childless and unreferenced", "grandparent"))
    return out


def _candidate_hints(view: StepView) -> tuple[str, str, str]:
    path = _path(view)
    listed = "; ".join(f"node {n.id} page {n.page} ref {n.ref}, {count(len(view.snap0.children(n.id)), 'child')}"
                       for n in path)
    return ("A node becomes an eviction candidate when it is childless and its ref reaches 0.",
            f"Follow {view.op.name}'s published path: each node's ref drops by one.",
            f"Its path before the release: {listed}.")


def _candidate_diverge(view: StepView, value: Value) -> Parting | None:
    wrong = sorted(set(value) ^ set(_added(view)))
    if not wrong:
        return None
    page = wrong[0]
    node = view.snap0.node_for_page(page)
    index = next((s.index for s in view.substeps() if isinstance(s.event, (ev.CandidateAdded, ev.RefDropped))
                  and s.event.page == page), None)
    if page in _added(view):
        return Parting(view.index, index, f"page {page} became a candidate at sub-step {(index or 0) + 1}: its "
                                             "ref reached 0 and it had no child.")
    why = (f"it still has ref {view.snap1.node(node.id).ref}" if view.snap1.node(node.id).ref
           else "it has a child")
    return Parting(view.index, index, f"page {page} (node {node.id}) did not become a candidate: {why}.")


CANDIDATE = QuestionKind(
    "new_candidates", "new eviction candidates", "set", "page",
    applies=_candidate_applies,
    ask=lambda v: f"{v.text()} Which pages become eviction candidates (childless, ref 0) by this release?",
    answer=_added,
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: page_list(x),
    distractors=_candidate_distractors,
    hints=_candidate_hints,
    why=lambda v, x: (f"The release drops one reference on each node of {v.op.name}'s path; "
                      + (f"{page_list(x)} reached ref 0 with no child, so joined the heap."
                         if x else "none reached ref 0 with no child (another holder, or a child below).")),
    diverge=_candidate_diverge,
    lesson=frozenset({"refcount", "eviction-cascade"}),
)


# dedup -----------------------------------------------------------------------------------

def _dedup_blocks(view: StepView) -> tuple[int, ...]:
    return tuple(sorted(e.index for e in view.dedups))


def _full_blocks(view: StepView) -> int:
    mine = view.mine(view.snap0)
    return len(mine.tokens) // view.snap0.tokens_per_page


def _dedup_distractors(view: StepView, answer: Value) -> list[Mistake]:
    full = _full_blocks(view)
    mine = view.mine(view.snap0)
    out = [
        Mistake(tuple(range(mine.published, full)), "every block it publishes: only those already cached as a "
                                                   "child are adopted", "all"),
        Mistake((), "none: a block another request published first is adopted, not cached twice", "none"),
        Mistake((mine.published,), "the first block only: every duplicate "
                                                                         "block is adopted", "first-block"),
    ]
    if full >= 1:
        out.append(Mistake((full - 1,), "the last block only: the walk goes from the root", "last-block"))
    return out


def _dedup_hints(view: StepView) -> tuple[str, str, str]:
    mine = view.mine(view.snap0)
    tpp = view.snap0.tokens_per_page
    blocks = [f"block {i} [{' '.join(map(str, mine.tokens[i * tpp:(i + 1) * tpp]))}]"
              for i in range(mine.published, len(mine.tokens) // tpp)]
    return ("Publish walks the allocation's full pages from the root; a block already cached as a child of the last "
            "node is adopted (dedup), the allocation's own copy returned.",
            f"Compare {view.op.name}'s unpublished full blocks with the trie's children along its prefix.",
            f"Its unpublished full blocks: {'; '.join(blocks) or 'none'}.")


def _dedup_diverge(view: StepView, value: Value) -> Parting | None:
    wrong = sorted(set(value) ^ set(_dedup_blocks(view)))
    if not wrong:
        return None
    k = wrong[0]
    index = next((s.index for s in view.substeps() if isinstance(s.event, (ev.Deduplicated, ev.NodeCreated))
                  and getattr(s.event, "index", None) == k), None)
    if index is None:
        index = next((s.index for s in view.substeps() if isinstance(s.event, (ev.Deduplicated, ev.NodeCreated))),
                     None)
    said = "a dedup" if k in value else "no dedup"
    real = "was already cached: adopted" if k in _dedup_blocks(view) else "was not cached yet: a new node"
    return Parting(view.index, index, f"you said block {k} is {said}: it {real} (sub-step {(index or 0) + 1}).")


DEDUP = QuestionKind(
    "dedup_blocks", "deduplicated blocks", "set", "block",
    applies=lambda v: v.tree and v.ok and v.op.kind == "publish" and bool(v.dedups),
    ask=lambda v: (f"{v.text()} Which of {v.op.name}'s blocks (0 is its first full page) are already cached, so "
                   "publish adopts the cached page?"),
    answer=_dedup_blocks,
    bound=lambda v: max(0, _full_blocks(v) - 1),
    describe=lambda x: page_list(x, "block"),
    distractors=_dedup_distractors,
    hints=_dedup_hints,
    why=lambda v, x: (f"{page_list(x, 'block').capitalize()} of {v.op.name} {'was' if len(x) == 1 else 'were'} cached by another "
                      "request first, "
                      "so publish adopted those pages and returned its own copies."),
    diverge=_dedup_diverge,
    lesson=frozenset({"dedup"}),
)

SUBSTEP_KINDS = (SWAP, CANDIDATE, DEDUP)
"""The trie's sub-step kinds, in table order."""
