# SPDX-License-Identifier: Apache-2.0
"""kvcore's hash-block cache (vLLM's design) as a design: chained block keys, one free queue,
lazy eviction.

It has no nodes: it caches *blocks* on pages under chained keys, keeps one *free queue* of
ref-0 pages and evicts lazily, when a page taken from the queue's head still holds a block;
its sentences say so in those words (never "leaf" or "heap"). A matched, referenced or
released page is named by its page with its block: the hash cache's ``RefTaken`` and
``RefDropped`` carry block ids in ``node``. Places in the free queue are the page pool's:
``q0`` is the head (:func:`kvviz.core.free_queue.place_text`).

Narration clauses (:attr:`Design.clauses`), with their fields:

=====================  ===================================================================
``no_full_page``       ``tokens`` (counted), ``s``: a match with no full block
``full``               (none): the noun a match counts ("full block")
``took``               ``pages``: pages taken from the free queue's head
``publish_nothing``    (none): a publish that cached nothing
``holder``             (none): what holds a page, in a report's page table
``no_structure``       (none): the trie view of a hash cache (it has blocks instead)
=====================  ===================================================================

Its pseudo-code (:data:`CODE`) is one algorithm holding acquire, extend, publish and
release, and the take from the free queue's head (lazy eviction) they share.
"""

from __future__ import annotations

from kvcore import events as ev
from kvcore.events import BlockCached, BlockEvicted, PagesQueued, PageUnqueued

from kvviz.core.free_queue import place_text
from kvviz.core.words import EVICTIONS_TOLD, TOKENS, Labeler, count, pages_text, some_pages
from kvviz.core.designs import Design, EventWords, Focus, LogContext, Nouns, OpContext
from kvviz.backends.code import Code, block, parse, rows
from kvviz.core.designs.trie import EVENT_WORDS as TRIE_WORDS
from kvviz.core.designs.trie import LOG as TRIE_LOG
from kvviz.core.designs.trie import say_dropped, taken_from

NOUNS = Nouns(entry="block", entries="blocks", structure="hash map", removed="lazily evicted", free="free queue",
              step="op")


# -- the event log ----------------------------------------------------------------------------


def _log_cached(e: BlockCached, c: LogContext) -> str:
    copy = "" if e.duplicate_of is None else f" (a duplicate: page {e.duplicate_of} caches the key too)"
    return f"cached block {e.block} [{c.label(e.tokens)}] on page {e.page}, key {e.key[:8]}{copy}"


def _log_evicted(e: BlockEvicted, c: LogContext) -> str:
    still = "; another page still caches its key" if e.still_cached else ""
    return f"lazily evicted block {e.block} [{c.label(e.tokens)}] from page {e.page}{still}"


def _log_queued(e: PagesQueued, c: LogContext) -> str:
    parts = ([f"{pages_text(e.head)} to the free queue's head"] if e.head else []) + (
        [f"{pages_text(e.tail)} to its tail"] if e.tail else [])
    return "queued " + " and ".join(parts)


# -- sub-steps --------------------------------------------------------------------------------


def _ref(c: OpContext, e: ev.RefTaken):
    return (f"ref +1 on page {e.page} (block {e.node}): ref {e.ref}; it cannot be taken while referenced",
            Focus(pages=(e.page,), allocation=c.name(e.allocation)), {})


def _unref(c: OpContext, e: ev.RefDropped):
    after = "; it will join the free queue, still caching its block" if e.ref == 0 else ""
    return (f"ref -1 on page {e.page} (block {e.node}): ref {e.ref}{after}",
            Focus(pages=(e.page,), allocation=c.name(e.allocation)), {})


def _dequeue(c: OpContext, e: PageUnqueued):
    c.unqueued.add(e.page)
    return (f"page {e.page} (block {e.block}) leaves the free queue: it is matched, so nothing may take it",
            Focus(pages=(e.page,), allocation=c.name(e.allocation)), {})


def queue_place(c: OpContext, page: int) -> str:
    """``page``'s place in the free queue as it stands now (the op's matched pages out;
    pages whose blocks were dropped stay until taken), in the pool's numbering. The
    page is among those about to be taken from the head, so the walk stops early."""
    place = 0
    for p in c.queue:
        if p in c.unqueued:
            continue
        if p == page:
            return place_text(place, len(c.queue) - len(c.unqueued))
        place += 1
    return "not queued"  # pragma: no cover - kvcore drops blocks of queued pages only


def _drop(c: OpContext, e: BlockEvicted):
    still = "; another page still caches its key" if e.still_cached else ""
    return (f"page {e.page}, {queue_place(c, e.page)} in the free queue, is among the pages taken from its "
            f"head and still caches block {e.block} [{c.label(e.tokens)}]: "
            f"the block leaves the cache now, as the page is taken (lazy eviction){still}",
            Focus(pages=(e.page,), allocation=c.name(e.allocation)), {})


