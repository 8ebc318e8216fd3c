# SPDX-License-Identifier: Apache-2.0
"""What the hash design's views draw: pure values from a hash snapshot (kind ``hash``,
kvcore's :class:`~kvcore.hashblock.HashBlockPagedAttentionCache`, vLLM's design).

A hash cache has no tree and no eviction heap: full blocks keyed by chained hashes, and one
free queue of ref-0 pages whose head is the next page taken (and whose cached block, if it
still holds one, leaves the cache then: lazy eviction). So its views differ from the trie's:

* the **block view** (in the trie's place) groups the cached blocks by chain, as far as the
  chain is cached: :func:`block_lines`. Blocks hang under the block their parent key names;
  a block whose parent key is not cached at all heads a chain of its own and is
  **unreachable** (no acquire can match it, nor anything below it);
* the **free-queue view** (in the heap's place) lists the queue head to tail, each page with
  the block it still caches or "empty": :func:`queue_entries`;
* the **page pool** numbers free-queue pages by their place in the queue: :class:`QueueOrder`.

What the step did (blocks cached, matched, evicted; pages queued, taken, matched again) comes
from the frame's kvcore events: :func:`block_marks`. No Textual here: the widgets render these
values, and tests check them without a screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcore import events as ev
from kvcore.snapshot import BlockInfo, QueuedPages

from kvviz.core.designs import HASH
from kvviz.core.narrate import count

MAX_INDENT = 16
"""Chains deeper than this are drawn at this depth (their depth is written on the row), so a
trace's chain of thousands of blocks does not give each row a guide thousands of cells wide."""

EMPTY_RUN = 3
"""Runs of at least this many consecutive empty pages, in page order, share one queue row."""


class NotAHashSnapshot(ValueError):
    """The block and free-queue views were handed a trie or base snapshot."""


def require_hash(snapshot) -> None:
    """Raise :class:`NotAHashSnapshot` unless ``snapshot`` is a hash cache's."""
    if snapshot.kind != HASH:
        raise NotAHashSnapshot(f"a {snapshot.kind} snapshot has no cached blocks or free queue: the block and "
                               f"free-queue views show hash snapshots only")


# -- the free queue's order -----------------------------------------------------------------

class QueueOrder:
    """Where each page stands in a hash snapshot's free queue: :meth:`position` is 0 for the
    head (taken next), None for a page not in the queue (referenced).

    The snapshot's own numbering (:meth:`kvcore.Snapshot.free_position`, O(pages stored):
    a lazy queue's run of never-used pages is counted, never listed), read for a hash
    snapshot only.
    """

    __slots__ = ("_snapshot",)

    def __init__(self, snapshot) -> None:
        require_hash(snapshot)
        self._snapshot = snapshot

    def position(self, page: int) -> int | None:
        """``page``'s place in the queue (0: the head, taken next), or None if not queued."""
        return self._snapshot.free_position(page)

    def __len__(self) -> int:
        return self._snapshot.free_count

    def place_label(self, page: int) -> str | None:
        """``page``'s place as a page cell shows it in four characters: "q0" (the head) to
        "q999", then thousands rounded down ("q12k"), "q…" beyond; None if not queued."""
        position = self.position(page)
        if position is None:
            return None
        if position < 1000:
            return f"q{position}"
        return f"q{position // 1000}k" if position < 100_000 else "q…"


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One row of the free-queue view: ``count`` pages from ``page`` on (consecutive page
    numbers, at consecutive places from ``position``; several only for empty pages), and the
    cached block the page still holds (``block``), or None: empty."""

    position: int
    page: int
    block: BlockInfo | None = None
    count: int = 1

    @property
    def last_page(self) -> int:
        """The last page of the row."""
        return self.page + self.count - 1


def queue_entries(snapshot) -> tuple[QueueEntry, ...]:
    """The free queue head to tail, runs of :data:`EMPTY_RUN` or more consecutive empty pages
    folded into one entry. O(pages stored): a lazy queue's never-used run is one entry."""
    require_hash(snapshot)
    free = snapshot.free
    if isinstance(free, QueuedPages):
        head, untouched_from, tail = free.queue_parts()
        run = range(untouched_from, free.page_count)
        parts = ((0, head), (len(head), run), (len(head) + len(run), tail))
    else:
        parts = ((0, tuple(free)),)
    holder = snapshot.block_for_page
    entries: list[QueueEntry] = []

    def add_empty(position: int, page: int, pages: int) -> None:
        last = entries[-1] if entries else None
        if last is not None and last.block is None and last.last_page + 1 == page:
            entries[-1] = QueueEntry(last.position, last.page, None, last.count + pages)
        else:
            entries.append(QueueEntry(position, page, None, pages))

    for start, pages in parts:
        if isinstance(pages, range):  # never used: empty, consecutive
            if pages:
                add_empty(start, pages.start, len(pages))
            continue
        for i, page in enumerate(pages):
            block = holder(page)
            if block is None:
                add_empty(start + i, page, 1)
            else:
                entries.append(QueueEntry(start + i, page, block))
    out: list[QueueEntry] = []
    for entry in entries:  # runs too short to fold are drawn page by page
        if entry.block is None and 1 < entry.count < EMPTY_RUN:
            out += (QueueEntry(entry.position + k, entry.page + k) for k in range(entry.count))
        else:
            out.append(entry)
    return tuple(out)


