# SPDX-License-Identifier: Apache-2.0
"""The ``seq`` bookkeeping of a KV-event stream, per data-parallel rank: pure, no sockets.

Each publisher numbers its batches 0, 1, 2, … A seq that jumps ahead is a :class:`Gap` (the
batches between were lost: a late subscriber, the publisher's high-water mark); one that does
not move forward (goes back, or repeats) is a :class:`Restart` (the publisher started again and
counts from 0). A gap stays *missing* until replayed batches fill it
(:meth:`SeqTracker.filled`); a restart forgets the rank's missing seqs, since the publisher
that could replay them is gone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    """Seqs ``first``..``last`` (inclusive) of ``rank`` did not arrive."""

    rank: int
    first: int
    last: int

    @property
    def count(self) -> int:
        """How many seqs are missing."""
        return self.last - self.first + 1


@dataclass(frozen=True)
class Restart:
    """``rank``'s publisher restarted: ``seq`` arrived after ``previous``, not after it."""

    rank: int
    previous: int
    seq: int


class SeqTracker:
    """Watches each rank's seqs; mutable, O(1) per live message and O(missing ranges) per
    replayed one."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        # Per rank, the missing ranges as [first, last] pairs, in seq order, disjoint.
        self._missing: dict[int, list[list[int]]] = {}

    def observe(self, rank: int, seq: int) -> Gap | Restart | None:
        """Note a live message's seq. None when it is the rank's first or the next one; a
        :class:`Gap` when seqs were skipped (now missing); a :class:`Restart` when it does not
        move forward (the rank's missing seqs are forgotten)."""
        last = self._last.get(rank)
        self._last[rank] = seq
        if last is None or seq == last + 1:
            return None
        if seq > last + 1:
            gap = Gap(rank, last + 1, seq - 1)
            self._missing.setdefault(rank, []).append([gap.first, gap.last])
            return gap
        self._missing.pop(rank, None)
        return Restart(rank, last, seq)

    def forget(self, rank: int) -> None:
        """Forget ``rank``'s seqs, missing ones included: its publisher restarted in a way its
        seq did not show (a reconnect to a publisher that outran the old seq). The rank's next
        message is observed as its first."""
        self._last.pop(rank, None)
        self._missing.pop(rank, None)

    def expect(self, rank: int, first: int, last: int) -> None:
        """Count seqs ``first..last`` of ``rank``, before its first seq observed, as missing: the
        history a replay is asked for (a late attach, a restarted publisher's first batches)."""
        self._missing.setdefault(rank, []).insert(0, [first, last])

    def filled(self, rank: int, seq: int) -> bool:
        """Note a replayed message's seq: True when it was missing (it no longer is), False when
        it was not (already received, or from before the last restart)."""
        ranges = self._missing.get(rank, [])
        for index, (first, last) in enumerate(ranges):
            if first <= seq <= last:
                pieces = [piece for piece in ([first, seq - 1], [seq + 1, last]) if piece[0] <= piece[1]]
                ranges[index:index + 1] = pieces
                if not ranges:
                    del self._missing[rank]
                return True
        return False

    def is_missing(self, rank: int, seq: int) -> bool:
        """Is ``seq`` of ``rank`` in a gap not filled yet (a replay may still bring it)."""
        return any(first <= seq <= last for first, last in self._missing.get(rank, ()))

    def copy(self) -> "SeqTracker":
        """An independent copy (a timeline's checkpoint, to go back to)."""
        other = SeqTracker()
        other._last = dict(self._last)
        other._missing = {rank: [list(pair) for pair in ranges] for rank, ranges in self._missing.items()}
        return other

    def missing(self, rank: int | None = None) -> tuple[Gap, ...]:
        """The gaps not (yet) filled: ``rank``'s, or every rank's (by rank, then seq)."""
        ranks = sorted(self._missing) if rank is None else [rank]
        return tuple(Gap(r, first, last) for r in ranks for first, last in self._missing.get(r, []))

    def last(self, rank: int) -> int | None:
        """The last live seq seen from ``rank`` (None before its first message)."""
        return self._last.get(rank)

    def ranks(self) -> tuple[int, ...]:
        """The ranks seen, in order."""
        return tuple(sorted(self._last))
