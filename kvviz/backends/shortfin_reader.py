# SPDX-License-Identifier: Apache-2.0
"""shortfin's live trie cache read into kvcore's snapshot format, and checked in its own terms.

The reader turns the objects of shortfin 3.9.0's ``TriePagedAttentionCache`` (``root`` and
its ``children``, each node's ``ref_count`` and ``access_time``, the ``leaves`` set, the page
pool's ``available_pages``, the allocations' ``TrieCacheInfo`` handles and the cache's
``_duplicated_pages``) into a :class:`kvcore.Snapshot`, so every view, diff, export and the
invariant checker work unchanged. How shortfin's state maps onto the format:

* **Node ids** are stable: the root is node 0, other nodes are numbered in the order the
  reader first sees them (after every op, breadth first, children in insertion order; one
  op creates at most one chain, so this is creation order). ``seq`` equals the id.
* **The root has no page** in the snapshot. shortfin gives its root a dummy
  ``PageInfo(index=0)`` that collides with the real page 0 (its ``allocate`` compares page
  indices, so the collision is observable: see ``SF3`` in :mod:`.shortfin_backend`). The
  root's ``ref`` is shortfin's root ``ref_count``: allocations that published nothing keep
  their reference there.
* **last_access** is the node's ``access_time``: the backend gives shortfin a logical
  ``time.monotonic`` that returns 1, 2, 3, ... (one tick per call), so times are distinct
  integers and ``clock`` is the last one handed out.
* **free** lists the pool's free pages in the order they will be handed out: shortfin's
  pool pops from the *end* of ``available_pages``, so it is that list reversed.
* **heap** is what shortfin's ``evict_pages`` would heapify: the members of ``leaves`` whose
  ``ref_count`` is empty, sorted by ``access_time`` (a sorted array is a valid heap). A leaf
  that is no longer in the trie is still listed, as a node with no parent.
* **Deferred frees.** When a publish finds a block already cached, shortfin adopts the
  cached page and puts the allocation's own copy on ``_duplicated_pages``, which the *next*
  ``release_pages`` call (of any allocation) returns to the pool. Until then such a page's
  row says ``owned`` by the allocation that gave it up, although its block table no longer
  lists it. A page that is nowhere at all is ``owned`` with owner ``None``: lost.

:func:`check_shortfin_snapshot` checks the invariants (docs/invariants.md) in shortfin's terms: kvcore
counts a reference on every node of an allocation's published path; shortfin keeps one
reference per allocation, on the deepest node of that path (its ``last_cached_node``), and
protects the ancestors by their having children.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvcore import Snapshot, Stats, Violation, check_snapshot
from kvcore.snapshot import CACHED, FREE, OWNED, AllocationInfo, NodeInfo, PageInfo

from kvviz.backends import TRIE


@dataclass
class Handle:
    """One live allocation of a shortfin run: its scenario name and shortfin's info object.

    ``info`` is the ``TrieCacheInfo`` shortfin returned last (lookup + allocate, publish or
    allocate again); the backend replaces it after every op, as shortfin's server does.
    """

    id: int
    name: str
    info: object
    hit_tokens: int
    pending: set[int] = field(default_factory=set)  # own pages shortfin put on _duplicated_pages


class NodeIds:
    """Stable ids for shortfin's ``TrieNode`` objects: root 0, the others in creation order.

    Holds the nodes it numbers (``TrieNode`` hashes by ``id()``, so a dropped node's address
    could be reused); :meth:`observe` forgets nodes nothing in the cache refers to any more.
    """

    def __init__(self, root):
        self._ids = {root: 0}
        self._next = 1

    @property
    def next_id(self) -> int:
        """The id the next new node will get."""
        return self._next

    def id_of(self, node) -> int:
        """The node's id, numbering it now if it is new."""
        node_id = self._ids.get(node)
        if node_id is None:
            node_id = self._ids[node] = self._next
            self._next += 1
        return node_id

    def observe(self, cache, handles: Iterable[Handle]) -> list:
        """Number new nodes of the trie (breadth first) and forget unreachable ones.

        Returns the trie's nodes in breadth-first order, root first.
        """
        order = [cache.root]
        for node in order:  # grows while iterating: breadth first
            order.extend(node.children.values())
        for node in order:
            self.id_of(node)
        keep = set(order)
        keep.update(cache.leaves)
        keep.update(h.info.last_cached_node for h in handles)
        for leaf in sorted((n for n in cache.leaves if n not in self._ids), key=lambda n: n.access_time):
            self.id_of(leaf)
        for node in [n for n in self._ids if n not in keep]:
            del self._ids[node]
        return order


