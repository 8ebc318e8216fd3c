# SPDX-License-Identifier: Apache-2.0
"""The base of the list-like views (trie, allocations, LRU heap): the Line API done lazily.

A view turns a frame into :class:`Row` values (cheap: ids and a little layout) and renders
only the rows on screen, on demand, into :class:`~textual.strip.Strip` objects it caches
until the frame, the highlight, the width or the styles change. That keeps a step on a
1,000-node trie to building a list of rows plus ~30 rendered lines.

Every row may stand for an *item* (a node id, an allocation id); the cursor moves between
items with up/down, and moving it posts the subclass's "selected" message, which the app
turns into a linked selection across all views.

A view with :attr:`LineView.SAYS_MORE` never drops rows silently: when its rows do not fit,
its last line on screen says how many are below ("… 4 more ↓") and its first how many are
above once scrolled; and the rows a step changed (:meth:`LineView.changed_rows`) are
scrolled into sight when nothing else (the cursor on a linked item, a sub-step's focus)
asked for a place.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from kvviz.core.view import FrameView
from kvviz.ui.widgets.line_canvas import LineCanvas, Span, spans_to_strip


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a view: the item it selects (None for headers and notes) and what the
    view needs to draw it."""

    item: Hashable | None
    data: Any = None


class SelectionMessage(Message):
    """A view's selection. ``control`` (Textual's name for the widget a message is about)
    is the view it happened in, so a screen with two views of a kind tells them apart."""

    def __init__(self, source: Widget) -> None:
        super().__init__()
        self.source = source

    @property
    def control(self) -> Widget:
        return self.source


