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
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from kvcore import events as ev

from kvviz.core.policy_words import key_fields  # noqa: F401 - re-exported: the heap view names its key by it
from kvviz.core.vocab import Vocabulary
from kvviz.core.why import Answer, page_status, why_evicted, why_short_match
from kvviz.core import pseudocode
from kvviz.core.designs import design_of
from kvviz.core.snapshot_diff import diff_snapshots
from kvviz.core.substeps import Focus, SubStep

if TYPE_CHECKING:  # pragma: no cover
    from kvcore import Snapshot

    from kvviz.core.session import Frame, Session

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
    slots: frozenset[int] = frozenset()  # heap array indices (a sub-step's focus: the two slots of a swap)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.pages or self.allocations or self.slots)


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
    substep: "SubStepView | None" = None
    focus: Highlight = NO_HIGHLIGHT

    @property
    def snapshot(self) -> "Snapshot":
        """The state after the frame's op (stepped into the op: after the sub-step shown)."""
        return self.frame.snapshot

    @property
    def position(self) -> tuple[int, int]:
        """Where on the timeline this view is: (frame index, sub-step index), -1 for the whole step."""
        return self.frame.index, self.substep.step.index if self.substep is not None else -1

    def label(self, tokens, limit: int | None = None) -> str:
        """Tokens as words where the scenario used words."""
        return self.labels(tokens, limit)

    def node(self, node_id: int):
        """The node with this id in :attr:`snapshot`, or None. A plain id map built once per
        view (20 times cheaper than the snapshot's full index, which a sub-step's fresh
        snapshot would build for the few rows on screen)."""
        return self._node_maps[0].get(node_id)

    def previous_node(self, node_id: int):
        """The node with this id in :attr:`previous` (a ghost row's), or None."""
        return self._node_maps[1].get(node_id)

    @cached_property
    def _node_maps(self) -> tuple[dict, dict]:
        previous = self.previous
        return ({n.id: n for n in self.snapshot.nodes},
                {n.id: n for n in previous.nodes} if previous is not None else {})


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
    substep: tuple[int, int, str] | None = None  # stepped into the op: (sub-step index, count, kind)
    marks_until: int | None = None
    """The last step whose mark the track shows (None: all). While a quiz question is asked,
    the steps after the one shown are unmarked: a ✗ or ▾ ahead would answer "Will it fail?"."""

    @property
    def last_step(self) -> int:
        """Index of the newest step."""
        return len(self.summaries) - 1


def heap_name(snapshot) -> str:
    """The heap named after the snapshot's eviction policy: "LRU heap", "LFU heap", "Priority heap"."""
    policy = getattr(snapshot, "policy", "lru")
    return f"{policy.upper() if len(policy) <= 4 else policy.capitalize()} heap"


def node_key_text(snapshot, node) -> str:
    """``node``'s eviction key under the snapshot's policy, compact: "(26,4)"."""
    return "(" + ",".join(map(str, snapshot.node_key(node))) + ")"


def heap_title(snapshot) -> str:
    """The heap pane's title, saying what it counts: candidates (childless ref-0 nodes, as
    the pane's first line says), fewer than the pool's evictable pages when a ref-0 chain
    waits behind its leaf: "LRU heap · 1 candidate of 5 evictable"."""
    if not design_of(snapshot).tree:  # no candidates to count (the base cache)
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


def later_neighbour(old: FrameView | None, new: FrameView) -> FrameView | None:
    """The later of ``old`` and ``new`` when they are neighbours on the same timeline (two
    whole steps one apart, or two sub-steps of one op one apart), else None: its diff is then
    exactly what changed between the two, so a view may repaint only that."""
    if old is None or old.revision != new.revision:
        return None
    (a_frame, a_sub), (b_frame, b_sub) = old.position, new.position
    if (a_sub < 0) != (b_sub < 0):
        return None
    if a_sub < 0 and abs(a_frame - b_frame) == 1:
        return old if a_frame > b_frame else new
    if a_sub >= 0 and a_frame == b_frame and abs(a_sub - b_sub) == 1:
        return old if a_sub > b_sub else new
    return None


def same_shape(old: FrameView | None, new: FrameView) -> bool:
    """True when ``new`` is a neighbour of ``old`` (:func:`later_neighbour`) with the same set
    of trie nodes and no ghost rows in either: a trie view can keep its rows."""
    later = later_neighbour(old, new)
    if later is None:
        return False
    a, b = old.frame, new.frame
    return not (later.frame.diff.nodes_added or later.frame.diff.nodes_evicted
                or a.diff.nodes_evicted or b.diff.nodes_evicted)


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


# -- inside an op: the sub-step shown -------------------------------------------------------

