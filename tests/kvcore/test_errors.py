# SPDX-License-Identifier: Apache-2.0
"""Every error the caches raise: the right class, a message that says what was asked and
what was there, and — always — a cache left exactly as it was (snapshot before == after)."""

from __future__ import annotations

import pytest

from kvcore import (
    BasePagedAttentionCache,
    CacheAllocationFailure,
    InvalidOperation,
    KVCacheError,
    PagePool,
    TriePagedAttentionCache,
)

KINDS = [TriePagedAttentionCache, BasePagedAttentionCache]


def r(first: int, last: int) -> list[int]:
    """Tokens ``first..last`` inclusive."""
    return list(range(first, last + 1))


def fails_and_changes_nothing(cache, error: type, operation, *args, **kwargs) -> KVCacheError:
    """Run an operation that must raise ``error``; the cache must be exactly as before."""
    before = cache.snapshot()
    with pytest.raises(error) as raised:
        operation(*args, **kwargs)
    assert cache.snapshot() == before
    assert cache.check_invariants() == []
    return raised.value


@pytest.fixture(params=KINDS, ids=["trie", "base"])
def cache(request):
    """A cache with some history: one live allocation (#1, tokens 1..6, extra slots) and,
    for the trie, one cached evictable block."""
    cache = request.param(PagePool(8), 4)
    done = cache.acquire_pages_for_tokens(r(11, 14))
    done.publish_pages_for_tokens()
    done.release_pages()
    live = cache.acquire_pages_for_tokens(r(1, 6), extra_token_slots=2, name="live")
    live.publish_pages_for_tokens()
    return cache


def live(cache):
    return cache.allocations[1]


def test_both_error_kinds_are_kv_cache_errors():
    assert issubclass(CacheAllocationFailure, KVCacheError)
    assert issubclass(InvalidOperation, KVCacheError)
    assert not issubclass(CacheAllocationFailure, InvalidOperation)


# ------------------------------------------------------------------------- InvalidOperation


def test_extend_with_tokens_that_do_not_start_with_the_allocations_tokens_is_invalid(cache):
    error = fails_and_changes_nothing(cache, InvalidOperation, live(cache).extend_allocation, [1, 2, 3, 0, 5, 6, 7])
    assert "must start with" in str(error)


def test_extend_with_fewer_tokens_than_the_allocation_holds_is_invalid(cache):
    fails_and_changes_nothing(cache, InvalidOperation, live(cache).extend_allocation, r(1, 5))


def test_publish_with_tokens_that_disagree_is_invalid(cache):
    error = fails_and_changes_nothing(cache, InvalidOperation, live(cache).publish_pages_for_tokens, [1, 2, 9])
    assert "position 2" in str(error)


def test_publish_with_more_tokens_than_the_pages_hold_is_invalid(cache):
    error = fails_and_changes_nothing(cache, InvalidOperation, live(cache).publish_pages_for_tokens, r(1, 9))
    assert "9 tokens" in str(error) and "8 slots" in str(error)


def test_publish_incomplete_page_is_invalid(cache):
    error = fails_and_changes_nothing(
        cache, InvalidOperation, live(cache).publish_pages_for_tokens, publish_incomplete_page=True)
    assert "publish_incomplete_page" in str(error)


def test_double_release_is_invalid(cache):
    allocation = live(cache)
    allocation.release_pages()
    error = fails_and_changes_nothing(cache, InvalidOperation, allocation.release_pages)
    assert "released" in str(error)


@pytest.mark.parametrize("use", [
    lambda a: a.publish_pages_for_tokens(),
    lambda a: a.extend_allocation(r(1, 7)),
    lambda a: a.release_pages(),
], ids=["publish", "extend", "release"])
def test_using_a_released_allocation_is_invalid(cache, use):
    allocation = live(cache)
    allocation.release_pages()
    fails_and_changes_nothing(cache, InvalidOperation, use, allocation)


