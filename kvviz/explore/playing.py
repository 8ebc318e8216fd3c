# SPDX-License-Identifier: Apache-2.0
"""Play: the main screen steps on by itself, a step (or, stepped into an op, a sub-step) per
tick of a timer, at one of :data:`SPEEDS`.

The actions only set the screen's ``playing`` and ``speed_index``; the screen's watchers
start and stop the timer and redraw the timeline bar, the hint and the footer.
"""

from __future__ import annotations

SPEEDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Play speeds in steps per second (+ and - move along this list)."""
DEFAULT_SPEED = 1


class PlayActions:
    """Play, pause, tick and speed for the main screen, which provides the reactive
    ``playing`` and ``speed_index``, ``play_timer`` (False: no timer, the caller ticks), the
    position (``step``, ``substep``, ``last_step``), ``go_to``, ``show_substep`` and
    ``next_substep``."""

    _timer = None

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

    def action_pause(self) -> None:
        """Stop playing."""
        self.playing = False

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
        self.speed_index += 1

    def action_slower(self) -> None:
        """Play slower."""
        self.speed_index -= 1

    @property
    def speed(self) -> float:
        """Play speed in steps per second."""
        return SPEEDS[self.speed_index]

    def validate_speed_index(self, index: int) -> int:
        """A speed on the list: + at the fastest and - at the slowest stay there."""
        return max(0, min(len(SPEEDS) - 1, index))

    def _start_timer(self) -> None:
        if self.play_timer:
            self._timer = self.set_interval(1 / SPEEDS[self.speed_index], self.play_tick)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
