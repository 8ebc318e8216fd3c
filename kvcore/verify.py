# SPDX-License-Identifier: Apache-2.0
"""What ``restore(snapshot, verify=True)`` refuses, and why.

Verify means: the restored cache's snapshot equals the one given, or the snapshot is
refused with the reason. Three steps, cheapest first:

1. :func:`refusal`: fields no kvcore cache can have (a negative clock, an allocation id at
   or above ``next_allocation_id``, two allocations with one id, a page table whose length
   is not ``page_count``, ...). Bounded by the snapshot's own size: nothing here allocates
   per page of ``page_count``, so ``page_count=2**40`` in a 1 KB snapshot is refused at once.
2. the invariants (docs/invariants.md) (:func:`kvcore.invariants.check_snapshot`).
3. After the cache is built, :func:`first_difference` between the snapshot given and the
   restored cache's own: anything the first two steps missed (a base snapshot with trie
   nodes, a root numbered 5, rows out of order, ...) shows up as a difference.
"""

from __future__ import annotations

from dataclasses import fields

from .policies import CLOCK_BITS, MAX_PRIORITY, POLICIES, SEQ_BITS, SEQ_MASK
from .pool import MAX_PAGE_COUNT
from .snapshot import SCHEMA, Snapshot, untouched_free

#: Exclusive upper bounds of the counters a restored cache goes on from. A packed heap key
#: (kvcore/policies.py) holds ``last_access`` in 64 bits and ``seq`` in 40: a clock or next node
#: id at the edge of its field would make the next op's key overflow into the field above,
#: and the cache would then refuse its own snapshot. Half of each field leaves a restored
#: cache room for as many ops (2**63) and nodes (2**39) again as it can have had.
FIELD_LIMITS = {"clock": 1 << (CLOCK_BITS - 1), "next_seq": 1 << (SEQ_BITS - 1), "page_count": MAX_PAGE_COUNT}


def _int(v: object) -> bool:
    return type(v) is int


def refusal(snapshot: Snapshot, kind: str) -> str | None:
    """Why ``snapshot`` cannot be a state of a ``kind`` cache, or None. O(snapshot size)."""
    if not isinstance(snapshot, Snapshot):
        return f"expected a Snapshot, got {type(snapshot).__name__}"
    s = snapshot
    if s.schema != SCHEMA:
        return f"unsupported schema {s.schema!r} (expected {SCHEMA!r})"
    if s.kind != kind:
        return f"a {s.kind} snapshot cannot be restored as a {kind} cache"
    if s.policy not in POLICIES:
        return f"unknown eviction policy {s.policy!r} (expected one of {', '.join(POLICIES)})"
    if s.kind == "base" and s.policy != "lru":
        return f"a base cache never evicts; its snapshots say policy 'lru', not {s.policy!r}"
    if s.kind == "hash" and s.policy != "lru":
        return f"a hash cache's free queue is its only order; its snapshots say policy 'lru', not {s.policy!r}"
    for name, low in (("tokens_per_page", 1), ("page_count", 0), ("clock", 0), ("next_seq", 1),
                      ("next_allocation_id", 0)):
        value = getattr(s, name)
        high = FIELD_LIMITS.get(name)
        if not _int(value) or value < low or high is not None and value >= high:
            bound = f">= {low}" if high is None else f"from {low} to 2**{high.bit_length() - 1} - 1"
            return f"{name} is {value!r}; it must be an integer {bound}"
    for name in ("lookups", "lookup_tokens", "hit_tokens", "evictions", "dedups"):
        value = getattr(s.stats, name)
        if not _int(value) or value < 0:
            return f"stats.{name} is {value!r}; it must be an integer >= 0"
    if s.stats.hit_tokens > s.stats.lookup_tokens:
        return f"stats: {s.stats.hit_tokens} hit tokens of {s.stats.lookup_tokens} looked up"
    if len(s.pages) != s.page_count:  # before anything is built per page
        return f"the page table has {len(s.pages)} rows for a pool of {s.page_count} pages"
    if len(s.free) > s.page_count:
        return f"the free list has {len(s.free)} entries for a pool of {s.page_count} pages"
    stored, _ = untouched_free(s.free)  # a lazy free list's untouched run is ints by construction
    if not all(map(_int, stored)):
        return "the free list holds something other than page numbers"
    return _allocations_refusal(s) or _nodes_refusal(s) or _blocks_refusal(s)


def why_not_restorable(snapshot: Snapshot, kind: str) -> str | None:
    """Steps 1 and 2: :func:`refusal`, then the first broken invariant; None when both pass."""
    from .invariants import check_snapshot

    why = refusal(snapshot, kind)
    if why is None:
        violations = check_snapshot(snapshot)
        why = f"inconsistent: {violations[0]}" if violations else None
    return why


