# SPDX-License-Identifier: Apache-2.0
"""The question panel of quiz mode: the question asked before a step, its lettered
choices, the hints asked for, then the feedback (right or wrong, the answer, where a wrong
answer parted from the cache, why) and the score.

While a question is asked the answer line has the focus: a choice letter, or the answer
typed in full (``10``, ``3 5``, ``none``), then enter; ``?`` enter shows the next hint, a
blank line skips, escape goes back to the views.

It draws the frozen :class:`~kvviz.explore.quiz_mode.QuizView` the app hands it, and posts
:class:`QuestionPanel.AnswerTyped` when a typed answer is entered; the app grades it.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from kvviz.core.limits import MAX_ANSWER_CHARS
from kvviz.core.view import literal
from kvviz.explore.quiz_mode import QUIZ_KEYS, REVEALED_KEYS, QuizView


def question_markup(view: QuizView) -> str:
    """The panel's text as Textual markup."""
    lines = [f"[b]{literal(view.score)}[/b]  [$kv-muted]{literal(view.status)}[/]"]
    question = view.question
    if question is not None:
        lines.append(f"[b $accent]{literal(question.spec.title)}[/]  {literal(question.text)}")
        if view.asking:
            lines.extend(f"  [b]{choice.label})[/b] {literal(choice.text)}" for choice in question.choices)
            if question.hides_order:
                lines.append("[$kv-muted]The heap is hidden until you answer: its top is the next victim.[/]")
            if view.hints:  # instead of the key line, which the footer repeats: the answer line stays in sight
                lines.extend(f"[$kv-touched]Hint {i} of {len(question.hints)}: {literal(hint)}[/]"
                             for i, hint in enumerate(view.hints, 1))
            else:
                lines.append(f"[$kv-muted]{literal(QUIZ_KEYS)}[/]")
        else:
            for i, line in enumerate(view.feedback):
                if i == 0:
                    style = "b $success" if line.startswith("Right") else "b $error" if line.startswith("Wrong") \
                        else "b $warning"
                    lines.append(f"[{style}]{literal(line)}[/]")
                else:
                    lines.append(literal(line))
            if view.parted is not None and view.parted.substep is not None:
                lines.append(f"[$kv-muted]{literal(REVEALED_KEYS)}[/]")
    return "\n".join(lines)


class AnswerInput(Input):
    """The typed-answer line; escape goes back to the views."""

    BINDINGS = [Binding("escape", "leave", "back to the views")]

    def action_leave(self) -> None:
        """Leave the answer line (what was typed stays)."""
        self.screen.focus_next()


class QuestionPanel(Vertical):
    """QuizRun mode's panel (see the module doc)."""

    class AnswerTyped(Message):
        """The learner entered ``text`` in the answer line."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def compose(self) -> ComposeResult:
        yield Static(id="question-text")
        yield AnswerInput(placeholder="a letter, or the answer: 4, 3 5, none · ? hint · enter", id="answer",
                          max_length=MAX_ANSWER_CHARS)

    def show(self, view: QuizView) -> None:
        """Draw ``view``; the answer line shows only while a question is asked."""
        self.query_one("#question-text", Static).update(question_markup(view))
        if self.is_attached:  # the heap's array order would give an eviction question away
            self.screen.set_class(view.asking and view.question.hides_order, "-order-hidden")
        answer = self.query_one("#answer", AnswerInput)
        answer.display = view.asking
        if not view.asking:
            answer.value = ""
        elif self.is_attached and not answer.has_focus:
            # At once, not queued: an answer given right after asking must find the focus
            # here to hand it back to the views. Letters are the screen's keys elsewhere.
            self.screen.set_focus(answer)

    @property
    def input(self) -> AnswerInput:
        """The typed-answer line."""
        return self.query_one("#answer", AnswerInput)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value
        if text.strip().lower() in ("?", "hint"):
            event.input.value = ""  # a hint asked for: the line is free for the answer
        self.post_message(self.AnswerTyped(text))
