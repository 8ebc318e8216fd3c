# SPDX-License-Identifier: Apache-2.0
"""The watch's model: the events design, and WatchTimeline (one step per message, frames
rebuilt from keyframes, gaps and restarts, narration, summary, rates, why-answers)."""

from __future__ import annotations

import gc
import random
import sys
import time
from pathlib import Path

import pytest

msgspec = pytest.importorskip("msgspec", reason="the watch extra is not installed")  # the CI installs it

from kvviz.watch import forest as forest_module  # noqa: E402
from kvviz.watch.recording import Message, read_recording  # noqa: E402
from kvviz.watch.wire import (AllBlocksCleared, BlockRemoved, BlockStored, UnknownEvent,  # noqa: E402
                                           key_label)
from kvviz.watch import timeline as watch_module  # noqa: E402
from kvviz.core.designs import DESIGN_MODULES, Design, design  # noqa: E402
from kvviz.watch.events import EVENTS_DESIGN  # noqa: E402  (registers the events design)
from kvviz.watch.timeline import WatchTimeline  # noqa: E402
from kvviz.watch.json_output import summary_lines  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from watch_expected import expected_figures  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "kv-events"
VLLM = DATA / "vllm-0.33.0-conversation-400.jsonl"
SGLANG = DATA / "sglang-0.5.23-conversation-400.jsonl"
RECORDINGS = pytest.mark.parametrize("recording", [VLLM, SGLANG], ids=["vllm", "sglang"])


def payload(events: list, ts: float | None = 1.0, rank: int | None = 0) -> bytes:
    return msgspec.msgpack.encode([ts, events, rank])


def stored(hashes, parent=None, medium="GPU", block_size=2, **extra) -> dict:
    tokens = [t for h in hashes for t in (h % 1000, h % 1000 + 1)][: len(hashes) * block_size]
    return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent, "token_ids": tokens,
            "block_size": block_size, "lora_id": None, "medium": medium, **extra}


def removed(hashes, medium="GPU") -> dict:
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium}


def message(seq: int, events: list, ts: float | None = 1.0, rank: int = 0) -> Message:
    return Message(topic=b"kv", seq=seq, payload=payload(events, ts), rank=rank)


def timeline_of(batches: list[list], keyframe_every: int = 256, start_seq: int = 0, ts_step: float = 0.5):
    timeline = WatchTimeline("test", keyframe_every)
    for i, events in enumerate(batches):
        timeline.add(message(start_seq + i, events, ts=100.0 + i * ts_step))
    return timeline


# -- the events design -------------------------------------------------------------------------


def test_the_events_design_is_the_first_entry_and_words_every_stream_event_class():
    events = design("events")
    assert isinstance(events, Design) and events is EVENTS_DESIGN and "events" not in DESIGN_MODULES
    for cls in (BlockStored, BlockRemoved, AllBlocksCleared, UnknownEvent):
        assert events.words(cls).kind and events.words(cls).log
    assert events.words(BlockRemoved).evicts and events.words(AllBlocksCleared).evicts
    assert not events.words(BlockStored).evicts
    assert events.nouns.entry == "block" and events.nouns.removed == "removed" and events.nouns.step == "batch"
    assert events.quiz is False and "no reference counts, eviction order or owners" in events.unknowable
    assert set(events.missing) >= {"refs", "heap", "allocations"}


def test_a_design_refuses_an_event_class_it_has_no_row_for_and_an_unknown_design():
    with pytest.raises(KeyError, match="no words for event class int"):
        design("events").words(3)
    with pytest.raises(KeyError, match="no cache design 'radix'"):
        design("radix")


def test_a_design_cannot_be_changed_once_made():
    events = design("events")
    with pytest.raises(TypeError):
        events.events[int] = events.words(BlockStored)  # type: ignore[index]
    with pytest.raises(Exception):
        events.name = "other"  # type: ignore[misc]


# -- steps and frames --------------------------------------------------------------------------


@RECORDINGS
def test_the_summary_of_a_shared_recording_matches_an_independent_decode(recording):
    timeline = WatchTimeline.from_messages(read_recording(recording), str(recording))
    expected = expected_figures(recording)
    summary = timeline.summary()
    assert {key: summary[key] for key in expected} == expected
    assert timeline.last_step == expected["messages"] == 400
    assert summary["gaps"] == summary["restarts"] == 0


