# SPDX-License-Identifier: Apache-2.0
"""The header line of ``kvviz watch``: is the stream healthy, and how busy is the cache?

One line: the source (endpoint and ranks, or the recording), the status (``● live``,
``‖ paused · 2 waiting``, ``replay file``), the rates at the step shown (batches, blocks
stored and removed per second, from the payloads' timestamps), the blocks cached now with a
sparkline of cached blocks over time, and the counts of gaps, restarts and undecodable
messages. A second line, the **incomplete view** banner, appears when the rebuilt cache may
lack what the server holds: a gap or restart in the stream, orphans (kvviz attached after
their parents were stored) or removals of blocks never seen. Live, the status says each
rank's ZeroMQ handshake (``connected``/``not connected``); until a first message arrives the
second line says what to check instead (the subscriber's hint).

Parts that do not fit the width are left out from the right, the sparkline first, so the
status and the counts stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath

from textual.strip import Strip

from kvviz.watch.subscriber import NOTHING_ARRIVED_HINT, connection_words
from kvviz.core.narrate import count
from kvviz.watch.view import WatchView
from kvviz.ui.widgets.line_canvas import LineCanvas, Span, spans_to_strip

SPARKS = "▁▂▃▄▅▆▇█"
"""The sparkline's glyphs, lowest to highest."""

RATE_KEYS = ("batches_per_s", "stored_per_s", "removed_per_s")
"""The rates shown, in order (keys of ``WatchTimeline.rates``)."""


PRIORITY = ("status", "counts", "source", "cached", "rates", "sparkline", "peak")
"""The header's parts, most wanted first: a narrow terminal drops them from the end."""


SOURCE_CHARS = 28
"""Most characters of the source the header shows (the rest of the line is figures)."""


def source_label(source: str) -> str:
    """The source as the header shows it: an endpoint as given, a recording by its file name
    (the full path is in the export's bundle), cut to :data:`SOURCE_CHARS` with "…"."""
    if not source:
        return "kvviz watch"
    label = source if "://" in source else PurePath(source).name or source
    return label if len(label) <= SOURCE_CHARS else label[:SOURCE_CHARS - 1] + "…"


def sparkline(values: Sequence[int]) -> str:
    """One glyph per value, scaled from 0 to the largest (all ▁ when every value is 0)."""
    top = max(values, default=0)
    if top <= 0:
        return SPARKS[0] * len(values)
    last = len(SPARKS) - 1
    return "".join(SPARKS[min(last, round(v * last / top))] for v in values)


def _rate(value: float | None) -> str:
    if value is None:
        return "–"
    if round(value, 1) == 0:
        return "0"  # not "−0.0/s": nothing was removed, a sign and a decimal say otherwise
    return f"{value:,.{1 if value < 100 else 0}f}"


def rate_text(rates: Mapping[str, float | None]) -> str:
    """ "1.0 batches/s · blocks +114/s −34/s": batches, then blocks stored (+) and removed (−)
    per second; "– batches/s" until two batches with times came (the rates are the
    publisher's timestamps', never kvviz's clock)."""
    batches, stored, removed = (rates.get(key) for key in RATE_KEYS)
    if batches is None:
        return "– batches/s"
    return f"{_rate(batches)} batches/s · blocks +{_rate(stored)}/s −{_rate(removed)}/s"


def banner_text(view: WatchView) -> str:
    """The incomplete-view banner's words: what is missing and why it may be."""
    totals = view.totals
    reasons = []
    if totals.gaps:
        reasons.append(f"{count(totals.gaps, 'gap')} in seq (messages missed)")
    if totals.restarts:
        reasons.append(f"{count(totals.restarts, 'publisher restart')} (the view reset)")
    if view.orphans:
        reasons.append(f"{count(view.orphans, 'orphan block')} (parents stored before kvviz attached, or removed)")
    effect = view.frame.effect
    if effect is not None and effect.removed_unknown:
        reasons.append(f"{count(len(effect.removed_unknown), 'removal')} of blocks never seen in this batch")
    return "⚠ incomplete view: " + "; ".join(reasons)


def second_line(view: WatchView) -> str | None:
    """The header's second line: the hint while a live watch has received nothing, else the
    incomplete-view banner when the view is incomplete, else none."""
    if view.nothing_arrived:
        return f"⚠ nothing arrived yet: {NOTHING_ARRIVED_HINT}"
    return banner_text(view) if view.incomplete else None


