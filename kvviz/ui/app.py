# SPDX-License-Identifier: Apache-2.0
"""The kvviz terminal UI: the trie, page pool, allocations and LRU heap of one frame at a time.

The app owns the session, the timeline position, the selection and the play state; widgets
get frozen values only (:class:`~kvviz.model.view.FrameView`,
:class:`~kvviz.model.view.TimelineView`, why-answers the app computed) and render them, and
post messages for what the user wants (state down, messages up). The app never mutates a cache: every
change is an op applied through :meth:`Session.apply`, so it is recorded and replayable.

One factory, :func:`make_app`, serves the CLI (:func:`run_app`), the tests and the
screenshot export (:func:`screenshot_svg`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.css.query import NoMatches
from textual.widgets import Footer

from ..model.expect import ExpectResult, evaluate
from ..model.scenario import Expect, ScenarioError, parse_command
from ..model.session import Session
from .saving import NoFreeName, edit_tag, free_path, free_stem, slug
from .stepping import StepActions, SubStepMoves
from .themes import set_up_appearance, variable_defaults
from .widgets.allocation_table import AllocationTable
from .screens.branch_screen import BranchScreen
from .widgets.command_bar import CommandBar
from ..model.narrate import count
from ..model.view import (
    ALLOCATION,
    NO_HIGHLIGHT,
    NODE,
    PAGE,
    FrameView,
    Selection,
    SubStepView,
    TimelineView,
    TokenLabels,
    answer_for,
    code_views,
    focus_highlight,
    highlight_for,
    nearby,
    needs_previous,
    substep_frame,
    violation_marks,
)
from .panes import ROLES, panes_for
from .widgets.block_view import BlockView
from .widgets.code_pane import CodePane
from .widgets.free_queue_view import FreeQueueView
from .widgets.heap_view import HeapView
from .widgets.line_view import LineView
from .screens.help_screen import HelpScreen
from .widgets.narration import Narration
from .widgets.page_grid import PageGrid
from .widgets.palette import KvvizCommands
from .screens.prompt_screen import PromptScreen
from .widgets.timeline_bar import TimelineBar
from .widgets.trie_view import TrieView
from .widgets.why_panel import WhyPanel
from .practice import Practice
from .widgets.question_panel import QuestionPanel
from ..model.quiz import AnswerError, refusal
from ..model import pseudocode

SPEEDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Play speeds in steps per second (+ and - move along this list)."""
DEFAULT_SPEED = 1
SCRIPT_NAME = "kvviz-session.kvs"
CODE_BESIDE_WIDTH = 100
"""Columns from which stepping into an op shows the pseudo-code beside the narration."""

_STEP_KEYS = Binding.Group("step", compact=True)
_EVENT_KEYS = Binding.Group("event", compact=True)


class KvvizScreen(Screen):
    """The main screen; knows when the terminal is small so the CSS can tighten the layout."""

    def on_resize(self) -> None:
        self.app._apply_size_classes()


