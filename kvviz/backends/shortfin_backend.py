# SPDX-License-Identifier: Apache-2.0
"""The shortfin backend: scenario ops on the real ``TriePagedAttentionCache`` of shortfin 3.9.0.

Needs the optional extra (``pip install -e ".[shortfin]"``); runs on the CPU with no
device. The trie only touches its page pool's ``available_pages``, ``acquire_free_pages``
and ``free_pages`` (``shutdown`` also the two count methods), so :class:`CpuPagePool` (a
``PagePool`` built without devices, using shortfin's own accounting methods) serves.

Our four ops map onto shortfin's calls the way its server (``shortfin_apps.llm``'s decoder)
uses them, and shortfin's returned ``TrieCacheInfo`` becomes the allocation's handle:

=========  ==================================================================================
acquire    ``lookup(tokens)``, then ``allocate(unmatched tokens, info)`` (with
           ``allocation_block_size`` = pages for the unmatched tokens + extra slots when
           ``extra`` > 0)
publish    ``publish_pages_for_tokens(info)``; with tokens, on a copy of the info holding
           those tokens (the caller keeps its own tokens when they were a prefix)
extend     ``allocate(new tokens, info, allocation_block_size=pages still needed)``; when the
           allocation's pages already have room, no call: the tokens are appended to the
           info, as the server's page manager does
release    ``release_pages(info)``, then ``free_allocated_pages`` of its unpublished pages
           (the caller's half of the contract: ``release_pages`` only drops the reference)
=========  ==================================================================================

Misuse (unknown names, tokens that do not extend an allocation, ...) is refused before
shortfin is called, with kvcore's messages, so both backends fail alike on bad scripts. The
checks kvcore exposes as functions are kvcore's own, called here or in :mod:`.foreign_backend`
(the checks every foreign backend shares), not copies:
``kvcore.base.int_tokens`` (tokens must be integers), ``kvcore.base.pages_for`` (pages for a
number of slots), ``kvcore.BasePagedAttentionCache._check_extra`` (the extra-slot check and
its message) and ``kvcore.base._describe_tokens`` (how messages quote tokens).

The factory, :func:`shortfin_backend`, refuses configs shortfin cannot run (a base cache, a
policy other than LRU, sizes shortfin's pool or trie would crash on) with
:class:`~kvviz.backends.BackendError`; shortfin cannot restore a snapshot, so sessions replay
it from frame 0 (``can_restore`` is False).

**Deterministic clock.** shortfin stamps nodes with ``time.monotonic()``. For the duration
of each op (and nothing else) the module's ``time`` is replaced by a logical clock that
returns 1, 2, 3, ...: distinct values, so eviction order never falls back to comparing
nodes by ``id()``, and a replay gives the same states. The real module is restored after.

**Findings.** While applying an op the backend recognises the known ways shortfin 3.9.0
departs from kvcore (:data:`KNOWN_ISSUES`: defects of the bug museum, ``docs/bugs.md``, defects found here,
and differences by design) and reports them through :meth:`ShortfinBackend.take_findings`.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from kvcore import BasePagedAttentionCache, CacheAllocationFailure, InvalidOperation, KVCacheError, Snapshot, Stats
from kvcore import events as ev
from kvcore.base import int_tokens, pages_for

from kvviz.extras import install_command
from kvviz.backends import TRIE, ConfigLike, OpLike, already_live, unknown_op
from kvviz.backends.foreign import Finding, KnownIssue, LogicalClock
from kvviz.backends.foreign import logical_time as _logical_time
from kvviz.backends.foreign_backend import EngineCalls, check_config, extension, publish_tokens
from kvviz.backends.shortfin_code import SHORTFIN_CODE
from kvviz.backends.shortfin_reader import Handle, NodeIds, check_shortfin_snapshot, read_snapshot

try:
    from shortfin_apps.llm.components.kvcache import trie_attention_cache as _trie_module
    from shortfin_apps.llm.components.kvcache.base_attention_cache import (
        CacheAllocationFailure as _ShortfinAllocationFailure,
    )
    from shortfin_apps.llm.components.kvcache.page_pool import PageInfo as _PageInfo
    from shortfin_apps.llm.components.kvcache.page_pool import PagePool as _PagePool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"the shortfin backend needs shortfin 3.9.0 ({exc}); install it with: {install_command('shortfin')}",
        name=exc.name) from exc

SHORTFIN_VERSION = "3.9.0"

# -- what we know about shortfin 3.9.0 ---------------------------------------------------------


KNOWN_ISSUES: dict[str, KnownIssue] = {k.code: k for k in (
    KnownIssue("B4b", "defect", "a publish that adopts an already-cached block leaves the allocation's "
               "reference where it was (on the root), not on the node it now uses", "docs/bugs.md#b4b"),
    KnownIssue("B9", "defect", "lookup takes no reference, so allocate can evict the very node the lookup "
               "matched and hand its page back: one page twice in a block table", "docs/bugs.md#b9"),
    KnownIssue("B10", "defect", "an allocation whose tokens are all cached gets 0 new pages and takes no "
               "reference; its release then drops someone else's", "docs/bugs.md#b10"),
    KnownIssue("SF1", "defect", "a failed allocate has already evicted what it could: the cache loses those "
               "blocks although the request gets nothing", "found by kvviz diff: docs/bugs.md#sf1"),
    KnownIssue("SF2", "defect", "allocate (extend) on an allocation whose block table ends with its last "
               "published page registers a second reference on that node; release drops one, so the node "
               "stays referenced forever", "found by kvviz diff: docs/bugs.md#sf2"),
    KnownIssue("SF3", "defect", "the root's dummy page 0 collides with a real page 0: extending an allocation "
               "that published nothing and ends on page 0 registers another reference on the root",
               "found by kvviz diff: docs/bugs.md#sf3"),
    KnownIssue("D1", "design", "a deduplicated page returns to the pool at the next release_pages call (of "
               "any allocation), not at the publish", "shortfin's _duplicated_pages: docs/bugs.md#d1"),
    KnownIssue("D2", "design", "lookup refreshes the matched nodes' access_time even when the allocate "
               "that follows fails", "lookup and allocate are separate calls: docs/bugs.md#d2"),
    KnownIssue("D3", "design", "allocate sizes new pages by the tokens it is given alone, ignoring room left "
               "in the allocation's last page", "shortfin's allocate: docs/bugs.md#d3"),
)}


class ShortfinError(KVCacheError):
    """shortfin raised something other than its allocation failure (a crash of the real cache)."""


# -- the pool and the clock -------------------------------------------------------------------


class CpuPagePool(_PagePool):
    """shortfin's ``PagePool`` without devices: page entries and the free list, nothing else.

    Only the accounting the cache uses is set up; ``acquire_free_pages``, ``free_pages`` and
    the count methods are shortfin's own (LIFO: pages are handed out from the end of
    ``available_pages``; freeing a page already free is ignored).
    """

    def __init__(self, page_count: int):  # noqa: super().__init__ would allocate device tables
        if not isinstance(page_count, int) or page_count < 0:
            raise ValueError(f"page_count must be a non-negative integer, got {page_count!r}")
        self._lock = threading.Lock()
        self.devices = []
        self.config = None
        self.page_tables = []
        self.attn_page_entries = [_PageInfo(index=i, pool=self) for i in range(page_count)]
        self.available_pages = list(self.attn_page_entries)


def logical_time(clock: LogicalClock):
    """Give shortfin's trie module ``clock`` as its ``time`` for the duration of the block."""
    return _logical_time(_trie_module, clock)


