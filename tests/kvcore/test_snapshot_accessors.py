# SPDX-License-Identifier: Apache-2.0
"""Snapshot's free-page accessors: ``free_count`` and ``free_position`` say what
walking ``free`` would, on every design, for explicit and lazily stored free lists alike,
and the field table of Snapshot's docstring holds on every design."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FreePages, KVCacheError, QueuedPages
from kvcore.base import _EXPLICIT_PAGES

KINDS = ("trie", "base", "hash")

#: Pool sizes: small ones (evictions, a full pool) and ones above the explicit-listing
#: threshold, whose free list is a FreePages / QueuedPages.
POOLS = st.one_of(st.integers(1, 12), st.integers(_EXPLICIT_PAGES + 1, _EXPLICIT_PAGES + 40))

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.lists(st.integers(1, 3), max_size=9), st.integers(0, 3)),
        st.tuples(st.just("publish"), st.integers(0, 7)),
        st.tuples(st.just("release"), st.integers(0, 7)),
        st.tuples(st.just("extend"), st.integers(0, 7), st.lists(st.integers(1, 3), max_size=4)),
    ),
    max_size=24,
)


def naive_position(snap, page):
    """The derivation the accessor replaces: walk the free list."""
    free = list(snap.free)
    return free.index(page) if page in free else None


def run_ops(cache, ops):
    """Apply ``ops`` to ``cache``, yielding the snapshot after each (refused ops included)."""
    held = []
    for op in ops:
        try:
            if op[0] == "acquire":
                held.append(cache.acquire_pages_for_tokens(op[1], op[2]))
            elif held:
                a = held[op[1] % len(held)]
                if op[0] == "publish":
                    a.publish_pages_for_tokens()
                elif op[0] == "release":
                    a.release_pages()
                    held.remove(a)
                else:
                    a.extend_allocation(list(a.tokens) + op[2])
        except KVCacheError:
            pass
        yield cache.snapshot()


def pages_to_check(snap):
    """Every page of a small pool; of a big one, the pages ``free`` lists explicitly, the
    ends of its never-used run, the pages just outside it, and pages not in ``free``."""
    if snap.page_count <= _EXPLICIT_PAGES:
        return range(snap.page_count + 2)
    free = snap.free
    pages = set(range(0, 40)) | {snap.page_count - 1, snap.page_count, snap.page_count + 1, -1}
    if isinstance(free, FreePages):
        pages |= set(free.returned) | {free.untouched_from - 1, free.untouched_from, free.untouched_from + 1}
    if isinstance(free, QueuedPages):
        pages |= set(free.head) | set(free.tail) | {free.untouched_from - 1, free.untouched_from}
    return sorted(pages)


def check_accessors(snap):
    free = list(snap.free)
    assert snap.free_count == len(free)
    for position, page in enumerate(free):  # every place, the never-used run's included
        assert snap.free_position(page) == position
    first_place: dict[int, int] = {}  # naive_position of every page, from one walk of the list
    for position, page in enumerate(free):
        first_place.setdefault(page, position)
    for page in pages_to_check(snap):
        assert snap.free_position(page) == first_place.get(page), page


@settings(max_examples=120, deadline=None)
@given(kind=st.sampled_from(KINDS), page_count=POOLS, tokens_per_page=st.integers(1, 3), ops=OPS)
def test_free_count_and_free_position_equal_walking_the_free_list_after_any_ops(kind, page_count,
                                                                                 tokens_per_page, ops):
    cache = kvcore.make_cache(kind, page_count, tokens_per_page)
    check_accessors(cache.snapshot())
    for snap in run_ops(cache, ops):
        if page_count > _EXPLICIT_PAGES:
            assert isinstance(snap.free, FreePages if kind != "hash" else QueuedPages)  # lazily stored
        check_accessors(snap)


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(KINDS), page_count=POOLS, tokens_per_page=st.integers(1, 3), ops=OPS)
def test_the_docstring_field_table_holds_on_every_design(kind, page_count, tokens_per_page, ops):
    cache = kvcore.make_cache(kind, page_count, tokens_per_page)
    for snap in run_ops(cache, ops):
        queued = set(snap.free)
        rows = [snap.pages[p] for p in pages_to_check(snap) if 0 <= p < snap.page_count]
        if kind == "trie":
            assert snap.blocks == ()
            assert snap.nodes[0].id == 0 and snap.nodes[0].parent is None
            assert set(snap.heap) <= {n.id for n in snap.nodes if n.ref == 0}
            assert all(p.ref == 0 for p in rows if p.state != "cached")
        elif kind == "base":
            assert (snap.nodes, snap.heap, snap.blocks, snap.next_seq) == ((), (), (), 1)
            assert all(p.state != "cached" and p.node is None and p.ref == 0 for p in rows)
        else:
            assert (snap.nodes, snap.heap) == ((), ())
            assert all(p.ref == 1 for p in rows if p.state == "owned")
            assert all(snap.block(p.node).page == p.page for p in rows if p.state == "cached")
            # the free queue: free pages, and cached pages with ref 0
            assert all((p.page in queued) == (p.state == "free" or (p.state == "cached" and p.ref == 0))
                       for p in rows)
        if kind != "hash":  # a free list holds free pages only
            assert all((p.page in queued) == (p.state == "free") for p in rows)


def test_a_lazy_free_list_numbers_its_never_used_run_first_then_the_returned_pages():
    snap = kvcore.make_cache("trie", 20, 1).snapshot()
    lazy = dataclasses.replace(snap, free=FreePages(10, 12, (4, 2)))
    assert lazy.free_count == 4
    assert [lazy.free_position(p) for p in (10, 11, 4, 2)] == [0, 1, 2, 3]  # off by one fails here
    assert [lazy.free_position(p) for p in (0, 3, 9, 12, 13)] == [None] * 5


def test_a_lazy_free_queue_numbers_its_head_then_its_never_used_run_then_its_tail():
    snap = kvcore.make_cache("hash", 20, 1).snapshot()
    lazy = dataclasses.replace(snap, free=QueuedPages((7, 5), 10, 13, (3,)))
    assert lazy.free_count == 6
    assert [lazy.free_position(p) for p in (7, 5, 10, 11, 12, 3)] == [0, 1, 2, 3, 4, 5]
    assert [lazy.free_position(p) for p in (0, 6, 9, 13)] == [None] * 4
    empty_run = dataclasses.replace(snap, free=QueuedPages((7,), 20, 20, (3, 1)))
    assert [empty_run.free_position(p) for p in (7, 3, 1, 19)] == [0, 1, 2, None]


def test_a_plain_free_tuple_numbers_from_0_at_the_head_and_a_repeated_page_at_its_first_place():
    snap = kvcore.make_cache("trie", 8, 1).snapshot()
    listed = dataclasses.replace(snap, free=(5, 3, 4))
    assert (listed.free_count, [listed.free_position(p) for p in (5, 3, 4, 0)]) == (3, [0, 1, 2, None])
    broken = dataclasses.replace(snap, free=(5, 3, 5, 4))  # only a broken cache lists a page twice
    assert [broken.free_position(p) for p in (5, 3, 4)] == [0, 1, 3] == [(5, 3, 5, 4).index(p) for p in (5, 3, 4)]
    assert dataclasses.replace(snap, free=()).free_position(0) is None


@pytest.mark.parametrize("free", [FreePages(10, 12, (11, 2)), QueuedPages((11,), 10, 13, (12, 3)),
                                  QueuedPages((4, 4), 10, 10, (4, 5))])
def test_a_page_a_broken_lazy_free_list_lists_twice_gets_its_first_place(free):
    snap = dataclasses.replace(kvcore.make_cache("hash", 20, 1).snapshot(), free=free)
    assert [snap.free_position(p) for p in range(20)] == [naive_position(snap, p) for p in range(20)]


@pytest.mark.parametrize("kind", KINDS)
def test_free_position_in_a_pool_of_10_to_the_12_pages_never_walks_its_never_used_run(kind):
    # Walking the run (tuple(free).index) would take hours and terabytes: reaching the
    # asserts at all is the test.
    cache = kvcore.make_cache(kind, 10**12, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5])
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens([7, 8, 9])
    a_pages = a.pages
    a.release_pages()
    snap = cache.snapshot()
    cached_of_a = 2 if kind == "trie" else 0  # a trie keeps a's two full pages as ref-0 nodes, off the list
    assert snap.free_count == 10**12 - len(b.pages) - cached_of_a
    if kind == "hash":  # a's uncached page at the head, its two cached ones at the tail, in order
        assert snap.free_position(a_pages[2]) == 0
        assert [snap.free_position(p) for p in a_pages[:2]] == [snap.free_count - 1, snap.free_count - 2]
        assert snap.free_position(10**12 - 1) == snap.free_count - 3
    else:  # the never-used run first, then the returned pages in the order given back
        run = 10**12 - snap.free.untouched_from
        assert snap.free_position(snap.free.untouched_from) == 0 and snap.free_position(10**12 - 1) == run - 1
        assert sorted(snap.free_position(p) for p in snap.free.returned) == list(range(run, snap.free_count))
    assert [snap.free_position(p) for p in b.pages] == [None] * len(b.pages)
    assert snap.free_position(10**12) is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("page_count", [8, _EXPLICIT_PAGES + 8])
def test_reading_the_accessors_changes_no_byte_of_the_serialised_snapshot(kind, page_count):
    cache = kvcore.make_cache(kind, page_count, 2)
    snaps = list(run_ops(cache, [("acquire", [1, 2, 3, 1, 2], 1), ("publish", 0), ("acquire", [1, 2, 3], 0),
                                 ("release", 0), ("acquire", [3, 3, 3, 3, 3], 2)]))
    for snap in snaps:
        before = (snap.to_dict(), snap.to_json(), snap.digest(), hash(snap.free))
        twin = kvcore.Snapshot.from_dict(snap.to_dict())
        assert [snap.free_position(p) for p in range(8)] == [twin.free_position(p) for p in range(8)]
        assert snap.free_count == twin.free_count
        assert (snap.to_dict(), snap.to_json(), snap.digest(), hash(snap.free)) == before
        assert snap == twin and "free_position" not in snap.to_json()
