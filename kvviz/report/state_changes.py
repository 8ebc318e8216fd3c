# SPDX-License-Identifier: Apache-2.0
"""A step's state written as what changed since the step before, and read back.

``kvviz run --json`` (schema ``kvviz.timeline/3``) writes its first state whole
(:meth:`kvcore.Snapshot.to_dict`) and every later one as a ``changes`` object: the rows that
are not the previous state's, the ids of the rows gone, and edits of the two ordered lists
(``free``, ``heap``). A step then costs what its op changed, not the pool: a 600-step trace
slice of 5,537 pages is up to 332 KB per whole state, about 2.5 KB per step line after the first.

Each state also gets its :meth:`kvcore.Snapshot.state_digest`, a set digest of its rows,
fields and list neighbours (AdHash, :class:`kvcore.state_digest.StateDigest`), which a step
updates from what it changed: the element of each row, field, free-list neighbour pair and
heap slot gone is taken out, each new one put in, two hashes per element changed and
never a pass over the pool. (sha256 of the whole canonical JSON, :meth:`kvcore.Snapshot.digest`,
costs the whole state: it is written where the state is, on the first and last lines.)

:class:`StateWriter` computes the changes (from the rows the cache says changed,
:class:`kvcore.snapshot.SnapshotChanges`, when it says so; else by comparing the two
snapshots) and keeps the digest with them. :class:`StateReader` applies changes back and
keeps its own digest the same way; tests rebuild every step of the demos, random scenarios
and a trace slice with it and hold each state and digest to the session's own snapshot and
the full computation (the oracle).

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

import hashlib
import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, ne
from typing import Any

from kvcore import Snapshot
# The snapshot format's own row encoders and state-digest elements: one definition each.
from kvcore.rows import allocation_row, block_row, node_row, page_row
from kvcore.snapshot import FreePages, PageTable, QueuedPages, untouched_free
from kvcore.state_digest import (StateDigest, field_element, free_elements, free_pair_element, ids_increase,
                                 page_element, placed_element, row_element)

from kvviz.core.designs import design_of

FORMAT = "changes/1"
"""The version of the ``changes`` object (within ``kvviz.timeline/3``, as in /2)."""

_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode  # Snapshot.to_json's settings

#: Fields that never change within one run: a state where one does is written whole.
FIXED = ("schema", "kind", "policy", "tokens_per_page", "page_count")

#: The keyed row tables: (the snapshot's attribute and JSON key, the row encoder, the key of
#: the ids gone). ``blocks`` is a hash cache's only.
TABLES = (("nodes", node_row, "nodes_gone"), ("allocations", allocation_row, "allocations_gone"))
BLOCKS = ("blocks", block_row, "blocks_gone")

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


# -- keyed rows ----------------------------------------------------------------------------------


def _by_id(rows: Sequence, row_id: int):
    """The row with this id in ``rows`` (listed by id, as kvcore lists them), or None."""
    i = bisect_left(rows, row_id, key=_id_of)
    return rows[i] if i < len(rows) and rows[i].id == row_id else None


class _Table:
    """One keyed row table (nodes, allocations, blocks): its rows' changes from one state to
    the next, written as JSON texts, and the state digest's elements they remove and add."""

    __slots__ = ("name", "encode", "gone_key")

    def __init__(self, name: str, encode, gone_key: str):
        self.name, self.encode, self.gone_key = name, encode, gone_key

    def changes(self, old: Sequence, new: Sequence, ids: Sequence[int] | None,
                digest: StateDigest | None) -> tuple[list[str], list[int]] | None:
        """(texts of the rows new or changed, ids gone) from ``old`` to ``new`` (``old`` listed
        by increasing id), each row's element moved in ``digest`` (None: a table the digest
        does not read); None when ``new`` is not ``old`` with rows replaced in place, gone, or
        appended after every row kept: write the state whole. ``ids``: the ids the cache says
        changed (sorted), or None to compare every row."""
        if ids is None:
            if old == new:  # shared rows compare by identity, in C
                return [], []
            if not _sorted_ids(new):
                return None
            before = {r.id: r for r in old}
            ids = sorted({r.id for r in new if before.get(r.id) is not r} | (before.keys() - {r.id for r in new}))
        found = [(row_id, _by_id(old, row_id), _by_id(new, row_id)) for row_id in ids]
        gone = [row_id for row_id, was, row in found if row is None and was is not None]
        kept = len(old) - len(gone)
        gone_ids = set(gone)
        top = next((r.id for r in reversed(old) if r.id not in gone_ids), None)  # the last row kept
        texts = []
        encode, name = self.encode, self.name
        for row_id, was, row in found:
            if row is None:
                if was is not None and digest is not None:
                    digest.remove(row_element(name, _encode(encode(was))))
                continue
            if was is None:
                if top is not None and row_id < top:
                    return None  # a new id below a kept one: not appended in order
                top, kept = row_id, kept + 1
            elif row == was:
                continue
            text = _encode(encode(row))
            if digest is not None:
                if was is not None:
                    digest.remove(row_element(name, _encode(encode(was))))
                digest.add(row_element(name, text))
            texts.append(text)
        if kept != len(new):
            return None
        return texts, gone

