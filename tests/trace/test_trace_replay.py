# SPDX-License-Identifier: Apache-2.0
"""Replaying traces: hit rates, evictions and held pages, checked by hand and by arithmetic."""

import gc
from pathlib import Path

import pytest

from kvcore import PagePool, TriePagedAttentionCache, BasePagedAttentionCache
from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import ReplayConfig, output_blocks, replay, sweep, sweep_capacities

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
SYNTHETIC = DATA / "synthetic_trace.jsonl"

needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")


def request(index, hash_ids, input_length, output_length=0, timestamp=0):
    return TraceRequest(index, index + 1, timestamp, input_length, output_length, tuple(hash_ids))


# Five requests on 512-token blocks. Prefix facts: r2 shares 2 blocks with r1, r3 and r5 repeat r1.
HAND = [
    request(0, [1, 2, 3], 1500),
    request(1, [1, 2, 4], 1300),
    request(2, [1, 2, 3], 1536),
    request(3, [5], 100),
    request(4, [1, 2, 3], 1100),
]
HAND_INPUT = 1500 + 1300 + 1536 + 100 + 1100


def test_unlimited_capacity_hits_every_prefix_seen_before():
    result = replay(HAND)
    # r2: 2 blocks = 1024; r3: 3 blocks = 1536; r5: 3 blocks capped at its 1100 tokens.
    assert (result.hit_tokens, result.input_tokens) == (1024 + 1536 + 1100, HAND_INPUT)
    assert result.token_hit_rate == pytest.approx(3660 / 5536)
    assert (result.pages_evicted, result.failed_to_fit, result.served) == (0, 0, 5)


def test_four_pages_evict_the_least_recently_used_leaf_once():
    result = replay(HAND, ReplayConfig(capacity_tokens=4 * 512))
    # r4 needs one page with none free: the LRU leaf is r2's block 4 (r3 re-touched 1-2-3).
    assert (result.page_count, result.hit_tokens, result.pages_evicted) == (4, 3660, 1)


def test_three_pages_lose_the_third_block_every_time():
    result = replay(HAND, ReplayConfig(capacity_tokens=3 * 512 + 511))  # whole pages only: 3
    # Every request past r1 needs one page more than the free list has and evicts the only
    # unreferenced leaf: r2 evicts 3, r3 evicts 4, r4 evicts 3 again, r5 evicts 5.
    assert result.page_count == 3
    assert (result.hit_tokens, result.pages_evicted, result.failed_to_fit) == (3 * 1024, 4, 0)


def test_requests_larger_than_the_cache_fail_to_fit_and_change_nothing():
    result = replay(HAND, ReplayConfig(capacity_tokens=2 * 512))
    assert (result.served, result.failed_to_fit, result.hit_tokens, result.pages_evicted) == (1, 4, 0, 0)
    assert result.input_tokens == HAND_INPUT  # failed requests still count: nothing was saved for them
    assert result.peak_pages_held == 1


def test_the_base_cache_never_hits_and_never_evicts():
    result = replay(HAND, ReplayConfig(capacity_tokens=3 * 512, cache="base"))
    assert (result.cache, result.hit_tokens, result.pages_evicted, result.failed_to_fit) == ("base", 0, 0, 0)
    assert result.peak_pages_held == 3


def test_output_blocks_start_by_filling_the_partial_last_prompt_block():
    assert output_blocks(request(0, [1, 2], 1000, output_length=24)) == 0
    assert output_blocks(request(0, [1, 2], 1000, output_length=25)) == 1
    assert output_blocks(request(0, [1, 2], 1024, output_length=513)) == 2


def test_output_slots_take_pages_and_can_push_a_request_out_of_the_cache():
    with_output = [request(0, [1, 2], 1000, output_length=100), request(1, [1, 2], 1000, output_length=100)]
    result = replay(with_output, ReplayConfig(capacity_tokens=3 * 512, with_output=True))
    assert (result.hit_tokens, result.peak_pages_held) == (1000, 3)
    squeezed = replay(with_output, ReplayConfig(capacity_tokens=2 * 512, with_output=True))
    assert (squeezed.failed_to_fit, squeezed.hit_tokens) == (2, 0)


