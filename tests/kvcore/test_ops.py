# SPDX-License-Identifier: Apache-2.0
"""Unit tests, one behaviour each, of the operations of both caches (DESIGN.md, "Trie
semantics" and the API contract): acquire, publish, extend, release, the clock, events,
``cache.allocations`` and the page pool."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcore import BasePagedAttentionCache, CacheAllocationFailure, PagePool, TriePagedAttentionCache
from kvcore import events as ev


_caches: list = []  # every cache a test made; each must end healthy


def trie(page_count: int = 8, tokens_per_page: int = 4) -> TriePagedAttentionCache:
    _caches.append(TriePagedAttentionCache(PagePool(page_count), tokens_per_page))
    return _caches[-1]


def base(page_count: int = 8, tokens_per_page: int = 4) -> BasePagedAttentionCache:
    _caches.append(BasePagedAttentionCache(PagePool(page_count), tokens_per_page))
    return _caches[-1]


def r(first: int, last: int) -> list[int]:
    """Tokens ``first..last`` inclusive."""
    return list(range(first, last + 1))


def publish_and_release(cache, tokens) -> tuple[int, ...]:
    allocation = cache.acquire_pages_for_tokens(tokens)
    allocation.publish_pages_for_tokens()
    pages = allocation.pages
    allocation.release_pages()
    return pages


def node(cache, tokens):
    """The snapshot node holding exactly these tokens (unique in these tests), or None."""
    found = [n for n in cache.snapshot().nodes if n.parent is not None and n.tokens == tuple(tokens)]
    return found[0] if found else None


@pytest.fixture(autouse=True)
def _caches_end_healthy():
    """After each test, every cache it made must pass ``check_invariants()``."""
    _caches.clear()
    yield
    for cache in _caches:
        assert cache.check_invariants() == []


# ------------------------------------------------------------------------- page pool


def test_a_fresh_pool_hands_out_pages_in_index_order():
    pool = PagePool(5)
    assert (pool.available_page_count(), pool.total_page_count()) == (5, 5)
    assert pool.free_pages() == (0, 1, 2, 3, 4)


def test_a_negative_page_count_is_rejected():
    with pytest.raises(ValueError):
        PagePool(-1)


def test_freed_pages_are_reused_only_after_every_page_freed_before_them():
    cache = trie(page_count=4)
    a = cache.acquire_pages_for_tokens(r(1, 8))  # pages 0, 1
    b = cache.acquire_pages_for_tokens(r(11, 14))  # page 2
    b.release_pages()
    a.release_pages()
    assert cache.snapshot().free == (3, 2, 0, 1)
    assert cache.acquire_pages_for_tokens(r(21, 32)).pages == (3, 2, 0)


# ------------------------------------------------------------------------- acquire


def test_acquire_on_an_empty_cache_takes_pages_from_the_front_of_the_free_list():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 9))
    assert a.pages == (0, 1, 2)
    assert (a.hit_tokens, a.published) == (0, 0)
    assert cache.page_pool.available_page_count() == 5


def test_acquire_of_no_tokens_takes_no_page():
    cache = trie()
    a = cache.acquire_pages_for_tokens([])
    assert a.pages == () and a.tokens == ()
    assert cache.page_pool.available_page_count() == 8


def test_extra_token_slots_reserve_pages_for_decoding():
    cache = trie()
    assert len(cache.acquire_pages_for_tokens(r(1, 3), 2).pages) == 2  # 5 slots
    assert len(cache.acquire_pages_for_tokens(r(1, 3), 1).pages) == 1  # 4 slots
    assert len(cache.acquire_pages_for_tokens([], 9).pages) == 3


def test_acquire_matches_the_longest_chain_of_cached_full_pages():
    cache = trie()
    assert publish_and_release(cache, r(1, 8)) == (0, 1)
    a = cache.acquire_pages_for_tokens(r(1, 10))
    assert a.pages == (0, 1, 2)
    assert (a.hit_tokens, a.published) == (8, 2)


def test_acquire_stops_matching_at_the_first_page_that_differs():
    cache = trie()
    publish_and_release(cache, r(1, 12))
    a = cache.acquire_pages_for_tokens(r(1, 4) + [0, 6, 7, 8] + r(9, 12))
    assert a.pages == (0, 3, 4)  # the third page matches a cached block, but not on this path
    assert a.hit_tokens == 4


def test_acquire_with_no_match_takes_only_new_pages():
    cache = trie()
    publish_and_release(cache, r(1, 4))
    a = cache.acquire_pages_for_tokens(r(5, 8))
    assert a.pages == (1,) and a.hit_tokens == 0


def test_acquire_never_matches_a_partial_page():
    cache = trie()
    publish_and_release(cache, r(1, 6))  # only 1..4 is cached; the page of 5 6 was freed
    a = cache.acquire_pages_for_tokens(r(1, 6))
    assert a.hit_tokens == 4
    assert a.pages == (0, 2)


def test_an_acquire_that_matches_every_full_page_needs_no_new_page():
    cache = trie(page_count=2)
    publish_and_release(cache, r(1, 8))
    a = cache.acquire_pages_for_tokens(r(1, 8))
    assert a.pages == (0, 1)
    assert cache.page_pool.available_page_count() == 0


def test_acquire_references_and_touches_every_matched_node():
    cache = trie()
    publish_and_release(cache, r(1, 8))
    cache.acquire_pages_for_tokens(r(1, 8))
    cache.acquire_pages_for_tokens(r(1, 4))
    snap = cache.snapshot()
    assert [(n.tokens, n.ref) for n in snap.nodes[1:]] == [(tuple(r(1, 4)), 2), (tuple(r(5, 8)), 1)]
    assert node(cache, r(1, 4)).last_access == snap.clock
    assert node(cache, r(5, 8)).last_access == snap.clock - 1


def test_acquire_takes_free_pages_before_evicting():
    cache = trie(page_count=3)
    publish_and_release(cache, r(1, 4))  # page 0 cached and evictable
    a = cache.acquire_pages_for_tokens(r(11, 18))
    assert a.pages == (1, 2)
    assert node(cache, r(1, 4)) is not None
    assert cache.snapshot().stats.evictions == 0


def test_eviction_takes_the_least_recently_used_candidate():
    cache = trie(page_count=3)
    for first in (1, 5, 9):
        publish_and_release(cache, r(first, first + 3))  # pages 0, 1, 2
    cache.acquire_pages_for_tokens(r(1, 4)).release_pages()  # refresh 1..4
    cache.acquire_pages_for_tokens(r(5, 8)).release_pages()  # refresh 5..8
    a = cache.acquire_pages_for_tokens(r(101, 104))
    assert a.pages == (2,)
    assert node(cache, r(9, 12)) is None
    assert cache.snapshot().stats.evictions == 1


def test_eviction_cascades_up_a_chain_leaf_first():
    cache = trie(page_count=3)
    publish_and_release(cache, r(1, 12))  # chain 1..4 -> 5..8 -> 9..12 on pages 0, 1, 2
    assert len(cache.snapshot().heap) == 1  # only the leaf is a candidate
    cache.record_events(True)
    a = cache.acquire_pages_for_tokens(r(101, 112))
    assert a.pages == (2, 1, 0)
    evicted = [e for e in cache.take_events() if isinstance(e, ev.Evicted)]
    assert [(e.node, e.parent_became_candidate) for e in evicted] == [(3, 2), (2, 1), (1, None)]
    assert [e.next_node for e in evicted] == [2, 1, None]
    assert cache.snapshot().nodes[1:] == ()


def test_acquire_never_evicts_the_nodes_it_matched():
    cache = trie(page_count=3)
    publish_and_release(cache, r(1, 4))  # page 0
    publish_and_release(cache, r(5, 8))  # page 1
    a = cache.acquire_pages_for_tokens(r(1, 4) + r(21, 28))  # 1..4 matched + 2 new pages
    assert a.pages == (0, 2, 1)
    assert node(cache, r(1, 4)).ref == 1 and node(cache, r(5, 8)) is None


def test_acquire_stores_a_copy_of_the_callers_tokens():
    cache = trie()
    tokens = r(1, 5)
    a = cache.acquire_pages_for_tokens(tokens)
    tokens.append(6)
    assert a.tokens == tuple(r(1, 5))
    assert isinstance(a.tokens, tuple)


def test_allocation_ids_count_successful_acquires_in_order():
    cache = trie(page_count=2)
    first = cache.acquire_pages_for_tokens([1])
    with pytest.raises(CacheAllocationFailure):
        cache.acquire_pages_for_tokens(r(1, 12))  # fails: consumes no id
    second = cache.acquire_pages_for_tokens([2], name="decode")
    assert (first.id, second.id) == (0, 1)
    assert (first.name, second.name) == (None, "decode")
    assert cache.snapshot().allocation_named("decode").id == 1


def test_cache_allocations_maps_ids_to_the_live_allocations():
    cache = trie()
    a = cache.acquire_pages_for_tokens([1])
    b = cache.acquire_pages_for_tokens([2])
    assert cache.allocations == {0: a, 1: b}
    a.release_pages()
    assert cache.allocations == {1: b}


# ------------------------------------------------------------------------- publish


def test_publish_creates_one_node_per_full_page_in_token_order():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    snap = cache.snapshot()
    assert [(n.id, n.parent, n.tokens, n.page, n.ref, n.seq) for n in snap.nodes] == [
        (0, None, (), None, 0, 0),
        (1, 0, (1, 2, 3, 4), 0, 1, 1),
        (2, 1, (5, 6, 7, 8), 1, 1, 2),
    ]
    assert a.published == 2
    assert [n.last_access for n in snap.nodes[1:]] == [2, 2]


def test_publish_never_shares_a_partial_page():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 7))
    a.publish_pages_for_tokens()
    assert a.published == 1
    snap = cache.snapshot()
    assert len(snap.nodes) == 2
    assert snap.pages[1].state == "owned" and snap.pages[1].owner == a.id


def test_publish_deduplicates_a_block_another_allocation_published_first():
    cache = trie(page_count=6)
    x = cache.acquire_pages_for_tokens(r(1, 8))
    y = cache.acquire_pages_for_tokens(r(1, 8) + [9])
    assert (x.pages, y.pages) == ((0, 1), (2, 3, 4))
    x.publish_pages_for_tokens()
    y.publish_pages_for_tokens()
    assert y.pages == (0, 1, 4)  # adopted x's pages; the partial page stays its own
    snap = cache.snapshot()
    assert snap.free == (5, 2, 3)  # its copies went back, in order
    assert [n.ref for n in snap.nodes[1:]] == [2, 2]
    assert snap.stats.dedups == 2


def test_publish_under_a_matched_prefix_extends_the_chain():
    cache = trie()
    publish_and_release(cache, r(1, 4))
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    snap = cache.snapshot()
    leaf = node(cache, r(5, 8))
    assert leaf.parent == node(cache, r(1, 4)).id and leaf.page == a.pages[1] == 1
    assert a.published == 2 and snap.heap == ()


def test_publish_with_shorter_tokens_publishes_only_their_full_pages():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 12))
    a.publish_pages_for_tokens(r(1, 6))
    assert a.published == 1
    assert a.tokens == tuple(r(1, 12))  # shorter tokens do not truncate the allocation
    a.publish_pages_for_tokens(r(1, 8))
    assert a.published == 2


def test_publish_with_longer_tokens_after_decode_replaces_the_tokens():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 3), extra_token_slots=5)  # 8 slots in 2 pages
    a.publish_pages_for_tokens(r(1, 8))  # decode wrote 4..8 into the extra slots
    assert a.tokens == tuple(r(1, 8))
    assert a.published == 2 and a.pages == (0, 1)
    assert cache.acquire_pages_for_tokens(r(1, 8)).hit_tokens == 8


def test_publishing_fewer_pages_than_published_only_touches_those_pages():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    a.publish_pages_for_tokens(r(1, 4))
    snap = cache.snapshot()
    assert a.published == 2 and snap.next_seq == 3
    assert (node(cache, r(1, 4)).last_access, node(cache, r(5, 8)).last_access) == (3, 2)


def test_republishing_touches_the_walked_nodes():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    a.publish_pages_for_tokens()
    assert [n.last_access for n in cache.snapshot().nodes[1:]] == [3, 3]


# ------------------------------------------------------------------------- extend


def test_extend_adds_pages_for_the_new_tokens_and_extra_slots():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 4))
    a.extend_allocation(r(1, 5))
    assert a.pages == (0, 1) and a.tokens == tuple(r(1, 5))
    a.extend_allocation(r(1, 5), extra_token_slots=4)
    assert a.pages == (0, 1, 2)


def test_extend_within_the_allocations_capacity_adds_no_page():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 2), extra_token_slots=6)
    a.extend_allocation(r(1, 8))
    assert a.pages == (0, 1)
    a.extend_allocation(r(1, 8))  # same tokens: allowed, no change but the clock
    assert a.pages == (0, 1) and cache.clock == 3


def test_extend_never_shrinks_an_allocation():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 2), extra_token_slots=10)
    a.extend_allocation(r(1, 3))
    assert a.pages == (0, 1, 2)


def test_extend_evicts_other_candidates_when_no_page_is_free():
    cache = trie(page_count=3)
    publish_and_release(cache, r(1, 4))  # page 0, evictable
    a = cache.acquire_pages_for_tokens(r(11, 18))  # pages 1, 2
    a.extend_allocation(r(11, 19))
    assert a.pages == (1, 2, 0)
    assert node(cache, r(1, 4)) is None


def test_extend_never_evicts_the_allocations_own_published_pages():
    cache = trie(page_count=3)
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    publish_and_release(cache, r(11, 14))  # page 2, the only candidate
    a.extend_allocation(r(1, 9))
    assert a.pages == (0, 1, 2)
    assert node(cache, r(1, 4)).ref == 1 and node(cache, r(5, 8)).ref == 1


def test_extend_does_not_touch_trie_nodes():
    cache = trie()
    publish_and_release(cache, r(1, 4))
    a = cache.acquire_pages_for_tokens(r(1, 4))
    touched = node(cache, r(1, 4)).last_access
    a.extend_allocation(r(1, 12))
    assert node(cache, r(1, 4)).last_access == touched


# ------------------------------------------------------------------------- release


def test_released_pages_of_the_unpublished_tail_return_to_the_pool_in_block_table_order():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 5), extra_token_slots=7)  # pages 0, 1, 2
    a.publish_pages_for_tokens()  # 1..4 published on page 0
    a.release_pages()
    snap = cache.snapshot()
    assert snap.free == (3, 4, 5, 6, 7, 1, 2)
    assert snap.pages[0].state == "cached"


def test_release_drops_the_references_of_the_published_path():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens(r(1, 4))
    a.release_pages()
    assert (node(cache, r(1, 4)).ref, node(cache, r(5, 8)).ref) == (1, 0)
    assert cache.snapshot().heap == (node(cache, r(5, 8)).id,)
    b.release_pages()
    assert node(cache, r(1, 4)).ref == 0
    assert cache.snapshot().heap == (node(cache, r(5, 8)).id,)  # 1..4 still has a child


def test_release_does_not_touch_last_access():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 4))
    a.publish_pages_for_tokens()
    a.release_pages()
    assert node(cache, r(1, 4)).last_access == 2 and cache.clock == 3


def test_a_released_allocation_holds_nothing():
    cache = trie()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    a.release_pages()
    assert a.released and a.pages == () and a.published == 0
    assert a.id not in cache.allocations
    assert cache.snapshot().allocations == ()


# ------------------------------------------------------------------------- base cache


def test_base_cache_acquire_takes_ceil_slots_over_page_size_pages_and_shares_nothing():
    cache = base()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens(r(1, 8), extra_token_slots=1)
    assert (a.pages, b.pages) == ((0, 1), (2, 3, 4))
    assert (b.hit_tokens, b.published) == (0, 0)
    snap = cache.snapshot()
    assert (snap.kind, snap.nodes, snap.heap) == ("base", (), ())


def test_base_cache_publish_only_advances_the_clock():
    cache = base()
    a = cache.acquire_pages_for_tokens(r(1, 8))
    before = cache.snapshot()
    a.publish_pages_for_tokens()
    after = cache.snapshot()
    assert after == replace(before, clock=before.clock + 1)


def test_base_cache_release_frees_every_page():
    cache = base()
    a = cache.acquire_pages_for_tokens(r(1, 9))
    a.publish_pages_for_tokens()
    a.release_pages()
    assert cache.snapshot().free == (3, 4, 5, 6, 7, 0, 1, 2)


def test_base_cache_extend_adds_pages():
    cache = base(page_count=3)
    a = cache.acquire_pages_for_tokens(r(1, 4))
    a.extend_allocation(r(1, 9))
    assert a.pages == (0, 1, 2)


# ------------------------------------------------------------------------- clock


@pytest.mark.parametrize("make", [trie, base])
def test_every_successful_operation_advances_the_clock_by_one(make):
    cache = make()
    a = cache.acquire_pages_for_tokens(r(1, 4))
    assert cache.clock == 1
    a.publish_pages_for_tokens()
    assert cache.clock == 2
    a.extend_allocation(r(1, 5))
    assert cache.clock == 3
    a.release_pages()
    assert cache.clock == 4
    assert cache.snapshot().clock == 4


# ------------------------------------------------------------------------- events


def without_reasons(events):
    return [replace(e, reason="") if isinstance(e, ev.Matched) else e for e in events]


def test_events_are_not_recorded_unless_asked():
    cache = trie()
    cache.acquire_pages_for_tokens(r(1, 4))
    assert cache.take_events() == ()


def test_events_tell_an_acquire_publish_release_and_an_evicting_acquire_in_order():
    cache = trie(page_count=3, tokens_per_page=2)
    cache.record_events(True)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4])
    assert without_reasons(cache.take_events()) == [
        ev.OpStarted("acquire", 0, 1),
        ev.Matched(0, (), (), 0, 4, ""),
        ev.PagesTaken(0, (0, 1)),
    ]
    a.publish_pages_for_tokens()
    assert cache.take_events() == (
        ev.OpStarted("publish", 0, 2),
        ev.NodeCreated(0, 1, 0, 0, (1, 2)),
        ev.NodeCreated(0, 2, 1, 1, (3, 4)),
    )
    a.release_pages()
    assert cache.take_events() == (
        ev.OpStarted("release", 0, 3),
        ev.RefDropped(0, 2, 1, 0),
        ev.CandidateAdded(2, 1, (2, 2)),
        ev.RefDropped(0, 1, 0, 0),
        ev.Released(0),
    )
    b = cache.acquire_pages_for_tokens([1, 2, 9, 9, 9, 9])
    events = cache.take_events()
    assert without_reasons(events) == [
        ev.OpStarted("acquire", 1, 4),
        ev.Matched(1, (1,), (0,), 2, 6, ""),
        ev.RefTaken(1, 1, 0, 1),
        ev.Touched((1,), 4),
        ev.PagesTaken(1, (2,)),
        ev.Evicted(1, 2, 1, (3, 4), (2, 2), None, None, None),
    ]
    assert "9 9" in events[1].reason  # why the match stopped: the page that was not found
    assert b.pages == (0, 2, 1)


def test_events_tell_a_dedup_and_the_page_it_freed():
    cache = trie(page_count=3, tokens_per_page=2)
    x = cache.acquire_pages_for_tokens([1, 2])
    y = cache.acquire_pages_for_tokens([1, 2, 3])
    x.publish_pages_for_tokens()
    cache.record_events(True)
    y.publish_pages_for_tokens()
    assert cache.take_events() == (
        ev.OpStarted("publish", 1, 4),
        ev.Deduplicated(1, 1, 0, 1, 0),
        ev.RefTaken(1, 1, 0, 2),
        ev.PagesFreed(1, (1,), "dedup"),
    )
    y.release_pages()
    assert cache.take_events() == (
        ev.OpStarted("release", 1, 5),
        ev.RefDropped(1, 1, 0, 1),
        ev.PagesFreed(1, (2,), "release"),
        ev.Released(1),
    )


def test_events_round_trip_through_dicts():
    cache = trie(page_count=2, tokens_per_page=2)
    cache.record_events(True)
    publish_and_release(cache, [1, 2])
    cache.acquire_pages_for_tokens([5, 6, 7, 8])
    events = cache.take_events()
    assert any(isinstance(e, ev.Evicted) for e in events)
    assert tuple(ev.event_from_dict(ev.event_to_dict(e)) for e in events) == events
