# SPDX-License-Identifier: Apache-2.0
"""A step's state written as what changed since the step before, and read back.

``kvviz run --json`` (schema ``kvviz.timeline/2``) writes its first state whole
(:meth:`kvcore.Snapshot.to_dict`) and every later one as a ``changes`` object: the rows that
are not the previous state's, the ids of the rows gone, and edits of the two ordered lists
(``free``, ``heap``). A step then costs what its op changed, not the pool: a 600-step trace
slice of 5,537 pages is up to 332 KB per whole state, about 2.5 KB per step line after the first.

:class:`StateWriter` computes the changes (from the rows the cache says changed,
:class:`kvcore.snapshot.SnapshotChanges`, when it says so; else by comparing the two
snapshots) and each state's digest, the sha256 of its canonical JSON, from per-row texts it
keeps up to date, so the whole text is joined in C, never re-encoded. :class:`StateReader`
applies changes back; a test rebuilds every step of the demos and a trace slice with it and
holds each to the session's own snapshot and digest (the oracle).

The ``changes`` object (every key present; ``kvviz help json`` documents them):

- ``clock``, ``next_seq``, ``next_allocation_id``, ``stats``: the new values (a few numbers).
- ``pages``: the page rows that changed, whole (``[page, state, owner, node, ref]``), by page.
- ``nodes`` / ``allocations`` (and ``blocks`` in a hash cache's): the rows that are new or
  changed, whole, by id; a new id goes after every row kept (ids grow), a known one replaces
  its row in place. ``nodes_gone`` / ``allocations_gone`` / ``blocks_gone``: ids of rows gone.
- ``free`` / ``heap``: list edits, ``[start, delete, [items]]``, applied in order as
  ``items_list[start:start + delete] = items``; ``start`` counts in the list as edited so far.

The other snapshot fields (schema, kind, policy, tokens_per_page, page_count) never change
within a run; a state where they would, or whose rows a backend reordered, is written whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import compress
from operator import attrgetter, ne
from typing import Any

from kvcore import Snapshot
# The snapshot format's own row encoders: the texts kept here are the rows to_json writes.
from kvcore.snapshot import FreePages, QueuedPages, _allocation_row, _block_row, _node_row, _page_row

from .designs import design_of

FORMAT = "changes/1"
"""The version of the ``changes`` object (within ``kvviz.timeline/2``)."""

_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode  # Snapshot.to_json's settings

#: Fields that never change within one run: a state where one does is written whole.
FIXED = ("schema", "kind", "policy", "tokens_per_page", "page_count")

#: The keyed row tables: (the snapshot's attribute and JSON key, the row encoder, the key of
#: the ids gone). ``blocks`` is a hash cache's only.
TABLES = (("nodes", _node_row, "nodes_gone"), ("allocations", _allocation_row, "allocations_gone"))
BLOCKS = ("blocks", _block_row, "blocks_gone")

_id_of = attrgetter("id")


# -- list edits ----------------------------------------------------------------------------------


def list_edits(old: Sequence, new: Sequence) -> list[list]:
    """Edits ``[start, delete, [items]]`` that turn ``old`` into ``new`` when applied in order
    (:func:`apply_list_edits`), short where the change is: a free list's pages taken at its
    front and given at its back, a heap's slots moved by a sift, a few pages inserted or
    removed anywhere. Comparisons run on slices (in C), so unchanged stretches cost little.
    """
    old, new = tuple(old), tuple(new)
    if old == new:
        return []
    n, m = len(old), len(new)
    p = _common_prefix(old, new)
    s = _common_suffix(old, new, min(n, m) - p)
    om, nm = old[p:n - s], new[p:m - s]
    best = [[p, len(om), list(nm)]]  # one splice of the whole middle: always right
    for candidate in (_queue_edits, _subsequence_edits, _slot_edits):
        edits = candidate(om, nm, p, _size(best))
        if edits is not None and _size(edits) < _size(best):
            best = edits
    return best


def apply_list_edits(items: list, edits: list) -> list:
    """Apply :func:`list_edits` output to ``items`` in place (and return it)."""
    for start, delete, inserted in edits:
        items[start:start + delete] = inserted
    return items


def _size(edits: list) -> int:
    return sum(3 + len(e[2]) for e in edits)


def _common_prefix(a: tuple, b: tuple) -> int:
    """Length of the longest common prefix: a binary search of slice comparisons (C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: tuple, b: tuple, most: int) -> int:
    """Length of the longest common suffix, at most ``most``."""
    lo, hi = 0, most
    n, m = len(a), len(b)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[n - mid:] == b[m - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _queue_edits(om: tuple, nm: tuple, at: int, budget: int) -> list | None:
    """A FIFO's change: some items gone from the front and some added at the back (``om``'s
    tail is ``nm``'s head), or some added at the front and back of ``om`` (it lies in ``nm``)."""
    if om and nm:
        try:
            d = om.index(nm[0])  # items dropped from the front
        except ValueError:
            d = None
        if d is not None and om[d:] == nm[:len(om) - d]:
            return [[at, d, []], [at + len(om) - d, 0, list(nm[len(om) - d:])]]
        try:
            h = nm.index(om[0])  # items added at the front
        except ValueError:
            h = None
        if h is not None and nm[h:h + len(om)] == om:
            return [[at, 0, list(nm[:h])], [at + h + len(om), 0, list(nm[h + len(om):])]]
    return None


def _subsequence_edits(om: tuple, nm: tuple, at: int, budget: int) -> list | None:
    """Items removed anywhere (``nm`` is ``om`` without some) or inserted anywhere (``om`` is
    ``nm`` without some): one edit per run. A walk in Python, so tried only when the length
    difference is well under the best edits found so far."""
    short, long_ = (nm, om) if len(nm) < len(om) else (om, nm)
    if len(long_) - len(short) > budget // 4 or not short:
        return None
    edits: list[list] = []
    i = 0
    for j, item in enumerate(long_):
        if i < len(short) and short[i] == item:
            i += 1
            continue
        # long_[j] is not matched: removed from om (the edited list is nm[:i] + om[j:]) or
        # inserted into nm (the edited list is nm[:j] + om[i:]).
        if len(nm) < len(om):
            start = at + i  # in the edited list, removed items before it are gone
            if edits and edits[-1][0] == start:
                edits[-1][1] += 1
            else:
                edits.append([start, 1, []])
        else:
            start = at + j
            if edits and edits[-1][0] + len(edits[-1][2]) == start:
                edits[-1][2].append(item)
            else:
                edits.append([start, 0, [item]])
        if _size(edits) >= budget:
            return None
    return edits if i == len(short) else None


def _slot_edits(om: tuple, nm: tuple, at: int, budget: int) -> list | None:
    """A heap's change: slots whose item changed, in runs, then the tail grown or cut."""
    k = min(len(om), len(nm))
    slots = list(compress(range(k), map(ne, om[:k], nm[:k])))  # compared in C
    if 3 * len(slots) >= budget:
        return None
    edits: list[list] = []
    for i in slots:
        if edits and edits[-1][0] + edits[-1][1] == at + i:
            edits[-1][1] += 1
            edits[-1][2].append(nm[i])
        else:
            edits.append([at + i, 1, [nm[i]]])
    if len(om) != len(nm):
        edits.append([at + k, len(om) - k, list(nm[k:])])
    return edits


def free_list_edits(old: Sequence[int], new: Sequence[int]) -> list[list]:
    """:func:`list_edits` of two free lists, read from what a big pool's lazy lists store:
    the pages never handed out are a run (``untouched_from ..``) that only shrinks from its
    front, so only the pages listed around it are compared (O(pages used), not O(pool))."""
    if isinstance(old, FreePages) and isinstance(new, FreePages) and old.page_count == new.page_count \
            and new.untouched_from >= old.untouched_from:
        taken = new.untouched_from - old.untouched_from  # the run comes first
        edits = [[0, taken, []]] if taken else []
        return edits + _shifted(list_edits(old.returned, new.returned), new.page_count - new.untouched_from)
    if isinstance(old, QueuedPages) and isinstance(new, QueuedPages) and old.page_count == new.page_count \
            and new.untouched_from >= old.untouched_from:
        edits = list_edits(old.head, new.head)  # head, then the run, then the tail
        taken = new.untouched_from - old.untouched_from
        if taken:
            edits.append([len(new.head), taken, []])
        return edits + _shifted(list_edits(old.tail, new.tail), len(new.head) + new.page_count - new.untouched_from)
    return list_edits(old, new)


def _shifted(edits: list[list], by: int) -> list[list]:
    for edit in edits:
        edit[0] += by
    return edits


def free_list_parts(free: Sequence[int]) -> list[bytes]:
    """``free`` as canonical JSON, in encoded pieces; a lazy list's run of untouched pages is
    cut from one text of the whole pool's page numbers, made once, not written number by
    number at every step."""
    if isinstance(free, FreePages):
        parts = [_run_text(free.untouched_from, free.page_count), _ints(free.returned)[1:-1].encode()]
    elif isinstance(free, QueuedPages):
        parts = [_ints(free.head)[1:-1].encode(), _run_text(free.untouched_from, free.page_count),
                 _ints(free.tail)[1:-1].encode()]
    else:
        return [_ints(free).encode()]
    out = [b"["]
    for part in parts:
        if part:
            if len(out) > 1:
                out.append(b",")
            out.append(part)
    out.append(b"]")
    return out


_RUNS: dict[int, bytes] = {}  # page_count -> b"0,1,...,page_count-1"


def _run_text(start: int, stop: int) -> bytes:
    """``",".join(map(str, range(start, stop)))`` encoded, cut from the text of ``range(stop)``."""
    if start >= stop:
        return b""
    whole = _RUNS.get(stop)
    if whole is None:
        if len(_RUNS) > 4:
            _RUNS.clear()
        whole = _RUNS[stop] = ",".join(map(str, range(stop))).encode()
    return whole[_offset(start):]


def _offset(n: int) -> int:
    """Where number ``n`` starts in ``",".join(map(str, range(N)))``: each number before it
    takes its digits and a comma."""
    offset, low, digits = 0, 0, 1
    while low < n:
        high = min(n, 10 ** digits)
        offset += (high - low) * (digits + 1)
        low, digits = high, digits + 1
    return offset


# -- keyed rows ----------------------------------------------------------------------------------


def _by_id(rows: Sequence, row_id: int):
    """The row with this id in ``rows`` (listed by id, as kvcore lists them), or None."""
    i = bisect_left(rows, row_id, key=_id_of)
    return rows[i] if i < len(rows) and rows[i].id == row_id else None


class RowTexts:
    """Row texts by a growing int key (a page number, a row id), in key order, kept in
    chunks of 256 keys, each joined again only when one of its rows changed: the text of a
    whole table then costs the rows changed plus a join of the chunks, not a join of every
    row (5,537 pages: 0.7 ms a state, most of writing a step)."""

    __slots__ = ("_chunks", "_joined", "_count")
    SHIFT = 8

    def __init__(self, items: Iterable[tuple[int, str]] = ()):
        self._chunks: dict[int, dict[int, str]] = {}
        self._joined: dict[int, bytes] = {}
        self._count = 0
        for key, text in items:
            self[key] = text

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: int) -> bool:
        chunk = self._chunks.get(key >> self.SHIFT)
        return chunk is not None and key in chunk

    def last_key(self) -> int | None:
        """The largest key held (keys are kept in order), or None."""
        for chunk in reversed(self._chunks.values()):
            if chunk:
                return next(reversed(chunk))
        return None

    def __setitem__(self, key: int, text: str) -> None:
        c = key >> self.SHIFT
        chunk = self._chunks.get(c)
        if chunk is None:
            chunk = self._chunks[c] = {}  # a later chunk than every other: keys grow
        if key not in chunk:
            self._count += 1
        chunk[key] = text
        self._joined.pop(c, None)

    def pop(self, key: int) -> str | None:
        """Forget ``key``'s row; its text, or None when it had none."""
        c = key >> self.SHIFT
        chunk = self._chunks.get(c)
        text = None if chunk is None else chunk.pop(key, None)
        if text is not None:
            self._count -= 1
            self._joined.pop(c, None)
        return text

    def parts(self) -> list[bytes]:
        """``[row,row,...]``, the rows' texts in key order as one JSON list, in pieces (the
        chunks' texts, ASCII, kept encoded): hashed piece by piece, never joined whole."""
        joined = self._joined
        parts = [b"["]
        for c, chunk in self._chunks.items():
            if chunk:
                text = joined.get(c)
                if text is None:
                    text = joined[c] = ",".join(chunk.values()).encode()
                if len(parts) > 1:
                    parts.append(b",")
                parts.append(text)
        parts.append(b"]")
        return parts


