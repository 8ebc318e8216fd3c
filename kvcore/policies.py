# SPDX-License-Identifier: Apache-2.0
"""Eviction policies of the trie cache: each one a key per node, smallest evicted first.

The seven policies are SGLang's (``--radix-eviction-policy``), one :class:`Policy` row each
in :data:`POLICY_TABLE`: the key's fields, the packed int the heap compares (the key as a
tuple is that int read back), and whether a parent touched at the same tick as its child is
evicted after it without comparing keys. Every key ends in ``seq`` (creation order, unique), so the order is
total and the same on every platform:

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
from dataclasses import dataclass
from typing import NamedTuple

#: Bits reserved for ``seq`` in a packed key. 2**40 nodes will never exist in one process.
SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1

#: Bits of ``last_access`` in a three-field key: a clock ticking once per operation stays
#: below 2**64.
CLOCK_BITS = 64
_LEAD_SHIFT = SEQ_BITS + CLOCK_BITS  # where the leading field of a three-field key starts
_CLOCK_MASK = (1 << CLOCK_BITS) - 1

#: Priorities are ints in ``0 <= priority < MAX_PRIORITY`` (keeps every key below the
#: trie's sentinel ``1 << 200``).
MAX_PRIORITY = 1 << 63


def pack_key(last_access: int, seq: int) -> int:
    """``(last_access, seq)`` as one int with the same order."""
    return (last_access << SEQ_BITS) | seq


def unpack_key(key: int) -> tuple[int, int]:
    """Inverse of :func:`pack_key`."""
    return key >> SEQ_BITS, key & SEQ_MASK


def pack3(lead: int, last_access: int, seq: int) -> int:
    """``(lead, last_access, seq)`` as one int with the same order (``lead`` may be negative)."""
    return (lead << _LEAD_SHIFT) | (last_access << SEQ_BITS) | seq


def unpack3(key: int) -> tuple[int, int, int]:
    """Inverse of :func:`pack3`."""
    return key >> _LEAD_SHIFT, (key >> SEQ_BITS) & _CLOCK_MASK, key & SEQ_MASK


class _Fields(NamedTuple):
    """A node's key fields, for :meth:`Policy.key` (a live node or a ``NodeInfo`` has them too)."""

    last_access: int
    seq: int
    hits: int
    priority: int


@dataclass(frozen=True)
class Policy:
    """One eviction policy: everything kvcore knows of it, in one row.

    ``node_key(node)`` is the key, packed into the int the heap compares, read off anything
    with ``last_access``, ``seq``, ``hits`` and ``priority`` (a live node, a ``NodeInfo``);
    the key as a tuple (what views and events show, its fields named by ``fields``) is that
    int read back (:meth:`key_of`), so each policy's key is written once. ``parent_first``: a
    parent's key is below its child's when both were touched at one tick (the parent's seq is
    smaller and nothing else in the key differs), so the eviction loop may evict the parent
    next without comparing keys; not lfu, slru or priority (a parent can have more hits or a
    higher priority than its child) nor filo (``-seq``)."""

    name: str
    fields: tuple[str, ...]
    node_key: Callable[[object], int]
    parent_first: bool

    def key_of(self, node) -> tuple[int, ...]:
        """``node``'s key as a tuple: its packed key unpacked by the key's width."""
        return unpack_width(len(self.fields), self.node_key(node))

    def key(self, last_access: int, seq: int, hits: int, priority: int) -> tuple[int, ...]:
        """The key tuple of a node with these fields."""
        return self.key_of(_Fields(last_access, seq, hits, priority))


# Each packing written out (not through pack_key/pack3): one Python call per key on the
# trie's hot paths.
#: Every policy, default first (lru).
POLICY_TABLE: dict[str, Policy] = {p.name: p for p in (
    Policy("lru", ("last_access", "seq"), lambda n: (n.last_access << SEQ_BITS) | n.seq, True),
    Policy("fifo", ("seq",), lambda n: n.seq, True),
    Policy("lfu", ("hits", "last_access", "seq"),
           lambda n: (n.hits << _LEAD_SHIFT) | (n.last_access << SEQ_BITS) | n.seq, False),
    Policy("mru", ("-last_access", "seq"), lambda n: (-n.last_access << SEQ_BITS) | n.seq, True),
    Policy("filo", ("-seq",), lambda n: -n.seq, False),
    Policy("slru", ("tier", "last_access", "seq"),
           lambda n: ((n.hits >= 2) << _LEAD_SHIFT) | (n.last_access << SEQ_BITS) | n.seq, False),
    Policy("priority", ("priority", "last_access", "seq"),
           lambda n: (n.priority << _LEAD_SHIFT) | (n.last_access << SEQ_BITS) | n.seq, False),
)}

#: The policies' names, default first.
POLICIES = tuple(POLICY_TABLE)

#: The key's fields by name, per policy: what the heap view shows as the key's heading.
KEY_FIELDS: dict[str, tuple[str, ...]] = {name: p.fields for name, p in POLICY_TABLE.items()}


def check_policy(policy: object) -> Policy:
    """The row of ``policy`` if it names one of :data:`POLICIES`, else ValueError naming them."""
    row = POLICY_TABLE.get(policy) if type(policy) is str else None
    if row is None:
        raise ValueError(f"unknown eviction policy {policy!r} (expected one of {', '.join(POLICIES)})")
    return row


def key_tuple(policy: str, last_access: int, seq: int, hits: int, priority: int) -> tuple[int, ...]:
    """The eviction key of a node with these fields under ``policy``, as a tuple."""
    return check_policy(policy).key(last_access, seq, hits, priority)


def pack_tuple(key: tuple[int, ...]) -> int:
    """A key tuple (of any policy: its length says how it packs) as the packed int the heap
    compares."""
    if len(key) == 1:
        return key[0]
    if len(key) == 2:
        return pack_key(key[0], key[1])
    return pack3(key[0], key[1], key[2])


def unpack(policy: str, packed: int) -> tuple[int, ...]:
    """Inverse of :func:`pack_tuple` (the invariant checker reads the heap's ints back)."""
    return unpack_width(len(check_policy(policy).fields), packed)


def unpack_width(width: int, packed: int) -> tuple[int, ...]:
    """A packed key of ``width`` fields as its tuple."""
    if width == 1:
        return (packed,)
    if width == 2:
        return unpack_key(packed)
    return unpack3(packed)


def node_key_function(policy: str) -> Callable[[object], int]:
    """The packed key of a live node (anything with ``last_access``, ``seq``, ``hits`` and
    ``priority``), one function per policy so the hot paths make one call and no branch."""
    return check_policy(policy).node_key
