# SPDX-License-Identifier: Apache-2.0
"""Eviction policies of the trie cache: each one a key per node, smallest evicted first.

The seven policies are SGLang's (``--radix-eviction-policy``). Every key ends in ``seq``
(creation order, unique), so the order is total and the same on every platform:

========== ======================================= ==========================================
policy     key (tuple, as the views name it)       packed int (what the heap compares)
========== ======================================= ==========================================
lru        (last_access, seq)                      last_access << 40 | seq
fifo       (seq,)                                  seq
lfu        (hits, last_access, seq)                hits << 104 | last_access << 40 | seq
mru        (-last_access, seq)                     -last_access << 40 | seq
filo       (-seq,)                                 -seq
slru       (tier, last_access, seq)                tier << 104 | last_access << 40 | seq
priority   (priority, last_access, seq)            priority << 104 | last_access << 40 | seq
========== ======================================= ==========================================

``tier`` is 0 while ``hits < 2`` (probationary), else 1 (protected). Packing is exact
because every field below the leading one is a non-negative int under its width (seq under
2**40, last_access under 2**64: a clock that ticks once per operation) and Python's ``<<``
and ``|`` on a negative leading field give ``lead * 2**k + rest`` (two's complement with
infinite sign bits), so the packed ints order exactly like the tuples, negatives included.

A node's key may change only while the node is referenced (see trie.py): candidates
(childless ref-0 nodes) never change key, so the heap is updated incrementally.
"""

from __future__ import annotations

from collections.abc import Callable

from . import heap
from .heap import pack3, pack_key, unpack3, unpack_key

#: The policies, default first.
POLICIES = ("lru", "fifo", "lfu", "mru", "filo", "slru", "priority")

#: Priorities are ints in ``0 <= priority < MAX_PRIORITY`` (keeps every key below the
#: trie's sentinel ``1 << 200``).
MAX_PRIORITY = 1 << 63

#: The key's fields by name, per policy: what the heap view shows as the key's heading.
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "lru": ("last_access", "seq"),
    "fifo": ("seq",),
    "lfu": ("hits", "last_access", "seq"),
    "mru": ("-last_access", "seq"),
    "filo": ("-seq",),
    "slru": ("tier", "last_access", "seq"),
    "priority": ("priority", "last_access", "seq"),
}

#: Policies whose key of a parent is below its child's when both were touched at one tick
#: (the parent's seq is smaller and nothing else in the key differs): the eviction loop
#: may then evict the parent next without comparing keys. Not lfu, slru or priority (a
#: parent can have more hits or a higher priority than its child) nor filo (``-seq``).
SAME_TICK_PARENT_FIRST = frozenset({"lru", "fifo", "mru"})


def check_policy(policy: object) -> str:
    """``policy`` if it names one of :data:`POLICIES`, else ValueError naming them."""
    if type(policy) is not str or policy not in POLICIES:
        raise ValueError(f"unknown eviction policy {policy!r} (expected one of {', '.join(POLICIES)})")
    return policy


def key_tuple(policy: str, last_access: int, seq: int, hits: int, priority: int) -> tuple[int, ...]:
    """The eviction key of a node with these fields under ``policy``, as a tuple."""
    if policy == "lru":
        return (last_access, seq)
    if policy == "fifo":
        return (seq,)
    if policy == "lfu":
        return (hits, last_access, seq)
    if policy == "mru":
        return (-last_access, seq)
    if policy == "filo":
        return (-seq,)
    if policy == "slru":
        return (0 if hits < 2 else 1, last_access, seq)
    if policy == "priority":
        return (priority, last_access, seq)
    raise ValueError(f"unknown eviction policy {policy!r}")


def pack_tuple(policy: str, key: tuple[int, ...]) -> int:
    """A key tuple of ``policy`` as the packed int the heap compares."""
    if len(key) == 1:
        return key[0]
    if len(key) == 2:
        return pack_key(key[0], key[1])
    return pack3(key[0], key[1], key[2])


def unpack(policy: str, packed: int) -> tuple[int, ...]:
    """Inverse of :func:`pack_tuple` (the invariant checker reads the heap's ints back)."""
    width = len(KEY_FIELDS[policy])
    if width == 1:
        return (packed,)
    if width == 2:
        return unpack_key(packed)
    return unpack3(packed)


def node_key_function(policy: str) -> Callable[[object], int]:
    """The packed key of a live node (anything with ``last_access``, ``seq``, ``hits`` and
    ``priority``), one function per policy so the hot paths make one call and no branch."""
    return _NODE_KEYS[check_policy(policy)]


_NODE_KEYS = {"lru": heap.lru_key, "fifo": heap.fifo_key, "lfu": heap.lfu_key, "mru": heap.mru_key,
              "filo": heap.filo_key, "slru": heap.slru_key, "priority": heap.priority_key}
