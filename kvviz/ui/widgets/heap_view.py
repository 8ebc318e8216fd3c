# SPDX-License-Identifier: Apache-2.0
"""The LRU heap: the eviction candidates as the heap holds them.

The heap array is drawn as the binary tree it encodes (entry ``i`` has children ``2i+1`` and
``2i+2``), each entry with its array index, node, page and key ``(last_access, seq)``; the
top is the next victim. Entries that joined the heap in the step are green, entries that
moved blue, and entries that left it (evicted, or referenced again) are listed in red.
Stepped into an op, the slots a sub-step moved (the two of a swap) are marked and tagged.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from textual.message import Message
from textual.widget import Widget

from kvviz.core.view import FrameView, key_fields, node_key_text
from kvviz.core.designs import design_of
from kvviz.ui.widgets.line_view import LineView, Row, SelectionMessage, Span


@dataclass(frozen=True, slots=True)
class HeapLine:
    """One heap entry: array index (None for an entry that left), node and tree depth."""

    index: int | None
    node: int
    depth: int


SLOT_TAGS = {
    "swap": " ⇅ swapped",
    "pop": " ↑ moved to the top",
    "unheap": " ↑ moved into the hole",
    "push": " + pushed at the end",
}
"""Stepped into an op: the tag of a heap slot the sub-step shown moved, by sub-step kind."""


class HeapView(LineView):
    """The LRU heap of the current frame (see the module doc).

    | Class | Description |
    | :- | :- |
    | `heap-view--entry` | An eviction candidate. |
    | `heap-view--victim` | The top of the heap: the next victim. |
    | `heap-view--new` | A candidate that joined the heap in this step. |
    | `heap-view--moved` | A candidate that moved in the heap in this step. |
    | `heap-view--left` | A node that left the heap in this step (evicted or referenced again). |
    | `heap-view--meta` | Array indices, keys, the header. |
    | `heap-view--violation` | An entry named by a broken invariant. |
    | `heap-view--slot` | Stepped into an op: what the sub-step did to a slot ("⇅ swapped"). |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {
        "heap-view--entry", "heap-view--victim", "heap-view--new", "heap-view--moved", "heap-view--left",
        "heap-view--meta", "heap-view--violation", "heap-view--slot",
    }

    DEFAULT_CSS = """
    HeapView {
        & > .heap-view--entry { color: $kv-evictable; }
        & > .heap-view--victim { color: $kv-evicted; text-style: bold; }
        & > .heap-view--new { color: $kv-new; text-style: bold; }
        & > .heap-view--moved { color: $kv-touched; text-style: bold; }
        & > .heap-view--left { color: $kv-evicted; text-style: strike; }
        & > .heap-view--meta { color: $kv-muted; }
        & > .heap-view--violation { color: $kv-violation; text-style: bold reverse; }
        & > .heap-view--slot { color: $foreground; text-style: bold; }
    }
    """

    SAYS_MORE = True  # "… 3 more ↓": a heap taller than its pane never drops candidates silently

    class NodeSelected(SelectionMessage):
        """The user put the cursor on a heap entry (a trie node)."""

        def __init__(self, source: Widget, node: int) -> None:
            super().__init__(source)
            self.node = node

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        snap = view.snapshot
        if not design_of(snap).shares:  # nothing cached, nothing to evict (the base cache)
            return [Row(None, "unshared")]
        heap = snap.heap
        self._top_is_next = self._top_is_smallest(view)
        rows: list[Row] = [Row(None, "header")]
        if not heap:
            rows.append(Row(None, "empty"))
        # Pre-order walk of the implicit binary tree: parents before children, left first.
        stack = [(0, 0)] if heap else []
        while stack:
            index, depth = stack.pop()
            rows.append(Row(heap[index], HeapLine(index, heap[index], depth)))
            for child in (2 * index + 2, 2 * index + 1):
                if child < len(heap):
                    stack.append((child, depth + 1))
        if view.previous is not None:
            for node in view.frame.diff.heap_removed:
                rows.append(Row(node, HeapLine(None, node, 0)))
        return rows

    _top_is_next = True

    def changed_rows(self) -> list[int]:
        """The entries that joined, moved in or left the heap in this step."""
        if self.view is None or self.view.previous is None:
            return []
        diff = self.view.frame.diff
        changed = set(diff.heap_added) | set(diff.heap_moved)
        return [i for i, row in enumerate(self._rows)
                if isinstance(row.data, HeapLine) and (row.data.index is None or row.data.node in changed)]

    @staticmethod
    def _top_is_smallest(view: FrameView) -> bool:
        """Whether slot 0 holds the smallest key, so "next victim" is true of it. Between whole
        steps the heap is always in order; inside an op, mid-sift (after a pop moved the last
        entry to the top, or while a pushed entry climbs) the top may not be the smallest yet.
        Checked on every view (0.2 ms at 384 entries): a practice move's view is a state inside
        an op without being a sub-step view."""
        snap = view.snapshot
        if not snap.heap:
            return True
        keys = [snap.node_key(node) for node in map(snap.node, snap.heap) if node is not None]
        return len(keys) == len(snap.heap) and keys[0] == min(keys)

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        if row.data == "unshared":
            return [(f"{self.view.snapshot.kind} cache: no trie, no eviction", style("line-view--muted"))]
        if row.data == "header":
            return [(f"candidates: childless, ref 0 · next victim on top · key {key_fields(self.view.snapshot)}",
                     style("heap-view--meta"))]
        if row.data == "empty":
            return [("empty: no unreferenced leaves", style("line-view--muted"))]
        line: HeapLine = row.data
        view = self.view
        diff = view.frame.diff
        if line.index is None:
            node = view.previous_node(line.node)
            if view.substep is not None and view.substep.step.kind == "pop":
                gone = "popped: the victim"  # still in the trie until the next sub-step evicts it
            else:
                gone = "evicted" if line.node in diff.nodes_evicted else "referenced again"
            return [(f"left: node {line.node} p{node.page} {node_key_text(view.previous, node)} {gone}",
                     style("heap-view--left"))]
        node = view.node(line.node)
        if line.node in diff.heap_added:
            entry_style = "heap-view--new"
        elif line.node in diff.heap_moved:
            entry_style = "heap-view--moved"
        elif line.index == 0 and self._top_is_next:
            entry_style = "heap-view--victim"
        else:
            entry_style = "heap-view--entry"
        indent = "  " * min(line.depth, 12)
        spans: list[Span] = [
            (f"{indent}[{line.index}] ", style("heap-view--meta")),
            (f"node {line.node} p{node.page}" if node else f"node {line.node} (missing)", style(entry_style)),
            (f" {node_key_text(view.snapshot, node)}" if node else "", style("heap-view--meta")),
        ]
        if view.substep is not None and line.index in view.focus.slots:
            tag = SLOT_TAGS.get(view.substep.step.kind)
            if tag:
                spans.append((tag, style("heap-view--slot")))
        if line.index == 0 and self._top_is_next:
            spans.append((" ← next victim", style("heap-view--victim")))
        if node is not None and (line.node in view.violations.nodes or node.page in view.violations.pages):
            spans.append((" ⚠", style("heap-view--violation")))
        return spans

    line_signature = LineView.marked_line_signature

    def row_signature(self, row: Row, marks: tuple) -> Hashable:
        # What render_row reads: a sift's swap redraws its two slots' lines, not the heap.
        line = row.data
        view = self.view
        kind = view.substep.step.kind if view.substep is not None else None
        if not isinstance(line, HeapLine):
            return (line, view.snapshot.kind, view.snapshot.policy, marks)
        diff = view.frame.diff
        if line.index is None:
            return (line, view.previous_node(line.node), view.previous.policy if view.previous else None, kind,
                    line.node in diff.nodes_evicted, marks)
        node = view.node(line.node)
        violated = node is not None and (line.node in view.violations.nodes or node.page in view.violations.pages)
        return (line, node, view.snapshot.policy, line.node in diff.heap_added, line.node in diff.heap_moved,
                kind if line.index in view.focus.slots else None, violated, line.index == 0 and self._top_is_next,
                marks)

    def is_linked(self, item: Hashable) -> bool:
        return self.view is not None and item in self.view.highlight.nodes

    def selected_message(self, item: Hashable) -> Message | None:
        return self.NodeSelected(self, item)

    def is_focus(self, row: Row) -> bool:
        line = row.data
        if not isinstance(line, HeapLine):
            return False
        focus = self.view.focus
        return line.node in focus.nodes or (line.index is not None and line.index in focus.slots)