class LineView(LineCanvas, can_focus=True):
    """A focusable, scrollable list of rows with a cursor over items (see the module doc).

    | Class | Description |
    | :- | :- |
    | `line-view--cursor` | The row under the cursor (drawn only while the view has focus). |
    | `line-view--linked` | Rows linked to the selection in any view. |
    | `line-view--focus` | Stepped into an op: rows of what the sub-step shown moves. |
    | `line-view--muted` | Notes such as "no live allocations". |
    """

    BINDINGS = [
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]

    COMPONENT_CLASSES = {"line-view--cursor", "line-view--linked", "line-view--focus", "line-view--muted"}

    SAYS_MORE = False
    """Whether rows off screen are counted on the first and last lines (see the module doc)."""

    DEFAULT_CSS = """
    LineView {
        overflow-x: hidden;
        & > .line-view--cursor { background: $block-cursor-background; color: $background; text-style: bold; }
        & > .line-view--linked { background: $kv-selected; }
        & > .line-view--focus { background: $primary-muted; text-style: bold; }
        & > .line-view--muted { color: $kv-muted; }
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._rows: list[Row] = []
        self._items: list[Hashable] = []
        self._item_row: dict[Hashable, int] = {}
        self._item_pos: dict[Hashable, int] = {}
        self._built_width = -1
        self.view: FrameView | None = None
        self.cursor: Hashable | None = None

    # -- what subclasses provide ------------------------------------------------------------

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        """The rows for ``view`` at ``width`` cells."""
        raise NotImplementedError

    def render_row(self, row: Row, width: int) -> list[Span]:
        """The spans of one row (called only for rows on screen)."""
        raise NotImplementedError

    def is_linked(self, item: Hashable) -> bool:
        """True when ``item`` belongs to the current highlight."""
        return False

    def selected_message(self, item: Hashable) -> Message | None:
        """The message to post when the user moves the cursor to ``item``."""
        return None

    def is_focus(self, row: Row) -> bool:
        """True when ``row`` shows something the sub-step shown moves (``view.focus``)."""
        return False

    def keeps_rows(self, old: FrameView | None, new: FrameView) -> bool:
        """True when the rows built for ``old`` are still right for ``new``."""
        return False

    def changed_rows(self) -> list[int]:
        """The rows showing what the step changed, to keep in sight (none by default)."""
        return []

    def dirty_rows(self, old: FrameView, new: FrameView) -> set[int] | None:
        """With rows kept, the rows whose text or marks differ between ``old`` and ``new``
        (None: repaint everything). Only these are rendered again."""
        return None

    def line_signature(self, index: int) -> Hashable | None:
        """Everything line ``index`` of the current rows looks like, as a value (None: not
        known). A view that gives one has, after its rows are built again, only the lines on
        screen whose signature changed rendered again: a step that evicts one node redraws
        that node's line and the lines below it, not the screen."""
        return None

    # -- state in ------------------------------------------------------------------------

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view``. ``rebuild=False`` when only the highlight changed."""
        old = self.view
        shown = self._shown_signatures() if rebuild and self._rows and old is not None else None
        self.view = view
        if not self._rows or (rebuild and not self.keeps_rows(old, view)):
            self._rebuild(repaint=shown is None)
            if shown is not None:
                self._repaint_changed(shown)
        else:
            dirty = self.dirty_rows(old, view) if rebuild and old is not None else None
            if dirty is None:
                self.restyle()
            else:
                self.repaint_rows(dirty)
        placed = self.follow()
        self.follow_focus()
        if not placed and self.focus_row() is None:
            self.follow_changes()

    def follow_changes(self) -> None:
        """Scroll the rows the step changed into sight, clear of the "… more" lines."""
        rows = self.changed_rows() if self.SAYS_MORE else []
        height = self.scrollable_content_region.height
        if not rows or height <= 0 or len(self._rows) <= height:
            return
        top = self.scroll_offset.y
        first, last = min(rows), max(rows)
        inside = range(top + (top > 0), top + height - 1)  # the lines no "… more" covers
        if first in inside and last in inside:
            return
        # The first changed row a line below the top (the "above" line), as many after it as fit.
        target = max(0, min(first - 1, len(self._rows) - height))
        if target != top:
            self.scroll_to(y=target, animate=False, immediate=True, force=True)
            self.restyle()

    def follow(self) -> bool:
        """Move the cursor to the first linked item (without posting a selection); True when
        there was one (the view is placed)."""
        if self.cursor is not None and self.cursor in self._item_row and self.is_linked(self.cursor):
            self._scroll_to_item(self.cursor, repaint=False)
            return True
        for item in self._items:
            if self.is_linked(item):
                self.cursor = item
                self._scroll_to_item(item)
                return True
        return False

    def focus_row(self) -> int | None:
        """The first row showing the sub-step's focus, or None."""
        if self.view is None or not self.view.focus:
            return None
        return next((i for i, row in enumerate(self._rows) if self.is_focus(row)), None)

    def follow_focus(self) -> None:
        """Scroll the sub-step's focus into sight (the cursor stays where it is: the focus is
        what the op moves, not what the user chose)."""
        row = self.focus_row()
        if row is None:
            return
        top = self.scroll_offset.y
        if not top <= row < top + max(1, self.scrollable_content_region.height):
            self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True, force=True)
            self.restyle()

    def repaint_rows(self, rows: set[int]) -> None:
        """Render only ``rows`` again (Textual keeps every other line it has)."""
        self.repaint_lines(rows)

    def _shown_signatures(self) -> tuple[int, int, list] | None:
        """(top row, width, the signature of each line on screen), or None when this view
        gives none (:meth:`line_signature`)."""
        if type(self).line_signature is LineView.line_signature:
            return None
        top = self.scroll_offset.y
        height = self.scrollable_content_region.height
        return top, self.line_width, [self.line_signature(i) for i in range(top, top + height)]

    def _repaint_changed(self, shown: tuple[int, int, list]) -> None:
        """After the rows were built again: render only the lines on screen whose signature
        differs from ``shown`` (what was on screen before); everything when it scrolled."""
        top, width, before = shown
        if top != self.scroll_offset.y or width != self.line_width:
            self.restyle()
            return
        changed = {top + i for i, old in enumerate(before)
                   if old is None or self.line_signature(top + i) != old}
        height = self.scrollable_content_region.height
        changed.update(range(top + len(before), top + height))
        if self.SAYS_MORE:
            changed.update((top, top + height - 1))  # their counts follow the rows
        for line in changed:  # the strips are kept: they are filed by signature (content_key)
            self.refresh_line(line)

    def keys_by_content(self) -> bool:
        return type(self).line_signature is not LineView.line_signature

    def content_key(self, index: int) -> Hashable | None:
        # Strips are filed by signature, so a line moved down by a row (a node evicted above
        # it) is a cache hit.
        more = self._more(index)
        return ("more", more) if more is not None else self.line_signature(index)

    def _more(self, index: int) -> str | None:
        """The "… N more" text line ``index`` shows instead of its row, or None."""
        if not self.SAYS_MORE:
            return None
        top = self.scroll_offset.y
        height = self.scrollable_content_region.height
        if height < 3 or len(self._rows) <= height:
            return None
        if index == top and top > 0:
            return f"… {top + 1} more ↑"
        if index == top + height - 1 and index < len(self._rows) - 1:
            return f"… {len(self._rows) - index} more ↓"
        return None

    def _rebuild(self, repaint: bool = True) -> None:
        """Build the rows again; ``repaint``: render every line again (else the caller
        says which lines changed, and the strips, filed by signature, stay)."""
        width = self._width()
        self._built_width = width
        self._rows = self.build_rows(self.view, width) if self.view is not None else []
        self._items = []
        self._item_row = {}
        self._item_pos = {}
        for index, row in enumerate(self._rows):
            if row.item is not None and row.item not in self._item_row:
                self._item_row[row.item] = index
                self._item_pos[row.item] = len(self._items)
                self._items.append(row.item)
        self._set_virtual_size(Size(width, len(self._rows)))
        if repaint:
            self.restyle()

    def _set_virtual_size(self, size: Size) -> None:
        """Set the virtual size; quietly in a view without a scrollbar and not sized by its
        content, whose rows that fit are then counted as the view's height.

        Why: ``virtual_size`` is a layout reactive, and a layout refresh repaints the whole
        screen (stepping through an eviction's sub-steps, where every eviction changes the
        trie's and the heap's row counts, it was a third of a sub-step's time). Such a view's
        size on screen does not depend on its rows, so only its scroll range must follow
        (and is clamped here); rows that fit scroll nowhere.
        """
        styles = self.styles
        fixed = self.is_mounted and not (styles.height is not None and styles.height.is_auto)
        quiet = fixed and styles.scrollbar_size_vertical == 0
        if not quiet:
            if size == self.virtual_size:
                return
            if fixed and size.width == self.virtual_size.width and self._same_scrollbar(size):
                # A view with a scrollbar (the narration) whose bar neither comes nor goes:
                # only the bar's thumb and the scroll range follow the rows, no layout (a
                # layout refresh was four fifths of a step in the profile of bench_ui.py).
                self.set_reactive(LineView.virtual_size, size)
                self._scroll_update(size)
                return
            self.virtual_size = size
            return
        size = Size(size.width, max(size.height, self.scrollable_content_region.height))
        old = self.virtual_size
        if size == old:
            return
        if old.width != size.width:
            self.virtual_size = size
            return
        self.set_reactive(LineView.virtual_size, size)
        room = max(0, size.height - self.scrollable_content_region.height)
        if self.scroll_offset.y > room:
            self.scroll_to(y=room, animate=False, immediate=True, force=True)

    def _same_scrollbar(self, size: Size) -> bool:
        """True when rows of ``size`` show the vertical scrollbar exactly when the rows now
        shown do (Textual's rule for ``overflow-y: auto``; other overflows never change it)."""
        if self.styles.overflow_y != "auto":
            return True
        height = self.container_size.height
        return (size.height > height) == (self.virtual_size.height > height) == self.show_vertical_scrollbar

    def _width(self) -> int:
        return self.layout_width()

    # -- rendering -----------------------------------------------------------------------

    @property
    def rows(self) -> list[Row]:
        """The rows of the current frame (for tests and the app)."""
        return self._rows

    def row_text(self, index: int) -> str:
        """The plain text of row ``index`` (tests read the view this way)."""
        return "".join(text for text, _ in self.render_row(self._rows[index], self._width()))

    def _on_cursor(self, row: Row) -> bool:
        return row.item is not None and row.item == self.cursor and self.has_focus

    def row_marks(self, row: Row) -> tuple[bool, bool, bool, int]:
        """What every line of ``row`` shows beyond its own data, for a ``line_signature``:
        the cursor on it, the sub-step's focus, the selection's link, and the view's revision."""
        view = self.view
        return (self._on_cursor(row), bool(view.focus) and self.is_focus(row),
                row.item is not None and self.is_linked(row.item), view.revision)

    def marked_line_signature(self, index: int) -> Hashable | None:
        """A ``line_signature`` for a view that defines :meth:`row_signature` (assign it as its
        ``line_signature``): ``("blank",)`` past the rows, else the row's signature given its
        :meth:`row_marks`."""
        if self.view is None or index >= len(self._rows):
            return ("blank",)
        row = self._rows[index]
        return self.row_signature(row, self.row_marks(row))

    def row_signature(self, row: Row, marks: tuple) -> Hashable | None:
        """What ``row`` looks like, given its :meth:`row_marks` (for :meth:`marked_line_signature`;
        None: not known)."""
        return None

    def line_key(self, index: int) -> Hashable:
        return index < len(self._rows) and self._on_cursor(self._rows[index])

    def render_strip(self, index: int, width: int) -> Strip:
        base = self.style_of.base
        if index >= len(self._rows):
            return Strip.blank(width, base)
        more = self._more(index)
        if more is not None:
            return spans_to_strip([(more, self.style_of("line-view--muted"))], width, base)
        row = self._rows[index]
        overlay = None
        if self._on_cursor(row):
            overlay = self.style_of("line-view--cursor")
        elif self.view is not None and self.view.focus and self.is_focus(row):
            overlay = self.style_of("line-view--focus")
        elif row.item is not None and self.is_linked(row.item):
            overlay = self.style_of("line-view--linked")
        return spans_to_strip(self.render_row(row, width), width, base, overlay)

    def on_resize(self, event: events.Resize) -> None:
        if self._width() != self._built_width and self.view is not None:
            self._rebuild()
        if self.SAYS_MORE and self.focus_row() is None and not (self.cursor is not None and self.view is not None
                                                               and self.is_linked(self.cursor)):
            self.follow_changes()  # the first layout (and a new size) decides what fits

    # -- the cursor ----------------------------------------------------------------------

    def _scroll_to_item(self, item: Hashable, repaint: bool = True) -> None:
        row = self._item_row.get(item)
        if row is None:
            return
        self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True, force=True)
        if repaint:
            self.restyle()

    def move_cursor(self, item: Hashable, post: bool = True) -> None:
        """Put the cursor on ``item`` and (by default) post the view's selected message."""
        if item not in self._item_row:
            return
        self.cursor = item
        self._scroll_to_item(item)
        if post:
            message = self.selected_message(item)
            if message is not None:
                self.post_message(message)

    def _step_cursor(self, delta: int) -> None:
        if not self._items:
            return
        if self.cursor not in self._item_row:
            target = 0 if delta > 0 else len(self._items) - 1
        else:
            position = self._item_pos[self.cursor] + delta
            target = max(0, min(len(self._items) - 1, position))
        self.move_cursor(self._items[target])

    def action_cursor_up(self) -> None:
        """Cursor to the previous item."""
        self._step_cursor(-1)

    def action_cursor_down(self) -> None:
        """Cursor to the next item."""
        self._step_cursor(1)

    def action_page_up(self) -> None:
        """Cursor one screen up."""
        self._step_cursor(-max(1, self.scrollable_content_region.height - 1))

    def action_page_down(self) -> None:
        """Cursor one screen down."""
        self._step_cursor(max(1, self.scrollable_content_region.height - 1))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = offset.y + self.scroll_offset.y
        if 0 <= row < len(self._rows) and self._rows[row].item is not None:
            self.focus()
            self.move_cursor(self._rows[row].item)


