# SPDX-License-Identifier: Apache-2.0
"""Narration and event log of the current step: the script's story, the generated
explanation, the error of a failed op, invariant violations and ``expect`` results (in red
when they fail), then every event the cache reported, in order (one line each, from
:func:`kvviz.core.narrate.describe_event`, which every event log shares).

Stepped into an op, it tells the sub-step shown instead, among its neighbours.
"""

from __future__ import annotations

from textual.content import Content


from kvviz.core.narrate import TOKENS, Units, count, describe_event, evicts
from kvviz.core.view import FrameView, literal
from kvviz.ui.widgets.line_view import MarkupView, Row

BLANK = Content("")
"""An empty line (the sub-step list is padded to the pane with these)."""


def narration_markup(view: FrameView, units: Units = TOKENS) -> str:
    """The panel's content as Textual markup (colours through theme variables); ``units``:
    what one kvcore token stands for (a converted trace's blocks)."""
    if view.substep is not None:
        return substep_markup(view)
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
            style = "$kv-evicted" if evicts(event) else "$kv-muted"  # a trie eviction and a hash one alike
            line = describe_event(event, label, tokens, view.snapshot.tokens_per_page, units)
            lines.append(f"[{style}]{literal(line)}[/]")
    return "\n".join(lines)


def substep_markup(view: FrameView, width: int | None = None) -> str:
    """Stepped into an op: the sub-step's sentence, what these sub-steps can show (for a
    foreign cache observed between its calls), and the sub-steps around it, the one shown
    marked ▶, one line each (cut at ``width`` cells, so the list keeps its shape)."""
    frame, sub = view.frame, view.substep
    lines = [f"[b]Step {frame.index}/{view.last_step}[/b] · [b]{literal(frame.op.text)}[/b] · "
             f"[b $accent]sub-step {literal(sub.label)}[/]"]
    lines.append(f"[b]{literal(sub.step.sentence)}[/b]")
    if sub.source != "events":
        lines.append(f"[i $warning]{literal(sub.note)}[/]")
    lines.append(f"[$kv-muted]{literal('── sub-steps (→ next · ← back · ] [ notable · o whole step) ──')}[/]")
    current = sub.step.index
    if sub.nearby and sub.nearby[0].index > 0:
        lines.append(f"[$kv-muted]  … {count(sub.nearby[0].index, 'earlier sub-step')}[/]")
    for step in sub.nearby:
        text = f"{step.index + 1:>3} {step.kind:<11} {step.sentence}"
        if width is not None and len(text) > width - 1:
            text = text[: max(1, width - 2)] + "…"
        if step.index == current:
            lines.append(f"[b $accent]▶{literal(text)}[/]")
        elif step.index < current:
            lines.append(f"[$kv-muted] {literal(text)}[/]")
        else:
            lines.append(f" {literal(text)}")
    left = sub.count - 1 - (sub.nearby[-1].index if sub.nearby else current)
    if left > 0:
        lines.append(f"[$kv-muted]  … {count(left, 'more sub-step')}[/]")
    return "\n".join(lines)


class Narration(MarkupView):
    """Narration and event log (see the module doc)."""

    units: Units = TOKENS
    """What one token of the session stands for (the app sets it with the session: frozen)."""

    def markup(self, view: FrameView) -> str:
        if view.substep is not None:
            return substep_markup(view, self.layout_width())
        return narration_markup(view, self.units)

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        if view.substep is None:
            return super().build_rows(view, width)
        # Inside an op the list of sub-steps is a window anyway: it is fitted to the pane, so
        # its length does not change from one sub-step to the next (each change of a
        # scrolling view's height is a layout refresh of the whole screen) and no scrollbar
        # takes a column (one wrap, at the full width).
        # Each markup line is parsed and wrapped once (its tags open and close on it, so
        # line by line is the whole text's wrap): a sub-step's list is last one's moved by
        # a line, with three or four lines new.
        wrap = max(1, width + self.scrollbar_size_vertical)
        height = max(1, self.scrollable_content_region.height)
        kept = self._wrapped if self._wrapped_at == wrap else {}
        fresh: dict[str, tuple[str, list[Content]]] = {}
        plain, lines = [], []
        for markup in self.markup(view).split("\n"):
            found = fresh.get(markup) or kept.get(markup)
            if found is None:
                content = Content.from_markup(markup)
                found = (content.plain, content.wrap(wrap))
            fresh[markup] = found
            plain.append(found[0])
            lines.extend(found[1])
        self._wrapped, self._wrapped_at = fresh, wrap
        self.text = "\n".join(plain)
        lines = lines[:height]
        return [Row(None, line) for line in lines] + [Row(None, BLANK)] * (height - len(lines))

    _wrapped: dict = {}
    _wrapped_at = 0
