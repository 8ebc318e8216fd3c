# SPDX-License-Identifier: Apache-2.0
"""The kvviz terminal UI: the trie, page pool, allocations and LRU heap of one frame at a time.

The app holds what is shown: the session, its ``revision`` (bumped whenever the timeline
itself changes), whether ops were typed (``edited``) and which demo it is; it parses the
command bar's lines and applies them through :meth:`Session.apply`, so every change is
recorded and replayable, and it writes the files (:mod:`kvviz.ui.exporting`). Where the user
is in the timeline, and everything drawn, is the main screen's
(:class:`~kvviz.explore.timeline_screen.TimelineScreen`): reactive state with a watcher
each. The app answers for the screen's names (:data:`ON_SCREEN`), so the palette, the CLI
and the tests speak to one object.

One factory, :func:`make_app`, serves the CLI (which alone runs it), the tests and the
screenshot export (:func:`kvviz.explore.screenshot.screenshot_svg`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import App
from textual.screen import Screen

from kvviz.core.designs import TRIE
from kvviz.core.expect import ExpectResult, evaluate
from kvviz.core.scenario import Expect, ScenarioError, parse_command
from kvviz.core.session import Session
from kvviz.core.words import count
from kvviz.ui.exporting import SCRIPT_NAME, ExportActions, name_problem, shortened  # noqa: F401 - the app's names
from kvviz.explore.playing import SPEEDS  # noqa: F401 - the app's names
from kvviz.ui.saving import slug  # noqa: F401 - the app's names
from kvviz.ui.screens.branch_screen import BranchScreen
from kvviz.explore.timeline_screen import TimelineScreen
from kvviz.ui.terminal_title import step_title, title_the_terminal
from kvviz.ui.themes import set_up_appearance, variable_defaults
from kvviz.explore.command_bar import CommandBar
from kvviz.ui.widgets.palette import KvvizCommands


class KvvizApp(ExportActions, App[None]):
    """The kvviz UI on one session (see the module doc)."""

    CSS_PATH = "app.tcss"
    TITLE = "kvviz"
    COMMANDS = App.COMMANDS | {KvvizCommands}

    def __init__(self, session: Session, step: int | None = None, *, export_dir: str | Path | None = None,
                 theme: str | None = None, animations: bool = True, cursor_blink: bool = True,
                 quiz: bool = False, quiz_seed: int = 0, demo: str | None = None,
                 play_timer: bool = True, substep: int | None = None,
                 after_idle_work: Callable[[], None] | None = None):
        super().__init__()
        set_up_appearance(self, theme, animations)
        self.session = session
        self.export_dir = Path(export_dir) if export_dir is not None else None
        self.revision = 0  # bumped whenever the timeline itself changes (apply, branch, new session)
        self.edited = False  # ops were applied here: exports take names of their own
        self.demo = demo  # the demo's name (a bug-museum demo has buggy code to show beside ours)
        self.start_step = step
        self.start_substep = substep  # a bug-report bundle that points inside the step's op
        self.start_quiz = quiz
        self.quiz_seed = quiz_seed
        self._screen_options = dict(start_step=step, start_quiz=quiz, quiz_seed=quiz_seed,
                                    play_timer=play_timer, cursor_blink=cursor_blink)
        self.after_idle_work = after_idle_work  # called once, when the first idle work is done

    def get_default_screen(self) -> TimelineScreen:
        # Kept (as posting keeps its MainScreen): a palette entry or a test may read the
        # screen's state after the app stopped.
        self._main_screen = TimelineScreen(**self._screen_options)
        return self._main_screen

    async def on_mount(self) -> None:
        # The app is ready (for a test's pilot, a screenshot's) once its screen is: composed,
        # and showing the start step. Textual's pilot waits on the same event.
        await self.main_screen._mounted_event.wait()
        if self.start_substep is not None:
            self.main_screen.show_substep(self.main_screen.step, self.start_substep)
        if self.is_web:
            self.watch(self.main_screen, "position", self._title_the_terminal)

    def on_ready(self) -> None:
        # The first frame is on screen (Textual's Ready): what the session left for later
        # (a lazily built timeline's keyframe checks) runs now, between messages.
        self.work_while_idle()

    def work_while_idle(self) -> None:
        """One bounded piece of the session's deferred work (:meth:`Session.idle_work`), then
        the next after the screen refreshes, until none is left. Keys pressed meanwhile are
        handled between the pieces; the checks' verdicts never depend on when they ran."""
        progress = self.session.idle_work()
        if progress.marked:
            self.main_screen.show_new_markers()
        if progress.left:
            self.call_after_refresh(self.work_while_idle)
        elif self.after_idle_work is not None:
            hook, self.after_idle_work = self.after_idle_work, None
            self.call_after_refresh(hook)  # messages already waiting (a key pressed meanwhile) go first

    def _title_the_terminal(self, position) -> None:
        # Served (kvviz serve), the terminal's title becomes the browser tab's (terminal_title).
        title_the_terminal(self, step_title(self.session.title or "session", position.step,
                                            self.main_screen.last_step, position.substep))

    @property
    def main_screen(self) -> TimelineScreen:
        """The screen with the views (under any help or prompt screen)."""
        return self._main_screen

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    # -- the command bar -------------------------------------------------------------------

    @on(CommandBar.CommandTyped)
    def _command_typed(self, message: CommandBar.CommandTyped) -> None:
        # The app parses: it owns the session, whose vocabulary learns the quoted words.
        screen = self.main_screen
        try:
            op = parse_command(message.text, screen.current_live_names(), self.session.vocab)
        except ScenarioError as error:
            screen.command_bar.show_error(error)
            return
        screen.command_bar.accepted(message.text)
        if isinstance(op, Expect):
            self.check_expect(op)
            return
        if screen.step == screen.last_step:
            self.apply_op(op)
            return

        def answered(choice: str | None) -> None:
            self.resolve_branch(choice, message.text)

        self.push_screen(BranchScreen(op.text, screen.step, screen.last_step), answered)

    def resolve_branch(self, choice: str | None, text: str) -> None:
        """Act on the branch question for command ``text``: 'branch', 'append' or None (cancel)."""
        screen = self.main_screen
        if choice is None:
            screen.command_bar.input.focus()
            return
        if choice == "branch":
            self.session.truncate(screen.step)
            self.revision += 1
            self.edited = True
        try:
            op = parse_command(text, self.session.live_names(), self.session.vocab)
        except ScenarioError as error:  # the names at the end differ from those where we were
            screen.go_to(screen.last_step)
            screen.command_bar.show_error(error)
            screen.command_bar.input.focus()
            return
        self.apply_op(op)

    def check_expect(self, expect: Expect) -> ExpectResult | None:
        """Check a typed ``expect`` line against the step shown and say the result; the
        timeline does not change. None when the line is scoped to another cache kind."""
        self.main_screen.command_bar.clear()
        kind = self.session.config.kind
        text = expect.text or "expect"
        if not expect.applies_to(kind):
            self.notify(f"{text}: written for {', '.join(expect.kinds or ())}, not this {kind} cache; "
                        "not checked", severity="warning", timeout=6)
            return None
        step = self.main_screen.step
        result = evaluate(expect, self.session.frame(step))
        if result.ok:
            self.notify(f"✓ {text} holds at step {step}", timeout=5)
        else:
            self.notify(f"✗ {text} at step {step}: {result.message}", severity="error", timeout=8)
        return result

    def apply_op(self, op) -> None:
        """Apply ``op`` at the end of the timeline and show the new step."""
        screen = self.main_screen
        screen.action_pause()
        frame = self.session.apply(op)
        self.revision += 1
        self.edited = True
        screen.command_bar.clear()
        screen.go_to(screen.last_step)
        if frame.failed:
            self.notify(f"{op.text}: {frame.error.kind}: {frame.error.message}. Nothing changed.",
                        severity="warning", timeout=6)
        if frame.violations:
            self.notify(f"{count(len(frame.violations), 'invariant violation')} after {op.text}", severity="error")

    # -- other sessions ----------------------------------------------------------------------

    @staticmethod
    def demo_names() -> list[str]:
        """The demos that can be opened from the palette."""
        from kvviz.core.demos import demo_names

        return demo_names()

    def open_demo(self, name: str) -> None:
        """Replace the session with demo ``name``, at its first step."""
        from kvviz.core.demos import load_demo

        try:
            scenario = load_demo(name)
        except (KeyError, ScenarioError) as error:
            self.notify(str(error), severity="error")
            return
        self.load_session(Session.from_scenario(scenario), demo=name)

    def load_session(self, session: Session, step: int = 0, demo: str | None = None) -> None:
        """Show another session (``demo``: the demo's name, if it is one)."""
        self.main_screen.action_pause()
        self.session = session
        self.demo = demo
        self.revision += 1
        self.edited = False
        self.main_screen.start_over(step)


