"""What every view renders: one frame, what is selected, and what a broken invariant names.

Pure values and functions (no Textual), so the linking rules are unit-testable: selecting a
node, a page or an allocation highlights the related items of every kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from kvcore import Snapshot

    from .session import Frame, Session

NODE, PAGE, ALLOCATION = "node", "page", "allocation"


@dataclass(frozen=True, slots=True)
class Selection:
    """The item the user chose: a trie node (also a heap entry), a page or an allocation."""

    kind: str
    id: int

    def describe(self) -> str:
        """'node 5', 'page 3', 'allocation 2'."""
        return f"{self.kind} {self.id}"


@dataclass(frozen=True, slots=True)
class Highlight:
    """Items to mark in every view: the selection and everything linked to it."""

    nodes: frozenset[int] = frozenset()
    pages: frozenset[int] = frozenset()
    allocations: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.pages or self.allocations)


NO_HIGHLIGHT = Highlight()


def highlight_for(selection: Selection | None, snapshot: "Snapshot") -> Highlight:
    """Everything linked to ``selection`` in ``snapshot``.

    - a node: its page and the allocations whose published path holds it;
    - a page: its node (if cached), and the allocations whose block table holds it;
    - an allocation: its pages and the nodes of its published pages.

    An item that does not exist in this snapshot (an evicted node, a released allocation)
    still highlights itself, so its ghost row in the step it vanished stays marked.
    """
    if selection is None:
        return NO_HIGHLIGHT
    if selection.kind == NODE:
        node = snapshot.node(selection.id)
        if node is None or node.page is None:
            return Highlight(nodes=frozenset({selection.id}))
        holders = frozenset(a.id for a in snapshot.allocations if node.page in a.pages[: a.published])
        return Highlight(frozenset({node.id}), frozenset({node.page}), holders)
    if selection.kind == PAGE:
        page = selection.id
        node = snapshot.node_for_page(page)
        holders = frozenset(a.id for a in snapshot.allocations if page in a.pages)
        return Highlight(frozenset({node.id}) if node is not None else frozenset(), frozenset({page}), holders)
    if selection.kind == ALLOCATION:
        allocation = snapshot.allocation(selection.id)
        if allocation is None:
            return Highlight(allocations=frozenset({selection.id}))
        published = set(allocation.pages[: allocation.published])
        nodes = frozenset(n.id for n in snapshot.nodes if n.page is not None and n.page in published)
        return Highlight(nodes, frozenset(allocation.pages), frozenset({allocation.id}))
    raise ValueError(f"unknown selection kind {selection.kind!r} (expected node, page or allocation)")


def violation_marks(frame: "Frame") -> Highlight:
    """The pages, nodes and allocations the frame's invariant violations name."""
    if not frame.violations:
        return NO_HIGHLIGHT
    return Highlight(
        frozenset(n for v in frame.violations for n in v.nodes),
        frozenset(p for v in frame.violations for p in v.pages),
        frozenset(a for v in frame.violations for a in v.allocations),
    )


@dataclass(frozen=True)
class FrameView:
    """One frame as the views see it.

    ``previous`` is the snapshot of the frame before, present only when the step removed
    something (evicted nodes, released allocations, heap entries), which the views show as
    red "ghost" rows for that step.
    """

    frame: "Frame"
    session: "Session"
    highlight: Highlight = NO_HIGHLIGHT
    violations: Highlight = NO_HIGHLIGHT
    previous: "Snapshot | None" = None
    selection: Selection | None = field(default=None)
    revision: int = 0  # changes whenever the timeline itself does (a branch, a new session)

    @property
    def snapshot(self) -> "Snapshot":
        """The state after the frame's op."""
        return self.frame.snapshot

    def label(self, tokens, limit: int | None = None) -> str:
        """Tokens as words where the scenario used words."""
        return self.session.vocab.label_tokens(tokens, limit)


def literal(text: str) -> str:
    """``text`` safe inside Textual markup: every ``[`` escaped.

    (``textual.markup.escape`` escapes only brackets that look like tags, so a token list
    such as ``[1 2 3 4]`` or a lone ``[`` would still be read as markup.)
    """
    return text.replace("[", "\\[")


def same_shape(old: FrameView | None, new: FrameView) -> bool:
    """True when ``new`` is a neighbour of ``old`` on the same timeline with the same set of
    trie nodes and no ghost rows in either: a trie view can keep its rows."""
    if old is None or old.session is not new.session or old.revision != new.revision:
        return False
    a, b = old.frame, new.frame
    if abs(a.index - b.index) != 1:
        return False
    later = a if a.index > b.index else b
    return not (later.diff.nodes_added or later.diff.nodes_evicted or a.diff.nodes_evicted or b.diff.nodes_evicted)


def needs_previous(frame: "Frame") -> bool:
    """True when the frame removed something the views show as a ghost row."""
    diff = frame.diff
    return bool(diff.nodes_evicted or diff.allocations_released or diff.heap_removed)
