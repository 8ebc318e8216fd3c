# SPDX-License-Identifier: Apache-2.0
"""kvcore: paged-attention KV caches with prefix sharing, in pure standard-library Python.

``BasePagedAttentionCache`` gives every request its own pages; ``TriePagedAttentionCache``
shares full pages of common prefixes through a trie, with per-node ref counts and eviction
of unreferenced leaves by one of seven policies (``POLICIES``; LRU by default);
``HashBlockPagedAttentionCache`` is vLLM's design: full blocks in a flat map of chained
keys, one free queue of ref-0 pages as the LRU order, lazy eviction. Method names follow
shortfin's so its users recognise them.

Where things are: ``trie`` (the trie cache, its operations written as the pseudo-code kvviz
shows), ``trie_fast`` (the same acquire, eviction and release fused for an unrecorded cache,
held equal to ``trie`` by a differential test), ``base``, ``hashblock`` and ``freequeue``
(the other designs; ``blockkey``: the hash cache's chained key), ``heap`` and ``policies``
(eviction order: one row per policy), ``pool`` and ``allocation``, ``events``, ``snapshot``
(the one state format), ``rows`` (its JSON rows), ``state_digest`` (a state's set digest),
``invariants`` (:func:`check_snapshot`), ``incremental`` (its verdict at the cost of a step's
changes), ``verify``, ``errors``.
"""

from .allocation import PageAllocation
from .base import BasePagedAttentionCache
from .errors import CacheAllocationFailure, InvalidConfiguration, InvalidOperation, KVCacheError
from .hashblock import HashBlockPagedAttentionCache
from .invariants import Violation, check_snapshot
from .policies import KEY_FIELDS, POLICIES
from .pool import PagePool
from .snapshot import (AllocationInfo, BlockInfo, FreePages, NodeInfo, PageInfo, PageTable, QueuedPages, Snapshot,
                       SnapshotFormatError, Stats)
from .trie import TriePagedAttentionCache

__version__ = "0.1.0"

__all__ = [
    "AllocationInfo", "BasePagedAttentionCache", "BlockInfo", "CacheAllocationFailure", "HashBlockPagedAttentionCache",
    "InvalidConfiguration", "InvalidOperation", "KVCacheError", "FreePages", "KEY_FIELDS", "POLICIES",
    "NodeInfo", "PageAllocation", "PageInfo", "PagePool", "PageTable", "QueuedPages", "Snapshot", "SnapshotFormatError",
    "Stats",
    "TriePagedAttentionCache", "Violation", "check_snapshot",
]


_KINDS = {"trie": TriePagedAttentionCache, "base": BasePagedAttentionCache, "hash": HashBlockPagedAttentionCache}

#: Why a kind other than the trie takes policy 'lru' only.
_ONLY_LRU = {
    "base": "a base cache never evicts",
    "hash": "a hash cache evicts in its free queue's order, which is LRU",
}


def make_cache(kind: str, page_count: int, tokens_per_page: int, policy: str = "lru", *,
               recompute_last_token: bool = False):
    """A fresh cache of ``kind`` ('trie', 'base' or 'hash') with its own pool, evicting by
    ``policy`` (:data:`POLICIES` for the trie; the base cache never evicts and the hash
    cache's free queue is its LRU order, so both take only 'lru'). ``recompute_last_token``
    is the hash cache's vLLM rule (a hit stops before a prompt's last token); only a hash
    cache takes it."""
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidConfiguration(f"unknown cache kind {kind!r} (expected 'trie', 'base' or 'hash')")
    if recompute_last_token is not False and cls is not HashBlockPagedAttentionCache:
        raise InvalidConfiguration(f"recompute_last_token is a hash cache's rule (vLLM's), not a {kind} cache's")
    if cls is TriePagedAttentionCache:
        return cls(PagePool(page_count), tokens_per_page, policy)
    if policy != "lru":
        raise InvalidConfiguration(f"{_ONLY_LRU[kind]}: policy must be 'lru', got {policy!r}")
    if cls is HashBlockPagedAttentionCache:
        return cls(PagePool(page_count), tokens_per_page, recompute_last_token=recompute_last_token)
    return cls(PagePool(page_count), tokens_per_page)


def restore(snapshot: Snapshot, *, verify: bool = True, recompute_last_token: bool = False):
    """A live cache of the snapshot's kind, restored from it (see ``restore`` on the classes);
    ``recompute_last_token`` as in :func:`make_cache` (a snapshot holds state, not rules)."""
    kind = getattr(snapshot, "kind", None)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidOperation(f"cannot restore the snapshot: unknown cache kind {kind!r}")
    if cls is HashBlockPagedAttentionCache:
        return cls.restore(snapshot, verify=verify, recompute_last_token=recompute_last_token)
    if recompute_last_token is not False:
        raise InvalidConfiguration(f"recompute_last_token is a hash cache's rule (vLLM's), not a {kind} cache's")
    return cls.restore(snapshot, verify=verify)
