# SPDX-License-Identifier: Apache-2.0
"""Narration and event log of the current step: the script's story, the generated
explanation, the error of a failed op, invariant violations and ``expect`` results (in red
when they fail), then every event the cache reported, in order (one line each, from
:func:`kvviz.model.narrate.describe_event`, which every event log shares).
"""

from __future__ import annotations

from kvcore import events as ev

from ...model.narrate import count, describe_event
from ...model.view import FrameView, literal
from .line_view import MarkupView


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
        head += f"  [b $kv-violation]{count(len(frame.violations), 'VIOLATION', 'VIOLATIONS')}[/]"
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
        tokens = frame.op.tokens if frame.op is not None else None
        for event in frame.events:
            style = "$kv-evicted" if isinstance(event, ev.Evicted) else "$kv-muted"
            line = describe_event(event, label, tokens, view.snapshot.tokens_per_page)
            lines.append(f"[{style}]{literal(line)}[/]")
    return "\n".join(lines)


class Narration(MarkupView):
    """Narration and event log (see the module doc)."""

    def markup(self, view: FrameView) -> str:
        return narration_markup(view)