ON_SCREEN = ("position", "step", "substep", "last_step", "selection", "playing", "speed", "quiz", "view",
             "show_buggy", "go_to", "show_substep", "select", "play_tick", "answer_question", "check_action",
             "has_buggy_code", "first_violation", "current_live_names", "_current_quiz", "_timer",
             "structure", TRIE, "blocks", "pool", "allocations", "heap", "queue", "narration", "why",
             "timeline", "command_bar", "question_panel", "code", "code_buggy",
             *sorted(name for name in dir(TimelineScreen) if name.startswith("action_") and not hasattr(Screen, name)))
"""The main screen's names the app answers for (the palette, the CLI and the tests call
``app.action_next_step()`` or read ``app.step``): one table, read through to the screen."""


class _OnScreen:
    """The main screen's attribute ``name``, read through the app."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, app, owner=None):
        return self if app is None else getattr(app.main_screen, self.name)


for _name in ON_SCREEN:
    setattr(KvvizApp, _name, _OnScreen(_name))
del _name


def make_app(session: Session, step: int | None = None, **opts) -> KvvizApp:
    """The app on ``session``, opened at ``step`` (default 0).

    Options: ``export_dir`` (where ``e`` and ctrl+s write; default the current directory),
    ``theme`` (any registered theme name; default kvviz-dark), ``animations`` and
    ``cursor_blink`` (False for deterministic screenshots), ``quiz`` (start in quiz
    mode), ``quiz_seed`` (which questions: the same seed asks the same ones) and
    ``demo`` (the demo's name or file, e.g. ``bug-b5-ref-leak``: a bug-museum demo can show
    its buggy pseudo-code beside ours), ``play_timer`` (False: playing starts no timer, the
    caller ticks with ``play_tick()``; tests use it so no wall clock drives them), ``substep``
    (0-based: open inside the step's op, at that sub-step, as ``kvviz open`` does for a bundle
    that points at one), ``after_idle_work`` (called once, when the first frame is painted and
    the session's deferred work is done: the CLI settles the process's heap there).
    """
    return KvvizApp(session, step, **opts)
