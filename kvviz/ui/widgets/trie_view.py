# SPDX-License-Identifier: Apache-2.0
"""The trie: every node with its tokens (words where the scenario used words), page, ref
count and last access; referenced nodes (ref > 0, ●) apart from evictable ones (ref 0, ○); what the step
changed in the paper's colours; nodes evicted by the step shown once more, in red.

Subtrees fold (enter) and chains of single-child nodes compress into one row (c), so
a 1,000-node trie stays readable.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from kvviz.core.view import FrameView, later_neighbour, same_shape
from kvviz.core.designs import design_of
from kvviz.ui.widgets.line_view import LineView, Row, SelectionMessage, Span

COMPRESS_ABOVE = 200
"""Tries with more nodes than this start with chains compressed."""

MAX_GUIDE_CHARS = 120
"""Columns of tree guides a row keeps: deeper rows show the levels nearest them after a "⋯".
A guide grows by two columns a level, so unbounded it made a chain of n uncompressed nodes
cost n² characters (a 100,000-page eviction shown as ghosts: 20 GB)."""


@dataclass(frozen=True, slots=True)
class TrieLine:
    """A row of the trie: the node(s) it shows (a chain when compressed), its guide prefix,
    how many descendants are folded away, and whether it is a ghost (evicted this step)."""

    chain: tuple[int, ...]
    prefix: str
    hidden: int = 0
    ghost: bool = False


class TrieView(LineView):
    """The trie of the current frame (see the module doc).

    | Class | Description |
    | :- | :- |
    | `trie-view--guide` | The tree's guide lines. |
    | `trie-view--cached` | A referenced node (ref > 0: never evicted), and the root. |
    | `trie-view--evictable` | A node with ref 0. |
    | `trie-view--new` | A node created by this step. |
    | `trie-view--touched` | A node whose last access moved to now. |
    | `trie-view--evicted` | A node evicted by this step (shown once more). |
    | `trie-view--meta` | Page, ref count, last access, fold counts. |
    | `trie-view--ref-change` | The step's change of a ref count, "(+1)". |
    | `trie-view--violation` | A node named by a broken invariant. |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    BINDINGS = [
        Binding("enter", "toggle_fold", "Fold", show=False),
        Binding("c", "toggle_chains", "Chains", show=False),
    ]

    COMPONENT_CLASSES = {
        "trie-view--guide", "trie-view--cached", "trie-view--evictable", "trie-view--new", "trie-view--touched",
        "trie-view--evicted", "trie-view--meta", "trie-view--violation", "trie-view--ref-change",
    }

    DEFAULT_CSS = """
    TrieView {
        & > .trie-view--guide { color: $kv-muted; }
        & > .trie-view--cached { color: $kv-cached; text-style: bold; }
        & > .trie-view--evictable { color: $kv-evictable; }
        & > .trie-view--new { color: $kv-new; text-style: bold; }
        & > .trie-view--touched { color: $kv-touched; text-style: bold; }
        & > .trie-view--evicted { color: $kv-evicted; text-style: strike; }
        & > .trie-view--meta { color: $kv-muted; }
        & > .trie-view--violation { color: $kv-violation; text-style: bold reverse; }
        & > .trie-view--ref-change { color: $warning; text-style: bold; }
    }
    """

    SAYS_MORE = True  # "… 3 more ↓", and the nodes a step changed kept in sight (compare's divergence)

    class NodeSelected(SelectionMessage):
        """The user put the cursor on a trie node."""

        def __init__(self, source: Widget, node: int) -> None:
            super().__init__(source)
            self.node = node

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.folded: set[int] = set()
        self.compress: bool | None = None  # None: decide from the trie's size
        self._added: frozenset[int] = frozenset()
        self._touched: frozenset[int] = frozenset()
        self._ref_changes: dict[int, tuple[int, int]] = {}
        self._node_row: dict[int, int] = {}
        self._counted: tuple | None = None  # (snapshot, its counts) for the root line
        # The last full build's children lists (ghosts among them) and ghost rows: what
        # _ghosts_only_go reads to tell that the next rows are these without the ghosts.
        self._children: dict[int, list[int]] = {}
        self._ghosts: frozenset[int] = frozenset()
        self._drop_ghosts_for: FrameView | None = None

    # -- building rows -------------------------------------------------------------------

    def keeps_rows(self, old: FrameView | None, new: FrameView) -> bool:
        # Most steps only change refs and last access: the rows (ids and guides) still hold,
        # only the change marks must follow the new frame.
        self._drop_ghosts_for = None
        if not same_shape(old, new):
            if self._ghosts_only_go(old, new):
                self._drop_ghosts_for = new  # build_rows: these rows without the ghost rows
            return False
        self._index_changes(new)
        return True

    def _ghosts_only_go(self, old: FrameView | None, new: FrameView) -> bool:
        """True when the rows of ``new`` are those built for ``old`` without their ghost rows:
        the step after an eviction (a sub-step's ghost row goes at the next one), when it
        adds and evicts no node and every evicted node's parent keeps no other child (a
        ghost is its parent's last child, so a sibling's guide would change; and a parent
        left with one child would join it in a compressed chain). Nothing folded."""
        ghosts = self._ghosts
        if not ghosts or self.folded or old is None or later_neighbour(old, new) is not new:
            return False
        diff = new.frame.diff
        if diff.nodes_added or diff.nodes_evicted:
            return False
        children = self._children
        for ghost in ghosts:
            parent = old.previous_node(ghost).parent
            if parent not in ghosts and any(child not in ghosts for child in children.get(parent, ())):
                return False
        return True

    def _without_ghosts(self, view: FrameView) -> list[Row]:
        """The current rows without their ghost rows (:meth:`_ghosts_only_go` said they are
        ``view``'s), and the index of which row shows each node."""
        ghosts = self._ghosts
        rows = [row for row in self._rows if not (isinstance(row.data, TrieLine) and row.data.ghost)]
        children = dict(self._children)
        for ghost in ghosts:
            children.pop(ghost, None)
        for parent in {parent for parent, kids in children.items() if any(kid in ghosts for kid in kids)}:
            children[parent] = [kid for kid in children[parent] if kid not in ghosts]
        self._children, self._ghosts = children, frozenset()
        self._index_changes(view)
        self._node_row = node_row = {}
        for index, row in enumerate(rows):
            if isinstance(row.data, TrieLine):
                for member in row.data.chain:
                    node_row[member] = index
        return rows

    def dirty_rows(self, old: FrameView, new: FrameView) -> set[int] | None:
        if old.highlight != new.highlight or old.violations != new.violations:
            return None
        changed: set[int] = set(old.focus.nodes) | set(new.focus.nodes)
        for frame in (old.frame, new.frame):  # marks to clear and marks to draw
            diff = frame.diff
            changed.update(diff.nodes_added, diff.nodes_touched, (node for node, _, _ in diff.ref_changes))
        node_row = self._node_row
        return {0} | {node_row[node] for node in changed if node in node_row}

    def _index_changes(self, view: FrameView) -> None:
        diff = view.frame.diff
        self._added, self._touched = frozenset(diff.nodes_added), frozenset(diff.nodes_touched)
        self._ref_changes = {node: (before, after) for node, before, after in diff.ref_changes}

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        if self._drop_ghosts_for is view:
            self._drop_ghosts_for = None
            return self._without_ghosts(view)
        self._drop_ghosts_for = None
        snap = view.snapshot
        self._children, self._ghosts = {}, frozenset()
        if not design_of(snap).shares:  # no sharing, no trie (the base cache)
            return [Row(None, "unshared")]
        ghosts: set[int] = set()
        children: dict[int, list[int]] = {}
        for n in snap.nodes:
            if n.parent is not None:
                children.setdefault(n.parent, []).append(n.id)
        if view.previous is not None and view.frame.diff.nodes_evicted:
            for node_id in view.frame.diff.nodes_evicted:
                node = view.previous_node(node_id)
                if node is not None and node.parent is not None:
                    ghosts.add(node_id)
                    children.setdefault(node.parent, []).append(node_id)
        self._children, self._ghosts = children, frozenset(ghosts)
        compress = self.compress if self.compress is not None else len(snap.nodes) - 1 > COMPRESS_ABOVE
        folded = self.folded
        sizes = _subtree_sizes(children, folded) if folded else {}
        self._index_changes(view)
        rows = [Row(None, "root")]
        self._node_row = node_row = {}
        # Depth-first with an explicit stack: a chain of thousands of pages must not hit
        # Python's recursion limit.
        pending: list[tuple[int, str, bool]] = []
        kids = children.get(0, ())
        for i in range(len(kids) - 1, -1, -1):
            pending.append((kids[i], "", i == len(kids) - 1))
        while pending:
            node_id, prefix, last = pending.pop()
            chain = [node_id]
            if compress:
                while True:
                    tail = chain[-1]
                    below = children.get(tail, ())
                    if len(below) != 1 or tail in folded or (below[0] in ghosts) != (tail in ghosts):
                        break
                    chain.append(below[0])
            tail = chain[-1]
            hidden = sizes.get(tail, 0) if tail in folded else 0
            for member in chain:
                node_row[member] = len(rows)
            rows.append(Row(node_id, TrieLine(tuple(chain), prefix + ("└─" if last else "├─"), hidden,
                                              node_id in ghosts)))
            if tail in folded:
                continue
            below = children.get(tail, ())
            inner = prefix + ("  " if last else "│ ")
            if len(inner) > MAX_GUIDE_CHARS:
                inner = "⋯ " + inner[len(inner) - MAX_GUIDE_CHARS + 2:]
            for i in range(len(below) - 1, -1, -1):
                pending.append((below[i], inner, i == len(below) - 1))
        return rows

    # -- rendering -----------------------------------------------------------------------

    def render_row(self, row: Row, width: int) -> list[Span]:
        view = self.view
        style = self.style_of
        if row.data == "unshared":
            return [(f"{view.snapshot.kind} cache: no trie, nothing is shared", style("line-view--muted"))]
        snap = view.snapshot
        if row.data == "root":
            nodes, referenced = self._counts(view)
            return [("root", style("trie-view--cached")),
                    (f"  {nodes} node{'s' if nodes != 1 else ''}: {referenced} referenced, "
                     f"{nodes - referenced} evictable",
                     style("trie-view--meta"))]
        line: TrieLine = row.data
        lookup = view.previous_node if line.ghost else view.node
        nodes = [lookup(n) for n in line.chain]
        if any(node is None for node in nodes):  # pragma: no cover - rows come from this frame
            return [(line.prefix, style("trie-view--guide"))]
        head_node, tail_node = nodes[0], nodes[-1]
        added, touched, ref_changes = self._added, self._touched, self._ref_changes
        violated = (any(n in view.violations.nodes for n in line.chain)
                    or any(node.page in view.violations.pages for node in nodes))
        # Refs never grow down a path (a parent is on every path through its child), so a
        # chain is referenced from its head down to some node and evictable below it.
        referenced = sum(1 for node in nodes if node.ref)
        spans: list[Span] = [(line.prefix, style("trie-view--guide"))]
        if line.ghost:
            spans.append(("✗ ", style("trie-view--evicted")))
        elif referenced == len(nodes):
            spans.append(("● ", style("trie-view--cached")))
        elif referenced:
            spans.append(("◐ ", style("trie-view--cached")))
        else:
            spans.append(("○ ", style("trie-view--evictable")))
        new_count = sum(1 for n in line.chain if n in added)
        touched_count = sum(1 for n in line.chain if n in touched)
        if line.ghost:
            change, tag = "trie-view--evicted", " evicted"
        elif new_count:
            change, tag = "trie-view--new", " new" if new_count == len(nodes) or len(nodes) == 1 else f" {new_count} new"
        elif touched_count:
            change, tag = "trie-view--touched", (" touched" if touched_count == len(nodes) or len(nodes) == 1
                                                 else f" {touched_count} touched")
        else:
            change, tag = ("trie-view--cached" if head_node.ref else "trie-view--evictable"), ""
        meta = style("trie-view--meta")
        tail_spans: list[Span] = []
        if len(nodes) > 1:
            tail_spans.append((f" ×{len(nodes)} {_pages(nodes)}", meta))
            tail_spans.append((f" ref {_span(head_node.ref, tail_node.ref)}", meta))
        else:
            tail_spans.append((f" p{tail_node.page} ref {tail_node.ref}", meta))
        deltas = {after - before for n in line.chain for before, after in [ref_changes.get(n, (0, 0))]} - {0}
        if len(deltas) == 1:
            tail_spans.append((f"({deltas.pop():+d})", style("trie-view--ref-change")))
        elif deltas:
            tail_spans.append(("(±)", style("trie-view--ref-change")))
        if len(nodes) > 1 and 0 < referenced < len(nodes):
            tail_spans.append((f" ({len(nodes) - referenced} evictable)", meta))
        ticks = [node.last_access for node in nodes]
        tail_spans.append((f" t{_span(min(ticks), max(ticks))}", meta))
        if tag:
            tail_spans.append((tag, style(change)))
        if line.hidden:
            tail_spans.append((f" ▸ {line.hidden} folded", meta))
        # The words get whatever the row has left (at least a few characters).
        used = len(line.prefix) + 2 + 2 + sum(len(text) for text, _ in tail_spans) + (12 if violated else 0)
        budget = max(6, width - used)
        if len(nodes) > 1:
            # A chain's facts come first and its words last, where a narrow row cuts them:
            # the pages, refs and ticks of a folded chain must never be the part cut off.
            head_words, tail_words = view.label(head_node.tokens), view.label(tail_node.tokens)
            budget = max(6, budget - 1)
            half = max(3, (budget - 3) // 2)
            head_words = _clip(head_words, half)
            words = f"{head_words} ⋯ {_clip(tail_words, max(3, budget - 3 - len(head_words)))}"
            spans.append((tail_spans[0][0].lstrip(), tail_spans[0][1]))
            spans.extend(tail_spans[1:])
            if violated:
                spans.append((" ⚠ violation", style("trie-view--violation")))
            spans.append((f" [{words}]", style(change)))
            return spans
        spans.append((f"[{_clip(view.label(head_node.tokens), budget)}]", style(change)))
        spans.extend(tail_spans)
        if violated:
            spans.append((" ⚠ violation", style("trie-view--violation")))
        return spans

    def line_signature(self, index: int) -> Hashable | None:
        # What render_row and render_strip read for this line: the line's layout, its nodes'
        # rows (shared by consecutive snapshots, so equal rows compare at once), the step's
        # marks on them, the violation, the sub-step's focus, the selection and the cursor.
        view = self.view
        if view is None or index >= len(self._rows):
            return ("blank",)
        row = self._rows[index]
        line = row.data
        marks = self.row_marks(row)
        if not isinstance(line, TrieLine):  # the root's counts, or the base cache's note
            return (line, view.snapshot.kind, self._counts(view), marks)
        lookup = view.previous_node if line.ghost else view.node
        nodes = tuple(lookup(n) for n in line.chain)
        added, touched, ref_changes = self._added, self._touched, self._ref_changes
        violations = view.violations
        violated = bool(violations) and (any(n in violations.nodes for n in line.chain)
                                         or any(node is not None and node.page in violations.pages for node in nodes))
        return (line, nodes, tuple((n in added, n in touched, ref_changes.get(n)) for n in line.chain), violated,
                marks)

    def _counts(self, view: FrameView) -> tuple[int, int]:
        """(nodes, referenced nodes) of ``view``'s trie, counted once per view."""
        cached = self._counted
        if cached is None or cached[0] is not view.snapshot:
            snap = view.snapshot
            cached = self._counted = (snap, (len(snap.nodes) - 1,
                                             sum(1 for n in snap.nodes if n.parent is not None and n.ref)))
        return cached[1]

    def is_linked(self, item: Hashable) -> bool:
        return self.view is not None and item in self.view.highlight.nodes

    def selected_message(self, item: Hashable) -> Message | None:
        return self.NodeSelected(self, item)

    def is_focus(self, row: Row) -> bool:
        nodes = self.view.focus.nodes
        return isinstance(row.data, TrieLine) and any(n in nodes for n in row.data.chain)

    def focus_row(self) -> int | None:
        if self.view is None or not self.view.focus.nodes:
            return None
        rows = [self._node_row[n] for n in self.view.focus.nodes if n in self._node_row]
        return min(rows) if rows else None

    def changed_rows(self) -> list[int]:
        """The rows of the nodes this step added, evicted (their ghost rows) or touched."""
        if self.view is None or self.view.previous is None:
            return []
        diff = self.view.frame.diff
        nodes = set(diff.nodes_added) | set(diff.nodes_evicted) | {node for node, _, _ in diff.ref_changes}
        return sorted(self._node_row[node] for node in nodes if node in self._node_row)

    def follow(self) -> bool:
        """Put the cursor on the row showing a linked node (also inside a compressed chain);
        True when there was one."""
        if self.view is None or not self.view.highlight.nodes:
            return False
        nodes = self.view.highlight.nodes
        if self.cursor in nodes and self.cursor in self._item_row:
            self._scroll_to_item(self.cursor)
            return True
        for row in self._rows:
            if isinstance(row.data, TrieLine) and any(n in nodes for n in row.data.chain):
                self.cursor = row.item
                self._scroll_to_item(row.item)
                return True
        return False

    # -- actions -------------------------------------------------------------------------

    def action_toggle_fold(self) -> None:
        """Fold or unfold the subtree under the cursor."""
        row_index = self._item_row.get(self.cursor)
        if row_index is None:
            return
        tail = self._rows[row_index].data.chain[-1]
        if tail in self.folded:
            self.folded.discard(tail)
        else:
            self.folded.add(tail)
        self._rebuild()

    def action_toggle_chains(self) -> None:
        """Compress (or expand) chains of single-child nodes into one row."""
        current = self.compress
        if current is None:
            current = self.view is not None and len(self.view.snapshot.nodes) - 1 > COMPRESS_ABOVE
        self.compress = not current
        self._rebuild()
        self.notify("chains compressed" if self.compress else "chains expanded", timeout=2)


def _span(low: int, high: int) -> str:
    """``3`` or ``1…3``: one value or a range (low first)."""
    return f"{low}" if low == high else f"{low}…{high}"


def _pages(nodes) -> str:
    """The pages a chain really holds, in path order, runs of consecutive pages as ranges
    (``p0-4,6``: page 5 is not in the chain)."""
    parts: list[str] = []
    pages = [node.page for node in nodes]
    start = 0
    for i in range(1, len(pages) + 1):
        if i == len(pages) or pages[i] != pages[i - 1] + 1:
            run = pages[start:i]
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
            start = i
    if len(parts) > 6:
        parts = [*parts[:4], "…", parts[-1]]
    return "p" + ",".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def _subtree_sizes(children: dict[int, list[int]], wanted: set[int]) -> dict[int, int]:
    """Number of descendants of each node in ``wanted`` (iterative post-order)."""
    sizes: dict[int, int] = {}
    for top in wanted:
        count = 0
        stack = list(children.get(top, ()))
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(children.get(node, ()))
        sizes[top] = count
    return sizes
