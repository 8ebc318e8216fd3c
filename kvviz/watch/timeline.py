# SPDX-License-Identifier: Apache-2.0
"""The timeline of a watched KV-event stream: one step per message received.

``kvviz watch`` (live or from a recording) feeds every message to a :class:`WatchTimeline`,
which decodes it (unless the subscriber already did), checks its ``seq`` against the others
of its rank (a gap, a restart), applies its batch to the forest of blocks the stream
describes, and keeps what a view needs to show any step again: the messages, their decoded
batches, a keyframe of the forest every ``keyframe_every`` steps and a handful of counters.
:meth:`WatchTimeline.frame` rebuilds step *i* from the keyframe before it plus a replay of
the batches after it, so memory grows with the messages (not with steps x blocks) and any
step costs at most ``keyframe_every`` batches to rebuild, wherever it is.

Memory: a step keeps its message (the payload as received) and a few numbers, not its decoded
batch: a step rebuilt by :meth:`WatchTimeline.frame` decodes its batches again (at most
``keyframe_every`` of them), so a step costs its payload plus about ``STEP_OVERHEAD_BYTES``.
With ``max_bytes`` (a live watch: ``MAX_LIVE_TIMELINE_BYTES``) the steps
kept are bounded in bytes: when they cost more, the oldest keyframe intervals are folded into
the keyframe after them (their messages let go; their counts stay in the summary, their
per-step numbers in the sparkline's columns), and :attr:`WatchTimeline.first_step` says where
the kept steps start.

A replayed message that comes after the live ones past its gap (the subscriber reads a gap's
replay while live messages go on) is put back in its place: :meth:`WatchTimeline.add_late`
goes back to the keyframe before the gap (each keyframe keeps a checkpoint of the counters)
and derives the steps again, the replayed messages first, then the live ones, so each rank's
steps stay in seq order and the state equals what a watch that received all in order shows.
History replayed after live messages (``Message.replayed`` with a seq before the first of its
rank's run: a late attach's, or a restarted publisher's) goes the same way before the run's
first step, which hands it its restart, if any. A recording keeps the messages in arrival order
and their ``replayed`` and ``restart`` marks; reading it puts them back the same way.

A publisher restart (a ``seq`` that goes backwards) resets the view: the forest is cleared
at that step, before its batch is applied, and the step's notes say so. A message that
cannot be decoded is a step too (its seq and why are noted; the forest is unchanged):
nothing the publisher sends is fatal.

Everything is worded through the events design (:mod:`kvviz.watch.events`).
"""

from __future__ import annotations

import bisect
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from kvviz.watch.forest import BatchEffect, Forest, ForestState
from kvviz.watch.recording import Message
from kvviz.watch.stream import Gap, Restart, SeqTracker
from kvviz.watch.wire import (AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError, Key,
                                       UnknownEvent, decode_payload, key_label, lint_kind)
from kvviz.core import limits
from kvviz.printable import printable
from kvviz.watch.events import DESIGN

SUMMARY_SCHEMA = "kvviz.watch-summary/1"
"""The ``schema`` of :meth:`WatchTimeline.summary`; bumped when a field changes meaning."""

KEYFRAME_EVERY = 256
"""Steps between two keyframes of the forest: the most batches :meth:`WatchTimeline.frame`
replays to rebuild a step (measured in tests/watch/test_watch_model.py)."""

CHAINS_TOLD = 3
"""Stored chains a batch's narration names one by one; the rest are one clause."""

NOTES_LISTED = 1_000
"""Gaps, restarts and undecodable messages the summary lists one by one (all are counted)."""

STEP_OVERHEAD_BYTES = 400
"""What a kept step costs besides its message's frames and its share of a keyframe
(:data:`COPIED_ENTRY_BYTES`): the ``Message`` object, its notes and the per-step columns, an
upper estimate (tracemalloc, 800 steps of the shared vLLM recording against a bare forest fed
the same batches: 160 bytes; 22,500 when the decoded batches were kept)."""

COPIED_ENTRY_BYTES = 400
"""What a keyframe costs per table entry the forest copied on write over the interval before
it (``Forest.copied``): the keyframe alone keeps the old leaves and the blocks they held. An
upper estimate (tracemalloc, the shared vLLM recording looped to 4,000 steps: 2.9 MB a
keyframe, 8,500 entries copied an interval: 340 bytes an entry, 11 KB a step)."""

NO_MEDIUM = "(none)"
"""How a block without a ``medium`` is counted in ``per_medium`` (JSON keys are strings)."""

#: Mediums a narration does not name: the usual tier needs no word on every batch.
_PLAIN_MEDIUMS = frozenset({None, "GPU", "gpu"})


@dataclass(frozen=True)
class WatchFrame:
    """Step ``index`` of a watched stream, frozen: what a view draws.

    ``index`` 0 is before the first message; step *i* is the state after the *i*-th message
    received. ``batch`` is None when the message could not be decoded (``error`` says why);
    ``effect`` is what the batch did to the forest (None at step 0 and for an undecodable
    message); ``state`` the forest after it; ``notes`` the gaps, restarts, replays and
    decoding errors of this step, in words; ``narration`` one paragraph in the events
    design's words; ``new_unknown_fields`` the unknown fields (``Type.name``) the stream sent
    for the first time at this step (each is told once; the summary counts them all).
    """

    index: int
    message: Message | None
    batch: Batch | None
    error: str | None
    effect: BatchEffect | None
    state: ForestState
    notes: tuple[str, ...]
    narration: str
    new_unknown_fields: tuple[str, ...] = ()


class _Column(Sequence):
    """A read-only view of one per-step array (a view may index it; only the timeline adds)."""

    __slots__ = ("_values",)

    def __init__(self, values: array):
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._values[index].tolist()
        return self._values[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._values)


