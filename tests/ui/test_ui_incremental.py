# SPDX-License-Identifier: Apache-2.0
"""What the UI does so that a step costs what it changed (issue 21), checked against doing it
in full: the work left for after a frame runs after it, and every line drawn by the
incremental paths equals the line a freshly mounted app draws at the same position.

No wall clock: the tests count what ran and in which order, and compare pictures.
"""

from __future__ import annotations

from kvviz.model.scenario import CacheConfig, Op
from kvviz.model.session import Session

SIZE = (120, 40)


def evicting_session() -> Session:
    """A full pool of cached chains, then one acquire that evicts many of them: an op with
    far more sub-steps than one window of states (the shape of bench_ui.py's, smaller)."""
    session = Session(CacheConfig("trie", 64, 2), title="evicting", check=False)
    for c in range(16):
        tokens = tuple(range(c * 8, (c + 1) * 8))
        for kind in ("acquire", "publish", "release"):
            session.apply(Op(kind, f"c{c}", tokens if kind == "acquire" else None, text=f"{kind} c{c}"))
    session.apply(Op("acquire", "big", tuple(range(1000, 1000 + 2 * 40)), text="acquire big"))
    return session


async def test_the_next_window_of_substep_states_is_built_after_the_frame_that_shows_the_substep(app_on,
                                                                                                 monkeypatch):
    # The prefetch is work a person must not wait for: it runs once the sub-step is on
    # screen. Textual's call_after_refresh ran it before the frame (a hitch every 16 sub-steps).
    session = evicting_session()
    last = len(session) - 1
    subs = session.substeps(last)
    app = app_on(session, step=last)
    order: list = []
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.pause()
        original_display = app._display

        def display(screen, renderable):
            if renderable is not None:
                order.append("frame")
            return original_display(screen, renderable)

        original_prefetch = subs.prefetch

        def prefetch(k):
            order.append(("prefetch", k))
            return original_prefetch(k)

        monkeypatch.setattr(app, "_display", display)
        monkeypatch.setattr(subs, "prefetch", prefetch)
        moves = 40
        for _ in range(moves):
            order.append("move")
            app.action_next_step()
            await pilot.pause()
            await pilot.pause()  # the prefetch runs between messages, after the frame
        assert app.substep == moves
    prefetches = [entry for entry in order if isinstance(entry, tuple)]
    assert [k for _, k in prefetches] == list(range(1, moves + 1)), "one prefetch per sub-step shown"
    for index, entry in enumerate(order):
        if isinstance(entry, tuple):
            since_move = order[:index][::-1]
            before = since_move[:since_move.index("move")]
            assert "frame" in before, f"the prefetch at sub-step {entry[1]} ran before its frame: {order}"
