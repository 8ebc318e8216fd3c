# SPDX-License-Identifier: Apache-2.0
"""Every bug of BUGS.md that our API can express, run against kvcore: it must behave correctly.

Each test is named after the bug; its docstring says what the buggy cache did. The scenario
is the one BUGS.md gives (``tpp`` 4 unless it says otherwise); the assertions pin the exact
pages, ref counts and free counts of the correct behaviour, and ``check_invariants()`` is
checked after every single step. B9–B11 are about shortfin 3.9.0's split lookup/allocate
and handle API, which ours does not have (acquire matches and references in one step).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from kvcore import CacheAllocationFailure, PagePool, TriePagedAttentionCache
from kvcore import events as ev


class Checked:
    """A trie cache whose every operation is followed by ``check_invariants() == []``."""

    def __init__(self, page_count: int, tokens_per_page: int = 4, cache=None):
        self.cache = cache or TriePagedAttentionCache(PagePool(page_count), tokens_per_page)

    def healthy(self) -> None:
        assert self.cache.check_invariants() == []

    def acquire(self, tokens, extra_token_slots: int = 0):
        allocation = self.cache.acquire_pages_for_tokens(tokens, extra_token_slots)
        self.healthy()
        return allocation

    def publish(self, allocation, tokens=None):
        allocation.publish_pages_for_tokens(tokens)
        self.healthy()

    def extend(self, allocation, tokens, extra_token_slots: int = 0):
        allocation.extend_allocation(tokens, extra_token_slots)
        self.healthy()

    def release(self, allocation):
        allocation.release_pages()
        self.healthy()

    def publish_and_release(self, tokens) -> tuple[int, ...]:
        allocation = self.acquire(tokens)
        self.publish(allocation)
        pages = allocation.pages
        self.release(allocation)
        return pages

    def fails(self, operation, *args) -> CacheAllocationFailure:
        """Run an operation that must fail for lack of pages and change nothing."""
        before = self.cache.snapshot()
        with pytest.raises(CacheAllocationFailure) as failure:
            operation(*args)
        assert self.cache.snapshot() == before
        self.healthy()
        return failure.value

    @property
    def snap(self):
        return self.cache.snapshot()

    def node(self, tokens):
        """The snapshot node whose tokens are ``tokens`` (unique in these scenarios), or None."""
        found = [n for n in self.snap.nodes if n.tokens == tuple(tokens) and n.parent is not None]
        assert len(found) <= 1
        return found[0] if found else None


def r(first: int, last: int) -> list[int]:
    """Tokens ``first..last`` inclusive, as BUGS.md writes them."""
    return list(range(first, last + 1))


def test_b1_eviction_order_is_the_total_order_last_access_then_seq():
    """B1: shortfin keyed its heap on (wall-clock time, node); on a coarse clock two entries
    tied and Python compared nodes (TypeError on Windows); the later id()-based tie break
    evicted a recently used sequence."""
    c = Checked(page_count=2)
    c.publish_and_release(r(1, 4))  # node 1 on page 0, touched at tick 2
    c.publish_and_release(r(5, 8))  # node 2 on page 1, touched at tick 5
    c.cache.record_events(True)
    newcomer = c.acquire(r(9, 16))
    evicted = [e for e in c.cache.take_events() if isinstance(e, ev.Evicted)]
    assert [(e.node, e.page, e.key) for e in evicted] == [(1, 0, (2, 1)), (2, 1, (5, 2))]
    assert evicted[0].next_key == (5, 2)
    assert newcomer.pages == (0, 1)
    assert c.snap.free_count == 0 and c.snap.evictable_count == 0


def test_b1_equal_last_access_is_broken_by_seq_deterministically():
    """B1 with the coarse clock itself: three candidates with the same last_access (as if the
    clock had not advanced) are evicted in seq order, every run, with no comparison error."""
    c = Checked(page_count=3)
    for first in (1, 5, 9):
        c.publish_and_release(r(first, first + 3))  # nodes 1, 2, 3 on pages 0, 1, 2
    snap = c.snap
    tied = replace(snap, nodes=tuple(n if n.parent is None else replace(n, last_access=2) for n in snap.nodes))
    assert [n.last_access for n in tied.nodes if n.parent is not None] == [2, 2, 2]

    for _ in range(2):  # twice: the order does not depend on the run
        restored = Checked(0, cache=TriePagedAttentionCache.restore(tied))
        restored.healthy()
        order = []
        for i in range(3):
            order.append(restored.acquire(r(100 + 4 * i, 103 + 4 * i)).pages)
        assert order == [(0,), (1,), (2,)]  # seq 1, 2, 3: creation order breaks the tie


def test_b1_a_refreshed_sequence_outlives_an_older_seq_with_an_earlier_access():
    """B1's later fix ordered ties by id(), which could evict the sequence just used. The key
    compares last_access first: refreshing node 1 makes node 2 the victim despite seq 1 < 2."""
    c = Checked(page_count=2)
    c.publish_and_release(r(1, 4))
    c.publish_and_release(r(5, 8))
    c.release(c.acquire(r(1, 4)))  # refresh node 1 (page 0)
    assert c.node(r(1, 4)).last_access > c.node(r(5, 8)).last_access
    newcomer = c.acquire(r(9, 12))
    assert newcomer.pages == (1,)
    assert c.node(r(5, 8)) is None and c.node(r(1, 4)).page == 0


def test_b2_an_interior_node_is_never_evicted_while_a_live_path_runs_through_it():
    """B2 (shortfin 3.1.0): a parent stayed in the leaf set after gaining a child, so the ref-0
    interior node 1..4 was evicted and its page handed to C while B still used it."""
    c = Checked(page_count=4)
    c.publish_and_release(r(1, 4))  # node 1..4 on page 0, ref 0
    b = c.acquire(r(1, 8))
    assert b.pages == (0, 1) and b.hit_tokens == 4
    c.publish(b)
    snap = c.snap
    assert (c.node(r(1, 4)).ref, c.node(r(5, 8)).ref) == (1, 1)
    assert snap.heap == () and snap.free == (2, 3)

    failure = c.fails(c.cache.acquire_pages_for_tokens, r(101, 112))
    assert (failure.needed, failure.free, failure.evictable, failure.held) == (3, 2, 0, 2)
    assert b.pages == (0, 1)

    c.release(b)
    assert c.snap.heap == (c.node(r(5, 8)).id,)  # only the leaf is a candidate
    newcomer = c.acquire(r(101, 112))
    assert newcomer.pages == (2, 3, 1)  # free pages first, then the leaf 5..8
    assert c.node(r(1, 4)).page == 0 and c.snap.heap == (c.node(r(1, 4)).id,)


def test_b3_a_publish_that_creates_nothing_leaves_interior_nodes_out_of_the_heap():
    """B3 (shortfin 3.1.0): publishing 1 2 3 4 99 created no node but marked node 1..4, which
    has a child, as a leaf: an eviction candidate."""
    c = Checked(page_count=4)
    c.publish_and_release(r(1, 8))  # 1..4 on page 0, 5..8 on page 1
    leaf = c.node(r(5, 8)).id
    b = c.acquire([1, 2, 3, 4, 99])
    assert b.pages == (0, 2) and b.hit_tokens == 4
    c.publish(b)
    assert b.published == 1 and c.snap.next_seq == 3  # nothing created
    assert c.snap.heap == (leaf,)
    c.release(b)
    assert c.node(r(1, 4)).ref == 0 and c.snap.heap == (leaf,)
    newcomer = c.acquire(r(101, 116))
    assert newcomer.pages == (3, 2, 1, 0)  # free pages, then the leaf, then its parent (cascade)


def test_b4_a_duplicate_publish_adopts_the_existing_node_and_frees_its_own_page():
    """B4 (shortfin 3.1.0): the second publish of the same block overwrote the child, orphaning
    the first node; eviction then unlinked by key and raised KeyError; both pages were lost."""
    c = Checked(page_count=4)
    x = c.acquire(r(1, 4))
    y = c.acquire(r(1, 4))
    assert (x.pages, y.pages) == ((0,), (1,))
    c.publish(x)
    c.publish(y)
    assert y.pages == (0,)  # adopted x's node
    assert c.node(r(1, 4)).ref == 2 and c.snap.free == (2, 3, 1)
    assert c.snap.stats.dedups == 1
    c.release(x)
    c.release(y)
    assert c.node(r(1, 4)).ref == 0 and c.snap.free == (2, 3, 1)
    newcomer = c.acquire(r(101, 116))  # forces the eviction of the shared node
    assert newcomer.pages == (2, 3, 1, 0)
    c.release(newcomer)
    assert sorted(c.snap.free) == [0, 1, 2, 3]  # nothing lost


def test_b4b_the_second_publisher_references_the_adopted_node():
    """B4b (shortfin 3.9.0): the second publisher kept its reference on the root instead of
    the adopted node; releasing X left node 1..4 at ref 0 and Z was handed its page while Y
    still listed it."""
    c = Checked(page_count=4)
    x = c.acquire(r(1, 5))
    y = c.acquire([1, 2, 3, 4, 6])
    assert (x.pages, y.pages) == ((0, 1), (2, 3))
    c.publish(x)
    c.publish(y)
    assert y.pages == (0, 3) and c.node(r(1, 4)).ref == 2
    c.release(x)
    assert c.node(r(1, 4)).ref == 1 and c.snap.free == (2, 1)
    z = c.acquire(r(101, 108))
    assert z.pages == (2, 1)
    assert 0 not in z.pages and y.pages == (0, 3)
    failure = c.fails(c.cache.acquire_pages_for_tokens, r(201, 204))  # page 0 stays Y's
    assert (failure.free, failure.evictable) == (0, 0)


def test_b5_a_failed_acquire_leaves_no_reference_behind():
    """B5 (shortfin 3.1.0): the matched node kept ref 1 after the allocation failed, so it
    could never be evicted again."""
    c = Checked(page_count=3)
    c.publish_and_release(r(1, 4))
    node = c.node(r(1, 4))
    failure = c.fails(c.cache.acquire_pages_for_tokens, r(1, 20))  # 1..4 matched + 16 more
    assert (failure.needed, failure.free, failure.evictable) == (4, 2, 0)
    assert "need 4 pages: 2 free, 0 evictable" in str(failure)
    assert c.node(r(1, 4)) == node and node.ref == 0
    assert c.snap.heap == (node.id,)
    newcomer = c.acquire(r(101, 112))  # the node is still evictable
    assert newcomer.pages == (1, 2, 0)


def test_b6_release_returns_the_unpublished_pages_to_the_pool():
    """B6 (shortfin 3.1.0): the page holding the partial tokens 5 6 was neither freed nor
    cached on release: leaked."""
    c = Checked(page_count=4)
    a = c.acquire(r(1, 6))
    assert a.pages == (0, 1)
    c.publish(a)
    assert a.published == 1
    c.release(a)
    snap = c.snap
    assert snap.free == (2, 3, 1)
    assert snap.pages[1].state == "free"
    assert snap.free_count + snap.evictable_count == 4


def test_b7_the_cache_copies_the_callers_token_list():
    """B7 (shortfin 3.1.0): the cache kept the caller's list; appending to it and extending
    compared the list with itself, so extend never added pages: 2 pages for 13 slots."""
    c = Checked(page_count=4)
    tokens = [1, 2, 3]
    a = c.acquire(tokens)
    for t in range(4, 13):
        tokens.append(t)
        assert len(a.tokens) == t - 1  # the allocation did not see the append
        c.extend(a, tokens)
        assert a.tokens == tuple(tokens) and a.tokens is not tokens
        assert len(a.pages) == -(-t // 4)
    c.extend(a, tokens, extra_token_slots=1)
    assert a.pages == (0, 1, 2, 3)  # 13 slots need 4 pages
    assert c.snap.free_count == 0


def test_b8_publishing_is_monotonic():
    """B8 (shortfin 3.1.0): publishing fewer pages, then all again, hung a second chain under
    the first; two nodes shared one page."""
    c = Checked(page_count=6)
    a = c.acquire(r(1, 12))
    c.publish(a)
    first = c.snap
    assert a.published == 3 and len(first.nodes) == 4
    c.publish(a, r(1, 4))
    c.publish(a)
    last = c.snap
    assert a.published == 3 and a.pages == (0, 1, 2)
    assert [(n.id, n.parent, n.page) for n in last.nodes] == [(n.id, n.parent, n.page) for n in first.nodes]
    assert last.next_seq == 4 and last.free == (3, 4, 5)
    assert [n.ref for n in last.nodes[1:]] == [1, 1, 1]


def test_b12_extend_never_evicts_the_allocations_own_pages():
    """B12 (shortfin 3.1.0): extend evicted B's own cached page 1..4 and handed it back to B:
    its block table became [2, 1, 2] and token 9 would overwrite tokens 1–4."""
    c = Checked(page_count=3)
    c.publish_and_release(r(1, 4))
    b = c.acquire(r(1, 8))
    c.publish(b)
    assert b.pages == (0, 1)
    other = c.acquire([50])
    assert other.pages == (2,) and c.snap.free == ()

    failure = c.fails(b.extend_allocation, r(1, 9))
    assert (failure.needed, failure.free, failure.evictable, failure.held) == (1, 0, 0, 3)
    assert b.pages == (0, 1) and b.tokens == tuple(r(1, 8))

    c.release(other)
    c.extend(b, r(1, 9))
    assert b.pages == (0, 1, 2)
    assert len(set(b.pages)) == 3


REQUESTS = [r(1, 4) + [5, 6, 7], r(1, 4) + [8, 9], r(1, 4) + [5, 6, 10, 11], r(1, 2) + [12]]


@pytest.mark.parametrize("order", list(itertools.permutations(range(len(REQUESTS)))), ids=str)
def test_s1_free_plus_evictable_plus_protected_is_the_pool_in_every_release_order(order):
    """S1 (SGLang #35270): evictable_size double-counted pages shared by several requests, so
    after releasing them in some orders the idle check reported a memory leak."""
    page_count = 16  # 13 pages before any sharing
    c = Checked(page_count=page_count, tokens_per_page=2)
    allocations = []
    for tokens in REQUESTS:
        allocations.append(c.acquire(tokens))
    for allocation in allocations:  # publish after all acquired: later ones dedup
        c.publish(allocation)

    def accounted() -> int:
        snap = c.snap
        protected = {p for a in snap.allocations for p in a.pages}  # a shared page counts once
        return snap.free_count + snap.evictable_count + len(protected)

    assert accounted() == page_count
    for i in order:
        c.release(allocations[i])
        assert accounted() == page_count
    snap = c.snap
    assert snap.allocations == ()
    assert snap.free_count + snap.evictable_count == page_count  # idle: no leak
    assert snap.evictable_count == 5  # blocks 1 2, 3 4, 5 6, 8 9 and 10 11, each cached once


def test_s2_a_matched_node_is_itself_referenced_not_only_its_ancestors():
    """S2 (mini-sglang PR #52): locking a path locked the ancestors but not the node itself,
    so eviction under pressure freed the very node a request was using."""
    c = Checked(page_count=4)
    c.publish_and_release(r(1, 8))  # 1..4 on page 0, 5..8 on page 1 (the leaf)
    user = c.acquire(r(1, 8))
    assert user.pages == (0, 1) and user.hit_tokens == 8
    assert (c.node(r(1, 4)).ref, c.node(r(5, 8)).ref) == (1, 1)
    assert c.snap.heap == ()

    failure = c.fails(c.cache.acquire_pages_for_tokens, r(101, 112))
    assert (failure.needed, failure.free, failure.evictable) == (3, 2, 0)
    pressure = c.acquire(r(101, 108))
    assert pressure.pages == (2, 3)
    assert c.node(r(5, 8)).page == 1 and user.pages == (0, 1)
