# SPDX-License-Identifier: Apache-2.0
"""The forest of blocks rebuilt from the stream: both shared recordings end where an
independent replay ends, every rule for what the stream leaves open (copies, tiers, orphans,
unknown removals, either removal order, clears) holds, and states stay cheap and frozen."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.snapshot import StateDigest
from kvviz.watch.forest import Forest, ForestState, block_order
from kvviz.watch.wire import (AllBlocksCleared, Batch, BlockRemoved, BlockStored, UnknownEvent,
                                           decode_payload)

from .wire_reference import SGLANG, VLLM, figures, read_lines


def batch(*events, seq: int = 0) -> Batch:
    return Batch(seq=seq, topic="", rank=0, ts=None, events=tuple(events), unknown_fields=())


def stored(*keys, parent=None, medium="GPU", size=2, lora=None) -> BlockStored:
    tokens = tuple(t for k in keys for t in (k * 10, k * 10 + 1)[:size])
    return BlockStored(tuple(keys), parent, tokens, size, medium, lora)


def removed(*keys, medium="GPU") -> BlockRemoved:
    return BlockRemoved(tuple(keys), medium)


def replay(path):
    forest, states = Forest(), [Forest().state()]
    for step, record in enumerate(read_lines(path), start=1):
        forest.apply(decode_payload(record["payload"], seq=record["seq"]), step)
        states.append(forest.state())
    return forest, states


# -- the shared recordings ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [VLLM, SGLANG], ids=["vllm", "sglang"])
def test_a_recording_rebuilds_the_cache_an_independent_replay_rebuilds(path):
    expected = figures(path)
    forest, states = replay(path)
    totals = forest.totals()
    assert [len(s) for s in states[1:]] == expected.cached_after
    assert len(forest) == expected.final_blocks and totals.peak_blocks == expected.peak_blocks
    assert totals.blocks_stored == expected.blocks_stored and totals.duplicates == expected.duplicates
    assert totals.blocks_removed == expected.blocks_removed and totals.removed_unknown == expected.removed_unknown
    assert totals.clears == expected.events_by_type["AllBlocksCleared"]
    final = {block_id: (b.parent, b.tokens, b.copies) for block_id, b in states[-1].blocks.items()}
    assert final == expected.final
    assert sum(b.orphan for b in states[-1].blocks.values()) == expected.orphans
    assert expected.peak_blocks <= 3000  # both READMEs' caches hold 3,000 blocks (48,000 tokens of 16)


@pytest.mark.parametrize("path", [VLLM, SGLANG], ids=["vllm", "sglang"])
def test_a_forest_resumed_from_a_keyframe_ends_where_the_straight_replay_ends(path):
    _forest, states = replay(path)
    records = read_lines(path)
    resumed = Forest.from_state(states[150])
    for step, record in enumerate(records[150:], start=151):
        resumed.apply(decode_payload(record["payload"], seq=record["seq"]), step)
        if step % 25 == 0:
            assert resumed.state() == states[step]
    assert resumed.state().digest() == states[-1].digest()


def test_every_state_stays_as_it_was_while_the_forest_goes_on():
    forest, states = Forest(), []
    digests = []
    for step, record in enumerate(read_lines(VLLM)[:120], start=1):
        forest.apply(decode_payload(record["payload"], seq=0), step)
        if step % 10 == 0:
            states.append(forest.state())
            digests.append(states[-1].to_dict())
    assert [s.to_dict() for s in states] == digests and len(states) == 12


# -- the rules ------------------------------------------------------------------------------------


def test_a_stored_chain_links_each_block_to_the_one_before():
    forest = Forest()
    effect = forest.apply(batch(stored(1, 2, 3, parent=None, lora="a")), 1)
    state = forest.state()
    assert [(b.key, b.parent, b.tokens) for b in effect.stored] == [(1, None, (10, 11)), (2, 1, (20, 21)),
                                                                   (3, 2, (30, 31))]
    assert [b.key for b in state.roots()] == [1] and [b.key for b in state.children(1)] == [2]
    assert all(b.lora == "a" and b.stored_at == 1 and b.copies == 1 and not b.orphan for b in effect.stored)


@pytest.mark.parametrize("order", [(1, 2, 3), (3, 2, 1), (2, 3, 1)], ids=["parent-first", "child-first", "mixed"])
def test_a_removal_of_a_whole_chain_in_any_order_empties_it(order):
    forest = Forest()
    forest.apply(batch(stored(1, 2, 3)), 1)
    effect = forest.apply(batch(removed(*order)), 2)
    assert sorted(b.key for b in effect.removed) == [1, 2, 3] and effect.removed_unknown == ()
    assert len(forest) == 0 and forest.state() == ForestState()


def test_copies_are_counted_not_assumed_a_set():
    forest = Forest()
    forest.apply(batch(stored(1)), 1)
    effect = forest.apply(batch(stored(1), stored(1)), 2)
    assert effect.duplicates == 2 and forest.get((1, "GPU")).copies == 3
    assert forest.get((1, "GPU")).stored_at == 1  # the first live copy's step
    effect = forest.apply(batch(removed(1), removed(1)), 3)
    assert [b.copies for b in effect.removed] == [2, 1] and len(forest) == 1
    effect = forest.apply(batch(removed(1), removed(1)), 4)
    assert [b.copies for b in effect.removed] == [0] and effect.removed_unknown == (1,) and len(forest) == 0


def test_one_key_on_several_tiers_is_one_block_per_medium():
    forest = Forest()
    forest.apply(batch(stored(1, medium="GPU"), stored(1, medium="CPU_TIER1"), stored(1, medium="cpu")), 1)
    assert len(forest) == 3 and forest.state().by_medium() == {"CPU_TIER1": 1, "GPU": 1, "cpu": 1}
    forest.apply(batch(removed(1, medium="GPU")), 2)
    assert sorted(m for _k, m in forest.state().blocks) == ["CPU_TIER1", "cpu"]
    assert [b.medium for b in forest.state().blocks.on_key(1)] == ["CPU_TIER1", "cpu"]


def test_removing_a_block_never_seen_is_counted_not_an_error():
    forest = Forest()
    effect = forest.apply(batch(removed(7, 8), removed(1, medium="CPU")), 1)
    assert effect.removed_unknown == (7, 8, 1) and effect.removed == ()
    forest.apply(batch(stored(1, medium="GPU")), 2)
    effect = forest.apply(batch(removed(1, medium="CPU")), 3)  # on GPU, not CPU: not this block
    assert effect.removed_unknown == (1,) and len(forest) == 1


def test_a_removal_naming_no_medium_takes_the_keys_only_block():
    forest = Forest()
    forest.apply(batch(stored(1, 2, medium="GPU"), stored(9, medium=None)), 1)
    effect = forest.apply(batch(removed(1, medium=None), removed(9, medium="GPU")), 2)
    assert [(b.key, b.medium) for b in effect.removed] == [(1, "GPU"), (9, None)] and len(forest) == 1
    forest.apply(batch(stored(5, medium="GPU"), stored(5, medium="CPU")), 3)
    assert forest.apply(batch(removed(5, medium=None)), 4).removed_unknown == (5,)  # which one? neither


def test_a_chain_stored_after_a_late_attach_is_kept_and_marked_orphan():
    forest = Forest()
    effect = forest.apply(batch(stored(5, 6, parent=4)), 1)
    assert [b.orphan for b in effect.stored] == [True, False]
    assert [b.key for b in forest.state().roots()] == [5]


def test_children_outlive_a_removed_parent_as_orphans_and_are_adopted_when_it_returns():
    forest = Forest()
    forest.apply(batch(stored(1, 2, 3)), 1)
    effect = forest.apply(batch(removed(1)), 2)
    assert effect.orphaned == ((2, "GPU"),)
    assert [b.key for b in forest.state().roots()] == [2] and forest.get((2, "GPU")).orphan
    assert not forest.get((3, "GPU")).orphan
    effect = forest.apply(batch(stored(1, medium="CPU")), 3)  # the parent key is back, on another tier
    assert effect.adopted == ((2, "GPU"),) and not forest.get((2, "GPU")).orphan


def test_a_child_stored_before_its_parent_in_one_batch_ends_adopted():
    forest = Forest()
    effect = forest.apply(batch(stored(2, parent=1), stored(1)), 1)
    assert effect.stored[0].orphan and effect.adopted == ((2, "GPU"),)
    assert not any(b.orphan for b in forest.state().blocks.values())


def test_all_blocks_cleared_resets_the_forest_and_the_counting_goes_on():
    forest = Forest()
    forest.apply(batch(stored(1, 2), stored(3, medium="CPU")), 1)
    effect = forest.apply(batch(AllBlocksCleared(), stored(9)), 2)
    assert effect.cleared and effect.cleared_blocks == 3
    assert list(forest.state().blocks) == [(9, "GPU")]
    totals = forest.totals()
    assert (totals.blocks_stored, totals.clears, totals.cleared_blocks, totals.peak_blocks, totals.batches) == (
        4, 1, 3, 3, 2)


def test_clearing_one_medium_leaves_the_others_and_orphans_their_children():
    forest = Forest()
    forest.apply(batch(stored(1, medium="CPU"), stored(2, parent=1, medium="GPU")), 1)
    effect = forest.apply(batch(AllBlocksCleared("CPU")), 2)
    assert effect.cleared_blocks == 1 and effect.orphaned == ((2, "GPU"),)
    assert list(forest.state().blocks) == [(2, "GPU")]


def test_unknown_event_types_are_counted_and_change_nothing():
    forest = Forest()
    forest.apply(batch(stored(1)), 1)
    before = forest.state()
    effect = forest.apply(batch(UnknownEvent("BlockTransferred"), UnknownEvent("X")), 2)
    assert effect.unknown_types == ("BlockTransferred", "X") and forest.state() == before
    assert forest.totals().unknown_events == 2


def test_a_placeholder_store_holds_no_tokens():
    forest = Forest()
    forest.apply(batch(BlockStored((1, 2), None, (), 0, None, None)), 1)
    assert [b.tokens for b in forest.state().blocks.values()] == [(), ()]


def test_bytes_and_int_keys_live_side_by_side():
    forest = Forest()
    root = b"\x01" * 32
    forest.apply(batch(BlockStored((root,), None, (4,), 1, None, None), BlockStored((1,), root, (5,), 1, None, None)), 1)
    assert [b.key for b in forest.state().children(root)] == [1] and not forest.get((1, None)).orphan
    assert [d["key"] for d in forest.state().to_dict()["blocks"]] == ["1", "0x" + "01" * 32]


# -- states: canonical, frozen, cheap ---------------------------------------------------------------


def test_the_same_blocks_reached_in_another_order_give_the_same_digest():
    keys = list(range(1, 400))
    one, two = Forest(), Forest()
    one.apply(batch(*(stored(k, parent=k - 1 if k > 1 else None) for k in keys)), 1)
    shuffled = keys[:]
    random.Random(4).shuffle(shuffled)
    two.apply(batch(*(stored(k, parent=k - 1 if k > 1 else None) for k in shuffled)), 1)
    assert one.state() == two.state() and one.state().digest() == two.state().digest()
    ordered = one.state().to_dict()["blocks"]
    assert [d["key"] for d in ordered] == [str(k) for k in keys]
    two.apply(batch(removed(200)), 2)
    assert one.state() != two.state() and one.state().digest() != two.state().digest()


def test_a_state_is_the_same_object_until_the_forest_changes():
    forest = Forest()
    forest.apply(batch(stored(1)), 1)
    state = forest.state()
    assert forest.state() is state
    forest.apply(batch(UnknownEvent("X")), 2)
    assert forest.state() is state
    forest.apply(batch(stored(2)), 3)
    assert forest.state() is not state and len(state) == 1 and (2, "GPU") not in state.blocks


def test_block_order_puts_ints_before_bytes_and_no_medium_first():
    ids = [(b"a", "GPU"), (5, "GPU"), (5, None), (-3, "CPU")]
    assert sorted(ids, key=block_order) == [(-3, "CPU"), (5, None), (5, "GPU"), (b"a", "GPU")]


def synthetic_stream(blocks: int, per_batch: int, capacity: int) -> list[Batch]:
    """Chains of ``per_batch`` blocks, the oldest removed once ``capacity`` are cached."""
    batches, live, key = [], [], 0
    while key < blocks:
        events = []
        chain = list(range(key + 1, key + per_batch + 1))
        key += per_batch
        events.append(stored(*chain, parent=None))
        live.extend(chain)
        if len(live) > capacity:
            events.append(removed(*live[:len(live) - capacity][::-1]))
            del live[:len(live) - capacity]
        batches.append(batch(*events))
    return batches


@pytest.mark.parametrize("blocks, capacity", [(100_000, 3_000), (100_000, 100_000)])
def test_a_state_per_step_costs_what_the_step_changed_not_the_forest(blocks, capacity):
    forest = Forest()
    changes = 0
    previous = forest.state()
    for step, item in enumerate(synthetic_stream(blocks, 16, capacity), start=1):
        effect = forest.apply(item, step)
        changes += len(effect.stored) + len(effect.removed)
        state = forest.state()
        # Structural sharing: at most one new middle node per change, the rest the previous state's.
        fresh = sum(1 for a, b in zip(state._top, previous._top) if a is not b)
        assert fresh <= len(effect.stored) + len(effect.removed)
        previous = state
    largest_leaf = max(len(leaf) for middle in forest.state()._top if middle for leaf in middle if leaf)
    # Each change copies at most one middle node (64 entries) and one leaf: O(changed), whatever n.
    assert forest.copied <= changes * (64 + largest_leaf)
    assert len(forest) == min(blocks, capacity)


# -- the digest: kept up to date, equal to the digest of the blocks counted afresh -------------------


def digest_afresh(state: ForestState) -> str:
    """The set digest of ``state``'s blocks, summed from nothing: ``["block",ROW]`` for each row
    of ``to_dict`` as canonical JSON (the definition, written with json.dumps)."""
    accumulator = StateDigest()
    for row in state.to_dict()["blocks"]:
        accumulator.add('["block",' + json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "]")
    return accumulator.hexdigest()


_EVENT = st.one_of(
    st.builds(lambda keys, parent, medium, lora: stored(*keys, parent=parent, medium=medium, lora=lora),
              st.lists(st.integers(1, 12), min_size=1, max_size=4), st.none() | st.integers(1, 12),
              st.sampled_from(["GPU", "CPU", None, "dé\x1b\"q"]), st.sampled_from([None, 3, "adapter"])),
    st.builds(lambda keys, medium: removed(*keys, medium=medium),
              st.lists(st.integers(1, 12), min_size=1, max_size=4), st.sampled_from(["GPU", "CPU", None])),
    st.builds(AllBlocksCleared, st.sampled_from(["GPU", None])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_EVENT, min_size=1, max_size=4), min_size=1, max_size=12), st.integers(0, 11))
def test_the_digest_kept_batch_by_batch_is_the_digest_of_the_blocks_counted_afresh(batches, resume_at):
    forest, states = Forest(), []
    for step, events in enumerate(batches, start=1):
        forest.apply(batch(*events), step)
        states.append(forest.state())
        assert states[-1].digest() == digest_afresh(states[-1])
    resumed = Forest.from_state(states[min(resume_at, len(states) - 1)])
    assert resumed.state().digest() == states[min(resume_at, len(states) - 1)].digest()


def test_a_digest_per_step_costs_two_hashes_per_block_changed_not_the_forest():
    forest = Forest()
    changes = 0
    for step, item in enumerate(synthetic_stream(20_000, 10, 20_000), start=1):
        effect = forest.apply(item, step)
        changes += len(effect.stored) + len(effect.removed)
        forest.state().digest()
    assert len(forest) == 20_000
    assert forest._digest.hashed <= 2 * changes


# -- the cap on blocks held ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_EVENT, min_size=1, max_size=4), min_size=1, max_size=12), st.integers(0, 6))
def test_a_capped_forest_never_holds_more_than_its_cap_and_differs_from_an_uncapped_one_only_once_it_was_full(
        batches, cap):
    capped, free = Forest(max_blocks=cap), Forest()
    full = False
    for step, events in enumerate(batches, start=1):
        effect = capped.apply(batch(*events), step)
        free.apply(batch(*events), step)
        assert len(capped) <= cap
        full = full or effect.not_kept > 0
        if not full:  # the cap changed nothing yet: the same blocks, the same digest
            assert capped.state() == free.state() and capped.state().digest() == free.state().digest()


def test_a_publisher_storing_blocks_it_never_removes_stops_growing_the_forest_at_its_cap():
    forest = Forest(max_blocks=1_000)
    not_kept = 0
    for step in range(1, 101):  # 100 batches of a new chain of 32 blocks: 3,200 blocks stored
        keys = range(step * 100, step * 100 + 32)
        not_kept += forest.apply(batch(stored(*keys)), step).not_kept
    assert len(forest) == 1_000 and not_kept == 3_200 - 1_000
    # A removal makes room again: the next new block is added.
    forest.apply(batch(removed(100)), 101)
    assert forest.apply(batch(stored(99_999)), 102).not_kept == 0 and len(forest) == 1_000


def test_the_default_cap_is_the_stated_limit():
    from kvviz.core.limits import MAX_WATCH_FOREST_BLOCKS

    assert Forest().max_blocks == MAX_WATCH_FOREST_BLOCKS == 1_000_000
