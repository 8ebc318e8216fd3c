# SPDX-License-Identifier: Apache-2.0
"""The timeline bar: where we are (step i of n, stepped into its op the sub-step "3/12 pop",
the op, play state and speed) and a track
with a mark per step: evictions, failed ops, failed expects and invariant violations.
Clicking the track jumps there.

Long timelines share a cell between several steps (the most serious mark wins); where
evictions are dense, a shared cell shows how many of its steps evicted, as a bar from ▁ to █
(a profile, not a solid row of ▾). Marks come from the per-step summaries in the frozen
:class:`~kvviz.core.view.TimelineView` the app hands down, so no frame is rebuilt to draw
the bar.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.strip import Strip

from kvviz.core.narrate import count
from kvviz.core.view import TimelineView
from kvviz.ui.widgets.line_canvas import LineCanvas, Span, spans_to_strip

# Most serious first: a cell covering several steps shows the first that applies.
MARKS = (("violation", "!"), ("failed", "✗"), ("expect", "?"), ("eviction", "▾"), ("plain", "─"))
SEVERITY = {kind: rank for rank, (kind, _) in enumerate(MARKS)}
GLYPHS = {**dict(MARKS), "fill": "─"}
DENSITY = "▁▂▃▄▅▆▇█"
"""Glyphs of a shared cell's eviction share, lowest to highest."""


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


def cell_glyphs(summaries, cells: list[tuple[int, int, str]]) -> list[str]:
    """The glyph of each cell. A shared eviction cell shows the share of its steps that
    evicted (▁ few … █ all), so a dense stretch reads as a profile."""
    glyphs = []
    for first, last, mark in cells:
        if mark == "eviction" and last > first:
            evicting = sum(1 for i in range(first, last + 1) if summaries[i].evictions)
            share = evicting / (last - first + 1)
            glyphs.append(DENSITY[min(len(DENSITY) - 1, int(share * len(DENSITY)))])
        else:
            glyphs.append(GLYPHS[mark])
    return glyphs


