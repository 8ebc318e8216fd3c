# SPDX-License-Identifier: Apache-2.0
"""vLLM's state read after an op at the cost of what the op changed (:mod:`.vllm_backend`).

The backend's full read (``VllmBackend._read_full``) walks every block of the pool and the
free queue's linked list: O(pages) per op. It stays the contract. This module keeps the rows
of the last snapshot and re-reads only the blocks an op could have changed, which the
**instrumented calls** name: :func:`instrument` wraps, on one ``BlockPool`` instance and its
``FreeKVCacheBlockQueue`` (instance attributes: no other pool is affected), every method of
vLLM 0.33.0 that changes what a snapshot shows:

==============================  ===================================================================
a block's ``ref_cnt``           ``get_new_blocks`` (0 -> 1), ``touch`` (+1), ``free_blocks`` (-1),
                                ``unpin_blocks`` (-1): the blocks they return or are given
a block's hash                  ``_insert_block_hash`` (``set_block_hash``) and
                                ``_remove_cached_block_hashes`` (``reset_hash``): every caching
                                and eviction (``cache_full_blocks``, ``cache_partial_block``,
                                ``move_block_hashes``, ``_maybe_evict_cached_block``,
                                ``evict_blocks``) goes through these two; ``reset_prefix_cache``
                                resets every block: the next read is a full one
the free queue's order          ``popleft``, ``popleft_n``, ``remove``, ``append``, ``append_n``,
                                ``prepend_n``: each is replayed on a mirror (a list of pages,
                                head first, edited in C), so the linked list is never walked
==============================  ===================================================================

Nothing else in the classes kvviz drives writes these fields (a test reads their source to
hold that: ``test_the_engines_writers_of_what_a_snapshot_shows_are_the_instrumented_calls``)
but ``SingleTypeKVCacheManager._apply_cow``, which adds a reference to a block
``get_new_blocks`` has just handed out, and only for a prefix hit ending inside a block: never
when a block is one hash block, as here. Block
tables, tokens and block hashes change only for the op's own request, which the backend
names (``dirty``). An allocation whose pages changed marks them too (their owner may change),
and an allocation holding a re-read page is re-read (its published prefix may change).

:class:`ChangedRows` then updates the kept rows: the page rows of the touched pages, the block
rows cached or evicted on them (new block ids in page order, as the full read numbers them),
the reachability of the keys below a key that became cached or uncached, the dirty
allocations. Unchanged rows are the very objects of the snapshot before, and
:attr:`kvcore.Snapshot._changes` lists the rest. ``tests/engines/test_incremental_reads.py``
holds every read to the full read's JSON, op by op.
"""

from __future__ import annotations

import weakref

from kvcore import Snapshot, Stats
from kvcore.snapshot import CACHED, OWNED, AllocationInfo, BlockInfo, PageInfo, SnapshotChanges, free_row

from kvviz.backends import HASH
from kvviz.backends.foreign_backend import RowsById

__all__ = ["POOL_CALLS", "QUEUE_CALLS", "ChangedRows", "Touched", "instrument"]

POOL_CALLS = ("get_new_blocks", "touch", "free_blocks", "unpin_blocks", "_insert_block_hash",
              "_remove_cached_block_hashes", "reset_prefix_cache")
"""The ``BlockPool`` methods :func:`instrument` wraps: every writer of a block's ``ref_cnt`` or hash."""

QUEUE_CALLS = ("popleft", "popleft_n", "remove", "append", "append_n", "prepend_n")
"""The ``FreeKVCacheBlockQueue`` methods :func:`instrument` wraps: every writer of its links."""


class Touched:
    """What the instrumented calls saw since the last read: the pages whose block's ``ref_cnt``
    or hash may have changed, whether every block may have (``everything``), and the free
    queue's order (``queue``: pages, head first; kept, never cleared)."""

    def __init__(self, queue_pages) -> None:
        self.pages: set[int] = set()
        self.everything = False
        self.queue: list[int] = list(queue_pages)

    def clear(self) -> None:
        """Forget the touched pages (a read has seen them)."""
        self.pages.clear()
        self.everything = False


