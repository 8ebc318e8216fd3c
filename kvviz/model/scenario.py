"""The scenario language: ``.kvs`` files, the UI's command bar and the scripts in exports.

A scenario is a header (title, description, cache config) and a list of steps; each step is
one op on a named allocation, the narration shown with it and the ``expect`` lines that
check the state after it. :data:`SCENARIO_HELP` documents the language for users.

Parsing is line based and strict about what it accepts but forgiving about how it is typed
(case, spacing, commas). Every problem is a :class:`ScenarioError` naming the file, line and
column and what was expected there; no input, however broken, raises anything else.
"""

from __future__ import annotations

import difflib
import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import count, groupby
from operator import sub
from typing import NamedTuple

from .vocab import Vocabulary

__all__ = [
    "CACHE_KINDS", "EXPECT_FORMS", "MAX_SOURCE_BYTES", "MAX_TOKENS_PER_OP", "MAX_TOKENS_PER_SCENARIO",
    "OP_FORMS", "SCENARIO_EXAMPLE", "SCENARIO_HELP", "CacheConfig", "Expect", "Op", "Scenario",
    "ScenarioError", "Step", "format_expect", "format_op", "format_scenario", "format_tokens",
    "parse_command", "parse_scenario", "parse_scenario_bytes", "parse_scenario_file",
]

from ..limits import (MAX_EXTRA, MAX_NUMBER, MAX_PAGES, MAX_SOURCE_BYTES, MAX_TOKENS_PER_OP,  # noqa: F401
                      MAX_TOKENS_PER_PAGE, MAX_TOKENS_PER_SCENARIO)

CACHE_KINDS = ("trie", "base")
POLICIES = ("lru",)

OP_FORMS: dict[str, str] = {
    "acquire": "acquire NAME TOKENS [extra=N], e.g. acquire r1 1..8 extra=2",
    "publish": "publish NAME [TOKENS], e.g. publish r1",
    "extend": "extend NAME TOKENS [extra=N] or extend NAME + TOKENS [extra=N]",
    "release": "release NAME, e.g. release r1",
}
"""Each op keyword and how it is written; error messages and the help use these."""


class _ExpectForm(NamedTuple):
    """How one kind of ``expect`` line is written: its argument slots, usage and meaning."""

    slots: tuple[str, ...]  # 'name', 'count', 'page', 'pages', 'pages+', 'names', 'failure'
    usage: str
    meaning: str


EXPECT_FORMS: dict[str, _ExpectForm] = {
    "ok": _ExpectForm((), "expect ok", "the op succeeded"),
    "fail": _ExpectForm(
        ("failure",), "expect fail [alloc|invalid]", "the op failed (with this error) and changed nothing"
    ),
    "free": _ExpectForm(("count",), "expect free N", "N pages are on the free list"),
    "cached": _ExpectForm(("count",), "expect cached N", "N pages are held by trie nodes"),
    "evictable": _ExpectForm(("count",), "expect evictable N", "N cached pages have ref 0 (eviction can reach them)"),
    "owned": _ExpectForm(("count",), "expect owned N", "N pages are in allocations' unpublished tails"),
    "candidates": _ExpectForm(("count",), "expect candidates N",
                              "the LRU heap holds N eviction candidates (childless ref-0 nodes)"),
    "victim": _ExpectForm(("page",), "expect victim P", "page P is the next eviction victim (top of the heap)"),
    "hit": _ExpectForm(("name", "count"), "expect hit NAME N", "NAME's acquire matched N tokens in the cache"),
    "pages": _ExpectForm(("name", "pages"), "expect pages NAME [P ...]", "NAME's block table is exactly these pages"),
    "published": _ExpectForm(("name", "count"), "expect published NAME N", "NAME has N published pages"),
    "evicted": _ExpectForm(("pages+",), "expect evicted P [P ...]", "these pages were evicted by this op"),
    "evictions": _ExpectForm(("count",), "expect evictions N", "this op evicted N pages"),
    "ref": _ExpectForm(("page", "count"), "expect ref P N", "the trie node holding page P has ref N"),
    "live": _ExpectForm(("names",), "expect live [NAME ...]", "exactly these allocations are live"),
    "violations": _ExpectForm(("count",), "expect violations N", "the cache has N invariant violations"),
}
"""Each ``expect`` kind: argument slots, usage (for errors and help) and meaning."""

_FAILURES = {
    "alloc": "alloc", "allocation": "alloc", "cacheallocationfailure": "alloc",
    "invalid": "invalid", "invalidoperation": "invalid",
}

