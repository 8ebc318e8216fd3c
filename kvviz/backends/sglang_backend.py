# SPDX-License-Identifier: Apache-2.0
"""The SGLang backend: scenario ops on the real ``RadixCache`` of SGLang 0.5.23, on the CPU.

Needs the engine venv (``bash scripts/install-engines.sh VENV``). The cache is built as
SGLang's own tests build it, ``RadixCache.create_simulated(mock_allocator=..., page_size=...)``;
the allocator is :class:`PagePool` here: kvviz's pages, each ``page_size`` token slots, handed
out first-in first-out (SGLang's tree calls only its ``free_segment``). Our four ops map onto
the scheduler's calls:

=========  ==================================================================================
acquire    ``match_prefix(tokens)``, ``inc_lock_ref(last node)``; when the free pages are
           short, ``evict(missing tokens)``; then the pages for the rest (+ extra slots). A
           request that cannot fit (free + evictable too few) is refused after the lookup:
           ``dec_lock_ref`` undoes the lock, not the lookup's LRU refresh or split (SG3)
publish    ``insert(full pages, their slots)``; the pages the tree already held are freed
           and the tree's taken instead (SGLang's ``cache_unfinished_req``), and the lock
           moves to the inserted node
extend     ``evict`` when short, then more pages for the allocation
release    ``dec_lock_ref(node)``, and the unpublished pages go back to the pool
=========  ==================================================================================

**Snapshot.** A radix node of k pages is shown as a chain of k kvcore nodes, one per page
(the page's tokens, its ``lock_ref`` as ``ref``, the radix node's ``last_access_time``),
so the trie views, ``check`` and ``diff`` read it as kvcore's trie. Node ids are stable per
page while it stays in the tree. ``heap`` is SGLang's ``evictable_leaves`` (the last page of
each), oldest first. That full read (:meth:`SglangBackend._read_full`) walks the whole tree;
after an op the backend reads only the radix nodes the op's calls touched
(:mod:`.sglang_reader`, which instruments this ``RadixCache``), equal to the full read byte for
byte (``tests/engines/test_incremental_reads.py``) and costing what the op changed.
``full_reads=True`` reads in full after every op (the contract, and the benchmark's "before").

**Deterministic clock.** SGLang stamps nodes with ``time.monotonic()``; during each op the
radix module's ``time`` is a logical clock returning 1, 2, 3, ... (as the shortfin backend does).

**Findings** (:data:`KNOWN_ISSUES`): whole-leaf eviction (SG1, by design), the split that
refreshes the unmatched tail's access time (SG2, a defect), a refused request's lookup
refreshing LRU times (SG3, by design).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kvcore import CacheAllocationFailure, InvalidOperation, KVCacheError, Snapshot, Stats
from kvcore import check_snapshot
from kvcore.base import pages_for
from kvcore.incremental import IncrementalChecker
from kvcore.snapshot import CACHED, OWNED, AllocationInfo, NodeInfo, PageInfo, free_row

from kvviz.backends import TRIE, ConfigLike, OpLike
from kvviz.backends.foreign import Finding, KnownIssue, LogicalClock, logical_time
from kvviz.backends.foreign_backend import (OP_EVENTS, EngineCalls, acquisition, check_config, extension, op_events,
                                            publish_tokens)
from kvviz.backends.sglang_code import SGLANG_CODE
from kvviz.backends.sglang_reader import ChangedRows, Touched, instrument, pages_of

try:
    import torch as _torch
    from sglang.srt.mem_cache import radix_cache as _radix_module
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams as _EvictParams
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams as _InsertParams
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams as _MatchPrefixParams
except ImportError as exc:  # pragma: no cover - exercised only without the engine venv
    raise ImportError(f"the sglang backend needs SGLang 0.5.23 ({exc})", name=exc.name) from exc

SGLANG_VERSION = "0.5.23"

OBSERVED_EVENTS = OP_EVENTS
"""What the backend reports: SGLang emits no per-move events, so only what two states show."""


KNOWN_ISSUES: dict[str, KnownIssue] = {k.code: k for k in (
    KnownIssue("SG1", "design", "evict(num_tokens) pops whole radix leaves until at least that many tokens went, "
               "so a multi-page leaf goes at once where kvcore evicts page by page",
               "radix_cache.py RadixCache.evict: docs/bugs.md#sg1"),
    KnownIssue("SG2", "defect", "_match_prefix_helper and _insert_helper set child.last_access_time before "
               "_split_node cuts the child, so the unmatched tail inherits a fresh time and LRU evicts a more "
               "recently used leaf instead (an upstream fix was proposed and closed unmerged)",
               "radix_cache.py _match_prefix_helper / _insert_helper; found by kvviz diff: docs/bugs.md#sg2"),
    KnownIssue("SG3", "design", "the lookup of a request that is then refused has already refreshed LRU times "
               "(and may have split a node): a failed op changes the cache",
               "match_prefix runs before admission: docs/bugs.md#sg3"),
)}


class SglangError(KVCacheError):
    """SGLang raised something (an assertion, a crash of the real cache)."""


class PagePool:
    """The token-slot allocator SGLang's tree frees into: page p is slots p*size .. p*size+size-1.

    Pages are handed out first-in first-out; ``free_segment`` (the one method the tree calls)
    returns the pages of the slots it is given. ``moved`` collects the pages taken or given
    back since a read last cleared it."""

    device = "cpu"

    def __init__(self, pages: int, page_size: int):
        self.page_size = page_size
        self.free: list[int] = list(range(pages))
        self.moved: set[int] = set()

    def take(self, count: int) -> list[int]:
        """``count`` pages from the head of the free list."""
        taken, self.free = self.free[:count], self.free[count:]
        self.moved.update(taken)
        return taken

    def give_back(self, pages) -> None:
        """Return ``pages`` to the tail of the free list."""
        pages = list(pages)
        self.free.extend(pages)
        self.moved.update(pages)

    def slots(self, pages) -> object:
        """The token slots of ``pages``, as SGLang's tree stores them (an int64 tensor)."""
        size = self.page_size
        return _torch.tensor([p * size + i for p in pages for i in range(size)], dtype=_torch.int64)

    def free_segment(self, value, start_pos: int = 0) -> None:
        """SGLang's call: free the pages of ``value``'s slots."""
        self.give_back(pages_of(value, self.page_size))


