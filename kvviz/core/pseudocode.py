# SPDX-License-Identifier: Apache-2.0
"""The pseudo-code the sub-step pane shows, and which of its lines produced each sub-step.

The algorithms are data (:mod:`kvviz.backends.code`): each design carries its own
(:attr:`kvviz.core.designs.Design.code`, e.g. :data:`kvviz.core.designs.trie.ALGORITHMS`),
each line carrying an **anchor**, so sub-steps are mapped by anchor and an edit of the text
cannot silently point a sub-step at the wrong line. A backend that reports its own calls
brings its own code through the Backend Protocol. This module looks lines up in whichever
code is in force, and builds the bug museum's exhibits from its catalogue
(:mod:`kvviz.core.bug_museum`: the bugs are other caches', so the model holds none).

Algorithms of kvcore's designs (:data:`ALGORITHMS`): the trie's ``acquire``, ``publish``,
``extend`` (kvcore's one method for both trie and base), ``release`` and ``evict``; the base
cache's ``base``; the hash cache's ``hash``.

:func:`lines_for` says which lines produced a sub-step; eviction's sub-steps inside an
acquire or an extend are in ``evict``, and the code's ``caller`` gives the op's line that
called it (:meth:`kvviz.backends.code.Code.caller`: the pane switches algorithms like a
call stack). :func:`buggy_variant` gives, for a
bug-museum demo, the buggy code beside ours (:class:`Variant`): every bug of docs/bugs.md whose
buggy code it (with the demo's narration) describes has one; B11 (no demo; a stale handle
is API misuse, not a line), B12 (docs/bugs.md gives its effect, whose cause is B2's reference
counting) and S1 (SGLang's counter is named, its code is not) have none
(:data:`NO_VARIANT` says why).

Pure data and functions: no kvcore, textual or kvviz.ui import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType

from kvviz.core import bug_museum
from kvviz.backends.registry import MUSEUM_PREFIXES
from kvviz.core.designs import KVCORE_DESIGNS, TRIE, design
from kvviz.backends.code import Algorithm, Code, Line, block, parse

_parse = parse  # the parser's old private name (tests build broken tables with it)
_block = block

# -- algorithms: each design's, one table -----------------------------------------------------

# The designs whose pseudo-code the bug museum and the tables below cover.
_DESIGNS = tuple(design(name) for name in KVCORE_DESIGNS)

ALGORITHMS: Mapping[str, Algorithm] = MappingProxyType(
    {name: a for d in _DESIGNS if d.code is not None for name, a in d.code.algorithms.items()})
"""Every algorithm of kvcore's designs, by name (a name means one text: base runs the
trie's ``extend``). A foreign backend's code is its own (:attr:`kvviz.backends.Backend.pseudocode`)."""

CACHE_KINDS = tuple(d.name for d in _DESIGNS if d.code is not None)
"""The cache kinds with pseudo-code of their design."""

NO_LINES: tuple[str, tuple[int, ...]] = ("", ())
"""What :func:`lines_for` returns for a cache kind without pseudo-code."""

SUBSTEP_LINES: Mapping[tuple[str, str, str, str], tuple[str, tuple[str, ...]]] = MappingProxyType(
    {(d.name, *key): row for d in _DESIGNS if d.code is not None for key, row in d.code.rows.items()})
"""Every design's rows in one table: ``(cache kind, op kind, sub-step kind, qualifier) ->
(algorithm, anchors)`` (each design's :attr:`~kvviz.backends.code.Code.rows`).

Sub-step kinds are :data:`kvviz.core.substeps.SUBSTEP_KINDS`. The qualifier is "" except
where a design's ``qualify`` tells one (op, kind) pair apart: on the trie, ``swap`` says which
heap move it sifts after (``unheap``, ``push`` or ``pop``) and ``pop`` is ``cascade`` when the
victim's parent took its slot; a backend's ``call`` names its call.
"""


def code_for(cache_kind: str, code: Code | None = None) -> Code | None:
    """The pseudo-code in force: ``code`` (a backend's own) when given, else the design of
    ``cache_kind``'s; None for a kind with neither."""
    if code is not None:
        return code
    try:
        return design(cache_kind).code
    except KeyError:
        return None


def algorithm_for(op_kind: str, cache_kind: str = TRIE, *, code: Code | None = None) -> str:
    """The algorithm an op of ``op_kind`` runs on a ``cache_kind`` cache (the call stack's
    outermost frame); "" for a cache kind without pseudo-code."""
    found = code_for(cache_kind, code)
    return found.entry.get(op_kind, "") if found is not None else ""


def lines_for(op_kind: str, substep_kind: str, *, cache_kind: str = TRIE,
              context: Mapping | None = None, code: Code | None = None) -> tuple[str, tuple[int, ...]]:
    """The algorithm and the 1-based line numbers that produced a ``substep_kind`` sub-step
    inside an ``op_kind`` op on a ``cache_kind`` cache, read from its design's pseudo-code, or
    from ``code`` (a backend that reports its own calls brings its own).

    ``context`` (the sub-step's, from :mod:`kvviz.core.substeps`) is what the code's
    ``qualify`` reads: on the trie, ``swap``: ``after`` = the heap move it sifts after
    (``"unheap"``, ``"push"``, ``"pop"``), else ``direction`` ``"up"`` means not an
    eviction's; ``pop``: ``cascade`` = True when the victim's parent took its slot; a call:
    ``call`` = the method's name. Eviction's sub-steps inside acquire or extend are in
    ``evict``. A cache kind without pseudo-code gives :data:`NO_LINES`; a pair that cannot
    occur raises KeyError.
    """
    found = code_for(cache_kind, code)
    if found is None:
        return NO_LINES
    entry = found.lines(op_kind, substep_kind, context)
    if entry is None:
        q = found.qualify(op_kind, substep_kind, context or {})
        where = f"a {cache_kind} cache" if code is None else "this backend"
        raise KeyError(f"no pseudo-code line for a {substep_kind!r} sub-step of {op_kind!r} on {where}"
                       + (f" ({q})" if q else ""))
    return entry


# -- the bug museum: buggy code beside ours ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bug:
    """A bug of docs/bugs.md: its ``id`` and its one-line ``description`` (docs/bugs.md's words)."""

    id: str
    description: str


BUGS: Mapping[str, Bug] = MappingProxyType({bug: Bug(bug, words) for bug, words in bug_museum.BUGS.items()})
"""Every bug of docs/bugs.md, by id (the catalogue's, :data:`kvviz.core.bug_museum.BUGS`)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """A buggy variant of one of our algorithms, line for line beside ours.

    ``theirs`` keeps our numbering: a line the buggy code does not have is "" there.
    ``ours_differ`` and ``theirs_differ`` are the 1-based numbers of the lines that differ
    on each side (the same numbers, since the numbering is kept).
    """

    algorithm: str
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    ours_differ: tuple[int, ...]
    theirs_differ: tuple[int, ...]
    bug: str
    description: str


def _variant(bug: str, algorithm: str, changes: Mapping[str, str | None]) -> Variant:
    """Our ``algorithm`` with the lines anchored in ``changes`` replaced (None: absent in
    theirs). A replacement is written without indentation; it gets our line's."""
    algo = ALGORITHMS[algorithm]
    ours = algo.texts()
    theirs = list(ours)
    for anchor, text in changes.items():
        mine = algo.line(anchor)
        indent = mine.text[:len(mine.text) - len(mine.text.lstrip())]
        theirs[mine.number - 1] = "" if text is None else indent + text
    differ = tuple(sorted(algo.numbers(*changes)))
    return Variant(algorithm, ours, tuple(theirs), differ, differ, bug, BUGS[bug].description)


VARIANTS: Mapping[str, Variant] = MappingProxyType(
    {bug: _variant(bug, algorithm, changes) for bug, (algorithm, changes) in bug_museum.VARIANTS.items()})
"""The buggy variant of every bug whose buggy code docs/bugs.md (with its demo) describes, by id
(built from :data:`kvviz.core.bug_museum.VARIANTS`: an anchor that names no line of ours
fails here, at import)."""

NO_VARIANT: Mapping[str, str] = bug_museum.NO_VARIANT
"""The bugs without a variant, and why."""

_DEMO_BUG = re.compile(rf"^(?:{'|'.join(map(re.escape, MUSEUM_PREFIXES.values()))})([bs]\d+[a-z]?)-", re.IGNORECASE)


def demo_bug(demo_name: str) -> str | None:
    """The docs/bugs.md id a bug-museum demo replays (``bug-b4b-root-ref`` -> ``"B4b"``; a demo
    name under any of :data:`~kvviz.backends.registry.MUSEUM_PREFIXES`), or None for any other demo. Accepts a name, a file name or a
    path."""
    m = _DEMO_BUG.match(PurePath(demo_name).name)
    if m is None:
        return None
    raw = m.group(1)
    bug = raw[0].upper() + raw[1:].lower()
    return bug if bug in BUGS else None


def buggy_variant(demo_name: str) -> Variant | None:
    """The buggy code of the bug ``demo_name`` replays, beside ours; None for a demo that is
    not in the bug museum, and for the bugs of :data:`NO_VARIANT` (B11, B12, S1)."""
    bug = demo_bug(demo_name)
    return VARIANTS.get(bug) if bug is not None else None
