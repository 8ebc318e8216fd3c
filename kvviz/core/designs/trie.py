# SPDX-License-Identifier: Apache-2.0
"""kvcore's trie cache as a design: shared prefixes as trie nodes, ref counts, a heap of
eviction candidates (SGLang's seven policies), a free list.

Its nouns are *node* (one full page, named by id with its page: "node 3 (page 2)"), *free
list* and *evicted*; a position in an allocation's tokens is a *block*, never a page. Every
kvcore event class has one row in :data:`EVENT_WORDS`: its sub-step kind, its event-log line,
its sub-step sentence and focus, whether it evicts. :data:`CODE` is the pseudo-code the
sub-step pane shows (true to ``kvcore/trie.py``, ``kvcore/base.py`` and ``kvcore/heap.py``'s
watched sifts) with its sub-step -> line rows; :func:`narrate_clauses` the narration
paragraph's clauses (the base cache's too: its design only swaps the clauses that say it
shares nothing, :mod:`.base`).

Narration clauses (:attr:`Design.clauses`), with their fields:

=====================  ===================================================================
``no_full_page``       ``tokens`` (counted), ``s`` ("s" or ""): a match with no full page
``publish_nothing``    (none): a publish that created and adopted nothing
``took``               ``pages``: pages taken from the free list
``returned``           ``pages``: a release's unpublished tail returned
``holder``             (none): what holds a page, in a report's page table
``no_structure``       (none): what the trie view says of a cache with no trie
=====================  ===================================================================

The algorithms (:data:`ALGORITHMS`):

=============  ============================================================================
``acquire``    the trie's acquire: walk, fit check, references, take pages, call ``evict``
``publish``    the trie's publish: touch the path, adopt cached blocks (dedup), create nodes
``extend``     extend, kvcore's one method for both caches (the base cache has nothing
               evictable, so there it never reaches ``evict``)
``release``    the trie's release: drop references deepest first, push new candidates and
               sift them up, free the unpublished tail
``evict``      eviction, one victim at a time: pop the heap's top (or let the victim's
               parent take its slot: the cascade), sift down by swaps, cut the victim out
               of the trie, give its page to the allocation
=============  ============================================================================

The heap's sifts are lines of the algorithms that cause them (the remove in ``acquire``
and ``publish``, the push in ``release``, the pop in ``evict``) rather than an algorithm of
their own: each sift has one caller, and the lines sit where the learner is reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvcore import events as ev

from kvviz.core.policy_words import key_fields, key_phrase, key_value, words_for
from kvviz.core.words import (EVICTIONS_TOLD, NODES_TOLD, TOKENS, Labeler, count, default_labeler, policy_key_text, nodes_text,
                     number_ranges, pages_text, some_pages)
from kvviz.core.designs import Design, EventWords, Focus, LogContext, Nouns, OpContext
from kvviz.backends.code import Code, block, parse, rows

NOUNS = Nouns(entry="node", entries="nodes", structure="trie", removed="evicted", free="free list", step="op")


def match_stop(tokens: Sequence[int], matched: int, tokens_per_page: int, label: Labeler = default_labeler,
               parent: int | None = None) -> str:
    """Why a match of ``tokens`` stopped after ``matched`` full pages, in blocks, never pages.

    ``parent`` is the last matched node (None or 0: the root). E.g. "block 1 [9 10 11 12] is
    not a child of node 1", "all 2 full pages matched; the last 2 tokens fill a partial page,
    never shared".
    """
    full = len(tokens) // tokens_per_page
    if not tokens:
        return "no tokens"
    if matched >= full:
        rest = len(tokens) - full * tokens_per_page
        whole = "the full page" if full == 1 else f"all {full:,} full pages"
        fill = "fills" if rest == 1 else "fill"
        if not full:
            return f"{count(rest, 'token')} {fill} no full page; a partial page is never shared"
        if rest:
            last = "the last token" if rest == 1 else f"the last {rest:,} tokens"
            return f"{whole} matched; {last} {fill} a partial page, never shared"
        return f"{whole} matched"
    chunk = tuple(tokens[matched * tokens_per_page:(matched + 1) * tokens_per_page])
    where = "the root" if not parent else f"node {parent}"
    return f"block {matched} [{label(chunk)}] is not a child of {where}"


# -- the event log: one line per event ------------------------------------------------------


def _log_matched(e: ev.Matched, c: LogContext) -> str:
    noun = "block" if c.units is not None and c.units.block_tokens is not None else "token"
    text = f"matched {nodes_text(e.nodes, e.pages)}: {e.matched_tokens:,} of {count(e.total_tokens, noun)}"
    if c.tokens is not None and c.tokens_per_page:
        parent = e.nodes[-1] if e.nodes else None
        text += f" ({match_stop(c.tokens, len(e.nodes), c.tokens_per_page, c.label, parent)})"
    return text


def _log_node_created(e: ev.NodeCreated, c: LogContext) -> str:
    parent = "the root" if not e.parent else f"node {e.parent}"
    return f"new node {e.node} (page {e.page}) under {parent}: [{c.label(e.tokens)}]"


LOG = {
    ev.OpStarted: lambda e, c: f"{e.op} (allocation #{e.allocation}) at tick {e.tick}",
    ev.Matched: _log_matched,
    ev.RefTaken: lambda e, c: f"ref +1 on node {e.node} (page {e.page}) → {e.ref}",
    ev.RefDropped: lambda e, c: f"ref -1 on node {e.node} (page {e.page}) → {e.ref}",
    ev.Touched: lambda e, c: f"touched {nodes_text(e.nodes)}: last_access = {e.tick}",
    ev.CandidateAdded: lambda e, c: f"heap + node {e.node} (page {e.page}) key {key_value(e.key)}",
    ev.CandidateRemoved: lambda e, c: f"heap - node {e.node} (page {e.page}): {e.reason}",
    ev.PagesTaken: lambda e, c: f"took {pages_text(e.pages)} from the free list (or queue)",
    ev.Evicted: lambda e, c: f"evicted node {e.node} (page {e.page}) [{c.label(e.tokens)}] key {key_value(e.key)}",
    ev.NodeCreated: _log_node_created,
    ev.Deduplicated: lambda e, c: (f"dedup: block {e.index} already cached as node {e.node} (page {e.page}); "
                                   f"adopted it, freed own page {e.own_page}"),
    ev.PagesFreed: lambda e, c: f"freed {pages_text(e.pages)} ({e.reason})",
    ev.Released: lambda e, c: f"allocation #{e.allocation} released",
}
"""The event log's line per event class (the fine events, seen only while watched, log as
their repr: :func:`_log_repr`)."""


def _log_repr(e, c: LogContext) -> str:
    return repr(e)


# -- sub-steps: (sentence, focus, pseudo-code context) per event ----------------------------


def _start(c: OpContext, e: ev.OpStarted):
    return f"{e.op} {c.name(e.allocation)} begins", Focus(allocation=c.name(e.allocation)), {}


def _tick(c: OpContext, e: ev.Ticked):
    also = {"acquire": "; the lookup is counted and the allocation numbered",
            "extend": "; the allocation's tokens are the new ones"}.get(e.op, "")
    return f"the clock ticks to {e.tick}{also}", Focus(allocation=c.name(e.allocation)), {}


def _walked_kind(e: ev.Walked) -> str:
    return "walk" if e.node is not None else "stop"


def _walked(c: OpContext, e: ev.Walked):
    where = "the root" if not e.parent else f"node {e.parent}"
    if e.node is None:
        return (f"walk: block {e.depth} [{c.label(e.tokens)}] is not a child of {where}: "
                f"matching stops after {count(e.depth, 'block')}",
                Focus(nodes=(e.parent,) if e.parent else ()), {"depth": e.depth})
    c.pages_of.setdefault(e.node, None)
    return (f"walk: block {e.depth} [{c.label(e.tokens)}] is a child of {where}: "
            f"matched {c.node(e.node)}", Focus(nodes=(e.node,)), {"depth": e.depth})


def _match(c: OpContext, e: ev.Matched):
    c.matched = len(e.nodes)
    return (f"matched {count(len(e.nodes), 'page')}: {e.matched_tokens:,} of {count(e.total_tokens, 'token')} "
            f"are cached and will not be computed again", Focus(nodes=e.nodes, pages=e.pages), {})


def _unheap(c: OpContext, e: ev.HeapRemoved):
    c.heap_move = "unheap"
    moved = f"; node {e.moved} moves from the array's end into slot [{e.slot}]" if e.moved is not None else ""
    return (f"node {e.node} leaves the heap from slot [{e.slot}]{moved}",
            Focus(nodes=(e.node,), slots=(e.slot,)), {})


def _uncandidate(c: OpContext, e: ev.CandidateRemoved):
    return (f"{c.node(e.node)} is no longer an eviction candidate: {e.reason}",
            Focus(nodes=(e.node,), pages=(e.page,)), {})


def _ref(c: OpContext, e: ev.RefTaken):
    return (f"ref +1 on node {e.node} (page {e.page}): ref {e.ref}; it cannot be evicted while referenced",
            Focus(nodes=(e.node,), pages=(e.page,), allocation=c.name(e.allocation)), {})


def _touch(c: OpContext, e: ev.Touched):
    nodes = ", ".join(map(str, e.nodes))
    return (f"touch node{'s' if len(e.nodes) != 1 else ''} {nodes}: last_access = {e.tick}",
            Focus(nodes=e.nodes), {})


def taken_from(where: str):
    """The sub-step words of PagesTaken, taking from ``where`` ("the free list's front")."""
    def _take(c: OpContext, e: ev.PagesTaken):
        pages = ", ".join(map(str, e.pages))
        return (f"take page{'s' if len(e.pages) != 1 else ''} {pages} from {where} "
                f"for {c.name(e.allocation)}", Focus(pages=e.pages, allocation=c.name(e.allocation)), {})
    return _take


def _pop(c: OpContext, e: ev.HeapPopped):
    c.heap_move = "pop"
    cascade = e.moved is not None and c.parent_of.get(e.node) == e.moved
    if e.moved is None:
        rest = "; the heap is empty now"
    elif cascade:
        rest = (f"; its parent node {e.moved} takes slot [0] at once (it becomes a leaf when "
                f"{e.node} goes), then sifts down")
    else:
        rest = f"; the last entry, node {e.moved}, moves to slot [0] and sifts down"
    return (f"pop the heap's top: node {e.node}, key {policy_key_text(e.key)}, the smallest, is the victim{rest}",
            Focus(nodes=(e.node,), slots=(0,)), {"cascade": cascade})


def _swap(c: OpContext, e: ev.HeapSwapped):
    if e.direction == "down":
        why = f"is larger than its child {policy_key_text(e.other_key)} at [{e.other_slot}]"
    else:
        why = f"is smaller than its parent {policy_key_text(e.other_key)} at [{e.other_slot}]"
    return (f"sift {e.direction}: {policy_key_text(e.key)} at [{e.slot}] {why}: swap",
            Focus(nodes=(e.node, e.other), slots=(e.slot, e.other_slot)),
            {"direction": e.direction, "after": c.heap_move})


def _evict(c: OpContext, e: ev.Evicted):
    c.pages_of[e.node] = e.page
    return (f"evict node {e.node} [{c.label(e.tokens)}], key {policy_key_text(e.key)}: out of the trie; "
            f"page {e.page} goes to {c.name(e.allocation)}",
            Focus(nodes=(e.node,), pages=(e.page,), allocation=c.name(e.allocation)), {})


def _candidate(c: OpContext, e: ev.CandidateAdded):
    return (f"{c.node(e.node)} has ref 0 and no children now: an eviction candidate, key {policy_key_text(e.key)}",
            Focus(nodes=(e.node,), pages=(e.page,)), {})


def _push(c: OpContext, e: ev.HeapPushed):
    c.heap_move = "push"
    return (f"node {e.node}, key {policy_key_text(e.key)}, joins the heap at slot [{e.slot}], the array's end",
            Focus(nodes=(e.node,), slots=(e.slot,)), {})


def _create(c: OpContext, e: ev.NodeCreated):
    c.pages_of[e.node] = e.page
    c.parent_of[e.node] = e.parent
    where = "the root" if not e.parent else f"node {e.parent}"
    return (f"new node {e.node} under {where} holds page {e.page}: [{c.label(e.tokens)}] is shared from now on",
            Focus(nodes=(e.node,), pages=(e.page,), allocation=c.name(e.allocation)), {})


def _dedup(c: OpContext, e: ev.Deduplicated):
    return (f"block {e.index} is already cached as node {e.node} (page {e.page}): adopt it; "
            f"the own copy, page {e.own_page}, goes back to the free list",
            Focus(nodes=(e.node,), pages=(e.page, e.own_page), allocation=c.name(e.allocation)), {})


def _free(c: OpContext, e: ev.PagesFreed):
    pages = ", ".join(map(str, e.pages))
    return (f"page{'s' if len(e.pages) != 1 else ''} {pages} back to the free list ({e.reason})",
            Focus(pages=e.pages, allocation=c.name(e.allocation)), {"reason": e.reason})


def _unref(c: OpContext, e: ev.RefDropped):
    after = "; nothing references it now: evictable once it is a leaf" if e.ref == 0 else ""
    return (f"ref -1 on node {e.node} (page {e.page}): ref {e.ref}{after}",
            Focus(nodes=(e.node,), pages=(e.page,), allocation=c.name(e.allocation)), {})


def _release(c: OpContext, e: ev.Released):
    return (f"{c.name(e.allocation)} released: it holds nothing now", Focus(allocation=c.name(e.allocation)), {})


def _fail(c: OpContext, e: ev.Failed):
    protected = f" ({e.protected} of them only because this request matched them)" if e.protected else ""
    return (f"does not fit: needs {count(e.needed, 'page')}, {e.free} free + {e.evictable} evictable{protected}; "
            "nothing changed (kvcore checks before it changes anything, so there is nothing to roll back)",
            Focus(allocation=c.op.name), {})


def _row(cls, kind, substep, *, evicts=False, focus=None, kind_of=None) -> EventWords:
    return EventWords(kind=kind, log=LOG.get(cls, _log_repr), evicts=evicts, substep=substep, focus=focus,
                      kind_of=kind_of)


EVENT_WORDS: Mapping[type, EventWords] = {
    ev.OpStarted: _row(ev.OpStarted, "start", _start, focus="the allocation"),
    ev.Ticked: _row(ev.Ticked, "tick", _tick, focus="the allocation"),
    ev.Walked: _row(ev.Walked, "walk", _walked, focus="the matched node (or the last one)", kind_of=_walked_kind),
    ev.Matched: _row(ev.Matched, "match", _match, focus="the matched nodes and pages"),
    ev.HeapRemoved: _row(ev.HeapRemoved, "unheap", _unheap, focus="the node and its heap slot"),
    ev.CandidateRemoved: _row(ev.CandidateRemoved, "uncandidate", _uncandidate, focus="the node"),
    ev.RefTaken: _row(ev.RefTaken, "ref", _ref, focus="the node, its page, the allocation"),
    ev.Touched: _row(ev.Touched, "touch", _touch, focus="the touched nodes"),
    ev.PagesTaken: _row(ev.PagesTaken, "take", taken_from("the free list's front"), focus="the pages taken"),
    ev.HeapPopped: _row(ev.HeapPopped, "pop", _pop, focus="the victim at slot 0"),
    ev.HeapSwapped: _row(ev.HeapSwapped, "swap", _swap, focus="the two nodes and slots"),
    ev.Evicted: _row(ev.Evicted, "evict", _evict, evicts=True, focus="the victim, its page, the allocation"),
    ev.CandidateAdded: _row(ev.CandidateAdded, "candidate", _candidate, focus="the node"),
    ev.HeapPushed: _row(ev.HeapPushed, "push", _push, focus="the node at the array's end"),
    ev.NodeCreated: _row(ev.NodeCreated, "create", _create, focus="the new node and its page"),
    ev.Deduplicated: _row(ev.Deduplicated, "dedup", _dedup, focus="the adopted node, both pages"),
    ev.PagesFreed: _row(ev.PagesFreed, "free", _free, focus="the pages freed"),
    ev.RefDropped: _row(ev.RefDropped, "unref", _unref, focus="the node, its page"),
    ev.Released: _row(ev.Released, "release", _release, focus="the allocation"),
    ev.Failed: _row(ev.Failed, "fail", _fail, focus="the allocation"),
}
"""One row per kvcore event class a trie cache reports."""

STOPS = frozenset({"stop", "take", "pop", "evict", "candidate", "create", "dedup", "fail", "refused"})
"""The sub-step kinds the stepper's "next notable" stops at."""

