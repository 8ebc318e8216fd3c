# SPDX-License-Identifier: Apache-2.0
"""The state reader against shortfin states worked out by hand from shortfin 3.9.0's code.

Facts used below: shortfin's pool hands pages out from the end of its free list (a pool of
4 gives 3, 2, 1, 0) and appends freed pages; the logical clock gives 1 to the root at
construction and the next integer to every ``time.monotonic()`` call (node creation, and
each node a match walks through).
"""

from __future__ import annotations

from shortfin_guard import require_shortfin

require_shortfin()

from kvcore import Snapshot, Stats  # noqa: E402
from kvcore.snapshot import AllocationInfo, NodeInfo, PageInfo  # noqa: E402
from kvviz.backends.shortfin_backend import ShortfinBackend  # noqa: E402
from kvviz.backends.shortfin_reader import check_shortfin_snapshot, pending_pages, reference_holders  # noqa: E402
from kvviz.core.scenario import Op  # noqa: E402


def run(pages: int, tpp: int, *ops) -> ShortfinBackend:
    backend = ShortfinBackend(pages, tpp)
    for kind, name, *rest in ops:
        tokens = rest[0] if rest else None
        backend.apply(Op(kind, name, tokens))
    return backend


def test_a_fresh_cache_is_a_root_without_a_page_and_a_full_free_list():
    snap = ShortfinBackend(3, 4).snapshot()
    assert snap == Snapshot(
        kind="trie", tokens_per_page=4, page_count=3, clock=1, next_seq=1, next_allocation_id=0,
        pages=(PageInfo(0, "free"), PageInfo(1, "free"), PageInfo(2, "free")),
        free=(2, 1, 0),  # the order shortfin hands them out
        nodes=(NodeInfo(0, None, (), None, 0, 1, 0),),  # shortfin's dummy root page 0 is not shown
        allocations=(), heap=(), stats=Stats())
    assert check_shortfin_snapshot(snap) == []


def test_two_publishers_of_one_block_b4b_read_exactly():
    backend = run(4, 4, ("acquire", "X", (1, 2, 3, 4, 5)), ("acquire", "Y", (1, 2, 3, 4, 6)),
                  ("publish", "X"), ("publish", "Y"))
    snap = backend.snapshot()
    # X got pages 3, 2 and Y 1, 0. X's publish created node 1 on page 3 at tick 2; Y's
    # publish matched it (tick 3), adopted page 3 and put its own page 1 on _duplicated_pages.
    # Y's reference stayed on the root: root ref 1, node ref 1.
    assert snap == Snapshot(
        kind="trie", tokens_per_page=4, page_count=4, clock=3, next_seq=2, next_allocation_id=2,
        pages=(PageInfo(0, "owned", 1), PageInfo(1, "owned", 1), PageInfo(2, "owned", 0),
               PageInfo(3, "cached", None, 1, 1)),
        free=(),
        nodes=(NodeInfo(0, None, (), None, 1, 1, 0), NodeInfo(1, 0, (1, 2, 3, 4), 3, 1, 3, 1)),
        allocations=(AllocationInfo(0, "X", (1, 2, 3, 4, 5), (3, 2), 1, 0),
                     AllocationInfo(1, "Y", (1, 2, 3, 4, 6), (3, 0), 1, 0)),
        heap=(), stats=Stats(lookups=2, lookup_tokens=10, hit_tokens=0, evictions=0, dedups=1))
    assert pending_pages(snap) == {1: 1}  # page 1 waits, given up by Y
    assert reference_holders(snap) == {0: [], 1: ["X", "Y"]}
    violations = check_shortfin_snapshot(snap)
    assert [(v.invariant, v.nodes) for v in violations] == [(2, (0,)), (2, (1,))]
    assert "ref_count 1, but 2 live allocation(s) end their published path at it (holders: X, Y)" in (
        violations[1].message)


def test_after_the_first_publisher_leaves_the_shared_node_is_an_eviction_candidate_in_use():
    backend = run(4, 4, ("acquire", "X", (1, 2, 3, 4, 5)), ("acquire", "Y", (1, 2, 3, 4, 6)),
                  ("publish", "X"), ("publish", "Y"), ("release", "X"))
    snap = backend.snapshot()
    # release_pages freed the waiting page 1, then we freed X's tail page 2: appended in
    # that order, so 2 is handed out first.
    assert snap.free == (2, 1)
    assert snap.pages == (PageInfo(0, "owned", 1), PageInfo(1, "free"), PageInfo(2, "free"),
                          PageInfo(3, "cached", None, 1, 0))
    assert snap.heap == (1,) and snap.node(1).ref == 0
    assert [a.name for a in snap.allocations] == ["Y"] and pending_pages(snap) == {}
    messages = [v.message for v in check_shortfin_snapshot(snap)]
    assert any("node 1 (page 3) has ref_count 0" in m and "an eviction candidate in use" in m for m in messages)


