# SPDX-License-Identifier: Apache-2.0
"""What the UI does so that a step costs what it changed, checked against doing it
in full: the work left for after a frame runs after it, and every line drawn by the
incremental paths equals the line a freshly mounted app draws at the same position.

No wall clock: the tests count what ran and in which order, and compare pictures.
"""

from __future__ import annotations

import pytest

from kvviz.core.scenario import Op
from kvviz.core.session import Session
from tests.core.sessions import evicting_session as shared_evicting_session

SIZE = (120, 40)


def evicting_session() -> Session:
    """The sub-step tests' evicting op (tests/core/sessions.py), titled for the screen."""
    return shared_evicting_session(title="evicting")


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


# -- what the terminal shows after incremental repaints = what a fresh app draws -------------


class Terminal:
    """A headless app's terminal: every update the app sends (a whole frame, or the changed
    pieces of lines) written into a grid of cells, as a terminal would keep them."""

    def __init__(self, app, size: tuple[int, int]):
        from rich.segment import Segment

        self.width, self.height = size
        self.cells: list[list] = [[(" ", None)] * self.width for _ in range(self.height)]
        self.frames = 0
        console = app.console
        original = app._display

        def display(screen, update):
            if update is not None and screen is app.screen:
                self.frames += 1
                self.write(update.__rich_console__(console, console.options))
            return original(screen, update)

        app._display = display
        self._segment = Segment

    def write(self, segments) -> None:
        from rich.cells import cell_len
        from rich.segment import ControlType

        x = y = 0
        for segment in segments:
            if segment.control:
                for code in segment.control:
                    if code[0] == ControlType.CURSOR_MOVE_TO:
                        x, y = code[1], code[2]
                continue
            if segment.text == "\n":
                continue
            for character in segment.text:
                if 0 <= y < self.height and 0 <= x < self.width:
                    self.cells[y][x] = (character, segment.style)
                x += cell_len(character)

    def lines(self) -> list[str]:
        return ["".join(character for character, _ in row) for row in self.cells]

    def differences(self, other: "Terminal") -> list[str]:
        """The rows where the two terminals differ (text or style), said for a person."""
        found = []
        for y, (mine, theirs) in enumerate(zip(self.cells, other.cells)):
            if mine != theirs:
                columns = [x for x in range(self.width) if mine[x] != theirs[x]]
                found.append(f"row {y} cols {columns[0]}-{columns[-1]}:\n  kept  {self.lines()[y]!r}\n"
                             f"  fresh {other.lines()[y]!r}")
        return found


async def fresh_picture(app_on, session, app, size) -> Terminal:
    """What a newly opened app shows at ``app``'s position, with its views scrolled as
    ``app``'s are (a view's scroll offset is the history of the moves, not the state), and the
    command bar's "stepped back" hint as ``app``'s (history too)."""
    from kvviz.ui.widgets.line_canvas import LineCanvas

    fresh = app_on(session, step=app.step, substep=app.substep)
    terminal = Terminal(fresh, size)
    async with fresh.run_test(size=size) as pilot:
        await pilot.pause()
        fresh.main_screen.stepped_back = app.main_screen.stepped_back
        fresh.main_screen._show_hint()
        for widget in app.screen.query(LineCanvas):
            if widget.id is None:
                continue
            twin = fresh.screen.query_one(f"#{widget.id}", LineCanvas)
            twin.scroll_to(x=widget.scroll_offset.x, y=widget.scroll_offset.y, animate=False, immediate=True,
                           force=True)
        await pilot.pause()
        await pilot.pause()
    return terminal


@pytest.mark.slow  # a long random walk of the app
async def test_after_random_steps_jumps_and_substeps_the_terminal_shows_what_a_fresh_app_draws(app_on):
    import random

    session = evicting_session()
    session.apply(Op("publish", "big", None, text="publish big"))  # new nodes: marks that go next step
    session.apply(Op("release", "big", None, text="release big"))  # ref changes
    last = len(session) - 1
    rng = random.Random(21)
    app = app_on(session, step=last - 4)
    terminal = Terminal(app, SIZE)
    checked = 0
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        moves = ["next", "next", "into", *["next"] * 20, "back", "back", "jump_in", "next", "next", "out",
                 "back", "into", "next", "go", "next", "into", *["next"] * 6, "jump_in", "back", "next",
                 "last", "back", "back", "next", "next", "back", "into", "next", "out", "next"]
        for number, move in enumerate(moves):
            if move == "jump_in":
                step = rng.randrange(max(1, last - 3), last + 1)
                app.show_substep(step, rng.randrange(len(session.substeps(step))))
            elif move == "go":
                app.go_to(rng.randrange(last + 1))
            elif move == "last":
                app.go_to(last)
            else:
                {"next": app.action_next_step, "back": app.action_previous_step, "into": app.action_step_into,
                 "out": app.action_step_out}[move]()
            await pilot.pause()
            await pilot.pause()
            if number % 5 == 4 or number == len(moves) - 1:
                fresh = await fresh_picture(app_on, session, app, SIZE)
                problems = terminal.differences(fresh)
                assert not problems, (f"after move {number} ({move}: step {app.step}, sub-step {app.substep}) "
                                      "the terminal differs from a fresh app's:\n" + "\n".join(problems[:6]))
                checked += 1
    assert checked >= 8
    assert terminal.frames > len(moves), "the moves were painted as updates"


