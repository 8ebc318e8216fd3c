"""The page pool: which physical pages are free, in a deterministic FIFO order."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class PagePool:
    """A fixed set of pages ``0 .. page_count-1`` and the FIFO list of the free ones.

    Pages are taken from the front and returned to the back, so a fresh pool hands out
    0, 1, 2, ... and a freed page is reused only after every page freed before it. The order
    is part of the cache's state (snapshots record it) so replays are exact.
    """

    __slots__ = ("_page_count", "_free")

    def __init__(self, page_count: int, free_order: Iterable[int] | None = None):
        if not isinstance(page_count, int) or page_count < 0:
            raise ValueError(f"page_count must be a non-negative integer, got {page_count!r}")
        self._page_count = page_count
        self._free: deque[int] = deque(range(page_count) if free_order is None else free_order)

    def available_page_count(self) -> int:
        """Number of free pages. O(1)."""
        return len(self._free)

    def total_page_count(self) -> int:
        """Number of pages in the pool, free or not. O(1)."""
        return self._page_count

    def free_pages(self) -> tuple[int, ...]:
        """The free pages in the order they will be handed out. O(n)."""
        return tuple(self._free)

    def take(self, count: int) -> list[int]:
        """Remove and return ``count`` pages from the front of the free list. O(count).

        The caller checks availability first; taking more than is free is a bug.
        """
        free = self._free
        if count > len(free):
            raise AssertionError(f"take({count}) with only {len(free)} free pages")
        popleft = free.popleft
        return [popleft() for _ in range(count)]

    def give(self, pages: Iterable[int]) -> None:
        """Append pages to the back of the free list. O(len(pages))."""
        self._free.extend(pages)

    def __repr__(self) -> str:
        return f"PagePool({self._page_count} pages, {len(self._free)} free)"
