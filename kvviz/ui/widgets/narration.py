"""Narration and event log of the current step: the script's story, the generated
explanation, the error of a failed op, invariant violations and ``expect`` results (in red
when they fail), then every event the cache reported, in order.
"""

from __future__ import annotations

from kvcore import events as ev

from ...model.view import FrameView, literal, plural
from .line_view import MarkupView


def describe_event(event, label) -> str:
    """One line for one kvcore event; ``label`` turns tokens into words."""
    if isinstance(event, ev.OpStarted):
        return f"{event.op} (allocation #{event.allocation}) at tick {event.tick}"
    if isinstance(event, ev.Matched):
        return (f"matched {plural(len(event.nodes), 'node')} {list(event.nodes)} (pages {list(event.pages)}): "
                f"{event.matched_tokens} of {plural(event.total_tokens, 'token')} ({event.reason})")
    if isinstance(event, ev.RefTaken):
        return f"ref +1 on node {event.node} (page {event.page}) → {event.ref}"
    if isinstance(event, ev.RefDropped):
        return f"ref -1 on node {event.node} (page {event.page}) → {event.ref}"
    if isinstance(event, ev.Touched):
        return f"touched {plural(len(event.nodes), 'node')} {list(event.nodes)}: last_access = {event.tick}"
    if isinstance(event, ev.CandidateAdded):
        return f"heap + node {event.node} (page {event.page}) key {event.key}"
    if isinstance(event, ev.CandidateRemoved):
        return f"heap - node {event.node} (page {event.page}): {event.reason}"
    if isinstance(event, ev.PagesTaken):
        return f"took pages {list(event.pages)} from the free list"
    if isinstance(event, ev.Evicted):
        return f"evicted node {event.node} page {event.page} [{label(event.tokens)}] key {event.key}"
    if isinstance(event, ev.NodeCreated):
        return f"new node {event.node} under {event.parent}: page {event.page} [{label(event.tokens)}]"
    if isinstance(event, ev.Deduplicated):
        return (f"dedup: block {event.index} already cached as node {event.node}; adopted page {event.page}, "
                f"freed own page {event.own_page}")
    if isinstance(event, ev.PagesFreed):
        return f"freed pages {list(event.pages)} ({event.reason})"
    if isinstance(event, ev.Released):
        return f"allocation #{event.allocation} released"
    return repr(event)  # pragma: no cover - a new event type


def narration_markup(view: FrameView) -> str:
    """The panel's content as Textual markup (colours through theme variables)."""
    frame = view.frame
    total = view.last_step
    lines = []
    head = f"[b]Step {frame.index}/{total}[/b]"
    if frame.op is not None:
        head += f" · [b]{literal(frame.op.text)}[/b]"
    else:
        head += " · start"
    if frame.error is not None:
        head += f"  [b $error]FAILED ({literal(frame.error.kind)})[/]"
    if frame.violations:
        head += f"  [b $kv-violation]{plural(len(frame.violations), 'VIOLATION', 'VIOLATIONS')}[/]"
    lines.append(head)
    if frame.story:
        lines.extend(f"[i]{literal(paragraph)}[/i]" for paragraph in frame.story.split("\n"))
    lines.append(literal(frame.explanation))
    for violation in frame.violations:
        lines.append(f"[b $kv-violation]⚠ {literal(str(violation))}[/]")
    for result in frame.expects:
        text = literal(result.expect.text or "expect")
        if result.ok:
            lines.append(f"[$success]✓ {text}[/]")
        else:
            lines.append(f"[b $error]✗ {text}: {literal(result.message)}[/]")
    if frame.events:
        lines.append("[$kv-muted]── events ──[/]")
        label = view.labels
        for event in frame.events:
            style = "$kv-evicted" if isinstance(event, ev.Evicted) else "$kv-muted"
            lines.append(f"[{style}]{literal(describe_event(event, label))}[/]")
    return "\n".join(lines)


class Narration(MarkupView):
    """Narration and event log (see the module doc)."""

    def markup(self, view: FrameView) -> str:
        return narration_markup(view)