@RECORDINGS
def test_every_rebuilt_frame_equals_a_straight_replay_in_any_order(recording):
    timeline = WatchTimeline.from_messages(read_recording(recording), keyframe_every=16)
    straight = list(timeline.states())  # one pass, no keyframes
    order = list(range(timeline.last_step + 1))
    random.Random(7).shuffle(order)
    for i in order[:40] + [0, timeline.last_step, 16, 17, 15, 14, 13]:
        frame = timeline.frame(i)
        assert frame.index == i and frame.state == straight[i], i
        assert len(frame.state) == timeline.cached_over_time[i]
    assert timeline.frame(200).state.digest() == straight[200].digest()


def test_stepping_forward_and_back_never_replays_more_than_a_keyframe_interval(monkeypatch):
    applied = []
    real = forest_module.Forest.apply

    def counting(self, batch, step):
        applied.append(step)
        return real(self, batch, step)

    messages = read_recording(VLLM)
    timeline = WatchTimeline.from_messages(messages, keyframe_every=32)
    monkeypatch.setattr(forest_module.Forest, "apply", counting)
    worst = 0
    for i in [399, 1, 200, 201, 202, 150, 33, 32, 31, 64, 398, 5]:
        applied.clear()
        timeline.frame(i)
        worst = max(worst, len(applied))
    assert 0 < worst <= 32


