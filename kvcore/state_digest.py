# SPDX-License-Identifier: Apache-2.0
"""The state's set digest (:meth:`kvcore.Snapshot.state_digest`): a digest of a snapshot's
rows as a multiset, so that, unlike :meth:`Snapshot.digest` (the sha256 of its canonical
JSON), it can be kept up to date from what a step changed at a cost of two hashes per
changed row. kvviz's JSON timeline writes it for every step (``kvviz run --json``) and
rebuilds it from each step's changes; :func:`state_elements` defines it, :class:`StateDigest`
accumulates it, and the ``*_element`` functions spell the elements for those who track the
changes themselves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from .rows import allocation_row, block_row, canonical_json, node_row, page_row, refuse_serialising, row_text

STATE_DIGEST_SCHEME = "kvcore.state-digest/1"
"""The version of :meth:`Snapshot.state_digest`'s definition (:func:`state_elements`), also
the domain tag of everything it hashes."""

_STATE_DOMAIN = STATE_DIGEST_SCHEME.encode() + b"\n"

#: Bits of the accumulator: the sum of the elements' hashes is taken modulo ``2**2048``.
#: AdHash (Bellare and Micciancio, 1997) is as strong as its modulus is wide: Wagner's
#: k-tree algorithm (2002) finds colliding sums of a 256-bit modulus quickly, so a wide one.
STATE_DIGEST_BITS = 2048
_STATE_BYTES = STATE_DIGEST_BITS // 8
_STATE_MASK = (1 << STATE_DIGEST_BITS) - 1

#: The top-level scalar fields of :meth:`Snapshot.to_dict`, one element each.
STATE_FIELDS = ("schema", "kind", "policy", "tokens_per_page", "page_count", "clock", "next_seq",
                "next_allocation_id", "stats")

#: The tables whose rows carry an id (a node's, an allocation's, a block's).
STATE_TABLES = ("nodes", "allocations", "blocks")


def field_element(name: str, value_text: str) -> str:
    """The element of a scalar field: ``["field",NAME,VALUE]`` (``value_text``: canonical JSON)."""
    return '["field",' + canonical_json(name) + "," + value_text + "]"


def page_element(index: int, row_text: str) -> str:
    """The element of page row ``index``: ``["pages",INDEX,ROW]``."""
    return '["pages",' + str(index) + "," + row_text + "]"


def row_element(table: str, row_text: str) -> str:
    """The element of a row of an id-ordered table: ``["nodes",ROW]`` (or allocations, blocks)."""
    return '["' + table + '",' + row_text + "]"


def placed_element(list_name: str, index: int, item_text: str) -> str:
    """The element of the item at ``index`` of a list read by position: ``["heap",INDEX,ITEM]``;
    also ``["free-at",...]``, ``["nodes-at",...]`` (the fallbacks of :func:`state_elements`)."""
    return '["' + list_name + '",' + str(index) + "," + item_text + "]"


def free_pair_element(before: int | None, after: int | None) -> str:
    """The element of two neighbours of the free list: ``["free",A,B]``, None (``null``) for
    the head's and the tail's side."""
    return ('["free",' + ("null" if before is None else str(before)) + ","
            + ("null" if after is None else str(after)) + "]")


def _row_id(row: Any) -> Any:
    return row.get("id") if isinstance(row, dict) else (row[0] if isinstance(row, list) and row else None)


def ids_increase(rows: Sequence) -> bool:
    """True when ``rows`` (to_dict rows: lists or dicts) carry int ids, strictly increasing."""
    last = None
    for row in rows:
        row_id = _row_id(row)
        if type(row_id) is not int or (last is not None and row_id <= last):
            return False
        last = row_id
    return True


def state_elements(state: dict[str, Any]) -> Iterator[str]:
    """The elements of a state (a :meth:`Snapshot.to_dict`), a multiset whose
    :class:`StateDigest` is :meth:`Snapshot.state_digest`. Each element is a JSON array
    written canonically (as :meth:`Snapshot.to_json`: sorted keys, no whitespace, ASCII):

    - ``["field",NAME,VALUE]`` for each of :data:`STATE_FIELDS` (``stats`` is its object);
    - ``["pages",I,ROW]`` for each page row, ``I`` its index in ``pages``;
    - ``["nodes",ROW]``, ``["allocations",ROW]`` and (``kind`` ``hash`` only, as ``to_dict``)
      ``["blocks",ROW]`` for each row of a table that lists its rows by strictly increasing
      int id (kvcore always does): the ids fix the order. A table that does not: ``[T-at,I,ROW]``
      (``"nodes-at"``, ...) for each row at index ``I``;
    - the free list, when no page is in it twice (invariants 1 and 7): ``["free",A,B]`` for
      each pair of neighbours of ``[HEAD] + free + [TAIL]``, HEAD and TAIL written ``null``
      (an empty list: one ``["free",null,null]``); a list of distinct items is fixed by its
      neighbour pairs, and a page taken or given anywhere changes two or three of them. A
      free list with a page twice: ``["free-at",I,PAGE]`` for each position;
    - ``["heap",I,NODE]`` for each position of the heap array (a sift moves a few).

    Hashing (:class:`StateDigest`): ``H(e)`` is the big-endian integer of the 256 bytes of
    ``shake_256(b"kvcore.state-digest/1\\n" + e)``; the accumulator is the sum of ``H`` over
    the elements (with multiplicity) modulo ``2**2048``; the digest is the hex sha256 of
    ``b"kvcore.state-digest/1\\n"`` and the accumulator's 256 big-endian bytes.
    """
    for name in STATE_FIELDS:
        yield field_element(name, canonical_json(state[name]))
    for i, row in enumerate(state["pages"]):
        yield page_element(i, canonical_json(row))
    for table in STATE_TABLES:
        if table == "blocks" and state.get("kind") != "hash":
            continue
        rows = state[table]
        if ids_increase(rows):
            for row in rows:
                yield row_element(table, canonical_json(row))
        else:
            for i, row in enumerate(rows):
                yield placed_element(table + "-at", i, canonical_json(row))
    yield from free_elements(state["free"])
    for i, node in enumerate(state["heap"]):
        yield placed_element("heap", i, str(node))


def free_elements(free: Sequence[int]) -> Iterator[str]:
    """The free list's elements (:func:`state_elements`): neighbour pairs, or positions when
    a page is listed twice."""
    free = list(free)
    if len(set(free)) == len(free):
        yield from map(free_pair_element, [None] + free, free + [None])
    else:
        for i, page in enumerate(free):
            yield placed_element("free-at", i, str(page))


class StateDigest:
    """The AdHash accumulator of :meth:`Snapshot.state_digest`: :meth:`add` and
    :meth:`remove` elements (:func:`state_elements`' texts) one at a time, so a state's
    digest follows a step's changes at a cost of two hashes per element changed.

    ``hashed`` and ``hashed_bytes`` count the elements and bytes hashed so far: what a
    step cost, for tests and benchmarks that count work instead of timing it."""

    __slots__ = ("total", "hashed", "hashed_bytes")

    def __init__(self) -> None:
        self.total = 0
        self.hashed = 0
        self.hashed_bytes = 0

    @classmethod
    def of_state(cls, state: dict[str, Any]) -> "StateDigest":
        """The accumulator of a whole state (a :meth:`Snapshot.to_dict`), O(the state)."""
        digest = cls()
        for element in state_elements(state):
            digest.add(element)
        return digest

    @classmethod
    def of_snapshot(cls, snap) -> "StateDigest":
        """The accumulator of ``snap``, equal to ``of_state(snap.to_dict())`` (a test holds it
        to that) without building the dict: rows :meth:`Snapshot.to_json` encoded last are
        not encoded again. O(the state): a whole state's start."""
        refuse_serialising(snap)
        text = row_text
        digest = cls()
        add = digest.add
        stats = {"lookups": snap.stats.lookups, "lookup_tokens": snap.stats.lookup_tokens,
                 "hit_tokens": snap.stats.hit_tokens, "evictions": snap.stats.evictions, "dedups": snap.stats.dedups}
        for name in STATE_FIELDS:
            add(field_element(name, canonical_json(stats if name == "stats" else getattr(snap, name))))
        for i, page in enumerate(snap.pages):
            add(page_element(i, text(page, page_row)))
        tables = (("nodes", node_row), ("allocations", allocation_row)) + (
            (("blocks", block_row),) if snap.kind == "hash" else ())
        for table, convert in tables:
            rows = getattr(snap, table)
            ids = [r.id for r in rows]
            if all(type(i) is int for i in ids) and all(map(int.__lt__, ids, ids[1:])):
                for row in rows:
                    add(row_element(table, text(row, convert)))
            else:
                for i, row in enumerate(rows):
                    add(placed_element(table + "-at", i, text(row, convert)))
        for element in free_elements(snap.free):
            add(element)
        for i, node in enumerate(snap.heap):
            add(placed_element("heap", i, canonical_json(node)))
        return digest

    def _hash(self, element: str) -> int:
        data = _STATE_DOMAIN + element.encode()
        self.hashed += 1
        self.hashed_bytes += len(data)
        return int.from_bytes(hashlib.shake_256(data).digest(_STATE_BYTES), "big")

    def add(self, element: str) -> None:
        """Count ``element`` in (once more)."""
        self.total = (self.total + self._hash(element)) & _STATE_MASK

    def remove(self, element: str) -> None:
        """Count ``element`` out (once): the state no longer holds it."""
        self.total = (self.total - self._hash(element)) & _STATE_MASK

    def hexdigest(self) -> str:
        """The digest of the elements counted: hex sha256 of the domain tag and the
        accumulator's bytes (64 characters, as :meth:`Snapshot.digest`)."""
        return hashlib.sha256(_STATE_DOMAIN + self.total.to_bytes(_STATE_BYTES, "big")).hexdigest()

    def copy(self) -> "StateDigest":
        """An independent accumulator with the same elements (and counts)."""
        out = StateDigest()
        out.total, out.hashed, out.hashed_bytes = self.total, self.hashed, self.hashed_bytes
        return out