CLAUSES = {
    "no_full_page": "{tokens} make{s} no full page, nothing to match",
    "publish_nothing": "nothing new to share (only full pages are published, and never twice)",
    "took": "took {pages} from the free list",
    "returned": "returned unpublished {pages} to the free list",
    "no_structure": "",
    "holder": "node",
}


def narrate_clauses(design: Design, op_kind: str, events: tuple, after, label: Labeler, units=TOKENS) -> list[str]:
    """The clauses of a successful op on a trie (or base) cache: what matched, which pages were
    taken, what was cached or adopted, which nodes became candidates, what was evicted and
    why (each policy's words, :mod:`kvviz.core.policy_words`)."""
    parts: list[str] = []
    evicted = [e for e in events if isinstance(e, ev.Evicted)]
    created = [e for e in events if isinstance(e, ev.NodeCreated)]
    for e in events:
        if isinstance(e, ev.Matched) and op_kind == "acquire":
            full = e.total_tokens // after.tokens_per_page
            if not design.shares:
                parts.append(design.clause("unshared_match", tokens=count(e.total_tokens, 'token')))
            elif full == 0:
                parts.append(design.clause("no_full_page", tokens=count(e.total_tokens, 'token'),
                                           s='s' if e.total_tokens == 1 else ''))
            else:
                parts.append(units.match(len(e.nodes), full, e.matched_tokens, e.total_tokens))
        elif isinstance(e, ev.PagesTaken):
            parts.append(design.clause("took", pages=pages_text(e.pages)))
        elif isinstance(e, ev.NodeCreated) and len(created) <= NODES_TOLD:
            parts.append(f"cached [{label(e.tokens)}] as node {e.node} on page {e.page}")
        elif isinstance(e, ev.NodeCreated) and e is created[0]:  # dozens of blocks: one clause, ranges
            parts.append(f"cached {count(len(created), 'block')} as nodes {number_ranges([c.node for c in created])} "
                         f"on pages {number_ranges([c.page for c in created])}")
        elif isinstance(e, ev.Deduplicated):
            parts.append(f"block {e.index} was already cached by another allocation (node {e.node}): "
                         f"adopted page {e.page} and returned its own copy, page {e.own_page}")
        elif isinstance(e, ev.PagesFreed) and e.reason == "release":
            parts.append(design.clause("returned", pages=pages_text(e.pages)))
        elif isinstance(e, ev.CandidateAdded) and op_kind == "release":
            parts.append(f"node {e.node} (page {e.page}) is now unreferenced and childless: an eviction "
                         f"candidate with key {key_phrase(after, e.key)}")
    if op_kind == "release":
        say_dropped(parts, events, "node")
    if op_kind == "publish":
        touched = next((e for e in events if isinstance(e, ev.Touched)), None)
        if not any(isinstance(e, (ev.NodeCreated, ev.Deduplicated)) for e in events):
            parts.append(design.clause("publish_nothing"))
        if touched is not None:
            parts.append(f"refreshed {count(len(touched.nodes), 'node')} already on its path")
    words = words_for(after)
    for i, e in enumerate(evicted[:EVICTIONS_TOLD]):
        why = words.first(e.key) if i == 0 else words.next
        if e.parent_became_candidate is not None:
            why += f"; its parent node {e.parent_became_candidate} became a leaf and a candidate"
        # lru says when the page was last used (its key's first field); other policies name their key.
        key = f"last used at tick {e.key[0]}" if words.lru else f"key {key_phrase(after, e.key)}"
        parts.append(f"evicted page {e.page} [{label(e.tokens)}], {key}, {why}")
    rest = evicted[EVICTIONS_TOLD:]
    if rest:  # a trace request can evict hundreds of pages: one clause for the rest, not a page each
        parts.append(f"then {count(len(rest), 'more page')}, {words.rest(key_fields(after))} "
                     f"(pages {some_pages(rest)}); {count(len(evicted), 'page')} evicted in all")
    if op_kind == "extend" and not any(isinstance(e, (ev.PagesTaken, ev.Evicted)) for e in events):
        parts.append("its pages already had room")
    return parts