_TOKEN_EXPECTED = 'an integer, a range like 1..8, or "quoted words"'
_PAGE_EXPECTED = "a page number like 3, or a range like 0..3"
_NAME_EXPECTED = "a name like r1 (letters, digits, _ . -; not starting with a digit)"
_LINE_EXPECTED = (
    "an op (acquire, publish, extend, release), expect, cache, title:, description:, > narration or # comment"
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_INTEGER = re.compile(r"[0-9]+")  # ASCII only: int() would also take other scripts' digits
_RANGE = re.compile(r"([0-9]+)\.\.([0-9]+)")
_OPTION_KEY = re.compile(r"[A-Za-z_]+")
# An item is a quoted string (the closing quote may be missing: reported, not guessed) or a
# run of characters up to whitespace, a comma or a quote. re's \s is exactly str.isspace,
# the same whitespace str.split() uses for quoted words.
_ITEM = re.compile(r'"(?P<quoted>[^"]*)(?P<close>"?)|(?P<bare>[^\s,"]+)')
_HEADER = re.compile(r"\s*(title|description)\s*:(.*)", re.IGNORECASE | re.DOTALL)


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheConfig:
    """The cache a scenario runs on: its kind ('trie' or 'base'), page count and page size."""

    kind: str = "trie"
    pages: int = 8
    tokens_per_page: int = 4
    policy: str = "lru"


DEFAULT_CACHE_CONFIG = CacheConfig()
"""The cache of a scenario without a ``cache`` line: trie, 8 pages of 4 tokens, LRU."""


@dataclass(frozen=True)
class Op:
    """One operation on a named allocation.

    ``kind`` is 'acquire', 'publish', 'extend' or 'release'. ``tokens`` is None for a release
    and for a publish without tokens. With ``append`` (extend only) the tokens are added to
    the allocation's current tokens instead of replacing them. ``line`` and ``text`` (the
    op's canonical one-line form) say where it came from; they do not take part in equality,
    so an op equals itself parsed back from :func:`format_op`.
    """

    kind: str
    name: str
    tokens: tuple[int, ...] | None
    extra: int = 0
    append: bool = False
    line: int = field(default=0, compare=False)
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class Expect:
    """One ``expect`` line: an assertion about the state after its step's op.

    Layout by ``kind`` (see :data:`EXPECT_FORMS`):

    - ``ok``: nothing else. ``fail``: ``detail`` is None, 'alloc' or 'invalid'.
    - ``free``, ``cached``, ``evictable``, ``owned``, ``evictions``, ``violations``:
      ``values == (N,)``.
    - ``hit``, ``published``: ``name`` and ``values == (N,)``.
    - ``pages``: ``name`` and ``values`` = the block table (maybe empty).
    - ``evicted``: ``values`` = the pages (at least one). ``ref``: ``values == (P, N)``.
    - ``live``: ``names`` = the allocation names (maybe empty).

    ``line`` and ``text`` (canonical form) do not take part in equality.
    """

    kind: str
    name: str | None = None
    values: tuple[int, ...] = ()
    detail: str | None = None
    line: int = field(default=0, compare=False)
    text: str = field(default="", compare=False)
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """An op, the narration shown with it (paragraphs separated by "\\n") and its expects."""

    op: Op
    narration: str = ""
    expects: tuple[Expect, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario. ``source`` is the text it was parsed from, ``path`` its file.

    ``vocab`` knows the words the script spelled, so views can label tokens with them; it
    does not take part in equality.
    """

    title: str = ""
    description: str = ""
    config: CacheConfig = DEFAULT_CACHE_CONFIG
    steps: tuple[Step, ...] = ()
    path: str | None = None
    source: str = ""
    vocab: Vocabulary = field(default_factory=Vocabulary, compare=False, repr=False)


class ScenarioError(Exception):
    """A problem in scenario text, at a 1-based ``line`` and ``column`` of ``path``.

    ``str(error)`` is ``"PATH:LINE:COLUMN: MESSAGE (expected: EXPECTED)"``, with ``<input>``
    for text that did not come from a file: one line a person can act on.
    """

    def __init__(self, path: str | None, line: int, column: int, message: str, expected: str):
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        self.expected = expected
        super().__init__(f"{path or '<input>'}:{line}:{column}: {message} (expected: {expected})")


# -- lines and items ------------------------------------------------------------------------


class _Item(NamedTuple):
    """One word of a line: a bare item, or the words between double quotes."""

    text: str
    column: int  # 1-based; for a quoted item, the column of its opening quote
    quoted: bool = False

    @property
    def raw(self) -> str:
        """The item as written, for messages."""
        return f'"{self.text}"' if self.quoted else self.text


class _Line:
    """One source line and where it is, so any parsing step can raise a located error."""

    def __init__(self, path: str | None, number: int, text: str):
        self.path = path
        self.number = number
        self.text = text
        self.code = _strip_comment(text)

    def error(self, column: int, message: str, expected: str) -> ScenarioError:
        """A ScenarioError at ``column`` of this line."""
        return ScenarioError(self.path, self.number, column, message, expected)

    @property
    def first_column(self) -> int:
        """The column of the line's first non-blank character."""
        return 1 + len(self.text) - len(self.text.lstrip())

    @property
    def end_column(self) -> int:
        """Where a missing item would have been: just past the last character of code."""
        return len(self.code.rstrip()) + 1

    def items(self) -> list[_Item]:
        """The line's items, left to right; an unterminated quote is an error."""
        items = []
        for match in _ITEM.finditer(self.code):
            if match["bare"] is not None:
                items.append(_Item(match["bare"], match.start() + 1))
            elif not match["close"]:
                raise self.error(match.start() + 1, "unterminated quoted words", 'a closing " on the same line')
            else:
                items.append(_Item(match["quoted"], match.start() + 1, quoted=True))
        return items


def _strip_comment(text: str) -> str:
    """``text`` up to its first ``#`` outside double quotes."""
    position = 0
    while True:
        hash_at = text.find("#", position)
        if hash_at < 0:
            return text
        quote_at = text.find('"', position, hash_at)
        if quote_at < 0:
            return text[:hash_at]
        close = text.find('"', quote_at + 1)
        if close < 0:
            return text  # an unterminated quote: the item reader reports it
        position = close + 1


def _source_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor numbers them (any newline convention, BOM dropped)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, shortened if long (a 5 MB item must not fill a screen)."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _suggestion(word: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' when ``word`` looks like a typo of one of ``choices``."""
    close = difflib.get_close_matches(word.lower(), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Option(NamedTuple):
    key: str
    column: int
    value: str
    value_column: int


class _Cursor:
    """Reads a line's items left to right; errors give the line's usage as what was expected."""

    def __init__(self, line: _Line, items: list[_Item], start: int, usage: str):
        self.line = line
        self.items = list(items)
        self.index = start
        self.usage = usage

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.items)

    def peek(self, ahead: int = 0) -> _Item | None:
        index = self.index + ahead
        return self.items[index] if index < len(self.items) else None

    def take(self) -> _Item:
        item = self.items[self.index]
        self.index += 1
        return item

    def require(self, what: str) -> _Item:
        """The next item; its absence is an error at the end of the line."""
        if self.at_end:
            raise self.line.error(self.line.end_column, f"missing {what}", self.usage)
        return self.take()

    def name(self, what: str = "allocation name") -> _Item:
        """The next item, which must be an allocation name."""
        item = self.require(what)
        if item.quoted or not _NAME.fullmatch(item.text):
            raise self.line.error(item.column, f"bad {what} {_shown(item.raw)}", _NAME_EXPECTED)
        return item

    def number(self, what: str, expected: str) -> int:
        """The next item, which must be a whole number."""
        item = self.require(what)
        if item.quoted:
            raise self.line.error(item.column, f"bad {what} {_shown(item.raw)}", expected)
        return _whole_number(self.line, item.text, item.column, what, expected)

    def plus(self) -> bool:
        """Consume a leading ``+`` (the append form of extend), spaced or not: ``+ 5`` / ``+5``."""
        item = self.peek()
        if item is None or item.quoted or not item.text.startswith("+"):
            return False
        if len(item.text) > 1:
            self.items[self.index] = _Item(item.text[1:], item.column + 1)
        else:
            self.index += 1
        return True

    def option(self) -> _Option | None:
        """A ``key=value`` option if one comes next (spaces around ``=`` allowed), else None."""
        item = self.peek()
        if item is None or item.quoted:
            return None
        key, equals, value = item.text.partition("=")
        if equals:
            self.index += 1
            value_column = item.column + len(key) + 1
        else:
            following = self.peek(1)
            if not (_OPTION_KEY.fullmatch(key) and following and not following.quoted
                    and following.text.startswith("=")):
                return None
            self.index += 2
            value, value_column = following.text[1:], following.column + 1
        if not key:
            raise self.line.error(item.column, "'=' without an option name", self.usage)
        if not value and self.peek() is not None and not self.peek().quoted:
            value_item = self.take()  # "key= value" or "key = value"
            value, value_column = value_item.text, value_item.column
        if not value:
            value_column = self.line.end_column if self.at_end else self.peek().column
        return _Option(key, item.column, value, value_column)

    def end(self) -> None:
        """Nothing may follow."""
        if not self.at_end:
            item = self.peek()
            raise self.line.error(item.column, f"unexpected {_shown(item.raw)}", self.usage)


# -- numbers, tokens, pages -----------------------------------------------------------------


def _whole_number(
    line: _Line, text: str, column: int, what: str, expected: str, minimum: int = 0, maximum: int = MAX_NUMBER
) -> int:
    """``text`` as an integer in ``minimum..maximum``, or an error naming ``what``."""
    if not text:
        raise line.error(column, f"missing {what}", expected)
    if not _INTEGER.fullmatch(text):
        raise line.error(column, f"bad {what} {_shown(text)}", expected)
    # Convert only the significant digits, and only when few: Python refuses int() of more
    # than 4,300 digits (leading zeros included), and a long string is slow to convert.
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(maximum)) or int(digits) > maximum:
        raise line.error(column, f"{what} {_shown(text)} is too large (at most {maximum:,})", expected)
    value = int(digits)
    if value < minimum:
        raise line.error(column, f"{what} {value} is too small (at least {minimum:,})", expected)
    return value


def _number_or_range(line: _Line, item: _Item, count: int, what: str, expected: str) -> range:
    """A bare item ``N`` or ``A..B`` as a range of ints; ``count`` values came before it on the line."""
    match = _RANGE.fullmatch(item.text)
    if match:
        start = _whole_number(line, match[1], item.column, what, expected)
        end = _whole_number(line, match[2], item.column + len(match[1]) + 2, what, expected)
        if end < start:
            raise line.error(
                item.column, f"descending range {_shown(item.text)}", "a range with start <= end, like 1..8"
            )
        values = range(start, end + 1)
    elif _INTEGER.fullmatch(item.text):
        value = _whole_number(line, item.text, item.column, what, expected)
        values = range(value, value + 1)
    else:
        raise line.error(item.column, f"bad {what} {_shown(item.raw)}", expected)
    _check_count(line, item, count + len(values))
    return values


def _check_count(line: _Line, item: _Item, total: int) -> None:
    """Refuse an item that takes its line past :data:`MAX_TOKENS_PER_OP` values."""
    if total > MAX_TOKENS_PER_OP:
        raise line.error(
            item.column, f"too many tokens: {_shown(item.raw)} brings this line to {total:,}",
            f"at most {MAX_TOKENS_PER_OP:,} tokens per op",
        )


def _tokens(line: _Line, item: _Item, count: int, vocab: Vocabulary) -> Sequence[int]:
    """The tokens one item spells: an integer, an inclusive range or quoted words."""
    if item.quoted:
        words = item.text.split()
        _check_count(line, item, count + len(words))
        return tuple(vocab.id(word) for word in words)
    return _number_or_range(line, item, count, "token", _TOKEN_EXPECTED)


def _page_list(cursor: _Cursor, at_least: int) -> list[int]:
    """The rest of an expect line as page numbers (ranges allowed)."""
    pages: list[int] = []
    while not cursor.at_end:
        item = cursor.take()
        if item.quoted:
            raise cursor.line.error(item.column, f"bad page {_shown(item.raw)}", _PAGE_EXPECTED)
        pages.extend(_number_or_range(cursor.line, item, len(pages), "page", _PAGE_EXPECTED))
    if len(pages) < at_least:
        raise cursor.line.error(cursor.line.end_column, "missing page", cursor.usage)
    return pages


# -- ops ------------------------------------------------------------------------------------


def _parse_op(line: _Line, items: list[_Item], vocab: Vocabulary) -> tuple[Op, _Item]:
    """The op of a line whose first item is an op keyword, and the item naming its allocation."""
    kind = items[0].text.lower()
    cursor = _Cursor(line, items, 1, OP_FORMS[kind])
    name = cursor.name()
    if kind == "release":
        cursor.end()
        return Op(kind, name.text, None, line=line.number), name
    append = kind == "extend" and cursor.plus()
    # publish without tokens (None) publishes what the allocation holds; 'publish r1 ""'
    # publishes zero tokens, which is a different request.
    has_tokens = not cursor.at_end or kind != "publish"
    tokens, extra = _token_arguments(cursor, vocab, allow_extra=kind != "publish")
    return Op(kind, name.text, tokens if has_tokens else None, extra, append, line=line.number), name


def _token_arguments(cursor: _Cursor, vocab: Vocabulary, allow_extra: bool) -> tuple[tuple[int, ...], int]:
    """The rest of an op line: tokens, and ``extra=N`` anywhere among them (when allowed)."""
    tokens: list[int] = []
    extra = None
    while not cursor.at_end:
        option = cursor.option()
        if option is None:
            tokens.extend(_tokens(cursor.line, cursor.take(), len(tokens), vocab))
            continue
        if option.key.lower() != "extra" or not allow_extra:
            raise cursor.line.error(option.column, f"unknown option {_shown(option.key)}", cursor.usage)
        if extra is not None:
            raise cursor.line.error(option.column, "extra given twice", cursor.usage)
        extra = _whole_number(
            cursor.line, option.value, option.value_column, "extra", "a number of extra token slots, like extra=4",
            maximum=MAX_EXTRA,
        )
    return tuple(tokens), extra or 0


class _LiveNames:
    """Which allocations are live at a point of a script, assuming each op does what it says.

    An op followed by ``expect fail`` changed nothing, so :meth:`undo_last_op` takes its
    effect back: a failed acquire leaves the name free to retry.
    """

    def __init__(self, names: Iterable[str] = ()):
        self._acquired_on: dict[str, int | None] = dict.fromkeys(names)  # name -> line
        self._released_on: dict[str, int] = {}
        self._undo: tuple[str, str, int | None] | None = None

    def check(self, line: _Line, op: Op, name: _Item) -> None:
        """Refuse acquiring a live name or using a name that is not live."""
        if op.kind == "acquire":
            if op.name in self._acquired_on:
                where = self._acquired_on[op.name]
                since = f" (acquired on line {where})" if where else ""
                raise line.error(
                    name.column, f"allocation {op.name!r} is already live{since}",
                    f"a new name, or release {op.name} first",
                )
        elif op.name not in self._acquired_on:
            released = self._released_on.get(op.name)
            problem = f"allocation {op.name!r} was released on line {released}" if released else (
                f"unknown allocation {op.name!r}")
            raise line.error(
                name.column, f"{problem}: {self._listing()}", "the name of a live allocation (acquire it first)"
            )

    def apply(self, op: Op) -> None:
        """Record the effect of ``op`` on which names are live."""
        self._undo = None
        if op.kind == "acquire":
            self._acquired_on[op.name] = op.line
            self._undo = ("acquire", op.name, None)
        elif op.kind == "release":
            acquired = self._acquired_on.pop(op.name)
            self._released_on[op.name] = op.line
            self._undo = ("release", op.name, acquired)

    def undo_last_op(self) -> None:
        """The last op failed: it neither acquired nor released anything."""
        if self._undo is None:
            return
        kind, name, acquired = self._undo
        if kind == "acquire":
            del self._acquired_on[name]
        else:
            self._released_on.pop(name, None)
            self._acquired_on[name] = acquired
        self._undo = None

    def _listing(self, limit: int = 10) -> str:
        names = list(self._acquired_on)
        if not names:
            return "there are no live allocations"
        shown = ", ".join(names[:limit])
        more = f", … ({len(names):,} in all)" if len(names) > limit else ""
        return f"live allocations are {shown}{more}"


def _read_op(line: _Line, items: list[_Item], vocab: Vocabulary, live: _LiveNames | None) -> Op:
    """Parse an op line, check its allocation name against ``live`` and give it its canonical text."""
    op, name = _parse_op(line, items, vocab)
    if live is not None:
        live.check(line, op, name)
    return replace(op, text=format_op(op, vocab))


# -- expects --------------------------------------------------------------------------------


def _parse_expect(line: _Line, items: list[_Item]) -> Expect:
    """An ``expect`` line, shaped by :data:`EXPECT_FORMS`."""
    kinds = ", ".join(EXPECT_FORMS)
    if len(items) < 2:
        raise line.error(line.end_column, "missing what to expect", f"one of {kinds}")
    kind_item = items[1]
    kind = kind_item.text.lower()
    form = None if kind_item.quoted else EXPECT_FORMS.get(kind)
    if form is None:
        raise line.error(
            kind_item.column, f"unknown expect {_shown(kind_item.raw)}{_suggestion(kind, EXPECT_FORMS)}",
            f"one of {kinds}",
        )
    cursor = _Cursor(line, items, 2, form.usage)
    name, values, names, detail = None, [], [], None
    for slot in form.slots:
        if slot == "name":
            name = cursor.name().text
        elif slot == "count":
            values.append(cursor.number("count", form.usage))
        elif slot == "page":
            values.append(cursor.number("page", form.usage))
        elif slot in ("pages", "pages+"):
            values.extend(_page_list(cursor, at_least=1 if slot == "pages+" else 0))
        elif slot == "names":
            while not cursor.at_end:
                names.append(cursor.name().text)
        elif slot == "failure" and not cursor.at_end:
            detail = _failure_kind(line, cursor.take(), form.usage)
    cursor.end()
    expect = Expect(kind, name, tuple(values), detail, line.number, names=tuple(names))
    return replace(expect, text=format_expect(expect))


def _failure_kind(line: _Line, item: _Item, usage: str) -> str:
    detail = None if item.quoted else _FAILURES.get(item.text.lower())
    if detail is None:
        raise line.error(item.column, f"unknown failure kind {_shown(item.raw)}", "alloc, invalid or nothing: " + usage)
    return detail


# -- the header -----------------------------------------------------------------------------

_CACHE_USAGE = "cache trie|base pages=N tokens_per_page=N [policy=lru], e.g. cache trie pages=8 tokens_per_page=4"
_CACHE_OPTIONS = {
    "pages": "pages", "tokens_per_page": "tokens_per_page", "page_size": "tokens_per_page",
    "tpp": "tokens_per_page", "policy": "policy",
}


def _parse_cache(line: _Line, items: list[_Item]) -> CacheConfig:
    """A ``cache`` line: the kind anywhere, options in any order, defaults for the rest."""
    cursor = _Cursor(line, items, 1, _CACHE_USAGE)
    kind = None
    options: dict[str, _Option] = {}
    while not cursor.at_end:
        option = cursor.option()
        if option is None:
            item = cursor.take()
            if item.quoted or item.text.lower() not in CACHE_KINDS:
                raise line.error(item.column, f"unknown cache kind {_shown(item.raw)}", "trie or base")
            if kind is not None:
                raise line.error(item.column, "cache kind given twice", _CACHE_USAGE)
            kind = item.text.lower()
            continue
        setting = _CACHE_OPTIONS.get(option.key.lower())
        if setting is None:
            raise line.error(
                option.column, f"unknown cache option {_shown(option.key)}{_suggestion(option.key, _CACHE_OPTIONS)}",
                "pages=N, tokens_per_page=N (or page_size=N, tpp=N), policy=lru",
            )
        if setting in options:
            raise line.error(option.column, f"{setting} given twice", _CACHE_USAGE)
        options[setting] = option
    return CacheConfig(
        kind or DEFAULT_CACHE_CONFIG.kind,
        _cache_number(line, options.get("pages"), "pages", MAX_PAGES, DEFAULT_CACHE_CONFIG.pages),
        _cache_number(
            line, options.get("tokens_per_page"), "tokens_per_page", MAX_TOKENS_PER_PAGE,
            DEFAULT_CACHE_CONFIG.tokens_per_page,
        ),
        _cache_policy(line, options.get("policy")),
    )


def _cache_number(line: _Line, option: _Option | None, what: str, maximum: int, default: int) -> int:
    if option is None:
        return default
    expected = f"a whole number from 1 to {maximum:,}, like {what}={default}"
    return _whole_number(line, option.value, option.value_column, what, expected, minimum=1, maximum=maximum)


def _cache_policy(line: _Line, option: _Option | None) -> str:
    if option is None:
        return DEFAULT_CACHE_CONFIG.policy
    if option.value.lower() not in POLICIES:
        raise line.error(option.value_column, f"unknown policy {_shown(option.value)}", " or ".join(POLICIES))
    return option.value.lower()


# -- the scenario ---------------------------------------------------------------------------


class _Narration:
    """Narration lines waiting for the op they introduce."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.paragraphs: list[list[str]] = [[]]
        self.first_line: int | None = None

    def add(self, number: int, text: str) -> None:
        """One ``>`` line; an empty one ends a paragraph."""
        self.first_line = self.first_line or number
        if text:
            self.paragraphs[-1].append(text)
        elif self.paragraphs[-1]:
            self.paragraphs.append([])

    def take(self) -> str:
        """The waiting narration as one string, and start afresh."""
        text = "\n".join(" ".join(lines) for lines in self.paragraphs if lines)
        self._reset()
        return text


class _StepDraft:
    """A step while its expect lines are still being read."""

    def __init__(self, op: Op, narration: str):
        self.op = op
        self.narration = narration
        self.expects: list[Expect] = []

    def add(self, line: _Line, expect: Expect) -> None:
        """Add ``expect``; refuse one that contradicts the step's ok/fail expectation."""
        if expect.kind in ("ok", "fail"):
            for earlier in self.expects:
                if _contradicts(earlier, expect):
                    raise line.error(
                        line.first_column,
                        f"'{expect.text}' contradicts '{earlier.text}' on line {earlier.line}",
                        "one outcome per step",
                    )
        self.expects.append(expect)

    def step(self) -> Step:
        return Step(self.op, self.narration, tuple(self.expects))


def _contradicts(first: Expect, second: Expect) -> bool:
    """Whether two expects claim different outcomes: ok against fail, or alloc against invalid."""
    outcomes = {first.kind, second.kind}
    if outcomes == {"ok", "fail"}:
        return True
    return outcomes == {"fail"} and None not in (first.detail, second.detail) and first.detail != second.detail


class _ScenarioReader:
    """Reads a scenario line by line, keeping the state the grammar depends on."""

    def __init__(self, path: str | None):
        self.path = path
        self.vocab = Vocabulary()
        self.title: str | None = None
        self.title_line = 0
        self.description: list[str] = []
        self.config: CacheConfig | None = None
        self.config_line = 0
        self.steps: list[_StepDraft] = []
        self.narration = _Narration()
        self.live = _LiveNames()
        self.total_tokens = 0

    def read(self, line: _Line) -> None:
        """Take one line into the scenario."""
        nul = line.text.find("\0")
        if nul >= 0:
            raise line.error(nul + 1, "NUL character (is this a binary file?)", "scenario text")
        stripped = line.text.strip()
        if not stripped or stripped.startswith("#"):
            return
        if stripped.startswith(">"):
            self.narration.add(line.number, stripped[1:].strip())
            return
        header = _HEADER.match(line.text)
        if header:
            self._read_text_header(line, header[1].lower(), header[2].strip())
            return
        items = line.items()
        if not items:  # only separators, e.g. a stray comma
            raise line.error(line.first_column, f"unexpected {_shown(stripped)}", _LINE_EXPECTED)
        keyword = "" if items[0].quoted else items[0].text.lower()
        if keyword in ("cache", "cache:"):
            self._read_cache(line, items)
        elif keyword == "expect":
            self._read_expect(line, items)
        elif keyword in OP_FORMS:
            self._read_op(line, items)
        else:
            raise line.error(
                items[0].column,
                f"unknown op {_shown(items[0].raw)}{_suggestion(keyword, [*OP_FORMS, 'expect', 'cache'])}",
                _LINE_EXPECTED,
            )

    def _refuse_late_header(self, line: _Line, name: str) -> None:
        if self.steps:
            raise line.error(
                line.first_column, f"{name} after the first op",
                f"header lines (title:, description:, cache) before the first op on line {self.steps[0].op.line}",
            )

    def _read_text_header(self, line: _Line, name: str, text: str) -> None:
        # Title and description are prose, like narration: '#' in them is text, not a comment.
        self._refuse_late_header(line, f"'{name}:'")
        if name == "description":
            if text:
                self.description.append(text)
        elif self.title is not None:
            raise line.error(
                line.first_column, f"second title (the first is on line {self.title_line})", "one title: line"
            )
        else:
            self.title, self.title_line = text, line.number

    def _read_cache(self, line: _Line, items: list[_Item]) -> None:
        self._refuse_late_header(line, "'cache'")
        if self.config is not None:
            raise line.error(items[0].column, f"second cache line (the first is on line {self.config_line})",
                             "one cache line")
        self.config, self.config_line = _parse_cache(line, items), line.number

    def _read_expect(self, line: _Line, items: list[_Item]) -> None:
        if not self.steps:
            raise line.error(items[0].column, "expect before the first op",
                             "an op first: expect checks the state after the op above it")
        expect = _parse_expect(line, items)
        self.steps[-1].add(line, expect)
        if expect.kind == "fail":
            self.live.undo_last_op()

    def _read_op(self, line: _Line, items: list[_Item]) -> None:
        op = _read_op(line, items, self.vocab, self.live)
        self.total_tokens += len(op.tokens or ())
        if self.total_tokens > MAX_TOKENS_PER_SCENARIO:
            raise line.error(items[0].column, f"the scenario spells more than {MAX_TOKENS_PER_SCENARIO:,} tokens",
                             "a smaller scenario")
        self.live.apply(op)
        self.steps.append(_StepDraft(op, self.narration.take()))

    def finish(self, source: str) -> Scenario:
        """The scenario read so far; narration must have an op to go with."""
        if self.narration.first_line is not None:
            raise ScenarioError(self.path, self.narration.first_line, 1, "narration with no op after it",
                                "an op after narration lines: narration is shown with the next op")
        return Scenario(
            title=self.title or "",
            description=" ".join(self.description),
            config=self.config or DEFAULT_CACHE_CONFIG,
            steps=tuple(draft.step() for draft in self.steps),
            path=self.path,
            source=source,
            vocab=self.vocab,
        )


def parse_scenario(text: str, path: str | None = None) -> Scenario:
    """Parse scenario ``text``; ``path`` names it in errors. Raises :class:`ScenarioError` only.

    O(length of the text + tokens spelled).
    """
    if len(text) > MAX_SOURCE_BYTES:
        raise ScenarioError(path, 1, 1, f"scenario of {len(text):,} characters is too large",
                            f"at most {MAX_SOURCE_BYTES:,}")
    reader = _ScenarioReader(path)
    for number, text_line in enumerate(_source_lines(text), 1):
        reader.read(_Line(path, number, text_line))
    return reader.finish(text)


def parse_scenario_bytes(data: bytes, path: str | None = None) -> Scenario:
    """Parse a scenario from raw bytes: UTF-8 (a BOM is fine), no NUL, at most 5 MB."""
    if len(data) > MAX_SOURCE_BYTES:
        raise ScenarioError(path, 1, 1, f"file of {len(data):,} bytes is too large",
                            f"a scenario of at most {MAX_SOURCE_BYTES:,} bytes")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        line_start = data.rfind(b"\n", 0, error.start) + 1
        column = len(data[line_start:error.start].decode("utf-8")) + 1  # valid: before the first bad byte
        raise ScenarioError(path, line, column, f"bytes that are not UTF-8 ({data[error.start:error.end]!r})",
                            "UTF-8 text (is this a binary file?)") from None
    return parse_scenario(text, path)


def parse_scenario_file(path: str | os.PathLike[str]) -> Scenario:
    """Read and parse a ``.kvs`` file; unreadable, binary or oversized files are ScenarioErrors."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            data = file.read(MAX_SOURCE_BYTES + 1)  # enough to tell it is too big
    except OSError as error:
        raise ScenarioError(name, 1, 1, f"cannot read the file: {error.strerror or error}",
                            "a readable scenario file") from None
    return parse_scenario_bytes(data, name)


def parse_command(text: str, live_names: Iterable[str] | None = (), vocab: Vocabulary | None = None) -> Op:
    """Parse one op typed in the UI's command bar.

    ``live_names`` are the allocations live now: acquiring one of them, or using any other
    name, is an error (None skips the check). Quoted words go into ``vocab``. Errors are
    :class:`ScenarioError` at line 1 with the column in ``text``.
    """
    line = _Line(None, 1, text.rstrip())
    for position, character in enumerate(line.text):
        if character in "\n\r\0":
            raise line.error(position + 1, f"{character!r} in a command", "one op on one line")
    expected = "an op: " + ", ".join(OP_FORMS.values())
    items = line.items()
    if not items:
        raise line.error(line.end_column, "empty command", expected)
    keyword = items[0]
    if keyword.quoted or keyword.text.lower() not in OP_FORMS:
        raise line.error(keyword.column,
                         f"unknown op {_shown(keyword.raw)}{_suggestion(keyword.text, OP_FORMS)}", expected)
    live = None if live_names is None else _LiveNames(live_names)
    return _read_op(line, items, vocab if vocab is not None else Vocabulary(), live)


# -- formatting: canonical text that parses back to an equal value ----------------------------


def format_tokens(tokens: Iterable[int], vocab: Vocabulary | None = None) -> str:
    """Tokens as the language writes them: words the script spelled in quotes, runs of three or
    more consecutive ints as ranges ``a..b``, other ints as themselves. O(len(tokens))."""
    tokens = tuple(tokens)
    words = _quotable_words(tokens, vocab)
    if words is None:
        return _format_ints(tokens)
    parts = []
    position = 0
    for quoted, run in groupby(words, key=_is_word):
        length = len(list(run))
        segment = slice(position, position + length)
        parts.append('"' + " ".join(words[segment]) + '"' if quoted else _format_ints(tokens[segment]))
        position += length
    return " ".join(parts)


def _quotable_words(tokens: tuple[int, ...], vocab: Vocabulary | None) -> list[str | None] | None:
    """For each token the word to write for it, or None for an int; None if no token is a word."""
    spellings = vocab.spellings(tokens) if vocab is not None else []
    if not any(spellings):
        return None
    # A spelling from Vocabulary.ids() called by other code could hold a quote or a NUL;
    # such a word cannot be written back inside quotes, so its token is written as an int.
    return [word if word is not None and _can_quote(word) else None for word in spellings]


def _can_quote(word: str) -> bool:
    return word.split() == [word] and '"' not in word and "\0" not in word


def _is_word(word: str | None) -> bool:
    return word is not None


def _format_ints(values: Sequence[int]) -> str:
    parts: list[str] = []
    position = 0
    # value - index is the same along a run of consecutive ints, so grouping on it finds
    # the runs without a Python-level comparison per token (ops may hold a million).
    for _, run in groupby(map(sub, values, count())):
        length = len(list(run))
        if length >= 3:
            parts.append(f"{values[position]}..{values[position + length - 1]}")
        else:
            parts.extend(map(str, values[position:position + length]))
        position += length
    return " ".join(parts)


def format_op(op: Op, vocab: Vocabulary | None = None) -> str:
    """The canonical one-line form of ``op``, e.g. ``acquire r1 1..8 extra=2``.

    It parses back to an equal op. With ``vocab``, tokens the script spelled as words are
    written as quoted words.
    """
    parts = [op.kind, op.name]
    if op.append:
        parts.append("+")
    if op.tokens:
        parts.append(format_tokens(op.tokens, vocab))
    elif op.tokens is not None and op.kind == "publish":
        parts.append('""')  # publish zero tokens, not "publish what you hold"
    if op.extra:
        parts.append(f"extra={op.extra}")
    return " ".join(parts)


def format_expect(expect: Expect) -> str:
    """The canonical one-line form of ``expect``, e.g. ``expect pages r1 0 1 2``."""
    parts = ["expect", expect.kind]
    if expect.detail:
        parts.append(expect.detail)
    if expect.name is not None:
        parts.append(expect.name)
    parts.extend(map(str, expect.values))
    parts.extend(expect.names)
    return " ".join(parts)


def format_cache(config: CacheConfig) -> str:
    """The ``cache`` line of ``config``."""
    text = f"cache {config.kind} pages={config.pages} tokens_per_page={config.tokens_per_page}"
    return text if config.policy == DEFAULT_CACHE_CONFIG.policy else f"{text} policy={config.policy}"


def format_scenario(scenario: Scenario) -> str:
    """The canonical text of ``scenario``; it parses back to an equal scenario (path and
    source aside). Prose is wrapped at 88 columns."""
    lines = []
    if scenario.title:
        lines.append(f"title: {_one_line(scenario.title)}")
    if scenario.description:
        lines.extend(_wrap_prose("description: ", scenario.description))
    lines.append(format_cache(scenario.config))
    lines.append("")
    for index, step in enumerate(scenario.steps):
        if step.narration:
            if index:
                lines.append("")
            for number, paragraph in enumerate(step.narration.split("\n")):
                if number:
                    lines.append(">")
                lines.extend(_wrap_prose("> ", paragraph))
        lines.append(format_op(step.op, scenario.vocab))
        lines.extend(format_expect(expect) for expect in step.expects)
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.replace("\r", "\n").split("\n"))


def _wrap_prose(prefix: str, text: str, width: int = 88) -> list[str]:
    """``text`` on lines starting with ``prefix``; the parser joins them back with single spaces."""
    text = _one_line(text)
    words = text.split(" ")
    # Only wrap where joining with one space gives the text back exactly.
    if any(not word or word != word.strip() for word in words):
        return [prefix + text]
    lines, current = [], ""
    for word in words:
        if current and len(prefix) + len(current) + 1 + len(word) > width:
            lines.append(prefix + current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(prefix + current)
    return lines


# -- documentation --------------------------------------------------------------------------

SCENARIO_EXAMPLE = """\
title: Two requests share a system prompt
description: r2 starts with the same 8 tokens as r1, so once r1 has published its pages
description: r2 reuses them and needs one new page.
cache trie pages=8 tokens_per_page=4

> r1 arrives: 8 prompt tokens fill two pages; extra=4 reserves a third for decoding.
acquire r1 "You are a helpful assistant" 1..3 extra=4
expect ok
expect hit r1 0
expect free 5

> Publishing puts r1's two full pages in the trie, where later requests can find them.
publish r1
expect cached 2
expect owned 1

> r2 matches both pages (8 tokens) and takes one new page for its last 2 tokens.
acquire r2 "you are a helpful assistant" 1..3 9 10
expect hit r2 8
expect free 4

> r1 is done. Its shared pages stay: r2 still references them (ref 1).
release r1
expect free 5
expect evictable 0
expect live r2

> 40 tokens need 10 pages, more than the pool has: the acquire fails and changes nothing.
acquire r3 1..40
expect fail alloc
expect free 5

> r2 finishes too. Nothing references the shared pages now, so eviction may take them.
release r2
expect free 6
expect evictable 2

> Retry with 28 tokens (7 pages): 6 free pages, then the least recently used leaf goes.
acquire r3 1..28
expect evictions 1
expect evicted 1
expect cached 1
expect ref 0 0

> Grow r3 by two tokens plus two slots: the last cached page goes too.
extend r3 + 29 30 extra=2
expect evicted 0
expect cached 0
expect free 0

release r3
expect free 8
expect live
"""
"""A complete scenario, shown in the help; the tests check that it parses and passes."""


def _expect_table() -> str:
    width = max(len(form.usage) for form in EXPECT_FORMS.values())
    return "\n".join(f"  {form.usage:<{width}}  {form.meaning}" for form in EXPECT_FORMS.values())


SCENARIO_HELP = f"""\
Scenario files (.kvs)

A scenario is a script of operations on a KV cache. The same language is used by demo
files, the command bar of the UI (one op per command) and the scripts inside exports.
Lines are read one at a time; keywords are case-insensitive, extra spaces are fine and
commas may separate tokens.

Comments and blank lines
  # starts a comment that runs to the end of the line (but not inside "quotes", and not
  in prose: title, description and narration lines keep their # characters).

Header (before the first op)
  title: TEXT              the scenario's title
  description: TEXT        one paragraph; several description lines are joined with spaces
  cache KIND pages=N tokens_per_page=M [policy=lru]
                           KIND is trie (prefix sharing) or base (no sharing);
                           page_size= and tpp= mean tokens_per_page=;
                           pages 1..{MAX_PAGES:,}, tokens_per_page 1..{MAX_TOKENS_PER_PAGE:,}.
  Without a cache line: cache trie pages=8 tokens_per_page=4.

Ops (NAME names an allocation: letters, digits, _ . -, not starting with a digit)
  acquire NAME TOKENS [extra=N]    a new allocation holding TOKENS, with N more token slots
  publish NAME [TOKENS]            share its full pages in the trie (TOKENS: what decode wrote)
  extend NAME TOKENS [extra=N]     grow it; TOKENS is the whole new list and must start
                                   with the allocation's current tokens
  extend NAME + TOKENS [extra=N]   grow it by appending TOKENS
  release NAME                     free it; published pages stay cached for reuse

  Acquiring a name that is still live, or using a name that is not live, is an error.
  An op followed by 'expect fail' is taken to have changed nothing, so a failed acquire
  can be retried under the same name.

Tokens
  7                        one token id (a whole number)
  1..8                     an inclusive range: 1 2 3 4 5 6 7 8 (never descending)
  "You are a helpful"      words, split on spaces; each word has a stable id from a small
                           built-in vocabulary (case-insensitive), so views can show words;
                           punctuation stays part of its word ("you," is not "you")
  An op may spell at most {MAX_TOKENS_PER_OP:,} tokens; acquire NAME alone holds no tokens.

Narration
  > TEXT                   shown with the next op; consecutive > lines join with spaces,
                           a line with just > starts a new paragraph

Expectations (checked after the op above them; a scenario is also a test)
{_expect_table()}

  alloc is CacheAllocationFailure (not enough free and evictable pages); invalid is
  InvalidOperation (misuse, e.g. extending with tokens that do not continue the old ones).
  An expect line before the first op is an error.

Errors
  Every mistake is reported with its file, line and column and what was expected there:
    demo.kvs:7:14: bad token '1..x' (expected: an integer, a range like 1..8, or "quoted words")

Example
{textwrap.indent(SCENARIO_EXAMPLE, "  ")}"""
"""The full description of the language, shown by ``kvviz help scenarios``."""
