# SPDX-License-Identifier: Apache-2.0
"""The page pool: one cell per physical page, coloured by state, marked by what changed.

Two layouts: *cells* (page number, owner or ref count, change mark) for small pools, and
*compact* (one character per page) for pools up to thousands of pages; ``z`` switches.
Drawn with the Line API (:class:`~kvviz.ui.widgets.line_canvas.LineCanvas`): only rows on
screen are rendered, each row's strip is cached, and the few dozen distinct cell styles are
built once per theme and reused (toolong's recipe).

A page is *free*, *owned* (an allocation's unpublished tail) or *cached* (held by a trie
node); the grid tells cached pages that are referenced (■, ``referenced``) from those with
ref 0 (□, ``evictable``), and the legend's ``cached N`` counts both, as ``expect cached`` does. In a hash cache's pool the free and evictable pages are its free queue: their
cells show their place in it (``q0``: the next page taken).
"""

from __future__ import annotations

from collections import Counter

from collections.abc import Hashable

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from kvviz.core.hash_view import QueueOrder
from kvviz.core.view import FrameView, later_neighbour
from kvviz.core.designs import design_of
from kvviz.ui.widgets.line_canvas import LineCanvas, Span, spans_to_strip
from kvviz.ui.widgets.line_view import SelectionMessage

COMPACT_ABOVE = 64
"""Pools with more pages than this start in the compact layout."""

GLYPH = {"free": "·", "owned": "▪", "cached": "■", "evictable": "□", "moving": "~"}
"""The character of a page in the compact layout (and the legend), by state."""

MARK = {"evicted": "✗", "new": "+", "freed": "-", "ref-up": "↑", "ref-down": "↓", "touched": "•", None: " "}
"""The change mark of a page, by what the step did to it."""


