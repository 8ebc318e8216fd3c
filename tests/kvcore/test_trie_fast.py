# SPDX-License-Identifier: Apache-2.0
"""kvcore/trie_fast.py (the unrecorded hot path) against its contract, the readable acquire and
eviction in kvcore/trie.py (which run while a cache records events).

Two caches take the same random operations, one unrecorded (the fast path) and one recording
(the readable path): every operation must return the same pages or fail with the same error,
and leave the same snapshot (nodes, heap array, counters, clock). Small pools, so acquires
evict in cascades and some fail.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import POLICIES, KVCacheError, PagePool, TriePagedAttentionCache

# A few shared prefixes over a small alphabet: matches, dedups and cascades are common.
tokens_st = st.lists(st.integers(0, 3), max_size=10)

op_st = st.one_of(
    st.tuples(st.just("acquire"), tokens_st, st.integers(0, 3), st.sampled_from([0, 0, 1, 5])),
    st.tuples(st.just("publish"), st.integers(0, 7)),
    st.tuples(st.just("extend"), st.integers(0, 7), tokens_st, st.integers(0, 2)),
    st.tuples(st.just("release"), st.integers(0, 7)),
)


def apply(cache: TriePagedAttentionCache, held: list, op: tuple):
    """Run ``op`` on ``cache`` (allocations picked by index into ``held``); what it returned
    or the error it raised, as a comparable value."""
    try:
        if op[0] == "acquire":
            _, tokens, extra, priority = op
            allocation = cache.acquire_pages_for_tokens(tokens, extra, priority=priority)
            held.append(allocation)
            return "acquired", allocation.id, allocation.pages
        if not held:
            return "nothing held"
        allocation = held[op[1] % len(held)]
        if op[0] == "publish":
            allocation.publish_pages_for_tokens()
        elif op[0] == "extend":
            allocation.extend_allocation(allocation.tokens + tuple(op[2]), op[3])
        else:
            allocation.release_pages()
            held.remove(allocation)
        return op[0], allocation.pages if not allocation.released else ()
    except KVCacheError as e:
        return type(e).__name__, str(e)


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(POLICIES), pages=st.integers(3, 12), tokens_per_page=st.integers(1, 2),
       ops=st.lists(op_st, max_size=40))
def test_the_fast_path_leaves_what_the_readable_path_leaves_after_every_operation(policy, pages, tokens_per_page, ops):
    fast = TriePagedAttentionCache(PagePool(pages), tokens_per_page, policy)
    readable = TriePagedAttentionCache(PagePool(pages), tokens_per_page, policy)
    readable.record_events()
    fast_held: list = []
    readable_held: list = []
    for op in ops:
        assert apply(fast, fast_held, op) == apply(readable, readable_held, op), op
        assert fast.snapshot() == readable.snapshot(), op
    assert fast.check_invariants() == []
