# SPDX-License-Identifier: Apache-2.0
"""The watch's pool view: blocks cached per medium (GPU, CPU, disk, …), as counts and bars.

A KV-event stream names no pages, so there is no page grid to draw: what it does tell is
how many blocks each tier holds. One row per medium, largest first: its name (normalised
for display: ``cpu`` and ``CPU`` are one row), its blocks, a bar scaled to the most blocks
cached at any step so far (so a filling cache is seen filling), and what the step shown
stored and removed on it.
"""

from __future__ import annotations

from collections import Counter

from textual.strip import Strip

from kvviz.watch.wire import medium_label

from kvviz.watch.view import WatchView
from kvviz.ui.widgets.line_canvas import LineCanvas, Span, spans_to_strip

EIGHTHS = " ▏▎▍▌▋▊▉█"
"""Partial bar cells, in eighths."""


def bar(value: int, top: int, cells: int) -> str:
    """``value`` of ``top`` as a bar ``cells`` wide (eighths of a cell), padded with ░."""
    if cells <= 0:
        return ""
    eighths = round(min(value, top) * cells * 8 / top) if top > 0 else 0
    if value > 0:
        eighths = max(1, eighths)  # a medium that holds anything shows something
    full, part = divmod(eighths, 8)
    text = "█" * full + (EIGHTHS[part] if part else "")
    return text + "░" * (cells - len(text))


def change_text(stored: int, removed: int) -> str:
    """What a row says the step did on its medium: ``" +16 −3"``, ``""`` for nothing."""
    return (f" +{stored:,}" if stored else "") + (f" −{removed:,}" if removed else "")


def medium_rows(view: WatchView) -> list[tuple[str, int, int, int]]:
    """``(medium, blocks, stored, removed)`` per medium shown, most blocks first; a medium
    that holds nothing now but lost blocks in this step is listed too."""
    held = Counter()
    for block in view.frame.state.blocks.values():
        held[medium_label(block.medium)] += 1
    stored, removed = Counter(), Counter()
    effect = view.frame.effect
    if effect is not None:
        for block in effect.stored:
            stored[medium_label(block.medium)] += 1
        for block in effect.removed:
            removed[medium_label(block.medium)] += 1
    names = set(held) | set(stored) | set(removed)
    return [(name, held[name], stored[name], removed[name])
            for name in sorted(names, key=lambda name: (-held[name], name))]


class MediumBars(LineCanvas, can_focus=False):
    """Blocks per medium (see the module doc).

    | Class | Description |
    | :- | :- |
    | `medium-bars--name` | The medium. |
    | `medium-bars--bar` | The bar of its blocks. |
    | `medium-bars--stored` | Blocks the step stored there. |
    | `medium-bars--removed` | Blocks the step removed there. |
    | `medium-bars--meta` | Counts and notes. |
    """

    STRIP_CACHE_SIZE = 16

    COMPONENT_CLASSES = {"medium-bars--name", "medium-bars--bar", "medium-bars--stored", "medium-bars--removed",
                         "medium-bars--meta"}

    DEFAULT_CSS = """
    MediumBars {
        height: auto;
        max-height: 8;
        overflow: hidden hidden;
        & > .medium-bars--name { text-style: bold; }
        & > .medium-bars--bar { color: $kv-cached; }
        & > .medium-bars--stored { color: $kv-new; text-style: bold; }
        & > .medium-bars--removed { color: $kv-evicted; text-style: bold; }
        & > .medium-bars--meta { color: $kv-muted; }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: WatchView | None = None
        self.rows: list[tuple[str, int, int, int]] = []

    def show(self, view: WatchView) -> None:
        """Draw ``view``'s blocks per medium."""
        self.view = view
        rows = medium_rows(view)
        if len(rows) != len(self.rows):
            self.virtual_size = self.virtual_size.with_height(max(1, len(rows)))
            self.refresh(layout=True)  # auto height: one more medium is one more line
        self.rows = rows
        self.restyle()

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.rows))

    def render_strip(self, index: int, width: int) -> Strip:
        base = self.style_of.base
        if self.view is None:
            return Strip.blank(width, base)
        if not self.rows:
            return spans_to_strip([("no blocks cached on any medium", self.style_of("medium-bars--meta"))] if index == 0
                                  else [], width, base)
        if index >= len(self.rows):
            return Strip.blank(width, base)
        return spans_to_strip(self.row_spans(self.rows[index], width), width, base)

    def row_spans(self, row: tuple[str, int, int, int], width: int) -> list[Span]:
        """One medium's line: "GPU        2,980 ████▌░░░ +16 −3"."""
        style = self.style_of
        name, blocks, stored, removed = row
        label = max(len(r[0]) for r in self.rows)
        digits = max(len(f"{r[1]:,}") for r in self.rows)
        change: list[Span] = []
        if stored:
            change.append((f" +{stored:,}", style("medium-bars--stored")))
        if removed:
            change.append((f" −{removed:,}", style("medium-bars--removed")))
        # Every row keeps room for the widest change of any row, so a bar's width never
        # depends on whether its own row changed: equal counts draw equal bars.
        room = max(len(change_text(r[2], r[3])) for r in self.rows)
        pad = room - sum(len(t) for t, _ in change)
        used = label + 1 + digits + 1 + room
        cells = max(0, width - used)
        return [(f"{name:<{label}} ", style("medium-bars--name")), (f"{blocks:>{digits},} ", style("medium-bars--meta")),
                (bar(blocks, max(1, self.view.peak), cells), style("medium-bars--bar")), *change,
                *([(" " * pad, style.base)] if pad else [])]

    @property
    def text(self) -> str:
        """The plain text of every row (tests read it)."""
        width = self.line_width or 40
        return "\n".join("".join(t for t, _ in self.row_spans(row, width)) for row in self.rows)
