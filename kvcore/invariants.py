# SPDX-License-Identifier: Apache-2.0
"""The eleven invariants (``docs/invariants.md``): 1-6 of the trie and base caches, 6-11 of
the hash-block cache, checked on a :class:`Snapshot`.

Working on snapshots (not live objects) means one checker serves kvcore's caches, restored
bundles and adapters that read other caches' state into the same format. Off the hot path:
O(pages + nodes + allocation pages).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, is_not, ne

from .blockkey import block_key
from .snapshot import CACHED, FREE, OWNED, PageInfo, Snapshot, touched_rows, untouched_free

NAMES = {
    1: "every page is in exactly one place",
    2: "ref equals the number of live allocations whose published path contains the node",
    3: "eviction candidates are exactly the childless ref-0 nodes, in a valid heap",
    4: "trie shape: links agree, keys are full pages, no page twice",
    5: "an allocation's published pages are its trie path; its pages hold its tokens",
    6: "last_access <= clock; released allocations hold nothing",
    # The hash-block cache's own (kind "hash", kvcore.hashblock): no trie, no heap.
    7: "hash: the free queue holds exactly the ref-0 pages, each once",
    8: "hash: a page's ref equals the number of live allocations whose block table holds it",
    9: "hash: a cached block holds a full page under its chained key, one block per page",
    10: "hash: an allocation's published pages hold the blocks its tokens spell, its others are its own",
    11: "hash: the page table and reachability say what the blocks, refs and free queue say",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant, with the pages, nodes and allocations involved (for highlighting)."""

    invariant: int
    message: str
    pages: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    allocations: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"invariant {self.invariant} ({NAMES[self.invariant]}): {self.message}"

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"invariant": self.invariant, "message": self.message, "pages": list(self.pages),
                "nodes": list(self.nodes), "allocations": list(self.allocations)}

    @classmethod
    def from_dict(cls, d: dict) -> "Violation":
        """Inverse of :meth:`to_dict`."""
        return cls(int(d["invariant"]), str(d["message"]), tuple(d.get("pages", ())),
                   tuple(d.get("nodes", ())), tuple(d.get("allocations", ())))


def check_snapshot(snap: Snapshot) -> list[Violation]:
    """Every violation of invariants 1-6 in ``snap`` (of invariants 6-11 for a hash cache's
    snapshot); [] when healthy."""
    if snap.kind == "hash":
        return check_hash_snapshot(snap)
    out: list[Violation] = []
    nodes = {n.id: n for n in snap.nodes}
    root_ids = [n.id for n in snap.nodes if n.parent is None]
    tpp = snap.tokens_per_page
    _check_shape(snap, nodes, root_ids, tpp, out)
    paths = _check_allocations(snap, nodes, root_ids, tpp, out)
    _check_places(snap, nodes, out)
    _check_refs(snap, nodes, paths, out)
    _check_heap(snap, nodes, out)
    for n in snap.nodes:
        if n.last_access > snap.clock:
            out.append(Violation(6, f"node {n.id} was last accessed at tick {n.last_access}, after the clock "
                                    f"({snap.clock})", _page(n), (n.id,)))
    out.sort(key=lambda v: v.invariant)
    return out


def _page(n) -> tuple[int, ...]:
    return (n.page,) if n.page is not None else ()


def _shape_is_clean(snap, nodes, root_ids, tpp) -> bool:
    """Fast path (set sizes and comprehensions): True when the detailed shape walk would
    find nothing. Large healthy tries are the common case, so they skip the per-node walk."""
    if len(nodes) != len(snap.nodes) or (snap.kind == "trie" and len(root_ids) != 1):
        return False
    if any(nodes[r].page is not None or nodes[r].tokens for r in root_ids):
        return False
    rest = [n for n in snap.nodes if n.parent is not None]
    if not all(n.parent in nodes and len(n.tokens) == tpp for n in rest):
        return False
    if len({(n.parent, n.tokens) for n in rest}) != len(rest):
        return False
    pages = [n.page for n in rest]
    if len(set(pages)) != len(pages) or not all(type(p) is int and 0 <= p < snap.page_count for p in pages):
        return False
    children: dict[int, list[int]] = {}
    for n in rest:
        children.setdefault(n.parent, []).append(n.id)
    reached = 0
    stack = list(root_ids)
    while stack:
        kids = children.get(stack.pop(), ())
        reached += len(kids)
        stack.extend(kids)
    return reached == len(rest)  # every node hangs from the root: no cycles, no orphans


def _check_shape(snap, nodes, root_ids, tpp, out) -> None:
    if _shape_is_clean(snap, nodes, root_ids, tpp):
        return
    if snap.kind == "trie" and len(root_ids) != 1:
        out.append(Violation(4, f"the trie has {len(root_ids)} roots (expected exactly one)", (), tuple(root_ids)))
    if len(nodes) != len(snap.nodes):
        out.append(Violation(4, "two nodes share an id"))
    keys_seen: dict[tuple, int] = {}
    page_owner: dict[int, int] = {}
    for n in snap.nodes:
        if n.parent is None:
            if n.page is not None or n.tokens:
                out.append(Violation(4, f"root node {n.id} holds a page or tokens", _page(n), (n.id,)))
            continue
        if n.parent not in nodes:
            out.append(Violation(4, f"node {n.id} names parent {n.parent}, which does not exist", _page(n), (n.id,)))
        if len(n.tokens) != tpp:
            out.append(Violation(4, f"node {n.id} holds {len(n.tokens)} tokens, not a full page of {tpp}",
                                 _page(n), (n.id,)))
        other = keys_seen.get((n.parent, n.tokens))
        if other is not None:
            out.append(Violation(4, f"nodes {other} and {n.id} are both children of node {n.parent} "
                                    f"with the same tokens", _page(n), (other, n.id)))
        keys_seen[(n.parent, n.tokens)] = n.id
        if n.page is None or not 0 <= n.page < snap.page_count:
            out.append(Violation(4, f"node {n.id} holds page {n.page}, not a page of the pool", (), (n.id,)))
        elif n.page in page_owner:
            out.append(Violation(4, f"page {n.page} is held by nodes {page_owner[n.page]} and {n.id}",
                                 (n.page,), (page_owner[n.page], n.id)))
        else:
            page_owner[n.page] = n.id
    # Cycles: every node must reach a root. Memoised, so O(nodes) even for deep chains.
    reaches_root: set[int] = set()
    for n in snap.nodes:
        trail = []
        on_trail = set()
        cur = n
        while cur is not None and cur.parent is not None and cur.id not in reaches_root:
            if cur.id in on_trail:
                out.append(Violation(4, f"node {n.id} is on a parent cycle", _page(n), (n.id,)))
                break
            trail.append(cur.id)
            on_trail.add(cur.id)
            cur = nodes.get(cur.parent)
        else:
            reaches_root.update(trail)