def status_text(view: WatchView) -> str:
    """The status, then live each rank's handshake: "● live · connected"."""
    if view.replay or not view.connected:
        return view.status()
    return f"{view.status()} · {connection_words(view.connected)}"


class WatchHeader(LineCanvas, can_focus=False):
    """The watch's header line and its incomplete-view banner (see the module doc).

    | Class | Description |
    | :- | :- |
    | `watch-header--source` | The endpoint or recording. |
    | `watch-header--live` | The status while following the newest batch. |
    | `watch-header--paused` | The status while paused (batches waiting). |
    | `watch-header--meta` | Rates and labels. |
    | `watch-header--spark` | The sparkline of cached blocks. |
    | `watch-header--ok` | A count of zero gaps, restarts, undecodable messages. |
    | `watch-header--bad` | A count above zero. |
    | `watch-header--banner` | The incomplete-view banner. |
    """

    STRIP_CACHE_SIZE = 4

    COMPONENT_CLASSES = {
        "watch-header--source", "watch-header--live", "watch-header--paused", "watch-header--meta",
        "watch-header--spark", "watch-header--ok", "watch-header--bad", "watch-header--banner",
    }

    DEFAULT_CSS = """
    WatchHeader {
        height: 1;
        overflow: hidden hidden;
        &.-incomplete { height: 2; }
        & > .watch-header--source { text-style: bold; }
        & > .watch-header--live { color: $kv-new; text-style: bold; }
        & > .watch-header--paused { color: $accent; text-style: bold; }
        & > .watch-header--meta { color: $kv-muted; }
        & > .watch-header--spark { color: $kv-cached; }
        & > .watch-header--ok { color: $kv-muted; }
        & > .watch-header--bad { color: $error; text-style: bold; }
        & > .watch-header--banner { color: $warning; text-style: bold; }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: WatchView | None = None

    def show(self, view: WatchView) -> None:
        """Draw ``view``; the second line comes and goes with :func:`second_line`."""
        self.view = view
        self.set_class(second_line(view) is not None, "-incomplete")  # a layout change only when it flips
        self.restyle()

    def render_strip(self, index: int, width: int) -> Strip:
        base = self.style_of.base
        if self.view is None:
            return Strip.blank(width, base)
        if index == 0:
            return spans_to_strip(self.line_spans(width), width, base)
        second = second_line(self.view) if index == 1 else None
        if second is not None:
            return spans_to_strip([(second, self.style_of("watch-header--banner"))], width, base)
        return Strip.blank(width, base)

    def line_spans(self, width: int) -> list[Span]:
        """The header line's spans at ``width``: the status and the counts always; the other
        parts by :data:`PRIORITY` as far as they fit, each in its place on the line."""
        style = self.style_of
        view = self.view
        meta = style("watch-header--meta")
        paused = not view.following and not view.replay
        totals = view.totals

        def tally(n: int, word: str, plural: str | None = None) -> Span:
            return (count(n, word, plural), style("watch-header--bad" if n else "watch-header--ok"))

        parts: dict[str, list[Span]] = {
            "source": [(source_label(view.source), style("watch-header--source")), (" · ", meta)],
            "status": [(status_text(view), style("watch-header--paused" if paused else "watch-header--live"))],
            "rates": [(" · ", meta), (rate_text(view.rates), meta)],
            "cached": [(" · ", meta), (f"{view.cached:,} cached", style("watch-header--source"))],
            "sparkline": [(" ", meta), (sparkline(view.cached_samples), style("watch-header--spark"))],
            "peak": [(f" peak {view.peak:,}", meta)],
            "counts": [(" · ", meta), tally(totals.gaps, "gap"), (" · ", meta), tally(totals.restarts, "restart"),
                       (" · ", meta), tally(totals.undecodable, "undecodable", "undecodable")],
        }
        room = width
        kept = set()
        for name in PRIORITY:
            size = _length(parts[name])
            if size <= room or name in ("status", "counts"):
                kept.add(name)
                room -= size
        return [span for name, spans in parts.items() if name in kept for span in spans]

    @property
    def text(self) -> str:
        """The plain text of the header (and the banner), at the header's width (tests read it)."""
        if self.view is None:
            return ""
        width = self.line_width or 160
        text = "".join(t for t, _ in self.line_spans(width))
        second = second_line(self.view)
        if second is not None:
            text += "\n" + second
        return text


def _length(spans: list[Span]) -> int:
    return sum(len(text) for text, _ in spans)