def _cache(c: OpContext, e: BlockCached):
    dup = (f"; page {e.duplicate_of} caches the same key already: vLLM keeps both"
           if e.duplicate_of is not None else "")
    return (f"cache block {e.block} [{c.label(e.tokens)}] under its chained key on page {e.page}{dup}",
            Focus(pages=(e.page,), allocation=c.name(e.allocation)), {})


def _queue(c: OpContext, e: PagesQueued):
    parts = []
    if e.head:
        parts.append(f"page{'s' if len(e.head) != 1 else ''} {', '.join(map(str, e.head))} (caching nothing) "
                     "to the free queue's head")
    if e.tail:
        parts.append(f"page{'s' if len(e.tail) != 1 else ''} {', '.join(map(str, e.tail))} to its tail, "
                     "last block first, still caching their blocks")
    return ("; ".join(parts) or "no page joins the free queue",
            Focus(pages=e.head + e.tail, allocation=c.name(e.allocation)), {})


def _like_trie(cls, **changes) -> EventWords:
    """The trie's row for ``cls`` with ``changes`` (its sub-step words in a hash cache's nouns)."""
    row = TRIE_WORDS[cls]
    return EventWords(**{"kind": row.kind, "log": row.log, "evicts": row.evicts, "notable": row.notable,
                         "substep": row.substep, "focus": row.focus, "kind_of": row.kind_of, **changes})


EVENT_WORDS = {
    ev.OpStarted: TRIE_WORDS[ev.OpStarted],
    ev.Ticked: TRIE_WORDS[ev.Ticked],
    ev.Matched: TRIE_WORDS[ev.Matched],
    ev.Failed: TRIE_WORDS[ev.Failed],
    ev.Released: TRIE_WORDS[ev.Released],
    ev.RefTaken: _like_trie(ev.RefTaken, substep=_ref, focus="the page, the allocation"),
    ev.RefDropped: _like_trie(ev.RefDropped, substep=_unref, focus="the page, the allocation"),
    ev.PagesTaken: _like_trie(ev.PagesTaken, substep=taken_from("the free queue's head"), log=TRIE_LOG[ev.PagesTaken]),
    PageUnqueued: EventWords("dequeue", lambda e, c: f"page {e.page} (block {e.block}) left the free queue: matched",
                             substep=_dequeue, focus="the matched page"),
    BlockEvicted: EventWords("drop", _log_evicted, evicts=True, substep=_drop, focus="the page taken"),
    BlockCached: EventWords("cache", _log_cached, substep=_cache, focus="the allocation's page"),
    PagesQueued: EventWords("queue", _log_queued, substep=_queue, focus="the queued pages"),
}
"""One row per kvcore event class a hash cache reports: the trie's where the words are the
same, its own where a page stands for a node, and its four events."""

STOPS = frozenset({"take", "drop", "cache", "fail", "refused"})
"""The sub-step kinds the stepper's "next notable" stops at."""

CLAUSES = {
    "no_full_page": "{tokens} make{s} no full block, nothing to match",
    "full": "full block",
    "took": "took {pages} from the free queue's head",
    "publish_nothing": "nothing new to cache (only full blocks are cached, and never twice)",
    "no_structure": "",
    "holder": "block",
    "no_policy": "evicts by its free queue",  # why it takes no eviction policy
}


def narrate_clauses(design: Design, op_kind: str, events: tuple, after, label: Labeler, units=TOKENS) -> list[str]:
    """The clauses of a hash cache's step: what matched, which pages left the free queue (and
    which cached blocks left with them), what was cached (duplicates said as such), where
    released pages joined the queue."""
    parts: list[str] = []
    unqueued = [e.page for e in events if isinstance(e, PageUnqueued)]
    evicted = [e for e in events if isinstance(e, BlockEvicted)]
    for e in events:
        if isinstance(e, ev.Matched) and op_kind == "acquire":
            full = e.total_tokens // after.tokens_per_page
            if full == 0:
                parts.append(design.clause("no_full_page", tokens=count(e.total_tokens, 'token'),
                                           s='s' if e.total_tokens == 1 else ''))
            else:
                parts.append(units.match(len(e.nodes), full, e.matched_tokens, e.total_tokens,
                                         design.clause("full")))
            if unqueued:
                parts.append(f"the matched {pages_text(unqueued)} left the free queue (ref 0 until now)")
        elif isinstance(e, ev.PagesTaken):
            parts.append(design.clause("took", pages=pages_text(e.pages)))
        elif isinstance(e, BlockCached):
            text = f"cached [{label(e.tokens)}] as block {e.block} on its own page {e.page}"
            if e.duplicate_of is not None:
                text += (f"; that key was already cached on page {e.duplicate_of}, and vLLM caches this copy "
                         f"too (no dedup: block tables never change), lookups keep using page {e.duplicate_of}")
            parts.append(text)
        elif isinstance(e, PagesQueued):
            if e.tail:
                parts.append(f"{pages_text(e.tail)} joined the free queue's tail, last block first: still cached, "
                             "matchable until reused")
            if e.head:
                parts.append(f"{pages_text(e.head)} (no cached block) joined its head, reused first")
    for e in evicted[:EVICTIONS_TOLD]:
        fate = ("another page still caches its key, so later requests still match it" if e.still_cached else
                "no page caches its key now")
        parts.append(f"page {e.page} still held block {e.block} [{label(e.tokens)}]: it left the cache now, "
                     f"lazily, as its page was reused; {fate}")
    rest = evicted[EVICTIONS_TOLD:]
    if rest:
        parts.append(f"then {count(len(rest), 'more block')} left with their pages (pages {some_pages(rest)}); "
                     f"{count(len(evicted), 'block')} evicted in all")
    if op_kind == "release":
        say_dropped(parts, events, "cached page")
    if op_kind == "publish" and not any(isinstance(e, BlockCached) for e in events):
        parts.append(design.clause("publish_nothing"))
    if op_kind == "extend" and not any(isinstance(e, ev.PagesTaken) for e in events):
        parts.append("its pages already had room")
    return parts