def test_frame_is_fast_for_any_step_of_a_long_stream():
    """A synthetic stream of 10,000 batches: frames anywhere cost about the same (bounded by
    the keyframe interval, not the position). benchmarks/bench_watch_timeline.py measures
    100,000."""
    timeline = WatchTimeline("synthetic")
    n = 10_000
    # CPU time, not wall time: on a shared machine a preempted frame is not a slow one.
    started = time.process_time()
    for i in range(n):
        events = [stored([i * 4 + 1, i * 4 + 2], parent=None if i % 50 == 0 else (i - 1) * 4 + 2)]
        if i >= 100:
            events.append(removed([(i - 100) * 4 + 1, (i - 100) * 4 + 2]))
        timeline.add(message(i, events, ts=float(i)))
    add_seconds = time.process_time() - started
    assert timeline.summary()["cached_blocks"] == 200
    costs = {}
    for i in (300, n // 2 + 77, n - 5):
        # The collector is off while a frame is timed: a full pass over the 10,000 batches
        # (0.5 s, once inside one frame in a fresh clone) is not the frame's cost.
        gc.disable()
        try:
            started = time.process_time()
            frame = timeline.frame(i)
            costs[i] = time.process_time() - started
        finally:
            gc.enable()
        assert frame.index == i and len(frame.state) == timeline.cached_over_time[i]
    # far apart positions, costs within a generous factor of each other (not growing with i)
    assert max(costs.values()) < 0.5 and max(costs.values()) < 20 * min(costs.values()) + 0.05, costs
    assert add_seconds < 60


def test_an_undecodable_message_is_a_step_that_changes_nothing_and_says_why():
    timeline = timeline_of([[stored([1, 2])]])
    step = timeline.add(Message(topic=b"kv", seq=1, payload=b"\xc1garbage"))
    frame = timeline.frame(step)
    assert frame.batch is None and frame.error and frame.effect is None
    assert frame.state == timeline.frame(1).state
    assert any("seq 1 could not be decoded" in note for note in frame.notes)
    assert timeline.summary()["undecodable"] == 1 and timeline.summary()["undecodable_list"][0]["seq"] == 1


def test_a_gap_in_seq_is_noted_and_counted():
    timeline = WatchTimeline("gaps")
    timeline.add(message(0, [stored([1])]))
    timeline.add(message(1, [stored([2], parent=1)]))
    step = timeline.add(message(5, [stored([3], parent=2)]))
    assert any("seqs 2-4 missing" in note and "incomplete" in note for note in timeline.frame(step).notes)
    summary = timeline.summary()
    assert summary["gaps"] == 1 and summary["missing_messages"] == 3
    assert summary["gap_list"] == [{"step": 3, "rank": 0, "first": 2, "last": 4}]
    assert "Seqs 2-4 missing" in timeline.frame(step).narration or "seqs 2-4" in timeline.frame(step).narration


def test_a_restart_resets_the_view_at_its_step():
    timeline = WatchTimeline("restart", keyframe_every=2)
    for seq in range(5):
        timeline.add(message(seq, [stored([10 + seq], parent=None if seq == 0 else 9 + seq)]))
    assert len(timeline.head_state) == 5
    step = timeline.add(message(0, [stored([100])]))
    frame = timeline.frame(step)
    assert [b.key for b in frame.state.blocks.values()] == [100]
    assert any("seq went back from 4 to 0" in note for note in frame.notes)
    assert any("view was reset: 5 blocks dropped" in note for note in frame.notes)
    timeline.add(message(1, [stored([101], parent=100)]))
    # rebuilt from a keyframe before the restart, the frame is the same
    assert timeline.frame(step).state == frame.state and len(timeline.frame(step + 1).state) == 2
    assert timeline.summary()["restarts"] == 1
    assert "cleared at batch 6" in timeline.why_block(10)


def test_ranks_keep_their_own_seqs():
    timeline = WatchTimeline("ranks")
    timeline.add(message(0, [stored([1])], rank=0))
    timeline.add(message(0, [stored([2])], rank=1))
    timeline.add(message(1, [stored([3], parent=1)], rank=0))
    timeline.add(message(1, [stored([4], parent=2)], rank=1))
    summary = timeline.summary()
    assert summary["gaps"] == summary["restarts"] == 0 and summary["cached_blocks"] == 4


def test_replayed_messages_fill_the_gap_they_answer():
    timeline = WatchTimeline("replay")
    timeline.add(message(0, [stored([1])]))
    timeline.add(message(1, [stored([2], parent=1)]), note="replayed")
    timeline.add(message(2, [stored([3], parent=2)]), note="replayed")
    timeline.add(message(3, [stored([4], parent=3)]))
    summary = timeline.summary()
    assert summary["replayed"] == 2 and summary["gaps"] == 0
    assert timeline.frame(2).notes == ("replayed",)


# -- narration ---------------------------------------------------------------------------------


def test_a_batch_is_narrated_in_the_events_designs_words():
    timeline = timeline_of([[stored([1, 2, 3])], [stored([4, 5, 6, 7], parent=3), removed([1, 99, 98])]])
    narration = timeline.frame(2).narration
    assert narration == (f"Batch 2 (seq 1): stored a chain of 4 blocks under {key_label(3)}, "
                         f"removed 3 blocks (2 never seen); 6 blocks cached.")
    assert timeline.frame(1).narration == "Batch 1 (seq 0): stored a chain of 3 blocks at the root; 3 blocks cached."


def test_orphans_duplicates_mediums_clears_and_unknown_types_are_narrated():
    timeline = timeline_of([
        [stored([1], parent=777)],
        [stored([1], parent=777)],
        [stored([5, 6], medium="CPU")],
        [{"type": "BlockTransferred", "block_hashes": [1]}],
        [{"type": "AllBlocksCleared"}],
        [],
    ])
    assert f"under {key_label(777)} (never seen: an orphan)" in timeline.frame(1).narration
    assert "1 block already cached (another copy)" in timeline.frame(2).narration
    assert "stored a chain of 2 blocks on CPU at the root" in timeline.frame(3).narration
    assert "skipped 1 event of unknown type BlockTransferred" in timeline.frame(4).narration
    assert "cleared every block" in timeline.frame(5).narration and timeline.cached_over_time[5] == 0
    assert timeline.frame(6).narration == "Batch 6 (seq 5): no events; 0 blocks cached."
    summary = timeline.summary()
    assert summary["unknown_types"] == {"BlockTransferred": 1} and summary["duplicates"] == 1


def test_a_batch_is_narrated_run_by_run_in_the_order_of_its_events():
    # removals before the store (vLLM's usual order), a duplicate, then removals after it:
    # each run says its own counts, the never-seen one in the run it belongs to
    timeline = timeline_of([[stored([1, 2])],
                            [removed([1, 99]), stored([7, 2]), removed([7])]])
    assert timeline.frame(2).narration == (
        "Batch 2 (seq 1): removed 2 blocks (1 never seen), stored a chain of 2 blocks at the root, "
        "1 block already cached (another copy), removed 1 block; 1 block cached.")


def test_many_chains_in_one_batch_are_told_three_then_counted():
    timeline = timeline_of([[stored([i * 10 + 1, i * 10 + 2]) for i in range(5)]])
    assert timeline.frame(1).narration.count("stored a chain of 2 blocks at the root") == 3
    assert "and 2 more (4 blocks)" in timeline.frame(1).narration


# -- why, rates, over time ---------------------------------------------------------------------


def test_why_block_says_when_a_block_was_stored_and_removed():
    timeline = timeline_of([[stored([1, 2, 3, 4])], [], [removed([3])], [stored([3], parent=2)]])
    assert timeline.why_block(3, at=3) == (f"block {key_label(3)} was stored at batch 1 by a chain of 4 "
                                          f"(block 3 of it), removed at batch 3; not cached at batch 3")
    assert timeline.why_block(3).endswith("stored again at batch 4 by a chain of 1; cached at batch 4")
    assert "never stored or removed" in timeline.why_block(12345)
    assert "never seen stored" in timeline_of([[removed([9])]]).why_block(9)


def test_rates_come_from_the_payloads_timestamps():
    timeline = timeline_of([[stored([i * 2 + 1, i * 2 + 2])] for i in range(11)], ts_step=0.5)
    rates = timeline.rates(11, window=11)
    assert rates["batches"] == 11 and rates["seconds"] == pytest.approx(5.0)
    assert rates["batches_per_s"] == pytest.approx(2.0) and rates["stored_per_s"] == pytest.approx(4.0)
    assert rates["removed_per_s"] == 0
    untimed = WatchTimeline()
    untimed.add(message(0, [], ts=None))
    untimed.add(message(1, [], ts=None))
    assert untimed.rates(2)["batches_per_s"] is None


def test_cached_over_time_follows_every_step():
    timeline = timeline_of([[stored([1, 2])], [removed([1])], [stored([7])]])
    assert list(timeline.cached_over_time) == [0, 2, 1, 2]
    with pytest.raises(IndexError):
        timeline.frame(4)


def test_the_model_does_not_hold_a_state_per_step(monkeypatch):
    timeline = WatchTimeline.from_messages(read_recording(VLLM), keyframe_every=64)
    assert timeline.keyframe_steps() == [0, 64, 128, 192, 256, 320, 384]
    assert not any(isinstance(v, list) and len(v) > 10 and hasattr(v[0], "blocks")
                   for k, v in vars(timeline).items() if k != "_keyframes")


def test_every_kind_of_lint_is_counted_in_the_summary_with_its_first_sentence():
    bad_ts = Message(b"kv", 0, msgspec.msgpack.encode([float("nan"), [stored([1])], "rank x"]))
    timeline = WatchTimeline("lints")
    timeline.add(bad_ts)
    timeline.add(message(1, [
        stored([2], medium=3),                                                    # medium
        {**stored([3]), "token_ids": [[0, 1], [1, 2]]},                           # token_pairs
        {k: v for k, v in stored([4]).items() if k != "block_size"},              # block_size_missing
        stored([5], lora_id="a"), stored([6], lora_name=7),                       # lora twice
        {**stored([7, 8]), "token_ids": [0, 1, 2]},                               # token_count
        {**stored([9]), "block_size": 0},                                         # placeholder_tokens
    ]))
    summary = timeline.summary()
    assert summary["lints"] == {"block_size_missing": 1, "lora": 2, "medium": 1, "placeholder_tokens": 1,
                                "rank": 1, "timestamp": 1, "token_count": 1, "token_pairs": 1}
    assert summary["first_lints"]["lora"] == {"step": 2, "seq": 1,
                                              "lint": "event 3 (BlockStored): lora_id is a string; read as none"}
    from kvviz.watch.json_output import summary_lines

    lines = summary_lines(summary)
    assert "lints (odd but decoded): block_size_missing 1, lora 2, medium 1, placeholder_tokens 1, rank 1, " \
           "timestamp 1, token_count 1, token_pairs 1" in lines
    assert any(line.startswith("  first timestamp lint at step 1 (seq 0): the timestamp is") for line in lines)


def test_the_summary_and_progress_lines_put_one_in_the_singular():
    from kvviz.watch.json_output import progress_line, summary_lines

    timeline = WatchTimeline("x")
    timeline.add(Message(b"kv", 0, payload([{"type": "BlockStored", "block_hashes": [9], "parent_block_hash": 8,
                                               "token_ids": [1, 2], "block_size": 2, "lora_id": None,
                                               "medium": "GPU"}])))
    timeline.add(Message(b"kv", 2, payload([])))  # seq 1 missing: one note
    assert "1 orphan, 1 stored as orphans)" in "\n".join(summary_lines(timeline.summary()))
    assert progress_line(timeline.progress(2, 0)).endswith(", 1 note")


# -- a timeline bounded in bytes ------------------------------------------------------------------


def looped(recording: Path, count: int) -> list[Message]:
    """``count`` messages of ``recording``, looped, numbered 0..count-1 (one publisher's stream)."""
    messages = read_recording(recording)
    return [Message(m.topic, seq, m.payload) for seq, m in zip(range(count), messages * (count // len(messages) + 1))]


@RECORDINGS
def test_a_timeline_bounded_in_bytes_folds_old_steps_and_keeps_the_same_summary_and_frames(recording):
    stream = looped(recording, 1_500)
    whole = WatchTimeline.from_messages(stream, keyframe_every=64)
    bounded = WatchTimeline(keyframe_every=64, max_bytes=2_000_000)
    for message in stream:
        bounded.add(message)
        assert bounded.kept_bytes <= 2_000_000 or bounded.last_step - bounded.first_step <= 2 * 64
    assert bounded.first_step > 0 and bounded.first_step % 64 == 0
    assert bounded.summary() == whole.summary()
    for step in (bounded.first_step, bounded.first_step + 1, bounded.first_step + 50, bounded.last_step - 1):
        assert bounded.frame(step).state == whole.frame(step).state
        assert bounded.frame(step).narration == whole.frame(step).narration or step == bounded.first_step
    assert bounded.progress(1_500, 10) == whole.progress(1_500, 10)
    assert list(bounded.cached_over_time) == list(whole.cached_over_time)


def test_a_folded_step_is_refused_in_one_line_and_the_whole_stream_points_to_record():
    bounded = WatchTimeline(keyframe_every=16, max_bytes=200_000)
    for message in looped(VLLM, 400):
        bounded.add(message)
    with pytest.raises(IndexError, match=r"^step 1 does not exist: the watch has steps \d+\.\.400 \(1-\d+ were folded"):
        bounded.frame(1)
    with pytest.raises(ValueError, match="--record FILE"):
        bounded.messages_until(400)
    assert "folded into this state" in bounded.frame(bounded.first_step).narration


def traced_bytes(build) -> int:
    """What ``build()``'s result holds, by tracemalloc (the inputs are the caller's)."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()  # noqa: F841 - held while measured
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # measures memory over thousands of steps
def test_a_timeline_keeps_payloads_not_decoded_batches():
    # The same 800 vLLM batches applied to a bare forest and added to a timeline (no keyframe
    # but the first): the difference is what the steps themselves keep, beyond their payloads
    # (the caller's here). A decoded batch kept would be 23 KB a step.
    from kvviz.watch.forest import Forest
    from kvviz.watch.wire import decode_payload

    stream = looped(VLLM, 800)

    def forest() -> Forest:
        built = Forest()
        for step, message in enumerate(stream, start=1):
            built.apply(decode_payload(message.payload, seq=message.seq, topic="kv"), step)
        return built

    def timeline() -> WatchTimeline:
        built = WatchTimeline(keyframe_every=1_000_000)
        for message in stream:
            built.add(message)
        return built

    per_step = (traced_bytes(timeline) - traced_bytes(forest)) / len(stream)
    assert per_step < watch_module.STEP_OVERHEAD_BYTES


@pytest.mark.slow  # measures memory over thousands of steps
def test_what_a_timeline_counts_of_its_steps_and_keyframes_is_an_upper_estimate_within_twice_the_truth():
    from kvviz.watch.forest import Forest
    from kvviz.watch.wire import decode_payload

    stream = looped(VLLM, 800)

    def forest() -> Forest:
        built = Forest()
        for step, message in enumerate(stream, start=1):
            built.apply(decode_payload(message.payload, seq=message.seq, topic="kv"), step)
        return built

    timelines = []

    def timeline() -> WatchTimeline:
        built = WatchTimeline(keyframe_every=64)
        for message in stream:
            built.add(message)
        timelines.append(built)
        return built

    # Keyframes 64 steps apart over two passes of the recording: as a live watch's are, a few
    # hundred batches apart on a cache that has stopped growing (shorter intervals overcount more).
    held = traced_bytes(timeline) - traced_bytes(forest)  # the steps and keyframes, not the payloads
    counted = timelines[0].kept_bytes - sum(len(m.payload) + len(m.topic) for m in stream)
    assert held <= counted < 2 * held


def test_a_forest_at_its_cap_is_said_once_counted_in_the_summary_and_rebuilt_frames_agree():
    from tests.watch.watch_fixtures import message, stored

    timeline = WatchTimeline("tcp://127.0.0.1:5557", keyframe_every=4, max_blocks=10)
    for seq in range(12):  # each batch a new chain of 3 blocks under no parent: 36 blocks stored
        timeline.add(message(seq, stored([1000 + 3 * seq + i for i in range(3)])))
    summary = timeline.summary()
    assert (summary["cached_blocks"], summary["blocks_not_kept"], summary["forest_full_step"]) == (10, 26, 4)
    told = [(step, note) for step in range(1, 13) for note in timeline.notes(step) if "MAX_WATCH_FOREST_BLOCKS" in note]
    assert told == [(4, "the forest holds its cap of 10 blocks (MAX_WATCH_FOREST_BLOCKS): 2 new blocks not added, "
                        "nor any new one while it is full; the view is incomplete from here")]
    assert "forest full from step 4: 26 new blocks not added" in "\n".join(summary_lines(summary))
    for step in range(13):  # frames rebuilt from keyframes hold the same capped forest as the head did
        assert len(timeline.frame(step).state) == min(10, 3 * step)
    assert timeline.frame(12).state.digest() == summary["digest"]


# -- a replay's answer that comes after the live messages ---------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _stream(n: int) -> list[Message]:
    """``n`` batches of one rank that depend on their order: each stores a block under the
    previous batch's and removes the one before that (a chain that moves along)."""
    from tests.watch.watch_fixtures import message, removed, stored

    out = []
    for seq in range(n):
        events = [stored([5_000 + seq], parent=None if seq == 0 else 5_000 + seq - 1, first_token=4 * seq)]
        if seq % 3 == 2:
            events.append(removed([5_000 + seq - 2]))
        out.append(message(seq, *events))
    return out


def _comparable(timeline: WatchTimeline) -> dict:
    summary = timeline.summary()
    return {key: value for key, value in summary.items() if key not in ("replayed",)}


@settings(max_examples=60, deadline=None)
@given(st.integers(8, 60), st.data())
def test_a_replay_answered_after_the_live_messages_ends_where_an_in_order_watch_ends(n, data):
    messages = _stream(n)
    first = data.draw(st.integers(1, n - 2), label="gap first")
    last = data.draw(st.integers(first, n - 2), label="gap last")
    live_after = data.draw(st.integers(1, n - 1 - last), label="live messages before the answer")
    filled = data.draw(st.sets(st.integers(first, last), min_size=1), label="seqs the replay brings")
    keyframe_every = data.draw(st.sampled_from([1, 2, 4, 256]), label="keyframe_every")
    arrival = (messages[:first] + messages[last + 1:last + 1 + live_after]
               + [messages[s] for s in sorted(filled)] + messages[last + 1 + live_after:])
    watched = WatchTimeline("x", keyframe_every=keyframe_every)
    shown_before_the_answer = 0
    for message in arrival:
        watched.add(message)
        if message.seq == last + live_after:
            shown_before_the_answer = watched.last_step  # the live messages were steps before the replay came
    in_order = WatchTimeline("x", keyframe_every=keyframe_every)
    for message in sorted(arrival, key=lambda m: m.seq):
        in_order.add(message)
    assert shown_before_the_answer == first + live_after
    assert [m.seq for m in watched.messages] == sorted(m.seq for m in arrival)  # per-rank seq order
    assert _comparable(watched) == _comparable(in_order)
    for step in range(watched.last_step + 1):
        assert watched.frame(step).state.digest() == in_order.frame(step).state.digest()
    told = [note for step in range(1, watched.last_step + 1) for note in watched.notes(step) if "repaired" in note]
    assert told == [f"repaired: {len(filled)} message{'s' if len(filled) != 1 else ''} inserted before batch "
                    f"{first + len(filled) + 1}"]


def test_late_replayed_messages_from_a_recording_are_put_back_in_one_rederivation_each_run():
    messages = _stream(30)
    arrival = messages[:10] + messages[20:25] + messages[10:20] + messages[25:]
    watched = WatchTimeline.from_messages(arrival, keyframe_every=4)
    assert [m.seq for m in watched.messages] == list(range(30))
    assert watched.summary()["digest"] == WatchTimeline.from_messages(messages).summary()["digest"]
    assert watched.summary()["gaps"] == 0 and watched.take_rederived() == 8  # the keyframe before seq 10's place


def test_a_replay_whose_place_was_folded_away_is_counted_too_late_and_its_gap_stays():
    messages = _stream(21)
    folded = WatchTimeline("x", keyframe_every=2, max_bytes=1)  # folds all but the newest interval
    folded.add_all(messages[:3] + messages[6:])
    assert folded.first_step > 4  # the step of seq 6, the gap's live successor, is folded away
    assert folded.add_late([(m, "replayed") for m in messages[3:6]]) == 0
    summary = folded.summary()
    assert (summary["replayed_too_late"], summary["gaps"], summary["missing_messages"]) == (3, 1, 3)
    assert summary["messages"] == 18
    assert ("replayed too late: 3 messages came after their place was folded away (not shown; their gap stays "
            "counted)") in summary_lines(summary)


def test_a_merged_replay_filling_two_gaps_puts_each_run_before_its_own_successor():
    messages = _stream(16)
    arrival = messages[:3] + messages[6:8] + messages[10:] + messages[3:6] + messages[8:10]
    watched = WatchTimeline("x", keyframe_every=4)
    watched.add_all(arrival)
    assert [m.seq for m in watched.messages] == list(range(16))
    assert watched.summary()["digest"] == WatchTimeline.from_messages(messages).summary()["digest"]
    assert watched.summary()["gaps"] == 0


def test_a_late_replay_on_one_rank_keeps_the_other_ranks_batches_and_every_ranks_seq_order():
    from dataclasses import replace

    rank0 = _stream(12)
    rank1 = [replace(m, rank=1) for m in _stream(12)]
    interleaved = [m for pair in zip(rank0, rank1) for m in pair]  # 0/0, 0/1, 1/0, 1/1, ...
    gap = {(1, seq) for seq in (4, 5, 6)}
    arrival = [m for m in interleaved if (m.rank, m.seq) not in gap]
    arrival += [m for m in rank1 if (1, m.seq) in gap]  # the replay's answer, after everything
    watched = WatchTimeline("x", keyframe_every=4)
    watched.add_all(arrival)
    for rank in (0, 1):
        assert [m.seq for m in watched.messages if m.rank == rank] == list(range(12))
    assert watched.summary()["gaps"] == 0 and watched.summary()["messages"] == 24
    # Rank 1's seqs 4-6 went before its seq 7; every other message kept its arrival order.
    assert [m for m in watched.messages if (m.rank, m.seq) not in gap] == arrival[:-3]


# -- history replayed after the live messages: a late attach, a restarted publisher ------------


@settings(max_examples=60, deadline=None)
@given(st.integers(4, 60), st.data())
def test_a_late_attachs_history_answered_after_the_live_messages_ends_where_an_in_order_watch_ends(n, data):
    from dataclasses import replace

    messages = _stream(n)
    attach = data.draw(st.integers(1, n - 1), label="first live seq")
    live_after = data.draw(st.integers(1, n - attach), label="live messages before the answer")
    kept = data.draw(st.integers(0, attach - 1), label="first seq the replay buffer still holds")
    keyframe_every = data.draw(st.sampled_from([1, 2, 4, 256]), label="keyframe_every")
    history = [replace(m, replayed=True) for m in messages[kept:attach]]
    arrival = messages[attach:attach + live_after] + history + messages[attach + live_after:]
    watched = WatchTimeline("x", keyframe_every=keyframe_every)
    watched.add_all(arrival[:live_after])
    assert watched.last_step == live_after  # the live messages were steps before the history came
    watched.add_all(arrival[live_after:])
    in_order = WatchTimeline.from_messages(history + messages[attach:], "x", keyframe_every)
    assert [m.seq for m in watched.messages] == list(range(kept, n))
    assert watched.summary() == in_order.summary()
    for step in range(watched.last_step + 1):
        assert watched.frame(step).state.digest() == in_order.frame(step).state.digest()
    assert watched.summary()["restarts"] == 0 and watched.summary()["replayed"] == attach - kept


def test_a_recording_marks_late_history_so_reading_it_back_puts_it_first_and_without_them_it_reads_as_a_restart(
        tmp_path):
    from dataclasses import replace

    from kvviz.watch.recording import message_line

    messages = _stream(20)
    arrival = messages[8:14] + [replace(m, replayed=True) for m in messages[:8]] + messages[14:]
    path, old = tmp_path / "marked.jsonl", tmp_path / "unmarked.jsonl"
    path.write_text("".join(message_line(m) + "\n" for m in arrival))
    old.write_text("".join(message_line(replace(m, replayed=False)) + "\n" for m in arrival))
    watched = WatchTimeline.from_messages(read_recording(path), keyframe_every=4)
    assert [m.seq for m in watched.messages] == list(range(20))
    assert watched.summary()["digest"] == WatchTimeline.from_messages(messages).summary()["digest"]
    assert (watched.summary()["restarts"], watched.summary()["replayed"]) == (0, 8)
    # A recording of an earlier kvviz has no marks: history after live messages is a seq going back.
    unmarked = WatchTimeline.from_messages(read_recording(old)).summary()
    assert unmarked["restarts"] == 1 and unmarked["digest"] != watched.summary()["digest"]


@pytest.mark.parametrize("keyframe_every", [1, 3, 256])
@pytest.mark.parametrize("kept", [0, 6], ids=["whole-history", "history-past-the-old-seq"])
def test_a_restart_found_on_a_reconnect_moves_to_its_history_and_ends_as_an_in_order_watch(keyframe_every, kept):
    from dataclasses import replace

    old = _stream(5)  # seqs 0-4; then a new publisher, seqs 0-11 of another stream
    new = [replace(m, payload=p.payload) for m, p in zip(_stream(12), reversed(_stream(40)[28:]))]
    # Seq 8 came first on the new connection, marked restart (its seq does not show it); 9-10
    # live; then the new publisher's history from `kept`, replayed; then 11.
    arrival = (old + [replace(new[8], restart=True)] + new[9:11] + [replace(m, replayed=True) for m in new[kept:8]]
               + new[11:])
    watched = WatchTimeline("x", keyframe_every=keyframe_every)
    watched.add_all(arrival)
    history = [replace(m, replayed=True) for m in new[kept:8]]
    history[0] = replace(history[0], restart=True)
    in_order = WatchTimeline.from_messages(old + history + new[8:], "x", keyframe_every)
    assert [m.seq for m in watched.messages] == list(range(5)) + list(range(kept, 12))
    assert watched.summary() == in_order.summary() and watched.summary()["restarts"] == 1
    assert [m.restart for m in watched.messages].count(True) == 1 and watched.messages[5].restart
    assert "restart: seq " in " ".join(watched.notes(6))


def test_a_late_attachs_history_on_one_rank_goes_before_that_ranks_first_step_only():
    from dataclasses import replace

    rank0 = _stream(10)
    rank1 = [replace(m, rank=1) for m in _stream(10)]
    # Both ranks attached at seq 4: rank 0's history came first, rank 1's after everything.
    history0 = [replace(m, replayed=True) for m in rank0[:4]]
    history1 = [replace(m, replayed=True) for m in rank1[:4]]
    live = [m for pair in zip(rank0[4:], rank1[4:]) for m in pair]
    watched = WatchTimeline("x", keyframe_every=3)
    watched.add_all(history0 + live + history1)
    for rank in (0, 1):
        assert [m.seq for m in watched.messages if m.rank == rank] == list(range(10))
    assert [(m.rank, m.seq) for m in watched.messages][:6] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0)]
    summary = watched.summary()
    assert (summary["restarts"], summary["gaps"], summary["replayed"], summary["messages"]) == (0, 0, 8, 20)
    in_order = WatchTimeline.from_messages(history0 + [live[0]] + history1 + live[1:], "x", 3)
    assert summary == in_order.summary()
