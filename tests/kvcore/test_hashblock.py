# SPDX-License-Identifier: Apache-2.0
"""The hash-block cache (vLLM's design) by hand: scenarios, one at a time.

Pages are small (2 tokens) so a block is two numbers; ``A``, ``B``, ... name blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import kvcore
from kvcore import (CacheAllocationFailure, HashBlockPagedAttentionCache, InvalidConfiguration, PagePool, Snapshot,
                    check_snapshot)
from kvcore import events as ev

ROOT = Path(__file__).resolve().parents[2]

A, B, C, X, Y = (1, 1), (2, 2), (3, 3), (8, 8), (9, 9)


def cache(pages: int = 6) -> HashBlockPagedAttentionCache:
    c = kvcore.make_cache("hash", pages, 2)
    c.record_events(True)
    return c


def run(c, *blocks, extra: int = 0, publish: bool = True):
    """One request: acquire the blocks' tokens, publish, release. What it held."""
    a = c.acquire_pages_for_tokens([t for b in blocks for t in b], extra)
    if publish:
        a.publish_pages_for_tokens()
    held = SimpleNamespace(pages=a.pages)
    a.release_pages()
    return held


def block_on(c, page):
    return c.snapshot().block_for_page(page)


def events_of(c, kind):
    return [e for e in c.take_events() if isinstance(e, kind)]


# -- lazy eviction ---------------------------------------------------------------------------


def test_a_released_cached_page_is_free_and_cached_at_once_until_its_page_is_reused():
    c = cache(3)
    first = run(c, A)
    page = first.pages[0]
    snap = c.snapshot()
    assert page in snap.free  # free: the next acquires may take it
    assert snap.pages[page].state == "cached" and snap.pages[page].ref == 0  # and still cached
    assert snap.evictable_count == 1
    again = c.acquire_pages_for_tokens(list(A))  # still matchable: nothing was evicted
    assert (again.pages, again.hit_tokens) == ((page,), 2)
    assert c.snapshot().stats.evictions == 0


def test_the_block_leaves_the_cache_only_when_its_page_is_taken_from_the_head():
    c = cache(3)
    page = run(c, A).pages[0]  # queue: the two untouched pages, then A's page at the tail
    c.take_events()
    held = c.acquire_pages_for_tokens([5, 5, 6, 6])  # takes the two untouched pages
    assert block_on(c, page) is not None and page not in held.pages
    assert events_of(c, ev.BlockEvicted) == []
    c.acquire_pages_for_tokens([7, 7])  # the queue's head is A's page now
    (evicted,) = events_of(c, ev.BlockEvicted)
    assert (evicted.page, evicted.tokens, evicted.still_cached) == (page, A, False)
    assert block_on(c, page) is None and c.snapshot().stats.evictions == 1
    assert c.snapshot().blocks == ()


# -- the free queue's order ------------------------------------------------------------------


def test_release_puts_cached_pages_at_the_tail_last_block_first():
    c = cache(6)
    a = run(c, A, B, C)
    assert c.snapshot().free[-3:] == (a.pages[2], a.pages[1], a.pages[0])
    (queued,) = [e for e in c.take_events() if isinstance(e, ev.PagesQueued)]
    assert (queued.head, queued.tail) == ((), tuple(reversed(a.pages)))


def test_release_puts_pages_holding_no_cached_block_at_the_head():
    c = cache(6)
    a = run(c, A, B, extra=3, publish=True)  # 2 cached pages + 2 pages of extra slots, never cached
    free = c.snapshot().free
    tail_pages = a.pages[2:]
    assert free[:2] == (tail_pages[1], tail_pages[0])  # the head, last block first (vLLM's prepend_n)
    assert free[-2:] == (a.pages[1], a.pages[0])
    assert c.acquire_pages_for_tokens([5, 5]).pages == (tail_pages[1],)  # uncached pages are reused first


def test_an_unpublished_request_gives_all_its_pages_to_the_head():
    c = cache(4)
    a = run(c, A, B, publish=False)
    assert c.snapshot().free[:2] == (a.pages[1], a.pages[0])
    assert c.snapshot().blocks == ()


