"""The base of the list-like views (trie, allocations, LRU heap): the Line API done lazily.

A view turns a frame into :class:`Row` values (cheap: ids and a little layout) and renders
only the rows on screen, on demand, into :class:`~textual.strip.Strip` objects it caches
until the frame, the highlight, the width or the styles change. That keeps a step on a
1,000-node trie to building a list of rows plus ~30 rendered lines.

Every row may stand for an *item* (a node id, an allocation id); the cursor moves between
items with up/down, and moving it posts the subclass's "selected" message, which the app
turns into a linked selection across all views.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from ...model.view import FrameView

Span = tuple[str, Style]
"""A piece of a line: its text and its style (a partial style; the widget's base style goes under it)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a view: the item it selects (None for headers and notes) and what the
    view needs to draw it."""

    item: Hashable | None
    data: Any = None


def spans_to_strip(spans: Iterable[Span], width: int, base: Style, overlay: Style | None = None) -> Strip:
    """Spans as a strip of exactly ``width`` cells: cropped or padded with ``base``.

    ``overlay`` (a cursor or selection style) goes over every span. No per-row metadata:
    clicks are mapped from coordinates, so the few style combinations stay cacheable.
    """
    segments = []
    used = 0
    for text, style in spans:
        if not text:
            continue
        size = cell_len(text)
        if used + size > width:  # crop: this span is the last that shows
            text = set_cell_size(text, width - used)
            size = width - used
        combined = base + style if style else base
        if overlay is not None:
            combined += overlay
        segments.append(Segment(text, combined))
        used += size
        if used >= width:
            break
    if used < width:
        segments.append(Segment(" " * (width - used), base + overlay if overlay is not None else base))
    return Strip(segments, width)


class StyleCache:
    """Rich styles of a widget's component classes (and its base style), looked up once per
    theme or CSS change instead of once per span."""

    def __init__(self, widget):
        self._widget = widget
        self._styles: dict[str, Style] = {}
        self._base: Style | None = None

    def __call__(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self._widget.get_component_rich_style(name, partial=True)
        return style

    @property
    def base(self) -> Style:
        """The widget's own style (background and colour), under every span."""
        if self._base is None:
            self._base = self._widget.rich_style
        return self._base

    def clear(self) -> None:
        self._styles.clear()
        self._base = None


class SelectionMessage(Message):
    """A view's selection. ``control`` (Textual's name for the widget a message is about)
    is the view it happened in, so a screen with two views of a kind tells them apart."""

    def __init__(self, source: Widget) -> None:
        super().__init__()
        self.source = source

    @property
    def control(self) -> Widget:
        return self.source


class LineView(ScrollView, can_focus=True):
    """A focusable, scrollable list of rows with a cursor over items (see the module doc)."""

    BINDINGS = [
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]

    COMPONENT_CLASSES = {"line-view--cursor", "line-view--linked", "line-view--muted"}

    DEFAULT_CSS = """
    LineView {
        overflow-x: hidden;
        & > .line-view--cursor { background: $block-cursor-background; color: $background; text-style: bold; }
        & > .line-view--linked { background: $kv-selected; }
        & > .line-view--muted { color: $kv-muted; }
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._rows: list[Row] = []
        self._items: list[Hashable] = []
        self._item_row: dict[Hashable, int] = {}
        self._item_pos: dict[Hashable, int] = {}
        self._strips: LRUCache[tuple, Strip] = LRUCache(256)
        self._generation = 0
        self._built_width = -1
        self.view: FrameView | None = None
        self.cursor: Hashable | None = None
        self.style_of = StyleCache(self)

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

    def keeps_rows(self, old: FrameView | None, new: FrameView) -> bool:
        """True when the rows built for ``old`` are still right for ``new``."""
        return False

    def dirty_rows(self, old: FrameView, new: FrameView) -> set[int] | None:
        """With rows kept, the rows whose text or marks differ between ``old`` and ``new``
        (None: repaint everything). Only these are rendered again."""
        return None

    # -- state in ------------------------------------------------------------------------

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view``. ``rebuild=False`` when only the highlight changed."""
        old, self.view = self.view, view
        if not self._rows or (rebuild and not self.keeps_rows(old, view)):
            self._rebuild()
        else:
            dirty = self.dirty_rows(old, view) if rebuild and old is not None else None
            if dirty is None:
                self.restyle()
            else:
                self.repaint_rows(dirty)
        self.follow()

    def follow(self) -> None:
        """Move the cursor to the first linked item (without posting a selection)."""
        if self.cursor is not None and self.cursor in self._item_row and self.is_linked(self.cursor):
            self._scroll_to_item(self.cursor, repaint=False)
            return
        for item in self._items:
            if self.is_linked(item):
                self.cursor = item
                self._scroll_to_item(item)
                return

    def repaint_rows(self, rows: set[int]) -> None:
        """Render only ``rows`` again (Textual keeps every other line it has)."""
        self._generation += 1
        self._strips.clear()
        top = self.scroll_offset.y
        bottom = top + self.scrollable_content_region.height
        for row in rows:
            if top <= row < bottom:
                self.refresh_line(row)

    def restyle(self) -> None:
        """Drop every cached line (highlight, focus or styles changed) and repaint."""
        self._generation += 1
        self._strips.clear()
        self.refresh()

    def _rebuild(self) -> None:
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
        self.virtual_size = Size(width, len(self._rows))
        self.restyle()

    def _width(self) -> int:
        width = self.scrollable_content_region.width
        return width if width > 0 else max(self.size.width, 20)

    # -- rendering -----------------------------------------------------------------------

    @property
    def rows(self) -> list[Row]:
        """The rows of the current frame (for tests and the app)."""
        return self._rows

    def row_text(self, index: int) -> str:
        """The plain text of row ``index`` (tests read the view this way)."""
        return "".join(text for text, _ in self.render_row(self._rows[index], self._width()))

    def render_line(self, y: int) -> Strip:
        _, scroll_y = self.scroll_offset
        index = y + scroll_y
        width = self.scrollable_content_region.width
        base = self.style_of.base
        if index >= len(self._rows):
            return Strip.blank(width, base)
        row = self._rows[index]
        focused = self.has_focus
        on_cursor = focused and row.item is not None and row.item == self.cursor
        key = (index, self._generation, width, on_cursor)
        strip = self._strips.get(key)
        if strip is None:
            overlay = None
            if on_cursor:
                overlay = self.style_of("line-view--cursor")
            elif row.item is not None and self.is_linked(row.item):
                overlay = self.style_of("line-view--linked")
            strip = spans_to_strip(self.render_row(row, width), width, base, overlay)
            self._strips[key] = strip
        return strip

    def on_resize(self, event: events.Resize) -> None:
        if self._width() != self._built_width and self.view is not None:
            self._rebuild()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.style_of.clear()
        self._generation += 1
        self._strips.clear()

    def on_focus(self) -> None:
        self.restyle()

    def on_blur(self) -> None:
        self.restyle()

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
    scrolling container, and it scrolls by itself."""

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
        return [Row(None, line) for line in content.wrap(max(1, width))]

    def render_row(self, row: Row, width: int) -> list[Span]:
        return [(segment.text, segment.style or Style()) for segment in row.data.render_segments() if segment.text]

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view`` from the top."""
        self.view = view
        self._rebuild()
        self.scroll_home(animate=False, immediate=True)

    def action_page_up(self) -> None:
        """One screen up."""
        self.scroll_page_up(animate=False)

    def action_page_down(self) -> None:
        """One screen down."""
        self.scroll_page_down(animate=False)
