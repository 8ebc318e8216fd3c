# SPDX-License-Identifier: Apache-2.0
"""Plain-language narration of a step, generated from its events.

Used when a script has no narration of its own, and always as the "what happened" line:
"acquire r2: matched 2 of 3 full pages (8 of 12 tokens); evicted page 5 [9 10 11 12],
last used at tick 3, the oldest unreferenced leaf" (under lru; other policies name their key
and why it chose the victim, see :mod:`.policy_words`). :func:`describe_event` gives the
one-line form of each event, for the event log.

One numbering everywhere: a *node* is named by its id and the physical *page* it holds
("node 3 (page 2)"); a position in an allocation's tokens is a *block* ("block 1"), never a
page, because physical page 1 may belong to someone else. Tokens are shown through the
session's label function, so words the script spelled read as words.

A hash cache (vLLM's design) has no nodes: it caches *blocks* on pages under chained keys,
keeps one *free queue* of ref-0 pages and evicts lazily, when a page taken from the queue's
head still holds a block; its sentences say so in those words (never "leaf" or "heap").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvcore import Snapshot
from kvcore import events as ev
from kvcore.events import BlockCached, BlockEvicted, PagesQueued, PageUnqueued

from .free_queue import free_page_count
from .policy_words import key_fields, key_phrase, key_value, words_for

Labeler = Callable[[tuple[int, ...]], str]


def default_labeler(tokens: tuple[int, ...]) -> str:
    """Tokens as space-separated integers."""
    return " ".join(map(str, tokens))


def count(n: int, word: str, plural: str | None = None) -> str:
    """``1 page``, ``2 pages``, ``1,024 tokens``: a count with its noun in the right number."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


@dataclass(frozen=True, slots=True)
class Units:
    """What one kvcore token stands for, so narration can speak in the scenario's own units.

    The default counts tokens and full pages. ``block_tokens`` set means each kvcore token
    is one hash block of that many real tokens, one block per page (a converted Mooncake
    trace, :mod:`kvviz.trace.to_kvs`): a match is then "1 of 15 blocks (of 512 tokens)".
    """

    block_tokens: int | None = None

    def match(self, matched_pages: int, full_pages: int, matched_tokens: int, total_tokens: int) -> str:
        """``matched 1 of 4 full pages (4 of 16 tokens)`` or ``matched 1 of 15 blocks (of 512 tokens)``."""
        if self.block_tokens is not None:
            return f"matched {matched_pages:,} of {count(full_pages, 'block')} (of {self.block_tokens:,} tokens)"
        return (f"matched {matched_pages:,} of {count(full_pages, 'full page')} "
                f"({matched_tokens:,} of {count(total_tokens, 'token')})")


TOKENS = Units()
"""The default units: tokens and pages."""

EVICTIONS_TOLD = 3
"""Evictions narrated one by one; the rest of a step's evictions are one clause."""
PAGES_LISTED = 12


NODES_TOLD = 3
"""Nodes a publish narrates one by one; more (a trace request publishes dozens) are one
clause with ranges of node and page numbers."""


def _pages(pages) -> str:
    """``page 3``, ``pages 3, 5``; beyond :data:`NODES_TOLD` pages, runs: ``pages 560..577, 13..1``."""
    pages = list(pages)
    if len(pages) == 1:
        return f"page {pages[0]}"
    return "pages " + (", ".join(map(str, pages)) if len(pages) <= NODES_TOLD else number_ranges(pages))


def number_ranges(numbers, limit: int = PAGES_LISTED) -> str:
    """Numbers in their order, runs that count up or down by one written as the scenario
    language writes a range: ``560..577, 13..1, 40``; past ``limit`` runs, ``and N more``.
    The order is kept (a free queue's order is what a reader asks about)."""
    runs: list[list[int]] = []  # [first, last, direction]
    for n in numbers:
        if runs:
            first, last, direction = runs[-1]
            if direction in (0, 1) and n == last + 1 or direction in (0, -1) and n == last - 1:
                runs[-1] = [first, n, n - last]
                continue
        runs.append([n, n, 0])
    parts = [str(a) if a == b else (f"{a}, {b}" if abs(b - a) == 1 else f"{a}..{b}") for a, b, _ in runs[:limit]]
    rest = sum(abs(b - a) + 1 for a, b, _ in runs[limit:])
    return ", ".join(parts) + (f" and {rest:,} more" if rest else "")


