# SPDX-License-Identifier: Apache-2.0
"""A naive reference model of kvcore's caches, used as the oracle of the property tests.

It is written to be obviously right rather than fast, and shares no code with kvcore:

- the trie is a plain dict ``path -> ModelNode`` where a path is a tuple of full-page token
  tuples from the root (the root itself is implicit);
- ref counts are never stored: :meth:`ReferenceCache.refs` recomputes them from scratch
  from the live allocations' published prefixes;
- an eviction victim is found by scanning every node for the childless ref-0 ones and
  taking the minimum of the policy's key, written out here from table
  (:func:`policy_key`), not read from kvcore.

Semantics follow DESIGN.md and the API contract: FIFO free list (take from the front,
append freed pages at the back), a logical clock that advances by one per successful
operation only, and failed operations change nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

Block = tuple[int, ...]
Path = tuple[Block, ...]


class ModelInvalid(Exception):
    """The model's InvalidOperation: misuse of the API."""


class ModelAllocationFailure(Exception):
    """The model's CacheAllocationFailure: not enough free + evictable pages."""

    def __init__(self, needed: int, free: int, evictable: int, held: int) -> None:
        super().__init__(f"need {needed} pages: {free} free, {evictable} evictable, {held} held")
        self.needed = needed
        self.free = free
        self.evictable = evictable
        self.held = held


#: table, one key tuple per policy, smallest evicted first.
POLICIES = ("lru", "fifo", "lfu", "mru", "filo", "slru", "priority")


def policy_key(policy: str, node: "ModelNode") -> tuple[int, ...]:
    """The eviction key of ``node`` under ``policy``."""
    return {
        "lru": (node.last_access, node.seq),
        "fifo": (node.seq,),
        "lfu": (node.hits, node.last_access, node.seq),
        "mru": (-node.last_access, node.seq),
        "filo": (-node.seq,),
        "slru": (0 if node.hits < 2 else 1, node.last_access, node.seq),
        "priority": (node.priority, node.last_access, node.seq),
    }[policy]


@dataclass
class ModelNode:
    page: int
    last_access: int
    seq: int
    hits: int = 0  # successful acquires that matched it
    priority: int = 0  # highest priority of the allocations that published or matched it


@dataclass
class ModelAllocation:
    id: int
    name: str | None
    tokens: tuple[int, ...]
    pages: list[int]
    published: int
    hit_tokens: int
    priority: int = 0


@dataclass
class ModelStats:
    lookups: int = 0
    lookup_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0
    dedups: int = 0


