"""The page pool: which physical pages are free, in a deterministic FIFO order."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

from .errors import InvalidConfiguration
from .snapshot import FreePages


class PagePool:
    """A fixed set of pages ``0 .. page_count-1`` and the FIFO list of the free ones.

    Pages are taken from the front and returned to the back, so a fresh pool hands out
    0, 1, 2, ... and a freed page is reused only after every page freed before it. The order
    is part of the cache's state (snapshots record it) so replays are exact.

    Memory is for the pages used, not the pages configured: the free list is the run of
    pages never handed out (``untouched_from .. page_count-1``, at its front, because a
    fresh pool's list is ``0 .. page_count-1`` and returned pages go to the back) followed
    by the list of returned pages. ``PagePool(10**12)`` costs as little as ``PagePool(10)``.
    """

    # The returned pages are ``_free[_head:]``: take copies a slice off the front and
    # advances ``_head``; give appends. One slice is one C call where a deque needs a
    # popleft() per page. The taken prefix is deleted once it is over half the list, so
    # memory stays O(pages used) and each deletion moves fewer pages than were taken since.
    __slots__ = ("_page_count", "_untouched", "_free", "_head")

    def __init__(self, page_count: int, free_order: Iterable[int] | None = None):
        if type(page_count) is not int or page_count < 0:
            raise InvalidConfiguration(f"page_count must be a non-negative integer, got {reprlib.repr(page_count)}")
        self._page_count = page_count
        self._head = 0
        if free_order is None:
            self._untouched, self._free = 0, []
        elif isinstance(free_order, FreePages) and free_order.page_count == page_count:
            self._untouched, self._free = free_order.untouched_from, list(free_order.returned)
            _check_free_order(self._free, self._untouched)
        else:
            free = list(free_order)
            _check_free_order(free, page_count)
            self._untouched, self._free = _split_untouched_run(free, page_count)

    def available_page_count(self) -> int:
        """Number of free pages. O(1)."""
        return self._page_count - self._untouched + len(self._free) - self._head

    def total_page_count(self) -> int:
        """Number of pages in the pool, free or not. O(1)."""
        return self._page_count

    def free_pages(self) -> FreePages:
        """The free pages in the order they will be handed out: an immutable sequence
        (equal to the tuple of them) that costs O(pages returned), not O(pages free)."""
        return FreePages(self._untouched, self._page_count, tuple(self._free[self._head:]))

    def take(self, count: int) -> list[int]:
        """Remove and return ``count`` pages from the front of the free list. O(count).

        The caller checks availability first; taking more than is free is a bug.
        """
        untouched = self._untouched
        if untouched < self._page_count:  # never-used pages come first
            end = untouched + count
            if end <= self._page_count:
                self._untouched = end
                return list(range(untouched, end))
            self._untouched = self._page_count
            return list(range(untouched, self._page_count)) + self.take(end - self._page_count)
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
    """A free order names pages below ``page_count``, each at most once (a page listed
    twice would be handed out twice). O(len(free))."""
    for i, p in enumerate(free):
        if type(p) is not int or not 0 <= p < page_count:
            raise InvalidConfiguration(f"free_order[{i}] is {reprlib.repr(p)}, not a page of a pool of {page_count}")
    if len(set(free)) != len(free):
        seen: set[int] = set()
        twice = next(p for p in free if p in seen or seen.add(p))
        raise InvalidConfiguration(f"free_order lists page {twice} twice; a page is free at most once")


def _split_untouched_run(free: list[int], page_count: int) -> tuple[int, list[int]]:
    """``(untouched_from, returned)`` for an explicit free order: a leading run
    ``k, k+1, .., page_count-1`` is kept as just ``k`` (what a snapshot of a fresh pool
    lists), so a restored pool costs what the original did."""
    if not free:
        return page_count, []
    start = free[0]
    run = page_count - start
    if run <= len(free) and free[run - 1] == page_count - 1 and free[:run] == list(range(start, page_count)):
        return start, free[run:]
    return page_count, free