def read_snapshot(cache, ids: NodeIds, handles: Iterable[Handle], *, clock: int, next_allocation_id: int,
                  stats: Stats | None = None) -> Snapshot:
    """The state of shortfin ``cache`` (and the live ``handles``) as a kvcore snapshot.

    Reads only; calls nothing that would touch a node. O(pages + nodes + allocation pages).
    """
    handles = sorted(handles, key=lambda h: h.id)
    trie = ids.observe(cache, handles)
    pool = cache.page_pool
    page_count = len(pool.attn_page_entries)
    root = cache.root

    nodes: list[NodeInfo] = []
    in_trie = set(trie)
    for node in trie:
        nodes.append(_node_info(ids, node, root))
    # Leaves the trie no longer reaches are still part of shortfin's eviction state.
    stale_leaves = [n for n in cache.leaves if n not in in_trie]
    for node in stale_leaves:
        nodes.append(_node_info(ids, node, root, detached=True))
    nodes.sort(key=lambda n: n.id)

    free = tuple(p.index for p in reversed(pool.available_pages))
    rows: list[PageInfo | None] = [None] * page_count
    for info in nodes:
        if info.page is not None and 0 <= info.page < page_count and rows[info.page] is None:
            rows[info.page] = PageInfo(info.page, CACHED, None, info.id, info.ref)
    allocations = []
    for h in handles:
        pages = tuple(p.index for p in h.info.pages)
        published = h.info.number_of_published_pages
        for p in pages[published:]:
            if 0 <= p < page_count and rows[p] is None:
                rows[p] = PageInfo(p, OWNED, h.id)
        allocations.append(AllocationInfo(h.id, h.name, tuple(h.info.tokens), pages, published, h.hit_tokens))
    for p in free:
        if 0 <= p < page_count and rows[p] is None:
            rows[p] = PageInfo(p, FREE)
    owner_of_pending = {p: h.id for h in handles for p in h.pending}
    for page in cache._duplicated_pages:
        p = page.index
        if 0 <= p < page_count and rows[p] is None:
            rows[p] = PageInfo(p, OWNED, owner_of_pending.get(p))
    for p in range(page_count):
        if rows[p] is None:
            rows[p] = PageInfo(p, OWNED, None)  # lost: in no list shortfin keeps

    candidates = [n for n in cache.leaves if n.ref_count.is_empty()]
    candidates.sort(key=lambda n: (n.access_time, ids.id_of(n)))
    return Snapshot(
        kind=TRIE, tokens_per_page=cache.tokens_per_page, page_count=page_count, clock=clock,
        next_seq=ids.next_id, next_allocation_id=next_allocation_id, pages=tuple(rows), free=free,
        nodes=tuple(nodes), allocations=tuple(allocations), heap=tuple(ids.id_of(n) for n in candidates),
        stats=stats if stats is not None else Stats(),
    )


def _node_info(ids: NodeIds, node, root, detached: bool = False) -> NodeInfo:
    node_id = ids.id_of(node)
    if node is root:
        return NodeInfo(0, None, (), None, node.ref_count.count, int(node.access_time), 0)
    parent = None if detached or node.parent is None else ids.id_of(node.parent)
    return NodeInfo(node_id, parent, tuple(node.tokens), node.page.index, node.ref_count.count,
                    int(node.access_time), node_id)


# -- invariants in shortfin's terms -------------------------------------------------------------