def _sorted_ids(rows: Sequence) -> bool:
    """True when ``rows`` are listed by increasing id (kvcore's order)."""
    ids = list(map(_id_of, rows))
    return all(map(int.__lt__, ids, ids[1:]))


# -- the state digest's list elements ----------------------------------------------------------


def _edit_spans(edits: list, old_length: int, new_length: int) -> list[tuple[int, int, int, int]] | None:
    """Each of :func:`list_edits`' edits as ``(old_start, old_stop, new_start, new_stop)``:
    the items it removed from the old list and the ones it put in the new; None when the
    edits are not in increasing order within both lists (list_edits never writes such; a
    changed line may)."""
    spans = []
    shift = end = 0
    for start, delete, items in edits:
        if type(start) is not int or type(delete) is not int or start < end or delete < 0:
            return None
        old_start = start - shift
        if old_start < 0 or old_start + delete > old_length:
            return None
        spans.append((old_start, old_start + delete, start, start + len(items)))
        shift += len(items) - delete
        end = start + len(items)
    if old_length + shift != new_length:
        return None
    return spans


class _PageCounts:
    """How many times each page is in a free list, followed from the list's edits, so a step
    knows in O(its edits) whether every page is listed once (the digest then reads the list
    as neighbour pairs, :func:`kvcore.snapshot.free_elements`). A lazy list's run of pages
    never handed out is counted, never listed: a page the counts do not hold is in the list
    once if it was in the first list's run, else not."""

    __slots__ = ("_counts", "_run", "repeated")

    def __init__(self, free: Sequence[int]):
        explicit, self._run = untouched_free(free)
        self._counts: dict[int, int] = {}
        self.repeated: set[int] = set()  # pages listed more than once
        for page in explicit:
            self.give(page)

    def _count(self, page: int) -> int:
        count = self._counts.get(page)
        return count if count is not None else int(page in self._run)

    def give(self, page: int) -> None:
        """``page`` joined the list (once more)."""
        count = self._counts[page] = self._count(page) + 1
        if count > 1:
            self.repeated.add(page)

    def take(self, page: int) -> None:
        """``page`` left the list (once)."""
        count = self._counts[page] = self._count(page) - 1
        if count < 2:
            self.repeated.discard(page)


class FreeListMove:
    """One step of the free list's elements in a digest, in two halves so that a reader can
    edit its list in place between them: made with the list before ``edits`` (the elements
    the edits break are taken out), then :meth:`finish` with the list after (the new ones
    put in). While every page is listed once, the elements are neighbour pairs and only the
    pairs around each edit move; a list with a page twice (only a broken cache's) is read by
    position, and then every element of both lists moves. ``counts`` follows the list."""

    __slots__ = ("_digest", "_counts", "_spans", "_repeated")

    def __init__(self, digest: StateDigest, counts: _PageCounts, edits: list, old: Sequence[int],
                 new_length: int):
        self._digest, self._counts = digest, counts
        self._spans = spans = _edit_spans(edits, len(old), new_length)
        self._repeated = bool(counts.repeated)
        if spans is None or self._repeated:
            for element in free_elements(old):
                digest.remove(element)
        else:
            # Pair j is (list[j-1], list[j]), the head's and the tail's sides None: an edit
            # of items start..stop-1 breaks (or makes) pairs start..stop; every other pair
            # is kept, shifted.
            n = len(old)
            for j in sorted({j for start, stop, _, _ in spans for j in range(start, stop + 1)}):
                digest.remove(free_pair_element(old[j - 1] if j else None, old[j] if j < n else None))
        if spans is not None:
            for start, stop, _, _ in spans:
                for page in old[start:stop]:
                    counts.take(page)

    def finish(self, new: Sequence[int]) -> _PageCounts:
        """Put in the elements of ``new``, the list after the edits; the page counts of it."""
        digest, counts, spans = self._digest, self._counts, self._spans
        if spans is None:
            counts = _PageCounts(new)
        else:
            for _, _, start, stop in spans:
                for page in new[start:stop]:
                    counts.give(page)
        if spans is None or self._repeated:
            for element in free_elements(new):
                digest.add(element)
            return counts
        m = len(new)
        made = {j for _, _, start, stop in spans for j in range(start, stop + 1)}
        if counts.repeated:  # a page listed twice now: from pairs to positions
            for j in range(m + 1):
                if j not in made:
                    digest.remove(free_pair_element(new[j - 1] if j else None, new[j] if j < m else None))
            for element in free_elements(new):
                digest.add(element)
            return counts
        for j in sorted(made):
            digest.add(free_pair_element(new[j - 1] if j else None, new[j] if j < m else None))
        return counts