class MarkupView(LineView):
    """A scrollable panel of wrapped text (Textual markup) drawn with the Line API: the
    narration and the why panel. Cheaper to repaint on every step than a Static inside a
    scrolling container, and it scrolls by itself.

    Text wraps to the width the scrollbar leaves: when the text is taller than the panel,
    it is wrapped again one scrollbar narrower, so no character is drawn under the bar.

    Component classes: those of :class:`LineView` (the text's colours come from theme
    variables in its markup).
    """

    BINDINGS = [
        Binding("up,k", "scroll_up", "Up", show=False),
        Binding("down,j", "scroll_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]

    DEFAULT_CSS = """
    MarkupView { overflow-x: hidden; }
    """

    text = ""
    """The plain text shown (tests read it)."""

    def markup(self, view: FrameView) -> str:
        """The panel's text for ``view``, as Textual markup."""
        raise NotImplementedError

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        content = Content.from_markup(self.markup(view))
        self.text = content.plain
        # ``width`` is what the scrollbar of the previous text left; decide afresh.
        full = width + self.scrollbar_size_vertical
        lines = content.wrap(max(1, full))
        bar = self.styles.scrollbar_size_vertical
        if len(lines) > self.scrollable_content_region.height and bar and self.styles.overflow_y != "hidden":
            lines = content.wrap(max(1, full - bar))
        return [Row(None, line) for line in lines]

    def render_row(self, row: Row, width: int) -> list[Span]:
        return [(segment.text, segment.style or Style()) for segment in row.data.render_segments() if segment.text]

    def line_signature(self, index: int) -> Hashable | None:
        # A line of text is its characters and their styles (Content compares text only):
        # inside an op the sub-step list moves up a line per sub-step, and a moved line is
        # not drawn again.
        if index >= len(self._rows):
            return ("blank",)
        line = self._rows[index].data
        return (line.plain, tuple(line.spans))

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view`` from the top (only the lines that differ from those shown are
        drawn again)."""
        top = self.scroll_offset.y == 0 and self.view is not None and self._rows
        shown = self._shown_signatures() if top else None
        self.view = view
        self._rebuild(repaint=shown is None)
        self.scroll_home(animate=False, immediate=True)
        if shown is not None:
            self._repaint_changed(shown)

    def action_page_up(self) -> None:
        """One screen up."""
        self.scroll_page_up(animate=False)

    def action_page_down(self) -> None:
        """One screen down."""
        self.scroll_page_down(animate=False)