# -- pseudo-code ------------------------------------------------------------------------------

_HASH = block("""
def acquire(tokens, extra=0):                                   @acquire
    matched = the longest run of cached keys from block 0       @~lookup
    needed = pages_for(len(tokens) + extra) - len(matched)      @~needed
    if needed > len(queue) - queued(matched):                   @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, [b.page for b in matched])  @match
    for block in matched:                                       @~hits
        if ref[block.page] == 0: queue.remove(block.page)       @dequeue
        ref[block.page] += 1                                    @ref
    take(allocation, needed)                                    @~take-call
def extend(allocation, tokens, extra=0):                        @extend
    needed = pages_for(len(tokens) + extra) - len(pages)        @~extend-needed
    if needed > len(queue): raise CacheAllocationFailure        @extend-fail
    now = clock = clock + 1; allocation.tokens = tokens         @extend-tick
    take(allocation, needed)                                    @~extend-take
def take(allocation, needed):             # the queue's head    @~take-def
    for page in queue[:needed]:                                 @~head
        if page caches a block: uncache it  # lazy eviction     @drop
    allocation.pages += queue.popleft(needed)                   @take
def publish(allocation, tokens=None):                           @publish
    now = clock = clock + 1                                     @publish-tick
    for each newly full block i: key = sha256(parent, tokens)   @~blocks
        cache[key].append(allocation.pages[i])  # dups too      @cache
def release(allocation):                                        @release
    now = clock = clock + 1                                     @release-tick
    for page in reversed(allocation.pages):                     @~pages
        if page caches a block: ref[page] -= 1                  @unref
    queue: caching nothing -> head; ref 0 -> tail, last first   @queue
    allocation.released = True            # it holds nothing    @released
""")

ALGORITHMS = {"hash": parse("hash", "the hash-block cache (vLLM's design): chained block keys, one free queue",
                            "kvcore/hashblock.py HashBlockPagedAttentionCache", _HASH)}
"""The hash cache's one algorithm."""

CODE = Code(
    ALGORITHMS,
    {op: "hash" for op in ("acquire", "publish", "extend", "release")},  # one algorithm holds all of its ops
    {
        **rows("acquire", "hash", {
            "start": ("acquire",), "refused": ("acquire",), "fail": ("fits?", "fail"), "tick": ("tick",),
            "match": ("match",), "dequeue": ("dequeue",), "ref": ("ref",), "drop": ("drop",), "take": ("take",)}),
        **rows("extend", "hash", {
            "start": ("extend",), "refused": ("extend",), "fail": ("extend-fail",), "tick": ("extend-tick",),
            "drop": ("drop",), "take": ("take",)}),
        **rows("publish", "hash", {"start": ("publish",), "refused": ("publish",), "tick": ("publish-tick",),
                                   "cache": ("cache",)}),
        **rows("release", "hash", {
            "start": ("release",), "refused": ("release",), "tick": ("release-tick",), "unref": ("unref",),
            "queue": ("queue",), "release": ("released",)}),
    },
)
"""The hash cache's pseudo-code."""

DESIGN = Design(
    name="hash",
    title="kvcore's hash-block cache (vLLM's design)",
    nouns=NOUNS,
    events=EVENT_WORDS,
    clauses=CLAUSES,
    lazy=True,
    views=("blocks", "queue"),
    code=CODE,
    narrate=narrate_clauses,
    stops=STOPS,
    rows="blocks",
    cache_options=frozenset({"recompute_last_token"}),
    questions=("queue_drop", "hash_hits", "hash_table"),
)
"""The hash design."""

__all__ = ["ALGORITHMS", "CLAUSES", "CODE", "DESIGN", "EVENT_WORDS", "NOUNS", "STOPS", "narrate_clauses",
           "queue_place"]
