# SPDX-License-Identifier: Apache-2.0
"""A pool costs memory for the pages used, not the pages configured:
``--capacity-tokens 1e12`` built ``list(range(n))`` and was OOM-killed. The hand-out order
stays exactly the old FIFO one, and snapshots of huge pools stay small and exact."""

from __future__ import annotations

import json
import resource
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
import kvcore.pool
from kvcore import PagePool, Snapshot, TriePagedAttentionCache
from kvcore.snapshot import FreePages, PageInfo, PageTable
from tests.kvcore.step_memory import largest_checked_step

HUGE = 10**12


class ListPool:
    """The old pool, as a reference: an explicit FIFO list of every free page."""

    def __init__(self, page_count: int, free_order=None):
        self.free = list(range(page_count) if free_order is None else free_order)

    def take(self, count: int) -> list[int]:
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def give(self, pages) -> None:
        self.free.extend(pages)


@settings(max_examples=400, deadline=None)
@given(page_count=st.integers(0, 12), chunk=st.sampled_from([1, 2, 3, 4096]), data=st.data())
def test_the_pool_hands_out_pages_in_the_same_order_as_an_explicit_fifo_list(page_count, chunk, data):
    saved = kvcore.pool._CHUNK
    kvcore.pool._CHUNK = chunk  # untouched pages enter the list a chunk at a time: cross its edges
    try:
        check_against_a_list(page_count, data)
    finally:
        kvcore.pool._CHUNK = saved


def check_against_a_list(page_count, data):
    pool, model = PagePool(page_count), ListPool(page_count)
    if data.draw(st.booleans(), label="start from a free order"):
        order = data.draw(st.permutations(range(page_count)), label="order")
        order = order[:data.draw(st.integers(0, page_count), label="free")]
        pool, model = PagePool(page_count, order), ListPool(page_count, order)
    held: list[int] = []
    for _ in range(data.draw(st.integers(0, 30), label="steps")):
        if held and data.draw(st.booleans(), label="give?"):
            back = data.draw(st.lists(st.sampled_from(held), unique=True), label="back")
            held = [p for p in held if p not in back]
            pool.give(back)
            model.give(back)
        else:
            count = data.draw(st.integers(0, len(model.free)), label="take")
            taken = pool.take(count)
            assert taken == model.take(count)
            held += taken
        assert pool.free_pages() == tuple(model.free)
        assert list(pool.free_pages()) == model.free
        assert pool.available_page_count() == len(model.free)
        # A pool rebuilt from its free list (what restore does) continues identically.
        twin = PagePool(page_count, pool.free_pages())
        again = PagePool(page_count, tuple(pool.free_pages()))
        assert twin.free_pages() == again.free_pages() == pool.free_pages()
        assert twin.take(len(model.free)) == again.take(len(model.free)) == list(model.free)


def _churn(cache, rounds: int) -> None:
    """Requests that share a prefix, publish, release, and fill part of a huge pool."""
    for i in range(rounds):
        a = cache.acquire_pages_for_tokens([1, 2, 3, 4] + [100 + i] * 6, 2)
        a.publish_pages_for_tokens()
        if i % 3:
            a.release_pages()


def test_a_pool_of_a_trillion_pages_costs_memory_for_the_pages_used_only():
    tracemalloc.start()
    try:
        cache = TriePagedAttentionCache(PagePool(HUGE), 2)
        _churn(cache, 200)
        snap = cache.snapshot()
        violations = cache.check_invariants()
        restored = kvcore.restore(snap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert violations == []
    assert restored.snapshot() == snap
    assert cache.page_pool.available_page_count() == HUGE - snap.cached_count - snap.owned_count
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # a list of 10**12 pages would be 8 TB


def test_a_huge_pool_works_under_a_memory_cap():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + 200 * 2**20, hard))
    try:
        for cls in (kvcore.TriePagedAttentionCache, kvcore.BasePagedAttentionCache):
            cache = cls(PagePool(HUGE), 16)
            _churn(cache, 50)
            assert cache.check_invariants() == []
            assert kvcore.restore(cache.snapshot()).snapshot() == cache.snapshot()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_snapshots_of_huge_pools_read_like_tuples():
    cache = TriePagedAttentionCache(PagePool(HUGE), 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5])
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens([7, 8])
    b.release_pages()
    snap = cache.snapshot()
    assert isinstance(snap.pages, PageTable) and isinstance(snap.free, FreePages)
    assert len(snap.pages) == HUGE and snap.free_count == HUGE - 3
    assert snap.pages[0].state == "cached" and snap.pages[2].state == "owned"
    assert snap.pages[-1] == PageInfo(HUGE - 1, "free") and snap.pages[3] == PageInfo(3, "free")
    assert snap.free[0] == 4 and snap.free[-1] == 3 and 3 in snap.free and 2 not in snap.free
    assert snap.pages[:3] == tuple(snap.pages[i] for i in range(3))
    assert snap.node_for_page(0).tokens == (1, 2)
    assert (snap.cached_count, snap.owned_count) == (2, 1)
    assert len(repr(snap)) < 4000


