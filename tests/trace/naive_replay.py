# SPDX-License-Identifier: Apache-2.0
"""An independent, naive sequential replay of Mooncake requests: no kvcore, no kvviz cache code.

It exists to check the hit rates ``kvviz.trace.replay`` measures: the
same requests through two caches written from the issue's text alone, one obvious data
structure each, and the figures must agree exactly.

What one request does (read from ``kvviz/trace/replay.py``, ``_replay_sequential``, and the
trie semantics of DESIGN.md; the hash-block rules are "a hash-block cache"):

* One hash id is one block of ``page_tokens`` (512) prompt tokens and one page: the replay
  runs kvcore with ``tokens_per_page=1`` and the hash ids as the tokens, so here a block is
  keyed by its hash id under its parent (the trie) or by its chain (the hash design).
* Capacity is ``capacity_tokens // page_tokens`` whole pages; ``None`` (unlimited) is one
  page per block of all the requests (``replay.unlimited_pages``), so nothing is evicted.
* Requests run in file order, one at a time: acquire the request's blocks, publish them,
  release them. No output blocks (the replay's default, ``with_output=False``).
* A request whose acquire does not fit (fewer free plus evictable pages than it needs) is
  *failed to fit*: nothing changes, it gets no hit, and its input tokens still count.
* A served request's hit is ``matched blocks x page_tokens``, capped at its
  ``input_length`` (its last block is usually partial); the hit rate is hit tokens over the
  input tokens of every request.

Trie (DESIGN.md "Trie semantics"): a dict-of-dicts trie whose nodes carry ``ref``,
``last_access``, ``hits``, ``priority`` and ``seq`` (creation order, 1 first). A logical clock
ticks once per successful operation (acquire, publish, release). Acquire matches the longest
path, and each matched node gains a ref, ``last_access = clock`` and a hit; then it takes free
pages first and evicts one node per missing page, each time the childless ref-0 node with the
smallest key of the policy (:data:`POLICY_KEYS`, written out from the issue's table). Publish
touches the matched nodes again and creates the rest (ref 1, no hits, priority 0: a trace sets
no priorities). Release drops one ref on the path.

Hash blocks: a dict from block key (the parent block's key, the
block's hash id) to the pages caching it, a page -> key dict and one explicit free queue of
ref-0 pages (all pages at the start, in page order). Acquire matches the longest run of cached
keys from the first block (a key cached on several pages gives its first one, as vLLM's
``get_cached_block``); it fails when the free queue minus the matched pages in it is shorter
than the pages needed; each matched page leaves the queue if it is there and gains a ref; each
new page comes from the queue's head, and a cached block on it leaves the cache then (lazy
eviction). Publish caches every block past the match on the request's own page; a key already
cached on another page (a parent was evicted, its child stayed, unreachable) is cached on both
(vLLM does not deduplicate: block tables stay append-only). Release drops a ref on every page;
pages reaching 0 join the queue's tail in reverse block order, pages holding no cached block
its head. (In this sequential replay no block ever loses its parent: whoever holds a block
holds its parent, and release queues the parent behind it, so the duplicate rule never fires
and the design evicts what the trie's lru evicts; tests/trace/test_naive_replay.py checks it.)

Two speeds, the same answers (a test checks it): ``fast=False`` is the literal version — the
trie finds each victim by a min over every node, the hash design's queue is a ``list`` — fine
for a few hundred requests; ``fast=True`` keeps a ``heapq`` of candidates with lazy deletion
(an entry is pushed whenever a node is a candidate after an operation touched it, and is
checked against the node when popped) and an ``OrderedDict`` as the queue, for whole traces.
"""

from __future__ import annotations

import heapq
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PAGE_TOKENS = 512
"""Tokens per block (one Mooncake hash id)."""

POLICY_KEYS: dict[str, Callable[[dict], tuple]] = {
    "lru": lambda n: (n["last_access"], n["seq"]),
    "fifo": lambda n: (n["seq"],),
    "lfu": lambda n: (n["hits"], n["last_access"], n["seq"]),
    "mru": lambda n: (-n["last_access"], n["seq"]),
    "filo": lambda n: (-n["seq"],),
    "slru": lambda n: (0 if n["hits"] < 2 else 1, n["last_access"], n["seq"]),
    "priority": lambda n: (n["priority"], n["last_access"], n["seq"]),
}
"""Eviction keys, smallest evicted first, written out again here (not imported)."""

DESIGNS = ("trie", "hash")


@dataclass(frozen=True, slots=True)
class Request:
    """What the replay reads of a request (``kvviz.core.mooncake.TraceRequest`` fits too)."""

    input_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NaiveResult:
    """The counts of one naive replay."""

    requests: int
    served: int
    failed_to_fit: int
    input_tokens: int
    hit_tokens: int
    pages_evicted: int

    @property
    def token_hit_rate(self) -> float:
        """Hit tokens / input tokens (0.0 for no requests)."""
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0


