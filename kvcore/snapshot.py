# SPDX-License-Identifier: Apache-2.0
"""The one state format: a frozen, JSON-able, comparable picture of a cache.

Snapshots feed the UI, exports, restore and (later) adapters for other caches. Equal states
compare ``==``; ``digest()`` hashes canonical JSON, so two runs, two processes or two
machines can compare states step by step.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .policies import check_policy
# MAX_SERIALISED_PAGES and SnapshotTooLarge stay importable from here, where users import them.
from .rows import (MAX_SERIALISED_PAGES, SnapshotTooLarge, allocation_row, block_row, canonical_json,  # noqa: F401
                   keep_row_texts, node_row, page_row, refuse_serialising, rows_text)
from .state_digest import StateDigest

SCHEMA = "kvcore.snapshot/1"

FREE, OWNED, CACHED = "free", "owned", "cached"

#: The cache kinds a snapshot may describe.
KINDS = ("trie", "base", "hash")


class SnapshotFormatError(ValueError):
    """A dict that is not a kvcore snapshot of a supported schema. ``path`` says where."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass(frozen=True, slots=True)
class PageInfo:
    """One physical page: ``free``, ``owned`` (unpublished tail of allocation ``owner``)
    or ``cached`` (held by trie node ``node`` with ref count ``ref``).

    In a hash cache's snapshot (kind ``hash``) ``node`` is the id of the cached block the
    page holds (:class:`BlockInfo`) and ``ref`` is the page's own count, vLLM's
    ``ref_cnt``: an owned page has ref 1, a cached one the live allocations holding it; a
    cached page with ref 0 is in the free queue too (free and cached at once)."""

    page: int
    state: str
    owner: int | None = None
    node: int | None = None
    ref: int = 0


_FREE_ROWS: list[PageInfo] = []

#: Free rows shared between snapshots, at most: pages beyond get a row of their own each
#: time they are read, so reading a huge pool's page table never fills memory for good.
_SHARED_FREE_ROWS = 1 << 20


def free_row(page: int) -> PageInfo:
    """The shared ``PageInfo(page, 'free')`` row: immutable, so one per page number serves
    every snapshot (cheap snapshots, and diffs compare unchanged rows by identity)."""
    rows = _FREE_ROWS
    if page < len(rows):
        return rows[page]
    if page >= _SHARED_FREE_ROWS:
        return PageInfo(page, FREE)
    rows.extend(PageInfo(p, FREE) for p in range(len(rows), page + 1))
    return rows[page]


#: Lazy sequences up to this long hash like the tuple they stand for.
_HASHED_AS_TUPLE = 1 << 24


class _LazySequence(Sequence):
    """An immutable sequence equal (and hashing equal) to the tuple it stands for."""

    __slots__ = ()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._item(i) for i in range(*index.indices(len(self))))
        n = len(self)
        if type(index) is not int:
            index = operator.index(index)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._item(index)

    def __eq__(self, other):
        if isinstance(other, (tuple, _LazySequence)):  # as a tuple: never equal to a list
            if len(self) != len(other):
                return False
            return self._equal(other)
        return NotImplemented

    def _equal(self, other) -> bool:
        return all(a is b or a == b for a, b in zip(self, other))

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        # Equal to the tuple's hash wherever that tuple could exist in memory; beyond, a
        # hash of what is stored (a 10**12-page table must not be walked to be hashed).
        if len(self) <= _HASHED_AS_TUPLE:
            return hash(tuple(self))
        return hash((type(self).__name__, len(self), self._stored()))

    def __repr__(self) -> str:
        if len(self) <= 16:
            return repr(tuple(self))
        return f"{type(self).__name__}({self._describe()})"


