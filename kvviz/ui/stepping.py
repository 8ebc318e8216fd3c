# SPDX-License-Identifier: Apache-2.0
"""Step actions shared by the apps that walk a timeline (the main app and the diff app)."""

from __future__ import annotations


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
