# SPDX-License-Identifier: Apache-2.0
"""What changed between two snapshots: the marks the UI paints (new green, touched blue,
evicted red, ref ±) and the facts narration and why-queries use.

Computed from snapshots alone, so it works for any backend that produces kvcore snapshots.
A hash cache (kind ``hash``) has cached blocks instead of trie nodes: its diff lists them in
the node fields (a block's id is what its page row names as ``node``), so "new", "evicted"
and the ref marks mean the same on both designs; blocks have no ``last_access``, so none is
ever touched.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, ne

from kvcore import Snapshot

from kvviz.core.designs import design_of


@dataclass(frozen=True, slots=True)
class Diff:
    """Changes from one frame to the next. All fields are sorted tuples of ids."""

    nodes_added: tuple[int, ...] = ()
    nodes_touched: tuple[int, ...] = ()
    nodes_evicted: tuple[int, ...] = ()
    pages_taken: tuple[int, ...] = ()
    pages_freed: tuple[int, ...] = ()
    pages_evicted: tuple[int, ...] = ()
    pages_changed: tuple[int, ...] = ()
    ref_changes: tuple[tuple[int, int, int], ...] = ()  # (node, before, after)
    heap_added: tuple[int, ...] = ()
    heap_removed: tuple[int, ...] = ()
    heap_moved: tuple[int, ...] = ()
    allocations_added: tuple[int, ...] = ()
    allocations_released: tuple[int, ...] = ()
    allocations_changed: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        """True when nothing observable changed."""
        return not any(getattr(self, f) for f in self.__slots__)

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {f: [list(x) if isinstance(x, tuple) else x for x in getattr(self, f)] for f in self.__slots__}


def diff_snapshots(before: Snapshot | None, after: Snapshot) -> Diff:
    """The :class:`Diff` from ``before`` to ``after`` (everything is new when ``before`` is None)."""
    if before is None:
        return Diff(nodes_added=tuple(_cached(after)), allocations_added=tuple(a.id for a in after.allocations))
    changes = after._changes
    told = changes is not None and changes.before() is before
    if design_of(after).rows == "blocks":
        if told:
            return _diff_of_block_changes(before, after, changes)
        return _diff(before, after, *_block_changes(before, after))
    if told:
        return _diff_of_changes(before, after, changes)
    return _diff(before, after, *_node_changes(before, after))


def _allocation_changes(before: Snapshot, after: Snapshot, ids) -> dict[str, tuple[int, ...]]:
    """The Diff's allocation fields from the allocation ids a cache's account names: those
    new, released (gone) and changed, in the account's (sorted) order."""
    added, released, changed = [], [], []
    for allocation_id in ids:
        old, new = _by_id(before.allocations, allocation_id), _by_id(after.allocations, allocation_id)
        if new is None:
            if old is not None:
                released.append(allocation_id)
        elif old is None:
            added.append(allocation_id)
        elif new != old:
            changed.append(allocation_id)
    return {"allocations_added": tuple(added), "allocations_released": tuple(released),
            "allocations_changed": tuple(changed)}


def _pages_taken_and_freed(before: Snapshot, after: Snapshot, pages, evicted_pages) -> tuple[list, list]:
    """Of the changed ``pages``: those taken from the free ones (and an evicted node's or
    block's page that went straight to an allocation), sorted, and those freed."""
    taken, freed = [], []
    old_pages, new_pages = before.pages, after.pages
    for p in pages:
        old, new = old_pages[p], new_pages[p]
        if old.state == "free" and new.state != "free":
            taken.append(p)
        elif new.state == "free" and old.state != "free":
            freed.append(p)
    return sorted(set(taken) | {p for p in evicted_pages if new_pages[p].state != "free"}), freed


def _diff_of_block_changes(before: Snapshot, after: Snapshot, changes) -> Diff:
    """:func:`_diff_of_changes` for a hash cache, whose account names block ids where a
    trie's names node ids: blocks added and evicted, and the ref changes of kept blocks
    (a block's ref is its page's, so they are among the changed pages). The same Diff as
    ``_block_changes`` and a comparison of every row (tests/core/test_hash_snapshot_diff_incremental.py)."""
    added, evicted, evicted_pages = [], [], []
    for block_id in changes.nodes:
        old, new = _by_id(before.blocks, block_id), _by_id(after.blocks, block_id)
        if new is None and old is not None:
            evicted.append(block_id)
            evicted_pages.append(old.page)
        elif old is None and new is not None:
            added.append(block_id)
    taken, freed = _pages_taken_and_freed(before, after, changes.pages, evicted_pages)
    old_pages, new_pages = before.pages, after.pages
    refs = [(new.node, old.ref, new.ref) for old, new in ((old_pages[p], new_pages[p]) for p in changes.pages)
            if new.node is not None and old.node == new.node and old.ref != new.ref]
    return Diff(
        nodes_added=tuple(added),
        nodes_evicted=tuple(evicted),
        pages_taken=tuple(taken),
        pages_freed=tuple(freed),
        pages_evicted=tuple(sorted(evicted_pages)),
        pages_changed=tuple(changes.pages),
        ref_changes=tuple(sorted(refs)),
        **_allocation_changes(before, after, changes.allocations),
    )