def instrument(pool, touched: Touched) -> None:
    """Wrap ``pool``'s (a vLLM ``BlockPool``) :data:`POOL_CALLS` and its free queue's
    :data:`QUEUE_CALLS`, on these instances only, so that they report to ``touched``. Each
    wrapper takes its method's parameters by their names in vLLM 0.33.0."""
    pages = touched.pages
    queue = touched.queue

    def note(blocks):
        for block in blocks:
            if block.block_id:  # block 0 is vLLM's null block: no page of ours
                pages.add(block.block_id - 1)

    def pool_call(name):
        real = getattr(pool, name)
        if name == "get_new_blocks":
            def call(num_blocks):
                blocks = real(num_blocks)
                note(blocks)
                return blocks
        elif name == "touch":
            def call(blocks):
                note(blocks)
                return real(blocks)
        elif name == "free_blocks":
            def call(ordered_blocks):
                ordered_blocks = list(ordered_blocks)  # (given a reversed() iterator: read it once)
                note(ordered_blocks)
                return real(ordered_blocks)
        elif name == "unpin_blocks":
            def call(blocks, on_reuse):
                blocks = list(blocks)
                note(blocks)
                return real(blocks, on_reuse)
        elif name == "_insert_block_hash":
            def call(block_hash_with_group_id, block, num_tokens):
                note((block,))
                return real(block_hash_with_group_id, block, num_tokens)
        elif name == "_remove_cached_block_hashes":
            def call(block):
                note((block,))
                return real(block)
        else:  # reset_prefix_cache: every block's hash
            def call():
                touched.everything = True
                return real()
        call.__name__ = call.__qualname__ = name  # sub-steps name a call by it (no __wrapped__: the
        return call  # parameter test must see the wrapper's own signature)

    def queue_call(name):
        real = getattr(pool.free_block_queue, name)
        if name == "popleft":
            def call():
                block = real()
                queue.remove(block.block_id - 1)  # (the head: found first)
                return block
        elif name == "popleft_n":
            def call(n):
                blocks = real(n)
                popped = [block.block_id - 1 for block in blocks]
                if queue[:len(popped)] == popped:
                    del queue[:len(popped)]
                else:  # (not the head: the mirror went wrong; the full read's comparison will say so)
                    for page in popped:
                        queue.remove(page)
                return blocks
        elif name == "remove":
            def call(block):
                real(block)
                queue.remove(block.block_id - 1)
        elif name == "append":
            def call(block):
                real(block)
                queue.append(block.block_id - 1)
        elif name == "append_n":
            def call(blocks):
                real(blocks)
                queue.extend(block.block_id - 1 for block in blocks)
        else:  # prepend_n
            def call(blocks):
                real(blocks)
                queue[:0] = [block.block_id - 1 for block in blocks]
        call.__name__ = call.__qualname__ = name  # sub-steps name a call by it (no __wrapped__: the
        return call  # parameter test must see the wrapper's own signature)

    for name in POOL_CALLS:
        setattr(pool, name, pool_call(name))
    for name in QUEUE_CALLS:
        setattr(pool.free_block_queue, name, queue_call(name))