def _check_allocations(snap, nodes, root_ids, tpp, out) -> dict[int, list[int]]:
    """Invariant 5 (and 6 for released ones); returns each allocation's published path."""
    children: dict[tuple, int] = {(n.parent, n.tokens): n.id for n in snap.nodes if n.parent is not None}
    root = root_ids[0] if root_ids else None
    paths: dict[int, list[int]] = {}
    for a in snap.allocations:
        if not _allocation_fits(a, tpp, 5, out):
            continue
        path = []
        parent = root
        for i in range(a.published):
            node_id = children.get((parent, a.tokens[i * tpp:(i + 1) * tpp]))
            if node_id is None:
                out.append(Violation(5, f"allocation {a.label}'s published page {i} (page {a.pages[i]}) has no trie "
                                        f"node on the path spelled by its tokens", (a.pages[i],), (), (a.id,)))
                break
            if nodes[node_id].page != a.pages[i]:
                out.append(Violation(5, f"allocation {a.label}'s block table says page {a.pages[i]} at position {i}, "
                                        f"but its trie node {node_id} holds page {nodes[node_id].page}",
                                     (a.pages[i], nodes[node_id].page), (node_id,), (a.id,)))
            path.append(node_id)
            parent = node_id
        paths[a.id] = path
        if len(set(a.pages)) != len(a.pages):
            dup = _repeated(a.pages)
            out.append(Violation(5, f"allocation {a.label}'s block table lists page(s) {_abbreviated(dup)} twice: "
                                    f"{_abbreviated(a.pages)}", tuple(dup), (), (a.id,)))
    return paths


def _allocation_fits(a, tpp, invariant, out) -> bool:
    """What every kind checks of an allocation: a released one holds nothing (invariant 6);
    its pages hold its tokens and its published pages are among them (``invariant``). False
    when its other checks cannot run (released, or a published count out of range)."""
    if a.released:
        if a.pages or a.published:
            out.append(Violation(6, f"released allocation {a.label} still holds pages {_abbreviated(a.pages)}",
                                 a.pages, (), (a.id,)))
        return False
    if len(a.pages) * tpp < len(a.tokens):
        out.append(Violation(invariant, f"allocation {a.label} has {len(a.tokens)} tokens but only {len(a.pages)} "
                                        f"pages ({len(a.pages) * tpp} slots)", a.pages, (), (a.id,)))
    if a.published > len(a.pages) or a.published * tpp > len(a.tokens):
        out.append(Violation(invariant, f"allocation {a.label} claims {a.published} published pages but has "
                                        f"{len(a.pages)} pages and {len(a.tokens)} tokens", a.pages, (), (a.id,)))
        return False
    return True


def _repeated(pages) -> list[int]:
    """The pages listed more than once, sorted. O(len(pages)) (a ``count`` per page would be
    quadratic: 100,000 pages took 76 s)."""
    seen: set[int] = set()
    dup: set[int] = set()
    for p in pages:
        if p in seen:
            dup.add(p)
        seen.add(p)
    return sorted(dup)


#: Items a violation message quotes from a list before abbreviating it.
_QUOTED = 8


def _abbreviated(items) -> str:
    """``items`` as a list for a message, the first few only when it is long (a block table
    can hold a million pages; a message quoting them all would be megabytes)."""
    items = list(items[:_QUOTED + 1])
    if len(items) <= _QUOTED:
        return str(items)
    return f"[{', '.join(map(str, items[:_QUOTED]))}, ...]"


#: Pages described one by one in "not in exactly one place" violations; the rest are counted.
_MAX_PAGE_VIOLATIONS = 100


def _check_places(snap, nodes, out) -> None:
    # Count first (cheap); describe only the pages that are not in exactly one place.
    # A lazy free list implies a run of untouched free pages it does not store: those
    # count once each without being read, so checking a pool of 10**12 pages costs what
    # its used pages do.
    page_count = snap.page_count
    explicit_free, run = untouched_free(snap.free)
    low = run.start if run else page_count  # pages from here on are in the run (once)
    free = ("free", None)
    sources = [(free, explicit_free)]
    sources += [(("node", n.id), (n.page,)) for n in snap.nodes if n.page is not None]
    sources += [(("tail", a), a.pages[max(a.published, 0):]) for a in snap.allocations if not a.released]
    entries = sum(len(pages) for _, pages in sources)
    # A list when the pool is about as big as what the snapshot lists (always, for
    # snapshots kvcore makes); a dict when page_count is out of all proportion to the
    # snapshot (2**40 pages in a 1 KB snapshot), so checking never costs more than reading.
    sparse = low > 2 * entries + 1024
    count: dict[int, int] | list[int] = {} if sparse else [0] * low
    in_run: dict[int, int] = {}  # stored pages that are also in the untouched run
    for where, pages in sources:
        for p in pages:
            if type(p) is int and 0 <= p < low:
                if sparse:
                    count[p] = count.get(p, 0) + 1
                else:
                    count[p] += 1
            elif type(p) is int and low <= p < page_count:
                in_run[p] = in_run.get(p, 1) + 1
            else:
                out.append(Violation(1, f"{_where(where)} names page {p}, which is not in the pool of {page_count}"))
    if sparse:
        bad = [p for p, c in count.items() if c != 1]
        total = len(bad) + low - len(count)  # the pages counted twice or more, and the missing
        bad += _first_missing(count, low, _MAX_PAGE_VIOLATIONS)
    else:
        bad = [p for p, c in enumerate(count) if c != 1]
        total = len(bad)
    bad += in_run
    total += len(in_run)
    bad.sort()
    if bad:
        described = set(bad[:_MAX_PAGE_VIOLATIONS])
        places: dict[int, list[tuple]] = {p: [free] if p in in_run else [] for p in described}
        for where, pages in sources:
            for p in pages:
                if p in places:
                    places[p].append(where)
        for p in sorted(described):
            where = places[p]
            if not where:
                out.append(Violation(1, f"page {p} is nowhere: not free, not cached, not owned (leaked)", (p,)))
                continue
            node_ids = tuple(w[1] for w in where if w[0] == "node")
            alloc_ids = tuple(w[1].id for w in where if w[0] == "tail")
            out.append(Violation(1, f"page {p} is in {len(where)} places: {', '.join(map(_where, where))}", (p,),
                                 node_ids, alloc_ids))
        more = total - len(described)
        if more > 0:
            out.append(Violation(1, f"... and {more} more pages not in exactly one place"))
    _check_page_table(snap, explicit_free, run, set(bad), out)


def _first_missing(present, page_count: int, limit: int) -> list[int]:
    """Up to ``limit`` pages below ``page_count`` not in ``present``. O(len(present) + limit):
    among the first len(present) + limit page numbers at least ``limit`` are missing."""
    out = []
    p = 0
    while len(out) < limit and p < page_count:
        if p not in present:
            out.append(p)
        p += 1
    return out