def say_dropped(parts: list[str], events: tuple, noun: str) -> None:
    """A release's first clause: how many ``noun`` s (nodes, cached pages) it unreferenced."""
    dropped = sum(isinstance(e, ev.RefDropped) for e in events)
    if dropped:
        parts.insert(0, f"dropped its reference on {count(dropped, noun)}")


# -- pseudo-code ------------------------------------------------------------------------------

# The tail both acquire and extend end with: free pages first, then evictions (kvcore's
# BasePagedAttentionCache._grow, which both call).
_GROW = """
    if needed > 0:                                              @~grow
        taken = free_list.take(min(needed, free))  # its front  @take
        allocation.pages += taken                               @~append
        if needed > len(taken):                                 @~short
            allocation.pages += evict(allocation, needed - len(taken))  @evict-call>evict
"""

_ACQUIRE = block("""
def acquire(tokens, extra=0, priority=0):                       @start
    node, matched = root, []                                    @~init
    for block in the full pages of tokens:                      @~loop
        child = node.children.get(block)                        @look
        if child is None: break           # matching stops      @stop
        matched.append(child); node = child                     @walk
    hit = len(matched) * tokens_per_page                        @~hit
    needed = pages_for(len(tokens) - hit + extra)               @~needed
    if needed > free + evictable - (ref-0 nodes in matched):    @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, [n.page for n in matched])  @match
    for n in matched:                                           @~refs
        if n.ref == 0: evictable -= 1     # ours now, not evictable  @~count
        if n in heap:                     # childless, ref 0    @~in-heap
            heap.remove(n)                # last entry fills n's slot  @unheap
            sift that entry up or down: swap while out of order  @swap
            n is no longer an eviction candidate                @uncandidate
        n.ref += 1; n.hits += 1           # ref > 0: not evicted  @ref
    for n in matched: n.priority = max(n.priority, priority)    @~priority
    for n in matched: n.last_access = now                       @touch
""", _GROW, """
    return allocation                                           @~return
""")