# Concurrency: prefill 1 ms per uncached token, decode 10 ms per output token.
TIMED = ReplayConfig(concurrency=True, prefill_ms_per_token=1, decode_ms_per_token=10)
OVERLAPPING = [
    request(0, [1, 2], 1024, output_length=10, timestamp=0),  # publishes at 1024, releases at 1124
    request(1, [1, 2, 3], 1200, output_length=100, timestamp=500),  # publishes at 1700, releases at 2700
    request(2, [1, 2, 3, 4], 2000, output_length=0, timestamp=2000),
]


def test_a_prefix_still_in_prefill_is_not_shared_yet():
    result = replay(OVERLAPPING, TIMED)
    # r2 arrives before r1 has published: no hit, 3 pages of its own (5 held with r1's 2);
    # its publish adopts r1's cached pages for blocks 1-2. r3 finds 1-2-3 published: 1536.
    assert (result.hit_tokens, result.peak_pages_held, result.peak_live_requests) == (1536, 5, 2)


def test_live_requests_hold_their_pages_against_newcomers():
    from dataclasses import replace

    result = replay(OVERLAPPING, replace(TIMED, capacity_tokens=4 * 512))
    # r2 needs 3 pages while r1 holds 2 of the 4: it fails. r3 arrives after r1 released.
    assert (result.failed_to_fit, result.hit_tokens, result.peak_pages_held) == (1, 1024, 4)


def test_concurrent_replay_follows_arrival_time_not_file_order():
    later_first = [request(0, [1, 2, 3], 1536, timestamp=5000), request(1, [1, 2], 1024, timestamp=0)]
    result = replay(later_first, TIMED)
    assert result.hit_tokens == 1024  # the t=0 request ran first; the t=5000 one reused its 2 blocks
    assert replay(later_first).hit_tokens == 1024  # sequential: file order, the short one hits 2 blocks


def test_replay_restores_the_callers_garbage_collector_setting():
    assert gc.isenabled()
    replay(HAND)
    assert gc.isenabled()
    gc.disable()
    try:
        replay(HAND)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("cache", ["trie", "base", "hash"])
@pytest.mark.parametrize("concurrency", [False, True], ids=["sequential", "concurrent"])
def test_a_replay_leaves_no_garbage_cycle_behind(cache, concurrency):
    # trace --ui freezes the heap right after converting a trace, without a collection: a
    # replayed cache left to the cyclic collector would be kept for good.
    config = ReplayConfig(cache=cache, capacity_tokens=4 * 512, concurrency=concurrency)
    gc.collect()
    gc.disable()
    try:
        result = replay(HAND, config)
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert result.requests == len(HAND)


def test_sweep_capacities_are_half_decades_from_1e4_to_1e9():
    capacities = sweep_capacities()
    assert len(capacities) == 11
    assert capacities[::2] == (10**4, 10**5, 10**6, 10**7, 10**8, 10**9)
    assert capacities[1] == 31_623


def independent_prefix_reuse(requests):
    """The test's own count: a request hits its leading hash ids seen as a prefix before.

    Prefixes seen so far are a tree of nested dicts (hash id -> subtree): exact whatever
    the ids are, and written without kvcore or kvviz code.
    """
    seen: dict = {}
    hit = total = 0
    for r in requests:
        node, matched = seen, 0
        for hash_id in r.hash_ids:
            if hash_id not in node:
                break
            node, matched = node[hash_id], matched + 1
        for hash_id in r.hash_ids[matched:]:
            node = node.setdefault(hash_id, {})
        hit += min(matched * 512, r.input_length)
        total += r.input_length
    return hit, total


def test_the_independent_count_agrees_with_the_hand_made_figures():
    assert independent_prefix_reuse(HAND) == (3660, HAND_INPUT)


@needs_data
@pytest.mark.parametrize("path", [CONVERSATION, SYNTHETIC], ids=["conversation", "synthetic"])
def test_unlimited_capacity_hit_rate_is_the_traces_own_prefix_reuse(path):
    requests = read_trace(path).requests
    result = replay(requests)
    assert (result.hit_tokens, result.input_tokens) == independent_prefix_reuse(requests)
    assert result.pages_evicted == 0 and result.failed_to_fit == 0


@needs_data
@pytest.mark.parametrize("path, first", [(CONVERSATION, 1000), (SYNTHETIC, 400)], ids=["conversation", "synthetic"])
def test_hit_rate_grows_with_capacity_and_never_passes_unlimited(path, first):
    requests = read_trace(path, first=first).requests
    results = sweep(requests, ReplayConfig(), sweep_capacities())
    rates = [r.token_hit_rate for r in results]
    unlimited = replay(requests).token_hit_rate
    assert rates == sorted(rates)
    assert max(rates) <= unlimited
    assert rates[-1] == unlimited  # 1e9 tokens hold the whole slice
    assert rates[0] < unlimited / 2  # ... and 1e4 tokens (19 pages) do not
    assert results[0].pages_evicted > 0