def _check_page_table(snap, explicit_free, run, bad, out) -> None:
    """The page table is derived data: each row must say what the primary data says.
    Reads the stored rows only (a lazy table's later rows are free by construction, and
    the pages they stand for are in the untouched run)."""
    if len(snap.pages) != snap.page_count:
        out.append(Violation(1, f"page table has {len(snap.pages)} rows for a pool of {snap.page_count}"))
    rows = touched_rows(snap.pages)
    used = min(run.start if run else snap.page_count, len(snap.pages))
    if len(rows) < used:  # a lazy table makes the rows of pages used but not stored: check them too
        rows = snap.pages[:used]
    # What each row must say, from the primary data; dicts of what is there already (no
    # row objects built: a million-page table is checked in well under a second).
    is_free = set(explicit_free)
    node_at = {n.page: n for n in snap.nodes if n.page is not None}
    owner_at = {p: a.id for a in snap.allocations if not a.released for p in a.pages[max(a.published, 0):]}
    wrong = 0
    for i, info in enumerate(rows):
        if info.page != i:
            out.append(Violation(1, f"page table row {i} describes page {info.page}", (i,)))
            wrong += 1
        elif i not in bad:
            n = node_at.get(i)
            if n is not None:
                row = (CACHED, None, n.id, n.ref)
            elif i in owner_at:
                row = (OWNED, owner_at[i], None, 0)
            elif i in is_free or i in run:
                row = (FREE, None, None, 0)
            else:
                continue  # in no place: reported above
            if (info.state, info.owner, info.node, info.ref) != row:
                out.append(Violation(1, f"page table says page {i} is {_row(info)}, but it is "
                                        f"{_row(PageInfo(i, *row))}", (i,)))
                wrong += 1
        if wrong >= _MAX_PAGE_VIOLATIONS:
            out.append(Violation(1, "... and possibly more wrong rows in the page table"))
            break


def _row(info: PageInfo) -> str:
    if info.state == CACHED:
        return f"cached (node {info.node}, ref {info.ref})"
    if info.state == OWNED:
        return f"owned (allocation {info.owner})"
    return info.state if info.owner is None and info.node is None and not info.ref else f"{info.state} {info!r}"


def _where(where: tuple) -> str:
    kind, who = where
    if kind == "free":
        return "the free list"
    if kind == "node":
        return f"node {who}"
    return f"the unpublished tail of {who.label}"


def _check_refs(snap, nodes, paths, out) -> None:
    counts = dict.fromkeys(nodes, 0)
    for a in snap.allocations:
        for node_id in paths.get(a.id, ()):
            counts[node_id] += 1
    wrong = [n for n in snap.nodes if n.parent is not None and n.ref != counts[n.id]]
    if not wrong:
        return
    # Name the holders only for the nodes that need them (a path can be a million nodes).
    holders: dict[int, list[str]] = {n.id: [] for n in wrong}
    for a in snap.allocations:
        for node_id in paths.get(a.id, ()):
            if node_id in holders:
                holders[node_id].append(a.label)
    for n in wrong:
        who = ", ".join(holders[n.id]) or "none"
        out.append(Violation(2, f"node {n.id} (page {n.page}) has ref {n.ref} but {counts[n.id]} live allocations "
                                f"hold it (holders: {who})", _page(n), (n.id,)))


