# SPDX-License-Identifier: Apache-2.0
"""A heap taller than its pane never drops candidates silently: the pane says how many rows
are out of sight ("… 4 more ↓") and keeps the entries the step changed in sight."""

from __future__ import annotations

from kvviz.ui.widgets.heap_view import HeapLine, HeapView


def shown_lines(view) -> list[str]:
    """The heap pane's lines on screen, as text."""
    return [view.render_line(y).text.rstrip() for y in range(view.scrollable_content_region.height)]


async def test_the_heap_says_how_many_rows_are_below_and_shows_the_entry_the_step_added(app_on, lru):
    app = app_on(lru, step=20)  # release s6: node 7 joins a heap of 6 candidates, deep in the tree
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        heap = app.screen.query_one(HeapView)
        lines = shown_lines(heap)
        assert len(heap.rows) > len(lines), "the pane is tall enough: nothing to test"
        added = next(row.data.index for row in heap.rows if isinstance(row.data, HeapLine) and row.data.node == 7)
        assert any(f"[{added}] node 7" in line for line in lines), lines
        hidden = len(heap.rows) - sum(1 for line in lines if "more" not in line)
        assert sum(int(line.split()[1]) for line in lines if line.startswith("… ")) == hidden, lines