def read_requests(path: str | Path, first: int | None = None) -> list[Request]:
    """The requests of a Mooncake JSONL file, read with ``json`` alone (no kvviz reader)."""
    requests = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            if first is not None and len(requests) >= first:
                break
            if line.strip():
                record = json.loads(line)
                requests.append(Request(record["input_length"], tuple(record["hash_ids"])))
    return requests


def chain_reuse(requests: Iterable, page_tokens: int = PAGE_TOKENS) -> tuple[int, int]:
    """``(reused tokens, input tokens)`` of an unlimited prefix cache, a third way: a set of
    the block chains seen so far (a chain is the tuple of a prompt's first k hash ids)."""
    seen: set[tuple[int, ...]] = set()
    reused = total = 0
    for request in requests:
        ids = tuple(request.hash_ids)
        chains = [ids[:k] for k in range(1, len(ids) + 1)]
        matched = 0
        while matched < len(chains) and chains[matched] in seen:
            matched += 1
        seen.update(chains)
        reused += min(matched * page_tokens, request.input_length)
        total += request.input_length
    return reused, total


def naive_replay(
    requests: Sequence,
    *,
    design: str = "trie",
    policy: str = "lru",
    capacity_tokens: int | None = None,
    page_tokens: int = PAGE_TOKENS,
    fast: bool = False,
) -> NaiveResult:
    """Replay ``requests`` sequentially (see the module docstring) and count.

    ``policy`` is the trie's; the hash design has one order, its free queue, and takes only
    ``"lru"`` (what ``kvviz`` calls it). O(blocks x pages) with ``fast=False``.
    """
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, not {design!r}")
    if policy not in POLICY_KEYS:
        raise ValueError(f"policy must be one of {tuple(POLICY_KEYS)}, not {policy!r}")
    if design == "hash" and policy != "lru":
        raise ValueError("the hash design evicts in free-queue order only (policy 'lru')")
    if capacity_tokens is None:
        page_count = sum(len(r.hash_ids) for r in requests)
    else:
        page_count = capacity_tokens // page_tokens
    if design == "trie":
        cache = NaiveTrie(page_count, POLICY_KEYS[policy], fast)
    else:
        cache = NaiveHashBlocks(page_count, fast)
    served = failed = hit_tokens = input_tokens = 0
    for request in requests:
        input_tokens += request.input_length
        matched = cache.serve(tuple(request.hash_ids))
        if matched is None:
            failed += 1
            continue
        served += 1
        hit_tokens += min(matched * page_tokens, request.input_length)
    return NaiveResult(len(requests), served, failed, input_tokens, hit_tokens, cache.evicted)


class NaiveTrie:
    """A dict-of-dicts trie; ``serve`` runs one request's acquire, publish and release."""

    def __init__(self, page_count: int, key: Callable[[dict], tuple], fast: bool):
        self.root = {"children": {}, "parent": None, "hash_id": None}
        self.nodes: dict[int, dict] = {}  # seq -> node, every node but the root
        self.free = page_count  # pages in no node (only counts matter: no page is ever named)
        self.clock = 0
        self.next_seq = 1
        self.key = key
        self.evicted = 0
        self.fast = fast
        self.heap: list[tuple[tuple, int]] = []  # fast only: (key, seq), stale entries allowed
        self.ref0 = 0  # fast only: nodes with ref 0

    def serve(self, hash_ids: tuple[int, ...]) -> int | None:
        """Acquire, publish and release ``hash_ids``; matched blocks, or None if it failed."""
        path = []
        node = self.root
        for hash_id in hash_ids:
            child = node["children"].get(hash_id)
            if child is None:
                break
            path.append(child)
            node = child
        matched = len(path)
        needed = len(hash_ids) - matched
        # A ref-0 node has only ref-0 descendants, so cascading eviction reaches every ref-0
        # node, except the matched ones this acquire is about to reference.
        ref0 = self.ref0 if self.fast else sum(1 for n in self.nodes.values() if n["ref"] == 0)
        evictable = ref0 - sum(1 for n in path if n["ref"] == 0)
        if needed > self.free + evictable:
            return None
        # acquire
        self.clock += 1
        for n in path:
            self._add_ref(n, 1)
            n["last_access"] = self.clock
            n["hits"] += 1
        taken = min(needed, self.free)
        self.free -= taken
        for _ in range(needed - taken):
            self._evict_one()  # its page goes to this request
        # publish
        self.clock += 1
        for n in path:
            n["last_access"] = self.clock
        parent = path[-1] if path else self.root
        for hash_id in hash_ids[matched:]:
            # Only one request is live, and its acquire matched as far as the trie went and
            # then only removed nodes, so none of these blocks can be there already (no dedup).
            assert hash_id not in parent["children"]
            child = {"children": {}, "parent": parent, "hash_id": hash_id, "ref": 1, "last_access": self.clock,
                     "hits": 0, "priority": 0, "seq": self.next_seq}
            self.next_seq += 1
            parent["children"][hash_id] = child
            self.nodes[child["seq"]] = child
            path.append(child)
            parent = child
        # release
        self.clock += 1
        for n in path:
            self._add_ref(n, -1)
        if self.fast:
            for n in path:  # every node this request touched that is a candidate now
                self._push_if_candidate(n)
        return matched

    def _add_ref(self, node: dict, change: int) -> None:
        if node["ref"] == 0:
            self.ref0 -= 1
        node["ref"] += change
        if node["ref"] == 0:
            self.ref0 += 1

    @staticmethod
    def _is_candidate(node: dict) -> bool:
        return node["ref"] == 0 and not node["children"]

    def _push_if_candidate(self, node: dict) -> None:
        if self._is_candidate(node):
            heapq.heappush(self.heap, (self.key(node), node["seq"]))

    def _evict_one(self) -> None:
        if self.fast:
            while True:
                key, seq = heapq.heappop(self.heap)
                victim = self.nodes.get(seq)
                # Stale entries: the node was evicted, referenced, grew a child, or was
                # touched (its newer key was pushed too).
                if victim is not None and self._is_candidate(victim) and self.key(victim) == key:
                    break
        else:
            victim = min((n for n in self.nodes.values() if self._is_candidate(n)), key=self.key)
        parent = victim["parent"]
        del parent["children"][victim["hash_id"]]
        del self.nodes[victim["seq"]]
        self.ref0 -= 1
        self.evicted += 1
        if self.fast and parent is not self.root:
            self._push_if_candidate(parent)