class FreePages(_LazySequence):
    """A pool's free list, in hand-out order, costing memory for the pages used only.

    Pages ``untouched_from .. page_count-1`` were never handed out: they are free and come
    first, in index order (a fresh pool's whole list). ``returned`` follows: pages given
    back, first returned first. A tuple of the same pages compares equal.
    """

    __slots__ = ("untouched_from", "page_count", "returned")

    def __init__(self, untouched_from: int, page_count: int, returned: tuple[int, ...]):
        self.untouched_from = untouched_from
        self.page_count = page_count
        self.returned = returned

    def __len__(self) -> int:
        return self.page_count - self.untouched_from + len(self.returned)

    def _item(self, i: int) -> int:
        untouched = self.page_count - self.untouched_from
        return self.untouched_from + i if i < untouched else self.returned[i - untouched]

    def __iter__(self):
        yield from range(self.untouched_from, self.page_count)
        yield from self.returned

    def __contains__(self, page) -> bool:
        if type(page) is int and self.untouched_from <= page < self.page_count:
            return True
        return page in self.returned

    def _equal(self, other) -> bool:
        if isinstance(other, FreePages):
            if (other.untouched_from, other.page_count) == (self.untouched_from, self.page_count):
                return self.returned == other.returned
            if (self.untouched_from < self.page_count and other.untouched_from < other.page_count
                    and self.untouched_from != other.untouched_from):
                return False  # each starts with its untouched run, and the runs start apart
        # Otherwise one side is explicit (or a run is empty): bounded by a list in memory.
        return all(a == b for a, b in zip(self, other))

    def _describe(self) -> str:
        return f"untouched {self.untouched_from}..{self.page_count - 1}, then returned {self.returned!r}"

    def _stored(self) -> tuple:
        return (self.untouched_from, self.returned)


class PageTable(_LazySequence):
    """The page table of a snapshot: one row per page of the pool, costing memory for the
    pages used only. ``rows`` covers pages ``0 .. len(rows)-1``; every later page is free
    (never handed out) and its row is made when read."""

    __slots__ = ("rows", "page_count")

    def __init__(self, rows: tuple[PageInfo, ...], page_count: int):
        self.rows = rows
        self.page_count = page_count

    def __len__(self) -> int:
        return self.page_count

    def _item(self, i: int) -> PageInfo:
        rows = self.rows
        return rows[i] if i < len(rows) else free_row(i)

    def __iter__(self):
        yield from self.rows
        for p in range(len(self.rows), self.page_count):
            yield free_row(p)

    def _equal(self, other) -> bool:
        if isinstance(other, PageTable):
            a, b = self.rows, other.rows
            if len(a) > len(b):
                a, b = b, a
            return a == b[:len(a)] and all(b[p] == PageInfo(p, FREE) for p in range(len(a), len(b)))
        return super()._equal(other)

    def _describe(self) -> str:
        return f"{len(self.rows)} rows, then {self.page_count - len(self.rows)} free pages"

    def _stored(self) -> tuple:
        rows = self.rows
        end = len(rows)
        while end and rows[end - 1] == PageInfo(end - 1, FREE):  # equal tables store different free tails
            end -= 1
        return rows[:end]


class QueuedPages(_LazySequence):
    """A hash cache's free queue, head first, costing memory for the pages used only:
    ``head`` (pages put at the head), then the pages ``untouched_from .. page_count-1``
    that were never handed out, then ``tail`` (pages put at the tail). A tuple of the same
    pages compares equal."""

    __slots__ = ("head", "untouched_from", "page_count", "tail")

    def __init__(self, head: tuple[int, ...], untouched_from: int, page_count: int, tail: tuple[int, ...]):
        self.head = head
        self.untouched_from = untouched_from
        self.page_count = page_count
        self.tail = tail

    def queue_parts(self) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
        """``(head, untouched_from, tail)``, what :class:`kvcore.freequeue.FreeBlockQueue`
        is rebuilt from."""
        return self.head, self.untouched_from, self.tail

    def __len__(self) -> int:
        return len(self.head) + self.page_count - self.untouched_from + len(self.tail)

    def _item(self, i: int) -> int:
        if i < len(self.head):
            return self.head[i]
        i -= len(self.head)
        run = self.page_count - self.untouched_from
        return self.untouched_from + i if i < run else self.tail[i - run]

    def __iter__(self):
        yield from self.head
        yield from range(self.untouched_from, self.page_count)
        yield from self.tail

    def __contains__(self, page) -> bool:
        if type(page) is int and self.untouched_from <= page < self.page_count:
            return True
        return page in self.head or page in self.tail

    def _equal(self, other) -> bool:
        if isinstance(other, QueuedPages) and other.queue_parts() == self.queue_parts():
            return True
        return all(a == b for a, b in zip(self, other))

    def _describe(self) -> str:
        return (f"head {self.head!r}, then untouched {self.untouched_from}..{self.page_count - 1}, "
                f"then tail {self.tail!r}")

    def _stored(self) -> tuple:
        return self.queue_parts()