@dataclass(frozen=True)
class CodeView:
    """One algorithm's pseudo-code as a code pane draws it: a ``title``, the ``lines`` of
    text, the 1-based line numbers lit (``current``: what the sub-step shown runs; several
    when it spans them) and ``differs``: the lines that differ from the variant beside it
    (a bug-museum demo's buggy code beside ours)."""

    title: str
    lines: tuple[str, ...]
    current: frozenset[int] = frozenset()
    differs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class SubStepView:
    """Where the views are inside an op: the sub-step shown (``step``), how many the op has
    (``count``), a few of its neighbours for the narration's list (``nearby``), what these
    sub-steps can show (``note``) and where they come from (``source``: ``"events"``, every
    move kvcore made; ``"calls"``, a foreign cache observed between its calls), and the
    code panes' values (``code``: ours; ``buggy``: the bug-museum variant; None when not
    shown)."""

    step: SubStep
    count: int
    nearby: tuple[SubStep, ...] = ()
    note: str = ""
    source: str = "events"
    code: CodeView | None = None
    buggy: CodeView | None = None

    @property
    def label(self) -> str:
        """The position in the op, as the timeline bar shows it: "3/12 pop" (1-based)."""
        return f"{self.step.index + 1}/{self.count} {self.step.kind}"


NEARBY_BEFORE, NEARBY_AFTER = 2, 8
"""How many sub-steps before and after the one shown the narration lists (a window, so an op
with 1,500 sub-steps costs the same to narrate as one with 10)."""


def nearby(steps, index: int) -> tuple[SubStep, ...]:
    """The sub-steps around ``index`` that the narration lists."""
    return tuple(steps[max(0, index - NEARBY_BEFORE): index + NEARBY_AFTER + 1])


def substep_frame(frame: "Frame", before: "Snapshot", state: "Snapshot", step: SubStep) -> "Frame":
    """``frame`` as it stood right after sub-step ``step`` of its op, for the views: kvcore's
    ``state`` after the sub-step, the diff from ``before`` (the state after the sub-step
    before it, so the marks say what this one changed) and the sub-step's sentence as the
    explanation. No events, violations or expects: mid-op the invariants need not hold yet (a
    victim's parent joins the heap one sub-step before the victim leaves the trie), so they
    are checked, and shown, on whole steps only."""
    failed = step.kind in ("fail", "refused")
    return replace(frame, snapshot=state, diff=diff_snapshots(before, state), events=(),
                               explanation=step.sentence, violations=(), expects=(),
                               error=frame.error if failed else None)


def focus_highlight(focus: Focus, snapshot: "Snapshot", previous: "Snapshot | None" = None) -> Highlight:
    """What a sub-step's :class:`~kvviz.core.substeps.Focus` marks in the views: its nodes,
    pages and heap slots, and its allocation (a name) as the id ``snapshot`` (or, for one just
    released, ``previous``) gives it."""
    allocations: frozenset[int] = frozenset()
    if focus.allocation is not None:
        for snap in (snapshot, previous):
            found = next((a.id for a in snap.allocations if a.label == focus.allocation), None) if snap else None
            if found is not None:
                allocations = frozenset({found})
                break
    return Highlight(frozenset(focus.nodes), frozenset(focus.pages), allocations, frozenset(focus.slots))


def code_views(step: SubStep, op_kind: str, cache_kind: str, demo: str | None = None,
               buggy: bool = False) -> tuple[CodeView | None, CodeView | None]:
    """The code panes' values for sub-step ``step`` of an ``op_kind`` op: ours (the
    algorithm that produced it, its lines lit; an eviction's title names the line of the op
    that called it) and, when ``buggy`` and ``demo`` is a bug-museum demo with a buggy
    variant (:func:`kvviz.core.pseudocode.buggy_variant`), the buggy code beside it, the
    lines where the two differ marked on both sides. None for what there is none of."""
    code = pseudocode.code_for(cache_kind, step.code)  # a backend's own code, or the design's
    algorithm = code.algorithms.get(step.algorithm) if code is not None else None
    if algorithm is None:
        return None, None
    lit = frozenset(step.lines)
    title = algorithm.title
    caller = code.caller(op_kind, algorithm.name)
    if caller is not None and caller[1]:  # "evict ← acquire line 24: pop the heap's ...": the call stack
        outer, line = caller[0], caller[1][0]
        name, _, what = title.partition(": ")
        title = f"{name} ← {outer} line {line}: {what}" if what else f"{title} ← {outer} line {line}"
    variant = pseudocode.buggy_variant(demo) if buggy and demo else None
    if variant is None:
        return CodeView(title, algorithm.texts(), lit), None
    same = variant.algorithm == algorithm.name
    ours = CodeView(title, algorithm.texts(), lit, frozenset(variant.ours_differ) if same else frozenset())
    where = "" if same else f" (in {variant.algorithm}; this sub-step runs {algorithm.name})"
    theirs = CodeView(f"{variant.bug}, buggy: {variant.description}{where}", variant.theirs,
                      lit if same else frozenset(), frozenset(variant.theirs_differ))
    return ours, theirs