class TimelineBar(LineCanvas, can_focus=False):
    """Step position, play state and the marked track (see the module doc).

    | Class | Description |
    | :- | :- |
    | `timeline-bar--state` | "▶ playing 2×" / "‖ paused 1×". |
    | `timeline-bar--head` | "step i/n". |
    | `timeline-bar--substep` | Stepped into the op: the sub-step shown, "· 3/12 pop". |
    | `timeline-bar--op` | The op of the step shown. |
    | `timeline-bar--failed` | A failed op (head and track). |
    | `timeline-bar--violation` | An invariant violation (head and track). |
    | `timeline-bar--expect` | A failed expect (head and track). |
    | `timeline-bar--eviction` | A step that evicted (track). |
    | `timeline-bar--plain` | Other steps, and the title. |
    | `timeline-bar--past` | Steps before the one shown. |
    | `timeline-bar--current` | The step shown. |
    """

    STRIP_CACHE_SIZE = 16

    COMPONENT_CLASSES = {
        "timeline-bar--head", "timeline-bar--op", "timeline-bar--failed", "timeline-bar--violation",
        "timeline-bar--eviction", "timeline-bar--expect", "timeline-bar--plain", "timeline-bar--past",
        "timeline-bar--current", "timeline-bar--state", "timeline-bar--substep",
    }

    DEFAULT_CSS = """
    TimelineBar {
        height: 2;
        overflow: hidden hidden;
        & > .timeline-bar--head { text-style: bold; }
        & > .timeline-bar--op { color: $foreground; }
        & > .timeline-bar--state { color: $accent; text-style: bold; }
        & > .timeline-bar--substep { color: $accent; text-style: bold; }
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
        self.timeline: TimelineView | None = None
        self._cells: list[tuple[int, int, str]] = []
        self._glyphs: list[str] = []
        self._cells_key: tuple | None = None

    def show(self, timeline: TimelineView) -> None:
        """Draw ``timeline`` (a frozen value; the app makes a new one for each change)."""
        self.timeline = timeline
        self.restyle()  # two lines: cheaper to draw again than to key by a whole timeline

    def cells(self, width: int) -> list[tuple[int, int, str]]:
        """The track's cells at ``width`` (laid out again only when the summaries change)."""
        summaries = self.timeline.summaries
        key = (self.timeline.revision, len(summaries), width)
        if key != self._cells_key or summaries is not self._cells_of:
            self._cells = track_cells(summaries, width)
            self._glyphs = cell_glyphs(summaries, self._cells)
            self._cells_key = key
            self._cells_of = summaries
        return self._cells

    _cells_of: tuple | None = None

    def render_strip(self, index: int, width: int) -> Strip:
        base = self.style_of.base
        if self.timeline is None or not self.timeline.summaries or index > 1:
            return Strip.blank(width, base)
        spans = self._head_spans(width) if index == 0 else self._track_spans(width)
        return spans_to_strip(spans, width, base)

    def _head_spans(self, width: int) -> list[Span]:
        get = self.style_of
        timeline = self.timeline
        step = timeline.step
        summary = timeline.summaries[step]
        # The speed shows while paused too, so + and - are seen to do something.
        state = f"▶ playing {timeline.speed:g}×" if timeline.playing else f"‖ paused {timeline.speed:g}×"
        spans: list[Span] = [(f"{state} ", get("timeline-bar--state")),
                             (f"step {step}/{timeline.last_step} ", get("timeline-bar--head"))]
        if timeline.substep is not None:
            index, total, kind = timeline.substep
            spans.append((f"· {index + 1}/{total} {kind} ", get("timeline-bar--substep")))
        spans.append((summary.op_text if step else "start", get("timeline-bar--op")))
        if summary.failed:
            spans.append(("  FAILED", get("timeline-bar--failed")))
        if summary.violations:
            spans.append((f"  {count(summary.violations, 'VIOLATION', 'VIOLATIONS')}", get("timeline-bar--violation")))
        if summary.expect_failures:
            spans.append((f"  {count(summary.expect_failures, 'expect')} failed", get("timeline-bar--expect")))
        used = sum(len(text) for text, _ in spans)
        room = width - used
        if timeline.title and room > 8:
            right = f"  {timeline.title}"
            spans.append((right if len(right) <= room else right[: room - 1] + "…", get("timeline-bar--plain")))
        return spans

    def _track_spans(self, width: int) -> list[Span]:
        """The track, one span per run of cells that look alike (a handful, not one per cell)."""
        get = self.style_of
        spans: list[Span] = []
        run: list[str] = []
        run_style = None
        step = self.timeline.step
        until = getattr(self.timeline, "marks_until", None)  # the watch's view has no quiz
        cells = self.cells(width)
        for (first, last, mark), glyph in zip(cells, self._glyphs):
            if until is not None and last > until and mark != "fill":
                mark, glyph = "plain", GLYPHS["plain"]  # a step ahead of a pending question: no mark
            style = get(f"timeline-bar--{'plain' if mark == 'fill' else mark}")
            if first <= step <= last:
                style = style + get("timeline-bar--current")
                glyph = "●" if mark == "plain" else glyph
            elif last < step:
                style = style + get("timeline-bar--past")
            if style is not run_style and style != run_style:
                if run:
                    spans.append(("".join(run), run_style))
                run, run_style = [], style
            run.append(glyph)
        if run:
            spans.append(("".join(run), run_style))
        return spans

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y != 1 or self.timeline is None:
            return
        cells = self.cells(self.line_width)
        if 0 <= offset.x < len(cells):
            self.post_message(self.StepClicked(cells[offset.x][0]))

    @property
    def text(self) -> str:
        """The plain text of both lines (tests read it)."""
        if self.timeline is None or not self.timeline.summaries:
            return ""
        width = self.line_width
        return "\n".join("".join(text for text, _ in spans)
                         for spans in (self._head_spans(width), self._track_spans(width)))