def pending_pages(snap: Snapshot) -> dict[int, int]:
    """Pages waiting on shortfin's ``_duplicated_pages``: page -> the allocation that gave it up.

    In the snapshot these are pages ``owned`` by a live allocation whose block table does not
    list them (see the module docstring).
    """
    listed = {(a.id, p) for a in snap.allocations for p in a.pages}
    live = {a.id for a in snap.allocations}
    return {info.page: info.owner for info in snap.pages
            if info.state == OWNED and info.owner in live and (info.owner, info.page) not in listed}


def reference_holders(snap: Snapshot) -> dict[int, list[str]]:
    """For each node, the live allocations whose published path ends there (shortfin's
    ``last_cached_node``), found by spelling the allocation's published tokens from the root.

    Allocations that published nothing end at the root only if they hold a page (shortfin
    registers a reference on the root only when it hands out new pages).
    """
    tpp = snap.tokens_per_page
    children = {(n.parent, n.tokens): n.id for n in snap.nodes if n.parent is not None}
    holders: dict[int, list[str]] = {n.id: [] for n in snap.nodes}
    for a in snap.allocations:
        if a.released:
            continue
        node_id = 0
        for i in range(a.published):
            node_id = children.get((node_id, a.tokens[i * tpp:(i + 1) * tpp]))
            if node_id is None:
                break  # its published path is broken: invariant 5 reports that
        if node_id is None or (node_id == 0 and not a.pages):
            continue
        holders[node_id].append(a.label)
    return holders


def check_shortfin_snapshot(snap: Snapshot) -> list[Violation]:
    """the invariants (docs/invariants.md), in shortfin's terms, on a snapshot made by :func:`read_snapshot`.

    * Invariant 2, shortfin's way: a node's ``ref_count`` is the number of live allocations
      whose published path ends at it (kvcore's whole-path counts do not apply: shortfin
      protects a path's ancestors by their having children).
    * Invariant 1 accepts a page waiting on ``_duplicated_pages`` as a place of its own (it
      returns to the pool at the next ``release_pages``), but not if it is anywhere else too.
    * Everything else is kvcore's checker, unchanged.
    """
    pending = pending_pages(snap)
    places: dict[int, list[str]] = {}
    for p in snap.free:
        places.setdefault(p, []).append("the free list")
    for n in snap.nodes:
        if n.page is not None:
            places.setdefault(n.page, []).append(f"node {n.id}")
    for a in snap.allocations:
        if not a.released:
            for p in a.pages[a.published:]:
                places.setdefault(p, []).append(f"the unpublished tail of {a.label}")
    out = []
    for v in check_snapshot(snap):
        if v.invariant == 2:
            continue  # kvcore's per-path counting; replaced below
        if v.invariant == 1 and len(v.pages) == 1 and v.pages[0] in pending and not places.get(v.pages[0]):
            continue  # "nowhere": it is on _duplicated_pages, by design
        out.append(v)
    labels = {a.id: a.label for a in snap.allocations}
    for page, owner in sorted(pending.items()):
        if places.get(page):
            out.append(Violation(
                1, f"page {page} waits on shortfin's _duplicated_pages (given up by {labels[owner]}) but is also in "
                   f"{', '.join(places[page])}: the next release_pages will free it while in use",
                (page,), (), (owner,)))
    holders = reference_holders(snap)
    has_child = {n.parent for n in snap.nodes if n.parent is not None}
    for n in snap.nodes:
        if n.id not in holders or (n.parent is None and n.id != 0):
            continue  # a detached node: invariant 4 reports it
        count = len(holders[n.id])
        if n.ref == count:
            continue
        who = ", ".join(holders[n.id]) or "none"
        if n.id == 0:
            message = (f"the root has ref_count {n.ref}, but {count} live allocation(s) with pages have published "
                       f"nothing (holders: {who}); a reference left on the root protects nothing")
            out.append(Violation(2, message, (), (0,)))
            continue
        message = (f"node {n.id} (page {n.page}) has ref_count {n.ref}, but {count} live allocation(s) end their "
                   f"published path at it (holders: {who}); shortfin keeps one reference per allocation, on the "
                   f"deepest node it published")
        if n.ref == 0 and count and n.id not in has_child:
            message += ": an eviction candidate in use"
        out.append(Violation(2, message, (n.page,), (n.id,)))
    out.sort(key=lambda v: v.invariant)
    return out