@dataclass
class ReferenceCache:
    """Reference behaviour of ``TriePagedAttentionCache`` (kind 'trie') or
    ``BasePagedAttentionCache`` (kind 'base')."""

    kind: str
    page_count: int
    tokens_per_page: int
    policy: str = "lru"
    clock: int = 0
    next_seq: int = 1  # the root is seq 0
    next_allocation_id: int = 0
    free: list[int] = field(default_factory=list)
    nodes: dict[Path, ModelNode] = field(default_factory=dict)
    allocations: dict[int, ModelAllocation] = field(default_factory=dict)
    released: set[int] = field(default_factory=set)
    stats: ModelStats = field(default_factory=ModelStats)
    # Victims of the last successful operation, in eviction order: (path, seq, page).
    last_victims: list[tuple[Path, int, int]] = field(default_factory=list)
    # Nodes deduplicated by the last successful publish (paths).
    last_dedups: list[Path] = field(default_factory=list)
    # Pages the last successful operation took, free ones then evicted ones, in order.
    last_taken: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.kind in ("trie", "base") and self.policy in POLICIES
        if not self.free and not self.nodes and not self.allocations:
            self.free = list(range(self.page_count))

    # ---------------------------------------------------------------- derived state

    def blocks(self, tokens: tuple[int, ...]) -> list[Block]:
        """The full pages spelled by ``tokens``."""
        tpp = self.tokens_per_page
        return [tuple(tokens[i * tpp : (i + 1) * tpp]) for i in range(len(tokens) // tpp)]

    def published_path(self, alloc: ModelAllocation) -> Path:
        return tuple(self.blocks(alloc.tokens)[: alloc.published])

    def refs(self) -> dict[Path, int]:
        """Ref count of every node, recomputed from the live allocations."""
        refs = {path: 0 for path in self.nodes}
        for alloc in self.allocations.values():
            path = self.published_path(alloc)
            for depth in range(1, len(path) + 1):
                refs[path[:depth]] += 1
        return refs

    def has_children(self, path: Path) -> bool:
        return any(len(other) == len(path) + 1 and other[:-1] == path for other in self.nodes)

    def candidates(self) -> list[Path]:
        """Eviction candidates: childless nodes with ref 0 (the root is never one)."""
        refs = self.refs()
        return [p for p in self.nodes if refs[p] == 0 and not self.has_children(p)]

    def evictable_count(self) -> int:
        """Pages that eviction could free: every ref-0 node (a ref-0 subtree cascades)."""
        return sum(1 for r in self.refs().values() if r == 0)

    def node_ids(self) -> dict[Path, int]:
        return {path: node.seq for path, node in self.nodes.items()}

    def page_states(self) -> dict[int, tuple[str, int | None, int | None, int]]:
        """page -> (state, owner allocation id, node id, ref)."""
        refs = self.refs()
        states: dict[int, tuple[str, int | None, int | None, int]] = {}
        for page in self.free:
            states[page] = ("free", None, None, 0)
        for path, node in self.nodes.items():
            states[node.page] = ("cached", None, node.seq, refs[path])
        for alloc in self.allocations.values():
            for page in alloc.pages[alloc.published :]:
                states[page] = ("owned", alloc.id, None, 0)
        return states

    def self_check(self) -> list[str]:
        """The model's own consistency: catches bugs in the model, not in kvcore."""
        problems = []
        places: list[int] = list(self.free) + [n.page for n in self.nodes.values()]
        for alloc in self.allocations.values():
            places += alloc.pages[alloc.published :]
            path = self.published_path(alloc)
            if [self.nodes[path[: d + 1]].page for d in range(len(path))] != alloc.pages[: alloc.published]:
                problems.append(f"allocation {alloc.id}: published pages disagree with the trie")
            if len(alloc.pages) * self.tokens_per_page < len(alloc.tokens):
                problems.append(f"allocation {alloc.id}: pages cannot hold its tokens")
        if sorted(places) != list(range(self.page_count)):
            problems.append(f"pages not partitioned: {sorted(places)}")
        for path in self.nodes:
            if len(path) > 1 and path[:-1] not in self.nodes:
                problems.append(f"orphan node {path}")
        return problems

    # ---------------------------------------------------------------- helpers

    def _pages_for(self, slots: int) -> int:
        return math.ceil(slots / self.tokens_per_page)

    def _live(self, alloc_id: int) -> ModelAllocation:
        if alloc_id in self.released or alloc_id not in self.allocations:
            raise ModelInvalid(f"allocation {alloc_id} was released")
        return self.allocations[alloc_id]

    def _check_capacity(self, needed: int) -> None:
        free = len(self.free)
        evictable = self.evictable_count() if self.kind == "trie" else 0
        if free + evictable < needed:
            held = self.page_count - free - evictable
            raise ModelAllocationFailure(needed, free, evictable, held)

    def _evict_one(self) -> int:
        candidates = self.candidates()
        victim = min(candidates, key=lambda p: policy_key(self.policy, self.nodes[p]))
        node = self.nodes.pop(victim)
        self.stats.evictions += 1
        self.last_victims.append((victim, node.seq, node.page))
        return node.page

    def _take_pages(self, needed: int) -> list[int]:
        taken = []
        while len(taken) < needed:
            taken.append(self.free.pop(0) if self.free else self._evict_one())
        self.last_taken = taken
        return taken

    def _begin(self) -> None:
        self.clock += 1
        self.last_victims = []
        self.last_dedups = []
        self.last_taken = []

    # ---------------------------------------------------------------- operations

    def acquire(self, tokens, extra_token_slots: int = 0, name: str | None = None, priority: int = 0) -> int:
        """Returns the new allocation's id."""
        tokens = tuple(tokens)
        if extra_token_slots < 0:
            raise ModelInvalid("negative extra_token_slots")
        matched: list[Path] = []
        if self.kind == "trie":
            path: Path = ()
            for block in self.blocks(tokens):
                if path + (block,) not in self.nodes:
                    break
                path = path + (block,)
                matched.append(path)
        matched_tokens = len(matched) * self.tokens_per_page
        needed = self._pages_for(len(tokens) - matched_tokens + extra_token_slots)
        alloc = ModelAllocation(
            id=self.next_allocation_id,
            name=name,
            tokens=tokens,
            pages=[self.nodes[p].page for p in matched],
            published=len(matched),
            hit_tokens=matched_tokens,
            priority=priority,
        )
        # Reference the matched path before counting evictable pages: they are not ours to evict.
        self.allocations[alloc.id] = alloc
        try:
            self._check_capacity(needed)
        except ModelAllocationFailure:
            del self.allocations[alloc.id]
            raise
        self._begin()
        self.next_allocation_id += 1
        for path in matched:
            node = self.nodes[path]
            node.last_access = self.clock
            node.hits += 1
            node.priority = max(node.priority, priority)
        self.stats.lookups += 1
        self.stats.lookup_tokens += len(tokens)
        self.stats.hit_tokens += matched_tokens
        alloc.pages += self._take_pages(needed)
        return alloc.id

    def publish(self, alloc_id: int, tokens=None, publish_incomplete_page: bool = False) -> None:
        alloc = self._live(alloc_id)
        if publish_incomplete_page:
            raise ModelInvalid("publish_incomplete_page")
        if tokens is None:
            new_tokens = alloc.tokens
            n_full = len(alloc.tokens) // self.tokens_per_page
        else:
            tokens = tuple(tokens)
            common = min(len(tokens), len(alloc.tokens))
            if tokens[:common] != alloc.tokens[:common]:
                raise ModelInvalid("publish tokens disagree with the allocation's tokens")
            if len(tokens) > len(alloc.pages) * self.tokens_per_page:
                raise ModelInvalid("publish tokens do not fit in the allocation's pages")
            new_tokens = tokens if len(tokens) > len(alloc.tokens) else alloc.tokens
            n_full = len(tokens) // self.tokens_per_page
        self._begin()
        alloc.tokens = new_tokens
        if self.kind == "base":
            return
        blocks = self.blocks(alloc.tokens)
        for depth in range(n_full):
            path = tuple(blocks[: depth + 1])
            if depth < alloc.published:
                self.nodes[path].last_access = self.clock
            elif path in self.nodes:
                # Someone published these tokens first: adopt their page, free ours.
                self.free.append(alloc.pages[depth])
                alloc.pages[depth] = self.nodes[path].page
                self.nodes[path].last_access = self.clock  # adopted: not a hit
                self.nodes[path].priority = max(self.nodes[path].priority, alloc.priority)
                self.stats.dedups += 1
                self.last_dedups.append(path)
            else:
                self.nodes[path] = ModelNode(alloc.pages[depth], self.clock, self.next_seq, 0, alloc.priority)
                self.next_seq += 1
        alloc.published = max(alloc.published, n_full)

    def extend(self, alloc_id: int, tokens, extra_token_slots: int = 0) -> None:
        alloc = self._live(alloc_id)
        tokens = tuple(tokens)
        if extra_token_slots < 0:
            raise ModelInvalid("negative extra_token_slots")
        if tokens[: len(alloc.tokens)] != alloc.tokens or len(tokens) < len(alloc.tokens):
            raise ModelInvalid("extend tokens do not start with the allocation's tokens")
        needed = max(0, self._pages_for(len(tokens) + extra_token_slots) - len(alloc.pages))
        self._check_capacity(needed)
        self._begin()
        alloc.tokens = tokens
        alloc.pages += self._take_pages(needed)

    def release(self, alloc_id: int) -> None:
        alloc = self._live(alloc_id)
        self._begin()
        returned = alloc.pages if self.kind == "base" else alloc.pages[alloc.published :]
        self.free.extend(returned)
        del self.allocations[alloc_id]
        self.released.add(alloc_id)


# -------------------------------------------------------------------- comparable views
#
# Both sides reduce to the same plain structure so a mismatch names the field that
# differs. Nodes are keyed by their token path, not by id, so a wrong id, a wrong parent
# and a wrong page all show up as a difference in the same place. These functions read
# snapshot attributes only; they never import kvcore.

VIEW_FIELDS = (
    "kind", "policy", "tokens_per_page", "page_count", "clock", "next_seq", "next_allocation_id",
    "free", "nodes", "root", "allocations", "pages", "candidates", "stats",
)


def model_view(model: ReferenceCache) -> dict:
    """What the snapshot of a cache in the model's state must say."""
    refs = model.refs()
    states = model.page_states()
    return {
        "kind": model.kind,
        "policy": model.policy,
        "tokens_per_page": model.tokens_per_page,
        "page_count": model.page_count,
        "clock": model.clock,
        "next_seq": model.next_seq,
        "next_allocation_id": model.next_allocation_id,
        "free": tuple(model.free),
        "nodes": {
            path: (node.page, refs[path], node.last_access, node.seq, node.hits, node.priority)
            for path, node in model.nodes.items()
        },
        "root": ((0, None, (), 0),) if model.kind == "trie" else (),
        "allocations": tuple(
            (a.id, a.name, a.tokens, tuple(a.pages), a.published, a.hit_tokens, False, a.priority)
            for a in sorted(model.allocations.values(), key=lambda a: a.id)
        ),
        "pages": tuple((page, *states[page]) for page in range(model.page_count)),
        "candidates": frozenset(model.nodes[p].seq for p in model.candidates()),
        "stats": (model.stats.lookups, model.stats.lookup_tokens, model.stats.hit_tokens,
                  model.stats.evictions, model.stats.dedups),
    }


def snapshot_view(snap) -> dict:
    """The same structure as :func:`model_view`, read from a kvcore snapshot."""
    by_id = {n.id: n for n in snap.nodes}

    def path_of(node) -> Path:
        path = []
        while node.parent is not None:
            path.append(tuple(node.tokens))
            node = by_id[node.parent]
        return tuple(reversed(path))

    return {
        "kind": snap.kind,
        "policy": snap.policy,
        "tokens_per_page": snap.tokens_per_page,
        "page_count": snap.page_count,
        "clock": snap.clock,
        "next_seq": snap.next_seq,
        "next_allocation_id": snap.next_allocation_id,
        "free": tuple(snap.free),
        "nodes": {
            path_of(n): (n.page, n.ref, n.last_access, n.seq, n.hits, n.priority)
            for n in snap.nodes if n.parent is not None
        },
        "root": tuple((n.id, n.page, tuple(n.tokens), n.ref) for n in snap.nodes if n.parent is None),
        "allocations": tuple(
            (a.id, a.name, tuple(a.tokens), tuple(a.pages), a.published, a.hit_tokens, a.released, a.priority)
            for a in snap.allocations
        ),
        "pages": tuple((p.page, p.state, p.owner, p.node, p.ref) for p in snap.pages),
        "candidates": frozenset(snap.heap),
        "stats": (snap.stats.lookups, snap.stats.lookup_tokens, snap.stats.hit_tokens,
                  snap.stats.evictions, snap.stats.dedups),
    }


def view_differences(actual: dict, expected: dict) -> list[str]:
    """Readable field-by-field differences between two views ([] when equal)."""
    out = []
    for key in VIEW_FIELDS:
        if actual[key] != expected[key]:
            if isinstance(expected[key], dict):
                missing = {k: v for k, v in expected[key].items() if k not in actual[key]}
                extra = {k: v for k, v in actual[key].items() if k not in expected[key]}
                wrong = {k: (actual[key][k], v) for k, v in expected[key].items()
                         if k in actual[key] and actual[key][k] != v}
                out.append(f"{key}: missing {missing}, unexpected {extra}, (kvcore, model) {wrong}")
            else:
                out.append(f"{key}: kvcore {actual[key]!r} != model {expected[key]!r}")
    return out