_PUBLISH = block("""
def publish(allocation, tokens=None):                           @start
    tokens = checked tokens (the base cache's checks)           @check
    now = clock = clock + 1                                     @tick
    path, full = allocation.path, len(tokens) // tokens_per_page  @~path
    for n in path[:full]: n.last_access = now                   @touch
    if full <= len(path): return          # nothing new         @~monotonic
    parent = path[-1] if path else root                         @~parent
    for i in range(len(path), full):                            @~loop
        block = page i of tokens                                @~block
        child = parent.children.get(block)                      @~look
        if child is not None:             # published first     @~found
            if child.ref == 0: evictable -= 1  # ours now       @~count
            if child in heap:             # childless, ref 0    @~in-heap
                heap.remove(child)        # last entry fills its slot  @unheap
                sift that entry up or down: swap while out of order  @swap
                child is no longer an eviction candidate        @uncandidate
            own, allocation.pages[i] = allocation.pages[i], child.page  @dedup
            free_list.give([own])         # our copy goes back  @free
            child.ref += 1; child.last_access = now             @ref
            child.priority = max(child.priority, allocation.priority)  @~priority
        else:                             # new: ref 1, touched now  @~else
            child = Node(block, allocation.pages[i], allocation.priority)  @create
            parent.children[block] = child                      @link
        path.append(child); parent = child                      @~advance
    # each node on the path holds one reference for allocation  @~refs
""")

