# SPDX-License-Identifier: Apache-2.0
"""The trie's unrecorded hot path: :meth:`TriePagedAttentionCache.acquire_pages_for_tokens`,
its eviction and release with their steps fused, for speed. The contract is the readable code in
:mod:`kvcore.trie`: these functions run only while the cache records no events, and must
leave exactly the state the readable ones leave (the same block tables, nodes, heap array,
counters and clock). tests/kvcore/test_trie_fast.py holds them equal on random runs
(Hypothesis), tests/kvcore/test_eviction_paths.py on long evicting workloads.

What the fusion buys (``benchmarks/bench_core.py``'s deterministic work figure, bytecodes per
acquire -> publish -> release of its workload): the readable code costs 2,228 per lifecycle
without eviction and 3,813 with it, these 1,913 and 2,804; the trie must stay at 0.5 of the
checking floor or more.
"""

from __future__ import annotations

from .allocation import PageAllocation

#: Evicted nodes a cache keeps for its next publishes. A full cache evicts about as many
#: nodes as it creates, and reusing one skips a deallocation and an allocation (the node
#: and its empty children dict): a quarter of an eviction's cost. Spare nodes are outside
#: the trie, so nothing observable depends on them; the cap bounds the memory they hold.
_SPARE_NODES = 256

#: Above every heap key (:mod:`kvcore.policies`' packing): a clock or a hit count would need
#: 2**96 ticks to reach it, and priorities stay below 2**63.
_NO_KEY = 1 << 200


def acquire(cache, tokens: tuple, extra_token_slots: int, name: str | None, priority: int) -> PageAllocation | None:
    """The readable acquire in one pass, for checked arguments; None (nothing changed) when
    it might fail, for the readable one to decide.

    It cannot fail whatever it matches when the pages it needs if nothing matches fit in
    the free pages plus the evictable ones less the at most ``n_full`` it could protect, so
    the walk references each node as it matches it: no event objects, no second pass. Only
    the deepest matched node can be a candidate (each other one has the next as a child);
    the heap keeps its own copy of the keys, so it leaves after its fields change.
    """
    tpp = cache.tokens_per_page
    n_tokens = len(tokens)
    n_full = n_tokens // tpp
    slices = cache._slices
    if n_full > len(slices):
        slices = cache._page_slices(n_full)
    pool = cache._pool
    free = pool.available_page_count()
    most = -(-(n_tokens + extra_token_slots) // tpp)  # the pages needed if nothing matches
    if most > free and most + n_full > free + cache._ref0:
        return None
    cache.clock = tick = cache.clock + 1
    matched = []
    pages = []
    append = matched.append
    append_page = pages.append  # cheaper than list(map(attrgetter)) afterwards
    ref0 = 0
    node = cache._root
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
        cache._ref0 -= ref0
        if node is None:
            node = matched[-1]
        if node.hpos >= 0:
            cache._heap.remove(node)
    if priority:
        cache._raise_priority(matched, priority)
    matched_tokens = len(matched) * tpp
    allocation_id = cache._next_allocation_id
    cache._next_allocation_id = allocation_id + 1
    cache._lookups += 1
    cache._lookup_tokens += n_tokens
    cache._hit_tokens += matched_tokens
    allocation = PageAllocation(cache, allocation_id, name, tokens, pages, matched, matched_tokens, priority)
    cache.allocations[allocation_id] = allocation
    needed = most - len(matched)
    if needed > 0:
        if needed <= free:
            pages += pool.take(needed)
        elif free:
            pages += pool.take(free)
            pages += evict(cache, needed - free)
        else:
            pages += evict(cache, needed)
    return allocation


def release(cache, allocation: PageAllocation) -> None:
    """The readable ``_release`` of a live allocation, unrecorded. Only the deepest node of a
    path can be childless (each other node has the next one as a child), so only it can
    become an eviction candidate: one pass counts the nodes left at ref 0, then one test."""
    cache.clock += 1
    nodes = allocation._nodes
    ref0 = 0
    for n in nodes:
        n.ref -= 1
        if not n.ref:
            ref0 += 1
    cache._ref0 += ref0
    if nodes:
        n = nodes[-1]
        if not n.ref and not n.children:
            cache._heap.push(n, cache._key(n))
    pages = allocation._pages
    if len(pages) > len(nodes):
        cache._pool.give(pages[len(nodes):])
    # CacheCore._retire, inlined (a call per lifecycle saved).
    allocation.released = True
    allocation._pages = []
    allocation._nodes = []
    del cache.allocations[allocation.id]


def evict(cache, count: int) -> list[int]:
    """The readable ``_evict`` in one loop for the whole batch, with the heap's pop and
    replace_top inlined; the evicted pages, in eviction order (the caller appends them).
    The caller checked that ``count <= evictable``.

    The two inlined sifts are copies of :meth:`IndexedHeap._sift_down` kept for a measured
    reason: calling ``heap.replace_top`` / ``heap.pop`` here instead costs 24% more work per
    evicted page (bench_core's bytecodes per page: 505.6 -> 628.1 at 1,000 leaves, 772.3 ->
    936.4 at 100,000) and 6.6% more per request of a 20,000-page lifecycle (2,924 -> 3,117).

    Most evictions cascade up a chain: the victim's parent becomes a candidate with the
    victim's last_access and a smaller seq, so it is the new minimum. While that holds (its
    key is below both children of the heap's root, the smallest keys left in the heap) it is
    evicted next without entering the heap: the heap is written once per chain, leaving
    exactly the array that op-by-op eviction would. Evicted nodes are kept for reuse by the
    next publishes (``_SPARE_NODES``).
    """
    keys, items = cache._heap.arrays()
    key_of = cache._key  # a local: read once per batch, not once per cascade step
    parent_first = cache._parent_first
    root = cache._root
    spare = cache._spare
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
    cache._ref0 -= count
    cache._evictions += count
    return freed