def _nodes(nodes: Sequence[int], pages: Sequence[int] | None = None) -> str:
    """``node 3 (page 2)``, ``nodes 1, 2 (pages 0, 1)``, ``no node``."""
    if not nodes:
        return "no node"
    head = f"node {nodes[0]}" if len(nodes) == 1 else "nodes " + ", ".join(map(str, nodes))
    return f"{head} ({_pages(pages)})" if pages else head


def match_stop(tokens: Sequence[int], matched: int, tokens_per_page: int, label: Labeler = default_labeler,
               parent: int | None = None) -> str:
    """Why a match of ``tokens`` stopped after ``matched`` full pages, in blocks, never pages.

    ``parent`` is the last matched node (None or 0: the root). E.g. "block 1 [9 10 11 12] is
    not a child of node 1", "all 2 full pages matched; the last 2 tokens fill a partial page,
    never shared".
    """
    full = len(tokens) // tokens_per_page
    if not tokens:
        return "no tokens"
    if matched >= full:
        rest = len(tokens) - full * tokens_per_page
        whole = "the full page" if full == 1 else f"all {full:,} full pages"
        fill = "fills" if rest == 1 else "fill"
        if not full:
            return f"{count(rest, 'token')} {fill} no full page; a partial page is never shared"
        if rest:
            last = "the last token" if rest == 1 else f"the last {rest:,} tokens"
            return f"{whole} matched; {last} {fill} a partial page, never shared"
        return f"{whole} matched"
    block = tuple(tokens[matched * tokens_per_page:(matched + 1) * tokens_per_page])
    where = "the root" if not parent else f"node {parent}"
    return f"block {matched} [{label(block)}] is not a child of {where}"


def describe_event(event, label: Labeler = default_labeler, tokens: Sequence[int] | None = None,
                   tokens_per_page: int | None = None, units: Units = TOKENS) -> str:
    """One line for one kvcore event, for the event log; ``label`` turns tokens into words.

    Nodes are always named by id with their page in parentheses. For a ``Matched`` event,
    ``tokens`` (the op's) and ``tokens_per_page`` let the line say in blocks where matching
    stopped; without them it says only what matched. ``units``: a converted trace's tokens
    are blocks, and the match is counted in blocks.
    """
    if isinstance(event, ev.OpStarted):
        return f"{event.op} (allocation #{event.allocation}) at tick {event.tick}"
    if isinstance(event, ev.Matched):
        noun = "block" if units.block_tokens is not None else "token"
        text = (f"matched {_nodes(event.nodes, event.pages)}: "
                f"{event.matched_tokens:,} of {count(event.total_tokens, noun)}")
        if tokens is not None and tokens_per_page:
            parent = event.nodes[-1] if event.nodes else None
            text += f" ({match_stop(tokens, len(event.nodes), tokens_per_page, label, parent)})"
        return text
    if isinstance(event, ev.RefTaken):
        return f"ref +1 on node {event.node} (page {event.page}) → {event.ref}"
    if isinstance(event, ev.RefDropped):
        return f"ref -1 on node {event.node} (page {event.page}) → {event.ref}"
    if isinstance(event, ev.Touched):
        return f"touched {_nodes(event.nodes)}: last_access = {event.tick}"
    if isinstance(event, ev.CandidateAdded):
        return f"heap + node {event.node} (page {event.page}) key {key_value(event.key)}"
    if isinstance(event, ev.CandidateRemoved):
        return f"heap - node {event.node} (page {event.page}): {event.reason}"
    if isinstance(event, ev.PagesTaken):
        return f"took {_pages(event.pages)} from the free list (or queue)"
    if isinstance(event, ev.Evicted):
        return f"evicted node {event.node} (page {event.page}) [{label(event.tokens)}] key {key_value(event.key)}"
    if isinstance(event, ev.NodeCreated):
        parent = "the root" if not event.parent else f"node {event.parent}"
        return f"new node {event.node} (page {event.page}) under {parent}: [{label(event.tokens)}]"
    if isinstance(event, ev.Deduplicated):
        return (f"dedup: block {event.index} already cached as node {event.node} (page {event.page}); "
                f"adopted it, freed own page {event.own_page}")
    if isinstance(event, ev.PagesFreed):
        return f"freed {_pages(event.pages)} ({event.reason})"
    if isinstance(event, ev.Released):
        return f"allocation #{event.allocation} released"
    hashed = _describe_hash_event(event, label)
    return hashed if hashed is not None else repr(event)  # repr: a new event type


