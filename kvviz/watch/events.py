# SPDX-License-Identifier: Apache-2.0
"""The KV-event stream of a real server (vLLM, SGLang, Dynamo, LMCache ...) as a design.

What kvviz sees of such a cache is only what the server publishes: chains of full blocks
stored, blocks removed, the cache cleared. So the design's nouns are *block* and *removed*
(not *evicted*: the stream does not say why a block left, and vLLM removes lazily, when a
freed block is reused), one step is one *batch* the publisher sent, and its views cannot
know reference counts, eviction order or owners: the stream carries none of them.

Narration clauses (:attr:`Design.clauses`), with the fields each is filled with:

==================  ========================================================================
``lead``            ``step`` (the batch's timeline step), ``where`` (``seq 16`` or ``seq 16,
                    rank 1``): the paragraph's start
``chain``           ``blocks`` (a counted noun), ``medium`` (``" on CPU"`` or ``""``),
                    ``under`` (a ``parent`` clause or ``root``): one stored chain
``parent``          ``parent`` (a key label): where a chain hangs
``root``            (none): a chain whose first block has no parent
``orphan``          ``parent``: a chain whose parent kvviz never saw
``more_chains``     ``chains``, ``blocks``: chains past the ones told one by one
``duplicates``      ``copies``: stored blocks that were already cached (another copy)
``not_kept``        ``blocks``: new blocks not added, the forest holding its cap
``removed``         ``blocks``, ``medium``: blocks removed
``removed_unknown`` ``unknown``: of those, how many kvviz never saw stored
``cleared``         ``medium``: ``AllBlocksCleared``
``unknown_types``   ``events``, ``types``: events of a type this reader does not know
``empty``           (none): a batch with no events
``after``           ``cached`` (a counted noun): the cache after the batch
``undecodable``     ``seq``, ``error``: a message that could not be decoded
``reset``           ``dropped`` (a counted noun): a publisher restart cleared the view
==================  ========================================================================
"""

from __future__ import annotations

from kvviz.watch.wire import AllBlocksCleared, BlockRemoved, BlockStored, UnknownEvent
from kvviz.core.designs import Design, EventWords, Nouns, register

NOUNS = Nouns(entry="block", entries="blocks", structure="forest", removed="removed", free=None, step="batch")

EVENT_WORDS = {
    # log templates' fields: blocks (counted), medium (" on CPU" or ""), parent (a label or
    # "the root"), type (an unknown event's type)
    BlockStored: EventWords(kind="store", log="stored {blocks}{medium} under {parent}"),
    BlockRemoved: EventWords(kind="remove", log="removed {blocks}{medium}", evicts=True, notable=True),
    AllBlocksCleared: EventWords(kind="clear", log="cleared every block{medium}", evicts=True, notable=True),
    UnknownEvent: EventWords(kind="unknown", log="skipped an event of unknown type {type}", notable=True),
}
"""One row per stream event class: its kind, its log line, whether it takes blocks out of
the cache (``evicts``: coloured as a removal) and whether the timeline marks it."""

CLAUSES = {
    "lead": "Batch {step} ({where}): ",
    "chain": "stored {blocks}{medium} {under}",
    "parent": "under {parent}",
    "root": "at the root",
    "orphan": "under {parent} (never seen: an orphan)",
    "more_chains": "and {chains} more ({blocks})",
    "duplicates": "{copies} already cached (another copy)",
    "not_kept": "{blocks} not added (the forest is full)",
    "removed": "removed {blocks}{medium}",
    "removed_unknown": " ({unknown} never seen)",
    "cleared": "cleared every block{medium}",
    "unknown_types": "skipped {events} of unknown type {types}",
    "empty": "no events",
    "after": "{cached} cached",
    "undecodable": "seq {seq} could not be decoded ({error}); the view is unchanged",
    "reset": "the publisher restarted (seq went back), so the view was reset: {dropped} dropped",
}

UNKNOWABLE = "the stream carries no reference counts, eviction order or owners"

DESIGN = register(Design(
    name="events",
    title="KV events of a server",
    nouns=NOUNS,
    events=EVENT_WORDS,
    clauses=CLAUSES,
    unknowable=UNKNOWABLE,
    missing={
        "refs": "no reference counts: the stream says what is cached, not who holds it",
        "heap": "no eviction order: the stream says what was removed, not what goes next",
        "allocations": "no owners: the stream carries no request ids",
        "pseudocode": "no code to follow: the server's cache ran it, kvviz only sees its events",
    },
    quiz=False,
    quiz_refusal="quiz questions need the cache's own state (refs, eviction order); "
                 "the KV-event stream carries neither",
))
"""The events design: the cache a server's KV-event stream describes. Registered with the
kernel's design table here, by the watch feature that owns it, so ``design("events")`` finds
it once the watch is loaded (the kernel does not import the watch)."""

EVENTS_DESIGN = DESIGN

__all__ = ["CLAUSES", "DESIGN", "EVENTS_DESIGN", "EVENT_WORDS", "NOUNS", "UNKNOWABLE"]
