# SPDX-License-Identifier: Apache-2.0
"""HashBlockPagedAttentionCache: vLLM's prefix cache, a flat map of chained block keys.

No tree, no parent links, no eviction heap, no clock-based order. What vLLM v1 does
(``vllm/v1/core/block_pool.py`` ``BlockPool``, ``kv_cache_utils.py``
``FreeKVCacheBlockQueue``, ``single_type_kv_cache_manager.py``, ``kv_cache_manager.py``
``KVCacheManager``), and what this cache imitates:

* **Keys.** A full block's key chains its parent's key with its tokens
  (``hash_block_tokens(hash_fn, parent_block_hash, curr_block_token_ids)``; vLLM's default
  hash is sha256). Here: ``sha256(parent key + the block's tokens)``, the first block's
  parent being a fixed root key (vLLM's ``NONE_HASH`` is random unless ``PYTHONHASHSEED``
  is set; ours is fixed, so keys are the same in every run and on every machine). Keys are
  content only: two requests spelling the same blocks compute the same keys, whatever
  happened in between. A page holds at most one cached block.
* **Free queue.** Every ref-0 page is in one queue (:class:`kvcore.freequeue.FreeBlockQueue`),
  which is the LRU order. New pages come from its head (``BlockPool.get_new_blocks``:
  ``popleft_n``); a page taken there that still holds a cached block loses it then
  (``_maybe_evict_cached_block``): eviction is lazy, so a released cached page stays
  matchable until its page is reused, and "free" and "cached" overlap.
* **acquire** (``KVCacheManager.get_computed_blocks`` + ``allocate_slots``): match the
  longest run of cached keys from the first block (``find_longest_cache_hit``); fail with no
  change when the free queue, minus the matched pages in it, is shorter than the pages
  needed (``get_num_blocks_to_allocate`` counts the matched ref-0 blocks as taken); else
  each matched page leaves the queue if it was there and gains a reference
  (``BlockPool.touch``), then the new pages are taken from the head. vLLM caps a hit at
  ``num_tokens - 1`` tokens (``KVCacheManager.get_computed_blocks``: "we must recompute the
  last token to obtain logits"), so a prompt whose every block is cached recomputes, and
  caches again, its last block; by default we match every full block, as the trie does, so
  the two designs compare like for like, and ``recompute_last_token=True`` applies vLLM's cap.
* **publish** (``BlockPool.cache_full_blocks``): each newly full block is cached under its
  key on the allocation's own page. When the key is already cached on another page (a second
  request computed the same block before the first published it, or a parent evicted and
  recomputed while its child stayed cached), vLLM **does not deduplicate**
  (``BlockHashToBlockMap``: "we don't check if there is already an identical block in the
  cache ... so that block tables are append-only"): the new page is cached under the key as
  well, after the existing one; lookups return the first one cached that is still there
  (``get_one_block``), and each copy leaves the cache on its own when its page is reused.
  Stats count such blocks as ``dedups`` (duplicates cached, not pages saved).
* **release** (``SingleTypeKVCacheManager.free`` frees ``reversed(req_blocks)``;
  ``BlockPool.free_blocks``): one reference less on every page; pages reaching 0 join the
  free queue, those holding a cached block at the **tail** in reverse block order (the last
  block first, so a chain's tail is reused before its head), those holding none at the
  **head** (``prepend_n``; reused first: they can never be matched).
* **No parent links.** A block's parent can be evicted while the block stays cached: it
  is then **unreachable** (no acquire can match it, its chain broke above it) until the
  parent is cached again. Snapshots say so (:attr:`kvcore.snapshot.BlockInfo.reachable`).

Costs, with p = pages of the request: acquire O(p) (one sha256 per matched block), publish
O(p), release O(p); the free queue's operations are O(1) per page.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from . import events as ev
from .allocation import PageAllocation
from .base import _EXPLICIT_PAGES, CacheCore, check_name, check_priority, claimed, int_tokens
from .blockkey import chain_keys, key_text
from .errors import InvalidConfiguration, InvalidOperation
from .freequeue import FreeBlockQueue
from .pool import PagePool
from .snapshot import (_FREE_ROWS, CACHED, OWNED, AllocationInfo, BlockInfo, PageInfo, PageTable, QueuedPages, Snapshot,
                       SnapshotChanges, Stats, free_row, touched_rows)


class _Block:
    """One cached block; lives only inside the cache (snapshots copy it)."""

    __slots__ = ("seq", "key", "parent", "tokens", "page")

    def __init__(self, seq: int, key: bytes, parent: bytes | None, tokens: tuple[int, ...], page: int):
        self.seq = seq
        self.key = key
        self.parent = parent
        self.tokens = tokens
        self.page = page


class HashBlockPagedAttentionCache(CacheCore):
    """vLLM's prefix cache: full blocks in a flat map of chained keys, one free queue of
    ref-0 pages that is the LRU order, lazy eviction (see the module docstring).

    Same API as the trie. The cache owns a free queue in place of a page pool, as vLLM's
    ``BlockPool`` owns its ``FreeKVCacheBlockQueue``: the pool given is claimed and read once,
    for its size and free order, and not used afterwards. ``page_pool`` is the free queue (its
    ``available_page_count`` is the queued pages holding no cached block). ``restore`` takes
    ``recompute_last_token`` as the constructor does (a snapshot holds state, not rules).
    """

    kind = "hash"

    def __init__(self, page_pool: PagePool, tokens_per_page: int, *, recompute_last_token: bool = False):
        page_pool = claimed(page_pool, tokens_per_page)
        if type(recompute_last_token) is not bool:
            raise InvalidConfiguration(f"recompute_last_token must be True or False, not {recompute_last_token!r}")
        free = page_pool.free_pages()  # its untouched run, then the pages it got back
        super().__init__(FreeBlockQueue(page_pool.total_page_count(), free.untouched_from, (),
                                        ((p, False) for p in free.returned)), tokens_per_page)
        #: vLLM's rule: a hit covers at most ``len(tokens) - 1`` tokens (the module doc).
        self.recompute_last_token = recompute_last_token
        self._refs: dict[int, int] = {}  # page -> ref, for pages with ref > 0
        self._blocks: dict[int, _Block] = {}  # page -> the cached block it holds
        self._by_key: dict[bytes, list[_Block]] = {}  # key -> its blocks, first cached first
        self._next_seq = 1
        #: allocation id -> the keys of its first full blocks, computed once (see _chain).
        #: Derived from the tokens, so not in snapshots: a restored cache hashes again.
        self._keys: dict[int, list[bytes]] = {}

    # -- operations -----------------------------------------------------------------------

    def acquire_pages_for_tokens(self, tokens: Iterable[int], extra_token_slots: int = 0, *,
                                 name: str | None = None, priority: int = 0) -> PageAllocation:
        """Match the longest run of cached keys from the first block, reference the matched
        pages (taking them out of the free queue), take the rest from the queue's head.
        ``priority`` is kept on the allocation only (the free queue is the only order).

        The keys of every full block are computed here, once (vLLM hashes a request's
        blocks once too): publish reads them instead of hashing again."""
        tokens = int_tokens(tokens, "acquire")
        if type(extra_token_slots) is not int or extra_token_slots < 0:
            self._check_extra(extra_token_slots, "acquire")
        if name is not None and type(name) is not str:
            check_name(name, "acquire")
        if type(priority) is not int or priority:  # 0, the default, needs no check
            check_priority(priority, "acquire")
        tpp = self.tokens_per_page
        n_tokens = len(tokens)
        keys = chain_keys(None, tokens, 0, n_tokens // tpp, tpp)
        matched: list[_Block] = []
        pages: list[int] = []
        by_key = self._by_key
        if by_key:
            # vLLM's max_cache_hit_length = num_tokens - 1: the last token is always computed.
            hittable = keys[:(n_tokens - 1) // tpp] if self.recompute_last_token and tokens else keys
            append = matched.append
            append_page = pages.append
            for key in hittable:
                same = by_key.get(key)
                if same is None:
                    break
                b = same[0]  # vLLM's get_one_block: the first one cached
                append(b)
                append_page(b.page)
        matched_tokens = len(matched) * tpp
        needed = -(-(n_tokens - matched_tokens + extra_token_slots) // tpp)
        refs = self._refs
        queue = self._pool
        free = queue.available_page_count()
        evictable = queue.evictable_count()
        if needed > free + evictable - len(matched):  # the cheap bound first: all matched queued
            protected = sum(1 for b in matched if b.page not in refs)
            if needed > free + evictable - protected:
                if self._watched:
                    self._events.append(ev.Failed("acquire", None, needed, free, evictable - protected, protected))
                raise self._failure(
                    f"cannot acquire {n_tokens} tokens + {extra_token_slots} extra slots "
                    f"({matched_tokens} tokens matched in the cache)", needed, free, evictable - protected, protected)
        events = self._events
        # Each event follows the change it reports (what watch() promises): the op starts
        # before the clock ticks.
        if events is not None:
            events.append(ev.OpStarted("acquire", self._next_allocation_id, self.clock + 1))
            if self._rows is not None:
                self._rows.op(self._next_allocation_id)
        self.clock += 1
        allocation_id = self._next_allocation_id
        self._next_allocation_id = allocation_id + 1
        self._lookups += 1
        self._lookup_tokens += n_tokens
        self._hit_tokens += matched_tokens
        if self._watched:
            events.append(ev.Ticked("acquire", allocation_id, self.clock))
        allocation = PageAllocation(self, allocation_id, name, tokens, pages, matched, matched_tokens, priority)
        self.allocations[allocation_id] = allocation
        self._keys[allocation_id] = keys
        if events is None:
            # The hot path: the same changes, batched. vLLM's allocate_slots: touch the
            # hits first, then take new blocks, so a hit is never handed out as a new page.
            unqueued = []
            for page in pages:
                ref = refs.get(page, 0)
                if not ref:
                    unqueued.append(page)
                refs[page] = ref + 1
            if unqueued:
                queue.remove_n(unqueued)
            if needed > 0:
                taken, evicted = queue.take_n(needed)
                if evicted:
                    self._evict_blocks(evicted)
                refs.update(dict.fromkeys(taken, 1))
                pages += taken
            return allocation
        events.append(ev.Matched(allocation_id, tuple(b.seq for b in matched), tuple(pages), matched_tokens,
                                 n_tokens, self._match_reason(tokens, matched)))
        for b in matched:
            page = b.page
            ref = refs.get(page, 0)
            if not ref:
                queue.remove(page)
                events.append(ev.PageUnqueued(allocation_id, b.seq, page))
            refs[page] = ref + 1
            events.append(ev.RefTaken(allocation_id, b.seq, page, ref + 1))
        if needed > 0:
            self._grow(allocation, needed)
        return allocation

    def _grow(self, allocation: PageAllocation, needed: int) -> None:
        """Take ``needed`` pages from the free queue's head; a page still holding a cached
        block loses it now (lazy eviction: vLLM's ``_maybe_evict_cached_block`` on each page
        ``popleft_n`` returns). Availability was checked.

        The blocks leave while their pages are still queued, then the pages are taken: every
        event then shows a state the invariants accept (the same end state as vLLM's order)."""
        queue = self._pool
        events = self._events
        if events is None:  # acquire's hot path, for extend
            taken, evicted = queue.take_n(needed)
            if evicted:
                self._evict_blocks(evicted)
            self._refs.update(dict.fromkeys(taken, 1))
            allocation._pages += taken
            return
        blocks = self._blocks
        for page in queue.cached_among_first(needed):
            b = blocks.pop(page)
            queue.forget_block(page)
            still = self._uncache(b)
            self._evictions += 1
            events.append(ev.BlockEvicted(allocation.id, b.seq, page, b.key.hex(), b.tokens, still))
        taken = queue.popleft_n(needed)
        refs = self._refs
        for page in taken:
            refs[page] = 1
        allocation._pages.extend(taken)
        events.append(ev.PagesTaken(allocation.id, tuple(taken)))

    def _evict_blocks(self, pages: list[int]) -> None:
        """The cached blocks of ``pages``, just taken from the queue, leave the cache (the
        unrecorded eviction: :meth:`_grow`'s steps without the events)."""
        blocks = self._blocks
        by_key = self._by_key
        for page in pages:
            b = blocks.pop(page)
            same = by_key[b.key]
            if len(same) == 1:
                del by_key[b.key]
            else:
                same.remove(b)
        self._evictions += len(pages)

    def _uncache(self, b: _Block) -> bool:
        """Drop ``b`` from the key map; True if another page still caches its key."""
        same = self._by_key[b.key]
        if len(same) == 1:
            del self._by_key[b.key]
            return False
        same.remove(b)
        return True

    def _chain(self, allocation: PageAllocation, tokens: tuple[int, ...], blocks: int) -> list[bytes]:
        """The keys of ``allocation``'s first ``blocks`` full blocks: those its acquire
        computed, and the rest (after an extend, or in a restored cache) hashed now, once."""
        keys = self._keys.get(allocation.id)
        if keys is None:
            keys = self._keys[allocation.id] = []
        if len(keys) < blocks:
            keys += chain_keys(keys[-1] if keys else None, tokens, len(keys), blocks, self.tokens_per_page)
        return keys

    def _publish(self, allocation: PageAllocation, tokens: Iterable[int] | None,
                 publish_incomplete_page: bool) -> None:
        if tokens is None and not publish_incomplete_page and self.allocations.get(allocation.id) is allocation:
            tokens = allocation._tokens  # the common call: publish what the allocation holds
        else:
            tokens = self._publish_tokens(allocation, tokens, publish_incomplete_page)
        events = self._events
        if events is None:
            self.clock += 1  # _tick, inlined
        else:
            events = self._tick("publish", allocation)
        tpp = self.tokens_per_page
        nodes = allocation._nodes
        first = len(nodes)
        n_full = len(tokens) // tpp
        if n_full <= first:
            return
        keys = self._chain(allocation, tokens, n_full)
        pages = allocation._pages
        parent = keys[first - 1] if first else None  # = nodes[-1].key
        by_key = self._by_key
        blocks = self._blocks
        seq = self._next_seq
        append = nodes.append
        new = object.__new__
        for i in range(first, n_full):
            key = keys[i]
            page = pages[i]
            # _Block(seq, key, parent, tokens, page) without the call into __init__.
            b = new(_Block)
            b.seq = seq
            b.key = key
            b.parent = parent
            b.tokens = block_tokens = tokens[i * tpp:(i + 1) * tpp]
            b.page = page
            seq += 1
            same = by_key.get(key)
            if same is None:
                by_key[key] = [b]
                duplicate_of = None
            else:  # vLLM caches the duplicate too (block tables stay append-only)
                duplicate_of = same[0].page
                same.append(b)
                self._dedups += 1
            blocks[page] = b
            append(b)
            if events is not None:
                self._next_seq = seq  # before the event: at each event the state is as it says
                events.append(ev.BlockCached(allocation.id, b.seq, page, key.hex(), key_text(parent), block_tokens,
                                             duplicate_of))
            parent = key
        self._next_seq = seq

    def _release(self, allocation: PageAllocation) -> None:
        if self.allocations.get(allocation.id) is not allocation:
            self._check_live(allocation, "release")  # raises
        refs = self._refs
        blocks = self._blocks
        head: list[int] = []  # ref 0 now, no cached block: an unpublished page (ref 1 until now)
        tail: list[int] = []
        events = self._events
        if events is None:
            self.clock += 1  # _tick, inlined
            # The published pages (each holds its block) are the first len(_nodes); the
            # rest hold none. vLLM frees reversed(req_blocks): the tail's last block first.
            pages = allocation._pages
            published = len(allocation._nodes)
            append = tail.append
            for page in reversed(pages[:published]):
                ref = refs[page] - 1
                if ref:
                    refs[page] = ref
                else:
                    del refs[page]
                    append(page)
            if len(pages) > published:
                head = pages[published:]
                head.reverse()
                for page in head:
                    del refs[page]
            # CacheCore._retire, inlined.
            allocation.released = True
            allocation._pages = []
            allocation._nodes = []
            del self.allocations[allocation.id]
            self._keys.pop(allocation.id, None)  # a restored allocation may have none
            if head:
                self._pool.prepend_n(head, False)
            if tail:
                self._pool.append_n(tail, True)
            return
        events = self._tick("release", allocation)
        for page in reversed(allocation._pages):  # vLLM frees reversed(req_blocks)
            b = blocks.get(page)
            if b is None:
                head.append(page)
                continue
            ref = refs[page] - 1
            if ref:
                refs[page] = ref
            else:
                del refs[page]
                tail.append(page)
            events.append(ev.RefDropped(allocation.id, b.seq, page, ref))
        self._retire(allocation)
        self._keys.pop(allocation.id, None)
        for page in head:
            del refs[page]
        self._pool.prepend_n(head, False)
        self._pool.append_n(tail, True)
        if head or tail:
            events.append(ev.PagesQueued(allocation.id, tuple(head), tuple(tail)))
        events.append(ev.Released(allocation.id))

    def _evictable_count(self) -> int:
        return self._pool.evictable_count()

    def _match_reason(self, tokens: tuple, matched: list) -> str:
        """Why matching stopped where it did, for the Matched event."""
        tpp = self.tokens_per_page
        i = len(matched)
        if self.recompute_last_token and tokens and i == (len(tokens) - 1) // tpp < len(tokens) // tpp:
            return (f"{i} full blocks matched; the last block ({' '.join(map(str, tokens[i * tpp:(i + 1) * tpp]))}) "
                    "is recomputed: vLLM computes a prompt's last token, so a hit stops before it")
        if i < len(tokens) // tpp:
            return f"the key of block {i} ({' '.join(map(str, tokens[i * tpp:(i + 1) * tpp]))}) is not cached"
        rest = len(tokens) - i * tpp
        last = "the last token fills" if rest == 1 else f"the last {rest} tokens fill"
        partial = f"; {last} a partial block, never cached" if rest else ""
        return f"all {i} full blocks matched{partial}" if tokens else "no tokens"

    # -- snapshot / restore -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The whole state as a frozen :class:`Snapshot`: ``free`` is the free queue, head
        first; ``blocks`` the cached blocks by id, each with its reachability; a page's ref
        is its own count.

        As the trie's: consecutive snapshots share their unchanged rows (the very objects)
        and :attr:`Snapshot._changes` lists the new ones (its ``nodes`` are block ids: a hash
        page row's ``node`` is a block id too). While the cache records events (kvviz's
        sessions) each operation notes the allocation it worked on, and the next snapshot
        re-reads only the pages of those allocations, the blocks cached or evicted on them
        and the blocks whose reachability that changed: it costs what changed, plus copies
        of row arrays in C. Otherwise it is read from the live structures, O(pages used +
        blocks + allocation pages)."""
        if self._watched:
            # Mid-op (a watch callback): the kept rows know only finished ops. Read the live
            # structures; the next snapshot starts afresh.
            self._rows = None
            return self._snapshot_from_live()
        rows = self._rows
        if rows is not None and rows.clock + rows.ops == self.clock:
            snap = rows.advance(self)
            if snap is not None:
                return snap
        snap = self._snapshot_from_live()
        self._rows = _Rows(self, snap)
        return snap

    def _live_snapshot(self) -> Snapshot:
        return self._snapshot_from_live()

    def _keep_rows(self, snapshot: Snapshot) -> None:
        self._rows = _Rows(self, snapshot)

    def _snapshot_from_live(self) -> Snapshot:
        """:meth:`snapshot` from the live structures, O(pages used + blocks + allocation pages)."""
        queue = self._pool
        page_count = queue.total_page_count()
        used = queue.untouched_from
        pages: list[PageInfo] = [free_row(p) for p in range(used)] if used else []
        refs = self._refs
        for page, b in self._blocks.items():
            pages[page] = PageInfo(page, CACHED, None, b.seq, refs.get(page, 0))
        allocations = []
        for a in sorted(self.allocations.values(), key=lambda a: a.id):
            for page in a._pages[len(a._nodes):]:
                pages[page] = PageInfo(page, OWNED, a.id, None, refs.get(page, 0))
            allocations.append(_allocation_info(a))
        reachable = self._reachable_keys()
        blocks = tuple(BlockInfo(b.seq, b.page, b.key.hex(), key_text(b.parent), b.tokens, b.key in reachable)
                       for b in sorted(self._blocks.values(), key=lambda b: b.seq))
        if page_count <= _EXPLICIT_PAGES:
            table = tuple(pages) + tuple(map(free_row, range(len(pages), page_count)))
            free = tuple(queue)
        else:
            table = PageTable(tuple(pages), page_count)
            front, untouched, back = queue.parts()
            free = QueuedPages(front, untouched, page_count, back)
        return Snapshot(
            kind=self.kind, tokens_per_page=self.tokens_per_page, page_count=page_count, clock=self.clock,
            next_seq=self._next_seq, next_allocation_id=self._next_allocation_id,
            pages=table, free=free, nodes=(), allocations=tuple(allocations), heap=(),
            stats=Stats(self._lookups, self._lookup_tokens, self._hit_tokens, self._evictions, self._dedups),
            policy=self.policy, blocks=blocks,
        )

    def _reachable_keys(self) -> set[bytes]:
        """Keys whose whole chain is cached. O(cached keys): each key is settled once."""
        by_key = self._by_key
        settled: dict[bytes, bool] = {}
        for key in by_key:
            trail = []
            k = key
            while k is not None and k not in settled:
                if k not in by_key:
                    settled[k] = False
                    break
                trail.append(k)
                k = by_key[k][0].parent
            ok = k is None or settled[k]
            for t in trail:
                settled[t] = ok
        return {k for k, ok in settled.items() if ok}

    @classmethod
    def _for_restore(cls, snapshot: Snapshot, *, recompute_last_token: bool = False) -> "HashBlockPagedAttentionCache":
        # An empty queue: _restore_structure rebuilds it from the snapshot's free list in
        # O(pages used), where a PagePool would list a free queue with pages ahead of its
        # untouched run page by page (all 10**12 of a trace replay's pool).
        return cls(PagePool(0), snapshot.tokens_per_page, recompute_last_token=recompute_last_token)

    def _restore_structure(self, snapshot: Snapshot) -> None:
        for info in snapshot.blocks:
            if len(info.key) != 64 or info.parent is not None and len(info.parent) != 64:
                raise InvalidOperation(f"cannot restore: block {info.id} has a key that is not 64 hex digits")
        self._blocks = {}
        self._by_key = {}
        for info in sorted(snapshot.blocks, key=lambda b: b.id):  # first cached first, per key
            parent = None if info.parent is None else bytes.fromhex(info.parent)
            b = _Block(info.id, bytes.fromhex(info.key), parent, info.tokens, info.page)
            self._blocks[info.page] = b
            self._by_key.setdefault(b.key, []).append(b)
        self._next_seq = snapshot.next_seq
        self._pool = FreeBlockQueue.from_order(snapshot.page_count, snapshot.free, self._blocks)
        self._refs = {}
        for a in snapshot.allocations:
            for page in a.pages:
                self._refs[page] = self._refs.get(page, 0) + 1
            nodes = [self._blocks[p] for p in a.pages[:a.published]]
            self.allocations[a.id] = PageAllocation(self, a.id, a.name, a.tokens, list(a.pages), nodes, a.hit_tokens,
                                                    a.priority)

    def _check_live_structures(self) -> list:
        """Checks of what a snapshot cannot see: the key map, the queue's flags, the refs."""
        from .invariants import Violation

        out = []
        for key, same in self._by_key.items():
            for b in same:
                if self._blocks.get(b.page) is not b or b.key != key:
                    out.append(Violation(9, f"the key map lists block {b.seq} (page {b.page}) under a key it does "
                                            "not hold", (b.page,), (b.seq,)))
            if [b.seq for b in same] != sorted(b.seq for b in same):
                out.append(Violation(9, f"the pages caching key {key.hex()[:12]} are not in caching order",
                                     tuple(b.page for b in same)))
        mapped = sum(len(same) for same in self._by_key.values())
        if mapped != len(self._blocks):
            out.append(Violation(9, f"the key map holds {mapped} blocks but {len(self._blocks)} pages hold one"))
        for page in self._pool.flag_errors(self._blocks.__contains__):
            out.append(Violation(7, f"the free queue's flag for page {page} says whether it holds a cached block "
                                    "wrongly", (page,)))
        if any(r <= 0 for r in self._refs.values()):
            out.append(Violation(8, "the ref table lists a page with ref 0 or less"))
        return out


def _allocation_info(a: PageAllocation) -> AllocationInfo:
    return AllocationInfo(a.id, a.name, a._tokens, tuple(a._pages), len(a._nodes), a.hit_tokens, a.released,
                          a.priority)


class _Rows:
    """The last snapshot's rows, kept while the cache records events, so the next snapshot
    costs what the operations since changed (what :class:`kvcore.base._Rows` is to the trie).

    An operation notes the allocation it works on (:meth:`op`, at its start, with the pages
    the allocation held then: a release empties its block table). A page's row can change
    only through an operation on an allocation that holds, held or takes it: acquire and
    extend take pages (evicting their blocks), publish caches blocks on the allocation's
    pages, release drops refs on them. So :meth:`advance` re-reads those pages, the blocks
    cached or evicted on them, and the reachability those blocks change (kept per key:
    a key's blocks are reachable when its parent's are, or it has no parent), and keeps
    every other row. It gives up (None: the caller reads the live structures) at anything a
    correct cache cannot produce."""

    __slots__ = ("clock", "ops", "live", "pages", "blocks", "block_of", "allocations", "dirty", "stale",
                 "reachable", "children", "next_seq", "last", "untouched_rows", "page_numbers")

    def __init__(self, cache: HashBlockPagedAttentionCache, snap: Snapshot):
        self.clock = snap.clock
        self.ops = 0
        self.live = cache.allocations  # the cache's own dict, the same object for its life
        used = cache._pool.untouched_from
        rows = touched_rows(snap.pages)
        self.pages: list[PageInfo] = list(rows[:used])
        if len(self.pages) < used:  # a lazy table's later rows are free by construction
            free_row(used - 1)
            self.pages.extend(_FREE_ROWS[len(self.pages):used])
        self.blocks: dict[int, BlockInfo] = {b.id: b for b in snap.blocks}  # in id order, as snapshots list them
        self.block_of: dict[int, _Block] = {b.seq: b for b in cache._blocks.values()}
        self.allocations: dict[int, AllocationInfo] = {a.id: a for a in snap.allocations}
        self.dirty: set[int] = set()  # allocations operated on since the last snapshot
        self.stale: set[int] = set()  # pages they held when the operation started
        #: Every cached key -> whether its blocks are reachable (as the snapshot says: it is
        #: the live state's); parent key -> its cached child keys.
        self.reachable: dict[bytes, bool] = {}
        self.children: dict[bytes, set[bytes]] = {}
        block_rows = self.blocks
        for key, same in cache._by_key.items():
            row = block_rows.get(same[0].seq)
            self.reachable[key] = row is not None and row.reachable
            parent = same[0].parent
            if parent is not None:
                self.children.setdefault(parent, set()).add(key)
        self.next_seq = snap.next_seq
        self.last = weakref.ref(snap)
        self.untouched_rows: tuple[int, tuple[PageInfo, ...]] | None = None
        self.page_numbers: tuple[int, ...] | None = None

    def op(self, allocation_id: int) -> None:
        """An operation on ``allocation_id`` is starting (it cannot fail any more)."""
        self.ops += 1
        self.dirty.add(allocation_id)
        a = self.live.get(allocation_id)
        if a is not None:  # (an acquire's allocation does not exist yet: its pages are read at the end)
            self.stale.update(a._pages)

    def advance(self, cache: HashBlockPagedAttentionCache) -> Snapshot | None:
        """The cache's snapshot now, from the kept rows and what the operations noted; None
        when the live structures say something the notes cannot account for."""
        queue = cache._pool
        pages = self.pages
        used = queue.untouched_from
        if used < len(pages):
            return None  # pages went back to the never-used run: not something a queue does
        if used > len(pages):
            free_row(used - 1)
            pages.extend(_FREE_ROWS[len(pages):used])
        live, allocation_rows, stale = self.live, self.allocations, self.stale
        owner: dict[int, int] = {}  # page -> the noted allocation whose unpublished tail holds it
        for allocation_id in sorted(self.dirty):  # by id: a later owner wins, as in a snapshot from live
            a = live.get(allocation_id)
            if a is not None:
                stale.update(a._pages)
                for page in a._pages[len(a._nodes):]:
                    owner[page] = allocation_id
        refs, blocks_live = cache._refs, cache._blocks
        block_rows, block_of = self.blocks, self.block_of
        changed_pages: list[int] = []
        gone: list[_Block] = []
        new: list[_Block] = []
        for page in sorted(stale):
            if type(page) is not int or not 0 <= page < used:
                return None
            old = pages[page]
            b = blocks_live.get(page)
            ref = refs.get(page, 0)
            if b is not None:
                row = PageInfo(page, CACHED, None, b.seq, ref)
            elif ref:
                holder = owner.get(page)
                if holder is None:
                    return None  # referenced, uncached and in no noted allocation's tail
                row = PageInfo(page, OWNED, holder, None, ref)
            else:
                row = free_row(page)
            if old.node is not None and (b is None or b.seq != old.node):
                gone_block = block_of.pop(old.node, None)
                if gone_block is None:
                    return None
                gone.append(gone_block)
            if b is not None and b.seq not in block_of:
                if b.seq < self.next_seq:
                    return None  # a block older than the last snapshot that it did not list
                block_of[b.seq] = b
                new.append(b)
            if row != old:
                pages[page] = row
                changed_pages.append(page)
        changed_blocks = {b.seq for b in gone}
        for b in gone:
            del block_rows[b.seq]
        by_key = cache._by_key
        flipped = self._settle([b for b in gone if b.key not in by_key], sorted(new, key=_seq_of))
        reachable = self.reachable
        for key in flipped:
            flag = reachable.get(key)
            for b in by_key.get(key, ()):
                row = block_rows.get(b.seq)
                if row is not None and row.reachable is not flag:
                    block_rows[b.seq] = BlockInfo(row.id, row.page, row.key, row.parent, row.tokens, flag)
                    changed_blocks.add(b.seq)
        for b in sorted(new, key=_seq_of):  # the largest ids: appended in id order
            block_rows[b.seq] = BlockInfo(b.seq, b.page, b.key.hex(), key_text(b.parent), b.tokens,
                                          reachable[b.key])
            changed_blocks.add(b.seq)
        if len(block_rows) != len(blocks_live):
            return None  # a block cached or evicted on a page no operation noted
        changed_allocations = []
        for allocation_id in sorted(self.dirty):  # new ids are the largest: appended in id order
            a = live.get(allocation_id)
            old = allocation_rows.get(allocation_id)
            if a is None:
                if old is not None:
                    del allocation_rows[allocation_id]
                    changed_allocations.append(allocation_id)
                continue
            info = _allocation_info(a)
            if info != old:
                allocation_rows[allocation_id] = info
                changed_allocations.append(allocation_id)
        if len(allocation_rows) != len(live):
            return None
        page_count = queue.total_page_count()
        front, untouched_from, back = queue.parts()
        if page_count <= _EXPLICIT_PAGES:
            kept = self.untouched_rows
            if kept is None or kept[0] != len(pages):
                # The rows of the pages never handed out, kept until the queue hands one out.
                if page_count:
                    free_row(page_count - 1)
                kept = self.untouched_rows = (len(pages), tuple(_FREE_ROWS[len(pages):page_count]))
            numbers = self.page_numbers
            if numbers is None:  # every page's int, made once: slices of it make no int
                numbers = self.page_numbers = tuple(range(page_count))
            table = tuple(pages) + kept[1]
            free = front + numbers[untouched_from:] + back
        else:
            table = PageTable(tuple(pages), page_count)
            free = QueuedPages(front, untouched_from, page_count, back)
        snap = Snapshot(
            kind=cache.kind, tokens_per_page=cache.tokens_per_page, page_count=page_count, clock=cache.clock,
            next_seq=cache._next_seq, next_allocation_id=cache._next_allocation_id,
            pages=table, free=free, nodes=(), allocations=tuple(allocation_rows.values()), heap=(),
            stats=Stats(cache._lookups, cache._lookup_tokens, cache._hit_tokens, cache._evictions, cache._dedups),
            policy=cache.policy, blocks=tuple(block_rows.values()),
        )
        object.__setattr__(snap, "_changes", SnapshotChanges(self.last, tuple(sorted(changed_blocks)),
                                                             tuple(changed_pages), tuple(changed_allocations)))
        self.last = weakref.ref(snap)
        self.clock = cache.clock
        self.ops = 0
        self.next_seq = cache._next_seq
        self.dirty.clear()
        stale.clear()
        return snap

    def _settle(self, uncached: list[_Block], cached: list[_Block]) -> set[bytes]:
        """Update reachability for the keys no longer cached (``uncached``: a block of each)
        and the blocks newly cached (``cached``, by id); the keys whose reachability changed.
        O(keys that change): below a key that becomes unreachable only the reachable
        descendants are visited (an unreachable key's are unreachable already), below one
        that becomes reachable only the unreachable ones."""
        reachable, children = self.reachable, self.children
        flipped: set[bytes] = set()
        for b in uncached:
            key = b.key
            was = reachable.pop(key, None)
            if was is None:
                continue  # (two copies of one key evicted in one interval: the first settled it)
            if b.parent is not None:
                kids = children.get(b.parent)
                if kids is not None:
                    kids.discard(key)
                    if not kids:
                        del children[b.parent]
            if was:
                self._spread(key, False, flipped)
        for b in cached:
            key = b.key
            if key not in reachable:
                reachable[key] = False  # settled just below, once its parent is known
                if b.parent is not None:
                    children.setdefault(b.parent, set()).add(key)
        for b in cached:
            key = b.key
            if not reachable[key] and (b.parent is None or reachable.get(b.parent)):
                reachable[key] = True
                flipped.add(key)
                self._spread(key, True, flipped)
        return flipped

    def _spread(self, key: bytes, flag: bool, flipped: set[bytes]) -> None:
        """Set ``flag`` on the cached descendants of ``key`` that do not have it yet (a
        descendant that has it already has it below it too)."""
        reachable, children = self.reachable, self.children
        stack = [key]
        while stack:
            for child in children.get(stack.pop(), ()):
                if reachable.get(child, flag) is not flag:
                    reachable[child] = flag
                    flipped.add(child)
                    stack.append(child)


def _seq_of(b: _Block) -> int:
    return b.seq