class WatchTimeline:
    """Every message of a watched stream, as timeline steps (see the module's docstring).

    Add messages in arrival order with :meth:`add`; :meth:`frame` gives any step back.
    Not thread-safe: one thread adds and reads (the UI's, or the headless command's).
    """

    def __init__(self, source: str = "", keyframe_every: int = KEYFRAME_EVERY, max_bytes: int | None = None,
                 max_blocks: int | None = None):
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be at least 1, not {keyframe_every}")
        self.source = source
        self.design = DESIGN
        self.keyframe_every = keyframe_every
        self.max_bytes = max_bytes
        """The most the kept steps may cost (None: every step is kept, as for a recording)."""
        self.max_blocks = limits.MAX_WATCH_FOREST_BLOCKS if max_blocks is None else max_blocks
        """The most blocks the forest holds (:class:`~kvviz.watch.forest.Forest`'s cap)."""
        self._viewer_step_bytes = 0  # what a viewer keeps per kept step (the UI's marks), counted too
        self._not_kept = 0  # new blocks not added: the forest held max_blocks
        self._full_step: int | None = None  # the step that first met the cap
        self._full_note: str | None = None  # what that step's notes say of it
        self._base = 0  # steps 1.._base are folded into the keyframe at _base
        self._kept_bytes = 0  # what the kept steps (step_cost) and keyframes (COPIED_ENTRY_BYTES) cost
        self._last = 0  # the newest step
        self._first_seq: int | None = None
        self._messages: list[Message] = []  # steps _base + 1 .. last_step
        self._head_batch: Batch | None = None  # the newest step's batch; the others are decoded again
        self._errors: list[str | None] = []
        self._notes: list[tuple[str, ...]] = []
        self._theirs: list[str | None] = []  # the subscriber's note of each kept step, as given (to re-add it)
        self._rederived_from: int | None = None  # the first step re-derived since a viewer last asked
        self._too_late = 0  # replayed messages whose place was folded away before they came
        self._resets: set[int] = set()  # steps whose batch starts from an empty forest (restarts)
        self._tracker = SeqTracker()
        self._run_first: dict[int, int] = {}  # per rank, the seq its current run started at (first message, restart)
        self._forest = Forest(self.max_blocks)
        self._head_effect: BatchEffect | None = None
        self._head_state: ForestState | None = None
        self._keyframes: list[ForestState] = [self._forest.state()]  # state after step _base + k * keyframe_every
        self._keyframe_bytes: list[int] = [0]  # what each keyframe is counted as in _kept_bytes
        self._checkpoints: list[dict] = []  # the counters at each kept keyframe (filled below)
        self._copied_mark = 0  # the forest's copied-on-write count at the last keyframe
        self._scratch: tuple[int, Forest] | None = None  # a rebuilt forest, to step forward cheaply
        self._passed: dict[int, tuple[BatchEffect | None, ForestState]] = {}  # steps rebuilt on the way
        self._cached = array("q", [0])
        self._peak_after = array("q", [0])  # the most blocks cached after any step up to this one
        self._stored = array("q", [0])
        self._removed = array("q", [0])
        self._ts = array("d", [math.nan])  # the payloads' ts; NaN: none
        self._notes_before = array("q", [0])  # notes of steps 1..i, for progress over folded steps
        # the summary's counters
        self._events_by_type: Counter[str] = Counter()
        self._unknown_fields: Counter[str] = Counter()
        self._new_unknown_fields: dict[int, tuple[str, ...]] = {}  # step -> fields first sent then
        self._unknown_types: Counter[str] = Counter()
        self._lints: Counter[str] = Counter()  # by kind (wire.LINT_KINDS)
        self._first_lints: dict[str, dict] = {}  # kind -> its first lint: step, seq, sentence
        self._blocks_stored = 0
        self._blocks_removed = 0
        self._removed_unknown = 0
        self._duplicates = 0
        self._orphans_stored = 0
        self._peak = 0
        self._gaps: list[dict] = []
        self._gap_count = 0
        self._missing = 0
        self._restarts: list[dict] = []
        self._restart_count = 0
        self._undecodable: list[dict] = []
        self._undecodable_count = 0
        self._replayed = 0
        self._clears: list[int] = []  # steps whose batch cleared the cache, or a restart reset the view
        # why_block's index: key -> [(step, what, chain length, position, medium)], built lazily
        self._history: dict[Key, list[tuple[int, str, int, int, str | None]]] = {}
        self._indexed = 0  # the last step the why-index covers
        self._checkpoints.append(self._checkpoint())

    @classmethod
    def from_messages(cls, messages: Iterable[Message], source: str = "",
                      keyframe_every: int = KEYFRAME_EVERY) -> "WatchTimeline":
        """A timeline of ``messages`` (a recording), each decoded as it is added."""
        timeline = cls(source, keyframe_every)
        timeline.add_all(messages)
        return timeline

    # -- adding ------------------------------------------------------------------------------

    @property
    def last_step(self) -> int:
        """The newest step (0 before any message)."""
        return self._last

    @property
    def first_step(self) -> int:
        """The oldest step a view may show: 0, or the keyframe the folded steps went into."""
        return self._base

    @property
    def viewer_step_bytes(self) -> int:
        """What a viewer (the UI) keeps for each kept step, counted in ``max_bytes`` with the
        step: its per-step lists are cut at :attr:`first_step` as the steps are folded."""
        return self._viewer_step_bytes

    @viewer_step_bytes.setter
    def viewer_step_bytes(self, value: int) -> None:
        kept = self._last - self._base
        self._kept_bytes += (value - self._viewer_step_bytes) * kept
        self._viewer_step_bytes = value

    @property
    def full_step(self) -> int | None:
        """The step at which the forest first held ``max_blocks`` and a new block was not
        added (None: never); from there on the view is incomplete."""
        return self._full_step

    @property
    def full_words(self) -> str | None:
        """"batch N: " and the note of the step at which the forest first held its cap (None:
        never): what a viewer says once."""
        return None if self._full_step is None else f"batch {self._full_step}: {self._full_note}"

    @property
    def blocks_not_kept(self) -> int:
        """New blocks not added because the forest held ``max_blocks``."""
        return self._not_kept

    @property
    def kept_bytes(self) -> int:
        """What the kept steps cost now (see :func:`step_cost`), at most ``max_bytes``."""
        return self._kept_bytes

    def __len__(self) -> int:
        """Steps, step 0 included."""
        return self._last + 1

    @property
    def messages(self) -> Sequence[Message]:
        """Every message added, in order (step *i* is ``messages[i - 1]``). ValueError once
        steps were folded."""
        self._require_whole("its messages")
        return tuple(self._messages)

    def messages_until(self, step: int) -> list[Message]:
        """The messages of steps 1..``step``: what replays the timeline up to ``step``.
        ValueError once steps were folded."""
        self._check_step(step)
        self._require_whole("its messages")
        return self._messages[:step]

    def kept_messages_until(self, step: int) -> list[Message]:
        """The messages of the steps still kept up to ``step``: ``first_step + 1 .. step`` (all
        of 1..``step`` unless early steps were folded to bound memory)."""
        self._check_step(step)
        return self._messages[:max(0, step - self._base)]

    def _require_whole(self, what: str) -> None:
        if self._base:
            raise ValueError(f"steps 1-{self._base:,} of this watch were folded to bound its memory "
                             f"({self.max_bytes:,} bytes): {what} are gone; record with --record FILE and "
                             f"use --replay-file FILE for the whole stream")

    def prefix(self, step: int) -> "WatchTimeline":
        """The timeline of the first ``step`` messages (its summary is the stream's up to
        ``step``), or this timeline itself when ``step`` is its last: what a report of
        ``step`` describes."""
        if step == self.last_step:
            return self
        return WatchTimeline.from_messages(self.messages_until(step), self.source, self.keyframe_every)

    def add(self, message: Message, batch: Batch | None = None, error: str | None = None,
            note: str | None = None) -> int:
        """Record ``message`` as the next step and return its index.

        ``batch``/``error``: the subscriber's decoding (None and None: decoded here);
        ``note``: the subscriber's word about it (``"replayed"``: it answers a replay
        request, so its seq fills a gap rather than going back). A message whose seq is in a
        gap of its rank, behind the rank's last one, is put in its place (:meth:`add_late`):
        the step returned is where it went (0: too late, its place was folded away).
        """
        if self.is_late(message):
            return self.add_late([(message, note)])
        return self._add(message, batch, error, note)

    def _add(self, message: Message, batch: Batch | None = None, error: str | None = None,
             note: str | None = None) -> int:
        if batch is None and error is None:
            batch, error = _decode(message)
        step = self._last + 1
        self._theirs.append(note)
        notes = self._seq_notes(step, message, note)
        self._last = step
        if self._first_seq is None:
            self._first_seq = message.seq
        self._messages.append(message)
        self._head_batch = batch
        self._errors.append(error)
        self._kept_bytes += step_cost(message) + self._viewer_step_bytes
        if step in self._resets:
            dropped = len(self._forest)
            self._forest = Forest(self.max_blocks)
            self._copied_mark = 0
            notes.append(DESIGN.clause("reset", dropped=DESIGN.nouns.count(dropped)))
            self._clears.append(step)
        if batch is None:
            self._undecodable_count += 1
            if len(self._undecodable) < NOTES_LISTED:
                self._undecodable.append({"step": step, "seq": message.seq, "error": error})
            notes.append(DESIGN.clause("undecodable", seq=message.seq, error=error))
            effect = None
        else:
            effect = self._forest.apply(batch, step)
            self._count(step, batch, effect)
            if effect.not_kept:
                self._not_kept += effect.not_kept
                if self._full_step is None:
                    self._full_step = step
                    notes.append(full_note(self.max_blocks, effect.not_kept))
                    self._full_note = notes[-1]
        self._notes.append(tuple(notes))
        self._head_effect = effect
        # The frozen state is taken only when someone reads it (a keyframe, a view): taking
        # it after every batch would make the next batch copy each table leaf it writes.
        self._head_state = None
        cached = len(self._forest)
        self._peak = max(self._peak, cached)
        self._cached.append(cached)
        self._peak_after.append(self._peak)
        self._stored.append(0 if effect is None else len(effect.stored))
        self._removed.append(0 if effect is None else len(effect.removed) + len(effect.removed_unknown))
        self._ts.append(math.nan if batch is None or batch.ts is None else batch.ts)
        self._notes_before.append(self._notes_before[-1] + len(notes))
        if step % self.keyframe_every == 0:
            self._keyframes.append(self.head_state)
            self._keyframe_bytes.append((self._forest.copied - self._copied_mark) * COPIED_ENTRY_BYTES)
            self._copied_mark = self._forest.copied
            self._kept_bytes += self._keyframe_bytes[-1]
            self._checkpoints.append(self._checkpoint())
            self._fold()
        return step

    def add_all(self, items: Iterable) -> int:
        """Add the subscriber's ``Received`` values (``.message``, ``.batch``, ``.error``,
        ``.note``) or a recording's messages, in order: late replayed messages that come together go in at once (one
        re-derivation, not one each). Returns how many were added."""
        added = 0
        late: list[tuple[Message, str | None]] = []
        for item in items:
            message = item if isinstance(item, Message) else item.message
            note = None if message is item else item.note
            if late and not (message.rank == late[0][0].rank and self.is_late(message)):
                self.add_late(late)
                late = []
            if self.is_late(message):
                late.append((message, note))
            elif message is item:
                self._add(message)
            else:
                self._add(message, item.batch, item.error, note)
            added += 1
        if late:
            self.add_late(late)
        return added

    def is_late(self, message: Message) -> bool:
        """A replayed message that comes after the live ones past its place: its seq is before
        the rank's last one, in a gap not filled yet, or (``Message.replayed``) before the first
        seq of the rank's current run: history sent before a late attach's first message, or
        before a restarted publisher's first one."""
        last = self._tracker.last(message.rank)
        if last is None or message.seq >= last:
            return False
        return self._tracker.is_missing(message.rank, message.seq) or self._is_history(message)

    def _is_history(self, message: Message) -> bool:
        first = self._run_first.get(message.rank)
        return message.replayed and first is not None and message.seq < first

    def add_late(self, late: list[tuple[Message, str | None]]) -> int:
        """Put replayed messages of one rank (``(message, note)`` each) where they belong: before
        the step holding the seq right after their gap (its live successor). The steps from the keyframe
        before that place are derived again (the kept messages up to it, these, then the later
        ones), so every rank's steps stay in seq order and the state is the one a watch that
        received all in order would have. That first step's notes say "repaired: N messages
        inserted before batch X". Returns the step of the first inserted message; 0 when their
        place was folded away already (they are counted in the summary's ``replayed_too_late``)."""
        late = sorted(late, key=lambda pair: pair[0].seq)
        rank = late[0][0].rank
        # One insertion per gap they fill (a merged replay may fill several), each before the
        # step holding the seq right after that gap.
        runs: list[tuple[int, list]] = []
        for pair in late:
            gap = next((g for g in self._tracker.missing(rank) if g.first <= pair[0].seq <= g.last), None)
            if gap is not None:
                after = gap.last + 1
            elif self._is_history(pair[0]):  # before the run's first step
                after = self._run_first[rank]
            else:  # not in a gap (any more), nor history: nowhere to put it
                self._too_late += 1
                continue
            if runs and runs[-1][0] == after:
                runs[-1][1].append(pair)
            else:
                runs.append((after, [pair]))
        first = 0
        for after, run in runs:
            inserted = self._insert(rank, after, run)
            first = first or inserted
        return first

    def _insert(self, rank: int, after: int, late: list[tuple[Message, str | None]]) -> int:
        """Put ``late`` (in seq order) before the kept step of ``rank`` whose seq is ``after``;
        0 when that step was folded away (counted too late). When that step started a run (a
        restart, marked or noted), the restart moves to the first inserted message: the run
        starts there now."""
        place = None
        for step in range(self._last, self._base, -1):
            message = self._messages[step - 1 - self._base]
            if message.rank == rank and message.seq == after:
                place = step
                break
        if place is None:  # its place was folded away
            self._too_late += len(late)
            return 0
        redo = self._rewind(place - 1)
        keyframe = self._last
        rest = redo[place - 1 - keyframe:]
        revealing, note = rest[0]
        parts = [part for part in (note or "").split("; ") if part]
        restarted = [part for part in parts if part.startswith("restart")]
        if restarted or revealing.restart:
            first, first_note = late[0]
            late = [(replace(first, restart=first.restart or revealing.restart),
                     "; ".join(restarted + [part for part in (first_note or "").split("; ") if part]))] + late[1:]
            revealing = replace(revealing, restart=False)
            parts = [part for part in parts if part not in restarted]
        for message, note in redo[:place - 1 - keyframe]:
            self._add(message, note=note)
        inserted = self._last + 1
        for message, note in late:
            self._add(message, note=note)
        earlier = [part for part in parts if _REPAIRED.match(part)]  # a repair before this one, same place
        count = len(late) + sum(int(_REPAIRED.match(part)["count"].replace(",", "")) for part in earlier)
        parts = [part for part in parts if part not in earlier]
        parts.append(f"repaired: {count:,} message{'s' if count != 1 else ''} inserted before batch {self._last + 1}")
        rest[0] = (revealing, "; ".join(parts))
        for message, note in rest:
            self._add(message, note=note)
        return inserted

    def take_rederived(self) -> int | None:
        """The first step derived again (:meth:`add_late`) since the last call, or None: a
        viewer's per-step values from there on are stale."""
        rederived, self._rederived_from = self._rederived_from, None
        return rederived

    def _checkpoint(self) -> dict:
        """What :meth:`_rewind` restores at a keyframe: every counter :meth:`add` moves."""
        return {
            "first_seq": self._first_seq, "tracker": self._tracker.copy(), "run_first": dict(self._run_first),
            "events_by_type": Counter(self._events_by_type), "unknown_fields": Counter(self._unknown_fields),
            "unknown_types": Counter(self._unknown_types), "lints": Counter(self._lints),
            "first_lints": dict(self._first_lints),
            "numbers": (self._blocks_stored, self._blocks_removed, self._removed_unknown, self._duplicates,
                        self._orphans_stored, self._peak, self._gap_count, self._missing, self._restart_count,
                        self._undecodable_count, self._replayed, self._not_kept, self._full_step, self._full_note),
            "lists": (len(self._gaps), len(self._restarts), len(self._undecodable)),
        }

    def _rewind(self, step: int) -> list[tuple[Message, str | None]]:
        """Go back to the keyframe at or before ``step`` (kept: at least the base) as if the
        steps after it never came; returns their (message, subscriber's note), in order."""
        K = self.keyframe_every
        k = (step - self._base) // K
        at = self._base + k * K
        cut = at - self._base  # kept messages before the keyframe
        redo = list(zip(self._messages[cut:], self._theirs[cut:]))
        self._kept_bytes -= (sum(step_cost(m) for m, _ in redo) + len(redo) * self._viewer_step_bytes
                             + sum(self._keyframe_bytes[k + 1:]))
        del self._messages[cut:], self._errors[cut:], self._notes[cut:], self._theirs[cut:]
        del self._keyframes[k + 1:], self._keyframe_bytes[k + 1:], self._checkpoints[k + 1:]
        for column in (self._cached, self._peak_after, self._stored, self._removed, self._ts, self._notes_before):
            del column[at + 1:]
        saved = self._checkpoints[k]
        self._last = at
        self._first_seq = saved["first_seq"]
        self._tracker = saved["tracker"].copy()
        self._run_first = dict(saved["run_first"])
        self._events_by_type = Counter(saved["events_by_type"])
        self._unknown_fields = Counter(saved["unknown_fields"])
        self._unknown_types = Counter(saved["unknown_types"])
        self._lints = Counter(saved["lints"])
        self._first_lints = dict(saved["first_lints"])
        (self._blocks_stored, self._blocks_removed, self._removed_unknown, self._duplicates, self._orphans_stored,
         self._peak, self._gap_count, self._missing, self._restart_count, self._undecodable_count, self._replayed,
         self._not_kept, self._full_step, self._full_note) = saved["numbers"]
        gaps, restarts, undecodable = saved["lists"]
        del self._gaps[gaps:], self._restarts[restarts:], self._undecodable[undecodable:]
        self._new_unknown_fields = {s: f for s, f in self._new_unknown_fields.items() if s <= at}
        self._clears = self._clears[:bisect.bisect_right(self._clears, at)]
        self._resets = {s for s in self._resets if s <= at}
        self._forest = Forest.from_state(self._keyframes[k], self.max_blocks)
        self._copied_mark = 0
        self._head_batch = self._head_effect = self._head_state = None
        self._passed.clear()
        self._scratch = None
        self._history, self._indexed = {}, self._base
        self._rederived_from = at if self._rederived_from is None else min(self._rederived_from, at)
        return redo

    def _fold(self) -> None:
        """While the kept steps cost more than ``max_bytes``, fold the oldest keyframe interval
        into the keyframe after it (never the newest keyframe: the head stays rebuildable)."""
        if self.max_bytes is None:
            return
        K = self.keyframe_every
        while self._kept_bytes > self.max_bytes and self._base + K < self._last:
            dropped = self._messages[:K]
            del self._messages[:K]
            del self._errors[:K]
            del self._notes[:K]
            del self._theirs[:K]
            del self._keyframes[0]
            del self._checkpoints[0]
            # The keyframe after the folded steps becomes the base: its cost was counted already.
            self._kept_bytes -= (sum(step_cost(m) for m in dropped) + K * self._viewer_step_bytes
                                 + self._keyframe_bytes.pop(0))
            self._base += K
        self._resets = {step for step in self._resets if step > self._base}
        self._passed.clear()
        self._scratch = None
        if self._indexed < self._base or self._history:
            self._history, self._indexed = {}, self._base  # rebuilt from the kept steps when asked

    @property
    def head_state(self) -> ForestState:
        """The forest after the newest step."""
        if self._head_state is None:
            self._head_state = self._forest.state()
        return self._head_state

    def _seq_notes(self, step: int, message: Message, note: str | None) -> list[str]:
        """Gap and restart notes for ``message``'s seq, then the subscriber's own notes.

        The subscriber delivers the batches a replay answered before the message that
        revealed the gap, in seq order, so they arrive in order here: a replayed message is
        observed like any other, and only what no replay filled is a gap.
        """
        notes: list[str] = []
        theirs = [part for part in (note or "").split("; ") if part]
        if message.replayed or "replayed" in theirs:
            self._replayed += 1
        previous = self._tracker.last(message.rank)
        if previous is None:
            self._run_first[message.rank] = message.seq
        if previous is not None and (message.restart or any(part.startswith("restart") for part in theirs)):
            # The subscriber knew of a restart the seq does not show (a reconnect to a server
            # that outran the old seq): the view restarts here all the same.
            self._tracker.forget(message.rank)
            self._tracker.observe(message.rank, message.seq)
            seen: Gap | Restart | None = Restart(message.rank, previous, message.seq)
        else:
            seen = self._tracker.observe(message.rank, message.seq)
        rank = f" on rank {message.rank}" if message.rank else ""
        if isinstance(seen, Gap):
            missing = seen.last - seen.first + 1
            self._gap_count += 1
            self._missing += missing
            if len(self._gaps) < NOTES_LISTED:
                self._gaps.append({"step": step, "rank": seen.rank, "first": seen.first, "last": seen.last})
            span = f"seq {seen.first}" if missing == 1 else f"seqs {seen.first}-{seen.last}"
            asked = any(part.startswith("gap") and "replay asked" in part for part in theirs)
            notes.append(f"gap{rank}: {span} missing ({missing:,} message{'s' if missing != 1 else ''} "
                         + ("not received yet, a replay was asked" if asked else "never received")
                         + "): the view is incomplete")
        elif isinstance(seen, Restart):
            self._restart_count += 1
            if len(self._restarts) < NOTES_LISTED:
                self._restarts.append({"step": step, "rank": seen.rank, "previous": seen.previous, "seq": seen.seq})
            went = (f"seq went back from {seen.previous} to {seen.seq}" if seen.seq <= seen.previous
                    else f"seq {seen.seq} after {seen.previous} is a new publisher's (a reconnect)")
            notes.append(f"restart{rank}: {went}")
            self._resets.add(step)
            self._run_first[message.rank] = message.seq
        # The subscriber's gap and restart words say what ours say (from the same seqs).
        notes += [part for part in theirs if not part.startswith(("gap", "restart"))]
        return notes

    def _count(self, step: int, batch: Batch, effect: BatchEffect) -> None:
        counts = self._events_by_type
        for event in batch.events:
            cls = type(event)
            if cls is BlockRemoved:
                counts["BlockRemoved"] += 1
                self._blocks_removed += len(event.hashes)
            elif cls is BlockStored:
                counts["BlockStored"] += 1
                self._blocks_stored += len(event.hashes)
            elif cls is UnknownEvent:
                counts[event.type] += 1
                self._unknown_types[event.type] += 1
            else:
                counts[cls.__name__] += 1
        new = []
        for event_type, name in batch.unknown_fields:
            field = f"{event_type}.{name}"
            if field not in self._unknown_fields:
                new.append(field)
            self._unknown_fields[field] += 1
        if new:
            self._new_unknown_fields[step] = tuple(sorted(new))
        for lint in batch.lints:
            kind = lint_kind(lint)
            self._lints[kind] += 1
            if kind not in self._first_lints:
                self._first_lints[kind] = {"step": step, "seq": batch.seq, "lint": lint}
        if effect.cleared:
            self._clears.append(step)
        self._removed_unknown += len(effect.removed_unknown)
        self._duplicates += effect.duplicates
        self._orphans_stored += sum(1 for block in effect.stored if block.orphan)

    def _index_to(self, step: int) -> None:
        """Bring the why-index up to ``step``: each batch is indexed once, when a why-query
        first needs it, so adding a batch (the UI's hot path when a server is busy) pays
        nothing for queries nobody makes."""
        history = self._history
        for s in range(max(self._indexed, self._base) + 1, step + 1):
            batch = self._batch(s)
            if batch is None:
                continue
            for event in batch.events:
                cls = type(event)
                if cls is BlockStored:
                    length = len(event.hashes)
                    for position, key in enumerate(event.hashes):
                        history.setdefault(key, []).append((s, "stored", length, position, event.medium))
                elif cls is BlockRemoved:
                    for key in event.hashes:
                        history.setdefault(key, []).append((s, "removed", len(event.hashes), 0, event.medium))
        self._indexed = max(self._indexed, step)

    # -- reading -----------------------------------------------------------------------------

    def _check_step(self, i: int) -> None:
        if not self._base <= i <= self.last_step:
            raise IndexError(f"step {i} does not exist: the watch has steps {self._base}..{self.last_step}"
                             + (f" (1-{self._base:,} were folded to bound its memory)" if self._base else ""))

    def _batch(self, step: int) -> Batch | None:
        """Step ``step``'s batch: the newest one as added, any other decoded again from its
        payload (a step keeps its payload, about a tenth of its decoded batch's size)."""
        if step == self._last:
            return self._head_batch
        if self._errors[step - 1 - self._base] is not None:
            return None
        batch, _ = _decode(self._messages[step - 1 - self._base])
        return batch

    def frame(self, i: int) -> WatchFrame:
        """Step ``i``, rebuilt from the keyframe before it and the batches after that
        keyframe (at most ``keyframe_every``), or from the last rebuilt step when that is on
        the way. IndexError outside 0..last_step.

        The states passed on the way are kept (a state shares all but what its batch changed
        with the one before, so this costs what those batches changed), until a step outside
        their keyframe interval is asked for: stepping back through an interval replays it
        once, not once per step.
        """
        self._check_step(i)
        if i == 0:
            return WatchFrame(0, None, None, None, None, self._keyframes[0], (), "Before the first batch: "
                              "no block seen yet.")
        if i == self._base:
            return WatchFrame(i, None, None, None, None, self._keyframes[0], (),
                              f"Batches 1-{i:,} are folded into this state to bound the watch's memory; "
                              f"{DESIGN.nouns.count(len(self._keyframes[0]))} cached.")
        if i == self.last_step:
            return self._frame(i, self._head_effect, self.head_state)
        passed = self._passed.get(i)
        if passed is not None:
            return self._frame(i, *passed)
        forest, start = self._forest_before(i)
        for step in range(start + 1, i + 1):
            forest, effect = self._replay(forest, step)
            self._passed[step] = (effect, forest.state())
        self._scratch = (i, forest)
        return self._frame(i, *self._passed[i])

    def _forest_before(self, i: int) -> tuple[Forest, int]:
        """A live forest at some step ``s < i`` (with ``s``), from which to replay to ``i``."""
        k = (i - 1) // self.keyframe_every  # the keyframe at or before step i - 1
        start = k * self.keyframe_every
        k -= self._base // self.keyframe_every  # the kept keyframes start at the base
        if self._scratch is not None and start <= self._scratch[0] < i:
            step, forest = self._scratch
            self._scratch = None  # it is about to move on
            return forest, step
        self._passed.clear()  # another interval: what was passed before is let go
        return Forest.from_state(self._keyframes[k], self.max_blocks), start

    def _replay(self, forest: Forest, step: int) -> tuple[Forest, BatchEffect | None]:
        """Apply step ``step`` to ``forest`` as :meth:`add` did: the forest to go on with
        (a new one after a restart) and the batch's effect (None: undecodable)."""
        if step in self._resets:
            forest = Forest(self.max_blocks)  # a restart: the view starts again from nothing
        batch = self._batch(step)
        return forest, None if batch is None else forest.apply(batch, step)

    def _frame(self, i: int, effect: BatchEffect | None, state: ForestState) -> WatchFrame:
        message = self._messages[i - 1 - self._base]
        batch = self._batch(i)
        error = self._errors[i - 1 - self._base]
        notes = self._notes[i - 1 - self._base]
        return WatchFrame(i, message, batch, error, effect, state, notes,
                          narrate_batch(i, message, batch, effect, len(state), notes),
                          self._new_unknown_fields.get(i, ()))

    def states(self) -> Iterator[ForestState]:
        """The forest after every step, 0..last_step, in one pass (one replay, no keyframes).
        ValueError once steps were folded."""
        self._require_whole("their states")
        forest = Forest(self.max_blocks)
        yield forest.state()
        for step in range(1, self.last_step + 1):
            forest, _ = self._replay(forest, step)
            yield forest.state()

    def keyframe_steps(self) -> list[int]:
        """The steps holding a keyframe (0, K, 2K, ...)."""
        return [self._base + k * self.keyframe_every for k in range(len(self._keyframes))]

    @property
    def cached_over_time(self) -> Sequence[int]:
        """Blocks cached after each step, 0..last_step (for a sparkline)."""
        return _Column(self._cached)

    @property
    def stored_per_step(self) -> Sequence[int]:
        """Blocks each step stored (duplicate copies included)."""
        return _Column(self._stored)

    @property
    def removed_per_step(self) -> Sequence[int]:
        """Blocks each step removed (removals of blocks never seen included)."""
        return _Column(self._removed)

    def notes(self, i: int) -> tuple[str, ...]:
        """Step ``i``'s notes without rebuilding its frame (none for the base of folded steps)."""
        self._check_step(i)
        return () if i == self._base else self._notes[i - 1 - self._base]

    def rates(self, i: int, window: int = 32) -> dict:
        """Batches, blocks stored and blocks removed per second over the ``window`` steps
        ending at ``i``, by the payloads' own ``ts`` (the publisher's clock, not kvviz's).

        Each rate is None when fewer than two of those steps carry a ``ts`` or no time
        passed between them; ``seconds`` is the span measured, ``batches`` the steps in it.
        """
        self._check_step(i)
        first = max(1, i - max(window, 2) + 1)
        timed = [(s, self._ts[s]) for s in range(first, i + 1) if not math.isnan(self._ts[s])]
        none = {"batches_per_s": None, "stored_per_s": None, "removed_per_s": None,
                "seconds": None, "batches": len(timed)}
        if len(timed) < 2:
            return none
        (s0, t0), (s1, t1) = timed[0], timed[-1]
        span = t1 - t0
        if not span > 0:
            return {**none, "seconds": span}
        # What happened after the first timed batch, over the time from it to the last.
        stored = sum(self._stored[s0 + 1:s1 + 1])
        removed = sum(self._removed[s0 + 1:s1 + 1])
        return {"batches_per_s": (len(timed) - 1) / span, "stored_per_s": stored / span,
                "removed_per_s": removed / span, "seconds": span, "batches": len(timed)}

    def why_block(self, key: Key, at: int | None = None) -> str:
        """What the stream says of block ``key`` up to step ``at`` (default: the newest):
        "block 7f3a… was stored at batch 12 by a chain of 4, removed at batch 40"."""
        at = self.last_step if at is None else at
        self._check_step(at)
        self._index_to(self.last_step)
        label = f"block {key_label(key)}"
        history = [entry for entry in self._history.get(key, ()) if entry[0] <= at]
        if not history:
            return f"{label} was never stored or removed in this stream (up to batch {at})"
        parts = []
        stored_before = False
        last_stored: int | None = None
        for step, what, length, position, medium in history:
            where = _medium_words(medium)
            if what == "stored":
                if last_stored is not None and self._cleared_between(last_stored, step):
                    parts.append(f"cleared at batch {self._cleared_between(last_stored, step)}")
                again = " again" if stored_before else ""
                chain = "a chain of 1" if length == 1 else f"a chain of {length:,}"
                place = "" if length == 1 else f" (block {position + 1} of it)"
                parts.append(f"stored{again}{where} at batch {step} by {chain}{place}")
                stored_before = True
                last_stored = step
            else:
                unseen = "" if stored_before else " (never seen stored: kvviz attached late, or a gap)"
                parts.append(f"removed{where} at batch {step}{unseen}")
                last_stored = None
        if last_stored is not None:
            cleared = self._cleared_between(last_stored, at + 1)
            if cleared:
                parts.append(f"cleared at batch {cleared}")
        now = self.frame(at).state if at != self.last_step else self.head_state
        mediums = dict.fromkeys(entry[4] for entry in history)  # in order of appearance
        cached = [b for b in (now.blocks.get((key, medium)) for medium in mediums) if b is not None]
        if cached:
            orphan = " (an orphan: its parent was never seen)" if any(b.orphan for b in cached) else ""
            state = f"; cached at batch {at}" + (f", {len(cached)} copies" if len(cached) > 1 else "") + orphan
        else:
            state = f"; not cached at batch {at}"
        return f"{label} was " + ", ".join(parts) + state

    def _cleared_between(self, after: int, before: int) -> int | None:
        """The first clear (or reset) after step ``after`` and before step ``before``."""
        index = bisect.bisect_right(self._clears, after)
        if index < len(self._clears) and self._clears[index] < before:
            return self._clears[index]
        return None

    def summary(self) -> dict:
        """What ``kvviz watch --json`` prints at the end (``kvviz help watch`` documents
        every field): the stream's counts and the forest after the newest step."""
        state = self.head_state
        per_medium = {NO_MEDIUM if medium is None else medium: n for medium, n in state.by_medium().items()}
        return {
            "type": "summary",
            "schema": SUMMARY_SCHEMA,
            "source": self.source,
            "messages": self.last_step,
            "batches": self.last_step - self._undecodable_count,
            "events": sum(self._events_by_type.values()),
            "events_by_type": dict(sorted(self._events_by_type.items())),
            "blocks_stored": self._blocks_stored,
            "blocks_removed": self._blocks_removed,
            "removed_unknown": self._removed_unknown,
            "duplicates": self._duplicates,
            "unknown_fields": dict(sorted(self._unknown_fields.items())),
            "unknown_types": dict(sorted(self._unknown_types.items())),
            "lints": dict(sorted(self._lints.items())),
            "first_lints": dict(sorted(self._first_lints.items())),
            "cached_blocks": len(state),
            "peak_blocks": self._peak,
            "orphans": sum(1 for block in state.blocks.values() if block.orphan),
            "orphans_stored": self._orphans_stored,
            "gaps": self._gap_count,
            "missing_messages": self._missing,
            "gap_list": list(self._gaps),
            "restarts": self._restart_count,
            "restart_list": list(self._restarts),
            "undecodable": self._undecodable_count,
            "undecodable_list": list(self._undecodable),
            "replayed": self._replayed,
            "replayed_too_late": self._too_late,
            "blocks_not_kept": self._not_kept,
            "forest_full_step": self._full_step,
            "per_medium": dict(sorted(per_medium.items())),
            "first_seq": self._first_seq,
            "last_seq": self._messages[-1].seq if self._messages else None,
            "digest": state.digest(),
        }

    def progress(self, i: int, since: int) -> dict:
        """The ``--every N`` record of step ``i``: the cache now and what steps
        ``since + 1 .. i`` stored and removed."""
        self._check_step(i)
        message = self._messages[i - 1 - self._base] if i > self._base else None
        return {"type": "progress", "step": i, "seq": None if message is None else message.seq,
                "cached_blocks": self._cached[i], "peak_blocks": self._peak_after[i],
                "stored": sum(self._stored[since + 1:i + 1]), "removed": sum(self._removed[since + 1:i + 1]),
                "notes": self._notes_before[i] - self._notes_before[since]}