@pytest.mark.parametrize("extra", [-1, 1.5, "2", None, 0.0, True])
def test_acquire_with_a_bad_extra_token_slots_is_invalid(cache, extra):
    fails_and_changes_nothing(cache, InvalidOperation, cache.acquire_pages_for_tokens, [1, 2], extra)


@pytest.mark.parametrize("extra", [-1, 1.5, None, 0.0, True])
def test_extend_with_a_bad_extra_token_slots_is_invalid(cache, extra):
    fails_and_changes_nothing(cache, InvalidOperation, live(cache).extend_allocation, r(1, 6), extra)


def test_restoring_a_snapshot_as_the_other_kind_of_cache_is_invalid(cache):
    other = BasePagedAttentionCache if isinstance(cache, TriePagedAttentionCache) else TriePagedAttentionCache
    with pytest.raises(InvalidOperation):
        other.restore(cache.snapshot())


# ------------------------------------------------------------------------- CacheAllocationFailure


def test_allocation_failure_message_states_needed_free_evictable_and_held_pages():
    cache = TriePagedAttentionCache(PagePool(8), 4)
    done = cache.acquire_pages_for_tokens(r(1, 8))
    done.publish_pages_for_tokens()
    done.release_pages()  # 2 evictable pages (0, 1)
    cache.acquire_pages_for_tokens(r(101, 120))  # 5 held pages (2..6); page 7 stays free
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, r(201, 216))
    assert "need 4 pages: 1 free, 2 evictable, 5 held by live allocations" in str(error)
    assert "16 tokens" in str(error)
    assert (error.needed, error.free, error.evictable, error.held) == (4, 1, 2, 5)


def test_a_failed_acquire_that_would_have_needed_eviction_evicts_nothing():
    cache = TriePagedAttentionCache(PagePool(4), 4)
    for first in (1, 5, 9):
        done = cache.acquire_pages_for_tokens(r(first, first + 3))
        done.publish_pages_for_tokens()
        done.release_pages()
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, r(101, 120))
    assert (error.needed, error.free, error.evictable, error.held) == (5, 1, 3, 0)
    assert cache.snapshot().stats.evictions == 0


def test_a_failed_acquire_does_not_count_its_own_matched_pages_as_evictable():
    cache = TriePagedAttentionCache(PagePool(3), 4)
    done = cache.acquire_pages_for_tokens(r(1, 8))
    done.publish_pages_for_tokens()
    done.release_pages()  # 1..4 and 5..8 cached, evictable
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, r(1, 20))
    assert (error.needed, error.free, error.evictable) == (3, 1, 0)


def test_a_failed_extend_states_the_numbers_and_keeps_the_allocation():
    cache = TriePagedAttentionCache(PagePool(3), 4)
    allocation = cache.acquire_pages_for_tokens(r(1, 8))
    allocation.publish_pages_for_tokens()
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, allocation.extend_allocation, r(1, 9), 8)
    assert "need 3 pages: 1 free, 0 evictable, 2 held by live allocations" in str(error)
    assert allocation.pages == (0, 1) and allocation.tokens == tuple(r(1, 8))


def test_base_cache_failure_counts_nothing_as_evictable():
    cache = BasePagedAttentionCache(PagePool(3), 4)
    cache.acquire_pages_for_tokens(r(1, 8))
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, r(1, 8))
    assert "need 2 pages: 1 free, 0 evictable, 2 held by live allocations" in str(error)


def test_a_failure_with_one_page_needed_says_page():
    cache = TriePagedAttentionCache(PagePool(1), 4)
    cache.acquire_pages_for_tokens([1])
    error = fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, [2])
    assert "need 1 page: 0 free, 0 evictable, 1 held by live allocations" in str(error)


def test_a_failed_operation_keeps_the_clock_and_the_next_allocation_id():
    cache = TriePagedAttentionCache(PagePool(1), 4)
    cache.acquire_pages_for_tokens([1])
    fails_and_changes_nothing(cache, CacheAllocationFailure, cache.acquire_pages_for_tokens, [2])
    assert cache.clock == 1
    assert cache.acquire_pages_for_tokens([]).id == 1
