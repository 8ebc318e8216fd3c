"""The why panel: answers "why was this page evicted?" and "why did this request match
only k pages?" for the selection, from the model's why-queries.

Which question fits the selection is decided by :func:`answer_for` (no widget code): a
page asks why it was evicted, an allocation why its acquire matched what it matched, a
node about its eviction status; with nothing selected, the step's first eviction or
acquire is explained.
"""

from __future__ import annotations

from kvcore import events as ev

from ...model.why import Answer, why_evicted, why_short_match
from ...model.view import ALLOCATION, NODE, PAGE, FrameView, literal
from .line_view import MarkupView

HINT = Answer("Why?", ("Select an evicted page (✗ in the pool) or an allocation, then ask again.",
                      "With nothing selected, the step's first eviction or acquire is explained."))


def answer_for(view: FrameView) -> Answer:
    """The why-answer that fits the selection (or the step) in ``view``."""
    session, frame, selection = view.session, view.frame, view.selection
    index = frame.index
    if selection is None:
        if frame.evictions:
            return why_evicted(session, index, frame.evictions[0].page)
        if frame.op is not None and frame.op.kind == "acquire":
            return why_short_match(session, index, frame.op.name)
        return HINT
    if selection.kind == PAGE:
        return why_evicted(session, index, selection.id)
    if selection.kind == ALLOCATION:
        info = view.snapshot.allocation(selection.id)
        if info is None and view.previous is not None:
            info = view.previous.allocation(selection.id)
        if info is None:
            return Answer(f"Allocation #{selection.id} is not live at step {index}.", ())
        return why_short_match(session, index, info.label)
    if selection.kind == NODE:
        return _node_answer(view, selection.id)
    return HINT  # pragma: no cover


def _node_answer(view: FrameView, node_id: int) -> Answer:
    snap = view.snapshot
    node = snap.node(node_id)
    session = view.session
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
    holders = [a.label for a in snap.allocations if node.page in a.pages[: a.published]]
    title = f"Is node {node_id} (page {node.page}) safe from eviction? (step {index})"
    if node.ref:
        return Answer(title, (f"Yes: ref {node.ref}. It is on the published path of {', '.join(holders)}; "
                              "referenced nodes are never evicted.",), index, (node.page,), (node_id,))
    if node_id in snap.heap:
        position = snap.heap.index(node_id)
        ahead = sum(1 for other in snap.heap if snap.node(other).key < node.key)
        lines = [f"No: ref 0 and no children, so it is an eviction candidate with key {node.key}.",
                 f"It sits at heap index {position}; {ahead} candidate(s) have older keys and go first."]
        if ahead == 0:
            lines.append("It is the next victim: the next acquire that runs out of free pages takes its page.")
        return Answer(title, tuple(lines), index, (node.page,), (node_id,))
    children = snap.children(node_id)
    return Answer(title, (f"For now: ref 0, but it has {len(children)} child node(s). Only leaves are evicted; "
                          "it becomes a candidate when its children are gone.",), index, (node.page,), (node_id,))


def answer_markup(answer: Answer) -> str:
    """An answer as Textual markup."""
    lines = [f"[b]{literal(answer.title)}[/b]"]
    for line in answer.lines:
        style = "$kv-evicted" if "<- evicted" in line else ""
        text = literal(line)
        lines.append(f"[{style}]{text}[/]" if style else text)
    return "\n".join(lines)


class WhyPanel(MarkupView):
    """Shows the why-answer for the current selection (see the module doc)."""

    def markup(self, view: FrameView) -> str:
        return answer_markup(answer_for(view))