def timeline_memory_help() -> str:
    """What a live watch's timeline holds in memory, and its bound, in words (``kvviz help watch``)."""
    return f"""\
  The timeline keeps each step's payload as received and {STEP_OVERHEAD_BYTES} bytes (measured 160;
  a decoded batch is decoded again when a step is shown, not kept: it was 22.5 KB a vLLM
  batch), and a keyframe every {KEYFRAME_EVERY} steps, which owns what the forest copied on write
  since the one before ({COPIED_ENTRY_BYTES} bytes an entry: 11.7 KB a step for a 3,000-block cache).
  A live watch keeps {limits.MAX_LIVE_TIMELINE_BYTES:,} bytes of them, the UI's per-step marks included
  (MAX_LIVE_TIMELINE_BYTES: some 17,000 vLLM batches); older steps are folded into a keyframe
  (the summary still counts them; the UI starts at the fold), and each costs 48 bytes of
  per-step numbers. --record keeps every message."""


_REPAIRED = re.compile(r"repaired: (?P<count>[0-9,]+) messages? inserted before batch [0-9]+$")
"""The note :meth:`WatchTimeline.add_late` puts on the first step after the messages it inserted."""


def full_note(cap: int, not_kept: int) -> str:
    """The one note of the step at which the forest first held its cap."""
    return (f"the forest holds its cap of {cap:,} blocks (MAX_WATCH_FOREST_BLOCKS): "
            f"{not_kept:,} new block{'s' if not_kept != 1 else ''} not added, nor any new one while it is full; "
            f"the view is incomplete from here")


