# SPDX-License-Identifier: Apache-2.0
"""Stepping into an op: the view of one sub-step, and the pseudo-code panes beside the
narration (ours, and a bug-museum demo's buggy variant with the differing lines marked).

:class:`SubStepPanes` is the main screen's: it reads the reactive ``position``,
``show_code`` and ``show_buggy``, and its actions only set the last two (the screen's
watchers draw).
"""

from __future__ import annotations

import dataclasses

from textual.containers import Horizontal

from kvviz.core import pseudocode
from kvviz.core.view import (NO_HIGHLIGHT, FrameView, SubStepView, code_views, focus_highlight, highlight_for, nearby,
                          needs_previous, substep_frame)
from kvviz.ui.stepping import UI_STATES_AT_ONCE

CODE_BESIDE_WIDTH = 100
"""Columns from which stepping into an op shows the pseudo-code beside the narration."""


class SubStepPanes:
    """The sub-step view and the code panes for the main screen, which provides
    ``session``, ``demo``, ``position`` (``step``, ``substep``), ``selection``, ``size``, the
    reactive ``show_code`` and ``show_buggy``, ``code``, ``code_buggy``, ``_title`` and ``_widget``."""

    def _substep_view(self, whole: FrameView) -> FrameView:
        """The view of sub-step ``self.substep`` of the op shown: kvcore's state after it,
        marked with what it changed and what it moves (its focus)."""
        subs = self.session.substeps(self.step, states_at_once=UI_STATES_AT_ONCE)
        index = self.substep
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

    def prefetch_substep_states(self) -> None:
        """Once the sub-step drawn is on screen: build the states of the window the next moves
        will reach (:meth:`~kvviz.core.substeps.OpSubSteps.prefetch`), so that stepping into
        it does not pay a run of the op (the hitch every 16 sub-steps). Only caches: what any
        sub-step shows is the same with it or without."""
        if self.substep is None:
            return
        self.session.substeps(self.step).prefetch(self.substep)

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
        self._widget("bottom", Horizontal).set_class(visible, "-code")  # the bottom row's class: see app.tcss
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

    def action_toggle_code(self) -> None:
        """Show or hide the pseudo-code pane (shown by default while stepped into an op)."""
        self.show_code = not self.code_visible

    def action_toggle_buggy(self) -> None:
        """A bug-museum demo: show the buggy variant's pseudo-code beside ours (the differing
        lines marked ≠), or hide it."""
        if not self.has_buggy_code():
            self.action_no_buggy_code()
            return
        if not self.show_buggy and not self.code_visible:
            self.set_reactive(type(self).show_code, True)  # drawn with the buggy code, next
        self.show_buggy = not self.show_buggy

    def action_no_buggy_code(self) -> None:
        """``b`` where there is no buggy code: say why in the status line."""
        bug = pseudocode.demo_bug(self.demo) if self.demo is not None else None
        if bug is not None and bug in pseudocode.NO_VARIANT:
            why = f"{self.demo} has no buggy code to show beside ours: {pseudocode.NO_VARIANT[bug]}."
        else:
            shown = f"this is the {self.demo} demo" if self.demo is not None else "this timeline is no demo"
            why = f"b shows a bug-museum demo's buggy code (bug-*, shortfin-*); {shown}."
        self.notify(why, timeout=6)
