# SPDX-License-Identifier: Apache-2.0
"""Quiz mode's state: which question waits before which step, what was answered, the score.

The questions, their grading, feedback and the tally are the model's
(:mod:`kvviz.teach.quiz`); this only remembers, for one run of the app on one timeline, which
question is being asked, which were answered (so stepping back and forward again never asks
twice) and the score. Asking reads the session's frames: it never applies an op, so the
timeline is never changed by asking. :class:`QuizView` is the frozen value the question
panel draws; :class:`QuizActions` are the main screen's keys for it. While a question is
asked, :func:`withheld` keeps the narration and the why panel from telling its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvviz.core.limits import MAX_QUIZ_STEPS
from kvviz.core.narrate import count
from kvviz.teach.quiz import AnswerError, Parting, Question, Reply, Tally, feedback, questions, refusal
from kvviz.teach.quiz.choices import HINT_WORDS
from kvviz.core.view import FrameView
from kvviz.core.why import Answer
from kvviz.ui.stepping import Position

"""Answer lines that ask for the next hint instead (as in ``kvviz quiz --plain``)."""

QUIZ_KEYS = ("type a letter or the answer, enter · ? enter: a hint · blank enter: skip · "
                 "esc back to the views (a type · s skip · t hint · p leave the quiz)")
"""The panel's key line while a question is asked (the bindings are the main screen's)."""

REVEALED_KEYS = "f step into the sub-step where your answer parted from the cache"
"""The panel's key line after a wrong answer that parted at a sub-step."""

WITHHELD_STORY = ("(The story is withheld while the question is asked: it often tells what comes next. "
                  "It shows again once you answer or skip.)")
"""The narration's line in place of the shown step's story while a question is asked."""

WITHHELD_WHY = Answer("Why? · withheld while the question is asked",
                      ("What it says about this step can tell the question's answer.",
                       "It answers again once you answer or skip."))
"""The why panel's answer while a question is asked."""


def withheld(view: FrameView) -> FrameView:
    """``view`` without what gives a pending question's answer away: a demo's story (the
    ``lru`` demo's names the line of candidates, oldest first, before its victim question, as
    ``kvviz quiz`` leaves it out) becomes a neutral line, and a why-answer ("it is evictable
    and the next victim") the panel's neutral one. The step's own facts (its op, the generated
    explanation of what it did, its events) stay: they are about the step before the question."""
    frame = view.frame
    if frame.story:
        frame = replace(frame, story=WITHHELD_STORY)
    return replace(view, frame=frame, why=None if view.why is None else WITHHELD_WHY)


@dataclass(frozen=True)
class QuizView:
    """What the question panel shows: the question being asked (or the one just revealed),
    its feedback once answered, the hints shown so far (each more telling), the score, a
    status line, and where a wrong answer parted from the cache (``f`` steps into it)."""

    question: Question | None
    feedback: tuple[str, ...]
    hints: tuple[str, ...]
    score: str
    status: str
    asking: bool
    parted: Parting | None = None

    @property
    def hint(self) -> bool:
        """Whether a hint is shown."""
        return bool(self.hints)


class QuizRun:
    """Questions at the interesting steps of one timeline, and the learner's answers to them.

    ``revision`` is the app's timeline revision the questions were made for: a changed
    timeline (an op typed, a demo opened) gets fresh questions and a fresh run.
    """

    def __init__(self, session, revision: int, seed: int = 0):
        self.revision = revision
        self.seed = seed
        self.by_step: dict[int, Question] = {q.step: q for q in questions(session, seed, last=MAX_QUIZ_STEPS)}
        self.answered: dict[int, Reply | None] = {}  # step -> reply (None: skipped)
        self.tally = Tally()
        self.pending: Question | None = None  # asked, not answered yet: the view shows step - 1
        self.revealed: Question | None = None  # answered just now: its feedback shows
        self.hints_shown = 0

    @property
    def hint_shown(self) -> bool:
        """Whether the pending question's first hint is shown."""
        return self.hints_shown > 0

    def renewed(self, session, revision: int) -> "QuizRun":
        """This run on a changed timeline: fresh questions, the score kept, and an answer
        kept where the same question is asked at the same step (an op appended or a branch
        leaves the questions before it as they were), so nothing answered is asked again."""
        fresh = QuizRun(session, revision, self.seed)
        fresh.tally = self.tally
        fresh.answered = {step: reply for step, reply in self.answered.items()
                          if fresh.by_step.get(step) == self.by_step.get(step)}
        return fresh

    def first_unanswered(self, start: int, stop: int) -> Question | None:
        """The first question not yet answered at a step in ``start + 1 .. stop``: stepping
        from ``start`` to ``stop`` stops there to ask."""
        for step in sorted(self.by_step):
            if start < step <= stop and step not in self.answered:
                return self.by_step[step]
        return None

    def ask(self, question: Question) -> None:
        """Start asking ``question`` (the app shows the step before it)."""
        self.pending = question
        self.revealed = None
        self.hints_shown = 0

    def answer(self, line: str) -> Reply | None:
        """Grade an answer line to the pending question and record it; a blank line skips.
        Raises AnswerError for a line that is no answer (nothing is recorded then)."""
        question = self.pending
        if question is None:
            raise AnswerError("no question is being asked")
        reply = question.read(line)
        self._record(question, reply)
        return reply

    def skip(self) -> None:
        """Skip the pending question (counted as asked, not right)."""
        if self.pending is not None:
            self._record(self.pending, None)

    def _record(self, question: Question, reply: Reply | None) -> None:
        self.answered[question.step] = reply
        self.tally = self.tally.add(reply)
        self.pending = None
        self.revealed = question

    def leave(self, step: int) -> None:
        """The app moved to ``step`` without answering: an unanswered question stops being asked
        (it is asked again the next time a step forward reaches it); a revealed one stays shown
        only while its step is."""
        if self.pending is not None and step != self.pending.step - 1:
            self.pending = None
        if self.revealed is not None and step != self.revealed.step:
            self.revealed = None
        if self.pending is None:
            self.hints_shown = 0

    def more_hint(self) -> None:
        """Show one more of the pending question's hints (the rule, where to look, the numbers)."""
        if self.pending is not None:
            self.hints_shown = min(self.hints_shown + 1, len(self.pending.hints))

    def parted(self) -> Parting | None:
        """Where the revealed question's wrong answer parted from the cache (None otherwise)."""
        if self.revealed is None:
            return None
        reply = self.answered.get(self.revealed.step)
        if reply is None or reply.right:
            return None
        return self.revealed.divergence(reply.value)

    def view(self, step: int) -> QuizView:
        """The panel's frozen value at ``step``."""
        score = self.tally.line()
        if self.pending is not None:
            return QuizView(self.pending, (), self.pending.hints[:self.hints_shown], score,
                                f"Before step {self.pending.step}: predict, then see.", True)
        if self.revealed is not None:
            reply = self.answered[self.revealed.step]
            return QuizView(self.revealed, feedback(self.revealed, reply), (), score,
                                f"Step {self.revealed.step} revealed.", False, self.parted())
        later = [s for s in sorted(self.by_step) if s > step and s not in self.answered]
        status = (f"{count(len(later), 'question')} ahead; the next before step {later[0]} (→ steps on)."
                  if later else
                  "No more questions after this step." if self.by_step else
                  "This timeline has no step to ask about.")
        return QuizView(None, (), False, score, status, False)


