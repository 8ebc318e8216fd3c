# SPDX-License-Identifier: Apache-2.0
"""Errors raised by the caches.

Both kinds subclass :class:`KVCacheError`. A failed operation changes nothing: the cache's
snapshot after the exception equals the one before.
"""

from __future__ import annotations


class KVCacheError(Exception):
    """Base class of every error the caches raise."""


class CacheAllocationFailure(KVCacheError):
    """Not enough free plus evictable pages for the request.

    ``needed``, ``free``, ``evictable`` and ``held`` say what was asked and what was there;
    ``held`` counts pages that no eviction can reach (referenced nodes and unpublished tails).
    """

    def __init__(self, message: str, *, needed: int = 0, free: int = 0, evictable: int = 0, held: int = 0):
        super().__init__(message)
        self.needed = needed
        self.free = free
        self.evictable = evictable
        self.held = held


class InvalidOperation(KVCacheError):
    """Misuse of the API: tokens that do not extend an allocation, use after release, ..."""


class InvalidConfiguration(KVCacheError, ValueError):
    """A pool or cache built with impossible settings: ``tokens_per_page <= 0``, a negative
    ``page_count``, a free order naming a page twice or outside the pool, ...

    Also a ``ValueError``, which is what these raised before they were ``KVCacheError`` s."""
