"""The timeline bar: where we are (step i of n, the op, play state) and a track with a mark
per step: evictions, failed ops, failed expects and invariant violations. Clicking the track
jumps there.

Long timelines share a cell between several steps (the most serious mark wins). Marks come
from the session's per-step summaries, so no frame is rebuilt to draw the bar.
"""

from __future__ import annotations

from textual import events
from textual.cache import LRUCache
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from .line_view import Span, StyleCache, spans_to_strip

# Most serious first: a cell covering several steps shows the first that applies.
MARKS = (("violation", "!"), ("failed", "✗"), ("expect", "?"), ("eviction", "▾"), ("plain", "─"))
SEVERITY = {kind: rank for rank, (kind, _) in enumerate(MARKS)}
GLYPHS = {**dict(MARKS), "fill": "─"}


def step_mark(summary) -> str:
    """The kind of mark one step gets on the track."""
    if summary.violations:
        return "violation"
    if summary.failed:
        return "failed"
    if summary.expect_failures:
        return "expect"
    if summary.evictions:
        return "eviction"
    return "plain"


MAX_CELLS_PER_STEP = 4


def track_cells(summaries, width: int) -> list[tuple[int, int, str]]:
    """Cells of the track: ``(first step, last step, mark)`` each, at most ``width`` of them.

    A short timeline gives each step up to :data:`MAX_CELLS_PER_STEP` cells (the mark,
    then a line) so it is easy to see and to click; a long one shares cells between steps.
    """
    count = len(summaries)
    if count == 0 or width <= 0:
        return []
    cells = []
    if count <= width:
        stretch = max(1, min(MAX_CELLS_PER_STEP, width // count))
        for i, summary in enumerate(summaries):
            cells.append((i, i, step_mark(summary)))
            cells.extend((i, i, "fill") for _ in range(stretch - 1))
        return cells
    for cell in range(width):
        first = cell * count // width
        last = max(first, (cell + 1) * count // width - 1)
        mark = min((step_mark(summaries[i]) for i in range(first, last + 1)), key=SEVERITY.__getitem__)
        cells.append((first, last, mark))
    return cells


class TimelineBar(Widget):
    """Step position, play state and the marked track (see the module doc)."""

    COMPONENT_CLASSES = {
        "timeline-bar--head", "timeline-bar--op", "timeline-bar--failed", "timeline-bar--violation",
        "timeline-bar--eviction", "timeline-bar--expect", "timeline-bar--plain", "timeline-bar--past",
        "timeline-bar--current", "timeline-bar--state",
    }

    DEFAULT_CSS = """
    TimelineBar {
        height: 2;
        & > .timeline-bar--head { text-style: bold; }
        & > .timeline-bar--op { color: $foreground; }
        & > .timeline-bar--state { color: $accent; text-style: bold; }
        & > .timeline-bar--failed { color: $error; text-style: bold; }
        & > .timeline-bar--violation { color: $kv-violation; text-style: bold; }
        & > .timeline-bar--eviction { color: $kv-evicted; }
        & > .timeline-bar--expect { color: $error; }
        & > .timeline-bar--plain { color: $kv-muted; }
        & > .timeline-bar--past { text-style: bold; }
        & > .timeline-bar--current { background: $accent; color: $background; text-style: bold; }
    }
    """

    class StepClicked(Message):
        """The user clicked the track at ``step``."""

        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session = None
        self.step = 0
        self.playing = False
        self.speed = 1.0
        self.revision = 0
        self.title = ""
        self._cells: list[tuple[int, int, str]] = []
        self._cells_key: tuple | None = None
        self._strips: LRUCache[tuple, Strip] = LRUCache(16)
        self._generation = 0
        self.style_of = StyleCache(self)

    def show(self, session, step: int, playing: bool, speed: float, revision: int) -> None:
        """Draw ``step`` of ``session``; ``revision`` changes whenever the timeline does."""
        self.session, self.step, self.playing, self.speed, self.revision = session, step, playing, speed, revision
        self.refresh()

    def cells(self, width: int) -> list[tuple[int, int, str]]:
        """The track's cells at ``width`` (cached per timeline revision)."""
        key = (id(self.session), len(self.session), width, self.revision)
        if key != self._cells_key:
            self._cells = track_cells(self.session.summaries, width)
            self._cells_key = key
        return self._cells

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if self.session is None or y > 1:
            return Strip.blank(width, base)
        key = (y, width, id(self.session), self.revision, self.step, self.playing, self.speed, self.title,
               self._generation)
        strip = self._strips.get(key)
        if strip is None:
            spans = self._head_spans(width) if y == 0 else self._track_spans(width)
            strip = self._strips[key] = spans_to_strip(spans, width, base)
        return strip

    def _head_spans(self, width: int) -> list[Span]:
        get = self.style_of
        total = len(self.session) - 1
        summary = self.session.summaries[self.step]
        state = f"▶ playing {self.speed:g}×" if self.playing else "‖ paused"
        spans: list[Span] = [(f"{state} ", get("timeline-bar--state")),
                             (f"step {self.step}/{total} ", get("timeline-bar--head")),
                             (summary.op_text if self.step else "start", get("timeline-bar--op"))]
        if summary.failed:
            spans.append(("  FAILED", get("timeline-bar--failed")))
        if summary.violations:
            spans.append((f"  {summary.violations} VIOLATION(S)", get("timeline-bar--violation")))
        if summary.expect_failures:
            spans.append((f"  {summary.expect_failures} expect(s) failed", get("timeline-bar--expect")))
        used = sum(len(text) for text, _ in spans)
        room = width - used
        if self.title and room > 8:
            right = f"  {self.title}"
            spans.append((right if len(right) <= room else right[: room - 1] + "…", get("timeline-bar--plain")))
        return spans

    def _track_spans(self, width: int) -> list[Span]:
        """The track, one span per run of cells that look alike (a handful, not one per cell)."""
        get = self.style_of
        spans: list[Span] = []
        run: list[str] = []
        run_style = None
        for first, last, mark in self.cells(width):
            style = get(f"timeline-bar--{'plain' if mark == 'fill' else mark}")
            glyph = GLYPHS[mark]
            if first <= self.step <= last:
                style = style + get("timeline-bar--current")
                glyph = "●" if mark == "plain" else glyph
            elif last < self.step:
                style = style + get("timeline-bar--past")
            if style is not run_style and style != run_style:
                if run:
                    spans.append(("".join(run), run_style))
                run, run_style = [], style
            run.append(glyph)
        if run:
            spans.append(("".join(run), run_style))
        return spans

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.style_of.clear()
        self._generation += 1
        self._strips.clear()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y != 1 or self.session is None:
            return
        cells = self.cells(self.size.width)
        if 0 <= offset.x < len(cells):
            self.post_message(self.StepClicked(cells[offset.x][0]))

    @property
    def text(self) -> str:
        """The plain text of both lines (tests read it)."""
        if self.session is None:
            return ""
        width = self.size.width
        return "\n".join("".join(text for text, _ in spans)
                         for spans in (self._head_spans(width), self._track_spans(width)))
