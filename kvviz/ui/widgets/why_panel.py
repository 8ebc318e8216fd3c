# SPDX-License-Identifier: Apache-2.0
"""The why panel: answers "why was this page evicted?" and "why did this request match
only k pages?" for the selection.

The app asks the question (:func:`kvviz.core.view.answer_for`, which reads other frames of
the session) and hands the frozen :class:`~kvviz.core.why.Answer` down in
``FrameView.why``; the panel only draws it.
"""

from __future__ import annotations

from kvviz.core.view import WHY_HINT, FrameView, literal
from kvviz.core.why import Answer
from kvviz.ui.widgets.line_view import MarkupView


def answer_markup(answer: Answer) -> str:
    """An answer as Textual markup."""
    lines = [f"[b]{literal(answer.title)}[/b]"]
    for line in answer.lines:
        style = "$kv-evicted" if "<- evicted" in line else ""
        text = literal(line)
        lines.append(f"[{style}]{text}[/]" if style else text)
    return "\n".join(lines)


class WhyPanel(MarkupView):
    """Shows the why-answer the app computed for the current selection (see the module doc).

    Component classes: those of :class:`~kvviz.ui.widgets.line_view.LineView` (the answer's
    colours come from theme variables in its markup).
    """

    def markup(self, view: FrameView) -> str:
        return answer_markup(view.why if view.why is not None else WHY_HINT)
