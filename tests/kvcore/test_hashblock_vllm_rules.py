# SPDX-License-Identifier: Apache-2.0
"""The hash cache's vLLM rule ``recompute_last_token``: a hit covers at most all tokens but the last.

vLLM 0.33 ``KVCacheManager.get_computed_blocks``: "When all tokens hit the cache, we must
recompute the last token to obtain logits. Thus, set max_cache_hit_length to prompt_length - 1.
This can trigger recomputation of an entire block". ``FullAttentionManager.find_longest_cache_hit``
then looks at ``max_length // block_size`` blocks only, and ``cache_full_blocks`` caches the
recomputed block again on the request's own page (no deduplication).
"""

from __future__ import annotations

import pytest

import kvcore
from kvcore import HashBlockPagedAttentionCache, InvalidConfiguration, PagePool
from kvcore import events as ev


def cache_with_0_to_7_cached(**rules) -> HashBlockPagedAttentionCache:
    cache = HashBlockPagedAttentionCache(PagePool(8), 4, **rules)
    first = cache.acquire_pages_for_tokens(range(8))
    first.publish_pages_for_tokens()
    first.release_pages()
    return cache


def test_a_prompt_whose_every_block_is_cached_recomputes_and_caches_its_last_block_again():
    cache = cache_with_0_to_7_cached(recompute_last_token=True)
    cache.record_events(True)
    again = cache.acquire_pages_for_tokens(range(8))
    assert again.hit_tokens == 4 and again.pages[0] == 0 and again.pages[1] not in (0, 1)
    again.publish_pages_for_tokens()
    cached = [e for e in cache.take_events() if isinstance(e, ev.BlockCached)]
    assert [(e.tokens, e.duplicate_of) for e in cached] == [((4, 5, 6, 7), 1)]
    assert cache.check_invariants() == []
    matched = [b for b in cache.snapshot().blocks if b.tokens == (4, 5, 6, 7)]
    assert len(matched) == 2 and all(b.reachable for b in matched)


def test_by_default_every_full_block_matches_as_in_the_trie():
    cache = cache_with_0_to_7_cached()
    assert cache.recompute_last_token is False
    assert cache.acquire_pages_for_tokens(range(8)).hit_tokens == 8


def test_the_cap_changes_nothing_when_the_last_token_is_past_the_full_blocks():
    cache = cache_with_0_to_7_cached(recompute_last_token=True)
    assert cache.acquire_pages_for_tokens(range(9)).hit_tokens == 8  # tokens 0..7 full, 8 is the last


def test_a_one_block_prompt_hits_nothing_and_an_empty_one_is_still_fine():
    cache = cache_with_0_to_7_cached(recompute_last_token=True)
    cache.record_events(True)
    assert cache.acquire_pages_for_tokens(range(4)).hit_tokens == 0
    matched = next(e for e in cache.take_events() if isinstance(e, ev.Matched))
    assert "recomputed" in matched.reason
    assert cache.acquire_pages_for_tokens(()).hit_tokens == 0


def test_the_rule_is_a_hash_caches_only_and_a_bool():
    assert kvcore.make_cache("hash", 4, 2, recompute_last_token=True).recompute_last_token
    with pytest.raises(InvalidConfiguration, match="hash cache's rule"):
        kvcore.make_cache("trie", 4, 2, recompute_last_token=True)
    with pytest.raises(InvalidConfiguration, match="True or False"):
        HashBlockPagedAttentionCache(PagePool(4), 2, recompute_last_token=1)


def test_a_restored_cache_takes_the_rule_it_is_given():
    cache = cache_with_0_to_7_cached(recompute_last_token=True)
    snapshot = cache.snapshot()
    assert kvcore.restore(snapshot, recompute_last_token=True).acquire_pages_for_tokens(range(8)).hit_tokens == 4
    assert kvcore.restore(snapshot).acquire_pages_for_tokens(range(8)).hit_tokens == 8