def test_lookup_without_a_reference_b9_reads_as_one_page_twice_and_no_node():
    backend = run(2, 4, ("acquire", "A", (1, 2, 3, 4)), ("publish", "A"), ("release", "A"),
                  ("acquire", "H", (100, 101, 102, 103)), ("acquire", "R", (1, 2, 3, 4, 5, 6, 7, 8)))
    snap = backend.snapshot()
    # A had page 1 (node 1, created at tick 2); H took page 0; R's lookup touched node 1
    # (tick 3), then allocate evicted it and handed page 1 back: block table [1 1].
    assert snap == Snapshot(
        kind="trie", tokens_per_page=4, page_count=2, clock=3, next_seq=2, next_allocation_id=3,
        pages=(PageInfo(0, "owned", 1), PageInfo(1, "owned", 2)), free=(),
        nodes=(NodeInfo(0, None, (), None, 1, 1, 0),),
        allocations=(AllocationInfo(1, "H", (100, 101, 102, 103), (0,), 0, 0),
                     AllocationInfo(2, "R", (1, 2, 3, 4, 5, 6, 7, 8), (1, 1), 1, 4)),
        heap=(), stats=Stats(lookups=3, lookup_tokens=16, hit_tokens=4, evictions=1, dedups=0))
    assert sorted(v.invariant for v in check_shortfin_snapshot(snap)) == [5, 5]


def test_node_ids_stay_stable_across_evictions_and_are_never_reused():
    backend = run(4, 2, ("acquire", "A", (1, 2, 3, 4)), ("publish", "A"), ("release", "A"),
                  ("acquire", "B", (5, 6)), ("publish", "B"), ("release", "B"))
    snap = backend.snapshot()
    # A: pages 3, 2 -> nodes 1 [1 2] (tick 2) and 2 [3 4] (tick 3); B: page 1 -> node 3 (tick 4).
    assert [(n.id, n.parent, n.page, n.ref, n.last_access) for n in snap.nodes] == [
        (0, None, None, 0, 1), (1, 0, 3, 0, 2), (2, 1, 2, 0, 3), (3, 0, 1, 0, 4)]
    assert snap.heap == (2, 3)  # the childless ref-0 nodes, oldest first
    backend.apply(Op("acquire", "C", (7, 8, 9, 10, 11, 12), 0, False))
    snap = backend.snapshot()
    # 1 page free (0), 2 evicted: node 2 (tick 3), then its parent node 1 (tick 2) became a
    # leaf and went next. Pages 2 and 3 were appended after 0; C took 3, 2, 0.
    assert [n.id for n in snap.nodes] == [0, 3]
    assert snap.allocation_named("C").pages == (3, 2, 0)
    assert snap.stats.evictions == 2
    backend.apply(Op("publish", "C", None, 0, False))
    assert [n.id for n in backend.snapshot().nodes] == [0, 3, 4, 5, 6]
    assert backend.snapshot().next_seq == 7


def test_a_published_path_holds_one_reference_on_its_deepest_node_which_is_healthy_on_shortfin():
    backend = run(6, 2, ("acquire", "A", (1, 2, 3, 4, 5)), ("publish", "A"), ("acquire", "B", (1, 2, 3, 4, 9, 9)))
    snap = backend.snapshot()
    refs = {n.tokens: n.ref for n in snap.nodes if n.parent is not None}
    assert refs == {(1, 2): 0, (3, 4): 2}  # A and B both end at [3 4]
    assert snap.allocation_named("A").pages[2] not in snap.free  # A's unpublished tail
    assert snap.pages[snap.allocation_named("A").pages[2]] == PageInfo(snap.allocation_named("A").pages[2], "owned", 0)
    assert check_shortfin_snapshot(snap) == []


def test_snapshots_round_trip_through_json_so_exports_and_bundles_work():
    backend = run(4, 4, ("acquire", "X", (1, 2, 3, 4, 5)), ("acquire", "Y", (1, 2, 3, 4, 6)),
                  ("publish", "X"), ("publish", "Y"))
    snap = backend.snapshot()
    assert Snapshot.from_dict(snap.to_dict()) == snap