class ChangedRows:
    """The rows of the last snapshot of one :class:`~kvviz.backends.vllm_backend.VllmBackend`,
    kept to make the next one from what changed (see the module's docstring).

    Built from a full read's snapshot (``snap``) and the backend's bookkeeping then; O(pages
    + keys learned), once per full read."""

    def __init__(self, backend, snap: Snapshot):
        self.last = weakref.ref(snap)
        self.rows: list[PageInfo] = list(snap.pages)
        self.blocks = RowsById(snap.blocks)
        self.allocations: dict[int, AllocationInfo] = {a.id: a for a in snap.allocations}
        self.ids: dict[str, int] = {a.name: a.id for a in snap.allocations}
        self.holders: dict[int, set[int]] = {}  # page -> the allocations whose block table holds it
        for a in snap.allocations:
            for page in a.pages:
                self.holders.setdefault(page, set()).add(a.id)
        self.cached: dict[int, tuple[bytes, int]] = {}  # page -> (vLLM's hash, block id) it caches
        self.copies: dict[bytes, set[int]] = {}  # hash -> ids of the blocks caching it
        for (page, key), seq in backend._seq.items():
            self.cached[page] = (key, seq)
            self.copies.setdefault(key, set()).add(seq)
        self.chain = backend._chain  # hash -> (parent hash, tokens): the backend's, shared
        self.children: dict[bytes | None, list[bytes]] = {}
        self.reach: dict[bytes, bool] = {}  # every block above the hash is cached
        self._learn(backend._chain)

    def _learn(self, keys) -> None:
        """Place newly learned hashes (parents first) below their parents, with their reach."""
        chain, reach, copies = self.chain, self.reach, self.copies
        for key in keys:
            parent = chain[key][0]
            self.children.setdefault(parent, []).append(key)
            reach[key] = parent is None or (parent in copies and reach.get(parent, True))

    def advance(self, backend, dirty: set[str]) -> Snapshot | None:
        """The backend's snapshot now, from the kept rows, the touched pages and the ``dirty``
        allocation names; None when a full read is needed (``reset_prefix_cache``)."""
        touched = backend._touched
        if touched.everything:
            return None
        chain = self.chain
        pool = backend.manager.block_pool
        pages = set(touched.pages)
        touched.clear()
        # Allocations: the op's own, then every one holding a page the op touched.
        allocations, ids, holders = self.allocations, self.ids, self.holders
        changed_allocations: set[int] = set()
        handles = {}
        for name in dirty:
            old_id = ids.get(name)
            handle = backend._handles.get(name)
            if handle is not None:
                handles[handle.id] = handle
            if old_id is not None and (handle is None or handle.id != old_id):
                old = allocations.pop(old_id)
                del ids[name]
                changed_allocations.add(old_id)
                for page in old.pages:
                    holders[page].discard(old_id)
                    pages.add(page)
        for page in list(pages):
            for allocation_id in holders.get(page, ()):
                handle = backend._handles.get(allocations[allocation_id].name)
                handles[allocation_id] = handle
        for allocation_id in sorted(handles):  # new ids are the largest: appended in id order
            handle = handles[allocation_id]
            new = backend._allocation_row(handle)
            old = allocations.get(allocation_id)
            if new == old:
                continue
            allocations[allocation_id] = new
            ids[handle.name] = allocation_id
            changed_allocations.add(allocation_id)
            old_pages = set(old.pages) if old is not None else set()
            for page in old_pages.symmetric_difference(new.pages):
                pages.add(page)
                if page in old_pages:
                    holders[page].discard(allocation_id)
                else:
                    holders.setdefault(page, set()).add(allocation_id)
        learned = backend._learned
        backend._learned = []
        # Pages: each touched block's row, as the full read makes it; new blocks numbered in page order.
        rows, cached, copies, blocks = self.rows, self.cached, self.copies, self.blocks
        changed_pages: list[int] = []
        changed_blocks: set[int] = set()
        flipped: set[bytes] = set()
        new_blocks: list[tuple[int, int, bytes]] = []
        evicted = 0
        for page in sorted(pages):
            if not 0 <= page < len(rows):
                return None
            block = pool.blocks[page + 1]
            ref = block.ref_cnt
            block_hash = block.block_hash
            old_pair = cached.get(page)
            new_pair = None
            if block_hash is None:
                if ref:
                    owners = holders.get(page)
                    row = PageInfo(page, OWNED, min(owners) if owners else None, None, ref)
                else:
                    row = free_row(page)
            else:
                key = bytes(backend._block_hash(block_hash))
                if old_pair is not None and old_pair[0] == key:
                    new_pair = old_pair
                else:
                    new_pair = (key, backend._next_seq)
                    backend._next_seq += 1
                    new_blocks.append((new_pair[1], page, key))
                row = PageInfo(page, CACHED, None, new_pair[1], ref)
            if old_pair is not None and new_pair is not old_pair:
                evicted += 1
                old_key, old_seq = old_pair
                blocks.drop(old_seq)
                del cached[page], backend._seq[(page, old_key)]
                changed_blocks.add(old_seq)
                same = copies[old_key]
                same.discard(old_seq)
                if not same:
                    del copies[old_key]
                    flipped.add(old_key)
            if new_pair is not None and new_pair is not old_pair:
                key, seq = new_pair
                cached[page] = new_pair
                backend._seq[(page, key)] = seq
                if key not in copies:
                    copies[key] = set()
                    flipped.add(key)
                copies[key].add(seq)
                changed_blocks.add(seq)
            if row != rows[page]:
                rows[page] = row
                changed_pages.append(page)
        backend._stats["evictions"] += evicted
        # Reachability: the new hashes', then below every hash cached or uncached by this op.
        self._learn(learned)
        reach, children = self.reach, self.children
        settled: set[bytes] = set()
        stack = [child for key in flipped for child in children.get(key, ())]
        while stack:
            key = stack.pop()
            parent = chain[key][0]
            now = parent is None or (parent in copies and reach.get(parent, True))
            if reach[key] != now:
                reach[key] = now
                settled.add(key)
                stack.extend(children.get(key, ()))
        for key in settled:
            for seq in copies.get(key, ()):
                row = blocks.get(seq)  # (None: a block cached by this op, made below)
                if row is not None and row.reachable != reach[key]:
                    blocks.put(BlockInfo(row.id, row.page, row.key, row.parent, row.tokens, reach[key]))
                    changed_blocks.add(seq)
        keys = backend._keys
        for seq, page, key in new_blocks:  # the largest ids, in id order: appended in order
            parent, tokens = chain.get(key, (None, ()))
            blocks.rows.append(BlockInfo(seq, page, keys[key].hex(), None if parent is None else keys[parent].hex(),
                                         tokens, reach.get(key, True)))
        s = backend._stats
        snap = Snapshot(kind=HASH, tokens_per_page=backend.tokens_per_page, page_count=backend.pages,
                        clock=backend._clock, next_seq=backend._next_seq,
                        next_allocation_id=backend._next_allocation_id, pages=tuple(rows),
                        free=tuple(touched.queue), nodes=(), allocations=tuple(allocations.values()), heap=(),
                        stats=Stats(s["lookups"], s["lookup_tokens"], s["hit_tokens"], s["evictions"], s["dedups"]),
                        policy="lru", blocks=tuple(blocks.rows))
        object.__setattr__(snap, "_changes", SnapshotChanges(self.last, tuple(sorted(changed_blocks)),
                                                             tuple(changed_pages), tuple(sorted(changed_allocations))))
        self.last = weakref.ref(snap)
        return snap
