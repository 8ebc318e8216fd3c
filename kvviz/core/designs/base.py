# SPDX-License-Identifier: Apache-2.0
"""kvcore's base cache as a design: pages per request, nothing shared, nothing evictable.

It speaks the trie's words (its events are a subset of the trie's: :data:`.trie.EVENT_WORDS`)
except where it shares nothing: a match is "no sharing in the base cache", a publish only
advances the clock, and the views of a trie and a heap say it has neither. Its pseudo-code is
one short algorithm holding its acquire, publish and release (the trie's lines, walk, heap
and nodes, do not apply), and kvcore's one extend, shared with the trie.

Narration clauses: the trie's (:mod:`.trie`), ``unshared_match`` (``tokens``, counted): an
acquire's match, and ``why_unshared``: why a match found nothing, in a why-answer.
"""

from __future__ import annotations

from kvviz.core.designs import Design, Nouns
from kvviz.backends.code import Code, block, parse, rows
from kvviz.core.designs.trie import ALGORITHMS as TRIE_ALGORITHMS
from kvviz.core.designs.trie import CLAUSES as TRIE_CLAUSES
from kvviz.core.designs.trie import EVENT_WORDS, EXTEND_ROWS, STOPS, narrate_clauses

NOUNS = Nouns(entry="page", entries="pages", structure="pool", removed="evicted", free="free list", step="op")

CLAUSES = {
    **TRIE_CLAUSES,
    "unshared_match": "no sharing in the base cache ({tokens})",
    "publish_nothing": "the base cache shares nothing, so publish only advances the clock",
    "no_structure": "(base cache: no trie, nothing is shared)",
    "no_policy": "never evicts",  # why it takes no eviction policy
    "why_unshared": "The base cache never shares pages: every request starts from nothing.",
}

_BASE = block("""
def acquire(tokens, extra=0):             # extra token slots  @acquire
    tokens = tuple(tokens)                # our own copy        @~copy
    needed = pages_for(len(tokens) + extra)                     @~needed
    if needed > free_list.count():        # nothing evictable   @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, pages=[])  # hit 0: no sharing  @match
    allocation.pages += free_list.take(needed)                  @take
    return allocation                                           @~return
def publish(allocation, tokens=None):                           @publish
    check it is live; longer tokens must fit in its pages       @publish-check
    allocation.tokens = the longer of tokens and its own        @~publish-store
    now = clock = clock + 1               # and nothing else    @publish-tick
def release(allocation):                                        @release
    check it is live                                            @release-check
    now = clock = clock + 1                                     @release-tick
    free_list.give(allocation.pages)      # every page          @free
    allocation.released = True            # it holds nothing    @released
""")

ALGORITHMS = {
    "base": parse("base", "the base cache: pages per request, nothing shared", "kvcore/base.py BasePagedAttentionCache",
                  _BASE),
    "extend": TRIE_ALGORITHMS["extend"],  # kvcore's one extend for both caches
}
"""The base cache's algorithms, by name."""

CODE = Code(
    ALGORITHMS,
    {"acquire": "base", "publish": "base", "release": "base", "extend": "extend"},
    {
        **rows("acquire", "base", {"start": ("acquire",), "refused": ("acquire",), "fail": ("fits?", "fail"),
                                   "tick": ("tick",), "match": ("match",), "take": ("take",)}),
        **rows("publish", "base", {"start": ("publish",), "refused": ("publish", "publish-check"),
                                   "tick": ("publish-tick",)}),
        **rows("release", "base", {"start": ("release",), "refused": ("release", "release-check"),
                                   "tick": ("release-tick",), "free": ("free",), "release": ("released",)}),
        **rows("extend", "extend", EXTEND_ROWS),
    },
)
"""The base cache's pseudo-code."""

DESIGN = Design(
    name="base",
    title="kvcore's base cache: no sharing",
    nouns=NOUNS,
    events=EVENT_WORDS,
    clauses=CLAUSES,
    shares=False,
    views=("trie", "heap"),
    code=CODE,
    narrate=narrate_clauses,
    stops=STOPS,
    questions=("base_free", "base_table", "base_fail"),
)
"""The base design."""

__all__ = ["ALGORITHMS", "CLAUSES", "CODE", "DESIGN", "NOUNS"]
