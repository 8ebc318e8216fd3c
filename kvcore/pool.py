"""The page pool: which physical pages are free, in a deterministic FIFO order."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

from .errors import InvalidConfiguration


class PagePool:
    """A fixed set of pages ``0 .. page_count-1`` and the FIFO list of the free ones.

    Pages are taken from the front and returned to the back, so a fresh pool hands out
    0, 1, 2, ... and a freed page is reused only after every page freed before it. The order
    is part of the cache's state (snapshots record it) so replays are exact.
    """

    # The free list is ``_free[_head:]``: take copies a slice off the front and advances
    # ``_head``; give appends. One slice is one C call where a deque needs a popleft() per
    # page. The taken prefix is deleted once it is over half the list, so memory stays
    # O(pages) and each deletion moves fewer pages than were taken since the last one.
    __slots__ = ("_page_count", "_free", "_head")

    def __init__(self, page_count: int, free_order: Iterable[int] | None = None):
        if type(page_count) is not int or page_count < 0:
            raise InvalidConfiguration(f"page_count must be a non-negative integer, got {reprlib.repr(page_count)}")
        self._page_count = page_count
        self._free: list[int] = list(range(page_count) if free_order is None else free_order)
        self._head = 0
        if free_order is not None:
            _check_free_order(self._free, page_count)

    def available_page_count(self) -> int:
        """Number of free pages. O(1)."""
        return len(self._free) - self._head

    def total_page_count(self) -> int:
        """Number of pages in the pool, free or not. O(1)."""
        return self._page_count

    def free_pages(self) -> tuple[int, ...]:
        """The free pages in the order they will be handed out. O(n)."""
        return tuple(self._free[self._head:])

    def take(self, count: int) -> list[int]:
        """Remove and return ``count`` pages from the front of the free list. O(count).

        The caller checks availability first; taking more than is free is a bug.
        """
        free = self._free
        head = self._head
        end = head + count
        if end > len(free):
            raise AssertionError(f"take({count}) with only {len(free) - head} free pages")
        taken = free[head:end]
        if 2 * end > len(free):
            del free[:end]
            end = 0
        self._head = end
        return taken

    def give(self, pages: Iterable[int]) -> None:
        """Append pages to the back of the free list. O(len(pages))."""
        self._free.extend(pages)

    def __repr__(self) -> str:
        return f"PagePool({self._page_count} pages, {self.available_page_count()} free)"


def _check_free_order(free: list, page_count: int) -> None:
    """A free order names pages of the pool, each at most once (a page listed twice would
    be handed out twice). O(len(free))."""
    for i, p in enumerate(free):
        if type(p) is not int or not 0 <= p < page_count:
            raise InvalidConfiguration(f"free_order[{i}] is {reprlib.repr(p)}, not a page of a pool of {page_count}")
    if len(set(free)) != len(free):
        seen: set[int] = set()
        twice = next(p for p in free if p in seen or seen.add(p))
        raise InvalidConfiguration(f"free_order lists page {twice} twice; a page is free at most once")