class _Table:
    """One keyed row table of the last state written: each row's text by id, in order."""

    __slots__ = ("name", "encode", "gone_key", "texts", "by_id")

    def __init__(self, name: str, encode, gone_key: str, rows: Sequence):
        self.name, self.encode, self.gone_key = name, encode, gone_key
        self.by_id = _sorted_ids(rows)  # else every later state is written whole
        self.texts = RowTexts((r.id, _encode(encode(r))) for r in rows) if self.by_id else RowTexts()

    def parts(self) -> list[bytes]:
        return self.texts.parts()

    def changes(self, old: Sequence, new: Sequence, ids: Sequence[int] | None) -> tuple[list, list] | None:
        """(rows new or changed, ids gone) from ``old`` to ``new``, the texts updated; None
        when ``new`` does not list its rows by id (a foreign backend may not): write the state
        whole. ``ids``: the ids the cache says changed (sorted), or None to compare every row."""
        if not self.by_id:
            return None
        if ids is None:
            if old == new:  # shared rows compare by identity, in C
                return [], []
            if not _sorted_ids(new):
                return None
            before = {r.id: r for r in old}
            ids = sorted({r.id for r in new if before.get(r.id) is not r} | (before.keys() - {r.id for r in new}))
        texts = self.texts
        rows, gone = [], []
        for row_id in ids:
            row = _by_id(new, row_id)
            if row is None:
                if texts.pop(row_id) is not None:
                    gone.append(row_id)
                continue
            if row_id not in texts:
                last = texts.last_key()
                if last is not None and row_id < last:
                    return None  # a new id below a kept one: not appended in order
            elif row == _by_id(old, row_id):
                continue
            encoded = self.encode(row)
            texts[row_id] = _encode(encoded)  # in place when known, else appended: ids grow
            rows.append(encoded)
        if len(texts) != len(new):
            return None
        return rows, gone


