# SPDX-License-Identifier: Apache-2.0
"""A small modal that asks for one line of text (jump to step, save the script as…).

Dismisses with the text typed (after ``check`` accepts it) or None on escape. ``check``
returns an error message for input it refuses, shown in red under the box.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


def step_number_problem(value: str, last: int, steps: str) -> str | None:
    """What is wrong with ``value`` as a step number from 0 to ``last`` (None: nothing);
    ``steps`` says which steps there are ("the timeline has steps 0..8"). The go-to prompts
    of the main app and the watch share it."""
    value = value.strip()
    if not value.isdigit():
        return f"a step number, 0..{last}"
    # Longer than the last step's number: too big, said before int() (Python refuses to
    # convert more than 4,300 digits).
    if len(value.lstrip("0")) > len(str(last)) or int(value) > last:
        return f"step {value} does not exist: {steps}"
    return None


class PromptScreen(ModalScreen[str | None]):
    """Ask for one line of text (see the module doc)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    PromptScreen { align: center bottom; background: $background 35%; }
    PromptScreen > Vertical {
        margin-bottom: 1;
        width: 64; max-width: 95%; height: auto; padding: 0 1;
        border: round $accent; background: $surface;
    }
    PromptScreen #prompt-error { color: $error; height: auto; }
    PromptScreen #prompt-help { color: $kv-muted; }
    """

    def __init__(self, title: str, value: str = "", *, help: str = "", placeholder: str = "",
                 check: Callable[[str], str | None] | None = None, restrict: str | None = None,
                 max_length: int = 0):
        """``restrict``: a regular expression the text must match as typed; ``max_length``:
        most characters the box takes (0: no limit)."""
        super().__init__()
        self.prompt_title = title
        self.initial = value
        self.help_text = help
        self.placeholder = placeholder
        self.check = check
        self.restrict = restrict
        self.max_length = max_length

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self.prompt_title
            yield Input(self.initial, placeholder=self.placeholder, restrict=self.restrict,
                        max_length=self.max_length, id="prompt-input")
            yield Static("", id="prompt-error")
            yield Label(self.help_text or "enter to confirm · escape to cancel", id="prompt-help")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.confirm(event.value)

    def confirm(self, value: str) -> None:
        """Accept ``value`` unless ``check`` refuses it."""
        problem = self.check(value) if self.check is not None else None
        if problem:
            self.query_one("#prompt-error", Static).update(problem)
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        """Close without an answer."""
        self.dismiss(None)