def follow_free_list(digest: StateDigest, counts: _PageCounts, old: Sequence[int], new: Sequence[int],
                     edits: list) -> _PageCounts:
    """Move the free list's elements in ``digest`` from ``old`` to ``new`` (``edits``, from
    :func:`list_edits`, turn one into the other): :class:`FreeListMove`, both halves."""
    return FreeListMove(digest, counts, edits, old, len(new)).finish(new)


class HeapMove:
    """One step of the heap's elements (one per slot) in a digest, in two halves as
    :class:`FreeListMove`: the slots ``edits`` wrote, and those after an edit that changed
    the length (shifted); a sift's slot edits change no length."""

    __slots__ = ("_digest", "_made")

    def __init__(self, digest: StateDigest, edits: list, old: Sequence[int], new_length: int):
        self._digest = digest
        spans = _edit_spans(edits, len(old), new_length)
        if spans is None:
            gone, made = range(len(old)), range(new_length)
        else:
            gone, made = [], []
            shift = old_end = new_end = 0
            for old_start, old_stop, new_start, new_stop in spans:
                if shift:  # the items between the last edit and this one moved
                    gone += range(old_end, old_start)
                    made += range(new_end, new_start)
                gone += range(old_start, old_stop)
                made += range(new_start, new_stop)
                shift, old_end, new_end = new_stop - old_stop, old_stop, new_stop
            if shift:
                gone += range(old_end, len(old))
                made += range(new_end, new_length)
        for i in gone:
            digest.remove(placed_element("heap", i, _encode(old[i])))
        self._made = made

    def finish(self, new: Sequence[int]) -> None:
        """Put in the elements of the slots written in ``new``, the heap after the edits."""
        for i in self._made:
            self._digest.add(placed_element("heap", i, _encode(new[i])))


def follow_heap(digest: StateDigest, old: Sequence[int], new: Sequence[int], edits: list) -> None:
    """Move the heap's elements in ``digest`` from ``old`` to ``new``: :class:`HeapMove`."""
    HeapMove(digest, edits, old, len(new)).finish(new)


# -- the writer ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrittenState:
    """One state as a step line carries it: ``snapshot`` (the state whole, canonical JSON)
    or ``changes`` (from the state written before it), the other None; ``state_digest``
    (:meth:`kvcore.Snapshot.state_digest`, kept up to date from the changes) always;
    ``digest`` (:meth:`kvcore.Snapshot.digest`, sha256 of the whole canonical JSON: O(the
    state)) where the state is written whole or the digest was asked for, else None."""

    snapshot: str | None
    changes: str | None
    state_digest: str
    digest: str | None