def free_queue_title(snapshot) -> str:
    """The free-queue pane's title, saying what it counts: the queued pages, and how many
    of them still cache a block (evictable): "Free queue · 8 pages · 6 cached"."""
    require_hash(snapshot)
    return f"Free queue · {count(snapshot.free_count, 'page')} · {snapshot.evictable_count:,} cached"


# -- the cached blocks, by chain ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BlockLine:
    """One row of the block view: the ``block``, its guide ``prefix`` and ``depth`` in its
    chain (0: a chain's first cached block), whether its parent key is not cached (``broken``:
    the block is unreachable and heads its chain), whether it sits under such a block
    (``reachable`` False), and ``duplicate_of``: the block lookups find for the same key,
    when this one is a later copy (vLLM caches duplicates)."""

    block: BlockInfo
    prefix: str
    depth: int
    broken: bool = False
    reachable: bool = True
    duplicate_of: int | None = None


def block_lines(snapshot) -> tuple[BlockLine, ...]:
    """The cached blocks grouped by chain, depth first: the chains from a first block, then
    those headed by an unreachable block (its parent key not cached), each in caching order.

    A key cached on several pages (duplicates) has its children under its first copy, the
    one lookups find. Every block appears once, also in a snapshot whose keys loop (it is
    listed as a chain's head). O(blocks)."""
    require_hash(snapshot)
    blocks = snapshot.blocks
    first_copy: dict[str, BlockInfo] = {}
    for b in sorted(blocks, key=lambda b: b.id):
        first_copy.setdefault(b.key, b)
    children: dict[str, list[BlockInfo]] = {}
    roots: list[BlockInfo] = []
    broken: list[BlockInfo] = []
    for b in sorted(blocks, key=lambda b: b.id):
        if b.parent is None:
            roots.append(b)
        elif b.parent in first_copy:
            children.setdefault(b.parent, []).append(b)
        else:
            broken.append(b)
    out: list[BlockLine] = []
    seen: set[int] = set()
    _walk(roots, True, first_copy, children, out, seen)
    _walk(broken, False, first_copy, children, out, seen)
    # Keys that loop (only a crafted snapshot): every block still gets its row.
    leftover = [b for b in sorted(blocks, key=lambda b: b.id) if b.id not in seen]
    while leftover:
        _walk(leftover[:1], False, first_copy, children, out, seen)
        leftover = [b for b in leftover if b.id not in seen]
    return tuple(out)


def _walk(heads: list[BlockInfo], reachable: bool, first_copy, children, out: list[BlockLine],
          seen: set[int]) -> None:
    # Depth first with an explicit stack: a chain of thousands of blocks must not hit
    # Python's recursion limit.
    pending = [(b, "", i == len(heads) - 1, 0, True) for i, b in reversed(list(enumerate(heads)))]
    while pending:
        b, prefix, last, depth, head = pending.pop()
        if b.id in seen:
            continue
        seen.add(b.id)
        copy = first_copy.get(b.key)
        duplicate_of = copy.id if copy is not None and copy.id != b.id else None
        out.append(BlockLine(b, prefix + ("└─" if last else "├─"), depth,
                             broken=head and b.parent is not None and b.parent not in first_copy,
                             reachable=reachable, duplicate_of=duplicate_of))
        if duplicate_of is not None:
            continue  # the key's children hang under its first copy
        below = children.get(b.key, ())
        inner = prefix if depth >= MAX_INDENT else prefix + ("  " if last else "│ ")
        for i in range(len(below) - 1, -1, -1):
            pending.append((below[i], inner, i == len(below) - 1, depth + 1, False))


