# SPDX-License-Identifier: Apache-2.0
"""Why the prompt tokens of a trace missed: the miss breakdown of ``kvviz trace`` (one replay
and every row of ``--sweep``).

Every prompt token a replay did not serve from the cache is put in one class:

- ``compulsory`` (first-seen): its block was never in an earlier request: no cache could hit it;
- ``diverged``: the first new block of a request whose parent block already had another child
  in an earlier request: the request shared a cached prefix and left it inside this block (a
  hash id names a whole block, so where inside it is not known);
- ``below_floor``: the request has no full block at all (a prompt shorter than one block: an
  engine caches full blocks only);
- ``partial_tail``: tokens after the request's last full block (never cached);
- ``capacity``: every other miss: the block had been in an earlier request, so a larger cache
  (or no request failing to fit, or, with ``--concurrency``, the earlier request having finished
  its prefill) would have hit it.

The first four are properties of the trace in the order requests arrive, whatever the cache; the
capacity class is what the replay missed beyond them, so the shares add up to the miss rate
exactly, and at unlimited capacity (sequential, nothing fails) it is 0: an earlier request's block
is always still cached (tests/trace/test_trace_misses.py checks it on both designs). A Mooncake
trace's last block is named by a hash id and cached partial, so its ``below_floor`` and
``partial_tail`` are 0; traffic read from tokens (:mod:`kvviz.core.traffic`) has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.core.mooncake import TraceRequest

__all__ = ["MISS_CLASSES", "MissBreakdown", "TraceMisses", "miss_breakdown", "trace_misses"]

MISS_CLASSES = ("compulsory", "capacity", "diverged", "below_floor", "partial_tail")
"""The classes of missed prompt tokens, in the order they are printed."""


@dataclass(frozen=True)
class TraceMisses:
    """The capacity-free classes of a trace's missed tokens (see the module doc), in tokens."""

    input_tokens: int
    compulsory: int
    diverged: int
    below_floor: int
    partial_tail: int

    @property
    def never_cacheable(self) -> int:
        """Tokens no cache could serve, whatever its size."""
        return self.compulsory + self.diverged + self.below_floor + self.partial_tail


@dataclass(frozen=True)
class MissBreakdown:
    """One replay's missed prompt tokens per class (see the module doc)."""

    input_tokens: int
    hit_tokens: int
    compulsory: int
    capacity: int
    diverged: int
    below_floor: int
    partial_tail: int

    @property
    def missed_tokens(self) -> int:
        """Prompt tokens not served from the cache (the sum of the classes)."""
        return self.input_tokens - self.hit_tokens

    def share(self, name: str) -> float:
        """The class's tokens over every prompt token (0.0 for an empty trace)."""
        return getattr(self, name) / self.input_tokens if self.input_tokens else 0.0

    @property
    def miss_rate(self) -> float:
        """Missed tokens over prompt tokens: the sum of the shares."""
        return self.missed_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_dict(self) -> dict:
        """JSON-able: tokens and share per class, and the miss rate they add up to."""
        return {"missed_tokens": self.missed_tokens, "miss_rate": self.miss_rate,
                **{name: {"tokens": getattr(self, name), "share": self.share(name)} for name in MISS_CLASSES}}

    def line(self) -> str:
        """One line: ``miss 62.6% = compulsory 40.1% + capacity 0.0% + …``."""
        parts = " + ".join(f"{name.replace('_', ' ')} {self.share(name):.1%}" for name in MISS_CLASSES)
        return f"miss {self.miss_rate:.1%} = {parts}"


def _block_tokens(request: TraceRequest, index: int, page_tokens: int) -> int:
    """Prompt tokens of block ``index`` of ``request`` (its last block may be partial)."""
    return max(0, min(page_tokens, request.input_length - index * page_tokens))


def trace_misses(requests: Sequence[TraceRequest], page_tokens: int, *, by_arrival: bool = False) -> TraceMisses:
    """The capacity-free miss classes of ``requests`` taken in file order (``by_arrival``: by
    timestamp, as a concurrent replay takes them; equal times keep file order). O(blocks)."""
    ordered = sorted(requests, key=lambda r: r.timestamp) if by_arrival else requests
    seen: set[int] = set()
    parents: set[int] = set()  # blocks some earlier request continued past
    compulsory = diverged = below = tail = 0
    for request in ordered:
        ids = request.hash_ids
        covered = len(ids) * page_tokens
        if request.input_length > covered:
            if ids:
                tail += request.input_length - covered
            else:
                below += request.input_length
        first_new = True
        for index, block in enumerate(ids):
            if block in seen:
                continue
            tokens = _block_tokens(request, index, page_tokens)
            if first_new and index > 0 and ids[index - 1] in parents:
                diverged += tokens
            else:
                compulsory += tokens
            first_new = False
        seen.update(ids)
        parents.update(ids[:-1])
    return TraceMisses(sum(r.input_length for r in requests), compulsory, diverged, below, tail)


def miss_breakdown(misses: TraceMisses, hit_tokens: int) -> MissBreakdown:
    """A replay's breakdown: the trace's capacity-free classes, and its other misses as capacity."""
    capacity = misses.input_tokens - hit_tokens - misses.never_cacheable
    if capacity < 0:  # would mean a hit on a block no earlier request had: a replay bug
        raise ValueError(f"the replay hit {hit_tokens:,} tokens, more than the {misses.input_tokens:,} prompt "
                         f"tokens less the {misses.never_cacheable:,} no cache can serve")
    return MissBreakdown(misses.input_tokens, hit_tokens, misses.compulsory, capacity, misses.diverged,
                         misses.below_floor, misses.partial_tail)