class StateWriter:
    """Writes one run's states in order: the first whole, each later one as its changes from
    the one before (:meth:`write`), each with its state digest, updated from the rows,
    fields and list items the step changed (two hashes per element changed, never a pass
    over the pool)."""

    def __init__(self) -> None:
        self._last: Snapshot | None = None
        self._digest = StateDigest()
        self._free_counts = _PageCounts(())
        self._tables: list[_Table] = []
        self._keyed = False  # the last state's tables list their rows by id: changes can say them

    @property
    def digest_work(self) -> StateDigest:
        """The state digest's accumulator, whose ``hashed`` and ``hashed_bytes`` count the
        elements and bytes hashed since the writer started (work, for tests and benchmarks)."""
        return self._digest

    def write(self, snap: Snapshot, *, whole: bool = False, digest: bool = False) -> WrittenState:
        """``snap`` as a step line carries it (:class:`WrittenState`). ``whole`` writes it
        whole (the first state always is; ``--snapshots``); ``digest`` adds its
        :meth:`~kvcore.Snapshot.digest` (O(the state), as a whole state's text is)."""
        last = self._last
        changes = None if last is None else self._changes(last, snap)
        text = snap.to_json() if whole or changes is None else None
        if changes is None:
            self._start(snap)  # after to_json: the digest reads the row texts it made
        self._last = snap
        state_digest = self._digest.hexdigest()
        if text is not None:
            return WrittenState(text, None, state_digest, hashlib.sha256(text.encode()).hexdigest())
        return WrittenState(None, changes, state_digest, snap.digest() if digest else None)

    def _start(self, snap: Snapshot) -> None:
        """Take ``snap`` as the state written last, its digest computed whole (the oracle)."""
        done = self._digest
        self._digest = StateDigest.of_snapshot(snap)
        self._digest.hashed += done.hashed
        self._digest.hashed_bytes += done.hashed_bytes
        self._free_counts = _PageCounts(snap.free)
        self._tables = [_Table(*spec) for spec in self._table_specs(snap)]
        self._keyed = all(_sorted_ids(getattr(snap, t.name)) for t in self._tables)  # else every state is whole

    @staticmethod
    def _table_specs(snap: Snapshot):
        return TABLES + ((BLOCKS,) if design_of(snap).rows == "blocks" else ())  # the hash design's rows

    def _changes(self, last: Snapshot, snap: Snapshot) -> str | None:
        """``snap``'s changes from ``last`` as canonical JSON, the digest moved with them; None
        when they cannot be said (the state is then written whole and its digest made anew)."""
        if not self._keyed or any(getattr(last, f) != getattr(snap, f) for f in FIXED):
            return None
        told = snap._changes
        told = told if told is not None and told.before() is last else None  # the cache's own account
        digest = self._digest
        out: dict[str, str] = {}
        for name, old, new in (("clock", last.clock, snap.clock), ("next_seq", last.next_seq, snap.next_seq),
                               ("next_allocation_id", last.next_allocation_id, snap.next_allocation_id),
                               ("stats", _stats_row(last.stats), _stats_row(snap.stats))):
            text = out[name] = _encode(new)
            if old != new:
                digest.remove(field_element(name, _encode(old)))
                digest.add(field_element(name, text))
        old_pages, new_pages = last.pages, snap.pages
        rows = []
        for p in (told.pages if told is not None else _changed_pages(old_pages, new_pages)):
            text = _encode(page_row(new_pages[p]))
            was = _encode(page_row(old_pages[p]))
            if was != text:
                digest.remove(page_element(p, was))
                digest.add(page_element(p, text))
            rows.append(text)
        out["pages"] = "[" + ",".join(rows) + "]"
        # The cache's account names the rows of its design's table in ``nodes``: on a design
        # whose rows are blocks (the hash design's), block ids, and it has no nodes.
        blocks = design_of(snap).rows == "blocks"
        for table in self._tables:
            if told is None:
                ids = None
            elif table.name in ("nodes", "blocks") and blocks:
                ids = told.nodes if table.name == "blocks" else ()
            else:
                ids = getattr(told, table.name)
            # Every table here is one the snapshot's design has (_table_specs), and the digest
            # reads every table the snapshot has: each change moves it.
            found = table.changes(getattr(last, table.name), getattr(snap, table.name), ids, digest)
            if found is None:
                return None
            texts, gone = found
            out[table.name] = "[" + ",".join(texts) + "]"
            out[table.gone_key] = _encode(gone)
        edits = free_list_edits(last.free, snap.free)
        if edits:
            self._free_counts = follow_free_list(digest, self._free_counts, last.free, snap.free, edits)
        out["free"] = _encode(edits)
        edits = list_edits(last.heap, snap.heap)
        if edits:
            follow_heap(digest, last.heap, snap.heap, edits)
        out["heap"] = _encode(edits)
        return "{" + ",".join(f'"{key}":{out[key]}' for key in sorted(out)) + "}"


def _stats_row(stats) -> dict[str, int]:
    """``stats`` as :meth:`kvcore.Snapshot.to_dict` writes it."""
    return {"lookups": stats.lookups, "lookup_tokens": stats.lookup_tokens, "hit_tokens": stats.hit_tokens,
            "evictions": stats.evictions, "dedups": stats.dedups}


def _changed_pages(old: Sequence, new: Sequence) -> list[int]:
    """The pages whose rows differ, without the cache's account: a lazy page table's pages
    never handed out are compared by what it stores (O(pages used), not O(pool))."""
    if isinstance(old, PageTable) and isinstance(new, PageTable) and old.page_count == new.page_count:
        used = max(len(old.rows), len(new.rows))
        return [p for p in range(used) if old[p] is not new[p] and old[p] != new[p]]
    if type(old) is tuple and type(new) is tuple:
        return list(compress(range(len(new)), map(ne, old, new)))  # compared in C
    return [i for i, (a, b) in enumerate(zip(old, new)) if a is not b and a != b]


