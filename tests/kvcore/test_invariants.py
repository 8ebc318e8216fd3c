# SPDX-License-Identifier: Apache-2.0
"""The invariant checker finds each kind of corruption (and nothing in healthy states)."""

import pytest

import kvcore
from kvcore import Snapshot, check_snapshot


def _state():
    """Healthy trie: a held chain (a), a released chain (b), an owned tail (a's page 2)."""
    cache = kvcore.make_cache("trie", 8, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens([1, 2, 7, 8], name="b")
    b.publish_pages_for_tokens()
    b.release_pages()
    return cache


def _tampered(change):
    d = _state().snapshot().to_dict()
    change(d)
    return check_snapshot(Snapshot.from_dict(d))


def _node(d, tokens):
    return next(n for n in d["nodes"] if n[2] == tokens)


def test_a_healthy_cache_has_no_violations():
    assert _state().check_invariants() == []


def _set_ref(d, tokens, ref):
    _node(d, tokens)[4] = ref


@pytest.mark.parametrize("change, invariant, needle", [
    (lambda d: d["free"].append(d["allocations"][0]["pages"][2]), 1, "in 2 places"),
    (lambda d: d["free"].pop(0), 1, "nowhere"),
    (lambda d: _set_ref(d, [1, 2], 3), 2, "has ref 3 but 1 live allocations"),
    (lambda d: _set_ref(d, [7, 8], 1), 2, "has ref 1 but 0"),
    (lambda d: d.update(heap=[]), 3, "not in the eviction heap"),
    (lambda d: d.update(heap=d["heap"] + [_node(d, [1, 2])[0]]), 3, "is in the eviction heap but"),
    (lambda d: _node(d, [7, 8]).__setitem__(2, [7]), 4, "not a full page"),
    (lambda d: _node(d, [7, 8]).__setitem__(2, [3, 4]), 4, "same tokens"),
    (lambda d: _node(d, [7, 8]).__setitem__(1, 99), 4, "does not exist"),
    (lambda d: d["allocations"][0].update(pages=[d["allocations"][0]["pages"][0]] * 3), 5, "twice"),
    (lambda d: d["allocations"][0].update(tokens=list(range(1, 12))), 5, "only 3 pages"),
    (lambda d: _node(d, [7, 8]).__setitem__(5, 999), 6, "after the clock"),
])
def test_each_kind_of_corruption_is_reported_with_its_invariant(change, invariant, needle):
    violations = _tampered(change)
    assert any(v.invariant == invariant and needle in v.message for v in violations), violations


def test_violations_name_the_pages_and_nodes_to_highlight():
    d = _state().snapshot().to_dict()
    page = d["allocations"][0]["pages"][2]
    d["free"].append(page)
    (v,) = [v for v in check_snapshot(Snapshot.from_dict(d)) if v.invariant == 1]
    assert v.pages == (page,) and v.allocations == (0,)
    assert str(v).startswith("invariant 1 (every page is in exactly one place)")


def test_the_live_heap_bookkeeping_is_checked_too():
    cache = _state()
    candidate = cache._heap.peek()
    candidate.hpos = 5
    assert any("records position" in v.message for v in cache.check_invariants())


# ----------------------------------------------------------------------------- scale


def _one_allocation_of(pages: int, publish: bool):
    """``cache trie pages=N tokens_per_page=1`` / ``acquire a 0..N-1``."""
    cache = kvcore.make_cache("trie", pages, 1)
    allocation = cache.acquire_pages_for_tokens(range(pages), name="a")
    if publish:
        allocation.publish_pages_for_tokens()
    cache.check_invariants()  # build the snapshot rows once, as the UI does on the first frame
    return cache


def _best_check_seconds(cache, rounds: int = 3) -> float:
    import gc
    import time

    best = float("inf")
    for _ in range(rounds):
        # The collector is off while timing, so no pass lands in one check and not another;
        # no collection before (with 100,000 pages alive one walks millions of objects, 0.5 s).
        gc.disable()
        try:
            # CPU time, not wall time: on a shared machine a preempted check is not a slow one.
            start = time.process_time()
            violations = cache.check_invariants()
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
        assert violations == []
    return best


@pytest.mark.parametrize("publish", [False, True], ids=["owned", "published"])
def test_checking_the_invariants_grows_linearly_with_the_pages(publish):
    # One allocation of N pages: a checker that counts each page of a block table in the
    # block table (``pages.count(p)``) is quadratic: 100,000 pages took 76 s. Linear growth
    # from 10,000 to 100,000 pages is 10x in work; measured 11-18x in time (100,000 nodes'
    # dicts and rows outgrow the CPU caches), so the bound is 25x; quadratic is about 100x.
    small = _best_check_seconds(_one_allocation_of(10_000, publish))
    large = _best_check_seconds(_one_allocation_of(100_000, publish))
    assert large < 25 * small, f"10,000 pages: {small:.3f} s, 100,000 pages: {large:.3f} s"


def test_a_block_table_listing_a_page_twice_names_it_once_in_a_short_message():
    d = _state().snapshot().to_dict()
    a = d["allocations"][0]
    a["pages"] = a["pages"] + [a["pages"][0]] * 10_000
    (v,) = [v for v in check_snapshot(Snapshot.from_dict(d)) if "twice" in v.message]
    assert v.pages == (a["pages"][0],) and len(v.message) < 200