# kvcore's extra-slot check, so both backends refuse the same values with the same message
# (a copy here once drifted: it accepted extra=True, which kvcore refuses).
_check_extra = BasePagedAttentionCache._check_extra

# What synthesize_events can read off two snapshots: everything but the heap's own moves
# (shortfin heapifies its leaves only when it evicts; nothing records entries and exits).
OBSERVED_EVENTS = frozenset(cls.__name__ for cls in (
    ev.OpStarted, ev.Matched, ev.RefTaken, ev.RefDropped, ev.Touched, ev.PagesTaken, ev.Evicted,
    ev.NodeCreated, ev.Deduplicated, ev.PagesFreed, ev.Released))


# -- the backend ------------------------------------------------------------------------------


class ShortfinBackend(EngineCalls):
    """Drives one shortfin ``TriePagedAttentionCache``; allocations are addressed by name.

    Implements :class:`kvviz.backends.Backend`; :func:`shortfin_backend` is its factory.
    Events are synthesised from the states before and after each op (shortfin reports
    none), and :meth:`check` counts references the way shortfin keeps them.
    """

    name = "shortfin"
    version = SHORTFIN_VERSION
    cache_name = "TriePagedAttentionCache"  # shortfin's class, whatever subclass a test plants
    can_restore = False  # shortfin's trie has no way in but its own ops
    observes = OBSERVED_EVENTS
    substeps = "calls"  # what the reader can see: the state between shortfin's calls
    pseudocode = SHORTFIN_CODE  # its calls, one line each
    known_issues = KNOWN_ISSUES
    engine = "shortfin"
    error = ShortfinError
    passes = (_ShortfinAllocationFailure,)  # a refusal, not a crash: the backend reports it

    def __init__(self, pages: int, tokens_per_page: int, *, cache_class=None,
                 free_unpublished_on_release: bool = True):
        self.tokens_per_page = tokens_per_page
        self.free_unpublished_on_release = free_unpublished_on_release
        self.clock = LogicalClock()
        self.pool = CpuPagePool(pages)
        with logical_time(self.clock):
            self.cache = (cache_class or _trie_module.TriePagedAttentionCache)(self.pool, tokens_per_page)
        self._ids = NodeIds(self.cache.root)
        self._start()
        self._findings: list[Finding] = []
        self._snapshot = self._read()

    # -- the seam -------------------------------------------------------------------------

    def apply(self, op: OpLike) -> None:
        """Run one op through shortfin's calls; raises a KVCacheError if it fails.

        Misuse is refused before shortfin is called (nothing changes). A failure inside
        shortfin is reported as it happened: shortfin may have changed its state first.
        """
        kind, name, tokens = op.kind, op.name, op.tokens
        if kind == "acquire" and op.priority:
            # Refused, not ignored: kvcore would keep the priority and a diff would show a
            # difference that is not shortfin's.
            raise InvalidOperation(f"acquire {name} priority={op.priority}: shortfin's trie cache has no "
                                   "priorities (it evicts by LRU only); run it on kvcore or drop priority=")
        ops = {"acquire": lambda: self._acquire(name, () if tokens is None else tokens, op.extra),
               "publish": lambda: self._publish(name, tokens),
               "extend": lambda: self._extend(op),
               "release": lambda: self._release(name)}
        if kind not in ops:
            raise unknown_op(kind)
        before = self._snapshot
        try:
            with logical_time(self.clock):
                ops[kind]()
        finally:
            after = self._snapshot = self._read()
            if after != before:
                self._events.extend(synthesize_events(kind, name, before, after))

    def take_findings(self) -> tuple[Finding, ...]:
        """Known issues seen since the last call (see :data:`KNOWN_ISSUES`)."""
        findings, self._findings = tuple(self._findings), []
        return findings

    def snapshot(self) -> Snapshot:
        """The cache's state in kvcore's format (see :mod:`.shortfin_reader`); read afresh
        while watched (between calls of an op)."""
        if self._watch is not None:
            return self._read()
        return self._snapshot

    def check(self, snapshot: Snapshot) -> list:
        """Invariant violations of ``snapshot``, in shortfin's terms (see
        :func:`~kvviz.backends.shortfin_reader.check_shortfin_snapshot`)."""
        return check_shortfin_snapshot(snapshot)

    def shutdown(self) -> str | None:
        """shortfin's own leak check: ``cache.shutdown()``. Returns its complaint, or None.

        It frees every unreferenced leaf and ``_allocated_pages``, so the cache is not
        usable afterwards.
        """
        try:
            with logical_time(self.clock):
                self.cache.shutdown()
        except ValueError as exc:
            return str(exc)
        finally:
            self._snapshot = self._read()
        return None

    # -- ops --------------------------------------------------------------------------------

    def _acquire(self, name: str, tokens, extra: int) -> None:
        if name in self._handles:
            raise already_live(name)
        tokens = int_tokens(tokens, "acquire")
        _check_extra(extra, "acquire")
        cache, tpp = self.cache, self.tokens_per_page
        found = self._call(f"acquire {name}", cache.lookup, list(tokens))
        matched = _path_to(found.last_cached_node, cache.root)
        rest = list(tokens[found.num_tokens:])
        block = pages_for(len(rest) + extra, tpp) if extra else 0
        nodes_before = self._count_nodes()
        free_before = len(self.pool.available_pages)
        try:
            info = self._call(f"acquire {name}", cache.allocate, rest, found, allocation_block_size=block)
        except _ShortfinAllocationFailure as exc:
            needed = max(pages_for(len(rest), tpp), block)
            evicted = nodes_before - self._count_nodes()
            self._stats["evictions"] += evicted
            if matched:
                self._find("D2", f"acquire {name}: the lookup refreshed {len(matched)} matched node(s), then "
                                 f"allocate failed")
            lost_matches = [n for n in matched if n.parent is None]
            if lost_matches:
                self._find("B9", f"acquire {name}: allocate evicted {len(lost_matches)} node(s) the lookup had "
                                 f"just matched before failing")
            if evicted:
                self._find("SF1", f"acquire {name}: allocate evicted {evicted} node(s), then failed anyway")
            raise CacheAllocationFailure(
                f"cannot acquire {len(tokens)} tokens + {extra} extra slots ({found.num_tokens} tokens matched in the "
                f"cache): shortfin needed {needed} new page(s): {free_before} free, and its eviction freed "
                f"{evicted} more ({exc})", needed=needed, free=free_before, evictable=evicted,
                held=len(self.pool.attn_page_entries) - free_before - evicted) from exc
        self._stats["evictions"] += nodes_before - self._count_nodes()
        self._stats["lookups"] += 1  # counted for successful acquires, as kvcore does
        self._stats["lookup_tokens"] += len(tokens)
        self._stats["hit_tokens"] += found.num_tokens
        handle = Handle(self._next_allocation_id, name, info, found.num_tokens)
        self._next_allocation_id += 1
        self._handles[name] = handle
        new_pages = len(info.pages) - len(found.pages)
        if matched and new_pages == 0:
            self._find("B10", f"acquire {name}: all {found.num_tokens} tokens were cached, 0 new pages, and no "
                              f"reference was taken on the matched node")
        evicted_matches = [n for n in matched if n.parent is None]
        if evicted_matches:
            self._find("B9", f"acquire {name}: allocate evicted {len(evicted_matches)} node(s) the lookup had just "
                             f"matched; block table {[p.index for p in info.pages]}")

    def _publish(self, name: str, tokens) -> None:
        handle = self.handle(name)
        info = handle.info
        own = tuple(info.tokens)
        target = info
        if tokens is not None:
            tokens = publish_tokens(name, own, tokens, len(info.pages), self.tokens_per_page)
            if tokens != own:
                target = replace(info, tokens=list(tokens), num_tokens=len(tokens))
        dup_before = {p.index for p in self.cache._duplicated_pages}
        new = self._call(f"publish {name}", self.cache.publish_pages_for_tokens, target)
        if tokens is not None and len(tokens) < len(own):
            new = replace(new, tokens=list(own), num_tokens=len(own))  # published a prefix; keep the rest
        dropped = {p.index for p in info.pages} - {p.index for p in new.pages}
        dup_now = {p.index for p in self.cache._duplicated_pages}
        handle.pending |= dropped & dup_now
        if dup_now - dup_before:
            self._stats["dedups"] += len(dup_now - dup_before)
            self._find("D1", f"publish {name}: page(s) {sorted(dup_now - dup_before)} wait on _duplicated_pages "
                             f"until the next release")
        handle.info = new
        deepest = _deepest_published(self.cache, new, self.tokens_per_page)
        if deepest is not None and deepest is not new.last_cached_node:
            where = "the root" if new.last_cached_node is self.cache.root else "another node"
            self._find("B4b", f"publish {name}: {new.number_of_published_pages} page(s) published, but the "
                              f"allocation's reference stayed on {where}")

    def _extend(self, op: OpLike) -> None:
        name, extra = op.name, op.extra
        handle = self.handle(name)
        info = handle.info
        own = tuple(info.tokens)
        new_tokens = extension(own, op)
        added = list(new_tokens[len(own):])
        needed = pages_for(len(new_tokens) + extra, self.tokens_per_page) - len(info.pages)
        if needed <= 0:
            # The server's page manager appends to the info without calling the cache.
            handle.info = replace(info, tokens=list(new_tokens), num_tokens=info.num_tokens + len(added))
            return
        # How far each node's ref_count is above its holders' count, before and after.
        excess_before = {n: n.ref_count.count - self._holders(n) for n in _path_to(info.last_cached_node, None)}
        nodes_before = self._count_nodes()
        oversize = pages_for(len(added), self.tokens_per_page) > needed
        if oversize:
            self._find("D3", f"extend {name}: allocate sizes pages by the {len(added)} new tokens alone: "
                             f"{pages_for(len(added), self.tokens_per_page)} pages where {needed} would hold them")
        try:
            new = self._call(f"extend {name}", self.cache.allocate, added, info, allocation_block_size=needed)
        except _ShortfinAllocationFailure as exc:
            evicted = nodes_before - self._count_nodes()
            self._stats["evictions"] += evicted
            if evicted:
                self._find("SF1", f"extend {name}: allocate evicted {evicted} node(s), then failed anyway")
            free = len(self.pool.available_pages)
            raise CacheAllocationFailure(
                f"cannot extend {name} to {len(new_tokens)} tokens + {extra} extra slots: shortfin needed "
                f"{max(needed, pages_for(len(added), self.tokens_per_page))} new page(s): {free} free after its "
                f"eviction ({exc})", needed=needed, free=free, evictable=0) from exc
        self._stats["evictions"] += nodes_before - self._count_nodes()
        handle.info = new
        for node, excess in excess_before.items():
            if node.ref_count.count - self._holders(node) > excess:
                if node is self.cache.root:
                    self._find("SF3", f"extend {name}: the root took a second reference for the allocation (its "
                                      f"last page is page 0, like the root's dummy page)")
                else:
                    self._find("SF2", f"extend {name}: its deepest published node took a second reference "
                                      f"(ref_count {node.ref_count.count})")

    def _release(self, name: str) -> None:
        handle = self.handle(name)
        info = handle.info
        tail = [p.index for p in info.pages[info.number_of_published_pages:]]
        node = info.last_cached_node
        excess = node.ref_count.count - self._holders(node)
        self._call(f"release {name}", self.cache.release_pages, info)
        if self.free_unpublished_on_release and tail:
            self._call(f"release {name}", self.cache.free_allocated_pages, tail)
        del self._handles[name]
        if node.ref_count.count - self._holders(node) < excess:
            where = "the root" if node is self.cache.root else "its node"
            self._find("B10", f"release {name}: dropped a reference on {where} that the allocation never took "
                              f"({len(info.pages)} page(s), none registered): another allocation's reference is gone")
        for other in self._handles.values():
            other.pending.clear()  # release_pages freed every page on _duplicated_pages

    # -- internals --------------------------------------------------------------------------

    def _holders(self, node) -> int:
        """Live allocations whose published path ends at ``node`` (shortfin's reference holders)."""
        tpp, root = self.tokens_per_page, self.cache.root
        count = 0
        for h in self._handles.values():
            deepest = _deepest_published(self.cache, h.info, tpp)
            if deepest is node and (node is not root or h.info.pages):
                count += 1
        return count

    def _find(self, code: str, message: str) -> None:
        self._findings.append(Finding(code, message, KNOWN_ISSUES))

    def _count_nodes(self) -> int:
        count, stack = 0, [self.cache.root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count

    def _read(self) -> Snapshot:
        s = self._stats
        return read_snapshot(self.cache, self._ids, self._handles.values(), clock=self.clock.now,
                             next_allocation_id=self._next_allocation_id,
                             stats=Stats(s["lookups"], s["lookup_tokens"], s["hit_tokens"], s["evictions"],
                                         s["dedups"]))


def shortfin_backend(config: ConfigLike, snapshot: Snapshot | None) -> ShortfinBackend:
    """The shortfin backend's factory: a fresh shortfin trie cache for ``config``.

    Raises :class:`~kvviz.backends.BackendError` (one line, what to use instead) for a config
    shortfin cannot run, and for a snapshot (shortfin cannot restore one; the session
    replays from frame 0 because :attr:`ShortfinBackend.can_restore` is False)."""
    check_config("shortfin", config, snapshot, kind=TRIE,
                 wrong_kind="the shortfin backend drives shortfin's trie cache; a {kind!r} cache runs on kvcore "
                            "(use --backend kvcore, or `cache trie` in the script)",
                 wrong_policy="shortfin's trie cache evicts by LRU only; a {policy!r} policy runs on kvcore "
                              "(use --backend kvcore)", least_pages=0)
    return ShortfinBackend(config.pages, config.tokens_per_page)


def _path_to(node, root) -> list:
    """The nodes from below ``root`` down to ``node`` (``root=None``: include the top node)."""
    path = []
    while node is not None and node is not root:
        path.append(node)
        node = node.parent
    path.reverse()
    return path


def _deepest_published(cache, info, tpp: int):
    """The node spelled by the info's published pages, walking from the root (None if absent)."""
    node = cache.root
    tokens = tuple(info.tokens)
    for i in range(info.number_of_published_pages):
        node = node.children.get(tokens[i * tpp:(i + 1) * tpp])
        if node is None:
            return None
    return node


# -- events, synthesised from two snapshots ---------------------------------------------------


def synthesize_events(kind: str, name: str, before: Snapshot, after: Snapshot) -> list:
    """kvcore events for the change from ``before`` to ``after`` of op ``kind`` on ``name``.

    shortfin reports nothing about what it did, so these are read off the two states: the
    nodes created, evicted and touched, references taken and dropped, pages taken and freed.
    """
    alloc = after.allocation_named(name) or before.allocation_named(name)
    alloc_id = alloc.id if alloc is not None else -1
    out: list = [ev.OpStarted(kind, alloc_id, after.clock)]
    old_nodes = {n.id: n for n in before.nodes}
    new_nodes = {n.id: n for n in after.nodes}
    old_alloc = before.allocation_named(name)
    new_alloc = after.allocation_named(name)
    if kind == "acquire" and new_alloc is not None:
        # What the lookup matched existed before the op (allocate may have evicted it since: B9).
        matched = _published_path(before, new_alloc)
        out.append(ev.Matched(alloc_id, tuple(matched), new_alloc.pages[:len(matched)], new_alloc.hit_tokens,
                              len(new_alloc.tokens), f"shortfin's lookup matched {len(matched)} full page(s)"))
    touched = tuple(i for i, n in new_nodes.items()
                    if i in old_nodes and n.parent is not None and n.last_access != old_nodes[i].last_access)
    if touched:
        out.append(ev.Touched(touched, after.clock))
    heap_top = after.node(after.heap[0]) if after.heap else None
    for node_id in sorted(set(old_nodes) - set(new_nodes)):
        n = old_nodes[node_id]
        parent = n.parent if n.parent in set(after.heap) - set(before.heap) else None
        out.append(ev.Evicted(alloc_id, n.id, n.page, n.tokens, n.key, heap_top.id if heap_top else None,
                              heap_top.key if heap_top else None, parent))
    old_pages = set(old_alloc.pages) if old_alloc is not None else set()
    if new_alloc is not None:
        taken = tuple(p for p in new_alloc.pages if p not in old_pages and p in before.free)
        if taken:
            out.append(ev.PagesTaken(alloc_id, taken))
    for node_id in sorted(set(new_nodes) - set(old_nodes)):
        n = new_nodes[node_id]
        if n.parent is not None:
            out.append(ev.NodeCreated(alloc_id, n.id, n.parent, n.page, n.tokens))
    if kind == "publish" and old_alloc is not None and new_alloc is not None:
        for i, (old, new) in enumerate(zip(old_alloc.pages, new_alloc.pages)):
            node = after.node_for_page(new)
            if old != new and node is not None:
                out.append(ev.Deduplicated(alloc_id, node.id, new, old, i))
    for node_id, n in sorted(new_nodes.items()):
        old = old_nodes.get(node_id)
        if old is not None and n.ref != old.ref:
            page = n.page if n.page is not None else -1
            cls = ev.RefTaken if n.ref > old.ref else ev.RefDropped
            out.append(cls(alloc_id, node_id, page, n.ref))
    was_free = set(before.free)
    freed = [p for p in after.free if p not in was_free]
    tail = set(old_alloc.pages[old_alloc.published:]) if old_alloc is not None and kind == "release" else set()
    own = tuple(p for p in freed if p in tail)
    other = tuple(p for p in freed if p not in tail)
    if own:
        out.append(ev.PagesFreed(alloc_id, own, "release"))
    if other:  # deduplicated copies released from _duplicated_pages, or pages a failed op evicted
        out.append(ev.PagesFreed(alloc_id, other, "dedup" if kind == "release" else "evicted"))
    if kind == "release" and new_alloc is None and old_alloc is not None:
        out.append(ev.Released(alloc_id))
    return out


def _published_path(snap: Snapshot, alloc) -> list[int]:
    tpp = snap.tokens_per_page
    children = {(n.parent, n.tokens): n.id for n in snap.nodes if n.parent is not None}
    path, node = [], 0
    for i in range(alloc.published):
        node = children.get((node, alloc.tokens[i * tpp:(i + 1) * tpp]))
        if node is None:
            break
        path.append(node)
    return path