def _check_heap(snap, nodes, out) -> None:
    if snap.kind != "trie":
        return
    has_child = {n.parent for n in snap.nodes if n.parent is not None}
    candidates = {n.id for n in snap.nodes if n.parent is not None and n.ref == 0 and n.id not in has_child}
    in_heap = list(snap.heap)
    heap_set = set(in_heap)
    if len(heap_set) != len(in_heap):
        out.append(Violation(3, f"the heap lists node(s) {_abbreviated(_repeated(in_heap))} twice", (), tuple(_repeated(in_heap))))
    for node_id in sorted(candidates - heap_set):
        n = nodes[node_id]
        out.append(Violation(3, f"node {node_id} (page {n.page}) is a childless ref-0 node but not in the eviction "
                                f"heap: it can never be evicted", _page(n), (node_id,)))
    for node_id in sorted(heap_set - candidates):
        n = nodes.get(node_id)
        if n is None:
            out.append(Violation(3, f"the heap lists node {node_id}, which does not exist", (), (node_id,)))
            continue
        why = "it is the root" if n.parent is None else f"it has ref {n.ref}" if n.ref else "it has children"
        out.append(Violation(3, f"node {node_id} (page {n.page}) is in the eviction heap but {why}",
                             _page(n), (node_id,)))
    for i in range(1, len(in_heap)):
        parent, child = nodes.get(in_heap[(i - 1) // 2]), nodes.get(in_heap[i])
        if parent is None or child is None:
            continue
        parent_key, child_key = snap.node_key(parent), snap.node_key(child)
        if parent_key > child_key:
            out.append(Violation(3, f"heap property broken: node {parent.id} {snap.policy} key {parent_key} is above "
                                    f"node {child.id} key {child_key}", _page(parent) + _page(child),
                                 (parent.id, child.id)))


# -- the hash-block cache (kind "hash") -------------------------------------------------------


def check_hash_snapshot(snap: Snapshot) -> list[Violation]:
    """Every violation of the hash cache's invariants (6-11) in ``snap``; [] when healthy.

    O(pages used + blocks + allocation pages), one sha256 per block and per published page
    (keys are recomputed from the tokens, not trusted)."""
    out: list[Violation] = []
    tpp = snap.tokens_per_page
    page_count = snap.page_count
    if snap.nodes or snap.heap:
        out.append(Violation(11, f"a hash cache has no trie: the snapshot lists {len(snap.nodes)} nodes and "
                                 f"{len(snap.heap)} heap entries"))
    blocks_at = _check_blocks(snap, tpp, page_count, out)
    refs, owners = _check_hash_allocations(snap, tpp, page_count, blocks_at, out)
    _check_queue(snap, refs, page_count, out)
    _check_hash_page_table(snap, refs, owners, blocks_at, out)
    _check_reachable(snap, out)
    out.sort(key=lambda v: v.invariant)
    return out


_HEX_DIGITS = frozenset("0123456789abcdef")


def _is_key(text) -> bool:
    """64 lower-case hex digits (a set comparison in C: this runs once per block per check)."""
    return type(text) is str and len(text) == 64 and _HEX_DIGITS.issuperset(text)


def _check_blocks(snap, tpp, page_count, out) -> dict[int, object]:
    """Invariant 9; returns page -> the block it holds (the first, if several claim it)."""
    blocks_at: dict[int, object] = {}
    ids: set[int] = set()
    for b in snap.blocks:
        where = (b.page,) if type(b.page) is int else ()
        if b.id in ids:
            out.append(Violation(9, f"two cached blocks have id {b.id}", where, (b.id,)))
        ids.add(b.id)
        if type(b.id) is not int or not 0 < b.id < snap.next_seq:
            out.append(Violation(9, f"block id {b.id!r} is not between 1 and next_seq {snap.next_seq}", where, ()))
        if type(b.page) is not int or not 0 <= b.page < page_count:
            out.append(Violation(9, f"block {b.id} is on page {b.page!r}, not a page of the pool of {page_count}",
                                 (), (b.id,)))
            continue
        if b.page in blocks_at:
            out.append(Violation(9, f"page {b.page} holds two cached blocks ({blocks_at[b.page].id} and {b.id}); "
                                    "a page holds at most one", (b.page,), (blocks_at[b.page].id, b.id)))
            continue
        blocks_at[b.page] = b
        if not isinstance(b.tokens, tuple) or len(b.tokens) != tpp or not all(type(t) is int for t in b.tokens):
            out.append(Violation(9, f"block {b.id} (page {b.page}) holds {len(b.tokens)} tokens, not a full page "
                                    f"of {tpp}", (b.page,), (b.id,)))
            continue
        if not _is_key(b.key) or b.parent is not None and not _is_key(b.parent):
            out.append(Violation(9, f"block {b.id} (page {b.page}) has a key or parent key that is not 64 hex digits",
                                 (b.page,), (b.id,)))
            continue
        expected = block_key(None if b.parent is None else bytes.fromhex(b.parent), b.tokens).hex()
        if b.key != expected:
            out.append(Violation(9, f"block {b.id} (page {b.page}) is cached under key {b.key[:12]}.., but its parent "
                                    f"key and tokens chain to {expected[:12]}..", (b.page,), (b.id,)))
    return blocks_at


def _check_hash_allocations(snap, tpp, page_count, blocks_at, out):
    """Invariants 10 and 6; returns the refs each page should have and the owner of each
    page outside a published prefix."""
    refs: dict[int, int] = {}
    owners: dict[int, list] = {}
    for a in snap.allocations:
        if a.released:
            _allocation_fits(a, tpp, 10, out)
            continue
        if len(set(a.pages)) != len(a.pages):
            dup = _repeated(a.pages)
            out.append(Violation(10, f"allocation {a.label}'s block table lists page(s) {_abbreviated(dup)} twice",
                                 tuple(dup), (), (a.id,)))
        for p in a.pages:
            if type(p) is not int or not 0 <= p < page_count:
                out.append(Violation(10, f"allocation {a.label} names page {p!r}, not a page of the pool of "
                                         f"{page_count}", (), (), (a.id,)))
                continue
            refs[p] = refs.get(p, 0) + 1
        if not _allocation_fits(a, tpp, 10, out):
            continue
        parent = None
        for i in range(a.published):
            key = block_key(parent, a.tokens[i * tpp:(i + 1) * tpp])
            page = a.pages[i]
            b = blocks_at.get(page)
            if b is None or b.key != key.hex():
                holds = "no cached block" if b is None else f"block {b.id}, another key"
                out.append(Violation(10, f"allocation {a.label}'s published page {i} (page {page}) holds {holds}, not "
                                         f"the block its tokens spell", (page,), (b.id,) if b else (), (a.id,)))
                break
            parent = key
        for page in a.pages[max(a.published, 0):]:
            owners.setdefault(page, []).append(a)
            b = blocks_at.get(page)
            if b is not None:
                out.append(Violation(10, f"page {page} is in the unpublished tail of {a.label} but holds cached "
                                         f"block {b.id}", (page,), (b.id,), (a.id,)))
    for page, holders in owners.items():
        if len(holders) > 1 and page not in blocks_at:
            out.append(Violation(10, f"uncached page {page} is in the block tables of "
                                     f"{', '.join(a.label for a in holders)}; only a cached page is shared", (page,),
                                 (), tuple(a.id for a in holders)))
    return refs, owners


def _check_queue(snap, refs, page_count, out) -> None:
    """Invariant 7: the queue lists each ref-0 page once and no referenced page.
    Counts without reading the untouched run a lazy queue implies (10**12-page pools)."""
    explicit, run = untouched_free(snap.free)
    seen: dict[int, int] = {}
    for p in explicit:
        if type(p) is not int or not 0 <= p < page_count:
            out.append(Violation(7, f"the free queue names page {p!r}, not a page of the pool of {page_count}"))
            continue
        seen[p] = seen.get(p, 0) + 1
    twice = sorted(p for p, n in seen.items() if n > 1 or p in run)
    if twice:
        out.append(Violation(7, f"the free queue lists page(s) {_abbreviated(twice)} twice", tuple(twice[:_QUOTED])))
    queued = [p for p in refs if p in seen or p in run]
    for p in sorted(queued)[:_MAX_PAGE_VIOLATIONS]:
        out.append(Violation(7, f"page {p} is in the free queue but has ref {refs[p]}", (p,)))
    low = run.start if run else page_count
    covered = len({p for p in seen if p < low} | {p for p in refs if p < low})
    if covered < low:  # some page below the run is neither queued nor referenced
        lost = [p for p in range(low) if p not in seen and p not in refs][:_MAX_PAGE_VIOLATIONS]
        for p in lost:
            out.append(Violation(7, f"page {p} has ref 0 but is not in the free queue (leaked: never handed out "
                                    "again)", (p,)))


def _check_hash_page_table(snap, refs, owners, blocks_at, out) -> None:
    """Invariants 8 and 11: each page row says what the primary data says."""
    if len(snap.pages) != snap.page_count:
        out.append(Violation(11, f"page table has {len(snap.pages)} rows for a pool of {snap.page_count}"))
    _, run = untouched_free(snap.free)
    rows = touched_rows(snap.pages)
    used = min(run.start if run else snap.page_count, len(snap.pages))
    if len(rows) < used:
        rows = snap.pages[:used]
    wrong = 0
    for i, info in enumerate(rows):
        if info.page != i:
            out.append(Violation(11, f"page table row {i} describes page {info.page}", (i,)))
            wrong += 1
            continue
        ref = refs.get(i, 0)
        if info.ref != ref:
            out.append(Violation(8, f"page {i} has ref {info.ref} but {ref} live allocations hold it", (i,)))
            wrong += 1
        b = blocks_at.get(i)
        if b is not None:
            row = (CACHED, None, b.id)
        elif ref:
            holders = owners.get(i, ())
            row = (OWNED, holders[0].id if holders else None, None)
        else:
            row = (FREE, None, None)
        if (info.state, info.owner, info.node) != row:
            out.append(Violation(11, f"page table says page {i} is {info.state} (owner {info.owner}, block "
                                     f"{info.node}), but it is {row[0]} (owner {row[1]}, block {row[2]})", (i,)))
            wrong += 1
        if wrong >= _MAX_PAGE_VIOLATIONS:
            out.append(Violation(11, "... and possibly more wrong rows in the page table"))
            break


def _check_reachable(snap, out) -> None:
    """Invariant 11: ``reachable`` is true exactly when every block of the chain is cached."""
    parent_of = {b.key: b.parent for b in snap.blocks}
    settled: dict = {}
    for key in parent_of:
        trail: dict = {}  # insertion-ordered set: the chain walked so far
        k = key
        while k is not None and k not in settled:
            if k not in parent_of or k in trail:  # not cached (or a cycle, which sha256 makes impossible)
                settled[k] = False
                break
            trail[k] = None
            k = parent_of[k]
        ok = k is None or settled[k]
        for t in trail:
            settled[t] = ok
    for b in snap.blocks:
        if b.reachable is not settled.get(b.key, False):
            why = "its whole chain is cached" if settled.get(b.key) else "a block of its chain is not cached"
            out.append(Violation(11, f"block {b.id} (page {b.page}) says reachable={b.reachable}, but {why}",
                                 (b.page,) if type(b.page) is int else (), (b.id,)))


# -- consecutive snapshots: re-check what changed ----------------------------------------------


class IncrementalChecker:
    """:func:`check_snapshot` for a sequence of snapshots of one cache (a timeline), at the
    cost of what changed from one to the next.

    After a snapshot the full check found healthy, the checker keeps an index of it (rows by
    id, trie keys, child counts, who holds each page, each allocation's path, the heap's
    slots). For the next snapshot it takes the rows that changed (the cache's own account,
    :attr:`Snapshot._changes`, when it names the snapshot checked last; else a comparison by
    identity against it), updates the index and re-checks only what those rows can break:

    * the changed and added nodes' shape (parent present, a full page of tokens, a key and
      a page of their own, numbered above a new parent: no cycle), the gone ones' (no
      children, on no allocation's path), and last_access against the clock;
    * the changed allocations' fit and their trie paths (a walk of their published pages);
    * the ref of every node whose row changed or whose count of paths did;
    * the places and page-table rows of every page a changed row, allocation or free-list
      entry names, before and after;
    * the heap's changed slots and the slots of changed nodes, against their parents and
      children, and that every node whose candidacy could change is in the heap exactly when
      it is a childless ref-0 node.

    Everything else is unchanged rows of a healthy snapshot, so it still holds. It proves
    health only: at the first doubt (a check that fails, a field a cache never changes, a
    previous snapshot with violations, another cache's snapshot) it runs the full check and
    returns its violations, so its verdict is the full check's at every step (the oracle in
    tests/core/test_invariants_incremental.py).

    Hash-cache snapshots get their own index (:class:`_HashIndex`: blocks by id and page,
    each key's copies and child blocks, each page's ref, the key its holders' published
    prefixes need there and the allocation whose tail holds it, the queued pages) and the
    same contract (the oracle in tests/core/test_hash_incremental.py).
    """

    def __init__(self) -> None:
        self._last: Snapshot | None = None  # the last snapshot checked, when healthy and indexed
        self._index: _Index | None = None
        #: Checks that ran in full (the first, and every one the incremental proof gave up on).
        self.full_checks = 0

    def check(self, snap: Snapshot) -> list[Violation]:
        """Every violation in ``snap``, as :func:`check_snapshot` reports them."""
        index, last = self._index, self._last
        if index is not None and last is not None and _comparable(last, snap):
            changes = index.changes_since(last, snap)
            if changes is not None and index.advance(snap, *changes):
                self._last = snap
                return []
        return self.check_full(snap)

    def trust(self, snap: Snapshot) -> None:
        """Take ``snap`` as healthy without checking it: a snapshot an earlier check of the
        same timeline found healthy (kvviz's keyframes, restored for a jump), so the next
        :meth:`check` costs what changed since it instead of a full check. A snapshot that
        is not healthy makes later verdicts wrong: the caller vouches for it."""
        index = _INDEXES.get(snap.kind)
        if index is not None:
            self._index, self._last = index(snap), snap

    def check_full(self, snap: Snapshot) -> list[Violation]:
        """:func:`check_snapshot` on ``snap``; the next :meth:`check` starts from it."""
        self.full_checks += 1
        out = check_snapshot(snap)
        index = _INDEXES.get(snap.kind)
        if not out and index is not None:
            self._index, self._last = index(snap), snap
        else:
            self._index = self._last = None
        return out


def _comparable(last: Snapshot, snap: Snapshot) -> bool:
    return (snap.kind == last.kind and snap.schema == last.schema and snap.policy == last.policy
            and snap.tokens_per_page == last.tokens_per_page and snap.page_count == last.page_count
            and snap.clock >= last.clock and len(snap.pages) == snap.page_count)


_id_of = attrgetter("id")


def _row_by_id(rows, row_id: int):
    """The row with this id in ``rows`` sorted by id (as a kvcore snapshot lists them), or None."""
    i = bisect_left(rows, row_id, key=_id_of)
    if i < len(rows) and rows[i].id == row_id:
        return rows[i]
    return None


def _changes_since(last: Snapshot, snap: Snapshot, index: "_Index"):
    """``(nodes, pages, allocations)``: the changed rows of ``snap`` against ``last`` (node and
    allocation id -> the new row, or None when gone; the changed pages), or None when a
    comparison would cost about what the full check does."""
    changes = snap._changes
    if changes is not None and changes.before() is last:
        nodes = {i: _row_by_id(snap.nodes, i) for i in changes.nodes}
        allocations = {i: _row_by_id(snap.allocations, i) for i in changes.allocations}
        if len(snap.nodes) != len(index.nodes) + sum(1 for i, n in nodes.items() if n is not None) - sum(
                1 for i, n in nodes.items() if i in index.nodes):
            return None  # not what the account says: let the full check say what is wrong
        return nodes, changes.pages, allocations
    return _changed_by_identity(last, snap, index.nodes, snap.nodes, index.allocations)


def _changed_by_identity(last: Snapshot, snap: Snapshot, kept: dict, rows, kept_allocations: dict):
    """``(rows, pages, allocations)`` changed by identity: a row object the last snapshot did
    not have changed (or is new), whatever the design calls its rows (a trie's nodes, a hash
    cache's blocks); None when most rows are new (the full check costs the same then)."""
    changed = _changed_rows(kept, rows)
    allocations = _changed_rows(kept_allocations, snap.allocations)
    if changed is None or allocations is None:
        return None
    old_rows, new_rows = touched_rows(last.pages), touched_rows(snap.pages)
    common = min(len(old_rows), len(new_rows))
    pages = list(compress(range(common), map(is_not, old_rows[:common], new_rows[:common])))
    pages += range(common, max(len(old_rows), len(new_rows)))
    if 2 * (len(changed) + len(pages) + len(allocations)) > len(rows) + len(new_rows) + len(snap.allocations) + 64:
        return None  # most rows are new: the full check costs the same
    return changed, pages, allocations


def _changed_rows(old: dict, rows) -> dict | None:
    """Row id -> new row (None: gone) for the rows of ``rows`` not in ``old`` by identity; None
    when two rows share an id."""
    changed = {}
    ids = set()
    for row in rows:
        ids.add(row.id)
        if old.get(row.id) is not row:
            changed[row.id] = row
    if len(ids) != len(rows):
        return None
    if len(ids) != len(old) + sum(1 for i in changed if i not in old):
        for i in old:
            if i not in ids:
                changed[i] = None
    return changed


def _queue_moves(old, new):
    """``(taken, added)`` when ``new`` is ``old`` with pages taken from its front and added at
    its back (what a free list does between two snapshots), found with one comparison in C;
    None otherwise."""
    if not new:
        return tuple(old), ()
    try:
        first = old.index(new[0]) if old else len(old)
    except ValueError:
        first = len(old)  # every old page taken
    kept = len(old) - first
    if kept > len(new) or new[:kept] != old[first:]:
        return None
    return old[:first], new[kept:]


class _Index:
    """What :class:`IncrementalChecker` knows of the last healthy snapshot it checked."""

    def __init__(self, snap: Snapshot):
        tpp = snap.tokens_per_page
        self.nodes = {n.id: n for n in snap.nodes}
        self.key_of = {(n.parent, n.tokens): n.id for n in snap.nodes if n.parent is not None}
        self.kids: dict[int, int] = {}
        for n in snap.nodes:
            if n.parent is not None:
                self.kids[n.parent] = self.kids.get(n.parent, 0) + 1
        self.page_node = {n.page: n.id for n in snap.nodes if n.page is not None}
        roots = [n.id for n in snap.nodes if n.parent is None]
        self.root = roots[0] if roots else None
        self.allocations = {a.id: a for a in snap.allocations}
        self.paths: dict[int, tuple[int, ...]] = {}
        self.expected: dict[int, int] = {}  # node id -> live allocations whose path holds it
        self.owner: dict[int, int] = {}  # page -> the allocation whose unpublished tail holds it
        for a in snap.allocations:
            path = self._walk(a, tpp)
            self.paths[a.id] = path
            for node_id in path:
                self.expected[node_id] = self.expected.get(node_id, 0) + 1
            for p in a.pages[a.published:]:
                self.owner[p] = a.id
        self.explicit, self.run = untouched_free(snap.free)
        self.free = set(self.explicit)
        self.heap = tuple(snap.heap)
        self.heap_pos = {node_id: i for i, node_id in enumerate(self.heap)}

    def changes_since(self, last: Snapshot, snap: Snapshot):
        """The rows of ``snap`` that changed since ``last`` (see :func:`_changes_since`)."""
        return _changes_since(last, snap, self)

    def _walk(self, a, tpp: int) -> tuple[int, ...] | None:
        """``a``'s published path by the trie's keys, or None when it is not whole."""
        path = []
        parent = self.root
        key_of, nodes = self.key_of, self.nodes
        for i in range(a.published):
            node_id = key_of.get((parent, a.tokens[i * tpp:(i + 1) * tpp]))
            if node_id is None or nodes[node_id].page != a.pages[i]:
                return None
            path.append(node_id)
            parent = node_id
        return tuple(path)

    def advance(self, snap: Snapshot, changed_nodes: dict, changed_pages, changed_allocations: dict) -> bool:
        """Update the index to ``snap``, which differs from the last snapshot in the rows
        given; True when that proves ``snap`` healthy. False at the first doubt (the index is
        then unusable: the caller checks in full and rebuilds it)."""
        tpp, page_count, clock = snap.tokens_per_page, snap.page_count, snap.clock
        nodes, key_of, kids, page_node = self.nodes, self.key_of, self.kids, self.page_node
        pages_to_check = set(changed_pages)
        ref_to_check = set()
        candidacy_to_check = set()
        gone = []
        # Nodes: the gone ones first (a new node may take a gone one's page), then the rest.
        for node_id in sorted(changed_nodes):
            new = changed_nodes[node_id]
            old = nodes.get(node_id)
            if new is not None or old is None:
                continue
            if old.parent is None:
                return False  # the root went
            del nodes[node_id]
            if key_of.get((old.parent, old.tokens)) == node_id:
                del key_of[(old.parent, old.tokens)]
            kids[old.parent] = kids.get(old.parent, 0) - 1
            candidacy_to_check.add(old.parent)
            candidacy_to_check.add(node_id)
            if page_node.get(old.page) == node_id:
                del page_node[old.page]
            pages_to_check.add(old.page)
            gone.append(node_id)
        for node_id in sorted(changed_nodes):
            new = changed_nodes[node_id]
            if new is None:
                continue
            if new.id != node_id or type(new.last_access) is not int or new.last_access > clock:
                return False
            old = nodes.get(node_id)
            if old is not None:
                if (old.parent, old.tokens, old.page) != (new.parent, new.tokens, new.page):
                    return False  # a cache never moves a node
            elif (new.parent is None or new.parent not in nodes or len(new.tokens) != tpp
                  or (new.parent, new.tokens) in key_of or type(new.page) is not int
                  or not 0 <= new.page < page_count or new.page in page_node):
                return False  # (a parent is either older or new and numbered below: no cycle)
            else:
                key_of[(new.parent, new.tokens)] = node_id
                kids[new.parent] = kids.get(new.parent, 0) + 1
                page_node[new.page] = node_id
                candidacy_to_check.add(new.parent)
            nodes[node_id] = new
            if new.parent is not None:
                ref_to_check.add(node_id)
                candidacy_to_check.add(node_id)
                pages_to_check.add(new.page)
        if len(nodes) != len(snap.nodes):
            return False
        # Allocations: take the old ones' paths and tails out, then put the new ones' in.
        allocations, paths, expected, owner = self.allocations, self.paths, self.expected, self.owner
        for allocation_id in changed_allocations:
            old = allocations.pop(allocation_id, None)
            if old is None:
                continue
            for node_id in paths.pop(allocation_id):
                expected[node_id] -= 1
                ref_to_check.add(node_id)
            for p in old.pages[old.published:]:
                if owner.get(p) == allocation_id:
                    del owner[p]
                pages_to_check.add(p)
        for allocation_id in sorted(changed_allocations):
            a = changed_allocations[allocation_id]
            if a is None:
                continue
            if (a.id != allocation_id or a.released or len(a.pages) * tpp < len(a.tokens) or a.published < 0
                    or a.published > len(a.pages) or a.published * tpp > len(a.tokens)
                    or len(set(a.pages)) != len(a.pages)):
                return False
            path = self._walk(a, tpp)
            if path is None:
                return False
            allocations[allocation_id] = a
            paths[allocation_id] = path
            for node_id in path:
                expected[node_id] = expected.get(node_id, 0) + 1
                ref_to_check.add(node_id)
            for p in a.pages[a.published:]:
                if type(p) is not int or not 0 <= p < page_count or p in owner:
                    return False
                owner[p] = allocation_id
                pages_to_check.add(p)
        if len(allocations) != len(snap.allocations):
            return False
        for node_id in gone:
            if kids.get(node_id) or expected.get(node_id):
                return False  # a gone node's children stay, or an allocation's path still runs through it
            kids.pop(node_id, None)
            expected.pop(node_id, None)
        for node_id in ref_to_check:
            n = nodes.get(node_id)
            if n is not None and n.parent is not None and n.ref != expected.get(node_id, 0):
                return False
        if not self._places_hold(snap, pages_to_check):
            return False
        if snap.kind == "trie" and not self._heap_holds(snap, changed_nodes, candidacy_to_check):
            return False
        return True

    def _places_hold(self, snap: Snapshot, pages_to_check: set) -> bool:
        """Invariant 1 for the pages whose rows or places may have changed (the free list's
        changes found here, in C: set differences)."""
        explicit, run = untouched_free(snap.free)
        old_run = self.run
        if run.stop != old_run.stop or run.start < old_run.start:
            return False
        low = run.start if run else snap.page_count
        moved = _queue_moves(self.explicit, explicit)
        free = self.free
        if moved is None:  # not a queue's moves: compare as sets (in C)
            new_free = set(explicit)
            if len(new_free) != len(explicit):
                return False  # a page listed twice
            added = new_free - free
            pages_to_check |= new_free ^ free
            free = new_free
        else:
            taken, added = moved
            free.difference_update(taken)
            pages_to_check.update(taken)
            for p in added:
                if p in free:
                    return False  # a page listed twice
                free.add(p)
            pages_to_check.update(added)
        for p in added:
            if type(p) is not int or not 0 <= p < low:
                return False
        pages_to_check.update(range(old_run.start, run.start))  # handed out for the first time
        self.free, self.run, self.explicit = free, run, explicit
        page_node, owner, nodes, table = self.page_node, self.owner, self.nodes, snap.pages
        page_count = snap.page_count
        for p in pages_to_check:
            if type(p) is not int or not 0 <= p < page_count:
                return False
            is_free = p in free or p in run
            node_id = page_node.get(p)
            holder = owner.get(p)
            if is_free + (node_id is not None) + (holder is not None) != 1:
                return False
            info = table[p]
            if node_id is not None:
                expected = (p, CACHED, None, node_id, nodes[node_id].ref)
            elif holder is not None:
                expected = (p, OWNED, holder, None, 0)
            else:
                expected = (p, FREE, None, None, 0)
            if (info.page, info.state, info.owner, info.node, info.ref) != expected:
                return False
        return True

    def _heap_holds(self, snap: Snapshot, changed_nodes: dict, candidacy_to_check: set) -> bool:
        """Invariant 3 around the heap's changed slots and the nodes whose candidacy or key
        may have changed."""
        old, new = self.heap, snap.heap
        common = min(len(old), len(new))
        slots = list(compress(range(common), map(ne, old[:common], new[:common])))
        slots += range(common, max(len(old), len(new)))
        pos = self.heap_pos
        for i in slots:
            if i < len(old) and pos.get(old[i]) == i:
                del pos[old[i]]
        for i in slots:
            if i < len(new):
                node_id = new[i]
                if node_id in pos:
                    return False  # listed twice
                pos[node_id] = i
                candidacy_to_check.add(node_id)
            if i < len(old):
                candidacy_to_check.add(old[i])
        if len(pos) != len(new):
            return False
        nodes, kids = self.nodes, self.kids
        for node_id in candidacy_to_check:
            n = nodes.get(node_id)
            candidate = n is not None and n.parent is not None and n.ref == 0 and not kids.get(node_id)
            if candidate != (node_id in pos):
                return False
        check = set(slots)
        for node_id in changed_nodes:
            i = pos.get(node_id)
            if i is not None:
                check.add(i)
        key = snap.node_key
        n = len(new)
        for i in check:
            if i >= n:
                continue
            k = key(nodes[new[i]])
            if i and key(nodes[new[(i - 1) // 2]]) > k:
                return False
            for c in (2 * i + 1, 2 * i + 2):
                if c < n and k > key(nodes[new[c]]):
                    return False
        self.heap = tuple(new)
        return True


class _HashIndex:
    """What :class:`IncrementalChecker` knows of the last healthy hash snapshot it checked,
    and what a changed row can break (so what :meth:`advance` re-checks), invariant by
    invariant:

    * 9, the blocks: a changed block's own fields (its id, a page of the pool, a full page
      of ints, keys of 64 hex digits, its key the sha256 of its parent key and tokens, only
      when one of those changed) and that no other block has its page or id.
    * 10, the allocations: a changed allocation's fit, its block table, and its published
      prefix, block by block: block i sits on page i, holds tokens i, and names block i-1's
      key as its parent (block 0: none). With 9 that is the same as its key being the
      chain's key, so no sha256 is needed, and a prefix kept from the last snapshot is not
      walked again: each page a published prefix needs keeps the key it needs there
      (re-checked with the page), and a page in an unpublished tail holds no block and has
      no other holder.
    * 7, 8 and 11, the free queue, the refs and the page table: every page a changed block,
      allocation, row or queue entry names, before and after, and the pages leaving or
      joining the never-used run: queued exactly when no live allocation holds it, its row
      what its block, ref and holder say.
    * 11, reachability, the one invariant that spans a chain: checked as a local rule, a
      block is reachable exactly when it has no parent or its parent key is cached and
      reachable. On keys that chain (9) and so cannot cycle, the rule holding at every
      block makes every flag its whole chain's truth, by induction from block 0. A block's
      rule can break only when its own row changes or its parent key's state (cached and
      reachable) does: re-checked are the changed blocks, and the child blocks of every key
      whose state changed (the index keeps each key's copies and child blocks). A copy
      added or dropped, or a flag flipped, changes a key's state; an eviction deep in a
      chain costs the blocks it makes unreachable, which are rows that changed.
    """

    def __init__(self, snap: Snapshot):
        self.blocks = {b.id: b for b in snap.blocks}
        self.block_at = {b.page: b for b in snap.blocks}
        self.copies: dict[str, set[int]] = {}  # key -> the ids of the blocks cached under it
        self.kids: dict[str, set[int]] = {}  # key -> the ids of the blocks naming it as parent
        for b in snap.blocks:
            self.copies.setdefault(b.key, set()).add(b.id)
            if b.parent is not None:
                self.kids.setdefault(b.parent, set()).add(b.id)
        self.allocations = {a.id: a for a in snap.allocations}
        self.chains: dict[int, tuple[str, ...]] = {}  # live allocation -> its published prefix's keys
        self.refs: dict[int, int] = {}  # page -> live allocations holding it
        self.need: dict[int, list] = {}  # page -> [the key published prefixes need there, how many]
        self.tail: dict[int, int] = {}  # page -> the allocation whose unpublished tail holds it
        for a in snap.allocations:
            if a.released:
                continue
            chain = tuple(self.block_at[p].key for p in a.pages[:a.published])
            self._add(a, chain)
        explicit, self.run = untouched_free(snap.free)
        self.queued = set(explicit)
        self.next_seq = snap.next_seq

    def changes_since(self, last: Snapshot, snap: Snapshot):
        """``(blocks, pages, allocations)``: the changed rows of ``snap`` against ``last``
        (block and allocation id -> the new row, or None when gone; the changed pages), from
        the cache's own account when it names ``last``, else by identity; None when a
        comparison would cost about what the full check does."""
        changes = snap._changes
        if changes is not None and changes.before() is last:  # a hash cache's nodes are block ids
            blocks = {i: _row_by_id(snap.blocks, i) for i in changes.nodes}
            allocations = {i: _row_by_id(snap.allocations, i) for i in changes.allocations}
            return blocks, changes.pages, allocations
        return _changed_by_identity(last, snap, self.blocks, snap.blocks, self.allocations)

    def _state(self, key) -> bool:
        """Whether ``key`` is cached and reachable: what its child blocks' flags must say.
        Any copy answers: copies of a key share its parent (9), and each copy's own rule is
        checked, so a copy that disagrees fails its rule."""
        copies = self.copies.get(key)
        return bool(copies) and self.blocks[next(iter(copies))].reachable

    def _add(self, a, chain: tuple[str, ...]) -> bool:
        """Count live allocation ``a`` (its published prefix's keys ``chain``) in refs,
        needs and tails; False when a page of its tail has another holder."""
        refs, need, tail = self.refs, self.need, self.tail
        for p in a.pages:
            refs[p] = refs.get(p, 0) + 1
        for p, key in zip(a.pages, chain):
            entry = need.get(p)
            if entry is None:
                need[p] = [key, 1]
            elif entry[0] != key:
                return False  # two prefixes need two keys on one page
            else:
                entry[1] += 1
        for p in a.pages[a.published:]:
            if p in tail:
                return False
            tail[p] = a.id
        self.chains[a.id] = chain
        return True

    def _drop(self, a) -> None:
        """Take live allocation ``a`` (as the index counted it) out of refs, needs and tails."""
        refs, need, tail = self.refs, self.need, self.tail
        for p in a.pages:
            if refs[p] == 1:
                del refs[p]
            else:
                refs[p] -= 1
        for p in a.pages[:a.published]:
            entry = need[p]
            if entry[1] == 1:
                del need[p]
            else:
                entry[1] -= 1
        for p in a.pages[a.published:]:
            if tail.get(p) == a.id:
                del tail[p]
        del self.chains[a.id]

    def advance(self, snap: Snapshot, changed_blocks: dict, changed_pages, changed_allocations: dict) -> bool:
        """Update the index to ``snap``, which differs from the last snapshot in the rows
        given; True when that proves ``snap`` healthy. False at the first doubt (the index is
        then unusable: the caller checks in full and rebuilds it)."""
        tpp, page_count, next_seq = snap.tokens_per_page, snap.page_count, snap.next_seq
        if snap.nodes or snap.heap or len(snap.pages) != page_count or next_seq < self.next_seq:
            return False
        blocks, block_at, copies, kids = self.blocks, self.block_at, self.copies, self.kids
        pages_to_check = set(changed_pages)
        keys = set()  # the keys whose state (cached and reachable) may change
        for block_id, b in changed_blocks.items():
            if b is not None:
                if (type(b.id) is not int or b.id != block_id or not 0 < block_id < next_seq
                        or type(b.page) is not int or not 0 <= b.page < page_count
                        or not isinstance(b.tokens, tuple) or len(b.tokens) != tpp
                        or not all(type(t) is int for t in b.tokens)
                        or (b.reachable is not True and b.reachable is not False)
                        or not _is_key(b.key) or b.parent is not None and not _is_key(b.parent)):
                    return False
                keys.add(b.key)
            old = blocks.get(block_id)
            if old is not None:
                keys.add(old.key)
        before = {key: self._state(key) for key in keys}
        # The old rows out, then the new ones in (a new block may take a gone one's page).
        old_rows = {}
        for block_id in changed_blocks:
            old = blocks.pop(block_id, None)
            if old is None:
                continue
            old_rows[block_id] = old
            del block_at[old.page]
            copies[old.key].discard(block_id)
            if old.parent is not None:
                siblings = kids[old.parent]
                siblings.discard(block_id)
                if not siblings:
                    del kids[old.parent]
            pages_to_check.add(old.page)
        recheck = []  # blocks whose reachability rule may have broken
        for block_id in sorted(changed_blocks):
            b = changed_blocks[block_id]
            if b is None:
                continue
            if b.page in block_at:
                return False  # a page holds two blocks
            old = old_rows.get(block_id)
            if (old is None or (old.key, old.parent, old.tokens) != (b.key, b.parent, b.tokens)) and b.key != block_key(
                    None if b.parent is None else bytes.fromhex(b.parent), b.tokens).hex():
                return False
            blocks[block_id] = b
            block_at[b.page] = b
            copies.setdefault(b.key, set()).add(block_id)
            if b.parent is not None:
                kids.setdefault(b.parent, set()).add(block_id)
            pages_to_check.add(b.page)
            recheck.append(b)
        if len(blocks) != len(snap.blocks):
            return False
        for key in keys:
            if not copies.get(key):
                copies.pop(key, None)
            if self._state(key) != before[key]:
                recheck += (blocks[i] for i in kids.get(key, ()))
        for b in recheck:
            if b.reachable is not (b.parent is None or self._state(b.parent)):
                return False
        # Allocations: the old ones out, then the new ones in, each new published prefix walked.
        allocations, chains = self.allocations, self.chains
        old_allocations = {}
        for allocation_id in sorted(changed_allocations):
            old = allocations.pop(allocation_id, None)
            if old is None:
                continue
            old_allocations[allocation_id] = (old, chains.get(allocation_id))
            if not old.released:
                self._drop(old)
                pages_to_check.update(old.pages)
        for allocation_id in sorted(changed_allocations):
            a = changed_allocations[allocation_id]
            if a is None:
                continue
            if a.id != allocation_id or type(a.published) is not int or not isinstance(a.pages, tuple):
                return False
            if a.released:
                if a.pages or a.published:
                    return False
                allocations[allocation_id] = a
                continue
            pages, published, tokens = a.pages, a.published, a.tokens
            if (not isinstance(tokens, tuple) or published < 0 or published > len(pages)
                    or published * tpp > len(tokens) or len(pages) * tpp < len(tokens)):
                return False
            for p in pages:
                if type(p) is not int or not 0 <= p < page_count:
                    return False
            if len(set(pages)) != len(pages):
                return False
            chain: list[str] = []
            old, old_chain = old_allocations.get(allocation_id, (None, None))
            if old is not None and old_chain is not None and old.published <= published:
                kept = old.published
                if pages[:kept] == old.pages[:kept] and tokens[:kept * tpp] == old.tokens[:kept * tpp]:
                    chain = list(old_chain)  # still needed on each page: checked with the page
            parent = chain[-1] if chain else None
            for i in range(len(chain), published):
                b = block_at.get(pages[i])
                if b is None or b.parent != parent or b.tokens != tokens[i * tpp:(i + 1) * tpp]:
                    return False
                parent = b.key
                chain.append(parent)
            if not self._add(a, tuple(chain)):
                return False
            allocations[allocation_id] = a
            pages_to_check.update(pages)
        if len(allocations) != len(snap.allocations):
            return False
        # The free queue: its explicit entries compared as sets (in C), the run by its bounds.
        explicit, run = untouched_free(snap.free)
        old_run = self.run
        if run.stop != old_run.stop and (run or old_run):
            return False
        if run.start != old_run.start and (run or old_run):
            pages_to_check.update(range(min(run.start, old_run.start), max(run.start, old_run.start)))
        try:
            queued = set(explicit)
        except TypeError:
            return False  # an unhashable entry
        if len(queued) != len(explicit):
            return False  # a page listed twice
        joined, left = queued - self.queued, self.queued - queued
        for p in joined:
            if type(p) is not int or not 0 <= p < page_count:
                return False
        pages_to_check |= joined
        pages_to_check |= left
        refs, need, tail, table = self.refs, self.need, self.tail, snap.pages
        for p in pages_to_check:
            if type(p) is not int or not 0 <= p < page_count:
                return False
            in_run = p in run
            if in_run and p in queued:
                return False
            ref = refs.get(p, 0)
            if (in_run or p in queued) == (ref > 0):
                return False  # queued yet held, or held by none yet not queued
            b = block_at.get(p)
            entry = need.get(p)
            if entry is not None and (b is None or b.key != entry[0]):
                return False
            holder = tail.get(p)
            if b is not None:
                if holder is not None:
                    return False
                row = (CACHED, None, b.id)
            elif ref:
                row = (OWNED, holder, None)
            else:
                row = (FREE, None, None)
            info = table[p]
            if info.page != p or info.ref != ref or (info.state, info.owner, info.node) != row:
                return False
        self.queued, self.run, self.next_seq = queued, run, next_seq
        return True


#: The index :class:`IncrementalChecker` keeps of a healthy snapshot, by kind.
_INDEXES = {"trie": _Index, "base": _Index, "hash": _HashIndex}