class QuizActions:
    """Quiz mode's actions for the main screen, which provides the reactive ``quiz``
    (a :class:`QuizRun`, or None when quiz mode is off), ``position``, ``session``,
    ``revision``, ``quiz_seed``, ``question_panel`` and ``notify``. Answering mutates the
    run and reveals the step: the screen's watchers draw the panel and the step."""

    def _current_quiz(self) -> QuizRun | None:
        """The quiz run on the timeline shown; a changed timeline starts a fresh run."""
        run = self.quiz
        if run is not None and run.revision != self.revision:
            # Not drawn by itself: the move that found the timeline changed draws it.
            self.set_reactive(type(self).quiz, run.renewed(self.session, self.revision))
        return self.quiz

    def without_giveaways(self, view: FrameView) -> FrameView:
        """``view`` as the narration and why panel draw it: while a question is asked,
        :func:`withheld`; otherwise as it is."""
        run = self.quiz
        return withheld(view) if run is not None and run.pending is not None else view

    def quiz_asks_first(self) -> bool:
        """True in quiz mode, where a step forward onto a question asks it first."""
        return self._current_quiz() is not None

    def action_toggle_quiz(self) -> None:
        """Quiz mode on or off: on, each step forward onto a step with a question asks it
        first, and reveals the step only after an answer or a skip."""
        if self.quiz is not None:
            asking = self.quiz.pending is not None
            self.quiz = None
            self.set_class(False, "-order-hidden")  # the panel that hid the heap is gone
            if asking:  # the story and the why withheld for the question come back
                self.position = self.position
            return
        why_not = refusal(self.session)
        if why_not is not None:  # no question kind is true of this cache: say so, stay put
            self.notify(why_not, severity="warning", timeout=8)
            return
        self.quiz = QuizRun(self.session, self.revision, self.quiz_seed)

    def answer_question(self, line: str) -> None:
        """Grade ``line`` as the answer to the question asked (blank: skip) and reveal its step;
        a line that is no answer says why and asks again."""
        run = self._current_quiz()
        if run is None or run.pending is None:
            return
        if line.strip().lower() in HINT_WORDS:
            self.action_hint()
            return
        step = run.pending.step
        try:
            run.answer(line)
        except AnswerError as error:
            self.notify(str(error), severity="warning", timeout=6)
            return
        self._reveal(step)

    def _reveal(self, step: int) -> None:
        self.position = Position(step)
        if self.question_panel.input.has_focus:
            self.structure.focus()

    def action_answer_choice(self, label: str) -> None:
        """Answer with choice ``label`` (a letter), as if typed in the answer line."""
        self.answer_question(label)

    def action_type_answer(self) -> None:
        """Put the cursor in the answer line."""
        self.question_panel.input.focus()

    def action_skip_question(self) -> None:
        """Skip the question asked (counted as asked, not right) and reveal its step."""
        run = self._current_quiz()
        if run is None or run.pending is None:
            return
        step = run.pending.step
        run.skip()
        self._reveal(step)

    def action_hint(self) -> None:
        """Show the question's next hint (the rule, then where to look, then this state's numbers)."""
        run = self._current_quiz()
        if run is None or run.pending is None:
            return
        run.more_hint()
        self.mutate_reactive(type(self).quiz)

    def action_step_to_parting(self) -> None:
        """After a wrong answer: move the timeline into the op, at the sub-step where the answer
        parted from the cache (the whole step when it parted before any sub-step)."""
        run = self._current_quiz()
        parted = run.parted() if run is not None else None
        if parted is None:
            return
        self.position = Position(parted.step, parted.substep)
