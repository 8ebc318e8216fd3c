# SPDX-License-Identifier: Apache-2.0
"""Cache designs, one entry each (issue 19: "a design is one entry").

A :class:`Design` is one frozen value carrying everything design-specific that the model,
the exports and the UI need to speak about a cache: its nouns (a *block* or a *node*, a
*free queue* or a *free list*, *removed* or *evicted*), one :class:`EventWords` record per
event class (its kind, its log line, whether it evicts, whether it is notable), its
narration clauses, what its views cannot know, and whether the practice questions apply.
Code elsewhere asks the design instead of branching on a kind: a new design is a new
module here and a row in :data:`DESIGN_MODULES`, a new event class one row of its table.

The first entry is the KV-event stream of a real server (:mod:`.events`); the trie, base and
hash designs of kvcore move here later, which is why the records are general (a sub-step
sentence and a focus a stream design does not use, a free-list noun it has not).

Designs are loaded when first asked for (:func:`design`): the events design names the wire
classes of :mod:`kvviz.backends.kv_events`, and asking for the trie must not need them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EventWords:
    """How a design speaks of one event class: one record, so the log, the narration, the
    timeline markers and the colours cannot disagree about it.

    ``log`` is a :meth:`str.format` template over the fields the design's narration passes
    (each design documents its own); ``evicts`` marks an event that takes something out of
    the cache (coloured as an eviction everywhere); ``notable`` one a timeline bar marks.
    ``substep`` and ``focus`` are for designs whose ops are stepped into (None otherwise).
    """

    kind: str
    log: str
    evicts: bool = False
    notable: bool = False
    substep: str | None = None
    focus: str | None = None


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
    - ``quiz``: whether the practice questions apply; ``quiz_refusal``: the line that says
      why not, when they do not.
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


DESIGN_MODULES: Mapping[str, str] = _frozen({
    "events": "events",
})
"""Each design's module under this package, by design name: one row per design. The module
exports its design as ``DESIGN`` (its own imports are what the layer test reads)."""


def design(name: str) -> Design:
    """The design called ``name``, its module imported on first use. KeyError lists the
    known ones."""
    module = DESIGN_MODULES.get(name)
    if module is None:
        raise KeyError(f"no cache design {name!r} (known: {', '.join(DESIGN_MODULES)})")
    return import_module(f"{__name__}.{module}").DESIGN


__all__ = ["DESIGN_MODULES", "Design", "EventWords", "Nouns", "design"]
