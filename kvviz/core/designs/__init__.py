# SPDX-License-Identifier: Apache-2.0
"""Cache designs, one entry each.

A :class:`Design` is one frozen value carrying everything design-specific that the model,
the exports and the UI need to speak about a cache: its nouns (a *block* or a *node*, a
*free queue* or a *free list*, *removed* or *evicted*), one :class:`EventWords` record per
event class (its kind, its log line, whether it evicts, whether it is notable), its
narration clauses, what its views cannot know, and whether the quiz questions apply.
Code elsewhere asks the design instead of branching on a kind: a new design is a new
module here and a row in :data:`DESIGN_MODULES`, a new event class one row of its table.

Entries: kvcore's three caches, :mod:`.trie` (shared prefixes, ref counts, a heap of
eviction candidates), :mod:`.base` (no sharing) and :mod:`.hash` (vLLM's chained block keys
and one free queue, lazy eviction), and the KV-event stream of a real server
(:mod:`kvviz.watch.events`, registered by the watch feature with :func:`register`). A kvcore design's record also carries what stepping into an op needs: each
event's sub-step sentence and focus (:attr:`EventWords.substep`), the pseudo-code and its
sub-step -> line rows (:attr:`Design.code`), its narration (:attr:`Design.narrate`), and what
its views and exports show (:attr:`Design.views`).

Designs are loaded when first asked for (:func:`design`): the events design names the wire
classes of :mod:`kvviz.watch`, and asking for the trie must not need them. A
design defined elsewhere (a test's toy cache, a plugin) joins with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import import_module
from types import MappingProxyType
from typing import Any, Final, Literal


@dataclass(frozen=True, slots=True)
class Focus:
    """What moves in a sub-step, for the views to highlight: trie nodes, physical pages,
    heap slots (array indices), and the allocation (by name)."""

    nodes: tuple[int, ...] = ()
    pages: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()
    allocation: str | None = None


class OpContext:
    """What the sub-step sentences of one op remember between its events: the allocations'
    names, the op's label function, the pages and parents of nodes seen so far (an evicted
    node's page, a node created a moment ago), the heap move a sift follows, and for a free
    queue the queue before the op and the pages matched out of it. One per op; the design's
    :attr:`EventWords.substep` functions read and update it."""

    def __init__(self, op, before, names: dict[int, str], label: Callable[[tuple[int, ...]], str]):
        self.op = op
        self.names = names
        self.label = label
        self.tokens_per_page = before.tokens_per_page
        self.pages_of: dict[int, int | None] = {n.id: n.page for n in before.nodes}
        self.parent_of: dict[int, int | None] = {n.id: n.parent for n in before.nodes}
        self.heap_move = ""  # the heap move a sift follows (unheap, push, pop): which lines swap
        self.matched = 0
        self.queue = before.free  # a free queue, head first, before the op
        self.unqueued: set[int] = set()  # pages the op took out of it so far (matched)

    def name(self, allocation: int | None) -> str:
        """The scenario name of allocation ``allocation`` (the op's own when None)."""
        if allocation is None:
            return self.op.name
        return self.names.get(allocation, self.op.name)

    def node(self, node: int) -> str:
        """``node 3 (page 2)``, or ``node 3`` when its page is not known yet."""
        page = self.pages_of.get(node)
        return f"node {node}" + (f" (page {page})" if page is not None else "")


SubStepWords = Callable[[OpContext, Any], tuple[str, Focus, dict]]
"""A sub-step's words: ``(context, event) -> (sentence, focus, pseudo-code context)``."""


@dataclass(frozen=True, slots=True)
class EventWords:
    """How a design speaks of one event class: one record, so the log, the narration, the
    timeline markers and the colours cannot disagree about it.

    ``kind`` is the sub-step kind (:data:`kvviz.core.substeps.SUBSTEP_KINDS`), or the
    event's kind in a stream design; ``kind_of``, when set, picks it per event (a walk step
    that found a child, or the one that did not). ``log`` is the event log's line: a
    :meth:`str.format` template over the fields the design's narration passes (each design
    documents its own), or a function ``(event, LogContext) -> str``. ``evicts`` marks an
    event that takes something out of the cache (coloured as an eviction everywhere);
    ``notable`` one a timeline bar (or the sub-step stepper) stops at. ``substep`` words the
    event as a sub-step (:data:`SubStepWords`; None in a design whose ops are not stepped
    into); ``focus`` names what it highlights, for the docs.
    """

    kind: str
    log: str | Callable[..., str]
    evicts: bool = False
    notable: bool = False
    substep: SubStepWords | None = None
    focus: str | None = None
    kind_of: Callable[[Any], str] | None = None

    def kind_for(self, event: object) -> str:
        """The sub-step kind of this very ``event``."""
        return self.kind if self.kind_of is None else self.kind_of(event)


@dataclass(frozen=True, slots=True)
class LogContext:
    """What a log line may use besides its event: the label function, the op's tokens and
    the page size (a match then says in blocks where it stopped), and the units."""

    label: Callable[[tuple[int, ...]], str]
    tokens: Any = None
    tokens_per_page: int | None = None
    units: Any = None


@dataclass(frozen=True, slots=True)
class Nouns:
    """The words a design's cache is described in.

    ``entry``/``entries``: one cached unit ("block", "node"); ``structure``: what the entries
    form ("forest", "trie", "hash map"); ``removed``: the past participle of taking one out
    ("removed", "evicted", "lazily evicted"); ``free``: where unused pages wait ("free
    queue", "free list"), None when the design does not see pages at all; ``step``: what one
    timeline step is ("batch", "op").
    """

    entry: str
    entries: str
    structure: str
    removed: str
    free: str | None
    step: str

    def count(self, n: int) -> str:
        """``1 block``, ``2 blocks``: a count of entries in this design's noun."""
        return f"{n:,} {self.entry if n == 1 else self.entries}"


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Design:
    """One cache design, everything the model, exports and UI say about it.

    - ``name``: its key (``"events"``); ``title``: a heading ("KV events of a server").
    - ``nouns``: :class:`Nouns`.
    - ``events``: ``{event class: EventWords}``; :meth:`words` looks an event up (its class
      or the nearest base class in the table).
    - ``clauses``: narration clauses by name, :meth:`str.format` templates the design's
      narration fills (each design module lists its names and fields).
    - ``unknowable``: one sentence, what views of this design cannot know ("" when they can
      know everything); ``missing``: ``{view: line}``, the one line a view that needs such a
      fact shows instead of inventing it.
    - ``quiz``: whether the quiz questions apply; ``quiz_refusal``: the line that says
      why not, when they do not; ``questions``: the names of the question kinds the design
      brings (:data:`kvviz.teach.quiz.KINDS` holds each kind's entry), in table order.

    What a kvcore design also says (defaults fit a design that has none of it):

    - ``tree``: entries are trie nodes, with refs, children and a heap of candidates;
      ``shares``: requests share cached pages (the base cache: False); ``lazy``: free pages
      wait in one free queue beside ref-0 cached ones, whose blocks leave only when the
      page is taken (so free and evictable overlap; vLLM's lazy eviction).
    - ``views``: (the view of what is cached, the view of the eviction order), the keys
      :mod:`kvviz.ui.panes` and the text and Markdown exports look their sections up by:
      ``("trie", "heap")`` or ``("blocks", "queue")``.
    - ``code``: its pseudo-code (:class:`.code.Code`), None without any.
    - ``narrate``: ``(design, op_kind, events, after, label, units) -> [clause]``, the
      clauses of a successful op's narration paragraph.
    - ``stops``: the sub-step kinds a stepper's "next notable" stops at.
    - ``rows``: the snapshot rows that hold its cached pages, ``"nodes"`` (a trie's, the
      root left out) or ``"blocks"`` (a hash cache's); what a diff of two snapshots compares.
    - ``cache_options``: the scenario cache-line options it takes besides ``pages``,
      ``tokens_per_page`` and ``policy`` (the hash cache: vLLM's ``recompute_last_token``).
    """

    name: str
    title: str
    nouns: Nouns
    events: Mapping[type, EventWords]
    clauses: Mapping[str, str]
    unknowable: str = ""
    missing: Mapping[str, str] = field(default_factory=dict)
    quiz: bool = True
    quiz_refusal: str = ""
    questions: tuple[str, ...] = ()
    tree: bool = False
    shares: bool = True
    lazy: bool = False
    views: tuple[str, str] = ("trie", "heap")
    code: Any = None
    narrate: Callable[..., list[str]] | None = None
    stops: frozenset[str] = frozenset()
    rows: str = "nodes"
    cache_options: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Frozen all the way down: a design is shared by every frame and view.
        object.__setattr__(self, "events", _frozen(self.events))
        object.__setattr__(self, "clauses", _frozen(self.clauses))
        object.__setattr__(self, "missing", _frozen(self.missing))

    def words(self, event: object) -> EventWords:
        """The :class:`EventWords` of ``event`` (an instance or a class). KeyError names an
        event class the design has no row for: that is a missing row, not a case to guess."""
        cls = event if isinstance(event, type) else type(event)
        for klass in cls.__mro__:
            words = self.events.get(klass)
            if words is not None:
                return words
        raise KeyError(f"the {self.name} design has no words for event class {cls.__name__}")

    def clause(self, name: str, **fields: object) -> str:
        """Narration clause ``name`` filled with ``fields``."""
        return self.clauses[name].format(**fields)

    def has_words(self, event: object) -> bool:
        """Whether the design has a row for ``event``'s class (or a base class of it)."""
        cls = event if isinstance(event, type) else type(event)
        return any(klass in self.events for klass in cls.__mro__)

    def log(self, event: object, context: LogContext) -> str:
        """The event log's line for ``event``."""
        log = self.words(event).log
        if callable(log):
            return log(event, context)
        return log.format(**{f.name: getattr(event, f.name) for f in fields(event)}) if is_dataclass(event) else log

    def evicting(self) -> tuple[type, ...]:
        """The event classes that take something out of this design's cache."""
        return tuple(cls for cls, words in self.events.items() if words.evicts)


TRIE: Final = "trie"
"""The trie design's name (:mod:`.trie`): shared prefixes, ref counts, a heap of eviction
candidates. Code outside this package and the scenario language names a design through
these constants, never a string of its own."""
BASE: Final = "base"
"""The base design's name (:mod:`.base`): no sharing."""
HASH: Final = "hash"
"""The hash design's name (:mod:`.hash`): vLLM's chained block keys and one free queue."""

DESIGN_MODULES: Mapping[str, str] = _frozen({
    TRIE: "trie",
    BASE: "base",
    HASH: "hash",
})
"""Each design's module under this package, by design name: one row per design. The module
exports its design as ``DESIGN`` (its own imports are what the layer test reads)."""

KVCORE_DESIGNS = (TRIE, BASE, HASH)
"""The designs of kvcore's own caches (whose events are :mod:`kvcore.events`), in the order
an event's log line is looked up when no design is named."""

DesignKind = Literal["trie", "base", "hash"]
"""The type of a kvcore design's name (:data:`KVCORE_DESIGNS`), for annotations: a type
checker reads only literal strings here, so the names are spelled again, in this module."""

_REGISTERED: dict[str, Design] = {}


def register(entry: Design) -> Design:
    """Add a design defined outside this package (a test's toy cache, a plugin), under its
    ``name``; a name this package already has is refused (ValueError). Returns it."""
    if entry.name in DESIGN_MODULES:
        raise ValueError(f"cache design {entry.name!r} is one of kvviz's own")
    _REGISTERED[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Forget a design :func:`register` added (a test cleaning up after itself)."""
    _REGISTERED.pop(name, None)


def design(name: str) -> Design:
    """The design called ``name``, its module imported on first use. KeyError lists the
    known ones."""
    registered = _REGISTERED.get(name)
    if registered is not None:
        return registered
    module = DESIGN_MODULES.get(name)
    if module is None:
        known = [*DESIGN_MODULES, *_REGISTERED]
        raise KeyError(f"no cache design {name!r} (known: {', '.join(known)})")
    return import_module(f"{__name__}.{module}").DESIGN


def design_of(snapshot) -> Design:
    """The design of a kvcore snapshot (by its ``kind``)."""
    return design(snapshot.kind)


def kvcore_designs() -> tuple[Design, ...]:
    """kvcore's designs and every registered one (their caches report kvcore's events)."""
    return tuple(design(name) for name in KVCORE_DESIGNS) + tuple(_REGISTERED.values())


def words_for_event(event: object) -> tuple[Design, EventWords]:
    """The first of :func:`kvcore_designs` with a row for ``event``, and that row (for a log
    line asked for without a design). KeyError for an event no design words."""
    for entry in kvcore_designs():
        if entry.has_words(event):
            return entry, entry.words(event)
    cls = event if isinstance(event, type) else type(event)
    raise KeyError(f"no cache design has words for event class {cls.__name__}")


def eviction_events() -> tuple[type, ...]:
    """Every event class that evicts in one of :func:`kvcore_designs`, each once, in table order."""
    out: dict[type, None] = {}
    for entry in kvcore_designs():
        out.update(dict.fromkeys(entry.evicting()))
    return tuple(out)


__all__ = ["BASE", "DESIGN_MODULES", "Design", "EventWords", "Focus", "HASH", "KVCORE_DESIGNS", "LogContext", "Nouns",
           "OpContext", "SubStepWords", "TRIE", "design", "design_of", "eviction_events", "kvcore_designs", "register",
           "unregister", "words_for_event"]