def _sorted_ids(rows: Sequence) -> bool:
    """True when ``rows`` are listed by increasing id (kvcore's order)."""
    ids = list(map(_id_of, rows))
    return all(map(int.__lt__, ids, ids[1:]))


# -- the writer ----------------------------------------------------------------------------------


class StateWriter:
    """Writes one run's states in order: the first whole, each later one as its changes from
    the one before (:meth:`write`), each with its digest (sha256 of its canonical JSON, what
    :meth:`kvcore.Snapshot.digest` returns)."""

    def __init__(self) -> None:
        self._last: Snapshot | None = None
        self._pages = RowTexts()
        self._tables: list[_Table] = []

    def write(self, snap: Snapshot, *, whole: bool = False) -> tuple[str | None, str | None, str]:
        """``(snapshot text, changes text, digest)`` of ``snap``: one of the texts is None.
        ``whole`` writes it whole (the first state; ``--snapshots``)."""
        last = self._last
        changes = None if whole or last is None else self._changes(last, snap)
        if changes is None:
            text = snap.to_json()
            self._start(snap)
            self._last = snap
            return text, None, hashlib.sha256(text.encode()).hexdigest()
        self._last = snap
        return None, changes, self._digest(snap)

    def _start(self, snap: Snapshot) -> None:
        self._pages = RowTexts((i, _encode(_page_row(p))) for i, p in enumerate(snap.pages))
        self._tables = [_Table(name, encode, gone, getattr(snap, name)) for name, encode, gone in self._table_specs(snap)]

    @staticmethod
    def _table_specs(snap: Snapshot):
        return TABLES + ((BLOCKS,) if design_of(snap).rows == "blocks" else ())  # the hash design's rows

    def _changes(self, last: Snapshot, snap: Snapshot) -> str | None:
        if any(getattr(last, f) != getattr(snap, f) for f in FIXED):
            return None
        told = snap._changes
        told = told if told is not None and told.before() is last else None  # the cache's own account
        out: dict[str, Any] = {
            "clock": snap.clock, "next_seq": snap.next_seq, "next_allocation_id": snap.next_allocation_id,
            "stats": {"lookups": snap.stats.lookups, "lookup_tokens": snap.stats.lookup_tokens,
                      "hit_tokens": snap.stats.hit_tokens, "evictions": snap.stats.evictions,
                      "dedups": snap.stats.dedups},
        }
        pages = self._pages
        old_pages, new_pages = last.pages, snap.pages
        if told is not None:
            changed = told.pages
        elif type(old_pages) is tuple and type(new_pages) is tuple:
            changed = list(compress(range(len(new_pages)), map(ne, old_pages, new_pages)))
        else:
            changed = [i for i, (a, b) in enumerate(zip(old_pages, new_pages)) if a is not b and a != b]
        rows = []
        for p in changed:
            row = _page_row(new_pages[p])
            pages[p] = _encode(row)
            rows.append(row)
        out["pages"] = rows
        for table in self._tables:
            ids = None if told is None or table.name == "blocks" else getattr(told, table.name)
            found = table.changes(getattr(last, table.name), getattr(snap, table.name), ids)
            if found is None:
                return None
            out[table.name], out[table.gone_key] = found
        out["free"] = free_list_edits(last.free, snap.free)
        out["heap"] = list_edits(last.heap, snap.heap)
        return _encode(out)

    def _digest(self, snap: Snapshot) -> str:
        """``snap.digest()``, the sha256 of ``snap.to_json()``, hashed from the kept row texts
        piece by piece: the whole text is never built (at 100,000 pages, 3.3 MB a step)."""
        # The snapshot's own field list, without its long lists (a 100,000-page pool's free
        # list read page by page took most of a step): those are the texts kept here.
        bare = dataclasses.replace(snap, free=(), heap=(), blocks=())
        tables = {t.name: _Raw(t.parts()) for t in self._tables}
        fields = bare._fields(_Raw(self._pages.parts()), tables["nodes"], tables["allocations"])
        fields["free"] = _Raw(free_list_parts(snap.free))
        fields["heap"] = _Raw([_ints(snap.heap).encode()])
        if "blocks" in tables:
            fields["blocks"] = tables["blocks"]
        digest = hashlib.sha256()
        update = digest.update
        opening = b"{"
        for key, value in sorted(fields.items()):
            update(opening + _encode(key).encode() + b":")
            opening = b","
            if type(value) is _Raw:
                for part in value.parts:
                    update(part)
            else:
                update(_encode(value).encode())
        update(b"}")
        return digest.hexdigest()


