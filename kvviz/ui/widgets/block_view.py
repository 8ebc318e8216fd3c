# SPDX-License-Identifier: Apache-2.0
"""The cached blocks of a hash cache (vLLM's design), where the trie view stands for a trie.

Blocks are grouped by chain as far as the chain is cached: each block hangs under the block
its parent key names (:func:`kvviz.core.hash_view.block_lines`). A block whose parent key
is not cached at all (its parent's page was taken and reused, the block itself not yet)
heads a chain of its own and is marked ⊘ **unreachable**: no acquire can match it, nor the
blocks under it, until the parent is cached again. Each block shows its page, its page's ref
and, for ref 0, its place in the free queue (cached but free: evicted when the queue hands
its page out). Blocks the step cached are green, blocks an acquire matched blue, and blocks
that left the cache in the step (their page was taken) are listed once more, in red. The
legend comes right under the header, where a short pane still shows it.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.message import Message
from textual.widget import Widget

from kvviz.core.hash_view import (MAX_INDENT, BlockLine, EvictedBlock, QueueOrder, block_counts, block_lines,
                                block_marks)
from kvviz.core.view import FrameView
from kvviz.core.designs import design_of
from kvviz.ui.widgets.line_view import LineView, Row, SelectionMessage, Span

UNREACHABLE = "⊘"
"""The marker of a block whose parent key is not cached."""

LEGEND = ("● referenced · ○ ref 0: in the free queue, evicted when its page is taken",
          f"{UNREACHABLE} unreachable: parent key not cached; no acquire can match it or below")
"""The legend, under the header."""


class BlockView(LineView):
    """The cached blocks of a hash snapshot (see the module doc). Any other kind of
    snapshot gets one line saying this view is for hash caches.

    | Class | Description |
    | :- | :- |
    | `block-view--guide` | The chains' guide lines. |
    | `block-view--referenced` | A block whose page has ref > 0. |
    | `block-view--queued` | A block whose page has ref 0 (in the free queue). |
    | `block-view--unreachable` | A block under a parent key that is not cached, and its marker. |
    | `block-view--new` | A block cached by this step. |
    | `block-view--matched` | A block an acquire matched in this step. |
    | `block-view--evicted` | A block that left the cache in this step (shown once more). |
    | `block-view--meta` | Pages, refs, queue places, the header and the legend. |
    | `block-view--ref-change` | The step's change of a page's ref, "(+1)". |
    | `block-view--violation` | A block whose page a broken invariant names. |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {
        "block-view--guide", "block-view--referenced", "block-view--queued", "block-view--unreachable",
        "block-view--new", "block-view--matched", "block-view--evicted", "block-view--meta",
        "block-view--ref-change", "block-view--violation",
    }

    DEFAULT_CSS = """
    BlockView {
        & > .block-view--guide { color: $kv-muted; }
        & > .block-view--referenced { color: $kv-cached; text-style: bold; }
        & > .block-view--queued { color: $kv-evictable; }
        & > .block-view--unreachable { color: $warning; text-style: bold; }
        & > .block-view--new { color: $kv-new; text-style: bold; }
        & > .block-view--matched { color: $kv-touched; text-style: bold; }
        & > .block-view--evicted { color: $kv-evicted; text-style: strike; }
        & > .block-view--meta { color: $kv-muted; }
        & > .block-view--ref-change { color: $warning; text-style: bold; }
        & > .block-view--violation { color: $kv-violation; text-style: bold reverse; }
    }
    """

    class BlockSelected(SelectionMessage):
        """The user put the cursor on a cached block (``block``, held by ``page``)."""

        def __init__(self, source: Widget, block: int, page: int) -> None:
            super().__init__(source)
            self.block = block
            self.page = page

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._order: QueueOrder | None = None
        self._marks = block_marks(())
        self._blocks_by_page: dict[int, int] = {}

    # -- building rows -------------------------------------------------------------------

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        snap = view.snapshot
        if design_of(snap).views[0] != "blocks":  # not a design whose cache is blocks
            self._order = None
            return [Row(None, "not-hash")]
        self._order = QueueOrder(snap)
        self._marks = block_marks(view.frame.events)
        lines = block_lines(snap)
        self._blocks_by_page = {line.block.page: line.block.id for line in lines}
        rows = [Row(None, "header")] + [Row(None, ("legend", i)) for i in range(len(LEGEND))]
        broken_section = False
        for line in lines:
            if not line.reachable and not broken_section:
                broken_section = True
                rows.append(Row(None, "unreachable-section"))
            rows.append(Row(line.block.page, line))
        if not lines:
            rows.append(Row(None, "empty"))
        rows += [Row(None, gone) for gone in self._marks.evicted]
        return rows

    # -- rendering -----------------------------------------------------------------------

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        data = row.data
        snap = self.view.snapshot
        if data == "not-hash":
            return [(f"{snap.kind} cache: no hash blocks (this view shows a hash cache's blocks)",
                     style("line-view--muted"))]
        if data == "header":
            c = block_counts(snap)
            text = (f"{c.cached} block{'s' if c.cached != 1 else ''} cached: {c.referenced} referenced, "
                    f"{c.queued} in the free queue")
            if c.duplicates:
                text += f", {c.duplicates} duplicate{'s' if c.duplicates != 1 else ''}"
            spans = [(text, style("block-view--meta"))]
            if c.unreachable:
                spans.append((f", {c.unreachable} unreachable", style("block-view--unreachable")))
            return spans
        if data == "empty":
            return [("no cached blocks", style("line-view--muted"))]
        if isinstance(data, tuple) and data[0] == "legend":
            return [(LEGEND[data[1]], style("block-view--meta"))]
        if data == "unreachable-section":
            return [("unreachable chains: their first block's parent key is not cached", style("block-view--unreachable"))]
        if isinstance(data, EvictedBlock):
            still = ", its key still cached on another page" if data.still_cached else ""
            return [(f"✗ [{self.view.label(data.tokens)}] p{data.page} evicted: its page was taken by "
                     f"{self._allocation_label(data.allocation)}{still}", style("block-view--evicted"))]
        return self._block_spans(data, width)

    def _block_spans(self, line: BlockLine, width: int) -> list[Span]:
        style = self.style_of
        view = self.view
        block = line.block
        ref = view.snapshot.pages[block.page].ref
        marks = self._marks
        spans: list[Span] = [(line.prefix, style("block-view--guide"))]
        if line.broken:
            spans.append((f"{UNREACHABLE} ", style("block-view--unreachable")))
        else:
            spans.append(("● " if ref else "○ ", style("block-view--referenced" if ref else "block-view--queued")))
        if block.id in marks.new:
            change, tag = "block-view--new", " new"
        elif block.id in marks.matched:
            change, tag = "block-view--matched", " matched"
        elif not line.reachable:
            change, tag = "block-view--unreachable", ""
        else:
            change, tag = ("block-view--referenced" if ref else "block-view--queued"), ""
        meta = style("block-view--meta")
        tail: list[Span] = [(f" p{block.page} ref {ref}", meta)]
        delta = marks.ref_change(block.page)
        if delta:
            tail.append((f"({delta:+d})", style("block-view--ref-change")))
        position = self._order.position(block.page) if not ref else None
        if position is not None:
            tail.append((f" queue #{position}", meta))
        if line.depth > MAX_INDENT:  # drawn at MAX_INDENT: say how deep
            tail.append((f" depth {line.depth}", meta))
        if line.duplicate_of is not None:
            first = view.snapshot.block(line.duplicate_of)  # the copy lookups find
            tail.append((f" duplicate of p{first.page}" if first is not None else " duplicate", meta))
        if line.broken:
            tail.append((" unreachable: parent not cached", style("block-view--unreachable")))
        elif not line.reachable:
            tail.append((" unreachable", style("block-view--unreachable")))
        if tag:
            tail.append((tag, style(change)))
        violated = block.page in view.violations.pages
        if violated:
            tail.append((" ⚠ violation", style("block-view--violation")))
        used = len(line.prefix) + 2 + 2 + sum(len(text) for text, _ in tail)
        words = view.label(block.tokens)
        budget = max(6, width - used)
        if len(words) > budget:
            words = words[:max(1, budget - 1)] + "…"
        return [*spans, (f"[{words}]", style(change)), *tail]

    def _allocation_label(self, allocation: int) -> str:
        info = self.view.snapshot.allocation(allocation)
        return info.label if info is not None else f"#{allocation}"

    # -- selection -----------------------------------------------------------------------

    def is_linked(self, item: Hashable) -> bool:
        return self.view is not None and item in self.view.highlight.pages

    def is_focus(self, row: Row) -> bool:
        """Stepped into an op: the rows of the pages the sub-step shown moves."""
        return row.item is not None and row.item in self.view.focus.pages

    def selected_message(self, item: Hashable) -> Message | None:
        block = self._blocks_by_page.get(item)
        return self.BlockSelected(self, block, item) if block is not None else None
