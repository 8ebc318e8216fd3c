# SPDX-License-Identifier: Apache-2.0
"""The move panel of a perform-the-op exercise: the move asked, its lettered choices (a
selection list: keys, arrows and enter, or a click), what the last answer got and what
kvcore did.

| Class | Description |
| :- | :- |
| `move-panel--right` | The line of a right move. |
| `move-panel--wrong` | The line of a wrong move (its mistake and why). |
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from kvviz.teach.exercise import MOVE_KINDS, Move


class MovePanel(Widget):
    """Renders one move (:meth:`show_move`) and posts :class:`ChoiceMade` when a choice is
    picked in its list (enter or a click); the screen grades it."""

    DEFAULT_CSS = """
    MovePanel { layout: vertical; height: 1fr; }
    MovePanel #move-prompt { height: auto; padding: 0 1; }
    MovePanel #move-choices { height: auto; max-height: 12; margin: 1 0; }
    MovePanel #move-feedback { height: auto; padding: 0 1; }
    MovePanel #move-said { height: auto; padding: 0 1; color: $text-muted; }
    MovePanel > .move-panel--right { color: $success; }
    MovePanel > .move-panel--wrong { color: $error; }
    """

    COMPONENT_CLASSES = {"move-panel--right", "move-panel--wrong"}

    class ChoiceMade(Message):
        """The learner picked choice ``letter`` of the move shown."""

        def __init__(self, panel: "MovePanel", letter: str):
            super().__init__()
            self.panel = panel
            self.letter = letter

        @property
        def control(self) -> "MovePanel":
            return self.panel

    def compose(self) -> ComposeResult:
        yield Static(id="move-prompt")
        yield OptionList(id="move-choices")
        yield Static(id="move-feedback")
        yield Static(id="move-said")

    @property
    def choices(self) -> OptionList:
        """The selection list of choices (ids are the letters)."""
        return self.query_one("#move-choices", OptionList)

    def show_move(self, move: Move | None, number: str) -> None:
        """Show ``move`` (None: the exercise is over) under the heading ``number``."""
        prompt = self.query_one("#move-prompt", Static)
        choices = self.choices
        if move is None:
            prompt.update(Content("The exercise is over."))
            choices.clear_options()
            choices.display = False
            return
        choices.display = True
        prompt.update(Content.from_markup(f"[b]{number}: {MOVE_KINDS[move.kind].title}[/b]\n$prompt",
                                          prompt=move.prompt))
        choices.set_options([Option(Content(f"{c.letter}) {c.text}"), id=c.letter) for c in move.choices])
        choices.highlighted = 0

    def show_feedback(self, line: str, right: bool | None, said: tuple[str, ...] = ()) -> None:
        """The verdict line (coloured right or wrong; None: neutral) and kvcore's sentences."""
        feedback = self.query_one("#move-feedback", Static)
        style = {True: "$success", False: "$error", None: "$text"}[right]
        feedback.update(Content.from_markup(f"[{style}]$line[/]", line=line) if line else Content(""))
        self.query_one("#move-said", Static).update(
            Content("\n".join(f"kvcore: {s}" for s in said)) if said else Content(""))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.post_message(self.ChoiceMade(self, event.option.id))
