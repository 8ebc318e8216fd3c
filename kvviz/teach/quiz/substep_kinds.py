# SPDX-License-Identifier: Apache-2.0
"""Question kinds about the sub-steps kvviz animates inside one op: the next heap swap after
a pop, which nodes a release makes eviction candidates, which blocks a publish dedups.

Answers come from the op's own sub-step stream (kvcore's fine events, :mod:`..substeps`);
the state a swap question shows is the heap right before the pop, taken from that stream.
"""

from __future__ import annotations

from kvcore import events as ev

from kvviz.core.words import count
from kvviz.core.policy_words import key_fields, key_value
from kvviz.teach.quiz.core import Parting, Mistake, QuestionKind, StepView, Value, page_list, smallest_answer


# the next swap ---------------------------------------------------------------------------

def _pop(view: StepView):
    """(index of the first pop's sub-step, the pop event) when the op's first eviction pops the
    heap's top and moves another node up into slot 0; else (None, None)."""
    for s in view.substeps():
        if isinstance(s.event, ev.HeapPopped):
            return (s.index, s.event) if s.event.moved is not None else (None, None)
    return None, None


def heap_before_pop(view: StepView) -> tuple[int, ...]:
    """The heap array right before the op's first pop (kvcore's state at that sub-step)."""
    index, _ = _pop(view)
    return (view.substeps().state(index - 1) if index > 0 else view.snap0).heap


def _first_swap(view: StepView):
    index, pop = _pop(view)
    for s in view.substeps()[index + 1:]:
        if isinstance(s.event, ev.HeapSwapped):
            return s.index, s.event
        if not isinstance(s.event, ev.HeapPopped):
            break  # the sift ended without a swap
    return None, None


def _swap_applies(view: StepView) -> bool:
    if not (view.tree and view.ok and view.victims):
        return False
    index, pop = _pop(view)
    return index is not None and len(heap_before_pop(view)) >= 3


def _swap_answer(view: StepView) -> int:
    _, swap = _first_swap(view)
    return swap.other if swap is not None else _pop(view)[1].moved


def _parent_takes_top(view: StepView) -> bool:
    """Whether the popped node's parent, left childless with ref 0, takes slot 0 itself
    (kvcore replaces the top instead of moving the last slot up and pushing the parent)."""
    heap = heap_before_pop(view)
    return _pop(view)[1].moved not in heap


def _heap_after_pop(view: StepView) -> tuple[int, ...]:
    """The heap array right after the pop, before the sift (the moved node in slot 0)."""
    heap = heap_before_pop(view)
    moved = _pop(view)[1].moved
    return (moved,) + heap[1:] if _parent_takes_top(view) else (heap[-1],) + heap[1:-1]


def _children_after_pop(view: StepView) -> list[int]:
    after = _heap_after_pop(view)
    return [after[i] for i in (1, 2) if i < len(after)]


def _swap_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.substeps().state(_pop(view)[0] - 1) if _pop(view)[0] else view.snap0
    moved = _pop(view)[1].moved
    kids = _children_after_pop(view)
    out = []
    if kids:
        larger = max(kids, key=lambda n: snap.node_key(snap.node(n)))
        out.append(Mistake(larger, "the child with the larger key: a sift-down swaps with the smaller child, so "
                                   "the smaller key rises", "wrong-child"))
    out.append(Mistake(moved, "no swap: it stays only when no child has a smaller key", "no-swap"))
    deeper = _heap_after_pop(view)[3:7]  # every choice names a node still in the heap
    if deeper:
        smallest = min(deeper, key=lambda n: snap.node_key(snap.node(n)))
        out.append(Mistake(smallest, "the smallest key further down: a sift swaps with a child of slot 0 (slot 1 "
                                     "or 2), one level at a time", "skips-a-level"))
    shown = _heap_after_pop(view)[1:7]  # node numbers follow age: without it the oldest was the answer 94%
    if shown:
        oldest = min(shown, key=lambda n: snap.node(n).seq)
        out.append(Mistake(oldest, f"the oldest node: the heap orders by the key {key_fields(snap)}, not by "
                                   "creation, and a sift swaps with a child of slot 0", "seq-only"))
    return out


def _swap_ask(view: StepView) -> str:
    _, pop = _pop(view)
    snap = view.substeps().state(_pop(view)[0] - 1) if _pop(view)[0] else view.snap0
    heap = " ".join(f"[{i}] node {n} {key_value(snap.node_key(snap.node(n)))}"
                    for i, n in enumerate(heap_before_pop(view)[:7]))
    how = (f"its parent node {pop.moved}, now childless with ref 0, takes slot 0" if _parent_takes_top(view)
           else f"node {pop.moved} moves from the heap's last slot to slot 0")
    return (f"{view.text()} The heap before the first eviction: {heap}. The cache pops node {pop.node} (the "
            f"smallest key) and {how}. Which node does node {pop.moved} swap with first (node {pop.moved} itself if "
            "it stays)?")


def _swap_hints(view: StepView) -> tuple[str, str, str]:
    snap = view.substeps().state(_pop(view)[0] - 1) if _pop(view)[0] else view.snap0
    moved = _pop(view)[1].moved
    kids = _children_after_pop(view)
    listed = "; ".join(f"node {n} key {key_value(snap.node_key(snap.node(n)))}" for n in kids)
    return (f"A sift-down compares the moved node with its children (slots 1 and 2 under slot 0) and swaps it with "
            f"the child of the smaller key {key_fields(snap)}, if that key is smaller than its own.",
            "Slot 0's children are slots 1 and 2 of the heap array as it stands after the pop.",
            f"Node {moved} has key {key_value(snap.node_key(snap.node(moved)))}; its children: {listed}.")


def _swap_diverge(view: StepView, value: Value) -> Parting | None:
    index, swap = _first_swap(view)
    if swap is None:
        index = _pop(view)[0]
        return Parting(view.index, index, f"you chose node {value}: after the pop at sub-step {index + 1}, node "
                                             f"{_pop(view)[1].moved} had no child with a smaller key, so it stayed.")
    return Parting(view.index, index, f"you chose node {value}: at sub-step {index + 1} node {swap.node} (key "
                                         f"{key_value(swap.key)}) swapped with node {swap.other} (key "
                                         f"{key_value(swap.other_key)}), the child with the smaller key.")


SWAP = QuestionKind(
    "next_swap", "the next heap swap", "number", "node",
    applies=_swap_applies,
    ask=_swap_ask,
    answer=_swap_answer,
    bound=lambda v: max(n.id for n in v.snap0.nodes),
    describe=lambda x: f"node {x}",
    distractors=_swap_distractors,
    hints=_swap_hints,
    why=lambda v, x: (f"After the pop, node {_pop(v)[1].moved} sits in slot 0 and sifts down: "
                      + (f"it swaps with node {x}, its child with the smaller key."
                         if x != _pop(v)[1].moved else "no child has a smaller key, so it stays.")),
    diverge=_swap_diverge,
    lesson=frozenset({"heap-ties", "lru"}),
    spare=smallest_answer,  # node numbers follow age: the oldest (the parent that took the top) was the answer 94%
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
