# SPDX-License-Identifier: Apache-2.0
"""Eviction policies: each evicts what its key says, keys never change while a
node is a candidate (so the heap stays incremental), and the policy survives snapshots."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import (
    KEY_FIELDS,
    POLICIES,
    InvalidConfiguration,
    InvalidOperation,
    PagePool,
    Snapshot,
    TriePagedAttentionCache,
    check_snapshot,
)
from kvcore import events as ev
from kvcore.policies import key_tuple, node_key_function, pack_tuple, unpack

from .refmodel import policy_key


def request(cache, token: int, priority: int = 0) -> None:
    """One whole request for the one-token page ``[token]``: acquire, publish, release."""
    allocation = cache.acquire_pages_for_tokens([token], priority=priority)
    allocation.publish_pages_for_tokens()
    allocation.release_pages()


def seven_candidates(policy: str, record: bool = False) -> TriePagedAttentionCache:
    """Seven one-page leaves N1..N7 (tokens [1]..[7], created in that order, so seq 1..7) in
    a full 7-page pool, touched so that each policy has a different victim:

    ======  =====  ============  ========  ==========================================
    node    hits   last touched  priority  why
    ======  =====  ============  ========  ==========================================
    N1      1      4th touch     5         created first: fifo's victim
    N2      2      1st, 2nd      5         touched earliest of all: lru's victim
    N3      1      3rd           5         earliest touch among hits < 2: slru's
    N4      1      5th           0         the only priority 0: priority's victim
    N5      0      created 6th   5         the earliest of the two with 0 hits: lfu's
    N6      1      last          5         touched last: mru's victim
    N7      0      created last  5         created last: filo's victim
    ======  =====  ============  ========  ==========================================

    N3, N4, N1 have hits 1 and N2 hits 2, so lru's N2 is protected under slru (tier 1), and
    N5 (created after every touch above) has a later last_access than N3: lfu takes N5,
    slru N3.
    """
    cache = TriePagedAttentionCache(PagePool(7), 1, policy)
    cache.record_events(record)
    for token in (1, 2, 3):
        request(cache, token, priority=5)
    request(cache, 4, priority=0)
    request(cache, 2)  # N2: hit 1
    request(cache, 2)  # N2: hit 2, now touched after every creation so far
    request(cache, 3)  # N3: hit 1
    request(cache, 1)  # N1: hit 1
    request(cache, 4)  # N4: hit 1 (priority 0 stays 0)
    request(cache, 5, priority=5)  # N5 created
    request(cache, 6, priority=5)  # N6 created
    request(cache, 7, priority=5)  # N7 created
    request(cache, 6)  # N6: hit 1, the last touch
    assert cache.page_pool.available_page_count() == 0
    return cache


#: The victim of each policy, derived by hand in seven_candidates' table.
VICTIM = {"fifo": 1, "lru": 2, "slru": 3, "priority": 4, "lfu": 5, "mru": 6, "filo": 7}


def test_the_seven_victims_are_seven_different_nodes():
    assert sorted(VICTIM) == sorted(POLICIES) and sorted(VICTIM.values()) == list(range(1, 8))


@pytest.mark.parametrize("record", [False, True], ids=["fast", "narrated"])
@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_evicts_its_own_victim(policy, record):
    cache = seven_candidates(policy, record)
    cache.take_events()
    before = {n.tokens: n for n in cache.snapshot().nodes if n.parent is not None}
    assert [before[(k,)].hits for k in range(1, 8)] == [1, 2, 1, 1, 0, 1, 0]
    assert [before[(k,)].priority for k in range(1, 8)] == [5, 5, 5, 0, 5, 5, 5]
    taker = cache.acquire_pages_for_tokens([99])  # one page, from eviction
    left = {n.tokens for n in cache.snapshot().nodes if n.parent is not None}
    assert {(k,) for k in range(1, 8)} - left == {(VICTIM[policy],)}
    if record:
        evicted = [e for e in cache.take_events() if isinstance(e, ev.Evicted)]
        assert [e.tokens for e in evicted] == [(VICTIM[policy],)]
        assert evicted[0].key == cache_key(before[(VICTIM[policy],)], policy)
    assert cache.check_invariants() == []
    taker.release_pages()


def cache_key(node, policy):
    return policy_key(policy, node)  # the model's table, not kvcore's


@pytest.mark.parametrize("policy", POLICIES)
def test_the_whole_eviction_order_follows_the_table(policy):
    """Evicting all seven, one page at a time, goes in the order of the model's keys."""
    cache = seven_candidates(policy)
    nodes = [n for n in cache.snapshot().nodes if n.parent is not None]
    expected = [n.tokens for n in sorted(nodes, key=lambda n: policy_key(policy, n))]
    evicted = []
    for i in range(7):
        before = {n.tokens for n in cache.snapshot().nodes}
        cache.acquire_pages_for_tokens([100 + i])  # held: the next one must evict again
        evicted += sorted(before - {n.tokens for n in cache.snapshot().nodes})
    assert evicted == expected


