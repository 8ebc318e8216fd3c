# SPDX-License-Identifier: Apache-2.0
"""kvviz's sequential replay against an independent naive one.

``naive_replay`` (tests/trace/naive_replay.py) has no kvcore or kvviz cache code: a
dict-of-dicts trie evicting by a min over every node of the issue's keys, and a dict of block
keys with a free-queue list for vLLM's hash-block design. On prefixes of both Mooncake traces
kvviz's replay (kvcore's trie under every policy, and kvcore's hash-block cache:
``ReplayConfig(cache="hash")``) must count exactly what it counts: hit tokens, input tokens,
requests served and failed to fit, pages evicted; on generated traces too. With unlimited capacity every
policy and both designs reach the trace's prefix-reuse ratio, counted a third way (a set of
the block chains seen).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvcore import POLICIES
from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import ReplayConfig, replay

from .naive_replay import POLICY_KEYS, NaiveHashBlocks, Request, chain_reuse, naive_replay, read_requests

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
SYNTHETIC = DATA / "synthetic_trace.jsonl"
TRACES = {"conversation": CONVERSATION, "synthetic": SYNTHETIC}

needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")

# Prefixes long enough that the policies disagree (the test below proves it), short enough
# for a loaded 2-core machine. 24 pages: heavy eviction, and requests longer than 24 blocks
# fail to fit; 3,000 pages: the policies spread furthest on these prefixes.
FIRST = {"conversation": 1000, "synthetic": 600}
LITERAL_PAGES = (24, 96)  # the literal naive replay: a min over every node per eviction
FAST_PAGES = (300, 3000)  # its heap variant (checked against the literal one below)
UNLIMITED_FIRST = {"conversation": 2000, "synthetic": 800}

_loaded: dict[tuple[str, int], tuple[TraceRequest, ...]] = {}


def prefix(trace: str, first: int) -> tuple[TraceRequest, ...]:
    """The first ``first`` requests of a trace, read once per test run."""
    if (trace, first) not in _loaded:
        _loaded[trace, first] = read_trace(TRACES[trace], first=first).requests
    return _loaded[trace, first]


# Every (design, policy) kvviz replays: the trie under each policy, the hash design's one order.
CHOICES = [("trie", policy) for policy in POLICIES] + [("hash", "lru")]


def kvviz_counts(requests, design: str, policy: str, capacity_tokens: int | None) -> tuple[int, ...]:
    """(hit tokens, input tokens, served, failed to fit, pages evicted) of kvviz's replay."""
    result = replay(requests, ReplayConfig(capacity_tokens=capacity_tokens, cache=design, policy=policy))
    return result.hit_tokens, result.input_tokens, result.served, result.failed_to_fit, result.pages_evicted


def naive_counts(requests, design: str, policy: str, capacity_tokens: int | None, fast: bool) -> tuple[int, ...]:
    """The same counts from the naive replay."""
    result = naive_replay(requests, design=design, policy=policy, capacity_tokens=capacity_tokens, fast=fast)
    return result.hit_tokens, result.input_tokens, result.served, result.failed_to_fit, result.pages_evicted


# -- the naive replay on hand-made requests (figures worked out by hand) ----------------------


def hand(*chains: tuple[int, ...]) -> list[Request]:
    """Requests of whole blocks: ``input_length`` is 512 per hash id."""
    return [Request(512 * len(chain), chain) for chain in chains]


def test_the_naive_trie_evicts_the_least_recently_used_leaf():
    # 3 pages; [1 2] then [3] fills them; [4] evicts the lru leaf 2, so [1 2] hits 1 only.
    requests = hand((1, 2), (3,), (4,), (1, 2))
    result = naive_replay(requests, capacity_tokens=3 * 512)
    assert (result.hit_tokens, result.pages_evicted, result.failed_to_fit) == (512, 2, 0)


def test_the_naive_trie_evicts_by_each_policys_key():
    # 2 pages, one-block requests: 1, 2, 1 again (a hit on 1), then 3 needs a page.
    # lru/slru/priority evict 2 (older access); fifo evicts 1 (created first); lfu evicts 2
    # (no hits); mru evicts 1 (the newest access); filo evicts 2 (created last).
    victims = {}
    for policy in POLICY_KEYS:
        kept = []
        for probe in (1, 2):
            result = naive_replay(hand((1,), (2,), (1,), (3,), (probe,)), policy=policy, capacity_tokens=2 * 512)
            if result.hit_tokens == 2 * 512:  # the hit on 1, then the probe hit
                kept.append(probe)
        (kept_block,) = kept
        victims[policy] = 3 - kept_block
    assert victims == {"lru": 2, "fifo": 1, "lfu": 2, "mru": 1, "filo": 2, "slru": 2, "priority": 2}


