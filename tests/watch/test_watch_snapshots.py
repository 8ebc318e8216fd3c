# SPDX-License-Identifier: Apache-2.0
"""SVG snapshots of ``kvviz watch`` at a fixed size (update with ``pytest
tests/watch/test_watch_snapshots.py --snapshot-update`` after looking at them as PNG).
Deterministic: animations and cursor blink off, no clock (the subscriber has nothing to say),
colours on."""

from __future__ import annotations

import pytest

from tests.watch.watch_fixtures import QuietSubscriber, message, received, stored, story_timeline

from kvviz.watch.app import make_watch_app

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

SIZE = (120, 34)


def test_snapshot_of_a_batch_that_removed_a_block(snap_compare):
    app = make_watch_app(story_timeline(), step=5)
    assert snap_compare(app, terminal_size=SIZE)


def test_snapshot_of_a_paused_live_watch_with_batches_waiting_and_an_orphan(snap_compare):
    app = make_watch_app(story_timeline(), subscriber=QuietSubscriber())

    async def pause_then_receive(pilot) -> None:
        app.action_previous_step()
        app.action_next_step()  # back on step 6 (the orphan's), paused
        app.receive([received(message(6, stored([0x51, 0x52], first_token=700))),
                     received(message(7, stored([0x53], parent=0x52, first_token=708)))])
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=pause_then_receive)