class NaiveHashBlocks:
    """vLLM-style hash blocks; ``serve`` runs one request's acquire, publish and release."""

    def __init__(self, page_count: int, fast: bool):
        # key -> the pages caching it, in the order they cached it (a dict used as an ordered set)
        self.cached: dict[tuple, dict[int, None]] = {}
        self.block_of: dict[int, tuple] = {}  # page -> the key of the block cached on it
        self.ref = [0] * page_count
        self.queue = _OrderedQueue(page_count) if fast else _ListQueue(page_count)
        self.evicted = 0

    def serve(self, hash_ids: tuple[int, ...]) -> int | None:
        """Acquire, publish and release ``hash_ids``; matched blocks, or None if it failed."""
        keys = []
        parent = None
        for hash_id in hash_ids:
            parent = (parent, hash_id)  # chained: the parent block's key, then this block
            keys.append(parent)
        pages = []
        for key in keys:
            holders = self.cached.get(key)
            if not holders:
                break
            pages.append(next(iter(holders)))
        matched = len(pages)
        needed = len(keys) - matched
        queued = sum(1 for page in pages if self.ref[page] == 0)
        if len(self.queue) - queued < needed:
            return None
        # acquire
        for page in pages:
            if self.ref[page] == 0:
                self.queue.remove(page)
            self.ref[page] += 1
        for _ in range(needed):
            page = self.queue.pop_head()
            key = self.block_of.pop(page, None)
            if key is not None:  # lazy eviction: the block leaves when its page is reused
                holders = self.cached[key]
                del holders[page]
                if not holders:
                    del self.cached[key]
                self.evicted += 1
            self.ref[page] += 1
            pages.append(page)
        # publish
        for i in range(matched, len(keys)):
            self.block_of[pages[i]] = keys[i]
            self.cached.setdefault(keys[i], {})[pages[i]] = None
        # release
        for page in reversed(pages):
            self.ref[page] -= 1
            if self.ref[page] == 0:
                if page in self.block_of:
                    self.queue.push_tail(page)
                else:
                    self.queue.push_head(page)
        return matched


class _ListQueue:
    """The free queue as a plain list, head first: O(pages) per operation."""

    def __init__(self, page_count: int):
        self.pages = list(range(page_count))

    def __len__(self) -> int:
        return len(self.pages)

    def pop_head(self) -> int:
        return self.pages.pop(0)

    def remove(self, page: int) -> None:
        self.pages.remove(page)

    def push_tail(self, page: int) -> None:
        self.pages.append(page)

    def push_head(self, page: int) -> None:
        self.pages.insert(0, page)


class _OrderedQueue:
    """The free queue as an ``OrderedDict`` (keys in queue order, head first): O(1) each."""

    def __init__(self, page_count: int):
        self.pages = OrderedDict.fromkeys(range(page_count))

    def __len__(self) -> int:
        return len(self.pages)

    def pop_head(self) -> int:
        return self.pages.popitem(last=False)[0]

    def remove(self, page: int) -> None:
        del self.pages[page]

    def push_tail(self, page: int) -> None:
        self.pages[page] = None

    def push_head(self, page: int) -> None:
        self.pages[page] = None
        self.pages.move_to_end(page, last=False)
