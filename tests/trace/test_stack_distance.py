# SPDX-License-Identifier: Apache-2.0
"""The one-pass LRU curve (Mattson's stack distances) against per-capacity replays, point for
point: kvcore's trie (lru) and hash design, and the independent naive replay; where it stops
being exact (a request larger than the cache) and why; which policies are stack algorithms
(Belady's anomaly on fifo, lfu and mru, inclusion broken on slru)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import ReplayConfig, replay
from kvviz.trace.stack_distance import lru_curve

from .naive_replay import naive_replay

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")
PAGE = 512


def requests_of(chains, short_by=()) -> list[TraceRequest]:
    """Requests of these hash-id chains; request i's input falls ``short_by[i]`` tokens short of
    its last block (a partial last block, as in the real traces)."""
    out = []
    for i, ids in enumerate(chains):
        short = short_by[i] if i < len(short_by) else 0
        out.append(TraceRequest(i, i + 1, i, max(PAGE * len(ids) - short, 0), 1, tuple(ids)))
    return out


def replayed(requests, design, pages, policy="lru"):
    return replay(requests, ReplayConfig(capacity_tokens=pages * PAGE, cache=design, policy=policy))


def assert_curve_is_the_replay(curve, requests, design, pages):
    result = replayed(requests, design, pages)
    assert (result.failed_to_fit, result.served) == (0, len(requests)), (design, pages)
    assert curve.hit_tokens(pages) == result.hit_tokens, (design, pages)
    assert curve.pages_evicted(pages) == result.pages_evicted, (design, pages)
    assert curve.token_hit_rate(pages) == result.token_hit_rate, (design, pages)


@needs_data
def test_the_one_pass_curve_is_every_replay_of_the_conversation_trace_from_its_largest_request():
    requests = read_trace(CONVERSATION, first=500).requests
    curve = lru_curve(requests)
    low, distinct = curve.exact_from_pages, curve.distinct_blocks
    assert low == max(len(r.hash_ids) for r in requests)
    # The bound and its neighbours, half-decade steps, and both sides of "everything fits".
    pages = {low, low + 1, low + 2, distinct - 1, distinct, distinct + 1, 2 * distinct}
    step = low
    while step < distinct:
        pages.add(step)
        step = step * 3 // 2
    for design in ("trie", "hash"):
        for p in sorted(pages):
            assert_curve_is_the_replay(curve, requests, design, p)
    assert curve.pages_evicted(distinct) == 0 < curve.pages_evicted(distinct - 1)
    assert curve.hit_tokens(distinct) == replayed(requests, "trie", 10 * distinct).hit_tokens


@needs_data
def test_the_one_pass_curve_equals_the_naive_replay_at_the_sweeps_capacities():
    requests = read_trace(CONVERSATION, first=1500).requests
    curve = lru_curve(requests)
    for capacity in (3_162_278, 10_000_000, 31_622_777):
        pages = capacity // PAGE
        assert curve.is_exact(pages)
        for design in ("trie", "hash"):
            naive = naive_replay(requests, design=design, capacity_tokens=capacity, fast=True)
            assert (curve.hit_tokens(pages), curve.pages_evicted(pages)) == (naive.hit_tokens, naive.pages_evicted)


# Chains over a small alphabet so that prefixes are shared, evicted and asked for again.
chains = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=6), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(chains=chains, short_by=st.lists(st.integers(0, PAGE - 1), max_size=30))
def test_on_generated_traces_the_curve_is_every_replay_from_the_largest_request(chains, short_by):
    requests = requests_of(chains, short_by)
    curve = lru_curve(requests)
    for pages in range(curve.exact_from_pages, curve.distinct_blocks + 2):
        for design in ("trie", "hash"):
            assert_curve_is_the_replay(curve, requests, design, pages)
        naive = naive_replay(requests, capacity_tokens=pages * PAGE)
        assert curve.hit_tokens(pages) == naive.hit_tokens


@settings(max_examples=60, deadline=None)
@given(chains=chains, short_by=st.lists(st.integers(0, PAGE - 1), max_size=30))
def test_below_the_largest_request_the_pass_over_the_requests_that_fit_is_the_replay(chains, short_by):
    """Why the bound: a request larger than the cache fails and changes nothing at that
    capacity only. Leave those out and the pass describes the cache again (their input tokens
    still count)."""
    requests = requests_of(chains, short_by)
    for pages in range(1, max(len(r.hash_ids) for r in requests)):
        fit = [r for r in requests if len(r.hash_ids) <= pages]
        result = replayed(requests, "trie", pages)
        assert result.failed_to_fit == len(requests) - len(fit)
        hits = lru_curve(fit).hit_tokens(pages) if fit else 0
        assert hits == result.hit_tokens == replayed(requests, "hash", pages).hit_tokens


def test_the_curve_refuses_capacities_below_the_largest_request_where_it_is_not_the_replay():
    # A one-block request, a three-block one, the first again, at 2 pages: the big request
    # fails at 2 pages, so the first is still cached (a hit); in an unlimited stack the big
    # request pushed it to depth 4, which the pass would call a miss.
    requests = requests_of([[7], [1, 2, 3], [7]])
    curve = lru_curve(requests)
    assert replayed(requests, "trie", 2).hit_tokens == PAGE
    assert not curve.is_exact(2) and curve.hit_rate_at(2 * PAGE) is None
    with pytest.raises(ValueError, match="exact from 3 pages"):
        curve.hit_tokens(2)
    assert curve.hit_tokens(3) == replayed(requests, "trie", 3).hit_tokens == 0
    assert curve.hit_tokens(4) == replayed(requests, "trie", 4).hit_tokens == PAGE


def test_a_capped_last_block_counts_only_the_input_length():
    requests = requests_of([[1, 2], [1, 2]], short_by=(0, 300))
    curve = lru_curve(requests)
    assert curve.hit_tokens(2) == 2 * PAGE - 300 == replayed(requests, "trie", 2).hit_tokens


def test_an_input_running_past_its_last_block_hits_only_its_full_blocks_as_the_replay_does():
    # Your own traffic (kvviz.core.traffic): a prompt's partial last block gets no hash id, so
    # its input runs past its blocks; the tail is never a hit, and the pass must not add it.
    requests = [TraceRequest(i, i + 1, i, 3 * PAGE + 13, 1, (1, 2, 3)) for i in range(2)]
    curve = lru_curve(requests)
    for pages in (3, 4):
        assert curve.hit_tokens(pages) == 3 * PAGE == replayed(requests, "trie", pages).hit_tokens
        assert curve.hit_tokens(pages) == replayed(requests, "hash", pages).hit_tokens


# Belady's anomaly: more pages, fewer hits. A stack algorithm cannot show it (its cache at C
# pages is always inside its cache at C + 1). Found by a random search over small traces on
# the naive replay, shrunk, and replayed here through kvcore.
ANOMALIES = {
    # Belady's own reference string, one block per request: fifo hits 3 at 3 pages, 2 at 4.
    "fifo": ([[x] for x in (1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5)], 3, 3, 2),
    # kvcore counts a node's hits from its creation: a block evicted and asked for again
    # restarts at 0, so what lfu keeps depends on the capacity.
    "lfu": ([[3], [4], [2], [2], [3], [4], [1], [2], [1], [2]], 2, 4, 3),
    # mru is a stack algorithm on single blocks; the trie evicts only leaves, which breaks it.
    "mru": ([[2, 3], [1, 1, 1], [2], [3, 3], [1, 1]], 4, 3, 2),
}


@pytest.mark.parametrize("policy", sorted(ANOMALIES))
def test_fifo_lfu_and_mru_show_beladys_anomaly_where_lru_does_not(policy):
    chains, pages, hits_before, hits_after = ANOMALIES[policy]
    requests = requests_of(chains)
    assert replayed(requests, "trie", pages, policy).hit_tokens == hits_before * PAGE
    assert replayed(requests, "trie", pages + 1, policy).hit_tokens == hits_after * PAGE
    curve = lru_curve(requests)
    lru = [replayed(requests, "trie", p).hit_tokens for p in range(curve.exact_from_pages, curve.distinct_blocks + 1)]
    assert lru == sorted(lru)
    assert lru == [curve.hit_tokens(p) for p in range(curve.exact_from_pages, curve.distinct_blocks + 1)]


def test_slru_keeps_a_block_at_two_pages_that_it_dropped_at_three():
    # Inclusion fails: after these requests block 2 is cached at 2 pages and not at 3 (the
    # 3-page cache protects 3 and 5, hit twice, and dropped 2), so slru is no stack algorithm.
    chains = [[3], [5], [3], [5], [2], [3], [5], [2], [1]]
    seen = {}
    for pages in (2, 3):
        last = requests_of(chains + [[2]])
        before = replayed(last[:-1], "trie", pages, "slru").hit_tokens
        seen[pages] = replayed(last, "trie", pages, "slru").hit_tokens - before
    assert seen == {2: PAGE, 3: 0}