_EXTEND = block("""
def extend(allocation, tokens, extra=0):                        @start
    check the allocation is live and extra >= 0                 @check
    tokens = tuple(tokens)                # our own copy        @~copy
    if tokens do not start with allocation.tokens: refuse       @~prefix
    needed = pages_for(len(tokens) + extra) - len(allocation.pages)  @~needed
    if needed > free + evictable:         # 0 in the base cache  @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation.tokens = tokens                                  @store
""", _GROW)

_RELEASE = block("""
def release(allocation):                                        @start
    check the allocation is live                                @check
    now = clock = clock + 1                                     @tick
    for n in reversed(allocation.path):   # deepest first       @~loop
        n.ref -= 1                                              @unref
        if n.ref == 0:                                          @~zero
            evictable += 1                # once its children go  @~count
            if not n.children:            # childless too       @~childless
                heap.push(n, key(n))      # at the array's end  @push
                while n's slot > 0 and key(n) < key(its heap parent):  @sift-compare
                    swap n with its heap parent     # sift up   @swap
                n is an eviction candidate now, in key order    @candidate
    tail = allocation.pages[len(allocation.path):]  # unpublished  @~tail
    free_list.give(tail)                                        @free
    allocation.released = True            # it holds nothing    @release
""")

_EVICT = block("""
def evict(allocation, count):             # pages still needed  @~def
    # key(n): lru (last_access, seq), priority (priority, last_access, seq)  @~heap-key
    for _ in range(count):                # one victim a turn   @~cascade
        victim = heap[0]                  # the smallest key    @top
        parent = victim.parent                                  @~parent
        if parent is not root and parent.ref == 0 and no other child:  @leaf?
            heap[0] = parent              # the cascade: it takes slot 0  @replace-top
        else:                                                   @~else
            last = heap.pop()             # the array's end     @pop
            if heap: heap[0] = last       # it fills the top's slot  @fill
        i = 0                             # sift down from the top  @~sift
        while slot i has a child:                               @~while
            c = the child slot of i with the smaller key        @pick-child
            if key(heap[i]) <= key(heap[c]): break              @sift-compare
            swap heap[i] and heap[c]; i = c                     @swap
        del parent.children[victim.tokens]  # out of the trie   @cut
        allocation.pages.append(victim.page); evictable -= 1    @give
        if parent took slot 0: it is a candidate now (a leaf)   @candidate
""")