def test_a_match_takes_the_page_out_of_the_queue_before_new_pages_are_taken():
    c = cache(2)
    page = run(c, A).pages[0]  # queue: [the other page, A's page]
    c.take_events()
    a = c.acquire_pages_for_tokens([1, 1, 4, 4])  # matches A, needs one page: the other one
    assert a.pages[0] == page and c.snapshot().free == ()
    kinds = [type(e) for e in c.take_events()]
    assert kinds.index(ev.PageUnqueued) < kinds.index(ev.PagesTaken)


# -- acquire's capacity ----------------------------------------------------------------------


def test_acquire_fails_with_no_change_when_the_queue_minus_its_matched_pages_is_too_short():
    c = cache(3)
    run(c, A, B)  # queue: [untouched page, B's page, A's page]
    before = c.snapshot()
    c.take_events()
    with pytest.raises(CacheAllocationFailure) as info:
        c.acquire_pages_for_tokens([1, 1, 2, 2, 5, 5, 6, 6])  # matches A and B, needs 2 more: 1 is left
    assert c.snapshot() == before and c.take_events() == ()
    e = info.value
    assert (e.needed, e.free, e.evictable, e.held) == (2, 1, 0, 2)
    assert "only because this request matched them" in str(e)
    assert c.acquire_pages_for_tokens([1, 1, 2, 2, 5, 5]).hit_tokens == 4  # one more page fits


# -- duplicates ------------------------------------------------------------------------------


def test_publishing_a_key_already_cached_caches_a_duplicate_as_vllm_does():
    c = cache(6)
    first = c.acquire_pages_for_tokens(list(A + B))
    second = c.acquire_pages_for_tokens(list(A + B))  # both computed A B before either published
    first.publish_pages_for_tokens()
    c.take_events()
    second.publish_pages_for_tokens()
    cached = events_of(c, ev.BlockCached)
    assert [e.duplicate_of for e in cached] == list(first.pages)
    snap = c.snapshot()
    assert [snap.block_for_page(p).key for p in first.pages] == [snap.block_for_page(p).key for p in second.pages]
    assert snap.stats.dedups == 2 and second.pages != first.pages  # block tables stay append-only
    third = c.acquire_pages_for_tokens(list(A + B))
    assert third.pages == first.pages  # lookups return the copy cached first


def test_a_duplicate_keeps_its_key_cached_after_the_first_copy_is_evicted():
    c = cache(4)
    first = c.acquire_pages_for_tokens(list(A))
    second = c.acquire_pages_for_tokens(list(A))
    first.publish_pages_for_tokens()
    second.publish_pages_for_tokens()
    first_page, second_page = first.pages[0], second.pages[0]
    first.release_pages()  # queue: [2 untouched, first's page]
    second.release_pages()  # queue: [2 untouched, first's page, second's page]
    c.take_events()
    c.acquire_pages_for_tokens([5, 5, 6, 6, 7, 7])  # takes the untouched pages and first's copy
    (evicted,) = events_of(c, ev.BlockEvicted)
    assert (evicted.page, evicted.still_cached) == (first_page, True)
    assert c.acquire_pages_for_tokens(list(A)).pages == (second_page,)  # the duplicate serves the key now


# -- unreachable blocks ----------------------------------------------------------------------


def _parent_queued_before_child():
    """A cached chain A B, released, with the free queue reordered so A's page comes before
    B's. The ops never produce this order (a parent is released with or after its children,
    and behind them; see test_hash_stateful); vLLM's sliding windows and hit caps can, and
    a restored or adapted snapshot can hold it."""
    c = kvcore.make_cache("hash", 5, 2)
    chain = run(c, A, B)
    d = c.snapshot().to_dict()
    untouched = [p for p in d["free"] if p not in chain.pages]
    d["free"] = [chain.pages[0]] + untouched + [chain.pages[1]]
    restored = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
    restored.record_events(True)
    return restored, chain.pages


def test_a_parent_evicted_before_its_child_leaves_the_child_cached_but_unreachable():
    c, (page_a, page_b) = _parent_queued_before_child()
    c.acquire_pages_for_tokens([5, 5])  # takes A's page from the head: A leaves the cache
    snap = c.snapshot()
    (child,) = snap.blocks
    assert (child.page, child.tokens, child.reachable) == (page_b, B, False)
    assert snap.pages[page_b].state == "cached"
    assert c.acquire_pages_for_tokens(list(A + B)).hit_tokens == 0  # nothing matches: the chain broke at A
    assert c.check_invariants() == []


