# SPDX-License-Identifier: Apache-2.0
"""The command bar: type ops in the scenario language (``acquire r4 1..12 extra=2``), or
``expect`` lines, which are checked at once against the step shown.

Completion suggests op names and the names of live allocations (accept with →, or with
enter, which applies what the box shows, completion included); up/down recall earlier
commands. Enter posts :class:`CommandBar.CommandTyped`: the app parses the text (it owns
the session and its vocabulary) and either shows the error under the box, in red, with a
caret under the offending column (the text stays, nothing is applied), or applies the op
(asking before branching when stepped back) or checks the expect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input, Static

from kvviz.core.scenario import COMMAND_KEYWORDS, EXPECT_FORMS, OP_OPTIONS, ScenarioError

NEEDS_LIVE_NAME = ("publish", "extend", "release")


def complete(value: str, live_names: Iterable[str]) -> str | None:
    """The completion of a partly typed command, or None.

    The first word completes to an op name or ``expect``; the second, after
    publish/extend/release, to a live allocation's name, after acquire to the next unused
    ``rN``, after expect to an expect kind; a later word to an option the op takes
    (``extra=``).
    """
    if not value or value != value.lstrip():
        return None
    words = value.split(" ")
    live = list(live_names)
    if len(words) == 1:
        word = words[0].lower()
        return next((value + keyword[len(word):] + " " for keyword in COMMAND_KEYWORDS
                     if keyword.startswith(word) and keyword != word), None)
    op, partial = words[0].lower(), words[-1]
    if len(words) == 2:
        if op in NEEDS_LIVE_NAME:
            match = next((name for name in live if name.startswith(partial) and name != partial), None)
            return value + match[len(partial):] if match else None
        if op == "acquire" and partial in ("", "r"):
            used = set(live)
            number = 1
            while f"r{number}" in used:
                number += 1
            return f"{words[0]} r{number}"
        if op == "expect" and partial:
            return next((value + kind[len(partial):] + " " for kind in EXPECT_FORMS
                         if kind.startswith(partial) and kind != partial), None)
        return None
    if partial:
        for option in OP_OPTIONS.get(op, ()):
            given = any(word.startswith(option) for word in words[:-1])
            if option.startswith(partial) and option != partial and not given:
                return value + option[len(partial):]
    return None


def fit(text: str, width: int) -> str:
    """``text``, or its first ``width - 1`` characters and ``…`` when it is longer than
    ``width`` (0 or less: not laid out yet, kept whole)."""
    if width <= 0 or len(text) <= width:
        return text
    return text[: max(0, width - 1)].rstrip() + "…"


class OpSuggester(Suggester):
    """Suggests op names and live allocation names (asked afresh each time: names change)."""

    def __init__(self, live_names: Callable[[], Iterable[str]]):
        super().__init__(use_cache=False, case_sensitive=True)
        self._live_names = live_names

    async def get_suggestion(self, value: str) -> str | None:
        return complete(value, self._live_names())


class CommandInput(Input):
    """The text box, with history on up/down."""

    BINDINGS = [
        Binding("enter", "submit", "apply op"),
        Binding("up", "history(-1)", "history", key_display="↑"),
        Binding("down", "history(1)", "Later", show=False),
        Binding("escape", "leave", "back to the views"),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self._history_at = 0

    def remember(self, text: str) -> None:
        """Add ``text`` to the history."""
        if text and (not self.history or self.history[-1] != text):
            self.history.append(text)
        self._history_at = len(self.history)

    def action_history(self, delta: int) -> None:
        """Recall an earlier (or later) command."""
        if not self.history:
            return
        self._history_at = max(0, min(len(self.history), self._history_at + delta))
        self.value = self.history[self._history_at] if self._history_at < len(self.history) else ""
        self.cursor_position = len(self.value)

    def on_key(self, event: events.Key) -> None:
        # ":" is the key that focuses this box: pressed again in the empty box (a habit),
        # it is not the start of an op. Runs before Input's own key handler inserts it.
        if event.character == ":" and not self.value:
            event.stop()
            event.prevent_default()

    def action_leave(self) -> None:
        """Give the focus back to the views."""
        self.screen.focus_next()


class CommandBar(Vertical):
    """Op entry with completion and inline errors (see the module doc)."""

    DEFAULT_CSS = """
    CommandBar {
        height: auto;
        & > CommandInput { border: none; height: 1; padding: 0 1; background: $boost; }
        & > CommandInput:focus { border: none; background: $surface-lighten-1; }
        & > CommandInput.-error, & > CommandInput.-error:focus { border: none; background: $error 25%; }
        & > #command-error { color: $error; text-style: bold; padding: 0 1; display: none; }
        & > #command-error.-shown { display: block; }
    }
    """

    class CommandTyped(Message):
        """The user pressed enter on ``text`` (completion accepted). The app, which owns
        the session and its vocabulary, parses it and answers with :meth:`accepted` or
        :meth:`show_error`."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    PLACEHOLDER = "type an op, e.g. acquire r4 1..12 extra=2   (: to focus, → completes, enter applies)"

    def __init__(self, live_names: Callable[[], Iterable[str]], **kwargs) -> None:
        """``live_names`` returns the names of the allocations live where an op would
        apply (completion offers them)."""
        super().__init__(**kwargs)
        self._live_names = live_names
        self.error: ScenarioError | None = None
        self._hint = self.PLACEHOLDER

    def compose(self) -> ComposeResult:
        yield CommandInput(placeholder=self.PLACEHOLDER, suggester=OpSuggester(self._live_names), id="command-input")
        yield Static(id="command-error")

    @property
    def input(self) -> CommandInput:
        """The text box."""
        return self.query_one(CommandInput)

    def set_hint(self, hint: str | None) -> None:
        """Replace the placeholder (e.g. to say that an op here will branch), cut to the
        box's width with ``…`` (a placeholder is never wrapped)."""
        self._hint = hint or self.PLACEHOLDER
        fitted = fit(self._hint, self.input.content_region.width)
        if self.input.placeholder != fitted:
            self.input.placeholder = fitted

    def on_resize(self) -> None:
        self.set_hint(self._hint)

    def show_error(self, error: ScenarioError | None) -> None:
        """Show ``error`` under the box (None clears it)."""
        self.error = error
        label = self.query_one("#command-error", Static)
        box = self.input
        if error is None:
            label.update("")
            label.set_class(False, "-shown")
            box.set_class(False, "-error")
            return
        pointer = " " * (error.column - 1) + "^"
        label.update(f"{pointer} column {error.column}: {error.message} (expected: {error.expected})")
        label.set_class(True, "-shown")
        box.set_class(True, "-error")

    def submit(self, text: str) -> None:
        """Post ``text`` as :class:`CommandTyped` for the app to parse."""
        self.post_message(self.CommandTyped(text))

    def accepted(self, text: str) -> None:
        """``text`` parsed: clear any error and remember it in the history."""
        self.show_error(None)
        self.input.remember(text)

    def clear(self) -> None:
        """Empty the box after the op was applied."""
        self.input.value = ""
        self.show_error(None)

    def completed(self, text: str) -> str:
        """``text`` with the completion the box shows (dim) accepted, and the completions
        that follow from it (``acq`` -> ``acquire `` -> ``acquire r1``): what enter applies
        is what the box showed."""
        for _ in range(4):  # op name, then allocation name: two steps at most
            more = complete(text, self._live_names())
            if more is None or len(more) <= len(text) or not more.startswith(text):
                break
            text = more
        return text

    @on(Input.Submitted, "#command-input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = self.completed(event.value) if self.input.cursor_at_end else event.value
        if text != event.value:
            self.input.value = text
            self.input.cursor_position = len(text)
        if text.strip():
            self.submit(text)

    @on(Input.Changed, "#command-input")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.error is not None:
            self.show_error(None)
