# SPDX-License-Identifier: Apache-2.0
"""The trie has two eviction loops: a fast one with the heap inlined (kvcore/trie_fast.py, no
events) and the readable one through the heap's methods (kvcore/trie.py, events on). They must
leave identical states.

The state machine test drives both, but on pools of at most 8 pages, where the heap is at
most three levels deep. Here the heap holds hundreds of candidates, so the inlined sifts
walk many levels, chains are long, and evicted nodes are reused by later publishes.
"""

from __future__ import annotations

import random

import pytest

from kvcore import POLICIES, PagePool, TriePagedAttentionCache


def run_workload(seed: int, record: bool, pages: int = 1_000, steps: int = 2_000, policy: str = "lru"):
    """A seeded mix of shared prefixes, chains of several pages, held and released
    allocations, and extends, on a pool small enough to evict constantly. Returns the
    cache and the snapshot after every 4th step and at the end."""
    rng = random.Random(seed)
    cache = TriePagedAttentionCache(PagePool(pages), 4, policy)
    cache.record_events(record)
    prefixes = [[rng.randrange(50) for _ in range(4 * rng.randrange(1, 6))] for _ in range(60)]
    live = []
    states = []
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.5 or not live:
            tokens = list(rng.choice(prefixes)) + [rng.randrange(50) for _ in range(rng.randrange(0, 24))]
            try:
                allocation = cache.acquire_pages_for_tokens(tokens)
            except Exception as error:  # a pool too full for this request: must change nothing
                states.append(("failed", type(error).__name__))
            else:
                allocation.publish_pages_for_tokens()
                live.append(allocation)
        elif roll < 0.58:
            allocation = rng.choice(live)
            grown = list(allocation.tokens) + [rng.randrange(50) for _ in range(rng.randrange(1, 12))]
            try:
                allocation.extend_allocation(grown)
            except Exception as error:
                states.append(("failed", type(error).__name__))
            else:
                allocation.publish_pages_for_tokens()
        else:
            allocation = live.pop(rng.randrange(len(live)))
            allocation.release_pages()
        if record:
            cache.take_events()
        if len(states) % 4 == 0:  # every 4th step: snapshots of a 1,000-page cache cost
            states.append(cache.snapshot())
        else:
            states.append(None)
    states.append(cache.snapshot())
    return cache, states


@pytest.mark.parametrize("seed", range(4))
def test_fast_and_narrated_eviction_leave_the_same_state_at_every_step(seed):
    fast, fast_states = run_workload(seed, record=False)
    narrated, narrated_states = run_workload(seed, record=True)
    assert fast.snapshot().stats.evictions > 1_000  # the workload really evicts, a lot
    assert max(len(s.heap) for s in fast_states if s is not None and not isinstance(s, tuple)) > 150  # 8 levels
    for step, (a, b) in enumerate(zip(fast_states, narrated_states)):
        assert a == b, f"seed {seed}: the two eviction paths diverge at step {step}"
    assert fast.check_invariants() == []
    assert narrated.check_invariants() == []


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "lru"])
def test_every_policy_evicts_alike_on_both_paths(policy):
    """The inlined loop evicts a chain's next node without comparing keys only under lru,
    fifo and mru; under the others it must compare (a parent can have more hits, a higher
    priority, or a larger -seq than its child). Both loops must agree for every policy."""
    fast, fast_states = run_workload(1, record=False, steps=1_000, policy=policy)
    narrated, narrated_states = run_workload(1, record=True, steps=1_000, policy=policy)
    assert fast.snapshot().stats.evictions > 300
    for step, (a, b) in enumerate(zip(fast_states, narrated_states)):
        assert a == b, f"{policy}: the two eviction paths diverge at step {step}"
    assert fast.check_invariants() == []


@pytest.mark.parametrize("record", [False, True], ids=["fast", "narrated"])
def test_a_chain_stops_where_another_candidate_is_older_than_its_next_node(record):
    """A chain's next node is evicted straight away only while it is the heap's minimum.

    Chain 1-2-3 is published at tick 2; the lone leaf 9 at tick 5; then an acquire of [1, 2]
    touches 1 and 2 at tick 7. Evicting 3 pages takes 3 (tick 2), then 9 (tick 5) before 2
    (tick 7): the chain must stop at 2 although 2 became a candidate when 3 went."""
    cache = TriePagedAttentionCache(PagePool(6), 1)
    cache.record_events(record)
    chain = cache.acquire_pages_for_tokens([1, 2, 3])            # tick 1
    chain.publish_pages_for_tokens()                             # tick 2: nodes 1-2-3
    chain.release_pages()                                        # tick 3: 3 is a candidate
    lone = cache.acquire_pages_for_tokens([9])                   # tick 4
    lone.publish_pages_for_tokens()                              # tick 5: node 9
    lone.release_pages()                                         # tick 6: 9 is a candidate
    again = cache.acquire_pages_for_tokens([1, 2])               # tick 7: touches 1 and 2
    again.release_pages()                                        # tick 8
    cache.take_events()
    taker = cache.acquire_pages_for_tokens([7, 7, 7, 7, 7])      # 5 pages: 2 free + 3 evicted
    assert [n.tokens for n in cache.snapshot().nodes if n.parent is not None] == [(1,)]
    if record:
        evicted = [e.tokens for e in cache.take_events() if type(e).__name__ == "Evicted"]
        assert evicted == [(3,), (9,), (2,)]
    assert cache.check_invariants() == []
    taker.release_pages()


