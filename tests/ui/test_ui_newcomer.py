"""What a newcomer hit in the UI (issue 15) and the shape the views must keep (issue 10):
widgets get frozen values only, one Line-API base, text that is not lost under scrollbars."""

from __future__ import annotations

import dataclasses

from rich.cells import cell_len

from kvviz.model.session import Session
from kvviz.model.view import FrameView
from kvviz.ui.widgets.line_canvas import LineCanvas
from kvviz.ui.widgets.line_view import LineView
from kvviz.ui.widgets.page_grid import PageGrid
from kvviz.ui.widgets.timeline_bar import TimelineBar

BIG = (120, 40)


def reaches_a_session(value, seen=None) -> bool:
    """True when ``value`` is a Session or holds one (through attributes, dataclass fields
    and containers), looked up to a small depth."""
    seen = set() if seen is None else seen
    if isinstance(value, Session):
        return True
    if id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        return any(reaches_a_session(v, seen) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(reaches_a_session(v, seen) for v in list(value)[:50])
    if dataclasses.is_dataclass(value):
        return any(reaches_a_session(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    return False


async def test_no_widget_holds_the_live_session(app_on, lru):
    app = app_on(lru, step=23)
    async with app.run_test(size=BIG) as pilot:
        app.action_toggle_why()
        await pilot.pause()
        assert "session" not in {f.name for f in dataclasses.fields(FrameView)}
        for widget in app.main_screen.query("*"):
            for name, value in vars(widget).items():
                if name.startswith("_") and name in ("_parent", "_app"):
                    continue
                assert not reaches_a_session(value), f"{widget!r}.{name} reaches the session"


async def test_the_why_panel_shows_the_answer_the_app_computed(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=BIG) as pilot:
        app.action_toggle_why()
        await pilot.pause()
        assert app.why.view.why is not None
        assert app.why.view.why.title.startswith("Why was page 2 evicted?")
        assert app.why.text.startswith(app.why.view.why.title)


def test_the_big_views_share_one_line_api_base():
    for view in (LineView, PageGrid, TimelineBar):
        assert issubclass(view, LineCanvas)
        assert "render_line" not in vars(view), f"{view.__name__} re-implements the line cache"


def test_every_view_documents_its_component_classes():
    from kvviz.ui.widgets.allocation_table import AllocationTable
    from kvviz.ui.widgets.heap_view import HeapView
    from kvviz.ui.widgets.trie_view import TrieView

    for view in (LineView, PageGrid, TimelineBar, TrieView, HeapView, AllocationTable):
        for name in view.COMPONENT_CLASSES:
            assert f"`{name}`" in view.__doc__, f"{view.__name__} does not document {name}"


# -- defect 1: narration text lost under its scrollbar -----------------------------------


async def test_narration_wraps_to_the_width_the_scrollbar_leaves(app_on, lru):
    app = app_on(lru, step=22)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        narration = app.narration
        assert narration.scrollbar_size_vertical == 0, "step 22's narration fits: no scrollbar"
        app.go_to(23)  # a step whose narration is taller than the pane: the scrollbar appears
        await pilot.pause()
        assert narration.virtual_size.height > narration.scrollable_content_region.height
        assert narration.scrollbar_size_vertical > 0
        room = narration.scrollable_content_region.width
        widths = [cell_len(narration.row_text(i)) for i in range(len(narration.rows))]
        assert max(widths) <= room, f"a line of {max(widths)} cells under a {room}-cell text area"
        words = " ".join(narration.row_text(i) for i in range(len(narration.rows))).split()
        assert words == narration.text.split(), "every word is shown once, none cut"
