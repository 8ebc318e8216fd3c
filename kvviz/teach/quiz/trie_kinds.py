# SPDX-License-Identifier: Apache-2.0
"""The trie cache's question kinds: victims, hits, block tables, refs, room, free pages,
evictability (the trie design lists them, :attr:`kvviz.core.designs.Design.questions`).

Every distractor models a named mistake (:data:`.core.MISTAKES`) by computing what a
learner who made it would answer; the tests compute each again with code of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.core.policy_words import key_fields, key_value, words_for
from kvviz.core.why import why_evicted, why_short_match
from kvviz.core.words import are, count, there_are
from kvviz.teach.quiz.core import (Parting, Mistake, around, page_slips, QuestionKind, StepView, Value, block_table_kind, cached_pages_run, ceil_div,
                   free_pages_kind, page_list, pages_text, simulate_evictions, walk, zero_answer)

_LRU_KEY = lambda n: (n.last_access, n.seq)  # noqa: E731 - the key a learner who knows only lru uses


@dataclass(frozen=True)
class Room:
    """What an acquire or extend asks of the pool, counted as the cache counts it."""

    needed: int
    free: int
    evictable: int
    protected: int  # ref-0 nodes the acquire itself matches: referenced by it, not evictable for it
    partial_free: int  # new pages if a partial page needed none (a mistake's count)
    no_extra: int  # new pages if the extra slots were forgotten (a mistake's count)

    @property
    def short(self) -> int:
        """Pages missing: 0 when the op fits."""
        return max(0, self.needed - self.free - self.evictable)


def room(view: StepView) -> Room | None:
    """The op's demand on the pool, or None when it is not an acquire/extend that can run."""
    op, snap = view.op, view.snap0
    tpp = snap.tokens_per_page
    ref0 = snap.evictable_count if view.tree else 0
    if op.kind == "acquire" and op.tokens is not None:
        path = walk(snap, op.tokens) if view.tree else []
        rest = len(op.tokens) - len(path) * tpp
        protected = sum(1 for n in path if n.ref == 0)
        return Room(ceil_div(rest + op.extra, tpp), snap.free_count, ref0 - protected, protected,
                    (rest + op.extra) // tpp, ceil_div(rest, tpp))
    if op.kind == "extend" and op.tokens is not None:
        mine = view.mine(snap)
        if mine is None:
            return None
        tokens = mine.tokens + op.tokens if op.append else op.tokens
        if tuple(tokens[:len(mine.tokens)]) != tuple(mine.tokens):
            return None  # not a continuation: InvalidOperation, not a question of room
        have = len(mine.pages)
        return Room(max(0, ceil_div(len(tokens) + op.extra, tpp) - have), snap.free_count, ref0, 0,
                    max(0, (len(tokens) + op.extra) // tpp - have), max(0, ceil_div(len(tokens), tpp) - have))
    return None


def protected_by(view: StepView) -> set[int]:
    """Nodes the op itself references before it evicts: an acquire's match (none for extend)."""
    return set(view.matched.nodes) if view.op.kind == "acquire" and view.matched else set()


def _leaf(snap, node) -> bool:
    return not snap.children(node.id)


def first_substep(view: StepView, test) -> int | None:
    """The index of the op's first sub-step whose event passes ``test``, or None."""
    return next((s.index for s in view.substeps() if test(s.event)), None)


def _evicted_at(view: StepView, k: int):
    """(sub-step index, event) of the op's ``k``-th eviction (0-based)."""
    from kvcore import events as ev

    seen = -1
    for s in view.substeps():
        if isinstance(s.event, ev.Evicted):
            seen += 1
            if seen == k:
                return s.index, s.event
    return None, None


def _not_chosen(snap, page: int, protected) -> str:
    """Why page ``page`` of ``snap`` was no candidate (or not the smallest one)."""
    info = snap.pages[page] if 0 <= page < snap.page_count else None
    if info is None:
        return f"page {page} does not exist"
    if info.state == "free":
        return f"page {page} was free: a free page is taken, not evicted"
    if info.state == "owned":
        return f"page {page} was owned by an allocation, unpublished: owned pages are never evicted"
    node = snap.node_for_page(page)
    if node.id in protected:
        return f"node {node.id} (page {page}) was matched by this acquire, so referenced by it"
    if node.ref:
        return f"node {node.id} (page {page}) had ref {node.ref}: a referenced node is never evicted"
    if snap.children(node.id):
        return f"node {node.id} (page {page}) was not a candidate yet: it had a child"
    return f"node {node.id} (page {page}) was a candidate, but with the larger key {key_value(snap.node_key(node))}"


# next victim ---------------------------------------------------------------------------

def _victim_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.snap0
    protected = protected_by(view)
    out = []
    interior = sorted((n for n in snap.nodes if n.parent is not None and n.ref == 0 and not _leaf(snap, n)
                       and n.id not in protected), key=snap.node_key)
    if interior:
        out.append(Mistake(interior[0].page, "an interior node: only leaves are evicted, a parent goes after its "
                                             "children", "interior"))
    held = sorted((n for n in snap.nodes if n.parent is not None and n.ref > 0 and _leaf(snap, n)),
                  key=snap.node_key)
    if held:
        out.append(Mistake(held[0].page, "a leaf that is still referenced: a live allocation protects it",
                           "referenced-leaf"))
    words = words_for(snap)
    largest = simulate_evictions(snap, protected, 1, key=lambda n: tuple(-x for x in snap.node_key(n)))
    if largest:
        out.append(Mistake(largest[0].page, words.last_mistake, "largest-key"))
    if not words.lru:  # the learner who knows only lru's rule
        oldest = simulate_evictions(snap, protected, 1, key=_LRU_KEY)
        if oldest:
            out.append(Mistake(oldest[0].page, f"the least recently used leaf: that is lru's choice; {snap.policy} "
                                               f"evicts by {key_fields(snap)} ({words.rule})", "lru-only"))
    else:
        first = simulate_evictions(snap, protected, 1, key=lambda n: n.seq)
        if first:
            out.append(Mistake(first[0].page, "the oldest created leaf: a node used again moves to the back of "
                                              "the line", "seq-only"))
    own = [snap.node(n) for n in sorted(protected) if snap.node(n).ref == 0 and _leaf(snap, snap.node(n))]
    if own:
        out.append(Mistake(own[0].page, "a page this acquire matches: its own prefix is referenced, so protected",
                           "own-prefix"))
    if snap.free:
        out.append(Mistake(snap.free[0], "the first free page: a free page is taken, not evicted", "free-page"))
    return out


def _victim_why(view: StepView, answer: Value) -> str:
    lines = why_evicted(view.session, view.index, answer).lines
    free = view.snap0.free_count
    first = f"The {count(free, 'free page')} went first" if free else "No page was free"
    return (f"{first}; then {lines[1][0].lower()}{lines[1][1:]} "
            "It was the eviction candidate (childless, ref 0) with the smallest key.")


def _victim_hints(view: StepView) -> tuple[str, str, str]:
    snap = view.snap0
    own = (" The acquire's own match is referenced by it, so protected." if view.op.kind == "acquire" else
           " An extend never evicts its own pages.")
    candidates = sorted((snap.node(n) for n in snap.heap if n not in protected_by(view)), key=lambda n: n.id)
    listed = "; ".join(f"node {n.id} page {n.page} key {key_value(snap.node_key(n))}" for n in candidates[:8])
    return (f"Free pages go first; then the cache evicts the childless ref-0 node with the smallest key "
            f"{key_fields(snap)}.{own}",
            f"Look at the nodes with ref 0 and no children in the trie, and compare their keys "
            f"{key_fields(snap)}; the {count(snap.free_count, 'free page')} are used up first.",
            f"The candidates now, by node id: {listed or 'none'}. The smallest key goes first.")


def _victim_diverge(view: StepView, value: Value) -> Parting | None:
    index, event = _evicted_at(view, 0)
    if index is None:
        return None
    why = _not_chosen(view.snap0, value, protected_by(view))
    return Parting(view.index, index, f"you chose page {value}: at sub-step {index + 1} the cache evicted "
                                         f"node {event.node} (page {event.page}, key {key_value(event.key)}); "
                                         f"{why}.")


VICTIM = QuestionKind(
    "victim", "next victim", "number", "page",
    applies=lambda v: v.tree and v.ok and bool(v.victims),
    ask=lambda v: f"{v.text()} It needs more pages than the {count(v.snap0.free_count, 'free page')}. "
                  "Which page is evicted first?",
    answer=lambda v: v.victims[0].page,
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: f"page {x}",
    distractors=_victim_distractors,
    hints=_victim_hints,
    why=_victim_why,
    diverge=_victim_diverge,
    hides_order=lambda v: True,
    weight=3,
    lesson=frozenset({"lru", "policies", "lfu", "fifo", "mru", "filo", "slru", "priority"}),
)


# the next victims, in order -----------------------------------------------------------

def _victims_count(view: StepView) -> int:
    return min(3, len(view.victims))


def _victims_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.snap0
    n = len(answer)
    protected = protected_by(view)
    words = words_for(snap)

    def order(**how) -> tuple[int, ...]:
        return tuple(x.page for x in simulate_evictions(snap, protected, n, **how))

    out = [Mistake(order(key=lambda x: tuple(-k for k in snap.node_key(x))),
                   f"largest key first: the heap pops the {words.smallest} key first", "largest-key")]
    # Every ref-0 node a candidate at once: parents (often smaller keys) before their children.
    ref0 = sorted((x for x in snap.nodes if x.parent is not None and x.ref == 0 and x.id not in protected),
                  key=snap.node_key)
    out.append(Mistake(tuple(x.page for x in ref0[:n]),
                       "every ref-0 node at once: a parent becomes a candidate only when its last child is gone "
                       "(the cascade)", "cascade-early"))
    out.append(Mistake(order(cascade=False),
                       "only the leaves that are candidates now: a parent left childless joins the heap (the "
                       "cascade)", "cascade-missed"))
    if words.lru:
        out.append(Mistake(order(key=lambda x: x.seq),
                           "creation order (seq) alone: a node used again moves to the back of the line", "seq-only"))
    else:  # the learner who knows only lru's order
        out.append(Mistake(order(key=_LRU_KEY), f"least recently used first: that is lru's order; {snap.policy} "
                                                f"pops the smallest {key_fields(snap)}", "lru-only"))
    out.append(Mistake(tuple(sorted(answer)), f"page-number order: the key is {key_fields(snap)}, not the page",
                       "page-order"))
    return [m for m in out if len(m.value) == n]


def _victims_hints(view: StepView) -> tuple[str, str, str]:
    snap = view.snap0
    protected = protected_by(view)
    candidates = sorted((snap.node(x) for x in snap.heap if x not in protected), key=lambda x: x.id)
    listed = "; ".join(f"node {x.id} page {x.page} key {key_value(snap.node_key(x))}" for x in candidates[:8])
    return (f"Each eviction pops the smallest key {key_fields(snap)} among childless ref-0 nodes; when a node's "
            "last child is evicted and it has ref 0, it becomes a candidate too.",
            "Find the candidates now, pop the smallest, then check whether its parent became childless with ref 0.",
            f"Candidates before the first eviction, by node id: {listed or 'none'}.")


def _victims_diverge(view: StepView, value: Value) -> Parting | None:
    answer = VICTIMS.answer(view)
    k = next((i for i, (a, b) in enumerate(zip(answer, value)) if a != b), None)
    if k is None:
        return None
    index, event = _evicted_at(view, k)
    if index is None:
        return None
    state = view.substeps().state(index - 1) if index > 0 else view.snap0
    why = _not_chosen(state, value[k], protected_by(view))
    return Parting(view.index, index, f"your eviction {k + 1} was page {value[k]}: at sub-step {index + 1} the "
                                         f"cache evicted node {event.node} (page {event.page}, key "
                                         f"{key_value(event.key)}); {why}.")


VICTIMS = QuestionKind(
    "victims", "the next victims in order", "list", "page",
    applies=lambda v: v.tree and v.ok and len(v.victims) >= 2,
    ask=lambda v: (f"{v.text()} It evicts {count(len(v.victims), 'page')}. "
                   + (f"Which {_victims_count(v)} are evicted first, in order?" if len(v.victims) > 3
                      else "Which, in the order they are evicted?")),
    answer=lambda v: tuple(e.page for e in v.victims[:_victims_count(v)]),
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: page_list(x),
    distractors=_victims_distractors,
    hints=_victims_hints,
    why=lambda v, x: (f"Each eviction pops the smallest key among the candidates at that moment: "
                      + ", ".join(f"page {e.page} key {key_value(e.key)}" for e in v.victims[:len(x)])
                      + (" (a parent left childless joined the heap on the way)."
                         if any(e.parent_became_candidate is not None for e in v.victims[:len(x) - 1]) else ".")),
    diverge=_victims_diverge,
    hides_order=lambda v: True,
    weight=3,
    lesson=frozenset({"eviction-cascade"}),
)


# hit tokens ----------------------------------------------------------------------------

def partial_hit(view: StepView) -> int:
    """Tokens matched if a partial page counted: the full-page match plus the common tokens
    with the best next cached page."""
    snap, tokens = view.snap0, view.op.tokens
    path = walk(snap, tokens)
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


def unpublished_hit(view: StepView) -> int:
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


def prefix_ignored_hit(view: StepView) -> int:
    """Tokens matched if a page matched wherever its tokens are cached, whatever came before."""
    snap = view.snap0
    return cached_pages_run(view.op.tokens, snap.tokens_per_page,
                            {n.tokens for n in snap.nodes if n.parent is not None})


def _hit_distractors(view: StepView, answer: Value) -> list[Mistake]:
    tokens = view.op.tokens
    out = [Mistake(partial_hit(view), "counting a partial page as a hit: only whole pages are shared",
                   "partial-page")]
    if unpublished_hit(view) > answer:  # only then does the mistake give another count
        out.append(Mistake(unpublished_hit(view),
                           "sharing another request's unpublished pages: only published pages are found",
                           "unpublished"))
    out.append(Mistake(prefix_ignored_hit(view), "a page cached after another prefix: a page is shared only when "
                                                 "everything before it matches too", "prefix-ignored"))
    if answer:
        out.append(Mistake(0, "no sharing at all: published pages stay cached after release and are found by prefix",
                           "no-sharing"))
    out.append(Mistake(len(tokens), "the whole request: tokens after the first page that differs are never matched",
                       "whole-request"))
    return around(view, "hits", answer, out + page_slips(view, answer, "the walk stops at the first page that is "
                                                                       "not a child of the last match"))



def _hit_applies(view: StepView) -> bool:
    if not (view.tree and view.ok and view.op.kind == "acquire" and view.matched):
        return False
    return view.matched.matched_tokens > 0 or partial_hit(view) > 0 or unpublished_hit(view) > 0


def _hit_why(view: StepView, answer: Value) -> str:
    lines = why_short_match(view.session, view.index, view.op.name).lines
    if unpublished_hit(view) > answer:
        # The why-query looks at the trie only; the learner's likely mistake is elsewhere.
        tpp, tokens = view.snap0.tokens_per_page, view.op.tokens
        holders = [a.label for a in view.snap0.allocations if len(a.tokens) // tpp > a.published
                   and tuple(a.tokens[:answer + tpp]) == tuple(tokens[:answer + tpp])]
        who = ", ".join(holders) if holders else "another request"
        verbs = ("holds", "has") if len(holders) <= 1 else ("hold", "have")
        return (f"{lines[0]} {who} {verbs[0]} the next page's tokens but {verbs[1]} not published them: only "
                "published pages are shared.")
    return " ".join(lines)  # every line: an eviction that explains the miss is the point


def _hit_hints(view: StepView) -> tuple[str, str, str]:
    snap, tokens = view.snap0, view.op.tokens
    tpp = snap.tokens_per_page
    pages = [f"[{' '.join(map(str, tokens[i:i + tpp]))}]" for i in range(0, len(tokens) - tpp + 1, tpp)]
    return (f"Walk the trie from the root one full page ({tpp} tokens) at a time; stop at the first page that is "
            "not a child of the last match. Partial pages are never shared.",
            "Start at the root's children: is the request's first page one of them? Then look under that node for "
            "the second page, and so on.",
            f"The request's full pages: {' '.join(pages) or 'none'}; count the ones matched in a row from the "
            f"root, times {tpp} tokens.")


def _hit_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    index = first_substep(view, lambda e: isinstance(e, ev.Walked) and e.node is None)
    if index is None:
        index = first_substep(view, lambda e: isinstance(e, ev.Matched))
    tpp = view.snap0.tokens_per_page
    got = view.matched.matched_tokens
    more = (f"you said {count(value, 'token')}: the walk stopped after {count(got // tpp, 'full page')}"
            if value > got else f"you said {count(value, 'token')}: the walk matched {count(got // tpp, 'full page')}")
    return Parting(view.index, index, f"{more} (sub-step {(index or 0) + 1}); {view.matched.reason}.")


HITS = QuestionKind(
    "hits", "hit tokens", "number", "token",
    applies=_hit_applies,
    ask=lambda v: f"{v.text()} How many of its {count(len(v.op.tokens), 'token')} will hit the cache?",
    answer=lambda v: v.matched.matched_tokens,
    bound=lambda v: len(v.op.tokens),
    describe=lambda x: count(x, "token"),
    distractors=_hit_distractors,
    hints=_hit_hints,
    why=_hit_why,
    diverge=_hit_diverge,
    weight=2,
    lesson=frozenset({"prefix-sharing", "partial-pages"}),
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
    out = [Mistake(tuple(sorted(answer)), "page-number order: a block table is in token order", "page-order")]
    if op.kind == "publish":
        out.append(Mistake(view.mine(snap).pages, "keeping its own copies: publish adopts the cached page",
                           "own-copies"))
        return out
    old = view.mine(snap).pages if op.kind == "extend" else ()
    kept = len(view.matched.pages) if op.kind == "acquire" else len(old)
    new = len(answer) - kept
    if view.victims and len(view.victims) >= 2:
        k = len(view.victims)
        largest = simulate_evictions(snap, protected_by(view), k, key=lambda x: tuple(-v for v in snap.node_key(x)))
        if len(largest) == k:
            out.append(Mistake(answer[:-k] + tuple(x.page for x in largest),
                               f"evicted pages largest key first: the {words_for(snap).smallest} key is evicted "
                               "(and used) first", "largest-key"))
    if op.kind == "acquire" and view.matched and view.matched.matched_tokens:
        fresh = len(answer)
        if snap.free_count >= fresh:
            out.append(Mistake(tuple(snap.free[:fresh]), "copying the hit pages: a hit reuses the cached pages",
                               "copied-hits"))
    if new >= 1 and snap.free_count > new and not view.victims:
        out.append(Mistake(answer[:kept] + tuple(snap.free[:new + 1]),
                           "a page too many: extra slots and tokens are counted together, rounded up once",
                           "page-too-many"))
    if new >= 2:
        out.append(Mistake(answer[:-1], "a page too few: a partial last page still needs a whole page",
                           "page-too-few"))
    return out


def _table_why(view: StepView, answer: Value) -> str:
    held = f"{view.op.name} holds pages {pages_text(answer)}"
    if view.op.kind == "publish":
        return (f"{held}: it adopted the cached page of each duplicate block, and its own copies went back to "
                "the free list.")
    kept = len(view.matched.pages) if view.op.kind == "acquire" else len(view.mine(view.snap0).pages)
    first = count(kept, "matched page") if view.op.kind == "acquire" else f"the {count(kept, 'page')} it had"
    new = len(answer) - kept
    evicted = len(view.victims)
    return (f"{held}: {first}, then {count(new, 'new page')} in token order ({new - evicted} from the front of "
            f"the free list, {evicted} evicted, {words_for(view.snap0).smallest} key first).")


def _table_hints(view: StepView) -> tuple[str, str, str]:
    snap = view.snap0
    if view.op.kind == "publish":
        return ("Publish walks the allocation's full pages from the root; a block already cached as a child is "
                "deduplicated: the allocation adopts the cached page and returns its own.",
                "Compare the allocation's full pages with the trie's children along its prefix.",
                f"{view.op.name} holds pages {pages_text(view.mine(snap).pages)} now; replace each page whose block "
                "is already cached by the cached node's page.")
    r = room(view)
    need = r.needed if r else 0
    return ("Matched pages first (shared, in token order), then free pages from the front of the free list, then "
            f"evicted pages, {words_for(snap).smallest} key first.",
            "Count the new pages the op needs, take them from the front of the free list, and evict for the rest.",
            f"It needs {count(need, 'new page')}; the free list's front is {pages_text(snap.free[:max(need, 1)])}"
            f"{'' if need <= snap.free_count else ', then evictions'}.")


def _table_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    answer = view.mine(view.snap1).pages
    k = next((i for i, (a, b) in enumerate(zip(answer, value)) if a != b), min(len(answer), len(value)))
    page = answer[k] if k < len(answer) else None
    if page is None:
        return Parting(view.index, None, f"your block table has {count(len(value), 'page')}; the cache's has "
                                            f"{len(answer)}: {pages_text(answer)}.")
    index = first_substep(view, lambda e: (isinstance(e, (ev.PagesTaken, ev.Matched)) and page in e.pages)
                          or (isinstance(e, (ev.Evicted, ev.Deduplicated)) and e.page == page))
    return Parting(view.index, index, f"block {k} of your table is "
                                         f"{'page ' + str(value[k]) if k < len(value) else 'missing'}: at sub-step "
                                         f"{(index or 0) + 1} block {k} got page {page}.")


TABLE = block_table_kind(
    "block_table",
    applies=_table_applies,
    distractors=_table_distractors,
    hints=_table_hints,
    why=_table_why,
    diverge=_table_diverge,
    hides_order=lambda v: bool(v.victims),
    weight=2,
)


# ref count -----------------------------------------------------------------------------

def ref_node(view: StepView):
    """The node the ref question asks about: the deepest one the op references or drops."""
    op = view.op
    if op.kind == "acquire" and view.matched and view.matched.nodes:
        return view.matched.nodes[-1]
    if op.kind == "release":  # the deepest node another allocation still holds, else the deepest
        mine = view.mine(view.snap0)
        path = [view.snap0.node_for_page(p) for p in mine.pages[:mine.published]] if mine is not None else []
        path = [n for n in path if n is not None]
        shared = [n for n in path if n.ref > 1]
        return (shared or path)[-1].id if path else None
    if op.kind == "publish" and view.dedups:
        return view.dedups[-1].node
    return None


def _ref_applies(view: StepView) -> bool:
    if not (view.tree and view.ok):
        return False
    node = ref_node(view)
    return node is not None and view.snap1.node(node) is not None and view.snap0.node(node) is not None


def _ref_distractors(view: StepView, answer: Value) -> list[Mistake]:
    node = ref_node(view)
    before = view.snap0.node(node).ref
    out = [Mistake(before, "unchanged: every acquire that matches a node, every release and every adopting "
                           "publish changes its ref", "ref-unchanged")]
    if view.op.kind == "release":
        out.append(Mistake(0, "release drops the node to 0: other live allocations on its path still count",
                           "ref-zeroed"))
        out.append(Mistake(before + 1, "release adds a reference: it drops one", "ref-up"))
    else:
        out.append(Mistake(1, "only the newest user counts: ref counts every live allocation on the path", "ref-one"))
        out.append(Mistake(answer + 1, "counting one allocation twice (acquire and publish): one per allocation",
                           "ref-twice"))
    out.append(Mistake(len(view.snap1.allocations), "every live allocation counted: only those whose published path "
                                                    "holds the node", "ref-all"))
    out.append(Mistake(view.snap1.node(node).hits, "the times it was matched: a release gives its reference back, "
                                                   "and the ref counts holders, not uses", "ref-hits"))
    # How many lie below is drawn per question; a release keeps "0" (its point: others still hold the node).
    return around(view, "ref", answer, out, low=int(view.op.kind == "release"), bound=REF.bound(view))


def _ref_hints(view: StepView) -> tuple[str, str, str]:
    node = ref_node(view)
    snap = view.snap0
    holders = [a.label for a in snap.allocations if snap.node(node).page in a.pages[:a.published]]
    return ("A node's ref is the number of live allocations whose published path contains it.",
            f"Find node {node} in the trie and the allocations whose block tables hold page {snap.node(node).page}; "
            f"then apply this {view.op.kind}.",
            f"Before the op its ref is {snap.node(node).ref} ({', '.join(holders) or 'nobody'}); an acquire that "
            "matches it adds one, a release of a holder drops one, an adopting publish adds one.")


def _ref_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    node = ref_node(view)
    index = first_substep(view, lambda e: isinstance(e, (ev.RefTaken, ev.RefDropped)) and e.node == node)
    return Parting(view.index, index, f"you said ref {value}: at sub-step {(index or 0) + 1} the op changed "
                                         f"node {node}'s ref from {view.snap0.node(node).ref} to "
                                         f"{view.snap1.node(node).ref}.")


REF = QuestionKind(
    "ref", "ref count", "number", "ref",
    applies=_ref_applies,
    ask=lambda v: (f"{v.text()} What is the ref count of node {ref_node(v)} "
                   f"(page {v.snap0.node(ref_node(v)).page}) after it?"),
    answer=lambda v: v.snap1.node(ref_node(v)).ref,
    bound=lambda v: len(v.snap0.allocations) + len(v.snap1.allocations) + 1,
    describe=lambda x: f"ref {x}",
    distractors=_ref_distractors,
    hints=_ref_hints,
    why=lambda v, x: (f"Node {ref_node(v)} is on the published path of "
                      f"{count(x, 'live allocation')} after the op, so its ref is {x}"
                      f" (it was {v.snap0.node(ref_node(v)).ref})."),
    diverge=_ref_diverge,
    lesson=frozenset({"refcount"}),
    spare=zero_answer,  # 0 (the last holder's release) was 66% of the answers asked, and the smallest number offered
)


# will it fail ----------------------------------------------------------------------------

def fail_applies(view: StepView) -> bool:
    """Whether the step's op asks more of the pool than is free, and our count of room agrees
    with the cache's verdict."""
    r = room(view)
    if r is None or r.needed <= r.free:
        return False  # no pressure on the pool: nothing to predict
    failed_alloc = view.after.error is not None and view.after.error.kind == "CacheAllocationFailure"
    if view.after.error is not None and not failed_alloc:
        return False  # misuse (InvalidOperation) is not a question of room
    return failed_alloc == (r.short > 0)


def _fail_distractors(view: StepView, answer: Value) -> list[Mistake]:
    r = room(view)
    out = [
        Mistake(max(0, r.needed - r.free), "counting free pages only: ref-0 cached pages can be evicted", "free-only"),
        Mistake(max(0, r.partial_free - r.free - r.evictable),
                "a partial page needs no page: every started page takes a whole page", "page-too-few"),
        Mistake(max(0, r.no_extra - r.free - r.evictable), "forgetting the extra slots: they take pages too",
                "extra-ignored"),
    ]
    if view.tree and view.op.kind == "acquire":
        out.append(Mistake(max(0, r.needed - r.free - r.evictable - r.protected),
                           "evicting its own prefix: the pages an acquire matches are referenced by it", "own-prefix"))
        whole = ceil_div(len(view.op.tokens) + view.op.extra, view.snap0.tokens_per_page)
        out.append(Mistake(max(0, whole - r.free - r.evictable - r.protected),
                           "fresh pages for the hit pages too: a matched prefix is shared, not copied", "copied-hits"))
    if answer:
        out.append(Mistake(0, "referenced pages can be evicted: only ref-0 pages can", "referenced-evictable"))
    else:
        out.append(Mistake(1, "the pool looks full: but evictable pages make room", "pool-full"))
    out.append(Mistake(r.needed, "the pages it needs, not how many it is short: free and evictable pages count "
                                 "against them", "needed-not-short"))
    # Where the answer lies among the numbers is drawn per question, and 0s are spared: the smallest was right 76%.
    return around(view, "fail", answer, out, bound=r.needed)


def _fail_why(view: StepView, answer: Value) -> str:
    r = room(view)
    verdict = f"it fails, {count(answer, 'page')} short" if answer else "it succeeds"
    return (f"It needs {count(r.needed, 'new page')}; {there_are(r.free)} free and {r.evictable} evictable "
            f"(ref 0, not its own prefix), so {verdict}; a failed op changes nothing.")


def _fail_hints(view: StepView) -> tuple[str, str, str]:
    r = room(view)
    own = ", not matched by this acquire" if view.op.kind == "acquire" else ""
    return ("Count the new pages it needs (tokens not matched plus extra slots, rounded up to pages); it fits when "
            f"free plus evictable (ref 0{own}) cover them.",
            "Look at the free count and at the ref-0 nodes in the trie (a parent counts too: it goes after its "
            "children).",
            f"It needs {count(r.needed, 'new page')}; {are(r.free)} free and {are(r.evictable)} evictable.")


def _fail_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    index = first_substep(view, lambda e: isinstance(e, ev.Failed))
    r = room(view)
    return Parting(view.index, index if index is not None else 0,
                      f"you said {FAIL.describe(value)}: kvcore counted {count(r.needed, 'new page')} against "
                      f"{r.free} free and {r.evictable} evictable before changing anything.")


FAIL = QuestionKind(
    "fail", "will it fail", "number", "page",
    applies=fail_applies,
    ask=lambda v: f"{v.text()} Will it fail? Answer how many pages short it is (0: it succeeds).",
    answer=lambda v: room(v).short,
    bound=lambda v: room(v).needed,
    describe=lambda x: f"fails, {count(x, 'page')} short" if x else "succeeds",
    distractors=_fail_distractors,
    hints=_fail_hints,
    why=_fail_why,
    diverge=_fail_diverge,
    weight=2,
    lesson=frozenset({"failure", "pressure"}),
    spare=zero_answer,  # 0 ("it succeeds") was 76% of the answers asked, and the smallest number offered
)


# free pages --------------------------------------------------------------------------------

def free_applies(view: StepView) -> bool:
    """Whether the step moves pages to or from the free list in a way worth predicting."""
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
    out = [Mistake(snap.free_count, "unchanged: this op moves pages to or from the free list", "unchanged")]
    if op.kind == "release":
        mine = view.mine(snap)
        out.append(Mistake(snap.free_count + len(mine.pages),
                           "release frees every page: published pages stay cached for reuse", "release-all"))
        alone = sum(1 for p in mine.pages[:mine.published] if snap.node_for_page(p).ref == 1)
        out.append(Mistake(answer + alone, "release frees the pages nobody else uses: unreferenced pages stay "
                                           "cached, evictable, until a request needs the room", "release-unshared"))
        kids = {n.id: len(snap.children(n.id)) for n in snap.nodes}
        leaves = sum(1 for p in mine.pages[:mine.published] if snap.node_for_page(p).ref == 1
                     and not kids[snap.node_for_page(p).id])
        out.append(Mistake(answer + leaves, "release frees the pages that become eviction candidates: a candidate "
                                            "stays cached until an acquire needs its page", "release-candidates"))
    if op.kind in ("acquire", "extend"):
        r = room(view)
        if op.kind == "acquire" and view.matched and view.matched.matched_tokens:
            whole = ceil_div(len(op.tokens) + op.extra, snap.tokens_per_page)
            out.append(Mistake(max(0, snap.free_count - whole), "hit pages also come from the free list: they are "
                                                                "shared", "hits-taken"))
        if r is not None:
            out.append(Mistake(max(0, snap.free_count - r.partial_free),
                               "a partial page needs no page: every started page takes a whole page", "page-too-few"))
            out.append(Mistake(max(0, snap.free_count - r.no_extra),
                               "forgetting the extra slots: they take pages too", "extra-ignored"))
    if view.victims:
        out.append(Mistake(answer + len(view.victims), "evicted pages stay on the free list: they go to the "
                                                       "requester", "evicted-stay"))
    if op.kind == "publish":
        out.append(Mistake(snap.free_count + 2 * len(view.dedups),
                           "both copies freed: the cached page stays, only the duplicate returns", "both-copies"))
    return around(view, "free", answer, out, low=1)  # chosen per question: 0 free pages answered 54% of these


def _free_why(view: StepView, x: Value) -> str:
    start = f"The free list went from {view.snap0.free_count} to {x}: "
    if view.op.kind == "release":
        return start + "published pages stay cached, only the unpublished tail was freed."
    if view.op.kind == "publish":
        return start + (f"{count(len(view.dedups), 'duplicate page')} returned when publish adopted the cached "
                        "copies.")
    taken = view.snap0.free_count - x
    hits = "; hit pages are shared, not taken" if view.matched and view.matched.matched_tokens else ""
    return start + f"it took {count(taken, 'free page')} and evicted {len(view.victims)}{hits}."


def _free_hints(view: StepView) -> tuple[str, str, str]:
    snap, op = view.snap0, view.op
    third = f"{there_are(snap.free_count, 'free page').capitalize()} now."
    if op.kind == "release":
        mine = view.mine(snap)
        third += (f" {op.name} holds {count(len(mine.pages), 'page')}, {mine.published} of them published (those "
                  "stay cached).")
    elif op.kind == "publish":
        third += f" It adopts {count(len(view.dedups), 'cached page')}."
    else:
        r = room(view)
        third += f" It needs {count(r.needed, 'new page')}." if r else ""
    return ("Release frees only unpublished pages; acquires take free pages first (hit pages are shared, not "
            "taken); a duplicate page returns to the free list when publish adopts the cached one.",
            "Count the pages the op takes from or gives back to the free list.",
            third)


def _free_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    index = first_substep(view, lambda e: isinstance(e, (ev.PagesTaken, ev.PagesFreed, ev.Deduplicated)))
    return Parting(view.index, index, f"you said {count(value, 'free page')}: from sub-step {(index or 0) + 1} "
                                         f"the free list went from {view.snap0.free_count} to "
                                         f"{view.snap1.free_count}.")


FREE = free_pages_kind(
    "free",
    applies=free_applies,
    distractors=_free_distractors,
    hints=_free_hints,
    why=_free_why,
    diverge=_free_diverge,
)


# evictable nodes --------------------------------------------------------------------------

def shown_nodes(view: StepView) -> tuple[int, ...]:
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
    return len(shown_nodes(view)) >= 2


def shown_pages(view: StepView) -> tuple[int, ...]:
    """The cached pages the evictable question lists (the pages of :func:`shown_nodes`)."""
    return tuple(sorted(view.snap1.node(n).page for n in shown_nodes(view)))


def _evictable_distractors(view: StepView, answer: Value) -> list[Mistake]:
    s0, s1 = view.snap0, view.snap1
    shown = [s1.node_for_page(p) for p in shown_pages(view)]
    return [
        Mistake(tuple(n.page for n in shown if n.id in s1.heap),
                "only the candidates: a ref-0 node with children is evictable too, after its children",
                "candidates-only"),
        Mistake(tuple(n.page for n in shown if _leaf(s1, n)), "every leaf: a referenced leaf is protected",
                "every-leaf"),
        Mistake(tuple(n.page for n in shown if s0.node(n.id) is not None and s0.node(n.id).ref == 0),
                "as before the op: this op changed the refs on its path", "before-op"),
        Mistake(tuple(n.page for n in shown), "all of them: referenced pages are never evicted", "all"),
        Mistake((), "none: a released page stays cached with ref 0, and that is evictable", "none"),
    ]


def _evictable_ask(view: StepView) -> str:
    listed = ", ".join(f"page {p} (node {view.snap1.node_for_page(p).id})" for p in shown_pages(view))
    return f"{view.text()} After it, which of these cached pages are evictable (ref 0)? {listed}"


def _evictable_hints(view: StepView) -> tuple[str, str, str]:
    s0 = view.snap0
    refs = "; ".join(f"page {p} ref {s0.node(view.snap1.node_for_page(p).id).ref}"
                     for p in shown_pages(view) if s0.node(view.snap1.node_for_page(p).id) is not None)
    return ("Evictable means ref 0: no live allocation's published path contains the page's node. An acquire "
            "references every node it matches; a release drops its references.",
            f"Find the pages on {view.op.name}'s path: this {view.op.kind} changes their refs by one.",
            f"Before the op: {refs or 'none of them was cached'}.")


def _evictable_diverge(view: StepView, value: Value) -> Parting | None:
    from kvcore import events as ev

    answer = set(EVICTABLE.answer(view))
    wrong = sorted(set(value) ^ answer)
    if not wrong:
        return None
    page = wrong[0]
    node = view.snap1.node_for_page(page)
    index = first_substep(view, lambda e: isinstance(e, (ev.RefTaken, ev.RefDropped)) and e.node == node.id)
    said = "evictable" if page in value else "not evictable"
    return Parting(view.index, index, f"you said page {page} is {said}: after the op node {node.id} has ref "
                                         f"{node.ref}" + (f" (sub-step {index + 1} changed it)" if index is not None
                                                          else " (the op did not touch it)") + ".")


EVICTABLE = QuestionKind(
    "evictable", "evictable pages", "set", "page",
    applies=_evictable_applies,
    ask=_evictable_ask,
    answer=lambda v: tuple(p for p in shown_pages(v) if v.snap1.node_for_page(p).ref == 0),
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: page_list(x),
    distractors=_evictable_distractors,
    hints=_evictable_hints,
    why=lambda v, x: ("After the op, " + "; ".join(f"page {p} has ref {v.snap1.node_for_page(p).ref}"
                                                    for p in shown_pages(v))
                      + ": evictable means ref 0 (a parent goes after its children)."),
    diverge=_evictable_diverge,
)

TRIE_KINDS = (VICTIM, VICTIMS, HITS, TABLE, REF, FAIL, FREE, EVICTABLE)
"""The trie's result kinds, in table order (the sub-step kinds are in :mod:`.substep_kinds`)."""