# -- the reader ----------------------------------------------------------------------------------


class StateReader:
    """Rebuilds a run's states from its JSON: :meth:`whole` for a ``snapshot``, :meth:`apply`
    for a ``changes`` object; :meth:`state` is (a copy of) the current state as ``Snapshot.to_dict()``
    gives it (``kvcore.Snapshot.from_dict`` takes it), :attr:`state_digest` its digest, kept
    up to date from each ``changes`` object as the writer keeps it (the reader's own account,
    to hold against the line's)."""

    def __init__(self) -> None:
        self._state: dict[str, Any] | None = None
        self._tables: dict[str, dict[int, Any]] = {}
        self._digest = StateDigest()
        self._free_counts = _PageCounts(())
        self._in_id_order = True  # every table's ids increase: the digest reads its rows by id

    @property
    def state_digest(self) -> str:
        """The current state's :meth:`kvcore.Snapshot.state_digest`."""
        return self._digest.hexdigest()

    @property
    def digest_work(self) -> StateDigest:
        """The state digest's accumulator (its ``hashed`` counts the elements hashed since
        the last whole state: work, for tests and benchmarks)."""
        return self._digest

    def whole(self, snapshot: dict) -> None:
        """Start again from a whole state (a ``snapshot`` object)."""
        self._state = dict(snapshot)
        for key in ("pages", "free", "heap"):
            self._state[key] = list(snapshot[key])
        self._tables = {}
        for name, _, _ in TABLES + (BLOCKS,):
            if name in snapshot:
                self._tables[name] = {_row_id(row): row for row in snapshot[name]}
        state = self.state()
        self._digest = StateDigest.of_state(state)
        self._free_counts = _PageCounts(state["free"])
        self._in_id_order = all(ids_increase(state[name]) for name in self._tables)

    def apply(self, changes: dict) -> None:
        """Apply a ``changes`` object to the current state, its digest moved with it, in
        O(the changes) (ValueError before any state)."""
        state = self._state
        if state is None:
            raise ValueError("a `changes` object before any whole `snapshot`: the first state is written whole")
        digest = self._digest
        for key in ("clock", "next_seq", "next_allocation_id", "stats"):
            was, text = _encode(state[key]), _encode(changes[key])
            if was != text:
                digest.remove(field_element(key, was))
                digest.add(field_element(key, text))
            state[key] = changes[key]
        pages = state["pages"]
        for row in changes["pages"]:
            p = row[0]
            digest.remove(page_element(p, _encode(pages[p])))
            pages[p] = row
            digest.add(page_element(p, _encode(row)))
        for name, table in self._tables.items():  # the tables the whole state has: the digest reads each
            gone_key = next(g for n, _, g in TABLES + (BLOCKS,) if n == name)
            for row_id in changes[gone_key]:
                was = table.pop(row_id)
                digest.remove(row_element(name, _encode(was)))
            for row in changes[name]:
                row_id = _row_id(row)
                was = table.get(row_id)
                if was is not None:
                    digest.remove(row_element(name, _encode(was)))
                elif table and not (type(row_id) is int and row_id > next(reversed(table))):
                    self._in_id_order = False  # appended below a kept id: the digest reads it by place
                table[row_id] = row
                digest.add(row_element(name, _encode(row)))
        for key, move in (("free", FreeListMove), ("heap", HeapMove)):
            items, edits = state[key], changes[key]
            # The lists are edited in place: the digest's elements leave before, come after.
            length = len(items) + sum(len(inserted) - delete for _, delete, inserted in edits)
            started = move(digest, self._free_counts, edits, items, length) if key == "free" else \
                move(digest, edits, items, length)
            apply_list_edits(items, edits)
            if key == "free":
                self._free_counts = started.finish(items)
            else:
                started.finish(items)
        if not self._in_id_order:  # only a changed line gets here: the whole state's digest
            self._digest = StateDigest.of_state(self.state())

    def state(self) -> dict:
        """The current state, ``Snapshot.to_dict()``-shaped: a fresh dict of fresh lists (the
        reader edits its own in place), rows shared. O(the state), in C."""
        out = dict(self._state)
        for key in ("pages", "free", "heap"):
            out[key] = list(self._state[key])
        for name, table in self._tables.items():
            out[name] = list(table.values())
        return out


def _row_id(row: Any) -> Any:
    return row["id"] if isinstance(row, dict) else row[0]
