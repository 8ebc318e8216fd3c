# SPDX-License-Identifier: Apache-2.0
"""The free queue of the hash-block cache: vLLM's ``FreeKVCacheBlockQueue``.

vLLM keeps every ref-0 block in one doubly linked list (``vllm/v1/core/kv_cache_utils.py``,
``FreeKVCacheBlockQueue``): ``popleft_n`` hands out new blocks from the head,
``remove`` takes a block out of the middle when a request matches it (``BlockPool.touch``),
``append_n`` puts freed cached blocks at the tail and ``prepend_n`` puts freed uncached
blocks at the head (``BlockPool.free_blocks``). The list is the LRU order: there is no
heap and no clock.

Here the list is two ``OrderedDict`` s (O(1) popitem from the front, removal and
move_to_end, in C) around the run of pages never handed out, so that a pool of 10**12 pages
costs what the pages it used cost, as :class:`kvcore.pool.PagePool` does::

    queue = front (prepended pages, head first) + untouched run + back (appended pages)

Each queued page carries one flag: whether it holds a cached block (what lazy eviction
will remove when the page is taken). A queued page changes its flag only just before it is
taken (:meth:`FreeBlockQueue.forget_block`): only pages with ref 0 are queued, and only
referenced pages gain blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator


class FreeBlockQueue:
    """The ref-0 pages of a hash cache, head (next handed out) first. All operations O(1)
    per page; memory for the pages used only.

    Also what the cache shows as its ``page_pool``: :meth:`available_page_count` is the
    queued pages holding no cached block (free), :meth:`evictable_count` those holding one
    (free and cached at once: vLLM's lazy eviction).
    """

    __slots__ = ("_page_count", "_front", "_untouched", "_back", "_cached")

    def __init__(self, page_count: int, untouched_from: int | None = None,
                 head: Iterable[tuple[int, bool]] = (), tail: Iterable[tuple[int, bool]] = ()):
        # Callers validate the pages (kvcore.pool.PagePool, or the snapshot checker). By
        # default every page is untouched: a fresh pool's queue, 0 .. page_count-1.
        self._page_count = page_count
        self._untouched = 0 if untouched_from is None else untouched_from
        self._front: OrderedDict[int, bool] = OrderedDict(head)
        self._back: OrderedDict[int, bool] = OrderedDict(tail)
        self._cached = sum(self._front.values()) + sum(self._back.values())

    @classmethod
    def from_order(cls, page_count: int, order: Iterable[int], cached: set[int] | dict) -> "FreeBlockQueue":
        """A queue holding ``order`` (head first); pages in ``cached`` hold a cached block.

        The run ``k .. page_count-1`` (consecutive, uncached, ending the pool) is kept as a
        range wherever it sits in the order, so a restored queue costs what the original did.
        """
        runs = getattr(order, "queue_parts", None)
        if runs is not None:  # a snapshot's lazy queue (kvcore.snapshot.QueuedPages)
            head, untouched_from, tail = runs()
        else:
            pages = list(order)
            head, untouched_from, tail = _split_run(pages, page_count, cached)
        return cls(page_count, untouched_from, ((p, p in cached) for p in head), ((p, p in cached) for p in tail))

    # -- what a pool answers --------------------------------------------------------------

    def available_page_count(self) -> int:
        """Queued pages holding no cached block (free). O(1)."""
        return len(self) - self._cached

    def evictable_count(self) -> int:
        """Queued pages holding a cached block (evictable: taken last among none, but taken
        in queue order like any other). O(1)."""
        return self._cached

    def total_page_count(self) -> int:
        """Pages in the pool, queued or not. O(1)."""
        return self._page_count

    def __len__(self) -> int:
        return len(self._front) + self._page_count - self._untouched + len(self._back)

    def __iter__(self) -> Iterator[int]:
        yield from self._front
        yield from range(self._untouched, self._page_count)
        yield from self._back

    def __contains__(self, page: object) -> bool:
        return page in self._front or page in self._back or (
            type(page) is int and self._untouched <= page < self._page_count)

    def parts(self) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
        """``(front pages, untouched_from, back pages)``: the queue is front, then the pages
        ``untouched_from .. page_count-1``, then back."""
        return tuple(self._front), self._untouched, tuple(self._back)

    @property
    def untouched_from(self) -> int:
        """Pages from here to the end of the pool were never handed out."""
        return self._untouched

    # -- vLLM's operations ----------------------------------------------------------------

    def popleft_n(self, count: int) -> list[int]:
        """Take ``count`` pages from the head (the caller checked there are enough)."""
        return self.take_n(count)[0]

    def take_n(self, count: int) -> tuple[list[int], list[int]]:
        """:meth:`popleft_n`, also saying which of the pages taken held a cached block
        (head first): ``(taken, those holding one)``. The caller drops their blocks."""
        out: list[int] = []
        held: list[int] = []
        front = self._front
        while count and front:
            page, flag = front.popitem(last=False)
            out.append(page)
            if flag:
                held.append(page)
            count -= 1
        if count:
            untouched = self._untouched
            k = min(count, self._page_count - untouched)
            if k:
                out += range(untouched, untouched + k)
                self._untouched = untouched + k
                count -= k
            if count:
                popitem = self._back.popitem
                append = out.append
                for _ in range(count):
                    page, flag = popitem(last=False)
                    append(page)
                    if flag:
                        held.append(page)
        self._cached -= len(held)
        return out, held

    def remove_n(self, pages: list[int]) -> None:
        """:meth:`remove` each of ``pages`` (queued, each holding a cached block)."""
        back_pop = self._back.pop
        front = self._front
        cached = 0
        for page in pages:
            flag = back_pop(page, None)  # released cached pages go to the back
            if flag is None:
                flag = front.pop(page)  # a restored queue can have some ahead of its run
            cached += flag
        self._cached -= cached

    def cached_among_first(self, count: int) -> list[int]:
        """The pages holding a cached block among the first ``count`` (head first). O(count);
        the untouched run holds none, so it is skipped whole."""
        out: list[int] = []
        left = count
        for part in (self._front, None, self._back):
            if part is None:
                left -= min(left, self._page_count - self._untouched)
                continue
            for page, flag in part.items():
                if not left:
                    return out
                if flag:
                    out.append(page)
                left -= 1
        return out

    def forget_block(self, page: int) -> None:
        """``page``, queued, no longer holds a cached block (it is about to be taken: lazy
        eviction removes the block first)."""
        if page in self._front:
            self._front[page] = False
        else:
            self._back[page] = False
        self._cached -= 1

    def remove(self, page: int) -> None:
        """Take ``page`` out of the queue wherever it is (a match referenced it again). Only
        pages holding a cached block are ever matched, and those are never in the run."""
        flag = self._front.pop(page, None)
        if flag is None:
            flag = self._back.pop(page)
        self._cached -= flag

    def append_n(self, pages: Iterable[int], cached: bool) -> None:
        """Put ``pages`` at the tail, in order (the last one is the tail)."""
        back = self._back
        before = len(back)
        for page in pages:
            back[page] = cached
        if cached:
            self._cached += len(back) - before

    def prepend_n(self, pages: list[int], cached: bool) -> None:
        """Put ``pages`` at the head, in order (``pages[0]`` becomes the head), as vLLM's
        ``prepend_n`` links them."""
        front = self._front
        for page in reversed(pages):
            front[page] = cached
            front.move_to_end(page, last=False)
        if cached:
            self._cached += len(pages)

    def flag_errors(self, holds_block) -> list[int]:
        """Queued pages whose flag disagrees with ``holds_block(page)`` (a self-check)."""
        return [p for d in (self._front, self._back) for p, flag in d.items() if flag != bool(holds_block(p))]

    def __repr__(self) -> str:
        return f"FreeBlockQueue({len(self)} queued of {self._page_count}, {self._cached} cached)"


def _split_run(pages: list[int], page_count: int, cached) -> tuple[list[int], int, list[int]]:
    """``(head, untouched_from, tail)`` of an explicit order: the longest run ending in
    ``page_count - 1`` of consecutive uncached pages becomes the untouched range."""
    if not pages or page_count - 1 in cached:
        return pages, page_count, []
    try:
        end = pages.index(page_count - 1)
    except ValueError:
        return pages, page_count, []
    start = end
    while start > 0 and pages[start - 1] == pages[start] - 1 and pages[start - 1] not in cached:
        start -= 1
    return pages[:start], pages[start], pages[end + 1:]
