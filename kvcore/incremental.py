# SPDX-License-Identifier: Apache-2.0
"""DESIGN's invariants for a timeline: each snapshot checked at the cost of what changed
since the one before, with :func:`kvcore.invariants.check_snapshot` as the contract (its
verdict at every step; the oracles in tests/kvcore/test_invariants_incremental.py and
tests/kvcore/test_hash_incremental.py).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress
from operator import attrgetter, is_not, ne

from .blockkey import block_key
from .invariants import Violation, _is_key, check_snapshot
from .snapshot import CACHED, FREE, OWNED, Snapshot, touched_rows, untouched_free

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
    tests/kvcore/test_invariants_incremental.py).

    Hash-cache snapshots get their own index (:class:`_HashIndex`: blocks by id and page,
    each key's copies and child blocks, each page's ref, the key its holders' published
    prefixes need there and the allocation whose tail holds it, the queued pages) and the
    same contract (the oracle in tests/kvcore/test_hash_incremental.py).
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