class KvvizApp(SubStepMoves, StepActions, App[None]):
    """The kvviz UI on one session (see the module doc)."""

    CSS_PATH = "app.tcss"
    TITLE = "kvviz"
    COMMANDS = App.COMMANDS | {KvvizCommands}

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
        Binding("e", "export", "export"),
        Binding("ctrl+s", "save_script", "Save .kvs", show=False),
        Binding("escape", "escape", "Step out / clear selection", show=False),
        Binding("p", "toggle_practice", "practice"),
        Binding("z", "toggle_compact", "Compact page grid", show=False),  # from every view, not only the grid
        *(Binding(str(d), f"answer_choice('{d}')", f"Answer {d}", show=False) for d in range(10)),
        Binding("a", "type_answer", "type answer"),
        Binding("s", "skip_question", "skip"),
        Binding("t", "hint", "hint"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, session: Session, step: int | None = None, *, export_dir: str | Path | None = None,
                 theme: str | None = None, animations: bool = True, cursor_blink: bool = True,
                 practice: bool = False, practice_seed: int = 0, demo: str | None = None,
                 play_timer: bool = True):
        super().__init__()
        set_up_appearance(self, theme, animations)
        self.cursor_blink = cursor_blink
        self.session = session
        self.start_step = step
        self.export_dir = Path(export_dir) if export_dir is not None else None
        self.step = 0
        self.selection: Selection | None = None
        self.playing = False
        self.speed_index = DEFAULT_SPEED
        self.revision = 0  # bumped whenever the timeline itself changes (apply, branch, new session)
        self.edited = False  # ops were applied here: exports take names of their own
        self.view: FrameView | None = None
        self._labels: tuple[int, TokenLabels] | None = None  # (revision, frozen vocabulary)
        self._summaries: tuple = ()
        self._summaries_revision = -1
        self._timer = None
        # Tests turn the real play timer off and call play_tick() themselves: a timer that
        # ticks between two key presses under load made a binding test flaky.
        self.play_timer = play_timer
        self._widgets: dict[str, object] = {}
        self._titles: dict[str, str] = {}
        self.start_practice = practice
        self.practice_seed = practice_seed
        self.practice: Practice | None = None  # practice mode is on while this is set
        self.demo = demo  # the demo's name (a bug-museum demo has buggy code to show beside ours)
        self.substep: int | None = None  # stepped into the op: the sub-step shown; None: the whole step
        self.show_code: bool | None = None  # the code pane; None: shown while stepped into an op
        self.show_buggy = False  # the buggy variant's code beside ours (bug-museum demos)
        # True once the user moved back from a later step (and until the end is reached
        # again): only then does the command bar warn that an op typed here branches. A
        # timeline opened at step 0, or jumped forward, was never stepped back.
        self.stepped_back = False

    def get_default_screen(self) -> Screen:
        return KvvizScreen(id="_default")

    # -- theme ---------------------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TimelineBar(id="timeline")
        with Horizontal(id="views"):
            yield TrieView(id="trie")
            yield BlockView(id="blocks")  # a hash cache's, in the trie's place (one of the two is shown)
            with Vertical(id="side"):
                yield PageGrid(id="pool")
                yield AllocationTable(id="allocations")
                yield HeapView(id="heap")
                yield FreeQueueView(id="queue")  # a hash cache's, in the heap's place
        with Horizontal(id="bottom"):
            yield QuestionPanel(id="practice")
            yield Narration(id="narration")
            yield CodePane(id="code")
            yield CodePane("buggy", id="code-buggy")
            yield WhyPanel(id="why")
        yield CommandBar(self.current_live_names, id="command")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.allocations.border_title = "Allocations"
        self.narration.border_title = "Narration · events"
        self.why.border_title = "Why?"
        self.why.display = False
        self.question_panel.display = False
        self.question_panel.border_title = "Practice"
        self.code.display = False
        self.code_buggy.display = False
        if not self.cursor_blink:
            self.command_bar.input.cursor_blink = False
        self._apply_size_classes()
        self.go_to(self.start_step or 0)
        if self.start_practice:
            self.action_toggle_practice()
        self.structure.focus()

    def _apply_size_classes(self) -> None:
        width, height = self.size
        screen = self.main_screen
        code_was_visible = self.code_visible
        screen.set_class(width < 100, "-narrow")
        screen.set_class(height < 36, "-short")
        screen.set_class(height < 24, "-tiny")
        if self.view is not None and self.code_visible != code_was_visible:
            self._show(rebuild=True)  # the code pane comes or goes with the width

    @property
    def main_screen(self) -> Screen:
        """The screen with the views (under any help or prompt screen)."""
        return self.screen_stack[0]

    # The widgets, by role (found once: a step must not walk the DOM, and a timer tick
    # while a help or prompt screen is open must still reach the main screen's views).
    def _widget(self, widget_id: str, kind: type):
        widget = self._widgets.get(widget_id)
        if widget is None:
            widget = self._widgets[widget_id] = self.main_screen.query_one(f"#{widget_id}", kind)
        return widget

    @property
    def trie(self) -> TrieView:
        return self._widget("trie", TrieView)

    @property
    def pool(self) -> PageGrid:
        return self._widget("pool", PageGrid)

    @property
    def allocations(self) -> AllocationTable:
        return self._widget("allocations", AllocationTable)

    @property
    def heap(self) -> HeapView:
        return self._widget("heap", HeapView)

    @property
    def blocks(self) -> BlockView:
        return self._widget("blocks", BlockView)

    @property
    def queue(self) -> FreeQueueView:
        return self._widget("queue", FreeQueueView)

    def _panes(self) -> tuple[LineView, LineView]:
        """The two design-dependent views for the snapshot shown (kvviz.ui.panes): the trie and
        the heap, or a hash cache's blocks and free queue."""
        kind = self.view.snapshot.kind if self.view is not None else self.session.config.kind
        return tuple(self._widget(pane.role, pane.view) for pane in panes_for(kind))

    @property
    def structure(self) -> LineView:
        """The upper view shown: the trie, or a hash cache's blocks."""
        return self._panes()[0]

    @property
    def narration(self) -> Narration:
        return self._widget("narration", Narration)

    @property
    def why(self) -> WhyPanel:
        return self._widget("why", WhyPanel)

    @property
    def timeline(self) -> TimelineBar:
        return self._widget("timeline", TimelineBar)

    @property
    def command_bar(self) -> CommandBar:
        return self._widget("command", CommandBar)

    @property
    def question_panel(self) -> QuestionPanel:
        return self._widget("practice", QuestionPanel)

    @property
    def code(self) -> CodePane:
        return self._widget("code", CodePane)

    @property
    def code_buggy(self) -> CodePane:
        return self._widget("code-buggy", CodePane)

    # -- showing a frame -------------------------------------------------------------------

    @property
    def last_step(self) -> int:
        """Index of the newest frame."""
        return len(self.session) - 1

    def go_to(self, step: int) -> None:
        """Show frame ``step`` (clamped to the timeline). In practice mode a move forward past
        an unanswered question stops before its step and asks it."""
        target = max(0, min(self.last_step, int(step)))
        practice = self._current_practice()
        if practice is not None:
            if practice.pending is not None and target > self.step:
                self.notify("Answer the question first (a number key, a to type, s to skip).", timeout=4)
                return
            question = practice.first_unanswered(self.step, target) if target > self.step else None
            if question is not None:
                self.action_pause()
                practice.ask(question)
                target = question.step - 1
            else:
                practice.leave(target)
        self._moved(target)
        self.step = target
        self.substep = None  # a move by whole steps steps out of the op
        self._show(rebuild=True)
        self._show_practice()

    def _moved(self, target: int) -> None:
        """Remember whether the user stepped back (see ``stepped_back``)."""
        if target >= self.last_step:
            self.stepped_back = False
        elif target < self.step:
            self.stepped_back = True

    def select(self, selection: Selection | None) -> None:
        """Select an item; every view highlights it and what is linked to it."""
        self.selection = selection
        self._show(rebuild=False)

    def _show(self, rebuild: bool) -> None:
        frame = self.session.frame(self.step)
        previous = None
        if self.step > 0 and needs_previous(frame):
            previous = self.session.frame(self.step - 1).snapshot
        highlight = highlight_for(self.selection, frame.snapshot)
        view = FrameView(frame, self.labels(), highlight, violation_marks(frame), previous, self.selection,
                         self.revision, self.last_step)
        if self.why.display:  # the whole step's question, stepped in or not
            view = dataclasses.replace(view, why=answer_for(self.session, view))
        if self.substep is not None:
            view = self._substep_view(view)
        self.view = view
        upper, order = self._panes()
        for role, kind in ROLES.items():  # a loaded session may be of another design
            widget = self._widget(role, kind)
            widget.display = widget is upper or widget is order
        for widget in (upper, self.allocations, order):
            widget.show(view, rebuild)
        self.pool.show(view, rebuild)
        snap = view.snapshot
        for widget, pane in zip((upper, order), panes_for(snap.kind)):
            self._title(widget, pane.title(snap))
        # One unit, said: a converted trace's token is a block of the trace's size.
        blocks = self.session.units.block_tokens
        per_page = (f"1 block of {count(blocks, 'token')}" if blocks is not None
                    else count(snap.tokens_per_page, 'token'))
        self._title(self.pool, f"Page pool · {count(snap.page_count, 'page')} × {per_page}")
        self._title(self.allocations, f"Allocations · {len(snap.allocations)} live · hit in "
                                      f"{'blocks' if blocks is not None else 'tokens'}")
        self._title(self.narration, "Narration · sub-steps" if view.substep is not None else "Narration · events")
        if rebuild:
            self.narration.units = self.session.units
            self.narration.show(view)
            self._show_hint()
        self._show_code(view)
        if self.why.display:
            self.why.show(view)
        self._show_timeline()

    def _substep_view(self, whole: FrameView) -> FrameView:
        """The view of sub-step ``self.substep`` of the op shown: kvcore's state after it,
        marked with what it changed and what it moves (its focus)."""
        subs = self.session.substeps(self.step)
        index = self.substep = min(self.substep, len(subs) - 1)
        step = subs[index]
        state, before = subs.state(index), subs.state(index - 1)
        frame = substep_frame(whole.frame, before, state, step)
        code, buggy = (code_views(step, frame.op.kind, subs.before.kind, self.demo, self.show_buggy)
                       if self.code_visible else (None, None))
        sub = SubStepView(step, len(subs), nearby(subs, index), subs.note, subs.source, code, buggy)
        return dataclasses.replace(
            whole, frame=frame, previous=before if needs_previous(frame) else None,
            highlight=highlight_for(self.selection, state), violations=NO_HIGHLIGHT, substep=sub,
            focus=focus_highlight(step.focus, state, before))

    @property
    def code_visible(self) -> bool:
        """True when the code pane shows: as toggled (x), else while stepped into an op on a
        terminal of at least :data:`CODE_BESIDE_WIDTH` columns (narrower, the pane would
        halve the narration and cut the sub-step's sentence: x still shows it)."""
        if self.show_code is not None:
            return self.show_code
        return self.substep is not None and self.size.width >= CODE_BESIDE_WIDTH

    def has_buggy_code(self) -> bool:
        """True when the demo shown is a bug-museum demo with buggy code to show beside ours."""
        return self.demo is not None and pseudocode.buggy_variant(self.demo) is not None

    def _show_code(self, view: FrameView) -> None:
        visible = self.code_visible
        buggy = visible and view.substep is not None and view.substep.buggy is not None
        self.code.display = visible
        self.code_buggy.display = buggy
        self.main_screen.set_class(visible, "-code")
        if visible:
            code = view.substep.code if view.substep is not None else None
            title = code.title if code is not None else "Pseudo-code"
            if not buggy and self.has_buggy_code():
                title += " · b: the buggy code beside"
            self._title(self.code, title)
            self.code.show(view)
        if buggy:
            self._title(self.code_buggy, view.substep.buggy.title)
            self.code_buggy.show(view)

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
        return TimelineView(self._summaries, self.step, self.playing, SPEEDS[self.speed_index],
                            self.session.title, self.revision,
                            (sub.step.index, sub.count, sub.step.kind) if sub is not None else None)

    def _show_hint(self) -> None:
        # While playing, the step moves on by itself: no "stepped back" warning then; while a
        # question is asked, the step before it shows on purpose: say that instead.
        if self.practice is not None and self.practice.pending is not None:
            self.command_bar.set_hint(f"practice: step {self.practice.pending.step} shows once you answer "
                                      "(a number key, a to type, s to skip, t for a hint)")
            return
        if self.substep is not None and not self.playing:
            self.command_bar.set_hint(f"inside step {self.step}'s op: → ← move by sub-step, ] [ by notable ones, "
                                      "space plays them, o steps out")
            return
        self.command_bar.set_hint(
            None if self.playing or not self.stepped_back or self.step == self.last_step else
            f"stepped back to {self.step}/{self.last_step}: an op typed here asks before dropping later steps")

    def _title(self, widget, title: str) -> None:
        # Setting a border title repaints the whole widget: only when it changes.
        if self._titles.get(widget.id) != title:
            self._titles[widget.id] = title
            widget.border_title = title

    def _show_timeline(self) -> None:
        self.timeline.show(self.timeline_view())

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
        self.select(Selection(NODE, message.node))

    @on(PageGrid.PageSelected)
    @on(FreeQueueView.PageSelected)
    @on(BlockView.BlockSelected)  # a block is its page's: every view marks the page
    def _page_selected(self, message) -> None:
        self.select(Selection(PAGE, message.page))

    @on(AllocationTable.AllocationSelected)
    def _allocation_selected(self, message: AllocationTable.AllocationSelected) -> None:
        self.select(Selection(ALLOCATION, message.allocation))

    @on(TimelineBar.StepClicked)
    def _step_clicked(self, message: TimelineBar.StepClicked) -> None:
        self.go_to(message.step)

    # -- stepping --------------------------------------------------------------------------

    def action_next_step(self) -> None:
        """One step forward; stepped into an op, one sub-step (past the op's last, on into
        the next op)."""
        if self.substep is None:
            super().action_next_step()
        elif not self.next_substep() and self.step >= self.last_step:
            self.notify("The last sub-step of the last op: o steps out.", timeout=3)

    def action_previous_step(self) -> None:
        """One step back; stepped into an op, one sub-step (before the op's first, the op
        before's last)."""
        if self.substep is None:
            super().action_previous_step()
        elif not self.previous_substep():
            self.notify("The first sub-step of the first op.", timeout=3)

    def action_step_into(self) -> None:
        """Step into the op that led to the step shown (at step 0, the first op): its first
        sub-step, with kvcore's state after it."""
        if self.substep is not None:
            self.notify(f"Already inside step {self.step}'s op: → ← move by sub-step, o steps out.", timeout=3)
        elif not self.step_into():
            self.notify("No op to step into: the timeline has only its start.", timeout=3)

    def action_step_out(self) -> None:
        """Back to the whole step (the state after the op, with its change marks)."""
        self.step_out()

    def action_escape(self) -> None:
        """Escape steps out of the op when stepped in, else forgets the selection."""
        if not self.step_out():
            self.action_clear_selection()

    def substeps_of(self, step: int):
        """The sub-steps of step ``step``'s op (built on first asking; see Session.substeps)."""
        return self.session.substeps(step)

    def show_substep(self, step: int, index: int | None) -> None:
        """Show sub-step ``index`` of step ``step``'s op (None: the whole step)."""
        stepping_in_or_out = (index is None) != (self.substep is None)
        self._moved(step)
        self.step = step
        self.substep = index
        self._show(rebuild=True)
        self._show_practice()
        if stepping_in_or_out:  # the footer's keys change (i, o); redrawing it every sub-step costs
            self.refresh_bindings()

    def enter_op(self, step: int) -> bool:
        # In practice mode a question may be waiting at that step: go there the way a step
        # forward does, which asks it first (and so steps out).
        if self._current_practice() is not None:
            self.go_to(step)
            self.refresh_bindings()
            return False
        return True

    def action_next_interesting(self) -> None:
        """The next step with an eviction, a failure or a violation; stepped into an op, its
        next notable sub-step (a pop, an eviction, a new candidate, ...)."""
        if self.substep is not None:
            if not self.notable_substep(1):
                self.notify("No later notable sub-step in this op (→ goes on into the next op).", timeout=4)
            return
        summaries = self.session.summaries
        target = next((i for i in range(self.step + 1, len(summaries)) if summaries[i].interesting), None)
        if target is None:
            self.notify("No later eviction, failure or violation." + self._why_nothing_interesting(), timeout=5)
            return
        self.go_to(target)

    def action_previous_interesting(self) -> None:
        """The previous step with an eviction, a failure or a violation; stepped into an op,
        its previous notable sub-step."""
        if self.substep is not None:
            if not self.notable_substep(-1):
                self.notify("No earlier notable sub-step in this op.", timeout=4)
            return
        summaries = self.session.summaries
        target = next((i for i in range(self.step - 1, -1, -1) if summaries[i].interesting), None)
        if target is None:
            self.notify("No earlier eviction, failure or violation." + self._why_nothing_interesting(), timeout=5)
            return
        self.go_to(target)

    def _why_nothing_interesting(self) -> str:
        """Why ] and [ may find nothing at all: a pool that never fills never evicts."""
        if any(s.interesting for s in self.session.summaries):
            return ""
        return (f" No step of this timeline evicts, fails or breaks an invariant: the pool "
                f"({self.session.config.pages} pages) never ran out of free pages.")

    def first_violation(self) -> int | None:
        """The first step whose invariants fail, or None."""
        return next((s.index for s in self.session.summaries if s.violations), None)

    def action_first_violation(self) -> None:
        """Jump to the first step with an invariant violation."""
        target = self.first_violation()
        if target is None:
            self.action_no_violation()
            return
        self.go_to(target)

    def action_no_violation(self) -> None:
        """``v`` on a timeline whose invariants all hold: say so in the status line."""
        self.notify("No invariant violations in this timeline: v has no step to go to.", timeout=4)

    def action_jump(self) -> None:
        """Ask for a step number and go there."""
        last = self.last_step

        def check(value: str) -> str | None:
            value = value.strip()
            if not value.isdigit():
                return f"a step number, 0..{last}"
            # Longer than the last step's number: too big, said before int() (Python refuses
            # to convert more than 4,300 digits).
            if len(value.lstrip("0")) > len(str(last)) or int(value) > last:
                return f"step {value} does not exist: the timeline has steps 0..{last}"
            return None

        def done(value: str | None) -> None:
            if value is not None:
                self.go_to(int(value))

        self.push_screen(PromptScreen(f"Go to step (0..{last})", str(self.step), check=check, restrict=r"[0-9]*",
                                      max_length=len(str(last)) + 8), done)

    # -- play ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "play":
            return not self.playing
        if action == "pause":
            return self.playing
        if action in ("first_violation", "no_violation"):
            return any(s.violations for s in self.session.summaries) == (action == "first_violation")
        if action in ("toggle_buggy", "no_buggy_code"):
            return self.has_buggy_code() == (action == "toggle_buggy")
        if action in ("answer_choice", "type_answer", "skip_question", "hint"):
            return self.practice is not None and self.practice.pending is not None
        if action == "step_into":  # not while a question is asked: the footer shows its keys then
            return self.substep is None and not (self.practice is not None and self.practice.pending is not None)
        if action == "step_out":
            return self.substep is not None
        return True

    def action_play(self) -> None:
        """Start playing (from the start if at the end); stepped into an op, play its
        sub-steps (and the next ops')."""
        if self.playing:
            return
        if self.substep is not None:
            if self.step >= self.last_step and self.substep + 1 >= len(self.substeps_of(self.step)):
                self.show_substep(1, 0)
        elif self.step >= self.last_step:
            self.go_to(0)
        self.playing = True
        self._start_timer()
        self._play_state_changed()

    def action_pause(self) -> None:
        """Stop playing."""
        if not self.playing:
            return
        self.playing = False
        self._stop_timer()
        self._play_state_changed()

    def action_play_pause(self) -> None:
        """Toggle play / pause."""
        if self.playing:
            self.action_pause()
        else:
            self.action_play()

    def play_tick(self) -> None:
        """One step of playback (the timer calls this; stepped in, one sub-step); pauses at the end."""
        if self.substep is not None:
            if not self.next_substep() or self.substep is None:
                self.action_pause()
            return
        if self.step >= self.last_step:
            self.action_pause()
            return
        self.go_to(self.step + 1)
        if self.step >= self.last_step:
            self.action_pause()

    def action_faster(self) -> None:
        """Play faster."""
        self._set_speed(self.speed_index + 1)

    def action_slower(self) -> None:
        """Play slower."""
        self._set_speed(self.speed_index - 1)

    @property
    def speed(self) -> float:
        """Play speed in steps per second."""
        return SPEEDS[self.speed_index]

    def _set_speed(self, index: int) -> None:
        self.speed_index = max(0, min(len(SPEEDS) - 1, index))
        if self.playing:
            self._stop_timer()
            self._start_timer()
        self._show_timeline()

    def _start_timer(self) -> None:
        if not self.play_timer:
            return
        self._timer = self.set_interval(1 / SPEEDS[self.speed_index], self.play_tick)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def _play_state_changed(self) -> None:
        self.main_screen.set_class(self.playing, "-playing")
        self.refresh_bindings()
        self._show_hint()
        self._show_timeline()

    # -- practice mode ---------------------------------------------------------------------

    def _current_practice(self) -> Practice | None:
        """The practice run on the timeline shown; a changed timeline starts a fresh run."""
        if self.practice is not None and self.practice.revision != self.revision:
            self.practice = self.practice.renewed(self.session, self.revision)
        return self.practice

    def _show_practice(self) -> None:
        practice = self.practice
        if practice is not None:
            self.question_panel.show(practice.view(self.step))
            self.refresh_bindings()

    def action_toggle_practice(self) -> None:
        """Practice mode on or off: on, each step forward onto a step with a question asks it
        first, and reveals the step only after an answer or a skip."""
        if self.practice is not None:
            self.practice = None
            self.question_panel.display = False
            self.main_screen.set_class(False, "-practice")
            self.structure.focus()
            self.refresh_bindings()
            return
        why_not = refusal(self.session)
        if why_not is not None:  # no question kind is true of this cache: say so, stay put
            self.notify(why_not, severity="warning", timeout=8)
            return
        self.practice = Practice(self.session, self.revision, self.practice_seed)
        self.question_panel.display = True
        self.main_screen.set_class(True, "-practice")
        self._show_practice()

    def answer_question(self, line: str) -> None:
        """Grade ``line`` as the answer to the question asked (blank: skip) and reveal its step;
        a line that is no answer says why and asks again."""
        practice = self._current_practice()
        if practice is None or practice.pending is None:
            return
        step = practice.pending.step
        try:
            practice.answer(line)
        except AnswerError as error:
            self.notify(str(error), severity="warning", timeout=6)
            return
        self._reveal(step)

    def _reveal(self, step: int) -> None:
        self.step = step
        self._show(rebuild=True)
        self._show_practice()
        if self.question_panel.input.has_focus:
            self.structure.focus()

    def action_answer_choice(self, digit: str) -> None:
        """A number key: that choice (a number question's choices are numbered by their values)."""
        self.answer_question(digit)

    def action_type_answer(self) -> None:
        """Put the cursor in the answer line."""
        self.question_panel.input.focus()

    def action_skip_question(self) -> None:
        """Skip the question asked (counted as asked, not right) and reveal its step."""
        practice = self._current_practice()
        if practice is None or practice.pending is None:
            return
        step = practice.pending.step
        practice.skip()
        self._reveal(step)

    def action_hint(self) -> None:
        """Show the question's hint."""
        practice = self._current_practice()
        if practice is None or practice.pending is None:
            return
        practice.hint_shown = True
        self._show_practice()

    @on(QuestionPanel.AnswerTyped)
    def _answer_typed(self, message: QuestionPanel.AnswerTyped) -> None:
        self.answer_question(message.text)

    # -- panels and focus --------------------------------------------------------------------

    def action_toggle_code(self) -> None:
        """Show or hide the pseudo-code pane (shown by default while stepped into an op)."""
        self.show_code = not self.code_visible
        self._show(rebuild=False)

    def action_toggle_buggy(self) -> None:
        """A bug-museum demo: show the buggy variant's pseudo-code beside ours (the differing
        lines marked ≠), or hide it."""
        if not self.has_buggy_code():
            self.action_no_buggy_code()
            return
        self.show_buggy = not self.show_buggy
        if self.show_buggy and not self.code_visible:
            self.show_code = True
        self._show(rebuild=False)

    def action_no_buggy_code(self) -> None:
        """``b`` where there is no buggy code: say why in the status line."""
        bug = pseudocode.demo_bug(self.demo) if self.demo is not None else None
        if bug is not None and bug in pseudocode.NO_VARIANT:
            why = f"{self.demo} has no buggy code to show beside ours: {pseudocode.NO_VARIANT[bug]}."
        else:
            shown = f"this is the {self.demo} demo" if self.demo is not None else "this timeline is no demo"
            why = f"b shows a bug-museum demo's buggy code (bug-*, shortfin-*); {shown}."
        self.notify(why, timeout=6)

    def action_toggle_why(self) -> None:
        """Show or hide the why panel."""
        self.why.display = not self.why.display
        if self.why.display and self.view is not None:
            self.view = dataclasses.replace(self.view, why=answer_for(self.session, self.view))
            self.why.show(self.view)

    def action_toggle_compact(self) -> None:
        """Switch the page grid's layout."""
        self.pool.action_toggle_compact()

    def action_focus_command(self) -> None:
        """Put the cursor in the command bar."""
        self.command_bar.input.focus()

    def action_clear_selection(self) -> None:
        """Forget the selection."""
        if self.selection is not None:
            self.select(None)

    def action_help(self) -> None:
        """Keys and legend."""
        self.push_screen(HelpScreen())

    # -- the command bar -------------------------------------------------------------------

    @on(CommandBar.CommandTyped)
    def _command_typed(self, message: CommandBar.CommandTyped) -> None:
        # The app parses: it owns the session, whose vocabulary learns the quoted words.
        try:
            op = parse_command(message.text, self.current_live_names(), self.session.vocab)
        except ScenarioError as error:
            self.command_bar.show_error(error)
            return
        self.command_bar.accepted(message.text)
        if isinstance(op, Expect):
            self.check_expect(op)
            return
        if self.step == self.last_step:
            self.apply_op(op)
            return

        def answered(choice: str | None) -> None:
            self.resolve_branch(choice, message.text)

        self.push_screen(BranchScreen(op.text, self.step, self.last_step), answered)

    def resolve_branch(self, choice: str | None, text: str) -> None:
        """Act on the branch question for command ``text``: 'branch', 'append' or None (cancel)."""
        if choice is None:
            self.command_bar.input.focus()
            return
        if choice == "branch":
            self.session.truncate(self.step)
            self.revision += 1
            self.edited = True
        try:
            op = parse_command(text, self.session.live_names(), self.session.vocab)
        except ScenarioError as error:  # the names at the end differ from those where we were
            self.go_to(self.last_step)
            self.command_bar.show_error(error)
            self.command_bar.input.focus()
            return
        self.apply_op(op)

    def check_expect(self, expect: Expect) -> ExpectResult | None:
        """Check a typed ``expect`` line against the step shown and say the result; the
        timeline does not change. None when the line is scoped to another cache kind."""
        self.command_bar.clear()
        kind = self.session.config.kind
        text = expect.text or "expect"
        if not expect.applies_to(kind):
            self.notify(f"{text}: written for {', '.join(expect.kinds or ())}, not this {kind} cache; "
                        "not checked", severity="warning", timeout=6)
            return None
        result = evaluate(expect, self.session.frame(self.step))
        if result.ok:
            self.notify(f"✓ {text} holds at step {self.step}", timeout=5)
        else:
            self.notify(f"✗ {text} at step {self.step}: {result.message}", severity="error", timeout=8)
        return result

    def apply_op(self, op) -> None:
        """Apply ``op`` at the end of the timeline and show the new step."""
        self.action_pause()
        frame = self.session.apply(op)
        self.revision += 1
        self.edited = True
        self.command_bar.clear()
        self.go_to(self.last_step)
        if frame.failed:
            self.notify(f"{op.text}: {frame.error.kind}: {frame.error.message}. Nothing changed.",
                        severity="warning", timeout=6)
        if frame.violations:
            self.notify(f"{count(len(frame.violations), 'invariant violation')} after {op.text}", severity="error")

    # -- export and save -------------------------------------------------------------------

    EXPORT_SUFFIXES = (".json", ".md", ".svg")

    def export_paths(self) -> dict[str, Path]:
        """Where ``e`` writes the current step: ``kvviz-<title>-step<N>.json/.md/.svg``.

        A session changed in the UI adds ``-edited-<tag>`` (a digest of its script), so its
        files never take the unchanged scenario's names; a name that is taken gets ``-2``,
        ``-3``, ... (never overwritten).
        """
        from ..export.bundle import session_script

        folder = self.export_dir or Path.cwd()
        edited = f"-edited-{edit_tag(session_script(self.session))}" if self.edited else ""
        stem = free_stem(folder, f"kvviz-{slug(self.session.title)}{edited}-step{self.step}", self.EXPORT_SUFFIXES)
        return {suffix: folder / f"{stem}{suffix}" for suffix in self.EXPORT_SUFFIXES}

    def views_svg(self) -> str:
        """An SVG of the screen as it is now, titled with the session and step."""
        sub = self.view.substep if self.view is not None else None
        inside = f" · sub-step {sub.label}" if sub is not None else ""
        return self.export_screenshot(title=f"kvviz · {self.session.title or 'session'} · step {self.step}{inside}")

    def export_step(self) -> list[Path]:
        """Write the bundle, the Markdown and an SVG screenshot of the current step (under
        names no file has yet); returns the paths written."""
        from ..export import write_export
        from ..export.atomic import write_text_atomic

        paths = self.export_paths()
        next(iter(paths.values())).parent.mkdir(parents=True, exist_ok=True)
        write_export(self.session, self.step, paths[".json"])
        write_export(self.session, self.step, paths[".md"])
        write_text_atomic(paths[".svg"], self.views_svg())
        return list(paths.values())

    def without_notifications(self, then: Callable[[], None]) -> None:
        """Hide the toasts, call ``then`` once the screen was drawn without them, show them
        again: a picture of the views must not carry the notifications of earlier exports."""
        try:
            rack = self.screen.query_one("#textual-toastrack")
        except NoMatches:
            then()
            return
        if not rack.display:
            then()
            return
        rack.display = False
        self.screen.refresh(layout=True)  # the layout is redone before the callback below

        def shoot() -> None:
            try:
                then()
            finally:
                rack.display = True

        self.call_after_refresh(shoot)

    def action_export(self) -> None:
        """Export the current step (a picture of the views, without toasts) and say where
        the files went."""
        self.without_notifications(self._export_and_tell)

    def _export_and_tell(self) -> None:
        try:
            written = self.export_step()
        except (OSError, ValueError) as error:
            self.notify(f"Export failed: {error}", severity="error", timeout=8)
            return
        self.notify("\n".join(str(p) for p in written), title=f"Exported step {self.step}", timeout=8)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot: an SVG of the views (no toasts) in the export folder,
        under a name no file has yet; says the path it wrote, or why it could not."""
        from ..export.atomic import write_text_atomic

        folder = Path(path).expanduser() if path else (self.export_dir or Path.cwd())
        name = filename or f"kvviz-{slug(self.session.title)}-step{self.step}-screen.svg"

        def shoot() -> None:
            target = folder / name
            try:
                target = free_path(target)
                write_text_atomic(target, self.views_svg())
            except OSError as error:
                reason = error.strerror or str(error)
                self.notify(f"Could not write {target}: {reason}", title="Screenshot not saved",
                            severity="error", timeout=10)
                return
            self.notify(str(target), title="Saved the screenshot", timeout=8)

        self.without_notifications(shoot)
        return None

    def script_path(self, name: str | Path) -> Path:
        """Where ctrl+s writes ``name``: ``.kvs`` added when it has no suffix; relative names
        in the export folder (when one was given)."""
        path = Path(name).expanduser()
        if not path.suffix:
            path = path.with_suffix(".kvs")
        if not path.is_absolute() and self.export_dir is not None:
            path = self.export_dir / path
        return path

    def save_script(self, path: str | Path) -> Path:
        """Write the session's script (every op so far) as a ``.kvs`` file; returns the path.
        Replaces an existing file: the caller asked the user first."""
        from ..export.atomic import write_text_atomic
        from ..export.bundle import session_script

        path = self.script_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, session_script(self.session))
        return path

    def action_save_script(self) -> None:
        """Ask for a file name (one no file has yet, by default) and save the script there;
        a name that exists is replaced only when confirmed with a second enter."""
        confirmed: list[Path] = []

        def write(value: str) -> str | None:
            if not value.strip():
                return "a file name, e.g. kvviz-session.kvs"
            problem = name_problem(value.strip())
            if problem is not None:
                return problem
            path = self.script_path(value.strip())
            try:
                if path.exists() and path not in confirmed:
                    confirmed.append(path)
                    return f"{shortened(path)} exists: enter again to replace it, or type another name"
                saved = self.save_script(path)
            except (OSError, ValueError) as error:  # refused by the file system: one line, keep asking
                reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                return f"cannot write {shortened(path)}: {reason}"
            self.notify(str(saved), title=f"Saved the script ({len(self.session.steps)} ops)", timeout=6)
            return None

        try:
            default = free_path(self.script_path(SCRIPT_NAME)).name
        except NoFreeName:
            default = SCRIPT_NAME
        self.push_screen(PromptScreen("Save the script as", default, check=write,
                                      help="enter writes the .kvs file · escape cancels"))

    # -- other sessions ----------------------------------------------------------------------

    @staticmethod
    def demo_names() -> list[str]:
        """The demos that can be opened from the palette."""
        from ..demos import demo_names

        return demo_names()

    def open_demo(self, name: str) -> None:
        """Replace the session with demo ``name``, at its first step."""
        from ..demos import load_demo

        try:
            scenario = load_demo(name)
        except (KeyError, ScenarioError) as error:
            self.notify(str(error), severity="error")
            return
        self.load_session(Session.from_scenario(scenario), demo=name)

    def load_session(self, session: Session, step: int = 0, demo: str | None = None) -> None:
        """Show another session (``demo``: the demo's name, if it is one)."""
        self.action_pause()
        self.session = session
        self.demo = demo
        self.show_buggy = False
        self.stepped_back = False
        self.revision += 1
        self.edited = False
        self.selection = None
        self.trie.folded.clear()
        self.step = 0  # a new timeline: opening it at ``step`` is no step back
        self.go_to(step)


MAX_NAME_BYTES = 255
"""The longest file name (one path part, in UTF-8 bytes) Linux and macOS file systems take."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file name, in one line, or None: a NUL or another control
    character (the OS refuses the first, the second would garble the messages), or a part
    longer than :data:`MAX_NAME_BYTES`."""
    if "\x00" in name:
        return "a file name cannot hold a NUL byte (\\0)"
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        return f"a file name cannot hold the control character {control!r}"
    longest = max((part for part in Path(name).parts), key=lambda part: len(part.encode("utf-8")), default="")
    size = len(longest.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"a file name holds at most {MAX_NAME_BYTES} bytes; this one has {size:,}"
    return None


def shortened(path: str | Path, limit: int = 40) -> str:
    """``path`` as text, cut in the middle with ``…`` beyond ``limit`` characters (a status
    line stays one line)."""
    text = str(path)
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


def make_app(session: Session, step: int | None = None, **opts) -> KvvizApp:
    """The app on ``session``, opened at ``step`` (default 0).

    Options: ``export_dir`` (where ``e`` and ctrl+s write; default the current directory),
    ``theme`` (any registered theme name; default kvviz-dark), ``animations`` and
    ``cursor_blink`` (False for deterministic screenshots), ``practice`` (start in practice
    mode), ``practice_seed`` (which questions: the same seed asks the same ones) and
    ``demo`` (the demo's name or file, e.g. ``bug-b5-ref-leak``: a bug-museum demo can show
    its buggy pseudo-code beside ours), ``play_timer`` (False: playing starts no timer, the
    caller ticks with ``play_tick()``; tests use it so no wall clock drives them).
    """
    return KvvizApp(session, step, **opts)


def run_app(session: Session, step: int | None = None) -> None:
    """Run the UI in the terminal."""
    make_app(session, step).run()