def _describe_hash_event(event, label: Labeler) -> str | None:
    """The event log's line for a hash cache's own events (None for any other event)."""
    if isinstance(event, BlockCached):
        copy = "" if event.duplicate_of is None else f" (a duplicate: page {event.duplicate_of} caches the key too)"
        return f"cached block {event.block} [{label(event.tokens)}] on page {event.page}, key {event.key[:8]}{copy}"
    if isinstance(event, BlockEvicted):
        still = "; another page still caches its key" if event.still_cached else ""
        return f"lazily evicted block {event.block} [{label(event.tokens)}] from page {event.page}{still}"
    if isinstance(event, PageUnqueued):
        return f"page {event.page} (block {event.block}) left the free queue: matched"
    if isinstance(event, PagesQueued):
        parts = ([f"{_pages(event.head)} to the free queue's head"] if event.head else []) + (
            [f"{_pages(event.tail)} to its tail"] if event.tail else [])
        return "queued " + " and ".join(parts)
    return None


def narrate(op_text: str, op_kind: str | None, name: str | None, events: tuple, before: Snapshot | None,
            after: Snapshot, error: tuple[str, str] | None, label: Labeler = default_labeler,
            units: Units = TOKENS) -> str:
    """One paragraph saying what the op did (or why it failed and that nothing changed)."""
    if op_kind is None:
        return (f"Start: a {after.kind} cache of {count(after.page_count, 'page')}, "
                f"{count(after.tokens_per_page, 'token')} per page; {count(free_page_count(after), 'page')} free.")
    head = f"{op_kind} {name}"
    if error is not None:
        kind, message = error
        return f"{head} failed ({kind}): {message}. Nothing changed."
    if after.kind == "hash":
        return f"{head}: " + ("; ".join(_hash_parts(op_kind, events, after, label, units)) or "done") + "."
    parts: list[str] = []
    evicted = [e for e in events if isinstance(e, ev.Evicted)]
    created = [e for e in events if isinstance(e, ev.NodeCreated)]
    for e in events:
        if isinstance(e, ev.Matched) and op_kind == "acquire":
            full = e.total_tokens // after.tokens_per_page
            if after.kind == "base":
                parts.append(f"no sharing in the base cache ({count(e.total_tokens, 'token')})")
            elif full == 0:
                parts.append(f"{count(e.total_tokens, 'token')} make{'s' if e.total_tokens == 1 else ''} "
                             "no full page, nothing to match")
            else:
                parts.append(units.match(len(e.nodes), full, e.matched_tokens, e.total_tokens))
        elif isinstance(e, ev.PagesTaken):
            parts.append(f"took {_pages(e.pages)} from the free list")
        elif isinstance(e, ev.NodeCreated) and len(created) <= NODES_TOLD:
            parts.append(f"cached [{label(e.tokens)}] as node {e.node} on page {e.page}")
        elif isinstance(e, ev.NodeCreated) and e is created[0]:  # dozens of blocks: one clause, ranges
            parts.append(f"cached {count(len(created), 'block')} as nodes {number_ranges([c.node for c in created])} "
                         f"on pages {number_ranges([c.page for c in created])}")
        elif isinstance(e, ev.Deduplicated):
            parts.append(f"block {e.index} was already cached by another allocation (node {e.node}): "
                         f"adopted page {e.page} and returned its own copy, page {e.own_page}")
        elif isinstance(e, ev.PagesFreed) and e.reason == "release":
            parts.append(f"returned unpublished {_pages(e.pages)} to the free list")
        elif isinstance(e, ev.CandidateAdded) and op_kind == "release":
            parts.append(f"node {e.node} (page {e.page}) is now unreferenced and childless: an eviction "
                         f"candidate with key {key_phrase(after, e.key)}")
    if op_kind == "release":
        _say_dropped(parts, events, "node")
    if op_kind == "publish":
        touched = next((e for e in events if isinstance(e, ev.Touched)), None)
        if not any(isinstance(e, (ev.NodeCreated, ev.Deduplicated)) for e in events):
            if after.kind == "base":
                parts.append("the base cache shares nothing, so publish only advances the clock")
            else:
                parts.append("nothing new to share (only full pages are published, and never twice)")
        if touched is not None:
            parts.append(f"refreshed {count(len(touched.nodes), 'node')} already on its path")
    words = words_for(after)
    for i, e in enumerate(evicted[:EVICTIONS_TOLD]):
        why = words.first(e.key) if i == 0 else words.next
        if e.parent_became_candidate is not None:
            why += f"; its parent node {e.parent_became_candidate} became a leaf and a candidate"
        # lru says when the page was last used (its key's first field); other policies name their key.
        key = f"last used at tick {e.key[0]}" if words.lru else f"key {key_phrase(after, e.key)}"
        parts.append(f"evicted page {e.page} [{label(e.tokens)}], {key}, {why}")
    rest = evicted[EVICTIONS_TOLD:]
    if rest:  # a trace request can evict hundreds of pages: one clause for the rest, not a page each
        parts.append(f"then {count(len(rest), 'more page')}, {words.rest(key_fields(after))} "
                     f"(pages {_some_pages(rest)}); {count(len(evicted), 'page')} evicted in all")
    if op_kind == "extend" and not any(isinstance(e, (ev.PagesTaken, ev.Evicted)) for e in events):
        parts.append("its pages already had room")
    return f"{head}: " + ("; ".join(parts) if parts else "done") + "."


