# SPDX-License-Identifier: Apache-2.0
"""Live allocations: name, hit length, published pages and the block table (logical page →
physical page), shared pages starred, the unpublished tail in the owned colour; an allocation
released by the step is shown once more, in red.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from textual.message import Message
from textual.widget import Widget

from kvcore import AllocationInfo

from kvviz.core.view import FrameView
from kvviz.ui.widgets.line_view import LineView, Row, SelectionMessage, Span


@dataclass(frozen=True, slots=True)
class AllocationLine:
    """One line of an allocation: the header line (``cells`` from 0) or a continuation of
    its block table, or its tokens."""

    allocation: AllocationInfo
    part: str  # "head" | "cells" | "tokens"
    cells: tuple[int, ...] = ()  # logical page indices on this line
    ghost: bool = False


class AllocationTable(LineView):
    """The live allocations of the current frame (see the module doc).

    | Class | Description |
    | :- | :- |
    | `allocation-table--name` | An allocation's name. |
    | `allocation-table--new` | The name of an allocation acquired by this step. |
    | `allocation-table--changed` | The name of an allocation this step extended or published. |
    | `allocation-table--released` | An allocation released by this step (shown once more). |
    | `allocation-table--published` | A published (cached) page of the block table. |
    | `allocation-table--tail` | A page of the unpublished (owned) tail. |
    | `allocation-table--linked-page` | A page linked to the selection. |
    | `allocation-table--focus-page` | Stepped into an op: a page the sub-step shown moves. |
    | `allocation-table--meta` | Hit length, published count, the header, tokens. |
    | `allocation-table--violation` | An allocation or page named by a broken invariant. |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {
        "allocation-table--name", "allocation-table--new", "allocation-table--changed", "allocation-table--released",
        "allocation-table--published", "allocation-table--tail", "allocation-table--linked-page",
        "allocation-table--focus-page",
        "allocation-table--meta", "allocation-table--violation",
    }

    DEFAULT_CSS = """
    AllocationTable {
        & > .allocation-table--name { text-style: bold; }
        & > .allocation-table--new { color: $kv-new; text-style: bold; }
        & > .allocation-table--changed { color: $kv-touched; text-style: bold; }
        & > .allocation-table--released { color: $kv-evicted; text-style: strike; }
        & > .allocation-table--published { color: $kv-cached; }
        & > .allocation-table--tail { color: $kv-owned; }
        & > .allocation-table--linked-page { background: $kv-selected; text-style: bold underline; }
        & > .allocation-table--focus-page { text-style: bold reverse; }
        & > .allocation-table--meta { color: $kv-muted; }
        & > .allocation-table--violation { color: $kv-violation; text-style: bold reverse; }
    }
    """

    class AllocationSelected(SelectionMessage):
        """The user put the cursor on an allocation."""

        def __init__(self, source: Widget, allocation: int) -> None:
            super().__init__(source)
            self.allocation = allocation

    NAME_WIDTH = 6
    """The name column's cells (at least): the name, then a space before what follows."""
    MAX_NAME_WIDTH = 12
    """The widest the name column grows for long names (a trace's ``q0020``); longer ones are cut."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shared: dict[int, int] = {}

    def keeps_rows(self, old: FrameView | None, new: FrameView) -> bool:
        # Most sub-steps of an eviction (pops, swaps, new candidates) leave every allocation
        # as it was: then nothing here is drawn again.
        return (old is not None and old.revision == new.revision
                and old.snapshot.allocations == new.snapshot.allocations
                and self._marks(old) == self._marks(new))

    def dirty_rows(self, old: FrameView, new: FrameView) -> set[int] | None:
        return set()  # keeps_rows said the rows and every mark on them are the same

    @staticmethod
    def _marks(view: FrameView) -> tuple:
        """Everything besides the allocations that the table's look depends on."""
        diff = view.frame.diff
        return (diff.allocations_added, diff.allocations_changed,
                diff.allocations_released if view.previous is not None else (),
                view.highlight.pages, view.highlight.allocations, view.focus.pages, view.focus.allocations,
                view.violations.pages, view.violations.allocations)

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        snap = view.snapshot
        allocations = list(snap.allocations)
        ghosts = []
        if view.previous is not None:
            for allocation_id in view.frame.diff.allocations_released:
                info = view.previous.allocation(allocation_id)
                if info is not None:
                    ghosts.append(info)
        if not allocations and not ghosts:
            return [Row(None, "empty")]
        self._shared = _shared_pages(snap)
        # Wide enough for the longest name and a space: "q0020 released", never "q0020released".
        longest = max(len(info.label) for info in allocations + ghosts)
        self.NAME_WIDTH = max(type(self).NAME_WIDTH, min(self.MAX_NAME_WIDTH, longest + 2))
        rows = [Row(None, "header")]
        for info, ghost in [(a, False) for a in allocations] + [(a, True) for a in ghosts]:
            rows.extend(self._allocation_rows(info, ghost, width))
        return rows

    def _allocation_rows(self, info: AllocationInfo, ghost: bool, width: int) -> list[Row]:
        rows = []
        head_width = self.NAME_WIDTH + len(self._head_meta(info, ghost))
        cells = [len(self._cell_text(info, i)) + 1 for i in range(len(info.pages))]
        line: list[int] = []
        used = head_width
        indent = self.NAME_WIDTH
        part = "head"
        for i, size in enumerate(cells):
            if line and used + size > width:
                rows.append(Row(info.id, AllocationLine(info, part, tuple(line), ghost)))
                part, line, used = "cells", [], indent
            line.append(i)
            used += size
        rows.append(Row(info.id, AllocationLine(info, part, tuple(line), ghost)))
        if info.tokens:
            rows.append(Row(info.id, AllocationLine(info, "tokens", (), ghost)))
        return rows

    def _head_meta(self, info: AllocationInfo, ghost: bool) -> str:
        if ghost:
            return "released "
        return f"{info.hit_tokens:>3}  {f'{info.published}/{len(info.pages)}':<4} "

    def _cell_text(self, info: AllocationInfo, i: int) -> str:
        page = info.pages[i]
        star = "*" if i < info.published and self._shared.get(page, 0) > 1 else ""
        return f"{i}:{page}{star}"

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        if row.data == "empty":
            return [("no live allocations", style("line-view--muted"))]
        if row.data == "header":
            return [(f"{'name':<{self.NAME_WIDTH - 1}}hit  pub  block table (logical:page, *shared)",
                     style("allocation-table--meta"))]
        line: AllocationLine = row.data
        info = line.allocation
        view = self.view
        diff = view.frame.diff
        violated = info.id in view.violations.allocations
        spans: list[Span] = []
        if line.part == "head":
            if line.ghost:
                name_style = "allocation-table--released"
            elif info.id in diff.allocations_added:
                name_style = "allocation-table--new"
            elif info.id in diff.allocations_changed:
                name_style = "allocation-table--changed"
            else:
                name_style = "allocation-table--name"
            spans.append((f"{info.label[: self.NAME_WIDTH - 2]:<{self.NAME_WIDTH - 1}}", style(name_style)))
            spans.append((self._head_meta(info, line.ghost), style("allocation-table--meta")))
        elif line.part == "cells":
            spans.append((" " * self.NAME_WIDTH, style("allocation-table--meta")))
        else:
            words = view.label(info.tokens, limit=64)
            room = max(1, width - self.NAME_WIDTH)
            if len(words) > room:  # say that the row goes on, rather than cut a token in two
                words = words[: room - 1] + "…"
            spans.append((" " * self.NAME_WIDTH + words, style("allocation-table--meta")))
            return spans
        linked_pages = view.highlight.pages
        for i in line.cells:
            page = info.pages[i]
            cell_style = style("allocation-table--published" if i < info.published else "allocation-table--tail")
            if page in linked_pages:
                cell_style += style("allocation-table--linked-page")
            if page in view.focus.pages:
                cell_style += style("allocation-table--focus-page")
            if page in view.violations.pages:
                cell_style += style("allocation-table--violation")
            spans.append((self._cell_text(info, i), cell_style))
            spans.append((" ", style("allocation-table--meta")))
        if violated and line.part == "head":
            spans.append(("⚠", style("allocation-table--violation")))
        return spans

    line_signature = LineView.marked_line_signature

    def row_signature(self, row: Row, marks: tuple) -> Hashable:
        # What render_row reads for this line: an eviction's sub-steps move the focus from
        # page to page of one long block table, which redraws the two lines holding them.
        line = row.data
        view = self.view
        marks = (*marks, self.NAME_WIDTH)
        if not isinstance(line, AllocationLine):
            return (line, marks)
        info, diff = line.allocation, view.frame.diff
        linked, focus, broken = view.highlight.pages, view.focus.pages, view.violations.pages
        cells = tuple((self._cell_text(info, i), info.pages[i] in linked, info.pages[i] in focus,
                       info.pages[i] in broken) for i in line.cells)
        return (line, cells, info.id in diff.allocations_added, info.id in diff.allocations_changed,
                info.id in view.violations.allocations, marks)

    def is_linked(self, item: Hashable) -> bool:
        return self.view is not None and item in self.view.highlight.allocations

    def selected_message(self, item: Hashable) -> Message | None:
        return self.AllocationSelected(self, item)

    def is_focus(self, row: Row) -> bool:
        return row.item is not None and row.item in self.view.focus.allocations


def _shared_pages(snapshot) -> dict[int, int]:
    """page -> how many live allocations hold it in their published prefix."""
    counts: dict[int, int] = {}
    for a in snapshot.allocations:
        for page in a.pages[: a.published]:
            counts[page] = counts.get(page, 0) + 1
    return counts
