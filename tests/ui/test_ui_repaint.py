# SPDX-License-Identifier: Apache-2.0
"""Views redraw only the lines that changed, and what is on screen is still right.

The trie, heap, allocation and code views file their rendered lines by a signature of what
each shows (:meth:`kvviz.ui.widgets.line_view.LineView.line_signature`) and, after a move,
ask Textual to draw again only the lines on screen whose signature changed. A signature
that missed something a line shows would leave a stale line on screen (one not asked for
again, or a kept strip handed out for a line that looks different now): so every line each
view handed Textual is recorded, and after each move of a walk through steps and sub-steps
the line on screen must be the line drawn afresh from the view's current rows.
"""

from __future__ import annotations

from kvviz.core.scenario import CacheConfig, Op
from kvviz.core.session import Session
from kvviz.ui.widgets.line_view import LineView

SIZE = (120, 40)


def evicting_session() -> Session:
    """16 cached chains fill a 64-page pool; then one acquire evicts most of them (an op of
    many sub-steps: pops, swaps, evictions, new candidates), and a release."""
    session = Session(CacheConfig("trie", 64, 2), title="repaint")
    for c in range(16):
        tokens = tuple(range(c * 8, (c + 1) * 8))
        for kind in ("acquire", "publish", "release"):
            session.apply(Op(kind, f"c{c}", tokens if kind == "acquire" else None, text=f"{kind} c{c}"))
    session.apply(Op("acquire", "big", tuple(range(1000, 1000 + 2 * 40)), text="acquire big"))
    session.apply(Op("release", "big", None, text="release big"))
    return session


def record_lines(view) -> dict[int, list]:
    """Wrap ``view.render_line`` so that the last strip handed to Textual for each screen
    line is kept (its segments): what the screen shows there, since Textual keeps a line
    until it asks again."""
    shown: dict[int, list] = {}
    original = view.render_line

    def render_line(y):
        strip = original(y)
        shown[y] = list(strip)
        return strip
    view.render_line = render_line
    return shown


def stale_lines(view, shown: dict[int, list]) -> list[int]:
    """The screen lines of ``view`` whose strip on screen differs from one drawn afresh."""
    top, width = view.scroll_offset.y, view.line_width
    return [y for y in range(view.scrollable_content_region.height)
            if shown.get(y) != list(view.render_strip(top + y, width))]


async def test_every_line_on_screen_after_each_move_is_the_line_drawn_afresh(app_on):
    session = evicting_session()
    last = len(session) - 1
    moves = (["next"] + ["into"] + ["next"] * 24 + ["back"] * 3 + ["out"] + ["back", "next", "next"])
    app = app_on(session, step=last - 2)
    async with app.run_test(size=SIZE) as pilot:
        views = [w for w in app.screen.query(LineView) if type(w).line_signature is not LineView.line_signature]
        assert {type(w).__name__ for w in views} >= {"TrieView", "HeapView", "AllocationTable", "CodePane"}
        shown = {w: record_lines(w) for w in views}
        for view in views:
            view.restyle()
        await pilot.pause()
        deepest = 0
        for move in moves:
            {"next": app.action_next_step, "back": app.action_previous_step, "into": app.action_step_into,
             "out": app.action_step_out}[move]()
            await pilot.pause()
            await pilot.pause()
            deepest = max(deepest, app.substep or 0)
            for view in views:
                if view.display:
                    assert not stale_lines(view, shown[view]), (
                        f"{type(view).__name__} after {move} (step {app.step}, sub-step {app.substep}): "
                        f"lines {stale_lines(view, shown[view])} are stale")
    assert deepest > 16, "the walk crosses a window of states"


async def test_a_substep_that_moves_the_focus_within_one_view_redraws_fewer_lines_than_the_view_shows(app_on):
    session = evicting_session()
    app = app_on(session, step=len(session) - 2)
    async with app.run_test(size=SIZE) as pilot:
        app.action_step_into()
        await pilot.pause()
        redrawn: list[int] = []
        trie = app.trie
        original = trie.refresh_line

        def counting(y):
            redrawn.append(y)
            return original(y)
        trie.refresh_line = counting
        fewer = 0
        for _ in range(12):
            trie.restyle = lambda: redrawn.extend(range(trie.scrollable_content_region.height))
            redrawn.clear()
            app.action_next_step()
            await pilot.pause()
            fewer += len(set(redrawn)) < trie.scrollable_content_region.height
        assert fewer >= 6, f"only {fewer} of 12 sub-steps redrew less than the whole trie"