def _allocations_refusal(s: Snapshot) -> str | None:
    ids: set[int] = set()
    for a in s.allocations:
        if not _int(a.id) or a.id < 0:
            return f"allocation id {a.id!r} is not a non-negative integer"
        if a.id in ids:
            return f"two allocations have id {a.id}"
        ids.add(a.id)
        if a.id >= s.next_allocation_id:
            return (f"allocation {a.id} is live but next_allocation_id is {s.next_allocation_id}: "
                    "the next acquire would reuse its id")
        if a.released:
            return f"allocation {a.label} is marked released; snapshots list live allocations only"
        if a.name is not None and type(a.name) is not str:
            return f"allocation {a.id} has name {a.name!r}; names are strings"
        if not all(map(_int, a.tokens)) or not all(map(_int, a.pages)):
            return f"allocation {a.label} holds tokens or pages that are not integers"
        if not _int(a.priority) or not 0 <= a.priority < MAX_PRIORITY:
            return f"allocation {a.label} has priority {a.priority!r}; it must be an integer from 0 to 2**63 - 1"
        if not _int(a.published) or not 0 <= a.published <= len(a.pages):
            return f"allocation {a.label} claims {a.published!r} published pages of {len(a.pages)}"
        if not _int(a.hit_tokens) or not 0 <= a.hit_tokens <= len(a.tokens):
            return f"allocation {a.label} claims {a.hit_tokens!r} hit tokens of {len(a.tokens)}"
        # Hits are whole matched pages; the base cache matches nothing.
        if a.hit_tokens % s.tokens_per_page or (a.hit_tokens and s.kind == "base"):
            return f"allocation {a.label} claims {a.hit_tokens} hit tokens: not whole pages a {s.kind} cache matched"
    return None


def _nodes_refusal(s: Snapshot) -> str | None:
    for n in s.nodes:
        if not _int(n.id):
            return f"node id {n.id!r} is not an integer"
        if n.id >= s.next_seq:
            return f"node {n.id} is not below next_seq {s.next_seq}: the next node created would reuse its id"
        for name, high in (("ref", None), ("last_access", 1 << CLOCK_BITS), ("seq", SEQ_MASK + 1),
                           ("hits", 1 << CLOCK_BITS), ("priority", MAX_PRIORITY)):
            value = getattr(n, name)
            if not _int(value) or value < 0 or high is not None and value >= high:
                bound = f"from 0 to {high - 1}" if high is not None else ">= 0"
                return f"node {n.id} has {name} {value!r}; it must be an integer {bound}"
        if not isinstance(n.tokens, tuple) or not all(map(_int, n.tokens)):
            return f"node {n.id} holds tokens that are not a tuple of integers"
        if n.parent is None and n.ref:
            return f"the root has ref {n.ref}; no allocation references the root"
    if not all(map(_int, s.heap)):
        return "the heap lists something other than node ids"
    return None


def _blocks_refusal(s: Snapshot) -> str | None:
    """Cached blocks of the right types (a hash snapshot; others must have none)."""
    if s.blocks and s.kind != "hash":
        return f"a {s.kind} snapshot lists cached blocks; only a hash cache's has them"
    for b in s.blocks:
        if not _int(b.id) or not _int(b.page):
            return f"cached block {b.id!r} has an id or page that is not an integer"
        if type(b.key) is not str or b.parent is not None and type(b.parent) is not str:
            return f"cached block {b.id} has a key or parent key that is not a string"
        if not isinstance(b.tokens, tuple) or not all(map(_int, b.tokens)):
            return f"cached block {b.id} holds tokens that are not a tuple of integers"
        if type(b.reachable) is not bool:
            return f"cached block {b.id} says reachable={b.reachable!r}; it must be true or false"
    return None


def first_difference(given: Snapshot, restored: Snapshot) -> str | None:
    """The first field (and row) where two snapshots differ, or None when they are equal."""
    for f in fields(Snapshot):
        if not f.compare:
            continue
        a, b = getattr(given, f.name), getattr(restored, f.name)
        if a == b:
            continue
        if isinstance(a, (tuple, list)) or hasattr(a, "__getitem__") and not isinstance(a, str):
            try:
                for i, (x, y) in enumerate(zip(a, b)):
                    if x != y:
                        return f"{f.name}[{i}] is {x!r} in the snapshot but {y!r} once restored"
                return f"{f.name} has {len(a)} entries in the snapshot but {len(b)} once restored"
            except TypeError:
                pass
        return f"{f.name} is {a!r} in the snapshot but {b!r} once restored"
    return None