def test_a_failed_acquire_counts_no_hit_and_adoption_is_not_a_hit():
    cache = TriePagedAttentionCache(PagePool(3), 1, "lfu")
    first = cache.acquire_pages_for_tokens([1, 2])
    second = cache.acquire_pages_for_tokens([1])
    first.publish_pages_for_tokens()
    second.publish_pages_for_tokens()  # adopts node [1]: a dedup, not a hit
    assert cache.snapshot().stats.dedups == 1
    assert [n.hits for n in cache.snapshot().nodes if n.parent is not None] == [0, 0]
    before = cache.snapshot()
    with pytest.raises(kvcore.CacheAllocationFailure):
        cache.acquire_pages_for_tokens([1, 2, 3, 4, 5, 6])  # matches [1] [2], then fails
    assert cache.snapshot() == before
    cache.acquire_pages_for_tokens([1, 2, 3])
    assert [n.hits for n in cache.snapshot().nodes if n.parent is not None] == [1, 1]


def test_priority_is_the_highest_of_the_allocations_that_published_or_matched():
    cache = TriePagedAttentionCache(PagePool(4), 1, "priority")
    a = cache.acquire_pages_for_tokens([1, 2], priority=3)
    b = cache.acquire_pages_for_tokens([1], priority=7)
    a.publish_pages_for_tokens()  # creates [1] and [1, 2] with priority 3
    b.publish_pages_for_tokens()  # adopts [1]: 7
    cache.acquire_pages_for_tokens([1, 2], priority=1)  # matched: both stay (7, 3)
    assert [n.priority for n in cache.snapshot().nodes if n.parent is not None] == [7, 3]
    assert [a.priority for a in cache.snapshot().allocations] == [3, 7, 1]


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1", 2**63, None])
def test_bad_priorities_are_refused_before_any_change(bad):
    cache = TriePagedAttentionCache(PagePool(4), 1, "priority")
    before = cache.snapshot()
    with pytest.raises(InvalidOperation, match="priority"):
        cache.acquire_pages_for_tokens([1], priority=bad)
    assert cache.snapshot() == before


@pytest.mark.parametrize("bad", ["LRU", "random", "", None, 1])
def test_unknown_policies_are_configuration_errors(bad):
    with pytest.raises(InvalidConfiguration, match="eviction policy"):
        TriePagedAttentionCache(PagePool(4), 1, bad)
    with pytest.raises(InvalidConfiguration):
        kvcore.make_cache("trie", 4, 1, bad)


def test_the_base_cache_takes_lru_only():
    assert kvcore.make_cache("base", 4, 1).snapshot().policy == "lru"
    with pytest.raises(InvalidConfiguration, match="base"):
        kvcore.make_cache("base", 4, 1, "lfu")


# -- packed keys --------------------------------------------------------------------------

fields = st.fixed_dictionaries({
    "last_access": st.integers(0, 2**64 - 1), "seq": st.integers(0, 2**40 - 1),
    "hits": st.integers(0, 2**64 - 1), "priority": st.integers(0, 2**63 - 1)})


class _Fields:
    def __init__(self, d):
        self.__dict__.update(d)


@given(policy=st.sampled_from(POLICIES), a=fields, b=fields)
def test_packed_keys_order_like_the_tables_tuples(policy, a, b):
    x, y = _Fields(a), _Fields(b)
    kx, ky = policy_key(policy, x), policy_key(policy, y)
    packed = node_key_function(policy)
    assert (packed(x) < packed(y)) == (kx < ky)
    assert key_tuple(policy, x.last_access, x.seq, x.hits, x.priority) == kx
    assert pack_tuple(kx) == packed(x)
    assert unpack(policy, packed(x)) == kx
    assert len(KEY_FIELDS[policy]) == len(kx)
    assert packed(x) < 1 << 200  # below the trie's sentinel


# -- the heap stays incremental ------------------------------------------------------------

op = st.one_of(
    st.tuples(st.just("acquire"), st.lists(st.integers(0, 2), max_size=7), st.integers(0, 2), st.sampled_from((0, 1, 2))),
    st.tuples(st.just("publish"), st.integers(0, 30)),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("extend"), st.integers(0, 30), st.lists(st.integers(0, 2), max_size=3)),
)


@settings(max_examples=300)
@given(policy=st.sampled_from(POLICIES), pages=st.integers(2, 7), tpp=st.integers(1, 2),
       ops=st.lists(op, max_size=40), record=st.booleans())
