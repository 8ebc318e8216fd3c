# SPDX-License-Identifier: Apache-2.0
"""The LRU hit-rate curve of a trace at every capacity in one pass (Mattson's stack distances).

LRU is a *stack algorithm* (Mattson, Gecsei, Slutz and Traiger, 1970): there is one order of
all the blocks ever seen, the LRU stack, such that a cache of C pages holds exactly the top C
of it. A block's *stack distance* when it is asked for is its depth in that stack (infinite if
never seen), and it is a hit at every capacity of at least that distance. One pass that
records each distance gives the hits at every capacity at once; a Fenwick tree over the
stack's "last moved" times finds each depth in O(log n), so the whole curve costs
O(blocks x log blocks), about the time of one or two replays instead of one per capacity.

Why it holds for kvcore's trie, whose LRU evicts *leaves*, in the sequential replay of
:mod:`kvviz.trace.replay` (one request at a time: acquire, publish, release; one hash id is
one kvcore page, so no page is ever partial):

* The stack is the order of ``(last_access, -depth)``, the most recent first. An op touches
  one chain from the root (acquire the matched path, publish the whole path), so two nodes
  with the same ``last_access`` are ancestor and descendant, and a parent's ``last_access``
  is never older than its child's. Hence in this order every ancestor is above its
  descendants, and the bottom-most ref-0 node is a leaf: the childless candidate with the
  smallest ``(last_access, seq)``, which is what the trie pops (among leaves
  ``last_access`` never ties). Leaf-LRU evicts exactly the stack's bottom.
* A request of L blocks whose blocks 1..m are cached needs L - m pages; every cached node
  but its m matched ones is ref 0, so it fits if and only if L <= C. Then the cache after it
  holds its L blocks and, of the rest, the most recent: the top C of the new stack, which is
  the old one with the request's chain moved to the top, block 1 first (it was touched with
  its descendants and is shallower).
* A chain is cached as far as its deepest cached block, so the request hits the m of its
  blocks whose distance is at most C (the distances grow along the chain).

Exactness, said once: the curve is the replay's, point for point, at every capacity of at
least the largest request's blocks (:attr:`LruCurve.exact_from_pages`). Below it, a request
larger than the cache fails and changes nothing at that capacity but moves the stack at
larger ones, so one pass over the trace no longer describes that cache; the sweep replays
those capacities one by one instead (tests/trace/test_stack_distance.py checks both sides of
the bound against kvcore, and that the pass over only the requests that fit matches the
replay below it). With ``with_output`` (pages held for the output and returned to the pool at
release, so the cache then holds fewer than C blocks) or concurrency (pages held across
requests), a cache of C pages is not the top C of one stack: no curve is computed for them.

vLLM's hash design (kvcore's ``hash`` cache) gives the same curve: its free queue is the
stack read bottom-up (release queues a request's pages at the tail last block first, so block
1 is the most recent; a page is taken from the head and only then loses its block), it fails
exactly when L > C, and sequentially no block is ever cached twice or unreachable.

Hit tokens: a request's hit is ``min(matched x page_tokens, input_length)`` (its last block is
usually partial), so the curve counts each block up to the one that reaches the input length
and takes off the overshoot when that block hits.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.core.designs import HASH, TRIE
from kvviz.core.mooncake import DEFAULT_BLOCK_TOKENS, TraceRequest

__all__ = ["STACK_DESIGNS", "LruCurve", "lru_curve"]

STACK_DESIGNS = (TRIE, HASH)
"""The designs :func:`lru_curve` describes: the trie under lru and the hash design's free queue."""


