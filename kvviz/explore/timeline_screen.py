# SPDX-License-Identifier: Apache-2.0
"""The main screen: one timeline's views, and where the user is in it.

The screen owns what is looked at as reactive attributes: the ``position`` (step and
sub-step), the ``selection``, ``playing`` and its ``speed_index``, ``quiz`` mode, and the
panels shown (``show_why``, ``show_code``, ``show_buggy``). Each has a ``watch_*`` method
that draws what depends on it, so an action only sets state and cannot forget a redraw (the
way memray's and posting's screens work). The app owns what is shown: the session, its
revision, the ops typed and the files written (:mod:`kvviz.ui.exporting`).

Widgets get frozen values only (:class:`~kvviz.core.view.FrameView`,
:class:`~kvviz.core.view.TimelineView`) and post messages for what the user wants.
"""

from __future__ import annotations

import dataclasses

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import var
from textual.screen import Screen

from kvviz.core.designs import TRIE
from kvviz.core.view import (ALLOCATION, NODE, PAGE, FrameView, Selection, TimelineView, TokenLabels, answer_for,
                           highlight_for, needs_previous, violation_marks)
from kvviz.ui.panes import PANES
from kvviz.explore.playing import DEFAULT_SPEED, SPEEDS, PlayActions
from kvviz.explore.quiz_mode import QuizActions, QuizRun
from kvviz.ui.stepping import UI_STATES_AT_ONCE, Position, TimelineSteps
from kvviz.explore.substep_panes import SubStepPanes
from kvviz.ui.widgets.allocation_table import AllocationTable
from kvviz.ui.widgets.block_view import BlockView
from kvviz.ui.widgets.cache_column import CacheColumn
from kvviz.ui.widgets.code_pane import CodePane
from kvviz.explore.command_bar import CommandBar
from kvviz.ui.widgets.free_queue_view import FreeQueueView
from kvviz.ui.widgets.heap_view import HeapView
from kvviz.ui.widgets.key_footer import KeyFooter
from kvviz.ui.widgets.line_view import LineView
from kvviz.ui.widgets.narration import Narration
from kvviz.ui.widgets.page_grid import PageGrid
from kvviz.explore.question_panel import QuestionPanel
from kvviz.ui.widgets.timeline_bar import TimelineBar
from kvviz.ui.widgets.trie_view import TrieView
from kvviz.ui.widgets.why_panel import WhyPanel
from kvviz.ui.screens.help_screen import HelpScreen

_STEP_KEYS = Binding.Group("step", compact=True)
_EVENT_KEYS = Binding.Group("event", compact=True)


def _found(widget_id: str, kind: type) -> property:
    """The screen's widget ``#widget_id``, found once."""
    return property(lambda screen: screen._widget(widget_id, kind), doc=f"The {kind.__name__} (#{widget_id}).")


def _in_column(role: str, kind: type) -> property:
    """The cache column's view of ``role``."""
    return property(lambda screen: screen.column.widget(role), doc=f"The {kind.__name__} of the cache column.")


