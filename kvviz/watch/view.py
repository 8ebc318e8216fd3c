# SPDX-License-Identifier: Apache-2.0
"""The frozen values the watch screen's widgets draw (``kvviz watch``).

The watch app owns the :class:`~kvviz.watch.timeline.WatchTimeline`, the step shown and whether
it follows the newest batch; for each change it makes one :class:`WatchView` and hands it
down (memray's recipe: the screen renders one frozen snapshot, pausing just stops swapping
snapshots). Widgets never hold the timeline.

Also here: what a step's marks on the timeline bar are (:class:`WatchStepSummary`, read
from a frame's notes and effect), and the stream's totals for the header.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvviz.watch.events import DESIGN
from kvviz.core.narrate import count

SPARK_CELLS = 16
"""Cells of the header's sparkline of cached blocks."""

SPARK_SAMPLES_PER_CELL = 8
"""Values read per sparkline cell (at most): the line costs the same on a 100,000-step watch."""

def _clause_pattern(template: str) -> re.Pattern:
    """A pattern matching a design clause filled with any values (its fields become ``.*``)."""
    pieces = re.split(r"\{[a-z_]+\}", template)
    return re.compile(".*".join(re.escape(piece) for piece in pieces), re.DOTALL)


NOTE_KINDS: tuple[tuple[str, re.Pattern], ...] = (
    ("gap", re.compile(r"gap\b")),
    ("restart", re.compile(r"restart\b")),
    ("undecodable", _clause_pattern(DESIGN.clauses["undecodable"])),
    ("reset", _clause_pattern(DESIGN.clauses["reset"])),
    ("replayed", re.compile(r"replayed\b")),
)
"""How a step's notes are read: (kind, pattern matched at the note's start). The timeline
words its gaps and restarts "gap …" and "restart …", the subscriber a replayed batch
"replayed"; an undecodable message and a reset are the events design's clauses. A note
that matches none is shown in words and marks nothing."""


def note_kind(note: str) -> str | None:
    """The kind of one note ("gap: seqs 12-15 missing …" is a gap), or None."""
    return next((kind for kind, pattern in NOTE_KINDS if pattern.match(note)), None)


@dataclass(frozen=True, slots=True)
class WatchStepSummary:
    """One step's marks on the timeline bar. The fields the bar reads keep the main
    timeline's names, with the watch's meaning: ``violations`` counts the step's gaps and
    restarts (marked ``!``), ``failed`` an undecodable message (``✗``), ``evictions`` the
    blocks it removed (``▾``). ``op_text`` stays empty: the bar's head line tells the step
    shown from its frame."""

    index: int
    op_text: str = ""
    failed: bool = False
    evictions: int = 0
    violations: int = 0
    expect_failures: int = 0
    gaps: int = 0
    restarts: int = 0

    @property
    def interesting(self) -> bool:
        """Worth a marker: a gap, a restart, an undecodable message or a removal."""
        return bool(self.failed or self.evictions or self.violations)


def step_summary(index: int, notes: Sequence[str], removed: int) -> WatchStepSummary:
    """The marks of step ``index`` from its notes and the blocks it removed (what the
    timeline keeps per step: no frame is rebuilt to mark a step)."""
    kinds = [note_kind(note) for note in notes]
    gaps, restarts = kinds.count("gap"), kinds.count("restart")
    return WatchStepSummary(index, failed="undecodable" in kinds, evictions=removed, violations=gaps + restarts,
                            gaps=gaps, restarts=restarts)


FOLDED_STEP = WatchStepSummary(0)
"""What the timeline bar reads for a step folded away to bound memory: no mark (its notes are
gone; the summary still counts them)."""

VIEW_STEP_BYTES = 300
"""What the UI keeps per kept step (a :class:`WatchStepSummary`, the :class:`StreamTotals` up to
it, the peak up to it, and the lists' slots), counted in the timeline's ``max_bytes`` with the
step (tracemalloc, 100,000 steps: 280 bytes)."""


class StepWindow(Sequence):
    """Per-step values of the steps a watch still keeps, indexed by step: steps before
    :attr:`first` were folded away (``folded`` stands for each of them, or IndexError without
    it). Append-only at the end, cut at the front (:meth:`fold_to`) or the end
    (:meth:`cut_to`); :meth:`frozen` is an O(1) copy that later changes never alter (a cut
    makes a new list, an append only grows the shared one past the copy's length)."""

    __slots__ = ("_items", "_first", "_length", "_folded")

    def __init__(self, folded: Any = None, items: list | None = None, first: int = 0, length: int | None = None):
        self._items = [] if items is None else items
        self._first = first
        self._length = len(self._items) if length is None else length
        self._folded = folded

    @property
    def first(self) -> int:
        """The first step held."""
        return self._first

    def __len__(self) -> int:
        return self._first + self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"step {index} is not in 0..{len(self) - 1}")
        if index < self._first:
            if self._folded is None:
                raise IndexError(f"step {index} was folded away (the first kept is {self._first})")
            return self._folded
        return self._items[index - self._first]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def held(self) -> int:
        """Values held (the kept steps')."""
        return self._length

    def append(self, value: Any) -> None:
        """The next step's value."""
        if len(self._items) != self._length:  # shared with a frozen copy and cut since: own it
            self._items = self._items[:self._length]
        self._items.append(value)
        self._length += 1

    def fold_to(self, first: int) -> None:
        """Let the values of steps before ``first`` go."""
        if first <= self._first:
            return
        cut = min(first - self._first, self._length)
        self._items = self._items[cut:self._length]
        self._length -= cut
        self._first = first if self._length == 0 else self._first + cut

    def cut_to(self, steps: int) -> None:
        """Keep steps before ``steps`` only (a timeline that re-derived its later steps)."""
        keep = max(0, min(self._length, steps - self._first))
        self._items = self._items[:keep]
        self._length = keep

    def frozen(self) -> "StepWindow":
        """This window as it is now, for a frozen view."""
        return StepWindow(self._folded, self._items, self._first, self._length)


