# SPDX-License-Identifier: Apache-2.0
"""The timeline bar of ``kvviz watch``: the main bar's track, one step per received batch.

The track and its clicks are :class:`~kvviz.ui.widgets.timeline_bar.TimelineBar`'s, fed
:class:`~kvviz.watch.view.WatchStepSummary` marks: ``!`` a gap or a publisher restart,
``✗`` an undecodable message, ``▾`` a batch that removed blocks (▁…█ where a cell shares
several steps: the share that removed). The head line is the watch's own: live or paused
(and how many batches wait), the step, the batch's seq, rank and events, and what was odd
about it.
"""

from __future__ import annotations

from kvviz.core.narrate import count
from kvviz.watch.view import WatchView
from kvviz.ui.widgets.line_canvas import Span
from kvviz.ui.widgets.timeline_bar import TimelineBar


class WatchTimelineBar(TimelineBar):
    """Position in the watch and the marked track (see the module doc). Draws a
    :class:`~kvviz.watch.view.WatchView` (it has the ``summaries``, ``step`` and
    ``revision`` the track reads). Component classes: those of
    :class:`~kvviz.ui.widgets.timeline_bar.TimelineBar`."""

    def show(self, view: WatchView) -> None:
        """Draw ``view``."""
        super().show(view)

    def _head_spans(self, width: int) -> list[Span]:
        get = self.style_of
        view: WatchView = self.timeline
        summary = view.summaries[view.step]
        state = "replay" if view.replay else ("● live" if view.following else "‖ paused")
        spans: list[Span] = [(f"{state} ", get("timeline-bar--state"))]
        if not view.replay and not view.following:
            spans.append((f"· {count(view.waiting, 'batch', 'batches')} waiting (l: live) ",
                          get("timeline-bar--state")))
        spans += [(f"step {view.step}/{view.last_step} ", get("timeline-bar--head")),
                  (summary.op_text, get("timeline-bar--op"))]
        if summary.gaps:
            spans.append((f"  {count(summary.gaps, 'GAP', 'GAPS')}", get("timeline-bar--violation")))
        if summary.restarts:
            spans.append(("  RESTART", get("timeline-bar--violation")))
        if summary.failed:
            spans.append(("  UNDECODABLE", get("timeline-bar--failed")))
        if summary.evictions:
            spans.append((f"  {count(summary.evictions, 'block')} removed", get("timeline-bar--eviction")))
        return spans