def touched_rows(pages) -> tuple[PageInfo, ...] | Sequence[PageInfo]:
    """The rows of a page table that can be anything but free-and-untouched: all of a
    tuple's, the explicit ones of a :class:`PageTable`."""
    return pages.rows if isinstance(pages, PageTable) else pages


def untouched_free(free) -> tuple[Sequence[int], range]:
    """A free list split into its explicit pages and the run of untouched pages it implies
    (empty for a plain tuple), so checkers read what is stored, not what is implied."""
    if isinstance(free, FreePages):
        return free.returned, range(free.untouched_from, free.page_count)
    if isinstance(free, QueuedPages):
        return free.head + free.tail, range(free.untouched_from, free.page_count)
    return free, range(0)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One trie node. The root has id 0, no parent, no tokens and no page."""

    id: int
    parent: int | None
    tokens: tuple[int, ...]
    page: int | None
    ref: int
    last_access: int
    seq: int
    hits: int = 0
    priority: int = 0

    @property
    def key(self) -> tuple[int, int]:
        """The lru eviction key ``(last_access, seq)``; :meth:`Snapshot.node_key` gives the
        key of the snapshot's own policy."""
        return (self.last_access, self.seq)

    def key_for(self, policy: str) -> tuple[int, ...]:
        """The eviction key under ``policy`` (fields named by ``kvcore.policies.KEY_FIELDS``)."""
        return check_policy(policy).key_of(self)


@dataclass(frozen=True, slots=True)
class AllocationInfo:
    """One live allocation: its tokens, block table and how many leading pages are published."""

    id: int
    name: str | None
    tokens: tuple[int, ...]
    pages: tuple[int, ...]
    published: int
    hit_tokens: int
    released: bool = False
    priority: int = 0

    @property
    def label(self) -> str:
        """The name if it has one, else ``#id``."""
        return self.name if self.name is not None else f"#{self.id}"


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """One cached block of a hash cache (kind ``hash``, vLLM's design).

    ``key`` is the block's chained key (hex sha256 of the parent's key and the block's
    tokens, see :mod:`kvcore.hashblock`), ``parent`` the parent block's key (None for a
    first block). ``reachable``: every block of its chain, from the first one, is cached,
    so an acquire can match it; a block whose parent was evicted stays cached but is not.
    ``id`` numbers the cachings in order (``next_seq`` is the next one). Two pages may cache
    one key (vLLM does not deduplicate); lookups return the one with the smaller id.
    """

    id: int
    page: int
    key: str
    parent: str | None
    tokens: tuple[int, ...]
    reachable: bool = True


@dataclass(frozen=True, slots=True)
class Stats:
    """Running totals since the cache was created."""

    lookups: int = 0
    lookup_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0
    dedups: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotChanges:
    """What a snapshot changed since the one its cache made just before it (``before``, a
    weak reference): the ids of the node and allocation rows and the pages whose rows are
    not the same objects (added, changed or gone), each sorted; on a hash cache ``nodes``
    holds the ids of its ``blocks`` rows (a hash page row's ``node`` is a block id too), as
    ``tests/kvcore/test_hash_incremental.py`` checks. Every other row is the very
    object of ``before``, so checks and diffs of consecutive snapshots cost what changed.
    Not part of the state: not compared, hashed or serialised (a copy made with
    ``dataclasses.replace`` has none)."""

    before: Any
    nodes: tuple[int, ...]
    pages: tuple[int, ...]
    allocations: tuple[int, ...]


