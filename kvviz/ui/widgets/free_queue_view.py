# SPDX-License-Identifier: Apache-2.0
"""A hash cache's free queue (vLLM's design), where the LRU heap view stands for a trie.

Every page with ref 0 is in one queue, which is the eviction order: new pages are taken from
its head, and a page taken there that still caches a block loses it then (lazy eviction).
Listed head to tail, each page with its place, the block it still caches (⊘ when that block
is unreachable) or "empty"; the head is marked as the next page taken. Runs of consecutive
empty pages share a row (:func:`kvviz.core.hash_view.queue_entries`). Pages that joined the
queue in the step are green; pages that left it (taken for new data, or matched again) are
listed in red.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.message import Message

from kvviz.core.hash_view import LeftQueue, QueueEntry, block_marks, queue_entries
from kvviz.core.view import FrameView
from kvviz.core.designs import design_of
from kvviz.ui.widgets.block_view import UNREACHABLE
from kvviz.ui.widgets.line_view import LineView, Row, Span
from kvviz.ui.widgets.page_grid import PageGrid


class FreeQueueView(LineView):
    """The free queue of a hash snapshot, head first (see the module doc). Any other kind of
    snapshot gets one line saying this view is for hash caches.

    | Class | Description |
    | :- | :- |
    | `free-queue-view--empty` | A queued page holding no cached block. |
    | `free-queue-view--cached` | A queued page still caching a block (evictable). |
    | `free-queue-view--head` | The head: the next page taken, and its marker. |
    | `free-queue-view--joined` | A page that joined the queue in this step. |
    | `free-queue-view--left` | A page that left the queue in this step. |
    | `free-queue-view--unreachable` | The marker of a cached block that is unreachable. |
    | `free-queue-view--meta` | Places in the queue, the header. |
    | `free-queue-view--violation` | A page named by a broken invariant. |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {
        "free-queue-view--empty", "free-queue-view--cached", "free-queue-view--head", "free-queue-view--joined",
        "free-queue-view--left", "free-queue-view--unreachable", "free-queue-view--meta",
        "free-queue-view--violation",
    }

    DEFAULT_CSS = """
    FreeQueueView {
        & > .free-queue-view--empty { color: $kv-free; }
        & > .free-queue-view--cached { color: $kv-evictable; }
        & > .free-queue-view--head { color: $kv-evicted; text-style: bold; }
        & > .free-queue-view--joined { color: $kv-new; text-style: bold; }
        & > .free-queue-view--left { color: $kv-evicted; text-style: strike; }
        & > .free-queue-view--unreachable { color: $warning; text-style: bold; }
        & > .free-queue-view--meta { color: $kv-muted; }
        & > .free-queue-view--violation { color: $kv-violation; text-style: bold reverse; }
    }
    """

    class PageSelected(PageGrid.PageSelected):
        """The user put the cursor on a queued page (the first of a folded run): a page
        selection like the pool's, so a handler of ``PageGrid.PageSelected`` takes it too."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._marks = block_marks(())
        self._last_position = 0

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        snap = view.snapshot
        if design_of(snap).views[1] != "queue":  # not a design with a free queue
            return [Row(None, "not-hash")]
        self._marks = block_marks(view.frame.events)
        entries = queue_entries(snap)
        self._last_position = snap.free_count - 1
        rows = [Row(None, "header")]
        rows += [Row(entry.page, entry) for entry in entries]
        if not entries:
            rows.append(Row(None, "empty"))
        rows += [Row(None, left) for left in self._marks.left]
        return rows

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        data = row.data
        if data == "not-hash":
            return [(f"{self.view.snapshot.kind} cache: no free queue (this view shows a hash cache's)",
                     style("line-view--muted"))]
        if data == "header":
            return [("head → tail · new pages come from the head",
                     style("free-queue-view--meta"))]
        if data == "empty":
            return [("empty: every page is referenced", style("line-view--muted"))]
        if isinstance(data, LeftQueue):
            return [(self._left_text(data), style("free-queue-view--left"))]
        return self._entry_spans(data)

    def _entry_spans(self, entry: QueueEntry) -> list[Span]:
        style = self.style_of
        view = self.view
        digits = len(str(max(self._last_position, 0)))
        meta = style("free-queue-view--meta")
        if entry.count > 1:
            place = f"#{entry.position}–{entry.position + entry.count - 1}"
            page_text = f"p{entry.page}–{entry.last_page}"
        else:
            place, page_text = f"#{entry.position:<{digits}}", f"p{entry.page}"
        block = entry.block
        kind = "free-queue-view--cached" if block is not None else "free-queue-view--empty"
        spans: list[Span] = [(f"{place} ", meta), (page_text, style(kind))]
        if block is None:
            spans.append((f" empty ×{entry.count}" if entry.count > 1 else " empty", style(kind)))
        else:
            spans.append((f" caches [{view.label(block.tokens)}]", style(kind)))
            if not block.reachable:
                spans.append((f" {UNREACHABLE}", style("free-queue-view--unreachable")))
        if any(entry.page <= page <= entry.last_page for page in self._marks.joined):
            spans.append((" joined", style("free-queue-view--joined")))
        if entry.position == 0:
            spans.append((" ← next page taken", style("free-queue-view--head")))
        elif entry.position + entry.count - 1 == self._last_position:
            spans.append((" ← tail", meta))
        if entry.page in view.violations.pages:
            spans.append((" ⚠", style("free-queue-view--violation")))
        return spans

    def _left_text(self, left: LeftQueue) -> str:
        info = self.view.snapshot.allocation(left.allocation)
        who = info.label if info is not None else f"#{left.allocation}"
        if not left.taken:
            return f"left: matched again by {who}: " + " ".join(f"p{page}" for page in left.pages)
        evicted = {e.page for e in self._marks.evicted}
        pages = " ".join(f"p{page}✗" if page in evicted else f"p{page}" for page in left.pages)
        return f"left: taken by {who}: {pages}" + (" (✗ its block evicted)" if evicted else "")

    def is_linked(self, item: Hashable) -> bool:
        return self.view is not None and item in self.view.highlight.pages

    def is_focus(self, row: Row) -> bool:
        """Stepped into an op: the rows of the pages the sub-step shown moves."""
        return row.item is not None and row.item in self.view.focus.pages

    def selected_message(self, item: Hashable) -> Message | None:
        return self.PageSelected(self, item)
