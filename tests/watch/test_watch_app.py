# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch``'s UI driven headless: live follow, pausing by stepping back while batches
keep arriving, returning to live, the forest's marks, the header, and the keys. Messages are
handed to the app with ``receive``/``receive_messages`` (no timer, no socket)."""

from __future__ import annotations

import pytest

from tests.watch.watch_fixtures import (A2, A3, B2, ORPHAN, ROOT_A, QueuedSubscriber, QuietSubscriber, garbage,
                                        message, received, removed, stored, story, story_timeline)

from kvviz.watch.subscriber import NOTHING_ARRIVED_HINT, RankStats, SubscriberStats
from kvviz.watch.wire import key_label
from kvviz.watch.events import DESIGN
from kvviz.watch.timeline import WatchTimeline
from kvviz.ui.screens.prompt_screen import PromptScreen
from kvviz.watch.app import KEYS, WatchHelpScreen, make_watch_app

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

SIZE = (140, 40)


def live_app(timeline=None, **opts):
    """An app on ``timeline`` (default: empty) fed by a subscriber with nothing to say."""
    timeline = timeline if timeline is not None else WatchTimeline("tcp://127.0.0.1:5557")
    return make_watch_app(timeline, subscriber=QuietSubscriber(), **opts)


def forest_text(app) -> list[str]:
    return [app.forest.row_text(i) for i in range(len(app.forest.rows))]


def row_of(app, key, medium="GPU") -> str:
    return app.forest.row_text(next(i for i, row in enumerate(app.forest.rows) if row.item == (key, medium)))


async def test_live_mode_follows_each_new_batch():
    app = live_app()
    messages = story()
    async with app.run_test(size=SIZE) as pilot:
        assert app.step == 0
        app.receive([received(m) for m in messages[:3]])
        await pilot.pause()
        assert (app.step, app.last_step, app.following) == (3, 3, True)
        assert app.forest.view.frame.index == 3
        assert "● live" in app.header.text and "step 3/3" in app.timeline_bar.text
        app.receive([received(messages[3])])
        await pilot.pause()
        assert app.step == 4


async def test_stepping_back_pauses_and_later_batches_wait():
    app = live_app()
    messages = story()
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(m) for m in messages[:3]])
        await pilot.pause()
        app.action_previous_step()
        await pilot.pause()
        assert (app.step, app.following) == (2, False)
        app.receive([received(m) for m in messages[3:5]])
        await pilot.pause()
        assert (app.step, app.last_step) == (2, 5)
        assert app.forest.view.frame.index == 2  # the forest keeps showing the step chosen
        assert "paused · 2 waiting" in app.header.text
        assert "2 batches waiting" in app.timeline_bar.text
        assert "step 2/5" in app.timeline_bar.text


async def test_l_returns_to_live_and_follows_again():
    app = live_app()
    messages = story()
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(m) for m in messages[:3]])
        app.action_previous_step()
        app.action_previous_step()
        app.receive([received(m) for m in messages[3:5]])
        await pilot.pause()
        assert app.step == 1
        await pilot.press("l")
        await pilot.pause()
        assert (app.step, app.following, app.waiting) == (5, True, 0)
        assert "● live" in app.header.text and "waiting" not in app.header.text
        app.receive([received(messages[5])])
        await pilot.pause()
        assert app.step == 6


async def test_end_returns_to_live_and_home_goes_to_the_start_paused():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("home")
        assert (app.step, app.following) == (0, False)
        await pilot.press("end")
        assert (app.step, app.following) == (6, True)


async def test_arrow_keys_step_and_stepping_forward_stays_paused():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("left", "left", "left")
        assert app.step == 3
        await pilot.press("right", "h", "right", "right", "right", "right")
        assert (app.step, app.following) == (6, False)  # only l (or end) is live again
        app.receive_messages([message(6, stored([0x77], first_token=900))])
        await pilot.pause()
        assert (app.step, app.waiting) == (6, 1)


async def test_g_jumps_to_a_step_typed():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("backspace", "2", "enter")  # the step shown (6) is the default
        await pilot.pause()
        assert (app.step, app.following) == (2, False)
        app.action_jump()
        await pilot.pause()
        app.screen.confirm("7")
        await pilot.pause()
        refusal = str(app.screen.query_one("#prompt-error").render())
        assert "step 7 does not exist: the watch has steps 0..6 so far" in refusal and app.step == 2


async def test_the_watch_help_is_a_100_wide_box_titled_for_the_watch_with_its_own_keys_and_legend():
    from textual.containers import VerticalScroll
    from textual.widgets import Static

    from kvviz.watch.app import LEGEND

    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        app.action_help()
        await pilot.pause()
        box = app.screen.query_one(VerticalScroll)
        text = str(app.screen.query_one(Static).render())
        assert box.outer_size.width == 100 and box.border_title == "kvviz watch help"
        assert text.startswith("Keys\n") and all(what in text for _, what in KEYS)
        assert LEGEND.splitlines()[-1].split("]")[-1] in text


async def test_help_lists_every_binding_and_q_quits():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, WatchHelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        listed = " ".join(key for key, _ in KEYS)
        for binding in app.BINDINGS:
            shown = {"left": "←", "right": "→", "question_mark": "?", "slash": "/"}
            for key in binding.key.split(","):
                assert shown.get(key, key) in listed, key
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_a_recording_opens_at_its_last_batch_as_a_replay():
    app = make_watch_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.step == 6
        assert "replay file" in app.header.text and "tcp://127.0.0.1:5557" in app.header.text
        assert app._poll_timer is None  # no subscriber: no timer


async def test_opening_at_a_step_is_paused_there():
    app = live_app(story_timeline(), step=2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert (app.step, app.following) == (2, False)


async def test_the_timer_drains_the_subscriber():
    subscriber = QueuedSubscriber([received(m) for m in story()])
    app = make_watch_app(WatchTimeline("x"), subscriber=subscriber)
    async with app.run_test(size=SIZE) as pilot:
        app.poll_subscriber()  # what the timer calls (it may have drained some already)
        await pilot.pause()
        assert subscriber.items == [] and app.last_step == 6 and app.step == 6


async def test_a_backlog_is_drained_a_chunk_at_a_time_and_the_header_says_it_is_catching_up():
    from kvviz.watch.app import POLL_BATCH

    backlog = [received(message(seq, stored([seq + 1], parent=seq or None))) for seq in range(POLL_BATCH * 3 + 7)]
    subscriber = QueuedSubscriber(backlog)
    app = make_watch_app(WatchTimeline("tcp://127.0.0.1:5557"), subscriber=subscriber)
    async with app.run_test(size=SIZE) as pilot:
        app.poll_subscriber()  # one drain takes one chunk, not everything queued
        assert app.last_step % POLL_BATCH == 0 and app.last_step < len(backlog)
        assert app.backlog == len(subscriber.items) > 0
        assert f"catching up: {app.backlog:,} waiting" in app.header.text
        for _ in range(200):  # the next chunks follow each refresh, without the timer
            if not subscriber.items:
                break
            await pilot.pause()
        await pilot.pause()
        assert app.last_step == len(backlog) and app.step == app.last_step and app.following
        assert app.backlog == 0 and "catching up" not in app.header.text


# -- what the views show ---------------------------------------------------------------------


async def test_blocks_stored_by_the_step_are_marked_and_chains_hang_under_parents():
    app = live_app(story_timeline(3))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        rows = forest_text(app)
        b2 = row_of(app, B2)
        assert "+ " in b2 and b2.rstrip().endswith("[100–103]") and " stored" in b2 and "tok 4–7" in b2
        assert " stored" not in row_of(app, A2)  # stored at step 1, not this one
        keys = [row.item[0] for row in app.forest.rows if row.item is not None]
        assert keys == [ROOT_A, A2, A3, B2]  # depth first: A2's chain before the branch B2
        assert rows[0].startswith("4 blocks cached")


async def test_a_removed_block_shows_struck_at_its_step_and_is_gone_after():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        app.go_to(5)
        await pilot.pause()
        row = row_of(app, B2)
        assert row.lstrip("├└─│ ").startswith("✗") and " removed" in row
        index = next(i for i, r in enumerate(app.forest.rows) if r.item == (B2, "GPU"))
        strip = app.forest.render_strip(index, 100)
        assert any(segment.style and segment.style.strike for segment in strip)
        assert "▾" in app.timeline_bar.text and "1 block removed" in app.timeline_bar.text
        app.go_to(6)
        await pilot.pause()
        assert all(row.item != (B2, "GPU") for row in app.forest.rows)


async def test_an_orphan_is_marked_and_the_view_says_it_is_incomplete():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        row = row_of(app, ORPHAN)
        assert "⊘" in row and "orphan" in row and "tok +0–3" in row
        assert "⚠ incomplete view" in app.header.text and "1 orphan block" in app.header.text
        app.go_to(5)
        await pilot.pause()
        assert "incomplete view" not in app.header.text


async def test_selecting_a_block_shows_the_timelines_why_answer_and_links_its_chain():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        app.go_to(5)
        await pilot.pause()
        app.forest.move_cursor((B2, "GPU"))
        await pilot.pause()
        assert app.selected == (B2, "GPU")
        why = str(app.why_line.render())
        assert why == f"why: {app.timeline.why_block(B2, at=5)}" and "removed at batch 5" in why
        assert app.forest.is_linked((ROOT_A, "GPU")) and not app.forest.is_linked((A2, "GPU"))
        app.go_to(4)  # before the removal: the why line must not tell the future
        await pilot.pause()
        why = str(app.why_line.render())
        assert why == f"why: {app.timeline.why_block(B2, at=4)}" and "removed at batch 5" not in why


async def test_the_cursor_keys_select_blocks_in_the_forest():
    app = live_app(story_timeline(2))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down")
        await pilot.pause()
        assert app.selected == (ROOT_A, "GPU")  # the chain of three, folded into one row
        await pilot.press("enter")  # unfolded: a row per block
        await pilot.press("down")
        await pilot.pause()
        assert app.selected == (A2, "GPU") and key_label(A2) in str(app.why_line.render())


async def test_blocks_per_medium_count_each_tier():
    app = live_app(story_timeline(4))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        lines = app.media.text.splitlines()
        assert lines[0].split()[:2] == ["GPU", "4"] and lines[1].split()[:2] == ["CPU", "1"]
        assert lines[1].rstrip().endswith("+1")  # the cpu copy of A2 came with this batch
        assert row_of(app, A2, "cpu").lstrip("│ ").startswith("≡ ")  # the key's copy on another medium


async def test_equal_counts_on_two_media_draw_equal_bars_whether_or_not_the_step_changed_one():
    timeline = WatchTimeline("bars")
    timeline.add(message(0, stored([1, 2, 3]), stored([11, 12, 13], medium="CPU")))
    timeline.add(message(1, stored([14], parent=13, medium="CPU"), removed([11], medium="CPU")))
    app = live_app(timeline)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        gpu, cpu = sorted(app.media.text.splitlines())[::-1]  # "GPU ..." sorts after "CPU ..."
        assert gpu.split()[:2] == ["GPU", "3"] and cpu.split()[:2] == ["CPU", "3"]
        assert cpu.rstrip().endswith("+1 −1") and not gpu.rstrip().endswith("1")
        assert gpu.split()[2] == cpu.split()[2]  # the same bar, cell for cell


async def test_the_missing_views_say_what_the_stream_does_not_carry():
    app = live_app(story_timeline(1))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert str(app.query_one("#not-carried").render()) == DESIGN.unknowable


async def test_an_undecodable_message_is_a_step_noted_with_its_seq():
    app = live_app()
    async with app.run_test(size=SIZE) as pilot:
        app.receive_messages([message(0, stored([1])), garbage(1), message(2, stored([2], parent=1, first_token=4))])
        await pilot.pause()
        assert "1 undecodable" in app.header.text and app.step == 3
        app.go_to(2)
        await pilot.pause()
        assert "seq 1 could not be decoded" in app.narration.text and "UNDECODABLE" in app.timeline_bar.text
        assert "✗" in app.timeline_bar.text.splitlines()[1]


async def test_a_gap_and_a_restart_are_counted_marked_and_noted():
    app = live_app()
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(message(0, stored([1]))), received(message(4, stored([2], parent=1, first_token=4))),
                     received(message(0, stored([9])))])
        await pilot.pause()
        assert "1 gap" in app.header.text and "1 restart" in app.header.text
        assert "⚠ incomplete view" in app.header.text
        assert "RESTART" in app.timeline_bar.text
        app.go_to(2)
        await pilot.pause()
        assert "GAP" in app.timeline_bar.text and "seqs 1-3 missing" in app.narration.text
        assert "!" in app.timeline_bar.text.splitlines()[1]


async def test_rates_and_the_sparkline_come_from_the_timeline():
    app = live_app(story_timeline())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        rates = app.timeline.rates(6)
        assert f"{rates['batches_per_s']:.1f} batches/s · blocks +{rates['stored_per_s']:.1f}/s" in app.header.text
        assert f"{len(app.timeline.frame(6).state)} cached" in app.header.text
        assert "█" in app.header.text  # the peak of the sparkline


@pytest.mark.parametrize("size", [(80, 24), (60, 20)])
async def test_a_small_terminal_still_shows_the_status_and_counts(size):
    app = live_app(story_timeline())
    async with app.run_test(size=size) as pilot:
        app.action_previous_step()
        await pilot.pause()
        line = app.header.text.splitlines()[0]
        assert "paused" in line and "undecodable" in line


async def test_e_exports_the_step_shown_as_a_bundle_a_report_and_a_picture(tmp_path):
    from kvviz.watch.bundle import is_watch_bundle, open_watch_bundle

    app = live_app(story_timeline(), step=3, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        for _ in range(50):  # the export runs after the next refresh: wait for it, bounded
            if len(list(tmp_path.iterdir())) == 3:
                break
            await pilot.pause(0.02)
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == [f"kvviz-watch-tcp-127-0-0-1-5557-step3{s}" for s in (".json", ".md", ".svg")]
        bundle = tmp_path / names[0]
        assert is_watch_bundle(bundle)
        opened = open_watch_bundle(bundle)
        assert opened.step == 3 and opened.divergence is None
        assert (tmp_path / names[2]).read_text().lstrip().startswith("<svg")
        app.action_export()  # a second export takes new names, never the old ones
        for _ in range(50):
            if len(list(tmp_path.iterdir())) == 6:
                break
            await pilot.pause(0.02)
        assert (tmp_path / "kvviz-watch-tcp-127-0-0-1-5557-step3-2.json").exists()


async def test_a_new_step_scrolls_its_first_change_into_sight():
    timeline = WatchTimeline("x")
    timeline.add(message(0, stored(list(range(1, 200)))))  # a chain of 199 blocks
    timeline.add(message(1, stored([5000], parent=199, first_token=10_000)))  # one more at its end
    app = make_watch_app(timeline, step=1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.forest.scroll_offset.y == 0  # step 1 stored everything from the top
        app.action_next_step()
        await pilot.pause()
        row = app.forest.first_change_row()
        # the 200 blocks are one straight chain: one folded row, which shows the block stored
        assert (5000, "GPU") in {(line.block.key, line.block.medium) for line in app.forest.rows[row].data.lines}
        assert "+1 stored" in app.forest.row_text(row)
        top = app.forest.scroll_offset.y
        assert top <= row < top + app.forest.scrollable_content_region.height


async def test_a_removal_of_a_block_never_seen_is_listed_and_makes_the_view_incomplete():
    app = live_app()
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(message(0, removed([0x5151_0000_0000_0001])))])
        await pilot.pause()
        assert any("never seen stored" in line for line in forest_text(app))
        assert "1 removal of blocks never seen" in app.header.text


class HandshakeSubscriber(QuietSubscriber):
    """Nothing to deliver; its stats say each rank's handshake, as the real subscriber's do."""

    def __init__(self, connected: tuple[bool, ...]) -> None:
        super().__init__()
        self.connected = connected

    @property
    def stats(self):
        return SubscriberStats(ranks=tuple(RankStats(f"tcp://127.0.0.1:{5557 + r}", up, 0, None)
                                           for r, up in enumerate(self.connected)))


async def test_the_header_says_each_ranks_handshake_and_what_to_check_until_a_message_comes():
    subscriber = HandshakeSubscriber((False,))
    app = make_watch_app(WatchTimeline("tcp://127.0.0.1:5557"), subscriber=subscriber)
    async with app.run_test(size=SIZE) as pilot:
        first, second = app.header.text.split("\n")
        assert "● live · not connected" in first and NOTHING_ARRIVED_HINT in second
        subscriber.connected = (True,)
        app.poll_subscriber()  # what the timer calls: the handshake came up, nothing arrived yet
        await pilot.pause()
        first, second = app.header.text.split("\n")
        assert "● live · connected" in first and NOTHING_ARRIVED_HINT in second
        app.receive([received(story()[0])])
        await pilot.pause()
        assert "● live · connected" in app.header.text and NOTHING_ARRIVED_HINT not in app.header.text


async def test_several_ranks_handshakes_are_said_rank_by_rank():
    app = make_watch_app(WatchTimeline("tcp://127.0.0.1:5557"), subscriber=HandshakeSubscriber((True, False)))
    async with app.run_test(size=SIZE):
        assert "rank 0 connected, rank 1 not connected" in app.header.text


async def test_a_replay_shown_at_an_early_step_says_only_what_was_known_by_then():
    """A peak of 5 blocks at step 4 and a restart at step 5: step 2 of the replay shows
    neither (the banner, the header's peak and the medium bars' scale are up to the step)."""
    timeline = WatchTimeline("recording.jsonl")
    for msg in [message(0, stored([ROOT_A])), message(1, stored([A2], parent=ROOT_A, first_token=4)),
                message(2, removed([A2])), message(3, stored([A2, A3, B2, ORPHAN], parent=ROOT_A, first_token=4)),
                message(0, removed([A3]))]:  # seq 0 again: the publisher restarted
        timeline.add(msg)
    app = make_watch_app(timeline, step=2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.view.step == 2 and app.view.totals.restarts == 0 and app.view.peak == 2
        assert "publisher restart" not in app.header.text and "peak 2" in app.header.text
        app.go_to(5)
        await pilot.pause()
        assert app.view.totals.restarts == 1 and app.view.peak == 5 and "publisher restart" in app.header.text


async def test_a_live_timeline_that_folded_its_oldest_steps_starts_the_view_at_the_fold():
    # A timeline bounded to a few hundred bytes folds each keyframe interval of 2 behind the head.
    timeline = WatchTimeline("tcp://127.0.0.1:5557", keyframe_every=2, max_bytes=1)
    app = live_app(timeline)
    async with app.run_test(size=SIZE) as pilot:
        app.following = False
        app.go_to(1)
        app.receive([received(m) for m in story()])
        await pilot.pause()
        assert timeline.first_step > 1 and app.step == timeline.first_step  # the paused step was folded away
        app.go_to(0)
        await pilot.pause()
        assert app.step == timeline.first_step and "folded into this state" in app.narration.text


async def test_a_recording_that_stops_is_told_in_the_ui_at_its_next_poll():
    class TellingSubscriber(QuietSubscriber):
        def __init__(self) -> None:
            super().__init__()
            self.told = ["live.jsonl: recording stopped after 3 messages: No space left on device; watching goes on"]

        def notices(self) -> list[str]:
            told, self.told = self.told, []
            return told

    app = make_watch_app(WatchTimeline("tcp://127.0.0.1:5557"), subscriber=TellingSubscriber())
    async with app.run_test(size=SIZE) as pilot:
        app.poll_subscriber()
        await pilot.pause()
        shown = [str(n.message) for n in app._notifications]
        assert shown == ["live.jsonl: recording stopped after 3 messages: No space left on device; watching goes on"]


async def test_the_uis_per_step_lists_let_folded_steps_go_and_count_in_the_timelines_bound():
    from kvviz.watch.view import VIEW_STEP_BYTES

    # 2,000 batches into a timeline bounded to what a few keyframe intervals cost: the UI's
    # lists hold the kept steps only, and the header's totals still count every batch received.
    timeline = WatchTimeline("tcp://127.0.0.1:5557", keyframe_every=16, max_bytes=2_000_000)
    app = live_app(timeline)
    async with app.run_test(size=SIZE) as pilot:
        for start in range(0, 2_000, 200):
            app.receive([received(message(seq, stored([10_000 + seq]))) for seq in range(start, start + 200)])
        await pilot.pause()
        kept = timeline.last_step - timeline.first_step + 1
        assert timeline.viewer_step_bytes == VIEW_STEP_BYTES
        assert 0 < timeline.first_step and kept < 300
        assert app.summaries.held() == app.totals_at.held() == app.peak_at.held() == kept
        assert app.view.totals.messages == 2_000 and app.view.peak == 2_000
        assert len(app.view.summaries) == 2_001 and "step 2000/2000" in app.timeline_bar.text


async def test_a_forest_at_its_cap_is_told_once_in_the_ui():
    timeline = WatchTimeline("tcp://127.0.0.1:5557", max_blocks=5)
    app = live_app(timeline)
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(message(seq, stored([100 + 2 * seq, 101 + 2 * seq]))) for seq in range(4)])
        app.receive([received(message(seq, stored([100 + 2 * seq]))) for seq in range(4, 6)])
        await pilot.pause()
        told = [str(n.message) for n in app._notifications if "MAX_WATCH_FOREST_BLOCKS" in str(n.message)]
        assert told == ["batch 3: the forest holds its cap of 5 blocks (MAX_WATCH_FOREST_BLOCKS): 1 new block not "
                        "added, nor any new one while it is full; the view is incomplete from here"]
        assert app.view.cached == 5 and "not added (the forest is full)" in app.narration.text


async def test_a_replay_answered_after_the_live_batches_is_shown_in_place_and_the_header_counts_again():
    from tests.watch.test_watch_model import _stream

    messages = _stream(12)
    app = live_app()
    async with app.run_test(size=SIZE) as pilot:
        app.receive([received(m) for m in messages[:3]])
        app.receive([received(messages[6], "gap 3-5: replay asked, live messages go on meanwhile")]
                    + [received(m) for m in messages[7:10]])
        await pilot.pause()
        assert (app.last_step, app.view.totals.gaps, app.view.totals.messages) == (7, 1, 7)  # shown at once
        assert "GAP" in app.timeline_bar.text or app.summaries[4].gaps == 1
        app.receive([received(m, "replayed") for m in messages[3:6]])  # the replay's answer, late
        await pilot.pause()
        assert [app.timeline.frame(step).message.seq for step in range(1, 11)] == list(range(10))
        assert (app.step, app.view.totals.gaps, app.view.totals.messages) == (10, 0, 10)
        assert not any(summary.gaps for summary in app.view.summaries)
        assert app.summaries.held() == app.totals_at.held() == app.peak_at.held() == 11
        app.go_to(7)
        await pilot.pause()
        assert "repaired: 3 messages inserted before batch 7" in app.narration.text
