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

What each design says is its own (:mod:`kvviz.core.designs`): the clauses of a step
(:attr:`~kvviz.core.designs.Design.narrate`) and each event's log line
(:attr:`~kvviz.core.designs.EventWords.log`). This module frames them: the start, a
failure, the op's head. A hash cache (vLLM's design) thus speaks of blocks, a free queue and
lazy eviction, never "leaf" or "heap", without a branch here.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcore import Snapshot

from kvviz.core.designs import Design, LogContext, design_of, words_for_event
from kvviz.core.designs.trie import match_stop
from kvviz.core.free_queue import free_page_count
from kvviz.core.words import (EVICTIONS_TOLD, NODES_TOLD, PAGES_LISTED, TOKENS, Labeler, Units, count, default_labeler,
                    number_ranges)

__all__ = ["EVICTIONS_TOLD", "NODES_TOLD", "PAGES_LISTED", "TOKENS", "Labeler", "Units", "count", "default_labeler",
           "describe_event", "evicts", "match_stop", "narrate", "number_ranges"]


def describe_event(event, label: Labeler = default_labeler, tokens: Sequence[int] | None = None,
                   tokens_per_page: int | None = None, units: Units = TOKENS, design: Design | None = None) -> str:
    """One line for one kvcore event, for the event log; ``label`` turns tokens into words.

    Nodes are always named by id with their page in parentheses. For a ``Matched`` event,
    ``tokens`` (the op's) and ``tokens_per_page`` let the line say in blocks where matching
    stopped; without them it says only what matched. ``units``: a converted trace's tokens
    are blocks, and the match is counted in blocks. ``design`` words it (by default the
    first kvcore design with a row for the event's class); an event no design words is its
    repr (a new event type).
    """
    context = LogContext(label, tokens, tokens_per_page, units)
    if design is not None and design.has_words(event):
        return design.log(event, context)
    try:
        found, _ = words_for_event(event)
    except KeyError:
        return repr(event)
    return found.log(event, context)


def evicts(event, design: Design | None = None) -> bool:
    """Whether ``event`` takes something out of the cache (the event log colours it as an
    eviction: a trie's ``Evicted`` and a hash cache's ``BlockEvicted`` alike)."""
    if design is not None and design.has_words(event):
        return design.words(event).evicts
    try:
        return words_for_event(event)[1].evicts
    except KeyError:
        return False


def narrate(op_text: str, op_kind: str | None, name: str | None, events: tuple, before: Snapshot | None,
            after: Snapshot, error: tuple[str, str] | None, label: Labeler = default_labeler,
            units: Units = TOKENS) -> str:
    """One paragraph saying what the op did (or why it failed and that nothing changed)."""
    if op_kind is None:
        return (f"Start: a {after.kind} cache of {count(after.page_count, 'page')}, "
                f"{units.per_page(after.tokens_per_page)} per page; {count(free_page_count(after), 'page')} free.")
    head = f"{op_kind} {name}"
    if error is not None:
        kind, message = error
        return f"{head} failed ({kind}): {message}. Nothing changed."
    design = design_of(after)
    parts = design.narrate(design, op_kind, events, after, label, units) if design.narrate is not None else []
    return f"{head}: " + ("; ".join(parts) if parts else "done") + "."
