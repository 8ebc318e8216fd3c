# SPDX-License-Identifier: Apache-2.0
"""A naive reference model of the hash-block cache (vLLM's design), the oracle of its
property tests. Written from text and vLLM's source, not from kvcore's class:

- a cached block is ``page -> (seq, prefix)`` where ``prefix`` is every token of the
  request up to the end of the block: two blocks have the same chained key exactly when
  their prefixes are equal, so no hashing is needed to decide anything;
- the free queue is a plain list, head first; ref counts are never stored, they are
  recounted from the live allocations' block tables;
- a lookup scans every cached page for the prefix and takes the one cached first
  (smallest seq): vLLM's ``get_one_block`` when a key is cached twice.

The only hashing here is :func:`key_hex`, the documented key scheme written out again, so
the tests can compare the keys kvcore shows with the prefixes the model holds.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from . import refmodel
from .refmodel import ModelAllocation, ModelAllocationFailure, ModelInvalid, ModelStats

Prefix = tuple[int, ...]

#: The parent key of a first block, as kvcore.hashblock documents it.
_ROOT = hashlib.sha256(b"kvcore.hashblock root").digest()


def key_hex(prefix: Prefix, tokens_per_page: int) -> str | None:
    """The chained key of the block ending ``prefix`` (None for the empty prefix): sha256 of
    the parent's key and ``b"q"`` + the block's tokens as 8-byte little-endian signed ints
    (the model's tokens are small; kvcore falls back to text for huge ones)."""
    key = _ROOT
    if not prefix:
        return None
    for start in range(0, len(prefix), tokens_per_page):
        block = prefix[start:start + tokens_per_page]
        key = hashlib.sha256(key + b"q" + struct.pack(f"<{len(block)}q", *block)).digest()
    return key.hex()


@dataclass
class HashModel:
    """Reference behaviour of ``HashBlockPagedAttentionCache``."""

    page_count: int
    tokens_per_page: int
    recompute_last_token: bool = False  # vLLM's hit cap: a match stops before the last token
    clock: int = 0
    next_seq: int = 1
    next_allocation_id: int = 0
    queue: list[int] = field(default_factory=list)
    cached: dict[int, tuple[int, Prefix]] = field(default_factory=dict)
    allocations: dict[int, ModelAllocation] = field(default_factory=dict)
    released: set[int] = field(default_factory=set)
    stats: ModelStats = field(default_factory=ModelStats)
    # What the last successful operation did: pages taken, blocks lazily evicted (page, prefix).
    last_taken: list[int] = field(default_factory=list)
    last_evicted: list[tuple[int, Prefix]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.queue and not self.cached and not self.allocations:
            self.queue = list(range(self.page_count))

    # ---------------------------------------------------------------- derived state

    def refs(self) -> dict[int, int]:
        """page -> live allocations whose block table holds it (pages with ref > 0 only)."""
        refs: dict[int, int] = {}
        for alloc in self.allocations.values():
            for page in alloc.pages:
                refs[page] = refs.get(page, 0) + 1
        return refs

    def lookup(self, prefix: Prefix) -> int | None:
        """The page a lookup of ``prefix`` returns: the one that cached it first."""
        pages = [(seq, page) for page, (seq, p) in self.cached.items() if p == prefix]
        return min(pages)[1] if pages else None

    def reachable(self, prefix: Prefix) -> bool:
        """Every block of the chain ending ``prefix`` is cached (on some page)."""
        tpp = self.tokens_per_page
        return all(self.lookup(prefix[:end]) is not None for end in range(tpp, len(prefix) + 1, tpp))

    def evictable_count(self) -> int:
        """Queued pages holding a cached block."""
        return sum(1 for page in self.queue if page in self.cached)

    # ---------------------------------------------------------------- helpers

    def _begin(self) -> None:
        self.clock += 1
        self.last_taken = []
        self.last_evicted = []

    def _check_capacity(self, needed: int, protected: int = 0) -> None:
        free = len(self.queue) - self.evictable_count()
        evictable = self.evictable_count() - protected
        if needed > free + evictable:
            raise ModelAllocationFailure(needed, free, evictable, self.page_count - free - evictable)

    def _take_pages(self, needed: int) -> list[int]:
        taken = self.queue[:needed]
        del self.queue[:needed]
        for page in taken:
            if page in self.cached:  # lazy eviction: the block leaves when its page is reused
                self.last_evicted.append((page, self.cached.pop(page)[1]))
                self.stats.evictions += 1
        self.last_taken = taken
        return taken

    # ---------------------------------------------------------------- operations

    def acquire(self, tokens, extra_token_slots: int = 0, name: str | None = None, priority: int = 0) -> int:
        """Returns the new allocation's id."""
        tokens = tuple(tokens)
        if extra_token_slots < 0:
            raise ModelInvalid("negative extra_token_slots")
        tpp = self.tokens_per_page
        matched: list[int] = []
        reach = len(tokens) - 1 if self.recompute_last_token and tokens else len(tokens)
        for end in range(tpp, reach + 1, tpp):
            page = self.lookup(tokens[:end])
            if page is None:
                break
            matched.append(page)
        matched_tokens = len(matched) * tpp
        needed = self._pages_for(len(tokens) - matched_tokens + extra_token_slots)
        self._check_capacity(needed, sum(1 for page in matched if page in self.queue))
        self._begin()
        for page in matched:
            if page in self.queue:
                self.queue.remove(page)
        alloc = ModelAllocation(self.next_allocation_id, name, tokens, list(matched), len(matched), matched_tokens,
                                priority)
        self.next_allocation_id += 1
        self.allocations[alloc.id] = alloc
        self.stats.lookups += 1
        self.stats.lookup_tokens += len(tokens)
        self.stats.hit_tokens += matched_tokens
        alloc.pages += self._take_pages(needed)
        return alloc.id

    def publish(self, alloc_id: int, tokens=None, publish_incomplete_page: bool = False) -> None:
        alloc = self._live(alloc_id)
        if publish_incomplete_page:
            raise ModelInvalid("publish_incomplete_page")
        tpp = self.tokens_per_page
        if tokens is None:
            tokens = alloc.tokens
        else:
            tokens = tuple(tokens)
            common = min(len(tokens), len(alloc.tokens))
            if tokens[:common] != alloc.tokens[:common]:
                raise ModelInvalid("publish tokens disagree with the allocation's tokens")
            if len(tokens) > len(alloc.pages) * tpp:
                raise ModelInvalid("publish tokens do not fit in the allocation's pages")
            if len(tokens) > len(alloc.tokens):
                alloc.tokens = tokens
        self._begin()
        for i in range(alloc.published, len(tokens) // tpp):
            # Cached under its prefix on the allocation's own page, even when another page
            # caches the same prefix already (vLLM does not deduplicate).
            prefix = tokens[:(i + 1) * tpp]
            if self.lookup(prefix) is not None:
                self.stats.dedups += 1
            self.cached[alloc.pages[i]] = (self.next_seq, prefix)
            self.next_seq += 1
            alloc.published = i + 1

    # The trie model's, word for word: they only read the fields and helpers both models have.
    extend = refmodel.ReferenceCache.extend
    _live = refmodel.ReferenceCache._live
    _pages_for = refmodel.ReferenceCache._pages_for

    def release(self, alloc_id: int) -> None:
        alloc = self._live(alloc_id)
        self._begin()
        del self.allocations[alloc_id]
        self.released.add(alloc_id)
        refs = self.refs()
        # Last block first; uncached pages to the head (in that order), cached ones to the tail.
        freed = [page for page in reversed(alloc.pages) if page not in refs]
        self.queue = [p for p in freed if p not in self.cached] + self.queue + [p for p in freed if p in self.cached]


# -------------------------------------------------------------------- comparable views

def model_view(model: HashModel) -> dict:
    """What the snapshot of a hash cache in the model's state must say."""
    tpp = model.tokens_per_page
    refs = model.refs()
    pages = []
    for page in range(model.page_count):
        if page in model.cached:
            pages.append((page, "cached", None, model.cached[page][0], refs.get(page, 0)))
        elif page in refs:
            owner = next(a.id for a in model.allocations.values() if page in a.pages)
            pages.append((page, "owned", owner, None, refs[page]))
        else:
            pages.append((page, "free", None, None, 0))
    return {
        "kind": "hash", "policy": "lru", "tokens_per_page": tpp, "page_count": model.page_count,
        "clock": model.clock, "next_seq": model.next_seq, "next_allocation_id": model.next_allocation_id,
        "free": tuple(model.queue),
        "blocks": {
            page: (seq, prefix[-tpp:], key_hex(prefix, tpp), key_hex(prefix[:-tpp], tpp), model.reachable(prefix))
            for page, (seq, prefix) in model.cached.items()
        },
        "allocations": tuple(
            (a.id, a.name, a.tokens, tuple(a.pages), a.published, a.hit_tokens, False, a.priority)
            for a in sorted(model.allocations.values(), key=lambda a: a.id)
        ),
        "pages": tuple(pages),
        "nodes": {}, "root": (), "candidates": frozenset(),  # no trie, no heap
        "stats": (model.stats.lookups, model.stats.lookup_tokens, model.stats.hit_tokens,
                  model.stats.evictions, model.stats.dedups),
    }


def snapshot_view(snap) -> dict:
    """The same structure as :func:`model_view`, read from a kvcore snapshot's attributes:
    the trie model's view of it (no nodes, no heap: checked empty) plus the cached blocks."""
    view = refmodel.snapshot_view(snap)
    view["blocks"] = {b.page: (b.id, tuple(b.tokens), b.key, b.parent, b.reachable) for b in snap.blocks}
    return view


def view_differences(actual: dict, expected: dict) -> list[str]:
    """Readable field-by-field differences between two views ([] when equal)."""
    out = refmodel.view_differences(actual, expected)
    if actual["blocks"] != expected["blocks"]:
        out.append(f"blocks: kvcore {actual['blocks']!r} != model {expected['blocks']!r}")
    return out