@dataclass(frozen=True)
class Snapshot:
    """Complete state of a cache at one moment (see docs/design.md, "Snapshot").

    One format for every design: each field means the same kind of thing on all three,
    and a field a design has no use for is empty (``()``), never left out or renamed.

    ====================  ==============================  ==============================  ==============================
    field                 ``trie`` (shortfin's)           ``base`` (no sharing)           ``hash`` (vLLM's)
    ====================  ==============================  ==============================  ==============================
    ``pages[i].state``    ``free``, ``owned`` (an         ``free`` or ``owned``; never    ``free`` (queued, no block),
                          allocation's unpublished tail)  ``cached``                      ``owned`` or ``cached``; a
                          or ``cached`` (held by a node)                                  cached page with ref 0 is
                                                                                          queued too
    ``pages[i].node``     the trie node holding it        None                            the id of the block it caches
                                                                                          (:class:`BlockInfo`)
    ``pages[i].ref``      the node's ref count (0 on      0                               the page's own count, vLLM's
                          free and owned pages)                                           ``ref_cnt`` (owned: 1)
    ``free``              the free list, hand-out order:  the free list, as the trie's    the free queue, head (taken
                          free pages only                                                 next) first: free pages and
                                                                                          cached ref-0 pages
    ``nodes``             the trie's nodes (root: id 0)   ``()``                          ``()``
    ``heap``              the eviction candidates         ``()``                          ``()`` (the free queue is its
                          (ref-0 leaf node ids), heap                                     eviction order)
                          array order
    ``blocks``            ``()``                          ``()``                          the cached blocks, by id (not
                                                                                          serialised for the others)
    ``next_seq``          the next node id                1                               the next block id
    ====================  ==============================  ==============================  ==============================

    ``pages[i].owner`` (the allocation of an owned page), ``allocations``, ``stats``, ``clock``
    and the sizes mean the same on every design.

    Read the free pages through :attr:`free_count` and :meth:`free_position` rather than
    walking ``free``: ``pages`` has one row per page of the pool and ``free`` is a tuple,
    or for pools above 8,192 pages (``kvcore.base._EXPLICIT_PAGES``) a :class:`PageTable`
    and a :class:`FreePages` (trie, base) or :class:`QueuedPages` (hash) that store what the
    pool used and make the rest when read (equal to the tuples, and serialised the same).
    ``to_dict``/``to_json`` write every row: their size is the pool's, so bound
    ``page_count`` before serialising a huge pool.
    """

    kind: str
    tokens_per_page: int
    page_count: int
    clock: int
    next_seq: int
    next_allocation_id: int
    pages: tuple[PageInfo, ...]
    free: tuple[int, ...]
    nodes: tuple[NodeInfo, ...]
    allocations: tuple[AllocationInfo, ...]
    heap: tuple[int, ...]
    stats: Stats = Stats()
    policy: str = "lru"
    schema: str = SCHEMA
    #: A hash cache's cached blocks, by id (empty for the other kinds).
    blocks: tuple[BlockInfo, ...] = ()
    _index: dict = field(default=None, init=False, repr=False, compare=False, hash=False)
    #: Set by the cache that made it: :class:`SnapshotChanges` since its previous snapshot.
    _changes: SnapshotChanges | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    # -- lookups -------------------------------------------------------------------------

    def _lookup(self, part: str) -> Any:
        """One lookup table of this snapshot, built on first use: each costs a pass over
        its rows, so a name lookup (every ``expect`` line) does not pay for the trie's."""
        index = self._index
        if index is None:
            index = {}
            object.__setattr__(self, "_index", index)
        table = index.get(part)
        if table is None:
            table = index[part] = _LOOKUPS[part](self)
        return table

    def node_key(self, node: NodeInfo) -> tuple[int, ...]:
        """``node``'s eviction key under this snapshot's policy."""
        return node.key_for(self.policy)

    def node(self, node_id: int) -> NodeInfo | None:
        """The node with this id, or None."""
        return self._lookup("node").get(node_id)

    def children(self, node_id: int) -> tuple[int, ...]:
        """Ids of the node's children, in creation order."""
        return tuple(self._lookup("children").get(node_id, ()))

    def allocation(self, allocation_id: int) -> AllocationInfo | None:
        """The live allocation with this id, or None."""
        return self._lookup("alloc").get(allocation_id)

    def allocation_named(self, name: str) -> AllocationInfo | None:
        """The live allocation with this name, or None."""
        return self._lookup("name").get(name)

    def node_for_page(self, page: int) -> NodeInfo | None:
        """The trie node holding ``page``, or None."""
        info = self.pages[page] if 0 <= page < len(self.pages) else None
        return self.node(info.node) if info is not None and info.node is not None else None

    def block(self, block_id: int) -> BlockInfo | None:
        """The cached block with this id (hash caches), or None."""
        return self._lookup("block").get(block_id)

    def block_for_page(self, page: int) -> BlockInfo | None:
        """The cached block ``page`` holds (hash caches), or None."""
        return self._lookup("block_page").get(page)

    @property
    def free_count(self) -> int:
        """Pages in ``free``: a trie's or base cache's free pages; a hash cache's whole free
        queue, so its cached ref-0 pages count too (they are evictable, not free). O(1)."""
        return len(self.free)

    def free_position(self, page: int) -> int | None:
        """``page``'s place in ``free``, 0 for the head (the page handed out next): the free
        list's or free queue's numbering every view and sentence uses (the pool's ``q0``);
        None when the page is not in it. Equal to ``tuple(free).index(page)``, but O(1) after
        one pass over the pages ``free`` stores explicitly: a lazy free list's run of
        never-used pages is counted, never listed."""
        if type(page) is not int:
            page = operator.index(page)
        index = self._index  # _lookup inlined: the page pool asks once per cell it draws
        table = index.get("free_position") if index is not None else None
        if table is None:
            table = self._lookup("free_position")
        places, run_start, run = table
        found = places.get(page)
        if found is not None:
            return found
        if page in run:
            return run_start + page - run.start
        return None

    @property
    def cached_count(self) -> int:
        """Pages held by trie nodes."""
        return sum(1 for p in touched_rows(self.pages) if p.state == CACHED)

    @property
    def owned_count(self) -> int:
        """Pages in allocations' unpublished tails."""
        return sum(1 for p in touched_rows(self.pages) if p.state == OWNED)

    @property
    def evictable_count(self) -> int:
        """Cached pages whose node has ref 0 (reachable by cascading eviction); in a hash
        cache, cached pages with ref 0 (queued: lazily evicted when taken)."""
        if self.blocks:
            pages = self.pages
            return sum(1 for b in self.blocks if 0 <= b.page < len(pages) and pages[b.page].ref == 0)
        return sum(1 for n in self.nodes if n.parent is not None and n.ref == 0)

    # -- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; :meth:`from_dict` gives back an equal snapshot. Refused
        (:class:`SnapshotTooLarge`) above :data:`MAX_SERIALISED_PAGES` pages."""
        refuse_serialising(self)
        return self._fields([page_row(p) for p in self.pages], [node_row(n) for n in self.nodes],
                            [allocation_row(a) for a in self.allocations])

    def _fields(self, pages: Any, nodes: Any, allocations: Any) -> dict[str, Any]:
        """The serialised fields in order, with the three lists of rows given (as rows for
        :meth:`to_dict`, as JSON text for :meth:`to_json`)."""
        d = {
            "schema": self.schema,
            "kind": self.kind,
            "policy": self.policy,
            "tokens_per_page": self.tokens_per_page,
            "page_count": self.page_count,
            "clock": self.clock,
            "next_seq": self.next_seq,
            "next_allocation_id": self.next_allocation_id,
            "pages": pages,
            "free": list(self.free),
            "nodes": nodes,
            "allocations": allocations,
            "heap": list(self.heap),
            "stats": {"lookups": self.stats.lookups, "lookup_tokens": self.stats.lookup_tokens,
                      "hit_tokens": self.stats.hit_tokens, "evictions": self.stats.evictions,
                      "dedups": self.stats.dedups},
        }
        if self.kind == "hash":  # only there: trie and base snapshots have no blocks field
            d["blocks"] = [block_row(b) for b in self.blocks]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Snapshot":
        """Build a snapshot from :meth:`to_dict` output, validating shape and types.

        Raises :class:`SnapshotFormatError` naming the offending field for anything else.
        """
        r = _Reader(d)
        schema = r.get("schema", str)
        if schema != SCHEMA:
            raise SnapshotFormatError(f"unsupported schema {schema!r} (expected {SCHEMA!r})", "schema")
        kind = r.get("kind", str)
        if kind not in KINDS:
            raise SnapshotFormatError(f"unknown cache kind {kind!r} (expected 'trie', 'base' or 'hash')", "kind")
        pages = tuple(
            PageInfo(r.int_at(p, f"pages[{i}]", 0), r.str_at(p, f"pages[{i}]", 1, (FREE, OWNED, CACHED)),
                     r.opt_int_at(p, f"pages[{i}]", 2), r.opt_int_at(p, f"pages[{i}]", 3), r.int_at(p, f"pages[{i}]", 4))
            for i, p in enumerate(r.get("pages", list))
        )
        nodes = tuple(
            NodeInfo(r.int_at(n, f"nodes[{i}]", 0), r.opt_int_at(n, f"nodes[{i}]", 1),
                     r.ints_at(n, f"nodes[{i}]", 2), r.opt_int_at(n, f"nodes[{i}]", 3),
                     r.int_at(n, f"nodes[{i}]", 4), r.int_at(n, f"nodes[{i}]", 5), r.int_at(n, f"nodes[{i}]", 6),
                     *_counters(r, n, f"nodes[{i}]"))
            for i, n in enumerate(r.get("nodes", list))
        )
        allocations = []
        for i, a in enumerate(r.get("allocations", list)):
            ar = _Reader(a, f"allocations[{i}]")
            name = ar.d.get("name") if isinstance(ar.d, dict) else None
            if name is not None and not isinstance(name, str):
                raise SnapshotFormatError("expected a string or null", f"allocations[{i}].name")
            allocations.append(AllocationInfo(
                ar.get("id", int), name, tuple(ar.ints("tokens")), tuple(ar.ints("pages")),
                ar.get("published", int), ar.get("hit_tokens", int), ar.get("released", bool),
                ar.get("priority", int) if isinstance(ar.d, dict) and "priority" in ar.d else 0))
        sr = _Reader(r.get("stats", dict), "stats")
        stats = Stats(sr.get("lookups", int), sr.get("lookup_tokens", int), sr.get("hit_tokens", int),
                      sr.get("evictions", int), sr.get("dedups", int))
        return cls(
            kind=kind, tokens_per_page=r.get("tokens_per_page", int), page_count=r.get("page_count", int),
            clock=r.get("clock", int), next_seq=r.get("next_seq", int),
            next_allocation_id=r.get("next_allocation_id", int), pages=pages, free=tuple(r.ints("free")),
            nodes=nodes, allocations=tuple(allocations), heap=tuple(r.ints("heap")), stats=stats,
            policy=r.get("policy", str), schema=schema,
            blocks=_blocks(r) if kind == "hash" else (),
        )

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace. Identical across processes.

        The same text as ``json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))``
        (a test holds it to that), built from per-row texts: consecutive snapshots share
        their unchanged row objects, so the rows of the last snapshot encoded are kept with
        their text and only new rows are encoded. Digesting every step of a long timeline
        (bundles) then costs a fraction of encoding each snapshot whole. Rows are frozen and
        hold tuples, so a kept text never goes stale; the texts kept are one snapshot's.
        Refused (:class:`SnapshotTooLarge`) above :data:`MAX_SERIALISED_PAGES` pages."""
        refuse_serialising(self)
        kept: dict[int, tuple[Any, str]] = {}
        d = self._fields(rows_text(self.pages, page_row, kept), rows_text(self.nodes, node_row, kept),
                         rows_text(self.allocations, allocation_row, kept))
        keep_row_texts(kept)
        return "{" + ",".join(
            f"{canonical_json(key)}:{value if key in _ROW_LISTS else canonical_json(value)}"
            for key, value in sorted(d.items())
        ) + "}"

    def digest(self) -> str:
        """Hex sha256 of :meth:`to_json` (so refused above :data:`MAX_SERIALISED_PAGES` pages)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def state_digest(self) -> str:
        """The state's set digest, :data:`kvcore.state_digest.STATE_DIGEST_SCHEME` (see
        :func:`kvcore.state_digest.state_elements`): equal states give equal digests, and
        unlike :meth:`digest` it can be kept up to date from what a step changed
        (:class:`kvcore.state_digest.StateDigest`). This is the full computation, the oracle
        the incremental ones are held to: O(the state). Refused as :meth:`to_dict` is."""
        return StateDigest.of_state(self.to_dict()).hexdigest()


def _children(snap: Snapshot) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for n in snap.nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n.id)
    return children


def _free_places(snap: Snapshot) -> tuple[dict[int, int], int, range]:
    """:meth:`Snapshot.free_position`'s table: ``(places, run_start, run)``, the explicit
    pages' places (``{page: place}``) and the run of never-used pages ``free`` implies, whose
    first page stands at ``run_start``. A page gets its first place, as ``tuple.index``
    finds it, should a broken cache list a page twice (so a page listed after the run, and
    in it, is left to the run)."""
    free = snap.free
    if isinstance(free, FreePages):
        before, run, after = (), range(free.untouched_from, free.page_count), free.returned
    elif isinstance(free, QueuedPages):
        before, run, after = free.head, range(free.untouched_from, free.page_count), free.tail
    else:
        before, run, after = free, range(0), ()
    # reversed: of a page listed twice, the first place is written last
    places = dict(zip(reversed(before), range(len(before) - 1, -1, -1)))
    if after:
        offset = len(before) + len(run)
        later = dict(zip(reversed(after), range(offset + len(after) - 1, offset - 1, -1)))
        if run:
            later = {page: place for page, place in later.items() if page not in run}
        later.update(places)
        places = later
    return places, len(before), run


#: How each of :meth:`Snapshot._lookup`'s tables is built.
_LOOKUPS = {
    "free_position": _free_places,
    "node": lambda snap: {n.id: n for n in snap.nodes},
    "alloc": lambda snap: {a.id: a for a in snap.allocations},
    "name": lambda snap: {a.name: a for a in snap.allocations if a.name is not None},
    "children": _children,
    "block": lambda snap: {b.id: b for b in snap.blocks},
    "block_page": lambda snap: {b.page: b for b in snap.blocks},
}

_ROW_LISTS = frozenset(("pages", "nodes", "allocations"))

def _counters(r: "_Reader", row: Any, path: str) -> tuple[int, int]:
    """A node row's ``hits`` and ``priority``: fields 7 and 8, or (0, 0) in a seven-field row."""
    if isinstance(row, list) and len(row) == 7:
        return 0, 0
    return r.int_at(row, path, 7), r.int_at(row, path, 8)


