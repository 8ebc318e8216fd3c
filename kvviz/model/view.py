# SPDX-License-Identifier: Apache-2.0
"""What every view renders: one frame, what is selected, and what a broken invariant names.

Pure values and functions (no Textual), so the linking rules are unit-testable: selecting a
node, a page or an allocation highlights the related items of every kind.

The app owns the session; widgets get only the frozen values made here (memray's recipe:
the screen renders one frozen snapshot and nothing else). A :class:`FrameView` carries the
frame, a frozen copy of the vocabulary (:class:`TokenLabels`), the timeline's length and,
when the why panel is open, the why-answer the app computed (:func:`answer_for`): a
widget never calls into the session, whose ``frame()`` moves its cache and replay position.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvcore import events as ev

from .policy_words import key_fields  # noqa: F401 - re-exported: the heap view names its key by it
from .vocab import Vocabulary
from .why import Answer, page_status, why_evicted, why_short_match

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


class TokenLabels:
    """How the views spell tokens: a private copy of a scenario's vocabulary, taken when the
    timeline last changed, so later parsing (the command bar learns new words) cannot change
    what a view already holds. O(spellings) to take."""

    __slots__ = ("_vocab",)

    def __init__(self, vocab: Vocabulary | None = None) -> None:
        self._vocab = copy.deepcopy(vocab) if vocab is not None else Vocabulary()

    def __call__(self, tokens, limit: int | None = None) -> str:
        """Tokens as words where the scenario spelled words, else integers (see
        :meth:`Vocabulary.label_tokens`)."""
        return self._vocab.label_tokens(tokens, limit)

    def __repr__(self) -> str:
        return f"TokenLabels({self._vocab!r})"


NO_LABELS = TokenLabels()


@dataclass(frozen=True)
class FrameView:
    """One frame as the views see it: frozen values only, never the session.

    ``previous`` is the snapshot of the frame before, present only when the step removed
    something (evicted nodes, released allocations, heap entries), which the views show as
    red "ghost" rows for that step. ``last_step`` is the index of the timeline's newest
    frame; ``why`` the why-answer for the selection, when the app was asked for one.
    """

    frame: "Frame"
    labels: TokenLabels = NO_LABELS
    highlight: Highlight = NO_HIGHLIGHT
    violations: Highlight = NO_HIGHLIGHT
    previous: "Snapshot | None" = None
    selection: Selection | None = field(default=None)
    revision: int = 0  # changes whenever the timeline itself does (a branch, a new session)
    last_step: int = 0
    why: Answer | None = None

    @property
    def snapshot(self) -> "Snapshot":
        """The state after the frame's op."""
        return self.frame.snapshot

    def label(self, tokens, limit: int | None = None) -> str:
        """Tokens as words where the scenario used words."""
        return self.labels(tokens, limit)


@dataclass(frozen=True)
class TimelineView:
    """What the timeline bar draws: every step's summary (a frozen tuple the app refreshes
    when the timeline changes), the step shown, the play state and the session's title.

    ``revision`` changes whenever the timeline itself does, so the bar knows when its
    track must be laid out again.
    """

    summaries: tuple = ()
    step: int = 0
    playing: bool = False
    speed: float = 1.0
    title: str = ""
    revision: int = 0

    @property
    def last_step(self) -> int:
        """Index of the newest step."""
        return len(self.summaries) - 1


def heap_name(snapshot) -> str:
    """The heap named after the snapshot's eviction policy: "LRU heap", "LFU heap", "Priority heap"."""
    policy = getattr(snapshot, "policy", "lru")
    return f"{policy.upper() if len(policy) <= 4 else policy.capitalize()} heap"


def key_text(snapshot, node) -> str:
    """``node``'s eviction key under the snapshot's policy, compact: "(26,4)"."""
    return "(" + ",".join(map(str, snapshot.node_key(node))) + ")"


def heap_title(snapshot) -> str:
    """The heap pane's title, saying what it counts: candidates (childless ref-0 nodes, as
    the pane's first line says), fewer than the pool's evictable pages when a ref-0 chain
    waits behind its leaf: "LRU heap · 1 candidate of 5 evictable"."""
    if snapshot.kind == "base":
        return "LRU heap"
    candidates = len(snapshot.heap)
    evictable = snapshot.evictable_count  # over nodes: a frame of a huge pool must not walk its pages
    title = f"{heap_name(snapshot)} · {candidates} candidate{'s' if candidates != 1 else ''}"
    if evictable != candidates:
        title += f" of {evictable} evictable"
    return title


def literal(text: str) -> str:
    """``text`` safe inside Textual markup: every ``[`` escaped.

    (``textual.markup.escape`` escapes only brackets that look like tags, so a token list
    such as ``[1 2 3 4]`` or a lone ``[`` would still be read as markup.)
    """
    return text.replace("[", "\\[")


def same_shape(old: FrameView | None, new: FrameView) -> bool:
    """True when ``new`` is a neighbour of ``old`` on the same timeline with the same set of
    trie nodes and no ghost rows in either: a trie view can keep its rows."""
    if old is None or old.revision != new.revision:
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


# -- the why panel's question ---------------------------------------------------------------

WHY_HINT = Answer("Why?", ("Select an evicted page (✗ in the pool) or an allocation, then ask again.",
                           "With nothing selected, the step's first eviction or acquire is explained."))
"""What the why panel says when nothing fits the question."""


def answer_for(session: "Session", view: FrameView) -> Answer:
    """The why-answer that fits the selection (or the step) in ``view``; the app calls this
    (it reads other frames of ``session``) and hands the answer down in ``FrameView.why``.

    A page asks why it was evicted, an allocation why its acquire matched what it matched,
    a node about its eviction status; with nothing selected, the step's first eviction or
    acquire is explained.
    """
    frame, selection = view.frame, view.selection
    index = frame.index
    if selection is None:
        if frame.evictions:
            return why_evicted(session, index, frame.evictions[0].page)
        if frame.op is not None and frame.op.kind == "acquire":
            return why_short_match(session, index, frame.op.name)
        return WHY_HINT
    if selection.kind == PAGE:  # evicted: why; else where it is and what protects it
        return why_evicted(session, index, selection.id)
    if selection.kind == ALLOCATION:
        info = view.snapshot.allocation(selection.id)
        if info is None and view.previous is not None:
            info = view.previous.allocation(selection.id)
        if info is None:
            return Answer(f"Allocation #{selection.id} is not live at step {index}.", ())
        return why_short_match(session, index, info.label)
    if selection.kind == NODE:
        return _node_answer(session, view, selection.id)
    return WHY_HINT  # pragma: no cover


def _node_answer(session: "Session", view: FrameView, node_id: int) -> Answer:
    snap = view.snapshot
    node = snap.node(node_id)
    index = view.frame.index
    if node is None:
        step = session.why_index.node_evicted_at.get(node_id)
        if step is not None and step <= index:
            page = next((e.page for e in session.frame(step).events
                         if isinstance(e, ev.Evicted) and e.node == node_id), None)
            if page is not None:
                return why_evicted(session, index, page)
        return Answer(f"Node {node_id} is not in the trie at step {index}.", ())
    if node.parent is None:
        return Answer("The root holds no page and is never evicted.", ())
    return page_status(session, index, node.page)