def _diff_of_changes(before: Snapshot, after: Snapshot, changes) -> Diff:
    """The diff from the rows the cache says changed (:class:`kvcore.snapshot.SnapshotChanges`):
    every other row is the very object ``before`` has, so this costs what changed (the heap's
    slots are compared in C). The same Diff as the full comparison (a test holds it to that)."""
    added, evicted, touched, refs, evicted_pages = [], [], [], [], []
    for node_id in changes.nodes:
        old, new = _by_id(before.nodes, node_id), _by_id(after.nodes, node_id)
        if new is None:
            if old is not None and old.parent is not None:
                evicted.append(node_id)
                evicted_pages.append(old.page)
        elif old is None:
            if new.parent is not None:
                added.append(node_id)
        elif new.parent is not None:
            if new.last_access != old.last_access:
                touched.append(node_id)
            if new.ref != old.ref:
                refs.append((node_id, old.ref, new.ref))
    taken, freed = _pages_taken_and_freed(before, after, changes.pages, evicted_pages)
    old_heap, new_heap = before.heap, after.heap
    common = min(len(old_heap), len(new_heap))
    slots = list(compress(range(common), map(ne, old_heap[:common], new_heap[:common])))
    slots += range(common, len(new_heap))
    old_set, new_set = set(old_heap), set(new_heap)
    moved = {new_heap[i] for i in slots if new_heap[i] in old_set}
    return Diff(
        nodes_added=tuple(added),
        nodes_touched=tuple(touched),
        nodes_evicted=tuple(evicted),
        pages_taken=tuple(taken),
        pages_freed=tuple(freed),
        pages_evicted=tuple(sorted(evicted_pages)),
        pages_changed=tuple(changes.pages),
        ref_changes=tuple(refs),
        heap_added=tuple(sorted(new_set - old_set)),
        heap_removed=tuple(sorted(old_set - new_set)),
        heap_moved=tuple(sorted(moved)),
        **_allocation_changes(before, after, changes.allocations),
    )


def _by_id(rows, row_id: int):
    """The row with this id in ``rows``, which a kvcore snapshot lists by id: a binary search."""
    i = bisect_left(rows, row_id, key=_id_of)
    return rows[i] if i < len(rows) and rows[i].id == row_id else None


_id_of = attrgetter("id")


def _cached(snap: Snapshot) -> dict:
    """What holds a cached page, by id: the trie's nodes but the root, or a hash cache's blocks."""
    if design_of(snap).rows == "blocks":
        return {b.id: b for b in snap.blocks}
    return {n.id: n for n in snap.nodes if n.parent is not None}


def _node_changes(before: Snapshot, after: Snapshot):
    old_nodes = {n.id: n for n in before.nodes}
    new_nodes = {n.id: n for n in after.nodes}
    changed_nodes = [n for n in after.nodes if old_nodes.get(n.id) is not n]
    added = sorted(i for i, n in new_nodes.items() if i not in old_nodes and n.parent is not None)
    evicted = sorted(i for i, n in old_nodes.items() if i not in new_nodes and n.parent is not None)
    touched = sorted(n.id for n in changed_nodes
                     if n.id in old_nodes and n.parent is not None and n.last_access != old_nodes[n.id].last_access)
    refs = tuple((n.id, old_nodes[n.id].ref, n.ref) for n in sorted(changed_nodes, key=lambda n: n.id)
                 if n.id in old_nodes and n.parent is not None and n.ref != old_nodes[n.id].ref)
    return added, evicted, touched, refs, sorted(old_nodes[i].page for i in evicted)


def _block_changes(before: Snapshot, after: Snapshot):
    """A hash cache's blocks as the node fields: added, evicted, no touch, ref changes (a
    block's ref is its page's), and the evicted blocks' pages."""
    old, new = _cached(before), _cached(after)
    added = sorted(i for i in new if i not in old)
    evicted = sorted(i for i in old if i not in new)
    refs = tuple((i, before.pages[b.page].ref, after.pages[b.page].ref) for i, b in sorted(new.items())
                 if i in old and before.pages[b.page].ref != after.pages[b.page].ref)
    return added, evicted, [], refs, sorted(old[i].page for i in evicted)


def _diff(before: Snapshot, after: Snapshot, added, evicted, touched, refs, pages_evicted) -> Diff:
    taken, freed, changed = [], [], []
    for old, new in zip(before.pages, after.pages):
        if old is not new and old != new:  # kvcore reuses unchanged rows: identity is the fast path
            changed.append(new.page)
            if old.state == "free" and new.state != "free":
                taken.append(new.page)
            elif new.state == "free" and old.state != "free":
                freed.append(new.page)
    # An evicted page that went straight to an allocation was also taken.
    taken = sorted(set(taken) | {p for p in pages_evicted if after.pages[p].state != "free"})
    old_heap = {n: i for i, n in enumerate(before.heap)}
    new_heap = {n: i for i, n in enumerate(after.heap)}
    old_allocs = {a.id: a for a in before.allocations}
    new_allocs = {a.id: a for a in after.allocations}
    return Diff(
        nodes_added=tuple(added),
        nodes_touched=tuple(touched),
        nodes_evicted=tuple(evicted),
        pages_taken=tuple(taken),
        pages_freed=tuple(sorted(freed)),
        pages_evicted=tuple(pages_evicted),
        pages_changed=tuple(changed),
        ref_changes=refs,
        heap_added=tuple(sorted(n for n in new_heap if n not in old_heap)),
        heap_removed=tuple(sorted(n for n in old_heap if n not in new_heap)),
        heap_moved=tuple(sorted(n for n, i in new_heap.items() if n in old_heap and old_heap[n] != i)),
        allocations_added=tuple(sorted(i for i in new_allocs if i not in old_allocs)),
        allocations_released=tuple(sorted(i for i in old_allocs if i not in new_allocs)),
        allocations_changed=tuple(sorted(i for i, a in new_allocs.items()
                                         if i in old_allocs and a != old_allocs[i])),
    )
