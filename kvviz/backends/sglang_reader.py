# SPDX-License-Identifier: Apache-2.0
"""SGLang's tree read after an op at the cost of what the op changed (:mod:`.sglang_backend`).

The backend's full read (``SglangBackend._read_full``) walks the whole radix tree: O(cached
pages) per op. It stays the contract. This module keeps the rows of the last snapshot and
re-reads only the radix nodes an op could have changed, which the **instrumented calls**
name: :func:`instrument` wraps, on one ``RadixCache`` instance (instance attributes: no other
cache is affected), every method of SGLang 0.5.23's tree that changes what a snapshot shows:

=================================  ===============================================================
``last_access_time``               ``_match_prefix_helper`` and ``_insert_helper`` stamp every
                                   node of the path they walk: the path from the node they
                                   return up to the root
a node's pages, key or parent      ``_split_node`` (the node cut and the new one above it),
                                   ``_insert_helper`` (its new leaf ends the path it returns),
                                   ``_delete_leaf`` (the leaf and its parent)
``lock_ref``                       ``inc_lock_ref``, ``dec_lock_ref``: the path from their node
                                   up to the root
``evictable_leaves``               ``_update_leaf_status`` (every add and remove but one) and
                                   ``_delete_leaf`` (the other remove)
everything                         ``reset``: the next read is a full one
=================================  ===============================================================

``match_prefix``, ``insert`` and ``evict`` change the tree only through these; a new
``TreeNode`` is made only by ``_split_node`` and ``_insert_helper``. No other method of the
class writes these fields (a test reads its source to hold that:
``test_the_engines_writers_of_what_a_snapshot_shows_are_the_instrumented_calls``). The free list is the
backend's own :class:`~kvviz.backends.sglang_backend.PagePool`, which notes the pages it
moves; allocations change only in the op's own (the backend names it: ``dirty``).

:class:`ChangedRows` then re-reads the touched nodes that are still in the tree (parents
first), numbering new pages as the full read would (it gives up, for a full read, when more
than one node gained pages since the last read: the full read's order among them is its walk's),
drops the pages of nodes that left it, updates the evictable leaves (kept sorted: the heap),
the page rows of every page involved and the dirty allocations. Unchanged rows are the very
objects of the snapshot before, and :attr:`kvcore.Snapshot._changes` lists the rest.
``tests/engines/test_incremental_reads.py`` holds every read to the full read's JSON, op by op.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, insort
from operator import itemgetter

from kvcore import Snapshot, Stats
from kvcore.snapshot import CACHED, OWNED, AllocationInfo, NodeInfo, PageInfo, SnapshotChanges, free_row

from kvviz.backends import TRIE
from kvviz.backends.foreign_backend import RowsById

__all__ = ["TREE_CALLS", "ChangedRows", "Touched", "instrument", "pages_of"]

TREE_CALLS = ("_match_prefix_helper", "_insert_helper", "_split_node", "_delete_leaf", "_update_leaf_status",
              "inc_lock_ref", "dec_lock_ref", "reset")
"""The ``RadixCache`` methods :func:`instrument` wraps: every writer of what a snapshot shows."""


class Touched:
    """What the instrumented calls saw since the last read: the radix nodes that may have
    changed (``nodes``, by identity), whether everything may have (``everything``), and the
    nodes ``_split_node`` cut (``splits``, in order: the backend's SG2 findings read them)."""

    def __init__(self) -> None:
        self.nodes: set = set()
        self.everything = False
        self.splits: list = []

    def clear(self) -> None:
        """Forget the touched nodes (a read has seen them)."""
        self.nodes.clear()
        self.everything = False


def instrument(cache, touched: Touched) -> None:
    """Wrap ``cache``'s (an SGLang ``RadixCache``) :data:`TREE_CALLS`, on this instance only,
    so that they report to ``touched``."""
    nodes = touched.nodes

    def path(node) -> None:
        while node is not None:
            nodes.add(node)
            node = node.parent

    def wrap(name):
        real = getattr(cache, name)
        if name in ("_match_prefix_helper", "_insert_helper"):
            def call(*args, **kwargs):
                out = real(*args, **kwargs)
                path(out[1])  # (value or prefix length, the last node of the path walked)
                return out
        elif name == "_split_node":
            def call(key, child, split_len):
                new_node = real(key, child, split_len)
                nodes.add(child)
                nodes.add(new_node)
                touched.splits.append(child)
                return new_node
        elif name == "_delete_leaf":
            def call(node):
                nodes.add(node)
                nodes.add(node.parent)
                return real(node)
        elif name == "_update_leaf_status":
            def call(node):
                nodes.add(node)
                return real(node)
        elif name in ("inc_lock_ref", "dec_lock_ref"):
            def call(node, *args, **kwargs):
                path(node)
                return real(node, *args, **kwargs)
        else:  # reset: a new root, every node gone
            def call():
                touched.everything = True
                return real()
        call.__name__ = call.__qualname__ = name  # sub-steps name a call by it (no __wrapped__: the
        return call  # parameter test must see the wrapper's own signature)

    for name in TREE_CALLS:
        setattr(cache, name, wrap(name))


class ChangedRows:
    """The rows of the last snapshot of one :class:`~kvviz.backends.sglang_backend.SglangBackend`,
    kept to make the next one from what changed (see the module's docstring).

    Built from a full read: its snapshot (``snap``), each radix node's pages (``radix``) and
    each evictable leaf's heap key (``leaves``); O(pages), once per full read."""

    def __init__(self, backend, snap: Snapshot, radix: dict, leaves: dict):
        self.last = weakref.ref(snap)
        self.rows: list[PageInfo] = list(snap.pages)
        self.nodes = RowsById(snap.nodes)
        self.radix: dict = radix  # radix node -> its pages
        self.key_of: dict[int, tuple] = {}  # page -> (page, its token path): its id's key in backend._ids
        self.id_of: dict[int, int] = {}  # page -> the id of the node that holds it
        for key, node_id in backend._ids.items():
            self.key_of[key[0]] = key
            self.id_of[key[0]] = node_id
        self.leaves: dict = leaves  # evictable radix leaf -> (last access, its last page's id)
        self.heap = sorted(leaves.values())
        self.allocations: dict[int, AllocationInfo] = {a.id: a for a in snap.allocations}
        self.ids: dict[str, int] = {a.name: a.id for a in snap.allocations}
        self.tails: dict[int, set[int]] = {}  # page -> allocations whose unpublished tail holds it
        for a in snap.allocations:
            for page in a.pages[a.published:]:
                self.tails.setdefault(page, set()).add(a.id)

    def since(self, snap: Snapshot) -> None:
        """Count the next read's changes from ``snap``: a snapshot equal to the last one read,
        with the same row objects (a refused op's state, its clock given back)."""
        self.last = weakref.ref(snap)

    def advance(self, backend, dirty: set[str]) -> Snapshot | None:
        """The backend's snapshot now, from the kept rows, the touched nodes, the pages the pool
        moved and the ``dirty`` allocation names; None when a full read is needed."""
        touched = backend._touched
        if touched.everything:
            return None
        cache, tpp = backend.cache, backend.tokens_per_page
        root = cache.root_node
        changed = set(touched.nodes)
        changed.discard(root)
        touched.clear()
        pages = set(backend.pool.moved)
        backend.pool.moved.clear()
        radix, key_of, id_of, ids = self.radix, self.key_of, self.id_of, backend._ids
        # The touched nodes still in the tree, parents first.
        depths = {root: 0}
        live = []
        left: set[int] = set()  # the pages the touched nodes held
        for node in changed:
            left.update(radix.pop(node, ()))
            depth = _depth(node, root, depths, tpp)
            if depth is not None:
                live.append((depth, node))
        live.sort(key=itemgetter(0))
        # Their pages' ids and rows, as the full read makes them (nothing kept is changed yet).
        placed: dict[int, tuple[tuple, int, NodeInfo]] = {}  # page -> (key, node id, row)
        next_id = backend._next_id
        gained = 0
        leaves = {}
        evictable = cache.evictable_leaves
        for _, node in live:
            parent = node.parent
            if parent is root:
                path, up = (), 0
            else:
                last = radix[parent][-1]
                key, up, _ = placed.get(last) or (key_of[last], id_of[last], None)
                path = key[1]
            tokens = tuple(int(t) for t in node.key.token_ids[:len(node.key)])
            node_pages = pages_of(node.value, tpp)
            ref, access = node.lock_ref, int(node.last_access_time)
            fresh = False
            for i, page in enumerate(node_pages):
                block = tokens[i * tpp:(i + 1) * tpp]
                path = path + block
                key = (page, path)
                node_id = ids.get(key)
                if node_id is None:
                    if not fresh:
                        fresh = True
                        gained += 1
                        if gained > 1:
                            return None  # the full read numbers two new chains in its walk's order
                    node_id = next_id
                    next_id += 1
                placed[page] = (key, node_id, NodeInfo(node_id, up, block, page, ref, access, node_id))
                up = node_id
            radix[node] = tuple(node_pages)
            pages.update(node_pages)
            if node in evictable:
                leaves[node] = (access, up)
        # Commit: the pages that left the tree, then the rows of those placed (new ids last, in order).
        nodes = self.nodes
        changed_nodes: set[int] = set()
        pages |= left
        for page in left:
            if page in key_of and page not in placed:
                del ids[key_of.pop(page)]
                gone = id_of.pop(page)
                nodes.drop(gone)
                changed_nodes.add(gone)
        for page, (key, node_id, row) in placed.items():
            old_key = key_of.get(page)
            if old_key != key:
                if old_key is not None:
                    del ids[old_key]
                    old_id = id_of[page]
                    if old_id != node_id:
                        nodes.drop(old_id)
                        changed_nodes.add(old_id)
                key_of[page] = key
                id_of[page] = ids[key] = node_id
            if nodes.get(node_id) != row:
                nodes.put(row)
                changed_nodes.add(node_id)
        backend._next_id = next_id
        heap = self.heap
        for node in changed:
            old = self.leaves.pop(node, None)
            if old is not None:
                del heap[bisect_left(heap, old)]
        for node, key in leaves.items():
            self.leaves[node] = key
            insort(heap, key)
        # Allocations: the op's own; their unpublished tails' pages.
        allocations, names, tails = self.allocations, self.ids, self.tails
        changed_allocations: set[int] = set()
        for name in sorted(dirty, key=lambda n: (n not in backend._handles, n)):
            old_id = names.get(name)
            handle = backend._handles.get(name)
            old = allocations.get(old_id) if old_id is not None else None
            new = None
            if handle is not None:
                new = AllocationInfo(handle.id, handle.name, handle.tokens, tuple(handle.pages), handle.published,
                                     handle.hit_tokens)
            if old is not None and (new is None or new.id != old.id):
                del allocations[old.id], names[name]
                changed_allocations.add(old.id)
            elif old == new:
                continue
            if old is not None:
                for page in old.pages[old.published:]:
                    tails[page].discard(old.id)
                    pages.add(page)
            if new is not None:
                allocations[new.id] = new
                names[name] = new.id
                changed_allocations.add(new.id)
                for page in new.pages[new.published:]:
                    tails.setdefault(page, set()).add(new.id)
                    pages.add(page)
        if list(allocations) != sorted(allocations):
            return None  # (an allocation id below a live one's: the full read's order is by id)
        rows = self.rows
        changed_pages = []
        for page in sorted(pages):
            if not 0 <= page < len(rows):
                continue  # (the full read lists pages 0 .. pages-1 only)
            owners = tails.get(page)
            if owners:
                row = PageInfo(page, OWNED, max(owners), None, 0)
            elif page in id_of:
                node_id = id_of[page]
                row = PageInfo(page, CACHED, None, node_id, nodes.get(node_id).ref)
            else:
                row = free_row(page)
            if row != rows[page]:
                rows[page] = row
                changed_pages.append(page)
        s = backend._stats
        snap = Snapshot(kind=TRIE, tokens_per_page=tpp, page_count=backend.pages, clock=backend.clock.now,
                        next_seq=backend._next_id, next_allocation_id=backend._next_allocation_id, pages=tuple(rows),
                        free=tuple(backend.pool.free), nodes=tuple(nodes.rows),
                        allocations=tuple(allocations.values()), heap=tuple(map(itemgetter(1), heap)),
                        stats=Stats(s["lookups"], s["lookup_tokens"], s["hit_tokens"], s["evictions"], s["dedups"]),
                        policy="lru")
        object.__setattr__(snap, "_changes", SnapshotChanges(self.last, tuple(sorted(changed_nodes)),
                                                             tuple(changed_pages), tuple(sorted(changed_allocations))))
        self.last = weakref.ref(snap)
        return snap


def _depth(node, root, depths: dict, tpp: int) -> int | None:
    """``node``'s depth in the tree below ``root``, None when it left the tree (``depths``:
    those found so far, the root's 0 included)."""
    walked = []
    while node not in depths:
        parent = node.parent
        if parent is None or parent.children.get(node.key.child_key(tpp)) is not node:
            for gone in walked:
                depths[gone] = None
            depths[node] = None
            return None
        walked.append(node)
        node = parent
    depth = depths[node]
    if depth is None:
        for gone in walked:
            depths[gone] = None
        return None
    for step in reversed(walked):
        depth += 1
        depths[step] = depth
    return depths[walked[0]] if walked else depth


def pages_of(value, page_size: int) -> list[int]:
    """The pages of a radix node's ``value`` (its token slots: page p is slots p*size ..)."""
    return [int(v) // page_size for v in value.tolist()[::page_size]]
