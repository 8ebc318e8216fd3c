# SPDX-License-Identifier: Apache-2.0
"""What kvviz reads off a hash cache's snapshot (kind ``hash``, vLLM's design): its free pages,
its free queue and the next lazy victim in it, its unreachable blocks.

A hash cache's ``snapshot.free`` is its whole free queue, head first: the ref-0 pages, some
holding no cached block (free) and some still holding one (evictable: a cached block stays
matchable until its page is taken from the head, then leaves the cache; vLLM's lazy
eviction). Expects, narration, why-answers and the exports all read the queue through these
functions, so they say the same thing. Every function costs O(pages the queue lists
explicitly): a pool's never-used run (a :class:`kvcore.QueuedPages` range) holds no cached
block and is never walked.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvcore import BlockInfo, QueuedPages, Snapshot

from kvviz.core.designs import design_of

__all__ = ["QUEUE_SHOWN", "free_page_count", "next_victim", "place_text", "queue_text", "queued_runs",
           "unreachable_blocks"]

QUEUE_SHOWN = 48
"""Queue entries (a page, or a run of never-used pages) written out by :func:`queue_text`."""


def free_page_count(snapshot: Snapshot) -> int:
    """Pages that are free: on a trie's or base cache's free list; in a hash cache's free
    queue holding no cached block (kvcore's ``page_pool.available_page_count()``; the queued
    pages that still hold one are evictable, not free). O(1) beyond the snapshot's counts."""
    if not design_of(snapshot).lazy:  # a free list holds free pages only
        return snapshot.free_count
    return snapshot.free_count - snapshot.evictable_count


def _explicit(free) -> Iterator[int]:
    """The queued pages that may hold a cached block, head first (the never-used run skipped)."""
    if isinstance(free, QueuedPages):
        yield from free.head
        yield from free.tail
    else:
        yield from free


def next_victim(snapshot: Snapshot) -> BlockInfo | None:
    """The cached block a hash cache evicts next: the one on the first page of the free queue
    that holds one (the pages before it hold none and are taken first, so it goes when an
    acquire takes that far). None when no queued page holds a cached block."""
    for page in _explicit(snapshot.free):
        block = snapshot.block_for_page(page)
        if block is not None:
            return block
    return None


def place_text(position: int, length: int) -> str:
    """A place in a queue of ``length`` pages as every sentence says it, in the page pool's
    numbering (``Snapshot.free_position``): "q0 (the head) of 8", "q2 of 8"."""
    return f"q{position:,}{' (the head)' if position == 0 else ''} of {length:,}"


def queued_runs(snapshot: Snapshot, limit: int = QUEUE_SHOWN) -> tuple[list[tuple[int, int, bool]], int]:
    """The first ``limit`` entries of the free queue, head first, and how many pages follow
    them. An entry is ``(first, last, cached)``: one page holding a cached block
    (``first == last``), or a run of consecutive pages holding none."""
    out: list[tuple[int, int, bool]] = []
    shown = 0

    def add(first: int, last: int, cached: bool) -> None:
        nonlocal shown
        shown += last - first + 1
        if out and not cached and not out[-1][2] and out[-1][1] + 1 == first:
            out[-1] = (out[-1][0], last, False)
        else:
            out.append((first, last, cached))

    free = snapshot.free
    if isinstance(free, QueuedPages):  # the never-used run as one range: never walked
        parts = (free.head, range(free.untouched_from, free.page_count), free.tail)
    else:
        parts = (free,)
    for pages in parts:
        if isinstance(pages, range):
            if pages:
                if len(out) >= limit:
                    break
                add(pages.start, pages.stop - 1, False)
            continue
        for page in pages:
            cached = snapshot.block_for_page(page) is not None
            joins = not cached and out and not out[-1][2] and out[-1][1] + 1 == page
            if len(out) >= limit and not joins:
                break
            add(page, page, cached)
        else:
            continue
        break
    return out, len(free) - shown


def queue_text(snapshot: Snapshot, limit: int = QUEUE_SHOWN) -> str:
    """The free queue on one line, head first: ``4..6 3* 2*`` (``*``: the page holds a cached
    block, evicted lazily when taken), ``… +N more`` past ``limit`` entries, ``(empty)``."""
    runs, more = queued_runs(snapshot, limit)
    if not runs:
        return "(empty)"
    words = [f"{a}*" if cached else str(a) if a == b else f"{a}..{b}" for a, b, cached in runs]
    return " ".join(words) + (f" … +{more:,} more" if more > 0 else "")


def unreachable_blocks(snapshot: Snapshot) -> tuple[BlockInfo, ...]:
    """A hash cache's cached blocks that no acquire can match: a block before them in their
    chain is no longer cached (a trie has none: every node hangs from the root)."""
    return tuple(b for b in snapshot.blocks if not b.reachable)