@pytest.mark.parametrize("page_count", [5, 70_000])
def test_lazy_and_plain_snapshots_of_one_state_are_equal_and_hash_alike(page_count):
    cache = TriePagedAttentionCache(PagePool(page_count), 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3])
    a.publish_pages_for_tokens()
    snap = cache.snapshot()
    plain = Snapshot.from_dict(json.loads(snap.to_json()))
    assert type(plain.pages) is tuple and type(plain.free) is tuple
    assert plain == snap and snap == plain and hash(plain) == hash(snap)
    assert plain.digest() == snap.digest()
    assert kvcore.restore(plain).snapshot() == snap


def test_free_lists_split_differently_compare_by_their_pages():
    assert FreePages(3, 5, (1, 2)) == FreePages(5, 5, (3, 4, 1, 2)) == (3, 4, 1, 2)
    assert FreePages(3, 5, (1,)) != FreePages(2, 5, (1,))
    assert FreePages(3, 5, ()) != [3, 4]  # like a tuple, never equal to a list
    assert PageTable((), 2) == PageTable((PageInfo(0, "free"),), 2) == (PageInfo(0, "free"), PageInfo(1, "free"))


def test_a_snapshot_of_a_huge_pool_hashes_without_walking_every_page():
    cache = TriePagedAttentionCache(PagePool(HUGE), 2)
    cache.acquire_pages_for_tokens([1, 2, 3]).publish_pages_for_tokens()
    snap = cache.snapshot()
    with_free_tail = PageTable(snap.pages.rows + (PageInfo(len(snap.pages.rows), "free"),), HUGE)
    assert with_free_tail == snap.pages and hash(with_free_tail) == hash(snap.pages)
    assert hash(snap) == hash(cache.snapshot())


# -- a step costs what it changed, not the pool's size ---------------------------
# Counted in bytes allocated, never in seconds: the same ops on pools of 1k, 10k and 100k
# pages must allocate about the same per step (a snapshot that listed the pool's pages, or a
# pool that listed its untouched pages, allocates in proportion to the pool and fails here).

CURVE_POOLS = (1_000, 10_000, 100_000)


def _curve_ops(cache) -> list:
    """The same 60 steps on any pool of 1,000 pages or more: requests sharing prefixes, some
    held, on at most 400 pages (each step an acquire, publish or release)."""
    steps = []
    held = []
    for i in range(20):
        tokens = [i % 4, 1, 2, 3] + [1000 + i] * 12  # 16 tokens: 4 pages of 4, one shared prefix page
        steps.append(lambda tokens=tokens: held.append(cache.acquire_pages_for_tokens(tokens, 8)))
        steps.append(lambda: held[-1].publish_pages_for_tokens())
        steps.append(lambda i=i: held.pop(0).release_pages() if i % 2 else None)
    return steps


def _largest_step_allocation(page_count: int) -> int:
    """The most bytes one step (the op, its snapshot, the incremental check) allocates at
    its peak, with the cache recording events as kvviz's sessions do. The first step is left
    out: it makes the pool's first chunk of page numbers (``kvcore.pool._CHUNK``, about
    150 KB on any pool of 4,096 pages or more, once per chunk)."""
    from kvcore.incremental import IncrementalChecker

    cache = TriePagedAttentionCache(PagePool(page_count), 4)
    cache.record_events(True)
    checker = IncrementalChecker()
    assert checker.check(cache.snapshot()) == []
    return largest_checked_step(cache, checker, _curve_ops(cache))


def test_a_step_allocates_the_same_on_a_pool_of_1k_10k_or_100k_pages():
    small, middle, large = map(_largest_step_allocation, CURVE_POOLS)
    assert small > 1000  # the measure sees a step's work
    # A 1k pool's snapshot lists its 1,000 pages (plain tuples, 8 KB each); a listed 10k or
    # 100k pool would allocate 80 KB or 800 KB more per step.
    assert middle <= small + 16 * 1024, (small, middle)
    assert large <= small + 16 * 1024, (small, large)


@pytest.mark.parametrize("page_count", [1_000, 100_000, HUGE])
def test_a_fresh_pool_lists_none_of_its_pages(page_count):
    pool = PagePool(page_count)
    free = pool.free_pages()
    assert (free.untouched_from, free.returned) == (0, ())
    assert pool.take(3) == [0, 1, 2]
    pool.give([1])
    assert pool.free_pages().untouched_from == 3 and pool.free_pages().returned == (1,)
