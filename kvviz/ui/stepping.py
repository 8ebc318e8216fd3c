# SPDX-License-Identifier: Apache-2.0
"""Step actions shared by the apps that walk a timeline (the main screen and the diff app),
and the main screen's other moves: inside an op sub-step by sub-step, to the interesting
steps, to a violation, to a step typed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.core.designs import design_of
from kvviz.ui.screens.prompt_screen import PromptScreen, step_number_problem

#: States the first run of an op's sub-steps keeps when the UI steps into it: the one the step
#: in shows. The rest of the window is built once that frame is painted (the prefetch after
#: paint), so a step into an op costs one snapshot, not a window of them.
UI_STATES_AT_ONCE = 1


@dataclass(frozen=True)
class Position:
    """Where the main screen is in its timeline: step ``step`` and, stepped into its op,
    sub-step ``substep`` (None: the whole step). One value, because a move often changes
    both (→ past an op's last sub-step goes into the next op) and must draw once."""

    step: int = 0
    substep: int | None = None


class StepActions:
    """``action_*`` methods for stepping; the screen or app provides ``go_to(step)``, ``step``
    and ``last_step``. The explorer's and the watch's ``g`` prompt is :meth:`action_jump`."""

    step: int
    last_step: int

    def go_to(self, step: int) -> None:  # pragma: no cover - provided by the app
        raise NotImplementedError

    def action_next_step(self) -> None:
        """One step forward."""
        self.go_to(self.step + 1)

    def action_previous_step(self) -> None:
        """One step back."""
        self.go_to(self.step - 1)

    def action_first_step(self) -> None:
        """The initial state."""
        self.go_to(0)

    def action_last_step(self) -> None:
        """The newest step."""
        self.go_to(self.last_step)

    #: How the jump prompt's refusal names the steps there are (``{last}``: the last one).
    JUMP_STEPS = "the timeline has steps 0..{last}"

    def action_jump(self) -> None:
        """Ask for a step number and go there (:meth:`jump_to`)."""
        last = self.last_step

        def check(value: str) -> str | None:
            return step_number_problem(value, last, self.JUMP_STEPS.format(last=last))

        def done(value: str | None) -> None:
            if value is not None:
                self.jump_to(int(value))

        self.app.push_screen(PromptScreen(f"Go to step (0..{last})", str(self.step), check=check,
                                          restrict=r"[0-9]*", max_length=len(str(last)) + 8), done)

    def jump_to(self, step: int) -> None:
        """Go to the step typed at :meth:`action_jump`'s prompt."""
        self.go_to(step)


class SubStepMoves:
    """Moving inside an op (the main screen). ``substep`` is the index of the sub-step shown in
    step ``step``'s op, or None for the whole step; the screen provides ``substeps_of(step)``
    (the op's sub-steps), ``show_substep(step, index)`` and ``enter_op(step)`` (True when
    stepping on into op ``step`` may go ahead; quiz mode says no and asks first).

    Past an op's last sub-step, → goes on **into the next op**, at its first sub-step: the
    last sub-step's state is the whole step's, so stepping out there would show the same
    picture again; a learner who chose to watch the moves keeps watching them, across ops,
    until ``o`` (or escape) steps out. ← mirrors it.
    """

    step: int
    last_step: int
    substep: int | None

    def substeps_of(self, step: int) -> Sequence:  # pragma: no cover - provided by the app
        raise NotImplementedError

    def show_substep(self, step: int, index: int | None) -> None:  # pragma: no cover - provided by the app
        raise NotImplementedError

    def enter_op(self, step: int) -> bool:
        """True when → may go on into op ``step`` (the screen may say no)."""
        return True

    def step_into(self) -> bool:
        """Show the first sub-step of the op that led to the step shown (at step 0, of the
        first op); False when there is no op."""
        target = max(1, self.step)
        if target > self.last_step:
            return False
        self.show_substep(target, 0)
        return True

    def step_out(self) -> bool:
        """Back to the whole step; False when not stepped in."""
        if self.substep is None:
            return False
        self.show_substep(self.step, None)
        return True

    def next_substep(self) -> bool:
        """The next sub-step: in this op, else the first of the next op; False at the very end."""
        if self.substep + 1 < len(self.substeps_of(self.step)):
            self.show_substep(self.step, self.substep + 1)
            return True
        if self.step < self.last_step and self.enter_op(self.step + 1):
            self.show_substep(self.step + 1, 0)
            return True
        return False

    def previous_substep(self) -> bool:
        """The previous sub-step: in this op, else the last of the op before; False at the start."""
        if self.substep > 0:
            self.show_substep(self.step, self.substep - 1)
            return True
        if self.step > 1:
            self.show_substep(self.step - 1, len(self.substeps_of(self.step - 1)) - 1)
            return True
        return False

    def notable_substep(self, direction: int) -> bool:
        """The next (``direction`` 1) or previous (-1) notable sub-step of this op (a kind its
        design stops at, :attr:`~kvviz.core.designs.Design.stops`: where matching stops, a
        page taken, a victim popped and evicted, ...); False when there is none that way."""
        steps = self.substeps_of(self.step)
        stops = design_of(steps.before).stops
        index = self.substep + direction
        while 0 <= index < len(steps):
            if steps[index].kind in stops:
                self.show_substep(self.step, index)
                return True
            index += direction
        return False


class TimelineSteps(SubStepMoves, StepActions):
    """The main screen's moves: by step, by sub-step once stepped into an op, to the next or
    previous interesting step, to the first violation, to a step typed. Every move sets the
    screen's ``position`` (through ``go_to`` or ``show_substep``); the screen's watcher
    draws it. The screen provides ``session``, ``position``, ``go_to``, ``notify``,
    ``push_screen`` and ``quiz_asks_first()``."""

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
        return self.session.substeps(step, states_at_once=UI_STATES_AT_ONCE)

    def enter_op(self, step: int) -> bool:
        # In quiz mode a question may be waiting at that step: go there the way a step
        # forward does, which asks it first (and so steps out).
        if self.quiz_asks_first():
            self.go_to(step)
            return False
        return True

    def action_next_interesting(self) -> None:
        """The next step with an eviction, a failure or a violation; stepped into an op, its
        next notable sub-step (a pop, an eviction, a new candidate, ...)."""
        if self.substep is not None:
            if not self.notable_substep(1):
                self.notify("No later notable sub-step in this op (→ goes on into the next op).", timeout=4)
            return
        summaries = self.checked_summaries()
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
        summaries = self.checked_summaries()
        target = next((i for i in range(self.step - 1, -1, -1) if summaries[i].interesting), None)
        if target is None:
            self.notify("No earlier eviction, failure or violation." + self._why_nothing_interesting(), timeout=5)
            return
        self.go_to(target)

    def checked_summaries(self):
        """The session's step summaries with every deferred keyframe check done, so that ] [
        and v answer for the whole timeline also in the moment after a lazily built trace
        opens, before idle work has checked its keyframes (once, about 0.4 s at 3,000 steps)."""
        if self.session.deferred_checks and self.session.finish_deferred_checks():
            self.show_new_markers()
        return self.session.summaries

    def show_new_markers(self) -> None:
        """Deferred checks found violations: the timeline bar draws their markers (a new
        revision of the timeline, the step shown unchanged)."""
        self.app.revision += 1
        self._show_timeline()
        self.refresh_bindings()  # the footer's "v broken" shows once a violation is known

    def _why_nothing_interesting(self) -> str:
        """Why ] and [ may find nothing at all: a pool that never fills never evicts."""
        if any(s.interesting for s in self.session.summaries):
            return ""
        return (f" No step of this timeline evicts, fails or breaks an invariant: the pool "
                f"({self.session.config.pages} pages) never ran out of free pages.")

    def first_violation(self) -> int | None:
        """The first step whose invariants fail, or None."""
        return next((s.index for s in self.checked_summaries() if s.violations), None)

    def action_first_violation(self) -> None:
        """Jump to the first step with an invariant violation."""
        target = self.first_violation()
        if target is None:
            self.action_no_violation()
            return
        self.go_to(target)

    def action_no_violation(self) -> None:
        """``v`` where no violation is known: the checks still deferred run first (one may
        break); none: say so in the status line."""
        target = self.first_violation()
        if target is not None:
            self.go_to(target)
            return
        self.notify("No invariant violations in this timeline: v has no step to go to.", timeout=4)
