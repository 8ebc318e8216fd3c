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
  tests/core/test_policies.py checks it after every operation of random runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

from . import events as ev
from .allocation import PageAllocation
from .base import BasePagedAttentionCache, check_name, check_priority, exact_ints, not_a_sequence
from .errors import InvalidConfiguration, InvalidOperation
from .heap import IndexedHeap, WatchedHeap
from .policies import check_policy, key_tuple, unpack
from .pool import PagePool
from .snapshot import CACHED, NodeInfo, PageInfo, Snapshot


#: Evicted nodes a cache keeps for its next publishes. A full cache evicts about as many
#: nodes as it creates, and reusing one skips a deallocation and an allocation (the node
#: and its empty children dict): a quarter of an eviction's cost. Spare nodes are outside
#: the trie, so nothing observable depends on them; the cap bounds the memory they hold.
_SPARE_NODES = 256

#: Longest request, in pages, whose page slices a cache keeps (see ``_page_slices``): about
#: 60 kB of slice objects at most; a longer request builds its own for the call.
_SLICED_PAGES = 1024

#: Above every heap key (:mod:`kvcore.heap`'s packing): a clock or a hit count would need
#: 2**96 ticks to reach it, and priorities stay below 2**63.
_NO_KEY = 1 << 200


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
        self._key = row.node_key  # node -> packed key, one call
        self._parent_first = row.parent_first
        self._root = _Node(0, None, (), None, 0, 0)
        self._next_seq = 1
        self._heap = IndexedHeap()
        self._ref0 = 0  # non-root nodes with ref 0: what cascading eviction can free
        self._spare: list[_Node] = []  # evicted nodes kept for reuse, at most _SPARE_NODES
        self._slices: list[slice] = []  # page i's token slice at [i] (see _page_slices)

    # -- operations -----------------------------------------------------------------------

    def acquire_pages_for_tokens(self, tokens: Iterable[int], extra_token_slots: int = 0, *,
                                 name: str | None = None, priority: int = 0) -> PageAllocation:
        """Match the longest cached prefix of full pages, reference it, allocate the rest.

        Each matched node counts a hit and keeps the highest ``priority`` of the
        allocations that matched or published it (what the ``priority`` policy evicts by).
        """
        # base.int_tokens, inlined (the lifecycle's hottest call): every token an exact int,
        # else the slow path finds the culprit and refuses (or converts int subclasses).
        try:
            tokens = tuple(tokens)
        except TypeError:
            raise not_a_sequence(tokens, "acquire") from None
        if list(map(type, tokens)).count(int) != len(tokens):
            tokens = exact_ints(tokens, "acquire")
        if type(extra_token_slots) is not int or extra_token_slots < 0:
            self._check_extra(extra_token_slots, "acquire")
        if name is not None and type(name) is not str:
            check_name(name, "acquire")
        if type(priority) is not int or priority:  # 0, the default, needs no check
            check_priority(priority, "acquire")
        tpp = self.tokens_per_page
        n_tokens = len(tokens)
        n_full = n_tokens // tpp
        slices = self._slices
        if n_full > len(slices):
            slices = self._page_slices(n_full)
        pool = self._pool
        free = pool.available_page_count()
        most = -(-(n_tokens + extra_token_slots) // tpp)  # the pages needed if nothing matches
        if self._events is None and (most <= free or most + n_full <= free + self._ref0):
            # The hot path. This acquire cannot fail whatever it matches (it protects at
            # most n_full nodes from eviction), so the walk references each node as it
            # matches it: one pass over the path, no event objects. Only the deepest
            # matched node can be a candidate (each other one has the next as a child);
            # the heap keeps its own copy of the keys, so it leaves after its fields change.
            self.clock = tick = self.clock + 1
            matched = []
            pages = []
            append = matched.append
            append_page = pages.append  # cheaper than list(map(attrgetter)) afterwards
            ref0 = 0
            node = self._root
            for page_slice in slices[:n_full]:
                node = node.children.get(tokens[page_slice])
                if node is None:
                    break
                if not node.ref:
                    ref0 += 1
                node.ref += 1
                node.last_access = tick
                node.hits += 1
                append(node)
                append_page(node.page)
            if matched:
                self._ref0 -= ref0
                if node is None:
                    node = matched[-1]
                if node.hpos >= 0:
                    self._heap.remove(node)
            if priority:
                self._raise_priority(matched, priority)
            matched_tokens = len(matched) * tpp
            allocation_id = self._next_allocation_id
            self._next_allocation_id = allocation_id + 1
            self._lookups += 1
            self._lookup_tokens += n_tokens
            self._hit_tokens += matched_tokens
            allocation = PageAllocation(self, allocation_id, name, tokens, pages, matched, matched_tokens, priority)
            self.allocations[allocation_id] = allocation
            needed = most - len(matched)
            if needed > 0:
                if needed <= free:
                    pages += pool.take(needed)
                elif free:
                    pages += pool.take(free)
                    pages += self._evict(needed - free, allocation_id)
                else:
                    pages += self._evict(needed, allocation_id)
            return allocation
        matched: list[_Node] = []
        node = self._root
        for page_slice in slices[:n_full]:
            child = node.children.get(tokens[page_slice])
            if child is None:
                break
            matched.append(child)
            node = child
        matched_tokens = len(matched) * tpp
        needed = -(-(n_tokens - matched_tokens + extra_token_slots) // tpp)
        if needed > free and needed > free + self._ref0 - len(matched):
            # Ref-0 nodes on the matched path are about to be referenced, so they are not
            # evictable for this acquire. Counting them costs a pass over the path, so only
            # when the cheap bound (all of them ref 0) says the acquire might fail.
            protected = sum(1 for n in matched if n.ref == 0)
            evictable = self._ref0 - protected
            if needed > free + evictable:
                if self._watched:
                    self._report_walk(self._next_allocation_id, tokens, matched)
                    self._events.append(ev.Failed("acquire", None, needed, free, evictable, protected))
                raise self._failure(
                    f"cannot acquire {n_tokens} tokens + {extra_token_slots} extra slots "
                    f"({matched_tokens} tokens matched in the cache)", needed, free, evictable, protected)
        # Nothing can fail from here on. The op starts (and a watched one reports its walk)
        # before the clock ticks, as the code runs: at each event the state is as it says.
        events = self._events
        if events is not None:
            events.append(ev.OpStarted("acquire", self._next_allocation_id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(self._next_allocation_id)
            if self._watched:
                self._report_walk(self._next_allocation_id, tokens, matched)
        self.clock = tick = self.clock + 1
        allocation_id = self._next_allocation_id
        self._next_allocation_id = allocation_id + 1
        self._lookups += 1
        self._lookup_tokens += n_tokens
        self._hit_tokens += matched_tokens
        heap = self._heap
        if events is None:
            # The hot path: one pass over the match, no event objects. Only the deepest
            # matched node can be a candidate: each other one has the next as a child.
            pages = list(map(_page_of, matched))
            if matched and matched[-1].hpos >= 0:
                heap.remove(matched[-1])
            ref0 = 0
            for n in matched:
                if not n.ref:
                    ref0 += 1
                n.ref += 1
                n.last_access = tick
                n.hits += 1
            self._ref0 -= ref0
            if priority:
                self._raise_priority(matched, priority)
            allocation = PageAllocation(self, allocation_id, name, tokens, pages, matched, matched_tokens, priority)
            self.allocations[allocation_id] = allocation
            if needed > 0:
                if needed <= free:
                    pages += pool.take(needed)
                elif free:
                    pages += pool.take(free)
                    pages += self._evict(needed - free, allocation_id)
                else:
                    pages += self._evict(needed, allocation_id)
            return allocation
        if self._watched:
            events.append(ev.Ticked("acquire", allocation_id, tick))
        pages = [n.page for n in matched]
        allocation = PageAllocation(self, allocation_id, name, tokens, pages, matched, matched_tokens, priority)
        self.allocations[allocation_id] = allocation  # its block table starts with the matched pages
        events.append(ev.Matched(allocation_id, tuple(n.seq for n in matched), tuple(pages),
                                 matched_tokens, n_tokens, self._match_reason(tokens, matched)))
        for n in matched:
            if n.ref == 0:
                self._ref0 -= 1
                if n.hpos >= 0:
                    heap.remove(n)
                    events.append(ev.CandidateRemoved(n.seq, n.page, "matched by an acquire"))
            n.ref += 1
            n.hits += 1
            events.append(ev.RefTaken(allocation_id, n.seq, n.page, n.ref))
        if priority:
            self._raise_priority(matched, priority)
        if matched:
            for n in matched:  # a loop of its own: at each event the state is as it says
                n.last_access = tick
            events.append(ev.Touched(tuple(n.seq for n in matched), tick))
            if self._rows is not None:
                self._rows.touch(matched)
        if needed > 0:
            if needed <= free:
                taken = pool.take(needed)
                pages += taken
                events.append(ev.PagesTaken(allocation_id, tuple(taken)))
            else:
                self._grow(allocation, needed)
        return allocation

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
        for n in walked:
            n.last_access = tick
        if events is not None and walked:
            events.append(ev.Touched(tuple(n.seq for n in walked), tick))
            if self._rows is not None:
                self._rows.touch(walked)
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
        # _SPARE_NODES); otherwise object.__new__ plus slot stores skips the class call
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
        events = self._events
        if events is not None:
            events.append(ev.OpStarted("release", allocation.id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(allocation.id)
        self.clock = tick = self.clock + 1
        if events is not None and self._watched:
            events.append(ev.Ticked("release", allocation.id, tick))
        nodes = allocation._nodes
        heap = self._heap
        if events is None:
            # Only the deepest node of a path can be childless (each other node has the next
            # one as a child), so only it can become an eviction candidate.
            ref0 = 0
            for n in nodes:
                n.ref -= 1
                if not n.ref:
                    ref0 += 1
            self._ref0 += ref0
            if nodes:
                n = nodes[-1]
                if not n.ref and not n.children:
                    heap.push(n, self._key(n))
        else:
            if self._rows is not None:
                self._rows.touch(nodes)
            for n in reversed(nodes):
                n.ref -= 1
                events.append(ev.RefDropped(allocation.id, n.seq, n.page, n.ref))
                if n.ref == 0:
                    self._ref0 += 1
                    if not n.children:
                        heap.push(n, self._key(n))
                        events.append(ev.CandidateAdded(n.seq, n.page, self._key_tuple(n)))
        pages = allocation._pages
        if len(pages) > len(nodes):
            tail = pages[len(nodes):]
            self._pool.give(tail)
            if events is not None:
                del pages[len(nodes):]  # before the event: at each event the state is as it says
                events.append(ev.PagesFreed(allocation.id, tuple(tail), "release"))
        # BasePagedAttentionCache._retire, inlined (a call per lifecycle saved).
        allocation.released = True
        allocation._pages = []
        allocation._nodes = []
        del self.allocations[allocation.id]
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
        """Evict ``count`` candidates, smallest key first; their pages, in eviction order.

        One loop for the whole batch (not a call per page): eviction is the hot path of a
        full cache. The caller checked that ``count <= evictable``.
        """
        if self._events is not None:
            return self._evict_narrated(count, allocation_id)
        # The same steps as _evict_narrated with the heap's pop and replace_top inlined
        # (one Python call per batch instead of four per page); the state machine test
        # drives both against the reference model. The two inlined sifts below are the
        # copies of IndexedHeap._sift_down that stay, for a measured reason: calling
        # heap.replace_top / heap.pop here instead costs 24% more work per evicted page
        # (bench_core's bytecodes per page: 505.6 -> 628.1 at 1,000 leaves, 772.3 -> 936.4
        # at 100,000) and 6.6% more per request of a 20,000-page lifecycle (2,924 -> 3,117).
        #
        # Most evictions cascade up a chain: the victim's parent becomes a candidate with
        # the victim's last_access and a smaller seq, so it is the new minimum. While that
        # holds (its key is below both children of the heap's root, the smallest keys left
        # in the heap) it is evicted next without entering the heap: the heap is written
        # once per chain, leaving exactly the array that op-by-op eviction would.
        keys, items = self._heap.arrays()
        key_of = self._key  # a local: read once per batch, not once per cascade step
        parent_first = self._parent_first
        root = self._root
        spare = self._spare
        room = _SPARE_NODES - len(spare)
        freed = []
        append = freed.append
        left = count
        while left:
            top = items[0]
            top.hpos = -1
            n = len(keys)
            # The smallest key left in the heap once the top is gone.
            rest = (keys[1] if n == 2 or keys[1] < keys[2] else keys[2]) if n > 1 else _NO_KEY
            victim = top
            while True:
                parent = victim.parent
                siblings = parent.children
                if len(siblings) == 1:
                    siblings.clear()  # the victim is the only child: skip hashing its tokens
                else:
                    del siblings[victim.tokens]
                append(victim.page)
                if room:  # keep it for reuse; publish overwrites every other field
                    room -= 1
                    victim.parent = None  # or it would keep its evicted ancestors alive
                    spare.append(victim)
                left -= 1
                if parent.ref or siblings or parent is root:
                    candidate = None
                    break
                candidate = parent
                if left and parent.last_access is victim.last_access and parent_first:
                    # Touched by the same op (the same tick object), and a parent's seq is
                    # below its child's (creation order; restore refuses anything else), so
                    # under lru, fifo and mru its key is below the victim's, itself below
                    # rest. The identity test reads no int: these ints are cold in a full
                    # cache.
                    victim = parent
                    continue
                key = key_of(parent)
                if not left or key > rest:
                    break
                victim = parent  # the new minimum: evict it straight away
            if candidate is not None:
                # IndexedHeap.replace_top(candidate): sift its key down from the root.
                item = candidate
                pos = 0
                child = 1
                while child < n:
                    if child + 1 < n and keys[child + 1] < keys[child]:
                        child += 1
                    child_key = keys[child]
                    if key <= child_key:
                        break
                    keys[pos] = child_key
                    moved = items[pos] = items[child]
                    moved.hpos = pos
                    pos = child
                    child = 2 * child + 1
            else:
                # IndexedHeap.pop(): move the last entry into the root's hole Floyd's way
                # (walk the hole down taking the smaller child, then sift the entry up): the
                # entry came from the bottom, so it rarely climbs far, and one comparison per
                # level beats two. With distinct keys it leaves the array a plain sift does.
                key = keys.pop()
                item = items.pop()
                n -= 1
                if not n:
                    continue  # the top was the only entry
                pos = 0
                child = 1
                last = n - 1  # while child < last, both children exist
                while child < last:
                    if keys[child + 1] < keys[child]:
                        child += 1
                    keys[pos] = keys[child]
                    moved = items[pos] = items[child]
                    moved.hpos = pos
                    pos = child
                    child = 2 * child + 1
                if child == last:  # a lone left child at the bottom
                    keys[pos] = keys[child]
                    moved = items[pos] = items[child]
                    moved.hpos = pos
                    pos = child
                while pos:
                    up = (pos - 1) >> 1
                    up_key = keys[up]
                    if key >= up_key:
                        break
                    keys[pos] = up_key
                    moved = items[pos] = items[up]
                    moved.hpos = pos
                    pos = up
            keys[pos] = key
            items[pos] = item
            item.hpos = pos
        self._ref0 -= count
        self._evictions += count
        return freed

    def _evict_narrated(self, count: int, allocation_id: int) -> list[int]:
        """:meth:`_evict` with events, through the heap's own methods, one victim at a time.

        Each victim's page goes to the allocation at once (so a watched cache's state at each
        event is what the event says); returns [] for the caller to append."""
        heap = self._heap
        root = self._root
        events = self._events
        pages = self.allocations[allocation_id]._pages
        for _ in range(count):
            victim = heap.peek()
            parent = victim.parent
            # The parent becomes a candidate when the victim is its only child: it takes the
            # victim's slot in one sift (replace_top), as the batch eviction does.
            became = parent if (parent.ref == 0 and len(parent.children) == 1 and parent is not root) else None
            if became is not None:
                heap.replace_top(became, self._key(became))
            else:
                heap.pop()
            del parent.children[victim.tokens]
            victim.parent = None
            if self._rows is not None:
                self._rows.gone(victim)
            pages.append(victim.page)
            self._ref0 -= 1
            self._evictions += 1
            top = heap.peek()
            events.append(ev.Evicted(
                allocation_id, victim.seq, victim.page, victim.tokens, self._key_tuple(victim),
                top.seq if top is not None else None,
                self._key_tuple(top) if top is not None else None,
                became.seq if became is not None else None))
            if became is not None:
                events.append(ev.CandidateAdded(became.seq, became.page, self._key_tuple(became)))
        return []

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
        return key_tuple(self.policy, n.last_access, n.seq, n.hits, n.priority)

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
