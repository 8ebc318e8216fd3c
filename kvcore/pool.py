# SPDX-License-Identifier: Apache-2.0
"""The page pool: which physical pages are free, in a deterministic FIFO order."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

from .errors import InvalidConfiguration
from .snapshot import FreePages


#: Untouched pages turned into list entries at a time, while the pool has some. Taking is
#: then the same slice off a list whether a page was used before or not; the pool holds at
#: most this many untouched pages in memory beyond the pages used.
_CHUNK = 4096

#: Pools have fewer pages than this. Page numbers and counts then fit a C ``ssize_t``
#: (``len()``, ``range`` and slices of the lazy free list raise OverflowError above it).
MAX_PAGE_COUNT = 1 << 63


class PagePool:
    """A fixed set of pages ``0 .. page_count-1`` and the FIFO list of the free ones.

    Pages are taken from the front and returned to the back, so a fresh pool hands out
    0, 1, 2, ... and a freed page is reused only after every page freed before it. The order
    is part of the cache's state (snapshots record it) so replays are exact.

    Memory is for the pages used, not the pages configured: the free list is the run of
    pages never handed out (``untouched_from .. page_count-1``, at its front, because a
    fresh pool's list is ``0 .. page_count-1`` and returned pages go to the back) followed
    by the returned pages. ``PagePool(10**12)`` costs as little as ``PagePool(10)``.
    """

    # The free list is ``_free[_head:]``, then ``range(_untouched, _page_count)``, then
    # ``_returned``. While untouched pages remain, ``_free`` holds only the next chunk of
    # them (materialised from the range) and given pages go to ``_returned``; once none
    # remain, ``_returned`` is None and given pages go straight to ``_free``. take slices
    # ``_free`` and advances ``_head`` (one C call where a deque needs a popleft() per
    # page); the taken prefix is deleted once it is over half the list, so each deletion
    # moves fewer pages than were taken since the last one. ``_reserve`` counts the free
    # pages outside ``_free`` (the range and ``_returned``).
    __slots__ = ("_page_count", "_free", "_head", "_untouched", "_returned", "_reserve", "_owner", "_restored")

    def __init__(self, page_count: int, free_order: Iterable[int] | None = None):
        if type(page_count) is not int or page_count < 0:
            raise InvalidConfiguration(f"page_count must be a non-negative integer, got {reprlib.repr(page_count)}")
        if page_count >= MAX_PAGE_COUNT:
            raise InvalidConfiguration(f"page_count must be below 2**63, got {page_count}")
        self._page_count = page_count
        self._owner = False  # claim(): one cache takes pages from a pool
        self._restored = False  # restored(): the pool of a snapshot, its other pages held by the cache
        self._free: list[int] = []
        self._head = 0
        if free_order is None:
            # Every page untouched, whatever the size: listing them would make each snapshot
            # (free_pages, the page table) cost the pool's size instead of the pages used.
            untouched, returned = 0, []
        elif isinstance(free_order, FreePages) and free_order.page_count == page_count:
            untouched, returned = free_order.untouched_from, list(free_order.returned)
            _check_free_order(returned, untouched)
        else:
            free = list(free_order)
            _check_free_order(free, page_count)
            untouched, returned = _split_untouched_run(free, page_count)
        self._untouched = untouched
        if untouched < page_count:
            self._returned: list[int] | None = returned
            self._reserve = page_count - untouched + len(returned)
        else:
            self._free, self._returned, self._reserve = returned, None, 0

    @classmethod
    def restored(cls, page_count: int, free_order: Iterable[int]) -> "PagePool":
        """The pool of a restored snapshot: ``free_order`` lists only its free pages, the
        others being held by the cache :meth:`claim` gives it to (restore checks that)."""
        pool = cls(page_count, free_order)
        pool._restored = True
        return pool

    def claim(self) -> None:
        """Called by a cache built on this pool: refuse, before anything changes, a pool that
        would break invariant 1 (every page in exactly one place) from the cache's birth.

        A pool is one cache's: a second cache taking pages from it would hand each page out
        twice. A fresh cache holds no pages, so every page must be free: a ``free_order``
        that leaves pages out (and no snapshot to say who holds them) is refused. O(1), or
        O(free pages) to name the pages left out.
        """
        if self._owner:
            raise InvalidConfiguration("this PagePool is already the page pool of another cache; "
                                       "give each cache its own PagePool")
        free = self.available_page_count()
        if not self._restored and free != self._page_count:
            raise InvalidConfiguration(
                f"a new cache needs a pool whose every page is free, but this one has {free} of its "
                f"{self._page_count} pages free ({_missing(self, 3)} not): list every page in free_order, "
                f"or restore a snapshot to start from a used cache")
        self._owner = True

    def available_page_count(self) -> int:
        """Number of free pages. O(1)."""
        return len(self._free) - self._head + self._reserve

    def total_page_count(self) -> int:
        """Number of pages in the pool, free or not. O(1)."""
        return self._page_count

    def free_pages(self) -> FreePages:
        """The free pages in the order they will be handed out: an immutable sequence
        (equal to the tuple of them) that costs O(pages used), not O(pages free)."""
        if self._returned is None:
            return FreePages(self._page_count, self._page_count, tuple(self._free[self._head:]))
        # Only untouched pages are in _free (a run ending where the range starts).
        start = self._untouched - (len(self._free) - self._head)
        return FreePages(start, self._page_count, tuple(self._returned))

    def take(self, count: int) -> list[int]:
        """Remove and return ``count`` pages from the front of the free list. O(count).

        The caller checks availability first; taking more than is free is a bug.
        """
        free = self._free
        head = self._head
        end = head + count
        if end > len(free):
            self._refill(end - len(free))
            free = self._free
            head = self._head
            end = head + count
        taken = free[head:end]
        if 2 * end > len(free):
            del free[:end]
            end = 0
        self._head = end
        return taken

    def _refill(self, short: int) -> None:
        """Move at least ``short`` pages from the untouched range (a chunk at a time) or,
        once it is empty, the returned pages to the end of ``_free``."""
        free = self._free
        del free[:self._head]
        self._head = 0
        while short > 0:
            if self._returned is None:
                raise AssertionError(f"take() of {short} pages more than are free")
            untouched = self._untouched
            if untouched < self._page_count:
                k = min(self._page_count - untouched, max(short, _CHUNK))
                free.extend(range(untouched, untouched + k))
                self._untouched = untouched + k
            else:
                k = len(self._returned)
                free.extend(self._returned)
                self._returned = None
            self._reserve -= k
            short -= k

    def give(self, pages: Iterable[int]) -> None:
        """Append pages to the back of the free list. O(len(pages))."""
        returned = self._returned
        if returned is None:
            self._free.extend(pages)
        else:
            before = len(returned)
            returned.extend(pages)
            self._reserve += len(returned) - before

    def __repr__(self) -> str:
        return f"PagePool({self._page_count} pages, {self.available_page_count()} free)"


def _missing(pool: PagePool, shown: int) -> str:
    """``"pages 1 and 3 are"``: the first ``shown`` pages not in ``pool``'s free list."""
    free = pool.free_pages()
    listed = set(free.returned)  # the untouched run (untouched_from..) is free by construction
    missing = []
    for page in range(free.untouched_from):  # stops after shown + 1: O(pages listed + shown)
        if page not in listed:
            missing.append(page)
            if len(missing) > shown:
                break
    if len(missing) == 1:
        return f"page {missing[0]} is"
    words = ", ".join(map(str, missing[:shown][:-1])) + f" and {missing[:shown][-1]}"
    return f"pages {words}{', ...' if len(missing) > shown else ''} are"


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
