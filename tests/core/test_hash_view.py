# SPDX-License-Identifier: Apache-2.0
"""kvviz/core/hash_view.py: what the hash design's views draw, checked against the snapshot
itself on random kvcore hash caches (free queues reordered at random through restore, so
unreachable blocks and scattered empty pages occur), and on a pool large enough that the
snapshot keeps its queue lazily."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import CacheAllocationFailure, InvalidOperation, Snapshot
from kvcore.hashblock import HashBlockPagedAttentionCache
from kvcore.snapshot import QueuedPages
from kvviz.core.hash_view import (EMPTY_RUN, NotAHashSnapshot, QueueOrder, block_counts, block_lines,
                                   free_queue_title, queue_entries)

TOKENS_PER_PAGE = 2

op = st.one_of(
    st.tuples(st.just("acquire"), st.lists(st.integers(0, 2), min_size=1, max_size=7)),
    st.tuples(st.just("publish"), st.integers(0, 5)),
    st.tuples(st.just("release"), st.integers(0, 5)),
    st.tuples(st.just("shuffle"), st.randoms(use_true_random=False)),
)


def run(ops, pages: int = 10) -> Snapshot:
    """Apply ``ops`` to a hash cache; "shuffle" restores it with its free queue reordered."""
    cache = kvcore.make_cache("hash", pages, TOKENS_PER_PAGE)
    live = []
    for kind, arg in ops:
        try:
            if kind == "acquire":
                live.append(cache.acquire_pages_for_tokens(arg))
            elif kind == "publish" and live:
                live[arg % len(live)].publish_pages_for_tokens()
            elif kind == "release" and live:
                live.pop(arg % len(live)).release_pages()
            elif kind == "shuffle":
                d = cache.snapshot().to_dict()
                arg.shuffle(d["free"])
                cache = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
                live = [cache.allocations[a.id] for a in live]
        except (CacheAllocationFailure, InvalidOperation):
            pass
    return cache.snapshot()


def chain_cached(snap, block) -> bool:
    """Every key from ``block`` up to a first block is cached (by any page)."""
    keys = {b.key: b for b in snap.blocks}
    while block is not None and block.parent is not None:
        block = keys.get(block.parent)
    return block is not None


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_queue_entries_unfold_to_the_snapshots_queue_and_fold_only_empty_runs(ops):
    snap = run(ops)
    entries = queue_entries(snap)
    unfolded = [(e.position + k, e.page + k) for e in entries for k in range(e.count)]
    assert unfolded == list(enumerate(snap.free))
    for e in entries:
        assert e.block == snap.block_for_page(e.page)
        assert e.count == 1 or (e.block is None and e.count >= EMPTY_RUN
                                and all(snap.block_for_page(p) is None for p in range(e.page, e.last_page + 1)))
    order = QueueOrder(snap)
    assert len(order) == len(snap.free)
    for page in range(snap.page_count):
        assert order.position(page) == (list(snap.free).index(page) if page in snap.free else None)
    queued_blocks = sum(1 for e in entries if e.block is not None)
    assert free_queue_title(snap).endswith(f" · {queued_blocks} cached")


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_block_lines_list_each_block_once_under_its_parent_keys_first_copy(ops):
    snap = run(ops)
    lines = block_lines(snap)
    assert sorted(line.block.id for line in lines) == sorted(b.id for b in snap.blocks)
    keys = {b.key for b in snap.blocks}
    first_copy = {}
    for b in sorted(snap.blocks, key=lambda b: b.id):
        first_copy.setdefault(b.key, b.id)
    for i, line in enumerate(lines):
        b = line.block
        assert line.broken == (b.parent is not None and b.parent not in keys)
        assert line.reachable == chain_cached(snap, b) == b.reachable
        assert line.duplicate_of == (first_copy[b.key] if first_copy[b.key] != b.id else None)
        if line.depth:  # the nearest row above at one level less is the parent key's first copy
            above = next(other for other in reversed(lines[:i]) if other.depth == line.depth - 1)
            assert above.block.key == b.parent and above.block.id == first_copy[b.parent]
        else:
            assert b.parent is None or line.broken
    counts = block_counts(snap)
    assert counts.unreachable == sum(1 for line in lines if not line.reachable)
    assert counts.duplicates == sum(1 for line in lines if line.duplicate_of is not None)


def test_a_pool_kept_lazily_folds_its_never_used_run_into_one_entry():
    cache = kvcore.make_cache("hash", 100_000, TOKENS_PER_PAGE)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5])
    a.publish_pages_for_tokens()
    a.release_pages()
    snap = cache.snapshot()
    assert isinstance(snap.free, QueuedPages)
    entries = queue_entries(snap)
    # The unpublished page 2 goes to the head, just before the never-used run 3.. (one row
    # with it), then the two cached pages, last block first.
    assert [(e.position, e.page, e.count, e.block is not None) for e in entries] == [
        (0, 2, 99_998, False), (99_998, 1, 1, True), (99_999, 0, 1, True)]
    order = QueueOrder(snap)
    assert order.position(50_000) == 50_000 - 2
    assert [order.place_label(p) for p in (2, 3, 1_001, 50_000, 1, 0)] == ["q0", "q1", "q999", "q49k", "q99k", "q99k"]
    big = kvcore.make_cache("hash", 200_000, TOKENS_PER_PAGE)
    b = big.acquire_pages_for_tokens([3, 4])
    page = b.pages[0]
    b.publish_pages_for_tokens()
    b.release_pages()  # a cached page joins the tail: 199,999 pages ahead of it
    assert QueueOrder(big.snapshot()).place_label(page) == "q…"
    a_page = cache.acquire_pages_for_tokens([9]).pages[0]
    assert QueueOrder(cache.snapshot()).place_label(a_page) is None  # referenced: not queued


def test_a_trie_snapshot_is_refused():
    snap = kvcore.make_cache("trie", 4, 2).snapshot()
    for read in (block_lines, queue_entries, free_queue_title, block_counts, QueueOrder):
        with pytest.raises(NotAHashSnapshot, match="trie snapshot has no cached blocks or free queue"):
            read(snap)


# -- one numbering for queue places: the pool's q0 is the head ----------------------------------


def test_the_why_panel_and_the_pool_number_queue_places_the_same_way():
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session
    from kvviz.core.why import page_status

    session = Session.from_scenario(parse_scenario(
        "cache hash pages=4 tokens_per_page=2\nacquire a 1 2 3 4\npublish a\nrelease a\n"))
    snap = session.frame(3).snapshot
    order = QueueOrder(snap)
    queue = list(snap.free)
    assert len(queue) == 4
    for place, page in enumerate(queue):
        text = " ".join(page_status(session, 3, page).lines)
        assert order.place_label(page) == f"q{place}"
        assert f"q{place}" in text and f"of {len(queue)}" in text, text
        assert ("q0 (the head)" in text) == (place == 0) and "number " not in text