ALGORITHMS = {a.name: a for a in (
    parse("acquire", "acquire: match the cached prefix, reference it, take or evict the rest",
          "kvcore/trie.py TriePagedAttentionCache.acquire_pages_for_tokens, base.py _grow", _ACQUIRE),
    parse("publish", "publish: share the allocation's full pages as trie nodes",
          "kvcore/trie.py TriePagedAttentionCache._publish", _PUBLISH),
    parse("extend", "extend: more tokens for a live allocation, more pages if needed",
          "kvcore/base.py BasePagedAttentionCache._extend and _grow", _EXTEND),
    parse("release", "release: drop the references, new candidates join the heap",
          "kvcore/trie.py TriePagedAttentionCache._release, heap.py WatchedHeap.push", _RELEASE),
    parse("evict", "evict: pop the heap's smallest key, sift down, give the page",
          "kvcore/trie.py TriePagedAttentionCache._evict, heap.py WatchedHeap", _EVICT),
)}
"""The trie's algorithms, by name."""

EXTEND_ROWS = {"start": ("start",), "refused": ("start", "check"), "fail": ("fits?", "fail"),
               "tick": ("tick", "store"), "take": ("take",)}
"""extend's rows, the same on the base cache (kvcore's one method for both)."""


def _rows() -> dict:
    removal = {"uncandidate": ("uncandidate",), "unheap": ("unheap",), "swap/unheap": ("swap",)}
    t = {}
    t |= rows("acquire", "acquire", {
        "start": ("start",), "refused": ("start",), "walk": ("look", "walk"), "stop": ("look", "stop"),
        "fail": ("fits?", "fail"), "tick": ("tick",), "match": ("match",), **removal, "ref": ("ref",),
        "touch": ("touch",), "take": ("take",)})
    t |= rows("publish", "publish", {
        "start": ("start",), "refused": ("start", "check"), "tick": ("tick",), "touch": ("touch",), **removal,
        "dedup": ("dedup", "free"), "ref": ("ref",), "create": ("create", "link")})
    t |= rows("extend", "extend", EXTEND_ROWS)
    t |= rows("release", "release", {
        "start": ("start",), "refused": ("start", "check"), "tick": ("tick",), "unref": ("unref",),
        "push": ("push",), "swap/push": ("sift-compare", "swap"), "candidate": ("candidate",), "free": ("free",),
        "release": ("release",)})
    for op in ("acquire", "extend"):  # eviction happens inside both: the evict algorithm
        t |= rows(op, "evict", {
            "pop": ("top", "pop", "fill"), "pop/cascade": ("top", "leaf?", "replace-top"),
            "swap/pop": ("pick-child", "sift-compare", "swap"), "evict": ("cut", "give"),
            "candidate": ("candidate",)})
    return t


