# SPDX-License-Identifier: Apache-2.0
"""The narration of a watch step: what the batch did, in the events design's words (the
timeline's ``frame.narration``), and its notes: a gap, a restart, a replayed batch, an
undecodable message with its seq and why, unknown event types and fields."""

from __future__ import annotations

from kvviz.core.narrate import count
from kvviz.core.view import literal
from kvviz.watch.timeline import narration_without_notes
from kvviz.watch.view import WatchView, batch_words, note_kind
from kvviz.ui.widgets.line_view import MarkupView

NOTE_STYLES = {"gap": "b $error", "restart": "b $error", "undecodable": "b $error", "replayed": "$kv-touched"}
"""The colour of a note, by its kind (other notes: the warning colour)."""


def watch_narration_markup(view: WatchView) -> str:
    """The panel's content as Textual markup (colours through theme variables)."""
    frame = view.frame
    lines = [f"[b]Step {frame.index}[/b] · {literal(batch_words(frame))}"]
    message, batch = frame.message, frame.batch
    if message is not None:
        topic = message.topic.decode("utf-8", "replace") if isinstance(message.topic, bytes) else str(message.topic)
        where = f"topic {topic!r}" + (f" · socket {message.rank}" if message.rank else "")
        if batch is not None and batch.ts is not None:
            where += f" · ts {batch.ts:.3f}"
        lines.append(f"[$kv-muted]{literal(where)}[/]")
    if frame.error is not None and not any(note_kind(note) == "undecodable" for note in frame.notes):
        seq = f"seq {message.seq}" if message is not None else "a message"
        lines.append(f"[b $error]✗ undecodable: {literal(seq)}: {literal(frame.error)}[/]")
    for note in frame.notes:
        style = NOTE_STYLES.get(note_kind(note), "$warning")
        lines.append(f"[{style}]• {literal(note)}[/]")
    story = narration_without_notes(frame.narration, frame.notes)  # the notes are the bullets above
    if story:
        lines.append(literal(story))
    effect = frame.effect
    if effect is not None and effect.unknown_types:
        lines.append(f"[$warning]{literal('unknown event types (ignored, counted): ' + ', '.join(effect.unknown_types))}[/]")
    if batch is not None:
        lines += [f"[$warning]lint: {literal(lint)}[/]" for lint in batch.lints]
    fields = frame.new_unknown_fields  # told once, at the step that first sent them: the summary counts them
    if fields:
        lines.append(f"[$kv-muted]{literal(count(len(fields), 'unknown field') + ' ignored: ' + ', '.join(fields))}[/]")
    return "\n".join(lines)


class WatchNarration(MarkupView):
    """The step's narration and notes (see the module doc). Component classes: those of
    :class:`~kvviz.ui.widgets.line_view.LineView`."""

    def markup(self, view: WatchView) -> str:
        return watch_narration_markup(view)
