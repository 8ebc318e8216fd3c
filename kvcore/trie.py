# SPDX-License-Identifier: Apache-2.0
"""TriePagedAttentionCache: pages shared by common prefixes, ref counts, policy eviction.

Semantics are docs/design.md's "Trie semantics". The parts a reader would ask about:

* A node holds one full page. ``ref`` counts the live allocations whose published path
  contains the node, so a node with ref 0 has only ref-0 descendants and everything with
  ref 0 is reachable by cascading eviction: ``free + (# ref-0 nodes)`` is exactly what an
  operation can obtain, which lets us fail *before* changing anything.
* Eviction candidates are the childless ref-0 nodes, in an indexed heap keyed by the
  policy's key (:mod:`kvcore.policies`; lru: ``(last_access, seq)``): ``seq`` (creation
  order) ends every key, so the order is total and the same on every platform (shortfin's
  wall-clock ties raised ``TypeError`` on Windows).
* A node in the heap never changes its key, so the heap is kept incrementally. A key reads
  ``last_access``, ``seq``, ``hits`` and ``priority``; ``seq`` never changes, and the other
  three change only in acquire (the matched nodes) and publish (the allocation's path, the
  nodes it adopts, the nodes it creates), each of which the operation references (ref > 0,
  hence not a candidate) before writing the field. A node becomes a candidate again only
  in release (or when eviction empties its children), and is pushed with its key then.
  tests/kvcore/test_policies.py checks it after every operation of random runs.

The operations read as the pseudo-code the UI shows (kvviz/core/designs/trie.py):
:meth:`~TriePagedAttentionCache.acquire_pages_for_tokens`, ``_publish``, ``_release`` and
``_evict``, each one path, raising events only while the cache records them. A cache that
records nothing runs acquire and eviction fused into fewer passes, in
:mod:`kvcore.trie_fast`, whose contract is the code here (tests/kvcore/test_trie_fast.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

from . import events as ev
from . import trie_fast
from .allocation import PageAllocation
from .base import BasePagedAttentionCache, acquire_args, pages_for
from .errors import InvalidConfiguration, InvalidOperation
from .heap import IndexedHeap, WatchedHeap
from .policies import check_policy, unpack
from .pool import PagePool
from .snapshot import CACHED, NodeInfo, PageInfo, Snapshot


#: Longest request, in pages, whose page slices a cache keeps (see ``_page_slices``): about
#: 60 kB of slice objects at most; a longer request builds its own for the call.
_SLICED_PAGES = 1024

_page_of = attrgetter("page")
_seq_of = attrgetter("seq")


class _Node:
    """One trie node (root: page None). Lives only inside the cache; snapshots copy it."""

    __slots__ = ("hpos", "seq", "parent", "tokens", "page", "children", "ref", "last_access", "hits", "priority")

    def __init__(self, seq: int, parent: "_Node | None", tokens: tuple, page: int | None, ref: int, last_access: int,
                 hits: int = 0, priority: int = 0):
        self.seq = seq
        self.parent = parent
        self.tokens = tokens
        self.page = page
        self.children: dict[tuple, _Node] = {}
        self.ref = ref
        self.last_access = last_access
        self.hits = hits  # successful acquires that matched this node
        self.priority = priority  # the highest priority of the allocations that published or matched it
        self.hpos = -1


class TriePagedAttentionCache(BasePagedAttentionCache):
    """Prefix-sharing paged cache (shortfin's ``TriePagedAttentionCache``, SGLang's radix cache).

    Costs, with p = pages of the request: acquire O(p + e log c), publish O(p), release O(p),
    where e = evictions and c = candidates. ``policy`` picks the eviction order, one of
    :data:`kvcore.policies.POLICIES` (SGLang's seven; lru by default).
    """

    kind = "trie"

    def __init__(self, page_pool, tokens_per_page: int, policy: str = "lru"):
        try:
            row = check_policy(policy)
        except ValueError as e:
            raise InvalidConfiguration(str(e)) from None
        super().__init__(page_pool, tokens_per_page)
        self.policy = policy
        self._row = row
        self._key = row.node_key  # node -> packed key, one call
        self._parent_first = row.parent_first
        self._root = _Node(0, None, (), None, 0, 0)
        self._next_seq = 1
        self._heap = IndexedHeap()
        self._ref0 = 0  # non-root nodes with ref 0: what cascading eviction can free
        self._spare: list[_Node] = []  # evicted nodes kept for reuse (trie_fast._SPARE_NODES)
        self._slices: list[slice] = []  # page i's token slice at [i] (see _page_slices)

    # -- operations -----------------------------------------------------------------------

    def acquire_pages_for_tokens(self, tokens: Iterable[int], extra_token_slots: int = 0, *,
                                 name: str | None = None, priority: int = 0) -> PageAllocation:
        """Match the longest cached prefix of full pages, reference it, allocate the rest.

        Each matched node counts a hit and keeps the highest ``priority`` of the
        allocations that matched or published it (what the ``priority`` policy evicts by).
        The steps of the pseudo-code's ``acquire``; events, when recording, as each happens.
        """
        tokens = acquire_args(tokens, extra_token_slots, name, priority)
        if self._events is None:  # unrecorded: the same steps fused for speed (kvcore/trie_fast.py)
            allocation = trie_fast.acquire(self, tokens, extra_token_slots, name, priority)
            if allocation is not None:
                return allocation
        tpp = self.tokens_per_page
        matched = self._match(tokens)
        hit = len(matched) * tpp
        needed = pages_for(len(tokens) - hit + extra_token_slots, tpp)
        free = self._pool.available_page_count()
        if needed > free:
            protected = sum(1 for n in matched if n.ref == 0)  # ours now: not evictable for us
            if needed > free + self._ref0 - protected:
                self._refuse_acquire(tokens, extra_token_slots, matched, needed, free, protected)
        # Nothing can fail from here on. The op starts (and a watched one reports its walk)
        # before the clock ticks, as the code runs: at each event the state is as it says.
        events = self._events
        allocation_id = self._next_allocation_id
        if events is not None:
            self._start_acquire(allocation_id, tokens, matched)
        self.clock = now = self.clock + 1
        self._next_allocation_id += 1
        self._lookups += 1
        self._lookup_tokens += len(tokens)
        self._hit_tokens += hit
        if self._watched:
            events.append(ev.Ticked("acquire", allocation_id, now))
        pages = list(map(_page_of, matched))
        allocation = PageAllocation(self, allocation_id, name, tokens, pages, matched, hit, priority)
        self.allocations[allocation_id] = allocation  # its block table starts with the matched pages
        if events is not None:
            events.append(ev.Matched(allocation_id, tuple(n.seq for n in matched), tuple(pages),
                                     hit, len(tokens), self._match_reason(tokens, matched)))
        for n in matched:
            if n.ref == 0:
                self._ref0 -= 1
                if n.hpos >= 0:  # childless and ref 0: a candidate no more
                    self._heap.remove(n)
                    if events is not None:
                        events.append(ev.CandidateRemoved(n.seq, n.page, "matched by an acquire"))
            n.ref += 1
            n.hits += 1
            if events is not None:
                events.append(ev.RefTaken(allocation_id, n.seq, n.page, n.ref))
        self._raise_priority(matched, priority)
        self._touch(matched, now)
        if needed > 0:
            self._grow(allocation, needed)
        return allocation

    def _match(self, tokens: tuple) -> list[_Node]:
        """The nodes of the longest cached prefix of ``tokens``'s full pages, root first."""
        slices = self._slices
        n_full = len(tokens) // self.tokens_per_page
        if n_full > len(slices):
            slices = self._page_slices(n_full)
        matched = []
        node = self._root
        for page_slice in slices[:n_full]:
            node = node.children.get(tokens[page_slice])
            if node is None:
                break
            matched.append(node)
        return matched

    def _refuse_acquire(self, tokens: tuple, extra_token_slots: int, matched: list, needed: int, free: int,
                        protected: int) -> None:
        """Raise the failure of an acquire that does not fit (a watched cache reports its walk first)."""
        evictable = self._ref0 - protected
        if self._watched:
            self._report_walk(self._next_allocation_id, tokens, matched)
            self._events.append(ev.Failed("acquire", None, needed, free, evictable, protected))
        raise self._failure(
            f"cannot acquire {len(tokens)} tokens + {extra_token_slots} extra slots "
            f"({len(matched) * self.tokens_per_page} tokens matched in the cache)", needed, free, evictable, protected)

    def _start_acquire(self, allocation_id: int, tokens: tuple, matched: list) -> None:
        """A recorded acquire's OpStarted (and a watched one's walk), before the clock ticks."""
        self._events.append(ev.OpStarted("acquire", allocation_id, self.clock + 1))
        if self._rows is not None:
            self._rows.op(allocation_id)
        if self._watched:
            self._report_walk(allocation_id, tokens, matched)

    def _touch(self, nodes: list, now: int) -> None:
        """Every node in ``nodes`` (referenced, so none is a candidate) accessed at ``now``."""
        for n in nodes:
            n.last_access = now
        if self._events is not None and nodes:
            self._events.append(ev.Touched(tuple(n.seq for n in nodes), now))
            if self._rows is not None:
                self._rows.touch(nodes)

    def _publish(self, allocation: PageAllocation, tokens: Iterable[int] | None,
                 publish_incomplete_page: bool) -> None:
        if tokens is None and not publish_incomplete_page and self.allocations.get(allocation.id) is allocation:
            tokens = allocation._tokens  # the common call: publish what the allocation holds
        else:
            tokens = self._publish_tokens(allocation, tokens, publish_incomplete_page)
        tpp = self.tokens_per_page
        n_full = len(tokens) // tpp
        events = self._events
        if events is not None:
            events.append(ev.OpStarted("publish", allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock = tick = self.clock + 1
        if events is not None and self._watched:
            events.append(ev.Ticked("publish", allocation.id, tick))
        nodes = allocation._nodes
        n_nodes = len(nodes)
        walked = nodes if n_full >= n_nodes else nodes[:n_full]
        self._touch(walked, tick)
        if n_full <= n_nodes:
            return  # publishing is monotonic: nothing new to share
        pages = allocation._pages
        parent = nodes[-1] if nodes else self._root
        slices = self._slices
        if n_full > len(slices):
            slices = self._page_slices(n_full)
        i = n_nodes
        while i < n_full:
            child = parent.children.get(tokens[slices[i]])
            if child is None:
                break
            # Someone published this block first: share theirs, return our copy.
            # Each change before the event that says it (a watched cache's state at each
            # event is as the event says).
            own_page = pages[i]
            if child.ref == 0:
                self._ref0 -= 1
                if child.hpos >= 0:
                    self._heap.remove(child)
                    if events is not None:
                        events.append(ev.CandidateRemoved(child.seq, child.page, "adopted by a publish"))
            # Adopting and returning the own copy are one move: no state between them has
            # the own page anywhere (neither the allocation's nor free).
            pages[i] = child.page
            nodes.append(child)
            self._dedups += 1
            self._pool.give((own_page,))
            if events is not None:
                events.append(ev.Deduplicated(allocation.id, child.seq, child.page, own_page, i))
                if self._rows is not None:
                    self._rows.touch((child,))
            child.ref += 1
            child.last_access = tick  # adopting is not a hit: hits stay
            if child.priority < allocation.priority:
                child.priority = allocation.priority
            if events is not None:
                events.append(ev.RefTaken(allocation.id, child.seq, child.page, child.ref))
                events.append(ev.PagesFreed(allocation.id, (own_page,), "dedup"))
            parent = child
            i += 1
        # The rest is new. A new node has no children, so below the first one created
        # nothing can exist: no lookups, only inserts. Creating nodes is the costliest step
        # of a publish, so a full cache reuses the nodes its evictions just emptied (see
        # trie_fast._SPARE_NODES); otherwise object.__new__ plus slot stores skips the class call
        # into _Node.__init__ (a third of the creation time on CPython 3.11).
        seq = self._next_seq
        spare = self._spare
        new = object.__new__
        priority = allocation.priority
        append = nodes.append
        for i in range(i, n_full):
            key = tokens[slices[i]]
            page = pages[i]
            if spare:
                child = spare.pop()  # evicted: childless (its children dict empty), out of the heap
            else:
                child = new(_Node)
                child.children = {}
                child.hpos = -1
            child.seq = seq
            child.parent = parent
            child.tokens = key
            child.page = page
            child.ref = 1
            child.last_access = tick
            child.hits = 0
            child.priority = priority
            parent.children[key] = child
            append(child)
            if events is not None:
                self._next_seq = seq + 1  # before the event: at each event the state is as it says
                events.append(ev.NodeCreated(allocation.id, seq, parent.seq, page, key))
                if self._rows is not None:
                    self._rows.touch((child,))
            seq += 1
            parent = child
        self._next_seq = seq

    def _release(self, allocation: PageAllocation) -> None:
        if self.allocations.get(allocation.id) is not allocation:
            self._check_live(allocation, "release")  # raises
        if self._events is None:  # unrecorded: the same steps fused for speed (kvcore/trie_fast.py)
            return trie_fast.release(self, allocation)
        events = self._tick("release", allocation)
        nodes = allocation._nodes
        if events is not None and self._rows is not None:
            self._rows.touch(nodes)
        for n in reversed(nodes):  # deepest first: a node loses its last child before it is seen
            n.ref -= 1
            if events is not None:
                events.append(ev.RefDropped(allocation.id, n.seq, n.page, n.ref))
            if n.ref == 0:
                self._ref0 += 1
                if not n.children:
                    self._heap.push(n, self._key(n))
                    if events is not None:
                        events.append(ev.CandidateAdded(n.seq, n.page, self._key_tuple(n)))
        pages = allocation._pages
        if len(pages) > len(nodes):
            tail = pages[len(nodes):]
            self._pool.give(tail)
            del pages[len(nodes):]  # before the event: at each event the state is as it says
            if events is not None:
                events.append(ev.PagesFreed(allocation.id, tuple(tail), "release"))
        self._retire(allocation)
        if events is not None:
            events.append(ev.Released(allocation.id))

    def _page_slices(self, pages: int) -> list[slice]:
        """The token slice of each page ``0 .. pages-1``: ``tokens[slices[i]]`` is page i's key.

        Walks and publishes index tokens with these instead of building each slice from
        ``i * tpp`` (four bytecodes and a slice object per page saved). Built in one C pass;
        kept for reuse up to ``_SLICED_PAGES`` pages."""
        tpp = self.tokens_per_page
        stop = pages * tpp
        slices = list(map(slice, range(0, stop, tpp), range(tpp, stop + tpp, tpp)))
        if pages <= _SLICED_PAGES:
            self._slices = slices
        return slices

    # -- eviction -------------------------------------------------------------------------

    def _evictable_count(self) -> int:
        return self._ref0

    def _evict(self, count: int, allocation_id: int) -> list[int]:
        """Evict ``count`` candidates, smallest key first, into the allocation's pages (the
        pseudo-code's ``evict``); returns [] for the caller to append. The caller checked that
        ``count <= evictable``. Each victim's page goes to the allocation at once, so a watched
        cache's state at each event is what the event says."""
        if self._events is None:  # unrecorded: the same steps fused for speed (kvcore/trie_fast.py)
            return trie_fast.evict(self, count)
        heap = self._heap
        pages = self.allocations[allocation_id]._pages
        for _ in range(count):
            victim = heap.peek()
            parent = victim.parent
            if parent is not self._root and parent.ref == 0 and len(parent.children) == 1:
                became = parent  # the cascade: childless now, it takes the victim's slot in one sift
                heap.replace_top(parent, self._key(parent))
            else:
                became = None
                heap.pop()
            del parent.children[victim.tokens]
            victim.parent = None
            pages.append(victim.page)
            self._ref0 -= 1
            self._evictions += 1
            if self._events is not None:
                self._report_eviction(allocation_id, victim, became)
        return []

    def _report_eviction(self, allocation_id: int, victim: _Node, became: _Node | None) -> None:
        """A recorded eviction's events: the victim (and the next top), then the new candidate."""
        if self._rows is not None:
            self._rows.gone(victim)
        top = self._heap.peek()
        self._events.append(ev.Evicted(
            allocation_id, victim.seq, victim.page, victim.tokens, self._key_tuple(victim),
            top.seq if top is not None else None, self._key_tuple(top) if top is not None else None,
            became.seq if became is not None else None))
        if became is not None:
            self._events.append(ev.CandidateAdded(became.seq, became.page, self._key_tuple(became)))

    # -- watching -------------------------------------------------------------------------

    def watch(self, callback) -> None:
        """See :meth:`BasePagedAttentionCache.watch`; the trie also reports its heap's moves
        (a :class:`~kvcore.heap.WatchedHeap` takes over the live arrays while watched)."""
        super().watch(callback)
        keys, items = self._heap.arrays()
        if callback is not None:
            self._heap = WatchedHeap(_HeapReporter(self), keys, items)
        else:
            self._unwatch_heap()

    def record_events(self, on: bool = True) -> None:
        """See :meth:`BasePagedAttentionCache.record_events` (this also stops watching)."""
        super().record_events(on)
        self._unwatch_heap()

    def _unwatch_heap(self) -> None:
        """The fast heap again, on the same arrays (after watching)."""
        if type(self._heap) is not IndexedHeap:
            keys, items = self._heap.arrays()
            heap = IndexedHeap()
            heap._keys, heap._items = keys, items
            self._heap = heap

    def _report_walk(self, allocation_id: int, tokens: tuple, matched: list) -> None:
        """The match as fine events: one Walked per page looked up, the last one where it stopped."""
        events = self._events
        tpp = self.tokens_per_page
        parent = 0
        for depth, n in enumerate(matched):
            events.append(ev.Walked(allocation_id, depth, parent, n.seq, n.tokens))
            parent = n.seq
        depth = len(matched)
        if (depth + 1) * tpp <= len(tokens):
            events.append(ev.Walked(allocation_id, depth, parent, None, tokens[depth * tpp:(depth + 1) * tpp]))

    @staticmethod
    def _raise_priority(nodes: list, priority: int) -> None:
        """Every node in ``nodes`` (referenced, so none is a candidate) keeps at least ``priority``."""
        for n in nodes:
            if n.priority < priority:
                n.priority = priority

    def _key_tuple(self, n: _Node) -> tuple[int, ...]:
        """``n``'s eviction key as the tuple events and views show."""
        return self._row.key_of(n)

    def _match_reason(self, tokens: tuple, matched: list) -> str:
        tpp = self.tokens_per_page
        n_full = len(tokens) // tpp
        if not tokens:
            return "no tokens"
        if len(matched) == n_full:
            rest = len(tokens) - n_full * tpp
            if rest:
                last = "the last token fills" if rest == 1 else f"the last {rest} tokens fill"
                return f"all {n_full} full pages matched; {last} a partial page, never shared"
            return f"all {n_full} pages matched"
        node = matched[-1] if matched else self._root
        i = len(matched)
        where = "the root" if node is self._root else f"node {node.seq}"
        return f"page {i} ({' '.join(map(str, tokens[i * tpp:(i + 1) * tpp]))}) is not a child of {where}"

    # -- snapshot / restore -----------------------------------------------------------------

    def dispose(self) -> None:
        """:meth:`CacheCore.dispose`: every node lets go of its parent and children too."""
        for node in list(self._iter_nodes()):
            node.parent = None
            node.children = {}
        super().dispose()

    def _iter_nodes(self):
        stack = [self._root]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def _node_infos(self, cache: dict) -> list[tuple[NodeInfo, PageInfo | None]]:
        """(NodeInfo, PageInfo) per node, sorted by id; rows of unchanged nodes are reused."""
        out = []
        live = {}
        for n in self._iter_nodes():
            state = (n.ref, n.last_access, n.page, n.hits, n.priority)
            hit = cache.get(n.seq)
            if hit is None or hit[0] != state:
                info = NodeInfo(n.seq, n.parent.seq if n.parent is not None else None, n.tokens, n.page,
                                n.ref, n.last_access, n.seq, n.hits, n.priority)
                page_info = PageInfo(n.page, CACHED, None, n.seq, n.ref) if n.page is not None else None
                hit = (state, info, page_info)
            live[n.seq] = hit
            out.append((hit[1], hit[2]))
        cache.clear()
        cache.update(live)
        out.sort(key=lambda pair: pair[0].id)
        return out

    @classmethod
    def _for_restore(cls, snapshot: Snapshot) -> "TriePagedAttentionCache":
        return cls(PagePool.restored(snapshot.page_count, snapshot.free), snapshot.tokens_per_page, snapshot.policy)

    def _heap_ids(self) -> tuple[int, ...]:
        return tuple(map(_seq_of, self._heap.items()))

    def _next_seq_value(self) -> int:
        return self._next_seq

    def _restore_structure(self, snapshot: Snapshot) -> None:
        # What this cache assumes of seq beyond the invariants (docs/invariants.md) (its own snapshots always
        # hold it): seq is the node's id, grows from parent to child (creation order; eviction
        # relies on a parent's key being below its child's when they share a last_access),
        # and stays below next_seq (new nodes take the next ones).
        seqs = {n.id: n.seq for n in snapshot.nodes}
        for info in snapshot.nodes:
            if info.seq != info.id:
                raise InvalidOperation(f"cannot restore: node {info.id} has seq {info.seq}; a trie node's seq is its id")
            if info.parent is not None and info.seq <= seqs[info.parent]:
                raise InvalidOperation(
                    f"cannot restore: node {info.id} is numbered below its parent {info.parent}; "
                    "nodes are numbered in creation order and a parent is created first")
            if info.seq >= snapshot.next_seq:
                raise InvalidOperation(f"cannot restore: node {info.id} is not below next_seq {snapshot.next_seq}")
        by_id: dict[int, _Node] = {}
        for info in sorted(snapshot.nodes, key=attrgetter("id")):  # parents first (checked above)
            if info.parent is None:
                node = self._root
                node.last_access = info.last_access
                node.hits, node.priority = info.hits, info.priority
            else:
                parent = by_id[info.parent]
                node = _Node(info.seq, parent, info.tokens, info.page, info.ref, info.last_access,
                             info.hits, info.priority)
                parent.children[info.tokens] = node
                if info.ref == 0:
                    self._ref0 += 1
            by_id[info.id] = node
        self._next_seq = snapshot.next_seq
        for node_id in snapshot.heap:
            n = by_id[node_id]
            self._heap.append_raw(n, self._key(n))
        tpp = self.tokens_per_page
        for a in snapshot.allocations:
            path = []
            node = self._root
            for i in range(a.published):
                node = node.children[a.tokens[i * tpp:(i + 1) * tpp]]
                path.append(node)
            self.allocations[a.id] = PageAllocation(self, a.id, a.name, a.tokens, list(a.pages), path, a.hit_tokens,
                                                    a.priority)

    def _check_live_structures(self) -> list:
        """Checks of the live structures a snapshot cannot see: heap positions and counters."""
        from .invariants import Violation

        out = []
        items = self._heap.items()
        keys = self._heap.keys()
        for i, (n, k) in enumerate(zip(items, keys)):
            if n.hpos != i:
                out.append(Violation(3, f"heap entry {i} (node {n.seq}) records position {n.hpos}", (n.page,), (n.seq,)))
            if unpack(self.policy, k) != self._key_tuple(n):
                out.append(Violation(3, f"heap key of node {n.seq} is {unpack(self.policy, k)}, node says "
                                        f"{self._key_tuple(n)} ({self.policy})", (n.page,), (n.seq,)))
        ref0 = sum(1 for n in self._iter_nodes() if n is not self._root and n.ref == 0)
        if ref0 != self._ref0:
            out.append(Violation(3, f"evictable counter is {self._ref0} but {ref0} nodes have ref 0"))
        return out


class _HeapReporter:
    """Turns a watched heap's moves into fine events on its cache (keys as the policy's tuples)."""

    __slots__ = ("cache",)

    def __init__(self, cache: TriePagedAttentionCache) -> None:
        self.cache = cache

    def pushed(self, item: _Node, slot: int) -> None:
        self.cache._events.append(ev.HeapPushed(item.seq, slot, self.cache._key_tuple(item)))

    def popped(self, top: _Node, moved: _Node | None) -> None:
        self.cache._events.append(ev.HeapPopped(top.seq, self.cache._key_tuple(top),
                                                moved.seq if moved is not None else None))

    def removed(self, item: _Node, slot: int, moved: _Node | None) -> None:
        self.cache._events.append(ev.HeapRemoved(item.seq, slot, moved.seq if moved is not None else None))

    def swapped(self, direction: str, item: _Node, slot: int, other: _Node, other_slot: int) -> None:
        key = self.cache._key_tuple
        self.cache._events.append(ev.HeapSwapped(direction, item.seq, key(item), slot,
                                                 other.seq, key(other), other_slot))
