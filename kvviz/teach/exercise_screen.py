# SPDX-License-Identifier: Apache-2.0
"""The exercise mode of the UI (``kvviz practice DEMO``): the learner plays the cache.

The screen shows kvcore's state right before the move asked (the design's own views: trie
and heap, or blocks and free queue, beside the page pool and the allocations, through the
main screen's :class:`~kvviz.ui.widgets.cache_column.CacheColumn`), and the move with its
lettered choices (:class:`~kvviz.teach.move_panel.MovePanel`). A choice is made by its
letter, by arrows and enter, or by clicking it in the list; a wrong one shows its mistake
and why and stays on the move (retry, or ``x`` to fix: the cache's move is applied, the miss
counted); a right one shows what kvcore did and goes on. The header keeps the score per
move. A victim move hides the heap's array (its slot 0 is the answer): the learner finds the
smallest key among the trie's leaves.

The screen owns one reactive, :attr:`ExerciseScreen.play` (a frozen
:class:`~kvviz.teach.exercise.Play`); its watcher redraws everything from it.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Static

from kvviz.teach.exercise import MOVE_KINDS, Exercise, Move, Play
from kvviz.teach.quiz.choices import LETTERS
from kvviz.core.view import FrameView, Highlight, TokenLabels, substep_frame
from kvviz.ui.panes import panes_for
from kvviz.ui.themes import set_up_appearance, variable_defaults
from kvviz.ui.widgets.cache_column import CacheColumn
from kvviz.ui.widgets.heap_view import HeapView
from kvviz.ui.widgets.key_footer import KeyFooter
from kvviz.ui.widgets.trie_view import TrieView
from kvviz.teach.move_panel import MovePanel

CHOICE_KEYS = LETTERS[:8]
"""The letters that choose (a move has at most :data:`kvviz.teach.exercise.MAX_CHOICES`)."""


class ExerciseScreen(Screen):
    """One exercise, move by move (see the module doc)."""

    CSS = """
    ExerciseScreen { layout: vertical; background: $background; }
    ExerciseScreen #exercise-header { height: 2; padding: 0 1; background: $panel; }
    ExerciseScreen #exercise-body { height: 1fr; }
    ExerciseScreen #exercise-column { width: 3fr; }
    ExerciseScreen #exercise-side { width: 2fr; border: round $accent; border-title-color: $accent; }
    ExerciseScreen .structure { height: 1fr; }
    ExerciseScreen .pool { height: auto; max-height: 8; }
    ExerciseScreen .lower { height: 1fr; }
    ExerciseScreen .allocations { width: 1fr; }
    ExerciseScreen .order { width: 1fr; }
    ExerciseScreen .structure, ExerciseScreen .pool, ExerciseScreen .allocations, ExerciseScreen .order {
        border: round $kv-rule; border-title-color: $kv-muted;
    }
    """

    BINDINGS: ClassVar = [
        *(Binding(k, f"choose('{k}')", "choose", show=k == "a", key_display="a-h", priority=True) for k in CHOICE_KEYS),
        Binding("x", "fix", "fix (a miss)", priority=True),
        Binding("question_mark", "hint", "hint", key_display="?", priority=True),
        Binding("q", "quit", "quit", priority=True),
    ]

    play: reactive[Play | None] = reactive(None, always_update=True)

    def __init__(self, session, exercise: Exercise):
        super().__init__()
        self.session = session
        self.exercise = exercise
        self.labels = TokenLabels(session.vocab)
        self.panes = panes_for(session.frame(0).snapshot.kind)
        self.feedback: tuple[str, bool | None, tuple[str, ...]] = ("", None, ())

    def compose(self) -> ComposeResult:
        yield Static(id="exercise-header")
        with Horizontal(id="exercise-body"):
            yield CacheColumn((self.panes,), prefix="exercise-", id="exercise-column")
            with Vertical(id="exercise-side"):
                yield MovePanel(id="move-panel")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#exercise-side").border_title = "Your move"
        self.play = Play(self.exercise)
        self.query_one(MovePanel).choices.focus()

    # -- drawing ------------------------------------------------------------------------------

    def watch_play(self, play: Play | None) -> None:
        if play is None:
            return
        move = play.move
        header = self.query_one("#exercise-header", Static)
        done = len(play.results)
        where = (f"step {move.step}: {move.op_text}, move {move.index + 1} of {len(self.exercise.moves)}"
                 if move is not None else "done")
        header.update(f"Practice: {self.exercise.title} — {where}\n{play.score_line()}"
                      + (" (this move: missed once)" if play.missed else ""))
        panel = self.query_one(MovePanel)
        panel.show_move(move, f"Move {move.index + 1}" if move is not None else "")
        panel.show_feedback(*self.feedback)
        if move is not None:
            self._show_state(move)
        elif done:
            panel.show_feedback(f"Final {play.score_line().lower()}.", None, self.feedback[2])

    def _show_state(self, move: Move) -> None:
        """kvcore's state before the move, in the design's views (a victim's: no heap array)."""
        subs = self.session.substeps(move.step)
        frame = substep_frame(self.session.frame(move.step), move.state, move.state,
                              subs[max(0, move.anchor - 1)])
        slot = move.info("slot")
        focus = Highlight(slots=frozenset({slot})) if slot is not None else Highlight()
        view = FrameView(frame, self.labels, last_step=len(self.session) - 1, focus=focus)
        column = self.query_one(CacheColumn)
        column.show(view, rebuild=True, units=self.session.units)
        column.order.display = move.kind != "victim"

    # -- actions ------------------------------------------------------------------------------

    def action_choose(self, letter: str) -> None:
        """Answer the move with choice ``letter`` (a letter it does not have says so)."""
        play = self.play
        if play is None or play.move is None:
            return
        move = play.move
        choice = next((c for c in move.choices if c.letter == letter), None)
        if choice is None:
            self.feedback = (f"No choice {letter}: the choices are a-{move.choices[-1].letter}.", False, ())
            self.play = play
            return
        after, verdict = play.answer(choice)
        self.feedback = (verdict.line, verdict.right, move.said if verdict.right else ())
        self.play = after

    def action_fix(self) -> None:
        """Apply the cache's move, count the miss, go on."""
        play = self.play
        if play is None or play.move is None:
            return
        move = play.move
        after, verdict = play.fix()
        self.feedback = (verdict.line, False, move.said)
        self.play = after

    def action_hint(self) -> None:
        """State the rule the move follows."""
        play = self.play
        if play is None or play.move is None:
            return
        kind = MOVE_KINDS[play.move.kind]
        self.feedback = (f"Hint ({kind.title}): {kind.rule}.", None, ())
        self.play = play

    def action_quit(self) -> None:
        self.app.exit()

    def on_move_panel_choice_made(self, message: MovePanel.ChoiceMade) -> None:
        self.action_choose(message.letter)

    def on_click(self, event: events.Click) -> None:
        """A click on a node of the trie or the heap (the view has put its cursor there)
        answers the move that names it: a victim, a node to adopt, the slot to swap with."""
        widget = event.widget
        if isinstance(widget, (TrieView, HeapView)) and isinstance(widget.cursor, int):
            self.answer_node(widget.cursor, in_heap=isinstance(widget, HeapView))

    def answer_node(self, node: int, *, in_heap: bool = False) -> None:
        """Answer the current move with ``node``: the victim, the node a dedup adopts, or (in
        the heap) the entry the sifting one swaps with (itself: the sift stops)."""
        play = self.play
        if play is None or play.move is None:
            return
        move = play.move
        value = None
        if move.kind == "victim":
            value = (node,)
        elif move.kind == "dedup":
            value = ("adopt", node)
        elif move.kind == "swap" and in_heap and node in move.state.heap:
            slot, other = move.info("slot"), move.state.heap.index(node)
            value = () if other == slot else (min(slot, other), max(slot, other))
        choice = next((c for c in move.choices if c.value == value), None)
        if choice is None:
            self.feedback = (f"node {node} is none of this move's choices", None, ())
            self.play = play
            return
        self.action_choose(choice.letter)


class ExerciseApp(App[None]):
    """Hosts one :class:`ExerciseScreen`; :attr:`play` is where the learner got to."""

    TITLE = "kvviz practice"

    def __init__(self, session, exercise: Exercise, *, theme: str | None = None, animations: bool = True):
        super().__init__()
        set_up_appearance(self, theme, animations)
        self.session = session
        self.exercise = exercise
        self.screen_ = ExerciseScreen(session, exercise)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    def on_mount(self) -> None:
        self.push_screen(self.screen_)

    @property
    def play(self) -> Play | None:
        """The learner's play so far (None before the screen mounted)."""
        return self.screen_.play


def make_exercise_app(session, exercise: Exercise, **opts) -> ExerciseApp:
    """The exercise app on ``session``'s ``exercise``. Options: ``theme``, ``animations``
    (False for tests and screenshots)."""
    return ExerciseApp(session, exercise, **opts)
