# SPDX-License-Identifier: Apache-2.0
"""Diffs between frames: what the views mark as new, touched, evicted, taken, freed, moved."""

import json

from kvviz.core.snapshot_diff import Diff, diff_snapshots
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

# Two pages of tokens 1 2 | 3 4 published by a; b shares the first; both leave; c evicts.
LIFECYCLE = """\
cache trie pages=4 tokens_per_page=2
acquire a 1 2 3 4
publish a
acquire b 1 2 5
release a
release b
acquire c 7 8 9 10 11 12
extend c + 13
acquire d 1 2 3 4 5 6 7 8 9 10
"""

# Four one-page leaves released oldest first: the heap holds nodes 1 2 3 4 in array order.
FOUR_LEAVES = """\
cache trie pages=4 tokens_per_page=2
acquire a 1 2
acquire b 3 4
acquire c 5 6
acquire d 7 8
publish a
publish b
publish c
publish d
release a
release b
release c
release d
acquire e 9 10
acquire f 11 12
"""


def diffs(text: str) -> list[Diff]:
    session = Session.from_scenario(parse_scenario(text))
    return [session.frame(i).diff for i in range(len(session))]


def changed(diff: Diff) -> dict:
    """The non-empty fields of a diff."""
    return {name: value for name, value in diff.to_dict().items() if value}


def test_the_initial_frame_of_an_empty_cache_has_an_empty_diff():
    assert diffs(LIFECYCLE)[0].empty


def test_an_acquire_on_an_empty_trie_takes_pages_and_adds_an_allocation():
    assert changed(diffs(LIFECYCLE)[1]) == {
        "pages_taken": [0, 1], "pages_changed": [0, 1], "allocations_added": [0]}


def test_publish_adds_nodes_and_changes_the_allocation_but_takes_no_page():
    assert changed(diffs(LIFECYCLE)[2]) == {
        "nodes_added": [1, 2], "pages_changed": [0, 1], "allocations_changed": [0]}


def test_an_acquire_that_matches_touches_the_node_and_raises_its_ref():
    assert changed(diffs(LIFECYCLE)[3]) == {
        "nodes_touched": [1], "pages_taken": [2], "pages_changed": [0, 2], "ref_changes": [[1, 1, 2]],
        "allocations_added": [1]}


def test_a_release_drops_refs_and_a_childless_unreferenced_node_joins_the_heap():
    assert changed(diffs(LIFECYCLE)[4]) == {
        "pages_changed": [0, 1], "ref_changes": [[1, 2, 1], [2, 1, 0]], "heap_added": [2],
        "allocations_released": [0]}


def test_a_release_frees_the_unpublished_tail_and_a_node_with_a_child_stays_off_the_heap():
    assert changed(diffs(LIFECYCLE)[5]) == {
        "pages_freed": [2], "pages_changed": [0, 2], "ref_changes": [[1, 1, 0]], "allocations_released": [1]}


def test_an_evicting_acquire_marks_the_node_and_page_evicted_and_the_page_taken():
    diff = diffs(LIFECYCLE)[6]
    assert changed(diff) == {
        "nodes_evicted": [2], "pages_taken": [1, 2, 3], "pages_evicted": [1], "pages_changed": [1, 2, 3],
        "heap_added": [1], "heap_removed": [2], "allocations_added": [2]}
    assert diff.pages_freed == ()  # the evicted page went straight to c


def test_an_evicting_extend_changes_the_allocation_and_cascades_to_the_parent():
    assert changed(diffs(LIFECYCLE)[7]) == {
        "nodes_evicted": [1], "pages_taken": [0], "pages_evicted": [0], "pages_changed": [0],
        "heap_removed": [1], "allocations_changed": [2]}


def test_a_failed_acquire_has_an_empty_diff():
    session = Session.from_scenario(parse_scenario(LIFECYCLE))
    assert session.frame(8).failed
    assert session.frame(8).diff.empty
    assert changed(session.frame(8).diff) == {}


def test_releases_of_four_leaves_fill_the_heap_in_release_order():
    all_diffs = diffs(FOUR_LEAVES)
    assert [d.heap_added for d in all_diffs[9:13]] == [(1,), (2,), (3,), (4,)]
    assert all(d.heap_moved == () for d in all_diffs[9:13])


def test_evicting_the_heap_top_moves_the_entries_that_take_its_place():
    all_diffs = diffs(FOUR_LEAVES)
    # Heap [1 2 3 4]: pop 1, the last entry 4 fills the hole and sifts: [2 4 3].
    assert changed(all_diffs[13]) == {
        "nodes_evicted": [1], "pages_taken": [0], "pages_evicted": [0], "pages_changed": [0],
        "heap_removed": [1], "heap_moved": [2, 4], "allocations_added": [4]}
    # Heap [2 4 3]: pop 2, 3 fills the hole: [3 4].
    assert all_diffs[14].heap_removed == (2,)
    assert all_diffs[14].heap_moved == (3,)


def test_a_diff_from_nothing_marks_every_node_and_allocation_as_added():
    session = Session.from_scenario(parse_scenario(LIFECYCLE))
    snapshot = session.frame(3).snapshot
    diff = diff_snapshots(None, snapshot)
    assert diff.nodes_added == (1, 2)
    assert diff.allocations_added == (0, 1)
    assert diff.pages_taken == ()


def test_a_diff_between_equal_snapshots_is_empty_and_json_able():
    session = Session.from_scenario(parse_scenario(LIFECYCLE))
    snapshot = session.frame(6).snapshot
    diff = diff_snapshots(snapshot, snapshot)
    assert diff.empty
    assert json.loads(json.dumps(diff_snapshots(session.frame(5).snapshot, snapshot).to_dict()))["heap_removed"] == [2]


HASH_PUBLISH = """\
cache hash pages=4 tokens_per_page=2
acquire a 1 2 3 4
publish a
"""


def test_a_diff_compares_the_rows_the_design_names_not_the_kind():
    """A design keyed by a name of its own, whose rows are blocks, is diffed by its blocks; the
    same snapshots under a design whose rows are nodes list no blocks (a hash snapshot's nodes
    hold none)."""
    from dataclasses import replace

    from kvviz.core import designs
    from kvviz.core.designs.hash import DESIGN as HASH

    session = Session.from_scenario(parse_scenario(HASH_PUBLISH))
    before, after = session.frame(1).snapshot, session.frame(2).snapshot
    assert after.blocks, "the publish caches blocks"
    try:
        for name, rows in (("toy-blocks", "blocks"), ("toy-nodes", "nodes")):
            designs.register(replace(HASH, name=name, rows=rows))
        as_blocks = diff_snapshots(replace(before, kind="toy-blocks"), replace(after, kind="toy-blocks"))
        as_nodes = diff_snapshots(replace(before, kind="toy-nodes"), replace(after, kind="toy-nodes"))
    finally:
        designs.unregister("toy-blocks")
        designs.unregister("toy-nodes")
    assert as_blocks.nodes_added == tuple(sorted(b.id for b in after.blocks))
    assert as_nodes.nodes_added == ()