def test_caching_the_parent_again_makes_the_old_child_reachable_and_the_new_one_a_duplicate():
    c, (page_a, page_b) = _parent_queued_before_child()
    c.acquire_pages_for_tokens([5, 5])
    again = c.acquire_pages_for_tokens(list(A + B))
    c.take_events()
    again.publish_pages_for_tokens()
    cached = events_of(c, ev.BlockCached)
    assert [e.duplicate_of for e in cached] == [None, page_b]  # A is new; B's key was still cached
    assert all(b.reachable for b in c.snapshot().blocks)
    assert c.acquire_pages_for_tokens(list(A + B)).pages == (again.pages[0], page_b)  # the old copy serves B


# -- configuration, keys, sizes --------------------------------------------------------------


def test_make_cache_builds_a_hash_cache_and_refuses_any_policy_but_lru():
    assert isinstance(kvcore.make_cache("hash", 4, 2), HashBlockPagedAttentionCache)
    assert kvcore.make_cache("hash", 4, 2).snapshot().policy == "lru"
    with pytest.raises(InvalidConfiguration, match="free queue's order, which is LRU: policy must be 'lru'"):
        kvcore.make_cache("hash", 4, 2, "lfu")


def test_kvcore_restore_restores_a_hash_snapshot_as_a_hash_cache():
    c = cache(4)
    run(c, A, B)
    restored = kvcore.restore(c.snapshot())
    assert isinstance(restored, HashBlockPagedAttentionCache) and restored.snapshot() == c.snapshot()


def test_a_hash_snapshot_claiming_another_policy_is_refused():
    c = cache(4)
    d = c.snapshot().to_dict()
    d["policy"] = "lfu"
    with pytest.raises(kvcore.InvalidOperation, match="policy 'lru', not 'lfu'"):
        kvcore.restore(Snapshot.from_dict(d))


def test_keys_chain_the_parent_so_the_same_tokens_under_another_parent_are_another_block():
    c = cache(6)
    one = run(c, A, B)
    two = run(c, C, B)
    keys = {c.snapshot().block_for_page(p).key for p in (one.pages[1], two.pages[1])}
    assert len(keys) == 2
    assert c.snapshot().block_for_page(two.pages[1]).parent == c.snapshot().block_for_page(two.pages[0]).key


def test_tokens_beyond_64_bits_get_keys_of_their_own():
    c = cache(4)
    big = run(c, (2**64, 1))
    small = run(c, (0, 1))
    snap = c.snapshot()
    assert snap.block_for_page(big.pages[0]).key != snap.block_for_page(small.pages[0]).key
    assert c.acquire_pages_for_tokens([2**64, 1]).hit_tokens == 2
    assert c.check_invariants() == []


def test_a_run_of_keys_is_block_key_block_after_block_at_the_int64_edges_and_beyond():
    from kvcore.blockkey import block_key, chain_keys

    edges = (0, 1, -1, 2**63 - 1, -2**63, 32000, 7, 8)
    tokens = edges * 2 + (2**63, 5, 6, 7, 8, 9, 10, 11) + (1, 2, 3, 4, 5, 6, 7, -2**63 - 1) + edges
    one_by_one, parent = [], None
    for i in range(5):
        parent = block_key(parent, tokens[i * 8:(i + 1) * 8])
        one_by_one.append(parent)
    assert chain_keys(None, tokens, 0, 5, 8) == one_by_one
    assert chain_keys(one_by_one[0], tokens, 1, 5, 8) == one_by_one[1:]
    assert chain_keys(None, edges * 2, 0, 2, 8) == one_by_one[:2]  # a run that packs whole
    # The bytes hashed are those kvcore always hashed (keys are in snapshots and digests).
    assert [k.hex()[:16] for k in one_by_one[:3]] == ["36c09a85d40bddaa", "897723a4f8bd5aa5", "0c31b413d9188331"]