def _ints(values: list) -> str:
    """A list of ints as canonical JSON (what the encoder writes for exact ints), from texts
    made once per number: a 5,000-page free list joins in a third of the time."""
    texts = _INT_TEXTS
    top = max(values, default=-1)
    if top >= len(texts):
        if top >= _MAX_INT_TEXTS or min(values) < 0:
            return "[" + ",".join(map(int.__repr__, values)) + "]"
        texts.extend(map(str, range(len(texts), top + 1)))
    return "[" + ",".join(map(texts.__getitem__, values)) + "]"


_INT_TEXTS: list[str] = []
_MAX_INT_TEXTS = 1 << 22  # 4 million numbers' texts at most (about 200 MB would be 30 million)


class _Raw:
    """A field's canonical JSON already made, in encoded pieces."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[bytes]):
        self.parts = parts




# -- the reader ----------------------------------------------------------------------------------


class StateReader:
    """Rebuilds a run's states from its JSON: :meth:`whole` for a ``snapshot``, :meth:`apply`
    for a ``changes`` object; :meth:`state` is the current state as ``Snapshot.to_dict()``
    gives it (``kvcore.Snapshot.from_dict`` takes it)."""

    def __init__(self) -> None:
        self._state: dict[str, Any] | None = None
        self._tables: dict[str, dict[int, Any]] = {}

    def whole(self, snapshot: dict) -> dict:
        """Start again from a whole state (a ``snapshot`` object)."""
        self._state = dict(snapshot)
        self._state["pages"] = list(snapshot["pages"])
        self._tables = {}
        for name, _, _ in TABLES + (BLOCKS,):
            if name in snapshot:
                self._tables[name] = {(row["id"] if isinstance(row, dict) else row[0]): row for row in snapshot[name]}
        return self.state()

    def apply(self, changes: dict) -> dict:
        """Apply a ``changes`` object to the current state (ValueError before any state)."""
        state = self._state
        if state is None:
            raise ValueError("a `changes` object before any whole `snapshot`: the first state is written whole")
        for key in ("clock", "next_seq", "next_allocation_id", "stats"):
            state[key] = changes[key]
        pages = state["pages"]
        for row in changes["pages"]:
            pages[row[0]] = row
        for name, table in self._tables.items():
            gone_key = next(g for n, _, g in TABLES + (BLOCKS,) if n == name)
            for row_id in changes[gone_key]:
                del table[row_id]
            for row in changes[name]:
                table[row["id"] if isinstance(row, dict) else row[0]] = row
        state["free"] = apply_list_edits(list(state["free"]), changes["free"])
        state["heap"] = apply_list_edits(list(state["heap"]), changes["heap"])
        return self.state()

    def state(self) -> dict:
        """The current state, ``Snapshot.to_dict()``-shaped (a fresh dict; rows shared)."""
        out = dict(self._state)
        out["pages"] = list(self._state["pages"])
        for name, table in self._tables.items():
            out[name] = list(table.values())
        return out
