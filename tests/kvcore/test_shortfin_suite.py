# SPDX-License-Identifier: Apache-2.0
"""shortfin's own trie test suite, ported as behaviour checks against kvcore.

Source: shortfin/tests/apps/llm/components/kvcache/trie_attention_cache_test.py
(nod-ai/shark-ai). Same constants (16 tokens per page, a pool of 10 pages), same
sequences, same parametrisations. shortfin's ``allocation.cached_pages`` is our
``pages[: hit_tokens // tokens_per_page]`` and ``newly_acquired_pages`` the rest;
``publish_pages(n)`` is ``publish_pages_for_tokens(tokens[: n * TEST_PAGE_SIZE])``.

Where shortfin only checked a count, these tests also check what kvcore promises beyond
it: exact pages, which sequence eviction picked, and that failed acquires change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvcore import CacheAllocationFailure, PagePool, TriePagedAttentionCache

TEST_PAGE_SIZE = 16  # tokens per page
TEST_POOL_CAPACITY = 10


@dataclass
class TokenSequence:
    tokens: list[int]
    description: str
    expected_pages: int

    def __str__(self) -> str:
        return self.description


def cached_pages(allocation) -> tuple[int, ...]:
    return allocation.pages[: allocation.hit_tokens // TEST_PAGE_SIZE]


def newly_acquired_pages(allocation) -> tuple[int, ...]:
    return allocation.pages[allocation.hit_tokens // TEST_PAGE_SIZE :]


@pytest.fixture
def trie_cache():
    return TriePagedAttentionCache(PagePool(TEST_POOL_CAPACITY), TEST_PAGE_SIZE)


@pytest.fixture
def published_sequence(trie_cache):
    """Acquire ``tokens``, publish all their pages, release: they stay cached, evictable."""

    def publish_sequence(tokens: list[int]):
        allocation = trie_cache.acquire_pages_for_tokens(tokens, extra_token_slots=0)
        allocation.publish_pages_for_tokens(tokens)
        pages = allocation.pages
        allocation.release_pages()
        return pages

    return publish_sequence


basic_sequences = [
    TokenSequence([], "empty_sequence", 0),
    TokenSequence(list(range(TEST_PAGE_SIZE // 2)), "partial_page", 1),
    TokenSequence(list(range(TEST_PAGE_SIZE)), "exact_page", 1),
    TokenSequence(list(range(TEST_PAGE_SIZE + 1)), "overflow_page", 2),
    TokenSequence(list(range(TEST_PAGE_SIZE * 2)), "multiple_pages", 2),
]


@pytest.mark.parametrize("seq", basic_sequences, ids=str)
def test_basic_allocation_takes_ceil_tokens_over_page_size_fresh_pages(trie_cache, seq):
    allocation = trie_cache.acquire_pages_for_tokens(seq.tokens, extra_token_slots=0)
    assert len(allocation.pages) == seq.expected_pages
    assert cached_pages(allocation) == ()
    assert newly_acquired_pages(allocation) == tuple(range(seq.expected_pages))
    assert trie_cache.page_pool.available_page_count() == TEST_POOL_CAPACITY - seq.expected_pages
    allocation.release_pages()
    assert trie_cache.page_pool.available_page_count() == TEST_POOL_CAPACITY
    assert trie_cache.check_invariants() == []


reuse_sequences = [
    (list(range(TEST_PAGE_SIZE)), list(range(TEST_PAGE_SIZE)), "exact_match", 1, 1),
    (list(range(TEST_PAGE_SIZE * 2)), list(range(TEST_PAGE_SIZE * 2)), "multi_page_match", 2, 2),
    (
        list(range(TEST_PAGE_SIZE * 2)),
        list(range(TEST_PAGE_SIZE)) + list(range(100, 100 + TEST_PAGE_SIZE)),
        "prefix_match",
        2,
        1,
    ),
    (list(range(TEST_PAGE_SIZE)), list(range(50, 50 + TEST_PAGE_SIZE)), "no_match", 1, 0),
]


@pytest.mark.parametrize(
    "initial_tokens,reuse_tokens,description,total_pages,expected_cached",
    reuse_sequences,
    ids=[r[2] for r in reuse_sequences],
)
def test_page_reuse_hands_out_the_published_pages_of_the_common_prefix(
    trie_cache, published_sequence, initial_tokens, reuse_tokens, description, total_pages, expected_cached
):
    initial_pages = published_sequence(initial_tokens)

    allocation = trie_cache.acquire_pages_for_tokens(reuse_tokens, extra_token_slots=0)
    assert len(allocation.pages) == total_pages
    assert len(cached_pages(allocation)) == expected_cached
    assert len(newly_acquired_pages(allocation)) == total_pages - expected_cached
    # The cached pages are the very pages the first sequence published.
    assert cached_pages(allocation) == initial_pages[:expected_cached]
    assert not set(newly_acquired_pages(allocation)) & set(initial_pages[:expected_cached])
    assert allocation.hit_tokens == expected_cached * TEST_PAGE_SIZE
    allocation.release_pages()
    assert trie_cache.check_invariants() == []


@pytest.mark.parametrize("access_count", [1, TEST_POOL_CAPACITY // 2, TEST_POOL_CAPACITY - 1])
def test_lru_eviction_spares_refreshed_and_held_sequences(trie_cache, access_count):
    keep_published = 3  # held: never evictable
    sequences = []
    held = []
    for i in range(keep_published):
        tokens = list(range(i * 100, i * 100 + TEST_PAGE_SIZE))
        allocation = trie_cache.acquire_pages_for_tokens(tokens, extra_token_slots=0)
        allocation.publish_pages_for_tokens(tokens)
        held.append(allocation)
        sequences.append(tokens)
    for i in range(keep_published, TEST_POOL_CAPACITY):
        tokens = list(range(i * 100, i * 100 + TEST_PAGE_SIZE))
        allocation = trie_cache.acquire_pages_for_tokens(tokens, extra_token_slots=0)
        allocation.publish_pages_for_tokens(tokens)
        allocation.release_pages()
        sequences.append(tokens)
    assert trie_cache.page_pool.available_page_count() == 0

    # Refresh the first access_count sequences (held ones included, as shortfin does).
    for i in range(access_count):
        allocation = trie_cache.acquire_pages_for_tokens(sequences[i], extra_token_slots=0)
        assert len(cached_pages(allocation)) == 1
        allocation.release_pages()

    new_allocation = trie_cache.acquire_pages_for_tokens(list(range(1000, 1000 + TEST_PAGE_SIZE)))
    assert len(newly_acquired_pages(new_allocation)) == 1
    # The least recently used released sequence is the one evicted: the first one past
    # both the refreshed and the held sequences (sequence i was published on page i).
    victim = max(access_count, keep_published)
    assert new_allocation.pages == (victim,)
    new_allocation.release_pages()
    cached_tokens = {node.tokens for node in trie_cache.snapshot().nodes if node.page is not None}
    assert tuple(sequences[victim]) not in cached_tokens
    assert len(cached_tokens) == TEST_POOL_CAPACITY - 1

    # shortfin's own check: every refreshed or held sequence is still a cache hit.
    for i in range(max(access_count, keep_published)):
        recheck = trie_cache.acquire_pages_for_tokens(sequences[i], extra_token_slots=0)
        assert len(cached_pages(recheck)) == 1, f"sequence {i} was evicted but should have been preserved"
        recheck.release_pages()
    assert trie_cache.check_invariants() == []


@pytest.mark.parametrize("publish_steps", [1, 2, 3])
def test_progressive_publish_makes_each_published_page_visible(trie_cache, publish_steps):
    tokens = list(range(TEST_PAGE_SIZE * 3))  # three pages
    allocation = trie_cache.acquire_pages_for_tokens(tokens)

    for step in range(publish_steps):
        allocation.publish_pages_for_tokens(tokens[: (step + 1) * TEST_PAGE_SIZE])
        assert allocation.published == step + 1

        # A new acquire of the whole sequence hits exactly the published pages.
        reuse = trie_cache.acquire_pages_for_tokens(tokens)
        assert len(cached_pages(reuse)) == step + 1
        assert cached_pages(reuse) == allocation.pages[: step + 1]
        reuse.release_pages()

    allocation.release_pages()
    assert trie_cache.check_invariants() == []


@pytest.mark.parametrize("ref_count", [1, 2, 5])
def test_reference_counting_a_pool_full_of_held_pages_fails_the_next_acquire(trie_cache, ref_count):
    tokens = list(range(TEST_PAGE_SIZE))
    first = trie_cache.acquire_pages_for_tokens(tokens, extra_token_slots=0)
    first.publish_pages_for_tokens(tokens)
    allocations = [first]
    for _ in range(ref_count - 1):
        allocations.append(trie_cache.acquire_pages_for_tokens(tokens, extra_token_slots=0))
    assert all(a.pages == first.pages for a in allocations)

    fill_allocations = []
    for i in range(TEST_POOL_CAPACITY - 1):
        fill_tokens = list(range(100 + i * TEST_PAGE_SIZE, 100 + (i + 1) * TEST_PAGE_SIZE))
        allocation = trie_cache.acquire_pages_for_tokens(fill_tokens, extra_token_slots=0)
        allocation.publish_pages_for_tokens(fill_tokens)
        fill_allocations.append(allocation)

    shared = trie_cache.snapshot().node_for_page(first.pages[0])
    assert shared.ref == ref_count
    before = trie_cache.snapshot()
    with pytest.raises(CacheAllocationFailure):
        trie_cache.acquire_pages_for_tokens(list(range(1000, 1000 + TEST_PAGE_SIZE)), extra_token_slots=0)
    assert trie_cache.snapshot() == before

    for allocation in allocations + fill_allocations:
        allocation.release_pages()
    after = trie_cache.snapshot()
    assert after.free_count == 0 and after.evictable_count == TEST_POOL_CAPACITY
    assert trie_cache.check_invariants() == []


@pytest.mark.parametrize("tokens_per_page", [0, -1, -100])
def test_invalid_tokens_per_page_is_rejected_at_construction(tokens_per_page):
    with pytest.raises(ValueError):
        TriePagedAttentionCache(PagePool(TEST_POOL_CAPACITY), tokens_per_page)
