# SPDX-License-Identifier: Apache-2.0
"""Step actions shared by the apps that walk a timeline (the main app and the diff app), and
the main app's stepping inside an op, sub-step by sub-step."""

from __future__ import annotations

from collections.abc import Sequence

NOTABLE_SUBSTEPS = frozenset({"stop", "take", "pop", "evict", "candidate", "create", "dedup", "fail", "refused"})
"""The sub-steps ``]`` and ``[`` jump between inside an op: where matching stops, pages taken
from the free list, each victim popped and evicted, a parent becoming a candidate (the
cascade), a node created or a block deduplicated, a failure. Walks, references, touches and
sift swaps are stepped with →."""


class StepActions:
    """``action_*`` methods for stepping; the app provides ``go_to(step)``, ``step`` and
    ``last_step``."""

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


class SubStepMoves:
    """Moving inside an op (the main app). ``substep`` is the index of the sub-step shown in
    step ``step``'s op, or None for the whole step; the app provides ``substeps_of(step)``
    (the op's sub-steps), ``show_substep(step, index)`` and ``enter_op(step)`` (True when
    stepping on into op ``step`` may go ahead; practice mode says no and asks first).

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
        """True when → may go on into op ``step`` (the app may say no)."""
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
        """The next (``direction`` 1) or previous (-1) notable sub-step of this op
        (:data:`NOTABLE_SUBSTEPS`); False when there is none that way."""
        steps = self.substeps_of(self.step)
        index = self.substep + direction
        while 0 <= index < len(steps):
            if steps[index].kind in NOTABLE_SUBSTEPS:
                self.show_substep(self.step, index)
                return True
            index += direction
        return False