KEY_SCRIPT = """
import kvcore
c = kvcore.make_cache("hash", 4, 2)
a = c.acquire_pages_for_tokens([1, 1, 2, 2, 2**70, 3])
a.publish_pages_for_tokens()
print(" ".join(b.key for b in c.snapshot().blocks), c.snapshot().digest())
"""


def test_keys_and_digests_are_identical_across_processes_and_hash_seeds():
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        outputs.add(subprocess.run([sys.executable, "-c", KEY_SCRIPT], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert len(outputs) == 1


def test_a_pool_of_a_trillion_pages_costs_what_its_used_pages_cost():
    c = kvcore.make_cache("hash", 10**12, 16)
    a = run(c, tuple(range(64)), extra=16)
    b = c.acquire_pages_for_tokens(range(32))
    snap = c.snapshot()
    assert len(snap.free) == 10**12 - 2 and snap.free[0] == a.pages[4]  # the uncached page went to the head
    assert b.hit_tokens == 32 and c.check_invariants() == []
    assert kvcore.restore(snap).snapshot() == snap


def test_the_page_pool_counts_free_and_evictable_pages_apart():
    c = cache(4)
    run(c, A, B, extra=1)
    pool = c.page_pool
    assert (pool.available_page_count(), pool.evictable_count(), pool.total_page_count()) == (2, 2, 4)


def test_a_pool_given_with_a_free_order_hands_pages_out_in_that_order():
    c = HashBlockPagedAttentionCache(PagePool(4, [3, 1, 0, 2]), 2)
    assert c.acquire_pages_for_tokens([1, 2, 3, 4, 5]).pages == (3, 1, 0)


# -- watched: each event follows the change it reports ----------------------------------------


def test_a_watched_cache_shows_at_each_event_the_change_the_event_reports():
    c = kvcore.make_cache("hash", 4, 2)
    seen = []
    c.watch(lambda e: seen.append((e, c.snapshot())))
    run(c, A, B, extra=1)  # 3 pages: 2 cached, 1 uncached
    first = c.acquire_pages_for_tokens(list(A + C))  # matches A; takes the last untouched page
    c.acquire_pages_for_tokens([5, 5])  # the head is the uncached page
    c.acquire_pages_for_tokens([6, 6])  # then B's page: B is evicted lazily
    with pytest.raises(CacheAllocationFailure):
        c.acquire_pages_for_tokens([7, 7])
    first.publish_pages_for_tokens()
    kinds = set()
    for e, snap in seen:
        kinds.add(type(e).__name__)
        if isinstance(e, ev.BlockEvicted):
            assert snap.block_for_page(e.page) is None and e.page in snap.free  # gone, page still queued
        elif isinstance(e, ev.PagesTaken):
            assert not set(e.pages) & set(snap.free)
            assert set(e.pages) <= set(snap.allocation(e.allocation).pages)
        elif isinstance(e, ev.PagesQueued):
            assert snap.free[:len(e.head)] == e.head and snap.free[len(snap.free) - len(e.tail):] == e.tail
        elif isinstance(e, ev.BlockCached):
            assert snap.block_for_page(e.page).key == e.key
        if isinstance(e, (ev.BlockEvicted, ev.PagesTaken, ev.PagesQueued, ev.BlockCached,
                          ev.Released, ev.Failed)):
            # Healthy, but for the acquiring allocation before it got its pages.
            broken = [v for v in check_snapshot(snap)
                      if not (isinstance(e, ev.BlockEvicted) and v.allocations == (e.allocation,))]
            assert broken == [], (e, broken)
    assert {"BlockEvicted", "PagesTaken", "PagesQueued", "BlockCached", "PageUnqueued", "Failed"} <= kinds


def test_the_hash_events_round_trip_through_json_dicts():
    c = cache(4)
    run(c, A, B, extra=1)  # queue: [uncached page, untouched page, B's page, A's page]
    c.acquire_pages_for_tokens(list(A + C))  # A leaves the queue; C takes the uncached page
    c.acquire_pages_for_tokens([5, 5, 6, 6])  # the untouched page, then B's: evicted
    events = c.take_events()
    assert {type(e) for e in events} >= set(ev.HASH_EVENTS)
    for e in events:
        assert ev.event_from_dict(json.loads(json.dumps(ev.event_to_dict(e)))) == e
