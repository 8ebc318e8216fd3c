# SPDX-License-Identifier: Apache-2.0
"""Pseudo-code as data: the types a design (or a foreign backend) writes its algorithms in.

Each :class:`Algorithm` is 10 to 30 lines of Python-like pseudo-code, each :class:`Line`
carrying an **anchor**, a short name unique in its algorithm (``walk``, ``fits?``, ``swap``,
...). Line numbers are derived, so a :class:`Code`'s rows map sub-steps by anchor and an edit
of the text cannot silently point a sub-step at the wrong line; a broken table fails at
import (:func:`parse`, :class:`Code`), not in the pane.

A :class:`Code` is one cache's pseudo-code: its algorithms, which one each op runs, and its
rows ``(op kind, sub-step kind, qualifier) -> (algorithm, anchors)``. kvcore's designs carry
theirs (:attr:`kvviz.core.designs.Design.code`); a backend that reports its own calls
brings its own (:attr:`kvviz.backends.Backend.pseudocode`). The lookups over it are
:mod:`kvviz.core.pseudocode`'s.

Pure data: no kvcore, textual or kvviz.ui import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Algorithm", "Code", "Line", "Row", "block", "call_code", "no_qualifier", "parse", "rows"]


@dataclass(frozen=True, slots=True)
class Line:
    """One line of pseudo-code: its 1-based ``number``, its ``text`` (indentation included),
    its ``anchor`` (a name unique in the algorithm), whether it is ``structural`` (a loop
    header, a comment, a ``return``: never lit by a sub-step of its own) and the algorithm
    it ``calls`` (the caller's frame of a call stack), if any."""

    number: int
    text: str
    anchor: str
    structural: bool = False
    calls: str | None = None


@dataclass(frozen=True, slots=True)
class Algorithm:
    """A named piece of pseudo-code: ``title`` says what it is, ``source`` what it is true to."""

    name: str
    title: str
    source: str
    lines: tuple[Line, ...]

    def numbers(self, *anchors: str) -> tuple[int, ...]:
        """The line numbers of ``anchors``, in that order; KeyError for an unknown anchor."""
        by_anchor = {line.anchor: line.number for line in self.lines}
        try:
            return tuple(by_anchor[a] for a in anchors)
        except KeyError as e:
            raise KeyError(f"{self.name} has no line anchored {e.args[0]!r}") from None

    def line(self, anchor: str) -> Line:
        """The line anchored ``anchor``."""
        return self.lines[self.numbers(anchor)[0] - 1]

    def texts(self) -> tuple[str, ...]:
        """The lines' texts, line 1 first (what the pane prints)."""
        return tuple(line.text for line in self.lines)


def block(*parts: str) -> str:
    """Pieces of pseudo-code (triple-quoted strings) as one block, line after line."""
    return "\n".join(part.strip("\n") for part in parts)


def parse(name: str, title: str, source: str, text: str) -> Algorithm:
    """An algorithm from a block of ``text  @anchor`` lines.

    ``@~anchor`` marks a structural line, ``@anchor>other`` a line calling algorithm
    ``other``. Raises ValueError for a line without an anchor or an anchor used twice, so a
    broken table fails at import, not in the pane.
    """
    lines: list[Line] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        body, sep, tag = raw.rpartition("  @")
        if not sep or not tag:
            raise ValueError(f"pseudo-code {name} line {number} has no anchor: {raw!r}")
        structural = tag.startswith("~")
        anchor, _, calls = tag.lstrip("~").partition(">")
        if anchor in seen:
            raise ValueError(f"pseudo-code {name} uses anchor {anchor!r} twice")
        seen.add(anchor)
        lines.append(Line(number, body.rstrip(), anchor, structural, calls or None))
    return Algorithm(name, title, source, tuple(lines))


Row = tuple[str, str, str]
"""A row's key: (op kind, sub-step kind, qualifier); the qualifier is "" when one (op, kind)
pair can be only one thing."""


def rows(op: str, algorithm: str, table: Mapping[str, tuple[str, ...]]) -> dict[Row, tuple[str, tuple[str, ...]]]:
    """Rows for the sub-steps of ``op`` lit in ``algorithm``: ``{"kind": anchors}``, a
    ``"kind/qualifier"`` key for a kind the qualifier tells apart."""
    out = {}
    for kind, anchors in table.items():
        kind, _, qualifier = kind.partition("/")
        out[(op, kind, qualifier)] = (algorithm, anchors)
    return out


def no_qualifier(op_kind: str, kind: str, context: Mapping) -> str:
    """The qualifier of a code whose rows need none: always ""."""
    return ""


@dataclass(frozen=True)
class Code:
    """One cache's pseudo-code: ``algorithms`` by name; ``entry``: the algorithm each op kind
    runs (the call stack's outermost frame); ``rows``: ``(op kind, sub-step kind,
    qualifier) -> (algorithm, anchors)``; ``qualify(op_kind, kind, context)``: the qualifier
    a sub-step's context selects. Every row's anchors are checked at construction."""

    algorithms: Mapping[str, Algorithm]
    entry: Mapping[str, str]
    rows: Mapping[Row, tuple[str, tuple[str, ...]]]
    qualify: Callable[[str, str, Mapping], str] = no_qualifier
    calls: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("algorithms", "entry", "rows", "calls"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        for key, (algorithm, anchors) in self.rows.items():
            if algorithm not in self.algorithms:
                raise ValueError(f"pseudo-code row {key} names no algorithm {algorithm!r}")
            self.algorithms[algorithm].numbers(*anchors)  # KeyError for a missing anchor
        for op, algorithm in self.entry.items():
            if algorithm not in self.algorithms:
                raise ValueError(f"pseudo-code entry {op!r} names no algorithm {algorithm!r}")

    def lines(self, op_kind: str, kind: str, context: Mapping | None = None) -> tuple[str, tuple[int, ...]] | None:
        """The algorithm and the 1-based line numbers that produced a ``kind`` sub-step of an
        ``op_kind`` op, or None when this code has no such row."""
        qualifier = self.qualify(op_kind, kind, context or {})
        entry = self.rows.get((op_kind, kind, qualifier))
        if entry is None:
            return None
        algorithm, anchors = entry
        return algorithm, self.algorithms[algorithm].numbers(*anchors)

    def caller(self, op_kind: str, algorithm: str) -> tuple[str, tuple[int, ...]] | None:
        """The frame below which ``algorithm`` runs in an ``op_kind`` op: the op's algorithm
        and its lines that call ``algorithm``, or None when ``algorithm`` is the op's own."""
        outer = self.entry.get(op_kind, "")
        if not outer or algorithm == outer:
            return None
        return outer, tuple(line.number for line in self.algorithms[outer].lines if line.calls == algorithm)

    def merged(self, other: "Code") -> "Code":
        """Both codes' algorithms (an algorithm's name must mean one text), ``self``'s rows,
        entry and qualifier: a design reusing another's algorithms (base runs trie's extend)."""
        algorithms = dict(other.algorithms)
        algorithms.update(self.algorithms)
        return Code(algorithms, self.entry, self.rows, self.qualify, self.calls)


def call_code(name: str, title: str, source: str, text: str,
              calls: Mapping[str, tuple[tuple[str, str], ...]]) -> Code:
    """The pseudo-code of a backend whose sub-steps are its calls into a foreign cache: one
    algorithm ``name`` (parsed from ``text``) holds every op; ``calls`` is each op's calls, in
    order, with the anchor of the line that makes each. An op's ``start`` and ``refused`` light
    its def line (anchored by the op's name), and a ``call`` sub-step's qualifier is the method
    it called (the op's first call when the context does not say)."""

    def qualify(op_kind: str, kind: str, context: Mapping) -> str:
        if kind != "call":
            return ""
        call = context.get("call")
        if call is None:
            op_calls = calls.get(op_kind, ())
            return op_calls[0][0] if op_calls else ""
        return call

    table: dict = {}
    for op, op_calls in calls.items():
        table |= rows(op, name, {"start": (op,), "refused": (op,),
                                 **{f"call/{call}": (anchor,) for call, anchor in op_calls}})
    return Code({name: parse(name, title, source, text)}, {op: name for op in calls}, table, qualify, calls)
