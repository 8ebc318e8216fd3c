# SPDX-License-Identifier: Apache-2.0
"""The watch screen's pure pieces: the forest's layout, the sparkline, the bars, how notes
are read, the header's words. No app: plain values in, plain values out."""

from __future__ import annotations

from tests.watch.watch_fixtures import A2, A3, B2, ORPHAN, ORPHAN_PARENT, ROOT_A, message, removed, stored, story_timeline

from kvviz.watch.events import DESIGN
from kvviz.watch.timeline import WatchTimeline
from kvviz.watch.view import (SPARK_SAMPLES_PER_CELL, StreamTotals, WatchView, note_kind, sparkline_samples,
                                 step_summary)
from kvviz.watch.widgets.forest_view import MAX_INDENT, forest_lines, token_values
from kvviz.watch.widgets.medium_bars import bar, medium_rows
from kvviz.watch.widgets.watch_header import banner_text, rate_text, source_label, sparkline


def test_chains_are_laid_out_depth_first_under_their_parents():
    frame = story_timeline(3).frame(3)
    lines = forest_lines(frame.state, frame.effect)
    assert [(line.block.key, line.depth, line.start) for line in lines] == [
        (ROOT_A, 0, 0), (A2, 1, 4), (A3, 2, 8), (B2, 1, 4)]
    # A3, A2's only child, goes straight down; ROOT_A's two children indent as a branch.
    assert [line.prefix for line in lines] == ["└─", "  ├─", "  │ ", "  └─"]
    assert [line.level for line in lines] == [0, 1, 1, 1]
    assert [line.stored for line in lines] == [False, False, False, True]


def test_a_removed_block_keeps_its_place_for_its_step_only():
    timeline = story_timeline()
    frame = timeline.frame(5)
    lines = {line.block.key: line for line in forest_lines(frame.state, frame.effect)}
    assert lines[B2].removed and lines[B2].depth == 1
    later = timeline.frame(6)
    assert B2 not in {line.block.key for line in forest_lines(later.state, later.effect)}


def test_an_orphan_heads_its_chain_and_counts_positions_from_itself():
    timeline = WatchTimeline()
    timeline.add(message(0, stored([ORPHAN, 0x0F], parent=ORPHAN_PARENT)))
    frame = timeline.frame(1)
    head, child = forest_lines(frame.state, frame.effect)
    assert head.orphan and head.relative and (head.depth, head.start) == (0, 0)
    assert not child.orphan and child.relative and child.start == 4


def test_another_mediums_copy_is_drawn_under_the_first_and_has_no_children():
    frame = story_timeline(4).frame(4)
    lines = forest_lines(frame.state, frame.effect)
    keys = [(line.block.key, line.block.medium, line.copy_of) for line in lines]
    assert keys[1:3] == [(A2, "GPU", False), (A2, "cpu", True)]
    assert lines[3].block.key == A3 and lines[3].depth == 2  # A3 hangs under A2's first copy


def test_a_chain_goes_straight_down_and_branches_deeper_than_the_limit_stay_at_it():
    timeline = WatchTimeline()
    keys = list(range(1, 40))
    timeline.add(message(0, stored(keys)))
    frame = timeline.frame(1)
    chain = forest_lines(frame.state, frame.effect)
    assert [line.depth for line in chain] == list(range(len(keys)))
    assert {line.prefix for line in chain[1:]} == {"  "} and {line.level for line in chain} == {0}
    branchy = WatchTimeline()
    for seq in range(MAX_INDENT + 4):  # every block has two children: the next and a leaf
        parent = seq * 10 if seq else None
        branchy.add(message(seq, stored([seq * 10 + 10], parent=parent), stored([seq * 10 + 5], parent=parent)))
    frame = branchy.frame(branchy.last_step)
    lines = forest_lines(frame.state, frame.effect)
    assert max(line.level for line in lines) == MAX_INDENT + 3
    capped = [line for line in lines if line.level >= MAX_INDENT]
    assert len({len(line.prefix) for line in capped}) == 1  # drawn at the limit's indent


def test_a_chain_of_thousands_of_blocks_does_not_recurse():
    timeline = WatchTimeline()
    keys = list(range(1, 5001))
    timeline.add(message(0, stored(keys)))
    frame = timeline.frame(1)
    assert len(forest_lines(frame.state, frame.effect)) == 5000


def test_token_values_show_a_run_as_a_range_and_cut_to_the_budget():
    assert token_values(range(1600, 1616), 40) == "[1600–1615]"
    assert token_values((5, 9, 2), 40) == "[5 9 2]"
    assert token_values((), 40) == "[]"
    cut = token_values((5, 9, 2, 7, 7, 7, 7), 8)
    assert cut.endswith("…]") and len(cut) == 8


