# SPDX-License-Identifier: Apache-2.0
"""Asks before an op typed while stepped back drops the later steps.

Answers ``"branch"`` (drop the steps after this one and continue from here), ``"append"``
(keep everything and add the op at the end) or None (cancel: the command stays typed).
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class BranchScreen(ModalScreen[str | None]):
    """Branch here, append at the end, or cancel (see the module doc)."""

    BINDINGS = [
        Binding("escape,n", "choose('')", "Cancel"),
        Binding("b,y", "choose('branch')", "Branch"),
        Binding("a", "choose('append')", "Append"),
    ]

    DEFAULT_CSS = """
    BranchScreen { align: center bottom; background: $background 35%; }
    BranchScreen > Vertical {
        margin-bottom: 1;
        width: 72; max-width: 95%; height: auto; padding: 0 1;
        border: round $warning; background: $surface;
    }
    BranchScreen Horizontal { height: auto; margin-top: 1; }
    BranchScreen Button { margin-right: 1; min-width: 10; }
    """

    def __init__(self, op_text: str, step: int, last: int):
        super().__init__()
        self.op_text = op_text
        self.step = step
        self.last = last

    def compose(self) -> ComposeResult:
        dropped = self.last - self.step
        with Vertical() as box:
            box.border_title = "Branch the timeline?"
            yield Static(
                f"You are at step {self.step} of {self.last}. Applying `{self.op_text}` here drops "
                f"the {dropped} later step{'s' if dropped != 1 else ''} ({self.step + 1}..{self.last}) "
                f"and continues from step {self.step}."
            )
            with Horizontal():
                yield Button(f"Branch (drop {dropped})", variant="warning", id="branch")
                yield Button("Append at end", id="append")
                yield Button("Cancel", id="cancel")
            yield Static("[b]b[/b] branch · [b]a[/b] append at the end · [b]escape[/b] cancel")

    def on_mount(self) -> None:
        self.query_one("#branch", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_choose("" if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str) -> None:
        """Close with ``choice`` ('' means cancel)."""
        self.dismiss(choice or None)
