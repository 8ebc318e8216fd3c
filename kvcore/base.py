# SPDX-License-Identifier: Apache-2.0
"""BasePagedAttentionCache: pages per request, no sharing. Also the shared machinery
(validation, allocation bookkeeping, events, snapshots) the trie cache builds on."""

from __future__ import annotations

import reprlib
import weakref
from collections.abc import Iterable

from . import events as ev
from .allocation import PageAllocation
from .errors import CacheAllocationFailure, InvalidConfiguration, InvalidOperation
from .policies import MAX_PRIORITY
from .pool import PagePool
from .snapshot import (
    _FREE_ROWS,
    CACHED,
    OWNED,
    AllocationInfo,
    NodeInfo,
    PageInfo,
    PageTable,
    Snapshot,
    SnapshotChanges,
    Stats,
    free_row,
    touched_rows,
)

#: Pools up to this many pages get plain tuples for their page table and free list in
#: snapshots (what the UI indexes page by page: a 2,048-page pool is the UI's benchmark);
#: larger ones get lazy sequences that cost memory for the pages used only (a trace
#: replay's pool can have 10**12 pages). Kept low so a step's snapshot costs what it
#: changed: with 1 << 16 here, a 10,000-page session paid two 10,000-entry tuples per step
#: (bench_check's curve, one run at load 7: 0.65 / 1.29 / 1.01 ms per step at 1k / 10k /
#: 100k pages, against 0.63 / 0.77 / 0.67 with lazy sequences from 4,096 pages). Not lower
#: than 8,192: exporting an 8,000-page session from lazy sequences peaked at 6.06 times the
#: bundle's size, over the 6 that tests/report/test_export.py allows.
_EXPLICIT_PAGES = 1 << 13