def step_cost(message: Message) -> int:
    """What one kept step costs in memory, as ``max_bytes`` counts it: its frames and
    :data:`STEP_OVERHEAD_BYTES`."""
    return len(message.payload) + len(message.topic) + STEP_OVERHEAD_BYTES


def _decode(message: Message) -> tuple[Batch | None, str | None]:
    try:
        return decode_payload(message.payload, seq=message.seq, topic=message.topic.decode("utf-8", "replace")), None
    except DecodeError as exc:
        return None, str(exc)


# -- narration ---------------------------------------------------------------------------------


def _medium_words(medium: str | None) -> str:
    return "" if medium in _PLAIN_MEDIUMS else f" on {printable(medium)}"  # the publisher's string


def told_note(note: str) -> str:
    """A note as the narration tells it: a sentence ("gap: …" → "Gap: ….")."""
    return note[0].upper() + note[1:] + "."


def narration_without_notes(narration: str, notes: tuple[str, ...]) -> str:
    """``narration`` less the notes :func:`narrate_batch` put first: for a reader that lists
    the notes itself (the UI's panel), so each is told once."""
    for note in notes:
        if note:
            narration = narration.removeprefix(told_note(note)).removeprefix(" ")
    return narration


def narrate_batch(step: int, message: Message, batch: Batch | None, effect: BatchEffect | None,
                  cached: int, notes: tuple[str, ...] = ()) -> str:
    """One paragraph, in the events design's words, of what step ``step``'s batch did:
    "Batch 12 (seq 11): stored a chain of 4 blocks under 7f3a…, removed 2 blocks (1 never
    seen); 52 blocks cached." Notes about the step (a gap, a restart) come first.

    The clauses follow the batch's events in order, one clause per run of events of one kind
    (chains stored, blocks removed, a clear, unknown types): ``[AllBlocksCleared,
    BlockStored]`` reads "cleared every block, stored 1 block at the root", never as if the
    new block were cleared."""
    nouns = DESIGN.nouns
    where = f"seq {message.seq}" + (f", rank {message.rank}" if message.rank else "")
    lead = DESIGN.clause("lead", step=step, where=where)
    told = [told_note(note) for note in notes if note]
    if batch is None or effect is None:
        return " ".join(told) if told else lead + "undecodable."
    parts: list[str] = []
    orphans = {(b.key, b.medium) for b in effect.stored if b.orphan}
    stored = iter(effect.stored)  # one entry per stored hash, in event order
    removals = _RemovalSplit(effect)
    chains_told = 0
    for kind, run in _runs(batch.events):
        if kind is BlockStored:
            chains = [e for e in run if e.hashes]
            for event in chains[:max(0, CHAINS_TOLD - chains_told)]:
                parts.append(_chain_clause(event, orphans))
            rest = chains[max(0, CHAINS_TOLD - chains_told):]
            chains_told += len(chains)
            if rest:
                parts.append(DESIGN.clause("more_chains", chains=f"{len(rest):,}",
                                           blocks=nouns.count(sum(len(e.hashes) for e in rest))))
            if effect.not_kept:  # a full forest: fewer stored entries than hashes, said for the batch
                continue
            copies = sum(1 for event in run for _ in event.hashes if next(stored).copies > 1)
            if copies:
                parts.append(DESIGN.clause("duplicates", copies=nouns.count(copies)))
        elif kind is BlockRemoved:
            hashes = [key for event in run for key in event.hashes]
            if not hashes:
                continue
            unknown = removals.unknown_among(hashes)
            mediums = {event.medium for event in run}
            medium = _medium_words(next(iter(mediums))) if len(mediums) == 1 else ""
            clause = DESIGN.clause("removed", blocks=nouns.count(len(hashes)), medium=medium)
            if unknown:
                clause += DESIGN.clause("removed_unknown", unknown=f"{unknown:,}")
            parts.append(clause)
        elif kind is AllBlocksCleared:
            parts += [DESIGN.clause("cleared", medium=_medium_words(event.medium)) for event in run]
        elif kind is UnknownEvent:
            types = sorted({event.type for event in run})
            n = len(run)
            parts.append(DESIGN.clause("unknown_types", events=f"{n:,} event{'s' if n != 1 else ''}",
                                       types=", ".join(types)))
    if effect.not_kept:
        if effect.duplicates:
            parts.append(DESIGN.clause("duplicates", copies=nouns.count(effect.duplicates)))
        parts.append(DESIGN.clause("not_kept", blocks=nouns.count(effect.not_kept)))
    if not parts:
        parts.append(DESIGN.clause("empty"))
    body = lead + ", ".join(parts) + "; " + DESIGN.clause("after", cached=nouns.count(cached)) + "."
    return " ".join(told + [body])


