# SPDX-License-Identifier: Apache-2.0
"""The eleven invariants (``docs/invariants.md``): 1-6 of the trie and base caches, 6-11 of
the hash-block cache, checked on a :class:`Snapshot`.

Working on snapshots (not live objects) means one checker serves kvcore's caches, restored
bundles and adapters that read other caches' state into the same format. Off the hot path:
O(pages + nodes + allocation pages). A timeline of snapshots is checked at the cost of what
changed from one to the next by :class:`kvcore.incremental.IncrementalChecker`, whose verdict
is :func:`check_snapshot`'s at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

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