def test_the_naive_hash_design_reuses_the_queue_head_and_evicts_lazily():
    # 3 pages. [1 2 3] releases its pages to the tail last block first: 3, 2, 1. [4] takes
    # the head, the page of block 3, which leaves the cache then; [1 2 3] hits 2 blocks and
    # takes the head again: the page of block 4, the second eviction.
    requests = hand((1, 2, 3), (4,), (1, 2, 3))
    result = naive_replay(requests, design="hash", capacity_tokens=3 * 512)
    assert (result.hit_tokens, result.pages_evicted) == (2 * 512, 2)


def test_the_naive_replay_caps_a_hit_at_the_input_length_and_counts_failures():
    requests = [Request(700, (1, 2)), Request(600, (1, 2)), Request(3 * 512, (1, 2, 3))]
    for design in ("trie", "hash"):
        result = naive_replay(requests, design=design, capacity_tokens=2 * 512)
        assert (result.hit_tokens, result.input_tokens, result.failed_to_fit) == (600, 700 + 600 + 1536, 1)


def test_the_chain_set_counts_leading_blocks_seen_before():
    requests = [Request(1500, (1, 2, 3)), Request(1300, (1, 2, 4)), Request(100, (5,)), Request(1100, (1, 2, 3))]
    assert chain_reuse(requests) == (1024 + 1100, 1500 + 1300 + 100 + 1100)


# -- kvviz's replay equals the naive one on both Mooncake traces ------------------------------


@needs_data
@pytest.mark.parametrize("pages", LITERAL_PAGES + FAST_PAGES)
@pytest.mark.parametrize("design, policy", CHOICES)
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_kvviz_replay_counts_what_the_naive_replay_counts(trace, design, policy, pages):
    requests = prefix(trace, FIRST[trace])
    capacity = pages * 512
    fast = pages in FAST_PAGES
    assert kvviz_counts(requests, design, policy, capacity) == naive_counts(requests, design, policy, capacity, fast)


@needs_data
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_the_policies_disagree_on_these_prefixes_so_the_comparison_can_fail(trace):
    requests = prefix(trace, FIRST[trace])
    pages = FAST_PAGES[-1]
    hits = {policy: naive_replay(requests, policy=policy, capacity_tokens=pages * 512, fast=True).hit_tokens
            for policy in POLICIES}
    assert len(set(hits.values())) >= 4, hits
    heavy = naive_replay(requests, capacity_tokens=LITERAL_PAGES[0] * 512, fast=True)
    assert heavy.failed_to_fit > 0 and heavy.pages_evicted > len(requests)


@needs_data
@pytest.mark.parametrize("design, policy", CHOICES)
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_the_fast_naive_replay_counts_what_the_literal_one_counts(trace, design, policy):
    # The table's --check runs the fast variant on whole traces; it must be the literal one.
    requests = prefix(trace, 400)
    for pages in (16, 64):
        capacity = pages * 512
        assert naive_counts(requests, design, policy, capacity, True) == \
            naive_counts(requests, design, policy, capacity, False)


@needs_data
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_unlimited_capacity_reaches_the_prefix_reuse_ratio_under_every_policy_and_design(trace):
    requests = prefix(trace, UNLIMITED_FIRST[trace])
    reused, total = chain_reuse(read_requests(TRACES[trace], first=UNLIMITED_FIRST[trace]))
    assert 0 < reused < total
    for design, policy in CHOICES:
        everything = (reused, total, len(requests), 0, 0)  # hits, input, served, failed, evicted
        assert kvviz_counts(requests, design, policy, None) == everything, (design, policy)
        assert naive_counts(requests, design, policy, None, True) == everything, (design, policy)


@needs_data
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_in_sequential_replay_hash_blocks_evict_what_trie_lru_evicts_and_none_is_unreachable(trace):
    # Release queues a request's pages last block first, and whoever holds a block holds its
    # parent, so a parent always joins the free queue behind its children: the head is a
    # leaf, the very block the trie's lru evicts, and no cached block loses its parent.
    requests = prefix(trace, 400)
    for pages in (16, 64, 256):
        capacity = pages * 512
        assert naive_counts(requests, "hash", "lru", capacity, True) == \
            naive_counts(requests, "trie", "lru", capacity, True)
    cache = NaiveHashBlocks(64, fast=True)
    for request in requests:
        cache.serve(request.hash_ids)
        assert all(parent is None or parent in cache.cached for parent, _ in cache.cached)


# -- and on generated traces, where every policy's key matters -------------------------------


@st.composite
def small_traces(draw):
    """Requests whose hash ids come from a 3-letter alphabet, so prefixes are shared often."""
    requests = []
    for index in range(draw(st.integers(1, 14))):
        ids = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=6)))
        input_length = 512 * len(ids) - draw(st.integers(0, 511))
        requests.append(TraceRequest(index, index + 1, 0, input_length, 0, ids))
    return requests, draw(st.integers(0, 12))


@given(small_traces())
def test_kvviz_and_the_naive_replay_agree_on_generated_traces_under_every_policy_and_design(case):
    requests, pages = case
    for design, policy in CHOICES:
        assert kvviz_counts(requests, design, policy, pages * 512) == \
            naive_counts(requests, design, policy, pages * 512, False), (design, policy)