def test_reused_nodes_carry_nothing_from_their_evicted_life():
    """Evicted nodes are recycled by later publishes: the new node must be exactly what a
    fresh one would be (same snapshot as a cache restored from the same state)."""
    cache = TriePagedAttentionCache(PagePool(8), 2)
    for first in range(40):  # each request evicts the previous chain, then republishes
        allocation = cache.acquire_pages_for_tokens([first, 1, 2, 3, 4, 5, 6, 7])
        allocation.publish_pages_for_tokens()
        allocation.release_pages()
        assert cache.check_invariants() == []
        twin = TriePagedAttentionCache.restore(cache.snapshot())
        assert twin.snapshot() == cache.snapshot()
    assert cache.snapshot().stats.evictions >= 150


def test_restore_refuses_seqs_that_break_creation_order():
    """The fast eviction relies on a parent's seq being below its child's (a parent is
    created first). kvcore's own snapshots always hold it; restore refuses one that does
    not, rather than let the two eviction paths disagree (found by review)."""
    import json

    from kvcore import InvalidOperation, Snapshot

    d = {"schema": "kvcore.snapshot/1", "kind": "trie", "policy": "lru", "tokens_per_page": 1, "page_count": 3,
         "clock": 3, "next_seq": 6, "next_allocation_id": 0,
         "pages": [[0, "cached", None, 1, 0], [1, "cached", None, 2, 0], [2, "cached", None, 3, 0]], "free": [],
         "nodes": [[0, None, [], None, 0, 0, 0], [1, 0, [7], 0, 0, 3, 1], [2, 1, [8], 1, 0, 3, 2],
                   [3, 0, [9], 2, 0, 3, 3]],
         "allocations": [], "heap": [2, 3],
         "stats": {"lookups": 0, "lookup_tokens": 0, "hit_tokens": 0, "evictions": 0, "dedups": 0}}
    assert TriePagedAttentionCache.restore(Snapshot.from_dict(d)).check_invariants() == []  # as made
    for node, seq, message in ((1, 5, "below its parent"), (3, 6, "next_seq")):
        bad = json.loads(json.dumps(d))
        bad["nodes"][node][0] = bad["nodes"][node][6] = seq  # id and seq together
        for other in bad["nodes"]:
            if other[1] == node:
                other[1] = seq
        for page in bad["pages"]:
            if page[3] == node:
                page[3] = seq
        bad["heap"] = [seq if h == node else h for h in bad["heap"]]
        with pytest.raises(InvalidOperation, match=message):
            TriePagedAttentionCache.restore(Snapshot.from_dict(bad))
    mismatched = json.loads(json.dumps(d))
    mismatched["nodes"][2][6] = 4  # seq differs from the id
    with pytest.raises(InvalidOperation, match="seq is its id"):
        TriePagedAttentionCache.restore(Snapshot.from_dict(mismatched), verify=False)


def test_spare_nodes_do_not_keep_evicted_chains_alive():
    """Evicted nodes kept for reuse drop their parent link: a long evicted chain must not
    stay reachable through them."""
    import gc

    from kvcore import trie, trie_fast

    def nodes_alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is trie._Node)

    before = nodes_alive()  # other tests' caches may still be alive: count only ours
    cache = TriePagedAttentionCache(PagePool(400), 1)
    chain = cache.acquire_pages_for_tokens(list(range(400)))
    chain.publish_pages_for_tokens()
    chain.release_pages()
    held = cache.acquire_pages_for_tokens(list(range(1000, 1400)))  # evicts the whole chain
    assert len(cache._spare) == trie_fast._SPARE_NODES
    assert nodes_alive() - before == 1 + len(cache._spare)  # the root and the spares: the rest is gone
    assert all(n.parent is None for n in cache._spare)
    held.release_pages()


def _leaves_released_in(order: tuple[int, ...], policy: str) -> TriePagedAttentionCache:
    """A full pool of one-page leaves under the root (leaf i: tokens [100 + i], seq i + 1,
    page i), released in ``order``: the heap's array is what those pushes leave."""
    cache = TriePagedAttentionCache(PagePool(len(order)), 1, policy)
    held = [cache.acquire_pages_for_tokens([100 + i]) for i in range(len(order))]
    for allocation in held:
        allocation.publish_pages_for_tokens()
    for i in order:
        held[i].release_pages()
    return cache


@pytest.mark.parametrize("policy", ["fifo", "filo"])
def test_batch_eviction_takes_the_smaller_child_however_the_heap_was_filled(policy):
    """Under fifo and filo every key is seq alone, so the inlined pop's choice between two
    children rests on seq: every release order of five leaves, every batch size, evicts the
    leaves in key order and leaves a heap whose every parent is below its children. (A pop
    that compared the keys above seq only would tie there and take the left child.)"""
    from itertools import permutations

    for order in permutations(range(5)):
        for count in range(1, 5):
            cache = _leaves_released_in(order, policy)
            expected = sorted(range(5), reverse=policy == "filo")[:count]  # page i holds seq i + 1
            taken = cache.acquire_pages_for_tokens(list(range(count)))
            assert list(taken.pages) == expected, (order, count)
            assert cache.check_invariants() == [], (order, count)
