# SPDX-License-Identifier: Apache-2.0
"""PageAllocation: one request's handle on its pages (the block table)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class _Cache(Protocol):
    """What an allocation needs of the cache that made it: every mutation goes through the
    cache. A protocol rather than the cache class, so this module stays below the caches."""

    def _extend(self, allocation: "PageAllocation", tokens: Iterable[int], extra_token_slots: int) -> None: ...

    def _publish(self, allocation: "PageAllocation", tokens: Iterable[int] | None,
                 publish_incomplete_page: bool) -> None: ...

    def _release(self, allocation: "PageAllocation") -> None: ...


class PageAllocation:
    """The pages one request holds, in token order, plus its tokens.

    Created by ``cache.acquire_pages_for_tokens``. The first ``published`` pages are trie
    nodes (shared, referenced); the rest are the allocation's own unpublished tail. All
    mutation goes through the cache so that failed operations can change nothing.
    """

    __slots__ = ("_cache", "id", "name", "_tokens", "_pages", "_nodes", "hit_tokens", "released", "priority")

    def __init__(self, cache: _Cache, allocation_id: int, name: str | None,
                 tokens: tuple[int, ...], pages: list[int], nodes: list, hit_tokens: int, priority: int = 0):
        self._cache = cache
        self.id = allocation_id
        self.name = name
        self._tokens = tokens
        self._pages = pages
        self._nodes = nodes
        self.hit_tokens = hit_tokens
        self.released = False
        self.priority = priority  # given to acquire; what the nodes it publishes or matched keep at least

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tokens this allocation holds (an immutable copy, never the caller's list)."""
        return self._tokens

    @property
    def pages(self) -> tuple[int, ...]:
        """The block table: physical page index for each logical page, in token order."""
        return tuple(self._pages)

    @property
    def published(self) -> int:
        """How many leading pages are published trie nodes."""
        return len(self._nodes)

    @property
    def label(self) -> str:
        """The name if it has one, else ``#id``."""
        return self.name if self.name is not None else f"#{self.id}"

    def extend_allocation(self, tokens: Iterable[int], extra_token_slots: int = 0) -> None:
        """Grow to hold ``tokens`` (which must start with the current tokens) plus extra slots."""
        self._cache._extend(self, tokens, extra_token_slots)

    def publish_pages_for_tokens(self, tokens: Iterable[int] | None = None, *,
                                 publish_incomplete_page: bool = False) -> None:
        """Share this allocation's full pages in the cache (a no-op beyond a tick for the base cache)."""
        self._cache._publish(self, tokens, publish_incomplete_page)

    def release_pages(self) -> None:
        """End the allocation: drop references, return unpublished pages to the pool."""
        self._cache._release(self)

    def __repr__(self) -> str:
        state = "released" if self.released else f"{len(self._pages)} pages, {self.published} published"
        return f"PageAllocation({self.label}, {len(self._tokens)} tokens, {state})"
