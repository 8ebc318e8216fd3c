# SPDX-License-Identifier: Apache-2.0
"""``dispose()``: a cache taken apart is freed by reference counting alone (no cycle is left
for the garbage collector), on every design, evicting or not."""

from __future__ import annotations

import gc
import weakref

import pytest

import kvcore


def used_cache(kind: str):
    """A small cache after shared-prefix requests that evict and one still held."""
    cache = {"trie": kvcore.TriePagedAttentionCache, "base": kvcore.BasePagedAttentionCache,
             "hash": kvcore.HashBlockPagedAttentionCache}[kind](kvcore.PagePool(6), 2)
    for i in range(8):
        tokens = [1, 2, 3, 4, 5 + i, 6 + i]
        alloc = cache.acquire_pages_for_tokens(tokens)
        alloc.publish_pages_for_tokens(tokens)
        alloc.release_pages()
    cache.acquire_pages_for_tokens([1, 2, 3, 4])  # held: an allocation referencing pages and nodes
    return cache


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
def test_a_disposed_cache_is_freed_by_reference_counting_alone(kind):
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()  # what earlier tests left
        cache = used_cache(kind)
        gone = weakref.ref(cache)
        cache.dispose()
        del cache
        assert gone() is None, "a reference cycle kept the disposed cache alive"
        assert gc.collect() == 0, "the disposed cache left cycles (its nodes?) for the collector"
    finally:
        if was_enabled:
            gc.enable()


def test_without_dispose_a_trie_cache_waits_for_the_collector():
    # The test above can fail: a trie's nodes and their parents form cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        cache = used_cache("trie")
        del cache
        assert gc.collect() > 0
    finally:
        gc.collect()
        if was_enabled:
            gc.enable()