def apply_recorded_ops(requests, config, cache):
    """Replay with a recorder, then apply the recorded ops to ``cache`` through kvcore's API."""
    ops = []
    result = replay(requests, config, recorder=lambda record: ops.append((record.op, record.request, record.extra_blocks)))
    live = {}
    hits = 0
    for op, r, extra in ops:
        if op == "acquire":
            live[r.name] = cache.acquire_pages_for_tokens(r.hash_ids, extra, name=r.name)
            hits += min(live[r.name].hit_tokens * config.page_tokens, r.input_length)
        elif op == "publish":
            live[r.name].publish_pages_for_tokens()
        elif op == "release":
            live.pop(r.name).release_pages()
    return result, ops, hits


@needs_data
@pytest.mark.parametrize("concurrency", [False, True], ids=["sequential", "concurrent"])
def test_recorded_ops_rebuild_the_same_cache_and_eviction_count(concurrency):
    requests = read_trace(CONVERSATION, first=400).requests
    config = ReplayConfig(capacity_tokens=100_000, concurrency=concurrency, with_output=True)
    cache = TriePagedAttentionCache(PagePool(100_000 // 512), 1)
    result, ops, hits = apply_recorded_ops(requests, config, cache)
    snapshot = cache.snapshot()
    assert snapshot.stats.evictions == result.pages_evicted > 0
    assert hits == result.hit_tokens
    assert sum(op == "fail" for op, _, _ in ops) == result.failed_to_fit
    assert sum(op == "acquire" for op, _, _ in ops) == result.served
    assert cache.check_invariants() == []
    assert cache.allocations == {}


@needs_data
def test_base_cache_replay_matches_kvcore_and_holds_one_request_at_a_time():
    requests = read_trace(SYNTHETIC, first=200).requests
    config = ReplayConfig(capacity_tokens=50_000, cache="base")
    cache = BasePagedAttentionCache(PagePool(97), 1)
    result, ops, hits = apply_recorded_ops(requests, config, cache)
    assert hits == result.hit_tokens == 0
    assert result.failed_to_fit == sum(len(r.hash_ids) > 97 for r in requests) > 0
    assert result.peak_pages_held == max(len(r.hash_ids) for r in requests if len(r.hash_ids) <= 97)
    assert cache.snapshot().free_count == 97


# -- eviction policies -------------------------------------------------------------

# One-block requests (512 tokens each) filling exactly 7 pages, touched so that the policies
# disagree; "hit k" is a later request for block k (a hit on it):
#   [1] created first, hit once (4th hit)   -> fifo's victim (oldest node)
#   [2] hit twice, the earliest hits        -> lru's victim; also priority's (a trace sets none)
#   [3] hit once (3rd hit)                  -> slru's: earliest among hits < 2 ([2] is protected)
#   [4] hit once (5th hit)
#   [5] never hit, created after every hit  -> lfu's: fewest hits, earlier than [7]
#   [6] hit once, the last request to it    -> mru's victim
#   [7] never hit, created last             -> filo's victim (newest node)
# Then block 99 needs a page: the victim goes. A last probe for block k hits unless k went.
SEVEN = [1, 2, 3, 4, 2, 2, 3, 1, 4, 5, 6, 7, 6, 99]
SEVEN_HITS = 6  # requests 5-9 and 13
POLICY_VICTIM = {"fifo": 1, "lru": 2, "priority": 2, "slru": 3, "lfu": 5, "mru": 6, "filo": 7}


@pytest.mark.parametrize("policy", sorted(POLICY_VICTIM))
def test_each_policy_evicts_its_own_block(policy):
    for probe in range(1, 8):
        requests = [request(i, [block], 512) for i, block in enumerate(SEVEN + [probe])]
        result = replay(requests, ReplayConfig(capacity_tokens=7 * 512, policy=policy))
        hit = result.hit_tokens - SEVEN_HITS * 512
        assert (probe, hit) == (probe, 0 if probe == POLICY_VICTIM[policy] else 512), policy
        assert result.policy == policy


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy must be one of lru, fifo"):
        ReplayConfig(policy="arc")
