# SPDX-License-Identifier: Apache-2.0
"""The incremental invariant check gives the full check's verdict at every step.

``check_snapshot`` is the oracle: random op sequences on every cache kind and policy,
snapshots corrupted one row at a time (the incremental check then compares by identity),
and live caches corrupted through the cache's own account of what changed (the snapshot
then says which rows are new, and the incremental check trusts that account).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import POLICIES, check_snapshot
from kvcore.errors import KVCacheError
from kvcore.incremental import IncrementalChecker
from kvcore.snapshot import PageInfo

from .test_stateful import apply_op, op_strategy

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
EXAMPLES = {"dev": 50, "ci": 300, "soak": 20_000}.get(PROFILE, 300)

KINDS_AND_POLICIES = [("trie", p) for p in POLICIES] + [("base", "lru"), ("hash", "lru")]


def _run(kind, policy, page_count, tokens_per_page, ops, each):
    """Apply ``ops`` to a recording cache; ``each(cache, snapshot)`` after every op."""
    cache = kvcore.make_cache(kind, page_count, tokens_per_page, policy)
    cache.record_events(True)
    handles: list = []
    each(cache, cache.snapshot())
    for op in ops:
        apply_op(cache, handles, op)
        cache.take_events()
        each(cache, cache.snapshot())


def _same_verdict(checker: IncrementalChecker, snap) -> list:
    full = check_snapshot(snap)
    assert checker.check(snap) == full
    return full


@pytest.mark.parametrize("kind, policy", KINDS_AND_POLICIES)
@settings(max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page_count=st.integers(2, 8), tokens_per_page=st.integers(1, 3),
       ops=st.lists(op_strategy, min_size=1, max_size=30))
def test_the_incremental_check_agrees_with_the_full_one_along_random_runs(kind, policy, page_count,
                                                                          tokens_per_page, ops):
    checker = IncrementalChecker()
    _run(kind, policy, page_count, tokens_per_page, ops, lambda cache, snap: _same_verdict(checker, snap))
    if kind != "hash":  # a healthy run is checked in full once, then incrementally
        assert checker.full_checks == 1


# -- snapshots corrupted one row at a time ------------------------------------------------


def _corruptions(snap):
    """Snapshots differing from ``snap`` in one row (or one list entry), each the way a broken
    cache or adapter could get it wrong: ``(what, snapshot)`` pairs."""
    out = []
    replace = dataclasses.replace
    nodes = list(snap.nodes)
    for i, n in enumerate(nodes):
        for what, row in (("ref+1", dataclasses.replace(n, ref=n.ref + 1)),
                          ("ref-1", dataclasses.replace(n, ref=max(0, n.ref - 1))),
                          ("future", dataclasses.replace(n, last_access=snap.clock + 1)),
                          ("short", dataclasses.replace(n, tokens=n.tokens[:-1])),
                          ("orphan", dataclasses.replace(n, parent=10_000)),
                          ("reparent", dataclasses.replace(n, parent=nodes[0].id if n.parent != nodes[0].id else None)),
                          ("page", dataclasses.replace(n, page=(n.page + 1) % snap.page_count
                                                       if n.page is not None else 0)),
                          ("older", dataclasses.replace(n, last_access=max(0, n.last_access - 1)))):
            if row != n:
                out.append((f"node {n.id} {what}", replace(snap, nodes=tuple(nodes[:i] + [row] + nodes[i + 1:]))))
        out.append((f"node {n.id} gone", replace(snap, nodes=tuple(nodes[:i] + nodes[i + 1:]))))
        out.append((f"node {n.id} twice", replace(snap, nodes=tuple(nodes + [n]))))
    pages = list(snap.pages)
    for p, info in enumerate(pages):
        for state in ("free", "owned", "cached"):
            if state != info.state:
                row = PageInfo(p, state, info.owner, info.node, info.ref)
                out.append((f"page {p} {state}", replace(snap, pages=tuple(pages[:p] + [row] + pages[p + 1:]))))
        row = PageInfo(p, info.state, info.owner, info.node, info.ref + 1)
        out.append((f"page {p} ref+1", replace(snap, pages=tuple(pages[:p] + [row] + pages[p + 1:]))))
    free = list(snap.free)
    for p in range(snap.page_count):
        if p not in free:
            out.append((f"free +{p}", replace(snap, free=tuple(free + [p]))))
    for i in range(len(free)):
        out.append((f"free -{free[i]}", replace(snap, free=tuple(free[:i] + free[i + 1:]))))
        out.append((f"free {free[i]} twice", replace(snap, free=tuple(free + [free[i]]))))
    allocations = list(snap.allocations)
    for i, a in enumerate(allocations):
        rows = []
        if a.pages:
            rows.append(("dup page", dataclasses.replace(a, pages=a.pages + a.pages[:1])))
            rows.append(("swap", dataclasses.replace(a, pages=a.pages[::-1])))
        rows.append(("published+1", dataclasses.replace(a, published=a.published + 1)))
        if a.published:
            rows.append(("published-1", dataclasses.replace(a, published=a.published - 1)))
        rows.append(("released", dataclasses.replace(a, released=True)))
        rows.append(("tokens", dataclasses.replace(a, tokens=a.tokens + (0,) * (snap.tokens_per_page + 1))))
        for what, row in rows:
            out.append((f"allocation {a.id} {what}",
                        replace(snap, allocations=tuple(allocations[:i] + [row] + allocations[i + 1:]))))
        out.append((f"allocation {a.id} gone", replace(snap, allocations=tuple(allocations[:i] + allocations[i + 1:]))))
    heap = list(snap.heap)
    if heap:
        out.append(("heap drops its top", replace(snap, heap=tuple(heap[1:]))))
        out.append(("heap twice", replace(snap, heap=tuple(heap + heap[:1]))))
        out.append(("heap reversed", replace(snap, heap=tuple(heap[::-1]))))
    for n in nodes:
        if n.id not in heap:
            out.append((f"heap +{n.id}", replace(snap, heap=tuple(heap + [n.id]))))
    return out


@pytest.mark.parametrize("kind, policy", [("trie", "lru"), ("trie", "lfu"), ("trie", "priority"), ("base", "lru")])
@settings(max_examples=EXAMPLES // 10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page_count=st.integers(2, 6), tokens_per_page=st.integers(1, 2),
       ops=st.lists(op_strategy, min_size=1, max_size=16), data=st.data())
def test_a_snapshot_corrupted_in_one_row_gets_the_full_checks_violations(kind, policy, page_count, tokens_per_page,
                                                                         ops, data):
    previous = []
    found = [0]

    def each(cache, snap):
        if previous:
            for what, bad in data.draw(st.lists(st.sampled_from(_corruptions(snap)), max_size=4, unique_by=lambda c: c[0])
                                       if _corruptions(snap) else st.just([]), label="corruptions"):
                probe = IncrementalChecker()
                probe.check_full(previous[-1])
                full = check_snapshot(bad)
                assert probe.check(bad) == full, what
                found[0] += bool(full)
        previous.append(snap)

    _run(kind, policy, page_count, tokens_per_page, ops, each)


def test_every_corruption_of_a_rich_state_is_caught_as_the_full_check_catches_it():
    """One state with shared, held, released, evictable and owned pages; every corruption of
    it, checked incrementally from the state before it: the same violations, and most are
    violations (the corruptions are not no-ops)."""
    cache = kvcore.make_cache("trie", 10, 2, "lru")
    cache.record_events(True)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens([1, 2, 7, 8, 9, 9], name="b")
    b.publish_pages_for_tokens()
    b.release_pages()
    c = cache.acquire_pages_for_tokens([5, 6, 7], name="c")
    before = cache.snapshot()
    c.publish_pages_for_tokens()
    after = cache.snapshot()
    violated = 0
    corruptions = _corruptions(after)
    for what, bad in corruptions:
        probe = IncrementalChecker()
        probe.check_full(before)
        full = check_snapshot(bad)
        assert probe.check(bad) == full, what
        violated += bool(full)
    assert violated >= 0.9 * len(corruptions)


# -- live caches corrupted through their own account of what changed ------------------------


def _node(cache, tokens):
    return next(n for n in cache._iter_nodes() if n.tokens == tokens)


@pytest.mark.parametrize("corrupt", [
    lambda c: (setattr(_node(c, (1, 2)), "ref", 5), c._rows.touch([_node(c, (1, 2))])),
    lambda c: (setattr(_node(c, (7, 8)), "ref", 1), c._rows.touch([_node(c, (7, 8))])),
    lambda c: (setattr(_node(c, (1, 2)), "last_access", c.clock + 3), c._rows.touch([_node(c, (1, 2))])),
    lambda c: (setattr(_node(c, (7, 8)), "hits", 40), c._rows.touch([_node(c, (7, 8))])),  # breaks lfu's heap order
    lambda c: c._pool.give([c.allocations[0].pages[-1]]),
    lambda c: (c.allocations[0]._pages.__setitem__(0, c.allocations[0]._pages[-1]),
               c._rows.dirty_allocations.add(0)),
    lambda c: (c.allocations[0]._pages.append(9), c._rows.dirty_allocations.add(0)),
])
def test_a_corruption_the_cache_itself_reports_is_caught_incrementally(corrupt):
    cache = kvcore.make_cache("trie", 10, 2, "lfu")
    cache.record_events(True)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    for tokens in ([1, 2, 7, 8], [1, 2, 9, 9]):
        b = cache.acquire_pages_for_tokens(tokens)
        b.publish_pages_for_tokens()
        b.release_pages()
    checker = IncrementalChecker()
    assert checker.check(cache.snapshot()) == []
    cache.acquire_pages_for_tokens([3, 3])  # one more op, so the next snapshot comes from the kept rows
    corrupt(cache)
    snap = cache.snapshot()
    assert snap._changes is not None and snap._changes.before() is not None  # the kept rows made it
    full = check_snapshot(snap)
    assert full, "the corruption is a violation"
    assert checker.check(snap) == full


def test_a_timeline_of_healthy_steps_is_checked_in_full_only_once():
    cache = kvcore.make_cache("trie", 6, 1, "lru")
    cache.record_events(True)
    checker = IncrementalChecker()
    for i in range(40):
        a = cache.acquire_pages_for_tokens([i % 3, i % 5, i % 7])
        assert checker.check(cache.snapshot()) == []
        a.publish_pages_for_tokens()
        assert checker.check(cache.snapshot()) == []
        a.release_pages()
        assert checker.check(cache.snapshot()) == []
    assert checker.full_checks == 1
    try:
        cache.acquire_pages_for_tokens(list(range(100)))
    except KVCacheError:
        pass
    assert checker.check(cache.snapshot()) == [] and checker.full_checks == 1