class TimelineScreen(TimelineSteps, PlayActions, QuizActions, SubStepPanes, Screen):
    """The views of the app's session at one position (see the module doc)."""

    BINDINGS = [
        Binding("left,h", "previous_step", "back", key_display="←", group=_STEP_KEYS),
        Binding("right,l", "next_step", "step", key_display="→", group=_STEP_KEYS),
        Binding("i", "step_into", "in"),
        Binding("o", "step_out", "out"),
        Binding("x", "toggle_code", "code"),
        # b and v each have a silent twin where they cannot act: it says why in the status
        # line, and the footer shows the key only where it does something. The footer's words
        # are short ("in", "bug", "broken": the first step whose invariants broke) so that
        # every key fits 120 columns; the help says each in full.
        Binding("b", "toggle_buggy", "bug"),
        Binding("b", "no_buggy_code", "Buggy code (none here)", show=False),
        Binding("home", "first_step", "First step", show=False),
        Binding("end", "last_step", "Last step", show=False),
        Binding("space", "play", "play"),
        Binding("space", "pause", "pause"),
        Binding("plus,equals_sign", "faster", "Faster", show=False),
        Binding("minus,underscore", "slower", "Slower", show=False),
        Binding("left_square_bracket", "previous_interesting", "prev", key_display="[", group=_EVENT_KEYS),
        Binding("right_square_bracket", "next_interesting", "event", key_display="]", group=_EVENT_KEYS),
        Binding("g", "jump", "go"),
        Binding("v", "first_violation", "broken"),
        Binding("v", "no_violation", "First violation (none here)", show=False),
        Binding("w", "toggle_why", "why"),
        Binding("colon", "focus_command", "op", key_display=":"),
        Binding("e", "app.export", "export"),
        Binding("ctrl+s", "app.save_script", "Save .kvs", show=False),
        Binding("escape", "escape", "Step out / clear selection", show=False),
        Binding("p", "toggle_quiz", "quiz"),
        Binding("z", "toggle_compact", "Compact page grid", show=False),  # from every view, not only the grid
        Binding("f", "step_to_parting", "where it parted"),
        Binding("a", "type_answer", "type answer"),
        Binding("s", "skip_question", "skip"),
        Binding("t", "hint", "hint"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "app.quit", "quit"),
    ]

    # Every move draws, also one onto the position shown (a question asked before the next
    # step, a session opened at the step it replaces): always_update.
    position: var[Position] = var(Position(), init=False, always_update=True)
    selection: var[Selection | None] = var(None, init=False)
    playing = var(False, init=False, bindings=True, toggle_class="-playing")
    speed_index = var(DEFAULT_SPEED, init=False)
    quiz: var[QuizRun | None] = var(None, init=False, bindings=True, toggle_class="-quiz")
    show_why = var(False, init=False)
    show_code: var[bool | None] = var(None, init=False)  # None: shown while stepped into an op
    show_buggy = var(False, init=False)  # the buggy variant's code beside ours (bug-museum demos)

    def __init__(self, *, start_step: int | None, start_quiz: bool, quiz_seed: int, play_timer: bool,
                 cursor_blink: bool, id: str | None = None):
        super().__init__(id=id)
        self.start_step = start_step
        self.start_quiz = start_quiz
        self.quiz_seed = quiz_seed
        # Tests turn the real play timer off and call play_tick() themselves: a timer that
        # ticks between two key presses under load made a binding test flaky.
        self.play_timer = play_timer
        self.cursor_blink = cursor_blink
        self.view: FrameView | None = None
        self._labels: tuple[int, TokenLabels] | None = None  # (revision, frozen vocabulary)
        self._summaries: tuple = ()
        self._summaries_revision = -1
        self._widgets: dict[str, object] = {}
        self._titles: dict[str, str] = {}
        self._after_paint: list = []  # callbacks waiting for the next frame (call_after_paint)
        # True once the user moved back from a later step (and until the end is reached
        # again): only then does the command bar warn that an op typed here branches. A
        # timeline opened at step 0, or jumped forward, was never stepped back.
        self.stepped_back = False

    # -- what is shown: the app's ----------------------------------------------------------

    @property
    def session(self):
        """The session shown (the app's)."""
        return self.app.session

    @property
    def revision(self) -> int:
        """The app's timeline revision, bumped whenever the timeline itself changes."""
        return self.app.revision

    @property
    def demo(self) -> str | None:
        """The demo's name, when the session is one (a bug-museum demo has buggy code)."""
        return self.app.demo

    @property
    def step(self) -> int:
        """The step shown."""
        return self.position.step

    @property
    def substep(self) -> int | None:
        """Stepped into the op: the sub-step shown; None: the whole step."""
        return self.position.substep

    @property
    def last_step(self) -> int:
        """Index of the newest frame."""
        return len(self.session) - 1

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TimelineBar(id="timeline")
        yield CacheColumn(tuple(PANES.values()), beside=True, id="views")
        with Horizontal(id="bottom"):
            yield QuestionPanel(id="quiz")
            yield Narration(id="narration")
            yield CodePane(id="code")
            yield CodePane("buggy", id="code-buggy")
            yield WhyPanel(id="why")
        yield CommandBar(self.current_live_names, id="command")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.narration.border_title = "Narration · events"
        self.why.border_title = "Why?"
        self.why.display = False
        self.question_panel.display = False
        self.question_panel.border_title = "Quiz"
        self.code.display = False
        self.code_buggy.display = False
        if not self.cursor_blink:
            self.command_bar.input.cursor_blink = False
        self._apply_size_classes()
        self.go_to(self.start_step or 0)
        if self.start_quiz:
            self.action_toggle_quiz()
        self.structure.focus()

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        width, height = self.size
        code_was_visible = self.code_visible
        self.set_class(width < 100, "-narrow")
        self.set_class(height < 36, "-short")
        self.set_class(height < 24, "-tiny")
        if self.view is not None and self.code_visible != code_was_visible:
            self._draw(rebuild=True)  # the code pane comes or goes with the width

    # The widgets, by role (found once: a step must not walk the DOM, and a timer tick
    # while a help or prompt screen is open must still reach this screen's views).
    def _widget(self, widget_id: str, kind: type):
        widget = self._widgets.get(widget_id)
        if widget is None:
            widget = self._widgets[widget_id] = self.query_one(f"#{widget_id}", kind)
        return widget

    @property
    def column(self) -> CacheColumn:
        """The cache's views: structure, pool, allocations, eviction order."""
        return self._widget("views", CacheColumn)

    @property
    def structure(self) -> LineView:
        """The upper view shown: the trie, or a hash cache's blocks."""
        return self.column.structure

    trie = _in_column(TRIE, TrieView)
    blocks = _in_column("blocks", BlockView)
    pool = _in_column("pool", PageGrid)
    allocations = _in_column("allocations", AllocationTable)
    heap = _in_column("heap", HeapView)
    queue = _in_column("queue", FreeQueueView)
    narration = _found("narration", Narration)
    why = _found("why", WhyPanel)
    timeline = _found("timeline", TimelineBar)
    command_bar = _found("command", CommandBar)
    question_panel = _found("quiz", QuestionPanel)
    code = _found("code", CodePane)
    code_buggy = _found("code-buggy", CodePane)

    # -- moves: they set the position; watch_position draws it -----------------------------

    def validate_position(self, position: Position) -> Position:
        """The step clamped to the timeline, the sub-step to its op's."""
        step = max(0, min(self.last_step, int(position.step)))
        sub = position.substep
        if sub is not None:
            sub = min(sub, len(self.session.substeps(step, states_at_once=UI_STATES_AT_ONCE)) - 1)
        return Position(step, sub)

    def go_to(self, step: int) -> None:
        """Show frame ``step`` (clamped to the timeline). In quiz mode a move forward past
        an unanswered question stops before its step and asks it."""
        target = max(0, min(self.last_step, int(step)))
        run = self._current_quiz()
        if run is not None:
            if run.pending is not None and target > self.step:
                self.notify("Answer the question first (type a letter or the answer, enter; s to skip).", timeout=4)
                return
            question = run.first_unanswered(self.step, target) if target > self.step else None
            if question is not None:
                self.action_pause()
                run.ask(question)
                target = question.step - 1
            else:
                run.leave(target)
        self.position = Position(target)  # a move by whole steps steps out of the op

    def show_substep(self, step: int, index: int | None) -> None:
        """Show sub-step ``index`` of step ``step``'s op (None: the whole step)."""
        self.position = Position(step, index)

    def select(self, selection: Selection | None) -> None:
        """Select an item; every view highlights it and what is linked to it."""
        self.selection = selection

    def start_over(self, step: int) -> None:
        """Show the app's newly opened session from ``step``: no selection, no buggy code,
        no folds, no step back. The position set last draws it all."""
        self.set_reactive(TimelineScreen.selection, None)
        self.set_reactive(TimelineScreen.show_buggy, False)
        self.stepped_back = False
        self.trie.folded.clear()
        self.set_reactive(TimelineScreen.position, Position())  # opening it at ``step`` is no step back
        self.go_to(step)

    # -- the watchers: the only places that draw -------------------------------------------

    def watch_position(self, old: Position, new: Position) -> None:
        if new.step >= self.last_step:
            self.stepped_back = False
        elif new.step < old.step:
            self.stepped_back = True
        self._draw(rebuild=True)
        self._show_quiz()
        if (old.substep is None) != (new.substep is None):  # the footer's keys change (i, o)
            self.refresh_bindings()

    def watch_selection(self) -> None:
        self._draw(rebuild=False)

    def watch_show_code(self) -> None:
        self._draw(rebuild=False)

    def watch_show_buggy(self) -> None:
        self._draw(rebuild=False)

    def watch_show_why(self, shown: bool) -> None:
        self.why.display = shown
        if shown and self.view is not None:
            self.view = self.without_giveaways(dataclasses.replace(self.view, why=answer_for(self.session, self.view)))
            self.why.show(self.view)

    def watch_playing(self, playing: bool) -> None:
        if playing:
            self._start_timer()
        else:
            self._stop_timer()
        self._show_hint()
        self._show_timeline()

    def watch_speed_index(self) -> None:
        if self.playing:
            self._stop_timer()
            self._start_timer()
        self._show_timeline()

    def watch_quiz(self, old: QuizRun | None, new: QuizRun | None) -> None:
        self.question_panel.display = new is not None
        if new is None:
            self.structure.focus()
        else:
            self._show_quiz()

    # -- drawing -----------------------------------------------------------------------------

    def _draw(self, rebuild: bool) -> None:
        """Draw the position shown in every view (``rebuild``: the step changed, not only
        the selection or a panel)."""
        session = self.session
        frame = session.frame(self.step)
        previous = None
        if self.step > 0 and needs_previous(frame):
            previous = session.snapshot_before(self.step)
        highlight = highlight_for(self.selection, frame.snapshot)
        view = FrameView(frame, self.labels(), highlight, violation_marks(frame), previous, self.selection,
                         self.revision, self.last_step)
        if self.show_why:  # the whole step's question, stepped in or not
            view = dataclasses.replace(view, why=answer_for(session, view))
        view = self.without_giveaways(view)  # a question asked: no story, no why telling its answer
        if self.substep is not None:
            view = self._substep_view(view)
            if rebuild:
                self.call_after_paint(self.prefetch_substep_states)
        self.view = view
        self.column.show(view, rebuild, session.units)
        self._title(self.narration, "Narration · sub-steps" if view.substep is not None else "Narration · events")
        if rebuild:
            self.narration.units = session.units
            self.narration.show(view)
            self._show_hint()
        self._show_code(view)
        if self.show_why:
            self.why.show(view)
        self._show_timeline()

    def call_after_paint(self, callback) -> None:
        """Run ``callback`` (once, however often asked) after the next frame this screen
        sends to the terminal: work a person should not wait for, such as building the next
        window of sub-step states (:meth:`prefetch_substep_states`).

        Why not Textual's ``call_after_refresh``: its callbacks run when the screen is next
        idle, and the views' repaint requests reach the screen after that (each view posts
        its own from its own message loop), so the callback ran before the frame: a window of
        states built every 16 sub-steps, 60-150 ms, inside the wait for the sub-step."""
        if callback not in self._after_paint:
            self._after_paint.append(callback)

    def _compositor_refresh(self) -> None:
        # Textual's one place where a frame of this screen goes to the terminal (a step's
        # repaint and a layout's alike): what waited for it runs next, between messages.
        super()._compositor_refresh()
        if self._after_paint:
            waiting, self._after_paint = self._after_paint, []
            for callback in waiting:
                self.call_next(callback)

    def labels(self) -> TokenLabels:
        """A frozen copy of the session's vocabulary, taken again whenever the timeline
        changes (the command bar may have taught it new words)."""
        if self._labels is None or self._labels[0] != self.revision:
            self._labels = (self.revision, TokenLabels(self.session.vocab))
        return self._labels[1]

    def timeline_view(self) -> TimelineView:
        """What the timeline bar draws now (the summaries tuple is taken again only when the
        timeline changed, or a lazily built frame learnt its checks' results)."""
        live = self.session.summaries
        cached = self._summaries
        if (self._summaries_revision != self.revision or len(cached) != len(live)
                or cached[self.step] is not live[self.step]):
            self._summaries = tuple(live)
            self._summaries_revision = self.revision
        sub = self.view.substep if self.view is not None else None
        asking = self.quiz is not None and self.quiz.pending is not None
        return TimelineView(self._summaries, self.step, self.playing, SPEEDS[self.speed_index],
                            self.session.title, self.revision,
                            (sub.step.index, sub.count, sub.step.kind) if sub is not None else None,
                            marks_until=self.step if asking else None)

    def _show_timeline(self) -> None:
        self.timeline.show(self.timeline_view())

    def _show_hint(self) -> None:
        # While playing, the step moves on by itself: no "stepped back" warning then; while a
        # question is asked, the step before it shows on purpose: say that instead.
        if self.quiz is not None and self.quiz.pending is not None:
            self.command_bar.set_hint(f"quiz: step {self.quiz.pending.step} shows once you answer "
                                      "(type a letter or the answer, enter; s to skip, t for a hint)")
            return
        if self.substep is not None and not self.playing:
            self.command_bar.set_hint(f"inside step {self.step}'s op: → ← move by sub-step, ] [ by notable ones, "
                                      "space plays them, o steps out")
            return
        self.command_bar.set_hint(
            None if self.playing or not self.stepped_back or self.step == self.last_step else
            f"stepped back to {self.step}/{self.last_step}: an op typed here asks before dropping later steps")

    def _show_quiz(self) -> None:
        run = self.quiz
        if run is not None:
            self.question_panel.show(run.view(self.step))
            self.refresh_bindings()

    def _title(self, widget, title: str) -> None:
        # Setting a border title repaints the whole widget: only when it changes.
        if self._titles.get(widget.id) != title:
            self._titles[widget.id] = title
            widget.border_title = title

    def current_live_names(self) -> list[str]:
        """Names of the allocations live at the shown step (where a typed op applies)."""
        if self.view is None or self.step == self.last_step:
            return self.session.live_names()
        if self.view.substep is not None:  # mid-op: an op typed applies after the whole step
            return [a.label for a in self.session.frame(self.step).snapshot.allocations]
        return [a.label for a in self.view.snapshot.allocations]

    # -- selection messages from the views -------------------------------------------------

    @on(TrieView.NodeSelected)
    @on(HeapView.NodeSelected)
    def _node_selected(self, message: TrieView.NodeSelected | HeapView.NodeSelected) -> None:
        self.selection = Selection(NODE, message.node)

    @on(PageGrid.PageSelected)
    @on(FreeQueueView.PageSelected)
    @on(BlockView.BlockSelected)  # a block is its page's: every view marks the page
    def _page_selected(self, message) -> None:
        self.selection = Selection(PAGE, message.page)

    @on(AllocationTable.AllocationSelected)
    def _allocation_selected(self, message: AllocationTable.AllocationSelected) -> None:
        self.selection = Selection(ALLOCATION, message.allocation)

    @on(TimelineBar.StepClicked)
    def _step_clicked(self, message: TimelineBar.StepClicked) -> None:
        self.go_to(message.step)

    @on(QuestionPanel.AnswerTyped)
    def _answer_typed(self, message: QuestionPanel.AnswerTyped) -> None:
        self.answer_question(message.text)

    # -- which keys act where ----------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        asking = self.quiz is not None and self.quiz.pending is not None
        if action == "play":
            return not self.playing
        if action == "pause":
            return self.playing
        if action in ("first_violation", "no_violation"):
            # The footer offers "v broken" for a violation known, not one that deferred checks
            # may yet find: v (no_violation) runs them first all the same.
            known = any(s.violations for s in self.session.summaries)
            return known == (action == "first_violation")
        if action in ("toggle_buggy", "no_buggy_code"):
            return self.has_buggy_code() == (action == "toggle_buggy")
        if action in ("answer_choice", "type_answer", "skip_question", "hint"):
            return asking
        if action == "step_to_parting":  # a wrong answer revealed, parted at a sub-step
            parted = self.quiz.parted() if self.quiz is not None and not asking else None
            return parted is not None and parted.substep is not None
        if action == "step_into":  # not while a question is asked: the footer shows its keys then
            return self.substep is None and not asking
        if action == "step_out":
            return self.substep is not None
        return True

    # -- panels and focus --------------------------------------------------------------------

    def action_toggle_why(self) -> None:
        """Show or hide the why panel."""
        self.show_why = not self.show_why

    def action_toggle_compact(self) -> None:
        """Switch the page grid's layout."""
        self.pool.action_toggle_compact()

    def action_focus_command(self) -> None:
        """Put the cursor in the command bar."""
        self.command_bar.input.focus()

    def action_clear_selection(self) -> None:
        """Forget the selection."""
        self.selection = None

    def action_help(self) -> None:
        """Keys and legend."""
        self.app.push_screen(HelpScreen())