def test_a_candidates_key_never_changes_while_it_is_a_candidate(policy, pages, tpp, ops, record):
    """Before and after every operation, each node that is a candidate on both sides has the
    same key; the key stored in the heap is the one its fields give now (check_invariants
    compares them) and no operation both removes and re-adds a node. So the heap never
    needs a key update, for any policy."""
    cache = TriePagedAttentionCache(PagePool(pages), tpp, policy)
    cache.record_events(record)
    handles = []
    for o in ops:
        before = cache.snapshot()
        try:
            if o[0] == "acquire":
                handles.append(cache.acquire_pages_for_tokens(o[1], o[2], priority=o[3]))
            elif handles:
                h = handles[o[1] % len(handles)]
                if o[0] == "publish":
                    h.publish_pages_for_tokens()
                elif o[0] == "release":
                    h.release_pages()
                else:
                    h.extend_allocation(h.tokens + tuple(o[2]))
        except kvcore.KVCacheError:
            assert cache.snapshot() == before
            continue
        after = cache.snapshot()
        old = {i: before.node_key(before.node(i)) for i in before.heap}
        new = {i: after.node_key(after.node(i)) for i in after.heap}
        assert {i: old[i] for i in old.keys() & new.keys()} == {i: new[i] for i in old.keys() & new.keys()}
        if record:
            events = cache.take_events()
            removed = {e.node for e in events if isinstance(e, ev.CandidateRemoved)}
            added = {e.node for e in events if isinstance(e, ev.CandidateAdded)}
            assert not removed & added
        assert cache.check_invariants() == []


# -- snapshots -----------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_restore_round_trips_the_policy_and_the_counters(policy):
    cache = seven_candidates(policy)
    live = cache.acquire_pages_for_tokens([1, 50], priority=9)
    snap = cache.snapshot()
    assert snap.policy == policy
    for given_snap in (snap, Snapshot.from_dict(json.loads(snap.to_json()))):
        twin = TriePagedAttentionCache.restore(given_snap)
        assert twin.policy == policy and twin.snapshot() == snap
        twin.acquire_pages_for_tokens([77])  # evicts the same victim as the original would
        cache_copy = TriePagedAttentionCache.restore(snap)
        cache_copy.acquire_pages_for_tokens([77])
        assert twin.snapshot() == cache_copy.snapshot()
    assert live.priority == 9


def test_snapshots_from_before_policies_still_restore_byte_for_byte():
    """Seven-field node rows and allocations without a priority are what kvcore wrote before
    they read back with hits and priority 0 and serialise unchanged."""
    cache = TriePagedAttentionCache(PagePool(6), 2)
    cache.acquire_pages_for_tokens([1, 2, 3, 4]).publish_pages_for_tokens()
    d = cache.snapshot().to_dict()
    assert all(len(row) == 7 for row in d["nodes"]) and all("priority" not in a for a in d["allocations"])
    old = json.dumps(d, sort_keys=True, separators=(",", ":"))
    restored = TriePagedAttentionCache.restore(Snapshot.from_dict(json.loads(old)))
    assert restored.snapshot().to_json() == old
    cache.acquire_pages_for_tokens([1, 2])  # a hit: that row now carries hits and priority
    rows = cache.snapshot().to_dict()["nodes"]
    assert [len(r) for r in rows] == [7, 9, 7] and rows[1][7:] == [1, 0]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_checker_reads_the_heap_with_the_snapshots_policy(policy):
    """A heap in one policy's order is broken under every other policy: the victims differ,
    and a min-heap's root is its minimum."""
    snap = seven_candidates(policy).snapshot()
    assert check_snapshot(snap) == []
    for other in POLICIES:
        if other == policy:
            continue
        relabelled = Snapshot.from_dict({**snap.to_dict(), "policy": other})
        broken = [v for v in check_snapshot(relabelled) if v.invariant == 3]
        assert broken and "heap property broken" in str(broken[0]) and other in str(broken[0])
        with pytest.raises(InvalidOperation, match="heap property"):
            TriePagedAttentionCache.restore(relabelled)


def test_a_cache_restored_at_every_step_evicts_like_the_original_for_every_policy():
    rng = random.Random(3)
    for policy in POLICIES:
        original = TriePagedAttentionCache(PagePool(8), 1, policy)
        cache = TriePagedAttentionCache(PagePool(8), 1, policy)
        for _ in range(200):
            tokens = [rng.randrange(8) for _ in range(rng.randrange(1, 4))]
            priority, release = rng.choice((0, 1, 2)), rng.random() < 0.97
            outcomes = []
            for c in (original, cache):
                try:
                    a = c.acquire_pages_for_tokens(tokens, priority=priority)
                except kvcore.CacheAllocationFailure:
                    outcomes.append("failed")
                    continue
                a.publish_pages_for_tokens()
                if release:
                    a.release_pages()
                outcomes.append("ok")
            assert outcomes[0] == outcomes[1]
            cache = TriePagedAttentionCache.restore(cache.snapshot())
            assert cache.snapshot() == original.snapshot()
        assert cache.check_invariants() == [] and cache.snapshot().stats.evictions > 30