def _blocks(r: "_Reader") -> tuple[BlockInfo, ...]:
    """A hash snapshot's ``blocks`` rows: ``[id, page, key, parent, tokens, reachable]``."""
    out = []
    for i, row in enumerate(r.get("blocks", list)):
        path = f"blocks[{i}]"
        parent = r._row(row, path, 3)
        if parent is not None and not isinstance(parent, str):
            raise SnapshotFormatError("expected a string or null", f"{path}[3]")
        if not isinstance(r._row(row, path, 2), str):
            raise SnapshotFormatError("expected a string", f"{path}[2]")
        reachable = r._row(row, path, 5)
        if not isinstance(reachable, bool):
            raise SnapshotFormatError("expected true or false", f"{path}[5]")
        out.append(BlockInfo(r.int_at(row, path, 0), r.int_at(row, path, 1), row[2], parent,
                             r.ints_at(row, path, 4), reachable))
    return tuple(out)


class _Reader:
    """Typed field access with error messages that name the field path."""

    def __init__(self, d: Any, path: str = ""):
        if not isinstance(d, dict):
            raise SnapshotFormatError("expected a JSON object", path or "snapshot")
        self.d = d
        self.path = path

    def _p(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, typ: type) -> Any:
        if key not in self.d:
            raise SnapshotFormatError("missing field", self._p(key))
        v = self.d[key]
        if typ is int and (not isinstance(v, int) or isinstance(v, bool)):
            raise SnapshotFormatError(f"expected an integer, got {type(v).__name__}", self._p(key))
        if typ is not int and not isinstance(v, typ):
            raise SnapshotFormatError(f"expected {typ.__name__}, got {type(v).__name__}", self._p(key))
        return v

    def ints(self, key: str) -> list[int]:
        v = self.get(key, list)
        for i, x in enumerate(v):
            if not isinstance(x, int) or isinstance(x, bool):
                raise SnapshotFormatError("expected an integer", f"{self._p(key)}[{i}]")
        return v

    @staticmethod
    def _row(row: Any, path: str, i: int) -> Any:
        if not isinstance(row, list) or i >= len(row):
            raise SnapshotFormatError("expected a list with more fields", path)
        return row[i]

    def int_at(self, row: Any, path: str, i: int) -> int:
        v = self._row(row, path, i)
        if not isinstance(v, int) or isinstance(v, bool):
            raise SnapshotFormatError("expected an integer", f"{path}[{i}]")
        return v

    def opt_int_at(self, row: Any, path: str, i: int) -> int | None:
        v = self._row(row, path, i)
        return None if v is None else self.int_at(row, path, i)

    def str_at(self, row: Any, path: str, i: int, allowed: tuple[str, ...]) -> str:
        v = self._row(row, path, i)
        if v not in allowed:
            raise SnapshotFormatError(f"expected one of {', '.join(allowed)}", f"{path}[{i}]")
        return v

    def ints_at(self, row: Any, path: str, i: int) -> tuple[int, ...]:
        v = self._row(row, path, i)
        if not isinstance(v, list) or any(not isinstance(x, int) or isinstance(x, bool) for x in v):
            raise SnapshotFormatError("expected a list of integers", f"{path}[{i}]")
        return tuple(v)