class PageGrid(LineCanvas, can_focus=True):
    """The page pool of the current frame (see the module doc).

    | Class | Description |
    | :- | :- |
    | `page-grid--free` | A page on the free list. |
    | `page-grid--owned` | A page in an allocation's unpublished tail. |
    | `page-grid--cached` | A cached page with ref > 0 (never evicted). |
    | `page-grid--evictable` | A cached page with ref 0. |
    | `page-grid--moving` | Inside an op: a page between two moves (in no place for one sub-step). |
    | `page-grid--new` | Taken or cached by this step. |
    | `page-grid--touched` | Its node's last access moved to now. |
    | `page-grid--evicted` | Evicted by this step. |
    | `page-grid--freed` | Returned to the free list by this step. |
    | `page-grid--linked` | Linked to the selection. |
    | `page-grid--cursor` | Under the cursor (while the grid has focus). |
    | `page-grid--violation` | Named by a broken invariant. |
    | `page-grid--focus` | Stepped into an op: a page the sub-step shown moves. |
    | `page-grid--label` | Row labels and the legend's words. |
    """

    STRIP_CACHE_SIZE = 512

    BINDINGS = [
        Binding("up,k", "cursor_row(-1)", "Row up", show=False),
        Binding("down,j", "cursor_row(1)", "Row down", show=False),
        Binding("comma", "cursor_page(-1)", "Page -1", show=False),
        Binding("full_stop", "cursor_page(1)", "Page +1", show=False),
        Binding("z", "toggle_compact", "Compact", show=False),
    ]

    COMPONENT_CLASSES = {
        "page-grid--free", "page-grid--owned", "page-grid--cached", "page-grid--evictable", "page-grid--moving",
        "page-grid--new", "page-grid--touched", "page-grid--evicted", "page-grid--freed",
        "page-grid--linked", "page-grid--cursor", "page-grid--violation", "page-grid--label", "page-grid--focus",
    }

    DEFAULT_CSS = """
    PageGrid {
        overflow-x: hidden;
        height: auto;
        & > .page-grid--free { color: $kv-free; }
        & > .page-grid--owned { color: $kv-owned; }
        & > .page-grid--cached { color: $kv-cached; text-style: bold; }
        & > .page-grid--evictable { color: $kv-evictable; }
        & > .page-grid--moving { color: $warning; text-style: bold; }
        & > .page-grid--new { background: $kv-new; color: $background; }
        & > .page-grid--touched { background: $kv-touched; color: $background; }
        & > .page-grid--evicted { background: $kv-evicted; color: $background; }
        & > .page-grid--freed { text-style: dim; }
        & > .page-grid--linked { background: $kv-selected; text-style: bold underline; }
        & > .page-grid--cursor { text-style: reverse bold; }
        & > .page-grid--violation { background: $kv-violation; color: $background; text-style: bold; }
        & > .page-grid--label { color: $kv-muted; }
        & > .page-grid--focus { background: $foreground; color: $background; text-style: bold; }
    }
    """

    class PageSelected(SelectionMessage):
        """The user put the cursor on a page."""

        def __init__(self, source: Widget, page: int) -> None:
            super().__init__(source)
            self.page = page

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: FrameView | None = None
        self.compact: bool | None = None  # None: decide from the pool's size
        self.cursor: int | None = None
        self._styles: dict[tuple, Style] = {}
        self._layout = (1, 0, 0)  # pages per row, grid rows, cell width
        self._legend: list[list[Span]] = []
        self._changes: dict[int, str] = {}
        self._kinds: list[str] = []
        self._owner_names: dict[int, str] = {}
        self._queue: QueueOrder | None = None  # a hash cache's free queue: its pages show their place

    # -- state in ------------------------------------------------------------------------

    @property
    def is_compact(self) -> bool:
        """True when drawing one character per page."""
        if self.compact is not None:
            return self.compact
        return self.view is not None and self.view.snapshot.page_count > COMPACT_ABOVE

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view``; ``rebuild=False`` when only the highlight changed."""
        previous = self.view
        self.view = view
        old_changes = self._changes
        if rebuild or previous is None:
            self._index_frame()
        dirty = self._dirty_pages(previous, view, old_changes) if rebuild else None
        self._relayout(dirty)
        self.follow()

    def _dirty_pages(self, old: FrameView | None, new: FrameView, old_changes: dict[int, str]) -> set[int] | None:
        """Pages that look different from ``old`` to ``new``, a neighbouring step with the same
        highlight (None: repaint everything)."""
        later = later_neighbour(old, new)
        if (later is None or old.highlight != new.highlight or old.violations != new.violations
                or self._queue is not None):  # a step moves every queued page's place
            return None
        return (set(old_changes) | set(self._changes) | set(later.frame.diff.pages_changed)
                | old.focus.pages | new.focus.pages)

    def follow(self) -> None:
        """Move the cursor to a linked page (without posting a selection)."""
        pages = self.view.highlight.pages if self.view is not None else ()
        if pages and self.cursor not in pages:
            self.cursor = min(pages)
        if self.cursor is not None and pages:
            self._scroll_to_page(self.cursor)
        focus = self.view.focus.pages if self.view is not None else ()
        if focus:  # the page a sub-step moves comes into sight; the cursor stays
            per_row = self._layout[0]
            row = min(focus) // per_row
            top = self.scroll_offset.y
            if not top <= row < top + max(1, self.scrollable_content_region.height):
                self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True, force=True)
                self.restyle()

    def _index_frame(self) -> None:
        """Per-page state and change, computed once per frame."""
        view = self.view
        snap = view.snapshot
        diff = view.frame.diff
        self._queue = QueueOrder(snap) if design_of(snap).lazy else None  # one free queue: its order
        kinds = []
        for info in snap.pages:
            if info.state == "cached":
                kinds.append("cached" if info.ref else "evictable")
            elif info.state in GLYPH:
                kinds.append(info.state)
            else:  # mid-op, between two moves of one sub-step's op (dedup: adopted, not yet freed)
                kinds.append("moving")
        self._kinds = kinds
        changes: dict[int, str] = {}
        node_page = {n.id: n.page for n in snap.nodes}
        for node, before, after in diff.ref_changes:
            page = node_page.get(node)
            if page is not None:
                changes[page] = "ref-up" if after > before else "ref-down"
        for node in diff.nodes_touched:
            page = node_page.get(node)
            if page is not None and page not in changes:
                changes[page] = "touched"
        for page in diff.pages_freed:
            changes[page] = "freed"
        for node in diff.nodes_added:
            page = node_page.get(node)
            if page is not None:
                changes[page] = "new"
        for page in diff.pages_taken:
            changes[page] = "new"
        for page in diff.pages_evicted:
            changes[page] = "evicted"
        self._changes = changes
        self._owner_names = {a.id: a.label for a in snap.allocations}

    def _relayout(self, dirty: set[int] | None = None) -> None:
        """Lay the pages out for the current width; with ``dirty`` pages and an unchanged
        layout, render only their rows and the legend again."""
        width = self._width()
        count = self.view.snapshot.page_count if self.view is not None else 0
        if self.is_compact:
            label = len(str(max(count - 1, 0))) + 1
            per_row = max(1, width - label)
            if per_row >= 8:
                per_row -= per_row % 8
            cell = 1
        else:
            cell = len(str(max(count - 1, 0))) + 7
            per_row = max(1, (width + 1) // cell)
        rows = -(-count // per_row) if count else 0
        same_layout = self._layout == (per_row, rows, cell)
        self._layout = (per_row, rows, cell)
        legend = self._legend_lines(width)
        same_layout = same_layout and len(legend) == len(self._legend)
        self._legend = legend
        size = Size(width, rows + len(self._legend))
        if size != self.virtual_size:
            self.virtual_size = size  # a layout refresh (height: auto), only when the shape changed
        if dirty is None or not same_layout:
            self.restyle()
            return
        self.repaint_lines({page // per_row for page in dirty} | set(range(rows, rows + len(legend))))

    def _width(self) -> int:
        return self.layout_width()

    # -- rendering -----------------------------------------------------------------------

    def _style(self, kind: str, change: str | None, linked: bool, cursor: bool, violated: bool,
               focus: bool = False) -> Style:
        key = (kind, change, linked, cursor, violated, focus)
        style = self._styles.get(key)
        if style is None:
            get = self.style_of
            style = get(f"page-grid--{kind}")
            if change in ("new", "touched", "evicted", "freed"):
                style += get(f"page-grid--{change}")
            if linked:
                style += get("page-grid--linked")
            if violated:
                style += get("page-grid--violation")
            if focus:
                style += get("page-grid--focus")
            if cursor:
                style += get("page-grid--cursor")
            self._styles[key] = style
        return style

    def _cell_spans(self, page: int) -> Span:
        view = self.view
        kind = self._kinds[page]
        change = self._changes.get(page)
        style = self._style(kind, change, page in view.highlight.pages, page == self.cursor and self.has_focus,
                            page in view.violations.pages, page in view.focus.pages)
        if self.is_compact:
            return GLYPH[kind], style
        info = view.snapshot.pages[page]
        place = self._queue.place_label(page) if self._queue is not None else None
        if place is not None:
            body = place
        elif kind == "free":
            body = "·"
        elif kind == "moving":
            body = "~"
        elif kind == "owned":
            body = "@" + self._owner_names.get(info.owner, "?")[:3]
        else:
            body = f"ref{info.ref}" if info.ref < 10 else f"r{min(info.ref, 999)}"
        width = self._layout[2] - 3 - 4
        return f"{MARK[change]}{page:>{width}} {body:<4}", style

    def line_key(self, index: int) -> Hashable:
        return self.has_focus

    def render_strip(self, index: int, width: int) -> Strip:
        base = self.style_of.base
        per_row, rows, cell = self._layout
        if self.view is None or index >= rows + len(self._legend):
            strip = Strip.blank(width, base)
        elif index < rows:
            first = index * per_row
            last = min(first + per_row, self.view.snapshot.page_count)
            compact = self.is_compact
            spans: list[Span] = []
            if compact:
                label = len(str(max(self.view.snapshot.page_count - 1, 0)))
                spans.append((f"{first:>{label}} ", self.style_of("page-grid--label")))
            gap = Style()
            for page in range(first, last):
                if page > first and not compact:
                    spans.append((" ", gap))
                text, style = self._cell_spans(page)
                if compact and spans and spans[-1][1] is style:
                    spans[-1] = (spans[-1][0] + text, style)  # runs of alike pages: one segment
                else:
                    spans.append((text, style))
            strip = spans_to_strip(spans, width, base)
        else:
            strip = spans_to_strip(self._legend[index - rows], width, base)
        return strip

    def _legend_lines(self, width: int) -> list[list[Span]]:
        get = self.style_of
        counts = Counter(self._kinds)
        label = get("page-grid--label")

        def entry(kind: str, word: str) -> list[Span]:
            return [(GLYPH[kind], self._style(kind, None, False, False, False)), (f"{word} {counts[kind]}", label)]

        # "cached" is one count, as in every expect, export and the trie's title: the pages
        # the cache holds, referenced (■) or evictable (□), never the referenced ones alone.
        cached = counts["cached"] + counts["evictable"]
        items: list[list[Span]] = [
            entry("free", "free"), entry("owned", "owned"),
            [(f"cached {cached}:", label)], entry("cached", "referenced"), entry("evictable", "evictable"),
        ]
        if counts["moving"]:
            items.append(entry("moving", "moving"))
        for change, label in (("new", "new"), ("touched", "touched"), ("evicted", "evicted")):
            items.append([(f"{MARK[change]}{label}", self._style("cached", change, False, False, False))])
        if self._queue is not None:
            items.append([("qN", get("page-grid--label")), (" free-queue place, q0 taken next", get("page-grid--label"))])
        lines: list[list[Span]] = []
        line: list[Span] = []
        used = 0
        for item in items:
            size = sum(len(text) for text, _ in item) + 1
            if line and used + size > width:
                lines.append(line)
                line, used = [], 0
            if line:
                line.append((" ", Style()))
            line.extend(item)
            used += size
        if line:
            lines.append(line)
        return lines

    def styles_changed(self) -> None:
        self._styles.clear()
        if self.view is not None and self.is_mounted:
            self._legend = self._legend_lines(self._width())

    def on_resize(self, event: events.Resize) -> None:
        if self.view is not None:
            self._relayout()

    # -- the cursor ----------------------------------------------------------------------

    def _scroll_to_page(self, page: int) -> None:
        per_row = self._layout[0]
        self.scroll_to_region(Region(0, page // per_row, 1, 1), animate=False, immediate=True, force=True)
        self.restyle()

    def move_cursor(self, page: int, post: bool = True) -> None:
        """Put the cursor on ``page`` and (by default) post :class:`PageSelected`."""
        if self.view is None:
            return
        page = max(0, min(self.view.snapshot.page_count - 1, page))
        self.cursor = page
        self._scroll_to_page(page)
        if post:
            self.post_message(self.PageSelected(self, page))

    def action_cursor_row(self, delta: int) -> None:
        """Cursor one row up or down."""
        if self.cursor is None:
            self.move_cursor(0)
            return
        self.move_cursor(self.cursor + delta * self._layout[0])

    def action_cursor_page(self, delta: int) -> None:
        """Cursor to the previous or next page."""
        self.move_cursor(0 if self.cursor is None else self.cursor + delta)

    def action_toggle_compact(self) -> None:
        """Switch between the cells layout and one character per page."""
        self.compact = not self.is_compact
        self._relayout()

    def page_at(self, x: int, y: int) -> int | None:
        """The page drawn at content offset ``(x, y)`` (scrolling included), or None."""
        if self.view is None:
            return None
        per_row, rows, cell = self._layout
        row = y + self.scroll_offset.y
        if not 0 <= row < rows:
            return None
        if self.is_compact:
            column = x - (len(str(max(self.view.snapshot.page_count - 1, 0))) + 1)
        else:
            column, inside = divmod(x, cell)
            if inside == cell - 1:  # the gap between cells
                return None
        if not 0 <= column < per_row:
            return None
        page = row * per_row + column
        return page if page < self.view.snapshot.page_count else None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        page = self.page_at(offset.x, offset.y) if offset is not None else None
        if page is not None:
            self.focus()
            self.move_cursor(page)

    def page_text(self, page: int) -> str:
        """The text of one page's cell (tests read the grid this way)."""
        return self._cell_spans(page)[0]