@dataclass
class _Handle:
    id: int
    name: str
    tokens: tuple[int, ...]
    pages: list[int]
    node: object  # the radix node its lock is on
    published: int  # leading pages the tree holds for it
    hit_tokens: int


class SglangBackend(EngineCalls):
    """Drives one SGLang ``RadixCache``; allocations are addressed by name.

    Implements :class:`kvviz.backends.Backend`; :func:`sglang_backend` is its factory."""

    name = "sglang"
    version = SGLANG_VERSION
    cache_name = "RadixCache"
    can_restore = False
    observes = OBSERVED_EVENTS
    substeps = "calls"
    pseudocode = SGLANG_CODE
    known_issues: Mapping = KNOWN_ISSUES
    engine = "SGLang"
    error = SglangError

    def __init__(self, pages: int, tokens_per_page: int, full_reads: bool = False):
        self.pages = pages
        self.tokens_per_page = tokens_per_page
        self.full_reads = full_reads  # read the whole tree after every op (the contract)
        self.clock = LogicalClock()
        self.pool = PagePool(pages, tokens_per_page)
        with logical_time(_radix_module, self.clock):
            self.cache = _radix_module.RadixCache.create_simulated(mock_allocator=self.pool,
                                                                   page_size=tokens_per_page)
        self._start()
        self._ids: dict[tuple[int, tuple], int] = {}  # (page, its token path) -> node id
        self._next_id = 1
        self._findings: list[Finding] = []
        self._dirty: set[str] = set()  # allocation names the ops since the last read worked on
        self._touched = Touched()
        instrument(self.cache, self._touched)
        self._rows: ChangedRows | None = None
        self._checker = IncrementalChecker()
        self._snapshot = self._read()

    # -- the seam -------------------------------------------------------------------------

    def apply(self, op: OpLike) -> None:
        """Run one op through SGLang's calls; raises a KVCacheError if it fails."""
        kind, name = op.kind, op.name
        run = self._op(op)
        before = self._snapshot
        tick = self.clock.now
        self._dirty.add(name)
        after = None
        try:
            with logical_time(_radix_module, self.clock):
                run()
        except KVCacheError:
            after = self._read()
            if replace(after, clock=tick) == before:
                # Refused, and SGLang stamped nothing a snapshot shows (a lookup that matched no
                # node still stamps the root): the ticks it took are given back, so the failed
                # op changes nothing, and its state is the one before. A lookup that matched
                # nodes keeps them stamped (SG3).
                self.clock.now = tick
                if self._rows is not None:  # count the next read's changes from before, with its rows
                    if after._changes is not None and after._changes.before() is before:
                        self._rows.since(before)  # (the rows kept are before's own)
                    else:  # (read in full, while watched: equal rows, new objects)
                        self._rows = ChangedRows(self, before, self._rows.radix, self._rows.leaves)
                after = before
            raise
        finally:
            if after is None:
                after = self._read()
            self._snapshot = after
            self._events.extend(op_events(kind, name, before, after))

    def take_findings(self) -> tuple[Finding, ...]:
        """Known issues seen since the last call (see :data:`KNOWN_ISSUES`)."""
        findings, self._findings = tuple(self._findings), []
        return findings

    def snapshot(self) -> Snapshot:
        """SGLang's tree in kvcore's trie snapshot format; read afresh while watched."""
        return self._read() if self._watch is not None else self._snapshot

    def check(self, snapshot: Snapshot) -> list:
        """kvcore's invariant checker, ``check_snapshot``'s verdict: SGLang's ``lock_ref``
        counts every request on each node of its path, as kvcore's trie counts references.
        Consecutive snapshots are checked at the cost of what changed
        (:class:`kvcore.incremental.IncrementalChecker`, told by the snapshot's ``_changes``);
        the first, and any it cannot relate, in full."""
        return self._checker.check(snapshot)

    def check_full(self, snapshot: Snapshot) -> list:
        """kvcore's invariant checker on the whole of ``snapshot`` (``kvviz check --full``)."""
        return check_snapshot(snapshot)

    # -- ops --------------------------------------------------------------------------------

    def _acquire(self, op: OpLike) -> None:
        name, tpp = op.name, self.tokens_per_page
        tokens = acquisition(op, self._handles)
        if op.priority:
            raise InvalidOperation(f"acquire {name} priority={op.priority}: kvviz drives SGLang's radix cache by "
                                   f"LRU only; run priorities on kvcore or drop priority=")
        tick = self.clock.now
        self._touched.splits.clear()
        match = self._call(f"acquire {name}", self.cache.match_prefix,
                           _MatchPrefixParams(key=_radix_key(tokens)))
        hit, node = match.device_prefix_len, match.last_device_node
        self._note_split(f"acquire {name}", tick)
        hit_pages = self._path_pages(node)
        needed = pages_for(len(tokens) + op.extra, tpp) - len(hit_pages)
        self._call(f"acquire {name}", self.cache.inc_lock_ref, node)
        if not self._make_room(f"acquire {name}", needed):
            self._call(f"acquire {name}", self.cache.dec_lock_ref, node)
            if hit:
                self._find("SG3", f"acquire {name}: refused, but its lookup refreshed the access time of "
                                  f"{hit // tpp} matched page(s)")
            raise CacheAllocationFailure(
                f"cannot acquire {name}: {len(tokens)} tokens + {op.extra} extra slots need {needed} new page(s); "
                f"{len(self.pool.free)} free and {self.cache.evictable_size() // tpp} evictable",
                needed=needed, free=len(self.pool.free), evictable=self.cache.evictable_size() // tpp)
        self._stats["lookups"] += 1
        self._stats["lookup_tokens"] += len(tokens)
        self._stats["hit_tokens"] += hit
        pages = hit_pages + self.pool.take(needed)
        self._handles[name] = _Handle(self._next_allocation_id, name, tokens, pages, node, len(hit_pages), hit)
        self._next_allocation_id += 1

    def _publish(self, op: OpLike) -> None:
        name, tpp = op.name, self.tokens_per_page
        handle = self.handle(name)
        own = handle.tokens
        tokens = own
        if op.tokens is not None:
            tokens = publish_tokens(name, own, op.tokens, len(handle.pages), tpp)
            if len(tokens) > len(own):
                handle.tokens = tokens
        full = len(tokens) // tpp
        if full <= handle.published:
            return  # nothing new to insert: SGLang would not call the tree
        tick = self.clock.now
        self._touched.splits.clear()
        result = self._call(f"publish {name}", self.cache.insert, _InsertParams(
            key=_radix_key(tokens[:full * tpp]), value=self.pool.slots(handle.pages[:full])))
        self._note_split(f"publish {name}", tick)
        prefix_pages = result.prefix_len // tpp
        duplicates = handle.pages[handle.published:prefix_pages]
        if duplicates:  # the tree already held these blocks: keep its pages, free ours
            self.pool.give_back(duplicates)
            self._stats["dedups"] += len(duplicates)
        new_node = result.last_device_node
        self._call(f"publish {name}", self.cache.inc_lock_ref, new_node)
        self._call(f"publish {name}", self.cache.dec_lock_ref, handle.node)
        handle.pages[:full] = self._path_pages(new_node)
        handle.node, handle.published = new_node, full

    def _extend(self, op: OpLike) -> None:
        name = op.name
        handle = self.handle(name)
        own = handle.tokens
        new_tokens = extension(own, op)
        needed = pages_for(len(new_tokens) + op.extra, self.tokens_per_page) - len(handle.pages)
        if needed > 0:
            if not self._make_room(f"extend {name}", needed):
                raise CacheAllocationFailure(
                    f"cannot extend {name} to {len(new_tokens)} tokens + {op.extra} extra slots: {needed} new "
                    f"page(s) needed, {len(self.pool.free)} free", needed=needed, free=len(self.pool.free),
                    evictable=self.cache.evictable_size() // self.tokens_per_page)
            handle.pages += self.pool.take(needed)
        handle.tokens = new_tokens

    def _release(self, name: str) -> None:
        handle = self.handle(name)
        self._call(f"release {name}", self.cache.dec_lock_ref, handle.node)
        self.pool.give_back(handle.pages[handle.published:])
        del self._handles[name]

    # -- internals --------------------------------------------------------------------------

    def _make_room(self, what: str, needed: int) -> bool:
        """Evict when the free pages are short; False (nothing evicted) when even evicting
        every evictable page would not do (SGLang's scheduler checks free + evictable first)."""
        tpp, free = self.tokens_per_page, len(self.pool.free)
        if needed <= free:
            return True
        if needed > free + self.cache.evictable_size() // tpp:
            return False
        asked = (needed - free) * tpp
        result = self._call(what, self.cache.evict, _EvictParams(num_tokens=asked))
        evicted = result.num_tokens_evicted
        self._stats["evictions"] += evicted // tpp
        if evicted > asked:
            self._find("SG1", f"{what}: evict({asked} tokens) evicted {evicted}: whole radix leaves")
        return needed <= len(self.pool.free)

    def _note_split(self, what: str, tick: int) -> None:
        """SG2: a node the call just made cut (``_split_node``, instrumented), whose tail (the
        part the op did not use) took a new access time: one after ``tick``, the clock before
        the call (every earlier stamp is at most ``tick``)."""
        for node in self._touched.splits:
            if node.last_access_time > tick:
                self._find("SG2", f"{what}: split a radix node; its unused tail of "
                                  f"{len(node.key) // self.tokens_per_page} page(s) took this op's access time")
        self._touched.splits.clear()

    def _path_pages(self, node) -> list[int]:
        if node is self.cache.root_node:
            return []
        return pages_of(self.cache.path_device_indices(node), self.tokens_per_page)

    def _find(self, code: str, message: str) -> None:
        self._findings.append(Finding(code, message, KNOWN_ISSUES))

    def _read(self) -> Snapshot:
        """SGLang's state now: from what the ops since the last read touched, or in full (while
        watched, with ``full_reads``, or when the touched calls cannot say)."""
        rows = self._rows
        if rows is not None and self._watch is None and not self.full_reads:
            dirty, self._dirty = self._dirty, set()
            snap = rows.advance(self, dirty)
            if snap is not None:
                return snap
        return self._read_full()

    def _read_full(self) -> Snapshot:
        """SGLang's tree, pool and requests in kvcore's trie snapshot format (one node per page),
        read whole: O(cached pages). The contract the reads from what changed are held to; the
        next of those starts from it."""
        tpp, root = self.tokens_per_page, self.cache.root_node
        radix: dict = {}  # radix node -> its pages
        evictable: dict = {}  # evictable leaf -> (last access, its last page's id)
        nodes = [NodeInfo(0, None, (), None, 0, 0, 0)]
        rows: dict[int, PageInfo] = {}
        leaves = {leaf for leaf in self.cache.evictable_leaves}
        heap: list[tuple[int, int]] = []
        ids: dict[tuple[int, tuple], int] = {}
        stack = [(root, 0, ())]
        while stack:
            node, parent_id, path = stack.pop()
            for child in sorted(node.children.values(), key=lambda c: tuple(c.key.token_ids[:1])):
                tokens = tuple(int(t) for t in child.key.token_ids[:len(child.key)])
                pages = pages_of(child.value, tpp)
                up, child_path = parent_id, path
                for i, page in enumerate(pages):
                    block = tokens[i * tpp:(i + 1) * tpp]
                    child_path = child_path + block
                    key = (page, child_path)
                    node_id = self._ids.get(key)
                    if node_id is None:
                        node_id = self._next_id
                        self._next_id += 1
                    ids[key] = node_id
                    access = int(child.last_access_time)
                    nodes.append(NodeInfo(node_id, up, block, page, child.lock_ref, access, node_id))
                    rows[page] = PageInfo(page, CACHED, None, node_id, child.lock_ref)
                    up = node_id
                radix[child] = tuple(pages)
                if child in leaves:
                    heap.append((int(child.last_access_time), up))
                    evictable[child] = heap[-1]
                stack.append((child, up, child_path))
        self._ids = ids
        allocations = []
        for h in sorted(self._handles.values(), key=lambda h: h.id):
            for page in h.pages[h.published:]:
                rows[page] = PageInfo(page, OWNED, h.id, None, 0)
            allocations.append(AllocationInfo(h.id, h.name, h.tokens, tuple(h.pages), h.published, h.hit_tokens))
        table = tuple(rows.get(p) or free_row(p) for p in range(self.pages))
        s = self._stats
        snap = Snapshot(kind=TRIE, tokens_per_page=tpp, page_count=self.pages, clock=self.clock.now,
                        next_seq=self._next_id, next_allocation_id=self._next_allocation_id, pages=table,
                        free=tuple(self.pool.free), nodes=tuple(sorted(nodes, key=lambda n: n.id)),
                        allocations=tuple(allocations), heap=tuple(i for _, i in sorted(heap)),
                        stats=Stats(s["lookups"], s["lookup_tokens"], s["hit_tokens"], s["evictions"], s["dedups"]),
                        policy="lru")
        self._touched.clear()
        self.pool.moved.clear()
        self._dirty = set()
        self._rows = None if self.full_reads else ChangedRows(self, snap, radix, evictable)
        return snap


def _radix_key(tokens) -> object:
    return _radix_module.RadixKey(token_ids=array("q", tokens), extra_key=None)


def sglang_backend(config: ConfigLike, snapshot: Snapshot | None) -> SglangBackend:
    """The SGLang backend's factory: a fresh SGLang ``RadixCache`` for ``config`` (``cache trie``, lru)."""
    check_config("sglang", config, snapshot, kind=TRIE,
                 wrong_kind="the sglang backend drives SGLang's radix tree, kvcore's 'trie' design; a {kind!r} "
                            "cache runs on kvcore (use --backend kvcore)",
                 wrong_policy="kvviz drives SGLang's radix cache by LRU; a {policy!r} policy runs on kvcore "
                              "(use --backend kvcore)")
    return SglangBackend(config.pages, config.tokens_per_page)