def _some_pages(evictions) -> str:
    """The pages of ``evictions``, the first :data:`PAGES_LISTED` of them: "4, 5 and 9 more"."""
    pages = ", ".join(str(e.page) for e in evictions[:PAGES_LISTED])
    return pages + (f" and {len(evictions) - PAGES_LISTED:,} more" if len(evictions) > PAGES_LISTED else "")


def _say_dropped(parts: list[str], events: tuple, noun: str) -> None:
    """A release's first clause: how many ``noun`` s (nodes, cached pages) it unreferenced."""
    dropped = sum(isinstance(e, ev.RefDropped) for e in events)
    if dropped:
        parts.insert(0, f"dropped its reference on {count(dropped, noun)}")


def _hash_parts(op_kind: str, events: tuple, after: Snapshot, label: Labeler, units: Units) -> list[str]:
    """The clauses of a hash cache's step: what matched, which pages left the free queue (and
    which cached blocks left with them), what was cached (duplicates said as such), where
    released pages joined the queue."""
    parts: list[str] = []
    unqueued = [e.page for e in events if isinstance(e, PageUnqueued)]
    evicted = [e for e in events if isinstance(e, BlockEvicted)]
    for e in events:
        if isinstance(e, ev.Matched) and op_kind == "acquire":
            full = e.total_tokens // after.tokens_per_page
            if full == 0:
                parts.append(f"{count(e.total_tokens, 'token')} make{'s' if e.total_tokens == 1 else ''} "
                             "no full block, nothing to match")
            else:
                parts.append(units.match(len(e.nodes), full, e.matched_tokens, e.total_tokens).replace(
                    "full page", "full block"))
            if unqueued:
                parts.append(f"the matched {_pages(unqueued)} left the free queue (ref 0 until now)")
        elif isinstance(e, ev.PagesTaken):
            parts.append(f"took {_pages(e.pages)} from the free queue's head")
        elif isinstance(e, BlockCached):
            text = f"cached [{label(e.tokens)}] as block {e.block} on its own page {e.page}"
            if e.duplicate_of is not None:
                text += (f"; that key was already cached on page {e.duplicate_of}, and vLLM caches this copy "
                         f"too (no dedup: block tables never change), lookups keep using page {e.duplicate_of}")
            parts.append(text)
        elif isinstance(e, PagesQueued):
            if e.tail:
                parts.append(f"{_pages(e.tail)} joined the free queue's tail, last block first: still cached, "
                             "matchable until reused")
            if e.head:
                parts.append(f"{_pages(e.head)} (no cached block) joined its head, reused first")
    for e in evicted[:EVICTIONS_TOLD]:
        fate = ("another page still caches its key, so later requests still match it" if e.still_cached else
                "no page caches its key now")
        parts.append(f"page {e.page} still held block {e.block} [{label(e.tokens)}]: it left the cache now, "
                     f"lazily, as its page was reused; {fate}")
    rest = evicted[EVICTIONS_TOLD:]
    if rest:
        parts.append(f"then {count(len(rest), 'more block')} left with their pages (pages {_some_pages(rest)}); "
                     f"{count(len(evicted), 'block')} evicted in all")
    if op_kind == "release":
        _say_dropped(parts, events, "cached page")
    if op_kind == "publish" and not any(isinstance(e, BlockCached) for e in events):
        parts.append("nothing new to cache (only full blocks are cached, and never twice)")
    if op_kind == "extend" and not any(isinstance(e, ev.PagesTaken) for e in events):
        parts.append("its pages already had room")
    return parts