def test_the_sparkline_scales_to_its_largest_value():
    assert sparkline([0, 4, 8]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([]) == ""


def test_sparkline_samples_keep_short_histories_and_bound_the_reads_of_long_ones():
    assert sparkline_samples([1, 2, 3], upto=1) == (1, 2)

    class Counting(list):
        reads = 0

        def __getitem__(self, index):
            Counting.reads += 1
            return list.__getitem__(self, index)

    values = Counting(range(100_000))
    samples = sparkline_samples(values, upto=99_999, cells=10)
    assert len(samples) == 10 and samples[-1] == 99_999  # the newest step always counts
    assert Counting.reads <= 10 * (SPARK_SAMPLES_PER_CELL + 2)


def test_bars_fill_in_eighths_and_show_anything_held():
    assert bar(8, 8, 4) == "████"
    assert bar(0, 8, 4) == "░░░░"
    assert bar(1, 1000, 4) == "▏░░░"
    assert bar(5, 8, 2) == "█▎"


def test_notes_are_read_by_their_kind():
    assert note_kind("gap: seqs 1-3 missing (3 messages never received): the view is incomplete") == "gap"
    assert note_kind("gap on rank 1: seq 4 missing") == "gap"
    assert note_kind("restart: seq went back from 9 to 0") == "restart"
    assert note_kind(DESIGN.clause("undecodable", seq=4, error="not msgpack")) == "undecodable"
    assert note_kind("replayed") == "replayed"
    assert note_kind("gapless") is None and note_kind("") is None


def test_a_step_summary_marks_gaps_restarts_undecodable_and_removals():
    summary = step_summary(3, ("gap: seq 2 missing", "restart: seq went back from 4 to 0"), 2)
    assert (summary.violations, summary.gaps, summary.restarts, summary.evictions, summary.failed) == (2, 1, 1, 2, False)
    assert step_summary(1, (DESIGN.clause("undecodable", seq=0, error="x"),), 0).failed
    assert not step_summary(1, (), 0).interesting


def test_rates_are_worded_with_units_and_a_dash_when_unknown():
    assert rate_text({"batches_per_s": 2.0, "stored_per_s": 150.0, "removed_per_s": 0.25}) == (
        "2.0 batches/s · blocks +150/s −0.2/s")
    assert rate_text({"batches_per_s": None, "stored_per_s": None, "removed_per_s": None}) == "– batches/s"


def test_the_banner_names_each_reason_the_view_is_incomplete():
    frame = story_timeline().frame(6)
    view = WatchView(frame, 6, totals=StreamTotals(5, gaps=2, restarts=1), orphans=1)
    text = banner_text(view)
    assert text.startswith("⚠ incomplete view: ")
    assert "2 gaps" in text and "1 publisher restart" in text and "1 orphan block" in text


def test_blocks_per_medium_merge_spellings_of_one_tier():
    timeline = WatchTimeline()
    timeline.add(message(0, stored([1, 2], medium="cpu")))
    timeline.add(message(1, stored([3], parent=2, first_token=8, medium="CPU"), removed([1], medium="cpu")))
    view = WatchView(timeline.frame(2), 2)
    assert medium_rows(view) == [("CPU", 2, 1, 1)]


def test_the_header_names_an_endpoint_as_given_and_a_recording_by_its_file():
    assert source_label("tcp://10.0.0.7:5557") == "tcp://10.0.0.7:5557"
    assert source_label("/data/kv-events/vllm.jsonl") == "vllm.jsonl"
    assert source_label("/d/vllm-0.33.0-conversation-400.jsonl") == "vllm-0.33.0-conversation-40…"
    assert source_label("") == "kvviz watch"


def test_the_narration_panel_tells_each_note_once():
    from tests.watch.watch_fixtures import garbage

    from kvviz.watch.widgets.watch_narration import watch_narration_markup

    timeline = WatchTimeline("tcp://127.0.0.1:5557")
    for msg in [message(0, stored([ROOT_A])), message(4, stored([A2], parent=ROOT_A, first_token=4)), garbage(5)]:
        timeline.add(msg)
    gap = watch_narration_markup(WatchView(timeline.frame(2), timeline.last_step))
    assert gap.lower().count("seqs 1-3 missing") == 1 and "Batch 2 (seq 4): stored 1 block" in gap
    bad = watch_narration_markup(WatchView(timeline.frame(3), timeline.last_step))
    assert bad.count("could not be decoded") + bad.count("✗ undecodable") == 1


def test_a_rate_of_nothing_reads_0_not_minus_0_0():
    assert rate_text({"batches_per_s": 1.0, "stored_per_s": 0.0, "removed_per_s": 0.0}) == \
        "1.0 batches/s · blocks +0/s −0/s"


def test_unknown_fields_are_told_at_the_step_that_first_sent_them_and_not_again():
    from kvviz.watch.widgets.watch_narration import watch_narration_markup

    timeline = WatchTimeline("a recording")
    for seq, block in enumerate([ROOT_A, B2, A3]):
        event = {**stored([block]), "group_idx": 0}  # a field this reader does not know, on every batch
        timeline.add(message(seq, event, {**removed([block]), "group_idx": 0} if seq == 2 else stored([])))
    told = [watch_narration_markup(WatchView(timeline.frame(step), timeline.last_step)).count("ignored:")
            for step in range(1, timeline.last_step + 1)]
    assert told == [1, 0, 1]  # BlockStored.group_idx at step 1, BlockRemoved.group_idx first at step 3
    assert "BlockRemoved.group_idx" in watch_narration_markup(WatchView(timeline.frame(3), timeline.last_step))
    assert timeline.summary()["unknown_fields"] == {"BlockRemoved.group_idx": 1, "BlockStored.group_idx": 3}