def _runs(events: Sequence) -> list[tuple[type, list]]:
    """``events`` as runs of one class each, in order: ``[(BlockRemoved, [e1, e2]),
    (BlockStored, [e3])]``."""
    runs: list[tuple[type, list]] = []
    for event in events:
        cls = type(event)
        if runs and runs[-1][0] is cls:
            runs[-1][1].append(event)
        else:
            runs.append((cls, [event]))
    return runs


class _RemovalSplit:
    """Which of a batch's removals, run by run, found no block: the forest appended one entry
    per removed hash, in order, to ``effect.removed`` (found) or ``effect.removed_unknown``
    (not found), so walking both lists along the hashes splits them exactly, but for a key
    at the head of both lists at once (removed twice in the batch, once unknown), which is
    counted as found first."""

    __slots__ = ("_found", "_unknown", "_f", "_u")

    def __init__(self, effect: BatchEffect) -> None:
        self._found = [block.key for block in effect.removed]
        self._unknown = list(effect.removed_unknown)
        self._f = self._u = 0

    def unknown_among(self, hashes: list) -> int:
        """How many of ``hashes`` (the next removals, in order) found no block."""
        unknown = 0
        for key in hashes:
            if self._f < len(self._found) and _same_key(self._found[self._f], key):
                self._f += 1
            elif self._u < len(self._unknown) and _same_key(self._unknown[self._u], key):
                self._u += 1
                unknown += 1
        return unknown


def _same_key(a: Key, b: Key) -> bool:
    return type(a) is type(b) and a == b


def _chain_clause(event: BlockStored, orphans: set) -> str:
    """One stored chain: "stored a chain of 4 blocks under 7f3a…"."""
    nouns = DESIGN.nouns
    n = len(event.hashes)
    blocks = nouns.count(n) if n == 1 else f"a chain of {nouns.count(n)}"
    if event.parent is None:
        under = DESIGN.clause("root")
    elif (event.hashes[0], event.medium) in orphans:
        under = DESIGN.clause("orphan", parent=key_label(event.parent))
    else:
        under = DESIGN.clause("parent", parent=key_label(event.parent))
    return DESIGN.clause("chain", blocks=blocks, medium=_medium_words(event.medium), under=under)


__all__ = ["KEYFRAME_EVERY", "NO_MEDIUM", "SUMMARY_SCHEMA", "WatchFrame", "WatchTimeline", "narrate_batch"]
