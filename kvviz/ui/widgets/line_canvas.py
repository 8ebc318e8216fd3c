# SPDX-License-Identifier: Apache-2.0
"""The one Line-API base of kvviz's big views (line views, the page grid, the timeline bar).

toolong's recipe: a view renders only the lines on screen, on demand, into
:class:`~textual.strip.Strip` objects kept in a cache keyed by what the line depends on
(its index, the width, and whatever the subclass adds: the cursor, the focus, the step);
styles of component classes are looked up once per theme or CSS change. What changes
invalidates the cache in one call (:meth:`LineCanvas.invalidate`), and focus changes
repaint, since the cursor is drawn only in a focused view.

Subclasses provide :meth:`LineCanvas.render_strip` (and :meth:`LineCanvas.line_key` when a
line's look depends on more than its index and the width).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual._ansi_theme import DEFAULT_TERMINAL_THEME
from textual._styles_cache import StylesCache
from textual.actions import SkipAction
from textual.cache import LRUCache
from textual.scroll_view import ScrollView
from textual.strip import Strip

Span = tuple[str, Style]
"""A piece of a line: its text and its style (a partial style; the widget's base style goes under it)."""


def spans_to_strip(spans: Iterable[Span], width: int, base: Style, overlay: Style | None = None) -> Strip:
    """Spans as a strip of exactly ``width`` cells: cropped or padded with ``base``.

    A line cut short ends with ``…`` in its last cell, so a reader knows there is more (a
    cut that drops only spaces is no cut). ``overlay`` (a cursor or selection style) goes
    over every span. No per-row metadata: clicks are mapped from coordinates, so the few
    style combinations stay cacheable.
    """
    spans = [(text, style) for text, style in spans if text]
    sizes = [cell_len(text) for text, _ in spans]
    room = width
    if sum(sizes) > width and _text_beyond(spans, sizes, width):
        room = width - 1  # the last cell is the ellipsis
    segments = []
    used = 0
    last_style = base
    for (text, style), size in zip(spans, sizes):
        if used >= room:
            break
        if used + size > room:  # crop: this span is the last that shows
            text = set_cell_size(text, room - used)
            size = room - used
        combined = base + style if style else base
        if overlay is not None:
            combined += overlay
        segments.append(Segment(text, combined))
        last_style = combined
        used += size
    if room < width and width > 0:
        segments.append(Segment("…", last_style))
        used += 1
    if used < width:
        segments.append(Segment(" " * (width - used), base + overlay if overlay is not None else base))
    return Strip(segments, width)


def _text_beyond(spans: list[Span], sizes: list[int], width: int) -> bool:
    """True when something other than spaces lies past ``width`` cells."""
    used = 0
    for (text, _), size in zip(spans, sizes):
        if used + size > width:
            skip, cells = max(0, width - used), 0
            for index, character in enumerate(text):
                if cells >= skip:
                    if text[index:].strip():
                        return True
                    break
                cells += cell_len(character)
        used += size
    return False


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
        """Forget every style (the theme or the CSS changed)."""
        self._styles.clear()
        self._base = None


class StyledLines(StylesCache):
    """Textual's cache of a widget's styled lines (its content inside the borders, padding
    and tint), whose lines are also filed by what their content shows.

    Textual files a widget's styled lines by their row on screen: a line that moved (a trie
    node evicted above it, the sub-step list scrolled by one) is styled again, a fresh strip
    whose line filter and compositor cuts are computed again too, about 50 us a line, and a
    sub-step moves 20 to 30 of them. Here a content line whose canvas handed out the very
    strip styled before (same cache key, same strip object: :meth:`LineCanvas.render_line`)
    gets the styled strip kept for it. Everything else a styled line depends on (sizes,
    colours, borders, padding, opacity, tint, hatch, the ANSI theme) is compared on every
    render; when any of it changed, nothing kept is used. Borders and padding rows are
    Textual's own path, untouched."""

    KEPT = 512
    """Styled lines kept (a few screens' worth, like the canvas's strips)."""

    def __init__(self, canvas: "LineCanvas") -> None:
        super().__init__()
        self._canvas = canvas
        self._styled: LRUCache[Hashable, tuple[Strip, Strip]] = LRUCache(self.KEPT)
        self._look: tuple | None = None
        self._theme: object = None

    def render(self, styles, size, base_background, background, render_content_line, filters, border_title,
               border_subtitle, content_size=None, padding=None, crop=None, opacity=1.0,
               ansi_theme=DEFAULT_TERMINAL_THEME, native_ansi=False):
        hatch = styles.hatch if styles.has_rule("hatch") else None
        look = (size, content_size, padding, base_background, background, opacity, native_ansi, styles.border,
                styles.outline, styles.text_opacity, styles.tint, hatch, styles.gutter)
        if look != self._look or ansi_theme is not self._theme:
            self._styled.clear()
            self._look, self._theme = look, ansi_theme
        return super().render(styles, size, base_background, background, render_content_line, filters, border_title,
                              border_subtitle, content_size, padding, crop, opacity, ansi_theme, native_ansi)

    def render_line(self, styles, y, size, content_size, padding, base_background, background, render_content_line,
                    *rest):
        gutter = styles.gutter
        content_y = y - gutter.top
        if content_y < 0 or y >= size.height - gutter.bottom or content_y >= content_size.height:
            return super().render_line(styles, y, size, content_size, padding, base_background, background,
                                       render_content_line, *rest)
        content = render_content_line(content_y)
        key = self._canvas._handed_out
        kept = self._styled.get(key) if key is not None else None
        if kept is not None and kept[0] is content:
            return kept[1]
        styled = super().render_line(styles, y, size, content_size, padding, base_background, background,
                                     lambda _: content, *rest)
        if key is not None:
            self._styled[key] = (content, styled)
        return styled


class LineCanvas(ScrollView):
    """A Line-API widget with a strip cache, a style cache and a repaint on focus changes
    (see the module doc)."""

    STRIP_CACHE_SIZE = 256
    """How many rendered lines to keep (a few screens' worth)."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._strips: LRUCache[tuple, Strip] = LRUCache(self.STRIP_CACHE_SIZE)
        self.style_of = StyleCache(self)
        self._handed_out: tuple | None = None  # the cache key of the strip render_line returned last
        self._styles_cache = StyledLines(self)  # Textual's, filing styled lines by content too

    # -- what subclasses provide ------------------------------------------------------------

    def render_strip(self, index: int, width: int) -> Strip:
        """Line ``index`` of the content (scrolling already applied) at ``width`` cells."""
        raise NotImplementedError

    def line_key(self, index: int) -> Hashable:
        """What line ``index`` looks like depends on, besides its index and the width
        (e.g. whether the cursor is on it). Part of the cache key."""
        return None

    def content_key(self, index: int) -> Hashable | None:
        """Everything line ``index`` shows, as a value, when the subclass can say it (None:
        not known). Such lines are filed by it instead of by index, width and
        :meth:`line_key`: a line that moved (a row removed above it) is not drawn again."""
        return None

    def styles_changed(self) -> None:
        """Called after the theme or the CSS changed (the caches are already empty)."""

    # -- the machinery -------------------------------------------------------------------

    @property
    def line_width(self) -> int:
        """The width lines are drawn at (the content region, inside borders and scrollbar)."""
        return self.scrollable_content_region.width

    def layout_width(self) -> int:
        """The width to lay content out for; before the first layout, a guess from the size."""
        width = self.scrollable_content_region.width
        return width if width > 0 else max(self.size.width, 20)

    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        width = self.line_width
        content = self.content_key(index)
        key = (index, width, self.line_key(index)) if content is None else ("content", width, content)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self.render_strip(index, width)
        self._handed_out = key  # StyledLines keeps the styled line under the same key
        return strip

    def keys_by_content(self) -> bool:
        """True when every line has a :meth:`content_key` that says all it shows (but the
        styles): its kept strips never go stale, only unused (the theme or CSS changing
        forgets them all, :meth:`notify_style_update`)."""
        return False

    def invalidate(self) -> None:
        """Forget every rendered line (without asking for a repaint)."""
        self._strips.clear()

    def restyle(self) -> None:
        """Repaint the widget, every line drawn again (a canvas that keys by content keeps
        its strips: a line whose key is unchanged looks the same, so it costs a lookup, and
        its styled line is Textual's kept one, :class:`StyledLines`)."""
        if not self.keys_by_content():
            self._strips.clear()
        self.refresh()

    def repaint_lines(self, lines: Iterable[int]) -> None:
        """Repaint only ``lines`` (content indices) that are on screen: Textual keeps the
        others as they were (the strips are forgotten, unless keyed by content: restyle)."""
        if not self.keys_by_content():
            self._strips.clear()
        top = self.scroll_offset.y
        bottom = top + self.scrollable_content_region.height
        for line in lines:
            if top <= line < bottom:
                self.refresh_line(line)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.style_of.clear()
        self._strips.clear()
        self.styles_changed()

    # Home and End are the app's step keys (first / last step): a focused view must not
    # take them for scrolling (Textual's scrolling containers bind them).
    def action_scroll_home(self) -> None:
        """Left to the app: first step."""
        raise SkipAction()

    def action_scroll_end(self) -> None:
        """Left to the app: last step."""
        raise SkipAction()

    def on_focus(self) -> None:
        self.restyle()

    def on_blur(self) -> None:
        self.restyle()