@dataclass(frozen=True, slots=True)
class BlockCounts:
    """The block view's header: blocks cached, referenced (some page ref > 0), queued (ref 0:
    in the free queue, evicted when their page is taken), unreachable, duplicates."""

    cached: int
    referenced: int
    queued: int
    unreachable: int
    duplicates: int


def block_counts(snapshot) -> BlockCounts:
    """Counts for the block view's header. O(blocks)."""
    require_hash(snapshot)
    pages = snapshot.pages
    referenced = sum(1 for b in snapshot.blocks if pages[b.page].ref)
    keys = {b.key for b in snapshot.blocks}
    return BlockCounts(len(snapshot.blocks), referenced, len(snapshot.blocks) - referenced,
                       sum(1 for b in snapshot.blocks if not b.reachable), len(snapshot.blocks) - len(keys))


def blocks_title(snapshot) -> str:
    """The block pane's title: "Cached blocks · 6: 2 referenced, 4 queued"."""
    c = block_counts(snapshot)
    title = f"Cached blocks · {c.cached:,}: {c.referenced:,} referenced, {c.queued:,} queued"
    if c.unreachable:
        title += f", {c.unreachable:,} unreachable"
    return title


# -- what the step did ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EvictedBlock:
    """A block that left the cache in the step: its page was taken from the queue's head for
    ``allocation`` (lazy eviction). ``still_cached``: another page caches the same key."""

    block: int
    page: int
    tokens: tuple[int, ...]
    allocation: int
    still_cached: bool


@dataclass(frozen=True, slots=True)
class LeftQueue:
    """Pages that left the free queue in the step for ``allocation``, in order: ``taken``
    for new data (from the head), or matched again by an acquire (``taken`` False)."""

    pages: tuple[int, ...]
    allocation: int
    taken: bool


@dataclass(frozen=True)
class BlockMarks:
    """What the step did, as the hash views mark it (from the frame's kvcore events; empty
    for a frame without events, such as a sub-step's)."""

    new: frozenset[int] = frozenset()
    matched: frozenset[int] = frozenset()
    ref_changes: tuple[tuple[int, int], ...] = ()  # (page, change)
    evicted: tuple[EvictedBlock, ...] = ()
    joined: frozenset[int] = frozenset()
    left: tuple[LeftQueue, ...] = ()
    _refs: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def ref_change(self, page: int) -> int:
        """How much ``page``'s ref changed in the step."""
        refs = self._refs
        if refs is None:
            refs = dict(self.ref_changes)
            object.__setattr__(self, "_refs", refs)
        return refs.get(page, 0)


def block_marks(events) -> BlockMarks:
    """The marks of a step whose kvcore events are ``events``."""
    new, matched, evicted, joined, left = set(), set(), [], set(), []
    refs: dict[int, int] = {}
    for e in events:
        kind = type(e)
        if kind is ev.BlockCached:
            new.add(e.block)
        elif kind is ev.Matched:
            matched.update(e.nodes)
        elif kind is ev.RefTaken:
            refs[e.page] = refs.get(e.page, 0) + 1
        elif kind is ev.RefDropped:
            refs[e.page] = refs.get(e.page, 0) - 1
        elif kind is ev.BlockEvicted:
            evicted.append(EvictedBlock(e.block, e.page, e.tokens, e.allocation, e.still_cached))
        elif kind is ev.PageUnqueued:
            last = left[-1] if left else None
            if last is not None and not last.taken and last.allocation == e.allocation:
                left[-1] = LeftQueue(last.pages + (e.page,), e.allocation, False)
            else:
                left.append(LeftQueue((e.page,), e.allocation, False))
        elif kind is ev.PagesTaken:
            left.append(LeftQueue(tuple(e.pages), e.allocation, True))
        elif kind is ev.PagesQueued:
            joined.update(e.head)
            joined.update(e.tail)
    return BlockMarks(frozenset(new), frozenset(matched), tuple(sorted((p, d) for p, d in refs.items() if d)),
                      tuple(evicted), frozenset(joined), tuple(left))