# The heap moves a swap can sift after, per op; the last is the one assumed when the
# context does not say (acquire sifts once after its one removal, but at every victim of
# an eviction).
_SIFTS = {"acquire": ("unheap", "pop"), "publish": ("unheap",), "release": ("push",), "extend": ("pop",)}


def qualify(op_kind: str, kind: str, context: Mapping) -> str:
    """The qualifier of a trie sub-step: which heap move a ``swap`` sifts after (its
    context's ``after``, else an ``up`` sift is not an eviction's), and ``cascade`` for a
    ``pop`` whose victim's parent took its slot."""
    if kind == "swap":
        sifts = _SIFTS.get(op_kind, ("",))
        after = context.get("after")
        if after in sifts:
            return after
        if context.get("direction") == "up":  # an eviction sifts down only
            return sifts[0]
        return sifts[-1]
    if kind == "pop":
        return "cascade" if context.get("cascade") else ""
    return ""


CODE = Code(ALGORITHMS, {op: op for op in ("acquire", "publish", "extend", "release")}, _rows(), qualify)
"""The trie's pseudo-code: each op runs its own algorithm; eviction's sub-steps inside
acquire or extend are in ``evict``."""

DESIGN = Design(
    name="trie",
    title="kvcore's trie cache: shared prefixes, a heap of candidates",
    nouns=NOUNS,
    events=EVENT_WORDS,
    clauses=CLAUSES,
    tree=True,
    questions=("victim", "victims", "hits", "block_table", "ref", "fail", "free", "evictable", "next_swap",
               "new_candidates", "dedup_blocks"),
    views=("trie", "heap"),
    code=CODE,
    narrate=narrate_clauses,
    stops=STOPS,
)
"""The trie design."""

__all__ = ["ALGORITHMS", "CLAUSES", "CODE", "DESIGN", "EVENT_WORDS", "EXTEND_ROWS", "LOG", "NOUNS", "STOPS",
           "match_stop", "narrate_clauses", "qualify", "say_dropped", "taken_from"]