def pages_for(slots: int, tokens_per_page: int) -> int:
    """Pages needed for ``slots`` token slots: ceil(slots / tokens_per_page)."""
    return -(-slots // tokens_per_page)


def int_tokens(tokens: Iterable[int], op: str) -> tuple[int, ...]:
    """``tokens`` as a tuple of ints, or InvalidOperation before anything changes.

    Tokens must be integers, bools excluded: ``1.0`` and ``True`` equal ``1`` (and hash
    alike), so they would share its pages, and the snapshot could not round-trip them. Int
    subclasses (an ``IntEnum``) are stored as plain ints. O(len(tokens)), one C pass in
    the common case (every token an exact int).
    """
    try:
        tokens = tuple(tokens)
    except TypeError:
        raise not_a_sequence(tokens, op) from None
    if list(map(type, tokens)).count(int) != len(tokens):
        tokens = exact_ints(tokens, op)
    return tokens


def acquire_args(tokens: Iterable[int], extra_token_slots: object, name: object, priority: object) -> tuple[int, ...]:
    """An acquire's arguments checked, in order (tokens, extra slots, name, priority), before
    anything changes; the tokens as a tuple of ints. The common case (exact ints, no name
    or a string, priority 0) costs one C pass over the tokens and a few type tests."""
    try:  # int_tokens, inlined: an acquire is the lifecycle's hottest call
        tokens = tuple(tokens)
    except TypeError:
        raise not_a_sequence(tokens, "acquire") from None
    if list(map(type, tokens)).count(int) != len(tokens):
        tokens = exact_ints(tokens, "acquire")
    if type(extra_token_slots) is not int or extra_token_slots < 0:
        CacheCore._check_extra(extra_token_slots, "acquire")
    if name is not None and type(name) is not str:
        check_name(name, "acquire")
    if type(priority) is not int or priority:  # 0, the default, needs no check
        check_priority(priority, "acquire")
    return tokens


def not_a_sequence(tokens: object, op: str) -> InvalidOperation:
    """The error for tokens that cannot be iterated (or whose iteration raised TypeError)."""
    return InvalidOperation(f"{op}: tokens must be a sequence of integers, got {type(tokens).__name__} "
                            f"{reprlib.repr(tokens)}")


def exact_ints(tokens: tuple, op: str) -> tuple[int, ...]:
    """The slow path of :func:`int_tokens`: refuse the first token that is not an int;
    plain ints for int subclasses."""
    for i, t in enumerate(tokens):
        if not isinstance(t, int) or isinstance(t, bool):
            raise InvalidOperation(f"{op}: token {i} is {reprlib.repr(t)} ({type(t).__name__}); "
                                   "tokens must be integers (not bools, floats or strings)")
    return tuple(map(int, tokens))


def check_name(name: object, op: str) -> None:
    """Names are strings or None (a snapshot stores them as JSON strings)."""
    if name is not None and type(name) is not str:
        raise InvalidOperation(f"{op}: name must be a string or None, got {type(name).__name__} {reprlib.repr(name)}")


def check_priority(priority: object, op: str) -> None:
    """Priorities are ints in ``0 <= priority < MAX_PRIORITY`` (bools refused, as for tokens)."""
    if type(priority) is not int or not 0 <= priority < MAX_PRIORITY:
        raise InvalidOperation(f"{op}: priority must be an integer from 0 to 2**63 - 1, got {reprlib.repr(priority)}")


def _describe_tokens(tokens: tuple, limit: int = 8) -> str:
    shown = " ".join(map(str, tokens[:limit]))
    return f"[{shown}{' ...' if len(tokens) > limit else ''}]"


def claimed(page_pool: PagePool, tokens_per_page: int) -> PagePool:
    """``page_pool``, claimed for a new cache of ``tokens_per_page`` (checked first):
    InvalidConfiguration for a bad page size, or a pool another cache uses or one with pages
    missing (:meth:`PagePool.claim`)."""
    if type(tokens_per_page) is not int or tokens_per_page < 1:
        raise InvalidConfiguration(f"tokens_per_page must be a positive integer, got {reprlib.repr(tokens_per_page)}")
    if isinstance(page_pool, PagePool):
        page_pool.claim()  # one cache per pool, every page free: invariant 1 from birth
    return page_pool


class CacheCore:
    """What every cache design shares, whatever it takes its pages from: validation, the
    allocations and their ids, the clock, events and watching, stats, the refusal of a bad
    request, and restore. Not a cache by itself.

    A design builds its own page source (the base and trie caches a :class:`PagePool`, the
    hash cache a :class:`~kvcore.freequeue.FreeBlockQueue`) and hands it over: this class
    reads only ``available_page_count()`` and ``total_page_count()`` of it. A design
    supplies acquire, publish, release, snapshot and the restore hooks.
    """

    kind = "base"
    #: The eviction policy (:data:`kvcore.policies.POLICIES`). Only the trie evicts by one;
    #: the others' snapshots say "lru", the default.
    policy = "lru"

    def __init__(self, pages, tokens_per_page: int):
        self._pool = pages
        self.tokens_per_page = tokens_per_page
        self.clock = 0
        self.allocations: dict[int, PageAllocation] = {}
        self._next_allocation_id = 0
        self._events: list | None = None
        self._watched = False  # watch(): fine events too, each reported as it happens
        self._info_cache: dict | None = None  # snapshot rows reused while unchanged
        self._rows: _Rows | None = None  # the last snapshot's rows, kept up to date while recording
        self._lookups = 0
        self._lookup_tokens = 0
        self._hit_tokens = 0
        self._evictions = 0
        self._dedups = 0

    # -- public API ----------------------------------------------------------------------

    @property
    def page_pool(self):
        """Where this cache takes pages from (the hash cache: its free queue)."""
        return self._pool

    def record_events(self, on: bool = True) -> None:
        """Start (or stop) recording events; :meth:`take_events` collects them. Stops watching."""
        self._watched = False
        self._events = [] if on else None

    def watch(self, callback) -> None:
        """Report every event to ``callback(event)`` the moment it happens, the fine ones
        (:data:`kvcore.events.FINE_EVENTS`) included, at a point where :meth:`snapshot`
        shows the cache's real state right then; :meth:`take_events` still collects them.
        ``None`` stops watching and recording.

        For teaching and testing (kvviz's sub-steps): slower than recording, and nothing on
        the unwatched hot path changes. A callback that raises abandons the operation
        half-done, so only do that to a cache you then throw away.
        """
        self._watched = callback is not None
        self._events = ev.Tap(callback) if callback is not None else None

    def take_events(self) -> tuple:
        """Events recorded since the last call, in order (empty when not recording)."""
        events = self._events
        if events is None:
            return ()
        taken = tuple(events)
        events.clear()  # in place: a watched cache's list keeps its callback
        return taken

    def check_invariants(self) -> list:
        """the invariants (docs/invariants.md) on the current state; [] when healthy. O(state), off the hot path."""
        from .invariants import check_snapshot

        # Read from the live structures, not the kept rows: a change no operation noted shows.
        return check_snapshot(self._live_snapshot()) + self._check_live_structures()

    def dispose(self) -> None:
        """Take this cache apart for good (it is unusable afterwards): its reference cycles
        (a trie node and its children, the cache and its allocations) are broken, so that
        reference counting frees it at once rather than the cyclic garbage collector in a
        pause later. For a caller that drops many large caches (a UI jump, a trace replay)."""
        self.allocations.clear()

    @classmethod
    def restore(cls, snapshot: Snapshot, *, verify: bool = True, **options):
        """A new live cache (own pages, same allocation ids) that behaves like the snapshotted one.

        ``verify`` (the default) guarantees the restored cache's snapshot equals
        ``snapshot``, or raises InvalidOperation saying why not (see :mod:`kvcore.verify`):
        impossible fields, broken invariants, or a difference once restored. Pass False
        only for snapshots this library made itself. ``options`` are the design's
        constructor options a snapshot does not hold (the hash cache's
        ``recompute_last_token``): a snapshot holds state, not rules.
        """
        from .verify import first_difference, why_not_restorable

        if verify:
            why = why_not_restorable(snapshot, cls.kind)
            if why is not None:
                raise InvalidOperation(f"cannot restore the snapshot: {why}")
        elif snapshot.kind != cls.kind:
            raise InvalidOperation(f"cannot restore a {snapshot.kind} snapshot as a {cls.kind} cache")
        cache = cls._for_restore(snapshot, **options)
        cache.clock = snapshot.clock
        cache._next_allocation_id = snapshot.next_allocation_id
        s = snapshot.stats
        cache._lookups, cache._lookup_tokens, cache._hit_tokens = s.lookups, s.lookup_tokens, s.hit_tokens
        cache._evictions, cache._dedups = s.evictions, s.dedups
        cache._restore_structure(snapshot)
        cache._seed_info_cache(snapshot)
        if not verify:
            # The caller vouches the snapshot is this library's own (kvviz's keyframes), so it
            # is the restored state row for row: the next snapshot starts from its rows and
            # costs what the ops since changed, not a walk of the whole trie.
            cache._keep_rows(snapshot)
        if verify:
            why = first_difference(snapshot, cache.snapshot())
            if why is not None:
                raise InvalidOperation(f"cannot restore the snapshot: {why}")
        return cache

    # -- hooks a design supplies ----------------------------------------------------------

    @classmethod
    def _for_restore(cls, snapshot: Snapshot, **options) -> "CacheCore":  # pragma: no cover - each design's
        """An empty cache configured like ``snapshot``, its pages as the snapshot's free list says."""
        raise NotImplementedError

    def _restore_structure(self, snapshot: Snapshot) -> None:  # pragma: no cover - each design's
        """Rebuild the design's structures and the allocations from ``snapshot``."""
        raise NotImplementedError

    def _seed_info_cache(self, snapshot: Snapshot) -> None:
        """Reuse the snapshot's rows for the restored cache's snapshots (a design that keeps rows)."""

    def _keep_rows(self, snapshot: Snapshot) -> None:
        """Take ``snapshot`` (equal to the restored state) as the last snapshot made, for a
        design that makes each snapshot from the one before (no-op otherwise)."""

    def _live_snapshot(self) -> Snapshot:
        """The snapshot read from the live structures, for :meth:`check_invariants`."""
        return self.snapshot()

    def _evictable_count(self) -> int:
        return 0

    def _check_live_structures(self) -> list:
        return []

    # -- shared machinery ---------------------------------------------------------------

    def _extend(self, allocation: PageAllocation, tokens: Iterable[int], extra_token_slots: int) -> None:
        self._check_live(allocation, "extend")
        self._check_extra(extra_token_slots, "extend")
        tokens = int_tokens(tokens, f"extend {allocation.label}")
        old = allocation._tokens
        if len(tokens) < len(old) or tokens[: len(old)] != old:
            raise InvalidOperation(
                f"extend {allocation.label}: the new tokens must start with the allocation's "
                f"{len(old)} tokens {_describe_tokens(old)}, got {len(tokens)} tokens {_describe_tokens(tokens)}")
        needed = pages_for(len(tokens) + extra_token_slots, self.tokens_per_page) - len(allocation._pages)
        free = self._pool.available_page_count()
        if needed > free:
            evictable = self._evictable_count()
            if needed > free + evictable:
                if self._watched:
                    self._events.append(ev.Failed("extend", allocation.id, needed, free, evictable, 0))
                raise self._failure(
                    f"cannot extend {allocation.label} to {len(tokens)} tokens + {extra_token_slots} extra slots",
                    needed, free, evictable)
        events = self._events
        if events is not None:  # before the tick: at each event the state is as it says
            events.append(ev.OpStarted("extend", allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock += 1
        allocation._tokens = tokens
        if self._watched:
            events.append(ev.Ticked("extend", allocation.id, self.clock))
        if needed > 0:
            self._grow(allocation, needed)

    def _tick(self, op: str, allocation: PageAllocation) -> list | None:
        """Start ``op`` (it cannot fail any more) and advance the clock: its OpStarted before
        the tick, a watched cache's Ticked after it. The event list (None when not recording).
        The hash cache's publish and release and the trie's release call it; the base cache's
        inline it."""
        events = self._events
        if events is not None:
            events.append(ev.OpStarted(op, allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock += 1
        if self._watched:
            events.append(ev.Ticked(op, allocation.id, self.clock))
        return events

    def _publish_tokens(self, allocation: PageAllocation, tokens: Iterable[int] | None,
                        publish_incomplete_page: bool) -> tuple[int, ...]:
        """Validate a publish; on success store longer tokens and return the tokens to publish."""
        self._check_live(allocation, "publish")
        if publish_incomplete_page:
            raise InvalidOperation(
                f"publish {allocation.label}: publish_incomplete_page=True is not supported; "
                "only full pages are shared (a partial page would be matched as if complete)")
        own = allocation._tokens
        if tokens is None:
            return own
        tokens = int_tokens(tokens, f"publish {allocation.label}")
        common = min(len(tokens), len(own))
        if tokens[:common] != own[:common]:
            first = next(i for i in range(common) if tokens[i] != own[i])
            raise InvalidOperation(
                f"publish {allocation.label}: tokens disagree with the allocation's at position {first} "
                f"(allocation has {own[first]}, publish has {tokens[first]})")
        if len(tokens) > len(own):
            capacity = len(allocation._pages) * self.tokens_per_page
            if len(tokens) > capacity:
                raise InvalidOperation(
                    f"publish {allocation.label}: {len(tokens)} tokens do not fit in its "
                    f"{len(allocation._pages)} pages ({capacity} slots); extend it first")
            allocation._tokens = tokens
        return tokens

    def _retire(self, allocation: PageAllocation) -> None:
        allocation.released = True
        allocation._pages = []
        allocation._nodes = []
        del self.allocations[allocation.id]

    def _check_live(self, allocation: PageAllocation, op: str) -> None:
        if allocation.released:
            raise InvalidOperation(f"{op} {allocation.label}: the allocation was released; it holds nothing")
        if self.allocations.get(allocation.id) is not allocation:
            raise InvalidOperation(f"{op} {allocation.label}: the allocation does not belong to this cache")

    @staticmethod
    def _check_extra(extra_token_slots: int, op: str) -> None:
        if not isinstance(extra_token_slots, int) or isinstance(extra_token_slots, bool) or extra_token_slots < 0:
            raise InvalidOperation(f"{op}: extra_token_slots must be a non-negative integer, got {extra_token_slots!r}")

    def _failure(self, what: str, needed: int, free: int, evictable: int,
                 matched: int = 0) -> CacheAllocationFailure:
        """The error for a request that does not fit; ``matched`` counts unreferenced pages
        the request itself matched (protected for it, so not evictable for it)."""
        held = self._pool.total_page_count() - free - evictable
        note = (f" ({matched} of them only because this request matched them: it cannot evict its own prefix)"
                if matched else "")
        return CacheAllocationFailure(
            f"{what}: need {needed} page{'s' if needed != 1 else ''}: {free} free, {evictable} evictable, "
            f"{held} held by live allocations{note}",
            needed=needed, free=free, evictable=evictable, held=held)


class BasePagedAttentionCache(CacheCore):
    """Each allocation gets its own pages; nothing is shared or cached after release.

    acquire takes ``ceil((len(tokens) + extra_token_slots) / tokens_per_page)`` pages from
    the pool, publish validates its arguments and does nothing else, release frees every
    page. Every successful operation advances the logical ``clock`` by one.
    """

    kind = "base"

    def __init__(self, page_pool: PagePool, tokens_per_page: int):
        super().__init__(claimed(page_pool, tokens_per_page), tokens_per_page)

    def acquire_pages_for_tokens(self, tokens: Iterable[int], extra_token_slots: int = 0, *,
                                 name: str | None = None, priority: int = 0) -> PageAllocation:
        """Allocate pages for ``tokens`` plus ``extra_token_slots`` (no sharing). ``priority``
        is kept on the allocation only (the base cache never evicts)."""
        tokens = acquire_args(tokens, extra_token_slots, name, priority)
        needed = pages_for(len(tokens) + extra_token_slots, self.tokens_per_page)
        free = self._pool.available_page_count()
        if needed > free:
            if self._watched:
                self._events.append(ev.Failed("acquire", None, needed, free, 0, 0))
            raise self._failure(f"cannot acquire {len(tokens)} tokens + {extra_token_slots} extra slots",
                                needed, free, 0)
        events = self._events
        if events is not None:  # before the tick: at each event the state is as it says
            events.append(ev.OpStarted("acquire", self._next_allocation_id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(self._next_allocation_id)
        self.clock += 1
        allocation = PageAllocation(self, self._next_allocation_id, name, tokens, [], [], 0, priority)
        self._next_allocation_id += 1
        self._lookups += 1
        self._lookup_tokens += len(tokens)
        if self._watched:
            events.append(ev.Ticked("acquire", allocation.id, self.clock))
        self.allocations[allocation.id] = allocation  # between the events: each says the state it shows
        if events is not None:
            events.append(ev.Matched(allocation.id, (), (), 0, len(tokens), "the base cache shares nothing"))
        self._grow(allocation, needed)
        return allocation

    def snapshot(self) -> Snapshot:
        """The whole state as a frozen :class:`Snapshot`.

        Consecutive snapshots share their unchanged rows (the very objects), so diffs and
        checks can skip them by identity, and :attr:`Snapshot._changes` lists the rows that
        are new. While the cache records events (``record_events``, ``watch``: kvviz's
        sessions) every operation also notes what it changed, and the next snapshot costs
        what changed plus a few copies of row arrays in C; otherwise it is rebuilt from the
        live structures, O(pages used + nodes + allocation pages), reusing unchanged rows.
        Pages the pool never handed out cost nothing: a pool above ``_EXPLICIT_PAGES``
        pages gets a :class:`PageTable` and a :class:`FreePages` that make their rows when
        read; smaller ones get plain tuples (faster to index).
        """
        if self._watched:
            # Mid-op (a watch callback): the kept rows know only finished ops, and an op's
            # first events come before its tick, so the clock cannot tell them stale. Read
            # the live structures (rows still shared); the next snapshot starts afresh.
            self._rows = None
            return self._snapshot_from_live()
        rows = self._rows
        if rows is not None and rows.clock + rows.ops == self.clock:
            return rows.advance(self)  # every op since the last snapshot noted its changes
        snap = self._snapshot_from_live()
        self._rows = _Rows(self, snap)
        return snap

    def _snapshot_from_live(self) -> Snapshot:
        """:meth:`snapshot` from the live structures, O(pages used + nodes + allocation pages)."""
        page_count = self._pool.total_page_count()
        free = self._pool.free_pages()
        used = free.untouched_from  # pages 0 .. used-1 have been handed out at some time
        infos = self._info_cache
        if infos is None:
            infos = self._info_cache = {"node": {}, "owned": {}}
        if used:
            free_row(used - 1)  # make sure the shared free rows cover the pages used
        pages: list[PageInfo | None] = [None] * used
        while True:
            try:
                nodes, allocations = self._fill_rows(pages, free.returned, infos)
                break
            except IndexError:  # a broken cache names a page it never took; check_invariants reports it
                pages += [None] * len(pages) + [None] * 8
        for i, p in enumerate(pages):
            if p is None:  # only a broken cache gets here; check_invariants reports it
                pages[i] = free_row(i) if i >= used else PageInfo(i, "lost")
        if page_count <= _EXPLICIT_PAGES:
            if page_count:
                free_row(page_count - 1)
            table = tuple(pages) + tuple(_FREE_ROWS[len(pages):page_count])
            free = tuple(range(free.untouched_from, page_count)) + free.returned
        else:
            table = PageTable(tuple(pages), page_count)
        return Snapshot(
            kind=self.kind, tokens_per_page=self.tokens_per_page, page_count=page_count, clock=self.clock,
            next_seq=self._next_seq_value(), next_allocation_id=self._next_allocation_id,
            pages=table, free=free, nodes=tuple(n for n, _ in nodes), allocations=tuple(allocations),
            heap=self._heap_ids(),
            stats=Stats(self._lookups, self._lookup_tokens, self._hit_tokens, self._evictions, self._dedups),
            policy=self.policy,
        )

    def _fill_rows(self, pages: list, returned: tuple[int, ...], infos: dict) -> tuple[list, list]:
        """Put the row of every page used into ``pages``; the node rows and allocation rows."""
        free_infos = _FREE_ROWS
        for p in returned:
            pages[p] = free_infos[p]
        nodes = self._node_infos(infos["node"])
        for n, page_info in nodes:
            if page_info is not None:
                pages[n.page] = page_info
        owned_cache = infos["owned"]
        allocations = []
        for a in sorted(self.allocations.values(), key=lambda a: a.id):
            for p in a._pages[len(a._nodes):]:
                info = owned_cache.get((p, a.id))
                if info is None:
                    info = owned_cache[(p, a.id)] = PageInfo(p, OWNED, a.id)
                pages[p] = info
            allocations.append(AllocationInfo(a.id, a.name, a._tokens, tuple(a._pages), len(a._nodes),
                                              a.hit_tokens, a.released, a.priority))
        if len(owned_cache) > 4 * len(pages):  # forget owners long gone
            owned_cache.clear()
        return nodes, allocations

    @classmethod
    def _for_restore(cls, snapshot: Snapshot) -> "BasePagedAttentionCache":
        """An empty cache configured like ``snapshot`` (the trie adds its policy)."""
        return cls(PagePool.restored(snapshot.page_count, snapshot.free), snapshot.tokens_per_page)

    def _live_snapshot(self) -> Snapshot:
        return self._snapshot_from_live()

    def _seed_info_cache(self, snapshot: Snapshot) -> None:
        """Reuse the snapshot's rows for the restored cache's own snapshots (cheap, shared)."""
        # Only rows equal to what snapshot() would build are reused: a wrong row (a cached
        # page with the wrong ref, say) must show up as a difference, not be carried over.
        pages = snapshot.pages
        # A PageTable's stored rows as a tuple: indexing it skips the lazy sequence's checks
        # (10,000 cached pages: 25 ms of a restore); pages beyond them are free, never cached.
        rows = pages.rows if isinstance(pages, PageTable) else pages
        held = len(rows)
        nodes = {}
        for n in snapshot.nodes:
            page_info = None
            page = n.page
            if page is not None:
                if not 0 <= page < held:
                    continue
                page_info = rows[page]
                if not (page_info.node == n.id and page_info.state == CACHED and page_info.ref == n.ref
                        and page_info.page == page and page_info.owner is None and type(page_info) is PageInfo):
                    continue  # what snapshot() would build is PageInfo(page, CACHED, None, n.id, n.ref)
            nodes[n.id] = ((n.ref, n.last_access, page, n.hits, n.priority), n, page_info)
        owned = {(info.page, info.owner): info for info in touched_rows(pages)
                 if info.state == OWNED and info.node is None and info.ref == 0}
        self._info_cache = {"node": nodes, "owned": owned}

    def _keep_rows(self, snapshot: Snapshot) -> None:
        self._rows = _Rows(self, snapshot)

    # -- hooks the trie cache overrides, and the operations on a PagePool ------------------

    def _node_infos(self, cache: dict) -> list[tuple[NodeInfo, PageInfo | None]]:
        return []

    def _heap_ids(self) -> tuple[int, ...]:
        return ()

    def _next_seq_value(self) -> int:
        return 1

    def _evict(self, count: int, allocation_id: int) -> list[int]:  # pragma: no cover - base never evicts
        raise AssertionError("the base cache has nothing to evict")

    def _restore_structure(self, snapshot: Snapshot) -> None:
        for a in snapshot.allocations:
            allocation = PageAllocation(self, a.id, a.name, a.tokens, list(a.pages), [], a.hit_tokens, a.priority)
            self.allocations[a.id] = allocation

    def _publish(self, allocation: PageAllocation, tokens: Iterable[int] | None,
                 publish_incomplete_page: bool) -> None:
        self._publish_tokens(allocation, tokens, publish_incomplete_page)
        events = self._events  # _tick inlined: the base cache's ops are a few bytecodes each
        if events is not None:
            events.append(ev.OpStarted("publish", allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock += 1
        if self._watched:
            events.append(ev.Ticked("publish", allocation.id, self.clock))

    def _release(self, allocation: PageAllocation) -> None:
        self._check_live(allocation, "release")
        events = self._events  # _tick inlined, as in _publish
        if events is not None:
            events.append(ev.OpStarted("release", allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock += 1
        if self._watched:
            events.append(ev.Ticked("release", allocation.id, self.clock))
        pages = allocation._pages
        self._pool.give(pages)
        allocation._pages = []  # before the event: at each event the state is as it says
        if events is not None and pages:
            events.append(ev.PagesFreed(allocation.id, tuple(pages), "release"))
        self._retire(allocation)
        if events is not None:
            events.append(ev.Released(allocation.id))

    def _grow(self, allocation: PageAllocation, needed: int) -> None:
        """Append ``needed`` pages: free ones first, then evicted ones. Availability was checked."""
        pool = self._pool
        take = min(needed, pool.available_page_count())
        taken = pool.take(take)
        allocation._pages.extend(taken)
        if taken and self._events is not None:
            self._events.append(ev.PagesTaken(allocation.id, tuple(taken)))
        if needed > take:
            allocation._pages += self._evict(needed - take, allocation.id)  # [] from a loop that appends itself


class _Rows:
    """The rows of a cache's last snapshot, kept to make the next one from what changed.

    While the cache records events, each operation notes (in the branches that record its
    events, so the unrecorded hot path runs not one more bytecode) the allocation it works
    on (:meth:`op`, which also counts it) and the trie nodes whose rows it changes
    (``nodes``: seq -> live node, or None once evicted). A page's row changes only when the
    node or the allocation holding it does (taken, published, freed, evicted: each moves a
    page between a noted allocation's tail, a noted node and the free list), so the pages
    to re-read are those of the noted nodes and allocations, before and after.

    :meth:`BasePagedAttentionCache.snapshot` uses the kept rows only when the count of noted
    operations equals the ticks since the last snapshot (every successful op ticks once, a
    failed one changes nothing): any op run unrecorded sends it back to the live structures.
    The state machines in tests/core compare every snapshot with the reference model.
    """

    __slots__ = ("clock", "ops", "nodes", "node_pages", "pages", "allocations", "page_node", "page_owner", "owned",
                 "dirty_nodes", "dirty_allocations", "last", "untouched_rows", "page_numbers")

    def __init__(self, cache: BasePagedAttentionCache, snap: Snapshot):
        self.clock = snap.clock
        self.ops = 0
        used = cache._pool.free_pages().untouched_from
        table = snap.pages
        self.pages: list[PageInfo] = list(table.rows if isinstance(table, PageTable) else table[:used])
        self.nodes: dict[int, NodeInfo] = {n.id: n for n in snap.nodes}  # in id order, as snapshots list them
        # Rows read from the list just made, not through a PageTable's lazy indexing (a
        # restore keeps the rows of 10,000 nodes: 20 ms saved); every page a row names was used.
        pages = self.pages
        self.node_pages: dict[int, PageInfo] = {n.id: pages[n.page] for n in snap.nodes if n.page is not None}
        self.page_node: dict[int, int] = {n.page: n.id for n in snap.nodes if n.page is not None}
        self.allocations: dict[int, AllocationInfo] = {a.id: a for a in snap.allocations}
        self.page_owner: dict[int, int] = {p: a.id for a in snap.allocations for p in a.pages[a.published:]}
        self.owned: dict[tuple[int, int], PageInfo] = {(p, owner): pages[p] for p, owner in self.page_owner.items()}
        self.dirty_nodes: dict = {}
        self.dirty_allocations: set[int] = set()
        self.last = weakref.ref(snap)
        self.untouched_rows: tuple[tuple[int, int], tuple[PageInfo, ...], tuple[int, ...]] | None = None
        self.page_numbers: tuple[int, ...] | None = None

    def op(self, allocation_id: int) -> None:
        """An operation on ``allocation_id`` is starting (it cannot fail any more)."""
        self.ops += 1
        self.dirty_allocations.add(allocation_id)

    def touch(self, nodes) -> None:
        """These live nodes' rows may have changed."""
        dirty = self.dirty_nodes
        for n in nodes:
            dirty[n.seq] = n

    def gone(self, node) -> None:
        """This node left the trie (evicted)."""
        self.dirty_nodes[node.seq] = None

    def advance(self, cache: BasePagedAttentionCache) -> Snapshot:
        """The cache's snapshot now, from the kept rows and what the ops since noted."""
        pool = cache._pool
        page_count = pool.total_page_count()
        free = pool.free_pages()
        pages = self.pages
        used = free.untouched_from
        if used > len(pages):
            free_row(used - 1)
            pages.extend(_FREE_ROWS[len(pages):used])
        stale: set[int] = set()  # pages whose row may have changed
        node_rows, node_pages, page_node = self.nodes, self.node_pages, self.page_node
        changed_nodes = []
        dirty = self.dirty_nodes
        for seq in sorted(dirty):  # new nodes have the largest ids: appended in id order
            n = dirty[seq]
            old = node_rows.get(seq)
            if n is None:
                if old is not None:
                    del node_rows[seq]
                    changed_nodes.append(seq)
                    if old.page is not None:
                        del node_pages[seq]
                        if page_node.get(old.page) == seq:
                            del page_node[old.page]
                        stale.add(old.page)
                continue
            if old is not None and (old.ref, old.last_access, old.hits, old.priority) == (
                    n.ref, n.last_access, n.hits, n.priority):
                continue
            node_rows[seq] = NodeInfo(seq, n.parent.seq if n.parent is not None else None, n.tokens, n.page, n.ref,
                                      n.last_access, seq, n.hits, n.priority)
            changed_nodes.append(seq)
            if n.page is not None and (old is None or old.ref != n.ref):
                node_pages[seq] = PageInfo(n.page, CACHED, None, seq, n.ref)
                page_node[n.page] = seq
                stale.add(n.page)
        dirty.clear()
        allocation_rows, page_owner, owned = self.allocations, self.page_owner, self.owned
        live = cache.allocations
        changed_allocations = []
        for allocation_id in sorted(self.dirty_allocations):  # new ids are the largest, as for nodes
            old = allocation_rows.get(allocation_id)
            if old is not None:
                for p in old.pages[old.published:]:
                    if page_owner.get(p) == allocation_id:
                        del page_owner[p]
                    stale.add(p)
            a = live.get(allocation_id)
            if a is None:
                if old is not None:
                    del allocation_rows[allocation_id]
                    changed_allocations.append(allocation_id)
                continue
            info = AllocationInfo(a.id, a.name, a._tokens, tuple(a._pages), len(a._nodes), a.hit_tokens, a.released,
                                  a.priority)
            if info != old:
                allocation_rows[allocation_id] = info
                changed_allocations.append(allocation_id)
            for p in info.pages[info.published:]:
                page_owner[p] = allocation_id
                stale.add(p)
        self.dirty_allocations.clear()
        changed_pages = []
        for p in sorted(stale):
            seq = page_node.get(p)
            if seq is not None:
                row = node_pages[seq]
            else:
                owner = page_owner.get(p)
                if owner is not None:
                    row = owned.get((p, owner))
                    if row is None:
                        row = owned[(p, owner)] = PageInfo(p, OWNED, owner)
                else:
                    row = free_row(p)
            if p >= len(pages):  # only a broken cache names a page it never took
                pages.extend(free_row(q) for q in range(len(pages), p + 1))
            old = pages[p]
            if row is not old and row != old:
                pages[p] = row
                changed_pages.append(p)
        if len(owned) > 4 * len(pages) + 64:  # forget owners long gone
            owned.clear()
        if page_count <= _EXPLICIT_PAGES:
            untouched = self.untouched_rows
            if untouched is None or untouched[0] != (len(pages), free.untouched_from):
                if page_count:
                    free_row(page_count - 1)
                # The rows and the free run of the pages never handed out, kept until the
                # pool hands one out: a step then copies them (C) but builds none of them.
                numbers = self.page_numbers
                if numbers is None:  # every page's int, made once: slices of it make no int
                    numbers = self.page_numbers = tuple(range(page_count))
                untouched = self.untouched_rows = ((len(pages), free.untouched_from),
                                                   tuple(_FREE_ROWS[len(pages):page_count]),
                                                   numbers[free.untouched_from:])
            table = tuple(pages) + untouched[1]
            free = untouched[2] + free.returned
        else:
            table = PageTable(tuple(pages), page_count)
        snap = Snapshot(
            kind=cache.kind, tokens_per_page=cache.tokens_per_page, page_count=page_count, clock=cache.clock,
            next_seq=cache._next_seq_value(), next_allocation_id=cache._next_allocation_id,
            pages=table, free=free, nodes=tuple(node_rows.values()), allocations=tuple(allocation_rows.values()),
            heap=cache._heap_ids(),
            stats=Stats(cache._lookups, cache._lookup_tokens, cache._hit_tokens, cache._evictions, cache._dedups),
            policy=cache.policy,
        )
        object.__setattr__(snap, "_changes", SnapshotChanges(self.last, tuple(changed_nodes), tuple(changed_pages),
                                                             tuple(changed_allocations)))
        self.last = weakref.ref(snap)
        self.clock = cache.clock
        self.ops = 0
        return snap