def batch_words(frame) -> str:
    """A step in a few words: "seq 17 · rank 0 · 3 events", "seq 17 undecodable", "start"."""
    if frame.message is None:
        return "start"
    text = f"seq {frame.message.seq}"
    batch = frame.batch
    if batch is None:
        return text + " undecodable"
    if batch.rank is not None:
        text += f" · rank {batch.rank}"
    return text + f" · {count(len(batch.events), 'event')}"


@dataclass(frozen=True, slots=True)
class StreamTotals:
    """What the header counts over every message received so far (not only up to the step
    shown: the header is about the stream's health now)."""

    messages: int = 0
    gaps: int = 0
    restarts: int = 0
    undecodable: int = 0

    def plus(self, summary: WatchStepSummary) -> StreamTotals:
        """These totals with one more step counted."""
        return StreamTotals(self.messages + 1, self.gaps + summary.gaps, self.restarts + summary.restarts,
                            self.undecodable + int(summary.failed))


def sparkline_samples(values: Sequence[int], upto: int, cells: int = SPARK_CELLS) -> tuple[int, ...]:
    """``values[0..upto]`` as at most ``cells`` numbers, each the largest of the samples in its
    cell (at most :data:`SPARK_SAMPLES_PER_CELL` read per cell, so the cost is bounded)."""
    n = min(len(values), upto + 1)
    if n <= 0:
        return ()
    if n <= cells:
        return tuple(values[i] for i in range(n))
    out = []
    for cell in range(cells):
        first, end = cell * n // cells, (cell + 1) * n // cells
        stride = max(1, (end - first) // SPARK_SAMPLES_PER_CELL)
        picks = list(range(first, end, stride))
        if picks[-1] != end - 1:
            picks.append(end - 1)  # the cell's last value, so the newest step always counts
        out.append(max(values[i] for i in picks))
    return tuple(out)


@dataclass(frozen=True)
class WatchView:
    """Everything the watch screen draws for one step (see the module doc).

    ``frame`` is the timeline's frame shown; ``following`` is live mode (the step moves to
    each new batch); ``waiting`` counts the batches received since following stopped;
    ``backlog`` the messages the subscriber has received that the timeline has not taken yet
    (a burst being worked off a chunk at a time);
    ``replay`` is True when no subscriber feeds the timeline (a recording); ``connected`` is,
    live, each rank's ZeroMQ handshake (the subscriber's stats). ``selected`` is
    the block under the forest's cursor, ``(key, medium)``, and ``why`` the timeline's answer
    about it.
    """

    frame: Any
    last_step: int
    source: str = ""
    replay: bool = False
    following: bool = True
    waiting: int = 0
    backlog: int = 0
    connected: tuple[bool, ...] = ()
    rates: Mapping[str, float] = field(default_factory=dict)
    cached_samples: tuple[int, ...] = ()
    peak: int = 0
    totals: StreamTotals = StreamTotals()
    orphans: int = 0
    selected: tuple[Hashable, str | None] | None = None
    why: str | None = None
    summaries: Sequence[WatchStepSummary] = ()
    revision: int = 0
    focus: tuple = ()  # what a sub-step moves: the watch has no sub-steps (LineView reads it)

    @property
    def step(self) -> int:
        """The step shown (0: before the first batch)."""
        return self.frame.index

    @property
    def cached(self) -> int:
        """Blocks cached after the step shown."""
        return len(self.frame.state)

    @property
    def incomplete(self) -> bool:
        """True when the rebuilt cache may lack what the server has: a gap, a restart,
        orphans (kvviz attached late) or removals of blocks never seen."""
        effect = self.frame.effect
        unknown = effect is not None and bool(effect.removed_unknown)
        return bool(self.totals.gaps or self.totals.restarts or self.orphans or unknown)

    @property
    def nothing_arrived(self) -> bool:
        """Live, and no message has come yet: the header says what to check."""
        return not self.replay and self.last_step == 0

    def status(self) -> str:
        """ "replay file", "● live" or "‖ paused · 2 waiting"; then, while a backlog is
        worked off, " · catching up: 1,200 waiting"."""
        if self.replay:
            return "replay file"
        behind = f" · catching up: {self.backlog:,} waiting" if self.backlog else ""
        if self.following:
            return "● live" + behind
        return f"‖ paused · {self.waiting:,} waiting" + behind