async def test_inside_an_op_the_narration_wrapped_line_by_line_is_its_whole_text_wrapped(app_on):
    # The narration parses and wraps each markup line once and keeps it; the oracle is the
    # whole markup parsed and wrapped at once, as the panel did before.
    from textual.content import Content

    session = evicting_session()
    last = len(session) - 1
    wrapped = 0
    for size in (SIZE, (44, 30)):  # wide, and narrow enough that sentences wrap
        app = app_on(session, step=last)
        async with app.run_test(size=size) as pilot:
            app.action_step_into()
            await pilot.pause()
            narration = app.narration
            for _ in range(30):
                app.action_next_step()
                await pilot.pause()
                wrap = narration.scrollable_content_region.width + narration.scrollbar_size_vertical
                height = narration.scrollable_content_region.height
                whole = Content.from_markup(narration.markup(narration.view))
                expected = whole.wrap(wrap)[:height]
                got = [row.data for row in narration.rows]
                assert [(line.plain, line.spans) for line in got[:len(expected)]] == \
                    [(line.plain, line.spans) for line in expected], f"sub-step {app.substep} at {size}"
                assert all(not line.plain for line in got[len(expected):])
                assert narration.text == whole.plain
                wrapped += len(whole.wrap(wrap)) > len(whole.plain.split("\n"))
    assert wrapped, "some sentence wrapped"


async def test_the_trie_rows_kept_without_the_ghosts_are_the_rows_built_afresh(app_on):
    # After an eviction's sub-step the trie's next rows are usually the same rows without the
    # evicted node's ghost row; those are compared, row for row and node for row, with a new
    # view's full build at every sub-step of an op that evicts 40 pages, and whole steps.
    from kvviz.ui.widgets.trie_view import TrieView

    session = evicting_session()
    session.apply(Op("release", "big", None, text="release big"))
    last = len(session) - 1
    app = app_on(session, step=last - 1)
    kept = 0
    async with app.run_test(size=SIZE) as pilot:
        trie = app.trie
        original = trie._without_ghosts

        def counting(view):
            nonlocal kept
            kept += 1
            return original(view)
        trie._without_ghosts = counting
        app.action_step_into()
        await pilot.pause()
        moves = len(session.substeps(last - 1)) + 3
        for _ in range(moves):
            oracle = TrieView()
            expected = oracle.build_rows(trie.view, trie._width())
            assert [(row.item, row.data) for row in trie.rows] == [(row.item, row.data) for row in expected], (
                f"step {app.step} sub-step {app.substep}")
            assert trie._node_row == oracle._node_row
            app.action_next_step()
            await pilot.pause()
    assert kept >= 20, f"the ghost rows went without a build only {kept} times"


async def test_a_step_into_an_op_keeps_only_the_state_it_shows_and_prefetches_the_window_after_the_frame(
        app_on, monkeypatch):
    # Step-in's cost is one snapshot, not a window of them: the rest of
    # the window is the prefetch's, after the frame.
    from kvviz.core.substeps import OpSubSteps, STATE_WINDOW

    session = evicting_session()
    last = len(session) - 1
    app = app_on(session, step=last)
    prefetched: list = []
    original = OpSubSteps.prefetch

    def prefetch(self, k):
        prefetched.append(sorted(self._states))
        return original(self, k)

    monkeypatch.setattr(OpSubSteps, "prefetch", prefetch)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.pause()
        await pilot.pause()
        assert app.substep == 0
        assert prefetched and prefetched[0] == [0], "the step-in kept more than the state it shows"
        subs = session.substeps(last)
        assert set(range(1, STATE_WINDOW)) <= set(subs._states), "the prefetch after the frame built the window"
        fresh = OpSubSteps(subs.frame_index, subs.op, subs.before, subs.after, subs.steps, subs.source, subs.note,
                           subs._start)
        assert all(subs.state(k) == fresh.state(k) for k in range(STATE_WINDOW))