@dataclass(frozen=True, slots=True)
class LruCurve:
    """The hit tokens and evictions of a sequential LRU replay at every capacity of at least
    :attr:`exact_from_pages` pages, from one pass of :func:`lru_curve`.

    ``distances`` are the distinct finite stack distances met, ascending; ``blocks_within`` and
    ``overshoot_within`` their cumulative counts (blocks that hit at a capacity of that many
    pages, and the tokens to take off for requests whose last counted block hits there).
    """

    design: str
    page_tokens: int
    requests: int
    input_tokens: int
    total_blocks: int
    """Blocks asked for by every request (a hit or not)."""
    distinct_blocks: int
    """Blocks an unlimited cache ends with: from this capacity on, nothing is evicted."""
    exact_from_pages: int
    """The largest request's blocks: the curve is exact at this many pages and more."""
    distances: array
    blocks_within: array
    counted_within: array
    overshoot_within: array

    def _within(self, pages: int, cumulative: array) -> int:
        index = bisect_right(self.distances, pages)
        return cumulative[index - 1] if index else 0

    def _check(self, pages: int) -> None:
        if pages < self.exact_from_pages:
            raise ValueError(f"the one-pass LRU curve is exact from {self.exact_from_pages:,} pages (the largest "
                             f"request), not at {pages:,}: a request larger than the cache fails there")

    @property
    def exact_from_tokens(self) -> int:
        """:attr:`exact_from_pages` in tokens: the smallest capacity the curve describes."""
        return self.exact_from_pages * self.page_tokens

    def is_exact(self, pages: int) -> bool:
        """Whether the curve is the replay's at ``pages`` pages (at least the largest request)."""
        return pages >= self.exact_from_pages

    def hit_tokens(self, pages: int) -> int:
        """Prompt tokens served from a cache of ``pages`` pages. O(log distances).
        Raises ``ValueError`` below :attr:`exact_from_pages`."""
        self._check(pages)
        return (self.page_tokens * self._within(pages, self.counted_within)
                - self._within(pages, self.overshoot_within))

    def pages_evicted(self, pages: int) -> int:
        """Pages evicted at ``pages`` pages: every block inserted, less what the cache ends
        holding (it fills up and then stays full). Raises ``ValueError`` below the bound."""
        self._check(pages)
        inserted = self.total_blocks - self._within(pages, self.blocks_within)
        return inserted - min(pages, self.distinct_blocks)

    def token_hit_rate(self, pages: int) -> float:
        """:meth:`hit_tokens` over the input tokens of every request (0.0 for none)."""
        return self.hit_tokens(pages) / self.input_tokens if self.input_tokens else 0.0

    def hit_rate_at(self, capacity_tokens: float) -> float | None:
        """The token hit rate at a capacity in tokens (whole pages of it), None where the curve
        is not exact: what a plot draws as a continuous line."""
        pages = int(capacity_tokens // self.page_tokens)
        return self.token_hit_rate(pages) if self.is_exact(pages) else None


def lru_curve(requests: Sequence[TraceRequest], *, design: str = TRIE,
              page_tokens: int = DEFAULT_BLOCK_TOKENS) -> LruCurve:
    """One pass over ``requests`` (sequential, no output blocks): the LRU curve of ``design``.

    O(blocks x log blocks) time, O(blocks) memory. The caller bounds the size first
    (:func:`kvviz.trace.replay.check_replay_size`), as for a replay.
    """
    if design not in STACK_DESIGNS:
        raise ValueError(f"design must be one of {', '.join(STACK_DESIGNS)}, not {design!r}")
    if page_tokens < 1:
        raise ValueError(f"page_tokens must be at least 1, not {page_tokens}")
    total = sum(len(r.hash_ids) for r in requests)
    # Each block asked for moves to the top of the stack at a new time 1, 2, ... (a request's
    # last block first, so that its first block is the most recent). A block's depth is 1 +
    # the blocks still in the stack that moved after it: the times after its own, less those
    # whose block has moved again since. A Fenwick tree counts those vacated times, so a new
    # time costs nothing and a depth or a vacated time O(log total).
    vacated = [0] * (total + 1)
    vacated_count = 0
    children: list[dict[int, int]] = [{}]  # block -> {hash id: child block}; block 0 is the root
    moved_at = [0]  # block -> the time it last moved to the top
    now = 0  # the latest time given
    all_hist: dict[int, int] = {}  # distance -> blocks hit at it
    over_hist: dict[int, int] = {}  # distance -> blocks past the input length's cap, hit at it
    overshoot_hist: dict[int, int] = {}  # distance -> tokens a request's capped hit takes off
    input_tokens = 0
    largest = 0
    for request in requests:
        hash_ids = request.hash_ids
        length = len(hash_ids)
        input_tokens += request.input_length
        if length > largest:
            largest = length
        # The block that reaches the input length: past it, more blocks add no hit tokens.
        capped = min(-(-request.input_length // page_tokens), length)
        block = 0
        path = []
        for hash_id in hash_ids:
            child = children[block].get(hash_id)
            if child is None:
                break
            path.append(child)
            block = child
        # Every depth is read before any block moves: the stack as the request found it.
        for k, child in enumerate(path, start=1):
            time = moved_at[child]
            vacated_before = 0
            i = time
            while i:
                vacated_before += vacated[i]
                i &= i - 1
            distance = now - time - (vacated_count - vacated_before) + 1
            all_hist[distance] = all_hist.get(distance, 0) + 1
            if k > capped:
                over_hist[distance] = over_hist.get(distance, 0) + 1
            elif k == capped:
                overshoot = capped * page_tokens - request.input_length
                if overshoot > 0:  # an input past its last block (a partial tail, no id) takes nothing off
                    overshoot_hist[distance] = overshoot_hist.get(distance, 0) + overshoot
        for child in path:
            i = moved_at[child]
            while i <= total:
                vacated[i] += 1
                i += i & -i
        vacated_count += len(path)
        for hash_id in hash_ids[len(path):]:
            child = len(moved_at)
            children[block][hash_id] = child
            children.append({})
            moved_at.append(0)
            path.append(child)
            block = child
        for child in reversed(path):
            now += 1
            moved_at[child] = now
    distances = sorted(all_hist)
    blocks_within, counted_within, overshoot_within = array("q"), array("q"), array("q")
    blocks = counted = overshoot = 0
    for distance in distances:
        blocks += all_hist[distance]
        counted += all_hist[distance] - over_hist.get(distance, 0)
        overshoot += overshoot_hist.get(distance, 0)
        blocks_within.append(blocks)
        counted_within.append(counted)
        overshoot_within.append(overshoot)
    return LruCurve(design=design, page_tokens=page_tokens, requests=len(requests), input_tokens=input_tokens,
                    total_blocks=total, distinct_blocks=len(moved_at) - 1, exact_from_pages=largest,
                    distances=array("q", distances), blocks_within=blocks_within, counted_within=counted_within,
                    overshoot_within=overshoot_within)
